"""One co-written response as two models of different tokenizers see it (``xtandem``'s bookkeeping).

Text is tracked as bytes. A *segment* is what one author wrote between two handoffs. Each model's
*view* of the response is a list of its own ids: the ids it sampled for its own segments, and the
other author's segments re-tokenised with its tokenizer, one segment at a time. Nothing is ever
re-tokenised across a handoff point, so no token of either view holds text of both authors: a
merge across the boundary (``Ġth`` + ``e`` -> ``Ġthe``) cannot happen by construction, and the
senior's view is exactly the sequence its KV cache read while decoding, which is what the GRPO
loss re-scores. The senior's mask is 1 on its own ids, 0 on the re-tokenised junior text.

A handoff is applied only where the text so far ends on a whole UTF-8 character: a byte-level
model can stop a token inside a multi-byte character (``Ã`` then ``©``), and half a character
cannot be handed to another tokenizer (``Segment.can_close``; ``xtandem`` then keeps the author).

Re-tokenising a segment is ``tokenizer.encode(text)``, verified byte for byte against the
segment (``Vocab.encode``); a tokenizer whose encoding of a piece does not give back that piece's
bytes falls back to one single-byte token per byte, which byte-level BPE always has. So the
senior's ids decode to exactly the co-written text, always (``tests/unit/decoding/test_xtandem.py`` checks it on
hostile texts against a plain reference).

Only byte-level BPE tokenizers (GPT-2, Qwen, Llama 3, SmolLM) qualify: their decoding of a
sequence is the concatenation of the bytes of its ids. SentencePiece tokenizers add and strip a
prefix space, so a piece's ids do not concatenate to its text; ``Vocab`` refuses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import TandemError
from .boundary import byte_decoder

SENIOR, JUNIOR = 0, 1


class Vocab:
    """A byte-level tokenizer as the co-writer needs it: the bytes of every id (``bytes_of``,
    special and padding ids -> b""), a single-byte id per byte, and a verified ``encode``."""

    def __init__(self, tokenizer, vocab_size: int | None = None, name: str = "model"):
        vocab = tokenizer.get_vocab()
        V = max(vocab_size or 0, max(vocab.values()) + 1)
        bd = byte_decoder()
        special = set(tokenizer.all_special_ids) | {vocab[t] for t in getattr(tokenizer, "added_tokens_encoder", {})
                                                    if t in vocab}
        table = [b""] * V
        for tok, i in vocab.items():
            if i in special:
                continue
            if any(c not in bd for c in tok):
                raise TandemError(f"the {name}'s tokenizer {getattr(tokenizer, 'name_or_path', '?')} is not byte-level "
                                  f"BPE (token {tok!r}): a junior of another tokenizer needs byte-level tokenizers on "
                                  "both sides (docs/cross_tokenizer.md)")
            table[i] = bytes(bd[c] for c in tok)
        single = {b[0]: i for i, b in enumerate(table) if len(b) == 1}
        missing = [b for b in range(256) if b not in single]
        if missing:
            raise TandemError(f"the {name}'s tokenizer has no single-byte token for byte {missing[0]:#04x}; "
                              "a junior of another tokenizer needs every byte as a token (docs/cross_tokenizer.md)")
        self.tokenizer, self.bytes_of, self.byte_ids = tokenizer, table, [single[b] for b in range(256)]

    @classmethod
    def of(cls, tokenizer, vocab_size: int | None = None, name: str = "model") -> "Vocab":
        """The Vocab of ``tokenizer`` (built once per tokenizer object and size, cached on it)."""
        cache = tokenizer.__dict__.setdefault("_tandem_vocab_cache", {})
        if vocab_size not in cache:
            cache[vocab_size] = cls(tokenizer, vocab_size, name)
        return cache[vocab_size]

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` that give back exactly its UTF-8 bytes: the tokenizer's own encoding when it
        does (always, for byte-level BPE without a normaliser), else one single-byte id per byte."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        want = text.encode("utf-8")
        if b"".join(self.bytes_of[i] if i < len(self.bytes_of) else b"\0" for i in ids) == want:
            return ids
        return [self.byte_ids[b] for b in want]

    def text(self, ids: list[int]) -> str:
        """The text of ids (special ids contribute nothing), invalid bytes replaced."""
        return b"".join(self.bytes_of[i] for i in ids).decode("utf-8", errors="replace")


def incomplete_tail(data: bytes | bytearray) -> bool:
    """Whether ``data`` ends inside a UTF-8 character: a lead byte whose continuation bytes have not
    all arrived. Invalid bytes elsewhere do not count (they stay invalid whatever follows)."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 == 0x80:  # a continuation byte: look further back for its lead
            continue
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        return need > back
    return False


@dataclass
class Segment:
    """The open segment: its author, the ids it sampled, their bytes."""

    author: int
    ids: list[int] = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)

    def can_close(self) -> bool:
        return not incomplete_tail(self.data)


@dataclass
class CoWritten:
    """One row: both views, the senior's mask and log-probs, the closed segments, what each model
    has not been fed yet (``pending``), and the open segment.

    views[m]: model m's ids of the response. mask / logprobs: per id of the senior's view (1 = the
    senior sampled it; its log-prob, 0.0 on re-tokenised junior text). segments: (author, text)."""

    vocabs: tuple[Vocab, Vocab]
    open: Segment
    views: tuple[list[int], list[int]] = field(default_factory=lambda: ([], []))
    pending: tuple[list[int], list[int]] = field(default_factory=lambda: ([], []))
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    segments: list[tuple[int, str]] = field(default_factory=list)

    def emit(self, tok: int, logprob: float) -> None:
        """The open segment's author sampled ``tok`` (an id of its own vocabulary)."""
        a = self.open.author
        self.open.ids.append(tok)
        self.open.data += self.vocabs[a].bytes_of[tok]
        self.views[a].append(tok)
        self.pending[a].append(tok)
        if a == SENIOR:
            self.mask.append(1)
            self.logprobs.append(logprob)

    def other_ids(self, keep: int | None = None) -> list[int]:
        """The open segment re-tokenised for the other model; ``keep``: at most that many ids, cut
        back to a whole character (the trimmed text is what the segment then holds)."""
        other = self.vocabs[1 - self.open.author]
        text = self.open.data.decode("utf-8", errors="replace")
        ids = other.encode(text)
        if keep is not None and len(ids) > keep:
            ids = ids[:keep]
            while ids and incomplete_tail(b"".join(other.bytes_of[i] for i in ids)):
                ids.pop()
        return ids

    def close(self, next_author: int, keep: int | None = None) -> bool:
        """Close the open segment: the other model's view gains its re-tokenisation (queued to be
        fed); a new segment by ``next_author`` opens. ``keep`` caps the ids added (the row's budget).
        Returns whether the segment was cut to fit (its text is then what the kept ids hold)."""
        a, other = self.open.author, 1 - self.open.author
        text = self.open.data.decode("utf-8", errors="replace")
        ids = self.other_ids(keep)
        cut = keep is not None and b"".join(self.vocabs[other].bytes_of[i] for i in ids) != text.encode("utf-8")
        if cut:
            text = self.vocabs[other].text(ids)
        self.views[other].extend(ids)
        self.pending[other].extend(ids)
        if other == SENIOR:
            self.mask.extend([0] * len(ids))
            self.logprobs.extend([0.0] * len(ids))
        if text:
            self.segments.append((a, text))
        self.open = Segment(next_author)
        return cut

    def end_with_eos(self, eos_id: int) -> None:
        """The junior ended the response: the senior's view closes with its own EOS id (mask 0)."""
        self.views[SENIOR].append(eos_id)
        self.mask.append(0)
        self.logprobs.append(0.0)

    @property
    def text(self) -> str:
        """The co-written text: the closed segments' texts in order (the open one must be closed)."""
        return "".join(t for _, t in self.segments)


def take_pending(rows: list[CoWritten], model: int, pad_id: int, chunk: int | None = None):
    """The ids each row owes ``model`` (at most ``chunk`` of them, the oldest first; None = all),
    right-aligned into one (B, S) block with its (B, S) 0/1 mask (S = the longest), and taken off
    the rows' ``pending``; None if no row owes any."""
    S = max(len(r.pending[model]) for r in rows)
    S = min(S, chunk) if chunk is not None else S
    if S == 0:
        return None
    ids = torch.full((len(rows), S), pad_id, dtype=torch.long)
    real = torch.zeros((len(rows), S), dtype=torch.long)
    for b, r in enumerate(rows):
        p = r.pending[model]
        if p:
            n = min(len(p), S)
            ids[b, S - n:] = torch.tensor(p[:n], dtype=torch.long)
            real[b, S - n:] = 1
            del p[:n]
    return ids, real
