"""The evaluation battery against numbers computed here from raw counts, without ``eval.measure.metrics``.

- drift: smoothed marginals, KL, the share of frequent tokens with |log-ratio| > 1, survival
  curves, the over-emitted table and the top-n recovery (share moved back, Spearman by ranks),
  all in plain Python from token counts;
- compare and the sampler's metrics.json: pass@k for every k from the share of k-subsets of a
  problem's samples that hold a correct one (itertools), and the run-level standard errors from
  the textbook SE of a mean (population sd / sqrt(P); the bootstrap estimates it);
- legibility: see ``test_eval_legibility_command`` (per-sample numbers by a direct transformers
  forward, per-problem and macro means and the macro SE from plain averages).
"""

import itertools
import json
import math

import numpy as np
import pytest

from tandem_rlvr.config import EvalConfig
from tandem_rlvr.data.benchmarks import Problem
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.eval.measure.compare import run_pass_at_k
from tandem_rlvr.eval.run_files import read_run
from tandem_rlvr.eval.measure.drift import drift_statistics
from tandem_rlvr.eval.sample.sampler import summarize


# --------------------------------------------------------------------------- drift
def _ranks(xs):
    """1-based ranks, ties averaged."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for m in range(i, j + 1):
            r[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return r


def _pearson(a, b):
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


COUNTS = {  # V = 8 token ids
    "junior": [40, 30, 20, 12, 10, 0, 3, 5],
    "grpo": [10, 25, 20, 40, 2, 30, 1, 12],
    "tandem": [30, 28, 21, 20, 8, 6, 2, 5],
}


def test_drift_statistics_match_plain_python():
    res = drift_statistics({k: np.array(v) for k, v in COUNTS.items()}, "junior", "grpo", "tandem", smoothing=1.0,
                           min_count=5, top_n=3, table_rows=4, min_ref_count=5, min_tokens=3)  # 5, 3, 7 emitted >= 5x
    V = 8
    p = {n: [(x + 1) / (sum(c) + V) for x in c] for n, c in COUNTS.items()}
    lr = {n: [math.log(p[n][v] / p["junior"][v]) for v in range(V)] for n in ("grpo", "tandem")}
    frequent = [v for v in range(V) if COUNTS["junior"][v] >= 5]  # ids 0, 1, 2, 3, 4, 7
    assert res["survival"]["frequent_tokens"] == len(frequent) == 6
    for n in ("grpo", "tandem"):
        m = res["models"][n]
        assert m["tokens"] == sum(COUNTS[n])
        assert m["kl_to_junior"] == pytest.approx(sum(p[n][v] * math.log(p[n][v] / p["junior"][v]) for v in range(V)))
        big = [v for v in frequent if abs(lr[n][v]) > 1]
        assert m["share_abs_log_ratio_gt_1"] == pytest.approx(len(big) / len(frequent))
        for tau, s in zip(res["survival"]["grid"], res["survival"]["curves"][n], strict=True):
            assert s == pytest.approx(sum(abs(lr[n][v]) > tau for v in frequent) / len(frequent))
    assert res["survival"]["grid"][-1] == pytest.approx(max(abs(lr[n][v]) for n in lr for v in frequent))
    # over-emitted by grpo, most first: 5 (30 vs 0), 3 (40 vs 12), 7 (12 vs 5); then 1 (25 vs 30) is not
    over = sorted((v for v in range(V) if lr["grpo"][v] > 0), key=lambda v: -lr["grpo"][v])
    assert over[:3] == [5, 3, 7]
    rec = res["recovery"]
    assert rec["token_ids"] == [5, 3, 7] and rec["top_n"] == 3
    shift = [lr["tandem"][v] - lr["grpo"][v] for v in (5, 3, 7)]
    assert rec["share_moved_back"] == pytest.approx(sum(s < 0 for s in shift) / 3)
    drift = [lr["grpo"][v] for v in (5, 3, 7)]
    assert rec["spearman"]["rho"] == pytest.approx(_pearson(_ranks(drift), _ranks(shift)))
    rows = res["over_emitted"]["rows"]
    real = [v for v in range(V) if COUNTS["grpo"][v] >= 5 and lr["grpo"][v] > 0]  # emitted >= 5x and over-emitted
    assert [r["id"] for r in rows] == sorted(real, key=lambda v: -lr["grpo"][v])[:4] == [5, 3, 7]
    assert all(r["counts"] == {n: COUNTS[n][r["id"]] for n in COUNTS} for r in rows)


# --------------------------------------------------------------------------- pass@k and SEs
OUTCOMES = {  # benchmark -> problem -> correctness of its 8 samples
    "alpha": {"p0": [1, 0, 0, 0, 0, 0, 0, 0], "p1": [0, 0, 1, 1, 0, 0, 0, 0], "p2": [0] * 8,
              "p3": [1, 1, 1, 0, 1, 1, 1, 1], "p4": [0, 0, 0, 0, 0, 0, 0, 1]},
    "beta": {"q0": [1] * 8, "q1": [0, 1, 0, 0, 0, 1, 0, 1], "q2": [0, 0, 0, 0, 1, 0, 0, 0]},
}
KS = (1, 2, 4, 8)


def _brute_pass_at_k(outcomes, k):
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


def _expected(k):
    per = {b: [_brute_pass_at_k(o, k) for o in ps.values()] for b, ps in OUTCOMES.items()}
    mean = {b: sum(v) / len(v) for b, v in per.items()}
    se = {b: math.sqrt(sum((x - mean[b]) ** 2 for x in v) / len(v)) / math.sqrt(len(v)) for b, v in per.items()}
    macro_mean = sum(mean.values()) / len(mean)
    macro_se = math.sqrt(sum(s ** 2 for s in se.values())) / len(se)
    return mean, se, macro_mean, macro_se


def _rows():
    return [{"benchmark": b, "problem_id": pid, "sample_idx": s, "correct": bool(c), "response": "", "tokens": 1,
             "token_ids": [5], "senior_mask": [1], "senior_share": 1.0}
            for b, ps in OUTCOMES.items() for pid, o in ps.items() for s, c in enumerate(o)]


def _check_pass_at_k(metrics):
    for k in KS:
        mean, se, macro_mean, macro_se = _expected(k)
        for b in OUTCOMES:
            assert metrics[b][f"pass@{k}"]["mean"] == pytest.approx(mean[b]), (b, k)
            assert metrics[b][f"pass@{k}"]["se"] == pytest.approx(se[b], rel=0.05, abs=1e-9), (b, k)
        assert metrics["macro"][f"pass@{k}"]["mean"] == pytest.approx(macro_mean), k
        assert metrics["macro"][f"pass@{k}"]["se"] == pytest.approx(macro_se, rel=0.05, abs=1e-9), k


def test_compare_pass_at_k_for_every_k_and_run_level_se(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"n": 8, "schedule": {"name": "senior"}, "template": "plain",
                                               "models": {"senior": "s", "junior": None}, "ks": list(KS),
                                               "benchmarks": list(OUTCOMES)}))
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    _check_pass_at_k(run_pass_at_k(read_run(d), list(KS)))
    _check_pass_at_k(run_pass_at_k(read_run(d)))  # ks from the run's config


def test_sampler_metrics_pass_at_k_for_every_k_and_run_level_se():
    problems = {b: [Problem(b, pid, "x", "1") for pid in ps] for b, ps in OUTCOMES.items()}
    cfg = EvalConfig.from_keys(mode="solo", n=8, sampling=SamplingParams(), template="plain", seed=0, senior="s",
                               benchmarks=list(OUTCOMES))
    _check_pass_at_k(summarize(_rows(), problems, cfg))
