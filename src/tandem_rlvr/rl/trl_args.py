"""The translation of a ``TrainConfig`` to the trainer's arguments (``rl.grpo_config.TandemGRPOConfig``, TRL's
``GRPOConfig`` with the tandem settings): one update per mini-batch, accumulated over its micro-batches, in
the run's precision, with verl's dual-clip and plain k3 KL, the sharded layout's FSDP or DeepSpeed fields.
"""

from __future__ import annotations

from ..config import TrainConfig
from . import zero3
from .grpo_config import from_train_config, micro_batching  # noqa: F401 (micro_batching: its home for the plan)
from .sharding import fsdp_settings


def grpo_args(cfg: TrainConfig, num_processes: int, on_cpu: bool):
    """The run's ``TandemGRPOConfig``: the keys' GRPOConfig fields, the ``trl`` key's, the layout's."""
    m = cfg.models
    _, compute, master = m.precision
    # fsdp2: FSDP's activation checkpointing and mixed-precision policy instead (rl/sharding.configure)
    sharded = {"fsdp": True, "fsdp_config": fsdp_settings(cfg)} if m.sharding == "fsdp2" else {}
    if m.sharding == "zero3":  # DeepSpeed's bf16 partitions, fp32 masters and reduction (rl/zero3.py)
        sharded = {"deepspeed": zero3.ds_settings(cfg, compute, master)}
    return from_train_config(cfg, num_processes, on_cpu, sharded)
