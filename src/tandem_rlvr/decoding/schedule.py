"""Handoff schedules: who writes the next token, senior or junior.

A schedule is vectorised over rows: ``start`` draws the first author of every row,
``advance`` updates the authors after a token was emitted. Coins come from
``rng.uniform(seed, step, COIN)``, so authorship is a pure function of the row's seed and
the tokens it emitted. ``author`` is a (B,) bool tensor, True = senior.

Registry (``make_schedule(name, ...)``):

- ``senior`` / ``junior``: one model writes everything (vanilla GRPO = ``senior``).
- ``token``: Bernoulli(p) redraw after every token.
- ``word``: paper Algorithm 1. Redraw after emitting a word-initial token (surface begins
  with the leading-space marker 'Ġ' or '▁') or once the author has written K tokens since the
  last redraw (c += 1; redraw if c >= K: an author writes at most K tokens in a row without a
  redraw, as in the paper's code). Literal semantics: the word-initial token belongs to the
  outgoing author, so words can split.
- ``word-atomic``: the author is redrawn *before* a word-initial token. The outgoing
  author proposes the token; if it is word-initial (or K tokens passed) the coin is drawn,
  and when the coin hands over, the incoming author writes that position itself, sampling
  only among word-initial tokens and EOS. Each word then has exactly one author. Option only.
- ``sentence``: Bernoulli(p) redraw after a token containing '.', '!', '?' or a newline (ours;
  the paper's sampler strategy of that name is ``blankline-token-roundrobin``).
- ``paragraph-bernoulli``: Bernoulli(p) redraw after a paragraph break.
- ``paragraph-roundrobin``: authors alternate at every paragraph break, senior first
  (the handoff-robustness evaluation of paper section 4).
- ``blankline-token-roundrobin``: authors alternate after every token whose text *ends* with
  "\\n\\n", senior first, whatever ``p`` is: the release's in-stream handoff (its patched vLLM's
  strategy ``sentence``: token t is the senior's iff an even number of such tokens precede it, the
  boundary ids being those whose decoded text ends with "\\n\\n"). Unlike
  ``paragraph-roundrobin`` a blank line split over two tokens never fires, a token with "\\n\\n"
  inside but not at its end never fires, and every such token fires, also inside a run of newlines.
- ``chunk``: fixed-size chunks of K tokens, senior first: the senior writes tokens 0..K-1,
  the junior K..2K-1, and so on (the paper's sampler, strategy ``chunk``; its chunk size is
  our K). No coin: authorship is a function of the position alone.
- ``chunk-word``: fixed-size chunks of K words, senior first: the author changes after
  emitting its K-th word-initial token (the boundary set of ``word``, with ``word``'s literal
  semantics: that token stays with the outgoing author). Our option; the paper's chunks
  count tokens.
- ``alternating``: strict alternation token by token, senior first (the paper's sampler,
  strategy ``alternating``: the senior writes the even positions). ``chunk`` with K = 1.

A paragraph break is a blank line: the token that writes the second newline of a run of
newlines fires, whether the run is one token (Qwen's ``.\\n\\n``) or two (SmolLM2 writes a
blank line as two single-newline tokens). A longer run fires once. This needs one piece of
per-row state, the number of newlines the response currently ends with (0, 1, 2+); see
``ParagraphBoundary``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ..errors import TandemError
from . import rng

log = logging.getLogger("tandem_rlvr")

BOUNDARY_KINDS = ("word", "sentence", "paragraph", "blank-line-end")


# --------------------------------------------------------------------------- boundary sets
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
    return {chr(c): b for b, c in zip(bs, cs)}


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
        mask = [bool(s) and r[:1] in ("Ġ", "▁") for r, s in zip(raw, surfaces)]
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

    def hits(self, state: "ScheduleState", tokens: torch.Tensor) -> torch.Tensor:
        """(B,) bool: rows whose emitted ``tokens`` are in the set."""
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

    def hits(self, state: "ScheduleState", tokens: torch.Tensor) -> torch.Tensor:
        """(B,) bool: rows whose emitted ``tokens`` end a paragraph; advances ``state.tail``."""
        if self.fire.device != tokens.device:
            self.fire, self.next = self.fire.to(tokens.device), self.next.to(tokens.device)
        hit = self.fire[state.tail, tokens]
        state.tail = self.next[state.tail, tokens]
        return hit


# --------------------------------------------------------------------------- schedules
@dataclass
class ScheduleState:
    """Per-row schedule state. author: (B,) bool, True = senior writes the next token.
    since: (B,) int64, tokens emitted since the last redraw (the paper's c before its increment;
    word-atomic: after it, as that schedule redraws before the next token).
    coins: (B, S) uniforms of the authorship coins of steps 0..S-1, or None (computed per step).
    tail: (B,) int64, newlines the response ends with (paragraph schedules only)."""

    author: torch.Tensor
    since: torch.Tensor
    seeds: torch.Tensor
    coins: torch.Tensor | None = None
    tail: torch.Tensor | None = None

    def select(self, rows: torch.Tensor) -> "ScheduleState":
        """The state of ``rows`` (R,) only: the decoder drops finished rows from its batch."""
        pick = lambda x: None if x is None else x.index_select(0, rows)  # noqa: E731
        return ScheduleState(pick(self.author), pick(self.since), pick(self.seeds), pick(self.coins), pick(self.tail))


class Schedule:
    """Base: subclasses set ``uses_senior``/``uses_junior`` and implement the two hooks."""

    name = "base"
    uses_senior = True
    uses_junior = True
    atomic = False  # word-atomic: the decoder asks ``handover_before`` before emitting

    def start(self, seeds: torch.Tensor, steps: int | None = None) -> ScheduleState:
        """seeds (B,) int64 -> state with the authors of the first response token.
        ``steps``: the most tokens the caller will emit (precomputes the coins)."""
        raise NotImplementedError

    def advance(self, state: ScheduleState, tokens: torch.Tensor, step: int) -> None:
        """Update ``state.author`` for step+1 after ``tokens`` (B,) were emitted at ``step``."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name}


class Solo(Schedule):
    def __init__(self, senior: bool):
        self.senior = senior
        self.name = "senior" if senior else "junior"
        self.uses_senior, self.uses_junior = senior, not senior

    def start(self, seeds, steps=None):
        B = seeds.shape[0]
        return ScheduleState(torch.full((B,), self.senior, dtype=torch.bool, device=seeds.device),
                             torch.zeros(B, dtype=torch.int64, device=seeds.device), seeds)

    def advance(self, state, tokens, step):
        state.since += 1


class BernoulliRedraw(Schedule):
    """Redraw author ~ Bernoulli(p) (p = P(senior)) after a boundary token or K tokens.

    ``boundary``: a TokenBoundary or ParagraphBoundary (a (V,) bool mask is wrapped in a
    TokenBoundary), or None for 'every token'. ``K`` None disables the backstop.
    """

    def __init__(self, name: str, p: float, boundary, K: int | None, atomic: bool = False):
        check_p_K(p, K)
        self.name, self.p, self.boundary, self.K, self.atomic = name, p, as_boundary(boundary), K, atomic

    def describe(self):
        return {"name": self.name, "p": self.p, "K": self.K}

    def _coin(self, state, step):
        """(B,) bool: the coin of ``step`` says senior."""
        if state.coins is not None and step < state.coins.shape[1]:
            return state.coins[:, step] < self.p
        return rng.uniform(state.seeds, step, rng.COIN) < self.p

    def start(self, seeds, steps=None):
        B = seeds.shape[0]
        coins = rng.uniform_table(seeds, steps + 1, rng.COIN) if steps else None
        state = ScheduleState(torch.zeros(B, dtype=torch.bool, device=seeds.device),
                              torch.zeros(B, dtype=torch.int64, device=seeds.device), seeds, coins,
                              torch.zeros(B, dtype=torch.int64, device=seeds.device))
        state.author = self._coin(state, 0)
        return state

    def redraw_rows(self, state, tokens, count) -> torch.Tensor:
        """(B,) bool: rows whose author is redrawn because of ``tokens`` or the K backstop.

        ``count`` (B,) int64 is the paper's c: tokens the current author has written since the last
        redraw, the one just emitted included; the backstop fires when c reaches K (paper's code and
        its test: with K = 4 the redraw comes on the 4th token, not the 5th)."""
        if self.boundary is None:
            return torch.ones_like(state.author)
        hit = self.boundary.hits(state, tokens)
        if self.K is not None:
            hit = hit | (count >= self.K)
        return hit

    def advance(self, state, tokens, step):
        if self.atomic:  # the redraw already happened in handover_before
            return
        redraw = self.redraw_rows(state, tokens, state.since + 1)
        state.author = torch.where(redraw, self._coin(state, step + 1), state.author)
        state.since = torch.where(redraw, torch.zeros_like(state.since), state.since + 1)

    def handover_before(self, state, proposed, step) -> torch.Tensor:
        """word-atomic only: redraw before emitting; returns (B,) bool rows that change author.

        Updates ``state`` so that ``state.author`` is the author of the token at ``step``.
        """
        if step == 0:  # the first token's author is the initial coin
            state.since += 1
            return torch.zeros_like(state.author)
        # here ``since`` already counts every token written since the last redraw (the proposed one
        # is not written yet), so it is the paper's c after the previous token
        redraw = self.redraw_rows(state, proposed, state.since)
        new = torch.where(redraw, self._coin(state, step), state.author)
        changed = new != state.author
        state.author = new
        state.since = torch.where(redraw, torch.ones_like(state.since), state.since + 1)
        return changed


class RoundRobin(Schedule):
    """Authors alternate after every boundary (mask or ParagraphBoundary), senior first."""

    def __init__(self, name: str, boundary):
        self.name, self.boundary = name, as_boundary(boundary)

    def start(self, seeds, steps=None):
        B = seeds.shape[0]
        zeros = torch.zeros(B, dtype=torch.int64, device=seeds.device)
        return ScheduleState(torch.ones(B, dtype=torch.bool, device=seeds.device), zeros, seeds, None, zeros.clone())

    def advance(self, state, tokens, step):
        hit = self.boundary.hits(state, tokens)
        state.author = state.author ^ hit
        state.since = torch.where(hit, torch.zeros_like(state.since), state.since + 1)


class Chunk(Schedule):
    """Fixed-size chunks, senior first: the author flips after every ``K`` tokens (``boundary``
    None) or after every ``K``-th boundary token (``chunk-word``). ``state.since`` counts the
    tokens (or boundary tokens) of the current chunk; deterministic, so ``p`` plays no part."""

    def __init__(self, name: str, K: int, boundary=None):
        check_p_K(0.5, K)
        self.name, self.K, self.boundary = name, K, as_boundary(boundary)

    def describe(self):
        return {"name": self.name} if self.name == "alternating" else {"name": self.name, "K": self.K}

    def start(self, seeds, steps=None):
        B = seeds.shape[0]
        zeros = torch.zeros(B, dtype=torch.int64, device=seeds.device)
        return ScheduleState(torch.ones(B, dtype=torch.bool, device=seeds.device), zeros, seeds, None, zeros.clone())

    def advance(self, state, tokens, step):
        counted = torch.ones_like(state.since) if self.boundary is None else self.boundary.hits(state, tokens).long()
        since = state.since + counted
        flip = since >= self.K
        state.author = state.author ^ flip
        state.since = torch.where(flip, torch.zeros_like(since), since)


def check_p_K(p: float, K: int | None) -> None:
    """The one check of the two schedule knobs (configs, the CLI and schedules all call it)."""
    if not 0.0 <= p <= 1.0:
        raise TandemError(f"p (senior probability) must be in [0, 1], got {p}")
    if K is not None and K < 1:
        raise TandemError(f"K (tokens before a forced redraw) must be >= 1, got {K}")


def as_boundary(boundary):
    """A boundary object with ``hits``: masks are wrapped, boundary objects and None pass."""
    return TokenBoundary(boundary) if isinstance(boundary, torch.Tensor) else boundary


def _word(tok, V):
    return TokenBoundary(boundary_mask(tok, "word", V))


# name -> builder(tokenizer, p, K, vocab_size) -> Schedule; the one table of schedules (see the module
# docstring): a new schedule is its class and one line here (docs/contributing.md)
REGISTRY = {
    "senior": lambda tok, p, K, V: Solo(True),
    "junior": lambda tok, p, K, V: Solo(False),
    "token": lambda tok, p, K, V: BernoulliRedraw("token", p, None, None),
    "word": lambda tok, p, K, V: BernoulliRedraw("word", p, _word(tok, V), K),
    "word-atomic": lambda tok, p, K, V: BernoulliRedraw("word-atomic", p, _word(tok, V), K, atomic=True),
    "sentence": lambda tok, p, K, V: BernoulliRedraw("sentence", p, TokenBoundary(boundary_mask(tok, "sentence", V)), None),
    "paragraph-bernoulli": lambda tok, p, K, V: BernoulliRedraw("paragraph-bernoulli", p, ParagraphBoundary(tok, V), None),
    "paragraph-roundrobin": lambda tok, p, K, V: RoundRobin("paragraph-roundrobin", ParagraphBoundary(tok, V)),
    "blankline-token-roundrobin": lambda tok, p, K, V: RoundRobin(
        "blankline-token-roundrobin", TokenBoundary(boundary_mask(tok, "blank-line-end", V))),
    "chunk": lambda tok, p, K, V: Chunk("chunk", K),
    "chunk-word": lambda tok, p, K, V: Chunk("chunk-word", K, _word(tok, V)),
    "alternating": lambda tok, p, K, V: Chunk("alternating", 1),
}
SCHEDULES = REGISTRY.keys()  # a live view: config choices, CLI choices and checks see every registered name
_NO_TOKENIZER = ("senior", "junior", "token", "chunk", "alternating")


def make_schedule(name: str, tokenizer=None, *, p: float = 0.5, K: int = 32, vocab_size: int | None = None) -> Schedule:
    """Build a schedule by name (see module docstring). ``tokenizer`` resolves boundary sets."""
    check_p_K(p, K)
    if name not in REGISTRY:
        raise TandemError(f"unknown schedule {name!r}; valid: {', '.join(SCHEDULES)}")
    if tokenizer is None and name not in _NO_TOKENIZER:
        raise TandemError(f"schedule {name!r} needs a tokenizer to resolve its boundary set")
    return REGISTRY[name](tokenizer, p, K, vocab_size)


def replay(schedule: Schedule, seeds: torch.Tensor, tokens: list[list[int]]) -> list[list[bool]]:
    """Authorship of finished responses, recomputed from (seed, tokens) alone.

    seeds (B,) int64; tokens: B lists of response ids. Returns B lists of bools (True =
    senior wrote the token), the same masks the decoder recorded: the schedule's state after
    token t depends only on the row's seed and tokens 0..t. Engines that sample outside our
    decoder (vLLM) use this to return the senior mask.
    """
    if schedule.atomic:
        raise TandemError(f"schedule {schedule.name!r} decides authors before sampling; it cannot be replayed")
    B = len(tokens)
    T = max((len(t) for t in tokens), default=0)
    ids = torch.zeros((B, max(T, 1)), dtype=torch.int64)
    for b, t in enumerate(tokens):
        ids[b, : len(t)] = torch.tensor(t, dtype=torch.int64)
    state = schedule.start(seeds.to(torch.int64), T)
    authors = torch.zeros((B, max(T, 1)), dtype=torch.bool)
    for t in range(T):
        authors[:, t] = state.author
        if t + 1 < T:
            schedule.advance(state, ids[:, t], t)
    return [authors[b, : len(t)].tolist() for b, t in enumerate(tokens)]
