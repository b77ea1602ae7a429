"""fp32 master weights: at the paper's learning rate a bf16 run trains; a pure-bf16 run barely moves.

The expected fractions come from rounding arithmetic, not from the code under test. An AdamW
step moves a weight by at most about lr (Adam's normalised step is at most ~1 in size; weight
decay adds lr x 0.01 x |w|). bf16 keeps 8 significant bits, so a weight w in [2^e, 2^(e+1))
changes only if the step reaches half its ulp, 2^(e-8): with lr = 1e-6 that needs
|w| < 2^-11 (4.9e-4; 2^(e-8) <= 1e-6 means e <= -12). Each pure-bf16 step starts again from
the rounded value, so three steps change no more weights than one. An fp32 weight keeps 24
bits: the same step changes every weight with |w| < 2^4, which is all of them.
"""

import json

import pytest
import torch
from safetensors.torch import load_file

from tandem_rlvr.rl.train import train

from helpers.train import train_cfg

LR = 1e-6
BF16_REACH = 2.0 ** -11  # largest |w| whose half-ulp in bf16 is still within one step of size lr


def _changed(run_dir, base: dict[str, torch.Tensor], dtype) -> tuple[float, dict]:
    """Fraction of the weights of checkpoint-3 that differ from the base cast to ``dtype``
    (the untied input embedding is left out: rows of tokens never seen get no gradient)."""
    ck = load_file(str(run_dir / "checkpoint-3" / "model.safetensors"))
    changed = total = 0
    for name, w in ck.items():
        if name == "model.embed_tokens.weight":
            continue
        assert w.dtype == dtype, name
        changed += int((w != base[name].to(dtype)).sum())
        total += w.numel()
    return changed / total, ck


def _spread_reward(completions, completion_ids, **_):
    """A non-binary reward of the token ids: every group has a spread, so every step has a gradient
    (the fixture's random model never boxes a right answer)."""
    return [(sum(c) % 5) / 4 + 0.5 * (len(c) % 2) for c in completion_ids]


@pytest.mark.slow
def test_fp32_masters_train_at_lr_1e_6_where_pure_bf16_rounds_the_updates_away(train_inputs, tmp_path, monkeypatch):
    monkeypatch.setattr("tandem_rlvr.rl.assemble.reward_functions", lambda *a: ([_spread_reward], [1.0], None))
    base = load_file(str(train_inputs[1] / "model.safetensors"))  # the fixture's senior, saved in fp32
    kw = dict(method="grpo", dtype="bfloat16", lr=LR, max_steps=3, save_every=1, temperature=1.0)
    train(train_cfg(train_inputs, tmp_path, output_dir=str(tmp_path / "mixed"), **kw), print_fn=lambda *_: None)
    train(train_cfg(train_inputs, tmp_path, output_dir=str(tmp_path / "pure"), master_dtype="compute", **kw),
          print_fn=lambda *_: None)

    mixed, _ = _changed(tmp_path / "mixed", base, torch.float32)  # checkpoints hold the fp32 masters
    pure, _ = _changed(tmp_path / "pure", base, torch.bfloat16)
    within_reach = torch.cat([w.to(torch.bfloat16).float().abs().flatten() < BF16_REACH
                              for n, w in base.items() if n != "model.embed_tokens.weight"]).float().mean().item()
    print(f"changed: fp32 masters {mixed:.4f}, pure bf16 {pure:.4f}, bf16 reach bound {within_reach:.4f}")
    assert mixed >= 0.99
    assert pure <= within_reach + 0.005  # only weights within one step's reach of their neighbour can move
    assert pure < 0.05  # "a few percent"

    final = load_file(str(tmp_path / "mixed" / "final" / "model.safetensors"))
    assert {w.dtype for w in final.values()} == {torch.bfloat16}  # exported in the compute dtype
    assert json.loads((tmp_path / "mixed" / "final" / "config.json").read_text())["dtype"] == "bfloat16"
    assert "float32 master weights" in (tmp_path / "mixed" / "final" / "README.md").read_text()


def test_mixed_precision_loads_fp32_senior_and_compute_dtype_junior(train_inputs, tmp_path):
    from tandem_rlvr.rl.assemble import build_run

    run = build_run(train_cfg(train_inputs, tmp_path, dtype="bfloat16"), print_fn=lambda *_: None)
    assert next(run.prep.pair.senior.parameters()).dtype == torch.float32
    assert next(run.prep.pair.junior.parameters()).dtype == torch.bfloat16
    assert run.trainer.args.bf16 and not run.trainer.args.fp16
    run.rollout.sync(run.prep.pair.senior, 0)  # the weight stream the rollouts send first
    copy = run.rollout.engine.rollout_copy.copy
    assert next(copy.parameters()).dtype == torch.bfloat16
    # the copy holds the masters rounded to bf16; at step 0 that is the junior, bit for bit (self-paired)
    run2 = build_run(train_cfg(train_inputs, tmp_path / "b", output_dir=str(tmp_path / "b"), dtype="bfloat16",
                          junior=str(train_inputs[1])), print_fn=lambda *_: None)
    run2.rollout.sync(run2.prep.pair.senior, 0)
    copy2 = run2.rollout.engine.rollout_copy.copy
    junior2 = dict(run2.prep.pair.junior.named_parameters())
    for n, p in copy2.named_parameters():
        assert torch.equal(p, junior2[n]), n
    with torch.no_grad():  # a new update refreshes the copy
        next(run2.prep.pair.senior.parameters()).add_(1.0)
    run2.rollout.sync(run2.prep.pair.senior, 1)
    again = run2.rollout.engine.rollout_copy.copy
    name, master = next(run2.prep.pair.senior.named_parameters())
    assert torch.equal(dict(again.named_parameters())[name], master.to(torch.bfloat16))


def test_pure_compute_dtype_is_the_senior_itself(train_inputs, tmp_path):
    from tandem_rlvr.rl.assemble import build_run

    run = build_run(train_cfg(train_inputs, tmp_path, dtype="bfloat16", master_dtype="compute"),
                    print_fn=lambda *_: None)
    senior = run.prep.pair.senior
    assert next(senior.parameters()).dtype == torch.bfloat16
    assert run.rollout.engine.rollout_copy is None and run.rollout.engine.senior is senior  # it decodes itself
    assert not run.trainer.args.bf16  # no autocast: the weights already are bf16
