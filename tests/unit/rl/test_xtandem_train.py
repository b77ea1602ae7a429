"""``tandem train`` with a junior of another tokenizer (the tiny senior with ``tiny-xjunior``): the
rollouts hand off at text level, the senior mask reaches the loss as it does with a same-tokenizer
junior, a step trains the senior and leaves the junior bit-identical; what needs one vocabulary
(vLLM rollouts, KL-Reg) is refused before any model loads."""

import pytest
import torch

from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.train import build_run


def _cfg(tmp_path, **kw):
    base = dict(junior="tiny-xjunior", val_size=4, group_size=4, prompts_per_step=2, prompts_per_minibatch=2,
                max_new_tokens=24, max_steps=1, eval_every=0, save_every=1, lr=1e-2, output_dir=str(tmp_path / "run"))
    base.update(kw)
    return load_train_config("tiny", None, base)


def test_a_step_with_a_junior_of_another_tokenizer_trains_the_senior_through_the_senior_mask(tmp_path):
    run = build_run(_cfg(tmp_path), print_fn=lambda *_: None)
    trainer, pair = run.trainer, run.prep.pair
    assert pair.xjunior is not None and pair.xjunior.tokenizer.get_vocab() != pair.tokenizer.get_vocab()
    seen = []
    inner = trainer.rollout_func
    trainer.rollout_func = lambda prompts, tr: seen.append(inner(prompts, tr)) or seen[-1]
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    out = seen[0]
    tok = pair.tokenizer
    for ids, mask in zip(out["completion_ids"], out["env_mask"], strict=True):
        assert len(ids) == len(mask) <= 24
        assert all(i < len(tok) for i in ids)  # the senior's ids, for the junior's text too
    mask, real = batch["tool_mask"], batch["completion_mask"].bool()
    assert 0 < mask[real].float().mean() < 1
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -2.0] * 2)
    trainer.current_gradient_accumulation_steps = 1
    with torch.no_grad():
        gated = trainer._compute_loss(trainer.model, batch)
        ungated = trainer._compute_loss(trainer.model, {**batch, "tool_mask": torch.ones_like(mask)})
    assert not torch.isclose(gated, ungated)
    before = {n: p.detach().clone() for n, p in pair.senior.named_parameters()}
    junior_before = {n: p.detach().clone() for n, p in pair.junior.named_parameters()}
    try:
        trainer.train()
    finally:
        run.close()
    assert any(not torch.equal(p, before[n]) for n, p in pair.senior.named_parameters())
    assert all(torch.equal(p, junior_before[n]) for n, p in pair.junior.named_parameters())
    assert (tmp_path / "run" / "log.jsonl").read_text().count('"senior/token_share"') == 1


@pytest.mark.parametrize("kw, match", [({"engine": "vllm"}, "engine hf only"), ({"method": "klreg"}, "KL-Reg"),
                                       ({"schedule": "word-atomic"}, "cannot hand off between tokenizers")])
def test_what_needs_one_vocabulary_is_refused_before_any_model_loads(tmp_path, monkeypatch, kw, match):
    import tandem_rlvr.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(TandemError, match=match):
        build_run(_cfg(tmp_path, **kw), print_fn=lambda *_: None)
    assert not (tmp_path / "run").exists()


def test_the_run_loads_each_tokenizer_once(tmp_path, monkeypatch):
    """The cross-tokenizer checks and the pair read the same tokenizer objects: one load per model."""
    from collections import Counter

    import tandem_rlvr.models as models
    from tandem_rlvr.rl.prepare import prepare

    loads, real = Counter(), models.load_tokenizer
    monkeypatch.setattr(models, "load_tokenizer", lambda spec: loads.update([spec]) or real(spec))
    prep = prepare(_cfg(tmp_path))
    assert prep.pair.xjunior is not None
    assert loads == Counter({"tiny": 1, "tiny-xjunior": 1})


def test_the_cli_refuses_cross_tokenizer_training_on_vllm_in_one_line(tmp_path, monkeypatch, capsys):
    import tandem_rlvr.models as models
    from tandem_rlvr.cli import main

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    out = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--junior", "tiny-xjunior", "--engine", "vllm", "--max-steps", "1",
                 "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tandem: error: junior tiny-xjunior has another tokenizer")
    assert "--engine hf only for now, not vllm" in err[0] and not out.exists()


@pytest.mark.parametrize("flags,why", [
    (["--engine", "vllm"], "--engine hf only for now, not vllm"),
    (["--method", "klreg"], "KL-Reg scores the senior's ids under the junior"),
])
def test_a_dry_run_refuses_what_the_run_would_refuse_for_a_junior_of_another_tokenizer(tmp_path, capsys, flags, why):
    """--dry-run printed a memory plan for a pair the run then refused; now it says the run's one line."""
    from tandem_rlvr.cli import main

    out = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--junior", "tiny-xjunior", *flags, "--output-dir", str(out),
                 "--dry-run"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tandem: error: junior tiny-xjunior has another tokenizer")
    assert why in err[0] and "peak" not in captured.out and not out.exists()


def test_a_dry_run_of_a_cross_tokenizer_pair_it_can_train_still_prints_its_plan(tmp_path, capsys):
    from tandem_rlvr.cli import main

    assert main(["train", "--preset", "tiny", "--junior", "tiny-xjunior", "--output-dir", str(tmp_path / "run"),
                 "--dry-run"]) in (0, None)
    assert "peak" in capsys.readouterr().out
