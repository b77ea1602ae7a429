"""The JSON records the worlds keep beside their models, read back with one-line errors.

What: ``world.json`` (a built or shipped world: its key, build stack, accuracy), ``cross.json``
(the second-tokenizer junior) and a skill junior's ``skill.json`` (its level and measured
accuracy). Why: these are files the tool wrote and reads back, but a cache lives for months on a
user's disk, where a build killed at the wrong moment, a full disk or a hand edit leaves a file
cut short, not JSON, not UTF-8, or of another shape; each such case is a ``TandemError`` naming
the file and what is wrong with it, and how to get a good one back, never a traceback.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import TandemError
from ..io import read_json


def read_record(path: Path, keys: tuple[str, ...] = (), numbers: tuple[str, ...] = (), fix: str = "") -> dict:
    """The JSON object in ``path`` holding ``keys``, those of ``numbers`` finite numbers; else a TandemError
    naming the file, the fault and ``fix`` (what brings a good record back: a rebuild, a reinstall)."""
    hint = f"; {fix}" if fix else ""
    try:
        record = read_json(path)
    except TandemError as e:  # not UTF-8 or not JSON (cut short): read_json names the file and line
        raise TandemError(f"{e}{hint}") from None
    if not isinstance(record, dict):
        raise TandemError(f"{path}: expected a JSON object, found {type(record).__name__}{hint}")
    missing = [k for k in keys if k not in record]
    if missing:
        raise TandemError(f"{path}: lacks {', '.join(map(repr, missing))}{hint}")
    for k in numbers:
        v = record[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise TandemError(f"{path}: {k} is {v!r}, not a finite number{hint}")
    return record
