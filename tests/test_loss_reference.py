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

from tandem_rlvr.rl.assemble import build_run

from test_train import _batch, _cfg, setup  # noqa: F401  (setup is the shared module fixture)

RATIOS = (0.5, 1.0, 1.1, 1.5, 4.0)
G = 4  # group size of _cfg


def _teacher_forced_logps(model, batch, temperature: float) -> torch.Tensor:
    """(B, T) log p(completion token t | prompt, tokens < t) at ``temperature``, by plain torch."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)  # (B, P + T)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    T = batch["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=attn).logits[:, -T - 1:-1].float()  # (B, T, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def _reward_of(ids: list[int]) -> float:
    """A non-binary reward of the completion's token ids, so groups have a spread."""
    return (sum(ids) % 5) / 4 + 0.5 * (len(ids) % 2)


def _hand_advantages(batch) -> torch.Tensor:
    """(B,) (r - group mean) / (group std + 1e-4), std with Bessel's correction; a group is the rows
    of one prompt (TRL shuffles the rows of a generation batch, so groups are found by prompt)."""
    rows = [(tuple(p[m.bool()].tolist()), _reward_of(c[cm.bool()].tolist())) for p, m, c, cm in
            zip(batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"])]
    groups: dict[tuple, list[float]] = {}
    for prompt, r in rows:
        groups.setdefault(prompt, []).append(r)
    assert sorted(len(g) for g in groups.values()) == [G] * (len(rows) // G)
    out = []
    for prompt, r in rows:
        g = groups[prompt]
        mean = sum(g) / G
        std = (sum((x - mean) ** 2 for x in g) / (G - 1)) ** 0.5
        out.append((r - mean) / (std + 1e-4))
    return torch.tensor(out)


def _prepared(setup, tmp_path, **kw):  # noqa: F811
    """A run and one generation batch whose rewards vary inside each group; old log-probs set so
    that the importance ratio at position t is RATIOS[t % 4]."""
    run = build_run(_cfg(setup, tmp_path, **kw), print_fn=lambda *_: None)

    def reward(completions, completion_ids, **_):
        return [_reward_of(list(c)) for c in completion_ids]

    reward.__name__ = "accuracy_reward"
    run.trainer.reward_funcs[0] = reward
    batch, _ = _batch(run)
    torch.testing.assert_close(batch["advantages"], _hand_advantages(batch), atol=1e-4, rtol=1e-4)
    B, T = batch["completion_ids"].shape
    with torch.no_grad():
        lp = _teacher_forced_logps(run.trainer.model, batch, kw.get("temperature", 1.0))
    r = torch.tensor([RATIOS[t % len(RATIOS)] for t in range(T)]).expand(B, T)
    batch["old_per_token_logps"] = lp - r.log()
    return run, batch


def _trainer_loss_and_grads(trainer, batch):
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    trainer.model.zero_grad()
    return loss.detach(), grads


def _hand_loss_and_grads(run, batch, temperature, normalizer="response_tokens", w=0.0, beta=0.0, lam=0.0,
                         dual_clip=3.0, kl_clamp=10.0):
    """The loss by hand: clipped surrogate with verl's dual-clip for negative advantages, weights
    1 senior / w junior, + beta * k3 to the junior (at ``temperature``) clamped to [-kl_clamp,
    kl_clamp], divided by the token count, + lam * mean junior-token NLL."""
    model, junior = run.trainer.model, run.prep.pair.junior
    model.zero_grad()
    lp = _teacher_forced_logps(model, batch, temperature)  # (B, T), with grad
    A = batch["advantages"].unsqueeze(1).expand_as(lp)  # (B, T)
    ratio = torch.exp(lp - batch["old_per_token_logps"])
    clipped = torch.maximum(-A * ratio, -A * ratio.clamp(0.8, 1.2))  # the PPO loss, as verl writes it
    if dual_clip:  # verl: for A < 0 the loss is at most -A * c
        clipped = torch.where(A < 0, torch.minimum(clipped, -A * dual_clip), clipped)
    per_token = clipped
    if beta:
        with torch.no_grad():
            ref = _teacher_forced_logps(junior, batch, temperature)
        k3 = torch.exp(ref - lp) - (ref - lp) - 1  # no IS factor
        per_token = per_token + beta * (k3.clamp(-kl_clamp, kl_clamp) if kl_clamp else k3)
    response = batch["completion_mask"].float()
    senior = response * batch["tool_mask"].float()
    weight = senior + w * (response - senior)
    denominator = response.sum() if normalizer == "response_tokens" else weight.sum()
    loss = (per_token * weight).sum() / denominator
    if lam:
        junior_tokens = response - senior
        loss = loss + lam * -(lp * junior_tokens).sum() / junior_tokens.sum()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return loss.detach(), grads


def _check(run, batch, temperature, **hand):
    loss, grads = _trainer_loss_and_grads(run.trainer, batch)
    want, want_grads = _hand_loss_and_grads(run, batch, temperature, **hand)
    torch.testing.assert_close(loss, want, atol=1e-5, rtol=1e-4)
    assert grads.keys() == want_grads.keys() and grads
    for n in grads:
        torch.testing.assert_close(grads[n], want_grads[n], atol=1e-6, rtol=1e-3, msg=n)
    assert any(float(g.abs().max()) > 0 for g in grads.values())


@pytest.mark.parametrize("normalizer,temperature", [("response_tokens", 0.6), ("senior_tokens", 0.6),
                                                    ("response_tokens", 1.0)])
def test_tandem_loss_and_gradient_match_plain_torch(setup, tmp_path, normalizer, temperature):  # noqa: F811
    run, batch = _prepared(setup, tmp_path, temperature=temperature, loss_normalizer=normalizer)
    response, senior = batch["completion_mask"].float(), batch["completion_mask"] * batch["tool_mask"]
    assert 0 < senior.sum() < response.sum()  # a real mixture, so the two normalisations differ
    assert (batch["advantages"] != 0).any()
    _check(run, batch, temperature, normalizer=normalizer)


def test_klreg_loss_uses_k3_to_the_junior_at_the_rollout_temperature(setup, tmp_path):  # noqa: F811
    run, batch = _prepared(setup, tmp_path, temperature=0.6, method="klreg", beta=0.5)
    with torch.no_grad():
        ref = _teacher_forced_logps(run.prep.pair.junior, batch, 0.6)
    m = batch["completion_mask"].bool()
    torch.testing.assert_close(batch["ref_per_token_logps"][m], ref[m], atol=1e-4, rtol=1e-4)
    _check(run, batch, 0.6, beta=0.5)


def test_junior_imitation_term_reaches_the_gradient(setup, tmp_path):  # noqa: F811
    run, batch = _prepared(setup, tmp_path, temperature=0.6, junior_imitation=0.5)
    _check(run, batch, 0.6, lam=0.5)
    batch["advantages"] = torch.zeros_like(batch["advantages"])  # only the imitation term is left
    _, grads = _trainer_loss_and_grads(run.trainer, batch)
    assert any(float(g.abs().max()) > 0 for g in grads.values())
    _check(run, batch, 0.6, lam=0.5)


def test_junior_token_weight_enters_loss_and_gradient(setup, tmp_path):  # noqa: F811
    run, batch = _prepared(setup, tmp_path, temperature=0.6, junior_token_weight=0.25)
    _check(run, batch, 0.6, w=0.25)


def test_dual_clip_caps_negative_advantage_tokens_and_can_be_turned_off(setup, tmp_path):  # noqa: F811
    run, batch = _prepared(setup, tmp_path, temperature=0.6)
    A = batch["advantages"].unsqueeze(1).expand_as(batch["completion_mask"])
    T = batch["completion_ids"].shape[1]
    at_4 = torch.tensor([RATIOS[t % len(RATIOS)] == 4.0 for t in range(T)]).expand_as(A)
    assert ((A < 0) & at_4 & batch["completion_mask"].bool() & batch["tool_mask"].bool()).any()  # the cap bites
    _check(run, batch, 0.6, dual_clip=3.0)
    run.trainer.args.delta = None  # dual_clip 0: plain PPO clipping, which differs on those tokens
    _check(run, batch, 0.6, dual_clip=0.0)


def test_klreg_k3_term_is_clamped_per_token(setup, tmp_path):  # noqa: F811
    run, batch = _prepared(setup, tmp_path, temperature=0.6, method="klreg", beta=0.5, kl_clamp=0.05)
    with torch.no_grad():
        lp = _teacher_forced_logps(run.trainer.model, batch, 0.6)
    d = batch["ref_per_token_logps"] - lp
    k3 = torch.exp(d) - d - 1
    m = batch["completion_mask"].bool()
    assert (k3[m] > 0.05).any() and (k3[m] < 0.05).any()  # some tokens clamped, some not
    _check(run, batch, 0.6, beta=0.5, kl_clamp=0.05)
