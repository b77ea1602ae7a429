"""The GRPO loss and gradient by hand, in plain torch: the teacher-forced log-probs of a batch's completions
at a temperature, group-normalised advantages of a reward with a spread, and the clipped surrogate with verl's
dual-clip, the k3 KL to the junior clamped as verl's ``low_var_kl``, the senior/junior token weights and the
junior-imitation NLL, from their textbook formulas. Used by the loss tests of ``rl/`` (nothing here calls the
trainer's loss)."""

import torch

G = 4  # group size of helpers.train.train_cfg


def teacher_forced_logps(model, batch, temperature: float) -> torch.Tensor:
    """(B, T) log p(completion token t | prompt, tokens < t) at ``temperature``, by plain torch."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)  # (B, P + T)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    T = batch["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=attn).logits[:, -T - 1:-1].float()  # (B, T, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def reward_of(ids: list[int]) -> float:
    """A non-binary reward of the completion's token ids, so groups have a spread."""
    return (sum(ids) % 5) / 4 + 0.5 * (len(ids) % 2)


def hand_advantages(batch) -> torch.Tensor:
    """(B,) (r - group mean) / (group std + 1e-4), std with Bessel's correction; a group is the rows
    of one prompt (TRL shuffles the rows of a generation batch, so groups are found by prompt)."""
    rows = [(tuple(p[m.bool()].tolist()), reward_of(c[cm.bool()].tolist())) for p, m, c, cm in
            zip(batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"],
                strict=True)]
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


def hand_loss_and_grads(run, batch, temperature, normalizer="response_tokens", w=0.0, beta=0.0, lam=0.0,
                         dual_clip=3.0, kl_clamp=10.0):
    """The loss by hand: clipped surrogate with verl's dual-clip for negative advantages, weights
    1 senior / w junior, + beta * k3 to the junior (at ``temperature``) clamped to [-kl_clamp,
    kl_clamp], divided by the token count, + lam * mean junior-token NLL."""
    model, junior = run.trainer.model, run.prep.pair.junior
    model.zero_grad()
    lp = teacher_forced_logps(model, batch, temperature)  # (B, T), with grad
    A = batch["advantages"].unsqueeze(1).expand_as(lp)  # (B, T)
    ratio = torch.exp(lp - batch["old_per_token_logps"])
    clipped = torch.maximum(-A * ratio, -A * ratio.clamp(0.8, 1.2))  # the PPO loss, as verl writes it
    if dual_clip:  # verl: for A < 0 the loss is at most -A * c
        clipped = torch.where(A < 0, torch.minimum(clipped, -A * dual_clip), clipped)
    per_token = clipped
    if beta:
        with torch.no_grad():
            ref = teacher_forced_logps(junior, batch, temperature)
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
