"""The ``code`` task: loader (``code_data``), prompts, and the code verifier of ``rewards.code``.

How each benchmark's program is assembled and tested, answer extraction, the reasons and the sandbox
runs: ``rewards.code`` (docs/tasks.md). ``extract_code``, ``stdout_matches`` and ``APPS_HEADER`` are
re-exported here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..rewards.code import (APPS_HEADER, code_verifier, default_workers, defined_names, extract_code, grade_one,
                            grade_programs, stdout_matches)
from ..sandbox import Limits
from .base import Grade
from .code_data import load_code

_CODE_FORM = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n.*?```", re.S | re.I)  # a closed python/unlabelled block


@dataclass(frozen=True)
class CodeTask:
    """Programs graded by unit tests in the sandbox, ``workers`` at a time (module docstring)."""

    limits: Limits = field(default_factory=Limits)
    workers: int = field(default_factory=default_workers)
    name: str = "code"

    @property
    def verifier(self) -> str:
        return code_verifier()

    def load(self, benchmark: str = "humaneval", limit: int | None = None, *, split: str | None = None) -> list[dict]:
        return load_code(benchmark, limit, split)

    def prompt(self, row: dict) -> str:
        gold = _gold(row)
        kind = gold["kind"]
        if kind == "humaneval":
            return ("Complete the following Python function. Reply with the whole function in one ```python code "
                    f"block.\n\n```python\n{gold['prompt']}```")
        if kind == "asserts":
            tests = "\n".join(gold["tests"])
            return (f"{row['question']}\nYour code should pass these tests:\n\n{tests}\n\n"
                    "Reply with the Python code in one ```python code block.")
        if kind == "call":
            return (f"{row['question']}\n\nComplete this starter code; your function is called with each test's "
                    f"arguments and its return value is checked:\n\n```python\n{gold['starter']}\n```\n\n"
                    "Reply with the Python code in one ```python code block.")
        return (f"{row['question']}\n\nWrite a Python 3 program that reads the input from standard input and "
                "prints the answer to standard output. Reply with the program in one ```python code block.")

    def grade(self, responses: list[str], rows: list[dict]) -> list[Grade]:
        return grade_programs(responses, [_gold(row) for row in rows], self.limits, self.workers)

    def has_answer(self, response: str) -> bool:
        """A closed python or unlabelled code block (the format reward term)."""
        return _CODE_FORM.search(response) is not None

    def grade_one(self, response: str, row: dict, slot: int = 0) -> Grade:
        """Grade one response in sandbox slot ``slot``."""
        return grade_one(response, _gold(row), self.limits, slot)


def _gold(row: dict) -> dict:
    """A row's gold test description (a dict, or its JSON text as ``Problem.answer`` records it); for
    asserts, with the reference solution's top-level names as ``targets`` (``rewards.code``)."""
    gold = row["gold"]
    gold = json.loads(gold) if isinstance(gold, str) else gold
    if gold["kind"] == "asserts" and row.get("solution") and "targets" not in gold:
        gold = {**gold, "targets": defined_names(row["solution"])}
    return gold


__all__ = ["APPS_HEADER", "CodeTask", "extract_code", "stdout_matches"]
