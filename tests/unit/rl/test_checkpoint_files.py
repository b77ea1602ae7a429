"""The checkpoint a resume loads is checked before any model loads (rl/checkpoint_files.py, called by
rl.run_start.RunStart.take): each kind of damaged file is one line naming it; an intact checkpoint passes."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from tandem_rlvr.errors import TandemError
from tandem_rlvr.outdir import RunLock
from tandem_rlvr.rl.checkpoint_files import check, latest
from tandem_rlvr.rl.run_start import RunStart

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _checkpoint(root, step: int = 4):
    """A checkpoint folder as a 1-process run writes one, plus a torch.distributed.checkpoint folder."""
    import torch.distributed.checkpoint as dcp

    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    save_file({"w": torch.arange(4096, dtype=torch.float32)}, str(ckpt / "model.safetensors"))
    torch.save({"state": {0: {"exp_avg": torch.ones(1000)}}}, ckpt / "optimizer.pt")
    torch.save({"python": 1}, ckpt / "rng_state.pth")
    dcp.save({"model": {"w": torch.ones(2048)}}, storage_writer=dcp.FileSystemWriter(str(ckpt / "optimizer_0")),
             no_dist=True)
    return ckpt


def _cut(path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def test_an_intact_checkpoint_passes_and_latest_is_the_newest_with_a_trainer_state(tmp_path):
    a, b = _checkpoint(tmp_path, 4), _checkpoint(tmp_path, 12)
    (tmp_path / "checkpoint-16").mkdir()  # a save cut off before trainer_state.json: not a checkpoint
    assert latest(tmp_path) == b
    check(a)
    check(b)


@pytest.mark.parametrize("name,spoil,says", [
    ("trainer_state.json", lambda p: _cut(p, 10), "not JSON"),
    ("trainer_state.json", lambda p: p.write_text(json.dumps({"global_step": 3})), "says global_step 3, not 4"),
    ("model.safetensors", lambda p: _cut(p, 6), "not a readable safetensors file"),
    ("model.safetensors", lambda p: _cut(p, p.stat().st_size - 100), "not a readable safetensors file"),
    ("optimizer.pt", lambda p: _cut(p, p.stat().st_size - 30), "not a complete torch.save file"),
    ("rng_state.pth", lambda p: p.write_bytes(b""), "not a complete torch.save file"),
    ("optimizer_0/__0_0.distcp", lambda p: _cut(p, 100), "but its .metadata places data up to byte"),
    ("optimizer_0/__0_0.distcp", lambda p: p.unlink(), "missing (named by the folder's .metadata)"),
    ("optimizer_0/.metadata", lambda p: _cut(p, 20), "unreadable distributed-checkpoint metadata"),
])
def test_a_damaged_file_is_one_line_naming_it(tmp_path, name, spoil, says):
    ckpt = _checkpoint(tmp_path)
    spoil(ckpt / name)
    with pytest.raises(TandemError) as e:
        check(ckpt)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{ckpt / name}: ") and says in line, line
    assert f"delete {ckpt} to resume from the checkpoint before it" in line


def test_a_start_that_would_resume_a_damaged_checkpoint_is_refused_and_leaves_the_directory_unlocked(tmp_path):
    run = tmp_path / "run"
    ckpt = _checkpoint(run)
    (run / "config.json").write_text("{}")
    _cut(ckpt / "optimizer.pt", 50)
    with pytest.raises(TandemError, match="optimizer.pt: not a complete torch.save file"):
        RunStart.take(str(run), main=True)
    RunLock(run).release()  # not held: a corrected start takes it
