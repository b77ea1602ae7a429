"""User-facing errors.

Anything a user can get wrong (a path, a flag, a malformed row) raises ``TandemError``
with a one-line message that names the bad input. The CLI prints it without a traceback
and exits with status 2; library callers can catch it like any ``ValueError``.
``check_number`` is the one rule for every numeric setting (``cli.flags.number`` is its form for flags).
"""

class TandemError(ValueError):
    """Bad input from the user; the message is one line and names the input."""


def number_rule(lo=None, hi=None, *, lo_open: bool = False, integer: bool = False) -> str:
    """The rule ``check_number`` enforces, in words: "an integer >= 1", "a finite number in (0, 1]"."""
    kind = "an integer" if integer else "a finite number"
    lo, hi = (x if x is None or isinstance(x, int) else f"{x:g}" for x in (lo, hi))
    if lo is not None and hi is not None:
        return f"{kind} in {'(' if lo_open else '['}{lo}, {hi}]"
    if lo is not None:
        return f"{kind} {'>' if lo_open else '>='} {lo}"
    return f"{kind} <= {hi}" if hi is not None else kind


def check_number(value, name: str, lo=None, hi=None, *, lo_open: bool = False, integer: bool = False,
                 optional: bool = False):
    """``value`` if it is a finite number (an int with ``integer``) in [lo, hi] ((lo, hi] with ``lo_open``);
    else a TandemError naming ``name`` and the rule. NaN and inf always fail (NaN compares false with
    every bound, so a plain ``x < lo`` test would let it through); None passes with ``optional``.
    The one check of every numeric setting: config fields, flags (``cli.flags.number``), $TANDEM_THREADS."""
    import math

    if value is None and optional:
        return None
    real = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = real and (isinstance(value, int) if integer else math.isfinite(value))
    if ok and lo is not None:
        ok = value > lo if lo_open else value >= lo
    if ok and hi is not None:
        ok = value <= hi
    if not ok:
        raise TandemError(f"{name} must be {number_rule(lo, hi, lo_open=lo_open, integer=integer)}, got {value!r}")
    return value
