"""The math-verify subprocess behind ``tandem_rlvr.rewards.math``.

What: a loop that reads one JSON request per line on stdin, decides with math-verify whether a
predicted answer equals the gold answer, and writes one JSON reply per line.

Why a separate process: sympy can hang for minutes (``9^{9^{9^{9}}}``), often inside C code that
no signal handler can interrupt, and math-verify's own timeout relies on ``SIGALRM``, which only
works on the main thread. Here math-verify's timeouts are switched off; the parent enforces the
time limit by killing this process (SIGKILL) and starting a fresh one.

Protocol (UTF-8 JSON lines; the worker answers requests strictly in order)::

    worker -> parent   {"ready": true}                               once, after the imports
    parent -> worker   {"id": 7, "pred": "\\frac12", "gold": "0.5"}   the boxed contents, unwrapped
    worker -> parent   {"id": 7, "ok": true}

A request with ``"grader": "paper"`` is decided by stages 2-3 of the paper's grader instead
(``paper_grader.later_stages_equal``: its sympy check, then math-verify under its own 1 s alarm,
which works here because this loop runs on the main thread).

The worker exits at end of input. With ``--parent-pid PID`` (Linux) it also asks the kernel to
SIGKILL it when the parent dies, so a hung worker never outlives a killed trainer.

Run by hand::

    echo '{"id": 1, "pred": "\\\\frac12", "gold": "0.5"}' | python -m tandem_rlvr.rewards._worker
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
from functools import lru_cache

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from tandem_rlvr.rewards.notation import canonical, float_rounding

# Both sides arrive as bare boxed contents; re-wrapping them in \boxed{} makes math-verify
# extract exactly that expression (and apply its unit/\text/degree normalisation to it).
_EXTRACTION = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
_PR_SET_PDEATHSIG = 1
# Spelling repairs for LaTeX that math-verify fails to parse, applied to both sides before parse:
# a symbol macro as an unbraced argument (\frac\pi2 is read as "\frac{\}{p}i2"), the "{-}" minus
# idiom, and \big/\Big delimiter sizing (math-verify knows \left/\right only).
_REPAIRS = (
    (re.compile(r"\\([dt]?frac|sqrt)\s*(\\(?!(?:[dt]?frac|sqrt)(?![A-Za-z]))[A-Za-z]+)"), r"\\\1{\2}"),
    (re.compile(r"\{-\}"), "-"),
    (re.compile(r"\\[Bb]igg?[lr]?(?![A-Za-z])"), ""),
)


@lru_cache(maxsize=4096)
def _parse(expr: str) -> list:
    """math-verify's parse of ``\\boxed{expr}`` after ``notation.canonical`` and the spelling repairs;
    cached, since a group repeats gold and often answers."""
    expr = canonical(expr)
    for pattern, replacement in _REPAIRS:
        expr = pattern.sub(replacement, expr)
    return parse("\\boxed{" + expr + "}", list(_EXTRACTION), parsing_timeout=None)


def equivalent(pred: str, gold: str) -> bool:
    """True iff math-verify finds ``pred`` equivalent to ``gold`` (no time limit: the parent's job).

    Floats are compared at ``notation.float_rounding`` places of a plain-number gold (math-verify's
    6 unless the gold is below 1e-3)."""
    gold_parsed, pred_parsed = _parse(gold), _parse(pred)
    if not (gold_parsed and pred_parsed):
        return False
    value = gold_parsed[0]
    places = float_rounding(value) if getattr(value, "is_Number", False) else 6
    return bool(verify(gold_parsed, pred_parsed, float_rounding=places, timeout_seconds=None))


def _die_with_parent(parent_pid: int) -> None:
    """Linux: have the kernel SIGKILL us when the parent dies; elsewhere rely on EOF at stdin."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parent-pid", type=int, default=None, help="die with this process (Linux)")
    args = ap.parse_args(argv)
    if args.parent_pid is not None:
        _die_with_parent(args.parent_pid)
    # math-verify warns once that its timeouts are off, and on every parse failure: noise here.
    logging.disable(logging.CRITICAL)
    # Keep the protocol channel private: anything a library prints goes to stderr, not the pipe.
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    from tandem_rlvr.rewards.paper_grader import later_stages_equal

    equivalent("1", "1")  # pay the lazy imports (sympy, the LaTeX parsers) before "ready"
    later_stages_equal("1", "2")
    channel.write('{"ready": true}\n')
    channel.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            same = later_stages_equal if request.get("grader") == "paper" else equivalent
            ok = same(str(request["pred"]), str(request["gold"]))
        except Exception:  # math-verify should not raise, but a reply is owed either way
            ok = False
        channel.write(json.dumps({"id": request["id"], "ok": ok}) + "\n")
        channel.flush()


if __name__ == "__main__":
    main()
