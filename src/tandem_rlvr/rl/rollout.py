"""TRL ``rollout_func``: the run's rollout engine generates the GRPO rollouts, with the senior mask.

TRL's GRPOTrainer calls ``rollout(prompts, trainer)`` with this process's prompts (each
already repeated ``group_size`` times by TRL's sampler) and multiplies the senior mask into
the loss mask (TRL takes it as ``env_mask`` and calls it ``tool_mask`` inside), so the
clipped surrogate touches only senior-written tokens. The mask is fail-closed: a completion
without a mask, or with one of another length, is an error.

Authorship coins and token samples derive from (seed, step, prompt, sample): the row seed
is ``row_seed(seed, global_step, crc32(prompt), k)`` where k counts earlier copies of the
same prompt in the *global* batch (gathered across processes), so a resumed run and a
2-process run redraw exactly the rollouts of a 1-process run.

With a junior pool each row's junior is drawn from (seed, step, problem id, copy index or 0) by
``rl.pool_log.draw_juniors`` and decoded with it; the step's per-junior figures and the rollout log
(``rollouts.jsonl``) follow once TRL has scored the rows (``scored``, called by the trainer).
"""

from __future__ import annotations

import math
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass

import torch
from accelerate.utils import gather_object

from ..decoding.render import author_switches
from ..decoding.rng import row_seed
from ..engines.base import RolloutSpec
from ..errors import TandemError
from ..prompting import encode_prompt, render_prompt
from .trainer import record_metrics
from .weights import EngineSync


def check_senior_mask(completion_ids: list[list[int]], senior_mask) -> None:
    """Fail closed: every completion needs a senior mask of its own length."""
    if senior_mask is None:
        raise TandemError("tandem batch has no senior mask; refusing to fall back to vanilla GRPO")
    if len(senior_mask) != len(completion_ids):
        raise TandemError(f"senior mask has {len(senior_mask)} rows for {len(completion_ids)} completions")
    for i, (c, m) in enumerate(zip(completion_ids, senior_mask, strict=True)):
        if len(c) != len(m):
            raise TandemError(f"senior mask of completion {i} has length {len(m)}, completion has {len(c)} tokens")


def occurrence_seeds(all_prompts: list[str], base_seed: int, step: int) -> list[int]:
    """One seed per row of the global batch: (seed, step, prompt, k-th copy of that prompt)."""
    seen: dict[int, int] = defaultdict(int)
    seeds = []
    for text in all_prompts:
        key = zlib.crc32(text.encode())
        seeds.append(row_seed(base_seed, step, key, seen[key]))
        seen[key] += 1
    return seeds


@dataclass
class Planned:
    """One process's share of a rollout batch, ready to decode: the update it trains (``step``), its prompt
    texts and ids, row seeds, each row's junior (a pool; else None) and the global pool draw (``pool``)."""

    step: int
    prompts: list[str]
    ids: list[list[int]]
    seeds: list[int]
    juniors: list[int] | None
    pool: dict | None


class TandemRollout:
    """Callable given to ``GRPOTrainer(rollout_func=...)``; see module docstring.

    cfg: the run's ``TrainConfig`` (schedule ``cfg.rollout_schedule``: ``senior`` for GRPO and
    KL-Reg; sampling, seed, prompt limit, KL monitoring). pair: the run's ``models.Pair`` (its
    junior and tokenizer; the senior comes from the trainer). engine: the run's rollout engine
    (``engines.base.RolloutEngine``), which ``sync`` keeps at the trainer's weights.
    """

    def __init__(self, cfg, pair, engine, problem_ids: dict[str, str] | None = None, rollout_log=None):
        self.cfg, self.tok = cfg, pair.tokenizer
        # KL monitoring reads the senior's ids under each junior: none for a junior of another tokenizer
        xjuniors = pair.xjuniors or (pair.xjunior,) * len(pair.juniors or (pair.junior,))
        self.juniors = tuple(None if x is not None else j
                             for j, x in zip(pair.juniors or (pair.junior,), xjuniors, strict=True))
        self.junior = self.juniors[0]  # a pool's juniors, in pool order; ``junior`` the first (one junior: it)
        self.pool = cfg.models.pool
        from ..models import recorded_labels

        self.labels = recorded_labels(self.pool)  # a built-in junior by its name, as config.json records it
        self.problem_ids = problem_ids or {}  # prompt text -> the problem's stable id (the pool's draw key)
        self.rollout_log = rollout_log  # rl.pool_log.RolloutLog of a pool run
        self.drawn = None  # the last pool batch's global rows, until TRL has scored them
        self.sampling = cfg.rollout.sampling
        self.spec = RolloutSpec(cfg.rollout_schedule, cfg.rollout.sampling, cfg.rollout.p, cfg.rollout.K)
        self.last = {}  # metrics of the last call, for tests and logging
        self.completions = None  # rl.completions.CompletionsLog, once log_completions asks for it
        self.engine = engine
        self.sync = EngineSync(engine, cfg.models.sync_bucket_mb << 20)  # shared with validation
        self.overlap = None  # rl.overlap.Overlap of a run with max_staleness >= 1 (``start_overlap``)

    def start_overlap(self) -> None:
        """Decode the next ``max_staleness`` rollout steps while one trains (``rl.overlap``)."""
        from .overlap import Overlap

        self.overlap = Overlap(self, self.cfg.rollout.max_staleness)

    def __call__(self, prompts: list, trainer) -> dict:
        if self.overlap is not None:
            return self.overlap(prompts, trainer)
        step = int(trainer.state.global_step)
        planned = self.plan(prompts, trainer, step)
        senior = trainer.accelerator.unwrap_model(trainer.model)
        was_training = senior.training
        senior.eval()
        t0 = time.perf_counter()
        try:
            self.push(senior, step)  # the engine decodes this update's weights
            t1 = time.perf_counter()
            roll = self.decode(planned)
        finally:
            senior.train(was_training)
            self.engine.sleep()  # vllm_sleep: free the engine's memory for the optimiser step
        t2 = time.perf_counter()
        timing = {"wall/rollout_wait_s": t2 - t1, "wall/weight_sync_s": t1 - t0, "wall/generate_s": t2 - t1}
        return self.finish(planned, roll, trainer, version=step, timing=timing)

    def render(self, prompts: list) -> list[str]:
        """Prompt texts (conversational prompts through the chat template)."""
        return [render_prompt(self.tok, p) for p in prompts]

    def plan(self, prompts: list, trainer, step: int) -> Planned:
        """What this process decodes for the rollout step that trains at update ``step``: its prompts' ids,
        row seeds and pool draws, from the global batch (a collective when several processes train)."""
        prompts = self.render(prompts)
        acc = trainer.accelerator
        all_prompts = prompts
        offset = 0
        if acc.num_processes > 1:
            sizes = gather_object([len(prompts)])
            all_prompts = gather_object(list(prompts))
            offset = sum(sizes[: acc.process_index])
        cfg = self.cfg
        seeds = occurrence_seeds(all_prompts, cfg.loop.seed, step)[offset: offset + len(prompts)]
        juniors = pool = None
        if not self.pool.single:
            from .pool_log import draw_juniors

            keys = [self.problem_ids.get(t, t) for t in all_prompts]
            drawn, copies = draw_juniors(self.pool, cfg.loop.seed, step, keys, cfg.rollout.junior_draw == "rollout")
            juniors = drawn[offset: offset + len(prompts)]
            pool = {"juniors": drawn, "keys": keys, "copies": copies}
        ids = [encode_prompt(self.tok, p) for p in prompts]
        too_long = [len(x) for x in ids if len(x) > cfg.data.max_prompt_tokens]
        if too_long:
            raise TandemError(f"a training prompt has {max(too_long)} tokens, "
                              f"over max_prompt_tokens={cfg.data.max_prompt_tokens}")
        return Planned(step, prompts, ids, seeds, juniors, pool)

    def push(self, senior, step: int) -> None:
        """The engine takes update ``step``'s weights (nothing when it holds them already)."""
        self.sync(senior, step)

    def decode(self, planned: Planned):
        """The engine's rollouts of a planned batch (``decoding.tandem.Rollout``); thread-safe for an engine that
        ``overlaps``."""
        if planned.juniors is None:
            return self.engine.generate(planned.ids, planned.seeds, self.spec)
        return self.engine.generate(planned.ids, planned.seeds, self.spec, juniors=planned.juniors)

    def finish(self, planned: Planned, roll, trainer, version: int, timing: dict) -> dict:
        """TRL's rollout dict of a decoded batch, with the step's figures recorded (``version``: the update whose
        weights drew it; ``timing``: seconds waited, pushing and decoding)."""
        acc, cfg = trainer.accelerator, self.cfg
        step, prompts, ids, juniors = planned.step, planned.prompts, planned.ids, planned.juniors
        if step != int(trainer.state.global_step):
            raise TandemError(f"rollouts planned for update {step} reached update {trainer.state.global_step}")
        completion_ids = [roll.row_tokens(b) for b in range(len(ids))]
        senior_mask = [roll.row_mask(b) for b in range(len(ids))]
        logprobs = [roll.logprobs[b, : len(c)].tolist() for b, c in enumerate(completion_ids)]
        check_senior_mask(completion_ids, senior_mask)
        if getattr(trainer.args, "log_completions", False) and acc.is_main_process:  # who wrote which words
            if self.completions is None:
                from .completions import CompletionsLog

                self.completions = CompletionsLog(trainer.args.output_dir, self.tok,
                                                  trainer.args.num_completions_to_print)
            self.completions.write(trainer, prompts, completion_ids, senior_mask)

        # Metrics of the whole step: with several processes each holds only its share of the rows.
        share, lengths = roll.senior_share.tolist(), roll.lengths.tolist()
        switches = [author_switches(m) for m in senior_mask]
        want_kl = bool(cfg.loop.kl_every and step % cfg.loop.kl_every == 0
                       and any(j is not None for j in (self.juniors if juniors is not None else (self.junior,))))
        kl = self._kl_to_junior(ids, completion_ids, senior_mask, logprobs, juniors) if want_kl else (0.0, 0, 0.0, 0)
        if acc.num_processes > 1:
            share, lengths, kls = gather_object(share), gather_object(lengths), gather_object([kl])
            switches = gather_object(switches)
            kl = tuple(map(sum, zip(*kls, strict=True)))  # each process's kl: the same 4 sums
        share = torch.tensor(share, dtype=torch.float64)
        # a server decoded it: this process's share of the work (read leniently: an ENGINES plug-in's own
        # rollout class need not carry the field)
        if getattr(roll, "client_cpu_s", None) is not None:
            timing = {**timing, "cpu/rollout_client_s": roll.client_cpu_s}
        metrics = {**timing, "overlap/staleness": float((step - version) // cfg.loop.updates_per_batch),
                   "senior/token_share": float(share.mean()), "senior/token_share_sd": float(share.std(unbiased=False)),
                   "response/mean_length": float(torch.tensor(lengths, dtype=torch.float64).mean()),
                   "senior/switches_per_seq": sum(switches) / max(len(switches), 1)}
        if want_kl and (juniors is None or kl[3]):  # a mixed pool's step that drew no same-tokenizer row: no KL figure
            metrics["kl/junior"] = kl[0] / max(kl[1], 1)
            if kl[3]:  # the junior's mean log-prob per emitted token, whoever emitted it (ours; verl logs no such mean)
                metrics["junior/logprob"] = kl[2] / kl[3]
        if juniors is not None:  # the whole batch's rows, scored by TRL next (``scored``)
            self.drawn = {"step": step, **planned.pool, "shares": share.tolist(), "lengths": [int(x) for x in lengths]}
        self.last = metrics
        record_metrics(trainer, metrics)
        # env_mask: TRL's name for the senior mask (1 = the senior sampled this token)
        return {"prompt_ids": ids, "completion_ids": completion_ids, "logprobs": logprobs, "env_mask": senior_mask}

    def scored(self, trainer, rewards: list[float]) -> None:
        """The last pool batch's per-junior figures and rollout rows, given TRL's reward of every row of the
        global batch (``rewards``, in the order of the gathered prompts)."""
        from .pool_log import junior_figures

        d, self.drawn = self.drawn, None
        if d is None:
            return
        labels = self.labels
        record_metrics(trainer, junior_figures(labels, d["juniors"], rewards, d["shares"], d["lengths"]))
        if self.rollout_log is not None:
            rollout_step = self.cfg.loop.rollout_steps(d["step"] + 1)
            self.rollout_log.write([
                {"step": d["step"], "rollout_step": rollout_step, "problem_id": key, "rollout": k,
                 "junior": labels[j], "reward": None if math.isnan(r) else r, "senior_share": s, "length": n}
                for key, k, j, r, s, n in zip(d["keys"], d["copies"], d["juniors"], rewards, d["shares"], d["lengths"],
                                              strict=True)])

    @torch.no_grad()
    def _kl_to_junior(self, ids, completion_ids, senior_mask, logprobs, juniors=None) -> tuple[float, int, float, int]:
        """Sum and count of the k3 estimate of KL(senior || junior) on senior-written tokens
        (temperature-scaled distributions), then sum and count of the junior's log-prob of every
        emitted token, from one teacher-forced junior forward (a pool: each row's own junior, one
        forward per junior drawn; the rows of a junior of another tokenizer, which cannot read the senior's ids,
        are left out of both). Monitoring only."""
        from ..decoding.teacher_forcing import response_logprobs

        groups = [(self.junior, list(range(len(ids))))] if juniors is None else \
            [(model, [b for b, x in enumerate(juniors) if x == j]) for j, model in enumerate(self.juniors)]
        lj = [None] * len(ids)
        for model, rows in groups:
            if rows and model is not None:
                got = response_logprobs(model, [ids[b] for b in rows], [completion_ids[b] for b in rows],
                                        self.tok.pad_token_id, self.sampling.temperature)
                for b, x in zip(rows, got, strict=True):
                    lj[b] = x
        tot, n = 0.0, 0
        lp_tot = sum(float(x.double().sum()) for x in lj if x is not None)
        lp_n = sum(len(x) for x in lj if x is not None)
        for b in range(len(completion_ids)):
            m = torch.tensor(senior_mask[b], dtype=torch.bool)
            if lj[b] is None or not m.any():
                continue
            log_r = lj[b][m] - torch.tensor(logprobs[b])[m]  # log p_jun / p_sen at senior tokens
            tot += float((torch.exp(log_r) - log_r - 1).clamp(min=0).sum())  # >= 0 exactly; rounding can dip below
            n += int(m.sum())
        return tot, n, lp_tot, lp_n

