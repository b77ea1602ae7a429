"""The loss of each built-in training method: one pure function of the batch, named by the method's
registry row (``config.methods.REGISTRY``).

Each maps a ``losses.PolicyBatch`` and the run's ``losses.LossSettings`` to ``(loss, stats)`` and reads
as the method's definition, a sum of the terms of ``rl.losses``. Who wrote the rollout (the schedule,
the senior alone), whether the senior mask must be there and what the reference is are the row's; the
function only adds terms. A plug-in's method is a function of the same signature and its own row
(docs/contributing.md).
"""

from __future__ import annotations

from .losses import LossSettings, PolicyBatch, Term, add_terms, imitation_term, kl_term, policy_term


def grpo_loss(b: PolicyBatch, s: LossSettings) -> Term:
    """Vanilla GRPO: the clipped surrogate."""
    return policy_term(b, s)


def tandem_loss(b: PolicyBatch, s: LossSettings) -> Term:
    """Tandem RLVR: the clipped surrogate gated by the senior mask (``loss_weights``), plus the optional
    junior-imitation term (our extension: 0 unless ``junior_imitation`` > 0)."""
    return add_terms(policy_term(b, s), imitation_term(b, s))


def klreg_loss(b: PolicyBatch, s: LossSettings) -> Term:
    """KL-Reg: the clipped surrogate plus beta x k3 KL(senior || junior) on the senior's own tokens."""
    return add_terms(policy_term(b, s), kl_term(b, s))


def tandem_klreg_loss(b: PolicyBatch, s: LossSettings) -> Term:
    """Tandem + KL-to-junior: Tandem RLVR's gated surrogate plus KL-Reg's term on the senior-written tokens
    (the tokens sampled from the senior, where k3 estimates KL(senior || junior)), plus the optional
    junior-imitation term."""
    return add_terms(policy_term(b, s), kl_term(b, s), imitation_term(b, s))
