"""The batched two-cache tandem decoder.

One decoding loop co-generates B rows. Each model keeps its own KV cache; after every step
the emitted token is fed to both, so both caches advance in lockstep over the same
context x . y<t. Per row only the *active* model's output layer runs (the body of both
must run: the inactive one still needs its cache), which is the physical lower bound on
tandem cost: 2 x body + 1 x head per token. The junior may live on another device. The
two bodies are independent work: when a body is on a GPU the junior's runs in a second
thread (torch releases the GIL inside its kernels), so two devices, or kernel launches,
overlap; on a CPU they run one after the other, each with all of torch's intra-op threads
(measured faster than two threads with half the threads each; ``parallel=True`` splits them,
see ``TandemDecoder`` and ``threads``).

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

import torch
from transformers.cache_utils import DynamicLayer

from ..errors import TandemError
from ..runtime import intra_op_threads
from . import rng
from .kvcache import preallocated_cache
from .lean import LeanBody
from .sampling import SamplingParams, sample, scaled_logprobs
from .schedule import Schedule, ScheduleState


@dataclass
class Rollout:
    """Result of one batched generation. B rows, T = longest response in the batch.

    tokens:      (B, T) int64 response ids, ``pad_id`` after a row ended.
    senior_mask: (B, T) bool, True iff the senior emitted the token (EOS included).
    logprobs:    (B, T) float32, log-prob of the token under the emitting model's
                 temperature-scaled distribution (0 after the end).
    lengths:     (B,) int64 tokens per row, EOS included.
    finished:    (B,) bool, the row emitted EOS (False = stopped at max tokens).
    client_cpu_s: an engine that decodes elsewhere (a server): the CPU seconds this process's threads spent
                 on the batch (sending the requests, reading the answers, replaying the authors); None otherwise.
    """

    tokens: torch.Tensor
    senior_mask: torch.Tensor
    logprobs: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor
    client_cpu_s: float | None = None

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


class ModelRunner:
    """One causal LM split into body (with its KV cache) and output layer, holding its own
    decoding state: the cache and ``hidden``, the (B, H) last hidden state of every row.

    Works for any transformers decoder whose ``get_decoder()`` returns hidden states and
    whose ``get_output_embeddings()`` is the LM head (Llama, Qwen2/3, Mistral, SmolLM,
    GPT-2 style models). Output-logit transforms that transformers applies after the LM head
    are applied here too: Cohere's ``logit_scale`` (multiply), Granite's ``logits_scaling``
    (divide), then Gemma-2 style final soft-capping.

    ``preallocate``: write the KV cache in place (``kvcache.py``) instead of transformers'
    concatenating cache; it also enables the lean decode step (``lean.py``) for the model
    families that have one. Off, every step is a plain transformers forward.
    """

    def __init__(self, model, preallocate: bool = True):
        self.model = model
        self.body = model.get_decoder()
        self.head = model.get_output_embeddings()
        if self.body is model or self.head is None:
            raise TandemError(f"model {type(model).__name__} has no separable decoder body and LM head")
        params = inspect.signature(self.body.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        cfg = model.config
        self.scale = (float(getattr(cfg, "logit_scale", None) or 1.0)
                      / float(getattr(cfg, "logits_scaling", None) or 1.0))
        self.softcap = getattr(cfg, "final_logit_softcapping", None)
        self.device = next(model.parameters()).device
        self.preallocate = preallocate
        self.lean = LeanBody.of(model) if preallocate else None
        self.cache = self.hidden = None
        self.use_lean = False

    def prefill(self, ids, attn, pos, capacity: int | None = None) -> None:
        """ids/attn/pos (B, P): start a fresh cache (written in place up to ``capacity``
        positions when given and pre-allocation is on) and set ``hidden``."""
        pre = capacity is not None and self.preallocate
        self.cache = preallocated_cache(self.model.config, capacity) if pre else None
        self.hidden = self.forward(ids, attn, pos)
        self.use_lean = self.lean is not None and LeanBody.usable(self.cache)
        if self.use_lean:
            self.lean.bind()

    def forward(self, ids, attn, pos) -> torch.Tensor:
        """transformers forward of (B, S) tokens through the body, extending the cache. Returns (B, H) at the
        last position."""
        dev = self.device
        out = self.body(input_ids=ids.to(dev), attention_mask=attn.to(dev), position_ids=pos.to(dev),
                        use_cache=True, **{self.cache_kw: self.cache})
        self.cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.last_hidden_state[:, -1]  # (B, H)

    @torch.no_grad()  # also in the junior's thread: grad mode is per thread
    def step(self, ids, pos, attn, mask, rope=None) -> None:
        """Feed one token per row: ids, pos (B, 1); attn (B, n+1) long padding mask; mask the same
        as (B, 1, 1, n+1) bool; rope a shared (cos, sin) for the lean step or None."""
        if self.use_lean:
            dev = self.device
            self.hidden = self.lean.step(ids.to(dev), pos.to(dev), mask.to(dev), self.cache, rope)
        else:
            self.hidden = self.forward(ids, attn, pos)

    def can_drop_rows(self) -> bool:
        return all(isinstance(layer, DynamicLayer) for layer in getattr(self.cache, "layers", None) or [None])

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop every row but ``rows`` (R,) ascending from the cache and ``hidden``."""
        rows = rows.to(self.device)
        self.cache.batch_select_indices(rows)
        self.hidden = self.hidden.index_select(0, rows)

    def release(self) -> None:
        self.cache = self.hidden = None

    def logits(self, rows: torch.Tensor) -> torch.Tensor:
        """Output layer on the selected rows only: rows (R,) of ``hidden`` -> (R, V) float32."""
        x = self.head(self.hidden.index_select(0, rows.to(self.hidden.device))).float()
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


# default: drop finished rows once a quarter of the batch has finished (the fastest threshold measured:
# docs/architecture.md, "Measured: decoding speed")
COMPACT = 0.25


def rollout_from_rows(tokens: Sequence[Sequence[int]], masks: Sequence[Sequence[int]],
                      logprobs: Sequence[Sequence[float]], finished: Sequence[bool], pad_id: int) -> "Rollout":
    """A ``Rollout`` from per-row lists (an engine's completions): right-padded (B, T) tensors."""
    B, T = len(tokens), max(1, max((len(t) for t in tokens), default=0))
    out = torch.full((B, T), pad_id, dtype=torch.long)
    logps = torch.zeros((B, T), dtype=torch.float32)
    smask = torch.zeros((B, T), dtype=torch.bool)
    for b, (t, m, lp) in enumerate(zip(tokens, masks, logprobs, strict=True)):
        if t:
            out[b, : len(t)] = torch.tensor(t)
            smask[b, : len(t)] = torch.tensor(m)
            logps[b, : len(t)] = torch.tensor(list(lp)[: len(t)], dtype=torch.float32)
    return Rollout(out, smask, logps, torch.tensor([len(t) for t in tokens], dtype=torch.long),
                   torch.tensor(list(finished), dtype=torch.bool))


def engine_batch_seeds(prompts: Sequence[Sequence[int]], seeds) -> torch.Tensor:
    """(B,) long row seeds of an engine batch, after checking one seed per prompt and no empty prompt."""
    seeds = torch.as_tensor(seeds, dtype=torch.long)
    if seeds.shape != (len(prompts),):
        raise TandemError(f"need one seed per prompt: {len(prompts)} prompts, {tuple(seeds.shape)} seeds")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise TandemError("every prompt must have at least one token")
    return seeds


class TandemDecoder:
    """Batched senior/junior co-generation under a handoff ``Schedule``.

    senior, junior: causal LMs sharing one tokenizer (junior may be None for solo
    schedules, and may sit on another device). ``eos_ids``: ids that end a row.

    ``preallocate``: in-place KV cache and the lean decode step (``ModelRunner``).
    ``compact``: finished rows leave the batch (both caches and every per-row tensor) once at
    least this fraction of the rows still in it has finished; 0 = at every step a row
    finishes, None = never. A row's tokens, authors and log-probs do not depend on it.
    ``parallel``: run the two bodies in two threads. None (default): when a body is on a GPU
    (two devices, or kernel launches overlapping); on a CPU the bodies run one after the other,
    each with all of torch's intra-op threads (measured faster than two threads with half the
    threads each: the GIL serialises the two loops' Python work; docs/architecture.md, "Measured:
    decoding speed"). True on a CPU splits the intra-op threads between the bodies (N // 2 each:
    the same cores as solo).
    ``stop``: a boundary (``boundary.ParagraphBoundary``) whose hit ends a row, the token kept
    (finished stays False, as at the cap): the turns of the text-level handoff (``eval.sample.text_handoff``).
    """

    def __init__(self, senior, junior, schedule: Schedule, sampling: SamplingParams,
                 eos_ids: Sequence[int], pad_id: int, *, preallocate: bool = True,
                 compact: float | None = COMPACT, parallel: bool | None = None, stop=None):
        if schedule.uses_junior and junior is None:
            raise TandemError(f"schedule {schedule.name!r} needs a junior model")
        if schedule.uses_senior and senior is None:
            raise TandemError(f"schedule {schedule.name!r} needs a senior model")
        if compact is not None and not 0.0 <= compact <= 1.0:
            raise TandemError(f"compact (fraction of finished rows that triggers compaction) must be in [0, 1], "
                              f"got {compact}")
        self.senior = ModelRunner(senior, preallocate) if schedule.uses_senior else None
        self.junior = ModelRunner(junior, preallocate) if schedule.uses_junior else None
        self.schedule, self.sampling = schedule, sampling
        self.eos_ids = torch.tensor(sorted(set(int(e) for e in eos_ids)), dtype=torch.long)
        self.pad_id = int(pad_id)
        self.compact, self.parallel, self.stop = compact, parallel, stop
        self.runners = [r for r in (self.senior, self.junior) if r is not None]
        self.device = self.runners[0].device
        limits = [x for x in (context_limit(r.model) for r in self.runners) if x]
        self.context = min(limits) if limits else None

    def threads(self) -> tuple[bool, int | None]:
        """(bodies in two threads?, intra-op threads each while decoding, None = unchanged)."""
        if len(self.runners) < 2 or self.parallel is False:
            return False, None
        if any(r.device.type != "cpu" for r in self.runners):
            return True, None
        if self.parallel is None:
            return False, None
        return True, max(1, torch.get_num_threads() // 2)

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int] | torch.Tensor,
                 max_new_tokens: Sequence[int] | None = None) -> Rollout:
        """Co-generate one response per prompt. prompts: B token lists; seeds: B ints;
        max_new_tokens: optional per-row caps (B ints >= 1): a row stops at its cap, or at
        ``sampling.max_new_tokens`` if that is lower, unfinished (as at the global cap)."""
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
        caps = torch.full((B,), max_new, dtype=torch.long)
        if max_new_tokens is not None:
            caps = torch.as_tensor(max_new_tokens, dtype=torch.long)
            if caps.shape != (B,) or bool((caps < 1).any()):
                raise TandemError(f"max_new_tokens needs one cap >= 1 per prompt: {B} prompts, "
                                  f"got {list(max_new_tokens)}")
            caps = caps.clamp(max=max_new)
        parallel, per_body = self.threads()
        pool = ThreadPoolExecutor(1, thread_name_prefix="tandem-junior") if parallel else None
        try:
            with intra_op_threads(per_body):
                return self._generate(prompts, seeds, caps.to(self.device), max_new, P, pool)
        finally:
            for r in self.runners:
                r.release()
            if pool is not None:
                pool.shutdown(wait=False)

    def _generate(self, prompts, seeds, caps, max_new, P, pool) -> Rollout:
        dev, B = self.device, len(prompts)
        ids, attn, pos = (x.to(dev) for x in left_pad(prompts, self.pad_id))
        for r in self.runners:
            r.prefill(ids, attn, pos, P + max_new)
        state = self.schedule.start(seeds, max_new)
        stop_state = ScheduleState(state.author, state.since, seeds, tail=torch.zeros_like(seeds)) \
            if self.stop is not None else None
        u_sample = rng.uniform_table(seeds, max_new, rng.SAMPLE)  # (B, T): no hashing inside the loop
        eos = self.eos_ids.to(dev)
        # The batch shrinks as rows finish (``compact``): ``live`` maps its rows to the output rows;
        # ``out`` holds the batch's rows until they are written back to ``full``.
        full = (torch.full((B, max_new), self.pad_id, dtype=torch.long, device=dev),
                torch.zeros((B, max_new), dtype=torch.bool, device=dev),
                torch.zeros((B, max_new), dtype=torch.float32, device=dev),
                caps.clone(), torch.zeros(B, dtype=torch.bool, device=dev))
        out = tuple(x.clone() for x in full)  # tokens, senior mask, logprobs, lengths, finished
        live = torch.arange(B, device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        attn_full = torch.cat([attn, torch.ones((B, max_new), dtype=attn.dtype, device=dev)], dim=1)
        mask_full = attn_full.bool()[:, None, None, :]  # (B, 1, 1, P + max_new): the lean step's view
        last_pos = pos[:, -1]  # (B,)
        can_drop = self.compact is not None and all(r.can_drop_rows() for r in self.runners)
        T = 0
        for t in range(max_new):
            tok, lp = self._step(state, t, u_sample[:, t])
            tok = torch.where(done, self.pad_id, tok)
            out[0][:, t], out[1][:, t], out[2][:, t] = tok, state.author & ~done, torch.where(done, 0.0, lp)
            ended = ~done & torch.isin(tok, eos)
            out[4].logical_or_(ended)
            if stop_state is not None:  # a stop token ends its row, kept, not finished (as at the cap)
                ended = ended | (~done & self.stop.hits(stop_state, tok))
            out[3].masked_fill_(ended, t + 1)
            done = done | ended | (caps <= t + 1)
            T = t + 1
            n_done, R = int(done.sum()), done.shape[0]
            if n_done == R or t + 1 == max_new:
                break
            self.schedule.advance(state, tok, t)
            if can_drop and n_done and n_done >= self.compact * R:
                keep = (~done).nonzero().squeeze(1)
                for f, o in zip(full, out, strict=True):
                    f[live] = o
                out = tuple(o.index_select(0, keep) for o in out)
                live, done, caps, last_pos = live[keep], done[keep], caps[keep], last_pos[keep]
                u_sample, attn_full, mask_full = u_sample[keep], attn_full[keep], mask_full[keep]
                tok, state = tok[keep], state.select(keep)
                stop_state = stop_state.select(keep) if stop_state is not None else None
                for r in self.runners:
                    r.keep_rows(keep)
            last_pos = last_pos + 1
            self._advance(tok[:, None], last_pos[:, None], attn_full[:, : P + t + 1], mask_full[..., : P + t + 1], pool)
        for f, o in zip(full, out, strict=True):
            f[live] = o
        tokens, smask, logps, lengths, finished = full
        return Rollout(tokens[:, :T], smask[:, :T], logps[:, :T], lengths.clamp(max=T), finished)

    def _advance(self, ids, pos, attn, mask, pool) -> None:
        """Feed the step's token to every body, with one shared mask and, where the bodies' rotary
        embeddings agree, one shared cos/sin. With a ``pool`` the junior's body runs in its
        thread: the two bodies are independent work and torch releases the GIL inside kernels."""
        lead = self.runners[0]
        rope = None
        if all(r.use_lean for r in self.runners) and len({r.lean.rope_key for r in self.runners}) == 1:
            rope = lead.lean.rope(lead.hidden, pos.to(lead.device))
        if pool is None:
            for r in self.runners:
                r.step(ids, pos, attn, mask, rope)
            return
        fut = pool.submit(self.runners[1].step, ids, pos, attn, mask, rope)
        lead.step(ids, pos, attn, mask, rope)
        fut.result()

    def _logits_for(self, author: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """(R, V) logits of ``rows`` (default: every row), each from its author's output layer only."""
        if rows is None:
            rows = torch.arange(author.shape[0], device=author.device)
        author = author[rows]
        if self.junior is None or (self.senior is not None and bool(author.all())):
            return self.senior.logits(rows).to(self.device)
        if self.senior is None or not bool(author.any()):
            return self.junior.logits(rows).to(self.device)
        s_pos, j_pos = author.nonzero().squeeze(1), (~author).nonzero().squeeze(1)
        ls = self.senior.logits(rows[s_pos])  # (Rs, V)
        lj = self.junior.logits(rows[j_pos]).to(ls.device)  # (Rj, V)
        if ls.shape[1] != lj.shape[1]:
            V = min(ls.shape[1], lj.shape[1])
            ls, lj = ls[:, :V], lj[:, :V]
        out = torch.empty((rows.shape[0], ls.shape[1]), dtype=ls.dtype, device=ls.device)
        out[s_pos], out[j_pos] = ls, lj
        return out

    def _step(self, state, t, u):
        """Sample the token at step t for every row (u: (B,) its uniforms). Returns tokens (B,), logprobs (B,)."""
        p = self.sampling
        logits = self._logits_for(state.author)  # (B, V)
        tok = sample(logits, u, p)
        if self.schedule.atomic:
            changed = self.schedule.handover_before(state, tok, t)
            if bool(changed.any()):
                logits = self._rewrite_word_start(state, logits, changed)
                tok = torch.where(changed, sample(logits, rng.uniform(state.seeds, t, rng.RESAMPLE), p), tok)
        lp = scaled_logprobs(logits, p).gather(-1, tok[:, None]).squeeze(-1)
        return tok, lp

    def _rewrite_word_start(self, state, logits, changed):
        """word-atomic: rows in ``changed`` get the incoming author's logits (its output layer
        on those rows only), restricted to word-initial tokens and EOS: it starts the new word."""
        rows = changed.nonzero().squeeze(1)
        new = self._logits_for(state.author, rows)[:, : logits.shape[1]]  # (R, V)
        allowed = self.schedule.boundary.mask.to(new.device).clone()[: new.shape[1]]
        allowed[self.eos_ids[self.eos_ids < new.shape[1]].to(new.device)] = True
        logits = logits.clone()
        logits[rows] = new.masked_fill(~allowed, float("-inf"))
        return logits
