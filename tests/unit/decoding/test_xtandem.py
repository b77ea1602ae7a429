"""A junior of another tokenizer: word-level handoff at text level (decoding.xtandem, decoding.cowrite).

The batched decoder is checked against a slow plain reference that, at every step, rebuilds the
active model's whole view from the segments' text and runs it without a cache; the senior's ids
must decode to exactly the co-written text, also for hostile texts split anywhere; each model is
fed each id of its view at most once (no re-prefill), counted at the model's body.
"""

import codecs
import copy
import random

import pytest
import torch
from tokenizers import normalizers
from transformers.convert_slow_tokenizer import bytes_to_unicode

from tandem_rlvr.decoding import rng
from tandem_rlvr.decoding.cowrite import JUNIOR, SENIOR, CoWritten, Segment, Vocab
from reference.decoder import reference_boundary_ids, reference_logprob, reference_sample
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.xtandem import CrossTandemDecoder, XJunior
from tandem_rlvr.models import eos_ids, load_model, load_tokenizer
from tandem_rlvr.prompting import encode_prompt, plain_prompt
from tandem_rlvr.world.tasks import make_problems

HOSTILE = [
    "  two  spaces, then\n\n\nthree newlines and a trailing space ",
    "é漢字 🙂 mixed\ttabs\r\nand CRLF",
    "\\boxed{½} − ∞ ≥ 0; Ġ and ▁ as literal text",
    "\n",
    " ",
    "🙂🙂🙂",
    "a" * 40 + " " + "b" * 3,
    "\x00\x01 control bytes \x7f",
]

BYTE_OF = {c: b for b, c in bytes_to_unicode().items()}  # transformers' GPT-2 byte alphabet, inverted


_FACTS: dict = {}


def _facts(tok):
    """(special ids, id -> raw token, the single-byte id of each byte) of ``tok``, computed once."""
    if id(tok) not in _FACTS:
        vocab = tok.get_vocab()
        _FACTS[id(tok)] = (tok, set(tok.all_special_ids), {i: t for t, i in vocab.items()},
                           [vocab[bytes_to_unicode()[b]] for b in range(256)])
    return _FACTS[id(tok)][1:]


def token_bytes(tok, i: int) -> bytes:
    special, raw, _ = _facts(tok)
    return b"" if i in special else bytes(BYTE_OF[c] for c in raw[i])


def single_byte_ids(tok) -> list[int]:
    return _facts(tok)[2]


def ends_inside_char(data: bytes) -> bool:
    """Python's own incremental UTF-8 decoder holds back an unfinished character."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    dec.decode(data, final=False)
    return bool(dec.getstate()[0])


def plain_encode(tok, text: str) -> list[int]:
    ids = tok.encode(text, add_special_tokens=False)
    if b"".join(token_bytes(tok, i) for i in ids) != text.encode():
        ids = [single_byte_ids(tok)[b] for b in text.encode()]
    return ids


@pytest.fixture(scope="module")
def world():
    s, j = load_model("tiny", "cpu"), load_model("tiny-xjunior", "cpu")
    st, jt = load_tokenizer("tiny"), load_tokenizer("tiny-xjunior")
    return s, j, st, jt


def test_the_shipped_pair_has_two_tokenizers(world):
    _, _, st, jt = world
    assert st.get_vocab() != jt.get_vocab()


# --------------------------------------------------------------------------- hostile texts
def _cowrite(st, jt, text: str, rnd: random.Random):
    """Write ``text`` by alternating authors, handing off at random byte offsets (each author's ids
    its own: single-byte ids or its tokenizer's encoding of a whole-character piece)."""
    vs = (Vocab.of(st), Vocab.of(jt))
    data = text.encode()
    cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, 6))) if len(data) > 1 else []
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    author = rnd.choice((SENIOR, JUNIOR))
    row = CoWritten(vs, Segment(author))
    emitted = [0, 0]
    refused = 0
    for piece in pieces:
        tok = (st, jt)[row.open.author]
        try:
            ids = plain_encode(tok, piece.decode()) if rnd.random() < 0.5 else None
        except UnicodeDecodeError:
            ids = None
        ids = ids if ids is not None else [single_byte_ids(tok)[b] for b in piece]
        for i in ids:
            row.emit(i, 0.0)
        emitted[row.open.author] += len(ids)
        if row.open.can_close():
            row.close(1 - row.open.author)
        else:
            refused += 1
            assert ends_inside_char(bytes(row.open.data))
    row.close(1 - row.open.author)
    return row, emitted, refused


@pytest.mark.parametrize("text", HOSTILE)
def test_senior_ids_decode_to_exactly_the_cowritten_text_on_hostile_texts(world, text):
    _, _, st, jt = world
    rnd = random.Random(text)
    for _ in range(20):
        row, emitted, _ = _cowrite(st, jt, text, rnd)
        assert st.decode(row.views[SENIOR], skip_special_tokens=True) == text
        assert jt.decode(row.views[JUNIOR], skip_special_tokens=True) == text
        assert row.text == text
        assert sum(row.mask) == emitted[SENIOR] and len(row.mask) == len(row.views[SENIOR])
        # every segment is whole characters, so no id of either view holds text of both authors
        assert all(not ends_inside_char(t.encode()) and t for _, t in row.segments)


def test_a_handoff_inside_a_multibyte_character_is_refused(world):
    _, _, st, jt = world
    rnd = random.Random(0)
    refused = sum(_cowrite(st, jt, "é漢字🙂" * 3, rnd)[2] for _ in range(20))
    assert refused > 0  # random byte cuts inside characters were met, and held back


def test_a_tokenizer_whose_encoding_does_not_give_back_the_text_falls_back_to_bytes(world):
    _, _, st, _ = world
    lower = copy.deepcopy(st)
    lower.backend_tokenizer.normalizer = normalizers.Lowercase()
    text = "ABC Déjà"
    assert lower.decode(lower.encode(text, add_special_tokens=False)) != text  # the normaliser changes it
    ids = Vocab(lower).encode(text)
    assert lower.decode(ids) == text and len(ids) == len(text.encode())


def test_a_tokenizer_that_is_not_byte_level_is_refused():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from tandem_rlvr.errors import TandemError

    wp = Tokenizer(models.WordLevel({"▁hello": 0, "<unk>": 1}, unk_token="<unk>"))
    tok = PreTrainedTokenizerFast(tokenizer_object=wp, unk_token="<unk>")
    with pytest.raises(TandemError, match="byte-level"):
        Vocab(tok)


# --------------------------------------------------------------------------- the decoder vs a plain reference
def plain_reference(senior, junior, st, jt, prompt_s, prompt_j, seed, sampling, p, K, cap):
    """One row, no cache, nothing carried between steps but the segments: each step the active model
    reads its prompt and its whole view, rebuilt from the closed segments. A segment is (author, its
    own ids, its text, its ids in the senior's view, their log-probs)."""
    toks, models_, prompts = (st, jt), (senior, junior), (prompt_s, prompt_j)
    bounds = [reference_boundary_ids(t, "word") for t in toks]
    eos = [set(eos_ids(t)) for t in toks]
    u = lambda t, stream: float(rng.uniform(torch.tensor([seed]), t, stream)[0])  # noqa: E731
    segs = []
    author = SENIOR if u(0, rng.COIN) < p else JUNIOR
    open_ids, open_lps, since, finished = [], [], 0, False

    def view(m):
        ids = []
        for a, own, text, sen, _ in segs:
            ids += (sen if m == SENIOR else own if a == JUNIOR else plain_encode(jt, text))
        return ids + (open_ids if author == m else [])

    def close(keep=None):
        nonlocal open_ids, open_lps
        text = b"".join(token_bytes(toks[author], i) for i in open_ids).decode("utf-8", errors="replace")
        cut = False
        if author == SENIOR:
            sen, lps = list(open_ids), list(open_lps)
        else:
            sen = plain_encode(st, text)
            if keep is not None and len(sen) > keep:
                sen, cut = sen[:keep], True
                while sen and ends_inside_char(b"".join(token_bytes(st, i) for i in sen)):
                    sen.pop()
                text = st.decode(sen)
            lps = [0.0] * len(sen)
        segs.append((author, list(open_ids), text, sen, lps))
        open_ids, open_lps = [], []
        return cut

    for t in range(cap):
        logits = models_[author](torch.tensor([list(prompts[author]) + view(author)])).logits[0, -1].float()
        tok = reference_sample(logits, u(t, rng.SAMPLE), sampling)
        if tok in eos[author]:
            finished = True
            if author == SENIOR:
                open_ids.append(tok)
                open_lps.append(reference_logprob(logits, tok, sampling))
                close()
            else:
                close(keep=cap - 1 - len(view(SENIOR)))
                segs.append((JUNIOR, [], "", eos_ids(st)[:1], [0.0]))  # the senior's view ends with its EOS, mask 0
            break
        open_ids.append(tok)
        open_lps.append(reference_logprob(logits, tok, sampling))
        room = cap - len(view(SENIOR))
        if t + 1 >= cap or room <= 0:
            close(keep=room)
            break
        hit = tok in bounds[author] or since + 1 >= K
        old_since, since = since, 0 if hit else since + 1
        coin = SENIOR if u(t + 1, rng.COIN) < p else JUNIOR
        if hit and coin != author:
            if ends_inside_char(b"".join(token_bytes(toks[author], i) for i in open_ids)):
                since = old_since + 1  # no handoff inside a character
                continue
            was = author
            cut = close(keep=room)
            author = 1 - author
            if cut or (was == JUNIOR and len(view(SENIOR)) >= cap):
                break
    author = None  # every segment is closed
    ids = [i for *_, sen, _ in segs for i in sen]
    mask = [int(a == SENIOR) for a, _, _, sen, _ in segs for _ in sen]
    lps = [x for *_, lp in segs for x in lp]
    return ids, mask, lps, "".join(text for _, _, text, _, _ in segs), finished, view(JUNIOR)


def _setup(world, rows=6):
    s, j, st, jt = world
    prompts = [encode_prompt(st, plain_prompt(p.problem)) for p in make_problems(rows, seed=3, split="test")]
    xj = XJunior(jt, st)
    return s, j, st, jt, prompts, [xj.prompt_ids(p) for p in prompts]


@pytest.mark.parametrize("K, chunk", [(32, 1), (3, None)])
def test_cross_decoder_matches_the_plain_reference(world, K, chunk):
    """Also: a row's tokens do not depend on how the catch-up is fed (one id per step, or whole segments)."""
    s, j, st, jt, prompts, jprompts = _setup(world)
    sp = SamplingParams(1.0, max_new_tokens=40)
    dec = CrossTandemDecoder(s, j, st, jt, "word", sp, eos_ids(st), eos_ids(jt), p=0.5, K=K, chunk=chunk)
    seeds = list(range(100, 100 + len(prompts)))
    roll = dec.generate(prompts, seeds, max_new_tokens=[40, 12, 40, 25, 40, 5], junior_prompts=jprompts)
    mixed = 0
    for b, cap in enumerate([40, 12, 40, 25, 40, 5]):
        ids, mask, lps, text, finished, _ = plain_reference(s, j, st, jt, prompts[b], jprompts[b], seeds[b], sp, 0.5, K,
                                                            cap)
        assert roll.row_tokens(b) == ids
        assert roll.row_mask(b) == mask
        assert roll.texts[b] == text
        assert bool(roll.finished[b]) == finished
        assert len(ids) <= cap
        torch.testing.assert_close(roll.logprobs[b, : len(ids)], torch.tensor(lps), atol=1e-4, rtol=0)
        assert st.decode(ids, skip_special_tokens=True) == text
        mixed += 0 < sum(mask) < len(mask)
    assert mixed >= 3  # the rows really are co-written


def test_finished_rows_leave_the_batch_and_no_row_changes(world):
    """compact=0: a row leaves both models' batches at the step it finishes (counted at each model's
    input embedding); every row's tokens, mask, text and log-probs are those of the batch that keeps
    every row (compact=None, the decoder before compaction)."""
    s, j, st, jt, prompts, jprompts = _setup(world)
    sp = SamplingParams(1.0, max_new_tokens=40)
    caps, seeds = [40, 12, 40, 25, 40, 5], list(range(200, 206))
    rows_fed = {"s": [], "j": []}
    handles = [m.get_decoder().embed_tokens.register_forward_pre_hook(
        lambda mod, args, n=n: rows_fed[n].append(args[0].shape[0])) for n, m in (("s", s), ("j", j))]
    try:
        kept = CrossTandemDecoder(s, j, st, jt, "word", sp, eos_ids(st), eos_ids(jt), compact=None).generate(
            prompts, seeds, max_new_tokens=caps, junior_prompts=jprompts)
        assert set(rows_fed["s"]) == set(rows_fed["j"]) == {6}
        rows_fed["s"].clear(), rows_fed["j"].clear()
        dropped = CrossTandemDecoder(s, j, st, jt, "word", sp, eos_ids(st), eos_ids(jt), compact=0.0).generate(
            prompts, seeds, max_new_tokens=caps, junior_prompts=jprompts)
    finally:
        for h in handles:
            h.remove()
    for name in ("s", "j"):
        fed = rows_fed[name]
        assert fed[0] == 6 and fed == sorted(fed, reverse=True) and fed[-1] < 6  # the batch only shrinks
    assert min(rows_fed["s"] + rows_fed["j"]) == 1  # the longest row ends alone
    for b in range(6):
        assert dropped.row_tokens(b) == kept.row_tokens(b) and dropped.row_mask(b) == kept.row_mask(b)
        assert dropped.texts[b] == kept.texts[b] and dropped.segments[b] == kept.segments[b]
    assert torch.equal(dropped.lengths, kept.lengths) and torch.equal(dropped.finished, kept.finished)
    torch.testing.assert_close(dropped.logprobs, kept.logprobs, atol=1e-5, rtol=0)


def test_each_model_is_fed_each_id_of_its_view_once(world):
    s, j, st, jt, prompts, jprompts = _setup(world)
    sp = SamplingParams(1.0, max_new_tokens=40)
    dec = CrossTandemDecoder(s, j, st, jt, "word", sp, eos_ids(st), eos_ids(jt), compact=None)  # (B,) counts per call
    seeds = list(range(len(prompts)))
    fed = {}

    def counter(name, pad):
        def hook(module, args):  # the input embedding: both the transformers forward and the lean step call it
            fed.setdefault(name, []).append((args[0] != pad).sum(-1))  # (B,) ids of this call (padding is EOS)
        return hook

    handles = [m.get_decoder().embed_tokens.register_forward_pre_hook(counter(n, t.pad_token_id))
               for n, m, t in (("s", s, st), ("j", j, jt))]
    try:
        roll = dec.generate(prompts, seeds, junior_prompts=jprompts)
    finally:
        for h in handles:
            h.remove()
    for name, plens in (("s", [len(p) for p in prompts]), ("j", [len(p) for p in jprompts])):
        assert fed[name][0].tolist() == plens  # the first call is the prefill of the prompts
    handoffs = 0
    for b in range(len(prompts)):
        *_, jview = plain_reference(s, j, st, jt, prompts[b], jprompts[b], seeds[b], sp, 0.5, 32, 40)
        fed_s = sum(int(x[b]) for x in fed["s"][1:])
        fed_j = sum(int(x[b]) for x in fed["j"][1:])
        assert fed_s <= roll.row_tokens(b).__len__() and fed_j <= len(jview)
        handoffs += len(roll.segments[b]) - 1
        # at least everything but the last segment reached each model
        assert fed_s + fed_j >= len(roll.row_tokens(b)) + len(jview) - 2 * max(len(jt.encode(t)) + len(st.encode(t))
                                                                             for _, t in roll.segments[b])
    assert handoffs >= 10


def test_a_junior_of_the_senior_tokenizer_changes_nothing(world):
    """Same-tokenizer rollouts stay as they were: load_pair gives no XJunior, the hf engine decodes
    with the token-level decoder, bit for bit."""
    from tandem_rlvr.engines.base import RolloutSpec
    from tandem_rlvr.engines.hf import HFRollouts
    from tandem_rlvr.models import load_pair

    pair = load_pair("tiny", "tiny-junior", "cpu", other_tokenizer=True)
    assert pair.xjunior is None
    s, j, tok = pair.senior, pair.junior, pair.tokenizer
    prompts = [encode_prompt(tok, plain_prompt(p.problem)) for p in make_problems(4, seed=1, split="test")]
    spec = RolloutSpec("word", SamplingParams(1.0, max_new_tokens=24))
    got = HFRollouts(s, j, tok, pair.eos_ids, xjunior=pair.xjunior).generate(prompts, [1, 2, 3, 4], spec)
    from tandem_rlvr.decoding.schedule import make_schedule
    from tandem_rlvr.decoding.tandem import TandemDecoder

    want = TandemDecoder(s, j, make_schedule("word", tok, vocab_size=s.config.vocab_size), spec.sampling, pair.eos_ids,
                         tok.pad_token_id).generate(prompts, [1, 2, 3, 4])
    for name in ("tokens", "senior_mask", "logprobs", "lengths", "finished"):
        assert torch.equal(getattr(got, name), getattr(want, name))


def test_the_hf_engine_hands_off_to_a_junior_of_another_tokenizer(world):
    from tandem_rlvr.engines.base import RolloutSpec
    from tandem_rlvr.engines.hf import HFRollouts
    from tandem_rlvr.models import load_pair

    pair = load_pair("tiny", "tiny-xjunior", "cpu", other_tokenizer=True)
    assert pair.xjunior is not None
    _, _, st, _, prompts, _ = _setup(world, rows=4)
    eng = HFRollouts(pair.senior, pair.junior, st, pair.eos_ids, batch_rows=3, xjunior=pair.xjunior)
    roll = eng.generate(prompts, [5, 6, 7, 8], RolloutSpec("word", SamplingParams(1.0, max_new_tokens=24)))
    solo = eng.generate(prompts, [5, 6, 7, 8], RolloutSpec("senior", SamplingParams(1.0, max_new_tokens=24)))
    share = roll.senior_share
    assert bool(((share > 0) & (share < 1)).any()) and bool(solo.senior_mask[solo.response_mask].all())


def test_bench_decode_takes_a_junior_of_another_tokenizer(capsys):
    """`tandem bench decode --junior tiny-xjunior`: solo, same- and cross-tokenizer tandem in one run, each
    at the stated thread budget; the fed counts (at the input embedding) stay within each row's ids."""
    import json

    from tandem_rlvr.cli import main

    assert main(["bench", "decode", "--json", "--senior", "tiny", "--junior", "tiny-xjunior", "--vs-junior",
                 "tiny-junior",
                 "--batch", "2", "--new-tokens", "6", "--repeats", "1", "--threads", "1"]) == 0
    res = json.loads(capsys.readouterr().out)
    for k in ("solo", "tandem_same_tokenizer", "tandem_cross_tokenizer", "tandem_cross_whole_segments"):
        assert res[f"{k}_tok_s"] > 0 and res["budget"][k] == "1 intra-op thread, bodies in turn"
    assert res["cross_over_same"] == res["tandem_cross_tokenizer_tok_s"] / res["tandem_same_tokenizer_tok_s"]
    assert res["cross_fed_per_row"]["senior"] <= res["cross_senior_ids_per_row"]
