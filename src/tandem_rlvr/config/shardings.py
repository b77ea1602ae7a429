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
module="my_backend"))`` in a plug-in module (``--plugins``). Every backend streams its full weights through
``rl/weight_stream.py``. Rows:

- label: its name in words (the plan's tables); plan_name: the memory plan's name for it;
- offloads: the ``--plan-offload`` values it supports (``none`` first); ``--shard-offload`` is
  ``all`` and needs a backend with it;
- own_checkpointing: it checkpoints activations itself (FSDP's), so transformers' is off;
- launcher_var: the variable an ``accelerate launch`` of this backend exports (``rl/sharding.from_launcher``);
- about: the backend in a few words, for the help of ``--sharding`` and ``--plan-sharding`` (``sharding_help``);
- the memory plan's terms (``planner/memory.py`` reads them; a backend without ``memory`` is refused by the
  plan with one line): ``memory`` is ``"module:function"``, the function that adds the sharded senior's
  weights, optimiser states, gradients and the update's gathers to a plan (``planner/sharded.py`` has
  FSDP2's and ZeRO-3's); ``grads_in_compute``: under mixed precision its unsharded gradients are in the
  compute dtype (FSDP2's ``MixedPrecisionPolicy``); ``holds_root_grads``: the output layer's gradient is
  held until the backward pass ends (FSDP2 reduce-scatters the root's gradients together);
  ``lora_sync_per_layer``: its LoRA weight sync forms each gathered layer's W + (alpha / r) B A in fp32.
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
    about: str = ""
    memory: str | None = None
    grads_in_compute: bool = False
    holds_root_grads: bool = False
    lora_sync_per_layer: bool = False

    @property
    def shards_parameters(self) -> bool:
        """Each process holds a part of every trained parameter (needs a distributed launch)."""
        return self.module is not None

    def memory_terms(self):
        """The function ``memory`` names (imported when a plan prices a sharded layout)."""
        import importlib

        if not self.memory:
            raise TandemError(f"the memory plan has no terms for sharding {self.name!r}: its row names none (memory)")
        if ":" not in self.memory:
            raise TandemError(f"sharding {self.name!r}: memory must name 'module:function', got {self.memory!r}")
        module, function = self.memory.split(":", 1)
        return getattr(importlib.import_module(module), function)

    @property
    def can_offload(self) -> bool:
        """Shards can be kept in host memory (``--shard-offload``)."""
        return "all" in self.offloads


REGISTRY = {k.name: k for k in (
    ShardingKind("none", "DDP", "ddp", about="each process holds the whole senior; several processes are DDP"),
    ShardingKind("fsdp2", "FSDP2", "fsdp2", module="tandem_rlvr.rl.sharding", offloads=("none", "all"),
                 own_checkpointing=True, launcher_var="ACCELERATE_USE_FSDP",
                 about="FSDP2 through accelerate: fp32 master shards, bf16 compute with fp32 gradient reduction, "
                       "FSDP's activation checkpointing",
                 memory="tandem_rlvr.planner.sharded:fsdp2", grads_in_compute=True, holds_root_grads=True),
    ShardingKind("zero3", "ZeRO-3", "zero3", module="tandem_rlvr.rl.zero3", needs_deepspeed=True,
                 offloads=("none", "optimizer", "all"), launcher_var="ACCELERATE_USE_DEEPSPEED",
                 about="DeepSpeed ZeRO-3 through accelerate: fp32 master partitions, bf16 partitions, fp32 gradient "
                       "reduction; needs the sharded extra",
                 memory="tandem_rlvr.planner.sharded:zero3", lora_sync_per_layer=True),
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


def sharding_help(plan: bool = False) -> str:
    """``NAME: about`` of every registered backend (plug-ins' too), for flag help texts; ``plan``: by the
    memory plan's names (``--plan-sharding``)."""
    return "; ".join((f"{k.plan_name if plan else k.name}: {k.about}" if k.about else (k.plan_name if plan else k.name))
                     for k in REGISTRY.values())


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
