"""pass@k per junior of a pool: the figures of a handoff run whose samples drew their juniors from a pool.

Each row of such a run names its junior (``junior``; ``eval.sample.pool_decoding``). For junior J
and problem i, n_iJ is the number of the problem's samples that J got and c_iJ how many of them
are correct; pass@k of J on problem i is the unbiased estimator 1 - C(n_iJ - c_iJ, k) / C(n_iJ, k)
over those samples (``metrics.pass_at_k``). It exists only where n_iJ >= k: a problem where J got
fewer than k samples has no pass@k for J and is left out of J's benchmark mean, which is counted
(``problems``) beside the problems left out (``short``). Because the draw is independent of the
problem and of the outcome, the problems kept are a random subset and the mean stays unbiased
for the problems J would see. Where no problem of a benchmark has k samples with J, the figure is
absent (``mean``/``se`` None) with a ``why``; a macro needs every benchmark's figure. Standard
errors are the battery's: problems resampled with replacement, within each benchmark for the
macro (``metrics.bootstrap_se``, ``metrics.macro_bootstrap_se``). The pooled figures (all of a
problem's samples, whatever their junior) are the run's ordinary pass@k.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .metrics import bootstrap_se, macro_bootstrap_se, pass_at_k_per_problem


def junior_counts(rows: Sequence[dict], junior: str) -> dict[tuple[str, str], tuple[int, int]]:
    """{(benchmark, problem_id): (n samples with ``junior``, c correct among them)} of the problems it got."""
    out: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        if r.get("junior") == junior:
            x = out.setdefault((r["benchmark"], str(r["problem_id"])), [0, 0])
            x[0] += 1
            x[1] += int(bool(r["correct"]))
    return {k: (n, c) for k, (n, c) in out.items()}


def per_junior_correct(rows: Sequence[dict], junior: str) -> dict[tuple[str, str], float]:
    """{(benchmark, problem_id): fraction correct of the samples ``junior`` got} (its per-problem pass@1)."""
    return {k: c / n for k, (n, c) in junior_counts(rows, junior).items()}


def _figure(vals: np.ndarray, short: int, k: int, n_boot: int, seed: int) -> dict:
    if vals.size == 0:
        return {"mean": None, "se": None, "problems": 0, "short": short,
                "why": f"no problem got {k} or more samples with this junior"}
    return {"mean": float(vals.mean()), "se": bootstrap_se(vals, n_boot, seed), "problems": int(vals.size),
            "short": short}


def junior_summary(rows: Sequence[dict], problems: Mapping[str, Sequence[str]], ks: Sequence[int], junior: str,
                   n_boot: int = 10_000, seed: int = 0) -> dict:
    """One junior's figures: per benchmark and "macro", pass@k {"mean", "se", "problems", "short"} (absent with
    a "why" where no problem has k samples), the samples it got and its senior share.

    problems: {benchmark: problem ids}, every problem of the run (a problem the junior never got is short)."""
    counts = junior_counts(rows, junior)
    mine = [r for r in rows if r.get("junior") == junior]
    out: dict = {"samples": len(mine)}
    if mine:
        shares = np.array([r["senior_share"] for r in mine], dtype=np.float64)
        out["senior_share"] = {"mean": float(shares.mean()), "sd": float(shares.std())}
    for b in problems:
        out[b] = {"problems": len(problems[b])}
    out["macro"] = {"problems": sum(len(ids) for ids in problems.values()), "sets": list(problems)}
    for k in ks:
        vals = {}
        for b, ids in problems.items():
            got = [counts[(b, str(pid))] for pid in ids if counts.get((b, str(pid)), (0, 0))[0] >= k]
            vals[b] = pass_at_k_per_problem([n for n, _ in got], [c for _, c in got], k)
            out[b][f"pass@{k}"] = _figure(vals[b], len(ids) - len(got), k, n_boot, seed)
        missing = [b for b, v in vals.items() if v.size == 0]
        if missing:
            out["macro"][f"pass@{k}"] = {"mean": None, "se": None, "problems": sum(v.size for v in vals.values()),
                                         "why": f"no pass@{k} of this junior on {', '.join(missing)}"}
        else:
            out["macro"][f"pass@{k}"] = {"mean": float(np.mean([v.mean() for v in vals.values()])),
                                         "se": macro_bootstrap_se(vals, n_boot, seed),
                                         "problems": sum(int(v.size) for v in vals.values()),
                                         "short": sum(out[b][f"pass@{k}"]["short"] for b in problems)}
    return out


def junior_pass_at_k(rows: Sequence[dict], problems: Mapping, ks: Sequence[int], juniors: Sequence[str],
                     n_boot: int = 10_000, seed: int = 0) -> dict:
    """{junior: ``junior_summary``} for every junior of the pool; ``problems``: {benchmark: Problems or ids}."""
    ids = {b: [str(getattr(p, "problem_id", p)) for p in ps] for b, ps in problems.items()}
    return {j: junior_summary(rows, ids, ks, j, n_boot, seed) for j in juniors}


def run_juniors(rows: Sequence[dict]) -> list[str]:
    """The juniors named by a run's rows, in first-seen order (empty for a run without a pool)."""
    return list(dict.fromkeys(r["junior"] for r in rows if "junior" in r))
