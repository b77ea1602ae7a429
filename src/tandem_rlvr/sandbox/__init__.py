"""The code sandbox: run untrusted Python programs, one process each, contained and limited.

``run_program(source, stdin, limits, slot) -> Outcome`` and ``run_pool(jobs, workers)`` (a bounded
pool) are in ``runner``; ``run_judged(source, spec, limits, slot) -> Judged`` (``judged``) runs a
program's tests in a judge process it cannot reach, calling the program over a pipe (``_judge.py``,
``_serve.py``, the value codec ``_wire.py``); the launcher that isolates a program (``_launch.py``)
and the in-process guard (``_guard.py``) run in the child. What is contained, and how, on which OS: docs/tasks.md,
"The sandbox".
"""

from .judged import Judged, run_judged
from .runner import Limits, Outcome, run_pool, run_program, sandbox_python, sandbox_python_version

__all__ = ["Judged", "Limits", "Outcome", "run_judged", "run_pool", "run_program", "sandbox_python",
           "sandbox_python_version"]
