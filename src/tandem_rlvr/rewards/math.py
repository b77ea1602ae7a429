"""The binary math verifier: is the last ``\\boxed{}`` of a response equivalent to the gold answer?

What: ``score(response, answer) -> 1.0 | 0.0``, the paper's verifiable reward, applied to the
whole (tandem) response. It never raises: a missing, empty, malformed or timed-out answer is 0.0.

How:

1. ``extract_boxed`` takes the LAST ``\\boxed{...}`` (balanced nested braces, escaped braces
   skipped), also ``\\fbox{...}`` and the brace-less ``\\boxed 5``. If that last box is unclosed
   (a response cut at the token limit) the answer is missing: 0.0, no search for earlier boxes.
2. A leading multiple-choice label is dropped, ``\\textbf{(B)}\\ 7`` -> ``7`` (AMC-style
   solutions box label and value; the gold answer is the value). Fast path: if the box and the
   gold answer are the same string up to spacing, ``$``, ``\\left``/``\\right``,
   ``\\text{}``/``\\mathrm{}`` wrappers, ``\\dfrac``/``\\tfrac`` and a final period, the answer
   is 1.0 with no sympy at all.
3. Otherwise math-verify decides (``parse`` + ``verify``, see ``equivalent``; no equivalence
   logic of our own), in a persistent subprocess (``_worker.py``) fed JSON lines over pipes.

Why the subprocess: sympy can hang for minutes, often in C code, and math-verify's own timeout
uses ``SIGALRM``, which only works on the main thread. Killing a process works everywhere: from
any thread, in a ``multiprocessing`` pool worker (daemonic processes may not start
multiprocessing children, but may ``Popen``), in a TRL reward function. On a timeout the worker
is SIGKILLed, a fresh one is started at once (its ~0.4 s of imports overlap the caller's work), and
the call returns 0.0. The timeout counts the worker's CPU seconds (Linux /proc; wall-clock elsewhere),
with a bound of ``WALL_FACTOR`` times it on the wall-clock the worker spends *not runnable* (stopped,
sleeping, blocked: its /proc state is polled; where there is no /proc, plain wall-clock), so a verdict
is the same on a loaded machine as on an idle one: a worker running or waiting for a core, however
long, is not cut for it.

Costs and limits: one worker per process; calls from several threads are serialised by a lock
(time spent waiting for the lock is not part of a call's limit; use processes for parallel
scoring). Starting a worker (once per process, again after each timeout) is bounded separately,
by ``STARTUP_TIMEOUT`` seconds of its CPU time (and the same not-runnable bound); a worker that cannot start
twice running is an error (``TandemError``), not a verdict: a broken install must not score every
answer 0. Measured figures are in ``docs/verifier_and_data.md``. POSIX only (``select`` on pipes).

    >>> score("so the answer is \\\\boxed{\\\\frac12}", "0.5")
    1.0
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import TandemError

DEFAULT_TIMEOUT = 5.0
STARTUP_TIMEOUT = 60.0  # seconds of the starting worker's CPU time (its imports: about 0.4 s idle)
# A call's ``timeout`` is seconds of the worker's CPU time (where /proc gives it), so that a verdict does
# not depend on the machine's load: a worker that waits for a core is not timed out for it. Wall-clock
# while the worker is not runnable bounds a call too, at WALL_FACTOR x ``timeout`` (a worker stopped or
# blocked uses no CPU and does not wait for one).
WALL_FACTOR = 20.0
WORKER_MODULE = "tandem_rlvr.rewards._worker"
_POLL_S = 0.05  # how often a call waiting on the worker reads its CPU time
logger = logging.getLogger("tandem_rlvr")

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_INVISIBLE = re.compile(r"\\(?:left|right)(?![A-Za-z])|\\[!,;: ]|\$")
_UNNEEDED_SPACE = re.compile(r"(?<![A-Za-z]) | (?![A-Za-z])")  # keep only letter-space-letter
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm)\s*\{([^{}]*)\}")
# AMC-style solutions box the choice label with the value, "\textbf{(B)}\ 7": grade the value.
_SPACING = r"(?:\s|~|\\[ ,;:!]|\\q?quad)*"
_LABEL = rf"\\(?:textbf|text|mathrm)\s*\{{{_SPACING}\(\s*[A-E]\s*\){_SPACING}"  # "\textbf{(B)" + spacing
_LABEL_THEN_VALUE = re.compile(rf"(?:{_LABEL}\}}|\(\s*[A-E]\s*\)){_SPACING}")  # "\textbf{(B)}\ 7", "(B) 7"
_VALUE_IN_LABEL = re.compile(rf"{_LABEL}([^{{}}]+)\}}")  # "\textbf{(E) 24}"
# What may stand between two boxes of one final run (answer_mode "final-boxes"): spacing,
# punctuation, math delimiters, "and"/"or", also as \text{ and }.
_JOIN_WORD = r"(?:and|or)"
_BOX_JOINER = re.compile(rf"(?:\s|[,;.~&]|\$|\\[()\[\]]|\\\\|\\q?quad(?![A-Za-z])|\\[ ,;:!]|{_JOIN_WORD}"
                         rf"|\\(?:text|mathrm)\s*\{{\s*(?:{_JOIN_WORD}|,)?\s*\}})*")
ANSWER_MODES = ("last-box", "final-boxes")
# ours: this module (fast path, math-verify with repairs, choice labels); paper: the paper's cascade
# (paper_grader.py; docs/paper_fidelity.md says which figures each gives)
GRADERS = ("ours", "paper")


def extract_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{}``/``\\fbox{}`` in ``text``; None if absent, empty or unclosed."""
    if not isinstance(text, str):
        return None
    boxes = list(_BOX.finditer(text))
    if not boxes:
        return None
    content, _ = _box_at(text, boxes[-1])
    return content


def extract_boxed_run(text: str) -> str | None:
    """The final run of boxes joined with ", ": the last box and every box before it that only
    separators divide from the next (spaces, ``,`` ``;`` ``.``, ``and``/``or``, ``$``, ``\\quad``, ...).

    ``... \\boxed{(2, 2)} and \\boxed{(6, 2)}.`` -> ``(2, 2), (6, 2)``. One final box -> its contents,
    exactly as ``extract_boxed``; an unclosed last box -> None; a choice label is dropped per box.
    """
    if not isinstance(text, str):
        return None
    parts, next_start = [], None
    for m in reversed(list(_BOX.finditer(text))):
        content, end = _box_at(text, m)
        if next_start is not None and (end > next_start or not _BOX_JOINER.fullmatch(text[end:next_start])):
            break
        if content is None:  # empty or unclosed: a missing answer if it is the last box, else the run's end
            if next_start is None:
                return None
            break
        parts.append(_strip_choice_label(content))
        next_start = m.start()
    return ", ".join(reversed(parts)) if parts else None


def _box_at(text: str, m: re.Match) -> tuple[str | None, int]:
    """(contents or None if empty/unclosed, index just past the box) of the box command matched by ``m``."""
    start = m.end()
    while start < len(text) and text[start].isspace():
        start += 1
    if not text.startswith("{", start):  # "\boxed 5": TeX-style, up to the end of the math or line
        content = re.split(r"[$\n]", text[start:], maxsplit=1)[0]
        return content.strip() or None, start + len(content)
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == "\\":  # \{ \} \\ never open or close the box
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i].strip() or None, i + 1
        i += 1
    return None, len(text)


def _strip_choice_label(pred: str) -> str:
    """Drop a leading choice label, ``\\textbf{(B)}\\ 7`` -> ``7``; a bare label is left alone."""
    inside = _VALUE_IN_LABEL.fullmatch(pred)
    if inside:
        return inside.group(1).strip()
    label = _LABEL_THEN_VALUE.match(pred)
    return pred[label.end() :] if label and pred[label.end() :].strip() else pred


def _normalise(s: str) -> str:
    """Spelling-only normalisation for the fast path; never changes what an expression means."""
    s = _TEXT_WRAPPER.sub(r"\1", s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac"))
    s = _INVISIBLE.sub("", s)
    s = " ".join(s.split()).rstrip(".").strip()
    return _UNNEEDED_SPACE.sub("", s)


def _as_text(answer: object) -> str | None:
    """A gold answer as text: strings stripped, 27.0 -> "27"; anything else -> None."""
    if isinstance(answer, str):
        return answer.strip() or None
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return str(answer)
    if isinstance(answer, float) and answer == answer:
        return str(int(answer)) if answer.is_integer() else repr(answer)
    return None


class _WorkerFailure(Exception):
    """The worker died, timed out or answered out of protocol; it must be replaced."""


class _Worker:
    """One math-verify subprocess and the JSON-lines protocol to it. Callers hold ``_LOCK``."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self._buf = b""
        self._ready = False
        self._next_id = 0

    def start(self) -> None:
        """Spawn a worker without waiting for it: its imports overlap whatever the caller does next."""
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])
        if src not in {str(Path(p).resolve()) for p in sys.path if p}:  # e.g. an editable install
            env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-m", WORKER_MODULE]
        # The kernel's parent-death signal fires when the spawning *thread* exits; only the
        # main thread lives as long as the process.
        if threading.current_thread() is threading.main_thread():
            cmd += ["--parent-pid", str(os.getpid())]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env)
        self._buf, self._ready = b"", False

    def stop(self) -> None:
        """SIGKILL and reap the worker (it holds no state worth a graceful exit)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()

    def abandon(self) -> None:
        """In a forked child: drop our copies of the pipes; the process belongs to the parent."""
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.proc.returncode = 0  # not our child: never wait for or kill it
            self.proc = None

    def ask(self, pred: str, gold: str, timeout: float, grader: str = "ours") -> bool:
        """The worker's verdict (math-verify for ``ours``, stages 2-3 of ``paper_grader`` for ``paper``)
        within ``timeout`` seconds; raises ``_WorkerFailure`` otherwise."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        if not self._ready:
            try:
                hello = json.loads(self._read_line(STARTUP_TIMEOUT, "start", _clock(self.proc.pid)[0]))
                if hello.get("ready") is not True:
                    raise _WorkerFailure("worker did not announce itself")
            except (_WorkerFailure, ValueError) as e:
                raise _StartFailure(str(e)) from None
            self._ready = True
        self._next_id += 1
        request = {"id": self._next_id, "pred": pred, "gold": gold, **({"grader": grader} if grader != "ours" else {})}
        cpu0 = _clock(self.proc.pid)[0]
        self._send(json.dumps(request).encode() + b"\n")
        reply = json.loads(self._read_line(timeout, "verify", cpu0))
        if reply.get("id") != self._next_id:
            raise _WorkerFailure(f"reply out of order: {reply!r:.80}")
        return reply["ok"] is True

    def _send(self, data: bytes) -> None:
        view, fd = memoryview(data), self.proc.stdin.fileno()
        try:
            while view:
                view = view[os.write(fd, view) :]
        except OSError as e:
            raise _WorkerFailure(f"worker pipe closed ({e})") from None

    def _read_line(self, timeout: float, what: str, cpu0: float | None = None) -> bytes:
        """The worker's next line within ``timeout`` seconds of its CPU time from ``cpu0`` on (its reading
        when the request was sent), and within WALL_FACTOR x ``timeout`` of wall-clock while it is not
        runnable (stopped, sleeping, blocked: a worker running or waiting for a core is in state R, and
        those polls do not count); without a CPU reading (no /proc), of plain wall-clock."""
        wall = timeout * WALL_FACTOR if cpu0 is not None else timeout
        idle, last, fd = 0.0, time.monotonic(), self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            if cpu0 is not None:
                cpu, state = _clock(self.proc.pid)
                now = time.monotonic()
                if state != "R":
                    idle += now - last
                last = now
                if cpu is not None and cpu - cpu0 > timeout:
                    raise _WorkerFailure(f"{what} used more than {timeout:g} s of CPU")
            else:
                idle = time.monotonic() - last
            if idle >= wall:
                raise _WorkerFailure(f"{what} timed out after {wall:g} s of wall-clock"
                                     + (" not runnable" if cpu0 is not None else ""))
            if not select.select([fd], [], [], min(wall - idle, _POLL_S) if cpu0 is not None else wall - idle)[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _WorkerFailure(f"worker exited (status {self.proc.wait()}) during {what}")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line


class VerifierUnavailable(TandemError):
    """The worker cannot be started (twice running): raised by ``equivalent`` and ``score``, never scored."""


class _StartFailure(_WorkerFailure):
    """The worker did not start (or did not announce itself) within its start-up bound."""


def _clock(pid: int) -> tuple[float | None, str | None]:
    """(user plus system CPU seconds, scheduler state letter) of process ``pid`` from /proc/<pid>/stat
    (Linux); (None, None) where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), fields[0]  # utime, stime; state
    except (OSError, IndexError, ValueError):
        return None, None


_LOCK = threading.Lock()
_WORKER = _Worker()


def equivalent(pred: str, gold: str, *, timeout: float = DEFAULT_TIMEOUT, grader: str = "ours") -> bool:
    """The worker's verdict on two bare answers (no extraction, no fast path), time-limited:
    math-verify with our repairs (``ours``) or the paper's stages 2-3 (``paper``, ``paper_grader``).

    False on a timeout or a worker failure (logged as a warning; the worker is replaced);
    ``VerifierUnavailable`` when a worker fails to start twice running.
    """
    with _LOCK:
        try:
            try:
                return _WORKER.ask(pred, gold, timeout, grader)
            except _StartFailure as e:  # once more with a fresh worker; twice is a broken worker, not a verdict
                logger.warning("math verifier: %s; starting another worker", e)
                _WORKER.stop()
                try:
                    return _WORKER.ask(pred, gold, timeout, grader)
                except _StartFailure as again:
                    _WORKER.stop()
                    raise VerifierUnavailable(f"math verifier: its worker process does not start ({again}; "
                                      f"`{sys.executable} -m {WORKER_MODULE}` shows why)") from None
        except VerifierUnavailable:
            raise
        except (_WorkerFailure, OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            logger.warning("math verifier: %s on %.80r vs gold %.80r; scored 0, worker restarted", e, pred, gold)
            _WORKER.stop()
            with contextlib.suppress(OSError):  # if it cannot start now, the next call tries again
                _WORKER.start()
            return False


def score(response: str, answer: str, *, timeout: float = DEFAULT_TIMEOUT, answer_mode: str = "last-box",
          grader: str = "ours") -> float:
    """1.0 if the last ``\\boxed{}`` of ``response`` is equivalent to ``answer``, else 0.0.

    Never raises (an unknown ``answer_mode`` or ``grader`` scores 0.0 and logs an error), but for
    ``VerifierUnavailable`` when the worker cannot be started: no verdict then is 0.0. ``timeout``
    (seconds) bounds the worker's call; past it the answer is 0.0. ``answer_mode``: ``last-box``
    (the paper's, the default) grades the last box; ``final-boxes`` (opt-in, beyond the paper)
    grades the final run of boxes joined with ", " (``extract_boxed_run``), for multi-answer
    problems answered one box per answer. ``grader``: ``ours`` (this module, the default) or
    ``paper`` (the paper's cascade, ``paper_grader``; last box only).
    """
    try:
        check_grader(grader, answer_mode)
        if grader == "paper":
            return _score_paper(response, answer, float(timeout))
        if answer_mode == "last-box":
            pred = extract_boxed(response)
            pred = _strip_choice_label(pred) if pred is not None else None
        elif answer_mode == "final-boxes":
            pred = extract_boxed_run(response)
        else:
            raise ValueError(f"unknown answer_mode {answer_mode!r}; valid: {', '.join(ANSWER_MODES)}")
        gold = _as_text(answer)
        if pred is None or gold is None:
            return 0.0
        if _normalise(pred) == _normalise(gold):
            return 1.0
        return 1.0 if equivalent(pred, gold, timeout=float(timeout)) else 0.0
    except VerifierUnavailable:  # the verifier cannot run at all (its worker does not start): not a verdict
        raise
    except Exception:  # otherwise "never raises": a bug here must not kill a training run
        logger.exception("math verifier: unexpected error; scored 0")
        return 0.0


def _score_paper(response: str, answer: object, timeout: float) -> float:
    """The paper's grader: its extraction and stage 1 here, stages 2-3 in the worker (``paper_grader``)."""
    from .paper_grader import extract_answer, gold_text, mathd_equal

    pred, gold = extract_answer(response), _as_text(answer)
    gold = gold_text(gold) if gold is not None else None
    if pred is None or gold is None:
        return 0.0
    if mathd_equal(pred, gold):
        return 1.0
    return 1.0 if equivalent(pred, gold, timeout=timeout, grader="paper") else 0.0


def check_grader(grader: str, answer_mode: str = "last-box") -> str:
    """``grader`` if it is one of ``GRADERS`` (and, for ``paper``, the answer mode is ``last-box``, the
    only one the paper's grader has), else a ``TandemError``."""
    if grader not in GRADERS:
        raise TandemError(f"unknown grader {grader!r}; valid: {', '.join(GRADERS)}")
    if grader == "paper" and answer_mode != "last-box":
        raise TandemError(f"--grader paper grades the last box only; --answer-mode {answer_mode} needs --grader ours")
    return grader


def check_answer_mode(answer_mode: str) -> str:
    """``answer_mode`` if it is one of ``ANSWER_MODES``, else a ``TandemError`` listing them."""
    if answer_mode not in ANSWER_MODES:
        raise TandemError(f"unknown answer mode {answer_mode!r}; valid: {', '.join(ANSWER_MODES)}")
    return answer_mode


def _after_fork_in_child() -> None:
    global _LOCK, _WORKER
    _LOCK = threading.Lock()
    _WORKER.abandon()
    _WORKER = _Worker()


def _shutdown() -> None:
    locked = _LOCK.acquire(timeout=1.0)  # a daemon thread may be stuck mid-call; kill regardless
    try:
        _WORKER.stop()
    finally:
        if locked:
            _LOCK.release()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_shutdown)

VERIFIERS: dict[str, Callable[..., float]] = {"math": score}
# The files whose source decides a verdict; their hash is the grader's version (``grader_identity``).
GRADER_SOURCES = ("math.py", "_worker.py", "notation.py", "paper_grader.py", "paper_normalise.py")
GRADER_PACKAGES = ("math-verify", "latex2sympy2_extended", "sympy", "antlr4-python3-runtime", "pylatexenc")


def grader_identity() -> dict:
    """What a verdict depends on: tandem-rlvr's version, a SHA-256 of the grader's source files
    (``GRADER_SOURCES``) and the installed versions of the packages math-verify parses with.
    Recorded by ``tandem eval regrade`` so a regraded result names the grader that made it."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in GRADER_SOURCES:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    packages = {}
    for name in GRADER_PACKAGES:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    return {"tandem_rlvr": __version__, "grader_sha256": digest.hexdigest(), "packages": packages}


def get_verifier(name: str) -> Callable[..., float]:
    """The verifier registered as ``name``; a ``TandemError`` lists the valid names otherwise."""
    try:
        return VERIFIERS[name]
    except KeyError:
        raise TandemError(f"unknown verifier {name!r}; valid: {', '.join(sorted(VERIFIERS))}") from None
