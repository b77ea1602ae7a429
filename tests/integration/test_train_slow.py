"""Slow training checks on the shipped tiny world: two gloo processes against one, and the one-process kill and
resume (one killed run answering every check of a one-process resume).

Run with ``python -m pytest -m slow tests/integration/test_train_slow.py``.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers.sharded import child_env, train_here

pytestmark = pytest.mark.slow

ARGS = ["--preset", "tiny", "--limit", "200", "--val-size", "8", "--max-new-tokens", "64"]


def _log(run):
    return [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]


def test_two_process_gloo_run_matches_one_process_first_step_loss(tmp_path):
    common = ARGS + ["--max-steps", "1", "--eval-every", "0", "--save-every", "1"]
    train_here(*common, "--output-dir", str(tmp_path / "p1"))  # one process: this one, no fresh interpreter
    # On a CPU machine `accelerate launch --cpu --num_processes 2` starts ONE process (its
    # multi-CPU launch needs MPI); torchrun starts two, which accelerate joins with gloo.
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "tandem_rlvr.cli", "train", *common, "--output-dir", str(tmp_path / "p2")],
                         capture_output=True, text=True, timeout=900, env=child_env())  # one thread each, too
    assert two.returncode == 0, two.stderr[-2000:]
    assert json.loads((tmp_path / "p2" / "summary.json").read_text())["processes"] == 2
    a, b = _log(tmp_path / "p1")[0], _log(tmp_path / "p2")[0]
    assert a["loss"] != 0.0  # a real learning signal, not two zeros
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)
    assert a["senior/token_share"] == pytest.approx(b["senior/token_share"])


def _losses(run) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in _log(run) if "loss" in r}


# 40 problems, 8 for validation: checkpoint-6 lies in the run's second epoch
KILLED = ["--preset", "tiny", "--senior-device", "cpu", "--limit", "40", "--val-size", "8", "--max-new-tokens", "64",
          "--max-steps", "8", "--save-every", "2"]


def test_sigkill_then_rerun_resumes_without_losing_steps_in_the_uninterrupted_runs_epoch_order(tmp_path):
    """One run SIGKILLed once checkpoint-6 is complete and re-run answers both: the re-run resumes there and
    ends with every update and every validation logged exactly once, the wall clock carried on, and (the run
    resumed in its second epoch, rl/epoch_sampler.py) updates 7 and 8 on the uninterrupted run's prompts,
    so with its losses."""
    env = child_env()  # one thread each: the same sums
    whole, run = tmp_path / "whole", tmp_path / "run"
    # the uninterrupted run, here (no kill) and without validation: validation draws from no stream training uses
    train_here(*KILLED, "--eval-every", "0", "--output-dir", str(whole))
    state = json.loads((whole / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and state["epoch"] > 1  # checkpoint-6 lies in the second epoch
    cmd = [sys.executable, "-m", "tandem_rlvr.cli", "train", *KILLED, "--eval-every", "2", "--output-dir", str(run)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    deadline = time.time() + 600
    while not (run / "checkpoint-6" / "trainer_state.json").exists():
        assert time.time() < deadline and proc.poll() is None, "run ended or stalled before checkpoint-6"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run / "summary.json").exists(), "killed too late: the run had finished"
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "resuming from checkpoint-6" in res.stdout + res.stderr
    rows = _log(run)
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [r["step"] for r in rows if "val/accuracy" in r] == [0, 2, 4, 6, 8]
    totals = [r["wall/total_s"] for r in rows]
    assert totals == sorted(totals)
    assert json.loads((run / "summary.json").read_text())["steps"] == 8
    one, two = _losses(whole), _losses(run)
    assert sorted(two) == list(range(1, 9))
    for step in (7, 8):
        assert two[step] == pytest.approx(one[step], rel=1e-5, abs=1e-7), step
