"""``evaluate``: solo or handoff pass@k of a senior (with a junior or a junior pool) from a notebook, the
figures ``tandem eval solo|handoff`` writes, returned as its ``metrics.json`` dict.

    from tandem_rlvr import evaluate
    m = evaluate("runs/mine/best", problems="tiny", limit=20, n=4)               # solo
    m = evaluate("runs/mine/best", junior="tiny", mode="handoff", problems=rows)   # handoff

``problems``: registered benchmark names (one or a list), files, or your rows (a list of dicts or a
``datasets.Dataset`` with a ``problem``/``question``/``prompt`` column and an ``answer``), which are written
to ``out/problems/<name>.jsonl`` and read back as ``tandem eval`` reads a file. ``out``: the evaluation's
directory (samples.jsonl, metrics.json; re-running a finished one reads it back); default a temporary
directory, removed afterwards. Every other ``tandem eval`` setting is a keyword (``EvalConfig`` keys:
schedule, p, K, seed, engine, template, grader, ...).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..errors import TandemError


def _rows_file(rows, out: Path, name: str) -> str:
    """Rows as a JSON-lines benchmark file in ``out/problems`` (a chat prompt: its last user message)."""
    import datasets

    from ..io import atomic_write

    if isinstance(rows, datasets.Dataset):
        rows = list(rows)
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise TandemError("problems: give benchmark names, a non-empty list of row dicts or a datasets.Dataset")
    path = out / "problems" / f"{name}.jsonl"
    with atomic_write(path) as f:
        for r in rows:
            r = dict(r)
            if isinstance(r.get("prompt"), list):  # conversational: the problem is the last user turn
                r["prompt"] = next(m["content"] for m in reversed(r["prompt"]) if m.get("role") == "user")
            f.write(json.dumps(r, default=str) + "\n")
    return str(path)


def evaluate(senior: str, *, junior: str | None = None, mode: str = "solo", problems="tiny", n: int = 8,
             out: str | None = None, name: str = "problems", progress: bool = False, **settings) -> dict:
    """metrics.json of ``tandem eval <mode>`` for ``senior`` (and ``junior`` in handoff mode) on
    ``problems``: per benchmark and ``macro``, pass@k mean and standard error (see the module docstring)."""
    from ..config import EvalConfig
    from ..eval.sample.sampler import evaluate as run

    if mode not in ("solo", "handoff"):
        raise TandemError(f"mode must be solo or handoff, got {mode!r}")
    with tempfile.TemporaryDirectory(prefix="tandem-eval-") as tmp:
        where = Path(out) if out is not None else Path(tmp)
        specs = [problems] if isinstance(problems, str) else problems
        if not (isinstance(specs, (list, tuple)) and all(isinstance(s, str) for s in specs)):
            specs = [_rows_file(problems, where, name)]
        cfg = EvalConfig.from_keys(mode=mode, senior=senior, junior=junior, n=n, benchmarks=tuple(specs), **settings)
        return run(cfg, where, progress=progress)
