"""A training run's hold on its directory: the lock (the main process holds it), whether this start
made the run, what it opened, and the one cleanup of a start that fails.

A start that fails before its first checkpoint removes what it wrote (``START_FILES``, ``START_DIRS``;
the directory too when it made it), so a corrected command starts clean; what was there before it
stays. Assembly (``rl.assemble.build_run``) and the run (``rl.train.train``) both end through
``RunStart.close``.

Under a launch of several processes, every process must see the one run directory the main process
writes (its checkpoint shards land there and a resume reads them back from there): nodes given a
directory that is not on a shared filesystem would each train into their own, and the run could not be
resumed. ``RunStart.take`` checks it before any training: the main process writes a token file of a
fresh name (``.launch-<hex>``, so no cached lookup of an earlier file answers for it) into the directory,
every other process looks for it there, and when one does not see it every process raises the same
one-line error naming each process's directory and host. A start that failed on one process (the lock
held by another writer, a directory it cannot create) is the same line on every process, not a hang.

A start that resumes checks the files of the checkpoint it will load (``rl.checkpoint_files``): a damaged
one is a line naming it, before any model loads.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TandemError
from ..outdir import RunLock, output_dir, remove_failed_start
from . import checkpoint_files

# what a run writes before its first checkpoint (final/ is moved into place only after training)
START_FILES = ("config.json", "log.jsonl", "rollouts.jsonl", "README.md", "judge_cache.sqlite")
START_DIRS = ("best", ".best.tmp", ".best.old", ".final.tmp")


@dataclass
class RunStart:
    """The run directory ``out`` as this start holds it (see module docstring)."""

    out: Path
    lock: RunLock | None
    fresh: bool  # this start creates config.json
    dir_was_new: bool
    existed: frozenset = frozenset()  # START_FILES / START_DIRS present before this start
    closers: list = field(default_factory=list)  # close() of what the run opened, in order

    @classmethod
    def take(cls, output: str, main: bool) -> "RunStart":
        """Create ``output`` and, on the main process, lock it (a second writer gets an error naming this one).
        Under a process group of two or more, collective: every process sees the main process's directory,
        or every process raises (module docstring)."""
        dir_was_new = not Path(output).expanduser().exists()
        group = _group_size() > 1
        out = lock = None
        failed = None
        try:
            out = output_dir(output, "--output-dir")
            lock = RunLock(out) if main else None
        except TandemError as e:
            if not group:
                raise
            failed = str(e)
        if group:
            shared_or_refuse(out, output, main, lock, dir_was_new, failed)
        existed = frozenset(n for n in (*START_FILES, *START_DIRS) if (out / n).exists())
        if (ckpt := checkpoint_files.latest(out)) is not None:
            try:
                checkpoint_files.check(ckpt)  # the checkpoint this start resumes, before any model loads
            except TandemError:
                if lock is not None:
                    lock.release()
                raise
        return cls(out, lock, "config.json" not in existed, dir_was_new, existed)

    def close(self, failed: bool = False) -> None:
        """Close what the run opened; after a failure, undo a fresh start that saved no checkpoint; unlock.
        Closing twice is closing once."""
        while self.closers:
            self.closers.pop(0)()  # the judge's cache file is closed before it is removed
        if failed and self.lock is not None and self.fresh and not any(self.out.glob("checkpoint-*")):
            for name in START_DIRS:
                if name not in self.existed:
                    shutil.rmtree(self.out / name, ignore_errors=True)
            remove_failed_start(self.out, [n for n in START_FILES if n not in self.existed], self.dir_was_new)
        if self.lock is not None:
            self.lock.release()


TOKEN_PREFIX = ".launch-"
SEE_S = 2.0  # how long a process looks for the main process's token (a shared filesystem's propagation)


def _group_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _sees(path: Path, token: str, limit_s: float = SEE_S) -> bool:
    """Whether ``path`` holds ``token``, looked for until ``limit_s`` passes."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            if path.read_text() == token:
                return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def shared_or_refuse(out: Path | None, output: str, main: bool, lock: RunLock | None, dir_was_new: bool,
                     failed: str | None) -> None:
    """Collective (every process of the group calls it once): return when every process took the directory
    and sees the main process's token in it; otherwise undo this process's start (lock, token, a directory it
    made and left empty), close the group in step with the others and raise the same one-line TandemError
    on every process. ``failed``: this process's own error taking the directory, else None."""
    import torch.distributed as dist

    world = dist.get_world_size()
    token = secrets.token_hex(16) if main and failed is None else None
    token_path = None
    if token is not None:
        token_path = out / f"{TOKEN_PREFIX}{token}"
        try:
            token_path.write_text(token)
        except OSError as e:
            failed, token, token_path = f"{out}: cannot write to the run directory ({e.strerror or e})", None, None
    where = str(out.resolve()) if out is not None else output
    taken: list = [None] * world
    dist.all_gather_object(taken, (failed, token, where, socket.gethostname()))
    errors = [(r, t[0]) for r, t in enumerate(taken) if t[0] is not None]
    line = None
    if errors:
        r, first = errors[0]
        line = f"rank {r} could not take the run directory: {first}"
    else:
        mains = [t[1] for t in taken if t[1] is not None]
        if len(mains) != 1:
            line = f"{len(mains)} processes of this launch claim to be the main process; expected exactly one"
        else:
            lead = next(r for r, t in enumerate(taken) if t[1] is not None)
            seen = main or _sees(out / f"{TOKEN_PREFIX}{mains[0]}", mains[0])
            seen_by: list = [None] * world
            dist.all_gather_object(seen_by, seen)  # every process has looked before the token goes
            blind = [r for r in range(world) if not seen_by[r]]
            if blind:
                shown = "; ".join(f"rank {r} on {taken[r][3]} has {taken[r][2]}" for r in blind[:3])
                line = (f"the run directory is not shared by all nodes: rank {lead} on {taken[lead][3]} writes "
                        f"{taken[lead][2]}, which {'ranks' if len(blind) > 1 else 'rank'} "
                        f"{', '.join(map(str, blind))} cannot see ({shown}); give every node --output-dir on a "
                        "filesystem they all mount at the same path")
    if token_path is not None:
        token_path.unlink(missing_ok=True)
    if line is None:
        dist.barrier()  # the token is gone before any process goes on to list or write the directory
        return
    if lock is not None:
        lock.release()
        remove_failed_start(out, [], dir_was_new)
    elif out is not None and dir_was_new:
        try:
            out.rmdir()  # this process made it and nothing is in it
        except OSError:
            pass
    dist.barrier()  # every process has what it needs before any leaves
    dist.destroy_process_group()  # closed in step: a peer gone first would abort this process at exit
    raise TandemError(line)
