"""A run resumed in its second epoch trains on the order the uninterrupted run trains on
(rl/epoch_sampler.py): the sampler's epoch e is TRL's (e + 1)-th draw from its seed, whether the epochs
before were iterated or skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from trl.trainer.utils import RepeatSampler

from tandem_rlvr.rl.epoch_sampler import EpochRepeatSampler, epoch_aware


def _orders(sampler, epochs: int) -> list[list[int]]:
    return [list(sampler) for _ in range(epochs)]


def test_a_fresh_sampler_set_to_epoch_e_gives_the_order_the_uninterrupted_sampler_draws_at_epoch_e():
    data = list(range(10))
    uninterrupted = _orders(RepeatSampler(data, mini_repeat_count=2, batch_size=4, repeat_count=1, seed=7), 4)
    assert len({tuple(o) for o in uninterrupted}) == 4  # each epoch its own order
    for epoch in range(4):
        fresh = epoch_aware(RepeatSampler(data, mini_repeat_count=2, batch_size=4, repeat_count=1, seed=7))
        assert isinstance(fresh, EpochRepeatSampler)
        fresh.set_epoch(epoch)
        assert list(fresh) == uninterrupted[epoch], epoch
    # set before every epoch, as transformers does, it draws the uninterrupted sequence
    again = epoch_aware(RepeatSampler(data, mini_repeat_count=2, batch_size=4, repeat_count=1, seed=7))
    assert [again.set_epoch(e) or list(again) for e in range(4)] == uninterrupted


def test_an_iteration_no_set_epoch_reached_takes_its_epoch_from_epoch_of_and_set_epoch_comes_first():
    """A multi-process run resumed mid-epoch wraps the sampler deeper than accelerate forwards set_epoch."""
    data = list(range(10))
    uninterrupted = _orders(RepeatSampler(data, mini_repeat_count=1, batch_size=2, seed=3), 3)
    fresh = epoch_aware(RepeatSampler(data, mini_repeat_count=1, batch_size=2, seed=3), epoch_of=lambda: 2)
    assert list(fresh) == uninterrupted[2]
    fresh.set_epoch(1)
    assert list(fresh) == uninterrupted[1]  # set_epoch named this iteration's epoch
    assert list(fresh) == uninterrupted[2]  # and only this one's


def test_an_unseeded_shuffling_sampler_is_left_as_it_is():
    s = RepeatSampler(list(range(4)), mini_repeat_count=1, seed=None)
    assert type(epoch_aware(s)) is RepeatSampler


FLAGS = ["-m", "tandem_rlvr.cli", "train", "--preset", "tiny", "--senior-device", "cpu", "--limit", "40",
         "--val-size", "8", "--max-steps", "8", "--eval-every", "0", "--save-every", "6"]


def _losses(run) -> dict[int, float]:
    rows = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


@pytest.mark.slow
def test_a_run_resumed_in_its_second_epoch_gives_the_uninterrupted_runs_updates(tmp_path):
    env = {"TANDEM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    subprocess.run([sys.executable, *FLAGS, "--output-dir", str(whole)], check=True, capture_output=True,
                   env={**os.environ, **env})
    state = json.loads((whole / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and state["epoch"] > 1  # checkpoint-6 lies in the second epoch
    resumed.mkdir()
    shutil.copytree(whole / "checkpoint-6", resumed / "checkpoint-6")
    for name in ("config.json", "log.jsonl"):  # what the run held at checkpoint-6 (the log is cut back on resume)
        shutil.copy(whole / name, resumed / name)
    out = subprocess.run([sys.executable, *FLAGS, "--output-dir", str(resumed)], check=True, capture_output=True,
                         text=True, env={**os.environ, **env}).stdout
    assert "resuming from checkpoint-6" in out
    one, two = _losses(whole), _losses(resumed)
    assert sorted(two) == list(range(1, 9))
    for step in (7, 8):
        assert two[step] == pytest.approx(one[step], rel=1e-5, abs=1e-7), step
