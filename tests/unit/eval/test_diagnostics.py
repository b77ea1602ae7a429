"""Diagnostics of compare/report/study: paired bootstrap intervals, truncation, distinct problems
solved, author switches per sequence. Expected values come from plain numpy or hand counts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.decoding.render import author_switches
from tandem_rlvr.eval.measure.metrics import paired_bootstrap, solved_summary, switches_summary, truncation_summary


def _numpy_percentile_bootstrap(groups, n_boot, seed, level=0.95):
    """Stratified percentile bootstrap of the mean of group means, written out with numpy."""
    rng = np.random.default_rng(seed)
    stat = np.zeros(n_boot)
    for x in groups:
        stat += x[rng.integers(0, x.size, (n_boot, x.size))].mean(axis=1)
    stat /= len(groups)
    return np.quantile(stat, (1 - level) / 2), np.quantile(stat, (1 + level) / 2)


def test_paired_bootstrap_interval_matches_plain_numpy_per_benchmark_and_macro():
    rng = np.random.default_rng(7)
    cand, base, diffs = {}, {}, {}
    for b, P in (("aime", 30), ("math", 80)):
        for i in range(P):
            cand[(b, str(i))], base[(b, str(i))] = rng.random(), rng.random() * 0.8
            diffs.setdefault(b, []).append(cand[(b, str(i))] - base[(b, str(i))])
    got = paired_bootstrap(cand, base, n_boot=20_000, seed=1)
    groups = {b: np.array(d) for b, d in diffs.items()}
    for key, gs in (("aime", [groups["aime"]]), ("math", [groups["math"]]), ("macro", list(groups.values()))):
        lo, hi = _numpy_percentile_bootstrap(gs, 20_000, seed=99)  # another random stream: agree to MC error
        assert got[key]["lo"] == pytest.approx(lo, abs=0.01) and got[key]["hi"] == pytest.approx(hi, abs=0.01), key
        assert got[key]["diff"] == pytest.approx(np.mean([g.mean() for g in gs]))
    assert got["aime"]["problems"] == 30 and got["macro"]["problems"] == 110
    assert paired_bootstrap(cand, base, n_boot=2000, seed=1) == paired_bootstrap(cand, base, n_boot=2000, seed=1)


def test_paired_bootstrap_pairs_by_problem_and_says_why_an_interval_is_undefined():
    # the same per-problem shift of +0.25 on every problem: the interval collapses onto it
    cand = {("b", str(i)): 0.25 + i / 10 for i in range(5)}
    base = {("b", str(i)): i / 10 for i in range(5)}
    base[("b", "extra")] = 1.0  # unpaired: ignored
    got = paired_bootstrap(cand, base, n_boot=500)
    assert (got["b"]["lo"], got["b"]["hi"], got["b"]["problems"]) == (pytest.approx(0.25), pytest.approx(0.25), 5)
    one = paired_bootstrap({("b", "1"): 1.0}, {("b", "1"): 0.0}, n_boot=100)
    assert one["b"]["lo"] is None and "1 paired problem" in one["b"]["why"] and one["macro"]["lo"] is None
    none = paired_bootstrap({("b", "1"): 1.0}, {("c", "1"): 0.0}, n_boot=100)
    assert none["macro"]["diff"] is None and none["macro"]["why"] == "no paired problems"


def test_switches_truncation_and_solved_by_hand():
    assert author_switches([1, 1, 0, 0, 1]) == 2 and author_switches([1]) == 0 and author_switches([]) == 0
    s = switches_summary([[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 1, 1]])  # 3, 0, 1 switches
    assert s == {"mean": pytest.approx(4 / 3), "sd": pytest.approx(np.std([3, 0, 1])), "sequences": 3}
    assert switches_summary([]) is None
    rows = [{"benchmark": "a", "finished": False}, {"benchmark": "a", "finished": True},
            {"benchmark": "b", "finished": False}, {"benchmark": "b", "finished": False}]
    t = truncation_summary(rows)
    assert (t["a"]["truncated"], t["a"]["samples"], t["b"]["rate"], t["all"]["rate"]) == (1, 2, 1.0, 0.75)
    assert "finished" in truncation_summary([{"benchmark": "a"}])["why"]
    assert truncation_summary([])["why"] == "no samples"
    solved = solved_summary({("a", "1"): (4, 0), ("a", "2"): (4, 1), ("b", "1"): (4, 4)})
    assert solved == {"a": {"solved": 1, "problems": 2}, "b": {"solved": 1, "problems": 1},
                      "all": {"solved": 2, "problems": 3}, "n": 4}


def _run(d, schedule, rows):
    d.mkdir(parents=True)
    cfg = {"n": 2, "schedule": {"name": schedule}, "template": "plain", "benchmarks": ["a", "b"], "ks": [1],
           "models": {"senior": "s", "junior": None if schedule == "senior" else "j"}}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rows(correct, finished, masks):
    """Two problems per benchmark a, b and 2 samples each (8 rows, in this order)."""
    keys = [(b, str(p), s) for b in ("a", "b") for p in range(2) for s in range(2)]
    out = []
    for (b, p, s), c, f, m in zip(keys, correct, finished, masks, strict=True):
        row = {"benchmark": b, "problem_id": p, "sample_idx": s, "correct": c, "token_ids": [5] * len(m),
               "senior_mask": m}
        if f is not None:
            row["finished"] = f
        out.append(row)
    return out


def test_compare_and_report_show_each_diagnostic_with_raw_counts(tmp_path, capsys):
    T, F = True, False
    m_solo = [[1, 1, 1]] * 8
    _run(tmp_path / "grpo" / "solo", "senior", _rows([T, F, F, F, T, T, F, F], [T, F, F, F, T, T, T, T], m_solo))
    _run(tmp_path / "trl" / "solo", "senior", _rows([T, T, F, T, T, F, T, T], [None] * 8, m_solo))
    hand = [[1, 0, 1], [1, 1, 0], [1, 1, 1], [0, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 1], [1, 0, 1]]  # 2,1,0,2 | 1,0,1,2
    for name in ("grpo", "trl"):
        _run(tmp_path / name / "handoff", "paragraph-roundrobin", _rows([F, F, T, F, F, F, F, T], [T] * 8, hand))
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "grpo"), str(tmp_path / "trl"), "--out", str(out), "--n-boot", "200"]) == 0
    comp = json.loads((out / "compare.json").read_text())
    g = comp["solo"]["grpo"]["diagnostics"]
    assert g["truncation"]["a"] == {"rate": 0.75, "truncated": 3, "samples": 4}  # rows 2, 3, 4 unfinished
    assert g["truncation"]["all"]["truncated"] == 3 and g["truncation"]["b"]["rate"] == 0.0
    assert "finished" in comp["solo"]["trl"]["diagnostics"]["truncation"]["why"]
    assert g["solved"]["all"] == {"solved": 2, "problems": 4}  # a/0 and b/0
    assert comp["solo"]["trl"]["diagnostics"]["solved"]["all"] == {"solved": 4, "problems": 4}
    assert "switches" not in g
    sw = comp["handoff"]["handoff"]["grpo"]["diagnostics"]["switches"]
    assert sw["a"]["mean"] == pytest.approx(5 / 4) and sw["b"]["mean"] == pytest.approx(1.0)
    assert sw["all"]["mean"] == pytest.approx(9 / 8)
    boot = {b["statistic"]: b for b in comp["bootstrap"]}
    solo = boot["solo pass@1"]  # per-problem pass@1 trl - grpo: a: 1-0.5, 0.5-0; b: 0.5-1, 1-0
    assert solo["a"]["diff"] == pytest.approx(0.5) and solo["b"]["diff"] == pytest.approx(0.25)
    assert solo["macro"]["diff"] == pytest.approx(0.375) and solo["a"]["lo"] == pytest.approx(0.5)
    assert boot["handoff pass@1 (handoff)"]["macro"]["lo"] == pytest.approx(0.0)
    printed = capsys.readouterr().out
    md = (out / "compare.md").read_text()
    for text in ("Paired bootstrap 95% intervals", "Truncation", "75.0% (3/4)", "Distinct problems solved",
                 "2/4", "Author switches per sequence", "1.25 ± ", "+0.500 [+0.500, +0.500]"):
        assert text in md, text
    assert "n/a ('finished' (ended with EOS) not recorded" in md and "Truncation" in printed

    rep = tmp_path / "rep"
    assert main(["report", "--compare", str(out), "--out", str(rep)]) == 0
    page = (rep / "report.html").read_text()
    assert "Paired bootstrap 95% intervals" in page and "Distinct problems solved" in page


def test_study_tests_carry_the_bootstrap_interval_and_seeds_carry_the_diagnostics(tmp_path):
    from tandem_rlvr.recipes.study_stats import paired_tests, senior_stats, to_markdown

    # per-problem pass@1 per seed; tandem beats grpo by exactly 0.25 on every problem of two benchmarks
    grpo = [{"solo": {"a/1": 0.25, "a/2": 0.5, "b/1": 0.0, "b/2": 0.5}}] * 2
    tandem = [{"solo": {"a/1": 0.5, "a/2": 0.75, "b/1": 0.25, "b/2": 0.75}}] * 2
    tests = paired_tests({"grpo": grpo, "tandem": tandem})
    boot = tests["tandem vs grpo: solo"]["bootstrap_macro"]
    assert (boot["diff"], boot["lo"], boot["hi"], boot["benchmarks"]) == (pytest.approx(0.25), pytest.approx(0.25),
                                                                          pytest.approx(0.25), 2)
    md = to_markdown({"seeds_done": [0], "settings": {"limit": 2, "n": 2}, "table": {}, "tests": tests,
                      "top_over_emitted": {}})
    assert "| tandem vs grpo: solo | +0.2500 | [+0.2500, +0.2500] |" in md

    T, F = True, False
    d = tmp_path / "senior"
    _run(d / "solo", "senior", [{**r, "response": "x", "tokens": 3}
                                for r in _rows([T, F, F, F, T, T, F, F], [T, F, F, F, T, T, T, T], [[1, 1, 1]] * 8)])
    _run(d / "handoff-self", "paragraph-roundrobin", _rows([F] * 8, [T] * 8, [[1, 0, 1]] * 4 + [[1, 1, 1]] * 4))
    (d / "handoff-self" / "metrics.json").write_text(json.dumps({"macro": {"pass@1": {"mean": 0.0}}}))
    stats, _ = senior_stats(d, ["self"])
    assert stats["solo_truncated"] == 3 / 8 and stats["solo_solved"] == 2 and stats["handoff_self_switches"] == 1.0
