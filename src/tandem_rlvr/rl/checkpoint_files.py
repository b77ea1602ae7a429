"""The files of the checkpoint a resume loads, checked before any model loads: one line naming a damaged
file, not a traceback from deep in transformers, torch or safetensors.

A resume loads the newest ``checkpoint-N`` holding ``trainer_state.json`` (``latest``; the Trainer writes
that file after the weights and optimizer state, so its presence marks the save as finished). A disk fault,
a copy cut short or a process of a multi-process run killed while its own files were still being written
can still leave one of its files damaged. ``check`` reads what makes each file usable without reading the
tensors: ``trainer_state.json`` parses and names step N; a ``.safetensors`` file's header parses and its
tensors fit in the file; a ``torch.save`` file (``.pt``, ``.pth``, ``.bin``: a zip archive) has its
central directory, which sits at the end of the file and is the first thing a cut-off file loses; a
``torch.distributed.checkpoint`` folder (FSDP2's ``pytorch_model_fsdp_0``, ``optimizer_0``) has readable
metadata and the shard files it names.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from ..errors import TandemError

TORCH_SUFFIXES = (".pt", ".pth", ".bin")


def latest(out: Path) -> Path | None:
    """The checkpoint a resume of the run in ``out`` loads: the highest-numbered ``checkpoint-N`` that holds
    ``trainer_state.json``, else None."""
    done = [p for p in out.glob("checkpoint-*") if p.name.split("-", 1)[1].isdigit()
            and (p / "trainer_state.json").exists()]
    return max(done, key=lambda p: int(p.name.split("-", 1)[1]), default=None)


def _problem(path: Path) -> str | None:
    """What is wrong with one file of a checkpoint (None: usable as far as can be told without loading it)."""
    if path.name == "trainer_state.json":
        try:
            state = json.loads(path.read_bytes())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            return f"not JSON ({e.__class__.__name__}: {e}), cut short"
        if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
            return "holds no integer global_step"
        return None
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt"):
                pass
        except Exception as e:  # safetensors raises its own SafetensorError (and OSError)
            return f"not a readable safetensors file ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        return None
    if path.suffix in TORCH_SUFFIXES:
        try:
            with zipfile.ZipFile(path):
                pass
        except (zipfile.BadZipFile, OSError) as e:
            return f"not a complete torch.save file ({e}), cut short"
        return None
    return None


def _dcp_problem(folder: Path) -> tuple[Path, str] | None:
    """(file, what is wrong) of a ``torch.distributed.checkpoint`` folder, else None."""
    from torch.distributed.checkpoint import FileSystemReader

    try:
        meta = FileSystemReader(str(folder)).read_metadata()
    except Exception as e:  # a pickle cut short raises anything from EOFError to UnpicklingError
        return folder / ".metadata", f"unreadable distributed-checkpoint metadata ({type(e).__name__}: {e})"
    storage = getattr(meta, "storage_data", None) or {}
    ends: dict[str, int] = {}
    for item in storage.values():
        rel = getattr(item, "relative_path", None)
        if rel is not None:
            ends[rel] = max(ends.get(rel, 0), int(item.offset) + int(item.length))
    for rel, end in sorted(ends.items()):
        f = folder / rel
        if not f.is_file():
            return f, "missing (named by the folder's .metadata)"
        if f.stat().st_size < end:
            return f, f"{f.stat().st_size} bytes, but its .metadata places data up to byte {end}: cut short"
    return None


def check(ckpt: Path) -> None:
    """Raise one TandemError naming the first damaged file of checkpoint folder ``ckpt`` (module docstring)."""
    step = ckpt.name.split("-", 1)[1]
    found = None
    for path in sorted(ckpt.rglob("*")):
        if path.is_dir() and (path / ".metadata").is_file():
            found = _dcp_problem(path)
        elif path.is_file():
            what = _problem(path)
            if what is None and path.name == "trainer_state.json" and path.parent == ckpt:
                if str(json.loads(path.read_bytes())["global_step"]) != step:
                    what = f"says global_step {json.loads(path.read_bytes())['global_step']}, not {step}"
            found = (path, what) if what else None
        if found:
            path, what = found
            raise TandemError(f"{path}: {what}; the run would resume from {ckpt.name}, which is damaged (a disk "
                              f"fault, a copy cut short, or a kill while it was being written): delete {ckpt} to "
                              "resume from the checkpoint before it, or use another --output-dir")
