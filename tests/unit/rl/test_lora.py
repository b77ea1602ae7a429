"""LoRA training (``--lora-r``, rl/lora.py): only the adapter trains, rollouts decode the merged
senior W + (alpha / r) B A computed by hand, saves hold the adapter (and merged weights), a resumed
run equals an uninterrupted one, r = 0 is full fine-tuning, and bad settings fail before loading."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("peft")

from tandem_rlvr.cli import main
from tandem_rlvr.models import load_model
from tandem_rlvr.rl import assemble, prepare
from tandem_rlvr.rl.train import build_run, train

from helpers.train import train_cfg

R, ALPHA = 4, 8.0  # scaling alpha / r = 2
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # all-linear on Qwen3


def parity_reward(completions, **kw):  # varies inside a group, so every update moves the adapter
    return [float(len(c) % 2) for c in completions]


parity_reward.__name__ = "accuracy_reward"


@pytest.fixture
def varied_reward(monkeypatch):
    monkeypatch.setattr(assemble, "reward_functions", lambda *a: ([parity_reward], [1.0], None))


def _lora(train_inputs, tmp_path, **kw):
    return train_cfg(train_inputs, tmp_path, lora_r=R, lora_alpha=ALPHA, lr=5e-2, max_steps=2, **kw)


def _by_hand(base: dict, adapter: dict, name: str) -> torch.Tensor:
    """W + (alpha / r) B A of linear layer ``name`` (``model.layers.0.self_attn.q_proj``), plain torch."""
    a = adapter[f"base_model.model.{name}.lora_A.weight"]  # (r, in)
    b = adapter[f"base_model.model.{name}.lora_B.weight"]  # (out, r)
    return base[f"{name}.weight"] + (ALPHA / R) * (b @ a)


def test_after_two_steps_only_adapter_tensors_changed_and_rollout_copy_is_base_plus_scaled_BA_in_bf16(
        train_inputs, tmp_path, varied_reward):
    root = train_inputs[0]
    base = load_file(str(root / "senior" / "model.safetensors"))  # the initial senior, fp32 on disk
    run = build_run(_lora(train_inputs, tmp_path, dtype="bfloat16"), print_fn=lambda *_: None)
    try:
        trainer = run.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)
        trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
        assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
        # 7 linear layers of one decoder layer, r x (in + out) each: hidden 32, intermediate 64, 4 x 8 q, 2 x 8 kv
        dims = {"q_proj": (32, 32), "k_proj": (32, 16), "v_proj": (32, 16), "o_proj": (32, 32),
                "gate_proj": (32, 64), "up_proj": (32, 64), "down_proj": (64, 32)}
        assert sum(p.numel() for p in trainable.values()) == sum(R * (i + o) for i, o in dims.values())
        trainer.train()
        held = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
        assert held == {id(p) for p in trainable.values()}, "the optimiser must hold the adapter weights only"
        assert trainer.state.global_step == 2
        adapter = {f"base_model.model.{n.removeprefix('base_model.model.').replace('.default', '')}": p.detach()
                   for n, p in trainable.items()}
        assert all(p.dtype == torch.float32 for p in adapter.values())  # fp32 masters of what trains
        # base weights bit-identical to the file (held in the compute dtype, bf16); adapters moved
        for n, p in model.get_base_model().named_parameters():
            if ".lora_" not in n:
                torch.testing.assert_close(p, base[n.replace(".base_layer", "")].to(torch.bfloat16), rtol=0, atol=0)
        assert all(adapter[n].abs().sum() > 0 for n in adapter if ".lora_B." in n), "B starts at 0 and must move"
        # the rollout copy, synced from the trainer's stream, is the merged senior in bf16, computed here by hand
        run.rollout.sync(model, trainer.state.global_step)
        copy = dict(run.rollout.engine.rollout_copy.copy.named_parameters())
        bf16_base = {k: v.to(torch.bfloat16).float() for k, v in base.items()}
        for layer in ("self_attn", "mlp"):
            for proj in (p for p in TARGETS if (p in ("gate_proj", "up_proj", "down_proj")) == (layer == "mlp")):
                name = f"model.layers.0.{layer}.{proj}"
                expect = _by_hand(bf16_base, adapter, name).to(torch.bfloat16)
                torch.testing.assert_close(copy[f"{name}.weight"], expect, rtol=0, atol=0)
                assert not torch.equal(expect, bf16_base[f"{name}.weight"].to(torch.bfloat16))
        for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
            torch.testing.assert_close(copy[name], base[name].to(torch.bfloat16), rtol=0, atol=0)
    finally:
        run.close()


@pytest.fixture(scope="module")
def lora_run(train_inputs, tmp_path_factory):
    """One finished LoRA run (2 updates, a checkpoint each, --save-merged), trained with a varied reward."""
    mp = pytest.MonkeyPatch()
    mp.setattr(assemble, "reward_functions", lambda *a: ([parity_reward], [1.0], None))
    tmp = tmp_path_factory.mktemp("lora")
    cfg = _lora(train_inputs, tmp, save_every=1, save_merged=True, eval_every=1)
    try:
        train(cfg, print_fn=lambda *_: None)
    finally:
        mp.undo()
    return cfg, tmp / "run"


def test_saves_hold_the_adapter_and_merged_weights_equal_to_base_plus_scaled_BA(train_inputs, lora_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    root = train_inputs[0]
    base = load_file(str(root / "senior" / "model.safetensors"))
    _, out = lora_run
    for save in ("checkpoint-1", "checkpoint-2", "best", "final"):
        assert (out / save / "adapter_config.json").is_file() and (out / save / "adapter_model.safetensors").is_file()
        assert not (out / save / "model.safetensors").exists(), "a LoRA save holds the adapter, not whole weights"
        assert (out / save / "merged" / "model.safetensors").is_file()
    adapter = load_file(str(out / "final" / "adapter_model.safetensors"))
    merged = load_file(str(out / "final" / "merged" / "model.safetensors"))
    for name in (f"model.layers.0.{p}" for p in ("self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj")):
        torch.testing.assert_close(merged[f"{name}.weight"], _by_hand(base, adapter, name))
    assert torch.equal(merged["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    # PEFT's own loader takes the adapter as saved and gives the same merged senior
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(root / "senior"), str(out / "final"))
    theirs = peft.merge_and_unload().state_dict()
    for k, v in merged.items():
        torch.testing.assert_close(theirs[k], v)


def test_eval_takes_a_lora_save_by_its_merged_weights_or_merged_on_load(lora_run, tmp_path, capsys):
    _, out = lora_run
    loaded = load_model(str(out / "final")).state_dict()  # final/merged/
    no_merged = tmp_path / "final"
    shutil.copytree(out / "final", no_merged, ignore=shutil.ignore_patterns("merged"))
    on_load = load_model(str(no_merged)).state_dict()  # the adapter merged into its base on load
    assert loaded.keys() == on_load.keys() and all(torch.allclose(loaded[k], on_load[k], atol=1e-6) for k in loaded)
    rc = main(["eval", "solo", "--senior", str(no_merged), "--benchmarks", "tiny", "--limit", "1", "--n", "1",
               "--max-tokens", "4", "--template", "plain", "--out", str(tmp_path / "ev")])
    assert rc == 0 and (tmp_path / "ev" / "samples.jsonl").is_file()


def test_resumed_lora_run_equals_the_uninterrupted_one(train_inputs, lora_run, tmp_path_factory, varied_reward):
    cfg, out = lora_run
    whole = load_file(str(out / "final" / "adapter_model.safetensors"))
    again = tmp_path_factory.mktemp("resume") / "run"
    shutil.copytree(out, again)
    for name in ("checkpoint-2", "final", "best"):  # killed after update 2, before its checkpoint
        shutil.rmtree(again / name)
    (again / "summary.json").unlink()
    train(cfg.with_keys(output_dir=str(again)), print_fn=lambda *_: None)  # resumes from checkpoint-1
    resumed = load_file(str(again / "final" / "adapter_model.safetensors"))
    first = load_file(str(out / "checkpoint-1" / "adapter_model.safetensors"))
    assert whole.keys() == resumed.keys()
    assert any(not torch.equal(first[k], whole[k]) for k in whole), "update 2 moved nothing; the check is vacuous"
    for k in whole:  # adapter and AdamW moments restored: update 2 redone exactly
        torch.testing.assert_close(resumed[k], whole[k], rtol=1e-6, atol=1e-7)


def test_lora_r_0_is_full_fine_tuning_bit_for_bit(train_inputs, tmp_path, varied_reward):
    finals = []
    # LoRA settings beside r = 0 are refused (tests/unit/config/test_config_models.py), so r = 0 is given alone
    for name, extra in (("plain", {}), ("r0", {"lora_r": 0})):
        cfg = train_cfg(train_inputs, tmp_path / name, lr=5e-2, max_steps=2, **extra)
        run = build_run(cfg, print_fn=lambda *_: None)
        try:
            model = run.trainer.accelerator.unwrap_model(run.trainer.model)
            assert type(model).__name__ == "Qwen3ForCausalLM"  # no PEFT wrapper
            assert all(p.requires_grad for p in model.parameters())
        finally:
            run.close()
            run.lock.release()
        train(cfg, print_fn=lambda *_: None)
        finals.append(load_file(str(tmp_path / name / "run" / "final" / "model.safetensors")))
    assert finals[0].keys() == finals[1].keys() and all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])


def test_klreg_reference_under_lora_stays_the_junior(train_inputs, tmp_path):
    run = build_run(_lora(train_inputs, tmp_path, method="klreg"), print_fn=lambda *_: None)
    try:
        assert run.trainer.reference is run.prep.pair.junior  # never the adapter-disabled base
    finally:
        run.close()


@pytest.mark.parametrize("flags, named", [
    (["--lora-r", "-1"], "lora_r"), (["--lora-r", "4", "--lora-alpha", "0"], "lora_alpha"),
    (["--lora-r", "4", "--lora-dropout", "1"], "lora_dropout"),
    (["--lora-r", "4", "--lora-targets", "q_proj,qkv_fused"], "qkv_fused"),
    (["--lora-r", "4", "--lora-targets", "lm_head"], "lm_head"),
])
def test_bad_lora_settings_are_one_line_errors_before_any_model_loads(train_inputs, tmp_path, capsys, monkeypatch,
                                                                      flags, named):
    root, senior, junior, data = train_inputs

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded before the LoRA settings were checked")

    monkeypatch.setattr(prepare, "load_pair", no_loading)
    rc = main(["train", "--senior", str(senior), "--dataset", str(data), "--dataset-split", "none", "--val-size", "4",
               "--output-dir", str(tmp_path / "run"), *flags])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("tandem: error:") and named in err, err
    assert "unrecognized" not in err, err
    assert not (tmp_path / "run").exists()
