"""The overlapped layout of the memory plan (``planner/layouts.py``; docs/scale.md, "Overlapped rollouts"): the
rollout GPU holds the pair's bf16 weights and one batch's caches, priced here by hand from the shipped Qwen3-4B
config; the training GPU holds what a run against a server holds and no rollout engine; max_staleness >= 2 adds
its weight snapshots."""

import json
from importlib import resources

import pytest
import torch

from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError
from tandem_rlvr.planner.memory import GiB, Layout, plan
from tandem_rlvr.planner.layouts import overlapped_plan, overlapped_table

PRESET = "qwen3-4b-deepscaler"


def _qwen3_4b():
    """(parameters, KV bytes per token in bf16) of Qwen3-4B, counted on its own class and from its config's numbers."""
    from transformers import AutoConfig, AutoModelForCausalLM

    text = resources.files("tandem_rlvr").joinpath("presets", "models", "Qwen--Qwen3-4B-Instruct-2507.json").read_text()
    data = json.loads(text)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(data.pop("model_type"), **data))
    params = sum(t.numel() for t in model.parameters())  # tied: the embedding is the output layer, counted once
    # keys and values of every layer: 36 layers x 2 x 8 kv heads x 128 head dims x 2 B
    return params, 36 * 2 * 8 * 128 * 2


def test_the_rollout_gpu_holds_the_pairs_bf16_weights_and_one_batchs_caches_and_no_optimiser_state():
    cfg = load_train_config(preset=PRESET)
    params, kv = _qwen3_4b()
    p = overlapped_plan(cfg, 1, Layout(1, "fsdp2"), 80.0)
    roll = {i.name.split(" (")[0]: i for i in p.items if i.device == "cuda:1"}
    assert roll["senior weights"].nbytes == roll["junior weights"].nbytes == params * 2  # tandem: the server holds both
    rows, seq = 32, 1024 + 3000  # the preset's rollout_batch_rows; prompt + response tokens
    assert roll["senior KV cache and states"].nbytes == rows * seq * kv
    assert roll["vLLM's activations, sampler and CUDA graphs"].nbytes == 2 * GiB
    trained = ("AdamW", "gradient", "layer inputs", "log-prob head")
    assert not any(w in i.name for i in p.items if i.device == "cuda:1" for w in trained)
    # rollout and validation (32 rows too) never at once: the peak is weights + one phase's caches, the bucket apart
    peak, phase = p.peak("cuda:1")
    assert peak == pytest.approx(2 * params * 2 + 2 * GiB + 2 * rows * seq * kv) and phase in ("rollout", "validation")
    # over 2 rollout GPUs (tensor parallel) weights and caches halve; vLLM's own overhead does not
    p2 = overlapped_plan(cfg, 2, Layout(1, "fsdp2"), 80.0)
    assert p2.peak("cuda:1")[0] == pytest.approx(params * 2 + 2 * GiB + rows * seq * kv)
    # two training processes decode a chunk of 32 rows each at once: the server holds 64 rows' caches
    p3 = overlapped_plan(cfg, 1, Layout(2, "fsdp2"), 80.0)
    roll3 = {i.name.split(" (")[0]: i for i in p3.items if i.device == "cuda:2"}
    assert roll3["senior KV cache and states"].nbytes == 2 * rows * seq * kv


def test_the_training_gpu_holds_what_a_run_against_a_server_holds_and_no_rollout_engine():
    cfg = load_train_config(preset=PRESET)
    p = overlapped_plan(cfg, 1, Layout(2, "fsdp2"), 80.0)
    served = plan(cfg.with_keys(engine="vllm-server", server="http://x:1", senior_device="cuda:0", junior_device=None,
                                rollout_device=None), gpu_gib=80.0, layout=Layout(2, "fsdp2"))
    assert [(i.phase, i.name, i.nbytes) for i in p.items if i.device == "cuda:0"] == \
        [(i.phase, i.name, i.nbytes) for i in served.items if i.device == "cuda:0"]
    names = [i.name for i in p.items if i.device == "cuda:0"]
    assert any("junior weights" in n for n in names) and not any("KV cache" in n or "vLLM" in n for n in names)
    assert any("AdamW moment shards" in n for n in names)


def test_max_staleness_2_adds_two_bf16_senior_snapshots_and_needs_one_unsharded_trainer():
    cfg = load_train_config(preset=PRESET)
    params, _ = _qwen3_4b()
    one = overlapped_plan(cfg, 1, Layout(1, offload="none"), 80.0, staleness=1)
    two = overlapped_plan(cfg, 1, Layout(1), 80.0, staleness=2)
    extra = [i for i in two.items if i not in one.items]
    assert [(i.device, i.phase, i.nbytes) for i in extra] == [("cuda:0", "resident", 2 * params * 2)]
    with pytest.raises(TandemError, match="above 1 the trainer is one unsharded process"):
        overlapped_plan(cfg, 1, Layout(2), 80.0, staleness=2)


def test_the_overlapped_table_names_a_split_for_each_gpu_count():
    cfg = load_train_config(preset="tiny")
    lines = overlapped_table(cfg, 80.0).splitlines()
    # 64 rollout rows over 3 training processes do not split: 4 GPUs are 2 + 2, 8 are 4 + 4
    assert [ln.split(" | ")[1] for ln in lines[2:]] == ["1 + 1", "2 + 2", "4 + 4"]
