"""The elegance study (recipes/elegance.py): the labelled-paths file, the judge's calibration on it,
the pooled training-rollout and solo shares (hand-worked), and the whole study end to end on CPU
(random models, a fake judge server), resumable."""

from __future__ import annotations

import json
import math

import pytest

from conftest import make_model
from helpers.judge import FakeJudgeServer
from tandem_rlvr.errors import TandemError
from tandem_rlvr.recipes.elegance import (EleganceSettings, calibrate, load_paths, run_elegance, solo_elegance,
                                          training_elegance)
from tandem_rlvr.rewards.judge import Judge, JudgeSettings

pytest.importorskip("openai")

# Elegant paths carry the word INSIGHT, except p2's (the judge will call it bashy: one disagreement).
PROBLEMS = [
    {"problem_id": "p1", "problem": "Mia has 1 shells. She finds 5 more.", "answer": "6",
     "paths": [{"label": "elegant", "solution": "INSIGHT: 1 + 5 = 6"},
               {"label": "bashy", "solution": "count 2, 3, 4, 5, 6"}]},
    {"problem_id": "p2", "problem": "Mia has 2 shells. She finds 5 more.", "answer": "7",
     "paths": [{"label": "elegant", "solution": "2 + 5 = 7"}, {"label": "bashy", "solution": "count 3, 4, 5, 6, 7"}]},
    {"problem_id": "p3", "problem": "Mia has 3 shells. She finds 5 more.", "answer": "8",
     "paths": [{"label": "elegant", "solution": "INSIGHT: 3 + 5 = 8"}, {"label": "bashy", "solution": "count to 8"}]},
    {"problem_id": "p4", "problem": "Mia has 4 shells. She finds 5 more.", "answer": "9",
     "paths": [{"label": "bashy", "solution": "count to 9"}]},
]


def _verdict(prompt: str) -> str:
    return "ELEGANT" if "INSIGHT" in prompt else "BASHY"


@pytest.fixture
def server():
    s = FakeJudgeServer(verdict=_verdict)
    yield s
    s.close()


@pytest.fixture
def problems(tmp_path):
    f = tmp_path / "paths.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in PROBLEMS))
    return f


def test_the_shipped_sample_loads_and_bad_files_are_one_line_errors(tmp_path):
    rows = load_paths("sample")
    assert len(rows) == 4 and all({x["label"] for x in r["paths"]} == {"elegant", "bashy"} for r in rows)
    bad = tmp_path / "bad.jsonl"
    for line, message in (("{", "malformed JSON line"), ('{"problem_id": "a", "problem": "q"}', "answer"),
                          ('{"problem_id": "a", "problem": "q", "answer": "1", "paths": [{"label": "nice"}]}',
                           "paths")):
        bad.write_text(line + "\n")
        with pytest.raises(TandemError, match=f"bad.jsonl:1: .*{message}"):
            load_paths(str(bad))


def test_calibration_is_the_judges_agreement_with_the_labels(server, tmp_path):
    judge = Judge(JudgeSettings(server.url, retries=0), cache=tmp_path / "c.sqlite")
    cal = calibrate(judge, PROBLEMS)
    judge.close()
    # by hand: 7 paths; the judge gets every bashy path (4/4) and 2 of the 3 elegant ones (p2's lacks the word)
    assert cal == {"paths": 7, "failures": 0, "agreement": 6 / 7, "agreement_elegant": 2 / 3, "agreement_bashy": 1.0}


def test_training_shares_pool_the_logged_steps(tmp_path):
    steps = [{"step": 1, "rewards/correct/mean": 0.5, "rewards/judge/mean": 0.25, "judge/asked": 4.0,
              "judge/failures": 0.0, "judge/mean_verdict": 0.5},
             {"step": 2, "rewards/correct/mean": 0.25, "rewards/judge/mean": 0.0, "judge/asked": 2.0,
              "judge/failures": 1.0, "judge/mean_verdict": 0.0},
             {"step": 2, "val/accuracy": 0.1}]  # a validation record: not a training step
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    t = training_elegance(tmp_path)
    # accuracy (0.5 + 0.25) / 2; elegant & correct (0.25 + 0) / 2; of correct read: (0.5 x 4 + 0 x 1) / (4 + 1)
    assert t == {"steps": 2, "accuracy": 0.375, "elegant_correct_share": 0.125, "elegant_share_of_correct": 0.4,
                 "judged": 5, "judge_failures": 1}


def test_solo_shares_judge_only_the_correct_samples(server, tmp_path):
    judge = Judge(JudgeSettings(server.url, retries=0))
    samples = [{"problem_id": "p1", "response": "INSIGHT \\boxed{6}", "correct": True},
               {"problem_id": "p1", "response": "count \\boxed{6}", "correct": True},
               {"problem_id": "p1", "response": "INSIGHT \\boxed{5}", "correct": False},
               {"problem_id": "p3", "response": "INSIGHT \\boxed{8}", "correct": True}]
    e = solo_elegance(judge, samples, {"p1": ("q1", "6"), "p3": ("q3", "8")})
    judge.close()
    assert len(server.requests) == 3  # the incorrect sample is never sent
    assert e == {"samples": 4, "accuracy": 0.75, "elegant_correct_share": 0.5, "elegant_share_of_correct": 2 / 3,
                 "judged": 3, "judge_failures": 0}


@pytest.mark.slow
def test_study_runs_end_to_end_and_a_rerun_is_a_no_op(server, problems, tmp_path, tok):
    senior = tmp_path / "senior"
    make_model(len(tok), 0, hidden=32, layers=1).save_pretrained(senior)
    tok.save_pretrained(senior)
    train = dict(val_dataset="none", val_size=1, template="plain", group_size=2, prompts_per_step=2,
                 prompts_per_minibatch=2, max_prompt_tokens=64, max_new_tokens=8, max_steps=2, eval_every=0,
                 save_every=1, kl_every=0, temperature=1.0)
    s = EleganceSettings(problems=str(problems), judge=server.url, senior=str(senior), train=train, test_size=1, n=2,
                         max_tokens=8, template="plain")
    out = tmp_path / "study"
    r = run_elegance(out, s, print_fn=lambda *_: None)
    assert r["calibration"]["agreement"] == 6 / 7
    assert {m: t["steps"] for m, t in r["training"].items()} == {"grpo": 2, "tandem": 2}
    assert set(r["solo"]) == {"base", "grpo", "tandem"} and all(e["samples"] == 2 for e in r["solo"].values())
    cfg = json.loads((out / "runs" / "tandem" / "config.json").read_text())
    assert cfg["reward_terms"] == ["correct:1", "judge:0.5"] and cfg["judge"] == server.url
    assert "## Training rollouts" in (out / "elegance.md").read_text()

    asked = len(server.requests)
    again = run_elegance(out, s, print_fn=lambda *_: None)
    assert again == r and len(server.requests) == asked  # nothing retrained, re-evaluated or re-judged
    with pytest.raises(TandemError, match="other settings"):
        run_elegance(out, EleganceSettings(**{**s.__dict__, "coef": 1.0}), print_fn=lambda *_: None)


@pytest.mark.parametrize("bad", [dict(judge_template="no_such_template.txt"), dict(preset="no-such-preset"),
                                 dict(coef=math.nan), dict(train={"lr": math.inf})])
def test_a_bad_setting_is_refused_before_the_study_writes_anything(server, problems, tmp_path, bad):
    out = tmp_path / "study"
    with pytest.raises(TandemError):
        run_elegance(out, EleganceSettings(problems=str(problems), judge=server.url, **bad), print_fn=lambda *_: None)
    assert not out.exists()


def test_a_start_that_fails_before_the_calibration_leaves_nothing_behind(server, problems, tmp_path, monkeypatch):
    import tandem_rlvr.recipes.elegance as elegance

    def judge_down(*a, **k):
        raise TandemError("the judge server is down")

    monkeypatch.setattr(elegance, "calibrate", judge_down)
    out = tmp_path / "study"
    with pytest.raises(TandemError, match="down"):
        run_elegance(out, EleganceSettings(problems=str(problems), judge=server.url), print_fn=lambda *_: None)
    assert not out.exists()  # so the corrected command (another judge, another coef) is a fresh study
