"""Evaluation settings are declared once (``config/evaluation.py``) and ``tandem eval``'s flags are made from them.

- Each ``EvalConfig`` setting has its help, choices and range on its field; ``tandem eval solo|handoff``
  has one flag per setting (the handoff-only ones only under ``handoff``) with that help, those choices
  and that default. The expected flag sets are written out here by hand.
- Every setting's type is checked where the config is built (from flags, from Python, from a recorded
  config.json): a wrong type is one ``TandemError`` line naming the setting. Before, a string given as
  ``benchmarks`` was read letter by letter and a list given as ``schedule`` raised a raw ``TypeError``.
- ``tandem eval handoff`` without ``--junior`` (issue 53): the junior of the senior's training run (its
  config.json; the run's base senior when it was self-paired), else refused in one line before any
  work; before, the trained senior was paired with itself.
"""

from __future__ import annotations

import argparse
import json

import pytest

from conftest import make_model
from tandem_rlvr.cli import main
from tandem_rlvr.cli.eval import register, run_junior
from tandem_rlvr.config import EvalConfig
from tandem_rlvr.config.evaluation import eval_fields
from tandem_rlvr.errors import TandemError

SOLO = {"senior", "device", "dtype", "seed", "batch_size", "benchmarks", "split", "limit", "template", "instruction",
        "answer_mode", "grader", "task", "n"}
HANDOFF_ONLY = {"junior", "junior_device", "schedule", "p", "K", "protocol"}
SHARED = {"temperature", "top_p", "top_k", "max_tokens", "engine", "server", "api_key", "server_timeout",
          "server_retries", "server_concurrency", "server_tokenizer", "vllm_gpu_memory_utilization",
          "vllm_kv_cache_gib",
          "vllm_max_model_len", "vllm_block_size", "vllm_tensor_parallel_size", "vllm_max_num_seqs"}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    sub = argparse.ArgumentParser().add_subparsers()
    return dict(register(sub, argparse.ArgumentParser).choices)


@pytest.mark.parametrize("mode", ["solo", "handoff"])
def test_each_setting_is_one_flag_with_the_fields_help_choices_and_default(mode):
    actions = {a.dest: a for a in _parsers()[mode]._actions if a.dest not in ("help", "out")}
    want = SOLO | (HANDOFF_ONLY if mode == "handoff" else set())
    assert set(actions) == want | SHARED
    fields = {f.name: f for _, f in eval_fields()}
    for name in want:
        f, a = fields[name], actions[name]
        assert a.help.startswith(f.metadata["help"]), name
        default = f.default_factory() if callable(f.default_factory) else f.default
        assert a.default == default, name
        if "choices" in f.metadata and "names" not in f.metadata:
            assert list(a.choices) == list(f.metadata["choices"]), name
    assert actions["schedule" if mode == "handoff" else "task"].help.count("registered:") == 1  # registry names


def test_flags_parse_to_the_settings_types():
    a = _parsers()["handoff"].parse_args(["--out", "o", "--benchmarks", "tiny,gsm8k", "--limit", "3", "--p", "0.25",
                                          "--K", "4", "--split", "test"])
    assert (a.benchmarks, a.limit, a.p, a.K, a.split) == (("tiny", "gsm8k"), 3, 0.25, 4, "test")


@pytest.mark.parametrize("key,value", [
    ("benchmarks", "tiny"), ("benchmarks", ["tiny", 3]), ("senior", ["a"]), ("junior", 5), ("split", 3),
    ("template", None), ("n", "8"), ("n", True), ("p", "0.5"), ("seed", 1.5), ("limit", 2.5), ("schedule", ["word"]),
    ("protocol", 1), ("task", ["math"]), ("mode", None), ("engine", ["hf"]), ("grader", 3), ("dtype", 16),
    ("instruction", {"paper": 1})])
def test_a_wrong_type_is_one_line_naming_the_setting(key, value):
    with pytest.raises(TandemError) as e:
        EvalConfig.from_keys(**{key: value}, **({"mode": "handoff"} if key in HANDOFF_ONLY else {}))
    msg = str(e.value)
    assert msg.startswith(f"{key} must be") or msg.startswith(f"unknown {key}"), msg
    assert "\n" not in msg


def test_a_recorded_config_with_a_wrong_type_is_refused_as_the_flag_is():
    """What ``with_keys`` (a resume's or a battery's copy) rebuilds is checked the same way."""
    cfg = EvalConfig.from_keys(benchmarks=["tiny"])
    with pytest.raises(TandemError, match="benchmarks must be a list of strings, got str 'tiny'"):
        cfg.with_keys(benchmarks="tiny")


# ------------------------------------------------------------------ tandem eval handoff without --junior
@pytest.fixture(scope="module")
def run_tree(tmp_path_factory, tok):
    """A training run's folder as ``tandem train`` leaves it: config.json naming senior and junior, the
    senior's checkpoints (final/, checkpoint-2/merged/); a base model and a junior model; a data file."""
    root = tmp_path_factory.mktemp("runs")
    for name, seed in (("base", 0), ("jun", 1), ("run/final", 2), ("run/checkpoint-2/merged", 2)):
        make_model(len(tok), seed, hidden=32, layers=1).save_pretrained(root / name)
        tok.save_pretrained(root / name)
    (root / "run" / "config.json").write_text(json.dumps(
        {"method": "tandem", "senior": str(root / "base"), "junior": str(root / "jun"),
         "output_dir": str(root / "run")}))
    (root / "data.jsonl").write_text(json.dumps({"problem": "Mia has 7 shells.", "answer": "7"}) + "\n")
    return root


def test_the_junior_of_a_checkpoint_is_its_runs_junior_and_a_self_paired_runs_is_its_base(run_tree, tmp_path):
    assert run_junior(str(run_tree / "run" / "final")) == str(run_tree / "jun")
    assert run_junior(str(run_tree / "run" / "checkpoint-2" / "merged")) == str(run_tree / "jun")
    assert run_junior(str(run_tree / "base")) is None  # a model outside a run
    assert run_junior("tiny") is None
    selfish = tmp_path / "self"
    (selfish / "best").mkdir(parents=True)
    (selfish / "config.json").write_text(json.dumps({"method": "grpo", "senior": "/m/base", "junior": None,
                                                     "output_dir": str(selfish)}))
    assert run_junior(str(selfish / "best")) == "/m/base"  # self-paired: the junior was the base senior


def test_handoff_without_junior_pairs_a_trained_senior_with_its_runs_junior(run_tree, tmp_path, capsys):
    out = tmp_path / "ev"
    argv = ["eval", "handoff", "--senior", str(run_tree / "run" / "final"), "--benchmarks",
            str(run_tree / "data.jsonl"),
            "--n", "1", "--max-tokens", "4", "--schedule", "token", "--out", str(out)]
    assert main(argv) == 0
    models = json.loads((out / "config.json").read_text())["models"]
    assert models == {"senior": str(run_tree / "run" / "final"), "junior": str(run_tree / "jun")}
    assert "junior: " + str(run_tree / "jun") in capsys.readouterr().err


def test_handoff_without_junior_outside_a_run_is_one_line_before_any_work(run_tree, tmp_path, capsys):
    out = tmp_path / "ev"
    rc = main(["eval", "handoff", "--senior", str(run_tree / "base"), "--benchmarks", str(run_tree / "data.jsonl"),
               "--n", "1", "--max-tokens", "4", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--junior is required" in err, err
    assert not out.exists()
