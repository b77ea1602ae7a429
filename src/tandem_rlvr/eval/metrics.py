"""Pure metric functions over arrays: pass@k and bootstrap standard errors.

pass@k uses the unbiased estimator of Chen et al. (2021): for a problem with n samples
of which c are correct, pass@k = 1 - C(n-c, k) / C(n, k), computed as a product to stay
exact for large n. Bootstrap SEs resample problems with replacement (10,000 times by
default), within each benchmark for the macro average, so a benchmark's weight in the
macro is fixed as in the paper.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

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

    per_bench maps benchmark -> (n per problem, correct per problem).
    """
    min_n = min(min(n) for n, _ in per_bench.values())
    ks = [k for k in ks if k <= min_n]
    out: dict[str, dict] = {b: {"problems": len(n)} for b, (n, _) in per_bench.items()}
    out["macro"] = {"problems": sum(len(n) for n, _ in per_bench.values()), "benchmarks": len(per_bench)}
    for k in ks:
        vals = {b: pass_at_k_per_problem(n, c, k) for b, (n, c) in per_bench.items()}
        for b, v in vals.items():
            out[b][f"pass@{k}"] = {"mean": float(v.mean()), "se": bootstrap_se(v, n_boot, seed)}
        out["macro"][f"pass@{k}"] = {"mean": float(np.mean([v.mean() for v in vals.values()])),
                                     "se": macro_bootstrap_se(vals, n_boot, seed)}
    return out
