"""Errors before work (issue 32, item 3): every command family checks its output path before it
loads a model, opens an engine or builds a world. With an empty cache ($TANDEM_CACHE) and a bad
``--out`` (an existing file), each command fails with one line naming the flag, exit 2, and the
cache stays empty: no built-in model was resolved (resolving one starts a world build)."""

from __future__ import annotations

import pytest

import tandem_rlvr.models as models
from tandem_rlvr.cli import main

COMMANDS = {
    "eval solo": ["eval", "solo", "--senior", "tiny", "--out", "{file}"],
    "eval handoff": ["eval", "handoff", "--senior", "tiny", "--junior", "tiny-junior", "--out", "{file}"],
    "eval legibility": ["eval", "legibility", "--samples", "{run}", "--junior", "tiny-junior", "--out", "{file}"],
    "eval drift": ["eval", "drift", "--junior-samples", "{run}", "--seniors", "a={run}", "--out", "{file}"],
    "eval replay": ["eval", "replay", "{run}", "--tokenizer", "tiny", "--out", "{file}"],
    "compare": ["compare", "{run}", "--out", "{file}"],
    "report": ["report", "{run}", "--out", "{file}"],
    "train": ["train", "--preset", "tiny", "--output-dir", "{file}"],
    "grade": ["grade", "--benchmark", "tiny", "--responses", "{run}/r.jsonl", "--out", "{file}"],
    "probe": ["probe", "forced-junior", "--samples", "{run}", "--junior", "tiny-junior", "--out", "{file}"],
    "demo": ["demo", "--quick", "--out", "{file}"],
    "study drift": ["study", "drift", "--quick", "--out", "{file}"],
    "study elegance": ["study", "elegance", "--problems", "sample", "--judge", "tiny", "--out", "{file}"],
}


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("TANDEM_CACHE", str(cache))

    def refuse(name):
        def resolve():
            raise AssertionError(f"built-in model {name} resolved (a world build) before the --out check")
        return resolve

    for name in list(models.NAMED_MODELS):
        monkeypatch.setitem(models.NAMED_MODELS, name, refuse(name))
    return cache


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_bad_out_fails_before_any_model_or_world(capsys, tmp_path, empty_cache, name):
    file, run = tmp_path / "a_file", tmp_path / "run"
    file.write_text("not a directory")
    run.mkdir()
    (run / "r.jsonl").write_text('{"problem_id": "0", "response": "1"}\n')
    argv = [a.format(file=file, run=run) for a in COMMANDS[name]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{file}: exists and is not a directory" in err, err
    assert list(empty_cache.iterdir()) == []


def test_a_refusal_that_reads_built_in_tokenizers_imports_no_model_code(tmp_path):
    """``--protocol stream`` with a junior of another vocabulary is refused from the two tokenizers
    alone: finding a built-in model's folder must not import the world build and the model classes
    (seconds of CPU before a one-line error)."""
    import subprocess
    import sys

    code = ("import sys; from tandem_rlvr.cli import main; rc = main(['eval', 'handoff', '--senior', 'tiny', "
            "'--junior', 'tiny-xjunior', '--benchmarks', 'tiny', '--split', 'test', '--limit', '2', '--protocol', "
            f"'stream', '--out', {str(tmp_path / 'x')!r}]); "
            "print(rc, 'tandem_rlvr.world.build' in sys.modules, "
            "'transformers.models.qwen3.modeling_qwen3' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.stdout.split() == ["2", "False", "False"], res.stderr[-2000:]
    assert "another vocabulary" in res.stderr and not (tmp_path / "x").exists()
