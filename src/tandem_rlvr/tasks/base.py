"""The task contract: ``Grade`` (one response's verdict) and the ``Task`` protocol (see ``tasks``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Grade:
    """One response's verdict: ``score`` in [0, 1], ``reason`` in words, ``details`` (e.g. pass_fraction)."""

    score: float
    reason: str
    details: dict = field(default_factory=dict)


@runtime_checkable
class Task(Protocol):
    """A task: data loader, prompt and verifier (see the module docstring)."""

    name: str
    verifier: str

    def load(self, benchmark: str, limit: int | None = None, *, split: str | None = None) -> list[dict]: ...

    def prompt(self, row: dict) -> str: ...

    def grade(self, responses: list[str], rows: list[dict]) -> list[Grade]: ...
