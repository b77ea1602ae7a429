"""The math verifier: a table of equivalences, the time limit in every execution context, MATH-500.

The time-limit tests use a real pathological input, ``9^{9^{9^{9}}}``, on which sympy computes for
minutes (in C, where no signal can interrupt it), so they exercise the same kill-and-restart path
a hung verification takes in training.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.paths import PACKAGE_DATA as DATA
from tandem_rlvr.rewards import math as verifier
from tandem_rlvr.rewards import VERIFIERS, extract_boxed, get_verifier, score

MATH500 = DATA / "math500.jsonl"
HANG = r"\boxed{9^{9^{9^{9}}}}"
# Gold pairs of MATH-500 (answer vs the last \boxed{} of the solution) that genuinely differ;
# none at the moment, see docs/verifier_and_data.md.
KNOWN_MATH500_MISMATCHES: set[str] = set()

CASES = [
    # (response, gold, expected)
    (r"\boxed{\frac12}", "0.5", 1.0),
    (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
    (r"\boxed{\dfrac{1}{2}}", r"\frac12", 1.0),
    (r"\boxed{27.0}", "27", 1.0),
    (r"\boxed{27}", 27.0, 1.0),  # a float gold answer as some files store it
    (r"\boxed{(1, 2]}", r"(1,2]", 1.0),
    (r"\boxed{[-2, \infty)}", r"[-2,\infty)", 1.0),
    (r"\boxed{(1, 2]}", r"[1,2]", 0.0),
    (r"\boxed{x=3}", "3", 1.0),
    (r"\boxed{\{1,2,3\}}", r"\{3,2,1\}", 1.0),
    (r"\boxed{(1, 2)}", "(1,2)", 1.0),
    (r"\boxed{(2, 1)}", "(1,2)", 0.0),  # tuples are ordered
    (r"\boxed{5\text{ cm}}", "5", 1.0),
    (r"\boxed{12 \text{ inches}}", "12", 1.0),
    (r"\boxed{30^\circ}", "30", 1.0),
    (r"\boxed{30^{\circ}}", r"30^\circ", 1.0),
    (r"\boxed{50\%}", "50", 1.0),
    (r"\boxed{50\%}", r"50\%", 1.0),
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", 1.0),
    (r"\boxed{\sqrt2}", r"\sqrt{2}", 1.0),
    (r"\boxed{\sqrt{3}}", r"\sqrt{2}", 0.0),
    (r"\boxed{2\pi}", r"2 \pi", 1.0),
    (r"\boxed{\frac{\pi}{2}}", r"\frac\pi2", 1.0),
    (r"\boxed{\pi}", "3.14", 0.0),
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt3}2", 1.0),
    (r"\boxed{\left(\frac{1}{2}, \frac{3}{4}\right)}", "(0.5, 0.75)", 1.0),
    (r"\boxed{1,000}", "1000", 1.0),
    (r"\boxed{\textbf{(B)}\ 7}", "7", 1.0),  # AMC-style label + value: the value is graded
    (r"\boxed{\text{(D) } \frac{\sqrt{2}}{2}}", r"\frac{\sqrt2}{2}", 1.0),
    (r"\boxed{\textbf{(E) 24}}", "24", 1.0),
    (r"\boxed{\textbf{(B)}}", "7", 0.0),  # a bare letter cannot be checked against a value
    (r"\boxed{(E, O, E)}", "(E,O,E)", 1.0),  # a tuple, not a label
    (r"\boxed{{-}13.5}", "-13.5", 1.0),
    (r"\boxed{\Big[\frac{5}{12},\frac{2}{3}\Big]}", r"[\frac{5}{12},\frac{2}{3}]", 1.0),
    (r"\boxed{\text{3:30 PM}}", "3:30 PM", 1.0),
    (r"so \fbox{7}.", "7", 1.0),
    (r"$\boxed 7$", "7", 1.0),
    (r"first \boxed{3}, no wait: \boxed{4}", "4", 1.0),
    (r"first \boxed{3}, no wait: \boxed{4}", "3", 0.0),
    (r"\boxed{3}", "4", 0.0),
    ("The answer is 5.", "5", 0.0),  # no box
    (r"\boxed{}", "5", 0.0),
    (r"\boxed{ }", "5", 0.0),
    (r"\boxed{garbage!!}", "1", 0.0),
    (r"\boxed{\frac{1}{2", "0.5", 0.0),  # unclosed: cut at the token limit
    (r"\boxedfoo{1}", "1", 0.0),  # another macro, not a box
    (None, "1", 0.0),
    (r"\boxed{1}", None, 0.0),
    (r"\boxed{1}", "", 0.0),
    (123, "123", 0.0),
    (r"\boxed{1}", float("nan"), 0.0),
]


@pytest.mark.parametrize("response,gold,expected", CASES)
def test_score_table(response, gold, expected):
    assert score(response, gold) == expected


@pytest.mark.parametrize("text,expected", [
    (r"a \boxed{\frac{1}{\sqrt{2}}} b", r"\frac{1}{\sqrt{2}}"),
    (r"\boxed{\{1,2\}}", r"\{1,2\}"),
    (r"\boxed{a} then \fbox{b}", "b"),
    (r"\boxed {x}", "x"),
    ("$\\boxed 12$ and more", "12"),
    (r"\boxed{ }", None),
    (r"\boxed{\frac{1}{2}", None),
    ("no box", None),
    (None, None),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


# --------------------------------------------------------------------------- answer modes (issue 10)
SINGLE_BOX_CASES = [c for c in CASES if not isinstance(c[0], str) or len(verifier._BOX.findall(c[0])) <= 1]


@pytest.mark.parametrize("response,gold,expected", SINGLE_BOX_CASES)
def test_final_boxes_mode_scores_single_box_responses_identically(response, gold, expected):
    assert score(response, gold, answer_mode="final-boxes") == score(response, gold) == expected


def test_final_boxes_mode_leaves_math500_gold_solutions_unchanged():
    """MATH-500 solutions ending in one box: the opt-in mode grades them exactly as the default."""
    rows = [r for r in _math500(None) if len(verifier._BOX.findall(r["solution"])) == 1]
    assert len(rows) > 400
    assert [score(r["solution"], r["answer"], answer_mode="final-boxes") for r in rows] == \
        [score(r["solution"], r["answer"]) for r in rows]


# One box per answer, as multi-answer problems (OlympiadBench's is_multiple_answer) are often answered.
MULTI_BOX = [
    (r"So the pairs are \boxed{(2, 2)} and \boxed{(6, 2)}.", "(2, 2), (6, 2)"),
    (r"The solutions are $\boxed{(6, 2)}$, $\boxed{(2, 2)}$", "(2, 2), (6, 2)"),  # order of answers is free
    (r"Hence $x = \boxed{-1}$ \text{ or } $\boxed{3}$.", "-1, 3"),
    (r"\[\boxed{1} \quad \boxed{\frac{1}{2}}\]", r"1, \frac{1}{2}"),
]


@pytest.mark.parametrize("response,gold", MULTI_BOX)
def test_final_boxes_mode_grades_one_box_per_answer(response, gold):
    assert score(response, gold) == 0.0  # the paper's last box sees only one of the answers
    assert score(response, gold, answer_mode="final-boxes") == 1.0


@pytest.mark.parametrize("response,expected", [
    (r"\boxed{(2, 2)} and \boxed{(6, 2)}.", "(2, 2), (6, 2)"),
    (r"first \boxed{3}, no wait: \boxed{4}", "4"),  # words between boxes end the run
    (r"\boxed{1}, \boxed{2", None),  # an unclosed last box is a missing answer
    (r"\boxed{\textbf{(B)}\ 7}", "7"),  # labels dropped per box
    ("no box", None),
])
def test_extract_boxed_run(response, expected):
    assert verifier.extract_boxed_run(response) == expected


def test_public_score_signature_unchanged():
    """score(response, answer) still works positionally; the mode is a keyword with the paper's default."""
    import inspect

    params = inspect.signature(score).parameters
    assert list(params)[:2] == ["response", "answer"] and params["answer_mode"].default == "last-box"
    assert params["answer_mode"].kind is inspect.Parameter.KEYWORD_ONLY
    assert score(r"\boxed{2}", "2") == 1.0
    assert score(r"\boxed{2}", "2", answer_mode="bogus") == 0.0  # never raises
    with pytest.raises(TandemError, match="unknown answer mode 'bogus'; valid: last-box, final-boxes"):
        verifier.check_answer_mode("bogus")


def test_registry():
    assert VERIFIERS["math"] is score and get_verifier("math") is score
    with pytest.raises(TandemError, match="valid: math"):
        get_verifier("nope")


def _assert_hang_is_cut(timeout: float) -> None:
    score(r"\boxed{1/2}", "0.5")  # a ready worker: start-up is bounded separately, not by ``timeout``
    start = time.monotonic()
    assert score(HANG, "1", timeout=timeout) == 0.0
    assert time.monotonic() - start < timeout * verifier.WALL_FACTOR + 1.0  # CPU seconds: longer on a loaded box
    assert score(r"\boxed{1/2}", "0.5") == 1.0  # the replacement worker answers (not the fast path)


def test_timeout_kills_and_restarts_worker():
    score(r"\boxed{1/2}", "0.5")
    old = verifier._WORKER.proc
    _assert_hang_is_cut(0.3)
    assert old.returncode is not None and verifier._WORKER.proc is not old


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_worker_kept_off_the_cpu_is_not_timed_out_for_it():
    """The limit is the worker's CPU time, so a verdict does not follow the machine's load: a worker
    stopped for 1.5 s (as a loaded machine may keep it waiting for a core) still gives its verdict
    under a 0.5 s limit, and is not replaced."""
    assert verifier.equivalent("1/2", "0.5")  # a ready worker; a pair that needs sympy (no fast path here)
    pid = verifier._WORKER.proc.pid
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(1.5, os.kill, (pid, signal.SIGCONT))
    resume.start()
    start = time.monotonic()
    try:
        assert verifier.equivalent("1/2", "0.5", timeout=0.5) is True
    finally:
        resume.join()
    assert time.monotonic() - start >= 1.4 and verifier._WORKER.proc.pid == pid


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_worker_that_never_runs_is_cut_at_the_wall_clock_bound():
    assert verifier.equivalent("1/2", "0.5")
    proc = verifier._WORKER.proc
    os.kill(proc.pid, signal.SIGSTOP)  # uses no CPU: only the wall-clock bound ends the call
    start = time.monotonic()
    assert verifier.equivalent("1/2", "0.5", timeout=0.05) is False
    elapsed = time.monotonic() - start
    assert 0.05 * verifier.WALL_FACTOR - 0.1 <= elapsed < 0.05 * verifier.WALL_FACTOR + 2.0, elapsed
    assert proc.returncode is not None and verifier._WORKER.proc is not proc  # killed and replaced
    assert verifier.equivalent("1/2", "0.5")


def test_timeout_off_main_thread():
    errors = []

    def run():
        try:
            _assert_hang_is_cut(0.3)
        except BaseException as e:  # reported to the main thread below
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and not errors, errors


def _in_pool_worker(_):
    score(r"\boxed{1/2}", "0.5")
    start = time.monotonic()
    hung = score(HANG, "1", timeout=0.5)
    return multiprocessing.current_process().daemon, hung, time.monotonic() - start, score(r"\boxed{1/2}", "0.5")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_timeout_inside_daemonic_pool_worker(method):
    score(r"\boxed{1/2}", "0.5")  # a live worker in the parent: a forked child must not share it
    with multiprocessing.get_context(method).Pool(2) as pool:
        results = pool.map(_in_pool_worker, range(2))
    for daemon, hung, elapsed, ok in results:
        assert daemon and hung == 0.0 and elapsed < 0.5 * verifier.WALL_FACTOR + 1.0 and ok == 1.0
    assert score(r"\boxed{1/2}", "0.5") == 1.0  # the parent's worker is untouched


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait_dead(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


SCRIPT = """
import sys
from tandem_rlvr.rewards import math as m
assert m.score(r"\\boxed{1/2}", "0.5") == 1.0
print(m._WORKER.proc.pid, flush=True)
if sys.argv[1] == "hang":
    m.score(r"\\boxed{9^{9^{9^{9}}}}", "1", timeout=600)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("how", ["exit", "killed_while_hung"])
def test_worker_does_not_outlive_its_process(how):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, "hang" if how != "exit" else "exit"],
                            stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    if how == "exit":
        assert proc.wait(30) == 0
    else:
        time.sleep(0.3)  # let the worker get stuck in sympy
        assert _alive(pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert _wait_dead(pid), f"verifier worker {pid} outlived its parent ({how})"


def _math500(n: int | None):
    rows = [json.loads(line) for line in MATH500.read_text().splitlines() if line.strip()]
    return rows[:n]


def test_math500_gold_solutions_verify():
    """Every MATH-500 solution's last box against its ``answer``, end to end and through math-verify."""
    rows = _math500(None)
    start = time.monotonic()
    end_to_end = [score(r["solution"], r["answer"]) for r in rows]
    fast_s = time.monotonic() - start
    start = time.monotonic()
    via_sympy = [verifier.equivalent(extract_boxed(r["solution"]) or "", r["answer"]) for r in rows]
    slow_s = time.monotonic() - start
    failures = [(r["unique_id"], r["answer"], extract_boxed(r["solution"]))
                for r, a, b in zip(rows, end_to_end, via_sympy, strict=True) if not (a == 1.0 and b)]
    for failure in failures:
        print("MATH-500 gold mismatch:", failure)
    print(f"score(): {len(rows) / fast_s:.0f} calls/s; math-verify path: {len(rows) / slow_s:.0f} calls/s")
    unexplained = [f for f in failures if f[0] not in KNOWN_MATH500_MISMATCHES]
    # The gold answer of MATH-500 is by construction the solution's last box, so anything but a
    # (near-)perfect rate is a verifier bug; 99% leaves room for documented formatting mismatches.
    assert 1 - len(failures) / len(rows) >= 0.99 and not unexplained, unexplained


def test_math500_different_answers_are_not_equivalent():
    """No false positives: MATH-500 answers paired with other problems' solutions score 0 unless equal."""
    rows = _math500(200)
    perm = list(range(len(rows)))
    random.Random(0).shuffle(perm)
    for i, j in enumerate(perm):
        gold, pred = rows[i]["answer"], extract_boxed(rows[j]["solution"])
        if score(rows[j]["solution"], gold) == 1.0:
            assert verifier._normalise(pred) == verifier._normalise(gold), (pred, gold)


def test_deepscaler_sample_solutions_verify():
    """The training data's solutions box AMC labels, letters and some wrong values; see the docs."""
    path = DATA / "deepscaler_sample.json"
    rows = json.loads(path.read_text())
    boxes = [extract_boxed(r["solution"]) for r in rows]
    letter_only = [re.fullmatch(r"[\s(]*(?:\\text(?:bf)?|\\mathrm)?[{(\s]*[A-E][)}\s]*", b) is not None for b in boxes]
    checkable = [(r, b) for r, b, letter in zip(rows, boxes, letter_only, strict=True) if not letter]
    verified = [score(r["solution"], r["answer"]) for r, _ in checkable]
    rate = sum(verified) / len(checkable)
    print(f"deepscaler_sample: {sum(letter_only)} letter-only boxes; {rate:.1%} of the other {len(checkable)} verify")
    assert sum(letter_only) == 98 and rate >= 0.96


def _hog(cpu: int, stop) -> None:
    os.sched_setaffinity(0, {cpu})
    while not stop.is_set():
        pass


@pytest.mark.skipif(not Path("/proc/self/stat").exists() or not hasattr(os, "sched_setaffinity"),
                    reason="needs /proc and CPU affinity")
def test_a_worker_waiting_for_a_core_is_not_cut_by_the_wall_clock_bound(monkeypatch):
    """The wall-clock bound leaves out the time the worker waits on the run queue: pinned at nice 19 to one
    core that a busy process holds, the worker takes seconds of wall-clock for a verdict of a tenth of a second of
    CPU, past a wall-clock bound of 0.5 s, and still gives it (a plain wall-clock bound scored it 0)."""
    assert verifier.equivalent("1/2", "0.5")  # a ready worker
    pid = verifier._WORKER.proc.pid
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(pid, {cpu})
    os.setpriority(os.PRIO_PROCESS, pid, 19)  # a 1.5% share of a core a busy process holds
    monkeypatch.setattr(verifier, "WALL_FACTOR", 0.25)  # the not-runnable wall-clock bound: 0.25 x 2 s = 0.5 s
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    hogs = [ctx.Process(target=_hog, args=(cpu, stop), daemon=True)]
    for h in hogs:
        h.start()
    try:
        time.sleep(0.2)
        start = time.monotonic()
        # about 0.08 s of sympy on an idle core (a verdict of a few ms fits in one scheduler slice: shows nothing)
        assert verifier.equivalent(r"\sin^2 x+\cos^2 x", "1", timeout=2.0) is True
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        for h in hogs:
            h.join(10)
    assert elapsed > 0.5, elapsed  # a plain wall-clock bound of 0.5 s would have cut it
    assert verifier._WORKER.proc.pid == pid  # not replaced


def test_a_worker_that_does_not_start_is_an_error_not_a_verdict_of_0(monkeypatch):
    """A worker that cannot start (here: its module is missing) is retried once, then ``equivalent`` and
    ``score`` raise one line naming the worker's command; no answer is scored 0 for it."""
    verifier._WORKER.stop()
    monkeypatch.setattr(verifier, "WORKER_MODULE", "tandem_rlvr.rewards._no_such_worker")
    with pytest.raises(verifier.VerifierUnavailable,
                       match=r"does not start \(worker exited \(status 1\) during start;") as e:
        verifier.equivalent("1/2", "0.5")
    assert "\n" not in str(e.value) and "_no_such_worker" in str(e.value)
    with pytest.raises(verifier.VerifierUnavailable):
        score(r"\boxed{1/2}", "0.5")
    monkeypatch.undo()
    assert verifier.equivalent("1/2", "0.5") is True  # a working module: the next call starts a worker again
