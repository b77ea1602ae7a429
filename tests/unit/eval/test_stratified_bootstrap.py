"""Macro standard errors are stratified by benchmark for every statistic (paper Table 1: bootstrap
over problems, "stratified by benchmark for the macro average").

Reference: a plain numpy loop (``_loop_se``): per resample, draw each benchmark's problems with
replacement from that benchmark alone, average per benchmark, average the benchmark means; the SE
is the sd of those macros. Its generator draws in another order than the vectorised code, so the
two agree to the Monte-Carlo noise of 10,000 resamples (about 1% each; 4% allowed). The data are
made so that the plausible wrong SEs differ from the stratified one by far more than that: all
problems pooled (weights by problem), pooled resampling then benchmark means (benchmark sizes
left to chance), the mean of the per-benchmark SEs. Checked for pass@k (``pass_at_k_summary``),
any per-problem statistic (``mean_se_summary``), the paper-protocol legibility summary
(``paper_summary``: CE and alpha) and ``tandem eval legibility --ce-protocol ids`` end to end.
"""

import functools
import json
import math

import numpy as np
import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.eval.measure.legibility_text import paper_summary
from tandem_rlvr.eval.measure.metrics import macro_bootstrap_se, mean_se_summary, pass_at_k_summary

from helpers.legibility import rows_for, write_run

N_BOOT = 10_000
REL = 0.04


def _loop_se(groups: dict, n_boot: int = N_BOOT, seed: int = 123) -> float:
    rng = np.random.default_rng(seed)
    vals = [np.asarray(v, dtype=float) for v in groups.values()]
    macros = np.empty(n_boot)
    for i in range(n_boot):
        macros[i] = sum(v[rng.integers(0, v.size, v.size)].mean() for v in vals) / len(vals)
    return float(macros.std(ddof=1))


def _wrong_ses(groups: dict, n_boot: int = 2000, seed: int = 5) -> dict:
    """The SEs of the plausible mistakes (see the module docstring), by plain numpy."""
    rng = np.random.default_rng(seed)
    vals = [np.asarray(v, dtype=float) for v in groups.values()]
    allv = np.concatenate(vals)  # (N,)
    onehot = np.concatenate([np.eye(len(vals))[[i] * v.size] for i, v in enumerate(vals)])  # (N, G)
    idx = rng.integers(0, allv.size, (n_boot, allv.size))  # (n_boot, N), across benchmarks
    counts, sums = onehot[idx].sum(1), (allv[idx][..., None] * onehot[idx]).sum(1)  # (n_boot, G)
    with np.errstate(invalid="ignore", divide="ignore"):
        unstratified = np.nanmean(sums / counts, axis=1)
    per_bench = [v[rng.integers(0, v.size, (n_boot, v.size))].mean(1).std(ddof=1) for v in vals]
    return {"pooled": float(allv[idx].mean(1).std(ddof=1)), "unstratified": float(unstratified.std(ddof=1)),
            "mean of SEs": float(np.mean(per_bench))}


def _discriminating(groups: dict, want: float) -> None:
    for name, se in _wrong_ses(groups).items():
        assert abs(se - want) > 4 * REL * want, (name, se, want)  # the data tell the mistakes apart


# a small hard benchmark, a large easy one, a middling one: sizes and means far apart
RNG = np.random.default_rng(7)
GROUPS = {"aime": RNG.normal(0.0, 1.0, 4), "gsm8k": RNG.normal(8.0, 1.0, 80), "math": RNG.normal(3.0, 2.0, 20)}


@functools.lru_cache
def _groups_se() -> float:
    return _loop_se(GROUPS)


def test_macro_bootstrap_se_is_stratified_by_benchmark():
    want = _groups_se()
    _discriminating(GROUPS, want)
    assert macro_bootstrap_se(GROUPS, N_BOOT) == pytest.approx(want, rel=REL)
    analytic = math.sqrt(sum(np.var(v) / len(v) for v in GROUPS.values())) / len(GROUPS)  # resampling's own variance
    assert want == pytest.approx(analytic, rel=REL)


def test_mean_se_summary_macro_and_per_benchmark_ses_are_stratified():
    out = mean_se_summary(GROUPS, N_BOOT)
    assert out["macro"]["se"] == pytest.approx(_groups_se(), rel=REL)
    assert out["math"]["se"] == pytest.approx(_loop_se({"math": GROUPS["math"]}), rel=REL)  # one benchmark alone


def test_pass_at_k_macro_se_is_stratified_by_benchmark():
    rng = np.random.default_rng(3)
    n = 8
    sizes = {"aime": (5, 0.1), "gsm8k": (120, 0.9), "amc": (30, 0.5)}  # problems, solve rate
    per_bench = {b: ([n] * P, list(rng.binomial(n, p, P))) for b, (P, p) in sizes.items()}
    out = pass_at_k_summary(per_bench, [1, 2], N_BOOT)
    for k in (1, 2):
        vals = {b: [1 - math.comb(n - c, k) / math.comb(n, k) for c in cs] for b, (_, cs) in per_bench.items()}
        want = _loop_se(vals)
        _discriminating(vals, want)
        assert out["macro"][f"pass@{k}"]["se"] == pytest.approx(want, rel=REL)
        assert out["macro"][f"pass@{k}"]["mean"] == pytest.approx(np.mean([np.mean(v) for v in vals.values()]))


def test_paper_legibility_summary_ses_are_stratified_for_ce_and_alpha():
    rng = np.random.default_rng(11)
    per_problem = [{"benchmark": b, "problem_id": str(i), "ce": float(rng.normal(mu, 0.5)),
                    "alpha": float(rng.uniform(lo, lo + 0.2))}
                   for b, P, mu, lo in (("aime", 4, 3.0, 0.2), ("gsm8k", 60, 0.5, 0.7), ("math", 15, 1.5, 0.5))
                   for i in range(P)]
    per_sample = [{**p, "sample_idx": 0} for p in per_problem]
    out = paper_summary(per_sample, per_problem, ["ce", "alpha"])
    for stat in ("ce", "alpha"):
        groups = {}
        for p in per_problem:
            groups.setdefault(p["benchmark"], []).append(p[stat])
        want = _loop_se(groups)
        _discriminating(groups, want)
        assert out[stat]["macro"]["se"] == pytest.approx(want, rel=REL), stat


def test_eval_legibility_macro_ses_are_stratified_for_ce_and_alpha(tmp_path, tok, legibility_world):
    dirs, _ = legibility_world
    rng = np.random.default_rng(0)
    sizes = {"easy": 2, "hard": 8}  # stratified and pooled SEs differ by about 25% at these sizes
    rows, files = [], []
    for b, P in sizes.items():
        short = (lambda r: r.integers(1, len(tok), 3)) if b == "easy" else None
        rows += rows_for(tok, range(P), 2, rng, benchmark=b, pick=short)
        f = tmp_path / f"{b}.jsonl"
        f.write_text("".join(json.dumps({"id": str(p), "problem": f"Mia has {p} shells.", "answer": str(p)}) + "\n"
                             for p in range(P)))
        files.append(str(f))
    run = write_run(tmp_path / "solo", rows, dirs["senior"], benchmarks=tuple(sizes))
    out = tmp_path / "leg"
    assert main(["eval", "legibility", "--samples", str(run), "--junior", dirs["junior"], "--benchmarks",
                 ",".join(files), "--out", str(out), "--device", "cpu", "--ce-protocol", "ids"]) == 0
    res = json.loads((out / "legibility.json").read_text())
    per_problem = [json.loads(x) for x in (out / "per_problem.jsonl").read_text().splitlines()]
    for stat in ("ce", "alpha"):
        groups = {b: [p[stat] for p in per_problem if p["benchmark"] == b] for b in sizes}
        assert [len(v) for v in groups.values()] == list(sizes.values())
        want = _loop_se(groups)
        assert res["summary"][stat]["macro"]["se"] == pytest.approx(want, rel=REL), stat
        pooled = np.concatenate(list(groups.values()))
        assert abs(pooled.std() / math.sqrt(pooled.size) - want) > 2 * REL * want  # pooling would be seen
