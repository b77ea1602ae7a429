"""TandemGRPOTrainer reporting to trackio, TRL's recommended tracker, offline (slow: a training run in a
subprocess, since trackio reads $TRACKIO_DIR once at import): trackio holds the validation figures of
log.jsonl at their updates and an HTML table per rollout batch that colours the senior's and the junior's
words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENTRY = Path(__file__).resolve().parent / "api_trackio_entry.py"


@pytest.mark.slow
def test_trackio_holds_the_validation_figures_and_the_authored_completions(tmp_path):
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "PYTHONWARNINGS": "ignore"}
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, str(ENTRY), "train", str(run)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    read = subprocess.run([sys.executable, str(ENTRY), "read"], env=env, capture_output=True, text=True, timeout=300)
    got = json.loads(read.stdout.strip().splitlines()[-1])
    log = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    assert got["val"] == [[r["step"], r["val/accuracy"]] for r in log if "val/accuracy" in r]  # steps 0, 1, 2
    assert len(got["html"]) == 2  # one table per rollout batch
    from tandem_rlvr.rl.completions import JUNIOR_COLOUR, SENIOR_COLOUR

    for table in got["html"]:
        assert table.count("<tr><td>") == 2  # num_completions_to_print rows
        assert SENIOR_COLOUR in table and JUNIOR_COLOUR in table
