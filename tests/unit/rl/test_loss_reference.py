"""The trainer's GRPO loss and gradient equal a few lines of plain torch on a hand-worked batch.

The expected values are derived here, not by the code under test: the senior's and the junior's
log-probs come from our own teacher-forced forward at the rollout temperature, the advantages from
the recorded rewards (group mean, group std), the clipped surrogate, the k3 KL to the junior and the
junior-imitation NLL from their textbook formulas (the dual-clip and the KL clamp as verl's
``compute_policy_loss_vanilla`` and ``low_var_kl`` write them). Old log-probs are set so the
importance ratios cycle through 0.5, 1.0, 1.1, 1.5 and 4.0 (below, inside and above the clip range
[0.8, 1.2], and above the dual-clip c = 3), so clipped, unclipped and dual-clipped tokens all occur.
Each case checks the loss value and every parameter's gradient.
"""

import pytest
import torch

from helpers.loss import RATIOS, check_loss_and_grads, prepared, trainer_loss_and_grads
from reference.grpo_loss import teacher_forced_logps


@pytest.mark.parametrize("normalizer,temperature", [("response_tokens", 0.6), ("senior_tokens", 0.6),
                                                    ("response_tokens", 1.0)])
def test_tandem_loss_and_gradient_match_plain_torch(train_inputs, tmp_path, normalizer, temperature):
    run, batch = prepared(train_inputs, tmp_path, temperature=temperature, loss_normalizer=normalizer)
    response, senior = batch["completion_mask"].float(), batch["completion_mask"] * batch["tool_mask"]
    assert 0 < senior.sum() < response.sum()  # a real mixture, so the two normalisations differ
    assert (batch["advantages"] != 0).any()
    check_loss_and_grads(run, batch, temperature, normalizer=normalizer)


def test_klreg_loss_uses_k3_to_the_junior_at_the_rollout_temperature(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6, method="klreg", beta=0.5)
    with torch.no_grad():
        ref = teacher_forced_logps(run.prep.pair.junior, batch, 0.6)
    m = batch["completion_mask"].bool()
    torch.testing.assert_close(batch["ref_per_token_logps"][m], ref[m], atol=1e-4, rtol=1e-4)
    check_loss_and_grads(run, batch, 0.6, beta=0.5)


def test_junior_imitation_term_reaches_the_gradient(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6, junior_imitation=0.5)
    check_loss_and_grads(run, batch, 0.6, lam=0.5)
    batch["advantages"] = torch.zeros_like(batch["advantages"])  # only the imitation term is left
    _, grads = trainer_loss_and_grads(run.trainer, batch)
    assert any(float(g.abs().max()) > 0 for g in grads.values())
    check_loss_and_grads(run, batch, 0.6, lam=0.5)


def test_junior_token_weight_enters_loss_and_gradient(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6, junior_token_weight=0.25)
    check_loss_and_grads(run, batch, 0.6, w=0.25)


def test_dual_clip_caps_negative_advantage_tokens_and_can_be_turned_off(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6)
    A = batch["advantages"].unsqueeze(1).expand_as(batch["completion_mask"])
    T = batch["completion_ids"].shape[1]
    at_4 = torch.tensor([RATIOS[t % len(RATIOS)] == 4.0 for t in range(T)]).expand_as(A)
    assert ((A < 0) & at_4 & batch["completion_mask"].bool() & batch["tool_mask"].bool()).any()  # the cap bites
    check_loss_and_grads(run, batch, 0.6, dual_clip=3.0)
    run.trainer.args.delta = None  # dual_clip 0: plain PPO clipping, which differs on those tokens
    check_loss_and_grads(run, batch, 0.6, dual_clip=0.0)


def test_klreg_k3_term_is_clamped_per_token(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6, method="klreg", beta=0.5, kl_clamp=0.05)
    with torch.no_grad():
        lp = teacher_forced_logps(run.trainer.model, batch, 0.6)
    d = batch["ref_per_token_logps"] - lp
    k3 = torch.exp(d) - d - 1
    m = batch["completion_mask"].bool()
    assert (k3[m] > 0.05).any() and (k3[m] < 0.05).any()  # some tokens clamped, some not
    check_loss_and_grads(run, batch, 0.6, beta=0.5, kl_clamp=0.05)
