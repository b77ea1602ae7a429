"""The tandem schedule as a vLLM V1 logits processor (entry-point group ``vllm.logits_processors``).

vLLM calls ``update_state`` before every forward pass (requests added, removed, moved in the
persistent batch; each added request brings a live reference to its output-token list) and
``apply`` on the (B, Vs + Vj) logits of ``TandemForCausalLM`` (a junior pool: (B, Vs + Vj0 + Vj1 + ...),
and a row's junior turns read the half of its request's ``junior`` index). For every row the processor
replays the request's schedule over the tokens emitted since its last call, with our own
schedule code (``decoding.schedule``) and counter-based coins (``decoding.rng``), and
returns the active model's half: (B, Vs). So a request's authorship is the same pure
function of (seed, tokens) as in the transformers decoder, and ``schedule.replay`` recovers
the senior mask from the finished tokens alone.

Per request, the schedule arrives in ``SamplingParams.extra_args``, flat (``tandem_schedule``,
``tandem_p``, ``tandem_K``, ``tandem_seed``: what a server's ``vllm_xargs`` carries) or nested
(``extra_args["tandem"] = {"schedule", "p", "K", "seed"}``: in-process engines); both are
parsed and validated by ``request_args.parse`` in ``validate_params``, so a bad value is
refused with the request (HTTP 400 on a server) and never reaches the step. A request
without them is written by the senior. On any model other than the tandem model the
processor does nothing, so having it installed never changes other vLLM engines.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from .request_args import NESTED_KEY, POOL_SIZE_ENV, PREFIX, RequestArgError, TandemArgs, parse
from .vllm_plugin import ARCH


@dataclass
class _Row:
    """One request's schedule state between steps (scalars; batched in ``apply``)."""

    key: tuple
    seed: int
    out: list[int]  # vLLM's live output-token list for the request
    junior: int = 0  # the pool junior that writes its junior turns
    done: int = 0  # tokens already replayed
    author: bool = True
    since: int = 0
    tail: int = 0


class TandemLogitsProcessor(LogitsProcessor):
    """Keeps each row's active half of the tandem logits; see the module docstring."""

    @classmethod
    def validate_params(cls, sampling_params):
        """Refuse bad tandem arguments at admission, naming the field: vLLM's validation error,
        which its server answers with HTTP 400 (``parameter`` = the field)."""
        try:
            args = parse(sampling_params.extra_args, sampling_params.seed)
            # the served model's junior count (tandem serve sets it; unset in-process, where the decoder checks)
            pool = os.environ.get(POOL_SIZE_ENV)
            if args is not None and pool and args.junior >= int(pool):
                field = "tandem.junior" if NESTED_KEY in (sampling_params.extra_args or {}) else f"{PREFIX}junior"
                raise RequestArgError(f"{field}: junior {args.junior} is not served (the server holds {int(pool)} "
                                      f"junior{'s' if int(pool) > 1 else ''}: indices 0..{int(pool) - 1})", field)
        except RequestArgError as e:
            from vllm.exceptions import VLLMValidationError

            raise VLLMValidationError(str(e), parameter=e.field) from None

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        mc = vllm_config.model_config
        cfg = mc.hf_config
        self.active = ARCH in (getattr(cfg, "architectures", None) or [])
        self.rows: dict[int, _Row] = {}
        self.schedules: dict[tuple, object] = {}
        if not self.active:
            return
        from transformers import AutoConfig, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(mc.tokenizer)
        self.Vs = int(cfg.vocab_size)
        from .vllm_model import junior_paths

        self.Vj = [int(AutoConfig.from_pretrained(p).vocab_size) for p in junior_paths(cfg)]

    def is_argmax_invariant(self) -> bool:
        return False  # it picks which model's logits a row sees: greedy depends on it

    # ------------------------------------------------------------------ batch bookkeeping
    def _schedule(self, key: tuple):
        if key not in self.schedules:
            from ..decoding.schedule import make_schedule

            name, p, K = key
            self.schedules[key] = make_schedule(name, self.tokenizer, p=p, K=K, vocab_size=self.Vs)
        return self.schedules[key]

    def _new_row(self, params, out: list[int]) -> _Row:
        args = parse(params.extra_args, params.seed) or TandemArgs("senior", 1.0)
        key = (args.schedule, args.p, args.K)
        if args.junior >= len(self.Vj):  # refused before (decoder, server validation); never silently another
            raise ValueError(f"tandem request for junior {args.junior}, but the engine holds {len(self.Vj)}")
        row = _Row(key, args.seed, out, args.junior)
        st = self._schedule(key).start(torch.tensor([row.seed], dtype=torch.int64))
        row.author, row.since = bool(st.author[0]), int(st.since[0])
        row.tail = int(st.tail[0]) if st.tail is not None else 0
        return row

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if not self.active or batch_update is None:
            return
        for i in batch_update.removed:
            self.rows.pop(i, None)
        for i, params, _prompt, out in batch_update.added:
            self.rows[i] = self._new_row(params, out)
        for a, b, kind in batch_update.moved:
            ra, rb = self.rows.pop(a, None), self.rows.pop(b, None)
            if ra is not None:
                self.rows[b] = ra
            if rb is not None and kind == MoveDirectionality.SWAP:
                self.rows[a] = rb

    # ------------------------------------------------------------------ the step
    def _catch_up(self) -> None:
        """Advance every row's schedule over the tokens it emitted since the last call.
        Rows of one schedule advance together (one batched ``advance`` per token depth)."""
        from ..decoding.schedule import ScheduleState

        behind = [r for r in self.rows.values() if len(r.out) > r.done]
        while behind:
            groups: dict[tuple, list[_Row]] = {}
            for r in behind:
                groups.setdefault(r.key, []).append(r)
            for key, rows in groups.items():
                state = ScheduleState(torch.tensor([r.author for r in rows]), torch.tensor([r.since for r in rows]),
                                      torch.tensor([r.seed for r in rows], dtype=torch.int64), None,
                                      torch.tensor([r.tail for r in rows]))
                steps = torch.tensor([r.done for r in rows], dtype=torch.int64)
                tokens = torch.tensor([r.out[r.done] for r in rows], dtype=torch.int64)
                self._schedule(key).advance(state, tokens, steps)
                tail = state.tail.tolist() if state.tail is not None else [0] * len(rows)
                for r, a, s, t in zip(rows, state.author.tolist(), state.since.tolist(), tail, strict=True):
                    r.author, r.since, r.tail, r.done = a, s, t, r.done + 1
            behind = [r for r in behind if len(r.out) > r.done]

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, Vs + Vj0 + ...) -> (B, Vs): each row's active model's logits."""
        if not self.active:
            return logits
        self._catch_up()
        B = logits.shape[0]
        author = torch.tensor([self.rows[i].author if i in self.rows else True for i in range(B)],
                              device=logits.device)
        senior = logits[:, : self.Vs]
        halves, at = [], self.Vs
        for Vj in self.Vj:
            junior = logits[:, at: at + Vj]
            at += Vj
            if Vj < self.Vs:  # a junior with a smaller table never proposes the extra ids
                junior = torch.nn.functional.pad(junior, (0, self.Vs - Vj), value=float("-inf"))
            elif Vj > self.Vs:
                junior = junior[:, : self.Vs]
            halves.append(junior)
        if len(halves) == 1:
            junior = halves[0]
        else:  # a pool: each row's own junior's half
            which = torch.tensor([self.rows[i].junior if i in self.rows else 0 for i in range(B)], device=logits.device)
            junior = torch.stack(halves)[which, torch.arange(B, device=logits.device)]
        return torch.where(author[:, None], senior, junior)
