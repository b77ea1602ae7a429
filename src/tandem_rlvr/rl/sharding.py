"""The FSDP2 backend: sharded training of the senior through accelerate (its row in ``rl/backends.py``;
DeepSpeed ZeRO-3 is ``rl/zero3.py``; every backend's full weights come out through ``rl/weight_stream.py``).

**Choosing it.** ``--sharding fsdp2`` (a ``TrainConfig`` field), or an accelerate config file with
``distributed_type: FSDP`` and ``fsdp_version: 2`` passed to ``accelerate launch`` (accelerate
exports it as ``ACCELERATE_USE_FSDP``/``FSDP_*`` variables; ``from_launcher`` reads them into the
config, so the run records what it trained with and a resume under another layout is refused).
Either way the transformers Trainer builds accelerate's ``FullyShardedDataParallelPlugin`` from
``fsdp_settings``, with three things fixed here:

- mixed precision is ``MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=float32)`` over fp32
  master shards, with no autocast. accelerate's own ``bf16`` policy reduces gradients in bf16 (at
  lr 1e-6 bf16 rounds most AdamW updates away: ``tests/unit/rl/test_precision.py``), and autocast over
  fp32 shards keeps a full-size bf16 copy of every matrix on every rank between forward and backward;
- activation checkpointing is FSDP's (``gradient_checkpointing`` maps onto it), which avoids the
  extra all-gather transformers' own checkpointing costs under FSDP;
- checkpoints are ``SHARDED_STATE_DICT`` (each rank writes its own shard of weights and AdamW
  moments, so no rank gathers a second full state), plus loadable HF weights written by
  ``rl.weight_stream.save_streamed``; a LoRA run's holds the adapter alone, which PEFT finds under the
  activation-checkpoint wrapper only through ``rl.peft_checkpoint`` (``configure`` installs it).

accelerate keeps FSDP off on a CPU machine (it becomes plain DDP without a word); FSDP2 itself
runs on CPU with gloo, so ``force_on_cpu`` switches accelerate's state to FSDP there (through
``rl/accelerate_state.py``, the one module that touches accelerate's private state;
``tests/distributed/test_sharded_training.py`` asserts that every rank then holds 1/N of each sharded parameter).
The junior is never sharded.
"""

from __future__ import annotations

import os

import torch

from ..config.shardings import REGISTRY as SHARDING_KINDS
from ..errors import TandemError


def from_launcher(cfg):
    """``cfg`` with ``sharding``/``shard_offload`` taken from an accelerate FSDP or DeepSpeed ZeRO-3
    launch, if any (``rl.zero3.from_launcher`` for DeepSpeed). Refused in one line: a launch's sharding
    against another one the settings name (``ACCELERATE_USE_FSDP=true``, often left over in a shell, with
    ``--sharding zero3``), and ``shard_offload`` with the senior on the CPU (it moves shards from the
    accelerator to host memory; on the CPU they are there already, and torch would fail in every process)."""
    from . import zero3

    cfg = _from_environment(cfg, zero3)
    device = cfg.models.senior_device
    on_cpu = not torch.cuda.is_available() if device in (None, "", "auto") else str(device).startswith("cpu")
    if cfg.models.shard_offload and on_cpu:
        raise TandemError(f"shard_offload keeps shards in host memory instead of the accelerator's, but the senior is "
                          f"on the CPU (senior_device {cfg.models.senior_device}): there is nothing to offload; drop "
                          "--shard-offload")
    return cfg


def _from_environment(cfg, zero3):
    asked = cfg.models.backend
    for theirs in (k for k in SHARDING_KINDS.values() if k.launcher_var):
        var = theirs.launcher_var
        if os.environ.get(var, "false").lower() == "true" and asked.shards_parameters and asked != theirs:
            raise TandemError(f"{var}=true in the environment (an accelerate launch's config, or left over in the "
                              f"shell) asks for {theirs.name}, but the settings ask for --sharding {asked.name}; "
                              f"unset {var} or launch with a matching accelerate config")
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
        return zero3.from_launcher(cfg)
    version = os.environ.get("FSDP_VERSION", "1")
    if version != "2":
        raise TandemError(f"the accelerate config asks for FSDP version {version}; tandem trains with FSDP2: set "
                          "fsdp_version: 2 in the accelerate config file")
    offload = os.environ.get("FSDP_OFFLOAD_PARAMS", "false").lower() == "true"
    return cfg.with_keys(sharding="fsdp2", shard_offload=cfg.models.shard_offload or offload)


def fsdp_settings(cfg) -> dict:
    """transformers' ``fsdp_config`` for a ``--sharding fsdp2`` run (the Trainer turns it into
    accelerate's plugin; layers to wrap: the model's ``_no_split_modules``, accelerate's default)."""
    return {"version": 2, "reshard_after_forward": True, "state_dict_type": "SHARDED_STATE_DICT",
            "activation_checkpointing": cfg.models.gradient_checkpointing, "cpu_offload": cfg.models.shard_offload}


def trl_fields(cfg, compute: torch.dtype, master: torch.dtype) -> dict:
    """The backend's ``GRPOConfig`` fields (``rl/backends.py``): FSDP with ``fsdp_settings``; FSDP's own
    activation checkpointing and mixed-precision policy (``configure``) replace transformers'."""
    return {"fsdp": True, "fsdp_config": fsdp_settings(cfg)}


def configure(args, compute: torch.dtype, on_cpu: bool) -> None:
    """Fix the mixed precision of a sharded run's ``GRPOConfig`` (see module docstring) and, on a
    CPU machine, make accelerate really shard. Call after ``args`` exists, before the trainer."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from .peft_checkpoint import install

    install()  # a LoRA run's resume checkpoint holds the adapter under FSDP's activation checkpointing
    args.bf16 = args.fp16 = False
    args.mixed_precision = "no"  # no autocast; an accelerate config's bf16 would reduce in bf16
    args.fsdp_plugin_args["mixed_precision_policy"] = MixedPrecisionPolicy(param_dtype=compute,
                                                                           reduce_dtype=torch.float32)
    if on_cpu:
        force_on_cpu(args)


def force_on_cpu(args) -> None:
    """Initialise accelerate's shared state as FSDP on a CPU machine, where accelerate would leave
    it plain DDP (``rl.accelerate_state``); refused in one line without a multi-process launch."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    from .accelerate_state import force_on_cpu as force

    got = force("FSDP", args.mixed_precision, fsdp_plugin=FullyShardedDataParallelPlugin(**args.fsdp_plugin_args))
    if got != "FSDP":
        raise TandemError(f"--sharding fsdp2 needs a multi-process launch (torchrun or accelerate launch); this "
                          f"process runs as {got}")
