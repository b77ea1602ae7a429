"""Tasks graded by a final answer: ``math`` (last ``\\boxed{}``), ``gsm8k`` (``####``), ``answer-tag``.

All three load problems through ``data.benchmarks.load_benchmark`` (a registered name, a local
.jsonl/.json/.parquet file or a hub id; rows become ``{benchmark, problem_id, question, gold,
solution}``) and grade one response at a time; each states its conventions in ``docs/tasks.md``.

- ``MathTask``: the paper's task, unchanged: the prompt is ``prompting.user_message`` (the problem
  and the named instruction, the paper's by default) and the grade is ``rewards.math.score`` (the
  last box, math-verify equivalence; ``answer_mode`` as in ``tandem eval --answer-mode``; ``grader``
  ``paper`` grades with the paper's cascade instead, ``rewards.paper_grader``).
- ``Gsm8kTask``: the answer after the last ``####`` (a number), else the last number in the
  response, as the common GSM8K graders do (strict ``####`` match, then a flexible last-number
  match); numbers compare by value after dropping ``$``, thousands commas and a final period
  (``1,000.00`` == ``1000``).
- ``AnswerTagTask``: the text inside the last ``<answer>...</answer>`` equals the gold answer after
  both are normalised: surrounding whitespace stripped, inner runs of whitespace made one space,
  case folded (Reasoning Gym style exact match). Nothing else is normalised: ``1/2`` is not ``0.5``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from ..prompting import DEFAULT_INSTRUCTION, user_message
from .base import Grade

PASSED, WRONG, NO_ANSWER = "passed", "wrong answer", "no answer found"

_NUMBER = r"-?\$?\s*\d(?:[\d,]*\d)?(?:\.\d+)?"
_HASH_ANSWER = re.compile(rf"####\s*({_NUMBER})")
_ANY_NUMBER = re.compile(_NUMBER)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
# the answer forms of the format reward term (``has_answer``): a stated answer, right or wrong
_HASH_FORM = re.compile(r"####\s*\S")
_TAG_FORM = re.compile(r"<answer>.*?</answer>", re.S)

# No example answer in an instruction: a model being trained copies a plausible one ("#### 42") as its answer.
GSM8K_INSTRUCTION = ("Solve the problem step by step. On the last line write \"####\", a space and then the final "
                     "answer as a number alone.")
ANSWER_TAG_INSTRUCTION = ("Think it through, then give only the final answer between an <answer> tag and an "
                          "</answer> tag.")


def _rows(benchmark: str, limit: int | None, split: str | None) -> list[dict]:
    """A benchmark's problems as task rows (``load_benchmark``'s sources and row rules)."""
    from ..data.benchmarks import load_benchmark

    return [{"benchmark": p.benchmark, "problem_id": str(p.problem_id), "question": p.problem, "gold": p.answer,
             "solution": p.solution} for p in load_benchmark(benchmark, split=split, limit=limit)]


def _verdict(ok: bool, found: bool) -> Grade:
    return Grade(1.0, PASSED) if ok else Grade(0.0, WRONG if found else NO_ANSWER)


@dataclass(frozen=True)
class MathTask:
    """The paper's task: last ``\\boxed{}`` of the response equivalent to the gold answer."""

    instruction: str = DEFAULT_INSTRUCTION
    answer_mode: str = "last-box"
    name: str = "math"
    grader: str = "ours"  # rewards.math.GRADERS: ours, or the paper's cascade (rewards.paper_grader)

    @property
    def verifier(self) -> str:
        return f"math@1:{self.answer_mode}" + ("" if self.grader == "ours" else f":grader={self.grader}")

    def load(self, benchmark: str, limit: int | None = None, *, split: str | None = None) -> list[dict]:
        return _rows(benchmark, limit, split)

    def prompt(self, row: dict) -> str:
        return user_message(row["question"], self.instruction)

    def grade(self, responses: list[str], rows: list[dict]) -> list[Grade]:
        from ..rewards.math import extract_boxed, extract_boxed_run, score
        from ..rewards.paper_grader import extract_answer

        extract = extract_boxed_run if self.answer_mode == "final-boxes" else extract_boxed
        extract = extract_answer if self.grader == "paper" else extract
        return [_verdict(score(r, row["gold"], answer_mode=self.answer_mode, grader=self.grader) == 1.0,
                         extract(r) is not None)
                for r, row in zip(responses, rows, strict=True)]

    def has_answer(self, response: str) -> bool:
        """A closed ``\\boxed{}`` (the format reward term)."""
        from ..rewards.math import extract_boxed

        return extract_boxed(response) is not None


def gsm8k_answer(response: str) -> str | None:
    """The number after the last ``####``, else the last number of ``response`` (None if it has none)."""
    if not isinstance(response, str):
        return None
    tagged = _HASH_ANSWER.findall(response)
    if tagged:
        return tagged[-1]
    numbers = _ANY_NUMBER.findall(response)
    return numbers[-1] if numbers else None


def _number(text: str) -> Decimal | None:
    cleaned = re.sub(r"[\s$,]", "", str(text)).rstrip(".")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def gsm8k_equal(pred: str, gold: str) -> bool:
    """Numbers equal by value (``$``, commas, a final period dropped); non-numbers as stripped strings."""
    a, b = _number(pred), _number(gold)
    if a is not None and b is not None:
        return a == b
    return str(pred).strip() == str(gold).strip()


@dataclass(frozen=True)
class Gsm8kTask:
    """GSM8K's convention: a ``####`` answer, else the last number, compared by value."""

    name: str = "gsm8k"
    verifier: str = "gsm8k@1"

    def load(self, benchmark: str = "gsm8k", limit: int | None = None, *, split: str | None = None) -> list[dict]:
        return _rows(benchmark, limit, split)

    def prompt(self, row: dict) -> str:
        return f"{row['question']}\n\n{GSM8K_INSTRUCTION}"

    def grade(self, responses: list[str], rows: list[dict]) -> list[Grade]:
        out = []
        for r, row in zip(responses, rows, strict=True):
            pred = gsm8k_answer(r)
            out.append(_verdict(pred is not None and gsm8k_equal(pred, row["gold"]), pred is not None))
        return out

    def has_answer(self, response: str) -> bool:
        """A ``#### x`` line (the format reward term)."""
        return _HASH_FORM.search(response) is not None


def normalise_tag_answer(text: str) -> str:
    """``answer-tag``'s normalisation: strip, one space for each run of whitespace, casefold."""
    return " ".join(str(text).split()).casefold()


def tag_answer(response: str) -> str | None:
    """The contents of the last ``<answer>...</answer>`` of ``response``; None if it has none."""
    if not isinstance(response, str):
        return None
    found = _ANSWER_TAG.findall(response)
    return found[-1] if found else None


@dataclass(frozen=True)
class AnswerTagTask:
    """Exact match, after normalisation, inside the last ``<answer>...</answer>``."""

    name: str = "answer-tag"
    verifier: str = "answer-tag@1"

    def load(self, benchmark: str, limit: int | None = None, *, split: str | None = None) -> list[dict]:
        return _rows(benchmark, limit, split)

    def prompt(self, row: dict) -> str:
        return f"{row['question']}\n\n{ANSWER_TAG_INSTRUCTION}"

    def grade(self, responses: list[str], rows: list[dict]) -> list[Grade]:
        out = []
        for r, row in zip(responses, rows, strict=True):
            pred = tag_answer(r)
            ok = pred is not None and normalise_tag_answer(pred) == normalise_tag_answer(row["gold"])
            out.append(_verdict(ok, pred is not None))
        return out

    def has_answer(self, response: str) -> bool:
        """An ``<answer>...</answer>`` pair (the format reward term)."""
        return _TAG_FORM.search(response) is not None
