"""Micro-batching changes memory, not the update: the gradient of one mini-batch of 8 rows equals
the sum of the gradients of its 4 micro-batches of 2 rows, through TRL's own pipeline (its
generation-batch buffer, shuffle and split, gradient-accumulation scaling) and our loss terms.

Expected value: the one-forward gradient of the whole mini-batch (micro_batch_rows 0), which
needs no accumulation arithmetic at all; the accumulated one must equal it to float tolerance.
"""

import pytest
import torch

from tandem_rlvr.rl.assemble import build_run

from helpers.train import spread_reward, train_cfg


def _micro_batches(run) -> list[dict]:
    """The loss inputs TRL buffers for one rollout batch (one per micro-batch)."""
    trainer = run.trainer
    trainer.reward_funcs[0] = spread_reward
    inputs = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    trainer._prepare_inputs(inputs)
    return trainer._buffered_inputs


def _accumulated_grads(run) -> dict[str, torch.Tensor]:
    trainer = run.trainer
    micro = _micro_batches(run)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    trainer.model.zero_grad()
    for batch in micro:
        trainer._compute_loss(trainer.model, batch).backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    trainer.model.zero_grad()
    return grads, micro


@pytest.mark.parametrize("kw", [dict(method="tandem", loss_normalizer="response_tokens"),
                                dict(method="tandem", loss_normalizer="senior_tokens"),
                                dict(method="tandem", junior_imitation=0.5),
                                dict(method="klreg", beta=0.5)], ids=["tandem-response", "tandem-senior",
                                                                       "tandem-imitation", "klreg"])
def test_four_micro_batches_of_two_rows_give_the_gradient_of_one_batch_of_eight(train_inputs, tmp_path, kw):
    common = dict(prompts_per_step=2, prompts_per_minibatch=2, group_size=4, temperature=0.8, **kw)
    whole = build_run(train_cfg(train_inputs, tmp_path / "whole", output_dir=str(tmp_path / "whole"), **common),
                      print_fn=lambda *_: None)
    split = build_run(train_cfg(train_inputs, tmp_path / "split", output_dir=str(tmp_path / "split"),
                                micro_batch_rows=2,
                           **common), print_fn=lambda *_: None)
    assert whole.trainer.args.gradient_accumulation_steps == 1 and whole.trainer.args.per_device_train_batch_size == 8
    assert split.trainer.args.gradient_accumulation_steps == 4 and split.trainer.args.per_device_train_batch_size == 2
    want, (one,) = _accumulated_grads(whole)
    got, parts = _accumulated_grads(split)
    assert [len(b["completion_ids"]) for b in parts] == [2, 2, 2, 2]
    # the same 8 rollouts, cut into four (TRL shuffles the rows before splitting)
    rows = sorted(tuple(r.tolist()) for b in parts for r in b["completion_ids"])
    assert rows == sorted(tuple(r.tolist()) for r in one["completion_ids"])
    assert want.keys() == got.keys() and want
    assert any(float(g.abs().max()) > 0 for g in want.values())
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-6, rtol=1e-4, msg=n)


def test_micro_batch_rows_must_divide_a_mini_batch(train_inputs, tmp_path):
    from tandem_rlvr.errors import TandemError

    with pytest.raises(TandemError, match="micro_batch_rows"):
        train_cfg(train_inputs, tmp_path, prompts_per_step=2, prompts_per_minibatch=2, group_size=4, micro_batch_rows=3)
