"""The paper's grader (``--grader paper``, ``rewards.paper_grader``), rule by rule, on hand-made cases.

Each expected value is worked out by hand from the rule it tests (the rules are listed in the
module docstrings of ``rewards/paper_grader.py`` and ``rewards/paper_normalise.py``; the release's
``reward/hendrycks_math_grader.py`` is where they come from). Where ours decides otherwise the test
says so, since that is what ``--grader`` changes.
"""

from __future__ import annotations

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.rewards.math import check_grader, score
from tandem_rlvr.rewards.paper_grader import (extract_answer, gold_text, is_repetitive, lcp_share, math_verify_equal,
                                              sympy_equal, sympy_may_try)
from tandem_rlvr.rewards.paper_normalise import mathd_normalise, sympy_normalise


# --- extraction: the last \boxed, brace matching, \boxed{ only, unclosed -> nothing
@pytest.mark.parametrize("text,expected", [
    (r"first \boxed{1} then \boxed{2}", "2"),  # the last box
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces
    (r"\boxed{\{1\}}", r"\{1\}"),  # escaped braces are counted too: { \{ \} } balance
    (r"\boxed{a\}b}", "a\\"),  # ... so an escaped } closes the box early
    (r"\boxed{}", ""),  # an empty box is the answer ""
    (r"\boxed 5", None),  # brace-less: not accepted
    (r"\boxed 5 and {x}", None),  # the matched span does not start with \boxed{
    (r"\boxed{5", None),  # unclosed
    (r"\boxed{1} and then \boxed{2", None),  # the last box is unclosed: no fall-back to the earlier one
    (r"\fbox{3}", None),  # no \boxed at all: \fbox never counts
    (r"\boxed{4} \fbox{3}", "4"),
    ("no box here", None),
])
def test_paper_extraction_takes_the_last_braced_boxed_only(text, expected):
    assert extract_answer(text) == expected


def test_paper_extraction_reduces_a_boxed_gold_to_its_box():
    assert gold_text(r"so \boxed{3}") == "3" and gold_text("3") == "3"
    assert score(r"\boxed{3}", r"the answer is \boxed{3}", grader="paper") == 1.0


@pytest.mark.parametrize("response,gold,paper,ours", [
    (r"\fbox{5}", "5", 0.0, 1.0),
    (r"\boxed 5", "5", 0.0, 1.0),
    (r"\boxed{5} so \boxed{5", "5", 0.0, 0.0),  # unclosed last box scores 0 in both
])
def test_paper_extraction_rules_decide_the_score(response, gold, paper, ours):
    assert score(response, gold, grader="paper") == paper
    assert score(response, gold) == ours


# --- stage 1: mathd normalisation
@pytest.mark.parametrize("answer,expected", [
    (r"\dfrac12", r"\frac{1}{2}"),  # dfrac -> frac, then \frac12 -> \frac{1}{2}
    ("0.5", r"\frac{1}{2}"),
    (".5", r"\frac{1}{2}"),  # a leading "." gets a 0, then 0.5 -> \frac{1}{2}
    ("3/4", r"\frac{3}{4}"),  # two plain integers
    ("k = 5", "5"),  # a left side of at most two characters is dropped
    (r"10 \text{ cm}", "10"),  # a trailing \text{...}
    (r"\text{yes}", "yes"),  # an enclosing \text{}
    (r"5^\circ", "5"),
    ("5 apples", "5"),  # "apples" is a unit word (with its plural)
    ("x = a", ""),  # "a" is a unit word too: "x = " -> "=" split -> "" (kept, not repaired)
    (r"\left( 1, 2 \right)", "(1,2)"),
    (r"\sqrt3", r"\sqrt{3}"),
    (r"2\sqrt", r"2\sqrt"),  # a \sqrt with nothing after it: the rules fail, the stripped input is kept
    (r"\dfrac{1}{2} + \sqrt", r"\dfrac{1}{2} + \sqrt"),  # ... unchanged, \dfrac included
])
def test_mathd_normalisation_follows_the_papers_rules(answer, expected):
    assert mathd_normalise(answer) == expected


def test_stage_one_accepts_equal_mathd_forms_without_the_worker():
    assert score(r"\boxed{\dfrac12}", "0.5", grader="paper") == 1.0  # both \frac{1}{2}
    assert score(r"\boxed{x = a}", "y = a", grader="paper") == 1.0  # both "" (the single-letter unit quirk)


# --- stage 2: sympy, tuple-aware, strict on fractions and integers
@pytest.mark.parametrize("answer,expected", [
    (r"5 \text{ cm}", "5"),  # the unit name goes, then LaTeX to text, spaces dropped
    ("today", "to"),  # unit names are removed inside words too
    ("1,000,000", "1000000"),
    ("3 and 4", "3,4"),
    ("7 3/4", "7+3/4"),  # a mixed number
    ("2 million", "2*10^6"),
    (r"\sqrt{2}/2", "sqrt(2)/2"),
    (r"\text{Yes}", "yes"),
])
def test_sympy_normalisation_follows_the_papers_rules(answer, expected):
    assert sympy_normalise(answer) == expected


@pytest.mark.parametrize("pred,gold,expected", [
    ("(1, 2)", "(1,2)", True),  # equal after normalisation
    ("(2,1)", "(1,2)", False),  # tuples are ordered: 2 - 1 != 0
    ("[1,2)", "(1,2)", False),  # a gold of several elements needs the same brackets
    ("(1,2,3)", "(1,2)", False),  # element counts differ
    ("2/4", "1/2", False),  # two fractions compare as strings: unreduced is wrong
    ("0.5", "1/2", True),  # not two fractions, neither an integer: sympy says 1/2 - 0.5 = 0
    ("10/2", "5", False),  # an integer gold needs an integer answer
    ("sqrt(2)/2", "1/sqrt(2)", True),  # sympy.simplify of the difference is 0
    ("a+b+c", "c+b+a", False),  # three letters: sympy is not tried
    ("", "5", False),
])
def test_sympy_stage_is_tuple_aware_and_strict_on_integers_and_fractions(pred, gold, expected):
    assert sympy_equal(pred, gold) is expected


@pytest.mark.parametrize("expr,allowed", [
    ("(x+y)-(y+x)", True), ("(a+b+c)-(c+b+a)", False), ("(2^{3})-(8)", False), ("(2^(3))-(8)", False),
    ("(2^10)-(1024)", False), ("(2^3^2)-(512)", False), ("(2^3)-(8)", True), ("(sqrt(2))-(1)", True),
])
def test_sympy_is_not_tried_on_many_letters_or_nested_or_long_powers(expr, allowed):
    assert sympy_may_try(expr) is allowed


# --- stage 3: math-verify under a repetition guard and a 1 s alarm
def test_lcp_share_is_the_summed_common_prefixes_of_sorted_suffixes():
    # "aaaa": sorted suffixes a, aa, aaa, aaaa; neighbours share 1 + 2 + 3 = 6; 6 * 2 / (4 * 5) = 0.6.
    # "abab": ab, abab, b, bab; 2 + 0 + 1 = 3; 3 * 2 / 20 = 0.3. "abcd": nothing shared.
    assert lcp_share("aaaa") == pytest.approx(0.6)
    assert lcp_share("abab") == pytest.approx(0.3)
    assert lcp_share("abcd") == 0.0 and lcp_share("a") == 0.0
    assert is_repetitive("ab" * 100) and not is_repetitive("ab" * 60)  # 200 > 128 characters; 120 is too short


def test_math_verify_stage_recalls_what_the_strict_stages_refuse():
    # 10/2 against 5: stage 2 refuses (integer gold, non-integer text); math-verify reads \frac{10}{2} = 5
    assert not sympy_equal(r"\frac{10}{2}", "5")
    assert score(r"\boxed{\frac{10}{2}}", "5", grader="paper") == 1.0


def test_repetition_guard_refuses_a_long_repetitive_answer_that_math_verify_would_accept():
    long_sum = "+".join(["1"] * 101)  # 201 characters, value 101
    assert is_repetitive(long_sum)
    assert math_verify_equal(long_sum, "101") is False
    assert score(r"\boxed{" + long_sum + "}", "101", grader="paper") == 0.0
    assert score(r"\boxed{" + long_sum + "}", "101") == 1.0  # ours has no such guard


def test_math_verify_stage_is_cut_by_its_alarm(monkeypatch):
    """The stage's 1 s alarm interrupts a parse that hangs (math-verify's own parse and verify limits,
    1 s each, re-arm the same alarm, as in the release)."""
    import time

    import math_verify

    def slow_parse(*args, **kwargs):
        time.sleep(3)  # past the 1 s alarm: interrupted, so the stage says no
        return [1]

    monkeypatch.setattr(math_verify, "parse", slow_parse)
    monkeypatch.setattr(math_verify, "verify", lambda *a, **k: True)
    assert math_verify_equal("x", "y") is False


# --- the option itself
def test_unknown_grader_and_paper_grader_with_final_boxes_are_refused():
    with pytest.raises(TandemError, match="unknown grader 'nope'"):
        check_grader("nope")
    with pytest.raises(TandemError, match="last box only"):
        check_grader("paper", "final-boxes")
    assert score(r"\boxed{1}", "1", grader="nope") == 0.0  # score never raises


def test_grader_is_part_of_the_verifier_of_eval_and_training_runs():
    from tandem_rlvr.config import EvalConfig, TrainConfig
    from tandem_rlvr.tasks import task_for_eval

    assert task_for_eval("math", instruction="paper", answer_mode="last-box").verifier == "math@1:last-box"
    paper = task_for_eval("math", instruction="paper", answer_mode="last-box", grader="paper")
    assert paper.verifier == "math@1:last-box:grader=paper"
    assert TrainConfig.from_keys(grader="paper").data.run_task.verifier == paper.verifier
    with pytest.raises(TandemError, match="--grader paper applies to the math task only"):
        task_for_eval("gsm8k", instruction="paper", answer_mode="last-box", grader="paper")
    with pytest.raises(TandemError, match="last box only"):
        EvalConfig.from_keys(grader="paper", answer_mode="final-boxes")
