"""The answer tasks' instructions (tasks/answers.py) carry no example answer: a model in training copies a
plausible one (a GSM8K run answered ``#### 42`` to 90-94 of 120 problems), and the verifier grades the copy.
The math task keeps the paper's ``\\boxed{42}`` prompt (docs/paper_fidelity.md), so it is not checked here."""

from __future__ import annotations

import re

import pytest

from tandem_rlvr.tasks import get_task


@pytest.mark.parametrize("name, form", [("gsm8k", "####"), ("answer-tag", "<answer>")])
def test_an_answer_tasks_instruction_names_the_form_but_no_answer(name, form):
    task = get_task(name)
    prompt = task.prompt({"question": "Ann has some apples."})  # a question without a number
    instruction = prompt.split("\n\n", 1)[1]
    assert form in instruction
    assert not re.search(r"\d", instruction), instruction  # no number a model could copy as its answer
    assert task.grade([instruction], [{"gold": "42"}])[0].score == 0.0  # the instruction itself answers nothing
