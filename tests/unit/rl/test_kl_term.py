"""KL-Reg's per-token term is verl's ``low_var_kl`` (``core_algos.kl_penalty``): log-ratio guarded
at +-20, k3 = exp(d) - d - 1, k3 clamped to [-kl_clamp, kl_clamp], and ``kl_clamp: 0`` = no clamp.

Expected values: worked by hand below (k3 and its derivative 1 - e^d at d = +-ln 2, 0, 3), and on
the tiny model's batch the plain-torch loss of ``test_loss_reference`` (textbook k3, no guard,
which no ordinary token reaches). Three properties: with the clamp off the term still reaches the
loss and the gradient (toward the junior); a clamp of any value changes only the tokens whose k3
lies beyond it, by exactly (c - k3) each, with no gradient through them; and one extreme
log-ratio (d = 100, where exp overflows fp32) leaves the loss finite and the gradient free of NaN.
"""

import math

import pytest
import torch

from tandem_rlvr.rl.losses import k3_kl

from helpers.loss import check_loss_and_grads, prepared, trainer_loss_and_grads
from reference.grpo_loss import hand_loss_and_grads, teacher_forced_logps


LN2 = math.log(2.0)
# d = log p_ref - log p_senior; k3 = e^d - d - 1; d k3 / d log p_senior = -(e^d - 1) = 1 - e^d
D = torch.tensor([[LN2, -LN2, 0.0, 3.0]])
K3 = [2 - LN2 - 1, 0.5 + LN2 - 1, 0.0, math.exp(3) - 4]  # 0.30685, 0.19315, 0, 16.0855
DK3 = [1 - 2.0, 1 - 0.5, 0.0, 1 - math.exp(3)]  # -1, 0.5, 0, -19.0855


def _k3_and_grad(d: torch.Tensor, kl_clamp: float):
    """k3_kl at log p_senior = -d (log p_ref = 0) and its gradient with respect to log p_senior."""
    logp = (-d).clone().requires_grad_(True)
    k3 = k3_kl(torch.zeros_like(d), logp, kl_clamp)
    k3.sum().backward()
    return k3.detach()[0].tolist(), logp.grad[0].tolist()


def test_k3_without_clamp_is_the_textbook_estimator_value_and_gradient():
    k3, grad = _k3_and_grad(D, 0.0)
    assert k3 == pytest.approx(K3, rel=1e-6, abs=1e-7)
    assert grad == pytest.approx(DK3, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("c", [10.0, 1.0, 0.25, 0.1, 100.0])
def test_a_k3_clamp_changes_only_the_tokens_beyond_it(c):
    k3, grad = _k3_and_grad(D, c)
    want = [min(v, c) for v in K3]  # k3 >= 0, so only the upper bound can bind
    want_grad = [g if v <= c else 0.0 for v, g in zip(K3, DK3, strict=True)]
    assert k3 == pytest.approx(want, rel=1e-6, abs=1e-7)
    assert grad == pytest.approx(want_grad, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("kl_clamp", [10.0, 0.0])
def test_one_extreme_log_ratio_gives_a_finite_loss_and_no_nan_gradient(kl_clamp):
    # verl: d is clamped to [-20, 20] before exp; beyond the guard the token has no gradient
    d = torch.tensor([[100.0, LN2, -100.0]])
    k3, grad = _k3_and_grad(d, kl_clamp)
    guarded = [math.exp(20) - 21, 2 - LN2 - 1, math.exp(-20) + 19]  # d = 20, ln 2, -20
    assert k3 == pytest.approx([min(v, kl_clamp) if kl_clamp else v for v in guarded], rel=1e-6)
    assert grad == pytest.approx([0.0, -1.0, 0.0], abs=1e-6)
    assert all(math.isfinite(g) for g in grad)


def test_klreg_without_a_clamp_still_pulls_the_senior_toward_the_junior(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6, method="klreg", beta=0.5, kl_clamp=0.0)
    assert run.trainer.kl_clamp == 0.0
    check_loss_and_grads(run, batch, 0.6, beta=0.5, kl_clamp=0.0)  # beta x the unclamped k3, loss and gradient
    # the term is material: without it both the loss and the gradient are measurably other
    loss, grads = trainer_loss_and_grads(run.trainer, batch)
    no_kl, no_kl_grads = hand_loss_and_grads(run, batch, 0.6, beta=0.0)
    assert float(loss - no_kl) > 1e-3
    assert max(float((grads[n] - no_kl_grads[n]).abs().max()) for n in grads) > 1e-4


def test_klreg_clamp_of_any_value_changes_only_the_terms_beyond_it(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6, method="klreg", beta=0.5, kl_clamp=0.0)
    with torch.no_grad():
        lp = teacher_forced_logps(run.trainer.model, batch, 0.6)
    d = batch["ref_per_token_logps"] - lp
    k3 = (torch.exp(d) - d - 1)[batch["completion_mask"].bool()]  # textbook k3 of every response token
    tokens = batch["completion_mask"].sum()
    base, _ = trainer_loss_and_grads(run.trainer, batch)
    for c in (float(k3.quantile(q)) for q in (0.25, 0.5, 0.9)):
        run.trainer.kl_clamp = c
        loss, _ = trainer_loss_and_grads(run.trainer, batch)
        # each token beyond c loses (k3 - c); every other token's term is untouched
        want = base + 0.5 * float((k3.clamp(max=c) - k3).sum()) / tokens
        torch.testing.assert_close(loss, want.to(loss.dtype), atol=1e-5, rtol=1e-5)
        check_loss_and_grads(run, batch, 0.6, beta=0.5, kl_clamp=c)  # and the gradient, by plain torch
    run.trainer.kl_clamp = float(k3.max()) + 1.0  # beyond every token: the unclamped loss exactly
    torch.testing.assert_close(trainer_loss_and_grads(run.trainer, batch)[0], base)


def test_klreg_loss_stays_finite_with_one_extreme_log_ratio(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6, method="klreg", beta=0.5, kl_clamp=10.0)
    assert batch["completion_mask"][0, 0] == 1
    model, tokens = run.trainer.model, batch["completion_mask"].sum()
    want, want_grads = hand_loss_and_grads(run, batch, 0.6, beta=0.5, kl_clamp=10.0)
    # by plain torch: token (0, 0)'s own k3 term, which the doctored reference replaces by the constant 10
    lp = teacher_forced_logps(model, batch, 0.6)
    d0 = batch["ref_per_token_logps"][0, 0] - lp[0, 0]
    own = 0.5 * (torch.exp(d0) - d0 - 1).clamp(max=10.0) / tokens
    model.zero_grad()
    own.backward()
    want = want - own.detach() + 0.5 * 10.0 / tokens
    params = dict(model.named_parameters())
    want_grads = {n: g - params[n].grad for n, g in want_grads.items()}
    model.zero_grad()
    batch["ref_per_token_logps"] = batch["ref_per_token_logps"].clone()
    batch["ref_per_token_logps"][0, 0] = lp[0, 0].detach() + 100.0  # d = 100: e^d overflows fp32
    loss, grads = trainer_loss_and_grads(run.trainer, batch)
    assert math.isfinite(float(loss)) and all(torch.isfinite(g).all() for g in grads.values())
    torch.testing.assert_close(loss, want, atol=1e-5, rtol=1e-4)
    for n in grads:
        torch.testing.assert_close(grads[n], want_grads[n], atol=1e-6, rtol=1e-3, msg=n)
