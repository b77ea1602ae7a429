"""The tiny world's code slice (world ``tiny-code``, benchmark ``tiny-code``): stories answered by a function.

Each problem is a tiny-world story with the starting amount left open, to be answered by a Python
function of it::

    Mia has n shells. She finds 5 more. Then she doubles them. Write shells(n), the number of
    shells Mia has now.

and its reference solution is a commented function, one step per ``\\n\\n``-separated paragraph
(a blank line inside a function is legal Python), so word-level and paragraph handoffs act on it
as on the word problems::

    def shells(n):
        # She finds 5 more
        n = n + 5

        # She doubles them
        n = n * 2

        return n

Graded by the ``code`` task's verifier (``rewards.code``, ``asserts`` tests run in the sandbox): three asserts
``shells(x) == f(x)`` at distinct inputs x in [0, 20] drawn per problem. A noisy training
solution (probability ``slip_prob``) writes one step's amount wrong (+-1 or +-2, never below 1;
a factor 2 becomes 3 and 3 becomes 2) while its comment keeps the story's amount: the slipped
function differs from the true one at every input (an add/subtract slip shifts the result by a
non-zero multiple) or at all inputs but at most one (a factor slip changes the result by the
step's value, a linear function of n with non-zero slope, zero at one n at most), so with three
distinct test inputs a slipped solution always fails. Splits hash as the word problems' do
(``tasks.split_of``), disjoint whatever the seed.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from ..errors import TandemError
from .tasks import CONNECTIVES, GAINS, LOSSES, NAMES, OBJECTS, draw_split

MULTIPLY = [("{p} doubles them.", "{p} doubles them", 2), ("{p} triples them.", "{p} triples them", 3)]
N_TESTS, MAX_INPUT = 3, 20
SIZES = {"train": 20000, "val": 500, "test": 2000}  # the benchmark's problems per split (seed 0)


@dataclass(frozen=True)
class CodeStep:
    """``n = n <op> amount``, commented with ``comment`` ("She finds 5 more")."""

    comment: str
    op: str  # "+", "-" or "*"
    amount: int


@dataclass(frozen=True)
class CodeProblem:
    """One code problem: the text shown, the function's name, its steps and its test inputs."""

    problem_id: str
    problem: str
    fn: str
    steps: tuple[CodeStep, ...]
    inputs: tuple[int, ...]
    solution: str  # the clean reference function

    def value(self, n: int) -> int:
        """The true answer at input ``n``."""
        for s in self.steps:
            n = n + s.amount if s.op == "+" else n - s.amount if s.op == "-" else n * s.amount
        return n

    @property
    def tests(self) -> list[str]:
        return [f"assert {self.fn}({x}) == {self.value(x)}" for x in self.inputs]

    @property
    def gold(self) -> dict:
        """The ``code`` task's test description (``tasks.code_data``'s ``asserts`` kind)."""
        return {"kind": "asserts", "header": "", "setup": "", "tests": self.tests}

    @property
    def answer(self) -> str:
        return json.dumps(self.gold, sort_keys=True)


def render_code(p: CodeProblem, slip_step: int | None = None, slip_amount: int | None = None) -> str:
    """The commented function of ``p``; step ``slip_step`` uses ``slip_amount`` (its comment stays true)."""
    paras = []
    for i, s in enumerate(p.steps):
        k = slip_amount if i == slip_step else s.amount
        paras.append(f"    # {s.comment}\n    n = n {s.op} {k}")
    paras.append("    return n")
    return f"def {p.fn}(n):\n" + "\n\n".join(paras)


def noisy_code(p: CodeProblem, rng: random.Random, slip_prob: float) -> str:
    """The reference function, or with probability ``slip_prob`` one step's amount wrong (module docstring)."""
    if not 0.0 <= slip_prob <= 1.0:
        raise TandemError(f"slip_prob must be in [0, 1], got {slip_prob}")
    if rng.random() >= slip_prob:
        return p.solution
    i = rng.randrange(len(p.steps))
    s = p.steps[i]
    if s.op == "*":
        return render_code(p, i, 5 - s.amount)  # 2 <-> 3
    return render_code(p, i, s.amount + rng.choice([d for d in (-2, -1, 1, 2) if s.amount + d >= 1]))


def sample_code_problem(rng: random.Random) -> CodeProblem:
    """Draw one story with 2-4 steps (add, subtract, or at most one doubling/tripling) and its test inputs."""
    (name, pron), (friend, _) = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    fill = dict(p=pron, f=friend, o="her" if pron == "She" else "him", o_cap=pron)
    story, steps, multiplied = [f"{name} has n {obj}."], [], False
    for j in range(rng.randint(2, 4)):
        kind = rng.choice(("+", "-", "*") if not multiplied else ("+", "-"))
        if kind == "*":
            multiplied = True
            tell, solve, k = rng.choice(MULTIPLY)
        else:
            k = rng.randint(1, 10)
            tell, solve = rng.choice(GAINS if kind == "+" else LOSSES)
        sentence = tell.format(k=k, **fill)
        conn = rng.choice(CONNECTIVES) if j else ""
        story.append(conn + (sentence[0].lower() + sentence[1:] if conn and sentence.startswith(pron) else sentence))
        steps.append(CodeStep(solve.format(k=k, **fill), kind, k))
    story.append(f"Write {obj}(n), the number of {obj} {name} has now.")
    inputs = tuple(rng.sample(range(MAX_INPUT + 1), N_TESTS))
    p = CodeProblem("", " ".join(story), obj, tuple(steps), inputs, "")
    pid = "tinycode-" + hashlib.sha256(p.problem.encode()).hexdigest()[:12]
    return CodeProblem(pid, p.problem, p.fn, p.steps, p.inputs, render_code(p))


def make_code_problems(n: int, seed: int = 0, split: str = "train") -> list[CodeProblem]:
    """``n`` distinct problems of ``split``, the same list for the same (n, seed, split); prefixes agree."""
    return draw_split(n, split, f"tiny-code:{seed}:{split}", sample_code_problem)


def code_rows(split: str | None = None, limit: int | None = None, benchmark: str = "tiny-code") -> list[dict]:
    """The benchmark ``tiny-code`` (seed 0) as ``code`` task rows; ``split`` defaults to test."""
    name = {"validation": "val", "dev": "val"}.get(split or "test", split or "test")
    if name not in SIZES:
        raise TandemError(f"unknown split {split!r} of benchmark {benchmark!r}; valid: {', '.join(SIZES)}")
    n = SIZES[name] if limit is None else min(limit, SIZES[name])
    return [{"benchmark": benchmark, "problem_id": p.problem_id, "question": p.problem, "gold": p.gold,
             "solution": p.solution, "split": name} for p in make_code_problems(n, seed=0, split=name)]


def grade_code(texts: list[str], problems: list[CodeProblem]) -> list[float]:
    """The code verifier's score of each response (``rewards.code``, as the ``code`` task grades; its tests
    run in the sandbox)."""
    from ..rewards.code import default_workers, grade_programs
    from ..sandbox import Limits

    return [g.score for g in grade_programs(list(texts), [p.gold for p in problems], Limits(), default_workers())]


if __name__ == "__main__":
    from ..prompting import plain_prompt

    for prob in make_code_problems(3, seed=0, split="test"):
        print(plain_prompt(prob.problem) + prob.solution, *prob.tests, sep="\n", end="\n" + "-" * 40 + "\n")
