"""The Tandem GRPO loss as pure tensor functions: the typed batch, the terms a method's loss adds up,
the per-token weights and the token-mean denominator.

A method's loss (``rl.methods``, named by its ``config.methods.MethodKind`` row) maps a
``PolicyBatch`` and the run's ``LossSettings`` to ``(loss, stats)``; the trainer does the forward,
builds the batch and logs the stats (``Stat``: per-token values, the mask they are averaged over,
how). Its terms:

- ``policy_term``: the clipped GRPO surrogate of every TRL ``loss_type`` in ``LOSS_TYPES`` (TRL
  1.16's formulas and aggregations; ``dapo``, our default, is the token-mean of the paper's verl
  gate), with TRL's ``delta`` as verl's dual-clip for negative advantages, over the tokens weighted
  by ``token_weights``.
- ``kl_term``: beta x KL-Reg's per-token k3 to the reference, token-mean over the same weights.
- ``imitation_term``: our junior-imitation extension (not in the paper): coef x token-mean NLL of
  the junior-written tokens under the senior.

Tandem RLVR changes only two inputs of the surrogate:

- ``token_weights``: the paper's gate. A senior-written token enters the objective at weight 1, a
  junior-written one at the junior-token weight w (the paper's ``tandem_jr_tkn_weight``; 0 in
  its runs, so junior tokens carry no gradient), padding at 0. w = 1 is vanilla GRPO on the
  tandem rollout.
- ``loss_denominator``: what the token sum is divided by. ``response_tokens`` (the paper's verl
  gate, our default): every response token of the batch, junior tokens included, so the gate
  changes only the numerator. ``senior_tokens``: only the tokens in the loss (senior tokens, plus
  w x junior tokens), which scales the per-token gradient by about 1/senior share (about 2x at
  p = 0.5) relative to the paper's released patch (the paper's own gate test and its older verl
  fork divide by the gated mask: docs/paper_fidelity.md). Under AdamW a constant rescale of the
  loss cancels, so the two differ only through gradient clipping (``max_grad_norm``) and through
  the weighting across mini-batches whose senior shares differ, not through the learning rate.

KL-Reg's per-token term is ``k3_kl``, verl's ``low_var_kl`` (``core_algos.kl_penalty``): the
log-ratio d = log p_ref - log p_senior clamped to [-20, 20] before ``exp`` (a guard that is
always on: without it one token with d > 88 overflows fp32 to inf and its gradient is NaN even
where the k3 clamp zeroes it), k3 = exp(d) - d - 1, then k3 clamped to [-kl_clamp, kl_clamp]
(verl: 10; ``kl_clamp`` 0: no clamp of k3, the estimator as TRL writes it).

Shapes: B rows (prompts x G), T completion positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..config.loss import LOSS_NORMALIZERS, LOSS_TYPES
from ..errors import TandemError

LOG_RATIO_BOUND = 20.0  # verl's low_var_kl clamps log p_ref - log p to [-20, 20] before exp


def token_weights(completion_mask: torch.Tensor, senior_mask: torch.Tensor, junior_token_weight: float) -> torch.Tensor:
    """(B, T) float32 weight of each token in the clipped objective: 1 senior, w junior, 0 padding.

    completion_mask: (B, T) 1 on response tokens; senior_mask: (B, T) 1 where the senior wrote the token.
    """
    senior = senior_mask.to(torch.float32)
    return completion_mask.to(torch.float32) * (senior + junior_token_weight * (1.0 - senior))


def loss_denominator(completion_mask: torch.Tensor, weights: torch.Tensor, normalizer: str) -> torch.Tensor:
    """() float32 token count the summed loss is divided by (see module docstring).

    completion_mask: (B, T); weights: (B, T) from ``token_weights``.
    """
    if normalizer == "response_tokens":
        return completion_mask.to(torch.float32).sum()
    if normalizer == "senior_tokens":
        return weights.sum()
    raise TandemError(f"unknown loss_normalizer {normalizer!r}; valid: {', '.join(LOSS_NORMALIZERS)}")


def k3_kl(ref_logps: torch.Tensor, logps: torch.Tensor, kl_clamp: float) -> torch.Tensor:
    """(B, T) k3 estimate of KL(senior || reference) per token, verl's ``low_var_kl`` (module docstring).

    ref_logps, logps: (B, T) log-probs of the sampled tokens under the reference and the senior;
    kl_clamp: bound of the k3 value (0: unbounded; the log-ratio guard of +-20 always applies)."""
    d = (ref_logps - logps).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (B, T) log p_ref / p_senior
    k3 = torch.exp(d) - d - 1
    return k3.clamp(-kl_clamp, kl_clamp) if kl_clamp > 0 else k3


@dataclass(frozen=True)
class PolicyBatch:
    """One micro-batch of the loss (B rows, T completion positions).

    logps: (B, T) log-probs of the completion tokens under the policy (with gradient).
    old_logps: (B, T) under the policy that sampled them (no gradient; ``logps.detach()`` on-policy).
    ref_logps: (B, T) under the KL reference (the junior), or None for a method without one.
    advantages: (B, 1) or (B, T) group-relative advantages.
    response_mask: (B, T) 1 on response tokens, 0 on padding.
    senior_mask: (B, T) 1 where the senior wrote the token, or None (no mask: the senior wrote all).
    normalizer: () what a summed per-token term of this micro-batch is divided by: the generation
        batch's ``loss_denominator`` per process and per update (so micro-batching leaves the update alone).
    junior_normalizer: () the same for the junior-written tokens of the generation batch, or None.
    accumulation: micro-batches per update (the per-row and per-micro-batch means divide by it).
    behaviour_logps: (B, T) under the weights that drew the rollout (an overlapped run's rollouts are drawn by
        earlier weights than ``old_logps``'), or None: no importance-sampling correction.
    """

    logps: torch.Tensor
    old_logps: torch.Tensor
    ref_logps: torch.Tensor | None
    advantages: torch.Tensor
    response_mask: torch.Tensor
    senior_mask: torch.Tensor | None
    normalizer: torch.Tensor
    junior_normalizer: torch.Tensor | None = None
    accumulation: float = 1.0
    behaviour_logps: torch.Tensor | None = None


@dataclass(frozen=True)
class LossSettings:
    """The numbers of a run's loss: TRL's (``loss_type``, the clip range, ``delta``, the importance-sampling
    level, ``max_completion_length`` for ``dr_grpo``, SAPO's temperatures) and the tandem ones."""

    loss_type: str = "dapo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    delta: float | None = None  # cap of the ratio; for A < 0 verl's dual-clip c
    importance_sampling_level: str = "token"
    junior_token_weight: float = 0.0
    beta: float = 0.0
    kl_clamp: float = 0.0
    junior_imitation: float = 0.0
    max_completion_length: int = 1
    sapo_temperatures: tuple[float, float] = (1.0, 1.05)  # (A > 0, A <= 0)
    importance_correction: str = "token_truncate"  # config.rollout.IMPORTANCE_CORRECTIONS (with behaviour log-probs)
    importance_clip: float = 3.0


class Stat(NamedTuple):
    """A logged figure: ``values`` (B, T) or (B, 1) averaged over ``mask`` (B, T) of every process
    (``reduce`` "mean"), or the smallest / largest per-row masked mean ("row-min" / "row-max")."""

    values: torch.Tensor
    mask: torch.Tensor
    reduce: str = "mean"


Term = tuple[torch.Tensor, dict[str, Stat]]


def loss_weights(b: PolicyBatch, s: LossSettings) -> torch.Tensor:
    """(B, T) float32 weight of each token in the objective: ``token_weights`` with a senior mask, else
    the response mask."""
    if b.senior_mask is None:
        return b.response_mask.to(torch.float32)
    return token_weights(b.response_mask, b.senior_mask, s.junior_token_weight)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, b: PolicyBatch, s: LossSettings) -> torch.Tensor:
    """() the loss of ``per_token`` (B, T) or (B, 1) over ``mask`` (B, T) by ``s.loss_type``, as TRL 1.16:
    token sum / ``b.normalizer`` (dapo, cispo); per-row token mean, mean over rows (grpo, sapo); token
    mean of the micro-batch (bnpo); token sum / (B x max_completion_length) (dr_grpo); per-row token sum,
    mean over rows (luspo). All but the first divide by ``b.accumulation``."""
    summed = per_token * mask  # (B, T)
    if s.loss_type in ("dapo", "cispo"):
        return summed.sum() / b.normalizer
    if s.loss_type in ("grpo", "sapo"):
        loss = (summed.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif s.loss_type == "bnpo":
        loss = summed.sum() / mask.sum().clamp(min=1.0)
    elif s.loss_type == "dr_grpo":
        loss = summed.sum() / (per_token.size(0) * s.max_completion_length)
    elif s.loss_type == "luspo":
        loss = summed.sum(-1).mean()
    else:
        raise TandemError(f"unknown loss_type {s.loss_type!r}; valid: {', '.join(LOSS_TYPES)}")
    return loss / b.accumulation


def importance_weights(b: PolicyBatch, s: LossSettings) -> torch.Tensor:
    """(B, T) or (B, 1) the importance-sampling weights of a rollout drawn by earlier weights (``behaviour_logps``),
    no gradient: exp(old - behaviour) on senior-written tokens, token by token or summed per row (``sequence_*``),
    truncated at ``importance_clip`` (``*_truncate``) or zeroed above it (``*_mask``), as TRL's
    ``vllm_importance_sampling_mode``. Junior-written tokens and padding have weight 1 and add nothing to a row's
    sum: the junior's tokens were never the senior's to draw."""
    senior = b.response_mask.to(torch.float32) if b.senior_mask is None else \
        token_weights(b.response_mask, b.senior_mask, 0.0)
    diff = torch.nan_to_num((b.old_logps - b.behaviour_logps).detach() * senior, nan=0.0)  # (B, T)
    mode = s.importance_correction
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    w = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(w, max=s.importance_clip)
    if mode.endswith("mask"):
        return w.masked_fill(w > s.importance_clip, 0.0)
    raise TandemError(f"unknown importance_correction {mode!r}; valid: token_truncate, token_mask, "
                      "sequence_truncate, sequence_mask")


def policy_term(b: PolicyBatch, s: LossSettings) -> Term:
    """The clipped GRPO surrogate (or CISPO's, SAPO's) over the weighted tokens, and TRL's clip figures."""
    mask = loss_weights(b, s)  # (B, T)
    A = b.advantages  # (B, 1) or (B, T)
    log_ratio = b.logps - b.old_logps  # (B, T)
    if s.importance_sampling_level == "token":
        coef_1 = torch.exp(log_ratio)
    elif s.importance_sampling_level == "sequence":  # one ratio per row: the masked mean log-ratio
        coef_1 = torch.exp((log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0))
    else:
        raise TandemError(f"unknown importance_sampling_level {s.importance_sampling_level!r}; valid: token, sequence")
    stats = {}
    if s.loss_type == "cispo":
        per_token = -torch.clamp(coef_1, max=s.clip_high).detach() * A * b.logps
        stats["cispo_clip_ratio"] = Stat(((coef_1 > s.clip_high) & (A > 0)).float(), mask)
    elif s.loss_type == "sapo":
        temps = torch.where(A > 0, s.sapo_temperatures[0], s.sapo_temperatures[1])
        per_token = -torch.sigmoid(temps * (coef_1 - 1)) * 4 / temps * A
    else:
        coef_2 = torch.clamp(coef_1, 1 - s.clip_low, 1 + s.clip_high)
        if s.delta is not None:
            coef_1 = torch.clamp(coef_1, max=s.delta)
        per_token = -torch.min(coef_1 * A, coef_2 * A)
        low = ((coef_1 < 1 - s.clip_low) & (A < 0)).float()
        high = ((coef_1 > 1 + s.clip_high) & (A > 0)).float()
        stats.update({"clip_ratio/low_mean": Stat(low, mask), "clip_ratio/high_mean": Stat(high, mask),
                      "clip_ratio/region_mean": Stat(torch.maximum(low, high), mask),
                      "clip_ratio/low_min": Stat(low, mask, "row-min"),
                      "clip_ratio/high_max": Stat(high, mask, "row-max")})
    if b.behaviour_logps is not None:  # an overlapped run: the rollout was drawn by earlier weights
        w = importance_weights(b, s)
        per_token = per_token * w
        senior = mask if b.senior_mask is None else token_weights(b.response_mask, b.senior_mask, 0.0)
        stats["importance/weight_mean"] = Stat(w.expand_as(senior), senior)
        clipped = (torch.exp(torch.nan_to_num((b.old_logps - b.behaviour_logps).detach(), nan=0.0))
                   > s.importance_clip).float()
        if s.importance_correction.startswith("token"):
            stats["importance/clipped_share"] = Stat(clipped, senior)
    return aggregate(per_token, mask, b, s), stats


def kl_term(b: PolicyBatch, s: LossSettings) -> Term:
    """beta x the k3 KL to the reference, token-mean over the weighted tokens (``b.normalizer``)."""
    if b.ref_logps is None:
        raise TandemError("a KL term needs the reference's log-probs, and this loss batch has none")
    mask = loss_weights(b, s)
    k3 = k3_kl(b.ref_logps, b.logps, s.kl_clamp)  # (B, T)
    return s.beta * (k3 * mask).sum() / b.normalizer, {"kl": Stat(k3, mask)}


def imitation_term(b: PolicyBatch, s: LossSettings) -> Term:
    """coef x the token-mean NLL of the junior-written tokens under the senior (0 and no figure at coef 0)."""
    if not s.junior_imitation:
        return b.logps.new_zeros(()), {}
    if b.senior_mask is None or b.junior_normalizer is None:
        raise TandemError("junior imitation needs the senior mask and the junior-token count in the loss batch")
    jmask = b.response_mask * (1 - b.senior_mask)  # (B, T) junior-written tokens
    nll = -(b.logps * jmask).sum()
    return s.junior_imitation * nll / b.junior_normalizer, {"junior_imitation/nll": Stat(-b.logps, jmask)}


def add_terms(*terms: Term) -> Term:
    """The sum of the terms' losses, and all their figures."""
    loss, stats = terms[0][0], dict(terms[0][1])
    for value, more in terms[1:]:
        loss = loss + value
        stats.update(more)
    return loss, stats
