"""rl/sharding.py ``from_launcher``: the launch's environment against the run's own settings. A sharding the
environment asks for (accelerate's ``ACCELERATE_USE_FSDP``/``ACCELERATE_USE_DEEPSPEED``, often a leftover in
the shell) that differs from the one the settings name is refused in one line, never silently taken; so is
``shard_offload`` with the senior on the CPU (torch's raw "Cannot access accelerator device" in every rank)."""

from __future__ import annotations

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.sharding import from_launcher


@pytest.fixture(autouse=True)
def clean_launch(monkeypatch):
    for var in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED", "FSDP_VERSION", "ACCELERATE_DEEPSPEED_ZERO_STAGE",
                "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("env, asked", [({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}, "zero3"),
                                        ({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"},
                                         "fsdp2")])
def test_a_launch_asking_for_another_sharding_than_the_settings_is_refused(monkeypatch, env, asked):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    var = next(iter(env))
    with pytest.raises(TandemError, match=f"^{var}=true in the environment .* --sharding {asked}; unset {var}"):
        from_launcher(load_train_config(overrides={"sharding": asked, "senior_device": "cuda:0"}))


def test_a_launch_fills_in_the_sharding_the_settings_leave_unset(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert from_launcher(load_train_config(overrides={})).models.sharding == "fsdp2"
    assert from_launcher(load_train_config(overrides={"sharding": "fsdp2"})).models.sharding == "fsdp2"


@pytest.mark.parametrize("sharding", ["fsdp2", "zero3"])
def test_shard_offload_with_the_senior_on_the_cpu_is_refused_with_the_reason(tmp_path, capsys, sharding):
    argv = ["train", "--preset", "tiny", "--sharding", sharding, "--shard-offload", "true", "--senior-device", "cpu",
            "--output-dir", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tandem: error: shard_offload") and "on the CPU" in err and "\n" not in err, err
    assert not (tmp_path / "run").exists()
