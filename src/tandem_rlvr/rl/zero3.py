"""DeepSpeed ZeRO-3 for the senior through accelerate's DeepSpeed plugin (the second sharded layout).

**Choosing it.** ``--sharding zero3`` (a ``TrainConfig`` field), or ``accelerate launch`` with an
accelerate config file of ``distributed_type: DEEPSPEED`` and ``zero_stage: 3`` (accelerate
exports it as ``ACCELERATE_USE_DEEPSPEED``/``ACCELERATE_DEEPSPEED_*`` variables; ``from_launcher``
reads them into the config, so the run records its layout and a resume under another is refused;
ZeRO stages 1 and 2 keep whole weights in each process and stay what they were: DeepSpeed's
business, ``sharding: none``). Either way the run hands transformers' Trainer the DeepSpeed
config of ``ds_settings``, which fixes:

- stage 3 with fp32 master partitions: under bf16 compute (the run's ``dtype``) DeepSpeed's bf16
  mode keeps the module's parameters as bf16 partitions and the optimiser's fp32 master partitions;
- ``communication_data_type: fp32``: DeepSpeed's default under bf16 reduce-scatters gradients in
  bf16, where at lr 1e-6 most updates round away (``tests/unit/rl/test_precision.py``; the same reason FSDP2 uses
  its own policy);
- ``stage3_gather_16bit_weights_on_model_save: false``: no process gathers a whole state dict;
  saves stream bucket by bucket (``rl.weight_stream.save_streamed``) and the Trainer's checkpoint is
  DeepSpeed's own (each rank writes its partitions of weights and AdamW moments);
- ``--shard-offload``: parameter and optimiser partitions in host memory (``offload_param`` and
  ``offload_optimizer`` on the CPU; torch's AdamW steps there, not DeepSpeed's compiled one).

accelerate keeps DeepSpeed off on a CPU machine (``cpu=True`` turns the launch into plain
multi-CPU DDP without a word); DeepSpeed itself runs on CPU with its cpu accelerator and gloo,
so ``force_on_cpu`` switches accelerate's state to DeepSpeed there (through ``rl/accelerate_state.py``,
the one module that touches accelerate's private state; ``tests/distributed/test_sharded_training.py`` asserts
that each rank then holds 1/N of every partitioned parameter: ``ds_tensor`` against ``ds_numel``).

**Loading.** ``rl.assemble.build_run`` makes the run's GRPOConfig (whose DeepSpeed config
transformers records) before ``rl.prepare`` loads the pair, so ``from_pretrained`` builds the
senior under ``deepspeed.zero.Init``: each process allocates only its partitions on its device,
process 0 reads the checkpoint into host memory and the values reach the other processes module by
module (transformers' ``_load_state_dict_into_zero3_model``), so no GPU holds the whole senior (host
memory per process measured with ``scripts/zero3_load_memory.py``, docs/sharding.md). The junior
loads outside it (``outside_zero3``).

**The stream.** ``gathered_bucket`` is ``rl.weight_stream.buckets``' ZeRO-3 gather: one bucket's
parameters gathered together with ``deepspeed.zero.GatheredParameters`` (every rank, same order)
and released when the consumer asks for the next. The gathered tensors are the bf16 partitions
themselves (already the compute dtype: half the bytes of fp32); when fp32 is asked of bf16
partitions (``checkpoint-N``'s masters) each tensor is the optimiser's fp32 master, gathered
(``safe_get_full_fp32_param``; a frozen partition, LoRA's base, has none and is gathered as it is).
A LoRA senior's merged weights (``rl.lora.Zero3Merge``) are worked out as their bucket is gathered:
each targeted layer's W, A and B gathered together, W + (alpha / r) B A formed, released, the next
layer. The junior is never handed to DeepSpeed.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import torch

from ..errors import TandemError

INSTALL = "pip install 'tandem-rlvr[sharded]' (or pip install deepspeed)"


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


def require() -> None:
    """A one-line TandemError naming what to install when DeepSpeed is absent."""
    if not available():
        raise TandemError(f"--sharding zero3 trains with DeepSpeed ZeRO-3, which is not installed: {INSTALL}")


def from_launcher(cfg):
    """``cfg`` with ``sharding: zero3`` (and ``shard_offload``) from an accelerate DeepSpeed ZeRO-3 launch."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        return cfg
    stage = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "")
    if not stage and os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"):
        import json

        with open(os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"], encoding="utf-8") as f:
            stage = str(json.load(f).get("zero_optimization", {}).get("stage", ""))
    if stage != "3":
        return cfg  # ZeRO 1/2: whole weights on every process (sharding none)
    offload = any(os.environ.get(f"ACCELERATE_DEEPSPEED_OFFLOAD_{k}_DEVICE", "none").lower() not in ("none", "")
                  for k in ("PARAM", "OPTIMIZER"))
    return cfg.with_keys(sharding="zero3", shard_offload=cfg.models.shard_offload or offload)


def ds_settings(cfg, compute: torch.dtype, master: torch.dtype) -> dict:
    """transformers' ``deepspeed`` config of a zero3 run (module docstring); "auto" values are the
    Trainer's (batch sizes, accumulation, clipping, precision from ``bf16``/``fp16``, bucket sizes)."""
    if master != torch.float32 and compute != torch.float32:
        raise TandemError("--sharding zero3 keeps fp32 master partitions: set master_dtype float32")
    offload = {"device": "cpu" if cfg.models.shard_offload else "none"}
    return {
        "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
        "communication_data_type": "fp32",
        "zero_optimization": {"stage": 3, "offload_param": dict(offload), "offload_optimizer": dict(offload),
                              "stage3_gather_16bit_weights_on_model_save": False,
                              "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                              "stage3_param_persistence_threshold": "auto"},
        "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 1 << 30, "wall_clock_breakdown": False,
    }


def trl_fields(cfg, compute: torch.dtype, master: torch.dtype) -> dict:
    """The backend's ``GRPOConfig`` fields (``rl/backends.py``): DeepSpeed's bf16 partitions, fp32 masters
    and reduction."""
    return {"deepspeed": ds_settings(cfg, compute, master)}


def configure(args, compute: torch.dtype, on_cpu: bool) -> None:
    """After ``args`` (a GRPOConfig built with ``deepspeed=ds_settings(...)``) exists and before the
    senior loads: on a CPU machine, make accelerate really run DeepSpeed; and have DeepSpeed's own
    communication layer join the launch's process group now (``zero.Init`` reads its world size when
    the senior loads, before ``deepspeed.initialize`` would join it). ``compute``: DeepSpeed's precision
    is in ``args`` already (``ds_settings``)."""
    import deepspeed
    import torch.distributed as dist

    if on_cpu:
        force_on_cpu(args)
    if dist.is_initialized():
        build_ops()
        deepspeed.init_distributed(dist_backend=dist.get_backend())


def build_ops() -> None:
    """Build (or load) the op DeepSpeed's communication layer JIT-compiles on joining (``shm_comm`` on a
    CPU accelerator) so that no process ever waits on a dead one. torch builds it under a lock *file*
    (``FileBaton``): a process killed while holding it (a SIGKILLed run, a test's teardown) leaves the
    file, and every later ZeRO-3 process on the machine waits for it forever. And environments that
    share torch's default build folder but differ in flags (two venvs) rebuild it in turn, each under
    that lock. So: a build folder per environment (``TORCH_EXTENSIONS_DIR`` under the tandem cache,
    keyed by the interpreter's prefix and torch's version; one the user set is kept), and the build
    under an ``flock`` of our own, which the kernel releases when its holder dies; holding it, no tandem
    process can be building, so a lock file left in a folder of ours is a dead one's and is removed."""
    import fcntl
    import hashlib
    import sys

    from deepspeed.comm.torch import build_shm_op

    from ..paths import cache_dir

    ours = "TORCH_EXTENSIONS_DIR" not in os.environ
    if ours:
        key = hashlib.sha256(f"{sys.prefix}\0{torch.__version__}".encode()).hexdigest()[:12]
        os.environ["TORCH_EXTENSIONS_DIR"] = str(cache_dir() / "torch_extensions" / key)
    root = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".tandem-build.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if ours:
            for baton in root.glob("*/lock"):
                baton.unlink(missing_ok=True)
        build_shm_op()


def force_on_cpu(args) -> None:
    """Initialise accelerate's shared state as DeepSpeed on a CPU machine, where accelerate would
    leave it multi-CPU DDP (``rl.accelerate_state``). The Trainer's Accelerator then finds the plugin in
    the state (it is taken off ``args``: accelerate refuses a plugin handed to a second Accelerator)."""
    from .accelerate_state import force_on_cpu as force

    got = force("DEEPSPEED", "no", deepspeed_plugin=args.deepspeed_plugin)
    if got == "DEEPSPEED":
        args.deepspeed_plugin = None
    else:
        raise TandemError(f"--sharding zero3 needs a multi-process launch (torchrun or accelerate launch); this "
                          f"process runs as {got}")


def is_partitioned(model) -> bool:
    """Whether ``model``'s parameters are ZeRO-3 partitions (DeepSpeed has converted them)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def numel(t: torch.Tensor) -> int:
    """Elements of the whole tensor (a ZeRO-3 parameter's own ``numel`` is its released storage's)."""
    return getattr(t, "ds_numel", None) or t.numel()


def local_fraction(p) -> float:
    """Elements of ``p`` this rank holds / elements of the whole tensor: its partition, or 1.0 for
    a parameter DeepSpeed keeps whole on every rank (``ds_persist``: below the persistence threshold)."""
    if getattr(p, "ds_persist", False):
        return 1.0
    return p.ds_tensor.numel() / max(p.ds_numel, 1)


@contextmanager
def gathered_bucket(bucket: list[tuple[str, torch.Tensor]], dtype: torch.dtype):
    """(name, full tensor in ``dtype``) of one bucket of ZeRO-3 parameters, valid inside the block
    (collective: every rank enters it with the same bucket); see the module docstring."""
    import deepspeed

    # a LoRA layer's merged weight (rl.lora.Zero3Merge): its W, A and B gathered together, one layer at a time
    merged = {i: t.merged_in(dtype) for i, (_, t) in enumerate(bucket) if hasattr(t, "merged_in")}
    params = [t for _, t in bucket if hasattr(t, "ds_id")]  # buffers are whole on every rank
    if dtype == torch.float32 and any(p.dtype != torch.float32 for p in params):
        from deepspeed.utils import safe_get_full_fp32_param

        def whole(t):  # the fp32 master, gathered one by one; a frozen partition (LoRA's base) has none
            if not hasattr(t, "ds_id"):
                return t.detach().to(dtype)
            if t.requires_grad:
                return safe_get_full_fp32_param(t)
            with deepspeed.zero.GatheredParameters([t], modifier_rank=None):
                return t.data.to(dtype)

        yield [(n, merged[i] if i in merged else whole(t)) for i, (n, t) in enumerate(bucket)]
        return
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        yield [(n, merged[i] if i in merged else t.data.to(dtype)) for i, (n, t) in enumerate(bucket)]


@contextmanager
def outside_zero3():
    """Inside, transformers and TRL see no ZeRO-3 config, for models that are not partitioned: once one
    exists, ``from_pretrained`` would partition every model it loads (``zero.Init``; the hf engine's
    plain rollout copy), and TRL's fused head would gather a whole model's head as if partitioned
    (KL-Reg's reference forward of the junior)."""
    from transformers.integrations import deepspeed as hf_ds

    ref = hf_ds._hf_deepspeed_config_weak_ref  # transformers' record of the live DeepSpeed config
    hf_ds.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_ds._hf_deepspeed_config_weak_ref = ref


junior_context = outside_zero3  # rl/backends.py: the models that stay whole load under it
