"""A synthetic sampling run's folder for the report and measure tests: n samples of each problem of ``BENCHES``,
problem p correct with a given probability, written as ``tandem eval`` writes them."""

import json

import numpy as np

BENCHES = ("alpha", "beta")


def write_sampling_run(d, acc, tok, senior, rng, schedule="senior", n=4, problems=5):
    """n samples for each problem of BENCHES; problem p is correct with probability acc[p]."""
    d.mkdir(parents=True)
    rows = []
    for b in BENCHES:
        for p in range(problems):
            for s in range(n):
                ids = rng.integers(1, len(tok), 12).tolist()
                mask = [1] * 12 if schedule == "senior" else [int(i % 6 < 3) for i in range(12)]
                rows.append({"benchmark": b, "problem_id": f"{b}-{p}", "sample_idx": s,
                             "correct": bool(rng.random() < acc[p]),
                             "response": tok.decode(ids, skip_special_tokens=True),
                             "senior_share": float(np.mean(mask)),
                             "tokens": 12, "token_ids": ids, "senior_mask": mask})
    cfg = {"n": n, "schedule": {"name": schedule}, "template": "plain", "benchmarks": list(BENCHES), "ks": [1, 2, 4],
           "models": {"senior": senior, "junior": None if schedule == "senior" else senior}}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows
