"""Rollouts overlapping training (``max_staleness``, ``rl.overlap``): which weights draw each batch, the
importance-sampling correction of stale batches, and where overlap is refused.

The pipeline runs here on the hf engine's rollout copy (a bfloat16 copy of fp32 master weights) on the CPU,
switched on after ``build_run`` (a run on one CPU is refused overlap: decoding would share the training
cores). The vllm-server engine runs it as users do: ``test_overlap_vllm.py``.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.assemble import build_run
from tandem_rlvr.rl.losses import LossSettings, PolicyBatch, importance_weights, policy_term

from helpers.train import train_cfg


# -- the correction, against hand-worked numbers -------------------------------------------------------------------

def _batch(old, behaviour, senior, advantages=None, logps=None):
    old, behaviour = torch.tensor(old), torch.tensor(behaviour)
    senior = torch.tensor(senior, dtype=torch.float32)
    return PolicyBatch(logps=old.clone() if logps is None else torch.tensor(logps), old_logps=old, ref_logps=None,
                       advantages=torch.ones(old.shape[0], 1) if advantages is None else torch.tensor(advantages),
                       response_mask=torch.ones_like(old), senior_mask=senior, normalizer=torch.tensor(1.0),
                       behaviour_logps=behaviour)


def test_importance_weights_are_exp_old_minus_behaviour_on_senior_tokens_truncated_or_masked_at_the_clip():
    import math

    # row 0: senior, junior, senior; row 1: senior, senior, junior (junior tokens' log-probs are nonsense on purpose)
    b = _batch(old=[[-1.0, -5.0, -0.5], [-2.0, -0.1, -9.0]], behaviour=[[-1.5, -0.1, -2.0], [-1.0, -0.1, -0.2]],
               senior=[[1, 0, 1], [1, 1, 0]])
    w = importance_weights(b, LossSettings(importance_correction="token_truncate", importance_clip=3.0))
    # exp(0.5) = 1.6487, junior 1, exp(1.5) = 4.48 -> 3; exp(-1) = 0.3679, exp(0) = 1, junior 1
    want = [[math.exp(0.5), 1.0, 3.0], [math.exp(-1.0), 1.0, 1.0]]
    torch.testing.assert_close(w, torch.tensor(want), rtol=1e-6, atol=0)
    w = importance_weights(b, LossSettings(importance_correction="token_mask", importance_clip=3.0))
    torch.testing.assert_close(w, torch.tensor([[math.exp(0.5), 1.0, 0.0], [math.exp(-1.0), 1.0, 1.0]]), rtol=1e-6,
                               atol=0)
    # sequence: the senior tokens' log-ratios summed per row: 0.5 + 1.5 = 2 -> exp 7.39 (clipped to 3 / masked); -1
    w = importance_weights(b, LossSettings(importance_correction="sequence_truncate", importance_clip=3.0))
    torch.testing.assert_close(w, torch.tensor([[3.0], [math.exp(-1.0)]]), rtol=1e-6, atol=0)
    w = importance_weights(b, LossSettings(importance_correction="sequence_mask", importance_clip=3.0))
    torch.testing.assert_close(w, torch.tensor([[0.0], [math.exp(-1.0)]]), rtol=1e-6, atol=0)


def test_a_stale_batch_scales_each_senior_tokens_clipped_surrogate_by_its_weight():
    import math

    # one row, two senior tokens; the policy moved from old by +0.1 and -0.3 in log-prob; advantage 2
    b = _batch(old=[[-1.0, -2.0]], behaviour=[[-1.2, -1.0]], senior=[[1, 1]], advantages=[[2.0]],
               logps=[[-0.9, -2.3]])
    s = LossSettings(loss_type="dapo", clip_low=0.2, clip_high=0.2, importance_clip=3.0)
    loss, stats = policy_term(b, s)
    # token 0: ratio e^0.1 = 1.1052 (inside 1 +- 0.2), weight e^0.2; token 1: ratio e^-0.3 = 0.7408, clipped to 0.8
    # for A > 0 min(r A, clip(r) A) = r A = 1.4816; weight e^-1
    t0 = -math.exp(0.1) * 2.0 * math.exp(0.2)
    t1 = -math.exp(-0.3) * 2.0 * math.exp(-1.0)
    assert float(loss) == pytest.approx(t0 + t1, rel=1e-6)  # dapo: token sum / normalizer 1
    assert float((stats["importance/weight_mean"].values * stats["importance/weight_mean"].mask).sum() / 2) == \
        pytest.approx((math.exp(0.2) + math.exp(-1.0)) / 2, rel=1e-6)
    no = PolicyBatch(**{**b.__dict__, "behaviour_logps": None})
    assert float(policy_term(no, s)[0]) == pytest.approx(-math.exp(0.1) * 2.0 - math.exp(-0.3) * 2.0, rel=1e-6)


# -- where overlap is refused ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("keys, words", [
    (dict(engine="hf"), "engine hf decodes on the training devices"),
    (dict(engine="vllm"), "engine vllm decodes in the training process"),
    (dict(engine="hf", rollout_device="cuda:1", max_staleness=2, sharding="fsdp2"),
     r"a sharded senior \(fsdp2\) overlaps with max_staleness 1"),
])
def test_max_staleness_is_refused_in_one_line_where_it_cannot_overlap(train_inputs, tmp_path, keys, words):
    with pytest.raises(TandemError, match=words):
        train_cfg(train_inputs, tmp_path, **{"max_staleness": 1, **keys})


def test_max_staleness_on_the_training_device_is_refused_before_the_run_directory_exists(train_inputs, tmp_path):
    cfg = train_cfg(train_inputs, tmp_path, max_staleness=1, rollout_device="cpu")
    with pytest.raises(TandemError, match="rollout_device cpu is the device the senior trains on"):
        build_run(cfg, print_fn=lambda *_: None)
    assert not (tmp_path / "run").exists()


def test_the_cli_refuses_max_staleness_on_the_hf_engine_without_a_rollout_device(tmp_path, capsys):
    from tandem_rlvr.cli import main

    code = main(["train", "--preset", "tiny", "--max-staleness", "1", "--output-dir", str(tmp_path / "r")])
    assert code != 0 and not (tmp_path / "r").exists()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tandem: error: max_staleness 1: engine hf"), lines


# -- the schedule: which weights draw which batch -------------------------------------------------------------------

def _digest(model) -> float:
    """A number that changes with every parameter update: the sum of every weight as bfloat16 holds it (the
    rollout copy's dtype), in float64; the copy of a version has exactly that version's digest."""
    return float(sum(p.detach().to(torch.bfloat16).double().sum() for p in model.parameters()))


def _overlapped_run(train_inputs, tmp_path, k: int, steps: int, **keys):
    """A run on the hf engine's bf16 rollout copy with overlap switched on after build_run (module docstring);
    records, per generation, the update it feeds, its prompts and seeds, the copy's weights when it is decoded
    and when each decode starts and ends; and the senior's weights after every update."""
    from transformers import TrainerCallback

    cfg = train_cfg(train_inputs, tmp_path, dtype="bfloat16", max_steps=steps, save_every=steps, **keys)
    run = build_run(cfg.with_keys(max_staleness=0) if k else cfg, print_fn=lambda *_: None)
    if k:
        object.__setattr__(run.rollout.cfg.rollout, "max_staleness", k)
        run.rollout.start_overlap()
        run.trainer.importance = (cfg.rollout.importance_correction, cfg.rollout.importance_clip)
        run.start.closers.insert(0, run.rollout.overlap.close)
    senior = run.prep.pair.senior
    versions = {0: _digest(senior)}
    decoded, pushes = [], []
    engine, decode = run.rollout.engine, run.rollout.decode
    load = engine.load_weights

    def spy_decode(planned):
        t0 = time.perf_counter()
        time.sleep(0.2)  # a slow decode, so that a push which does not wait for it would land inside it
        roll = decode(planned)
        copy = engine.rollout_copy.copy
        decoded.append({"step": planned.step, "prompts": list(planned.prompts), "seeds": list(planned.seeds),
                        "copy": _digest(copy), "t0": t0, "t1": time.perf_counter(),
                        "thread": threading.current_thread().name})
        return roll

    def spy_load(weights):
        pushes.append(time.perf_counter())
        return load(weights)

    class Versions(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            versions[state.global_step] = _digest(senior)

    run.rollout.decode = spy_decode
    engine.load_weights = spy_load
    run.trainer.add_callback(Versions())
    try:
        run.trainer.train()
    finally:
        run.close()
    return run, decoded, pushes, versions


@pytest.mark.parametrize("k", [1, 2])
def test_each_batch_is_drawn_by_the_weights_k_rollout_steps_back_with_the_synchronous_runs_prompts_and_seeds(
        train_inputs, tmp_path, k):
    import json
    import zlib

    from tandem_rlvr.decoding.rng import row_seed

    steps = 4
    sync, sync_decoded, _, _ = _overlapped_run(train_inputs, tmp_path / "sync", 0, steps)
    run, decoded, pushes, versions = _overlapped_run(train_inputs, tmp_path / "over", k, steps, eval_every=1)
    # every rollout step's batch, in the order the trainer took them, with the synchronous run's prompts and seeds
    assert [d["step"] for d in sorted(decoded, key=lambda d: d["step"])] == list(range(steps))
    by_step = {d["step"]: d for d in decoded}
    for d in sync_decoded:
        assert by_step[d["step"]]["prompts"] == d["prompts"]
        assert by_step[d["step"]]["seeds"] == d["seeds"]
    for d in decoded:  # the seeds are (run seed, update, prompt, copy): an independent derivation
        seen = {}
        want = []
        for text in d["prompts"]:
            key = zlib.crc32(text.encode())
            want.append(row_seed(0, d["step"], key, seen.get(key, 0)))
            seen[key] = seen.get(key, 0) + 1
        assert d["seeds"] == want
    # the copy that decoded update s's batch held the senior of update max(0, s - k), cast to bfloat16
    assert len(set(versions.values())) == len(versions)  # every update moved the weights
    for d in decoded:
        assert d["copy"] == versions[max(0, d["step"] - k)], (d["step"], d["copy"], versions)
    # the first batch is decoded on the training thread, the rest on the worker
    assert by_step[0]["thread"] == "MainThread" and all(by_step[s]["thread"] != "MainThread" for s in range(1, steps))
    # no push landed inside a decode (validation runs after every update and waits for the batch in flight)
    for d in decoded:
        assert not any(d["t0"] < t < d["t1"] for t in pushes), d["step"]
    log = [json.loads(line) for line in (tmp_path / "over" / "run" / "log.jsonl").read_text().splitlines()]
    stale = [r["overlap/staleness"] for r in log if "overlap/staleness" in r]
    assert stale == [min(s, k) for s in range(steps)]
    assert all(r["importance/weight_mean"] > 0 for r in log if "loss" in r)
    sync_log = [json.loads(line) for line in (tmp_path / "sync" / "run" / "log.jsonl").read_text().splitlines()]
    assert all("importance/weight_mean" not in r for r in sync_log)
    assert [r["overlap/staleness"] for r in sync_log if "overlap/staleness" in r] == [0.0] * steps


def test_prefetched_rollouts_of_other_prompts_than_the_trainers_batch_are_an_error():
    from concurrent.futures import Future
    from types import SimpleNamespace

    from tandem_rlvr.rl.overlap import Overlap, Started
    from tandem_rlvr.rl.rollout import Planned

    rollout = SimpleNamespace(sync=SimpleNamespace(), render=lambda prompts: list(prompts))
    ov = Overlap(rollout, 1)
    done = Future()
    done.set_result((None, 0.0))
    ov.started[4] = Started(Planned(4, ["a", "b"], [[1], [2]], [1, 2], None, None), 3, done)
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=4), model=None,
                              accelerator=SimpleNamespace(unwrap_model=lambda m: m))
    with pytest.raises(TandemError, match="prefetched for update 4 are of other prompts"):
        ov(["a", "c"], trainer)
    ov.close()


# -- max_staleness 0 is the loop as it was -------------------------------------------------------------------------

# 4 updates (2 rollout steps of 2), validation at updates 0, 2, 4, a reward with a spread (the parity of the token
# ids' sum), on the ``train_inputs`` models: the figures the training loop gave before ``max_staleness`` existed
# (commit bc95174, same script; docs/overlap.md). Losses, gradient norms, rewards, KL and senior shares are
# float64 views of float32 figures, so equal to the last bit on one machine; 1e-6 relative leaves room for
# another CPU's kernels and none for a change of the loop.
BEFORE_OVERLAP = [
    {"step": 0, "val/accuracy": 0.0},
    {"step": 1, "loss": 0.08052656799554825, "reward/mean": 0.5625, "kl/junior": 0.7512983618111446,
     "grad_norm": 3.0714964866638184, "senior/token_share": 0.45312499767169356},
    {"step": 2, "val/accuracy": 0.0},
    {"step": 2, "loss": 0.1120835468173027, "grad_norm": 1.1570179462432861},
    {"step": 3, "loss": 0.06697330623865128, "reward/mean": 0.625, "kl/junior": 1.0589758126359237,
     "grad_norm": 3.440808057785034, "senior/token_share": 0.6093749972060323},
    {"step": 4, "val/accuracy": 0.0},
    {"step": 4, "loss": -0.4167933464050293, "grad_norm": 2.242955446243286},
]


def test_max_staleness_0_trains_as_the_loop_did_before_overlap_existed(train_inputs, tmp_path):
    import json

    cfg = train_cfg(train_inputs, tmp_path, prompts_per_step=4, prompts_per_minibatch=2, max_steps=4, eval_every=2,
                    save_every=4, max_staleness=0)
    run = build_run(cfg, print_fn=lambda *_: None)

    def parity(prompts, completions, completion_ids, **kw):
        return [float(sum(ids) % 2) for ids in completion_ids]

    parity.__name__ = "correct"
    run.trainer.reward_funcs[0] = parity
    before = {t.name for t in threading.enumerate()}
    try:
        run.trainer.train()
        assert run.rollout.overlap is None and not any(t.name.startswith("tandem-rollouts") for t in
                                                        threading.enumerate() if t.name not in before)
    finally:
        run.close()
    keys = ("step", "loss", "reward/mean", "kl/junior", "val/accuracy", "grad_norm", "senior/token_share")
    got = [{k: r[k] for k in keys if k in r} for r in map(json.loads, (tmp_path / "run" / "log.jsonl").open())]
    assert [sorted(r) for r in got] == [sorted(r) for r in BEFORE_OVERLAP]
    for g, want in zip(got, BEFORE_OVERLAP, strict=True):
        assert g == pytest.approx(want, rel=1e-6, abs=0), g["step"]


def test_an_overlapped_run_resumes_with_every_update_logged_once_and_its_first_batch_drawn_by_its_own_weights(
        train_inputs, tmp_path):
    import json
    import shutil

    from tandem_rlvr.rl.train import run_training

    def go():
        cfg = train_cfg(train_inputs, tmp_path, dtype="bfloat16", max_steps=4, save_every=2)
        run = build_run(cfg.with_keys(max_staleness=0), print_fn=lambda *_: None)
        object.__setattr__(run.rollout.cfg.rollout, "max_staleness", 1)
        run.rollout.start_overlap()
        run.trainer.importance = (cfg.rollout.importance_correction, cfg.rollout.importance_clip)
        run.start.closers.insert(0, run.rollout.overlap.close)
        return run_training(run, cfg, print_fn=lambda *_: None)

    go()
    out = tmp_path / "run"
    for name in ("checkpoint-4", "final", "summary.json"):  # as if killed after the save at update 2
        shutil.rmtree(out / name) if (out / name).is_dir() else (out / name).unlink()
    assert go()["steps"] == 4
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4]
    # staleness per update: on-policy at the start and again at the resume (the weights one step back are gone)
    assert [r["overlap/staleness"] for r in log if "loss" in r] == [0.0, 1.0, 0.0, 1.0]


# -- the benchmark's split and the study's summary, on hand-made logs ----------------------------------------------

def test_the_benchmark_splits_each_rollout_step_into_wait_push_train_from_its_generating_update(tmp_path):
    import json

    from tandem_rlvr.recipes.bench_overlap import split

    # 3 rollout steps of 2 updates; the generating update (1, 3, 5) carries the rollout's timings
    rows = [{"step": 1, "loss": 0.1, "wall/step_s": 3.0, "wall/rollout_wait_s": 2.0, "wall/weight_sync_s": 0.1,
             "wall/generate_s": 2.0, "overlap/staleness": 0.0},
            {"step": 2, "loss": 0.1, "wall/step_s": 1.0},
            {"step": 2, "val/accuracy": 0.5},  # a validation record is not an update
            {"step": 3, "loss": 0.1, "wall/step_s": 2.0, "wall/rollout_wait_s": 0.5, "wall/weight_sync_s": 0.2,
             "wall/generate_s": 1.5, "overlap/staleness": 1.0},
            {"step": 4, "loss": 0.1, "wall/step_s": 1.0},
            {"step": 5, "loss": 0.1, "wall/step_s": 1.5, "wall/rollout_wait_s": 0.3, "wall/weight_sync_s": 0.0,
             "wall/generate_s": 1.7, "overlap/staleness": 1.0},
            {"step": 6, "loss": 0.1, "wall/step_s": 1.1}]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = split(tmp_path / "log.jsonl", updates_per_batch=2, warmup=1)
    # rollout steps 2 and 3: steps 3.0 and 2.6 s, waits 0.5 and 0.3, pushes 0.2 and 0.0, decodes 1.5 and 1.7
    assert got["rollout_steps"] == 2 and got["staleness"] == 1.0
    assert got["step_s"] == pytest.approx(2.8) and got["wait_s"] == pytest.approx(0.4)
    assert got["push_s"] == pytest.approx(0.1) and got["generate_s"] == pytest.approx(1.6)
    assert got["train_s"] == pytest.approx(2.8 - 0.4 - 0.1)
    with pytest.raises(TandemError, match="no rollout step after the 3 warm-up"):
        split(tmp_path / "log.jsonl", updates_per_batch=2, warmup=3)


def test_the_benchmarks_ratio_and_bound_come_from_the_synchronous_runs_own_split(tmp_path):
    import json

    from tandem_rlvr.recipes.bench_overlap import compare, report

    def log(name, step_s, wait_s):  # 3 rollout steps of one update each; the first is the warm-up
        rows = [{"step": i, "loss": 0.1, "wall/step_s": step_s if i > 1 else 9.0, "wall/rollout_wait_s": wait_s,
                 "wall/weight_sync_s": 0.0, "wall/generate_s": 1.2, "overlap/staleness": float(name == "over")}
                for i in (1, 2, 3)]
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return tmp_path / name

    got = compare(log("sync", 2.0, 1.2), log("over", 1.4, 0.6), updates_per_batch=1, warmup=1)
    # synchronous: rollout (its wait) 1.2 s, train 0.8 s: bound max(1.2, 0.8) / 2.0 = 0.6; ratio 1.4 / 2.0 = 0.7
    assert got["bound"] == pytest.approx(0.6) and got["ratio"] == pytest.approx(0.7)
    assert got["ratio_over_bound"] == pytest.approx(0.7 / 0.6)
    assert "ratio / bound 1.17)" in report(got)
    assert "(push + max(rollout, train)) / step = 0.600: ratio / bound 1.17, target <= 1.15" in report(got)


def test_the_benchmarks_serial_bound_keeps_the_push_outside_the_overlap_and_splits_the_rest_of_the_gap(tmp_path):
    import json

    from tandem_rlvr.recipes.bench_overlap import compare, report

    def log(name, step_s, wait_s, push_s, gen_s):  # 3 rollout steps of one update each; the first is the warm-up
        rows = [{"step": i, "loss": 0.1, "wall/step_s": step_s if i > 1 else 9.0, "wall/rollout_wait_s": wait_s,
                 "wall/weight_sync_s": push_s, "wall/generate_s": gen_s, "overlap/staleness": float(name == "over")}
                for i in (1, 2, 3)]
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return tmp_path / name

    got = compare(log("sync", 2.0, 1.2, 0.1, 1.2), log("over", 1.4, 0.5, 0.1, 1.25), updates_per_batch=1, warmup=1)
    # synchronous: rollout 1.2, push 0.1, train 0.7. The bound hides the push: max(1.2, 0.8) / 2.0 = 0.6;
    # with the push serial: (0.1 + max(1.2, 0.7)) / 2.0 = 0.65. Ratio 1.4 / 2.0 = 0.7
    assert got["bound"] == pytest.approx(0.6) and got["serial_bound"] == pytest.approx(0.65)
    assert got["ratio_over_serial_bound"] == pytest.approx(0.7 / 0.65)
    # overlapped: train 1.4 - 0.5 - 0.1 = 0.8 (0.8 / 0.7 of the synchronous one), decode 1.25 / 1.2;
    # its step over push + max(decode, train): 1.4 / (0.1 + 1.25)
    assert got["corun"]["decode"] == pytest.approx(1.25 / 1.2) and got["corun"]["train"] == pytest.approx(0.8 / 0.7)
    assert got["schedule"] == pytest.approx(1.4 / 1.35)
    text = report(got)
    assert "(push + max(rollout, train)) / step = 0.650: ratio / bound 1.08" in text
    assert "decode 1.04x, training 1.14x" in text and "max(its decode, its training)) 1.04" in text


def test_the_overlap_study_pairs_arms_by_seed_and_calls_within_two_standard_errors_noise():
    import math

    from tandem_rlvr.recipes.study_overlap import summarize

    def fig(final):
        return {"final": final, "best": final, "first_reward": 0.5, "late_reward": final, "step_s": 1.0}

    figures = {(0, 0): fig(0.50), (0, 1): fig(0.60), (0, 2): fig(0.70),
               (1, 0): fig(0.52), (1, 1): fig(0.59), (1, 2): fig(0.74)}
    res = summarize(figures, [0, 1, 2], 1)
    diffs = [0.02, -0.01, 0.04]  # overlapped - synchronous, seed by seed
    m = sum(diffs) / 3
    se = math.sqrt(sum((d - m) ** 2 for d in diffs) / 2 / 3)
    d = res["paired"]["final"]
    assert d["mean"] == pytest.approx(m) and d["se"] == pytest.approx(se) and d["n"] == 3
    assert d["within_noise"] is (abs(m) <= 2 * se)
    assert res["arms"]["staleness0"]["final"]["mean"] == pytest.approx(0.6)
    far = summarize({**figures, (1, 0): fig(0.60), (1, 1): fig(0.70), (1, 2): fig(0.81)}, [0, 1, 2], 1)
    assert far["paired"]["final"]["within_noise"] is False  # +0.10, +0.10, +0.11: far outside two standard errors


def test_the_benchmark_reads_vllm_engine_steps_summed_over_label_sets_and_none_when_absent():
    from tandem_rlvr.recipes.bench_overlap import engine_steps

    text = ("# HELP vllm:iteration_tokens_total Histogram of tokens per engine step.\n"
            'vllm:iteration_tokens_total_bucket{engine="0",le="1.0"} 3.0\n'
            'vllm:iteration_tokens_total_count{engine="0",model_name="m"} 187.0\n'
            'vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 4700.0\n'
            'vllm:iteration_tokens_total_count{engine="1",model_name="m"} 13.0\n'
            'vllm:prompt_tokens_total{engine="0"} 99.0\n')
    assert engine_steps(text) == 200.0  # 187 + 13: the counts only, not the sum or the buckets
    assert engine_steps('vllm:prompt_tokens_total{engine="0"} 99.0\n') is None


def test_the_benchmark_counts_the_cpu_seconds_of_the_servers_whole_process_group(tmp_path):
    import subprocess
    import sys

    from tandem_rlvr.recipes.bench_overlap import server_cpu_s

    # a group of two processes: each burns ~0.3 s of CPU, reports its own CPU time, then waits to be read
    code = ("import time, sys\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
            "print(time.process_time(), flush=True)\nsys.stdin.read()\n")
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys\n"
                               f"c = subprocess.Popen([sys.executable, '-c', {code!r}], stdin=subprocess.PIPE)\n"
                               + code + "c.stdin.close(); c.wait()\n"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        own = float(parent.stdout.readline())  # the parent's; the child's line goes to the same pipe
        own += float(parent.stdout.readline())
        got = server_cpu_s(parent.pid)
    finally:
        parent.stdin.close()
        parent.wait(timeout=30)
    assert got == pytest.approx(own, abs=0.3)  # interpreter start-up (~0.05 s each) and the clock's ticks
    assert got >= 0.6 - 0.05
    assert server_cpu_s(2 ** 22 + 7) == 0.0  # no such group: nothing counted


def test_the_benchmark_with_repeats_averages_each_arm_and_reports_every_pairs_ratio(tmp_path):
    import json

    from tandem_rlvr.recipes.bench_overlap import compare_runs, report

    def log(name, step_s, wait_s, gen_s):  # 3 rollout steps of one update each; the first is the warm-up
        rows = [{"step": i, "loss": 0.1, "wall/step_s": step_s if i > 1 else 9.0, "wall/rollout_wait_s": wait_s,
                 "wall/weight_sync_s": 0.0, "wall/generate_s": gen_s, "overlap/staleness": float("over" in name)}
                for i in (1, 2, 3)]
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return tmp_path / name

    logs = [(log("sync1", 2.0, 1.2, 1.2), log("over1", 1.4, 0.6, 1.2)),
            (log("sync2", 3.0, 1.8, 1.8), log("over2", 1.5, 0.2, 1.6))]
    counters = [(({"cpu_s": 10.0, "engine_steps": 100.0}, {"cpu_s": 13.0, "engine_steps": 400.0}),
                 ({"cpu_s": 13.0, "engine_steps": 400.0}, {"cpu_s": 16.6, "engine_steps": 700.0})),
                (({"cpu_s": None, "engine_steps": None}, {"cpu_s": None, "engine_steps": None}),
                 ({"cpu_s": 20.0, "engine_steps": 0.0}, {"cpu_s": 23.0, "engine_steps": 300.0}))]
    got = compare_runs(logs, updates_per_batch=1, warmup=1, counters=counters)
    # pair 1: bound 1.2 / 2.0 = 0.6, ratio 0.7; pair 2: rollout 1.8, train 1.2: bound 0.6, ratio 0.5
    assert got["pairs"] == pytest.approx([0.7 / 0.6, 0.5 / 0.6])
    # the means: synchronous step 2.5, wait 1.5 (bound 1.5 / 2.5 = 0.6); overlapped step 1.45: ratio 0.58
    assert got["synchronous"]["step_s"] == pytest.approx(2.5) and got["bound"] == pytest.approx(0.6)
    assert got["ratio"] == pytest.approx(1.45 / 2.5)
    # the server per rollout step of the whole run (3 steps): run over1 3.6 s of CPU and 300 engine steps
    over1 = compare_runs(logs[:1], 1, 1, counters[:1])["overlapped"]["server"]
    assert over1["cpu_s"] == pytest.approx(1.2) and over1["engine_steps"] == pytest.approx(100.0)
    assert over1["cpu_ms_per_engine_step"] == pytest.approx(12.0) and over1["decode_s"] == pytest.approx(1.2)
    # a counter one run lacks is not averaged over the runs that have it
    assert "cpu_s" not in got["synchronous"]["server"]
    assert got["overlapped"]["server"]["cpu_s"] == pytest.approx((1.2 + 1.0) / 2)
    text = report(got)
    assert "ratio / bound of each pair, in run order: 1.17, 0.83; with the push serial: 1.17, 0.83" in text
    assert "CPU ms per engine step" in text
