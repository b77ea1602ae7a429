"""Training methods as registry rows: what a method rolls out, what its trainer needs, its words.

A method is one ``MethodKind`` row in ``REGISTRY``; code above this module asks the row
(``kind.junior_in_rollout``, ``kind.reference``), never compares method names (a scan test guards
it: tests/unit/rl/test_methods.py). The row is declarative so that settings can read it without importing
``rl/`` or TRL; its loss is named by ``loss``, a ``module:function`` (imported when a trainer is
built, as ``EngineKind.opener`` is) or the function itself. The function is a pure map from a
typed batch to ``(loss, metrics)`` (``rl.losses.PolicyBatch``, ``rl.methods``).

A new method is one loss function and one row: ``register_method(MethodKind("mine", rollout=
"schedule", reference="junior", beta=1e-3, loss="my_module:my_loss", card="..."))`` in a plug-in
module (docs/contributing.md); ``tandem train --method mine --plugins my_module`` then trains it.

Rows:

- rollout: who writes the training rollouts: ``schedule`` (senior and junior by the run's
  ``schedule``), ``senior`` (the senior alone) or ``junior`` (the junior alone). Every rollout
  with junior tokens needs the senior mask (fail-closed: a batch without it is an error).
- reference: the model of the KL term, ``junior`` or None; a method with one takes ``beta`` > 0
  (``beta`` here is its default), a method without one refuses ``beta``.
- card: the model card's words for the method, a format string over the run's config keys
  (``{schedule}``, ``{p}``, ``{K}``, ``{beta}``, ...).
- memory terms (read by the memory plan), derived: ``junior_in_rollout`` (the engine holds and
  runs the junior), ``reference`` (a teacher-forced junior forward per micro-batch).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Callable

from ..errors import TandemError

ROLLOUTS = ("schedule", "senior", "junior")
REFERENCES = ("junior",)


@dataclass(frozen=True)
class MethodKind:
    """One registry row (see the module docstring)."""

    name: str
    rollout: str
    loss: str | Callable
    card: str
    reference: str | None = None
    beta: float = 0.0
    about: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TandemError(f"a method's name is a non-empty string, got {self.name!r}")
        if self.rollout not in ROLLOUTS:
            raise TandemError(f"method {self.name!r}: unknown rollout {self.rollout!r}; valid: {', '.join(ROLLOUTS)}")
        if self.reference is not None and self.reference not in REFERENCES:
            raise TandemError(f"method {self.name!r}: unknown reference {self.reference!r}; valid: "
                              f"{', '.join(REFERENCES)} or None")
        if (self.reference is None) != (self.beta == 0):
            raise TandemError(f"method {self.name!r}: a default beta > 0 goes with a KL reference, and only with one "
                              f"(reference {self.reference!r}, beta {self.beta})")
        if not (callable(self.loss) or isinstance(self.loss, str) and self.loss.count(":") == 1):
            raise TandemError(f"method {self.name!r}: loss must be a function or 'module:function', got {self.loss!r}")
        if not isinstance(self.card, str) or not self.card:
            raise TandemError(f"method {self.name!r}: card must say, in words, what the method trains")

    @property
    def junior_in_rollout(self) -> bool:
        """The junior writes rollout tokens: the rollout engine holds and runs it, and the senior mask
        gates the loss and must be in every loss batch (fail-closed)."""
        return self.rollout != "senior"

    @property
    def uses_junior(self) -> bool:
        """The run loads the junior: for its rollouts or as its KL reference."""
        return self.junior_in_rollout or self.reference is not None

    def card_words(self, keys: dict) -> str:
        """The card's words with the run's settings filled in (a TandemError naming an unknown key)."""
        names = {f for _, f, _, _ in string.Formatter().parse(self.card) if f}
        unknown = sorted(names - set(keys))
        if unknown:
            raise TandemError(f"method {self.name!r}: its card names {unknown[0]!r}, which is no config key")
        return self.card.format(**keys)

    def loss_function(self) -> Callable:
        """The loss function (``loss`` imported when it is a ``module:function``)."""
        if callable(self.loss):
            return self.loss
        from importlib import import_module

        module, _, attr = self.loss.partition(":")
        try:
            fn = getattr(import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise TandemError(f"method {self.name!r}: its loss {self.loss!r} does not import: {e}") from None
        if not callable(fn):
            raise TandemError(f"method {self.name!r}: its loss {self.loss!r} is not a function")
        return fn


def register_method(kind: MethodKind) -> MethodKind:
    """Add (or replace) a registry row; plug-ins call it (docs/contributing.md)."""
    if not isinstance(kind, MethodKind):
        raise TandemError(f"a method is registered as a MethodKind row, got {type(kind).__name__}")
    REGISTRY[kind.name] = kind
    return kind


_TANDEM = "rollouts co-written with the frozen junior, schedule `{schedule}`, p = {p}, K = {K}"
_KL = "beta = {beta} x KL(senior || junior)"

# the one table of methods: a new method is one row here or a plug-in's ``register_method(MethodKind(...))``
REGISTRY: dict[str, MethodKind] = {k.name: k for k in (
    MethodKind("tandem", "schedule", "tandem_rlvr.rl.methods:tandem_loss",
               f"Tandem RLVR (arXiv 2606.28166): {_TANDEM}; GRPO loss on the senior's tokens only",
               about="senior+junior co-write rollouts; GRPO on the senior's tokens"),
    MethodKind("grpo", "senior", "tandem_rlvr.rl.methods:grpo_loss",
               "vanilla GRPO (rollouts by the senior alone)", about="the senior alone"),
    MethodKind("klreg", "senior", "tandem_rlvr.rl.methods:klreg_loss",
               f"KL-regularised GRPO: {_KL} on the senior's own rollouts", reference="junior", beta=1e-3,
               about="the senior alone + beta * KL(senior || junior)"),
    MethodKind("tandem-klreg", "schedule", "tandem_rlvr.rl.methods:tandem_klreg_loss",
               f"Tandem RLVR with KL-Reg's term: {_TANDEM}; GRPO loss plus {_KL} on the senior's tokens",
               reference="junior", beta=1e-3, about="tandem rollouts + beta * KL(senior || junior) on senior tokens"),
)}
METHODS = REGISTRY.keys()  # a live view: config choices, CLI choices and checks see every registered name
# the paper's three arms, which the demo and the pipeline train and compare
PAPER_METHODS = ("grpo", "tandem", "klreg")


def method_kind(name: str) -> MethodKind:
    """The registry row of ``name``, or a TandemError listing the valid names."""
    kind = REGISTRY.get(name) if isinstance(name, str) else None
    if kind is None:
        raise TandemError(f"unknown method {name!r}; valid: {', '.join(METHODS)}")
    return kind


def method_help() -> str:
    """Every registered method in a few words, for the help of ``--method``."""
    return "; ".join(f"{k.name} ({k.about})" if k.about else k.name for k in REGISTRY.values())


def method_names(predicate=lambda k: True) -> str:
    """The names of the rows ``predicate`` holds for, as text (help and error messages)."""
    return ", ".join(k.name for k in REGISTRY.values() if predicate(k))
