"""The paper-scale training settings of issue 22 reach TRL and the run as the paper's code has them:
weight decay 0.01, dual-clip 3, step units, validation by method or solo, the renamed imitation
key, and the memory plan's arithmetic (checked against numbers worked out by hand here)."""

import json

import pytest
import torch

from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.assemble import build_run
from tandem_rlvr.rl.train import train

from helpers.train import train_cfg


def test_paper_training_defaults_reach_trl(train_inputs, tmp_path):
    run = build_run(train_cfg(train_inputs, tmp_path), print_fn=lambda *_: None)
    args = run.trainer.args
    assert args.weight_decay == 0.01 and args.delta == 3.0 and args.gradient_checkpointing
    paper = load_train_config("qwen3-4b-deepscaler", None, {})
    assert (paper.loss.weight_decay, paper.loss.dual_clip, paper.loss.kl_clamp) == (0.01, 3.0, 10.0)
    assert (paper.models.master_dtype, paper.models.dtype, paper.loop.step_unit) == ("float32", "bfloat16", "rollout")
    # 16 prompts x 8 rollouts in mini-batches of 8 prompts: 64 rows per update, 1 row per micro-batch
    assert paper.loop.micro_batch_rows == 1 and paper.loop.updates_per_batch == 2
    # test_freq 20 x 2
    assert paper.loop.updates(paper.loop.eval_every) == 40 and paper.loop.updates(paper.loop.save_every) == 40


def test_step_unit_rollout_counts_rollout_batches(train_inputs, tmp_path):
    cfg = train_cfg(train_inputs, tmp_path, prompts_per_step=4, prompts_per_minibatch=2, step_unit="rollout",
                    max_steps=1, save_every=1, eval_every=1)
    run = build_run(cfg, print_fn=lambda *_: None)
    assert run.trainer.args.max_steps == 2 and run.trainer.args.save_steps == 2  # 1 rollout batch = 2 updates
    run.close()
    run.lock.release()
    summary = train(cfg, print_fn=lambda *_: None)
    assert summary["steps"] == 2 and summary["rollout_steps"] == 1
    rows = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    steps = [(r["step"], r["rollout_step"]) for r in rows if "loss" in r]
    assert steps == [(1, 1), (2, 1)]
    val = [r["step"] for r in rows if "val/accuracy" in r]
    assert val == [0, 2]  # before training, then after each rollout batch (eval_every 1 rollout step)


def test_save_every_must_be_whole_rollout_batches(train_inputs, tmp_path):
    with pytest.raises(TandemError, match="save_every"):
        train_cfg(train_inputs, tmp_path, prompts_per_step=4, prompts_per_minibatch=2, save_every=3)
    train_cfg(train_inputs, tmp_path, prompts_per_step=4, prompts_per_minibatch=2, save_every=3, step_unit="rollout")


def test_validation_solo_samples_the_senior_alone(train_inputs, tmp_path):
    method = build_run(train_cfg(train_inputs, tmp_path / "m", output_dir=str(tmp_path / "m")),
                       print_fn=lambda *_: None)
    solo = build_run(train_cfg(train_inputs, tmp_path / "s", output_dir=str(tmp_path / "s"), validation="solo"),
                     print_fn=lambda *_: None)
    m, s = (r.rollout.engine.schedule(r.validation.spec) for r in (method, solo))  # what the engine decodes
    assert m.name == "word" and m.uses_junior
    assert s.name == "senior" and not s.uses_junior
    assert solo.rollout.cfg.rollout_schedule == "word"  # training rollouts stay tandem


def test_renamed_key_lambda_jun_is_refused_with_its_new_names():
    with pytest.raises(TandemError, match="junior_imitation.*junior_token_weight"):
        load_train_config(None, None, {"lambda_jun": 0.5})


@pytest.mark.parametrize("bad", [dict(max_steps=0), dict(max_steps=-2), dict(dual_clip=1.1),
                                 dict(master_dtype="fp16"), dict(validation="tandem"), dict(step_unit="epoch")])
def test_bad_training_settings_are_one_line_errors(bad):
    with pytest.raises(TandemError):
        load_train_config(None, None, bad)


def test_training_set_smaller_than_a_rollout_batch_is_refused(train_inputs, tmp_path):
    with pytest.raises(TandemError, match="fewer than one rollout batch"):
        build_run(train_cfg(train_inputs, tmp_path, limit=5, val_size=4, prompts_per_step=2), print_fn=lambda *_: None)


# ---------------------------------------------------------------- the memory plan's arithmetic
def _items(p, device=None):
    return {i.name.split(" (")[0]: i.nbytes for i in p.items if device is None or i.device == device}


def test_memory_plan_counts_weights_moments_and_kv_caches_by_hand(train_inputs, tmp_path):
    from tandem_rlvr.planner.memory import plan

    cfg = train_cfg(train_inputs, tmp_path, dtype="bfloat16", rollout_batch_rows=3, prompts_per_step=2, group_size=4)
    p = plan(cfg)
    items = _items(p)
    # the fixture's model: vocab V, hidden 32, intermediate 64, 1 layer, 4 heads of 8, 2 KV heads, untied
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(train_inputs[1])
    V, h, i = c.vocab_size, 32, 64
    layer = 2 * h + h * 32 + 2 * h * 16 + 32 * h + 3 * h * i + 2 * 8  # norms, q, k and v, o, MLP, q/k norms
    P = 2 * V * h + layer + h  # embedding, head, the layer, final norm
    assert items["senior weights"] == P * 4  # fp32 masters
    assert items["AdamW moments"] == 2 * P * 4
    assert items["gradients"] == P * 4
    matrices = V * h + h * 32 + 2 * h * 16 + 32 * h + 3 * h * i
    assert items["autocast copies of the matrices"] == matrices * 2
    assert items["junior weights"] == P * 2
    assert items["senior copy the rollouts decode"] == P * 2
    seq = cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens
    kv_per_token = 1 * 2 * 2 * 8 * 2  # layers x (K, V) x KV heads x head dim x bf16
    kv = [i for i in p.items if i.name.startswith("senior KV cache") and i.phase == "rollout"]
    assert kv[0].nbytes == 3 * seq * kv_per_token  # rollout_batch_rows rows
    peak, phase = p.peak("cpu")  # one device: resident memory plus the heaviest phase
    resident = sum(i.nbytes for i in p.items if i.phase == "resident")
    phases = {ph: sum(i.nbytes for i in p.items if i.phase == ph) for ph in {i.phase for i in p.items} - {"resident"}}
    assert {"update", "update/head", "update/layers", "rollout", "kl-monitor"} == set(phases)  # eval_every 0
    for sub in ("update/head", "update/layers"):  # a sub-phase holds its parent's items too
        phases[sub] += phases["update"]
    assert peak == resident + max(phases.values()) and phases[phase] == max(phases.values())
    # the head's backward on CPU, by hand: the fixture scores every position (no Triton), fp32 tile
    from tandem_rlvr.rl.grpo_config import micro_batching

    head = micro_batching(cfg, 1)[0] * (seq - 1)
    head_items = (items["log-prob head: temporaries of TRL's torch fallback"]
                  + items["log-prob head: TRL's tile and the hidden states' fp32 gradient"])
    assert head_items == pytest.approx(min(head, 4096) * min(V, 32768) * (7.25 * 4 + 2) + head * h * 4)
    assert items["log-prob head: fp32 accumulator of the head's gradient"] == V * h * 4


def test_memory_plan_activation_profile_matches_autograds_saved_bytes():
    """The profile extends counts at small widths to the real ones; at a width it never saw it
    must equal a direct count of what autograd saves in one layer."""
    from transformers import Qwen3Config

    from tandem_rlvr.planner.shapes import activation_profile
    from tandem_rlvr.planner.shapes import saved_bytes as _saved_bytes

    cfg = Qwen3Config(vocab_size=64, hidden_size=112, intermediate_size=272, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=2, head_dim=32)
    prof = activation_profile(cfg, torch.float32, torch.float32)
    one = _saved_bytes(cfg, 1, torch.float32, torch.float32, 2, 32)
    two = _saved_bytes(cfg, 2, torch.float32, torch.float32, 2, 32)
    assert prof.per_layer == pytest.approx((two - one) / 64, rel=0.02)
    # a float32 layer saves at least its two norms' inputs and the MLP's four intermediate-width tensors
    assert prof.per_layer >= 4 * (2 * 112 + 4 * 272)


def test_paper_preset_plan_fits_two_80gb_gpus_and_not_one():
    from tandem_rlvr.planner.memory import GiB, plan

    cfg = load_train_config("qwen3-4b-deepscaler", None, {"method": "tandem"})
    p = plan(cfg, 1, 80)
    peaks = {d: p.peak(d)[0] / GiB for d in p.devices()}
    assert set(peaks) == {"cuda:0", "cuda:1"} and max(peaks.values()) < 77
    P = _items(p, "cuda:0")["senior weights"] / 4
    assert 4.0e9 < P < 4.05e9  # Qwen3-4B: 36 layers of 100.9M weights + a tied 389M embedding
    one = load_train_config("qwen3-4b-deepscaler", None, {"method": "tandem", "junior_device": "cuda:0",
                                                           "rollout_device": "cuda:0"})
    p1 = plan(one, 1, 80)
    assert p1.peak("cuda:0")[0] / GiB > 77  # fp32 masters + moments + gradients alone are 60 GiB



@pytest.mark.parametrize("autocast", [False, True])
def test_cpu_log_prob_head_backward_peak_matches_the_plans_tile_count(autocast):
    """The plan's head items on CPU (tile, fp32 accumulators, CPU_FALLBACK_TILES temporaries)
    against the live-tensor peak of TRL's own chunked head backward, read off the torch
    profiler's memory timeline (every allocation and free of the CPU allocator)."""
    import numpy as np
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import MemoryProfileTimeline
    from trl.kernels.chunked_logprob import ChunkedLogProbFunction

    from tandem_rlvr.planner.memory import CPU_FALLBACK_TILES, TILE_VOCAB

    N, H, V = 300, 32, 40000  # two vocabulary slices: 32,768 and 7,232 wide
    torch.manual_seed(0)
    hidden = torch.randn(N, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logps = ChunkedLogProbFunction.apply(hidden, weight, None, torch.randint(0, V, (N,)), 1.0, TILE_VOCAB,
                                             None, 1.0, ("log_probs",))[0]
    loss = logps.sum()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        loss.backward()
    _, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline(torch.device("cpu"))
    live = np.array(sizes).sum(1)
    measured = live.max() - live[0]
    tile = N * TILE_VOCAB
    compute = 2 if autocast else 4
    planned = (tile * compute + CPU_FALLBACK_TILES * tile * 4  # the tile and the fallback's temporaries
               + V * H * 4 + N * H * 4  # fp32 accumulators of the head's and the hidden states' gradients
               + (TILE_VOCAB * H * 2 if autocast else 0))  # bf16 copy of one vocabulary slice
    assert planned == pytest.approx(measured, rel=0.02)


def test_trl_exempts_norms_and_biases_from_weight_decay(tok):
    """The documented weight-decay difference (docs/paper_fidelity.md): verl decays every parameter,
    TRL's optimiser groups (transformers' ``get_decay_parameter_names``) leave norm weights and biases out."""
    from transformers import Trainer

    from conftest import make_model

    model = make_model(len(tok), 0, hidden=32, layers=1)
    decayed = set(Trainer.get_decay_parameter_names(None, model))
    names = {n for n, _ in model.named_parameters()}
    norms = {n for n in names if "norm" in n}
    assert norms and not norms & decayed  # every RMSNorm weight is exempt
    assert decayed == names - norms  # Qwen3 has no biases; every other weight decays
