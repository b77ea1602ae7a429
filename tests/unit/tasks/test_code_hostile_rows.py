"""Any response is a row's verdict (tandem_rlvr.rewards.code, tandem_rlvr.sandbox): nothing crashes or hangs.

Lone surrogates, NUL and megabyte responses on every code benchmark and the tiny code world get a
score of 0 with a reason; verdicts belong to the exact bytes run (the trailing-backslash twins); a
judge is never waited for while the grader holds its pipe; and a program that guesses and
remembers across gradings (as a policy graded at every training step could) never raises its reward.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tandem_rlvr.sandbox import Limits, judged
from tandem_rlvr.tasks.code import CodeTask
from tandem_rlvr.tasks.code_data import load_code
from tandem_rlvr.tasks.grade import grade_file
from tandem_rlvr.world.code import code_rows

TASK = CodeTask(limits=Limits(wall_s=60, cpu_s=30), workers=2)


def _rows() -> list[dict]:
    rows = [load_code(b, 1)[0] for b in ("humaneval", "mbpp", "mbpp-full")]
    rows += [r for r in load_code("apps-sample") if r["problem_id"] in ("1", "2404")]  # stdio and call-based
    return rows + code_rows("test", 1)


HOSTILE = {"lone surrogate": "```python\nx = 1  # \ud800\n```", "NUL": "```python\nx = 1\x00\n```",
           "surrogate, no fence": "\udcff\udcfe", "8 MB": "```python\nx = 1\n# " + "y" * (8 << 20) + "\n```"}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_response_is_a_verdict_on_every_code_benchmark(kind):
    rows = _rows()
    grades = TASK.grade([HOSTILE[kind]] * len(rows), rows)
    got = [(r["benchmark"], g.score, g.reason) for r, g in zip(rows, grades, strict=True)]
    want = "crashed" if kind != "8 MB" else None  # an 8 MB program that defines nothing fails its tests
    for _bench, score, reason in got:
        assert score == 0.0 and (reason == want if want else reason.startswith(("failed test", "crashed"))), got


def test_tandem_grade_finishes_every_row_around_a_lone_surrogate(tmp_path):
    he = load_code("humaneval", 2)
    rows = [{"problem_id": he[0]["problem_id"], "response": he[0]["solution"]},
            {"problem_id": he[1]["problem_id"], "response": "    return []  # \ud800"},
            {"problem_id": he[1]["problem_id"], "response": he[1]["solution"]}]
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))  # \ud800 as a JSON escape, as in the wild
    summary = grade_file("code", "humaneval", responses, tmp_path / "out", workers=2)
    graded = [json.loads(x) for x in (tmp_path / "out" / "graded.jsonl").read_text().splitlines()]
    assert [(g["score"], g["reason"]) for g in graded] == [(1.0, "passed"), (0.0, "crashed"), (1.0, "passed")]
    assert summary["responses"] == 3


def test_verdicts_belong_to_the_exact_program_not_its_whitespace_twin():
    """A last line ending in a backslash then a newline is continued by the blank line after it (valid);
    a backslash then a space is a syntax error. The two differ only in trailing whitespace."""
    row = load_code("humaneval", 1)[0]
    valid, broken = row["solution"].rstrip("\n") + " \\\n", row["solution"].rstrip("\n") + " \\ "
    for order in ([valid, broken], [broken, valid]):
        grades = {resp: g for resp, g in zip(order, TASK.grade(order, [row, row]), strict=True)}
        assert (grades[valid].reason, grades[broken].reason) == ("passed", "crashed"), order


def test_a_judge_is_never_waited_for_while_its_pipes_are_held(monkeypatch):
    """A program that cannot be started (here: the launch fails after the judge is armed and waiting for
    the program's first line) ends the run at once, with the judge killed, instead of a wait forever."""

    class Broken:
        def __init__(self, *a, **k):
            time.sleep(1.0)  # the judge is armed and blocked reading the reply pipe by now
            raise OSError("launch failed")

    monkeypatch.setattr(judged, "Launch", Broken)
    spec = {"context": [], "imports": [], "remote": ["f"], "tests": ["assert f() == 1"]}
    box: dict = {}

    def run():
        try:
            judged.run_judged("def f():\n    return 1\n", spec, Limits(wall_s=20, cpu_s=10))
        except OSError as e:
            box["error"] = str(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive() and box == {"error": "launch failed"}


GUESS_AND_REMEMBER = r'''
import ctypes, os
PLACES = ("/run/lock", "/var/tmp", "/tmp", "/dev/shm", ".")
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
KEY = 0x7a11e5

def _load():
    sid = libc.shmget(KEY, 4096, 0)
    if sid >= 0:
        raw = ctypes.string_at(libc.shmat(sid, None, 0), 4096).split(b"\0", 1)[0]
        if raw:
            return eval(raw)
    for d in PLACES:
        try:
            return eval(open(os.path.join(d, ".tandem-memo")).read())
        except (OSError, SyntaxError):
            pass
    return dict(SEED)

def _save(state):
    text = repr(state).encode()
    sid = libc.shmget(KEY, 4096, 0o1000 | 0o666)
    if sid >= 0:
        addr = libc.shmat(sid, None, 0)
        ctypes.memmove(addr, text + b"\0", len(text) + 1)
    for d in PLACES:
        try:
            open(os.path.join(d, ".tandem-memo"), "w").write(text.decode())
        except OSError:
            pass

def f(x):
    """Never computes: guesses 0, 1, 2, ... per input across gradings; a call with x == 2 means x == 1's last
    guess passed (the check stops at its first failing assert), so it is kept."""
    s = _load()
    if x == 2 and 1 not in s["known"]:
        s["known"][1] = s["last"][1]
    if x in s["known"]:
        answer = s["known"][x]
    else:
        answer = s["next"].get(x, 0)
        s["next"][x], s["last"][x] = answer + 1, answer
    _save(s)
    return answer
'''
GOLD = {"kind": "humaneval", "prompt": "", "entry_point": "f",
        "test": "def check(candidate):\n    assert candidate(1) == 3\n    assert candidate(2) == 2\n"}


def test_a_guess_and_remember_program_never_raises_its_reward_over_gradings():
    """A training-shaped run: the same problem graded at each of 12 steps. With memory across runs this
    program passes at the 6th grading (4 runs to find f(1), 2 more for f(2)); here it never passes. A seeded memory
    passes at once, so the failure is for want of memory, not of a working program."""
    rows = [{"gold": GOLD}]
    empty = "SEED = {'known': {}, 'next': {}, 'last': {}}\n"
    rewards = [CodeTask(limits=Limits(wall_s=30, cpu_s=20), workers=1).grade(
        [f"```python\n{empty}{GUESS_AND_REMEMBER}\n```"], rows)[0].score for _ in range(12)]
    assert rewards == [0.0] * 12
    seeded = "SEED = {'known': {1: 3, 2: 2}, 'next': {}, 'last': {}}\n"
    (g,) = TASK.grade([f"```python\n{seeded}{GUESS_AND_REMEMBER}\n```"], rows)
    assert (g.score, g.reason) == (1.0, "passed")
