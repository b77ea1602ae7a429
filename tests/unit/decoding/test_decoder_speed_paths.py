"""The decoder's speed paths change nothing a row produces: the lean decode step equals
transformers' forward, and dropping finished rows from the batch (compaction) leaves every
row's tokens, authorship and log-probs as the slow full-prefix reference computes them."""

import pytest
import torch

from tandem_rlvr.decoding.lean import LeanBody
from reference.decoder import reference_boundary_ids, reference_generate, reference_surfaces
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.schedule import make_schedule
from tandem_rlvr.decoding.tandem import ModelRunner, TandemDecoder, left_pad
from tandem_rlvr.errors import TandemError


def _family(name: str, vocab: int, seed: int = 0):
    """A tiny random model of ``name`` with grouped KV heads (and biases where the family has them)."""
    import transformers as T

    torch.manual_seed(seed)
    kw = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    if name == "llama":
        return T.LlamaForCausalLM(T.LlamaConfig(attention_bias=True, rope_theta=5000.0, **kw)).eval()
    if name == "llama3-rope":
        rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64, "rope_theta": 10000.0}
        return T.LlamaForCausalLM(T.LlamaConfig(rope_parameters=rope, **kw)).eval()
    if name == "qwen2":
        return T.Qwen2ForCausalLM(T.Qwen2Config(**kw)).eval()
    if name == "qwen3":
        return T.Qwen3ForCausalLM(T.Qwen3Config(head_dim=16, **kw)).eval()
    if name == "mistral":
        return T.MistralForCausalLM(T.MistralConfig(sliding_window=None, **kw)).eval()
    raise ValueError(name)


@pytest.mark.parametrize("family", ["llama", "llama3-rope", "qwen2", "qwen3", "mistral"])
def test_lean_step_equals_transformers_forward(family):
    """Prefill two left-padded rows, then decode 6 tokens both ways: the lean step with the
    pre-allocated cache, and transformers' own forward with its own concatenating cache."""
    from conftest import test_device

    if test_device().startswith("cuda"):  # exact float32 matmuls, as the reference tests use
        torch.backends.cuda.matmul.allow_tf32 = False
    model = _family(family, 97).to(test_device())
    assert LeanBody.of(model) is not None
    prompts = [[5, 6, 7, 8, 9], [11, 12]]
    ids, attn, pos = (x.to(test_device()) for x in left_pad(prompts, 0))
    lean, plain = ModelRunner(model, preallocate=True), ModelRunner(model, preallocate=False)
    with torch.no_grad():
        lean.prefill(ids, attn, pos, capacity=16)
        plain.prefill(ids, attn, pos)
        assert lean.use_lean and not plain.use_lean
        last = pos[:, -1:]
        for t, nxt in enumerate([[3, 4], [20, 21], [1, 2], [40, 41], [7, 7], [90, 3]]):
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            last = last + 1
            step_ids = torch.tensor(nxt, device=ids.device)[:, None]
            lean.step(step_ids, last, attn, attn.bool()[:, None, None, :])
            plain.step(step_ids, last, attn, None)
            torch.testing.assert_close(lean.hidden, plain.hidden, atol=2e-5, rtol=1e-4, msg=f"{family} step {t}")


def test_lean_step_refuses_what_it_does_not_implement():
    import transformers as T

    kw = dict(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
              num_key_value_heads=1)
    assert LeanBody.of(T.MistralForCausalLM(T.MistralConfig(sliding_window=8, **kw))) is None
    assert LeanBody.of(T.Qwen2ForCausalLM(T.Qwen2Config(use_sliding_window=True, sliding_window=8,
                                                        max_window_layers=0, **kw))) is None
    assert LeanBody.of(T.GemmaForCausalLM(T.GemmaConfig(head_dim=16, **kw))) is None
    assert LeanBody.of(T.LlamaForCausalLM(T.LlamaConfig(hidden_act="gelu", **kw))) is None


PROMPTS = ["Mia has 7 shells.", "Leo has 9 cards. He gives away 4!\n\n", "Tom", "The answer is", "She finds 5",
           "So 3 minus 1"]


def _uneven(tok, pair, name, caps, compact, eos):
    senior, junior = pair
    prompts = [tok.encode(PROMPTS[b % len(PROMPTS)]) for b in range(len(caps))]
    seeds = [100 + b for b in range(len(caps))]
    sp = SamplingParams(temperature=1.0, max_new_tokens=max(caps))
    dec = TandemDecoder(senior, junior if name != "senior" else None,
                        make_schedule(name, tok, p=0.5, K=4, vocab_size=len(tok)),
                        sp, eos_ids=eos, pad_id=tok.pad_token_id, compact=compact)
    return prompts, seeds, dec.generate(prompts, seeds, max_new_tokens=caps)


def _frequent_eos(tok, pair, name, caps):
    """EOS plus the token these models write most often (outside the first two steps), so
    that rows also end early, at steps that differ from row to row."""
    out = _uneven(tok, pair, name, caps, None, [tok.eos_token_id])[2]
    counts = torch.bincount(out.tokens[:, 2:][out.response_mask[:, 2:]], minlength=len(tok))
    return [tok.eos_token_id, int(counts.argmax())]


@pytest.mark.parametrize("name", ["word", "word-atomic", "paragraph-roundrobin", "senior"])
@pytest.mark.parametrize("compact", [0.0, 0.5])
def test_compacted_rows_equal_the_reference_with_very_uneven_lengths(tok, pair, name, compact):
    """Per-row caps from 1 to 30 tokens plus a frequent token as a second EOS: rows end at very
    different steps and leave the batch (at every step with compact=0). Each row must still be
    what the one-row full-prefix reference writes under its own cap."""
    caps = [1, 30, 3, 17, 2, 26, 9, 30]
    eos = _frequent_eos(tok, pair, name, caps)
    prompts, seeds, out = _uneven(tok, pair, name, caps, compact, eos)
    boundary = reference_boundary_ids(tok, "word") if name.startswith("word") else set()
    ended_early = 0
    for b, cap in enumerate(caps):
        ref_toks, ref_flags, ref_lps = reference_generate(
            pair[0], pair[1], name, SamplingParams(temperature=1.0, max_new_tokens=cap), prompts[b], seeds[b], eos,
            boundary, p=0.5, K=4, surfaces=reference_surfaces(tok))
        assert out.row_tokens(b) == ref_toks, f"row {b}"
        assert out.row_mask(b) == [int(f) for f in ref_flags], f"row {b} authorship"
        torch.testing.assert_close(out.logprobs[b, : len(ref_lps)], torch.tensor(ref_lps), atol=1e-4, rtol=1e-4)
        assert bool(out.finished[b]) == (ref_toks[-1] in eos), f"row {b} finished flag"
        ended_early += len(ref_toks) < cap
    assert len(set(int(x) for x in out.lengths)) >= 4 and ended_early >= 1  # uneven, and some by EOS


def test_compaction_on_or_off_gives_identical_rollouts(tok, pair):
    caps = [1, 30, 3, 17, 2, 26, 9, 30]
    eos = _frequent_eos(tok, pair, "word", caps)
    outs = [_uneven(tok, pair, "word", caps, c, eos)[2] for c in (None, 0.0, 0.25, 1.0)]
    for o in outs[1:]:
        assert torch.equal(o.tokens, outs[0].tokens) and torch.equal(o.senior_mask, outs[0].senior_mask)
        assert torch.equal(o.lengths, outs[0].lengths) and torch.equal(o.finished, outs[0].finished)
        torch.testing.assert_close(o.logprobs, outs[0].logprobs, atol=1e-5, rtol=1e-5)


def test_per_row_caps_are_checked(tok, pair):
    dec = TandemDecoder(pair[0], None, make_schedule("senior"), SamplingParams(max_new_tokens=4), [], tok.pad_token_id)
    with pytest.raises(TandemError, match="one cap >= 1 per prompt"):
        dec.generate([[1], [2]], [0, 1], max_new_tokens=[3])
    with pytest.raises(TandemError, match="one cap >= 1 per prompt"):
        dec.generate([[1], [2]], [0, 1], max_new_tokens=[3, 0])
    out = dec.generate([[1], [2]], [0, 1], max_new_tokens=[2, 9])  # 9 is clipped to the global 4
    assert out.lengths.tolist() == [2, 4] and out.tokens.shape == (2, 4)


def test_two_bodies_split_the_threads_and_the_count_is_restored(tok, pair):
    """On a CPU the bodies run in turn with all N threads by default; forced parallel, they run in
    two threads with N // 2 each (the same N cores as solo); torch's count is N again afterwards."""
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        default = TandemDecoder(*pair, make_schedule("word", tok, vocab_size=len(tok)),
                                SamplingParams(max_new_tokens=3),
                                [], tok.pad_token_id)
        assert default.threads() == (False, None)
        dec = TandemDecoder(*pair, make_schedule("word", tok, vocab_size=len(tok)), SamplingParams(max_new_tokens=3),
                            [], tok.pad_token_id, parallel=True)
        assert dec.threads() == (True, 1)
        seen = []
        orig = dec.junior.step

        def spy(*a, **k):
            seen.append(torch.get_num_threads())
            return orig(*a, **k)

        dec.junior.step = spy
        dec.generate([[1, 2]], [0])
        assert seen and set(seen) == {1} and torch.get_num_threads() == 2
        torch.set_num_threads(1)
        assert dec.threads() == (True, 1)
        serial = TandemDecoder(*pair, make_schedule("word", tok, vocab_size=len(tok)), SamplingParams(max_new_tokens=3),
                               [], tok.pad_token_id, parallel=False)
        torch.set_num_threads(4)
        assert serial.threads() == (False, None)
    finally:
        torch.set_num_threads(saved)


def test_lognormal_lengths_have_the_asked_median_and_stay_in_range():
    import numpy as np

    from tandem_rlvr.recipes.bench import lognormal_lengths

    L = np.array(lognormal_lengths(4001, 512, median_frac=0.25, sigma=1.0, seed=3))
    assert L.min() >= 1 and L.max() <= 512
    assert abs(np.median(L) - 128) <= 8  # median of the log-normal: exp(log(128)) = 128
    assert (L == 512).mean() < 0.1 and L.max() == 512  # a real tail, clipped at the cap


def test_forced_lengths_make_generate_write_exactly_each_rows_tokens(tok, pair):
    """The benchmark's generate() baseline does the same useful work as our decoder: row b emits
    exactly L_b tokens, the last one EOS, then padding."""
    from transformers import LogitsProcessorList

    from tandem_rlvr.recipes.bench import _ForcedLengths

    model, L = pair[0], [1, 7, 3, 12]
    ids, attn, _ = left_pad([tok.encode(p) for p in PROMPTS[:4]], tok.pad_token_id)
    eos = tok.eos_token_id
    out = model.generate(input_ids=ids, attention_mask=attn, do_sample=True, top_k=0, max_new_tokens=12,
                         logits_processor=LogitsProcessorList([_ForcedLengths(L, ids.shape[1], eos)]),
                         eos_token_id=eos, pad_token_id=tok.pad_token_id)
    new = out[:, ids.shape[1]:]
    for b, n in enumerate(L):
        row = new[b].tolist()
        assert row[n - 1] == eos and eos not in row[: n - 1], (b, row)


def test_bench_decode_lognormal_counts_useful_tokens(capsys, model_dir):
    import json

    from tandem_rlvr.recipes.bench import lognormal_lengths
    from tandem_rlvr.cli import main

    assert main(["bench", "decode", "--json", "--senior", str(model_dir), "--batch", "6", "--new-tokens", "16",
                 "--repeats", "1", "--threads", "1", "--lengths", "lognormal"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["useful_tokens"] == sum(lognormal_lengths(6,
                                                         16)) and res["padded_tokens"] == 6 * max(lognormal_lengths(6,
                                                                                                                    16))
    assert res["threads"] == 1 and res["budget"]["tandem"].startswith("1 intra-op thread")
    for key in ("solo_tok_s", "tandem_tok_s", "hf_generate_tok_s", "solo_no_compact_tok_s", "tandem_no_compact_tok_s"):
        assert res[key] > 0
