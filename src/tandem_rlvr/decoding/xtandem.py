"""Tandem rollouts with a junior of another tokenizer: word-level handoff at text level.

What: the paper's Algorithm 1 when senior and junior do not share a vocabulary. The active model
samples tokens of its own vocabulary; after a token in its own boundary set (``word``: a
word-initial id of *its* tokenizer) or K tokens, the author is redrawn with the same coins as
the in-stream decoder (``rng.uniform(seed, t + 1, COIN)``, t counting emitted tokens). When the
author changes, the segment the outgoing author wrote is re-tokenised for the incoming model
(``cowrite``), and only those new ids are fed to its KV cache: no prefix is ever prefilled twice.
The senior's sequence holds its sampled ids plus the junior's text in senior ids, mask 0 there, so
the GRPO loss and the authorship mask mean what they mean in the token-level decoder.

How: one batched loop, one KV cache per model. Each step, each model is fed up to ``chunk`` of the
ids every row owes it (``cowrite.take_pending``: right-aligned, the shorter rows padded and masked),
then every row whose active model owes nothing more samples one token from that model's output
layer; a row still catching up waits (its own step counter, which indexes its coins and uniforms,
does not move, so a row's tokens do not depend on ``chunk`` or on the other rows). ``chunk`` 1 (the
default) keeps every forward one column wide (the lean step where the model has one) at the price
of a wait per handed-off id; None feeds a whole segment in one forward, padding the other rows
(measured in docs/cross_tokenizer.md). Rows that owe a model nothing get masked columns in its cache, so a
cache holds holes; positions stay each row's real ones. Bookkeeping is per row in Python (bytes,
segments, re-tokenisation at a handoff): a cost the same-tokenizer decoder does not pay.

Where it departs from the in-stream decoder: a handoff that would fall inside a multi-byte
character is not applied (the author keeps writing, K counting on), see ``cowrite``; a row's
budget counts tokens emitted by either model and caps the senior's sequence at the same number
(a last junior segment that re-tokenises longer is cut back to a whole character). Finished rows
leave the batch as in the in-stream decoder (``compact``: both caches, both models' inputs and every
per-row state shrink). Schedules: those whose row says ``cross_tokenizers`` (a ``Rule`` that redraws at a
stateless boundary set: each model's own set of that kind, the K backstop where the rule has it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..errors import TandemError
from . import rng
from .cowrite import JUNIOR, SENIOR, CoWritten, Segment, Vocab, take_pending
from .sampling import SamplingParams, sample, scaled_logprobs
from .boundary import boundary_mask
from .schedule import check_p_K, schedule_kind, schedule_names
from .tandem import COMPACT, ModelRunner, Rollout, context_limit, left_pad, rollout_from_rows


@dataclass
class XJunior:
    """A junior of another tokenizer, as rollouts need it: its tokenizer and how it reads a prompt.

    ``prompts``: the senior's prompt ids (as a tuple) -> the junior's prompt ids (the same problem
    in the junior's template); None: the junior reads the senior's prompt text re-encoded (right
    when both templates are plain text, as in the tiny worlds)."""

    tokenizer: object
    senior_tokenizer: object
    prompts: dict | None = None

    def prompt_ids(self, senior_ids: Sequence[int]) -> list[int]:
        if self.prompts is not None:
            key = tuple(int(i) for i in senior_ids)
            if key not in self.prompts:
                raise TandemError("a rollout prompt has no junior prompt (the junior's template was not rendered "
                                  "for it)")
            return list(self.prompts[key])
        text = self.senior_tokenizer.decode(list(senior_ids), skip_special_tokens=False)
        from ..prompting import encode_prompt

        return encode_prompt(self.tokenizer, text)


@dataclass
class CrossRollout(Rollout):
    """A ``Rollout`` (the senior's view) plus, per row, the co-written text and its segments
    (author 0 senior / 1 junior, text)."""

    texts: list | None = None
    segments: list | None = None


class CrossTandemDecoder:
    """Batched co-generation by a senior and a junior of another tokenizer; see the module docstring.

    senior_eos / junior_eos: ids that end a row in each vocabulary (the senior's view ends with
    ``senior_eos[0]`` when the junior ends it). ``compact``: finished rows leave the batch once at
    least this fraction of the rows still in it has finished (0 = as soon as one has, None = never),
    as in ``TandemDecoder``; a row's tokens, authors and log-probs do not depend on it."""

    def __init__(self, senior, junior, senior_tokenizer, junior_tokenizer, schedule: str,
                 sampling: SamplingParams, senior_eos: Sequence[int], junior_eos: Sequence[int],
                 p: float = 0.5, K: int | None = 32, preallocate: bool = True, xjunior: XJunior | None = None,
                 chunk: int | None = 1, compact: float | None = COMPACT):
        rule = schedule_kind(schedule).rule
        if not schedule_kind(schedule).cross_tokenizers:
            raise TandemError(f"schedule {schedule!r} cannot hand off to a junior of another tokenizer; "
                              f"valid: {', '.join(schedule_names(lambda k: k.cross_tokenizers))}")
        check_p_K(p, K)
        kind = None if rule.fires == "token" else rule.fires  # each model's own set of this kind; None: every token
        self.name, self.p, self.K = schedule, p, (K if rule.backstop else None)
        self.runners = (ModelRunner(senior, preallocate), ModelRunner(junior, preallocate))
        self.xjunior = xjunior
        self.vocabs = tuple(Vocab.of(t, m.config.vocab_size, n) for t, m, n in
                            ((senior_tokenizer, senior, "senior"), (junior_tokenizer, junior, "junior")))
        self.boundary = tuple(None if kind is None else boundary_mask(v.tokenizer, kind, len(v.bytes_of))
                              for v in self.vocabs)
        self.eos_ids = tuple(sorted({int(e) for e in ids}) for ids in (senior_eos, junior_eos))
        self.eos_sets = tuple(set(e) for e in self.eos_ids)
        self.pads = tuple(int(v.tokenizer.pad_token_id if v.tokenizer.pad_token_id is not None else e[0])
                          for v, e in zip(self.vocabs, self.eos_ids, strict=True))
        if chunk is not None and chunk < 1:
            raise TandemError(f"chunk (ids fed per model and step) must be >= 1 or None, got {chunk}")
        if compact is not None and not 0.0 <= compact <= 1.0:
            raise TandemError(f"compact (fraction of finished rows that triggers compaction) must be in [0, 1], "
                              f"got {compact}")
        self.sampling, self.chunk, self.compact = sampling, chunk, compact
        self.contexts = tuple(context_limit(r.model) for r in self.runners)
        self.device = self.runners[0].device

    @property
    def schedule(self):
        return self  # what readers of a decoder's ``schedule`` want: ``name`` and ``describe()``

    def describe(self) -> dict:
        d = {"name": self.name, "p": self.p, "handoff": "text (junior of another tokenizer)"}
        return {**d, "K": self.K} if self.K is not None else d

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int] | torch.Tensor,
                 max_new_tokens: Sequence[int] | None = None,
                 junior_prompts: Sequence[Sequence[int]] | None = None) -> CrossRollout:
        """prompts: B senior prompt id lists; seeds: B row seeds; max_new_tokens: optional per-row caps
        (B ints >= 1, bounded by the sampling's max_new_tokens), each bounding the tokens its row emits
        and its senior sequence; junior_prompts: the same B prompts in the junior's ids (default: from
        ``xjunior``)."""
        B = len(prompts)
        if junior_prompts is None:
            if self.xjunior is None:
                raise TandemError("the junior's prompts are needed: give junior_prompts or an XJunior")
            junior_prompts = [self.xjunior.prompt_ids(p) for p in prompts]
        if len(junior_prompts) != B:
            raise TandemError(f"need one junior prompt per prompt: {B} prompts, {len(junior_prompts)} junior prompts")
        seeds = torch.as_tensor(seeds, dtype=torch.long)
        if seeds.shape != (B,):
            raise TandemError(f"need one seed per prompt: {B} prompts, {tuple(seeds.shape)} seeds")
        lens = [max(len(p) for p in ps) for ps in (prompts, junior_prompts)]
        max_new = self.sampling.max_new_tokens
        for P, ctx in zip(lens, self.contexts, strict=True):
            if ctx is not None:
                if P >= ctx:
                    raise TandemError(f"prompt of {P} tokens does not fit the model context of {ctx} tokens")
                max_new = min(max_new, ctx - P)
        caps = [max_new] * B if max_new_tokens is None else [min(int(c), max_new) for c in max_new_tokens]
        if len(caps) != B or min(caps, default=1) < 1:
            raise TandemError(f"max_new_tokens needs one cap >= 1 per prompt: {B} prompts, got {max_new_tokens}")
        try:
            return self._generate(prompts, junior_prompts, seeds, caps, max_new)
        finally:
            for r in self.runners:
                r.release()

    def _generate(self, prompts, junior_prompts, seeds, caps, max_new) -> CrossRollout:
        B, dev = len(prompts), self.device
        attn, pos = [], []
        for m, ps in enumerate((prompts, junior_prompts)):
            ids, a, p = left_pad(ps, self.pads[m])
            self.runners[m].prefill(ids, a, p, ids.shape[1] + 2 * max_new)
            attn.append(a)
            pos.append(p[:, -1] + 1)  # (B,) the position of each row's next token
        author = rng.uniform(seeds, 0, rng.COIN) < self.p  # (B,) True = senior
        since = torch.zeros(B, dtype=torch.long)
        out = [CoWritten(self.vocabs, Segment(SENIOR if bool(a) else JUNIOR)) for a in author.tolist()]
        finished = [False] * B
        # The batch shrinks as rows finish (``compact``): ``rows`` are its rows, ``live`` their places in
        # ``out``; every per-row list and tensor below is indexed by the batch's rows.
        rows, live = list(out), list(range(B))
        plens = [[len(p) for p in ps] for ps in (prompts, junior_prompts)]  # each model's prompt length per row
        done = [False] * B
        emitted = torch.zeros(B, dtype=torch.long)  # (B,) each row's own step: the index of its coins and uniforms
        u_sample = rng.uniform_table(seeds, max_new, rng.SAMPLE)  # (B, T)
        can_drop = self.compact is not None and all(r.can_drop_rows() for r in self.runners)
        while not all(done):
            for m in (SENIOR, JUNIOR):
                self._feed(m, rows, attn, pos)
            ready = torch.tensor([not d and not r.pending[SENIOR if a else JUNIOR]  # (R,) rows that sample now
                                  for d, r, a in zip(done, rows, author.tolist(), strict=True)])
            if not bool(ready.any()):
                continue
            t = emitted.clamp(max=max_new - 1)
            tok, lp = self._sample(author, u_sample.gather(1, t[:, None]).squeeze(1), ready)
            hit = self._hits(author, tok, since)
            coin = (rng.uniform(seeds, t + 1, rng.COIN) < self.p).tolist()
            hit_l, since_l, auth_l = hit.tolist(), since.tolist(), author.tolist()
            tok_l, lp_l, ready_l = tok.tolist(), lp.tolist(), ready.tolist()
            emitted += ready.long()
            em = emitted.tolist()
            for b in range(len(rows)):
                if not ready_l[b]:
                    continue
                r, a, k, cap = rows[b], SENIOR if auth_l[b] else JUNIOR, tok_l[b], caps[b]
                if k in self.eos_sets[a]:
                    done[b] = finished[live[b]] = True
                    if a == SENIOR:
                        r.emit(k, lp_l[b])
                        r.close(JUNIOR)
                    else:  # room for the senior's EOS id after the junior's last segment
                        r.close(SENIOR, keep=cap - 1 - len(r.views[SENIOR]))
                        r.end_with_eos(self.eos_ids[SENIOR][0])
                    continue
                r.emit(k, lp_l[b])
                room = cap - len(r.views[SENIOR])
                if em[b] >= cap or room <= 0 or self._out_of_context(b, r, plens):
                    done[b] = True
                    r.close(1 - a, keep=room if a == JUNIOR else None)
                    continue
                since_l[b] = 0 if hit_l[b] else since_l[b] + 1
                if not hit_l[b] or bool(coin[b]) == auth_l[b]:
                    continue
                if not r.open.can_close():  # mid-character: no handoff, the author keeps writing, K counts on
                    since_l[b] = since[b].item() + 1
                    continue
                auth_l[b] = not auth_l[b]
                if r.close(1 - a, keep=room if a == JUNIOR else None) or len(r.views[SENIOR]) >= cap:
                    done[b] = True  # the junior's text filled the budget
            author, since = torch.tensor(auth_l, dtype=torch.bool), torch.tensor(since_l, dtype=torch.long)
            for r, d in zip(rows, done, strict=True):
                if d:  # nothing more is read from a finished row
                    r.pending[SENIOR].clear()
                    r.pending[JUNIOR].clear()
            n_done = sum(done)
            if can_drop and 0 < n_done < len(rows) and n_done >= self.compact * len(rows):
                keep = [b for b, d in enumerate(done) if not d]
                k = torch.tensor(keep)
                rows, live, caps, done = [rows[b] for b in keep], [live[b] for b in keep], [caps[b] for b in keep], \
                    [False] * len(keep)
                plens = [[pl[b] for b in keep] for pl in plens]
                author, since, emitted, seeds, u_sample = author[k], since[k], emitted[k], seeds[k], u_sample[k]
                attn, pos = [a[k] for a in attn], [p[k] for p in pos]
                for runner in self.runners:
                    runner.keep_rows(k)
        roll = rollout_from_rows([r.views[SENIOR] for r in out], [r.mask for r in out], [r.logprobs for r in out],
                                 finished, self.pads[SENIOR])
        return CrossRollout(roll.tokens.to(dev), roll.senior_mask.to(dev), roll.logprobs.to(dev), roll.lengths.to(dev),
                            roll.finished.to(dev), texts=[r.text for r in out], segments=[r.segments for r in out])

    def _out_of_context(self, b: int, r: CoWritten, plens) -> bool:
        """Whether either model's view of row b (``plens``: each model's prompt length per row) has reached
        its context (a segment still to come could not be fed)."""
        return any(ctx is not None and plens[m][b] + len(r.views[m]) + len(r.open.ids) >= ctx
                   for m, ctx in enumerate(self.contexts))

    def _feed(self, m: int, rows: list[CoWritten], attn: list, pos: list) -> None:
        """Feed model m every id a row owes it, in one forward; rows that owed nothing keep their state."""
        block = take_pending(rows, m, self.pads[m], self.chunk)
        if block is None:
            return
        ids, real = block  # (B, S) each
        n = real.sum(-1)  # (B,) ids fed per row
        step_pos = pos[m][:, None] + (real.cumsum(-1) - 1).clamp(min=0)  # (B, S) each row's real positions
        attn[m] = torch.cat([attn[m], real], dim=1)
        runner = self.runners[m]
        old = runner.hidden
        if ids.shape[1] == 1:  # one column: the runner's step (the lean one where the model has it)
            runner.step(ids, step_pos, attn[m], attn[m].bool()[:, None, None, :])
        else:
            runner.hidden = runner.forward(ids, attn[m], step_pos)
        runner.hidden = torch.where((n > 0).to(runner.hidden.device)[:, None], runner.hidden, old)
        pos[m] = pos[m] + n

    def _sample(self, author: torch.Tensor, u: torch.Tensor, ready: torch.Tensor):
        """The token of each ``ready`` row from its author's output layer (an id of the author's
        vocabulary) and its log-prob; (B,) each, 0 elsewhere."""
        B = author.shape[0]
        tok = torch.zeros(B, dtype=torch.long)
        lp = torch.zeros(B, dtype=torch.float32)
        for m, rows_m in ((SENIOR, (author & ready).nonzero().squeeze(1)),
                          (JUNIOR, (~author & ready).nonzero().squeeze(1))):
            if rows_m.numel() == 0:
                continue
            logits = self.runners[m].logits(rows_m).cpu()  # (R, V_m)
            t = sample(logits, u[rows_m], self.sampling)
            tok[rows_m] = t
            lp[rows_m] = scaled_logprobs(logits, self.sampling).gather(-1, t[:, None]).squeeze(-1)
        return tok, lp

    def _hits(self, author: torch.Tensor, tok: torch.Tensor, since: torch.Tensor) -> torch.Tensor:
        """(B,) bool: rows whose author is redrawn after ``tok`` (its own boundary set, or K tokens)."""
        if self.boundary[SENIOR] is None:
            hit = torch.ones_like(author)
        else:
            s, j = self.boundary
            hit = torch.where(author, s[tok.clamp(max=s.shape[0] - 1)], j[tok.clamp(max=j.shape[0] - 1)])
        if self.K is not None:
            hit = hit | (since + 1 >= self.K)
        return hit

