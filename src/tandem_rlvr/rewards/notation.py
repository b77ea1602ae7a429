"""Notation the math verifier rewrites before math-verify parses an answer (both sides alike).

What: ``canonical(expr)`` turns spellings that math-verify misreads into LaTeX it reads
exactly, without changing the value; ``float_rounding(gold)`` picks the decimal places at
which a float answer is compared with a numeric gold answer. Used by ``_worker.py``.

Why (measured on the paper's released Minerva generations, ``docs/verifier_and_data.md``):

- **Scientific notation.** 58 of the 272 Minerva golds are Python-style literals (``4.5e33``,
  ``2.55e-10``), which LaTeX parsing reads as ``4.5 * e * 33`` with Euler's e; answers write
  ``4.5 \\times 10^{33}``, which math-verify reads as a float. Both forms become one exact
  rational (``4500...0``, ``\\frac{255}{1000000000000}``), so they compare by value and no float
  rounding is involved. The exact form matters: math-verify compares an unevaluated
  ``\\frac{1}{10^{20}}`` with ``\\frac{11}{10^{21}}`` after ``evalf(chop=True)`` and calls them equal.
- **Code-style golds** (``np.arcsin(10/13)``, ``math.sqrt(2)``, ``2**3``) become LaTeX
  (``\\arcsin(10/13)``, ``\\sqrt{2}``, ``2^3``).
- **Small numbers.** math-verify rounds floats to 6 decimal places (absolute) before comparing,
  so every float below 5e-7 equals 0 and ``2.56 \\times 10^{-10}`` would equal ``2.55e-10``.
  ``float_rounding`` keeps at least 3 significant digits of the gold value (more places for
  |gold| < 1e-3; math-verify's 6 elsewhere, so nothing it accepted for larger values changes).

Decision on ``e`` (documented in ``docs/verifier_and_data.md``): a literal that is digits, an
``e``/``E`` and a signed integer with nothing between (``2e-3``, ``4.5E+33``) is scientific
notation, as Python, C and JSON write it; anything else with ``e`` (``2e``, ``2 e^{3}``,
``2e - 3`` with spaces, ``e^{-2t}``) is left to math-verify, which reads ``e`` as Euler's number.
So ``\\boxed{2e}`` is 2e = 5.43..., never 2 or 2e0.

Units are not converted: ``5\\text{ m/s}`` and ``5 \\mathrm{kg}`` grade as 5 (math-verify drops
the unit), so an answer in another unit (``16 \\text{ mm}`` for 1.6 cm) is compared by its
number and fails.
"""

from __future__ import annotations

import math
import re

# Exponents beyond this stay as written (a 10^400 literal would be a 400-digit string).
MAX_EXPONENT = 300
_MANTISSA = r"(\d+(?:\.\d*)?|\.\d+)"
# "4.5e33", "2.55E-10": one literal; not part of a longer word, number or macro.
_E_LITERAL = re.compile(rf"(?<![\w.\\]){_MANTISSA}[eE]([+-]?\d+)(?![\w.])")
# "4.5 \times 10^{33}", "2.55\cdot10^{-10}", "3 * 10^5": only where the product is the whole
# operand (not after "/", "^" or "_", where rewriting would regroup the expression; see
# _rewrite_times_power).
_TIMES_POWER = re.compile(
    rf"(?<![\w.\\]){_MANTISSA}\s*(?:\\times|\\cdot|\*|×)\s*10\s*\^\s*(?:\{{\s*([+-]?\d+)\s*\}}|([+-]?\d))(?![\d.])"
)
_CODE_MODULE = re.compile(r"\b(?:np|numpy|math|sympy|sp)\.")
_CODE_FUNCTIONS = {"arcsin": r"\arcsin", "arccos": r"\arccos", "arctan": r"\arctan", "asin": r"\arcsin",
                   "acos": r"\arccos", "atan": r"\arctan", "sinh": r"\sinh", "cosh": r"\cosh", "tanh": r"\tanh",
                   "sin": r"\sin", "cos": r"\cos", "tan": r"\tan", "log10": r"\log_{10}", "log": r"\ln", "ln": r"\ln"}
_CODE_NAME = re.compile(r"(?<![\\\w])(" + "|".join(sorted(_CODE_FUNCTIONS, key=len, reverse=True)) + r"|sqrt|exp|pi)\b")


def _exact(mantissa: str, exponent: int) -> str | None:
    """mantissa x 10^exponent as an exact LaTeX integer or fraction of integers; None if too large."""
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0") or "0"
    power = exponent - len(frac)
    if abs(power) > MAX_EXPONENT:
        return None
    if digits == "0":
        return "0"
    if power >= 0:
        return digits + "0" * power
    return rf"\frac{{{digits}}}{{1{'0' * -power}}}"


def _rewrite_e_literal(m: re.Match) -> str:
    return _exact(m.group(1), int(m.group(2))) or m.group(0)


def _rewrite_times_power(m: re.Match) -> str:
    if m.string[: m.start()].rstrip()[-1:] in ("/", "^", "_"):  # "1/2 \times 10^3" is (1/2) x 10^3
        return m.group(0)
    return _exact(m.group(1), int(m.group(2) or m.group(3))) or m.group(0)


def _close(text: str, open_at: int) -> int:
    """Index of the parenthesis closing the one at ``open_at``; -1 if unbalanced."""
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def _code_to_latex(expr: str) -> str:
    """``np.arcsin(10/13)`` -> ``\\arcsin(10/13)``; ``math.sqrt(x)`` -> ``\\sqrt{x}``; ``**`` -> ``^``."""
    expr = _CODE_MODULE.sub("", expr).replace("**", "^")
    out, pos = [], 0
    for m in _CODE_NAME.finditer(expr):
        if m.start() < pos:
            continue
        out.append(expr[pos : m.start()])
        name, pos = m.group(1), m.end()
        if name == "pi":
            out.append(r"\pi ")
            continue
        if name in ("sqrt", "exp") and expr.startswith("(", pos):
            end = _close(expr, pos)
            if end > 0:
                inner = _code_to_latex(expr[pos + 1 : end])
                out.append(rf"\sqrt{{{inner}}}" if name == "sqrt" else rf"e^{{{inner}}}")
                pos = end + 1
                continue
        out.append(_CODE_FUNCTIONS.get(name, name))
    return "".join(out) + expr[pos:]


def canonical(expr: str) -> str:
    """``expr`` with scientific notation made exact and code-style functions made LaTeX."""
    if _CODE_MODULE.search(expr) or "**" in expr:
        expr = _code_to_latex(expr)
    expr = _TIMES_POWER.sub(_rewrite_times_power, expr)
    return _E_LITERAL.sub(_rewrite_e_literal, expr)


def float_rounding(gold_value: object, default: int = 6) -> int:
    """Decimal places for math-verify's float comparison against a numeric gold value.

    ``default`` (math-verify's 6) for |gold| >= 1e-3 or a gold that is not a plain nonzero
    number; for smaller golds enough places to keep 3 significant digits (2.55e-10 -> 13).
    """
    try:
        magnitude = abs(float(gold_value))
    except (TypeError, ValueError, OverflowError):
        return default
    if not magnitude or not math.isfinite(magnitude):
        return default
    return max(default, 3 - math.floor(math.log10(magnitude)))
