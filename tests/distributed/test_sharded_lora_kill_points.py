"""A 2-process FSDP2 + LoRA run (torchrun, gloo on CPU) killed with SIGKILL at several moments and re-run
each time: during an update, while a checkpoint is being written, right after a checkpoint is complete.
Each re-run resumes from the last complete checkpoint, and the last one ends with the requested number of
updates, a log.jsonl holding every update exactly once, and (every update) the losses, KL to the junior and
gradient norms of an uninterrupted run (the resume checkpoint must hold the adapter: PEFT found none of
its tensors under FSDP's activation-checkpoint wrapper until ``rl/peft_checkpoint.py``, and a resumed run
trained on from the initial adapter; its KL to the junior was 0 at the first update after the resume).
The uninterrupted run is one process, in this test's process (``train_here``: no launch to pay for): two
FSDP2 processes train as one within the tolerance used here (``test_sharded_training.py``; measured equal
within it at every update of this run), so the killed 2-process run must match it.

The run is the built-in tiny preset on 40 problems with the ``correct`` reward term, whose problems repeat
across batches from the fourth update on (the case that made ``rewards.terms.Grades`` raise KeyError on a
resumed run). Run: ``python -m pytest -m slow tests/distributed/test_sharded_lora_kill_points.py``.
"""

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers.sharded import child_env, run_ok, signal_all, torchrun, train_here, update_rows

pytestmark = pytest.mark.slow
STEPS = 10  # checkpoints at 4 and 8; the last two updates resumed in the second epoch (5 updates an epoch)


def _train(out: Path) -> list[str]:
    """``tandem train``'s flags of the run (the 2-process launch adds ``--sharding fsdp2``)."""
    return ["--preset", "tiny", "--senior-device", "cpu", "--lora-r", "4", "--limit", "40", "--val-size", "8",
            "--max-steps", str(STEPS), "--eval-every", "4", "--save-every", "4", "--output-dir", str(out)]


def _flags(out: Path) -> list[str]:
    return ["-m", "tandem_rlvr.cli", "train", "--sharding", "fsdp2", *_train(out)]


def _logged_steps(run: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run / "log.jsonl").read_text().splitlines() if '"loss"' in x]


def _kill_when(run: Path, ready, log: Path) -> str:
    """Start (or resume) the run, SIGKILL its whole job once ``ready(run)`` holds; what it printed."""
    with open(log, "w") as out:
        proc = subprocess.Popen(torchrun(*_flags(run)), stdout=out, stderr=subprocess.STDOUT, env=child_env())
    deadline = time.time() + 900
    while not ready(run):
        assert time.time() < deadline and proc.poll() is None, f"ended or stalled:\n{log.read_text()[-3000:]}"
        time.sleep(0.02)
    signal_all(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run / "summary.json").exists(), "killed too late: the run had finished"
    return log.read_text()


def _resumed_from(text: str) -> int:
    found = re.findall(r"resuming from checkpoint-(\d+)", text)
    return int(found[-1]) if found else 0


def _complete(run: Path, step: int) -> bool:
    return (run / f"checkpoint-{step}" / "trainer_state.json").exists()


def test_fsdp2_lora_killed_during_an_update_during_a_save_and_after_a_save_resumes_to_every_update_once(tmp_path):
    whole = tmp_path / "whole"
    train_here(*_train(whole))  # uninterrupted, one process (module docstring)
    run = tmp_path / "killed"
    # 1. during update 6 (update 5 logged, checkpoint-4 complete): the re-run resumes from checkpoint-4
    _kill_when(run, lambda r: len(_logged_steps(r)) >= 5 if (r / "log.jsonl").exists() else False,
               tmp_path / "kill1.log")
    # 2. while checkpoint-8 is being written (its folder exists): from checkpoint-4, or 8 had it been finished
    said = _kill_when(run, lambda r: (r / "checkpoint-8").exists(), tmp_path / "kill2.log")
    assert _resumed_from(said) == 4, said[-3000:]
    # 3. right after checkpoint-8 is complete (the folder may have been left half-written by kill 2)
    said = _kill_when(run, lambda r: _complete(r, 8), tmp_path / "kill3.log")
    assert _resumed_from(said) in (4, 8), said[-3000:]
    said = run_ok(torchrun(*_flags(run)))
    assert _resumed_from(said) == 8, said[-3000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == STEPS
    assert _logged_steps(run) == list(range(1, STEPS + 1))
    one, two = update_rows(whole), update_rows(run)
    # kl/junior and grad_norm move at once if the adapter were not restored. Updates 9-10, resumed from
    # checkpoint-8 mid-way through the second epoch (5 updates an epoch: its trainer_state.json says 1.6), get
    # the uninterrupted run's prompts because the trainer passes rl.epoch_sampler.epoch_aware its epoch_of
    # (set_epoch does not reach a sampler three wrappers deep)
    for step in range(1, STEPS + 1):
        for key in ("loss", "reward/mean", "kl/junior", "grad_norm"):
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-5, abs=1e-7), (step, key)
    assert (run / "final" / "adapter_model.safetensors").is_file()
