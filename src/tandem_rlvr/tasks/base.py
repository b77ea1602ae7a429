"""The task contract: ``Grade`` (one response's verdict) and the ``Task`` protocol (see ``tasks``)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..rewards.grade import Grade  # one verdict; defined beside the verifiers that make it


@runtime_checkable
class Task(Protocol):
    """A task: data loader, prompt and verifier (see the module docstring)."""

    name: str
    verifier: str

    def load(self, benchmark: str, limit: int | None = None, *, split: str | None = None) -> list[dict]: ...

    def prompt(self, row: dict) -> str: ...

    def grade(self, responses: list[str], rows: list[dict]) -> list[Grade]: ...

    def has_answer(self, response: str) -> bool: ...
