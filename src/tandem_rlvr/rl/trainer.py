"""TRL's GRPOTrainer with the four things Tandem RLVR adds (and our model card), nothing else
(a junior pool's rollout also hears each row's reward: ``_calculate_rewards``).

1. Fail-closed senior mask: with ``require_senior_mask`` every loss batch must carry the
   mask (TRL's ``tool_mask``, filled from our rollout's ``env_mask``) of the completion's
   shape. The loss sees it as per-token weights (``losses.token_weights``: 1 senior, w =
   ``junior_token_weight`` junior), which TRL multiplies into its loss mask; the token-mean
   ("dapo") denominator is ``losses.loss_denominator`` over the generation batch (all response
   tokens by default, as in the paper's verl gate; TRL alone would count senior tokens only).
2. KL-Reg's reference is the junior (also when it is not the senior's initial checkpoint):
   TRL would build its reference from the policy's own path, so we construct the trainer
   with beta = 0 (no reference load) and then install the junior as ``ref_model``.
3. Optional junior imitation (``junior_imitation``, our extension, not in the paper): + coef x
   token-mean NLL of junior-written tokens under the senior, reusing the log-probs TRL already
   computed, normalised like TRL's token-mean so micro-batching leaves the update unchanged.
4. KL-Reg's k3 term as verl's ``low_var_kl`` (``losses.k3_kl``: log-ratio guarded at +-20,
   k3 clamped to [-kl_clamp, kl_clamp], 0 = unclamped; TRL's has neither): we hand TRL beta = 0
   inside the loss and add the term ourselves, with TRL's token-mean normaliser.

Optimiser, scheduler, gradient accumulation, distributed wrapping, logging backends,
checkpointing and resume all stay TRL's / transformers'.

Everything of TRL's (and transformers' Trainer's) private surface this project touches is in
this module and listed in ``PRIVATE_SURFACE``; ``tests/test_trl_surface.py`` fails naming
the missing piece when a TRL release moves one.
"""

from __future__ import annotations

import os

import torch
from trl import GRPOTrainer

from ..errors import TandemError
from .losses import k3_kl, loss_denominator, token_weights

# TRL's name for the senior mask in a loss batch (filled from the rollout's ``env_mask``).
SENIOR_MASK = "tool_mask"

# The private names we rely on: (object, attribute). Methods we override or call, then
# attributes TRL's __init__ sets; trl.trainer.utils / trl.models.utils helpers for the reference.
PRIVATE_SURFACE = {
    "methods": ("_compute_loss", "_generate_and_score_completions", "_calculate_rewards", "_get_per_token_logps_and_entropies",
                "_prepare_inputs", "_load_from_checkpoint", "_issue_warnings_after_load"),
    "attributes": ("_metrics", "temperature", "beta", "ref_model", "current_gradient_accumulation_steps"),
    "helpers": ("trl.trainer.utils.add_fused_lm_head", "trl.trainer.utils.disable_dropout_in_model"),
}


def record_metrics(trainer: GRPOTrainer, metrics: dict[str, float], mode: str = "train") -> None:
    """Add values to TRL's per-step metric lists (``_metrics``), which TRL averages into the next log record."""
    for k, v in metrics.items():
        trainer._metrics[mode][k].append(v)


class TandemGRPOTrainer(GRPOTrainer):
    def __init__(self, *args, junior=None, require_senior_mask: bool = False, junior_imitation: float = 0.0,
                 ref_is_junior: bool = False, junior_token_weight: float = 0.0, kl_clamp: float = 0.0,
                 loss_normalizer: str = "response_tokens", model_card=None, **kwargs):
        grpo_args = kwargs.get("args")
        beta = grpo_args.beta if grpo_args is not None else 0.0
        if ref_is_junior and beta > 0:
            if junior is None:
                raise TandemError("KL-Reg needs a junior as its reference model")
            grpo_args.beta = 0.0  # skip TRL's reference load from the policy path
        super().__init__(*args, **kwargs)
        self.model_card = model_card  # steps -> README.md text (None: TRL's card)
        self.require_senior_mask = require_senior_mask
        self.junior_imitation = junior_imitation
        self.kl_clamp = kl_clamp
        self.junior_token_weight = junior_token_weight
        self.loss_normalizer = loss_normalizer
        self._last_logps = None  # (B, T) log-probs of the last loss forward, captured below
        if ref_is_junior and beta > 0:
            grpo_args.beta = beta
            self.beta = beta
            self.ref_model = self._prepare_reference(junior)

    def load_finished_checkpoint(self, checkpoint: str) -> None:
        """Weights and state of a run killed after its last step, without training one step more
        (which ``train(resume_from_checkpoint=...)`` would)."""
        from transformers import TrainerState

        self._load_from_checkpoint(checkpoint)
        self.state = TrainerState.load_from_json(os.path.join(checkpoint, "trainer_state.json"))

    def _issue_warnings_after_load(self, load_result) -> None:
        """transformers warns that a tied output layer (saved once, as the embedding) is a "missing
        key" when a run resumes; it is not missing, so only other keys are reported."""
        first, tied = {}, set()
        for name, tensor in self.accelerator.unwrap_model(self.model).state_dict(keep_vars=True).items():
            if id(tensor) in first:
                tied |= {name, first[id(tensor)]}
            first.setdefault(id(tensor), name)
        missing = [k for k in load_result.missing_keys if k not in tied]
        load_result = type(load_result)(missing_keys=missing, unexpected_keys=load_result.unexpected_keys)
        super()._issue_warnings_after_load(load_result)

    def create_model_card(self, *args, **kwargs):
        """Our card (base model, method, junior, steps, data) in place of TRL's, whose base is "None"."""
        if self.model_card is None:
            return super().create_model_card(*args, **kwargs)
        if self.is_world_process_zero():
            from ..io import atomic_write

            with atomic_write(os.path.join(self.args.output_dir, "README.md")) as f:
                f.write(self.model_card(self.state.global_step))

    def _prepare_reference(self, junior):
        from trl.trainer.utils import add_fused_lm_head, disable_dropout_in_model

        if self.args.disable_dropout:
            disable_dropout_in_model(junior)
        add_fused_lm_head(junior, temperature=self.temperature, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32)
        # FSDP / DeepSpeed: TRL's prepare_fsdp would shard the junior in place and its prepare_deepspeed
        # partition it under ZeRO-3; it stays whole and frozen on each process (its forwards need no
        # collective, and rollouts decode it as it is)
        return junior  # already on its device, frozen; forwards need no wrapping

    def save_model(self, output_dir=None, _internal_call: bool = False) -> None:
        """A checkpoint's weights under ZeRO-3 are streamed by ``callbacks.CheckpointWeights`` (and
        DeepSpeed's own checkpoint holds the partitions): transformers would write them a second time
        through DeepSpeed's whole-checkpoint path. Other saves are transformers'."""
        from .zero3 import is_partitioned

        if _internal_call and self.is_deepspeed_enabled and is_partitioned(self.accelerator.unwrap_model(self.model)):
            return
        super().save_model(output_dir, _internal_call=_internal_call)

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        from contextlib import nullcontext

        from .zero3 import outside_zero3

        # KL-Reg's reference is the whole junior: under ZeRO-3 TRL's head would gather it as partitions
        whole = model is self.ref_model and self.is_deepspeed_enabled
        with outside_zero3() if whole else nullcontext():
            out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        self._last_logps = out[0]  # (B, T); inside _compute_loss this is the loss forward's
        return out

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if out.get(SENIOR_MASK) is not None:  # the token-mean denominator of the whole generation batch
            weights = token_weights(out["completion_mask"], out[SENIOR_MASK], self.junior_token_weight)
            local = loss_denominator(out["completion_mask"], weights, self.loss_normalizer)
            out["num_items_in_batch"] = self.accelerator.gather(local.to(self.accelerator.device)).sum()
            junior = (out["completion_mask"] * (1 - out[SENIOR_MASK])).sum().to(self.accelerator.device)
            out["num_junior_items_in_batch"] = self.accelerator.gather(junior).sum()  # () junior-written tokens
        return out

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards (every process's rows, one column per reward function); a junior pool's rollout
        hears each row's weighted reward (TRL's ``reward``, NaN when no function scored it) for its
        per-junior figures and rollout log."""
        per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # (B_global, F)
        scored = getattr(self.rollout_func, "scored", None)
        if scored is not None and self.model.training:
            rewards = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)  # (B_global,)
            rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
            scored(self, rewards.tolist())
        return per_func

    def _token_mean_normalizer(self, items: torch.Tensor) -> torch.Tensor:
        """What a summed per-token term of one micro-batch is divided by, as TRL's token-mean does:
        the generation batch's ``items`` per process and per update (so the micro-batches of one
        update add up to the same gradient whatever their number)."""
        normalizer = items.clamp(min=1.0) / self.accelerator.num_processes
        if self.model.training:
            normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        return normalizer

    def _global_mean(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        """Mean of ``values`` (B, T) over the ``mask``ed tokens of every process (a logged figure)."""
        totals = self.accelerator.reduce(torch.stack([(values.detach() * mask).sum(), mask.sum().float()]),
                                         reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()

    def _compute_loss(self, model, inputs):
        if self.require_senior_mask:
            mask = inputs.get(SENIOR_MASK)
            if mask is None:
                raise TandemError("tandem loss batch has no senior mask; refusing to fall back to vanilla GRPO")
            if mask.shape != inputs["completion_ids"].shape:
                raise TandemError(f"senior mask shape {tuple(mask.shape)} differs from completions "
                                  f"{tuple(inputs['completion_ids'].shape)}")
        weighted = inputs
        if inputs.get(SENIOR_MASK) is not None and self.junior_token_weight:
            weighted = {**inputs, SENIOR_MASK: token_weights(inputs["completion_mask"], inputs[SENIOR_MASK],
                                                             self.junior_token_weight)}
        mode = "train" if self.model.training else "eval"
        beta = self.beta
        self.beta = 0.0  # TRL adds no KL term; verl's (``k3_kl``) is added below
        try:
            loss = super()._compute_loss(model, weighted)
        finally:
            self.beta = beta
        if beta != 0.0:
            mask = inputs["completion_mask"] if weighted.get(SENIOR_MASK) is None else \
                inputs["completion_mask"] * weighted[SENIOR_MASK]  # (B, T) as TRL's loss mask
            k3 = k3_kl(inputs["ref_per_token_logps"], self._last_logps, self.kl_clamp)  # (B, T)
            loss = loss + beta * (k3 * mask).sum() / self._token_mean_normalizer(inputs["num_items_in_batch"])
            record_metrics(self, {"kl": self._global_mean(k3, mask)}, mode)
        if self.junior_imitation > 0:
            jmask = inputs["completion_mask"] * (1 - inputs[SENIOR_MASK])  # (B, T) junior-written tokens
            nll_sum = -(self._last_logps * jmask).sum()
            record_metrics(self, {"junior_imitation/nll": self._global_mean(-self._last_logps, jmask)}, mode)
            loss = loss + self.junior_imitation * nll_sum / self._token_mean_normalizer(inputs["num_junior_items_in_batch"])
        return loss
