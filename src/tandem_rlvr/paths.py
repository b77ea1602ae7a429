"""Where things live on disk: the build cache and the benchmark data."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DATA = Path(__file__).resolve().parent / "data" / "files"


def cache_dir() -> Path:
    """Root of built artefacts (tiny worlds, converted models): ``$TANDEM_CACHE`` or ``~/.cache/tandem-rlvr``."""
    root = os.environ.get("TANDEM_CACHE") or Path.home() / ".cache" / "tandem-rlvr"
    return Path(root).expanduser()


def data_dirs() -> list[Path]:
    """Folders searched for named benchmark files, in order.

    The package's own data (``tandem_rlvr/data/files``, shipped in the wheel; see its README),
    then ``$TANDEM_DATA`` (a folder of further files, e.g. ``olympiadbench.jsonl``). A name found
    in neither falls back to its hub id (``data.benchmarks``). Missing folders are skipped.
    """
    cands = [PACKAGE_DATA]
    if os.environ.get("TANDEM_DATA"):
        cands.append(Path(os.environ["TANDEM_DATA"]).expanduser())
    seen, out = set(), []
    for c in cands:
        c = c.resolve()
        if c not in seen and c.is_dir():
            seen.add(c)
            out.append(c)
    return out
