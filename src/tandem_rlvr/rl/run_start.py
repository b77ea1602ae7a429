"""A training run's hold on its directory: the lock (the main process holds it), whether this start
made the run, what it opened, and the one cleanup of a start that fails.

A start that fails before its first checkpoint removes what it wrote (``START_FILES``, ``START_DIRS``;
the directory too when it made it), so a corrected command starts clean; what was there before it
stays. Assembly (``rl.assemble.build_run``) and the run (``rl.train.train``) both end through
``RunStart.close``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..outdir import RunLock, output_dir, remove_failed_start

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
        """Create ``output`` and, on the main process, lock it (a second writer gets an error naming this one)."""
        dir_was_new = not Path(output).expanduser().exists()
        out = output_dir(output, "--output-dir")
        lock = RunLock(out) if main else None
        existed = frozenset(n for n in (*START_FILES, *START_DIRS) if (out / n).exists())
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
