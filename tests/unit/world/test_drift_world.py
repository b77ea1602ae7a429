"""The drift world: style axis, shorthand solutions, style classifier, cache keys, study.

Quick (a few seconds); the quick study itself runs (and reruns) in tests/integration/test_readme_commands.py.
The drift world's numbers are in docs/drift_world.md ("The study", "Measured"); here only mechanics are checked.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.rewards.math import score
from tandem_rlvr.world.build import DRIFT_WORLD, WorldConfig, build_world, named_world
from tandem_rlvr.world.style import paragraph_style, response_style, style_summary
from tandem_rlvr.world.tasks import draw_solutions, make_problems, noisy_solution, render_shorthand


@pytest.fixture(scope="module")
def problems():
    return make_problems(300, seed=3, split="train")


def test_default_world_key_and_stream_are_unchanged(problems):
    # With shorthand_frac = 0 the other style fields do not shape the build, so not the key.
    assert WorldConfig(shorthand_slip_prob=0.5, shorthand_from=0.3, junior_shorthand=False).key() == WorldConfig().key()
    assert WorldConfig.drift().key() != WorldConfig().key()
    assert named_world("tiny") == WorldConfig() and named_world("tiny-drift") == WorldConfig(**DRIFT_WORLD)
    # The default pretraining stream: hash recorded from the generator before the style axis.
    rng = random.Random(7)
    texts = draw_solutions(problems, rng, 0.3) + [str(rng.random())]
    assert hashlib.sha256("|".join(texts).encode()).hexdigest() == \
        "aec48e95f9f2f85fa555b42adeb3a9e39a2a8e1f5404226ec612fe362a803382"
    with pytest.raises(TandemError, match="shorthand_frac"):
        WorldConfig(shorthand_frac=1.0)
    with pytest.raises(TandemError, match="unknown world"):
        named_world("nope")


def test_generator_mixes_styles_in_the_configured_ratio(problems):
    rng = random.Random(0)
    texts = [t for _ in range(10) for t in draw_solutions(problems, rng, 0.25, shorthand_frac=0.3,
                                                          shorthand_slip_prob=0.02)]
    labels = [response_style(t)["label"] for t in texts]
    assert set(labels) == {"word", "shorthand"}
    share = labels.count("shorthand") / len(labels)
    assert abs(share - 0.3) < 0.03  # 3000 draws: sd about 0.008
    # Each style slips at its own rate.
    answers = [p.answer for _ in range(10) for p in problems]
    wrong = {lab: [1 - score(t, a) for t, a, la in zip(texts, answers, labels, strict=True) if la == lab]
             for lab in ("word", "shorthand")}
    assert abs(sum(wrong["word"]) / len(wrong["word"]) - 0.25) < 0.04
    assert sum(wrong["shorthand"]) / len(wrong["shorthand"]) < 0.05


def test_shorthand_solutions_are_correct_and_verifiable(problems):
    for p in problems:
        text, final = render_shorthand(p)
        paras = text.split("\n\n")
        assert paras[0] == str(p.start) and paras[-1] == f"\\boxed{{{p.answer}}}" and str(final) == p.answer
        assert len(paras) == len(p.steps) + 2 and "\n\n" in text
        assert score(text, p.answer) == 1.0
        assert response_style(text)["label"] == "shorthand"
        value = p.start
        for s, par in zip(p.steps, paras[1:-1], strict=False):
            assert par == f"{value} {'+' if s.sign > 0 else '-'} {s.amount} = {value + s.sign * s.amount}"
            value += s.sign * s.amount
    rng = random.Random(1)
    slipped = [noisy_solution(p, rng, 1.0, style="shorthand") for p in problems]
    assert all(score(t, p.answer) == 0.0 for t, p in zip(slipped, problems, strict=True))
    assert all(response_style(t)["label"] == "shorthand" for t in slipped)
    with pytest.raises(TandemError, match="style"):
        noisy_solution(problems[0], rng, 0.1, style="emoji")


def test_style_classifier(problems):
    p = problems[0]
    assert response_style(p.solution) == {"word": len(p.steps) + 2, "shorthand": 0, "other": 0,
                                          "shorthand_share": 0.0, "label": "word"}
    assert paragraph_style("The answer is \\boxed{12}.") == "word"
    assert paragraph_style("\\boxed{12}") == "shorthand"
    assert paragraph_style("7 + 5 = 12") == "shorthand" and paragraph_style("12") == "shorthand"
    assert paragraph_style("+ = 7 7") == "other" and paragraph_style("") == "other"
    mixed = "7\n\nShe finds 5 more, so 7 plus 5 is 12.\n\n\\boxed{12}"
    r = response_style(mixed)
    assert r["label"] == "mixed" and r["shorthand_share"] == pytest.approx(2 / 3)
    assert response_style("+ =\n\n= +")["label"] == "other" and response_style("")["shorthand_share"] is None
    s = style_summary([p.solution, render_shorthand(p)[0], mixed, "=="], [1.0, 0.0, 1.0, 0.0])
    assert s["n"] == 4 and s["frac_word"] == s["frac_shorthand"] == s["frac_mixed"] == s["frac_other"] == 0.25
    assert s["acc_word"] == 1.0 and s["acc_shorthand"] == 0.0
    assert s["shorthand_share"] == pytest.approx((0 + 1 + 2 / 3) / 3)


def test_drift_world_builds_and_records_a_style_summary_per_model(tmp_path):
    cfg = WorldConfig.for_tests(**DRIFT_WORLD)
    w = build_world(cfg, cache=tmp_path, progress=False)
    styles = w.meta["styles"]
    assert set(styles) == {"senior", "junior"} and styles["senior"]["n"] == cfg.n_eval
    for s in styles.values():  # every response falls in exactly one style
        assert sum(s[f"frac_{k}"] for k in ("word", "shorthand", "mixed", "other")) == pytest.approx(1.0)
    assert w.meta["config"]["shorthand_frac"] == DRIFT_WORLD["shorthand_frac"]
    assert w.meta["tokenizer"]["vocab"] > 0


def test_study_settings_and_cli():
    from tandem_rlvr.cli import build_parser
    from tandem_rlvr.cli.recipes import study_settings
    from tandem_rlvr.recipes.study import _variants

    a = build_parser().parse_args(["study", "drift", "--seeds", "0,2", "--out", "x", "--juniors", "weak"])
    s = study_settings(a)
    assert s.seeds == [0, 2] and s.juniors == ["weak"] and s.world == "tiny-drift"
    assert _variants(s.juniors) == ["grpo", "tandem-weak", "klreg-weak"]
    a.juniors = "strong"
    with pytest.raises(TandemError, match="juniors"):
        study_settings(a)
