"""Sample files for the legibility and drift tests: rows whose token ids decode to their response, and a
sampling run's folder (config.json, samples.jsonl) holding them."""

import json


def rows_for(tok, problems, n, rng, benchmark="bench", pick=None):
    """Sample rows whose token_ids decode to their response; pick(rng) -> (T,) ids."""
    pick = pick or (lambda r: r.integers(1, len(tok), r.integers(2, 25)))
    rows = []
    for p in problems:
        for s in range(n):
            ids = [int(i) for i in pick(rng)]
            rows.append({"benchmark": benchmark, "problem_id": str(p), "sample_idx": s,
                         "correct": bool(rng.random() < 0.5),
                         "response": tok.decode(ids, skip_special_tokens=True), "senior_share": 1.0, "tokens": len(ids),
                         "token_ids": ids, "senior_mask": [1] * len(ids)})
    return rows


def write_run(d, rows, senior, schedule="senior", benchmarks=("bench",)):
    """A sampling run's folder ``d`` of ``rows`` by ``senior`` (n 2, ks 1 and 2, template plain); ``d``."""
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"n": 2, "schedule": {"name": schedule}, "template": "plain", "models": {"senior": senior, "junior": None},
           "benchmarks": list(benchmarks), "ks": [1, 2]}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d
