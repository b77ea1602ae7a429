"""TRL's GRPOTrainer with the loss of the run's training method (and our model card), nothing else
(a junior pool's rollout also hears each row's reward: ``_calculate_rewards``).

The method is a registry row (``config.methods.MethodKind``) with a pure loss function
(``rl.methods``, over ``rl.losses``). The trainer:

1. Computes the loss itself (``_compute_loss``): one forward of the policy through TRL's
   ``_get_per_token_logps_and_entropies``, a typed batch (``losses.PolicyBatch``: policy, old and
   reference log-probs, advantages, response and senior masks, the token-mean normalisers), the
   method's loss function, TRL's metric names (``clip_ratio/*``, ``entropy``, ``kl``). TRL's own
   ``beta`` is 0 for the whole run, so TRL loads no reference and adds no KL term; the method's
   beta is in ``loss.beta`` (``LossSettings``).
2. Fail-closed senior mask: for a method whose rollouts the junior co-writes, every loss batch
   must carry the mask (TRL's ``tool_mask``, filled from our rollout's ``env_mask``) of the
   completion's shape. The loss weights tokens by it (``losses.token_weights``: 1 senior, w =
   ``junior_token_weight`` junior); the token-mean denominator is ``losses.loss_denominator``
   over the generation batch (all response tokens by default, as in the paper's verl gate).
3. A method with a KL reference scores each generation batch under the junior (also when it is not
   the senior's initial checkpoint) into ``ref_per_token_logps``, at the rollout temperature.
4. Overlapped rollouts (``max_staleness`` >= 1, ``rl.overlap``): the data loader is read ahead
   (``upcoming_prompts``: the prompts of the next rollout steps, which the rollout starts decoding), and the
   loss corrects each rollout's staleness by importance sampling on senior tokens, from the behaviour
   log-probs the rollout carries (TRL's ``sampling_per_token_logps``; ``losses.importance_weights``).

Optimiser, scheduler, gradient accumulation, distributed wrapping, logging backends,
checkpointing and resume all stay TRL's / transformers'.

Everything of TRL's (and transformers' Trainer's) private surface this project touches is in
this module and listed in ``PRIVATE_SURFACE``; ``tests/unit/rl/test_trl_surface.py`` fails naming
the missing piece when a TRL release moves one.
"""

from __future__ import annotations

import os

import torch
from trl import GRPOTrainer

from ..config.methods import MethodKind
from ..errors import TandemError
from .losses import LossSettings, PolicyBatch, Stat, loss_denominator, loss_weights, token_weights

# TRL's name for the senior mask in a loss batch (filled from the rollout's ``env_mask``).
SENIOR_MASK = "tool_mask"

# The private names we rely on: (object, attribute). Methods we override or call, then
# attributes TRL's __init__ sets; trl.trainer.utils / trl.models.utils helpers for the reference.
PRIVATE_SURFACE = {
    "methods": ("_compute_loss", "_generate_and_score_completions", "_calculate_rewards",
                "_get_per_token_logps_and_entropies", "_prepare_inputs", "_load_from_checkpoint",
                "_issue_warnings_after_load", "get_batch_samples",
                "_get_train_sampler"),
    "attributes": ("_metrics", "temperature", "num_iterations", "current_gradient_accumulation_steps", "loss_type",
                   "epsilon_low", "epsilon_high", "importance_sampling_level", "max_completion_length",
                   "aux_loss_enabled", "router_aux_loss_coef"),
    "helpers": ("trl.trainer.utils.add_fused_lm_head", "trl.trainer.utils.disable_dropout_in_model"),
}


def record_metrics(trainer: GRPOTrainer, metrics: dict[str, float], mode: str = "train") -> None:
    """Add values to TRL's per-step metric lists (``_metrics``), which TRL averages into the next log record."""
    for k, v in metrics.items():
        trainer._metrics[mode][k].append(v)


class TandemGRPOTrainer(GRPOTrainer):
    """``method``: the run's registry row; ``beta``, ``junior_imitation``, ``junior_token_weight``, ``kl_clamp``,
    ``loss_normalizer``: its loss settings (``config.loss``); ``junior``: the frozen junior (the KL reference of a
    method with one); ``importance``: (correction, clip) of an overlapped run (``config.rollout``), else None."""

    def __init__(self, *args, method: MethodKind, junior=None, beta: float = 0.0, junior_imitation: float = 0.0,
                 junior_token_weight: float = 0.0, kl_clamp: float = 0.0, loss_normalizer: str = "response_tokens",
                 importance: tuple[str, float] | None = None, model_card=None, **kwargs):
        if method.reference is not None and junior is None:
            raise TandemError(f"method {method.name} needs a junior as its KL reference model")
        kwargs["args"].beta = 0.0  # TRL: no reference of its own, no KL term; the method's is ``self.beta_kl``
        super().__init__(*args, **kwargs)
        self.model_card = model_card  # steps -> README.md text (None: TRL's card)
        self.method = method
        self.policy_loss = method.loss_function()
        self.beta_kl = beta
        self.junior_imitation = junior_imitation
        self.kl_clamp = kl_clamp
        self.junior_token_weight = junior_token_weight
        self.loss_normalizer = loss_normalizer
        self.importance = importance
        self._ahead = None  # rl.overlap's read-ahead of the data loader (``get_batch_samples``)
        self.reference = self._prepare_reference(junior) if method.reference is not None else None

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

    def _get_train_sampler(self, dataset=None):
        """TRL's sampler, with each epoch's order a function of (seed, epoch) so a run resumed in a later epoch
        draws what the uninterrupted run drew (``rl.epoch_sampler``)."""
        from .epoch_sampler import epoch_aware

        # epoch_of: a sampler that set_epoch does not reach (several processes: three wrappers deep) takes the
        # epoch from the trainer's state, which a resume restores before the data loader starts
        return epoch_aware(super()._get_train_sampler(dataset), epoch_of=lambda: int(self.state.epoch or 0))

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """transformers' batches of one update; an overlapped run reads the epoch's iterator through a
        ``Lookahead`` so that ``upcoming_prompts`` sees the batches of the rollout steps ahead."""
        if getattr(self.rollout_func, "overlap", None) is not None:
            if self._ahead is None or self._ahead.source is not epoch_iterator:
                self._ahead = Lookahead(epoch_iterator)
            epoch_iterator = self._ahead
        return super().get_batch_samples(epoch_iterator, num_batches, device)

    def upcoming_prompts(self, n: int) -> list[list]:
        """The prompts of (at most) the next ``n`` generation batches of this data epoch, this process's share,
        as TRL will hand them to the rollout; called when a generation batch starts (its first update's
        micro-batches have been drawn: the next batch lies ``generate_every - gradient_accumulation_steps``
        batches ahead, each batch repeated ``generate_every`` times by TRL's sampler)."""
        if self._ahead is None or n < 1:
            return []
        every = self.args.steps_per_generation * self.num_iterations
        first = every - self.args.gradient_accumulation_steps
        ahead = self._ahead.peek(first + (n - 1) * every + 1)
        return [[x["prompt"] for x in ahead[i]] for i in range(first, len(ahead), every)]

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        from contextlib import nullcontext

        from .zero3 import outside_zero3

        # KL-Reg's reference is the whole junior: under ZeRO-3 TRL's head would gather it as partitions
        whole = model is self.reference and self.is_deepspeed_enabled
        with outside_zero3() if whole else nullcontext():
            return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if out.get(SENIOR_MASK) is not None:  # the token-mean denominator of the whole generation batch
            weights = token_weights(out["completion_mask"], out[SENIOR_MASK], self.junior_token_weight)
            local = loss_denominator(out["completion_mask"], weights, self.loss_normalizer)
            out["num_items_in_batch"] = self.accelerator.gather(local.to(self.accelerator.device)).sum()
            junior = (out["completion_mask"] * (1 - out[SENIOR_MASK])).sum().to(self.accelerator.device)
            out["num_junior_items_in_batch"] = self.accelerator.gather(junior).sum()  # () junior-written tokens
        if self.reference is not None:  # (B, T) the reference's log-probs at the rollout temperature, no gradient
            args = self.args
            rows = args.per_device_train_batch_size if self.model.training else args.per_device_eval_batch_size
            with torch.no_grad():
                out["ref_per_token_logps"] = self._get_per_token_logps_and_entropies(
                    self.reference, torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1),
                    torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1), out["completion_ids"].size(1),
                    batch_size=rows)[0]
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

    def _record(self, stats: dict[str, Stat], mode: str) -> None:
        """Each figure reduced over every process as TRL reduces it, into TRL's per-step metric lists."""
        for name, st in stats.items():
            values, mask = st.values.detach(), st.mask
            if st.reduce == "mean":
                if values.shape[1] == 1:  # one value per row (sequence-level ratios)
                    local = torch.stack([values.sum(), torch.tensor(float(values.shape[0]), device=values.device)])
                else:
                    local = torch.stack([(values * mask).sum(), mask.sum().float()])
                totals = self.accelerator.reduce(local, reduction="sum")
                value = (totals[0] / totals[1].clamp(min=1.0)).item()
            else:  # the smallest / largest per-row masked mean (rows without a token are NaN, skipped)
                rows = values.squeeze(1) if values.shape[1] == 1 else (values * mask).sum(-1) / mask.sum(-1)
                rows = self.accelerator.gather(rows)
                rows = rows[~torch.isnan(rows)]
                pick = torch.min if st.reduce == "row-min" else torch.max
                value = pick(rows).item() if rows.numel() else float("nan")
            self._metrics[mode][name].append(value)

    def loss_settings(self) -> LossSettings:
        """The loss's numbers as they stand now (TRL's from its arguments, ours from the run's settings)."""
        return LossSettings(
            loss_type=self.loss_type, clip_low=self.epsilon_low, clip_high=self.epsilon_high, delta=self.args.delta,
            importance_sampling_level=self.importance_sampling_level, junior_token_weight=self.junior_token_weight,
            beta=self.beta_kl, kl_clamp=self.kl_clamp, junior_imitation=self.junior_imitation,
            max_completion_length=self.max_completion_length,
            sapo_temperatures=(self.args.sapo_temperature_pos, self.args.sapo_temperature_neg),
            **({} if self.importance is None else
               {"importance_correction": self.importance[0], "importance_clip": self.importance[1]}))

    def _senior_mask(self, inputs) -> torch.Tensor | None:
        """The batch's senior mask; for a method whose rollouts the junior co-writes, a TandemError if it is missing
        or of another shape than the completions (fail-closed: never a silent fall-back to vanilla GRPO)."""
        mask = inputs.get(SENIOR_MASK)
        if self.method.junior_in_rollout:
            if mask is None:
                raise TandemError("tandem loss batch has no senior mask; refusing to fall back to vanilla GRPO")
            if mask.shape != inputs["completion_ids"].shape:
                raise TandemError(f"senior mask shape {tuple(mask.shape)} differs from completions "
                                  f"{tuple(inputs['completion_ids'].shape)}")
        return mask

    def _compute_loss(self, model, inputs):
        """One forward of the policy, the typed batch, the method's loss; TRL's figures logged."""
        senior = self._senior_mask(inputs)
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]  # (B, P), (B, T)
        ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P + T)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logps, entropies, aux = self._get_per_token_logps_and_entropies(
            model, ids, attention, completion_ids.size(1), compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled)  # (B, T), (B, T)
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        advantages = inputs["advantages"]
        old = inputs.get("old_per_token_logps")  # None on-policy (one update per generation batch)
        junior_items = inputs.get("num_junior_items_in_batch")
        batch = PolicyBatch(
            logps=logps, old_logps=logps.detach() if old is None else old, ref_logps=inputs.get("ref_per_token_logps"),
            advantages=advantages.unsqueeze(1) if advantages.dim() == 1 else advantages,  # (B, 1) or (B, T)
            response_mask=inputs["completion_mask"], senior_mask=senior,
            normalizer=self._token_mean_normalizer(inputs["num_items_in_batch"]),
            junior_normalizer=None if junior_items is None else self._token_mean_normalizer(junior_items),
            accumulation=accumulation,
            behaviour_logps=inputs.get("sampling_per_token_logps") if self.importance is not None else None)
        settings = self.loss_settings()
        loss, stats = self.policy_loss(batch, settings)
        stats["entropy"] = Stat(entropies, loss_weights(batch, settings))
        if self.aux_loss_enabled:  # a mixture-of-experts router's load-balancing loss, as TRL adds it
            loss = loss + self.router_aux_loss_coef * aux / accumulation
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux).mean().item())
        self._record(stats, mode)
        return loss


class Lookahead:
    """An iterator over ``source`` that can show items before they are taken (``peek``)."""

    def __init__(self, source):
        self.source, self.buffer = source, []

    def __iter__(self):
        return self

    def __next__(self):
        if self.buffer:
            return self.buffer.pop(0)
        return next(self.source)

    def peek(self, n: int) -> list:
        """The next ``n`` items (fewer at the end), left to be taken."""
        while len(self.buffer) < n:
            try:
                self.buffer.append(next(self.source))
            except StopIteration:
                break
        return self.buffer[:n]
