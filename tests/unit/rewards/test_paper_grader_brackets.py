"""``--grader paper``: an interval or tuple answer is right only with both of the gold's brackets.

The rule, from the paper's released grader (``grade_answer_sympy`` of its
``reward/hendrycks_math_grader.py``): when the normalised gold splits into several elements, the
answer's first character must equal the gold's first and its last the gold's last, else the stage
says wrong; then the element counts must agree and each element must be equal. That file holds no
worked interval examples (nor do the release's tests, which cover the senior gate and the word state
machine), so the cases below are derived from the rule: (1,2] differs from (1,2) in its closing
bracket only, [1,2) from (1,2) in its opening one, and [1,2] equals itself.

Each case is graded end to end (``rewards.math.score`` with the last ``\\boxed{}`` of a response,
every stage of the cascade) and at the sympy stage, where the bracket rule lives; a gold written
inside ``\\boxed{}`` is first unboxed, as the release does.
"""

import pytest

from tandem_rlvr.rewards.math import score
from tandem_rlvr.rewards.paper_grader import sympy_equal

CASES = [  # (answer, gold, right?)
    ("(1,2]", "(1,2)", False),  # closing bracket differs
    ("(1,2)", "(1,2]", False),
    ("[1,2)", "(1,2)", False),  # opening bracket differs
    ("(1,2]", "[1,2]", False),
    ("[1,2]", "(1,2)", False),  # both differ
    ("[1,2]", "[1,2]", True),
    ("(1,2]", "(1,2]", True),
    ("(1, 2]", "(1,2]", True),  # spaces do not matter
    ("(0.5, 2]", "(\\frac{1}{2}, 2]", True),  # same brackets, elements equal under sympy only
    ("(0.5, 2)", "(\\frac{1}{2}, 2]", False),  # ... and the closing bracket still decides
    ("(0,\\infty)", "[0,\\infty)", False),
    ("(1,2)", "\\boxed{(1,2]}", False),  # a boxed gold is unboxed first
    ("(1,2]", "\\boxed{(1,2]}", True),
]


@pytest.mark.parametrize("answer,gold,right", CASES)
def test_the_paper_grader_compares_both_brackets_of_an_interval(answer, gold, right):
    response = f"The set is \\boxed{{{answer}}}."
    assert score(response, gold, grader="paper") == (1.0 if right else 0.0)


@pytest.mark.parametrize("answer,gold,right", [c for c in CASES if "boxed" not in c[1]])
def test_the_sympy_stage_refuses_either_bracket_differing(answer, gold, right):
    assert sympy_equal(answer, gold) is right
