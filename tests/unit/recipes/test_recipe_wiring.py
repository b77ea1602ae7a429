"""The call paths of `tandem study drift` and `tandem demo` in the default suite (issue 26, item 1).

The quick study and demo themselves take minutes (slow tests), so a renamed or removed keyword
of a pipeline step went unseen by the default run (the study crashed after seed 0 that way).
Here every heavy step (loading the world, training, evaluation, battery, aggregation, plots, report)
is replaced by ``create_autospec`` of the real function: each recipe runs its whole loop in
about a second, and every call is bound to the real signature, so an argument the step no
longer takes fails the test as it would fail a user.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from tandem_rlvr.cli import build_parser
from tandem_rlvr.cli.recipes import study_settings
from tandem_rlvr.eval.report import html as report
from tandem_rlvr.recipes import demo, pipeline, study, study_stats


def _patch(monkeypatch, module, name, real, **kw):
    fake = mock.create_autospec(real, **kw)
    monkeypatch.setattr(module, name, fake)
    return fake


def test_study_loop_calls_every_step_with_its_real_signature(tmp_path, monkeypatch):
    world = mock.Mock(root=tmp_path / "w", base=tmp_path / "w" / "senior", junior=tmp_path / "w" / "junior")
    _patch(monkeypatch, study, "world_paths", pipeline.world_paths, return_value=world)
    train = _patch(monkeypatch, study, "train_method", pipeline.train_method, return_value={})
    evaluate = _patch(monkeypatch, study, "evaluate_senior", pipeline.evaluate_senior, return_value={})
    battery = _patch(monkeypatch, study, "battery", pipeline.battery, return_value=None)
    _patch(monkeypatch, study, "aggregate", study_stats.aggregate, return_value={"table": {}})
    _patch(monkeypatch, study, "to_markdown", study_stats.to_markdown, return_value="study table\n")

    import os

    import torch

    monkeypatch.delenv("TANDEM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle 8-core machine: the load-based pick
    monkeypatch.setattr(os, "cpu_count", lambda: 8)                 # would take 8 threads
    saved = torch.get_num_threads()
    a = build_parser().parse_args(["study", "drift", "--seeds", "0,1", "--out", str(tmp_path / "s"), "--quick"])
    try:
        study.run_study(a.out, study_settings(a), print_fn=lambda *x: None)
        # the study's figures must not follow the load: the demo's fixed count (CUDA runs keep torch's own)
        assert torch.get_num_threads() == 1 or torch.cuda.is_available()
    finally:
        torch.set_num_threads(saved)

    # 2 seeds x 5 variants (grpo + tandem/klreg per junior) trained; the base, the weak junior and
    # each of the 10 seniors evaluated; per seed one battery per junior (self, weak).
    assert train.call_count == 10 and evaluate.call_count == 12 and battery.call_count == 4
    handoffs = {tuple(c.args[1]) for c in battery.call_args_list}
    assert handoffs == {("handoff-self", "handoff-weak")}
    assert Path(tmp_path / "s" / "study.md").read_text() == "study table\n"


@pytest.mark.parametrize("world", ["tiny-drift", "tiny", "code"])
def test_demo_loop_calls_every_step_with_its_real_signature(tmp_path, monkeypatch, world):
    cfg = {"slip_prob": 0.3, "shorthand_slip_prob": 0.1}
    built = mock.Mock(root=tmp_path / "w", base=tmp_path / "w" / "senior", junior=tmp_path / "w" / "junior",
                      meta={"config": cfg, "accuracy": {}})
    _patch(monkeypatch, demo, "world_paths", pipeline.world_paths, return_value=built)
    from tandem_rlvr.rl import train as rl_train

    configs = _patch(monkeypatch, demo, "method_config", pipeline.method_config, return_value=mock.sentinel.cfg)
    train = _patch(monkeypatch, rl_train, "train", rl_train.train,
                   return_value={"steps": 2, "best": {"step": 0, "accuracy": 0.1}})  # as rl.train.train returns
    pass1 = {"pass@1": {"mean": 0.5, "se": 0.1}}
    metrics = {"solo": {"macro": pass1}, "handoff": {"macro": pass1, "senior_share": {"mean": 0.5, "sd": 0.1}}}
    evaluate = _patch(monkeypatch, demo, "evaluate_senior", pipeline.evaluate_senior, return_value=metrics)
    _patch(monkeypatch, demo, "_style", demo._style, return_value={"shorthand_share": 0.5})
    _patch(monkeypatch, demo, "plot_curves", demo.plot_curves, return_value=tmp_path / "curves.png")
    battery = _patch(monkeypatch, demo, "battery", pipeline.battery, return_value=None)
    _patch(monkeypatch, report, "run_report", report.run_report, return_value=tmp_path / "report.html")
    probe = _patch(monkeypatch, demo, "_probe", demo._probe,
                   return_value={"probed": 3, "success_rate": 0.5, "ci95": [0.2, 0.8], "no_divergence": 1})
    terms = _patch(monkeypatch, demo, "reward_terms_table", demo.reward_terms_table,
                   return_value={"tandem": {"steps": 2, "first/reward/correct": 0.5, "last/reward/correct": 0.6}})

    demo.run_demo(tmp_path / "d", quick=True, print_fn=lambda *x: None, world=world)

    drift, code = world == "tiny-drift", world == "code"
    # three methods trained; base, three seniors (and in the drift and code worlds the junior) evaluated; one battery
    assert configs.call_count == 3 and all(c.args[0] is mock.sentinel.cfg for c in train.call_args_list)
    assert train.call_count == 3 and evaluate.call_count == 4 + (drift or code) and battery.call_count == 1
    # the code world: each senior probed (base and three), the reward terms tabled, both in summary.md
    assert probe.call_count == 4 * code and terms.call_count == code
    if code:
        md = (tmp_path / "d" / "summary.md").read_text()
        assert "0.500 [0.200, 0.800]; 3 of 4" in md and "| tandem | 0.500 / 0.600 |" in md
        assert {c.args[0] for c in configs.call_args_list} == {"tiny-code"}  # the code preset
    assert (tmp_path / "d" / "summary.md").is_file() and (tmp_path / "d" / "summary.json").is_file()


def test_a_demo_directory_holding_another_run_is_refused_before_any_work(tmp_path, monkeypatch):
    """Every method's run is checked before the first trains: a clash in the last method's run
    (klreg) ends the demo before it prints a step or trains grpo."""
    import json

    from tandem_rlvr.errors import TandemError

    (tmp_path / "d" / "runs" / "klreg").mkdir(parents=True)
    (tmp_path / "d" / "runs" / "klreg" / "config.json").write_text(json.dumps({"method": "klreg", "lr": 1.0}))
    printed = []
    with pytest.raises(TandemError, match="runs/klreg/config.json: existing run has a different"):
        demo.run_demo(tmp_path / "d", quick=True, print_fn=printed.append, world="tiny")
    assert printed == [] and not (tmp_path / "d" / "runs" / "grpo").exists()
