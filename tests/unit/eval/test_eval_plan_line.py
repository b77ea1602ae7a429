"""``tandem eval handoff`` says what it loads and what it costs at most (problems x samples x max new
tokens, the schedule and protocol) on stdout before any model loads (eval/sample/sampler.py, ``plan_line``)."""

from __future__ import annotations

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.errors import TandemError


def _stop(*_a, **_k):
    raise TandemError("stopped where the models would load")


@pytest.mark.parametrize("protocol, words", [("text", "each turn re-encoded as text"),
                                             ("stream", "in one token stream")])
def test_eval_handoff_prints_models_and_rows_x_samples_x_tokens_before_loading(model_dir, tmp_path, capsys, monkeypatch,
                                                                             protocol, words):
    import tandem_rlvr.engines as engines
    import tandem_rlvr.eval.sample.text_handoff as text_handoff

    monkeypatch.setattr(text_handoff, "open_text_handoff", _stop)
    monkeypatch.setattr(engines, "open_decoder", _stop)
    rc = main(["eval", "handoff", "--senior", str(model_dir), "--junior", str(model_dir), "--benchmarks", "tiny",
               "--limit", "3", "--n", "2", "--max-tokens", "5", "--protocol", protocol, "--out", str(tmp_path / "ev")])
    said = capsys.readouterr()
    out = said.out.strip().splitlines()
    assert rc != 0 and said.err.strip() == "tandem: error: stopped where the models would load"  # still one line
    plan = [line for line in out if line.startswith("loading ")]
    assert len(plan) == 1, out  # said once, before the loading failed
    line = plan[0]
    assert line.startswith(f"loading senior {model_dir}, junior {model_dir} (engine hf)")
    assert "; 3 problems x 2 samples x up to 5 new tokens = 30 tokens at most" in line  # 3 x 2 x 5 by hand
    assert f"protocol {protocol}: two models decode, {words}" in line
