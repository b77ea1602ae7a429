"""One progress-bar factory and the Console that prints tables and text to stdout.

``progress_bar`` is a rich bar with its ETA on a terminal; piped or redirected (a log file, CI), where rich
would print nothing until the end, it writes a plain line per task to stderr every ``LINE_EVERY`` seconds
(done/total, elapsed, time left), so long work is never silent; off, it is a no-op."""

from __future__ import annotations

import contextlib
import os
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class _NullProgress:
    def add_task(self, *a, **k):
        return 0

    def advance(self, *a, **k):
        pass

    def update(self, *a, **k):
        pass


LINE_EVERY = 30.0  # seconds between two plain progress lines of one task (output not a terminal)


class LineProgress:
    """rich's ``add_task``/``advance``/``update`` as plain stderr lines, at most one per task every
    ``every`` seconds and one when a task that printed completes (a task done sooner prints nothing)."""

    def __init__(self, every: float | None = None, stream=None, clock=time.monotonic):
        self.every, self.stream, self.clock = LINE_EVERY if every is None else every, stream, clock
        self.tasks: list[dict] = []

    def add_task(self, description: str, total: float | None = None, completed: float = 0, visible: bool = True,
                 **fields) -> int:
        now = self.clock()
        self.tasks.append({"description": description, "total": total, "done": completed, "start": now, "last": now,
                           "printed": False, "fields": fields})
        return len(self.tasks) - 1

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def update(self, task: int, advance: float | None = None, completed: float | None = None,
               total: float | None = None, description: str | None = None, **fields) -> None:
        t = self.tasks[task]
        t["done"] = completed if completed is not None else t["done"] + (advance or 0)
        t["total"] = total if total is not None else t["total"]
        t["description"] = description or t["description"]
        t["fields"].update(fields)
        now = self.clock()
        finished = t["total"] is not None and t["done"] >= t["total"]
        if now - t["last"] >= self.every or (finished and t["printed"] and t["done"] != t.get("shown")):
            t["last"], t["printed"], t["shown"] = now, True, t["done"]
            print(self.line(t, now), file=self.stream or sys.stderr, flush=True)

    @staticmethod
    def line(t: dict, now: float) -> str:
        spent = now - t["start"]
        total, done = t["total"], t["done"]
        if not total:
            return f"{t['description']}: {done:g} done, {_clock(spent)} elapsed"
        left = spent * (total - done) / done if done else None
        fields = "".join(f", {k} {v:.3f}" if isinstance(v, float) else f", {k} {v}" for k, v in t["fields"].items())
        return (f"{t['description']}: {done:g}/{total:g} ({done / total:.0%}){fields}, {_clock(spent)} elapsed"
                + (f", about {_clock(left)} left" if left is not None and done < total else ""))


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


@contextlib.contextmanager
def progress_bar(enabled: bool = True, extra: str = ""):
    """``with progress_bar() as bar: t = bar.add_task("x", total=n); bar.advance(t)``.

    ``extra``: a rich format string of task fields shown after the count (``"loss {task.fields[loss]:.3f}"``)."""
    if not enabled:
        yield _NullProgress()
        return
    probe = Console()
    if not (probe.is_terminal or probe.is_jupyter):
        yield LineProgress()
        return
    cols = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            *([TextColumn(extra)] if extra else []), TimeElapsedColumn(), TimeRemainingColumn()]
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
