"""User-facing errors.

Anything a user can get wrong (a path, a flag, a malformed row) raises ``TandemError``
with a one-line message that names the bad input. The CLI prints it without a traceback
and exits with status 2; library callers can catch it like any ``ValueError``.
``check_number`` is the one rule for every numeric setting (``cli.flags.number`` is its form for flags).
``collective_failure`` words a failed collective between training processes as one line too.
"""

class TandemError(ValueError):
    """Bad input from the user; the message is one line and names the input."""


GLOO_MARKS = ("/gloo/", "pair closure", "Connection closed by peer", "ProcessGroupGloo", "ProcessGroupNCCL")


def collective_failure(e: BaseException) -> str | None:
    """One line for a collective between training processes that failed (a process or machine
    lost, a wait past ``dist_timeout_s``): torch.distributed's ``DistError``, or the plain
    RuntimeError gloo raises ("[.../gloo/...] Timed out waiting ...", "... pair closure"); else None."""
    dist_error = any(c.__name__ == "DistError" and c.__module__.startswith("torch") for c in type(e).__mro__)
    if not dist_error and not (isinstance(e, RuntimeError) and any(m in str(e) for m in GLOO_MARKS)):
        return None
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    return (f"a collective between the training processes failed (a lost process or machine, or one that stopped "
            f"past --dist-timeout-s): {first}")


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
