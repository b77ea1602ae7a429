"""The plain-value codec between a judge and the program it tests (stdlib only; both sides import it).

A value crosses the process boundary as one line of JSON, so that what arrives is data and never
behaviour: ``None``, ``bool``, ``int`` (any size), ``float`` (``inf``/``nan`` too), ``str`` and
``list`` as JSON itself; ``tuple``, ``dict``, ``set``, ``frozenset``, ``bytes``, ``complex`` and
builtin classes (``int``, as an argument: MBPP 533) as one-key tagged objects (``{"t": [...]}``,
``{"d": [[k, v], ...]}``, ``{"y": "int"}``, ...). Instances of subclasses of
these types travel as their base type (a namedtuple as a tuple, a ``Counter`` as a dict, a bool-free
``IntEnum`` as an int). Anything else is not copied: the sender's ``other`` callback turns it into a
reference (``{"h": id}`` for an object held in the program, ``{"g": name}`` for one of its globals),
which the receiver's ``ref`` callback maps back.

``decode`` accepts nothing but these forms: any other object, an unhashable set element or dict key,
or nesting past the recursion limit raises ``WireError``; it never runs code from the line.
"""

import builtins
import math
import sys
from json import dumps, loads  # bound at import: a program that replaces json's own changes nothing here

_TAGS = (("t", tuple), ("d", dict), ("s", set), ("f", frozenset), ("b", bytes), ("c", complex))


class WireError(ValueError):
    """A line that is not a value of this codec."""


def encode(value, other) -> str:
    """``value`` as one line; ``other(obj)`` gives the tagged reference of an object that is not plain data."""
    return dumps(pack(value, other), separators=(",", ":"))


def pack(v, other):
    """``v`` as JSON-ready data (``encode`` without the text)."""
    t = type(v)
    if v is None or t is bool or t is str or t is int:
        return v
    if t is float:
        return v if math.isfinite(v) else {"x": repr(v)}
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return pack(float(v), other)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, list):
        return [pack(x, other) for x in v]
    if isinstance(v, tuple):
        return {"t": [pack(x, other) for x in v]}
    if isinstance(v, dict):
        return {"d": [[pack(k, other), pack(x, other)] for k, x in v.items()]}
    if isinstance(v, frozenset):
        return {"f": [pack(x, other) for x in v]}
    if isinstance(v, set):
        return {"s": [pack(x, other) for x in v]}
    if isinstance(v, (bytes, bytearray)):
        return {"b": bytes(v).hex()}
    if isinstance(v, complex):
        return {"c": [pack(v.real, other), pack(v.imag, other)]}
    if isinstance(v, type) and getattr(builtins, v.__name__, None) is v:
        return {"y": v.__name__}
    return other(v)


def decode(line, ref):
    """The value of one line; ``ref(tag, key)`` maps a reference (``"h"``/``"g"``) to an object."""
    try:
        data = loads(line)
    except (ValueError, RecursionError) as e:
        raise WireError(f"not JSON: {e}"[:200]) from None
    return unpack(data, ref)


def unpack(data, ref):
    """The value of parsed JSON data (``decode`` without the parsing); ``WireError`` if it is none."""
    try:
        return _value(data, ref)
    except WireError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as e:  # complex(10**400, 0)
        raise WireError(f"{type(e).__name__}: {e}"[:200]) from None


def _value(d, ref):
    t = type(d)
    if d is None or t in (bool, int, float, str):
        return d
    if t is list:
        return [_value(x, ref) for x in d]
    if t is not dict or len(d) != 1:
        raise WireError(f"not a value of the codec: {str(d)[:80]}")
    (tag, body), = d.items()
    if tag in ("h", "g"):
        if not isinstance(body, (int, str)) or isinstance(body, bool):
            raise WireError("a malformed reference")
        return ref(tag, body)
    if tag == "x":
        if body not in ("inf", "-inf", "nan"):
            raise WireError("a malformed float")
        return float(body)
    if tag == "y":
        kind = getattr(builtins, body, None) if isinstance(body, str) else None
        return kind if isinstance(kind, type) else _bad(tag)
    if tag == "b":
        return bytes.fromhex(body) if isinstance(body, str) else _bad(tag)
    if type(body) is not list:
        _bad(tag)
    items = [_value(x, ref) for x in body]
    if tag == "d":
        if not all(type(p) is list and len(p) == 2 for p in items):
            _bad(tag)
        return {k: x for k, x in items}
    if tag == "c":
        if len(items) != 2 or not all(type(x) in (int, float) for x in items):
            _bad(tag)
        return complex(*items)
    kind = dict(_TAGS).get(tag)
    return kind(items) if kind in (tuple, set, frozenset) else _bad(tag)


def _bad(tag):
    raise WireError(f"a malformed {tag!r} value")


def unlimited_ints() -> None:
    """Let ints of any size cross (Python 3.11+ caps int/str conversions at 4300 digits by default)."""
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
