"""A contributor's plug-ins, one of each kind, as ``docs/contributing.md`` says to write them.

``test_contributor_paths.py`` registers them (one line per registry) and runs them end to end; nothing
else of the package knows they exist. Each records what it did, so the test can check that the run
really went through it:

- ``JuniorFirstTwo``, schedule ``junior-first-2``: the junior writes the first two tokens of every
  response, the senior the rest (senior share = max(T - 2, 0) / T for a response of T tokens).
- ``DigitTask``, task ``digit-match``: the gold answer anywhere in the response is correct; an answer
  is stated (``has_answer``) when the response holds a digit.
- ``even_length``, reward term ``even-length``: 1 for a completion of an even number of tokens.
- ``open_counting``, engine ``counting-hf``: the hf engine, counted (``OPENED``).
- ``tiny_slice``, benchmark ``tiny-slice``: the tiny world's problems under their own benchmark name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from tandem_rlvr.data.benchmarks import Problem, tiny_benchmark
from tandem_rlvr.decoding.schedule import Schedule, ScheduleState
from tandem_rlvr.tasks import Grade

OPENED: list[str] = []  # engine names, one per open
REWARDED: list[list[int]] = []  # per reward call, each completion's token count


class JuniorFirstTwo(Schedule):
    """Junior for response tokens 0 and 1, senior after (``state.since`` counts the emitted tokens)."""

    name = "junior-first-2"

    def start(self, seeds, steps=None):
        B = seeds.shape[0]
        return ScheduleState(torch.zeros(B, dtype=torch.bool, device=seeds.device),
                             torch.zeros(B, dtype=torch.int64, device=seeds.device), seeds)

    def advance(self, state, tokens, step):
        state.since += 1
        state.author = state.since >= 2


@dataclass(frozen=True)
class DigitTask:
    """Rows from any benchmark; correct when the gold answer appears in the response."""

    name: str = "digit-match"
    verifier: str = "digit-match@1"

    def load(self, benchmark: str, limit: int | None = None, *, split: str | None = None) -> list[dict]:
        from tandem_rlvr.data.benchmarks import load_benchmark

        return [{"benchmark": p.benchmark, "problem_id": p.problem_id, "question": p.problem, "gold": p.answer}
                for p in load_benchmark(benchmark, split=split, limit=limit)]

    def prompt(self, row: dict) -> str:
        return row["question"]

    def grade(self, responses: list[str], rows: list[dict]) -> list[Grade]:
        return [Grade(1.0, "found") if str(row["gold"]) in r else Grade(0.0, "absent")
                for r, row in zip(responses, rows, strict=True)]

    def has_answer(self, response: str) -> bool:
        return re.search(r"\d", response) is not None


@dataclass(frozen=True)
class NoAnswerFormTask:
    """A task that forgot ``has_answer``: refused when it is registered."""

    name: str = "no-answer-form"
    verifier: str = "no-answer-form@1"

    def load(self, benchmark, limit=None, *, split=None):
        return []

    def prompt(self, row):
        return row["question"]

    def grade(self, responses, rows):
        return [Grade(0.0, "absent") for _ in responses]


def even_length(prompts, completions, completion_ids=None, **kwargs) -> list[float]:
    """1.0 for a completion of an even number of tokens (EOS included), else 0.0."""
    REWARDED.append([len(ids) for ids in completion_ids])
    return [float(len(ids) % 2 == 0) for ids in completion_ids]


def open_counting(setup):
    """The hf engine under another name, counted."""
    from tandem_rlvr.engines.hf import open_hf

    engine = open_hf(setup)
    engine.name = "counting-hf"
    OPENED.append(engine.name)
    return engine


def tiny_slice(split: str | None, limit: int | None) -> list[Problem]:
    return [Problem("tiny-slice", p.problem_id, p.problem, p.answer, p.solution, p.meta)
            for p in tiny_benchmark(split, limit)]
