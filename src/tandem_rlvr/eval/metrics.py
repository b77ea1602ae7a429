"""Pure metric functions over numpy arrays: pass@k, bootstrap SEs, paired tests, drift.

What: every number of the evaluation battery that is not a model forward (those live in
``eval/legibility.py``) is computed here from plain arrays, so each can be checked against
an independent reference (``tests/test_metrics.py``: brute-force k-subsets, the analytic SE
of a mean, scipy on the same arrays).

- pass@k: the unbiased estimator of Chen et al. (2021): for a problem with n samples of
  which c are correct, pass@k = 1 - C(n-c, k) / C(n, k), computed as a product to stay
  exact for large n.
- Bootstrap SEs resample problems with replacement (10,000 times by default), within each
  benchmark for the macro average, so a benchmark's weight in the macro is fixed as in
  the paper. ``mean_se_summary`` applies this to any per-problem statistic (CE, alpha).
- Paired one-sided t-tests (paper Table 3): per-problem statistics of two models, matched
  by (benchmark, problem id) and pooled over benchmarks, into ``scipy.stats.ttest_rel``.
- Drift (paper section 5): token marginals with additive smoothing, signed log-ratios to
  the junior, full-vocabulary KL, survival curves of |log-ratio|, and the recovery of a
  reference senior's most over-emitted tokens by a candidate (share and Spearman rho).

Shapes: P problems, V vocabulary, G grid points, N top tokens.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy import stats

from ..errors import TandemError


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: n samples, c correct."""
    if not (0 <= c <= n):
        raise TandemError(f"pass@k needs 0 <= c <= n, got n={n}, c={c}")
    if not (1 <= k <= n):
        raise TandemError(f"pass@k needs 1 <= k <= n, got k={k} with n={n} samples")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_per_problem(n: Sequence[int], c: Sequence[int], k: int) -> np.ndarray:
    """(P,) pass@k of every problem."""
    return np.array([pass_at_k(int(a), int(b), k) for a, b in zip(n, c)], dtype=np.float64)


def bootstrap_se(values: Sequence[float], n_boot: int = 10_000, seed: int = 0) -> float:
    """SE of the mean of ``values`` (P,) by resampling them with replacement."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return 0.0
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))  # (n_boot, P)
    return float(x[idx].mean(axis=1).std(ddof=1))


def macro_bootstrap_se(groups: Mapping[str, Sequence[float]], n_boot: int = 10_000, seed: int = 0) -> float:
    """SE of the macro average (mean over groups of the group means), stratified by group."""
    rng = np.random.default_rng(seed)
    stats = np.zeros(n_boot)
    for vals in groups.values():
        x = np.asarray(vals, dtype=np.float64)
        idx = rng.integers(0, x.size, size=(n_boot, x.size))
        stats += x[idx].mean(axis=1)
    return float((stats / max(len(groups), 1)).std(ddof=1))


def pass_at_k_summary(per_bench: Mapping[str, tuple[Sequence[int], Sequence[int]]], ks: Sequence[int],
                      n_boot: int = 10_000, seed: int = 0) -> dict:
    """Per benchmark and "macro": {"pass@k": {"mean": .., "se": ..}} for each k <= min n.

    per_bench maps benchmark -> (n per problem, correct per problem). The macro is the mean of
    the benchmark means; ``macro["sets"]`` names the benchmarks it covers, in order.
    """
    min_n = min(min(n) for n, _ in per_bench.values())
    ks = [k for k in ks if k <= min_n]
    out: dict[str, dict] = {b: {"problems": len(n)} for b, (n, _) in per_bench.items()}
    out["macro"] = {"problems": sum(len(n) for n, _ in per_bench.values()), "benchmarks": len(per_bench),
                    "sets": list(per_bench)}
    for k in ks:
        vals = {b: pass_at_k_per_problem(n, c, k) for b, (n, c) in per_bench.items()}
        for b, v in vals.items():
            out[b][f"pass@{k}"] = {"mean": float(v.mean()), "se": bootstrap_se(v, n_boot, seed)}
        out["macro"][f"pass@{k}"] = {"mean": float(np.mean([v.mean() for v in vals.values()])),
                                     "se": macro_bootstrap_se(vals, n_boot, seed)}
    return out


def mean_se_summary(per_bench: Mapping[str, Sequence[float]], n_boot: int = 10_000, seed: int = 0) -> dict:
    """Per benchmark and "macro": {"mean", "se", "problems"} of a per-problem statistic.

    per_bench maps benchmark -> (P_b,) values; the macro is the mean of benchmark means with
    a bootstrap SE stratified by benchmark (as for pass@k).
    """
    vals = {b: np.asarray(v, dtype=np.float64) for b, v in per_bench.items() if len(v)}
    if not vals:
        raise TandemError("no per-problem values to summarise")
    out = {b: {"mean": float(v.mean()), "se": bootstrap_se(v, n_boot, seed), "problems": int(v.size)}
           for b, v in vals.items()}
    out["macro"] = {"mean": float(np.mean([v.mean() for v in vals.values()])),
                    "se": macro_bootstrap_se(vals, n_boot, seed), "problems": sum(v.size for v in vals.values())}
    return out


# --------------------------------------------------------------------------- paired tests
def _num(x: float) -> float | None:
    """A float for JSON: NaN (e.g. a t-test on identical arrays) becomes None."""
    return None if x is None or not np.isfinite(x) else float(x)


def pair_by_key(candidate: Mapping, baseline: Mapping) -> tuple[np.ndarray, np.ndarray, list]:
    """Match two {key: value} maps (key = (benchmark, problem_id)) on their common keys.

    Returns (P,) candidate values, (P,) baseline values and the sorted keys: the problems
    of all benchmarks pooled into one paired sample.
    """
    keys = sorted(set(candidate) & set(baseline))
    return (np.array([candidate[k] for k in keys], dtype=np.float64),
            np.array([baseline[k] for k in keys], dtype=np.float64), keys)


def paired_ttest(candidate: Sequence[float], baseline: Sequence[float], alternative: str = "greater") -> dict:
    """One-sided paired t-test of (P,) candidate vs (P,) baseline statistics of the same problems.

    alternative "greater": H1 is mean(candidate - baseline) > 0; "less": < 0. Returns n,
    both means, the mean difference, t, df and p (None where undefined: n < 2 or zero
    variance of the differences).
    """
    a, b = np.asarray(candidate, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise TandemError(f"paired t-test needs two equal-length vectors, got shapes {a.shape} and {b.shape}")
    if alternative not in ("greater", "less"):
        raise TandemError(f"alternative must be 'greater' or 'less', got {alternative!r}")
    out = {"n": int(a.size), "alternative": alternative, "mean_candidate": _num(a.mean()) if a.size else None,
           "mean_baseline": _num(b.mean()) if b.size else None, "mean_diff": _num((a - b).mean()) if a.size else None,
           "t": None, "df": max(int(a.size) - 1, 0), "p": None}
    if a.size >= 2 and np.ptp(a - b) > 0:
        res = stats.ttest_rel(a, b, alternative=alternative)
        out["t"], out["p"] = _num(res.statistic), _num(res.pvalue)
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> dict:
    """Spearman rank correlation of (N,) x and (N,) y: {"rho", "p", "n"} (two-sided p)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"rho": None, "p": None, "n": int(x.size)}
    res = stats.spearmanr(x, y)
    return {"rho": _num(res.statistic), "p": _num(res.pvalue), "n": int(x.size)}


# --------------------------------------------------------------------------- drift
def token_counts(sequences: Iterable[Sequence[int]], vocab_size: int) -> np.ndarray:
    """(V,) int64 number of times each token id occurs in ``sequences``."""
    seqs = [np.asarray(s, dtype=np.int64) for s in sequences]
    flat = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= vocab_size):
        raise TandemError(f"token id {int(flat.max() if flat.max() >= vocab_size else flat.min())} outside the "
                          f"vocabulary of size {vocab_size}")
    return np.bincount(flat, minlength=vocab_size).astype(np.int64)


def smoothed_distribution(counts: Sequence[int], smoothing: float = 1.0) -> np.ndarray:
    """(V,) add-``smoothing`` (Laplace for 1.0) estimate of a token distribution from (V,) counts."""
    c = np.asarray(counts, dtype=np.float64)
    if smoothing <= 0:
        raise TandemError(f"smoothing must be > 0 (log-ratios and KL need every token to have mass), got {smoothing}")
    return (c + smoothing) / (c.sum() + smoothing * c.size)


def log_ratio(p_model: np.ndarray, p_junior: np.ndarray) -> np.ndarray:
    """(V,) signed log(p_model / p_junior): > 0 where the model over-emits a token."""
    return np.log(p_model) - np.log(p_junior)


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) = sum_v p(v) log(p(v)/q(v)) in nats over the full vocabulary (both smoothed)."""
    return float(np.sum(p * (np.log(p) - np.log(q))))


def survival_curve(values: Sequence[float], grid: Sequence[float]) -> np.ndarray:
    """(G,) fraction of ``values`` strictly greater than each threshold of (G,) ``grid``."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    if v.size == 0:
        return np.zeros(len(grid))
    return 1.0 - np.searchsorted(v, np.asarray(grid, dtype=np.float64), side="right") / v.size


def drift_recovery(ref_log_ratio: np.ndarray, cand_log_ratio: np.ndarray, top_n: int = 500,
                   eligible: np.ndarray | None = None, min_tokens: int = 1) -> dict:
    """How far a candidate moves the reference's most over-emitted tokens back toward the junior.

    Over-emitted: ref_log_ratio r_ref = log(p_ref/p_jun) > 0 and ``eligible`` (V,) bool
    (default: every token; ``drift_statistics`` passes "the reference emitted it at least
    min_ref_count times", since under smoothing a token nobody emitted gets r_ref > 0 from the
    two totals alone). Takes the top_n of them by r_ref and the candidate's shift relative to
    the reference, s = r_cand - r_ref = log(p_cand/p_ref); a token is moved back when s < 0.
    Returns the (N,) ids, drifts and shifts, ``qualifying`` (how many tokens were over-emitted),
    and the share moved back and Spearman(r_ref, s), both None (``defined`` False) when
    fewer than ``min_tokens`` tokens qualify.
    """
    over = ref_log_ratio > 0
    if eligible is not None:
        over &= np.asarray(eligible, dtype=bool)
    order = np.argsort(-np.where(over, ref_log_ratio, -np.inf), kind="stable")
    top = order[: min(top_n, int(over.sum()))]
    drift, shift = ref_log_ratio[top], cand_log_ratio[top] - ref_log_ratio[top]
    defined = top.size >= max(min_tokens, 1)
    return {"top_n": int(top.size), "qualifying": int(over.sum()), "min_tokens": int(min_tokens), "defined": defined,
            "share_moved_back": _num((shift < 0).mean()) if defined else None,
            "spearman": spearman(drift, shift) if defined else {"rho": None, "p": None, "n": int(top.size)},
            "token_ids": top.tolist(), "ref_drift": drift.tolist(), "cand_shift": shift.tolist()}
