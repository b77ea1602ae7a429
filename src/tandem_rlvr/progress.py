"""One progress-bar factory (rich), a no-op when progress is off or output is not a terminal user."""

from __future__ import annotations

import contextlib

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class _NullProgress:
    def add_task(self, *a, **k):
        return 0

    def advance(self, *a, **k):
        pass

    def update(self, *a, **k):
        pass


@contextlib.contextmanager
def progress_bar(enabled: bool = True):
    """``with progress_bar() as bar: t = bar.add_task("x", total=n); bar.advance(t)``."""
    if not enabled:
        yield _NullProgress()
        return
    cols = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*cols, transient=False) as bar:
        yield bar
