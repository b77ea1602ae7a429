"""Flag help texts list a registry's names from the registry itself, so a name registered by a plug-in
appears in ``--help`` beside the built-in ones (``--task``, ``--reward-terms``, ``--engine``)."""

from dataclasses import replace

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.engines.base import ENGINES
from tandem_rlvr.rewards.terms import TERMS
from tandem_rlvr.tasks import TASKS


def _help(capsys, *argv) -> str:
    assert main([*argv, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at hyphens; one long line keeps names whole
    monkeypatch.setitem(TASKS, "zz-task", replace(TASKS["gsm8k"], name="zz-task"))
    monkeypatch.setitem(TERMS, "zz-term", replace(TERMS["format"], coef=0.7, about="a dummy term"))
    monkeypatch.setitem(ENGINES, "zz-engine", replace(ENGINES["hf"], name="zz-engine", about="a dummy engine"))


@pytest.mark.parametrize("argv", [("eval", "solo"), ("eval", "handoff"), ("grade",), ("train",)])
def test_task_help_lists_every_registered_task(capsys, registered, argv):
    text = _help(capsys, *argv)
    assert "math, gsm8k, answer-tag, code, zz-task" in text


def test_reward_terms_help_lists_every_registered_term_with_its_coefficient(capsys, registered):
    text = _help(capsys, "train")
    assert "correct (the task's correctness, coef 1)" in text and "zz-term (a dummy term, coef 0.7)" in text


@pytest.mark.parametrize("argv", [("train",), ("eval", "solo"), ("bench", "train")])
def test_engine_help_lists_every_registered_engine(capsys, registered, argv):
    text = _help(capsys, *argv)
    assert "hf: our transformers decoder (the reference)" in text and "zz-engine: a dummy engine" in text
