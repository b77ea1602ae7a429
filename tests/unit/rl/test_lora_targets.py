"""``rl.lora``: LoRA targets are refused up front unless each names whole modules of the senior.

PEFT matches a target name to a module whose full name equals it or ends in ``"." + name``; a tail
such as ``proj`` or ``_proj`` (part of ``q_proj``'s name, not a module) matches nothing, and PEFT
would fail only after the senior's weights are loaded. ``tandem train`` must refuse it first, in one
line naming it. The oracle for "matches nothing" is PEFT itself on the same senior.
"""

import pytest
import torch

from conftest import save_training_inputs

pytest.importorskip("peft")

TAILS = ["proj", "_proj", "q_proj,proj", "attn.q_proj"]  # parts of names, never whole modules
WHOLE = ["q_proj", "self_attn.q_proj", "layers.0.mlp.down_proj", "model.layers.0.self_attn.k_proj"]


@pytest.fixture(scope="module")
def senior(tmp_path_factory, tok):
    return save_training_inputs(tmp_path_factory.mktemp("lora-targets"), tok)


def _peft_matches(senior_dir, targets: list[str]) -> bool:
    """Whether PEFT finds a module for ``targets`` in the senior (it raises when it finds none)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(senior_dir)
    try:
        get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=targets))
    except ValueError:
        return False
    return True


def _peft_matches_each(senior_dir, targets: list[str]) -> bool:
    return all(_peft_matches(senior_dir, [t]) for t in targets)


@pytest.mark.parametrize("targets", TAILS)
def test_a_target_naming_no_whole_module_is_one_line_before_any_weights_load(senior, tmp_path, capsys, monkeypatch,
                                                                             targets):
    from transformers import PreTrainedModel

    from tandem_rlvr.cli import main

    assert not _peft_matches_each(senior / "senior", targets.split(","))  # PEFT: some target matches nothing
    capsys.readouterr()  # the oracle's own loading output

    def no_loading(*a, **k):
        raise AssertionError("weights were loaded before the LoRA targets were checked")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(no_loading))
    rc = main(["train", "--senior", str(senior / "senior"), "--dataset", str(senior / "data.jsonl"),
               "--dataset-split", "none", "--val-size", "4", "--output-dir", str(tmp_path / "run"),
               "--lora-r", "4", "--lora-targets", targets])
    err = capsys.readouterr().err.strip()
    bad = [t for t in targets.split(",") if t != "q_proj"]  # the one tail of each case
    assert rc != 0 and len(err.splitlines()) == 1 and err.startswith("tandem: error:"), err
    assert repr(bad[0]) in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("target", WHOLE)
def test_a_target_naming_whole_modules_passes_the_check(senior, target):
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.rl.lora import check_targets

    assert _peft_matches(senior / "senior", [target])
    check_targets(load_train_config(overrides={"senior": str(senior / "senior"), "lora_r": 4,
                                               "lora_targets": [target]}))


def test_peft_oracle_sees_the_tails_as_no_module(senior):
    """The oracle itself: PEFT wraps q_proj for ``q_proj`` and nothing for ``proj`` (it raises)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(senior / "senior"),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    wrapped = [n for n, m in model.named_modules() if isinstance(getattr(m, "lora_A", None), torch.nn.ModuleDict)]
    assert wrapped == ["base_model.model.model.layers.0.self_attn.q_proj"]
    assert not _peft_matches(senior / "senior", ["proj"])


@pytest.mark.parametrize("argv, setting, widest", [
    (["--lora-r", "1000000000"], "lora_r 1000000000", "lora_r <= 64"),
    (["--lora-r", "65"], "lora_r 65", "lora_r <= 64"),
    (["--plan-lora-r", "100000000"], "--plan-lora-r 100000000", "--plan-lora-r <= 64"),
    (["--lora-r", "4", "--lora-targets", "bogus"], "'bogus'", "its linear layers: down_proj"),
])
def test_a_rank_wider_than_the_seniors_layers_or_a_bogus_target_is_refused_by_dry_run(capsys, monkeypatch, argv,
                                                                                         setting, widest):
    """tiny's narrowest adapted layer is k_proj: hidden 128 in, 2 key-value heads x head_dim 32 = 64 out (its
    config.json), so a rank-r update there has rank at most min(128, 64) = 64. Refused before any adapter is
    built to measure (PEFT on real tensors would try to allocate r x (in + out) weights per layer)."""
    from tandem_rlvr.cli import main
    from tandem_rlvr.planner.shapes import LoraSpec

    def no_adapters(*a, **k):
        raise AssertionError("an adapter was built before the rank was checked")

    monkeypatch.setattr(LoraSpec, "inject", no_adapters)
    assert main(["train", "--preset", "tiny", "--dry-run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("tandem: error:"), err
    assert setting in err and widest in err, err


def test_a_rank_as_wide_as_the_narrowest_layer_is_planned(capsys):
    from tandem_rlvr.cli import main

    assert main(["train", "--preset", "tiny", "--dry-run", "--lora-r", "64"]) == 0
    assert "LoRA r=64" in capsys.readouterr().out
