"""Boundary sets: the token ids at which a handoff schedule may change its author.

Resolved from the tokenizer once (cached on it) and logged with their size: ``word`` (the raw
piece begins with the leading-space marker 'Ġ' of byte-level BPE or '▁' of SentencePiece; about
53k of Qwen3's 151k ids), ``sentence`` ('.', '!', '?' or a newline in the text), ``paragraph``
and ``blank-line-end`` (the release's in-stream set: the text ends with "\\n\\n").

A paragraph break is a blank line: the token that writes the second newline of a run of
newlines fires, whether the run is one token (Qwen's ``.\\n\\n``) or two (SmolLM2 writes a
blank line as two single-newline tokens). A longer run fires once. This needs one piece of
per-row state, the number of newlines the response currently ends with (0, 1, 2+); see
``ParagraphBoundary``. Schedules (``decoding.schedule``) hold a boundary object with ``hits``.
"""

from __future__ import annotations

import logging

import torch

from ..errors import TandemError

log = logging.getLogger("tandem_rlvr")

BOUNDARY_KINDS = ("word", "sentence", "paragraph", "blank-line-end")


def byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: printable stand-in char -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def token_surfaces(tokenizer) -> list[str]:
    """The text each vocabulary id stands for (special tokens -> ''), indexed by id.

    Byte-level BPE tokens are mapped back through the byte alphabet; SentencePiece pieces
    get '▁' -> ' ' and '<0x0A>'-style byte pieces -> their byte.
    """
    vocab = tokenizer.get_vocab()
    toks = [""] * (max(vocab.values()) + 1)
    for tok, i in vocab.items():
        toks[i] = tok
    special = set(tokenizer.all_special_ids) | {
        i for i, t in enumerate(toks) if t in getattr(tokenizer, "added_tokens_encoder", {})
    }
    byte_level = any(t.startswith("Ġ") for t in toks)
    bd = byte_decoder() if byte_level else None
    out = []
    for i, t in enumerate(toks):
        if i in special or not t:
            out.append("")
        elif byte_level:
            try:
                out.append(bytes(bd[c] for c in t).decode("utf-8", errors="replace"))
            except KeyError:  # an added non-byte token
                out.append(t)
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            out.append(chr(int(t[3:5], 16)))
        else:
            out.append(t.replace("▁", " "))
    return out


def boundary_mask(tokenizer, kind: str, vocab_size: int | None = None) -> torch.Tensor:
    """(V,) bool: ids that trigger a handoff for ``kind`` in BOUNDARY_KINDS.

    word: the raw token begins with 'Ġ' (byte-level BPE) or '▁' (SentencePiece).
    sentence: the surface contains '.', '!', '?' or a newline. paragraph: contains "\\n\\n".
    blank-line-end: the surface ends with "\\n\\n" (the release's in-stream boundary set).
    ``vocab_size`` pads with False up to the model's embedding size.
    """
    if kind not in BOUNDARY_KINDS:
        raise TandemError(f"unknown boundary kind {kind!r}; valid: {', '.join(BOUNDARY_KINDS)}")
    mask = _boundary_list(tokenizer, kind)
    V = max(vocab_size or 0, len(mask))
    out = torch.zeros(V, dtype=torch.bool)
    out[: len(mask)] = torch.tensor(mask, dtype=torch.bool)
    return out


def _boundary_list(tokenizer, kind: str) -> list[bool]:
    """Compute (once per tokenizer object, cached on it) the boundary flags of every id."""
    cache = tokenizer.__dict__.setdefault("_tandem_boundary_cache", {})
    if kind in cache:
        return cache[kind]
    surfaces = token_surfaces(tokenizer)
    if kind == "word":
        raw = [""] * len(surfaces)
        for tok, i in tokenizer.get_vocab().items():
            raw[i] = tok
        mask = [bool(s) and r[:1] in ("Ġ", "▁") for r, s in zip(raw, surfaces, strict=True)]
    elif kind == "sentence":
        mask = [any(c in s for c in ".!?\n") for s in surfaces]
    elif kind == "blank-line-end":
        mask = [s.endswith("\n\n") for s in surfaces]
    else:  # the stateless part of the paragraph rule (see ParagraphBoundary)
        mask = ["\n\n" in s for s in surfaces]
    log.info("boundary set %r: %d of %d ids", kind, sum(mask), len(mask))
    cache[kind] = mask
    return mask


class TokenBoundary:
    """A stateless boundary: the ids in ``mask`` (V,) bool fire wherever they are emitted."""

    def __init__(self, mask: torch.Tensor):
        self.mask = mask

    def hits(self, state, tokens: torch.Tensor) -> torch.Tensor:
        """(B,) bool: rows whose emitted ``tokens`` are in the set (``state``, a ``ScheduleState``, is not read)."""
        if self.mask.device != tokens.device:
            self.mask = self.mask.to(tokens.device)
        return self.mask[tokens]


class ParagraphBoundary:
    """Paragraph breaks as a two-table automaton over the newlines a response ends with.

    ``tail`` in {0, 1, 2} is how many newlines the text emitted so far ends with (2 = two or
    more). A token fires when one of its characters is the second newline of a run, i.e. a
    newline arriving while the running count is 1. ``fire[tail, id]`` and ``next[tail, id]``
    tabulate that for every id; empty surfaces (special tokens, padding ids) leave the tail
    as it is and never fire. ``mask`` is ``fire[0]``: the ids containing "\\n\\n".
    """

    def __init__(self, tokenizer, vocab_size: int | None = None):
        cache = tokenizer.__dict__.setdefault("_tandem_boundary_cache", {})
        if "paragraph-automaton" not in cache:
            surfaces = token_surfaces(tokenizer)
            n = len(surfaces)
            fire = torch.zeros(3, n, dtype=torch.bool)
            nxt = torch.zeros(3, n, dtype=torch.int64)
            for i, s in enumerate(surfaces):
                if not s:
                    nxt[:, i] = torch.arange(3)
                elif "\n" in s:
                    for tail in range(3):
                        t, f = tail, False
                        for c in s:
                            if c == "\n":
                                f = f or t == 1
                                t = min(t + 1, 2)
                            else:
                                t = 0
                        fire[tail, i], nxt[tail, i] = f, t
            cache["paragraph-automaton"] = (fire, nxt)
            log.info("boundary set 'paragraph': %d ids contain a blank line, %d more end one begun by "
                     "the previous token", int(fire[0].sum()), int((fire[1] & ~fire[0]).sum()))
        fire, nxt = cache["paragraph-automaton"]
        V = max(vocab_size or 0, fire.shape[1])
        self.fire = torch.zeros(3, V, dtype=torch.bool)
        self.fire[:, : fire.shape[1]] = fire
        self.next = torch.arange(3).unsqueeze(1).repeat(1, V)  # padding ids: tail unchanged
        self.next[:, : nxt.shape[1]] = nxt
        self.mask = self.fire[0]

    def hits(self, state, tokens: torch.Tensor) -> torch.Tensor:
        """(B,) bool: rows whose emitted ``tokens`` end a paragraph; advances ``state.tail`` (a ``ScheduleState``)."""
        if self.fire.device != tokens.device:
            self.fire, self.next = self.fire.to(tokens.device), self.next.to(tokens.device)
        hit = self.fire[state.tail, tokens]
        state.tail = self.next[state.tail, tokens]
        return hit


def as_boundary(boundary):
    """A boundary object with ``hits``: masks are wrapped, boundary objects and None pass."""
    return TokenBoundary(boundary) if isinstance(boundary, torch.Tensor) else boundary


def boundary_of(tokenizer, kind: str, vocab_size: int | None = None):
    """The boundary object of ``kind`` (BOUNDARY_KINDS): the paragraph automaton for ``paragraph``, else the
    stateless set of ids."""
    if kind == "paragraph":
        return ParagraphBoundary(tokenizer, vocab_size)
    return TokenBoundary(boundary_mask(tokenizer, kind, vocab_size))
