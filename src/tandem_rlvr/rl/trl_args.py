"""The translation of a ``TrainConfig`` to TRL's ``GRPOConfig``: one update per mini-batch, accumulated
over its micro-batches, in the run's precision, with verl's dual-clip and plain k3 KL.
"""

from __future__ import annotations

import torch

from ..config import TrainConfig
from ..errors import TandemError
from . import zero3
from .sharding import fsdp_settings


def micro_batching(cfg: TrainConfig, num_processes: int) -> tuple[int, int]:
    """(rows per forward/backward on each process, micro-batches accumulated per update)."""
    rows = cfg.loop.prompts_per_minibatch * cfg.rollout.group_size
    if rows % num_processes:
        raise TandemError(f"{rows} rollouts per mini-batch do not split over {num_processes} processes")
    per_process = rows // num_processes
    micro = cfg.loop.micro_batch_rows or per_process
    if per_process % micro:
        raise TandemError(f"micro_batch_rows={micro} does not divide the {per_process} rows of a mini-batch per process")
    return micro, per_process // micro


def grpo_args(cfg: TrainConfig, num_processes: int, on_cpu: bool):
    """TRL's GRPOConfig for ``cfg``: one update per mini-batch, accumulated over its micro-batches."""
    from trl import GRPOConfig

    micro, accumulate = micro_batching(cfg, num_processes)
    _, compute, master = cfg.models.precision
    mixed = master != compute  # autocast in the compute dtype over fp32 master weights
    m, r, loss, loop = cfg.models, cfg.rollout, cfg.loss, cfg.loop
    # fsdp2: FSDP's activation checkpointing and mixed-precision policy instead (rl/sharding.configure)
    sharded = {"fsdp": True, "fsdp_config": fsdp_settings(cfg)} if m.sharding == "fsdp2" else {}
    if m.sharding == "zero3":  # DeepSpeed's bf16 partitions, fp32 masters and reduction (rl/zero3.py)
        sharded = {"deepspeed": zero3.ds_settings(cfg, compute, master)}
    return GRPOConfig(
        output_dir=loop.output_dir, learning_rate=loss.lr, epsilon=loss.clip, beta=loss.beta, loss_type="dapo",
        scale_rewards="group" if loss.scale_rewards else "none", num_generations=r.group_size,
        per_device_train_batch_size=micro, gradient_accumulation_steps=accumulate,
        # TRL counts one "step" per micro-batch here: a rollout batch feeds updates_per_batch x accumulate of them
        steps_per_generation=loop.updates_per_batch * accumulate, num_iterations=1,
        max_completion_length=r.max_new_tokens,
        temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_steps=loop.max_updates,
        num_train_epochs=loop.epochs, save_steps=loop.save_updates, save_total_limit=loop.save_total_limit,
        logging_steps=1, report_to=[] if loop.report_to == "none" else [loop.report_to], seed=loop.seed,
        use_cpu=on_cpu, bf16=mixed and compute == torch.bfloat16, fp16=mixed and compute == torch.float16,
        gradient_checkpointing=m.gradient_checkpointing and m.sharding != "fsdp2", entropy_coef=0.0, disable_dropout=True,
        delta=loss.dual_clip or None,  # TRL's cap of the ratio; for A < 0 it is verl's dual-clip (docs/paper_fidelity.md)
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=loss.weight_decay, max_grad_norm=1.0,
        logging_nan_inf_filter=False,  # a NaN loss is logged as NaN (rl.guard stops the run), never averaged away
        log_completions=False, remove_unused_columns=False, save_only_model=False, disable_tqdm=True,
        dataloader_num_workers=0, ddp_timeout=m.dist_timeout_s,
        # KL-Reg is plain k3 (the paper's verl low_var_kl); newer TRL multiplies it by the ratio by default
        **({"use_bias_correction_kl": False} if "use_bias_correction_kl" in GRPOConfig.__dataclass_fields__ else {}),
        **sharded,
    )
