"""The batched two-cache decoder equals the slow full-prefix reference, token for token."""

import pytest
import torch

from reference.decoder import reference_generate, reference_surfaces
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.schedule import REGISTRY, BernoulliRedraw, make_schedule
from tandem_rlvr.decoding.tandem import TandemDecoder

from reference.schedules import boundary_ids

PROMPTS = ["Mia has 7 shells.", "Leo has 9 cards. He gives away 4!\n\n", "Tom", "The answer is"]
EXEMPT: dict[str, str] = {}  # registered schedules the reference does not decode, each with its reason
SCHEDULES = [name for name in REGISTRY if name not in EXEMPT]


def test_every_registered_schedule_is_checked_against_the_reference_or_exempt_by_name():
    """A schedule added to the registry joins the tests below (its rule decoded by the reference) unless it
    is named in EXEMPT; today every built-in one is a rule, so none is exempt."""
    assert set(SCHEDULES) | set(EXEMPT) == set(REGISTRY) and not set(SCHEDULES) & set(EXEMPT)
    assert EXEMPT == {}
    assert {"senior", "word", "word-atomic", "paragraph-roundrobin", "blankline-token-roundrobin", "chunk-word",
            "alternating"} <= set(SCHEDULES)  # the twelve of the module docstring, spot-checked by name


def _run_both(tok, pair, name, sampling, p=0.5, K=4):
    senior, junior = pair
    prompts = [tok.encode(x) for x in PROMPTS]
    seeds = [11, 22, 33, 44]
    dec = TandemDecoder(senior, junior, make_schedule(name, tok, p=p, K=K, vocab_size=len(tok)), sampling,
                        eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    out = dec.generate(prompts, seeds)
    for b, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
        ref_toks, ref_flags, ref_lps = reference_generate(
            senior, junior, name, sampling, prompt, seed, [tok.eos_token_id], boundary_ids(tok, name), p=p, K=K,
            surfaces=reference_surfaces(tok))
        assert out.row_tokens(b) == ref_toks, f"{name} row {b}"
        assert out.row_mask(b) == [int(f) for f in ref_flags], f"{name} row {b} authorship"
        torch.testing.assert_close(out.logprobs[b, : len(ref_lps)], torch.tensor(ref_lps), atol=1e-4, rtol=1e-4)
    return out


@pytest.mark.parametrize("name", SCHEDULES)
def test_fast_decoder_equals_reference_greedy(tok, pair, name):
    _run_both(tok, pair, name, SamplingParams(temperature=0.0, max_new_tokens=24))


@pytest.mark.parametrize("name", SCHEDULES)
def test_fast_decoder_equals_reference_seeded_sampling(tok, pair, name):
    _run_both(tok, pair, name, SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_new_tokens=24))


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0.6, max_new_tokens=24),
                                      SamplingParams(temperature=0.7, top_p=0.8, top_k=20, max_new_tokens=24),
                                      SamplingParams(temperature=1.3, top_p=0.5, max_new_tokens=24),
                                      SamplingParams(temperature=1.0, top_k=3, max_new_tokens=24)],
                         ids=["t0.6", "eval", "top-p", "top-k"])
def test_fast_decoder_equals_reference_under_each_filter(tok, pair, sampling):
    _run_both(tok, pair, "word", sampling)


@pytest.mark.parametrize("name", ["word", "word-atomic"])
def test_k_backstop_hands_over_only_at_multiples_of_K_in_both_decoders(tok, pair, name):
    """No boundary ids: only the backstop redraws, after each run of K = 4 tokens (paper: c += 1, redraw
    at c >= K), so a row's author can change only at positions 4, 8, 12, ... in the fast decoder and
    in the reference alike (word-atomic: the incoming author may write only EOS there)."""
    senior, junior = pair
    K, B = 4, 12
    sp = SamplingParams(temperature=1.0, max_new_tokens=18)
    sched = BernoulliRedraw(name, 0.5, torch.zeros(len(tok), dtype=torch.bool), K, atomic=name == "word-atomic")
    dec = TandemDecoder(senior, junior, sched, sp, eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    prompts, seeds = [tok.encode(PROMPTS[b % len(PROMPTS)]) for b in range(B)], list(range(100, 100 + B))
    out = dec.generate(prompts, seeds)
    changes = set()
    for b in range(B):
        _, ref_flags, _ = reference_generate(senior, junior, name, sp, prompts[b], seeds[b], [tok.eos_token_id],
                                             set(), p=0.5, K=K)
        flags = out.row_mask(b)
        assert flags == [int(f) for f in ref_flags], f"row {b}"
        changes |= {t for t in range(1, len(flags)) if flags[t] != flags[t - 1]}
    assert changes and all(t % K == 0 for t in changes), sorted(changes)


def test_senior_always_active_equals_plain_senior_sampling(tok, pair):
    """'senior' schedule in a tandem decoder (junior loaded) = the solo decoder = reference solo."""
    senior, junior = pair
    sp = SamplingParams(temperature=0.8, max_new_tokens=20)
    prompts = [tok.encode(x) for x in PROMPTS]
    solo = TandemDecoder(senior, None, make_schedule("senior"), sp, [tok.eos_token_id], tok.pad_token_id)
    tandem_p1 = TandemDecoder(senior, junior, make_schedule("word", tok, p=1.0), sp, [tok.eos_token_id],
                              tok.pad_token_id)
    a, b = solo.generate(prompts, [1, 2, 3, 4]), tandem_p1.generate(prompts, [1, 2, 3, 4])
    assert torch.equal(a.tokens, b.tokens) and bool(b.senior_mask[b.response_mask].all())
    for i, prompt in enumerate(prompts):
        ref, _, _ = reference_generate(senior, None, "senior", sp, prompt, i + 1, [tok.eos_token_id])
        assert a.row_tokens(i) == ref


def _other_family(name: str, vocab: int, seed: int):
    """A tiny random model of a family whose logits are rescaled after the LM head."""
    from transformers import CohereConfig, CohereForCausalLM, GraniteConfig, GraniteForCausalLM

    torch.manual_seed(seed)
    kw = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False)
    if name == "cohere":
        model = CohereForCausalLM(CohereConfig(logit_scale=0.25, **kw))
    else:
        model = GraniteForCausalLM(GraniteConfig(logits_scaling=4.0, **kw))
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model.eval()


@pytest.mark.parametrize("family", ["cohere", "granite"])
def test_fast_decoder_applies_the_family_logit_scale_like_transformers(tok, family):
    """Cohere multiplies the logits by logit_scale, Granite divides by logits_scaling: sampled
    tokens and log-probs must match the full-prefix forward of transformers itself."""
    from conftest import test_device

    pair = (_other_family(family, len(tok), 0).to(test_device()), _other_family(family, len(tok), 1).to(test_device()))
    _run_both(tok, pair, "word", SamplingParams(temperature=1.0, max_new_tokens=16))


def test_preallocated_layer_equals_concatenation_even_past_capacity():
    from transformers.cache_utils import DynamicLayer

    from tandem_rlvr.decoding.kvcache import PreallocatedLayer

    g = torch.Generator().manual_seed(0)
    pre, cat = PreallocatedLayer(capacity=4), DynamicLayer()
    for S in (3, 1, 1, 2, 5):  # 3 + 1 fits; the rest grows the buffer twice
        k, v = torch.randn(2, 2, S, 8, generator=g), torch.randn(2, 2, S, 8, generator=g)
        kp, vp = pre.update(k, v)
        kc, vc = cat.update(k, v)
        assert torch.equal(kp, kc) and torch.equal(vp, vc) and pre.get_seq_length() == cat.get_seq_length()
    assert pre.get_mask_sizes(1) == cat.get_mask_sizes(1)
