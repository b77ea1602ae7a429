"""The drift statistics' count thresholds, at the boundary: a count exactly at a threshold counts,
one below does not.

- ``--min-count`` (10): a token the junior emitted 10 times is one of the frequent tokens of
  the survival curves; one emitted 9 times is not.
- ``--min-ref-count`` (5): a token the reference (GRPO) emitted 5 times, more often than the
  junior, qualifies as over-emitted (recovery set and table); one emitted 4 times does not.
- at least 10 qualifying tokens: the recovery share and Spearman rho are defined with 10,
  not with 9.

Counts are built by hand; log-ratios worked in the comments (add-one smoothing, V = 40).
"""

import numpy as np

from tandem_rlvr.eval.measure.drift import drift_statistics

V = 40


def _counts(junior: dict[int, int], ref: dict[int, int]) -> dict[str, np.ndarray]:
    def arr(d):
        a = np.zeros(V, dtype=np.int64)
        for k, v in d.items():
            a[k] = v
        return a

    return {"junior": arr(junior), "grpo": arr(ref), "tandem": arr(junior)}


def test_min_count_a_junior_token_at_the_threshold_is_frequent_one_below_is_not():
    # junior: token 0 x 10, token 1 x 9, token 2 x 100; only 0 and 2 have >= 10
    counts = _counts({0: 10, 1: 9, 2: 100}, {2: 100})
    out = drift_statistics(counts, reference="grpo", candidate="tandem", min_count=10)
    assert out["survival"]["frequent_tokens"] == 2
    out = drift_statistics(counts, reference="grpo", candidate="tandem", min_count=11)
    assert out["survival"]["frequent_tokens"] == 1  # token 0 (10) drops out one above its count


def test_min_ref_count_a_reference_token_at_the_threshold_qualifies_one_below_does_not():
    # junior: token 0 x 1000 (N_jun = 1000); grpo: token 0 x 100, token 1 x 5, token 2 x 4 (N_ref = 109).
    # r(1) = log((5+1)/(109+40) / (0+1)/(1000+40)) = log(6*1040/149) = +3.73 > 0, and 5 >= 5: qualifies.
    # r(2) = log(5*1040/149) = +3.55 > 0, but 4 < 5: does not.
    # r(0) = log(101/149 / (1001/1040)) = -0.35 < 0: not over-emitted. Never-emitted tokens: count 0 < 5.
    counts = _counts({0: 1000}, {0: 100, 1: 5, 2: 4})
    out = drift_statistics(counts, reference="grpo", candidate="tandem", min_ref_count=5)
    assert out["recovery"]["qualifying"] == 1 and out["recovery"]["token_ids"] == [1]
    assert [r["id"] for r in out["over_emitted"]["rows"]] == [1]
    out = drift_statistics(counts, reference="grpo", candidate="tandem", min_ref_count=4)
    assert out["recovery"]["qualifying"] == 2 and sorted(out["recovery"]["token_ids"]) == [1, 2]


def _k_qualifying(k: int) -> dict[str, np.ndarray]:
    # junior: token 0 x 1000; grpo: token 0 x 100 and tokens 1..k x 5 each: each r = log(6/(100+5k+40) * 1040) > 0
    return _counts({0: 1000}, {0: 100, **{v: 5 for v in range(1, k + 1)}})


def test_recovery_is_defined_with_exactly_ten_qualifying_tokens_and_not_with_nine():
    ten = drift_statistics(_k_qualifying(10), reference="grpo", candidate="tandem")["recovery"]
    nine = drift_statistics(_k_qualifying(9), reference="grpo", candidate="tandem")["recovery"]
    assert ten["qualifying"] == 10 and ten["defined"] and ten["share_moved_back"] is not None
    # tandem has the junior's counts, so every tracked token moves back: share 1.0
    assert ten["share_moved_back"] == 1.0
    assert nine["qualifying"] == 9 and not nine["defined"] and nine["share_moved_back"] is None
    assert nine["spearman"]["rho"] is None
