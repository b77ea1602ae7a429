"""The batched two-cache tandem decoder.

One decoding loop co-generates B rows. Each model keeps its own KV cache; after every step
the emitted token is fed to both, so both caches advance in lockstep over the same
context x . y<t. Per row only the *active* model's output layer runs (the body of both
must run: the inactive one still needs its cache), which is the physical lower bound on
tandem cost: 2 x body + 1 x head per token. The junior may live on another device. The
two bodies are independent work, so the junior's runs in a second thread (torch releases
the GIL inside its kernels): on CUDA the two devices overlap, on a CPU with two free cores
the two bodies do.

Nothing in the loop does Python work per row: authors, boundary tests, coins and sampling
are tensor ops over the batch. Randomness is counter-based (see ``rng``), so a row's
tokens and authorship are a function of its seed, its prompt and the two models only.

Usage::

    dec = TandemDecoder(senior, junior, make_schedule("word", tok), SamplingParams(0.6),
                        eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    out = dec.generate([tok.encode(p) for p in prompts], seeds=[0, 1, ...])
    out.tokens, out.senior_mask, out.logprobs, out.senior_share
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

import torch

from ..errors import TandemError
from . import rng
from .kvcache import preallocated_cache
from .sampling import SamplingParams, sample, scaled_logprobs
from .schedule import Schedule


@dataclass
class Rollout:
    """Result of one batched generation. B rows, T = longest response in the batch.

    tokens:      (B, T) int64 response ids, ``pad_id`` after a row ended.
    senior_mask: (B, T) bool, True iff the senior emitted the token (EOS included).
    logprobs:    (B, T) float32, log-prob of the token under the emitting model's
                 temperature-scaled distribution (0 after the end).
    lengths:     (B,) int64 tokens per row, EOS included.
    finished:    (B,) bool, the row emitted EOS (False = stopped at max tokens).
    """

    tokens: torch.Tensor
    senior_mask: torch.Tensor
    logprobs: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor

    @property
    def response_mask(self) -> torch.Tensor:
        """(B, T) bool, True on the row's real tokens."""
        T = self.tokens.shape[1]
        return torch.arange(T, device=self.lengths.device)[None, :] < self.lengths[:, None]

    @property
    def senior_share(self) -> torch.Tensor:
        """(B,) float32, fraction of each row's tokens written by the senior."""
        n = (self.senior_mask & self.response_mask).sum(-1).float()
        return n / self.lengths.clamp(min=1).float()

    def row_tokens(self, b: int) -> list[int]:
        return self.tokens[b, : int(self.lengths[b])].tolist()

    def row_mask(self, b: int) -> list[int]:
        return self.senior_mask[b, : int(self.lengths[b])].int().tolist()


PREALLOCATE = True  # kvcache.PreallocatedLayer instead of transformers' concatenating cache


class ModelRunner:
    """One causal LM split into body (with its KV cache) and output layer.

    Works for any transformers decoder whose ``get_decoder()`` returns hidden states and
    whose ``get_output_embeddings()`` is the LM head (Llama, Qwen2/3, Mistral, SmolLM,
    GPT-2 style models). Output-logit transforms that transformers applies after the LM head
    are applied here too: Cohere's ``logit_scale`` (multiply), Granite's ``logits_scaling``
    (divide), then Gemma-2 style final soft-capping.
    """

    def __init__(self, model):
        self.model = model
        self.body = model.get_decoder()
        self.head = model.get_output_embeddings()
        if self.body is model or self.head is None:
            raise TandemError(f"model {type(model).__name__} has no separable decoder body and LM head")
        params = inspect.signature(self.body.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        cfg = model.config
        self.scale = float(getattr(cfg, "logit_scale", None) or 1.0) / float(getattr(cfg, "logits_scaling", None) or 1.0)
        self.softcap = getattr(cfg, "final_logit_softcapping", None)
        self.device = next(model.parameters()).device
        self.cache = None

    def prefill(self, ids, attn, pos, capacity: int | None = None) -> torch.Tensor:
        """ids/attn/pos (B, P) -> last hidden state (B, H); starts a fresh cache, written in
        place up to ``capacity`` positions (``kvcache.py``) when given."""
        self.cache = None
        if capacity is not None and PREALLOCATE:
            self.cache = preallocated_cache(self.model.config, capacity)
        return self.forward(ids, attn, pos)

    def forward(self, ids, attn, pos) -> torch.Tensor:
        """Feed (B, S) tokens through the body, extending the cache. Returns (B, H) at the last position."""
        dev = self.device
        out = self.body(input_ids=ids.to(dev), attention_mask=attn.to(dev), position_ids=pos.to(dev),
                        use_cache=True, **{self.cache_kw: self.cache})
        self.cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.last_hidden_state[:, -1]  # (B, H)

    def logits(self, hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Output layer on the selected rows only: hidden (B, H), rows (R,) -> (R, V) float32."""
        x = self.head(hidden.index_select(0, rows.to(hidden.device))).float()
        if self.scale != 1.0:
            x = x * self.scale
        if self.softcap:
            x = torch.tanh(x / self.softcap) * self.softcap
        return x


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int):
    """Left-pad token lists. Returns ids, attention mask, position ids, each (B, P)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise TandemError("every prompt must have at least one token")
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), P), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, P - len(p):] = torch.tensor(list(p), dtype=torch.long)
        attn[b, P - len(p):] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return ids, attn, pos


def context_limit(model) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


class TandemDecoder:
    """Batched senior/junior co-generation under a handoff ``Schedule``.

    senior, junior: causal LMs sharing one tokenizer (junior may be None for solo
    schedules, and may sit on another device). ``eos_ids``: ids that end a row.
    """

    def __init__(self, senior, junior, schedule: Schedule, sampling: SamplingParams,
                 eos_ids: Sequence[int], pad_id: int):
        if schedule.uses_junior and junior is None:
            raise TandemError(f"schedule {schedule.name!r} needs a junior model")
        if schedule.uses_senior and senior is None:
            raise TandemError(f"schedule {schedule.name!r} needs a senior model")
        self.senior = ModelRunner(senior) if schedule.uses_senior else None
        self.junior = ModelRunner(junior) if schedule.uses_junior else None
        self.schedule, self.sampling = schedule, sampling
        self.eos_ids = torch.tensor(sorted(set(int(e) for e in eos_ids)), dtype=torch.long)
        self.pad_id = int(pad_id)
        lead = self.senior or self.junior
        self.device = lead.device
        limits = [context_limit(r.model) for r in (self.senior, self.junior) if r is not None]
        self.context = min([x for x in limits if x] or [None]) if any(limits) else None
        self._pool = None

    def _runners(self):
        return [r for r in (self.senior, self.junior) if r is not None]

    def _advance(self, hidden, ids, attn, pos) -> None:
        """Feed the step's token to every body. Two bodies run in two threads: their work is
        independent (own weights, own cache) and torch releases the GIL inside its kernels."""
        runners = self._runners()
        if len(runners) == 1:
            hidden[id(runners[0])] = runners[0].forward(ids, attn, pos)
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="tandem-junior")
        fut = self._pool.submit(runners[1].forward, ids, attn, pos)
        hidden[id(runners[0])] = runners[0].forward(ids, attn, pos)
        hidden[id(runners[1])] = fut.result()

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int] | torch.Tensor) -> Rollout:
        """Co-generate one response per prompt. prompts: B token lists; seeds: B ints."""
        B = len(prompts)
        seeds = torch.as_tensor(seeds, dtype=torch.long).to(self.device)
        if seeds.shape != (B,):
            raise TandemError(f"need one seed per prompt: {B} prompts, {tuple(seeds.shape)} seeds")
        max_new = self.sampling.max_new_tokens
        P = max(len(p) for p in prompts) if prompts else 0
        if self.context is not None:
            if P >= self.context:
                raise TandemError(f"prompt of {P} tokens does not fit the model context of {self.context} tokens")
            max_new = min(max_new, self.context - P)
        ids, attn, pos = left_pad(prompts, self.pad_id)
        ids, attn, pos = ids.to(self.device), attn.to(self.device), pos.to(self.device)
        hidden = {id(r): r.prefill(ids, attn, pos, P + max_new) for r in self._runners()}  # each (B, H)

        state = self.schedule.start(seeds, max_new)
        u_sample = rng.uniform_table(seeds, max_new, rng.SAMPLE)  # (B, T): no hashing inside the loop
        eos = self.eos_ids.to(self.device)
        tokens = torch.full((B, max_new), self.pad_id, dtype=torch.long, device=self.device)
        smask = torch.zeros((B, max_new), dtype=torch.bool, device=self.device)
        logps = torch.zeros((B, max_new), dtype=torch.float32, device=self.device)
        done = torch.zeros(B, dtype=torch.bool, device=self.device)
        lengths = torch.full((B,), max_new, dtype=torch.long, device=self.device)
        last_pos = pos[:, -1]  # (B,)
        attn_full = torch.cat([attn, torch.ones((B, max_new), dtype=attn.dtype, device=attn.device)], dim=1)
        T = 0
        for t in range(max_new):
            tok, lp = self._step(hidden, state, seeds, t, u_sample[:, t])
            tok = torch.where(done, self.pad_id, tok)
            tokens[:, t], smask[:, t], logps[:, t] = tok, state.author & ~done, torch.where(done, 0.0, lp)
            ended = ~done & torch.isin(tok, eos)
            lengths = torch.where(ended, t + 1, lengths)
            done = done | ended
            T = t + 1
            if bool(done.all()) or t + 1 == max_new:
                break
            self.schedule.advance(state, tok, t)
            attn = attn_full[:, : P + t + 1]
            last_pos = last_pos + 1
            self._advance(hidden, tok[:, None], attn, last_pos[:, None])
        for r in self._runners():
            r.cache = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        return Rollout(tokens[:, :T], smask[:, :T], logps[:, :T], lengths.clamp(max=T), done)

    def _logits_for(self, hidden, author: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """(R, V) logits of ``rows`` (default: all B rows), each from its author's output layer only."""
        if rows is None:
            rows = torch.arange(author.shape[0], device=author.device)
        author = author[rows]
        if self.junior is None or (self.senior is not None and bool(author.all())):
            return self.senior.logits(hidden[id(self.senior)], rows).to(self.device)
        if self.senior is None or not bool(author.any()):
            return self.junior.logits(hidden[id(self.junior)], rows).to(self.device)
        s_pos, j_pos = author.nonzero().squeeze(1), (~author).nonzero().squeeze(1)
        ls = self.senior.logits(hidden[id(self.senior)], rows[s_pos])  # (Rs, V)
        lj = self.junior.logits(hidden[id(self.junior)], rows[j_pos]).to(ls.device)  # (Rj, V)
        if ls.shape[1] != lj.shape[1]:
            V = min(ls.shape[1], lj.shape[1])
            ls, lj = ls[:, :V], lj[:, :V]
        out = torch.empty((rows.shape[0], ls.shape[1]), dtype=ls.dtype, device=ls.device)
        out[s_pos], out[j_pos] = ls, lj
        return out

    def _step(self, hidden, state, seeds, t, u):
        """Sample the token at step t for every row (u: (B,) its uniforms). Returns tokens (B,), logprobs (B,)."""
        p = self.sampling
        logits = self._logits_for(hidden, state.author)  # (B, V)
        tok = sample(logits, u, p)
        if self.schedule.atomic:
            changed = self.schedule.handover_before(state, tok, t)
            if bool(changed.any()):
                logits = self._rewrite_word_start(hidden, state, seeds, t, logits, changed, tok)
                tok = torch.where(changed, sample(logits, rng.uniform(seeds, t, rng.RESAMPLE), p), tok)
        lp = scaled_logprobs(logits, p).gather(-1, tok[:, None]).squeeze(-1)
        return tok, lp

    def _rewrite_word_start(self, hidden, state, seeds, t, logits, changed, tok):
        """word-atomic: rows in ``changed`` get the incoming author's logits (its output layer
        on those rows only), restricted to word-initial tokens and EOS: it starts the new word."""
        rows = changed.nonzero().squeeze(1)
        new = self._logits_for(hidden, state.author, rows)[:, : logits.shape[1]]  # (R, V)
        allowed = self.schedule.boundary.to(new.device).clone()[: new.shape[1]]
        allowed[self.eos_ids[self.eos_ids < new.shape[1]].to(new.device)] = True
        logits = logits.clone()
        logits[rows] = new.masked_fill(~allowed, float("-inf"))
        return logits
