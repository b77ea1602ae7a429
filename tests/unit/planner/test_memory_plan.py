"""The memory plan per rank under sharding (planner/memory.py Layout), offload, LoRA, the layout
search (planner/layouts.py) and the --plan-* flags. Expected bytes are worked out by hand from
the shipped Qwen3-4B-Instruct-2507 config (docs/scale.md):

    embedding 151,936 x 2,560 = 388,956,160 (tied: also the output layer), final norm 2,560
    one layer: q 2,560 x 4,096 + k, v 2 x 2,560 x 1,024 + o 4,096 x 2,560 = 28,311,552
               MLP 3 x 2,560 x 9,728 = 74,711,040; norms 2 x 2,560 + q/k norms 2 x 128
               = 100,930,816
    P = 36 x 100,930,816 + 388,956,160 + 2,560 = 4,022,468,096
"""

import subprocess
import sys

import pytest

from tandem_rlvr.config import load_train_config

LAYER = 100_930_816
ROOT = 388_956_160 + 2_560
P = 36 * LAYER + ROOT


@pytest.fixture(scope="module")
def paper():
    return load_train_config("qwen3-4b-deepscaler", None, {"method": "tandem"})


def _items(p, device=None):
    return {i.name.split(" (")[0]: i for i in p.items if device is None or i.device == device}


def test_fsdp2_divides_weights_gradients_and_moments_by_the_world_size(paper):
    from tandem_rlvr.planner.memory import Layout, plan

    p = plan(paper, gpu_gib=80, layout=Layout(2, "fsdp2"))
    items = _items(p, "cuda:0")
    assert items["senior weight shards"].nbytes == P * 4 / 2  # fp32 master shards
    assert items["AdamW moment shards"].nbytes == 2 * P * 4 / 2
    assert items["gradient shards"].nbytes == P * 4 / 2
    # MixedPrecisionPolicy(param_dtype=bf16): two layers gathered in bf16 at a time, the root kept whole
    assert items["all-gathered layers: current + prefetched"].nbytes == 2 * LAYER * 2
    assert items["the root"].nbytes == ROOT * 2
    assert items["one layer's unsharded gradient and its fp32 reduce-scatter input"].nbytes == LAYER * (2 + 4)
    assert "autocast copies of the matrices" not in items  # FSDP2 gathers bf16: autocast has nothing to copy
    assert _items(p, "cuda:1")["senior copy the rollouts decode"].nbytes == P * 2  # a sharded senior cannot decode
    assert items["weight sync: one gathered bucket"].nbytes == 512 * 2**20


def test_zero3_follows_deepspeeds_18_bytes_per_weight(paper):
    from tandem_rlvr.planner.memory import Layout, plan

    items = _items(plan(paper, gpu_gib=80, layout=Layout(4, "zero3")), "cuda:0")
    state = sum(items[k].nbytes for k in ("bf16 parameter partitions", "fp32 master + AdamW moment partitions",
                                          "fp32 gradient partitions"))
    assert state == 18 * P / 4  # 2 (bf16) + 4 (master) + 8 (moments) + 4 (gradients) bytes, over 4 ranks


def test_zero3_gradient_partitions_are_resident_and_a_cpu_plan_gathers_the_whole_model(paper):
    """DeepSpeed allocates the fp32 gradient partitions at initialize (4 B x P / 2, held through rollouts);
    on GPUs it gathers two layers and the largest module in bf16 (2 x LAYER + 2 x the 151,936 x 2,560
    embedding, 2 B each); on its cpu accelerator every parameter stays gathered from forward to
    backward: P weights in the preset's compute dtype (bf16, 2 B: ZeRO-3 gathers its bf16 partitions)."""
    from tandem_rlvr.planner.memory import Layout, plan

    gpu = plan(paper, gpu_gib=80, layout=Layout(2, "zero3"))
    g = _items(gpu, "cuda:0")
    assert g["fp32 gradient partitions"].phase == "resident" and g["fp32 gradient partitions"].nbytes == 4 * P / 2
    assert g["gathered: current + prefetched layers and the largest module"].nbytes == (2 * LAYER + 2 * 388_956_160) * 2
    cpu = plan(paper.with_keys(senior_device="cpu", junior_device="cpu"), layout=Layout(2, "zero3"))
    c = _items(cpu, "cpu")
    assert c["gathered: the whole model from forward to backward"].nbytes == P * 2
    assert "gathered: current + prefetched layers and the largest module" not in c


@pytest.mark.parametrize("sharding,offload,host_bytes,moved", [
    ("fsdp2", "all", 16, {"senior weight shards", "AdamW moment shards", "gradient shards"}),
    ("zero3", "optimizer", 16, {"fp32 master + AdamW moment partitions", "fp32 gradient partitions"}),
    ("zero3", "all", 18, {"bf16 parameter partitions", "fp32 master + AdamW moment partitions",
                          "fp32 gradient partitions"})])
def test_offload_moves_the_shards_to_host_memory(paper, sharding, offload, host_bytes, moved):
    from tandem_rlvr.planner.memory import HOST, Layout, plan

    p = plan(paper, gpu_gib=80, layout=Layout(2, sharding, offload))
    assert sum(i.nbytes for i in p.items if i.device == HOST) == host_bytes * P / 2
    assert set(_items(p, HOST)) == moved and not moved & set(_items(p, "cuda:0"))


def test_lora_trains_only_adapters(paper):
    """Rank r on every linear layer of the body: r x (in + out) weights per matrix; per layer
    q (2,560 + 4,096), k and v (2,560 + 1,024) each, o (4,096 + 2,560), gate and up (2,560 +
    9,728) each, down (9,728 + 2,560) = 57,344. The frozen base is held in bf16 (2 B), the
    adapters in fp32 (4 B), and nothing of the base is autocast-copied."""
    from tandem_rlvr.planner.memory import Layout, plan

    adapters = 8 * 36 * 57_344
    items = _items(plan(paper, gpu_gib=80, layout=Layout(1, lora_r=8)), "cuda:0")
    assert items["AdamW moments"].nbytes == 2 * adapters * 4
    assert items["gradients"].nbytes == adapters * 4
    assert items["senior weights"].nbytes == P * 2 + adapters * 4
    assert "autocast copies of the matrices" not in items


def test_lora_under_fsdp2_shards_the_bf16_base_and_the_fp32_adapters_and_their_state(paper):
    """The same adapters (57,344 per layer and unit of rank) over 2 processes: each holds half of the
    frozen bf16 base and of the fp32 adapters, and half of the adapters' moments and gradients;
    what FSDP2 gathers (two layers, the root) is bf16 as without LoRA."""
    from tandem_rlvr.planner.memory import Layout, plan

    adapters = 8 * 36 * 57_344
    items = _items(plan(paper, gpu_gib=80, layout=Layout(2, "fsdp2", lora_r=8)), "cuda:0")
    assert items["senior weight shards"].nbytes == (P * 2 + adapters * 4) / 2
    assert items["AdamW moment shards"].nbytes == 2 * adapters * 4 / 2
    assert items["gradient shards"].nbytes == adapters * 4 / 2
    assert items["all-gathered layers: current + prefetched"].nbytes == 2 * LAYER * 2
    assert items["weight sync: one gathered bucket"].nbytes == 512 * 2**20


def test_lora_under_zero3_partitions_the_bf16_base_and_adapters_and_the_fp32_state(paper):
    """The same adapters (57,344 per layer and unit of rank, r = 8, 36 layers) over 2 processes under
    ZeRO-3: the frozen base as bf16 partitions (2 B, / 2; loaded under zero.Init), PEFT's adapters as fp32
    partitions (4 B, / 2; DeepSpeed casts no parameter of a zero.Init model), the optimiser's fp32 masters
    and two moments (12 B) and fp32 gradients (4 B) for the adapters alone, / 2; the merged stream forms one
    layer's W + (alpha / r) B A at a time: its largest matrix (9,728 x 2,560) gathered in bf16 and summed in
    fp32, beside the bucket."""
    from tandem_rlvr.planner.memory import Layout, plan

    adapters = 8 * 36 * 57_344
    items = _items(plan(paper, gpu_gib=80, layout=Layout(2, "zero3", lora_r=8)), "cuda:0")
    assert items["bf16 parameter partitions"].nbytes == (P * 2 + adapters * 4) / 2
    assert items["fp32 master + AdamW moment partitions"].nbytes == 12 * adapters / 2
    assert items["fp32 gradient partitions"].nbytes == 4 * adapters / 2
    assert items["weight sync: one layer's gathered W and its merged sum in fp32"].nbytes == 9_728 * 2_560 * (2 + 4)
    assert items["weight sync: one gathered bucket"].nbytes == 512 * 2**20


def test_lora_on_named_targets_counts_only_those_layers(paper):
    """q_proj and v_proj only: per layer (2,560 + 4,096) + (2,560 + 1,024) = 10,240 per unit of rank."""

    from tandem_rlvr.planner.memory import plan

    cfg = paper.with_keys(lora_r=8, lora_targets=["q_proj", "v_proj"])
    assert _items(plan(cfg, gpu_gib=80), "cuda:0")["gradients"].nbytes == 8 * 36 * 10_240 * 4


@pytest.mark.parametrize("targets", [("all-linear",), ("q_proj", "v_proj")])
def test_lora_activation_profile_counts_what_autograd_saves_with_the_base_frozen(targets):
    """Under LoRA the plan's activations are those of the layer as it trains: PEFT's adapters on a frozen
    base (a frozen norm or matrix saves nothing for its own gradient). At a width the profile never saw,
    its per-layer and outside-the-layers bytes equal a walk of the autograd graph of a PEFT model (one and
    two layers), and they differ from full fine-tuning's, which the plan counted for LoRA before."""
    import torch
    from reference.graph_saved import graph_saved_bytes
    from transformers import Qwen3Config

    from tandem_rlvr.planner.shapes import LoraSpec, activation_profile

    cfg = Qwen3Config(vocab_size=64, hidden_size=112, intermediate_size=272, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=2, head_dim=32)
    rows, tokens = 2, 32
    peft = dict(r=4, lora_alpha=8, lora_dropout=0.0, bias="none",
                target_modules="all-linear" if targets == ("all-linear",) else list(targets))
    one, two = (graph_saved_bytes(cfg, [None] * n, rows, tokens, init=True, lora=peft) for n in (1, 2))
    full_one, full_two = (graph_saved_bytes(cfg, [None] * n, rows, tokens, init=True) for n in (1, 2))
    per_layer, model_level = (two - one) / (rows * tokens), (2 * one - two) / (rows * tokens)
    prof = activation_profile(cfg, torch.float32, torch.float32, LoraSpec(4, targets))
    assert prof.per_layer == pytest.approx(per_layer, rel=0.02)
    assert prof.max_layer == prof.per_layer
    assert prof.model_level == pytest.approx(model_level, abs=0.02 * per_layer)
    assert per_layer < 0.9 * (full_two - full_one) / (rows * tokens)  # what the old plan counted is 10%+ off


@pytest.mark.parametrize("checkpointing", [False, True])
def test_lora_plan_saves_the_trained_layers_activations_and_works_on_full_fine_tunings(tmp_path, checkpointing):
    """A LoRA plan's update items from the graph walks of tests/reference/graph_saved.py, at a width no profile saw:
    the forward saves what PEFT's layer saves (under checkpointing, the embedding's output requires grad,
    as transformers makes it), while the backward's working set is full fine-tuning's layer, twice without
    checkpointing, once beside the recomputed LoRA layer with it. Tokens: 4 rows x (16 + 48)."""
    from reference.graph_saved import graph_saved_bytes
    from transformers import Qwen3Config

    from tandem_rlvr.planner.memory import plan

    cfg = Qwen3Config(vocab_size=64, hidden_size=112, intermediate_size=272, num_hidden_layers=3, num_attention_heads=6,
                      num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)  # the plan reads its config.json
    peft = dict(r=4, lora_alpha=8, lora_dropout=0.0, bias="none", target_modules="all-linear")
    rows, tokens = 2, 32

    def per_token(**kw):
        one, two = (graph_saved_bytes(cfg, [None] * n, rows, tokens, init=True, **kw) for n in (1, 2))
        return (two - one) / (rows * tokens), (2 * one - two) / (rows * tokens)

    lora_layer, lora_model = per_token(lora=peft, input_grads=checkpointing)
    full_layer, _ = per_token()
    run = load_train_config(None, None, dict(method="tandem", senior=str(tmp_path), junior=str(tmp_path), lora_r=4,
                                             lora_alpha=8, dtype="float32", gradient_checkpointing=checkpointing,
                                             max_prompt_tokens=16, max_new_tokens=48, micro_batch_rows=4,
                                             group_size=4, prompts_per_step=1, prompts_per_minibatch=1))
    items = _items(plan(run), "cpu")
    n = 4 * (16 + 48)
    if checkpointing:
        assert items["one layer recomputed + its backward's working set"].nbytes == pytest.approx(
            n * (lora_layer + full_layer), rel=0.02)
        layer_inputs = items["activations, checkpointed: layer inputs"].nbytes
        assert layer_inputs == pytest.approx(n * (3 * 112 * 4 + lora_model), rel=0.02)
    else:
        assert items["one layer's backward working set"].nbytes == pytest.approx(n * 2 * full_layer, rel=0.02)
        assert items["activations"].nbytes == pytest.approx(n * (3 * lora_layer + lora_model), rel=0.02)


@pytest.mark.parametrize("bad", [dict(processes=0), dict(processes=-2), dict(sharding="fsdp"),
                                 dict(offload="all"), dict(sharding="fsdp2", offload="optimizer"), dict(lora_r=-1)])
def test_bad_layouts_are_refused(bad):
    from tandem_rlvr.errors import TandemError
    from tandem_rlvr.planner.memory import Layout

    with pytest.raises(TandemError):
        Layout(**bad)


def test_cheapest_fit_and_why_the_9b_pair_needs_offload_on_two_gpus(monkeypatch):
    """FSDP2 over 2 x 80 GB, vLLM beside each trainer, no activations counted at all: during
    rollouts the shards and moments (12 B x 8.95B weights / 2 = 50.0 GiB) stay while vLLM holds
    the pair in bf16, the KV caches and linear-attention states of 32 rows of 4,024 tokens and
    2 GiB of its own: 80.4 GiB in all, over the 77 GiB a GPU leaves."""
    from tandem_rlvr.planner import memory as memory_plan
    from tandem_rlvr.planner.layouts import cheapest_fit, recommend
    from tandem_rlvr.planner.memory import GiB, Layout
    from tandem_rlvr.planner.shapes import ActivationProfile

    monkeypatch.setattr(memory_plan, "activation_profile", lambda *a: ActivationProfile(0.0, 0.0, 0.0))
    cfg = load_train_config("qwen3.5-9b-2b", None, {})
    best, rejected = recommend(cfg, 2, "colocated", 80)
    assert best is not None and best.layout.offload != "none"
    fsdp2 = next(o for o in rejected if o.layout.sharding == "fsdp2")
    P9, P2 = 8_953_803_264, 1_881_825_088
    kv = 8 * 2 * 4 * 256 * 2 + 6 * 2 * 2 * 256 * 2  # per token: attention layers x (K, V) x KV heads x dim x bf16
    states = 24 * (32 * 128 * 128 * 4 + (2 * 16 * 128 + 32 * 128) * 4 * 2) + \
        18 * (16 * 128 * 128 * 4 + (2 * 16 * 128 + 16 * 128) * 4 * 2)  # per row: fp32 delta-rule state + conv window
    need = (P9 + P2) * 2 + 32 * (4024 * kv + states) + 2 * GiB
    share = -(-need * 100 // (80 * GiB)) / 100
    assert fsdp2.vllm_share == share == 0.38
    rollout = 12 * P9 / 2 + share * 80 * GiB
    assert fsdp2.plan.peak("cuda:0")[0] >= rollout and rollout / GiB > 77
    # the cheapest fit of the preset's own 2-GPU layout (train on cuda:0, decode on cuda:1) offloads too
    alt = cheapest_fit(cfg, Layout(1), 80)
    assert alt is not None and alt.offload != "none" and alt.processes == 1


@pytest.mark.parametrize("flag,value", [("--plan-processes", "0"), ("--plan-processes", "-2"),
                                        ("--plan-gpu-gib", "-1"), ("--plan-gpu-gib", "nan"),
                                        ("--plan-gpu-gib", "inf"), ("--plan-lora-r", "-1")])
def test_bad_plan_flags_are_one_line_errors_naming_the_flag(flag, value):
    out = subprocess.run([sys.executable, "-m", "tandem_rlvr.cli", "train", "--preset", "tiny", "--dry-run", flag,
                          value], capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and flag in lines[0] and "Traceback" not in out.stderr


def test_dry_run_prints_the_sharded_plan_and_the_layouts_table(monkeypatch, capsys):
    from tandem_rlvr.cli import main
    from tandem_rlvr.planner import memory as memory_plan
    from tandem_rlvr.planner.shapes import ActivationProfile

    monkeypatch.setattr(memory_plan, "activation_profile", lambda *a: ActivationProfile(0.0, 0.0, 0.0))
    assert main(["train", "--preset", "qwen3-4b-deepscaler", "--dry-run", "--plan-gpu-gib", "80",
                 "--plan-processes", "2", "--plan-sharding", "fsdp2"]) in (0, None)
    out = capsys.readouterr().out
    assert "one training process of FSDP2 x 2" in out and "senior weight shards" in out
    table = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    # the synchronous table (colocated and split per GPU count), then the overlapped one (one row per count)
    assert [line.split(" | ")[0] for line in table] == ["| 2", "| 2", "| 4", "| 4", "| 8", "| 8", "| 2", "| 4", "| 8"]
    assert out.index("recommended layouts on 2, 4, 8 GPUs") < out.index("overlapped (max_staleness 1: rollouts on a")


def test_lora_saves_on_disk_are_the_adapter_and_its_moments(paper):
    """Rank 16 on all seven projections of 36 layers: 16 x 36 x 57,344 = 33,030,144 fp32 adapter
    weights = 126.0 MiB; a checkpoint adds AdamW's two moments (378.0 MiB); merged/ is the bf16 senior."""

    from tandem_rlvr.planner.memory import disk_plan

    line = disk_plan(paper.with_keys(lora_r=16, save_merged=True))
    assert "checkpoint-* 378.0 MiB + merged/ 7.49 GiB" in line and "best/ and final/ 126.0 MiB" in line
