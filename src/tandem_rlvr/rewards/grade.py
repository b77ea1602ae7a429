"""``Grade``: one response's verdict, as every verifier and task returns it (``tasks.Grade`` too)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Grade:
    """One response's verdict: ``score`` in [0, 1], ``reason`` in words, ``details`` (e.g. pass_fraction)."""

    score: float
    reason: str
    details: dict = field(default_factory=dict)
