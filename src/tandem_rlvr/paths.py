"""Where things live on disk: the build cache and the shared benchmark data."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Root of built artefacts (tiny worlds, converted models): ``$TANDEM_CACHE`` or ``~/.cache/tandem-rlvr``."""
    root = os.environ.get("TANDEM_CACHE") or Path.home() / ".cache" / "tandem-rlvr"
    return Path(root).expanduser()


def data_dirs() -> list[Path]:
    """Folders searched for named benchmark files, in order.

    ``$TANDEM_DATA`` first, then ``../shared/data`` beside the project checkout and beside
    the current directory (the layout of developer and CI machines). Missing ones are skipped.
    """
    cands = []
    if os.environ.get("TANDEM_DATA"):
        cands.append(Path(os.environ["TANDEM_DATA"]).expanduser())
    repo_root = Path(__file__).resolve().parents[2]
    cands += [repo_root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data", Path.cwd() / "data"]
    seen, out = set(), []
    for c in cands:
        c = c.resolve()
        if c not in seen and c.is_dir():
            seen.add(c)
            out.append(c)
    return out
