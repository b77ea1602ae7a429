"""The code world (``tiny-code``): its tests say what its stories say, its reference functions pass them
in the sandbox and a slipped function fails them; its splits are disjoint; the code task reads it as a
benchmark; a grade call runs each distinct program once.

The expected values come from reading each story's sentences (a verb table written here, independent
of ``world.code``'s step records), and the reference functions are also run in plain Python.
"""

from __future__ import annotations

import random
import re

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.tasks import get_task
from tandem_rlvr.world.build import WorldConfig
from tandem_rlvr.world.code import code_rows, make_code_problems, noisy_code

# sentence pattern -> what it does to the count (k = the number in the sentence)
GAIN = re.compile(r"\b(finds|buys|picks up|wins|makes) (\d+) more|gives (?:her|him) (\d+) more")
LOSS = re.compile(r"\b(?:gives|loses|sells|drops|takes|trades away) (\d+)")


def story_value(problem: str, n: int) -> int:
    """The count at the end of the story, starting from ``n``, from the sentences alone."""
    sentences = [s for s in re.split(r"(?<=\.) ", problem) if s]
    assert sentences[0].endswith(" has n " + sentences[0].split()[-1]) and sentences[-1].startswith("Write ")
    for s in sentences[1:-1]:
        if "doubles them" in s:
            n *= 2
        elif "triples them" in s:
            n *= 3
        elif m := GAIN.search(s):
            n += int(m.group(2) or m.group(3))
        elif m := LOSS.search(s):
            n -= int(m.group(1))
        else:
            raise AssertionError(f"unread sentence {s!r}")
    return n


@pytest.fixture(scope="module")
def problems():
    return make_code_problems(60, seed=0, split="train")


def test_each_test_states_the_storys_count_and_the_reference_function_computes_it(problems):
    for p in problems:
        fn = re.search(r"Write (\w+)\(n\)", p.problem).group(1)
        env: dict = {}
        exec(p.solution, env)  # noqa: S102  (our own reference text)
        for t in p.tests:
            x, want = map(int, re.fullmatch(rf"assert {fn}\((\d+)\) == (-?\d+)", t).groups())
            assert want == story_value(p.problem, x) == env[fn](x)
        assert len({int(re.search(r"\((\d+)\)", t).group(1)) for t in p.tests}) == 3  # three distinct inputs


def test_reference_functions_pass_in_the_sandbox_and_every_slipped_one_fails(problems):
    task, rng = get_task("code"), random.Random(1)
    rows = [{"gold": p.gold} for p in problems]
    slipped = [noisy_code(p, rng, 1.0) for p in problems]
    assert all(s != p.solution for s, p in zip(slipped, problems, strict=True))
    grades = task.grade([p.solution for p in problems] + slipped, rows + rows)
    assert [g.score for g in grades[:len(problems)]] == [1.0] * len(problems)
    assert [g.score for g in grades[len(problems):]] == [0.0] * len(problems)
    assert all(g.reason.startswith("failed test") for g in grades[len(problems):])


def test_slip_rate_follows_slip_prob(problems):
    rng = random.Random(0)
    draws = [noisy_code(p, rng, 0.3) != p.solution for _ in range(20) for p in problems]
    assert abs(sum(draws) / len(draws) - 0.3) < 0.04  # 1200 draws: 4 standard errors


def test_solutions_are_paragraphs_one_step_each(problems):
    for p in problems:
        paras = p.solution.split("\n\n")
        assert len(paras) == len(p.steps) + 1 and paras[-1] == "    return n"
        assert all(q.count("\n    n = n ") == 1 for q in paras[:-1])


def test_splits_are_disjoint_and_prefix_stable():
    texts = {s: {p.problem for p in make_code_problems(300, seed=s2, split=s)} for s, s2 in
             (("train", 0), ("val", 1), ("test", 2))}
    assert not texts["train"] & texts["val"] and not texts["train"] & texts["test"] and not texts["val"] & texts["test"]
    assert make_code_problems(10, 0, "val") == make_code_problems(20, 0, "val")[:10]


def test_the_code_task_loads_tiny_code_and_grades_its_solutions():
    task = get_task("code")
    rows = task.load("tiny-code", 12, split="val")
    assert [r["problem_id"] for r in rows] == [r["problem_id"] for r in code_rows("val", 12)]
    assert len({r["problem_id"] for r in rows}) == 12 and all(r["benchmark"] == "tiny-code" for r in rows)
    assert [g.score for g in task.grade([r["solution"] for r in rows], rows)] == [1.0] * 12
    with pytest.raises(TandemError, match="split"):
        code_rows("nope")


def test_a_grade_call_runs_each_distinct_program_once(monkeypatch):
    import tandem_rlvr.rewards.code as code_mod

    calls = []
    real = code_mod.run_judged  # asserts are call-based: each program is one judged run

    def counting(source, *a, **kw):
        calls.append(source)
        return real(source, *a, **kw)

    monkeypatch.setattr(code_mod, "run_judged", counting)
    p = make_code_problems(2, seed=0, split="test")
    rows = [{"gold": p[0].gold}] * 4 + [{"gold": p[1].gold}] * 2
    good, bad = p[0].solution, p[0].solution.replace("return n", "return n + 1")
    responses = [good, bad, good, f"```python\n{good}```", p[1].solution, p[1].solution + "\n"]
    grades = get_task("code").grade(responses, rows)
    # distinct (exact program, tests): good@0 (3 responses, the fenced one extracts to the same bytes), bad@0,
    # p1@1 and p1 with a trailing newline@1 (other bytes: run on their own)
    assert len(calls) == 4
    assert [g.score for g in grades] == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]


def test_code_world_config_is_validated_and_keys_apart():
    assert WorldConfig.code().key() != WorldConfig().key()
    assert "task" not in __import__("json").dumps(WorldConfig().__dict__) or WorldConfig().task == "math"
    with pytest.raises(TandemError, match="task"):
        WorldConfig(task="chess")
    with pytest.raises(TandemError, match="one style"):
        WorldConfig.code(shorthand_frac=0.5)
