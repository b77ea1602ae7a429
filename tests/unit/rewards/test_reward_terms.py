"""Reward terms (rewards/terms.py) and a user's reward (rewards/user.py): each term's values on
hand-worked responses, their weighted sum as TRL forms it, specs and their one-line errors."""

from __future__ import annotations

import json
import sys

import pytest

from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rewards.judge import Judge, JudgeSettings
from tandem_rlvr.rewards.terms import build_terms, parse_terms
from tandem_rlvr.rewards.user import load_reward
from tandem_rlvr.tasks import get_task


def _rows(golds):
    return [json.dumps({"problem_id": str(i), "question": f"Q{i}", "gold": g}) for i, g in enumerate(golds)]


RESPONSES = ["so \\boxed{12}", "so \\boxed{13}", "no box, 12", "half: \\boxed{\\frac{1}{2}}"]
GOLDS = ["12", "12", "12", "0.5"]


def _call(funcs, weights, responses, golds, ids=None, log=None):
    """Each function's values and TRL's weighted sum (sum_i w_i * f_i)."""
    ids = ids or [[0] * 3 for _ in responses]
    per = [f(prompts=[f"Q{i}" for i in range(len(responses))], completions=responses, completion_ids=ids,
             task_row=_rows(golds), log_metric=log) for f in funcs]
    return per, [sum(w * v[i] for w, v in zip(weights, per, strict=True)) for i in range(len(responses))]


def test_default_reward_is_todays_binary_last_box_verifier():
    cfg = load_train_config(None, None, {})
    assert cfg.rewards.reward_terms == ["correct:1"] and cfg.data.task == "math"
    funcs, weights = build_terms(parse_terms(cfg.rewards.reward_terms), get_task("math"), ceiling=100)
    per, total = _call(funcs, weights, RESPONSES, GOLDS)
    # by hand: 12 = 12; 13 != 12; no box = 0; 1/2 = 0.5 (math-verify)
    assert per == [[1.0, 0.0, 0.0, 1.0]] and total == [1.0, 0.0, 0.0, 1.0] and weights == [1.0]
    assert funcs[0].__name__ == "correct"  # TRL logs it as rewards/correct/mean


def test_length_penalty_is_the_replications_r_correct_minus_coef_tokens_over_ceiling():
    funcs, weights = build_terms(parse_terms("correct,length:0.2"), get_task("math"), ceiling=10)
    ids = [[1] * 3, [1] * 10, [1] * 20, [1] * 5]  # token counts, EOS included: 3, 10, 20 (over the ceiling), 5
    per, total = _call(funcs, weights, RESPONSES, GOLDS, ids)
    assert per[1] == [-0.3, -1.0, -1.0, -0.5]
    assert total == pytest.approx([1 - 0.2 * 0.3, -0.2, -0.2, 1 - 0.2 * 0.5])


@pytest.mark.parametrize("task, good, bad", [
    ("math", "\\boxed{3}", "\\boxed{3"),  # an unclosed box states no answer
    ("gsm8k", "so #### 3", "so 3"),
    ("answer-tag", "<answer>3</answer>", "<answer>3"),
    ("code", "here:\n```python\nprint(3)\n```", "```js\nconsole.log(3)\n```"),
])
def test_format_term_is_one_where_the_answer_has_the_tasks_form(task, good, bad):
    funcs, _ = build_terms(parse_terms("format"), get_task(task), ceiling=10)
    assert funcs[0](prompts=["q", "q"], completions=[good, bad], task_row=_rows(["3", "3"])) == [1.0, 0.0]


class CountingTask:
    """The math task, counting the responses it grades."""

    def __init__(self):
        self.inner, self.name, self.graded = get_task("math"), "math", 0

    def grade(self, responses, rows):
        self.graded += len(responses)
        return self.inner.grade(responses, rows)


class ScriptedBackend:
    """A judge backend replying from a table; None = a failed request."""

    def __init__(self, replies):
        self.replies, self.prompts = replies, []

    def complete(self, prompts):
        self.prompts += prompts
        return [next((v for k, v in self.replies.items() if k in p), None) for p in prompts]


@pytest.mark.parametrize("mode, coef", [("multiply", 0.5), ("add", 0.5)])
def test_judge_bonus_on_correct_responses_and_a_failure_is_a_logged_zero(tmp_path, mode, coef):
    responses = ["neat \\boxed{12}", "grind \\boxed{12}", "neat \\boxed{13}", "lost \\boxed{12}"]
    backend = ScriptedBackend({"neat": "ELEGANT", "grind": "BASHY"})  # "lost" gets no reply: a failure
    judge = Judge(JudgeSettings("http://unused"), cache=tmp_path / "c.sqlite", backend=backend)
    task = CountingTask()
    funcs, weights = build_terms(parse_terms(f"correct,judge:{coef}"), task, ceiling=10, judge=judge, judge_mode=mode)
    logged = {}
    per, total = _call(funcs, weights, responses, ["12"] * 4, log=lambda k, v: logged.setdefault(k, v))
    assert per[0] == [1.0, 1.0, 0.0, 1.0]
    assert per[1] == [1.0, 0.0, 0.0, 0.0]  # elegant correct; bashy; incorrect (not judged); failed
    assert total == [1.5, 1.0, 0.0, 1.0]  # the replication's x1.5 for the elegant correct solution
    assert len(backend.prompts) == 3 and not any("\\boxed{13}" in p for p in backend.prompts)
    assert logged["judge/failures"] == 1.0 and logged["judge/asked"] == 3.0 and logged["judge/mean_verdict"] == 0.5
    assert task.graded == 4  # the judge reused the correctness term's grades: one verifier run per response
    judge.close()


def test_judge_multiply_scales_partial_credit_and_add_does_not(tmp_path):
    class Half:
        name = "half"

        def grade(self, responses, rows):
            from tandem_rlvr.tasks import Grade

            return [Grade(0.5, "partial") for _ in responses]

    for mode, expected in (("multiply", 0.5), ("add", 1.0)):
        judge = Judge(JudgeSettings("http://unused"), backend=ScriptedBackend({"x": "ELEGANT"}))
        funcs, _ = build_terms(parse_terms("judge"), Half(), ceiling=10, judge=judge, judge_mode=mode)
        assert funcs[0](prompts=["q"], completions=["x"], task_row=_rows(["1"])) == [expected]


def test_term_specs_parse_and_bad_ones_are_errors():
    assert [str(t) for t in parse_terms(["correct", "length:0.1", "judge"])] == ["correct:1", "length:0.1", "judge:0.5"]
    for bad in ("speed", "length:x", "correct,correct", [], "length:inf"):
        with pytest.raises(TandemError):
            parse_terms(bad)
    with pytest.raises(TandemError, match="judge"):
        load_train_config(None, None, {"reward_terms": "correct,judge"})  # a judge term needs --judge
    with pytest.raises(TandemError, match="user"):
        load_train_config(None, None, {"reward_terms": "user"})  # a user term needs --reward


def _write_reward(tmp_path, name="my_reward"):
    f = tmp_path / f"{name}.py"
    f.write_text("def brevity(prompts, completions, completion_ids, answer, **kwargs):\n"
                 "    return [1.0 if len(i) < 3 else 0.0 for i in completion_ids]\n"
                 "def wrong_length(prompts, completions, **kwargs):\n    return [1.0]\n"
                 "NOT_CALLABLE = 3\n")
    return f


def test_user_reward_from_a_file_or_a_module_gets_the_dataset_columns(tmp_path, monkeypatch):
    f = _write_reward(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec in (f"{f}:brevity", "my_reward:brevity"):
        fn = load_reward(spec)
        assert fn.__name__ == "user"
        assert fn(prompts=["a", "b"], completions=["x", "y"], completion_ids=[[1, 2], [1, 2, 3]],
                  answer=["1", "2"]) == [1.0, 0.0]
    cfg = load_train_config(None, None, {"reward": f"{f}:brevity"})
    assert cfg.rewards.reward_terms == ["correct:1", "user:1"]
    sys.modules.pop("my_reward", None)


@pytest.mark.parametrize("spec, message", [
    ("nocolon", "expected module:function"),
    ("no_such_module_xyz:f", "no module"),
    ("/nonexistent/r.py:f", "no such file"),
    ("{d}/my_reward.py:missing", "has no 'missing'"),
    ("{d}/my_reward.py:NOT_CALLABLE", "not callable"),
])
def test_bad_reward_spec_is_a_one_line_error_naming_it(tmp_path, spec, message):
    _write_reward(tmp_path)
    spec = spec.format(d=tmp_path)
    with pytest.raises(TandemError, match=message) as e:
        load_train_config(None, None, {"reward": spec})
    assert spec in str(e.value) and "\n" not in str(e.value)


def test_user_reward_returning_the_wrong_count_is_an_error_naming_it(tmp_path):
    fn = load_reward(f"{_write_reward(tmp_path)}:wrong_length")
    with pytest.raises(TandemError, match="wrong_length.*returned 1 rewards for 2"):
        fn(prompts=["a", "b"], completions=["x", "y"])


def test_code_task_terms_run_the_tests_once_and_log_the_pass_fraction():
    task = get_task("code")
    row = next(r for r in task.load("humaneval", 3))
    good = "```python\n" + row["gold"]["prompt"] + row["solution"] + "```" if row.get("solution") else None
    if good is None:
        pytest.skip("the shipped HumanEval rows carry no canonical solution")
    funcs, weights = build_terms(parse_terms("correct,format"), task, ceiling=10)
    logged = {}
    rows = [json.dumps(row, sort_keys=True, default=str)] * 2
    per = [f(prompts=["q", "q"], completions=[good, "no code here, sorry"], task_row=rows,
             log_metric=lambda k, v: logged.setdefault(k, v)) for f in funcs]
    # the canonical solution passes every test; prose is "the whole completion", which fails to run
    assert per == [[1.0, 0.0], [1.0, 0.0]]
    assert logged["correct/pass_fraction"] == pytest.approx(0.5)  # (1 + 0) / 2


def test_correct_term_survives_problems_that_repeat_across_calls_after_the_memo_fills():
    """A small data set seen for several epochs: later batches hold (problem, response) pairs already
    graded next to new ones, after the batch memo has grown past its bound (4 batches' worth)."""
    task = CountingTask()
    funcs, _ = build_terms(parse_terms("correct"), task, ceiling=10)
    golds = ["7", "8"]  # two problems, two completions a call
    calls = [["\\boxed{7}", "\\boxed{8}"], ["\\boxed{1}", "\\boxed{8}"], ["\\boxed{7}", "\\boxed{2}"],
             ["\\boxed{3}", "\\boxed{4}"], ["\\boxed{5}", "\\boxed{6}"], ["\\boxed{0}", "\\boxed{0}"],
             # 6 calls, 10 distinct pairs memoised: over the bound of 4 calls' worth (8)
             ["\\boxed{7}", "\\boxed{9}"],  # first pair seen in call 1, second new
             ["\\boxed{7}", "\\boxed{8}"]]  # call 1 again
    # by hand: a completion scores 1 iff its box equals its problem's gold (7 for the first, 8 for the second)
    want = [[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]
    got = [funcs[0](prompts=["Q0", "Q1"], completions=c, task_row=_rows(golds)) for c in calls]
    assert got == want
