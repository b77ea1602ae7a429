"""TandemGRPOTrainer under an accelerate FSDP2 launch shards the senior as ``tandem train --sharding fsdp2``
does (slow: two CPU processes). On a CPU machine ``accelerate launch`` starts one process (its multi-CPU launch
goes through MPI), so the two processes come from torchrun with the variables the launch exports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENTRY = Path(__file__).resolve().parent / "api_sharded_entry.py"


@pytest.mark.slow
def test_a_tandem_grpo_trainer_script_under_an_fsdp2_launch_holds_half_of_every_parameter_per_process(tmp_path):
    env = {**os.environ, "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           "29517", str(ENTRY), str(tmp_path), str(tmp_path / "run")], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["processes"] for r in ranks] == [2, 2] and {r["sharding"] for r in ranks} == {"fsdp2"}
    for name in ranks[0]["fractions"]:
        assert [r["fractions"][name] for r in ranks] == [0.5, 0.5], name
    assert json.loads((tmp_path / "run" / "config.json").read_text())["sharding"] == "fsdp2"
