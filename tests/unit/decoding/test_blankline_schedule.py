"""``blankline-token-roundrobin``: the release's in-stream handoff (its patched vLLM's ``sentence``).

The rule, from the release's ``TandemSampler._sentence_select``: the boundary ids are those whose
decoded text ends with "\\n\\n" (``tokenizer.decode([id]).endswith("\\n\\n")``, as its evaluation
script builds them); token t is the senior's iff the number of boundary ids among tokens 0..t-1 is
even; ``prob_primary`` plays no part. ``plain_authors`` below writes that rule out; the schedule
is checked against it on hand-made streams, through ``replay``, our transformers decoder and the
vLLM logits processor (on CPU through stub vLLM types, as in ``test_chunk_schedules``).
"""

from __future__ import annotations

import types

import torch

from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.boundary import boundary_mask
from tandem_rlvr.decoding.schedule import make_schedule, replay
from tandem_rlvr.decoding.tandem import TandemDecoder

from reference.schedules import plain_generate_by

NAME = "blankline-token-roundrobin"


def blank_line_ids(tok) -> set[int]:
    """The release's boundary set: ids whose decoded text ends with a blank line."""
    return {i for i in range(tok.vocab_size) if tok.decode([i]).endswith("\n\n")}


def plain_authors(tokens: list[int], boundary: set[int]) -> list[bool]:
    """True = senior: an even number of boundary tokens before the position."""
    return [sum(t in boundary for t in tokens[:i]) % 2 == 0 for i in range(len(tokens))]


def _id(tok, text: str) -> int:
    (i,) = [i for i in range(len(tok)) if tok.decode([i]) == text]
    return i


def test_boundary_set_is_the_ids_whose_decoded_text_ends_with_a_blank_line(tok):
    mask = boundary_mask(tok, "blank-line-end", len(tok))
    assert set(torch.nonzero(mask).flatten().tolist()) == blank_line_ids(tok) == {_id(tok, ".\n\n")}


def test_authors_by_hand_on_a_made_up_stream(tok):
    word, nl, dot_nl, dot_nn = _id(tok, "M"), _id(tok, "\n"), _id(tok, ".\n"), _id(tok, ".\n\n")
    stream = [word, dot_nn, word, nl, nl, word, dot_nl, nl, word, dot_nn, dot_nn, word]
    # ".\n\n" at 1, 9 and 10 fire (each flips the author of the next token); "\n","\n" (3-4) and
    # ".\n","\n" (6-7) are blank lines split over two tokens and do not; the second ".\n\n" of a run fires too.
    expected = [True, True, False, False, False, False, False, False, False, False, True, False]
    assert plain_authors(stream, {dot_nn}) == expected
    for p in (0.5, 0.1, 1.0):  # p is ignored
        assert replay(make_schedule(NAME, tok, p=p, vocab_size=len(tok)), torch.tensor([3]), [stream])[0] == expected
    # paragraph-roundrobin is another schedule: it also fires at the two split blank lines
    para = replay(make_schedule("paragraph-roundrobin", tok, vocab_size=len(tok)), torch.tensor([3]), [stream])[0]
    assert para != expected


def test_schedule_equals_the_plain_rule_on_random_newline_heavy_streams(tok):
    pool = torch.tensor([_id(tok, s) for s in (".\n\n", "\n", ".\n", "M", " ", "7")] + [_id(tok, ".\n\n")] * 2)
    g = torch.Generator().manual_seed(5)
    tokens = pool[torch.randint(0, len(pool), (32, 60), generator=g)].tolist()
    got = replay(make_schedule(NAME, tok, vocab_size=len(tok)), torch.arange(32), tokens)
    boundary = blank_line_ids(tok)
    assert got == [plain_authors(t, boundary) for t in tokens]


def plain_generate(senior, junior, sampling, prompt, seed, eos, boundary):
    """Full-prefix sampling, the author from the rule over the tokens so far (strict alternation,
    senior first, after every token in ``boundary``)."""
    return plain_generate_by(senior, junior, lambda toks: sum(x in boundary for x in toks) % 2 == 0, sampling,
                             prompt, seed, eos)


def test_hf_decoder_equals_plain_generation(tok, pair):
    senior, junior = (m.cpu() for m in pair)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=60)
    prompts = [tok.encode(x) for x in ("Mia has 7 shells.", "Leo has 9 cards. He gives away 4!\n\n")]
    seeds = [11, 22]
    dec = TandemDecoder(senior, junior, make_schedule(NAME, tok, vocab_size=len(tok)), sampling,
                        eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    out = dec.generate(prompts, seeds)
    boundary, fired = blank_line_ids(tok), 0
    for b, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
        toks, flags = plain_generate(senior, junior, sampling, prompt, seed, tok.eos_token_id, boundary)
        assert out.row_tokens(b) == toks and out.row_mask(b) == [int(f) for f in flags], f"row {b}"
        fired += sum(t in boundary for t in toks[:-1])
    assert fired > 0, "no boundary token was sampled: the check is vacuous"


def test_vllm_processor_picks_the_plain_rules_author(tok, monkeypatch):
    from helpers.vllm_stubs import processor_class_on_stubs

    TandemLogitsProcessor = processor_class_on_stubs(monkeypatch)
    V = len(tok)
    proc = TandemLogitsProcessor.__new__(TandemLogitsProcessor)
    proc.active, proc.rows, proc.schedules, proc.tokenizer, proc.Vs, proc.Vj = True, {}, {}, tok, V, [V]  # one junior
    pool = torch.tensor([_id(tok, s) for s in (".\n\n", "\n", "M")])
    streams = pool[torch.randint(0, 3, (3, 30), generator=torch.Generator().manual_seed(1))].tolist()
    outs = [[] for _ in streams]
    for i, out in enumerate(outs):  # no seed: the schedule needs no coins
        params = types.SimpleNamespace(extra_args={"tandem": {"schedule": NAME, "p": 0.5, "K": 32}}, seed=None)
        proc.rows[i] = proc._new_row(params, out)
    boundary = blank_line_ids(tok)
    t = 0
    while t < 30:
        picked = proc.apply(torch.cat([torch.zeros(3, V), torch.ones(3, V)], dim=1))  # senior half 0, junior 1
        for b, stream in enumerate(streams):
            assert bool((picked[b] == 0).all()) == plain_authors(stream[: t + 1], boundary)[t], (b, t)
        step = 1 + (t % 2)
        for b, out in enumerate(outs):
            out.extend(streams[b][t: t + step])
        t += step


def test_registered_for_every_engine_and_needs_no_seed():
    from tandem_rlvr.decoding.schedule import schedule_kind
    from tandem_rlvr.engines.request_args import parse

    kind = schedule_kind(NAME)
    assert kind.replays and not kind.draws_coins
    assert parse({"tandem_schedule": NAME}).seed == 0  # a request without a seed is served
