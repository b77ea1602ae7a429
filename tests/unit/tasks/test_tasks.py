"""The task registry and the answer-graded tasks (math, gsm8k, answer-tag): names, verdicts, reasons.

Expected verdicts are worked by hand from each task's documented convention (docs/tasks.md).
"""

from __future__ import annotations

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.rewards.math import score
from tandem_rlvr.tasks import TASKS, Grade, Task, get_task, load_problems, task_for_eval


def test_every_builtin_task_is_registered_under_its_name_and_meets_the_protocol():
    for name in ("math", "gsm8k", "answer-tag"):
        task = get_task(name)
        assert task.name == name and isinstance(task, Task)
        assert task.verifier.startswith(name + "@")


def test_unknown_task_is_an_error_listing_the_valid_names():
    with pytest.raises(TandemError) as e:
        get_task("chess")
    assert "chess" in str(e.value) and all(n in str(e.value) for n in TASKS)


def test_math_task_grades_exactly_as_the_math_verifier_on_the_same_responses():
    rows = get_task("math").load("gsm8k", 3)
    responses = ["so \\boxed{" + rows[0]["gold"] + "}", "no box here", "\\boxed{-1}"]
    grades = get_task("math").grade(responses, [rows[0]] * 3)
    assert [g.score for g in grades] == [score(r, rows[0]["gold"]) for r in responses] == [1.0, 0.0, 0.0]
    assert [g.reason for g in grades] == ["passed", "no answer found", "wrong answer"]


def test_math_task_prompt_is_the_papers_user_message():
    row = {"question": "What is 1+1?"}
    assert get_task("math").prompt(row) == ("What is 1+1? Solve the following math problem step by step. Put your "
                                            "final answer inside \\boxed{}, like \\boxed{42} or \\boxed{\\frac{1}{2}}.")


def test_gsm8k_takes_the_last_hash_answer_else_the_last_number_compared_by_value():
    row = {"gold": "1000"}
    cases = {  # response -> (score, reason), by GSM8K's convention
        "4 + 6 = 10 ... #### 1,000": (1.0, "passed"),
        "#### 999\nsorry, #### $1000.00": (1.0, "passed"),  # the last #### wins; $ and .00 do not matter
        "So she pays 1000.": (1.0, "passed"),  # no ####: the last number
        "#### 1000 then 12 more": (1.0, "passed"),  # a #### answer beats a later stray number
        "It is 1000, no wait, 1001": (0.0, "wrong answer"),
        "I cannot tell": (0.0, "no answer found"),
    }
    grades = get_task("gsm8k").grade(list(cases), [row] * len(cases))
    assert [(g.score, g.reason) for g in grades] == list(cases.values())


def test_answer_tag_matches_the_last_tag_after_whitespace_and_case_normalisation():
    row = {"gold": "New  York"}
    cases = {
        "<answer>new york</answer>": 1.0,
        "<answer>\n  NEW\tYORK \n</answer>": 1.0,
        "<answer>new york</answer> ... <answer>Boston</answer>": 0.0,  # the last tag counts
        "<answer>newyork</answer>": 0.0,  # whitespace collapses, it does not vanish
        "new york": 0.0,
    }
    grades = get_task("answer-tag").grade(list(cases), [row] * len(cases))
    assert [g.score for g in grades] == list(cases.values())
    assert grades[-1].reason == "no answer found"


def test_task_for_eval_gives_math_the_eval_options_and_refuses_them_elsewhere():
    t = task_for_eval("math", instruction="none", answer_mode="final-boxes")
    assert t.verifier == "math@1:final-boxes" and t.prompt({"question": "Q"}) == "Q"
    with pytest.raises(TandemError, match="math task only"):
        task_for_eval("gsm8k", instruction="paper", answer_mode="final-boxes")


def test_load_problems_fingerprints_what_the_model_sees_and_the_gold():
    probs = load_problems(get_task("gsm8k"), ["gsm8k"], limit=2)["gsm8k"]
    assert len(probs) == 2 and probs[0].answer == probs[0].meta["gold"]
    assert probs[0].problem == probs[0].meta["question"]
    assert isinstance(Grade(1.0, "passed").details, dict)
