"""The field machinery every settings part shares: a field with its help text, choices and range;
the one check of a part's numbers and choices.

A setting is one line in one part: ``lr: float = setting(1e-6, "learning rate", range=(0, None, True))``.
``range`` is ``(lo, hi, lo_open)`` beyond "finite" (every float must be finite, every int an integer;
``errors.check_number``); ``choices`` are checked by name (``unknown NAME 'x'; valid: ...``).
"""

from __future__ import annotations

from dataclasses import field, fields

from ..errors import TandemError, check_number

SEED_MAX = 2**32 - 1  # numpy's legacy seeding (transformers.set_seed) takes 0 .. 2**32 - 1


def setting(default, help: str, **meta):
    """A part's field: ``help`` (shown by ``tandem train --help``), optional ``choices``, ``range`` and
    ``names`` (a function giving, as text, the names of the registry the field takes; read when the help
    is built, after plug-ins registered theirs). A list default is copied per instance."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


def kind(f) -> str:
    """A field's base type as written (``int``, ``float``, ``str``, ``bool``, ``list[str]``), without ``| None``."""
    return f.type.replace(" | None", "")


def optional(f) -> bool:
    return "None" in f.type


def check_seed(seed: int, name: str = "seed") -> int:
    """``seed`` if it is an int in [0, SEED_MAX], else a TandemError naming it."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise TandemError(f"{name} must be an integer in [0, {SEED_MAX}], got {seed!r}")
    return seed


def check_part(part) -> None:
    """Every int/float field of ``part`` finite, of its type and in its ``range``; every field with
    ``choices`` one of them. Called first by each part's ``__post_init__``."""
    for f in fields(part):
        value = getattr(part, f.name)
        if kind(f) in ("int", "float"):
            lo, hi, lo_open = f.metadata.get("range", (None, None, False))
            check_number(value, f.name, lo, hi, lo_open=lo_open, integer=kind(f) == "int", optional=optional(f))
        choices = f.metadata.get("choices")
        if choices and not (value is None and optional(f)) and value not in choices:
            raise TandemError(f"unknown {f.name} {value!r}; valid: {', '.join(choices)}")


def at_least(part, minimum: int, *names: str) -> None:
    """TandemError unless each named field of ``part`` is >= ``minimum``."""
    for name in names:
        if getattr(part, name) < minimum:
            raise TandemError(f"{name} must be >= {minimum}, got {getattr(part, name)}")
