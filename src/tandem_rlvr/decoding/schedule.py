"""Handoff schedules: who writes the next token, senior or junior.

A schedule is vectorised over rows: ``start`` draws the first author of every row,
``advance`` updates the authors after a token was emitted. Coins come from
``rng.uniform(seed, step, COIN)``, so authorship is a pure function of the row's seed and
the tokens it emitted. ``author`` is a (B,) bool tensor, True = senior.

Registry: ``REGISTRY`` maps a name to a ``ScheduleKind`` row, and everything a caller needs to
know about a schedule is a field of its row, never its name: whether it needs a tokenizer (a
boundary set), draws coins (a server request then needs a seed), can be replayed from emitted ids
(the vLLM engines and servers), writes paragraph turns under the text protocol, and hands off
between two tokenizers. Built-in rows are written as a ``Rule`` (who writes first, what fires, what
happens then), from which the schedule object and every capability follow, and which the slow
reference decoder (``tests/reference/decoder.py``) re-implements on its own; a contributor's schedule may
instead bring its own ``Schedule`` subclass (``build``) and state its capabilities.

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

Boundary sets and the paragraph-break automaton: ``decoding.boundary``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import TandemError
from . import rng
from .boundary import BOUNDARY_KINDS, as_boundary, boundary_of


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
    """One model writes every token (``senior`` True: the senior)."""

    def __init__(self, name: str, senior: bool):
        self.name, self.senior = name, senior
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
    """Authors alternate after every boundary (mask or ParagraphBoundary); ``first`` True: the senior
    writes first."""

    def __init__(self, name: str, boundary, first: bool = True):
        self.name, self.boundary, self.first = name, as_boundary(boundary), first

    def start(self, seeds, steps=None):
        return _fixed_start(seeds, self.first)

    def advance(self, state, tokens, step):
        hit = self.boundary.hits(state, tokens)
        state.author = state.author ^ hit
        state.since = torch.where(hit, torch.zeros_like(state.since), state.since + 1)


class Chunk(Schedule):
    """Fixed-size chunks: the author flips after every ``K`` tokens (``boundary`` None) or after every
    ``K``-th boundary token (``chunk-word``); ``first`` True: the senior writes the first chunk.
    ``state.since`` counts the tokens (or boundary tokens) of the current chunk; deterministic, so
    ``p`` plays no part. ``fixed``: K is the schedule's own (``alternating``), not the run's, so it is
    not recorded."""

    def __init__(self, name: str, K: int, boundary=None, first: bool = True, fixed: bool = False):
        check_p_K(0.5, K)
        self.name, self.K, self.boundary, self.first, self.fixed = name, K, as_boundary(boundary), first, fixed

    def describe(self):
        return {"name": self.name} if self.fixed else {"name": self.name, "K": self.K}

    def start(self, seeds, steps=None):
        return _fixed_start(seeds, self.first)

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


def _fixed_start(seeds: torch.Tensor, senior: bool) -> ScheduleState:
    """The state of a schedule whose first author is fixed (no coin): since and tail at 0."""
    B = seeds.shape[0]
    zeros = torch.zeros(B, dtype=torch.int64, device=seeds.device)
    return ScheduleState(torch.full((B,), senior, dtype=torch.bool, device=seeds.device), zeros, seeds, None,
                         zeros.clone())

# --------------------------------------------------------------------------- the registry
FIRST = ("senior", "junior", "coin")
THEN = ("redraw", "flip", "count")
FIRES = ("token", *BOUNDARY_KINDS)  # "token": every token fires
TEXT_TURNS = ("alternate", "coin")
TOKEN_SETS = ("token", "word", "sentence", "blank-line-end")  # stateless: each tokenizer has its own


@dataclass(frozen=True)
class Rule:
    """A schedule in plain terms: who writes the first token, what fires, and what a firing does.

    first: "senior", "junior" or "coin" (Bernoulli(p) from the row's coin of step 0).
    fires: None (nothing: one model writes everything), "token" (every token) or a boundary kind
    (``boundary.BOUNDARY_KINDS``; the token that ends a stretch belongs to the outgoing author).
    then: "redraw" (the next author is the coin of the next step), "flip" (the other model) or
    "count" (flip at every K-th firing: fixed-size chunks). backstop: "redraw" also fires once the
    author wrote K tokens since the last redraw (paper Algorithm 1). K: the schedule's own K
    (``alternating``: 1) instead of the run's. atomic: the redraw comes before a word-initial token
    (``word-atomic``; module docstring)."""

    first: str = "coin"
    fires: str | None = None
    then: str = "redraw"
    backstop: bool = False
    K: int | None = None
    atomic: bool = False

    def __post_init__(self):
        for what, value, valid in (("first", self.first, FIRST), ("then", self.then, THEN)):
            if value not in valid:
                raise TandemError(f"schedule rule: unknown {what} {value!r}; valid: {', '.join(valid)}")
        if self.fires is not None and self.fires not in FIRES:
            raise TandemError(f"schedule rule: unknown fires {self.fires!r}; valid: None, {', '.join(FIRES)}")
        if self.fires is None and self.first == "coin":
            raise TandemError("schedule rule: a schedule where nothing fires has a fixed author "
                              "(first senior or junior)")
        if self.fires is not None and (self.then == "redraw") != (self.first == "coin"):
            raise TandemError("schedule rule: a redraw schedule starts with a coin; flip and count start with a "
                              "fixed author")
        if (self.backstop or self.atomic) and self.then != "redraw":
            raise TandemError("schedule rule: backstop and atomic apply to redraw schedules")
        if self.atomic and self.fires == "paragraph":
            raise TandemError("schedule rule: atomic redraws need a stateless boundary set, not paragraph")
        if self.K is not None:
            check_p_K(0.5, self.K)

    @property
    def draws_coins(self) -> bool:
        return self.first == "coin"

    @property
    def needs_tokenizer(self) -> bool:
        return self.fires in BOUNDARY_KINDS

    @property
    def text_turns(self) -> str | None:
        """Paragraph turns under the text protocol: "alternate" (flip) or "coin" (redraw), else None."""
        if self.fires != "paragraph" or self.backstop:
            return None
        return {"flip": "alternate", "redraw": "coin"}.get(self.then)

    @property
    def knobs(self) -> tuple[str, ...]:
        """The run's knobs the built schedule reads: ``p`` (its coins) and ``K`` (the backstop, or the chunk size
        when the rule fixes none)."""
        return tuple(k for k, reads in (("p", self.first == "coin"),
                                         ("K", self.backstop or (self.then == "count" and self.K is None))) if reads)

    @property
    def cross_tokenizers(self) -> bool:
        """A redraw at a stateless set each model resolves from its own tokenizer (``decoding.xtandem``)."""
        return self.then == "redraw" and self.fires in TOKEN_SETS and not self.atomic

    def build(self, name: str, tokenizer, p: float, K: int, vocab_size: int | None) -> Schedule:
        """The vectorised schedule of this rule."""
        if self.fires is None:
            return Solo(name, self.first == "senior")
        boundary = None if self.fires == "token" else boundary_of(tokenizer, self.fires, vocab_size)
        if self.then == "redraw":
            return BernoulliRedraw(name, p, boundary, K if self.backstop else None, atomic=self.atomic)
        if self.then == "flip":
            return RoundRobin(name, boundary, first=self.first == "senior")
        return Chunk(name, self.K or K, boundary, first=self.first == "senior", fixed=self.K is not None)


CAPABILITIES = ("needs_tokenizer", "draws_coins", "replays", "text_turns", "cross_tokenizers")


@dataclass(frozen=True)
class ScheduleKind:
    """One registry row: a schedule's name, how it is built and what it can do.

    rule: a ``Rule`` (the schedule is built from it and every capability follows from it), or None
    with ``build``: (tokenizer, p, K, vocab_size) -> a ``Schedule``, the capabilities then as given.
    needs_tokenizer: resolves a boundary set (``make_schedule`` refuses it without a tokenizer).
    draws_coins: authors come from the row's seed (a server request needs a seed).
    replays: the author of token t is a function of the seed and tokens before t, so the vLLM
    engines and servers recover the mask by replaying it (``replay``); word-atomic is not.
    text_turns: under the text protocol of handoff evaluations, paragraph turns whose authors
    "alternate" (senior first) or are a "coin" per turn; None: the schedule runs in-stream only.
    cross_tokenizers: hands off to a junior of another tokenizer (``decoding.xtandem``).
    about: a few words for help texts."""

    name: str
    rule: Rule | None = None
    build: Callable | None = None
    needs_tokenizer: bool | None = None
    draws_coins: bool | None = None
    replays: bool | None = None
    text_turns: str | None = None
    cross_tokenizers: bool | None = None
    about: str = ""

    def __post_init__(self):
        if (self.rule is None) == (self.build is None):
            raise TandemError(f"schedule {self.name!r}: give a rule or a build function (one of the two)")
        derived = {"needs_tokenizer": True, "draws_coins": True, "replays": True, "text_turns": None,
                   "cross_tokenizers": False}
        if self.rule is not None:
            derived = {c: getattr(self.rule, c) for c in CAPABILITIES if c != "replays"}
            derived["replays"] = not self.rule.atomic
            given = {c: getattr(self, c) for c in CAPABILITIES if getattr(self, c) is not None}
            wrong = [c for c, v in given.items() if v != derived[c]]
            if wrong:
                raise TandemError(f"schedule {self.name!r}: {wrong[0]}={given[wrong[0]]!r} contradicts its rule "
                                  f"({derived[wrong[0]]!r})")
        for c, v in derived.items():
            if getattr(self, c) is None:
                object.__setattr__(self, c, v)
        if self.text_turns is not None and self.text_turns not in TEXT_TURNS:
            raise TandemError(f"schedule {self.name!r}: unknown text_turns {self.text_turns!r}; valid: "
                              f"{', '.join(TEXT_TURNS)}")
        if self.cross_tokenizers and self.rule is None:
            raise TandemError(f"schedule {self.name!r}: cross_tokenizers needs a rule (the cross-tokenizer decoder "
                              "runs rules)")

    @property
    def knobs(self) -> tuple[str, ...]:
        """The run's knobs (``p``, ``K``) this schedule reads: its rule's, or both for a row built by a function."""
        return ("p", "K") if self.rule is None else self.rule.knobs

    def make(self, tokenizer, p: float, K: int, vocab_size: int | None) -> Schedule:
        if self.rule is not None:
            return self.rule.build(self.name, tokenizer, p, K, vocab_size)
        return self.build(tokenizer, p, K, vocab_size)


def register_schedule(kind: ScheduleKind) -> ScheduleKind:
    """Add (or replace) a registry row; plug-ins call it (docs/contributing.md)."""
    if not isinstance(kind, ScheduleKind):
        raise TandemError(f"a schedule is registered as a ScheduleKind row, got {type(kind).__name__}")
    REGISTRY[kind.name] = kind
    return kind


# the one table of schedules (see the module docstring): a new schedule is one row here or a plug-in's
# ``register_schedule(ScheduleKind(...))`` (docs/contributing.md)
REGISTRY: dict[str, ScheduleKind] = {k.name: k for k in (
    ScheduleKind("senior", Rule(first="senior"), about="the senior alone (vanilla GRPO)"),
    ScheduleKind("junior", Rule(first="junior"), about="the junior alone"),
    ScheduleKind("token", Rule(fires="token"), about="Bernoulli(p) redraw after every token"),
    ScheduleKind("word", Rule(fires="word", backstop=True),
                 about="paper Algorithm 1: redraw after a word-initial token or K tokens"),
    ScheduleKind("word-atomic", Rule(fires="word", backstop=True, atomic=True),
                 about="redraw before a word-initial token: one author per word"),
    ScheduleKind("sentence", Rule(fires="sentence"), about="redraw after '.', '!', '?' or a newline"),
    ScheduleKind("paragraph-bernoulli", Rule(fires="paragraph"), about="redraw at each paragraph break"),
    ScheduleKind("paragraph-roundrobin", Rule(first="senior", fires="paragraph", then="flip"),
                 about="alternate at each paragraph break, senior first (paper section 4)"),
    ScheduleKind("blankline-token-roundrobin", Rule(first="senior", fires="blank-line-end", then="flip"),
                 about="alternate after each token ending in a blank line (the release's in-stream handoff)"),
    ScheduleKind("chunk", Rule(first="senior", fires="token", then="count"), about="chunks of K tokens, senior first"),
    ScheduleKind("chunk-word", Rule(first="senior", fires="word", then="count"),
                 about="chunks of K words, senior first"),
    ScheduleKind("alternating", Rule(first="senior", fires="token", then="count", K=1),
                 about="token by token, senior first"),
)}
SCHEDULES = REGISTRY.keys()  # a live view: config choices, CLI choices and checks see every registered name


def schedule_kind(name: str) -> ScheduleKind:
    """The registry row of ``name``, or a TandemError listing the valid names."""
    kind = REGISTRY.get(name) if isinstance(name, str) else None
    if kind is None:
        raise TandemError(f"unknown schedule {name!r}; valid: {', '.join(SCHEDULES)}")
    if not isinstance(kind, ScheduleKind):
        raise TandemError(f"schedule {name!r} is registered as a {type(kind).__name__}, not a ScheduleKind row "
                          "(docs/contributing.md)")
    return kind


def schedule_names(where: Callable[[ScheduleKind], bool] | None = None) -> list[str]:
    """The registered names (whose row satisfies ``where``), in registry order: for error messages and choices."""
    return [n for n in REGISTRY if where is None or where(schedule_kind(n))]


def schedule_help(names=None) -> str:
    """``NAME: about`` of each schedule in ``names`` (default: every registered one), for flag help texts."""
    return "; ".join(f"{n}: {REGISTRY[n].about}" if REGISTRY[n].about else n
                     for n in (schedule_names() if names is None else names))


def make_schedule(name: str, tokenizer=None, *, p: float = 0.5, K: int = 32, vocab_size: int | None = None) -> Schedule:
    """Build a schedule by name (see module docstring). ``tokenizer`` resolves boundary sets."""
    check_p_K(p, K)
    kind = schedule_kind(name)
    if tokenizer is None and kind.needs_tokenizer:
        raise TandemError(f"schedule {name!r} needs a tokenizer to resolve its boundary set")
    return kind.make(tokenizer, p, K, vocab_size)


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
