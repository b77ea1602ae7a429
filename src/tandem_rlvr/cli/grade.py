"""``tandem grade``: its flags and its printout (the grader: ``tasks/grade.py``, docs/tasks.md)."""

from __future__ import annotations

from pathlib import Path

from ..config.data import task_names
from ..data.benchmarks import benchmark_names
from ..tasks.code_data import CODE_BENCHMARKS
from ..tasks.grade import GRADED, grade_file
from .flags import grader_flag, number


def cmd_grade(a) -> None:
    summary = grade_file(a.task, a.benchmark, a.responses, a.out, a.split, a.workers, a.grader)
    reasons = ", ".join(f"{k} {v}" for k, v in summary["reasons"].items())
    print(f"{summary['responses']} responses graded by {summary['verifier']} on {summary['benchmark']}: "
          f"mean score {summary['mean_score']:.3f} ({reasons}); rows in {Path(a.out) / GRADED}")


def register(sub) -> None:
    """Add ``tandem grade`` to the command parser's subparsers."""
    g = sub.add_parser("grade", help="grade responses from a JSONL file with a task's verifier (code in the sandbox)")
    g.add_argument("--task", default="math", help=f"{task_names()} (default math; docs/tasks.md)")
    g.add_argument("--benchmark", required=True, help=f"the problems the responses answer: a name (code task: "
                   f"{', '.join(CODE_BENCHMARKS)}; the others: {', '.join(benchmark_names())}), a local file, or a "
                   "hub id")
    g.add_argument("--responses", required=True, help="JSONL file: one object a line with problem_id and response; "
                   "other columns are kept")
    g.add_argument("--out", required=True, help="directory for graded.jsonl and summary.json (resumes if it exists)")
    g.add_argument("--split", default=None, help="split for registered or hub benchmarks")
    g.add_argument("--workers", type=number(int, 1, optional=True), default=None,
                   help="programs run at once (code; default: CPUs, at most 8)")
    grader_flag(g)
    g.set_defaults(fn=cmd_grade)
