"""A tiny training run's batch prepared for the loss tests (rewards with a spread, old log-probs set so the
importance ratios cycle through ``RATIOS``), the trainer's own loss and gradients on it, and their check against
``reference.grpo_loss``."""

import torch

from tandem_rlvr.rl.assemble import build_run

from helpers.train import first_batch, train_cfg
from reference.grpo_loss import hand_advantages, hand_loss_and_grads, reward_of, teacher_forced_logps

RATIOS = (0.5, 1.0, 1.1, 1.5, 4.0)


def prepared(inputs, tmp_path, **kw):
    """A run and one generation batch whose rewards vary inside each group; old log-probs set so
    that the importance ratio at position t is RATIOS[t % 4]."""
    run = build_run(train_cfg(inputs, tmp_path, **kw), print_fn=lambda *_: None)

    def reward(completions, completion_ids, **_):
        return [reward_of(list(c)) for c in completion_ids]

    reward.__name__ = "accuracy_reward"
    run.trainer.reward_funcs[0] = reward
    batch, _ = first_batch(run)
    torch.testing.assert_close(batch["advantages"], hand_advantages(batch), atol=1e-4, rtol=1e-4)
    B, T = batch["completion_ids"].shape
    with torch.no_grad():
        lp = teacher_forced_logps(run.trainer.model, batch, kw.get("temperature", 1.0))
    r = torch.tensor([RATIOS[t % len(RATIOS)] for t in range(T)]).expand(B, T)
    batch["old_per_token_logps"] = lp - r.log()
    return run, batch


def trainer_loss_and_grads(trainer, batch):
    """The trainer's own loss on ``batch`` and its gradient per parameter (one micro-batch, no accumulation)."""
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    trainer.model.zero_grad()
    return loss.detach(), grads


def check_loss_and_grads(run, batch, temperature, **hand):
    """The trainer's loss and every gradient equal ``hand_loss_and_grads`` with the settings ``hand``."""
    loss, grads = trainer_loss_and_grads(run.trainer, batch)
    want, want_grads = hand_loss_and_grads(run, batch, temperature, **hand)
    torch.testing.assert_close(loss, want, atol=1e-5, rtol=1e-4)
    assert grads.keys() == want_grads.keys() and grads
    for n in grads:
        torch.testing.assert_close(grads[n], want_grads[n], atol=1e-6, rtol=1e-3, msg=n)
    assert any(float(g.abs().max()) > 0 for g in grads.values())
