"""Metrics against independent references: brute-force k-subsets, the analytic SE of a mean,
scipy on the same arrays, and plain loops for the drift statistics."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from tandem_rlvr.errors import TandemError
from tandem_rlvr.eval.measure.metrics import (bootstrap_se, drift_recovery, kl_divergence, log_ratio,
                                              macro_bootstrap_se,
                                      mean_se_summary, pair_by_key, paired_ttest, pass_at_k, smoothed_distribution,
                                      spearman, survival_curve, token_counts)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_equals_share_of_k_subsets_with_a_correct_sample(n):
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(samples, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_matches_binomial_formula_for_large_n():
    n, c, k = 200, 37, 16
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-12)


def test_pass_at_k_rejects_k_larger_than_n():
    with pytest.raises(TandemError, match="k=9 with n=8"):
        pass_at_k(8, 3, 9)


def test_bootstrap_se_matches_analytic_se_of_a_mean():
    x = np.random.default_rng(1).normal(2.0, 3.0, size=1000)
    analytic = x.std(ddof=1) / np.sqrt(x.size)
    # 10,000 resamples: the SE estimate itself has ~0.7% relative noise.
    assert bootstrap_se(x) == pytest.approx(analytic, rel=0.03)


def test_macro_bootstrap_se_matches_analytic_se_of_a_mean_of_means():
    rng = np.random.default_rng(2)
    groups = {"a": rng.normal(0, 1, 600), "b": rng.binomial(1, 0.3, 300).astype(float), "c": rng.normal(5, 2, 900)}
    analytic = np.sqrt(sum(v.var(ddof=1) / v.size for v in groups.values())) / len(groups)
    assert macro_bootstrap_se(groups) == pytest.approx(analytic, rel=0.03)


def test_mean_se_summary_has_benchmarks_and_macro():
    out = mean_se_summary({"a": [1.0, 2.0, 3.0], "b": [10.0]}, n_boot=200)
    assert out["a"]["mean"] == 2.0 and out["a"]["problems"] == 3
    assert out["b"]["se"] == 0.0
    assert out["macro"]["mean"] == pytest.approx(6.0) and out["macro"]["problems"] == 4


@pytest.mark.parametrize("alternative", ["greater", "less"])
def test_paired_ttest_matches_scipy_and_the_textbook_formula(alternative):
    rng = np.random.default_rng(3)
    base = rng.uniform(0, 1, 40)
    cand = base + rng.normal(0.05, 0.1, 40)
    res = paired_ttest(cand, base, alternative)
    ref = stats.ttest_rel(cand, base, alternative=alternative)
    assert res["t"] == pytest.approx(ref.statistic) and res["p"] == pytest.approx(ref.pvalue)
    d = cand - base
    t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size))
    p = stats.t.sf(t, d.size - 1) if alternative == "greater" else stats.t.cdf(t, d.size - 1)
    assert res["t"] == pytest.approx(t) and res["p"] == pytest.approx(p)
    assert res["df"] == 39 and res["mean_diff"] == pytest.approx(d.mean())


def test_paired_ttest_on_identical_arrays_has_no_p_value():
    res = paired_ttest([0.5, 0.2, 0.1], [0.5, 0.2, 0.1])
    assert res["t"] is None and res["p"] is None and res["mean_diff"] == 0.0


def test_paired_ttest_rejects_unequal_lengths():
    with pytest.raises(TandemError, match="equal-length"):
        paired_ttest([1.0, 2.0], [1.0])


def test_pair_by_key_pools_common_problems_of_all_benchmarks():
    a = {("x", "1"): 1.0, ("x", "2"): 0.0, ("y", "1"): 0.5}
    b = {("x", "1"): 0.0, ("y", "1"): 0.25, ("z", "9"): 1.0}
    x, y, keys = pair_by_key(a, b)
    assert keys == [("x", "1"), ("y", "1")] and x.tolist() == [1.0, 0.5] and y.tolist() == [0.0, 0.25]


def test_spearman_matches_scipy_and_pearson_of_ranks():
    rng = np.random.default_rng(4)
    x = rng.normal(size=300)
    y = -0.6 * x + rng.normal(size=300)
    res = spearman(x, y)
    ref = stats.spearmanr(x, y)
    assert res["rho"] == pytest.approx(ref.statistic) and res["p"] == pytest.approx(ref.pvalue)
    assert res["rho"] == pytest.approx(np.corrcoef(stats.rankdata(x), stats.rankdata(y))[0, 1])


def test_token_counts_match_a_counter():
    seqs = [[1, 2, 2, 5], [], [5, 5, 0]]
    counts = token_counts(seqs, 7)
    ref = Counter(t for s in seqs for t in s)
    assert counts.shape == (7,) and counts.tolist() == [ref[v] for v in range(7)]
    with pytest.raises(TandemError, match="outside the vocabulary"):
        token_counts([[7]], 7)


def test_smoothed_kl_matches_scipy_entropy():
    p = smoothed_distribution([10, 0, 3, 7], 1.0)
    q = smoothed_distribution([2, 5, 0, 13], 0.5)
    assert p.sum() == pytest.approx(1.0) and p[1] == pytest.approx(1 / 24)
    assert kl_divergence(p, q) == pytest.approx(stats.entropy(p, q))
    assert log_ratio(p, q)[0] == pytest.approx(np.log(p[0] / q[0]))


def test_survival_curve_matches_a_loop():
    v = np.random.default_rng(5).exponential(size=50)
    grid = np.linspace(0, 3, 13)
    assert survival_curve(v, grid).tolist() == pytest.approx([np.mean([x > g for x in v]) for g in grid])


def test_drift_recovery_against_a_plain_loop():
    rng = np.random.default_rng(6)
    ref, cand = rng.normal(size=200), rng.normal(size=200)
    res = drift_recovery(ref, cand, top_n=20)
    top = sorted(range(200), key=lambda v: -ref[v])[:20]
    assert res["token_ids"] == top and res["top_n"] == 20
    shift = [cand[v] - ref[v] for v in top]
    assert res["share_moved_back"] == pytest.approx(np.mean([s < 0 for s in shift]))
    assert res["spearman"]["rho"] == pytest.approx(stats.spearmanr([ref[v] for v in top], shift).statistic)


def test_drift_recovery_takes_only_over_emitted_tokens():
    ref = np.array([0.5, -1.0, 0.2, 0.0])
    res = drift_recovery(ref, np.zeros(4), top_n=500)
    assert res["token_ids"] == [0, 2] and res["share_moved_back"] == 1.0
