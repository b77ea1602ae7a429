"""The judge's chain-of-thought rating (``eval/measure/cot_rating.py``): its mechanics against a fake
OpenAI-compatible judge on localhost and a local tiny model, its registry row in ``compare`` (paired tests
against scipy on hand-derived per-problem ratings), compare.md and the HTML report.

The fake judge (``helpers.judge.FakeJudgeServer``) rates by what the response says: under the legibility
rubric "SCORE: 4" when the response has the word "clearly", else "SCORE: 1"; under the coverage rubric
"SCORE: 3" when it has "because", else "SCORE: 0"; a response with "mute" gets a reply without a number
(no rating). So every expected value below is counted from the responses written here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from helpers.judge import FakeJudgeServer
from tandem_rlvr.cli import main
from tandem_rlvr.data.benchmarks import tiny_benchmark
from tandem_rlvr.errors import TandemError
from tandem_rlvr.eval.measure.cot_rating import run_cot_rating
from tandem_rlvr.rewards.judge import JudgeSettings

pytest.importorskip("openai")

PROBLEMS = tiny_benchmark("test", 4)


def _verdict(prompt: str) -> str:
    response = prompt.split("Solution:\n", 1)[1].split("\n\nRate how", 1)[0]
    if "mute" in response:
        return "I cannot say."
    if "Rate how easily" in prompt:
        return "SCORE: 4" if "clearly" in response else "SCORE: 1"
    return "SCORE: 3" if "because" in response else "SCORE: 0"


@pytest.fixture
def judge():
    s = FakeJudgeServer(verdict=_verdict)
    yield s
    s.close()


def _solo(d, responses: list[list[str]]) -> None:
    """A solo run of the tiny benchmark: responses[p][s] is sample s of problem p."""
    d.mkdir(parents=True)
    rows = [{"benchmark": "tiny", "problem_id": p.problem_id, "sample_idx": s, "correct": s == 0, "response": text,
             "token_ids": [1, 2], "senior_mask": [1, 1]}
            for p, texts in zip(PROBLEMS, responses, strict=True) for s, text in enumerate(texts)]
    (d / "config.json").write_text(json.dumps({"benchmarks": ["tiny"], "schedule": {"name": "senior"}, "n": 2,
                                               "template": "plain", "models": {"senior": "tiny"}}))
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "sources.json").write_text(json.dumps({"benchmarks": ["tiny"], "split": "test"}))


# per problem, two samples; legibility 4 with "clearly" else 1, coverage 3 with "because" else 0
PLAIN = [["clearly 5 because 2+3", "clearly 5"], ["so 7", "clearly 7 because"], ["x", "y"], ["clearly because", "mute"]]
TERSE = [["5", "5"], ["7", "so 7"], ["clearly x", "y"], ["z because", "w"]]


def _hand(responses):
    """(legibility, coverage) per problem, by the fake judge's rules, averaged over rated samples."""
    leg = [np.mean([4 if "clearly" in r else 1 for r in rs if "mute" not in r]) for rs in responses]
    cov = [np.mean([3 if "because" in r else 0 for r in rs if "mute" not in r]) for rs in responses]
    return np.array(leg), np.array(cov)


def test_ratings_are_the_judges_scores_per_problem_and_a_rerun_pays_nothing(judge, tmp_path):
    _solo(tmp_path / "plain" / "solo", PLAIN)
    settings = JudgeSettings(judge.url, retries=0)
    res = run_cot_rating(tmp_path / "plain" / "solo", settings, tmp_path / "plain" / "cot-rating", progress=False)
    leg, cov = _hand(PLAIN)  # [4, 2.5, 1, 4], [1.5, 1.5, 0, 3]
    assert res["summary"]["legibility"]["macro"]["mean"] == pytest.approx(leg.mean())
    assert res["summary"]["coverage"]["macro"]["mean"] == pytest.approx(cov.mean())
    assert res["failed"] == {"legibility": 1, "coverage": 1} and res["samples"] == 8
    rows = [json.loads(x) for x in (tmp_path / "plain" / "cot-rating" / "per_problem.jsonl").read_text().splitlines()]
    assert [r["legibility"] for r in rows] == pytest.approx(list(leg))
    assert len(judge.requests) == 2 * 8  # two rubrics x eight distinct responses
    assert {r["temperature"] for r in judge.requests} == {0.0}
    run_cot_rating(tmp_path / "plain" / "solo", settings, tmp_path / "plain" / "cot-rating", progress=False)
    assert len(judge.requests) == 2 * 8  # every reply from the cache, the unreadable ones too


def test_compare_tests_each_rubric_paired_and_the_report_shows_the_section(judge, tmp_path, capsys):
    for name, responses in (("terse", TERSE), ("plain", PLAIN)):  # the command, as a user runs it
        _solo(tmp_path / name / "solo", responses)
        assert main(["eval", "cot-rating", "--samples", str(tmp_path / name / "solo"), "--judge", judge.url,
                     "--out", str(tmp_path / name / "cot-rating")]) == 0
    assert "Chain-of-thought rating by a judge" in capsys.readouterr().out
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "terse"), str(tmp_path / "plain"), "--out", str(out), "--n-boot", "50"]) == 0
    comp = json.loads((out / "compare.json").read_text())
    assert set(comp["cot-rating"]) == {"terse", "plain"}
    tests = {t["statistic"]: t for t in comp["ttests"]}
    for i, stat in enumerate(("CoT legibility (judge)", "CoT coverage (judge)")):
        cand, base = _hand(PLAIN)[i], _hand(TERSE)[i]
        ref = stats.ttest_rel(cand, base, alternative="greater")
        assert tests[stat]["n"] == 4 and tests[stat]["p"] == pytest.approx(ref.pvalue)
    md = (out / "compare.md").read_text()
    assert "Chain-of-thought rating by a judge, 0-4" in md and "unrated (legibility / coverage)" in md
    assert main(["report", "--compare", str(out), "--out", str(tmp_path / "rep")]) == 0
    page = (tmp_path / "rep" / "report.html").read_text()
    headline = page[page.index('id="headline"'):page.index("<h2>Figures</h2>")]
    assert "CoT legibility (judge, 0-4)" in headline and "CoT coverage (judge, 0-4)" in headline
    assert f"{_hand(PLAIN)[0].mean():.2f}" in headline
    assert "Chain-of-thought rating by a judge" in page and f"judge <code>{judge.url}" in page  # table, provenance


def test_ratings_by_different_judges_are_refused_and_a_judge_without_ratings_is_one_line(judge, tmp_path):
    _solo(tmp_path / "a" / "solo", PLAIN)
    _solo(tmp_path / "b" / "solo", TERSE)
    run_cot_rating(tmp_path / "a" / "solo", JudgeSettings(judge.url, retries=0), tmp_path / "a" / "cot-rating",
                   progress=False)
    run_cot_rating(tmp_path / "b" / "solo", JudgeSettings(judge.url, retries=0, max_tokens=64),
                   tmp_path / "b" / "cot-rating", progress=False)  # another reply budget: another judge
    from tandem_rlvr.eval.measure.compare import run_compare

    with pytest.raises(TandemError, match="cot-rating of a and b was rated by different judges"):
        run_compare([str(tmp_path / "a"), str(tmp_path / "b")], tmp_path / "cmp", n_boot=10)
    _solo(tmp_path / "m" / "solo", [["mute", "mute"]] * 4)
    with pytest.raises(TandemError, match="no readable legibility rating for any of 8 samples"):
        run_cot_rating(tmp_path / "m" / "solo", JudgeSettings(judge.url, retries=0), tmp_path / "m" / "cot-rating",
                       progress=False)


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory, tok):
    """A one-layer random model whose context holds a rubric prompt (the shared test model's 512 does not)."""
    from conftest import make_model

    d = tmp_path_factory.mktemp("judge") / "model"
    model = make_model(len(tok), 0, hidden=32, layers=1)
    model.config.max_position_embeddings = 4096
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_a_local_judge_rates_through_the_judge_machinery(judge_dir, tmp_path):
    """A tiny local model on the hf engine (``engines.judge_local``): each stored rating is 4 x the score:4
    parse of the reply cached for it (this seed-0 model writes a digit), replies the parser cannot read are
    counted as unrated."""
    from tandem_rlvr.eval.measure.cot_rating import rubric_settings
    from tandem_rlvr.rewards.judge import VerdictCache, parse_verdict

    _solo(tmp_path / "s" / "solo", PLAIN)
    settings = JudgeSettings(str(judge_dir), max_tokens=4, batch_size=4, device="cpu", dtype="float32")
    out = tmp_path / "s" / "cot-rating"
    res = run_cot_rating(tmp_path / "s" / "solo", settings, out, progress=False)
    cache = VerdictCache(out / "judge_cache.sqlite")
    per = [json.loads(x) for x in (out / "per_sample.jsonl").read_text().splitlines()]
    questions = {p.problem_id: p.problem for p in PROBLEMS}
    for rubric in ("legibility", "coverage"):
        jid = rubric_settings(settings, rubric).identifier
        keys = [cache.key(jid, questions[p.problem_id], r) for p, rs in zip(PROBLEMS, PLAIN, strict=True) for r in rs]
        replies = cache.get(keys)
        assert len(replies) == len(set(keys))  # every distinct response asked and its reply kept
        expected = [None if (v := parse_verdict("score:4", replies[k])) is None else 4 * v for k in keys]
        assert [s[rubric] for s in per] == expected and any(v is not None for v in expected)
        assert res["failed"][rubric] == expected.count(None)
    cache.close()
