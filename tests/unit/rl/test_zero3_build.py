"""DeepSpeed's JIT-built communication op never leaves a process waiting on a dead one (``rl.zero3.build_ops``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (the sharded extra)")


@pytest.fixture
def fake_build(monkeypatch):
    """``build_shm_op`` replaced by a recorder of the build folder it would use and the lock files it finds."""
    import os
    from pathlib import Path

    from importlib import import_module

    ds_torch = import_module("deepspeed.comm.torch")  # (``deepspeed.comm.torch`` as an attribute is torch itself)
    seen = []
    monkeypatch.setattr(ds_torch, "build_shm_op", lambda: seen.append(
        (os.environ["TORCH_EXTENSIONS_DIR"],
         sorted(p.name for p in Path(os.environ["TORCH_EXTENSIONS_DIR"]).glob("*/lock")))))
    return seen


def test_a_dead_builders_lock_file_in_our_folder_is_removed_before_the_build(tmp_path, monkeypatch, fake_build):
    from tandem_rlvr.rl.zero3 import build_ops

    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path))
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    build_ops()
    (root, batons), = fake_build
    assert root.startswith(str(tmp_path / "torch_extensions")) and batons == []
    op = tmp_path / "torch_extensions" / root.rsplit("/", 1)[1] / "deepspeed_shm_comm"
    op.mkdir(parents=True, exist_ok=True)
    (op / "lock").write_text("")  # torch's FileBaton, as a process SIGKILLed mid-build leaves it
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    build_ops()
    assert fake_build[1] == (root, [])  # the same folder, the dead lock gone: torch's load will not wait on it


def test_a_folder_the_user_set_keeps_its_lock_files(tmp_path, monkeypatch, fake_build):
    from tandem_rlvr.rl.zero3 import build_ops

    (tmp_path / "op").mkdir()
    (tmp_path / "op" / "lock").write_text("")  # maybe another program's build in progress: not ours to remove
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build_ops()
    assert fake_build == [(str(tmp_path), ["lock"])]


def test_each_environment_builds_in_a_folder_of_its_own(tmp_path):
    """Two interpreters (prefixes) get two folders: environments with other build flags do not rebuild in turn."""
    code = ("import importlib, os, sys; importlib.import_module('deepspeed.comm.torch').build_shm_op = lambda: None\n"
            "sys.prefix = sys.argv[1]\n"
            "os.environ.pop('TORCH_EXTENSIONS_DIR', None)\n"
            "from tandem_rlvr.rl.zero3 import build_ops; build_ops(); print(os.environ['TORCH_EXTENSIONS_DIR'])")
    env = {**__import__("os").environ, "TANDEM_CACHE": str(tmp_path)}
    dirs = [subprocess.run([sys.executable, "-c", code, prefix], capture_output=True, text=True, env=env, check=True)
            .stdout.split()[-1] for prefix in ("/venv/a", "/venv/b", "/venv/a")]
    assert dirs[0] == dirs[2] != dirs[1]
