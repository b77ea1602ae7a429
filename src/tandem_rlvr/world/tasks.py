"""Procedurally generated word problems with verifiable answers: the tiny world's task.

Each problem is a 2-4 step add/subtract story about a person and a pile of objects:

    Mia has 7 shells. She finds 5 more. Then she gives 3 to Leo. How many shells does Mia
    have now?

and its reference solution is written in words, one step per ``\\n\\n``-separated
paragraph, ending in a ``\\boxed{}`` answer, the shape of a real chain of thought at a
scale a 0.36M-parameter model learns on a laptop CPU in minutes:

    Mia starts with 7 shells.

    She finds 5 more, so 7 plus 5 is 12.

    She gives 3 away, so 12 minus 3 is 9.

    The answer is \\boxed{9}.

Why this task: its answers are checked exactly by the same verifier as real math
benchmarks, its solutions have word boundaries and paragraph breaks where the tandem and
handoff schedules act, and ``noisy_solution`` gives a knob (``slip_prob``) that sets how
often a model pretrained on it slips, so the base model leaves room for RL.

Splits are disjoint by construction: a problem belongs to the split its text hashes to
(80% train, 10% val, 10% test), so no problem text appears in two splits whatever the
seeds. Try it: ``python -m tandem_rlvr.world.tasks``.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from ..errors import TandemError
from ..prompting import plain_prompt

SPLITS = {"train": (0, 80), "val": (80, 90), "test": (90, 100)}  # hash buckets out of 100

# (name, pronoun) pairs; friends are drawn from the same list.
NAMES = [("Mia", "She"), ("Leo", "He"), ("Ava", "She"), ("Sam", "He"), ("Zoe", "She"),
         ("Max", "He"), ("Lily", "She"), ("Ben", "He"), ("Emma", "She"), ("Omar", "He"),
         ("Nora", "She"), ("Jack", "He"), ("Ruby", "She"), ("Noah", "He"), ("Ella", "She"),
         ("Liam", "He"), ("Ivy", "She"), ("Tom", "He"), ("Rosa", "She"), ("Finn", "He")]
OBJECTS = ["shells", "apples", "marbles", "stickers", "coins", "pencils", "cards", "stones",
           "books", "cookies", "flowers", "stamps", "balloons", "toys", "eggs", "buttons",
           "beads", "leaves", "cups", "socks"]
# Story clause / solution clause templates. {p}: pronoun, {k}: amount, {f}: a friend.
GAINS = [("{p} finds {k} more.", "{p} finds {k} more"),
         ("{p} buys {k} more.", "{p} buys {k} more"),
         ("{f} gives {o} {k} more.", "{o_cap} gets {k} from {f}"),
         ("{p} picks up {k} more.", "{p} picks up {k} more"),
         ("{p} wins {k} more.", "{p} wins {k} more"),
         ("{p} makes {k} more.", "{p} makes {k} more")]
LOSSES = [("{p} gives {k} to {f}.", "{p} gives {k} away"),
          ("{p} loses {k}.", "{p} loses {k}"),
          ("{p} sells {k}.", "{p} sells {k}"),
          ("{p} drops {k}.", "{p} drops {k}"),
          ("{f} takes {k}.", "{f} takes {k}"),
          ("{p} trades away {k}.", "{p} trades away {k}")]
CONNECTIVES = ["", "Then ", "Later ", "Next ", "After that "]
MAX_START, MAX_AMOUNT, MAX_VALUE = 20, 10, 50


@dataclass(frozen=True)
class Step:
    """One arithmetic step: ``value <- value + sign * amount``, told by ``clause``."""

    clause: str  # solution wording before ", so a plus k is r."; e.g. "She finds 5 more"
    sign: int  # +1 or -1
    amount: int


@dataclass(frozen=True)
class WorldProblem:
    """One task: the text fields every benchmark has, plus the plan that renders solutions."""

    problem_id: str
    problem: str
    answer: str  # the true answer, a non-negative integer as text
    solution: str  # the clean reference solution (no slip)
    intro: str = ""  # "Mia starts with 7 shells."
    start: int = 0
    steps: tuple[Step, ...] = field(default=())


STYLES = ("word", "shorthand")


def render_shorthand(p: WorldProblem, slip_step: int | None = None, slip_delta: int = 0) -> tuple[str, int]:
    """The compact "private shorthand" solution of ``p`` (the drift world's second style).

    Same paragraphs and the same arithmetic as the word style, no words::

        13

        13 + 10 = 23

        23 - 9 = 14

        \\boxed{14}

    Slips work as in ``render_solution``. Returns (text, final value).
    """
    paras, value = [str(p.start)], p.start
    for i, s in enumerate(p.steps):
        result = value + s.sign * s.amount + (slip_delta if i == slip_step else 0)
        paras.append(f"{value} {'+' if s.sign > 0 else '-'} {s.amount} = {result}")
        value = result
    paras.append(f"\\boxed{{{value}}}")
    return "\n\n".join(paras), value


def render_solution(p: WorldProblem, slip_step: int | None = None, slip_delta: int = 0,
                    style: str = "word") -> tuple[str, int]:
    """Write the solution of ``p``; step ``slip_step`` gets its result off by ``slip_delta``.

    The slip propagates: later steps start from the wrong value. Returns (text, final value).
    ``style="shorthand"`` writes the drift world's compact style (``render_shorthand``).
    """
    if style == "shorthand":
        return render_shorthand(p, slip_step, slip_delta)
    if style != "word":
        raise TandemError(f"unknown solution style {style!r}; valid: {', '.join(STYLES)}")
    paras, value = [p.intro], p.start
    for i, s in enumerate(p.steps):
        result = value + s.sign * s.amount + (slip_delta if i == slip_step else 0)
        word = "plus" if s.sign > 0 else "minus"
        paras.append(f"{s.clause}, so {value} {word} {s.amount} is {result}.")
        value = result
    paras.append(f"The answer is \\boxed{{{value}}}.")
    return "\n\n".join(paras), value


def noisy_solution(problem: WorldProblem, rng: random.Random, slip_prob: float, style: str = "word") -> str:
    """The solution of ``problem``, with one arithmetic slip with probability ``slip_prob``.

    The slip (result off by +-1 or +-2, never below zero anywhere down the chain) lands on a
    uniformly chosen step and propagates, so a slipped solution always boxes a wrong answer.
    ``style`` picks the wording ("word": the reference solution; "shorthand": the drift
    world's compact style); the random draws are the same for both.
    """
    if not 0.0 <= slip_prob <= 1.0:
        raise TandemError(f"slip_prob must be in [0, 1], got {slip_prob}")
    if style not in STYLES:
        raise TandemError(f"unknown solution style {style!r}; valid: {', '.join(STYLES)}")
    if not problem.steps or rng.random() >= slip_prob:
        return problem.solution if style == "word" else render_shorthand(problem)[0]
    i = rng.randrange(len(problem.steps))
    value = problem.start
    for s in problem.steps[: i + 1]:
        value += s.sign * s.amount
    # Lowest value the chain reaches from step i on; a negative delta must keep it >= 0.
    low, v = value, value
    for s in problem.steps[i + 1:]:
        v += s.sign * s.amount
        low = min(low, v)
    deltas = [d for d in (-2, -1, 1, 2) if low + d >= 0]
    return render_solution(problem, i, rng.choice(deltas), style=style)[0]


def draw_solutions(problems: list[WorldProblem], rng: random.Random, slip_prob: float,
                   shorthand_frac: float = 0.0, shorthand_slip_prob: float = 0.0) -> list[str]:
    """One fresh training solution per problem (the pretraining stream of ``build.make_batch``).

    With ``shorthand_frac > 0`` each solution is first given a style: shorthand with that
    chance (slipping at ``shorthand_slip_prob``), else words (slipping at ``slip_prob``). At
    0 no extra random draw is made, so the default world's stream is exactly as before.
    """
    if shorthand_frac <= 0:
        return [noisy_solution(p, rng, slip_prob) for p in problems]
    texts = []
    for p in problems:
        short = rng.random() < shorthand_frac
        texts.append(noisy_solution(p, rng, shorthand_slip_prob if short else slip_prob,
                                    style="shorthand" if short else "word"))
    return texts


def _bucket(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % 100


def split_of(problem_text: str) -> str:
    """The split a problem text belongs to (fixed by its hash, independent of any seed)."""
    b = _bucket(problem_text)
    return next(name for name, (lo, hi) in SPLITS.items() if lo <= b < hi)


def sample_problem(rng: random.Random) -> WorldProblem:
    """Draw one story with 2-4 steps; every intermediate value stays in [0, MAX_VALUE]."""
    (name, pron), (friend, _) = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    obj_pron = "her" if pron == "She" else "him"
    value = rng.randint(1, MAX_START)
    start, story, steps = value, [f"{name} has {value} {obj}."], []
    for j in range(rng.randint(2, 4)):
        sign = rng.choice((1, -1)) if 0 < value < MAX_VALUE else (1 if value == 0 else -1)
        amount = rng.randint(1, min(MAX_AMOUNT, value if sign < 0 else MAX_VALUE - value))
        tell, solve = rng.choice(GAINS if sign > 0 else LOSSES)
        fill = dict(p=pron, k=amount, f=friend, o=obj_pron, o_cap=pron)
        conn = rng.choice(CONNECTIVES) if j else ""
        sentence = tell.format(**fill)
        story.append(conn + (sentence[0].lower() + sentence[1:] if conn and sentence.startswith(pron) else sentence))
        steps.append(Step(solve.format(**fill), sign, amount))
        value += sign * amount
    story.append(f"How many {obj} does {name} have now?")
    p = WorldProblem("", " ".join(story), str(value), "", f"{name} starts with {start} {obj}.", start, tuple(steps))
    text, final = render_solution(p)
    assert final == value
    pid = "tiny-" + hashlib.sha256(p.problem.encode()).hexdigest()[:12]
    return WorldProblem(pid, p.problem, p.answer, text, p.intro, p.start, p.steps)


def make_problems(n: int, seed: int = 0, split: str = "train") -> list[WorldProblem]:
    """``n`` distinct problems of ``split``, the same list for the same (n, seed, split).

    Draws stories from a RNG seeded by (seed, split) and keeps those whose text hashes into
    ``split``; the first ``n`` of a longer list equal the shorter list.
    """
    return draw_split(n, split, f"tiny-world:{seed}:{split}", sample_problem)


def draw_split(n: int, split: str, rng_name: str, sample):
    """The first ``n`` distinct problems ``sample(rng)`` draws (``rng`` seeded by ``rng_name``) whose text
    hashes into ``split``: what ``make_problems`` and the code world's ``make_code_problems`` share."""
    if split not in SPLITS:
        raise TandemError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if n < 0:
        raise TandemError(f"number of problems must be >= 0, got {n}")
    rng = random.Random(rng_name)
    out: list = []
    seen: set[str] = set()
    while len(out) < n:
        p = sample(rng)
        if p.problem not in seen and split_of(p.problem) == split:
            seen.add(p.problem)
            out.append(p)
    return out


if __name__ == "__main__":
    for prob in make_problems(3, seed=0, split="test"):
        print(plain_prompt(prob.problem) + prob.solution, end="\n" + "-" * 40 + "\n")
