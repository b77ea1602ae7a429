"""Fingerprints of the inputs that decide a result: model files, problems, benchmark sets.

A run directory stores these so that a resume, a comparison or a reader of its samples can
tell "the same inputs" from "the same names": a ``--senior`` path whose weights were
replaced, or a benchmark file whose answers were edited, keeps its name but not its
fingerprint.

- ``model_fingerprint(path)``: a model directory (callers resolve a built-in name such as
  ``tiny`` to its world's directory first, ``models.resolve_model_path``) hashed file by file:
  SHA-256 of the full content of every top-level file except documentation, training
  state and a skill junior's measurement record (``skill.json``) (``SKIPPED_*``), so weights
  (``*.safetensors``, ``*.bin``, shards and their index), ``config.json``,
  ``generation_config.json`` (end-of-sequence ids) and the tokenizer files are all covered,
  then one SHA-256 over the sorted (name, size, file hash) lines. A ``.gguf`` file is hashed
  itself. A hub id is hashed from its local cache snapshot; if it has none, its fingerprint is
  ``hub:<id>`` (the name only: a hub repository can change under it, which no local check
  can see).
- Cost: each file is read once per version. File hashes are cached in
  ``cache_dir()/fingerprints.json`` under the file's (device, inode, size, mtime, ctime); any
  write to a file changes its ctime, so the cache cannot return the hash of old content.
  Hashing streams (0.36 GiB/s measured on a loaded 2-core box: about 20 s for 8 GB, once).
- ``problem_fingerprint(problem)``: SHA-256 of the problem's text and gold answer (each sample
  row carries it); ``problem_set_fingerprint(problems)``: SHA-256 of the ordered
  (id, problem fingerprint) list, with the count (``--limit`` changes it, as do reordering,
  adding, removing or editing problems; reformatting the file does not).

Fingerprints are 16 hex digits (64 bits) of the SHA-256: enough to tell versions apart, short
enough to print in a one-line refusal.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Sequence

log = logging.getLogger("tandem_rlvr")

DIGITS = 16
SKIPPED_PREFIXES = ("optimizer.", "scheduler.", "rng_state", "scaler.", "README", "LICENSE", ".")
SKIPPED_NAMES = ("trainer_state.json", "training_args.bin", "skill.json")  # skill.json: a measurement record
SKIPPED_SUFFIXES = (".md", ".lock")
CACHE_NAME = "fingerprints.json"


def _short(h: "hashlib._Hash") -> str:
    return h.hexdigest()[:DIGITS]


def _cache_path() -> Path:
    from .paths import cache_dir

    return cache_dir() / CACHE_NAME


def _read_cache() -> dict:
    try:
        obj = json.loads(_cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _write_cache(cache: dict) -> None:
    """Best effort: a cache that cannot be written only costs a re-hash next time."""
    from .io import atomic_write

    try:
        _cache_path().parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(_cache_path()) as f:
            json.dump(cache, f)
    except OSError as e:
        log.debug("fingerprint cache not written: %s", e)


def file_sha256(path: Path, cache: dict | None = None) -> str:
    """Full SHA-256 (hex) of a file's content, cached under its stat identity in ``cache``."""
    st = path.stat()
    key = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    if cache is not None and cache.get(key):
        return cache[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    digest = h.hexdigest()
    if cache is not None:
        cache[key] = digest
    return digest


def model_files(directory: Path) -> list[Path]:
    """The files of a model directory that decide its outputs (see the module docstring)."""
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith(SKIPPED_PREFIXES)
                  and p.name not in SKIPPED_NAMES and not p.name.endswith(SKIPPED_SUFFIXES))


def files_fingerprint(files: Sequence[Path]) -> str:
    """One fingerprint over (name, size, content hash) of ``files``."""
    cache = _read_cache()
    before = dict(cache)
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.name}\t{p.stat().st_size}\t{file_sha256(p, cache)}\n".encode())
    if cache != before:
        _write_cache(cache)
    return _short(h)


def _hub_snapshot(spec: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached (or no hub client): the name is all there is
        return None


def model_fingerprint(spec: str | None) -> str | None:
    """Fingerprint of a resolved model spec (``models.resolve_model_path``'s directory, a file or a
    hub id); None for None."""
    if spec is None:
        return None
    path = Path(spec).expanduser()
    if path.is_file():
        return files_fingerprint([path])
    if not path.is_dir():
        path = _hub_snapshot(spec)
        if path is None:
            return f"hub:{spec}"
    files = model_files(path)
    if not files:
        return None
    return files_fingerprint(files)


def problem_fingerprint(problem) -> str:
    """Fingerprint of one problem's text and gold answer (a ``data.benchmarks.Problem``)."""
    return _short(hashlib.sha256(json.dumps([problem.problem, problem.answer]).encode()))


def rows_fingerprint(rows) -> str:
    """Fingerprint of data rows, every column (a user's Dataset: its reward functions read any of them), in order."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, default=str).encode())
    return _short(h)


def problem_set_fingerprint(problems: Sequence) -> dict:
    """{"problems": count, "sha256": fingerprint of the ordered (id, problem fingerprint) list}."""
    h = hashlib.sha256()
    for p in problems:
        h.update(f"{p.problem_id}\t{problem_fingerprint(p)}\n".encode())
    return {"problems": len(problems), "sha256": _short(h)}
