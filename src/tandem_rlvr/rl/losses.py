"""Per-token weights and the token-mean denominator of the Tandem GRPO loss (pure tensor functions).

The clipped GRPO surrogate itself is TRL's (``GRPOTrainer._compute_loss``, ``loss_type="dapo"``:
sum over tokens of weight x per-token loss, divided by one count for the whole generation
batch). Tandem RLVR changes only the two inputs defined here:

- ``token_weights``: the paper's gate. A senior-written token enters the objective at weight 1, a
  junior-written one at the junior-token weight w (the paper's ``tandem_jr_tkn_weight``; 0 in
  its runs, so junior tokens carry no gradient), padding at 0. w = 1 is vanilla GRPO on the
  tandem rollout.
- ``loss_denominator``: what the sum is divided by. ``response_tokens`` (the paper's verl
  gate, our default): every response token of the batch, junior tokens included, so the gate
  changes only the numerator. ``senior_tokens`` (TRL's ``dapo`` with ``env_mask``, our behaviour
  before the paper-fidelity review, docs/paper_fidelity.md): only the tokens in the loss (senior tokens, plus w x junior tokens), which
  scales the per-token gradient by about 1/senior share (about 2x at p = 0.5) relative to the
  paper's released patch (the paper's own gate test and its older verl fork divide by the gated
  mask, i.e. senior tokens: docs/paper_fidelity.md). Under AdamW a constant rescale of the loss
  cancels (the update divides by the gradient's own scale), so the two differ only through
  gradient clipping (``max_grad_norm``) and through the weighting across mini-batches whose
  senior shares differ, not through the learning rate.

KL-Reg's per-token term is ``k3_kl``, verl's ``low_var_kl`` (``core_algos.kl_penalty``): the
log-ratio d = log p_ref - log p_senior clamped to [-20, 20] before ``exp`` (a guard that is
always on: without it one token with d > 88 overflows fp32 to inf and its gradient is NaN even
where the k3 clamp zeroes it), k3 = exp(d) - d - 1, then k3 clamped to [-kl_clamp, kl_clamp]
(verl: 10; ``kl_clamp`` 0: no clamp of k3, the estimator as TRL writes it).

Shapes: B rows (prompts x G), T completion positions.
"""

from __future__ import annotations

import torch

from ..errors import TandemError

LOSS_NORMALIZERS = ("response_tokens", "senior_tokens")
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
