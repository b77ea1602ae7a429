"""A judged run: a program in the sandbox, its tests in a judge process it cannot reach.

``run_judged(source, spec, limits, slot)`` starts the judge (``_judge.py``: trusted code, stdlib
only, under its own uid when the grader is root; otherwise under the grader's, and then this waits
until it is armed, non-dumpable, before going on), then starts the program in the sandbox as
``_serve.py program.py``, its stdin and stdout being the two pipes of the call channel and nothing
else of the judge's. The judge runs the tests, calling the program over that channel, and reports to
this process on its own stdout, which the program never holds. One wall-clock limit covers the whole
run: at the deadline both are killed. Why this is a verdict the program cannot write, and what
remains possible: docs/tasks.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from .runner import HERE, PROGRAM_ENV, Launch, Limits, Outcome, feed, drain, run_uid, sandbox_python

_JUDGE_FILES = ("_judge.py", "_wire.py")


@dataclass
class Judged:
    """A judged run: the program's ``Outcome`` and the judge's report (None: it gave none; then
    ``judge_error`` says why)."""

    outcome: Outcome
    report: dict | None
    judge_error: str = ""


def run_judged(source: str, spec: dict, limits: Limits, slot: int = 0) -> Judged:
    """Run ``source``'s tests as ``spec`` says (``_judge.py``); never raises for what the program does."""
    deadline = time.monotonic() + limits.wall_s
    fds: dict[str, int] = {}  # each closed once, by _close: a number closed twice may be another thread's file
    fds["req_r"], fds["req_w"] = os.pipe()  # judge -> program: requests
    fds["rep_r"], fds["rep_w"] = os.pipe()  # program -> judge: replies
    home, judge = tempfile.mkdtemp(prefix="tandem-judge-"), None
    try:
        judge = _start_judge(home, fds["req_w"], fds["rep_r"], limits, slot)
        _close(fds, "req_w", "rep_r")
        return _judged(judge, source, {**spec, "cap": limits.output_bytes}, limits, slot, fds, deadline)
    finally:  # whatever happened: the judge is killed before anything waits for it, and no pipe end stays open
        _close(fds, *list(fds))
        if judge is not None:
            judge.kill()
            _reap(judge)
        shutil.rmtree(home, ignore_errors=True)


def _reap(proc: subprocess.Popen) -> None:
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if f is not None:
                f.close()
        except OSError:  # a feeder thread's unflushed spec to a killed judge
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # a killed process that does not go: leave it to the kernel
        pass


def _close(fds: dict, *names: str) -> None:
    for name in names:
        os.close(fds.pop(name))


def _start_judge(home: str, req_w: int, rep_r: int, limits: Limits, slot: int) -> subprocess.Popen:
    for name in _JUDGE_FILES:
        shutil.copyfile(HERE / name, os.path.join(home, name))
    ids = {}
    if os.getuid() == 0:
        uid = run_uid(slot, judge=True)
        for p in (home, *(os.path.join(home, n) for n in _JUDGE_FILES)):
            os.chown(p, uid, uid)
        ids = {"user": uid, "group": uid, "extra_groups": []}
    own = json.dumps({"memory_mb": limits.memory_mb, "cpu_s": limits.cpu_s})
    return subprocess.Popen([sandbox_python(), "-I", "-S", "-B", "_judge.py", str(req_w), str(rep_r), own], cwd=home,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            pass_fds=(req_w, rep_r), env=PROGRAM_ENV, start_new_session=True, **ids)


def _judged(judge: subprocess.Popen, source: str, spec: dict, limits: Limits, slot: int, fds: dict,
            deadline: float) -> Judged:
    threading.Thread(target=feed, args=(judge.stdin, json.dumps(spec).encode()), daemon=True).start()
    jbufs = {judge.stdout: bytearray(), judge.stderr: bytearray()}
    cap = limits.output_bytes

    def said(n):
        """drain's stop condition: the judge has written ``n`` lines, or closed its stdout."""
        return lambda closed: judge.stdout in closed or jbufs[judge.stdout].count(b"\n") >= n

    if os.getuid() != 0:  # one uid for both: the program may start only once the judge is armed
        why = drain(jbufs, set(jbufs), cap, deadline, said(1))
        if why is not None or not jbufs[judge.stdout].startswith(b'{"armed":1}'):
            judge.kill()
            return Judged(_no_run(why), None, why or _tail(jbufs[judge.stderr]) or "the judge did not start")
    with Launch(source, limits, slot, files=("_serve.py", "_wire.py"), argv=("_serve.py", "program.py"),
                stdin=fds["req_r"], stdout=fds["rep_w"]) as run:
        _close(fds, "req_r", "rep_w")
        bufs = {**run.bufs, **jbufs}
        why = drain(bufs, {run.proc.stderr, *jbufs}, cap, deadline, said(2))
        report = _report(jbufs[judge.stdout]) if why is None else None
        if report is not None and report.get("ended"):  # the channel broke: how did the program end?
            why = drain(run.bufs, {run.proc.stderr}, cap, deadline)
            if why is not None:
                report = None
        judge.kill()
        outcome = run.finish(why if why is not None or report is None or report.get("ended") else "done")
    error = "" if report is not None or why is not None else _tail(jbufs[judge.stderr]) or "the judge gave no report"
    return Judged(outcome, report, error)


def _report(raw: bytes) -> dict | None:
    """The judge's report line (its second), or None."""
    lines = bytes(raw).split(b"\n")
    try:
        report = json.loads(lines[1])
    except (IndexError, ValueError):
        return None
    ok = isinstance(report, dict) and isinstance(report.get("results"), list)
    return report if ok else None


def _tail(buf: bytearray) -> str:
    return bytes(buf[-300:]).decode("utf-8", "replace").strip()


def _no_run(why: str | None) -> Outcome:
    return Outcome("timeout" if why == "timeout" else "crashed", None, None, "", "", 0.0)
