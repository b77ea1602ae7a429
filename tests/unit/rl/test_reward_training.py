"""Reward terms in a real (tiny, CPU) training run: each term logged per step, their weighted sum
as the step's reward, the judge's cache making a resumed run pay for no verdict twice, the task
and reward recorded in config.json and the model card."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass

import pytest

from helpers.judge import FakeJudgeServer
from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.train import train
from tandem_rlvr.tasks import TASKS, Grade, get_task

pytest.importorskip("openai")


@dataclass(frozen=True)
class EvenTask:
    """The math task's data and prompt, graded 'correct' when the response has an even number of
    characters: random models then have correct and incorrect rollouts in every group."""

    name: str = "even"
    verifier: str = "even@test"

    def load(self, benchmark, limit=None, *, split=None):
        return get_task("math").load(benchmark, limit, split=split)

    def prompt(self, row):
        return row["question"]

    def grade(self, responses, rows):
        return [Grade(float(len(r) % 2 == 0), "even" if len(r) % 2 == 0 else "odd") for r in responses]


@pytest.fixture
def even_task(monkeypatch):
    monkeypatch.setitem(TASKS, "even", EvenTask())


@pytest.fixture
def server():
    # a verdict that varies with the response: elegant when the prompt's length is a multiple of 3
    s = FakeJudgeServer(verdict=lambda prompt: "ELEGANT" if len(prompt) % 3 == 0 else "BASHY")
    yield s
    s.close()


def _cfg(root, out, server, **kw):
    base = dict(senior=str(root / "senior"), junior=str(root / "junior"), dataset=str(root / "data.jsonl"),
                dataset_split=None, val_size=4, template="plain", lr=1e-2, group_size=4, prompts_per_step=2,
                prompts_per_minibatch=2, max_prompt_tokens=64, max_new_tokens=12, temperature=1.0, max_steps=1,
                eval_every=0, save_every=1, kl_every=0, output_dir=str(out), task="even",
                reward_terms="correct,length:0.2,judge:0.5", judge=server.url, judge_retries=0)
    base.update(kw)
    return load_train_config(None, None, base)


def _steps(out):
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "reward/mean" in r}


def test_each_reward_term_is_logged_per_step_and_the_reward_is_their_weighted_sum(train_root, tmp_path, server,
                                                                                  even_task):
    out = tmp_path / "run"
    train(_cfg(train_root, out, server), print_fn=lambda *_: None)
    rec = _steps(out)[1]
    correct, length, judge = (rec[f"rewards/{t}/mean"] for t in ("correct", "length", "judge"))
    # each term also under the name reward/NAME (TRL's rewards/NAME/mean kept beside it)
    assert [rec[f"reward/{t}"] for t in ("correct", "length", "judge")] == [correct, length, judge]
    # length term = -tokens / ceiling (ceiling = max_new_tokens = 12, EOS counted): the rollout's own mean length
    assert length == pytest.approx(-rec["response/mean_length"] / 12)
    assert rec["reward/mean"] == pytest.approx(correct + 0.2 * length + 0.5 * judge)
    assert rec["judge/asked"] == pytest.approx(correct * 8)  # only correct rollouts (8 per step) go to the judge
    assert rec["judge/failures"] == 0 and len(server.requests) == rec["judge/queried"]
    # the judge term (multiply mode, binary correctness) is the share of rollouts judged elegant
    elegant = sum("ELEGANT" == ("ELEGANT" if len(r["messages"][0]["content"]) % 3 == 0 else "BASHY")
                  for r in server.requests)
    assert judge * 8 == pytest.approx(elegant)

    stored = json.loads((out / "config.json").read_text())
    assert stored["task"] == "even" and stored["verifier"] == "even@test"
    assert stored["reward_terms"] == ["correct:1", "length:0.2", "judge:0.5"]
    card = (out / "README.md").read_text()
    assert "verifier `even@test`" in card and "0.2 x length penalty -tokens/12" in card and "judge bonus" in card


@pytest.mark.slow
def test_resumed_run_asks_the_judge_nothing_it_already_answered(train_root, tmp_path, server, even_task):
    out = tmp_path / "run"
    cfg = _cfg(train_root, out, server, max_steps=2)
    train(cfg, print_fn=lambda *_: None)
    before = _steps(out)
    asked = len(server.requests)
    assert asked > 0
    for name in ("checkpoint-2", "final"):  # killed after step 2's log line, before its checkpoint
        shutil.rmtree(out / name)
    (out / "summary.json").unlink()
    train(cfg, print_fn=lambda *_: None)
    after = _steps(out)
    assert len(server.requests) == asked  # step 2's rollouts are regenerated identically: every verdict cached
    assert after[2]["judge/cached"] == after[2]["judge/asked"] and after[2]["judge/queried"] == 0
    assert after[2]["rewards/judge/mean"] == before[2]["rewards/judge/mean"]


@pytest.mark.parametrize("template", ["plain", "chat"])
@pytest.mark.parametrize("instruction", ["paper", "reason-step"])
def test_math_training_prompts_are_todays(tok, template, instruction):
    """The math task's training prompt is the one training built before tasks existed (format_prompt)."""
    from copy import deepcopy
    from types import SimpleNamespace

    from tandem_rlvr.data.benchmarks import Problem
    from tandem_rlvr.prompting import format_prompt
    from tandem_rlvr.rl.prepare import Prepared

    tok = deepcopy(tok)
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
    cfg = load_train_config(None, None, {"instruction": instruction})
    p = Problem("b", "1", "Mia has 7 shells. She finds 5 more.", "12",
                meta={"benchmark": "b", "problem_id": "1", "question": "Mia has 7 shells. She finds 5 more.",
                      "gold": "12"})
    prep = Prepared(cfg, SimpleNamespace(tokenizer=tok), [p], [p], template, cfg.data.run_task)
    assert prep.prompt_text(p) == format_prompt(tok, p.problem, template, instruction)


def test_a_run_recorded_before_reward_terms_resumes_as_math_with_the_binary_reward(tmp_path):
    from tandem_rlvr.rl.run_identity import check_run_dir, stored_config

    cfg = load_train_config(None, None, {"output_dir": str(tmp_path / "run")})
    old = {k: v for k, v in stored_config(cfg).items()
           if k not in ("task", "verifier", "reward_terms", "reward", "length_ceiling") and not k.startswith("judge")}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(old))
    assert check_run_dir(cfg) == 0
    with pytest.raises(TandemError, match="reward_terms"):
        check_run_dir(load_train_config(None, None,
                                        {"output_dir": str(tmp_path / "run"), "reward_terms": "correct,length"}))
