"""Sharding backends as registry rows: how the trained senior is laid out over the training processes.

A backend is one ``ShardingKind`` row in ``REGISTRY``; code above this module asks the row
(``kind.shards_parameters``, ``kind.needs_deepspeed``), not the name. The row is declarative so that
settings and the memory plan read it without importing ``rl/``; its training code is the module
``module`` names, imported when a run is built (``rl/backends.py``), which provides:

- ``trl_fields(cfg, compute, master) -> dict``: its ``GRPOConfig`` fields (transformers' ``fsdp``/
  ``fsdp_config``, ``deepspeed``);
- ``configure(args, compute, on_cpu)``: fix-ups once ``args`` exists, before the senior loads;
- optionally ``require()`` (a one-line error naming what to install) and ``junior_context`` (the
  context under which the whole, unsharded models load, where the backend partitions on load).

A new backend is one module and one row: ``register_sharding(ShardingKind("mine", "Mine", "mine",
module="my_backend"))`` in a plug-in module (``--plugins``). Every backend streams its full weights through ``rl/weight_stream.py``. Rows:

- label: its name in words (the plan's tables); plan_name: the memory plan's name for it;
- offloads: the ``--plan-offload`` values it supports (``none`` first); ``--shard-offload`` is
  ``all`` and needs a backend with it;
- own_checkpointing: it checkpoints activations itself (FSDP's), so transformers' is off;
- launcher_var: the variable an ``accelerate launch`` of this backend exports (``rl/sharding.from_launcher``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TandemError


@dataclass(frozen=True)
class ShardingKind:
    """One registry row (see the module docstring)."""

    name: str
    label: str
    plan_name: str
    module: str | None = None
    needs_deepspeed: bool = False
    offloads: tuple[str, ...] = ("none",)
    own_checkpointing: bool = False
    launcher_var: str | None = None

    @property
    def shards_parameters(self) -> bool:
        """Each process holds a part of every trained parameter (needs a distributed launch)."""
        return self.module is not None

    @property
    def can_offload(self) -> bool:
        """Shards can be kept in host memory (``--shard-offload``)."""
        return "all" in self.offloads


REGISTRY = {k.name: k for k in (
    ShardingKind("none", "DDP", "ddp"),
    ShardingKind("fsdp2", "FSDP2", "fsdp2", module="tandem_rlvr.rl.sharding", offloads=("none", "all"),
                 own_checkpointing=True, launcher_var="ACCELERATE_USE_FSDP"),
    ShardingKind("zero3", "ZeRO-3", "zero3", module="tandem_rlvr.rl.zero3", needs_deepspeed=True,
                 offloads=("none", "optimizer", "all"), launcher_var="ACCELERATE_USE_DEEPSPEED"),
)}
SHARDINGS = REGISTRY.keys()  # live: a registered backend is a valid --sharding
PLAN_NAMES = {k.plan_name: k for k in REGISTRY.values()}


def register_sharding(kind: ShardingKind) -> ShardingKind:
    """Add a backend row (a plug-in module's, docs/contributing.md); a name or plan name taken is refused."""
    if not isinstance(kind, ShardingKind):
        raise TandemError(f"register_sharding takes a ShardingKind, got {type(kind).__name__}")
    if kind.name in REGISTRY or kind.plan_name in PLAN_NAMES:
        raise TandemError(f"sharding {kind.name!r} (plan name {kind.plan_name!r}) is registered already")
    if not kind.offloads or kind.offloads[0] != "none":
        raise TandemError(f"sharding {kind.name!r}: offloads starts with 'none', got {kind.offloads!r}")
    REGISTRY[kind.name] = PLAN_NAMES[kind.plan_name] = kind
    return kind


def sharding_kind(name: str) -> ShardingKind:
    """The row of ``--sharding name``, or a one-line error listing the valid names."""
    if name not in REGISTRY:
        raise TandemError(f"unknown sharding {name!r}; valid: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def plan_kind(plan_name: str) -> ShardingKind:
    """The row of the memory plan's name (``ddp``, ``fsdp2``, ``zero3``)."""
    if plan_name not in PLAN_NAMES:
        raise TandemError(f"plan sharding must be one of {', '.join(PLAN_NAMES)}, got {plan_name!r}")
    return PLAN_NAMES[plan_name]
