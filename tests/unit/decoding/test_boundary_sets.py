"""Word, sentence and paragraph boundary sets against ids listed by hand.

Three vocabularies: the byte-level BPE of the test fixtures (Qwen-style, '.Ċ' and '.ĊĊ' glued),
the tiny world's (when built) and SmolLM2's (slow, when fetched), and a SentencePiece-style
vocabulary with '▁' word markers and '<0x0A>' / '<0x2E>' byte pieces. The expected ids were read
off the vocabularies by hand; they are checked against the library's ``boundary_mask`` /
``ParagraphBoundary`` and against the reference decoder's own ``reference_boundary_ids``.
"""

import pytest
import torch
from tokenizers import Tokenizer, decoders, models
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from reference.decoder import reference_boundary_ids
from tandem_rlvr.decoding.boundary import ParagraphBoundary, boundary_mask


def _ids(mask: torch.Tensor) -> set[int]:
    return set(torch.nonzero(mask).flatten().tolist())


def _check(tok, word_in, word_out, n_word, sentence, blank_line, second_newline):
    """word_in/word_out: ids that must / must not be word-initial; n_word: the set's size;
    sentence: the whole sentence set; blank_line: ids that write a blank line on their own;
    second_newline: ids that end a blank line when the text already ends with one newline."""
    word = _ids(boundary_mask(tok, "word"))
    assert word_in <= word and not word & word_out and len(word) == n_word
    assert _ids(boundary_mask(tok, "sentence")) == sentence
    para = ParagraphBoundary(tok)
    assert _ids(para.fire[0]) == _ids(boundary_mask(tok, "paragraph")) == blank_line
    assert _ids(para.fire[1]) == second_newline
    ref_word = reference_boundary_ids(tok, "word")
    assert word_in <= ref_word and not ref_word & word_out and len(ref_word) == n_word
    assert reference_boundary_ids(tok, "sentence") == sentence


def test_fixture_byte_level_bpe_boundary_sets(tok):
    # 1 '!', 14 '.', 31 '?', 199 'Ċ', 259 '.Ċ', 264 '.ĊĊ', 274 '}.'; 221 'Ġ', 275 'Ġ\\'; 0 eos, 23 '7'
    _check(tok, word_in={221, 275}, word_out={0, 1, 14, 23, 199, 264}, n_word=15,
           sentence={1, 14, 31, 199, 259, 264, 274}, blank_line={264}, second_newline={199, 264})  # 259 .Ċ: "." resets


def test_tiny_world_boundary_sets():
    from tandem_rlvr.world.shipped import shipped_world

    tok = AutoTokenizer.from_pretrained(shipped_world("tiny").base)  # the world as it ships: 508 ids
    # 1 '!', 14 '.', 31 '?', 199 'Ċ', 259 'ĊĊ', 302 '}.'; 221 'Ġ', 303 'Ġ\\', 456 'Ġshells', 503 'ĠMia'
    _check(tok, word_in={221, 303, 456, 503}, word_out={0, 1, 12, 14, 23, 199, 259}, n_word=127,
           sentence={1, 14, 31, 199, 259, 302}, blank_line={259}, second_newline={199, 259})


def _sentencepiece_style():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "▁the": 3, "the": 4, ".": 5, "▁.": 6, "<0x0A>": 7, "!": 8, "?": 9,
             "▁Hi": 10, "a.b": 11, "▁": 12, "7": 13, "<0x2E>": 14, "...": 15, ",": 16, "▁?": 17, "<0x41>": 18}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def test_sentencepiece_style_boundary_sets():
    tok = _sentencepiece_style()
    # word: '▁the', '▁.', '▁Hi', '▁', '▁?'; sentence: '.', '▁.', '<0x0A>', '!', '?', 'a.b', '<0x2E>', '...', '▁?'
    _check(tok, word_in={3, 6, 10, 12, 17}, word_out={0, 1, 2, 4, 5, 7, 18}, n_word=5,
           sentence={5, 6, 7, 8, 9, 11, 14, 15, 17}, blank_line=set(), second_newline={7})


@pytest.mark.slow
def test_smollm2_boundary_ids():
    from tandem_rlvr.fetch import fetched_dir

    model_dir = fetched_dir("smol") / "model"
    if not (model_dir / "config.json").exists():
        pytest.skip("smol not fetched (tandem models fetch smol)")
    tok = AutoTokenizer.from_pretrained(model_dir)
    word, sentence = _ids(boundary_mask(tok, "word")), _ids(boundary_mask(tok, "sentence"))
    para = ParagraphBoundary(tok)
    # 260 'Ġthe', 216 'Ġ', 256 'ĠĠ', 1673 'Ġ.', 9148 'Ġ?', 3717 'ĠĊ', 3814 'Ġ\\', 446 'Ġ='
    assert {260, 216, 256, 1673, 9148, 3717, 3814, 446} <= word
    # 0-2 specials, 1195 'the', 30 '.', 198 'Ċ', 1116 'ĊĊ', 3805 'ĊĠ', 39 '7'
    assert not word & {0, 1, 2, 1195, 30, 198, 1116, 3805, 39}
    # 30 '.', 47 '?', 17 '!', 198 'Ċ', 1116 'ĊĊ', 16506 'ĊĊĊ', 1673 'Ġ.', 9148 'Ġ?', 2026 '...', 3717 'ĠĊ', 3805 'ĊĠ'
    assert {30, 47, 17, 198, 1116, 16506, 1673, 9148, 2026, 3717, 3805} <= sentence
    assert not sentence & {0, 1, 2, 260, 1195, 28, 39, 216, 446}  # ',' (28) and '7' (39) end no sentence
    assert {1116, 16506} <= _ids(para.fire[0]) and 198 not in _ids(para.fire[0]) and 198 in _ids(para.fire[1])
    assert reference_boundary_ids(tok, "sentence") == sentence and reference_boundary_ids(tok, "word") == word
