"""A recipe re-run (``tandem study``, ``tandem demo``) keeps a finished evaluation only after checking its
inputs, without loading a model: unchanged inputs -> the stored metrics, no sampling; a senior or junior
whose files changed, or another problem set -> refused, naming it (before: kept, silently stale)."""

from __future__ import annotations

import json
import shutil

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.recipes.pipeline import eval_settings, evaluate_senior

from helpers.evals import write_bench


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _settings(bench):
    return eval_settings(limit=4, n=1, max_tokens=4, benchmark=str(bench))


def test_finished_evaluations_are_kept_after_their_inputs_are_checked(tmp_path, chat_models, monkeypatch):
    senior, junior = _copy(chat_models["a"], tmp_path / "senior"), _copy(chat_models["b"], tmp_path / "junior")
    bench = write_bench(tmp_path / "b.jsonl")
    d = tmp_path / "eval"
    first = evaluate_senior(str(senior), d, {"": str(junior)}, _settings(bench), progress=False)
    stored = {k: json.loads((d / k / "metrics.json").read_text()) for k in ("solo", "handoff")}

    import tandem_rlvr.eval.sample.sampler as sampler
    import tandem_rlvr.eval.measure.legibility as legibility

    def boom(*a, **k):
        raise AssertionError("a finished run was sampled or scored again")

    monkeypatch.setattr(sampler, "evaluate", boom)
    monkeypatch.setattr(legibility, "run_legibility", boom)
    again = evaluate_senior(str(senior), d, {"": str(junior)}, _settings(bench), skip_done=True, progress=False)
    assert again == stored and set(first) == set(again)

    # the senior's weights change (a retrained checkpoint in the same place): refused, naming it
    from safetensors.torch import load_file, save_file

    w = load_file(senior / "model.safetensors")
    k = next(iter(w))
    w[k] = w[k] + 1.0
    save_file(w, senior / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(TandemError, match="senior model's files changed"):
        evaluate_senior(str(senior), d, {"": str(junior)}, _settings(bench), skip_done=True, progress=False)


def test_a_changed_junior_or_problem_set_is_refused(tmp_path, chat_models):
    senior, junior = _copy(chat_models["a"], tmp_path / "senior"), _copy(chat_models["b"], tmp_path / "junior")
    bench = write_bench(tmp_path / "b.jsonl")
    d = tmp_path / "eval"
    evaluate_senior(str(senior), d, {"": str(junior)}, _settings(bench), progress=False)
    write_bench(bench, answers=[0, 1, 2, 9])  # one answer edited
    with pytest.raises(TandemError, match="benchmark .* differs"):
        evaluate_senior(str(senior), d, {"": str(junior)}, _settings(bench), skip_done=True, progress=False)
    write_bench(bench)
    (junior / "config.json").write_text((junior / "config.json").read_text().replace('"rms_norm_eps": 1e-06',
                                                                                     '"rms_norm_eps": 1e-05'))
    with pytest.raises(TandemError, match="junior model's files changed"):
        evaluate_senior(str(senior), d, {"": str(junior)}, _settings(bench), skip_done=True, progress=False)
