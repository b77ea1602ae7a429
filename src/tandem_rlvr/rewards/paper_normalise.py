"""The two string normalisations of the paper's grader (``--grader paper``), written from its rules.

What: ``mathd_normalise`` (the Hendrycks MATH normalisation as the paper's grader extends it: unit
words, ``k = `` prefixes, ``\\frac12`` -> ``\\frac{1}{2}``, ``0.5`` -> ``\\frac{1}{2}``, ``a/b`` ->
``\\frac{a}{b}``) and ``sympy_normalise`` (the PRM800K-style normalisation that precedes its sympy
check: ``\\text{}`` and ``$``/``%`` dropped, ``or``/``and`` -> ``,``, LaTeX turned into plain text by
pylatexenc, braces and spaces dropped, lower case, integers canonical). ``paper_grader`` compares
the results; stage 1 of its cascade is ``mathd_normalise(a) == mathd_normalise(b)``.

Why its own module: the paper's grader (CSSLab/Tandem-RLVR ``reward/hendrycks_math_grader.py``,
``boxed_reward_fn(fast=False)``) decides its training reward and its evaluation; a result meant to
line up with the paper's numbers must be graded by the same rules, quirks included. They are
kept exactly, not repaired:

- a unit word is removed wherever it stands alone between non-word characters, and the words are
  regular expressions, unescaped, as the paper's list holds them (``"q ."`` matches ``q x``); single
  letters (``a``, ``t``, ``h``, ``s``, ``m``, ...) are on that list, so ``\\boxed{a}`` normalises to
  ``\\boxed{}``-like text and ``x = a`` loses its ``a``; a rule that would leave nothing is skipped;
- a rule that fails (``\\frac`` or ``\\sqrt`` at the very end, two ``\\text{ `` units) makes the whole
  mathd normalisation fall back to the stripped input;
- the sympy normalisation drops the 16 unit names of its list anywhere, inside words too
  (``today`` -> ``to``).

Run: ``python -c "from tandem_rlvr.rewards.paper_normalise import mathd_normalise as m; print(m('x = \\\\dfrac12'))"``
"""

from __future__ import annotations

import re

# The unit words of the mathd stage, then each with an "s" (the paper's list, in its order; its
# entries are regular expressions, so "." matches any character).
_MATHD_UNITS = (
    "east", "degree", "mph", "kmph", "ft", "m sqaure", " m east", "sq m", "deg", "mile", "q .", "monkey",
    "prime", "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per", "dm", "lt", "gain", "ab",
    "way", "west", "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .", "t", "a", "h", "no change", "men",
    "soldier", "pie", "bc", "excess", "st", "inches", "noon", "percent", "by", "gal", "kmh", "c", "acre",
    "rise", "a . m", "th", "π r 2", "sq", "mark", "l", "toy", "coin", "sq . m", "gallon", "° f", "profit",
    "minw", "yr", "women", "feet", "am", "pm", "hr", "cu cm", "square", "v â € ™", "are", "rupee", "rounds",
    "cubic", "cc", "mtr", "s", "ohm", "number", "kmph", "day", "hour", "minute", "min", "second", "man",
    "woman", "sec", "cube", "mt", "sq inch", "mp", "∏ cm ³", "hectare", "more", "sec", "unit", "cu . m",
    "cm 2", "rs .", "rs", "kg", "g", "month", "km", "m", "cm", "mm", "apple", "liter", "loss", "yard", "pure",
    "year", "increase", "decrease", "d", "less", "Surface", "litre", "pi sq m", "s .", "metre", "meter", "inch",
)
_MATHD_UNIT_RES = tuple(re.compile(r"(^|\W)" + u + r"($|\W)")
                        for u in _MATHD_UNITS + tuple(u + "s" for u in _MATHD_UNITS))
_SYMPY_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month",
                "year", "foot", "feet", "inch", "yard")
_SYMPY_UNIT_RES = tuple(re.compile(rf"{u}(es)?(s)? *(\^[0-9]+)?") for u in _SYMPY_UNITS)
_ENCLOSING_TEXT = re.compile(r"^\\text\{(?P<text>.+?)\}$")
_FORMATTED_COMMA = re.compile(r"(\d)(,)(\d\d\d)($|\D)")


class _RuleFailed(Exception):
    """A mathd rule that cannot apply; the whole mathd normalisation then returns its stripped input."""


def _braced_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{72}`` -> ``\\frac{1}{72}``; unchanged if a ``\\frac`` has
    fewer than two characters after it (and not a brace)."""
    head, *rest = s.split("\\frac")
    out = [head]
    for part in rest:
        if not part:
            raise _RuleFailed("\\frac at the end")
        if part[0] == "{":
            out.append("\\frac" + part)
        elif len(part) < 2:
            return s
        elif part[1] == "{":
            out.append("\\frac{" + part[0] + "}" + part[1:])
        else:
            out.append("\\frac{" + part[0] + "}{" + part[1] + "}" + part[2:])
    return "".join(out)


def _braced_sqrt(s: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}`` (one character taken as the argument)."""
    head, *rest = s.split("\\sqrt")
    out = [head]
    for part in rest:
        if not part:
            raise _RuleFailed("\\sqrt at the end")
        out.append("\\sqrt" + part if part[0] == "{" else "\\sqrt{" + part[0] + "}" + part[1:])
    return "".join(out)


def _slash_to_frac(s: str) -> str:
    """``3/4`` (two plain integers) -> ``\\frac{3}{4}``; anything else unchanged."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _mathd_rules(s: str) -> str:
    """The mathd rules in the paper's order; raises ``_RuleFailed`` where one cannot apply."""
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "")
    cut = re.sub(r"\\text{.*?}$", "", s).strip()  # a trailing \text{...} unit
    if cut and cut != s:
        s = cut
    for _ in range(2):
        for unit in _MATHD_UNIT_RES:
            cut = unit.sub(r"\1\2", s)
            if cut:
                s = cut
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in s:  # a unit after "\text{ ": keep what is before it (there must be exactly one)
        parts = s.split("\\text{ ")
        if len(parts) != 2:
            raise _RuleFailed("two \\text{ units")
        s = parts[0]
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "k = 5" -> "5"
        s = sides[1]
    s = _braced_fracs(_braced_sqrt(s).replace(" ", ""))
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_to_frac(s)


def mathd_normalise(answer: str | None) -> str | None:
    """The mathd normalisation of ``answer`` (None stays None); see the module docstring."""
    if answer is None:
        return None
    answer = answer.strip()
    m = _ENCLOSING_TEXT.search(answer)
    if m is not None:
        answer = m.group("text").strip()
    try:
        return _mathd_rules(answer)
    except (_RuleFailed, IndexError):
        return answer


def strip_thousands_commas(expr: str) -> str:
    """``1,000,000`` -> ``1000000``; a comma not followed by exactly three digits (a tuple's) stays."""
    while True:
        nxt = _FORMATTED_COMMA.sub(r"\1\3\4", expr)
        if nxt == expr:
            return nxt
        expr = nxt


def is_float_text(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def is_integer_value(x: float) -> bool:
    """Within 1e-7 of an integer (inf and nan are not)."""
    try:
        return abs(x - int(round(x))) <= 1e-7
    except (OverflowError, ValueError):
        return False


def is_integer_text(s: str) -> bool:
    """A number (thousands commas allowed) within 1e-7 of an integer."""
    try:
        return is_integer_value(float(strip_thousands_commas(s)))
    except ValueError:
        return False


def _latex_to_text(expr: str) -> str:
    """LaTeX as plain text (pylatexenc), with the symbols sympy's parser needs spelled out."""
    from pylatexenc import latex2text

    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for sym, word in (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")):
        expr = expr.replace(sym, word)
    return expr.strip()


def sympy_normalise(expr: str | None) -> str | None:
    """The normalisation before the sympy check (and before math-verify); see the module docstring."""
    if expr is None:
        return None
    m = _ENCLOSING_TEXT.search(expr)
    if m is not None:
        expr = m.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for unit in _SYMPY_UNIT_RES:
        expr = unit.sub("", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if is_float_text(expr) and is_integer_value(float(expr)):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        try:
            expr = _latex_to_text(expr)
        except Exception:  # pylatexenc gave up: keep the LaTeX as it is
            pass
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", r"\1+\2", expr)  # a mixed number, 7 3/4 -> 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if is_integer_text(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr
