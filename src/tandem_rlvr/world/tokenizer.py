"""A Qwen-style byte-level BPE tokenizer trained on the tiny world's text.

Why Qwen-style: the tandem schedule hands off at word-initial tokens (surface form starting
with the ByteLevel space marker ``Ġ``) and the handoff evaluation at paragraph breaks (the
token that writes the second newline of a run). The tiny world should exercise both exactly
as Qwen3 does, so the tokenizer is built the same way: a regex ``Split`` pre-tokenizer
(Qwen2's pattern: letters keep one leading space, digits are single tokens, newline runs
``\\s*[\\r\\n]+`` stay together) followed by ``ByteLevel(use_regex=False)``. A plain ``ByteLevel``
pre-tokenizer would cut ``\\n\\n`` into two ``Ċ`` tokens; here it is one token ``ĊĊ``.

One departure from Qwen2's pattern: punctuation does not absorb the newlines after it
(Qwen writes ``.\\n\\n`` as one token ``.ĊĊ``), so every paragraph break in the tiny world
is the single token ``ĊĊ``. The paragraph schedule handles both forms, and a blank line
written as two single-newline tokens, since it follows the newlines a response ends with
(``decoding.schedule.ParagraphBoundary``); ours makes a text's paragraph-break count the
count of one id.

``<|endoftext|>`` is the only special token, used as eos and pad. The result is a
``transformers`` fast tokenizer; ``save_pretrained(dir)`` makes it loadable with
``AutoTokenizer.from_pretrained(dir)``. Try it: ``python -m tandem_rlvr.world.tokenizer``.
"""

from __future__ import annotations

from typing import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from ..errors import TandemError

EOS = "<|endoftext|>"
# Qwen2's pre-tokenizer pattern, minus the ``[\r\n]*`` that glues newlines to punctuation.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of ``vocab_size`` ids (all 256 bytes + merges + eos) on ``texts``.

    Any string is encodable (the 256 byte symbols are always in the vocabulary) and
    ``decode(encode(x)) == x``. The tokenizer pads on the left, as batched generation needs.
    """
    if vocab_size < 260:
        raise TandemError(f"vocab_size must be >= 260 (256 bytes + eos + a few merges), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=EOS,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )


def boundary_ids(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    """Ids whose surface form starts with ``Ġ`` (word-initial tokens, the tandem set B)."""
    return sorted(i for t, i in tokenizer.get_vocab().items() if t.startswith("Ġ"))


if __name__ == "__main__":
    from ..prompting import plain_prompt
    from .tasks import make_problems

    probs = make_problems(2000, seed=0, split="train")
    tk = train_tokenizer((plain_prompt(p.problem) + p.solution for p in probs), vocab_size=512)
    ex = plain_prompt(probs[0].problem) + probs[0].solution
    print(f"vocab {len(tk)}, word-initial ids {len(boundary_ids(tk))}")
    print(tk.convert_ids_to_tokens(tk(ex)["input_ids"]))
