"""The paper's math grader (``--grader paper``), written here from the rules of its released code.

The paper trains and evaluates with ``boxed_reward_fn(fast=False)`` (CSSLab/Tandem-RLVR
``reward/math_boxed_reward.py`` and ``reward/hendrycks_math_grader.py``). Its rules, which this
module follows (normalisations in ``paper_normalise``):

**Extraction** (``extract_answer``). No ``\\boxed`` anywhere -> no answer (score 0). Otherwise the
last ``\\boxed`` is taken; from it, braces are counted (every ``{`` and ``}``, escaped ones too) up
to the ``}`` that brings the count back to zero; no such brace (an unclosed box) -> no answer. The
span must start with ``\\boxed{``: ``\\boxed 5`` is no answer. ``\\fbox`` never counts: the fall-back
to ``\\fbox`` in the paper's box finder is unreachable (its caller gives up when the text holds no
``\\boxed``, and only ``\\boxed{`` is unwrapped). A gold answer holding ``\\boxed`` is extracted the
same way. An empty box is the answer "".

**Equivalence**, a cascade; the first stage that says yes decides 1:

1. mathd: ``mathd_normalise(answer) == mathd_normalise(gold)``;
2. sympy (``sympy_equal``): both ``sympy_normalise``d; equal strings -> yes; an empty answer -> no;
   both split as tuples/intervals (``(``/``)``/``[``/``]`` around comma-separated elements, no bracket
   inside); a gold of several elements needs the same opening and closing bracket; the element
   counts must agree; per element, two fractions ``a/b`` must be equal as strings (an unreduced
   fraction is wrong), an integer against a non-integer is wrong, anything else is yes when
   ``sympy.simplify(gold - answer) == 0``; sympy is not tried on an expression with more than two
   distinct letters (``sqrt``, ``frac`` aside), ``^{``, ``^(``, ``^12`` or ``^2^``;
3. math-verify (``math_verify_equal``), all of it under a 1 s alarm: an answer or gold longer than
   128 characters that is repetitive (``is_repetitive``) is wrong (the release then repeats stage
   2's string comparison, which cannot say yes here); newlines dropped, each side wrapped in ``$...$``
   unless it has a ``$``, and
   math-verify's ``verify(parse(gold), parse(answer))`` with LaTeX (boxed priority 0) and plain
   expression extraction, no fall-back, 1 s parse and verify limits. The release passes
   ``extraction_mode=["first_match"]``, a list, which math-verify compares with the string
   ``"first_match"`` and therefore runs as ``any_match``; so does this module.

An exception in stage 2 scores 0 (the release wraps the whole call); in stage 3 it is a no.

Where ours differs (``docs/paper_fidelity.md``): stages 2 and 3 run in the grader's subprocess
(``_worker.py``), so a call is also cut at ``score``'s ``timeout`` (default 5 s), which the
release does not bound in stage 2 (its sympy check has no limit).

Run: ``python -c "from tandem_rlvr.rewards.math import score; print(score('\\\\boxed{0.5}', '1/2', grader='paper'))"``
"""

from __future__ import annotations

import re
import signal

import sympy
from sympy.parsing import sympy_parser

from .paper_normalise import is_integer_text, mathd_normalise, strip_thousands_commas, sympy_normalise

_BRACKETS = "()[]"
_FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
_UNSAFE_POWERS = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))
_SYMPY_TRANSFORMS = sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,)
REPETITION_MIN_CHARS = 128
REPETITION_SHARE = 0.2
STAGE3_SECONDS = 1


def extract_answer(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` of ``text`` by the paper's rules (module docstring)."""
    if not isinstance(text, str) or "\\boxed" not in text:
        return None
    start, depth = text.rfind("\\boxed"), 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                span = text[start : i + 1]
                return span[len("\\boxed{") : -1] if span.startswith("\\boxed{") else None
    return None


def gold_text(answer: str) -> str | None:
    """The gold as the paper grades it: a gold holding ``\\boxed`` is reduced to its last box."""
    return extract_answer(answer) if "\\boxed" in answer else answer


def mathd_equal(pred: str, gold: str) -> bool:
    """Stage 1: the mathd normalisations are equal."""
    return mathd_normalise(gold) == mathd_normalise(pred)


def split_elements(expr: str) -> list[str]:
    """A tuple or interval's elements (``(1,2]`` -> ``["1", "2"]``); anything else is one element."""
    expr = strip_thousands_commas(expr)
    if not expr:
        return []
    if len(expr) > 2 and expr[0] in _BRACKETS and expr[-1] in _BRACKETS and not any(c in expr[1:-1] for c in _BRACKETS):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


def sympy_may_try(expr: str) -> bool:
    """Whether stage 2 lets sympy parse ``expr`` (at most two letters, no nested or long powers)."""
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr:
        return False
    return not any(p.search(expr) for p in _UNSAFE_POWERS)


def _sympy_zero_difference(gold: str, pred: str) -> bool:
    expr = f"({gold})-({pred})"
    if not sympy_may_try(expr):
        return False
    try:
        diff = sympy_parser.parse_expr(expr.replace("^", "**"), transformations=_SYMPY_TRANSFORMS)
        return sympy.simplify(diff) == 0
    except Exception:  # sympy's parser raises anything from SyntaxError to TypeError
        return False


def sympy_equal(pred: str, gold: str) -> bool:
    """Stage 2 (module docstring): tuple-aware, strict on fractions and integers, else sympy."""
    g, p = sympy_normalise(gold), sympy_normalise(pred)
    if g is None:
        return False
    if g == p:
        return True
    if not p:
        return False
    g_elems, p_elems = split_elements(g), split_elements(p)
    if len(g_elems) > 1 and (g[0] != p[0] or g[-1] != p[-1]):
        return False
    if len(g_elems) != len(p_elems):
        return False
    for ge, pe in zip(g_elems, p_elems, strict=True):
        if _FRACTION.search(ge) and _FRACTION.search(pe):
            ok = ge == pe
        elif is_integer_text(ge) != is_integer_text(pe):
            ok = False
        else:
            ok = _sympy_zero_difference(ge, pe)
        if not ok:
            return False
    return True


def lcp_share(s: str) -> float:
    """Sum, over the suffixes of ``s`` in sorted order, of each one's common prefix with the next,
    divided by n(n + 1)/2: 0 for all-distinct characters, near 1 for one character repeated."""
    n = len(s)
    if n <= 1:
        return 0.0
    order = sorted(range(n), key=lambda i: s[i:])
    rank = [0] * n
    for r, i in enumerate(order):
        rank[i] = r
    total, h = 0, 0
    for i in range(n):  # Kasai: the common prefix with the next suffix in order drops by at most 1
        if rank[i] == n - 1:
            h = 0
            continue
        j = order[rank[i] + 1]
        while i + h < n and j + h < n and s[i + h] == s[j + h]:
            h += 1
        total += h
        h = max(h - 1, 0)
    return total * 2 / (n * (n + 1))


def is_repetitive(s: str) -> bool:
    """The paper's repetition guard: over 128 characters and a common-prefix share above 0.2."""
    return len(s) > REPETITION_MIN_CHARS and lcp_share(s) > REPETITION_SHARE


class _Alarm(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Alarm()


def math_verify_equal(pred: str, gold: str) -> bool:
    """Stage 3 (module docstring), under a 1 s ``SIGALRM``: main thread only (the grader's worker).

    math-verify's own 1 s limits re-arm and then clear the same alarm, as in the release."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(STAGE3_SECONDS)
    try:
        if is_repetitive(pred) or is_repetitive(gold):
            return False
        sides = []
        for side in (gold, pred):
            side = side.replace("\n", "")
            sides.append(parse(side if "$" in side else f"${side}$",
                               extraction_config=(LatexExtractionConfig(boxed_match_priority=0),
                                                  ExprExtractionConfig()),
                               fallback_mode="no_fallback", extraction_mode="any_match",
                               parsing_timeout=STAGE3_SECONDS))
        return bool(verify(sides[0], sides[1], timeout_seconds=STAGE3_SECONDS))
    except Exception:  # _Alarm included: a no
        return False
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def later_stages_equal(pred: str, gold: str) -> bool:
    """Stages 2 and 3 (what the grader's worker runs; stage 1 is decided before it is asked)."""
    try:
        if sympy_equal(pred, gold):
            return True
    except Exception:  # the release scores 0 when stage 2 raises
        return False
    return math_verify_equal(pred, gold)
