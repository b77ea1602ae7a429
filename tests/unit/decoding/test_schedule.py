"""Handoff schedules: statistics, the K backstop, alternation, boundary sets, reproducibility."""

import pytest
import torch

from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.boundary import boundary_mask
from tandem_rlvr.decoding.schedule import BernoulliRedraw, make_schedule
from tandem_rlvr.decoding.tandem import TandemDecoder
from tandem_rlvr.errors import TandemError


def _drive(sched, tokens):
    """Run a schedule over fixed token streams tokens (B, T); return authors (B, T) and since (B, T)."""
    B, T = tokens.shape
    st = sched.start(torch.arange(B, dtype=torch.long) * 7919 + 1)
    authors, since = [], []
    for t in range(T):
        if sched.atomic:
            sched.handover_before(st, tokens[:, t], t)
        authors.append(st.author.clone())
        since.append(st.since.clone())
        sched.advance(st, tokens[:, t], t)
    return torch.stack(authors, 1), torch.stack(since, 1)


@pytest.mark.parametrize("p", [0.2, 0.5, 0.8])
def test_word_schedule_senior_share_near_p(p):
    V = 100
    boundary = torch.zeros(V, dtype=torch.bool)
    boundary[:30] = True
    tokens = torch.randint(0, V, (2000, 64), generator=torch.Generator().manual_seed(0))
    authors, _ = _drive(BernoulliRedraw("word", p, boundary, K=32), tokens)
    share = authors.float().mean().item()
    # 2000 independent rows, each with ~20 draws: sd of the share is well below 0.01.
    assert abs(share - p) < 0.02


@pytest.mark.parametrize("atomic", [False, True])
@pytest.mark.parametrize("K", [1, 3, 8])
def test_no_run_longer_than_K_without_redraw(K, atomic):
    V = 50
    boundary = torch.zeros(V, dtype=torch.bool)  # no boundary tokens at all: only the backstop redraws
    tokens = torch.randint(0, V, (64, 100), generator=torch.Generator().manual_seed(1))
    _, since = _drive(BernoulliRedraw("word", 0.5, boundary, K=K, atomic=atomic), tokens)
    # ``since`` as seen before a token is written: word counts the tokens before it (0..K-1), word-atomic
    # counts them including it (1..K); either way no author writes more than K tokens between redraws
    top = K if atomic else K - 1
    assert int(since.max()) <= top
    # and the backstop really fires: the counter reaches its top and drops again
    assert int(since.max()) == top and bool((since == 0).any() if not atomic else (since == 1).any())


@pytest.mark.parametrize("atomic", [False, True])
@pytest.mark.parametrize("K", [1, 4, 32])
def test_k_backstop_alone_changes_authors_only_at_multiples_of_K(K, atomic):
    """Paper: c += 1 after each token, redraw when c >= K. With no word-initial token in the stream,
    the first author writes positions 0..K-1, the redraw after position K-1 picks the author of
    position K, the next one of position 2K, and so on: authorship can change only at positions
    K, 2K, 3K, ... (K = 4: 4, 8, 12, never 5; K = 32: 32, 64, 96, never 33 or 66)."""
    V, T, B = 50, 4 * K + 3, 256
    boundary = torch.zeros(V, dtype=torch.bool)  # no boundary ids: only the backstop redraws
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(3))
    authors, _ = _drive(BernoulliRedraw("word", 0.5, boundary, K=K, atomic=atomic), tokens)
    changed = (authors[:, 1:] != authors[:, :-1]).any(0)  # (T-1,): position t+1 has a new author in some row
    positions = [t + 1 for t in torch.nonzero(changed).flatten().tolist()]
    assert positions == [K * m for m in range(1, (T - 1) // K + 1)], positions


def test_word_redraws_exactly_after_boundary_tokens():
    V = 10
    boundary = torch.zeros(V, dtype=torch.bool)
    boundary[0] = True
    tokens = torch.tensor([[1, 0, 1, 1, 0, 1]])
    _, since = _drive(BernoulliRedraw("word", 0.5, boundary, K=32), tokens)
    # literal semantics: counter resets on the step after the boundary token
    assert since[0].tolist() == [0, 1, 0, 1, 2, 0]


def test_paragraph_roundrobin_alternates_exactly(tok):
    sched = make_schedule("paragraph-roundrobin", tok, vocab_size=len(tok))
    para = int(torch.nonzero(sched.boundary.mask)[0])
    other = tok.encode("Mia")[0]
    stream = [other, para, other, other, para, para, other]
    authors, _ = _drive(sched, torch.tensor([stream, stream]))
    # senior first; the author flips on the token after every paragraph token
    assert authors[0].tolist() == [True, True, False, False, False, True, False]
    assert torch.equal(authors[0], authors[1])


def _ids(tok, *surfaces):
    from tandem_rlvr.decoding.boundary import token_surfaces

    table = token_surfaces(tok)
    return [table.index(s) for s in surfaces]


def test_paragraph_break_written_as_two_newline_tokens_fires_once(tok):
    """SmolLM2 writes a blank line as two single-newline tokens; a longer run is one break."""
    nl, dot_nl, dot_nn, word, eos = *_ids(tok, "\n", ".\n", ".\n\n", "M"), tok.eos_token_id
    sched = make_schedule("paragraph-roundrobin", tok, vocab_size=len(tok))
    stream = [word, nl, word, nl, nl, word, dot_nl, nl, nl, word, dot_nn, nl, word, nl, eos, nl, word, dot_nl, dot_nl]
    authors, _ = _drive(sched, torch.tensor([stream]))
    # breaks: "\n","\n" (idx 4); ".\n","\n" (idx 7; idx 8 only lengthens the run);
    # ".\n\n" (idx 10; idx 11 lengthens it); "\n",<eos>,"\n" (idx 15: special tokens are invisible).
    # ".\n",".\n" (idx 17, 18) is two line ends, no blank line.
    flips = [t for t in range(1, len(stream)) if authors[0, t] != authors[0, t - 1]]
    assert [t - 1 for t in flips] == [4, 7, 10, 15]


@pytest.mark.parametrize("name", ["paragraph-roundrobin", "paragraph-bernoulli"])
def test_paragraph_automaton_equals_text_rule_on_random_streams(tok, name):
    """The vectorised automaton against the reference decoder's character-level rule."""
    from reference.decoder import _coin, _ends_paragraph
    from tandem_rlvr.decoding.boundary import token_surfaces

    surfaces = token_surfaces(tok)
    pool = [i for i, s in enumerate(surfaces) if "\n" in s] * 3 + _ids(tok, "M", " ", ".", "7") + [tok.eos_token_id]
    g = torch.Generator().manual_seed(3)
    tokens = torch.tensor(pool)[torch.randint(0, len(pool), (64, 50), generator=g)]
    sched = make_schedule(name, tok, p=0.5, vocab_size=len(tok))
    authors, _ = _drive(sched, tokens)
    seeds = torch.arange(64, dtype=torch.long) * 7919 + 1
    for b in range(64):
        text, author = "", True if name.endswith("roundrobin") else _coin(int(seeds[b]), 0, 0.5)
        for t, i in enumerate(tokens[b].tolist()):
            assert bool(authors[b, t]) == author, (b, t)
            hit = _ends_paragraph(text, surfaces[i])
            text += surfaces[i]
            if hit:
                author = (not author) if name.endswith("roundrobin") else _coin(int(seeds[b]), t + 1, 0.5)


def test_token_schedule_redraws_every_token_with_share_p():
    sched = make_schedule("token", p=0.3)
    authors, _ = _drive(sched, torch.zeros((500, 40), dtype=torch.long))
    assert abs(authors.float().mean().item() - 0.3) < 0.02
    flips = (authors[:, 1:] != authors[:, :-1]).float().mean().item()
    assert abs(flips - 2 * 0.3 * 0.7) < 0.02  # independent draws each token


def test_boundary_sets_from_markers(tok):
    word = boundary_mask(tok, "word")
    toks = tok.convert_ids_to_tokens(list(range(len(tok))))
    assert [i for i, t in enumerate(toks) if t.startswith("Ġ")] == torch.nonzero(word).flatten().tolist()
    para = boundary_mask(tok, "paragraph")  # the stateless part of the paragraph rule
    assert all("ĊĊ" in toks[i] for i in torch.nonzero(para).flatten().tolist()) and para.any()
    assert not word[tok.eos_token_id] and boundary_mask(tok, "word", vocab_size=len(tok) + 5).shape == (len(tok) + 5,)


def test_bad_schedule_arguments_raise_named_errors(tok):
    with pytest.raises(TandemError, match="p "):
        make_schedule("word", tok, p=1.5)
    with pytest.raises(TandemError, match="K "):
        make_schedule("word", tok, K=0)
    with pytest.raises(TandemError, match="valid: senior"):
        make_schedule("sentences", tok)


def _decode(tok, pair, prompts, seeds, name="word", p=0.5):
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    dec = TandemDecoder(*pair, make_schedule(name, tok, p=p), sp, [tok.eos_token_id], tok.pad_token_id)
    return dec.generate([tok.encode(x) for x in prompts], seeds)


def test_same_seeds_same_tokens_and_masks(tok, pair):
    prompts = ["Mia has", "Leo", "Tom buys 3 apples"]
    a, b = _decode(tok, pair, prompts, [5, 6, 7]), _decode(tok, pair, prompts, [5, 6, 7])
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.senior_mask, b.senior_mask)
    c = _decode(tok, pair, prompts, [5, 6, 8])
    assert not torch.equal(a.tokens[2], c.tokens[2]) or not torch.equal(a.senior_mask[2], c.senior_mask[2])


def test_row_result_independent_of_batch_composition(tok, pair):
    full = _decode(tok, pair, ["Mia has", "Leo", "Tom buys 3 apples"], [5, 6, 7])
    alone = _decode(tok, pair, ["Leo"], [6])
    assert full.row_tokens(1) == alone.row_tokens(0) and full.row_mask(1) == alone.row_mask(0)


def test_decoder_senior_share_tracks_p(tok, pair):
    out = _decode(tok, pair, ["Mia has 7 shells."] * 64, list(range(64)), name="token", p=0.25)
    share = out.senior_mask[out.response_mask].float().mean().item()
    assert abs(share - 0.25) < 0.06
    assert out.senior_share.shape == (64,)
