"""Run directories: checked before use, locked while written, paths stored so they travel.

Every command that writes a directory (``eval solo|handoff|legibility|drift``, ``train``,
``compare``, ``report``, ``demo``) goes through ``output_dir``: the path must be a directory
or creatable, and writable; otherwise a one-line ``TandemError`` names the path and the
reason (an existing file, a dangling symlink, a read-only file system, ...).

Writers of resumable runs (``eval solo|handoff``, ``train``) also hold ``RunLock``: an
exclusive ``flock`` on ``DIR/.lock`` whose text names the holder (pid@host). The kernel drops
the lock when its process dies, so a lock left by a killed run never blocks the resume,
while a second live writer gets an error naming the first.

Paths stored in run files are absolute (``abs_spec``), so later commands work from any
directory; the run directory itself is never part of a run's identity, so ``./runs/x``,
``runs/x/`` and ``/abs/runs/x`` (or the directory after a move) are the same run. A resume
with another config is refused by one rule, ``config_diff`` (``refuse_other_config`` for
training and evaluation runs; the study compares its settings the same way).
See docs/architecture.md, "Run directories".
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path

from .errors import TandemError
from .io import read_json

LOCK_NAME = ".lock"


def _reason(e: OSError) -> str:
    return e.strerror or errno.errorcode.get(e.errno or 0, str(e))


def output_dir(path: str | os.PathLike, flag: str = "--out", create: bool = True) -> Path:
    """Check (and with ``create``, make) a directory for writing; TandemError naming it otherwise.

    Without ``create`` nothing is made: writability is probed in the nearest existing
    ancestor, so a command that later fails on bad input leaves no empty directory behind.
    """
    if not str(path).strip():  # Path("") is the working directory: a run would land in it unasked
        raise TandemError(f"{flag}: an empty path; name the output directory")
    p = Path(path).expanduser()
    if p.is_symlink() and not p.exists():
        raise TandemError(f"{flag} {path}: a symlink to {os.readlink(p)}, which does not exist")
    if p.exists() and not p.is_dir():
        raise TandemError(f"{flag} {path}: exists and is not a directory")
    target = p
    while not create and not target.exists() and target != target.parent:
        target = target.parent
    try:
        if create:
            p.mkdir(parents=True, exist_ok=True)
        elif not target.is_dir():
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(target))
        probe = target / f".write-probe-{os.getpid()}"
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise TandemError(f"{flag} {path}: cannot write there ({_reason(e)})") from None
    return p


class RunLock:
    """Exclusive lock of a run directory for the lifetime of this object (or ``release``)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_NAME
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise TandemError(f"{run_dir}: cannot create the run lock {self.path} ({_reason(e)})") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self._fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(self._fd)
            self._fd = None
            raise TandemError(f"{run_dir} is being written by {holder} (lock {self.path}); wait for it to finish "
                              "or use another output directory") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file stays (unlinking it would race)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        self.release()


def abs_spec(spec: str | None, reserved=()) -> str | None:
    """A local path (that exists) as an absolute path; anything else (hub id, a ``reserved``
    built-in name, which its loader resolves before any path) as is."""
    if not spec or spec in reserved:
        return spec
    p = Path(spec).expanduser()
    return str(p.resolve()) if p.exists() else spec


def remove_failed_start(run_dir: Path, names: list[str], dir_was_new: bool) -> None:
    """Undo a start that failed before any result: remove ``names`` (and the dir if we made it)."""
    for name in [*names, LOCK_NAME]:
        try:
            (run_dir / name).unlink()
        except FileNotFoundError:
            pass
    if dir_was_new:
        try:
            run_dir.rmdir()
        except OSError:
            pass


def config_diff(old: dict, new: dict, ignore=()) -> list[str]:
    """Sorted keys whose values differ between two stored configs (a key missing on one side differs)."""
    return sorted(k for k in set(old) | set(new) if k not in ignore and old.get(k) != new.get(k))


def refuse_other_config(path: Path, config: dict, hint: str, ignore=(), defaults: dict | None = None,
                        canonical=None) -> bool:
    """Whether the run's ``path`` (its config.json) exists; a TandemError naming the differing keys
    if it holds another config than ``config``. ``defaults`` fill keys older runs did not record;
    ``canonical(old) -> old`` reads an older record as today's would write it (model names)."""
    if not path.exists():
        return False
    old = read_json(path)
    diff = config_diff({**(defaults or {}), **(canonical(old) if canonical else old)}, config, ignore)
    if diff:
        raise TandemError(f"{path}: existing run has a different {', '.join(diff)}; {hint}")
    return True
