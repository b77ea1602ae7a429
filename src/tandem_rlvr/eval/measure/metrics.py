"""Pure metric functions over numpy arrays: pass@k, bootstrap SEs, paired tests, drift.

What: every number of the evaluation battery that is not a model forward (those live in
``eval/measure/legibility.py``) is computed here from plain arrays, so each can be checked against
an independent reference (``tests/unit/eval/test_metrics.py``: brute-force k-subsets, the analytic SE
of a mean, scipy on the same arrays).

- pass@k: the unbiased estimator of Chen et al. (2021): for a problem with n samples of
  which c are correct, pass@k = 1 - C(n-c, k) / C(n, k), computed as a product to stay
  exact for large n.
- Bootstrap SEs resample problems with replacement (10,000 times by default), within each
  benchmark for the macro average, so a benchmark's weight in the macro is fixed as in
  the paper. ``mean_se_summary`` applies this to any per-problem statistic (CE, alpha).
- Paired one-sided t-tests (paper Table 3): per-problem statistics of two models, matched
  by (benchmark, problem id) and pooled over benchmarks, into ``scipy.stats.ttest_rel``.
  ``paired_verdict`` is the one rule every headline states: such a test at ``ALPHA``.
- Paired bootstrap intervals (``paired_bootstrap``): the 95% percentile interval of the mean
  per-problem difference candidate - baseline, per benchmark and for the macro (problems
  resampled within each benchmark, ``scipy.stats.bootstrap``), seeded.
- Diagnostics of samples: author switches per sequence (``switches_summary`` over
  ``decoding.render.author_switches``), truncation
  (``truncation_summary``: the response hit its token budget without EOS), distinct problems
  solved (``solved_summary``: pass@n > 0). Each returns None or a reason where its set is empty.
- Drift (paper section 5): token marginals with additive smoothing, signed log-ratios to
  the junior, full-vocabulary KL, survival curves of |log-ratio|, and the recovery of a
  reference senior's most over-emitted tokens by a candidate (share and Spearman rho).

Shapes: P problems, V vocabulary, G grid points, N top tokens.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy import stats

from ...decoding.render import author_switches

from ...errors import TandemError

ALPHA = 0.05  # the level of every headline verdict (``paired_verdict``)
VERDICTS = ("shows", "does not separate", "does not show")


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
    return np.array([pass_at_k(int(a), int(b), k) for a, b in zip(n, c, strict=True)], dtype=np.float64)


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


def paired_verdict(test: dict, alpha: float = ALPHA) -> str:
    """The headline verdict of a ``paired_ttest`` result, whose ``alternative`` is the claimed direction.

    "shows": its one-sided p < ``alpha``; "does not show": the opposite one-sided test (p' = 1 - p, the
    t distribution being continuous) has p' < ``alpha``, the difference goes the other way; else "does not
    separate" (this many problems cannot tell the two apart). Differences that are all equal (p None,
    zero variance) over at least two problems decide by their sign (t is infinite); identical statistics,
    or fewer than two problems, do not separate.
    """
    p, diff, n = test.get("p"), test.get("mean_diff"), test.get("n", 0)
    if p is None:
        if n < 2 or not diff:
            return "does not separate"
        good = diff > 0 if test["alternative"] == "greater" else diff < 0
        return "shows" if good else "does not show"
    if p < alpha:
        return "shows"
    return "does not show" if 1.0 - p < alpha else "does not separate"


def spearman(x: Sequence[float], y: Sequence[float]) -> dict:
    """Spearman rank correlation of (N,) x and (N,) y: {"rho", "p", "n"} (two-sided p)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"rho": None, "p": None, "n": int(x.size)}
    res = stats.spearmanr(x, y)
    return {"rho": _num(res.statistic), "p": _num(res.pvalue), "n": int(x.size)}


def paired_bootstrap(candidate: Mapping, baseline: Mapping, n_boot: int = 10_000, seed: int = 0,
                     level: float = 0.95) -> dict:
    """Percentile bootstrap interval of the mean difference candidate - baseline, paired by problem.

    candidate, baseline: {(benchmark, problem_id): per-problem statistic}; only their common keys
    count. Per benchmark: the problems' differences d (P_b,) are resampled with replacement
    ``n_boot`` times; the interval is the (1 - level)/2 and (1 + level)/2 quantiles of the
    resampled means. Macro: the mean over benchmarks of the benchmark mean differences, each
    benchmark resampled on its own (stratified, as the macro SEs). Returns {benchmark | "macro":
    {"diff", "lo", "hi", "problems"}} plus "n_boot", "seed", "level"; a benchmark with fewer than
    2 paired problems has lo = hi = None and a "why" (an interval from one problem means nothing).
    """
    diffs: dict[str, list[float]] = {}
    for key in sorted(set(candidate) & set(baseline)):
        diffs.setdefault(key[0], []).append(float(candidate[key]) - float(baseline[key]))
    out: dict = {"n_boot": int(n_boot), "seed": int(seed), "level": float(level)}
    usable = {}
    for b, d in diffs.items():
        x = np.asarray(d, dtype=np.float64)  # (P_b,)
        out[b] = {"diff": float(x.mean()), "lo": None, "hi": None, "problems": int(x.size)}
        if x.size < 2:
            out[b]["why"] = f"{x.size} paired problem"
            continue
        usable[b] = x
        out[b]["lo"], out[b]["hi"] = _percentile_interval((x,), n_boot, seed, level)
    if not diffs:
        out["macro"] = {"diff": None, "lo": None, "hi": None, "problems": 0, "why": "no paired problems"}
    else:
        out["macro"] = {"diff": float(np.mean([np.mean(d) for d in diffs.values()])), "lo": None, "hi": None,
                        "problems": sum(len(d) for d in diffs.values()), "benchmarks": len(diffs)}
        if len(usable) == len(diffs):
            out["macro"]["lo"], out["macro"]["hi"] = _percentile_interval(tuple(usable.values()), n_boot, seed, level)
        else:
            out["macro"]["why"] = "a benchmark has fewer than 2 paired problems"
    return out


def _percentile_interval(groups: tuple, n_boot: int, seed: int, level: float) -> tuple[float, float]:
    """(lo, hi) percentile interval of the mean of group means, each group resampled on its own."""
    def mean_of_means(*xs, axis=-1):
        return np.mean([x.mean(axis=axis) for x in xs], axis=0)

    res = stats.bootstrap(groups, mean_of_means, n_resamples=n_boot, method="percentile", confidence_level=level,
                          vectorized=True, rng=np.random.default_rng(seed))
    lo, hi = res.confidence_interval
    return float(lo), float(hi)


# --------------------------------------------------------------------------- sample diagnostics
def switches_summary(masks: Iterable[Sequence[int]]) -> dict | None:
    """{"mean", "sd", "sequences"} of author switches per sequence; None for no sequences."""
    x = np.array([author_switches(m) for m in masks], dtype=np.float64)
    if x.size == 0:
        return None
    return {"mean": float(x.mean()), "sd": float(x.std()), "sequences": int(x.size)}


def truncation_summary(rows: Sequence[dict]) -> dict:
    """Share of samples whose response hit the token budget without EOS (``finished`` false).

    {benchmark | "all": {"rate", "truncated", "samples"}} ("all" pools every sample), or
    {"why": reason} when the rows do not record ``finished`` (runs from before it was written)."""
    if not rows:
        return {"why": "no samples"}
    if any("finished" not in r for r in rows):
        return {"why": "'finished' (ended with EOS) not recorded in samples.jsonl"}
    out: dict = {}
    for key in [*dict.fromkeys(r["benchmark"] for r in rows), "all"]:
        sel = [r for r in rows if key == "all" or r["benchmark"] == key]
        cut = sum(not r["finished"] for r in sel)
        out[key] = {"rate": cut / len(sel), "truncated": cut, "samples": len(sel)}
    return out


def solved_summary(counts: Mapping[tuple[str, str], tuple[int, int]]) -> dict:
    """Distinct problems solved (pass@n > 0: at least one correct sample) per benchmark and "all".

    counts: {(benchmark, problem_id): (n, c)}. Returns {benchmark | "all": {"solved", "problems"}}
    and "n" (the samples per problem, or the list of distinct ns if they differ)."""
    out: dict = {}
    for (b, _), (_, c) in counts.items():
        for key in (b, "all"):
            x = out.setdefault(key, {"solved": 0, "problems": 0})
            x["problems"] += 1
            x["solved"] += int(c > 0)
    if "all" in out:
        out["all"] = out.pop("all")  # last, after the benchmarks
    ns = sorted({n for n, _ in counts.values()})
    out["n"] = ns[0] if len(ns) == 1 else ns
    return out


def sample_diagnostics(rows: Sequence[dict], counts: Mapping[tuple[str, str], tuple[int, int]], handoff: bool) -> dict:
    """A run's diagnostics: truncation, distinct problems solved and, for a handoff run, author
    switches per sequence per benchmark and "all" (None where a benchmark has no sequence)."""
    out = {"truncation": truncation_summary(rows), "solved": solved_summary(counts)}
    if handoff:
        benches = list(dict.fromkeys(r["benchmark"] for r in rows))
        out["switches"] = {key: switches_summary(r["senior_mask"] for r in rows
                                                 if key == "all" or r["benchmark"] == key)
                           for key in [*benches, "all"]}
    return out


def handoff_diagnostics(rows: Sequence[dict]) -> dict:
    """metrics.json's figures of a handoff run: ``switches_per_seq`` ({"mean", "sd", "sequences"})
    and ``junior_logprob``: the junior's mean log-prob per token over the tokens it wrote itself
    (pooled over rows, temperature-scaled as sampled; from each row's ``junior_lp_sum``), with
    ``tokens``; "mean" None and a "why" where the junior wrote nothing or rows lack the sums."""
    out: dict = {"switches_per_seq": switches_summary(r["senior_mask"] for r in rows)}
    n_jun = sum(sum(t["tokens"] for t in r["turns"] if t["author"] == "junior") if "turns" in r  # text protocol:
                else len(r["senior_mask"]) - int(np.sum(r["senior_mask"])) for r in rows)  # the junior's own tokens
    if any("junior_lp_sum" not in r for r in rows):
        out["junior_logprob"] = {"mean": None, "tokens": n_jun,
                                 "why": "rows do not record junior_lp_sum (an older run)"}
    elif n_jun == 0:
        out["junior_logprob"] = {"mean": None, "tokens": 0, "why": "the junior wrote no token"}
    else:
        out["junior_logprob"] = {"mean": sum(r["junior_lp_sum"] for r in rows) / n_jun, "tokens": n_jun}
    return out


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
