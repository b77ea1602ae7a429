"""``tandem compare`` pairs only what can be compared, and its one-sided tests point the right way.

- Runs made by ``tandem eval`` that differ in a setting (the junior of same-named handoff
  runs, the schedule, ``--limit``, sampling, n, template, instruction, answer mode) are
  refused with one line naming the difference; ``--allow-mixed`` compares them anyway and
  then every header states each run's own junior and problem count. Seed and engine may
  differ. A problem id meaning two problems (a reordered local copy) is refused always.
- Every one-sided t-test (solo pass@1, handoff pass@1, junior CE, alpha): with the candidate
  clearly better its p is small, with the roles swapped it is near 1; p agrees with the
  t statistic computed by hand from the per-problem differences.
"""

import json
import math
import shutil

import numpy as np
import pytest
from scipy import stats


from helpers.evals import eval_ok, run_compare, write_bench


def test_same_named_handoff_runs_with_different_juniors_are_refused(tmp_path, capsys, chat_models):
    bench = write_bench(tmp_path / "b.jsonl")
    eval_ok(tmp_path / "grpo" / "handoff", chat_models["a"], bench, "--junior", str(chat_models["b"]), mode="handoff")
    eval_ok(tmp_path / "tandem" / "handoff", chat_models["b"], bench, "--junior", str(chat_models["a"]), mode="handoff")
    runs = [f"grpo={tmp_path / 'grpo'}", f"tandem={tmp_path / 'tandem'}"]
    rc, _, err = run_compare(capsys, tmp_path, *runs)
    assert rc != 0 and len(err) == 1 and "have different juniors" in err[0] and "--allow-mixed" in err[0]
    assert not (tmp_path / "cmp" / "compare.json").exists()

    rc, out, err = run_compare(capsys, tmp_path, *runs, "--allow-mixed")
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert rc == 0 and "junior a" in md and "junior b" in md  # the header names both juniors
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["mixed"]


def test_runs_with_another_schedule_are_refused(tmp_path, capsys, chat_models):
    bench = write_bench(tmp_path / "b.jsonl")
    eval_ok(tmp_path / "x" / "handoff", chat_models["a"], bench, "--junior", str(chat_models["b"]), mode="handoff")
    eval_ok(tmp_path / "y" / "handoff", chat_models["b"], bench, "--junior", str(chat_models["b"]), "--schedule",
            "word",
          mode="handoff")
    rc, _, err = run_compare(capsys, tmp_path, f"x={tmp_path / 'x'}", f"y={tmp_path / 'y'}")
    assert rc != 0 and len(err) == 1 and "differ in schedule" in err[0]


def test_runs_with_another_limit_are_refused_and_mixed_headers_give_each_count(tmp_path, capsys, chat_models):
    bench = write_bench(tmp_path / "b.jsonl")
    eval_ok(tmp_path / "x" / "solo", chat_models["a"], bench)
    eval_ok(tmp_path / "y" / "solo", chat_models["b"], bench, "--limit", "2")
    runs = [f"x={tmp_path / 'x'}", f"y={tmp_path / 'y'}"]
    rc, _, err = run_compare(capsys, tmp_path, *runs)
    assert rc != 0 and len(err) == 1 and "differ in benchmark b (4 problems vs 2" in err[0]
    rc, out, _ = run_compare(capsys, tmp_path, *runs, "--allow-mixed")
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert rc == 0 and "(problems: x 4, y 2)" in md and "200 problems" not in md


def test_a_reordered_copy_reusing_problem_ids_is_refused_even_with_allow_mixed(tmp_path, capsys, chat_models):
    (tmp_path / "copy").mkdir()
    bench, copy = write_bench(tmp_path / "b.jsonl"), write_bench(tmp_path / "copy" / "b.jsonl", order=[3, 2, 1, 0])
    for r in (rows := [json.loads(x) for x in copy.read_text().splitlines()]):
        r["id"] = str(rows.index(r))  # ids 0..3 again, now naming other problems
    copy.write_text("".join(json.dumps(r) + "\n" for r in rows))
    eval_ok(tmp_path / "x" / "solo", chat_models["a"], bench)
    eval_ok(tmp_path / "y" / "solo", chat_models["b"], copy)
    for extra in ([], ["--allow-mixed"]):
        rc, _, err = run_compare(capsys, tmp_path, f"x={tmp_path / 'x'}", f"y={tmp_path / 'y'}", *extra)
        assert rc != 0 and len(err) == 1 and "is not the problem" in err[0], (extra, err)


@pytest.mark.parametrize("key,value",
                         [("sampling", {"temperature": 1.0, "top_p": 0.8, "top_k": 20, "max_new_tokens": 3}),
                          ("n", 1), ("template", "chat"), ("instruction", "reason-step"),
                          ("dtype", "bfloat16")])
def test_each_compared_setting_is_refused_when_it_differs(tmp_path, capsys, chat_models, key, value):
    bench = write_bench(tmp_path / "b.jsonl")
    eval_ok(tmp_path / "x" / "solo", chat_models["a"], bench)
    shutil.copytree(tmp_path / "x", tmp_path / "y")
    cfg_path = tmp_path / "y" / "solo" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg[key] = value
    cfg_path.write_text(json.dumps(cfg))
    rc, _, err = run_compare(capsys, tmp_path, f"x={tmp_path / 'x'}", f"y={tmp_path / 'y'}")
    assert rc != 0 and len(err) == 1 and f"differ in {key}" in err[0]


def _run_and_altered_copy(tmp_path, chat_models, key, value):
    """Solo run x, and y: its copy whose config.json says ``key: value``."""
    bench = write_bench(tmp_path / "b.jsonl")
    eval_ok(tmp_path / "x" / "solo", chat_models["a"], bench)
    shutil.copytree(tmp_path / "x", tmp_path / "y")
    cfg_path = tmp_path / "y" / "solo" / "config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), key: value}))


@pytest.mark.parametrize("key,value", [("seed", 7), ("engine", "vllm")])
def test_seed_and_engine_may_differ(tmp_path, capsys, chat_models, key, value):
    _run_and_altered_copy(tmp_path, chat_models, key, value)
    rc, out, err = run_compare(capsys, tmp_path, f"x={tmp_path / 'x'}", f"y={tmp_path / 'y'}")
    assert rc == 0 and err == [] and "(4 problems)" in (tmp_path / "cmp" / "compare.md").read_text()


# --------------------------------------------------------------------------- directions of the one-sided tests
P = 30  # problems
N = 8  # samples per problem


def _sampling_run(d, schedule, correct_per_problem):
    d.mkdir(parents=True)
    cfg = {"n": N, "sampling": {"temperature": 0.7}, "schedule": {"name": schedule}, "template": "plain",
           "instruction": "paper", "answer_mode": "last-box", "seed": 0, "ks": [1], "benchmarks": ["b"],
           "models": {"senior": str(d), "junior": "j" if schedule != "senior" else None}}
    (d / "config.json").write_text(json.dumps(cfg))
    rows = [{"benchmark": "b", "problem_id": str(i), "sample_idx": s, "correct": bool(s < c), "token_ids": [1],
             "senior_mask": [1]} for i, c in enumerate(correct_per_problem) for s in range(N)]
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _legibility(d, ce, alpha):
    d.mkdir(parents=True)
    summary = {s: {"macro": {"mean": float(np.mean(v)), "se": 0.01}} for s, v in (("ce", ce), ("alpha", alpha))}
    (d / "legibility.json").write_text(json.dumps({"summary": summary, "samples": P * N, "config": {"junior": "j"}}))
    (d / "per_problem.jsonl").write_text("".join(
        json.dumps({"benchmark": "b", "problem_id": str(i), "ce": c, "alpha": a}) + "\n"
        for i, (c, a) in enumerate(zip(ce, alpha, strict=True))))


def _senior(root, good: bool, rng):
    """A senior's solo, handoff and legibility results; the good one solves more and is more legible."""
    base = rng.integers(0, 5, P)  # correct samples out of N per problem
    lift = rng.integers(2, 4, P) if good else 0
    _sampling_run(root / "solo", "senior", np.minimum(base + lift, N))
    _sampling_run(root / "handoff", "paragraph-roundrobin", np.minimum(base + lift, N))
    ce = rng.uniform(1.0, 2.0, P) - (0.3 + rng.uniform(0, 0.1, P) if good else 0)
    alpha = rng.uniform(0.4, 0.6, P) + (0.1 + rng.uniform(0, 0.05, P) if good else 0)
    _legibility(root / "legibility", ce, alpha)


def test_every_one_sided_test_is_small_in_the_right_direction_and_large_in_the_other(tmp_path):
    from tandem_rlvr.eval.measure.compare import run_compare

    rng = np.random.default_rng(0)
    _senior(tmp_path / "good", True, rng)
    _senior(tmp_path / "bad", False, rng)
    runs = [f"good={tmp_path / 'good'}", f"bad={tmp_path / 'bad'}"]
    stats_ = ("solo pass@1", "handoff pass@1 (handoff)", "junior CE", "junior alpha")
    right = run_compare(runs, tmp_path / "c1", baseline="bad", n_boot=100)
    wrong = run_compare(runs, tmp_path / "c2", baseline="good", n_boot=100)
    right = {t["statistic"]: t for t in right["ttests"]}
    wrong = {t["statistic"]: t for t in wrong["ttests"]}
    assert set(right) == set(wrong) == set(stats_)
    for s in stats_:
        assert right[s]["n"] == P and right[s]["p"] < 1e-3, (s, right[s])
        assert wrong[s]["p"] > 1 - 1e-3, (s, wrong[s])

    # the p of one test recomputed from the per-problem fractions by the textbook formula
    good = [json.loads(x) for x in (tmp_path / "good" / "solo" / "samples.jsonl").read_text().splitlines()]
    bad = [json.loads(x) for x in (tmp_path / "bad" / "solo" / "samples.jsonl").read_text().splitlines()]
    frac = lambda rows: np.array([sum(r["correct"] for r in rows if r["problem_id"] == str(i)) / N for i in range(P)])  # noqa: E731
    d = frac(good) - frac(bad)
    t = d.mean() / (d.std(ddof=1) / math.sqrt(P))
    assert right["solo pass@1"]["t"] == pytest.approx(t)
    assert right["solo pass@1"]["p"] == pytest.approx(stats.t.sf(t, P - 1))


@pytest.mark.parametrize("key,value", [("answer_mode", "final-boxes"), ("task", "gsm8k"), ("verifier", "gsm8k@1")])
def test_verdicts_of_different_verifiers_are_refused_even_with_allow_mixed(tmp_path, capsys, chat_models, key, value):
    _run_and_altered_copy(tmp_path, chat_models, key, value)
    for extra in ([], ["--allow-mixed"]):
        rc, _, err = run_compare(capsys, tmp_path, f"x={tmp_path / 'x'}", f"y={tmp_path / 'y'}", *extra)
        assert rc == 2 and len(err) == 1 and f"differ in {key}" in err[0] and "never mixed" in err[0], (extra, err)
        assert not (tmp_path / "cmp" / "compare.json").exists()


def test_a_setting_that_differs_deep_in_a_long_schedule_is_named_in_the_warning():
    from tandem_rlvr.eval.measure.comparable import settings_differences
    from tandem_rlvr.eval.run_files import EvalRun

    long = {"name": "paragraph-roundrobin", "p": 0.5, "K": 32, "first": "senior", "break": "\n\n",
            "max_turn_tokens": 512, "stop": ["\n\n"], "protocol": "text"}  # the protocol past 80 characters
    runs = {n: EvalRun(path=None, config={"schedule": dict(long, protocol=proto)}, rows=[], lines=[])
            for n, proto in (("x", "text"), ("y", "stream"))}
    (line,) = settings_differences(runs, "handoff", handoff=False)
    assert line == 'handoff runs x and y differ in schedule ({"protocol": "text"} vs {"protocol": "stream"})'
