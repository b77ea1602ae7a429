"""The loss part: the clipped GRPO objective's knobs, the KL term, junior-token weights, the optimiser.

``LOSS_NORMALIZERS`` and ``LOSS_TYPES`` live here (``rl.losses`` implements them), so settings import
nothing above them. The trainer computes the whole loss itself (``rl.losses``), so a TRL setting that
changes TRL's loss in a way ours does not implement is refused where the ``trl`` key is read
(``check_trl_loss``), not silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TandemError
from .fields import check_part, setting

LOSS_NORMALIZERS = ("response_tokens", "senior_tokens")  # the token-mean denominators of rl.losses
# GRPOConfig loss_type values rl.losses implements (TRL 1.16's formulas); dapo is the run default
LOSS_TYPES = ("dapo", "grpo", "bnpo", "dr_grpo", "luspo", "cispo", "sapo")
IMPORTANCE_LEVELS = ("token", "sequence")  # GRPOConfig importance_sampling_level values rl.losses implements
# GRPOConfig fields of TRL's loss that rl.losses does not implement: field -> (the value it must keep, why)
TRL_LOSS_UNSUPPORTED = {
    "top_entropy_quantile": (1.0, "the tandem loss has no high-entropy token mask"),
    "off_policy_mask_threshold": (None, "the tandem loss has no off-policy sequence mask"),
    "use_adaptive_entropy": (False, "the paper's objective has no entropy bonus"),
    "sync_ref_model": (False, "the KL reference is the frozen junior"),
}


def check_trl_loss(trl: dict) -> None:
    """A one-line TandemError for a ``trl`` field the tandem loss cannot honour (``LOSS_TYPES``,
    ``TRL_LOSS_UNSUPPORTED``)."""
    if "loss_type" in trl and trl["loss_type"] not in LOSS_TYPES:
        raise TandemError(f"trl: loss_type {trl['loss_type']!r} is not implemented by the tandem loss "
                          f"(rl/losses.py); valid: {', '.join(LOSS_TYPES)}")
    if trl.get("importance_sampling_level", "token") not in IMPORTANCE_LEVELS:
        raise TandemError(f"trl: unknown importance_sampling_level {trl['importance_sampling_level']!r}; valid: "
                          f"{', '.join(IMPORTANCE_LEVELS)}")
    for name, (value, why) in TRL_LOSS_UNSUPPORTED.items():
        if name in trl and trl[name] != value:
            raise TandemError(f"trl: {name}={trl[name]!r} is not supported ({why}); it must stay {value!r}")


@dataclass(frozen=True)
class LossPart:
    """Learning rate, clipping, KL, the weights of junior-written tokens, the token-mean denominator."""

    lr: float = setting(1e-6, "learning rate (AdamW)", range=(0, None, True))
    clip: float = setting(0.2, "PPO/GRPO clip epsilon", range=(0, None, True))
    beta: float = setting(0.0, "KL(senior || junior) coefficient of a method with a KL reference (its "
                          "registry row; 0 = the row's default, 1e-3 for klreg); must be 0 for the others",
                          range=(0, None, False))
    junior_token_weight: float = setting(0.0, "weight w of junior-written tokens in the clipped GRPO objective (the "
                                         "paper's tandem_jr_tkn_weight; paper: 0; 1 = vanilla GRPO on tandem rollouts)",
                                         range=(0, 1, False))
    loss_normalizer: str = setting("response_tokens", "token-mean denominator: response_tokens (every response token "
                                   "of the batch, junior ones included: the paper's released patch) or senior_tokens "
                                   "(the tokens in the loss only, as the paper's gate test reads it; about "
                                   "1/senior-share larger gradients, which AdamW cancels but gradient clipping does "
                                   "not)", choices=LOSS_NORMALIZERS)
    junior_imitation: float = setting(0.0, "coefficient of a junior-imitation NLL on junior-written tokens (methods "
                                      "whose rollouts the junior co-writes; our extension, not in the paper: 0 = off; "
                                      "the paper's launcher's lambda_jun is junior_token_weight here)",
                                      range=(0, None, False))
    scale_rewards: bool = setting(True, "divide advantages by the group reward std (paper: yes)")
    weight_decay: float = setting(0.01, "AdamW weight decay (paper / verl: 0.01)", range=(0, None, False))
    dual_clip: float = setting(3.0, "dual-clip constant c for negative advantages: the ratio is capped at c there "
                               "(verl: 3; 0 = off); must exceed 1 + clip", range=(0, None, False))
    kl_clamp: float = setting(10.0, "KL term: clamp each token's k3 to [-c, c] (verl: 10; 0 = off)",
                              range=(0, None, False))

    def __post_init__(self):
        check_part(self)
        if self.dual_clip and self.dual_clip <= 1 + self.clip:
            raise TandemError(f"dual_clip must be 0 (off) or > 1 + clip = {1 + self.clip}, got {self.dual_clip}")
