"""Legibility and drift: batched scores equal a direct per-sample computation with transformers,
drift statistics equal a recount from the rows, and bad input fails with file:line, writing nothing."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tandem_rlvr.cli import main
from tandem_rlvr.eval.measure.legibility import pack_batches, score_sequences, token_ce_alpha
from tandem_rlvr.prompting import encode_prompt, format_prompt

from helpers.legibility import rows_for, write_run


def direct_ce_alpha(senior, junior, prompt, response):
    """Unpadded single-sequence forward of each model; CE by F.cross_entropy, alpha by its definition."""
    ids = torch.tensor([prompt + response], device=senior.device)
    P = len(prompt)
    with torch.no_grad():
        ls, lj = senior(ids).logits[0, P - 1:-1], junior(ids).logits[0, P - 1:-1]  # (T, V)
    ce = F.cross_entropy(lj, torch.tensor(response, device=lj.device), reduction="none")
    alpha = torch.minimum(ls.softmax(-1), lj.softmax(-1)).sum(-1)
    return ce.mean().item(), alpha.mean().item()


def test_token_ce_alpha_matches_definitions():
    g = torch.Generator().manual_seed(0)
    ls, lj = torch.randn(7, 11, generator=g), torch.randn(7, 11, generator=g)
    y = torch.randint(0, 11, (7,), generator=g)
    ce, alpha = token_ce_alpha(ls, lj, y)
    assert ce.shape == alpha.shape == (7,)
    assert torch.allclose(ce, F.cross_entropy(lj, y, reduction="none"), atol=1e-6)
    ps, pj = ls.softmax(-1), lj.softmax(-1)
    ref = torch.tensor([sum(min(ps[i, v], pj[i, v]) for v in range(11)) for i in range(7)])
    assert torch.allclose(alpha, ref, atol=1e-6)
    _, same = token_ce_alpha(ls, ls, y)
    assert torch.allclose(same, torch.ones(7), atol=1e-6)


def test_pack_batches_covers_every_row_once_within_budget():
    lengths = [5, 40, 12, 12, 3, 80, 7]
    batches = pack_batches(lengths, 48)
    assert sorted(i for b in batches for i in b) == list(range(7))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 48


def test_batched_scores_equal_direct_transformers_computation(pair):
    senior, junior = pair
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 300, (int(n),), generator=g).tolist() for n in (3, 9, 1, 6, 4)]
    responses = [torch.randint(1, 300, (int(n),), generator=g).tolist() for n in (8, 2, 15, 0, 5)]
    # Small budgets force several padded batches and several output-layer chunks per batch.
    res = score_sequences(senior, junior, prompts, responses, pad_id=0, batch_tokens=40, chunk=4)
    assert res["tokens"].tolist() == [8, 2, 15, 0, 5]
    assert np.isnan(res["ce"][3]) and np.isnan(res["alpha"][3])
    for i in (0, 1, 2, 4):
        ce, alpha = direct_ce_alpha(senior, junior, prompts[i], responses[i])
        assert res["ce"][i] == pytest.approx(ce, abs=1e-4)
        assert res["alpha"][i] == pytest.approx(alpha, abs=1e-5)


def test_eval_legibility_command(tmp_path, tok, pair, legibility_world):
    dirs, bench = legibility_world
    rows = rows_for(tok, range(6), 2, np.random.default_rng(0))
    run = write_run(tmp_path / "solo", rows, dirs["senior"])
    out = tmp_path / "leg"
    assert main(["eval", "legibility", "--samples", str(run), "--junior", dirs["junior"], "--benchmarks", str(bench),
                 "--out", str(out), "--batch-tokens", "64", "--device", "cpu", "--ce-protocol", "ids"]) == 0
    res = json.loads((out / "legibility.json").read_text())
    per_sample = [json.loads(x) for x in (out / "per_sample.jsonl").read_text().splitlines()]
    per_problem = [json.loads(x) for x in (out / "per_problem.jsonl").read_text().splitlines()]
    assert res["samples"] == 12 and len(per_sample) == 12 and len(per_problem) == 6
    for s, r in list(zip(per_sample, rows, strict=True))[:3]:
        prompt = encode_prompt(tok, format_prompt(tok, f"Mia has {r['problem_id']} shells.", "plain"))
        ce, alpha = direct_ce_alpha(*pair, prompt, r["token_ids"])
        assert s["ce"] == pytest.approx(ce, abs=1e-4) and s["alpha"] == pytest.approx(alpha, abs=1e-5)
    by_id = {r["problem_id"]: r for r in per_problem}
    for metric in ("ce", "alpha"):  # aggregates from plain averages of the per-sample numbers
        by_problem = {}
        for s in per_sample:
            by_problem.setdefault(str(s["problem_id"]), []).append(s[metric])
        means = {pid: sum(v) / len(v) for pid, v in by_problem.items()}
        assert len(means) == 6 and all(by_id[pid][metric] == pytest.approx(m) for pid, m in means.items())
        grand = sum(means.values()) / len(means)
        se = (sum((m - grand) ** 2 for m in means.values()) / len(means)) ** 0.5 / len(means) ** 0.5  # SE of a mean
        macro = res["summary"][metric]["macro"]
        assert macro["mean"] == pytest.approx(grand) and macro["se"] == pytest.approx(se, rel=0.05)
    assert res["timing"]["tokens_per_s"] > 0


def _fails(capsys, argv, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err


def test_legibility_bad_input_names_file_and_line_and_writes_nothing(tmp_path, tok, capsys, legibility_world):
    dirs, bench = legibility_world
    out = tmp_path / "leg"
    out.mkdir()
    (out / "legibility.json").write_text("old")
    args = ["--junior", dirs["junior"], "--benchmarks", str(bench), "--out", str(out), "--device", "cpu"]
    rng = np.random.default_rng(1)

    rows = rows_for(tok, [0, 1, 42], 1, rng)  # problem 42 is not in the benchmark file
    _fails(capsys, ["eval", "legibility", "--samples", str(write_run(tmp_path / "a", rows, dirs["senior"]))] + args,
           "a/samples.jsonl:3", "another benchmark set")
    rows = rows_for(tok, [0, 1], 1, rng, benchmark="gsm8k")
    _fails(capsys, ["eval", "legibility", "--samples", str(write_run(tmp_path / "b", rows, dirs["senior"]))] + args,
           "b/samples.jsonl:1", "another benchmark set")
    rows = rows_for(tok, [0, 1], 1, rng)
    rows[1]["response"] += " tail"  # what a different tokenizer's ids would decode to
    _fails(capsys, ["eval", "legibility", "--samples", str(write_run(tmp_path / "c", rows, dirs["senior"]))] + args,
           "c/samples.jsonl:2", "another tokenizer")
    run = write_run(tmp_path / "d", rows_for(tok, [0, 1], 1, rng), dirs["senior"])
    text = (run / "samples.jsonl").read_text()
    (run / "samples.jsonl").write_text(text[: len(text) - 20])
    _fails(capsys, ["eval", "legibility", "--samples", str(run)] + args, "d/samples.jsonl:2", "truncated")
    (tmp_path / "e").mkdir()
    _fails(capsys, ["eval", "legibility", "--samples", str(tmp_path / "e")] + args, "empty run directory")
    assert (out / "legibility.json").read_text() == "old"
    assert sorted(p.name for p in out.iterdir()) == ["legibility.json"]


def _drift_runs(tmp_path, tok, senior):
    """Junior emits ids 1..99; grpo moves half its mass to ids 100..119; tandem a quarter."""
    def pick(over):
        return lambda r: np.where(r.random(30) < over, r.integers(100, 120, 30), r.integers(1, 100, 30))

    rng = np.random.default_rng(2)
    return {name: write_run(tmp_path / name, rows_for(tok, range(6), 4, rng, pick=pick(over)), senior)
            for name, over in (("junior", 0.0), ("grpo", 0.5), ("tandem", 0.25))}


def test_eval_drift_command_recounts_and_recovers(tmp_path, tok, legibility_world):
    dirs, _ = legibility_world
    runs = _drift_runs(tmp_path, tok, dirs["senior"])
    out = tmp_path / "drift"
    assert main(["eval", "drift", "--junior-samples", str(runs["junior"]), "--seniors",
                 f"grpo={runs['grpo']},tandem={runs['tandem']}", "--reference", "grpo", "--candidate", "tandem",
                 "--top-n", "20", "--min-count", "5", "--out", str(out)]) == 0
    res = json.loads((out / "drift.json").read_text())
    # expected values from raw counts with numpy/scipy only (not eval.measure.metrics)

    def token_ids(d):
        return [t for x in (d / "samples.jsonl").read_text().splitlines() for t in json.loads(x)["token_ids"]]

    counts = {n: np.bincount(token_ids(d), minlength=len(tok)) for n, d in runs.items()}
    p = {n: (c + 1.0) / (c.sum() + len(tok)) for n, c in counts.items()}
    for n in ("grpo", "tandem"):
        assert res["models"][n]["kl_to_junior"] == pytest.approx(float(np.sum(p[n] * np.log(p[n] / p["junior"]))))
        assert res["models"][n]["tokens"] == 6 * 4 * 30
    lr = {n: np.log(p[n] / p["junior"]) for n in ("grpo", "tandem")}
    top = [v for v in sorted(range(len(tok)), key=lambda v: -lr["grpo"][v]) if lr["grpo"][v] > 0][:20]
    rec = res["recovery"]
    assert rec["token_ids"] == top and set(top) == set(range(100, 120))
    from scipy import stats

    rho = stats.spearmanr(lr["grpo"][top], lr["tandem"][top] - lr["grpo"][top]).statistic
    assert rec["share_moved_back"] == 1.0 and rec["spearman"]["rho"] == pytest.approx(rho)
    assert res["models"]["grpo"]["kl_to_junior"] > res["models"]["tandem"]["kl_to_junior"] > 0
    assert res["survival"]["frequent_tokens"] > 50
    assert len(res["survival"]["curves"]["grpo"]) == len(res["survival"]["grid"])
    top = res["over_emitted"]["rows"][0]
    assert 100 <= top["id"] < 120 and top["token"] == tok.decode([top["id"]]) and top["counts"]["junior"] == 0
    header = (out / "over_emitted.csv").read_text().splitlines()[0]
    assert header == "token,id,count_junior,count_grpo,count_tandem,log_ratio_grpo,log_ratio_tandem"
    assert "Recovery" in (out / "drift.md").read_text()


def test_drift_bad_input(tmp_path, tok, capsys, legibility_world):
    dirs, _ = legibility_world
    runs = _drift_runs(tmp_path, tok, dirs["senior"])
    out = tmp_path / "drift"
    base = ["eval", "drift", "--junior-samples", str(runs["junior"]), "--out", str(out)]
    _fails(capsys, base + ["--seniors", f"grpo={runs['grpo']}", "--candidate", "ppo"], "--candidate 'ppo'")
    other = write_run(tmp_path / "other", rows_for(tok, [0], 1, np.random.default_rng(3), benchmark="gsm8k"),
                      dirs["senior"], benchmarks=("gsm8k",))
    _fails(capsys, base + ["--seniors", f"grpo={runs['grpo']},x={other}"], "other/samples.jsonl:1",
           "another benchmark set")
    hand = write_run(tmp_path / "hand", rows_for(tok, range(6), 1, np.random.default_rng(4)), dirs["senior"],
                     schedule="paragraph-roundrobin")
    _fails(capsys, base + ["--seniors", f"grpo={hand}"], "handoff run")
    assert not out.exists()


def _counts(V=30, **emitted):
    c = np.zeros(V, dtype=np.int64)
    for ids, k in emitted.values():
        c[list(ids)] += k
    return c


def test_only_tokens_the_reference_emitted_can_be_over_emitted():
    from tandem_rlvr.eval.report.tables import drift_tables, recovery_sentence
    from tandem_rlvr.eval.measure.drift import drift_statistics

    # junior: ids 0-9 x 20 (200 tokens); grpo: ids 0-9 x 10, id 10 x 8, id 11 x 2 (110); ids 12-29 nobody emits.
    # Smoothed, every unemitted id has log(p_grpo/p_jun) = log(230/140) > 0; ids 0-9 have 11*230/(140*21) < 1.
    counts = {"junior": _counts(a=(range(10), 20)), "grpo": _counts(a=(range(10), 10), b=([10], 8), c=([11], 2)),
              "tandem": _counts(a=(range(10), 11))}
    res = drift_statistics(counts, "junior", "grpo", "tandem", min_count=5)
    rec = res["recovery"]
    assert rec["qualifying"] == 1 and rec["token_ids"] == [10]  # id 11 (2 < 5 emissions) and ids 12-29 do not count
    assert rec["share_moved_back"] is None and rec["spearman"]["rho"] is None and rec["defined"] is False
    assert "not defined" in recovery_sentence(rec) and "1 tokens qualify" in recovery_sentence(rec)
    assert drift_tables(res)[1].rows[0][4:] == ["not defined"] * 3
    assert [r["id"] for r in res["over_emitted"]["rows"]] == [10]


def test_recovery_share_over_qualifying_tokens_matches_hand_count():
    from tandem_rlvr.eval.measure.drift import drift_statistics

    # grpo and tandem both write 196 tokens, so log(p_tandem/p_grpo) < 0 exactly where tandem's count is lower:
    # ids 10-15 (4 < 8) move back, ids 16-21 (12 > 8) do not: 6 of 12 = 0.5.
    counts = {"junior": _counts(a=(range(10), 20)), "grpo": _counts(a=(range(10), 10), b=(range(10, 22), 8)),
              "tandem": _counts(a=(range(10), 10), b=(range(10, 16), 4), c=(range(16, 22), 12))}
    rec = drift_statistics(counts, "junior", "grpo", "tandem", min_count=5)["recovery"]
    assert rec["qualifying"] == 12 and sorted(rec["token_ids"]) == list(range(10, 22))
    assert rec["share_moved_back"] == 0.5


def test_a_candidate_with_the_juniors_counts_is_flagged_as_trivial_recovery():
    from tandem_rlvr.eval.report.tables import recovery_sentence
    from tandem_rlvr.eval.measure.drift import drift_statistics

    junior = _counts(a=(range(10), 20))
    counts = {"junior": junior, "grpo": _counts(a=(range(10), 10), b=(range(10, 22), 8)), "tandem": junior.copy()}
    rec = drift_statistics(counts, "junior", "grpo", "tandem", min_count=5)["recovery"]
    # r_cand = 0 on every token, so the shift is -r_ref: all 12 move back and rho is exactly -1
    assert rec["share_moved_back"] == 1.0 and rec["candidate_is_junior"] and "trivially" in recovery_sentence(rec)
