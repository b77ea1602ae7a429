"""A new schedule, task, reward term, engine and benchmark, each one module plus one registry line
(``docs/contributing.md``), run end to end: train two steps on the shipped tiny world, evaluate
solo and handoff, compare.

The plug-ins live in ``contrib_plugin.py``; the ``plugins`` fixture holds the five registry lines
and nothing else is told of them. Before, a new term raised ``KeyError`` in the model card at the
first checkpoint, and a task without the undocumented ``has_answer`` failed with the ``format``
term; here the first must work and the second is refused, in one line, when the task is registered.
"""

from __future__ import annotations

import json

import pytest

import contrib_plugin as plug
from tandem_rlvr import tasks
from tandem_rlvr.cli import main
from tandem_rlvr.data import benchmarks
from tandem_rlvr.errors import TandemError

SCHEDULE, TASK, TERM, ENGINE, BENCH = "junior-first-2", "digit-match", "even-length", "counting-hf", "tiny-slice"


@pytest.fixture
def plugins(monkeypatch):
    """The five registry lines (undone after the test: each table is restored)."""
    from tandem_rlvr.decoding.schedule import REGISTRY, ScheduleKind
    from tandem_rlvr.engines.base import ENGINES, EngineKind
    from tandem_rlvr.rewards.terms import TERMS, TermKind

    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    monkeypatch.setattr(benchmarks, "_REGISTRY", dict(benchmarks._REGISTRY))
    plug.OPENED.clear()
    plug.REWARDED.clear()

    monkeypatch.setitem(REGISTRY, SCHEDULE, ScheduleKind(SCHEDULE, build=lambda tok, p, K, V: plug.JuniorFirstTwo()))
    tasks.register_task(plug.DigitTask())
    monkeypatch.setitem(TERMS, TERM, TermKind(0.5, lambda ctx: plug.even_length, lambda cfg: "even-length bonus"))
    monkeypatch.setitem(ENGINES, ENGINE, EngineKind(ENGINE, "contrib_plugin:open_counting", transformers=True,
                                                    text_turns=True, rollout_device=True))
    benchmarks.register_benchmark(BENCH, plug.tiny_slice)


def test_a_task_without_has_answer_is_refused_at_registration_in_one_line(plugins):
    with pytest.raises(TandemError) as e:
        tasks.register_task(plug.NoAnswerFormTask())
    assert "no-answer-form" in str(e.value) and "has_answer" in str(e.value) and "\n" not in str(e.value)
    assert "no-answer-form" not in tasks.TASKS
    from tandem_rlvr.rewards.terms import build_terms, parse_terms

    with pytest.raises(TandemError, match="lacks has_answer"):  # put into TASKS past the check: still one line
        build_terms(parse_terms("format"), plug.NoAnswerFormTask(), ceiling=10)


def _rows(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _eval(mode: str, senior: str, out, *extra: str) -> list[dict]:
    argv = ["eval", mode, "--senior", senior, "--benchmarks", BENCH, "--limit", "3", "--n", "2", "--max-tokens", "64",
            "--task", TASK, "--engine", ENGINE, "--template", "plain", "--out", str(out), *extra]
    assert main(argv) == 0
    return _rows(out / "samples.jsonl")


def test_a_dummy_of_each_kind_trains_two_steps_evaluates_and_compares(plugins, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--method", "tandem", "--schedule", SCHEDULE, "--task", TASK,
                 "--reward-terms", f"correct,{TERM},format", "--engine", ENGINE, "--dataset", BENCH,
                 "--val-dataset", BENCH, "--val-size", "4", "--limit", "8", "--group-size", "2",
                 "--prompts-per-step", "2", "--prompts-per-minibatch", "2", "--max-new-tokens", "64", "--max-steps",
                 "2",
                 "--eval-every", "0", "--save-every", "1", "--output-dir", str(run)]) == 0

    # the term: TRL logged its per-step mean, which is the parity of the token counts it was handed
    steps = [r for r in _rows(run / "log.jsonl") if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2] and len(plug.REWARDED) == 2
    for row, counts in zip(steps, plug.REWARDED, strict=True):
        assert len(counts) == 4  # 2 prompts x 2 rollouts
        assert row[f"reward/{TERM}"] == pytest.approx(sum(c % 2 == 0 for c in counts) / 4)
        assert 0 <= row["reward/format"] <= 1 and 0 <= row["reward/correct"] <= 1
    card = (run / "README.md").read_text()  # written at the first checkpoint (the old KeyError)
    assert "0.5 x even-length bonus" in card and "`junior-first-2`" in card
    saved = json.loads((run / "config.json").read_text())
    assert saved["schedule"] == SCHEDULE and saved["engine"] == ENGINE and saved["verifier"] == "digit-match@1"
    assert plug.OPENED and set(plug.OPENED) == {ENGINE}

    # evaluation: the task grades (gold in the response), the schedule authors (two junior tokens first)
    golds = {p.problem_id: p.answer for p in plug.tiny_slice(None, 3)}
    ev = tmp_path / "eval"
    for name, senior in (("base", "tiny"), ("trained", str(run / "final"))):
        solo = _eval("solo", senior, ev / name / "solo")
        hand = _eval("handoff", senior, ev / name / "handoff", "--junior", "tiny", "--schedule", SCHEDULE)
        assert len(solo) == len(hand) == 6 and {r["benchmark"] for r in solo + hand} == {BENCH}
        for r in solo + hand:
            assert r["correct"] == (golds[r["problem_id"]] in r["response"])
        for r in solo:
            assert r["senior_share"] == 1.0
        for r in hand:
            assert r["senior_mask"][:2] == [0, 0] and set(r["senior_mask"][2:]) <= {1}
            assert r["senior_share"] == pytest.approx(max(r["tokens"] - 2, 0) / r["tokens"])
        assert main(["eval", "replay", str(ev / name / "handoff")]) == 0  # the registry's schedule re-derives them

    out = tmp_path / "compare"
    assert main(["compare", "--solo", f"base={ev / 'base' / 'solo'}", "--solo", f"trained={ev / 'trained' / 'solo'}",
                 "--handoff", f"base={ev / 'base' / 'handoff'}", "--handoff", f"trained={ev / 'trained' / 'handoff'}",
                 "--n-boot", "200", "--out", str(out)]) == 0
    compared = json.loads((out / "compare.json").read_text())
    for name in ("base", "trained"):
        solo = [r for r in _rows(ev / name / "solo" / "samples.jsonl")]
        assert compared["solo"][name][BENCH]["problems"] == 3
        assert compared["solo"][name][BENCH]["pass@1"]["mean"] == pytest.approx(sum(r["correct"] for r in solo) / 6)
    assert {t["candidate"] for t in compared["ttests"]} == {"trained"}
