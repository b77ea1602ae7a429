"""One progress-bar factory (rich), a no-op when progress is off or output is not a terminal user,
and the Console that prints tables and text to stdout."""

from __future__ import annotations

import contextlib
import os
import sys

from rich.console import Console
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


PIPED_WIDTH = 400  # columns of stdout when it is not a terminal (rich would assume 80)


def console(**kw) -> Console:
    """A rich Console on stdout. Piped or redirected (not a terminal, no $COLUMNS), it is
    ``PIPED_WIDTH`` wide instead of rich's 80, so a table row stays one line in a file and a
    model's text is not hard-wrapped into lines it never wrote."""
    if "width" not in kw and not os.environ.get("COLUMNS") and not sys.stdout.isatty():
        kw["width"] = PIPED_WIDTH
    return Console(**kw)
