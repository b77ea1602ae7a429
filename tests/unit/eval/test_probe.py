"""``tandem probe forced-junior``: the forced position is where the two greedy paths first part, the
forced token is the junior's, the summary counts what it says; resumable; a finished probe is a no-op.

The expected positions come from a plain full-sequence forward of each model (no packing, no
batching), not from the probe's batched teacher forcing.
"""

from __future__ import annotations

import json

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tandem_rlvr.cli import main
from tandem_rlvr.eval.sample.probe import bootstrap_interval, choose_position, summarize

from helpers.evals import write_bench


def _solo_run(tmp_path, senior, bench):
    out = tmp_path / "solo"
    assert main(["eval", "solo", "--senior", str(senior), "--benchmarks", str(bench), "--n", "2", "--max-tokens", "6",
                 "--template", "plain", "--out", str(out)]) == 0
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    for r in rows:  # random models answer nothing right: call every sample correct, so all are probed
        r["correct"] = True
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out, rows


def _plain_argmax(model_dir, prompt_text: str, response_ids: list[int]) -> np.ndarray:
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    p = tok.encode(prompt_text, add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([p + response_ids])).logits[0]  # (P + T, V)
    return logits[len(p) - 1: len(p) - 1 + len(response_ids)].argmax(-1).numpy()


def test_first_position_is_where_the_greedy_paths_first_differ(tmp_path, chat_models):
    bench = write_bench(tmp_path / "b.jsonl")
    run, rows = _solo_run(tmp_path, chat_models["a"], bench)
    out = tmp_path / "probe"
    assert main(["probe", "forced-junior", "--samples", str(run), "--junior", str(chat_models["b"]), "--out", str(out),
                 "--n-boot", "200", "--device", "cpu", "--dtype", "float32"]) == 0
    probe_rows = map(json.loads, (out / "probe.jsonl").read_text().splitlines())
    probed = {(r["problem_id"], r["sample_idx"]): r for r in probe_rows}
    problems = {json.loads(x)["id"]: json.loads(x)["problem"] for x in bench.read_text().splitlines()}
    for r in rows:
        prompt = problems[r["problem_id"]] + "\n\n"  # the plain template
        sa = _plain_argmax(chat_models["a"], prompt, r["token_ids"])
        ja = _plain_argmax(chat_models["b"], prompt, r["token_ids"])
        differ = np.flatnonzero(sa != ja)
        got = probed[(r["problem_id"], r["sample_idx"])]
        assert got["position"] == (int(differ[0]) if differ.size else None)
        if differ.size:
            tok = AutoTokenizer.from_pretrained(chat_models["b"])
            assert got["junior_token"] == tok.decode([int(ja[differ[0]])])
    summary = json.loads((out / "probe.json").read_text())
    n_probed = sum(r["position"] is not None for r in probed.values())
    assert summary["correct_solo_samples"] == len(rows) == summary["overall"]["probed"] + summary["no_divergence"]
    assert summary["overall"]["probed"] == n_probed
    assert sum(b["probed"] for b in summary["by_relative_position"].values()) == n_probed


def test_a_junior_equal_to_the_senior_never_diverges(tmp_path, chat_models):
    run, rows = _solo_run(tmp_path, chat_models["a"], write_bench(tmp_path / "b.jsonl"))
    out = tmp_path / "probe"
    assert main(["probe", "forced-junior", "--samples", str(run), "--junior", str(chat_models["a"]), "--out", str(out),
                 "--position", "random", "--device", "cpu", "--dtype", "float32"]) == 0
    summary = json.loads((out / "probe.json").read_text())
    assert summary["no_divergence"] == len(rows) and summary["overall"]["success_rate"] is None


def test_a_finished_probe_rerun_is_a_no_op_and_other_settings_are_refused(tmp_path, capsys, chat_models):
    run, _ = _solo_run(tmp_path, chat_models["a"], write_bench(tmp_path / "b.jsonl"))
    out = tmp_path / "probe"
    args = ["probe", "forced-junior", "--samples", str(run), "--junior", str(chat_models["b"]), "--out", str(out),
            "--n-boot", "100", "--device", "cpu", "--dtype", "float32", "--batch-size", "3"]
    assert main(args) == 0
    before = (out / "probe.jsonl").read_bytes()
    assert main(args) == 0 and (out / "probe.jsonl").read_bytes() == before
    capsys.readouterr()
    assert main([*args, "--position", "random"]) == 2
    assert "different position" in capsys.readouterr().err


def test_choose_position_and_the_bootstrap_interval_by_hand():
    s, j = np.array([5, 6, 7, 8]), np.array([5, 9, 7, 1])
    assert choose_position(s, j, "first", np.random.default_rng(0)) == 1
    assert choose_position(s, j, "random", np.random.default_rng(0)) in (1, 3)
    assert choose_position(s, s, "first", np.random.default_rng(0)) is None
    assert bootstrap_interval([1.0, 1.0, 1.0], 100, 0) == [1.0, 1.0]  # no spread, no interval width
    lo, hi = bootstrap_interval([0.0, 1.0] * 50, 2000, 0)
    assert lo < 0.5 < hi and hi - lo < 0.25  # about 0.5 +- 1.96 * 0.05
    rows = [{"position": 1, "relative_position": 0.1, "correct": True},
            {"position": 9, "relative_position": 0.9, "correct": False},
            {"position": None, "relative_position": None, "correct": None}]
    res = summarize(rows, 3, 100, 0)
    assert res["overall"]["success_rate"] == 0.5 and res["no_divergence"] == 1
    assert res["by_relative_position"]["0-25%"]["success_rate"] == 1.0
    assert res["by_relative_position"]["75-100%"]["success_rate"] == 0.0
