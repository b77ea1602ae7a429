"""The translation of a ``TrainConfig`` to the trainer's arguments (``rl.grpo_config.TandemGRPOConfig``, TRL's
``GRPOConfig`` with the tandem settings): one update per mini-batch, accumulated over its micro-batches, in
the run's precision, with verl's dual-clip and plain k3 KL, the sharded layout's FSDP or DeepSpeed fields.
"""

from __future__ import annotations

from ..config import TrainConfig
from .backends import trl_fields
from .grpo_config import from_train_config


def grpo_args(cfg: TrainConfig, num_processes: int, on_cpu: bool):
    """The run's ``TandemGRPOConfig``: the keys' GRPOConfig fields, the ``trl`` key's, the layout's."""
    m = cfg.models
    _, compute, master = m.precision
    return from_train_config(cfg, num_processes, on_cpu, trl_fields(cfg, compute, master))
