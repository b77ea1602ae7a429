"""Padding carries no weight in the Tandem loss: TRL pads the senior mask (``env_mask``) with ones,
and a padded batch must give exactly the loss, the normaliser and the gradient of its rows unpadded.

The hard case is the ``senior_tokens`` normaliser with a junior-token weight w > 0: there the
normaliser is the sum of the token weights, so a padding position weighted 1 (a senior-mask one
not cut by the response mask) or w would inflate it. The same is checked for the other terms that
carry a mask (junior imitation, KL-Reg's k3 with a clamp), with the log-probs at padding positions
set to an arbitrary value (TRL scores padding 0, which would hide a missing mask). Expected values:
hand-counted on tensors below; on the tiny model, the normaliser is counted from the rollout's own unpadded
lists and the loss and gradient are the sum of each row's loss computed alone on its unpadded completion.
"""

import pytest
import torch

from tandem_rlvr.rl.losses import loss_denominator, token_weights

from tandem_rlvr.rl.assemble import build_run

from helpers.loss import RATIOS, check_loss_and_grads, trainer_loss_and_grads
from reference.grpo_loss import teacher_forced_logps
from helpers.train import first_batch, spread_reward, train_cfg

W = 0.25


@pytest.mark.parametrize("pad", [1, 0])
def test_padding_positions_have_zero_weight_and_do_not_count(pad):
    # row 0: senior, junior, senior (3 tokens); row 1: junior (1 token), then padding
    completion = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    senior = torch.tensor([[1, 0, 1, pad], [0, pad, pad, pad]])
    w = token_weights(completion, senior, W)
    assert w.tolist() == [[1.0, W, 1.0, 0.0], [W, 0.0, 0.0, 0.0]]
    assert float(loss_denominator(completion, w, "senior_tokens")) == 1 + W + 1 + W  # 2.5, the real tokens' weights
    assert float(loss_denominator(completion, w, "response_tokens")) == 4  # 3 + 1 response tokens


def _padded_batch(train_inputs, tmp_path, **kw):
    """A run and one generation batch through TRL's pipeline in which rows 1 and 2 (mod 3) end 3 and
    6 tokens early (TRL pads them); old log-probs set as in ``test_loss_reference`` so that clipped
    and unclipped tokens occur. Also returns the rollout's raw, unpadded senior masks."""
    run = build_run(train_cfg(train_inputs, tmp_path, temperature=0.6, **kw), print_fn=lambda *_: None)
    trainer, raw = run.trainer, []
    trainer.reward_funcs[0] = spread_reward
    inner = trainer.rollout_func

    def short(prompts, tr):
        out = inner(prompts, tr)
        for b in range(len(out["completion_ids"])):
            keep = max(1, len(out["completion_ids"][b]) - 3 * (b % 3))
            for k in ("completion_ids", "logprobs", "env_mask"):
                out[k][b] = out[k][b][:keep]
        raw.extend(list(m) for m in out["env_mask"])
        return out

    trainer.rollout_func = short
    batch, _ = first_batch(run)
    B, T = batch["completion_ids"].shape
    with torch.no_grad():
        lp = teacher_forced_logps(trainer.model, batch, 0.6)
    batch["old_per_token_logps"] = lp - torch.tensor([RATIOS[t % len(RATIOS)] for t in range(T)]).log().expand(B, T)
    return run, batch, raw


def _row(batch: dict, b: int) -> dict:
    """Row b of a loss batch alone, its completion cut to its own (unpadded) length."""
    B, T = batch["completion_ids"].shape
    L = int(batch["completion_mask"][b].sum())
    row = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == B:
            v = v[b: b + 1]
            v = v[:, :L] if v.dim() == 2 and v.shape[1] == T else v
        row[k] = v
    return row


@pytest.mark.parametrize("kw", [dict(loss_normalizer="senior_tokens", junior_token_weight=W),
                                dict(loss_normalizer="response_tokens", junior_token_weight=W),
                                dict(loss_normalizer="senior_tokens", junior_imitation=0.5),
                                dict(loss_normalizer="response_tokens", method="klreg", beta=0.5, kl_clamp=0.05)],
                         ids=["senior-tokens-w", "response-tokens-w", "senior-tokens-imitation", "klreg"])
def test_a_padded_batch_has_the_loss_normaliser_and_gradient_of_its_rows_unpadded(train_inputs, tmp_path, kw):
    run, batch, raw = _padded_batch(train_inputs, tmp_path, **kw)
    completion, senior = batch["completion_mask"], batch["tool_mask"]
    pad = completion == 0
    assert len(set(completion.sum(1).tolist())) >= 2 and pad.any()  # rows of several lengths
    assert (senior[pad] == 1).all()  # TRL pads the senior mask with ones
    assert sorted(map(len, raw)) == sorted(completion.sum(1).tolist())
    klreg = kw.get("method") == "klreg"
    if not klreg:  # senior and junior tokens both occur (KL-Reg's rollouts are the senior's alone)
        assert 0 < sum(map(sum, raw)) < sum(map(len, raw))

    # the normaliser, counted from the rollout's unpadded lists: senior 1, junior w (or every token)
    w = kw.get("junior_token_weight", 0.0)
    if kw["loss_normalizer"] == "senior_tokens":
        want_items = sum(1.0 if x else w for m in raw for x in m)
    else:
        want_items = sum(map(len, raw))
    assert float(batch["num_items_in_batch"]) == pytest.approx(want_items)
    assert float(batch["num_junior_items_in_batch"]) == sum(m.count(0) for m in raw)

    # what lies at padding positions carries no weight either (TRL scores them 0; another engine need not)
    for k in ("old_per_token_logps", "ref_per_token_logps"):
        if batch.get(k) is not None:
            batch[k] = batch[k].masked_fill(pad, -3.0)

    # loss and gradient: the padded batch against the sum of its rows alone, unpadded
    loss, grads = trainer_loss_and_grads(run.trainer, batch)
    want, want_grads = 0.0, {}
    for b in range(completion.shape[0]):
        l_b, g_b = trainer_loss_and_grads(run.trainer, _row(batch, b))
        want = want + l_b
        for n, g in g_b.items():
            want_grads[n] = want_grads.get(n, 0) + g
    torch.testing.assert_close(loss, want, atol=1e-5, rtol=1e-4)
    assert grads.keys() == want_grads.keys() and grads
    for n in grads:
        torch.testing.assert_close(grads[n], want_grads[n], atol=1e-6, rtol=1e-3, msg=n)
    if "junior_imitation" not in kw:  # plain torch agrees too
        check_loss_and_grads(run, batch, 0.6, normalizer=kw["loss_normalizer"], w=w,
               **(dict(beta=0.5, kl_clamp=0.05) if klreg else {}))
