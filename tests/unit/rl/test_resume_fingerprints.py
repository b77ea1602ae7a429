"""A resume checks the model files (rl/run_identity.py, ``check_models``): a local senior or junior
directory whose files were replaced between runs is refused naming that model; built-in names are
recorded without hashing anything, and a run recorded without fingerprints still resumes."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.run_identity import FINGERPRINTS, check_run_dir, stored_config
from tandem_rlvr.rl.train import train

from conftest import make_model
from helpers.train import train_cfg


def _copies(train_inputs, tmp_path):
    """Copies of the shared senior and junior directories, free to be replaced."""
    _, senior, junior, _ = train_inputs
    return shutil.copytree(senior, tmp_path / "senior"), shutil.copytree(junior, tmp_path / "junior")


def _recorded(cfg) -> None:
    """config.json as a started run writes it (rl.assemble.build_run: stored_config)."""
    out = Path(cfg.loop.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(stored_config(cfg)))


def _replace(directory, vocab: int) -> None:
    make_model(vocab, 9).save_pretrained(directory)  # same path, other weights


def test_config_records_the_sha256_of_each_local_models_files(train_inputs, tmp_path):
    senior, junior = _copies(train_inputs, tmp_path)
    rec = stored_config(train_cfg(train_inputs, tmp_path, senior=str(senior), junior=str(junior)))[FINGERPRINTS]
    for role, d in (("senior", senior), ("junior", junior)):  # fingerprint.py's rule, by hand
        lines = "".join(f"{p.name}\t{p.stat().st_size}\t{hashlib.sha256(p.read_bytes()).hexdigest()}\n"
                        for p in sorted(d.iterdir()) if p.is_file() and not p.name.endswith(".md"))
        assert rec[role] == hashlib.sha256(lines.encode()).hexdigest()[:16]


def test_resume_with_a_replaced_junior_directory_is_refused_naming_the_junior(train_inputs, tmp_path, tok):
    senior, junior = _copies(train_inputs, tmp_path)
    cfg = train_cfg(train_inputs, tmp_path, senior=str(senior), junior=str(junior))
    _recorded(cfg)
    assert check_run_dir(cfg) == 0  # unchanged: resumes
    _replace(junior, len(tok))
    with pytest.raises(TandemError, match=f"the junior {junior} has changed since the run started"):
        check_run_dir(cfg)


def test_a_built_in_model_is_recorded_by_name_without_a_fingerprint(train_inputs, tmp_path):
    d = stored_config(train_cfg(train_inputs, tmp_path, senior="tiny", junior="tiny-weak"))
    assert d["senior"] == "tiny" and FINGERPRINTS not in d


def test_a_run_recorded_without_fingerprints_still_resumes(train_inputs, tmp_path, tok):
    senior, junior = _copies(train_inputs, tmp_path)
    cfg = train_cfg(train_inputs, tmp_path, senior=str(senior), junior=str(junior))
    _recorded(cfg)
    path = tmp_path / "run" / "config.json"
    old = json.loads(path.read_text())
    del old[FINGERPRINTS]
    path.write_text(json.dumps(old))
    _replace(junior, len(tok))
    assert check_run_dir(cfg) == 0


def test_resuming_a_self_paired_run_whose_senior_was_replaced_is_refused(train_inputs, tmp_path, tok):
    senior, _ = _copies(train_inputs, tmp_path)
    train(train_cfg(train_inputs, tmp_path, senior=str(senior), junior=None, save_every=1), print_fn=lambda *_: None)
    _replace(senior, len(tok))
    with pytest.raises(TandemError, match=f"the senior {senior} \\(the self-paired junior too\\) has changed"):
        train(train_cfg(train_inputs, tmp_path, senior=str(senior), junior=None, save_every=1, max_steps=2),
              print_fn=lambda *_: None)
