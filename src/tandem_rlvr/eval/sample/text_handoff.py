"""Text-level handoff: ``tandem eval handoff --protocol text`` (the paper's ``eval/handoff.py``).

What: senior and junior write a response in turns. A turn is one generation call that runs
until the model writes a paragraph break ``\\n\\n`` (kept, the text after it in the same
token cut, as vLLM's ``stop`` with ``include_stop_str_in_output`` does), ends its answer
(EOS), or reaches the turn's cap. The turn's text is decoded and appended to the response;
the next turn's model reads its own prompt (its own tokenizer and prompt template) followed
by the response so far, re-tokenised. Who writes a turn is the schedule's ``text_turns``
(``decoding.schedule.ScheduleKind``): "alternate" (``paragraph-roundrobin``), the senior writes
the first turn, then the two alternate; "coin" (``paragraph-bernoulli``), each turn's author is a
coin, senior with probability p. A chain ends at EOS, when its tokens reach the shared budget
(each turn's tokens counted in its author's tokenizer, as the paper counts them), when a
turn hits its cap, when the next prompt leaves no room in the model's context, or after
``MAX_ROUNDS`` rounds (a round: every live senior turn, then every live junior turn).

Budget per chain: min(max new tokens, context - longest reading of the prompt - 8) over the
two models' contexts (the paper: min(3000, 4096 - prompt - 8) with vLLM's 4096-token window;
ours uses each model's own context, max_position_embeddings).

Seeds: chain seed = ``row_seed(seed, problem key, sample)`` as in the in-stream sampler;
turn i of a chain samples with ``row_seed(chain seed, i)`` and its coin (bernoulli) is
``rng.uniform(chain seed, i, COIN)``. Nothing depends on the batch or on which chains share it.

Why: the two models never share a KV cache or an id, so the junior may have another
tokenizer and chat template (the paper's out-of-family juniors); the in-stream decoder
(``--protocol stream``) needs one vocabulary and keeps text after a break inside the same
token with the outgoing author. Differences, measured: docs/evaluation.md, "Measured: handoff protocols".

How: the chain bookkeeping here is shared by both engines; only a model's ``turns`` differs
(``TurnEngine``). ``--engine hf``: one ``TandemDecoder`` per model with the solo schedule and
a paragraph stop (``decoding.tandem``, ``stop=``); each turn is one batched call over every
live chain whose author it is (split only where one call's padded length would bind a row's
cap below what it is owed; rarely). ``--engine vllm``: one stock vLLM engine per model (a pool of the
senior's tokenizer: one tandem engine holding them all), each turn one ``generate`` call over all those
chains (``text_handoff_vllm``). The sample row keeps each turn's text, author, tokens and end, so
authorship is exact per character; ``token_ids`` / ``senior_mask`` are the turns re-encoded
with the senior's tokenizer, turn by turn, so the in-stream readers work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...decoding import rng
from ...decoding.rng import row_seed
from ...errors import TandemError
from ...fingerprint import problem_fingerprint
from ...prompting import resolve_template
from ...tasks import task_row
from .turns import TurnEngine, turn_result

MAX_ROUNDS = 150  # the paper's code (MAX_ROUNDS in eval/handoff.py)
CONTEXT_RESERVE = 8  # tokens kept free below the context, as the paper's code does
SENIOR, JUNIOR = 0, 1
ROLES = ("senior", "junior")


class TurnModel(TurnEngine):
    """One model of the pair on ``--engine hf``: its tokenizer, prompt template and a solo
    decoder that stops at the first paragraph break of each turn."""

    def __init__(self, model, tokenizer, sampling, template: str):
        from ...decoding.boundary import ParagraphBoundary
        from ...decoding.schedule import make_schedule
        from ...decoding.tandem import TandemDecoder, context_limit
        from ...models import eos_ids

        V = model.config.vocab_size
        self.tokenizer, self.template = tokenizer, resolve_template(tokenizer, template)
        self.decoder = TandemDecoder(model, None, make_schedule("senior"), sampling,
                                     eos_ids(tokenizer, getattr(model, "generation_config", None)),
                                     tokenizer.pad_token_id, stop=ParagraphBoundary(tokenizer, V))
        self.context = context_limit(model)

    def turns(self, prompts: list[list[int]], seeds: list[int], caps: list[int]) -> list[tuple[str, int, str, float]]:
        """One turn of each row (``TurnEngine.turns``).

        Rows are grouped so that no row's cap is cut by a longer prompt in its call (the
        decoder bounds one call by context - longest prompt)."""
        out: list = [None] * len(prompts)
        for group in _context_groups([len(p) for p in prompts], caps, self.context):
            roll = self.decoder.generate([prompts[i] for i in group], [seeds[i] for i in group],
                                         max_new_tokens=[caps[i] for i in group])
            for b, i in enumerate(group):
                toks = roll.row_tokens(b)
                lp = float(roll.logprobs[b, : len(toks)].double().sum())
                out[i] = turn_result(self.tokenizer, toks, bool(roll.finished[b]), lp)
        return out


def _context_groups(lens: list[int], caps: list[int], context: int | None) -> list[list[int]]:
    """Rows (longest prompt first) in calls where every cap fits context - the call's longest prompt."""
    order = sorted(range(len(lens)), key=lambda i: -lens[i])
    if context is None:
        return [order] if order else []
    groups: list[list[int]] = []
    for i in order:
        if groups and caps[i] <= context - lens[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


@dataclass
class Chain:
    """One response being written in turns. ``turns``: [author (0 senior, 1 junior), text,
    tokens generated by the author, end]; ``end`` of the chain: eos | budget | length | context | rounds."""

    problem: object  # data.benchmarks.Problem
    sample_idx: int
    seed: int
    prompts: tuple[str, str]  # the prompt text in the senior's and in the junior's template
    budget: int
    junior: int = 0  # which junior of a pool writes the junior's turns (``pool_decoding.sample_junior``)
    author: int = SENIOR
    text: str = ""
    used: int = 0
    turns: list = field(default_factory=list)
    logprobs: list = field(default_factory=list)  # per turn, the sum of its tokens' log-probs (its author's)
    end: str | None = None

    @property
    def done(self) -> bool:
        return self.end is not None


class TextHandoff:
    """The text-level handoff of a pair of ``TurnModel``s; ``sample_chunk`` is what the sampler calls.

    With a junior pool (``pool``: a ``pool.JuniorPool`` over the turn models in ``juniors``) each
    chain's junior turns are written by the junior its seed draws (``pool_decoding.sample_junior``)."""

    def __init__(self, senior: TurnModel, junior: TurnModel, schedule: str, p: float = 0.5,
                 max_new_tokens: int = 3000, max_rounds: int = MAX_ROUNDS, juniors=(), pool=None):
        from ...decoding.schedule import schedule_kind, schedule_names

        self.turns = schedule_kind(schedule).text_turns  # "alternate" or "coin"
        if self.turns is None:
            raise TandemError(f"--protocol text hands off at paragraph breaks: schedule must be one of "
                              f"{', '.join(schedule_names(lambda k: k.text_turns))}, got {schedule!r} "
                              "(use --protocol stream)")
        self.pair, self.name, self.p = (senior, junior), schedule, p
        self.juniors, self.pool = tuple(juniors) or (junior,), pool
        self.max_new_tokens, self.max_rounds = max_new_tokens, max_rounds

    def chain_models(self, chain: Chain) -> tuple[TurnModel, TurnModel]:
        """(senior, junior) turn models of ``chain``."""
        return self.pair[0], self.juniors[chain.junior]

    @property
    def schedule(self):
        return self  # the sampler reads ``decoder.schedule.name`` and ``.describe()``

    def describe(self) -> dict:
        d = {"name": self.name, "protocol": "text", "max_rounds": self.max_rounds, "context_reserve": CONTEXT_RESERVE,
             "templates": {r: m.template for r, m in zip(ROLES, self.pair, strict=True)}}
        if self.pool is not None:
            from .pool_decoding import pool_record

            d["templates"]["juniors"] = [m.template for m in self.juniors]
            d["pool"] = pool_record(self.pool)
        return {**d, "p": self.p} if self.turns == "coin" else d

    def _author(self, chain: Chain) -> int:
        """The author of the chain's next turn."""
        i = len(chain.turns)
        if self.turns == "alternate":
            return SENIOR if i == 0 else 1 - chain.turns[-1][0]
        coin = rng.uniform(torch.tensor([chain.seed], dtype=torch.long), i, rng.COIN)
        return SENIOR if bool(coin[0] < self.p) else JUNIOR

    def new_chain(self, problem, sample_idx: int, seed: int, task) -> Chain:
        from .pool_decoding import sample_junior

        junior = sample_junior(self.pool, seed) if self.pool is not None else 0
        pair = (self.pair[0], self.juniors[junior])
        prompts = tuple(m.prompt(problem, task) for m in pair)
        room = [m.context - len(m.encode(pr)) - CONTEXT_RESERVE for m, pr in zip(pair, prompts, strict=True)
                if m.context is not None]
        budget = min([self.max_new_tokens, *room])
        chain = Chain(problem, sample_idx, seed, prompts, budget, junior)
        if budget < 1:
            chain.end = "context"
        chain.author = self._author(chain)
        return chain

    def run(self, chains: list[Chain]) -> None:
        """Write every chain to its end (in place): rounds of senior turns, then junior turns."""
        for _ in range(self.max_rounds):
            moved = False
            for who in (SENIOR, JUNIOR):
                live = [c for c in chains if not c.done and c.author == who]
                for j in dict.fromkeys(c.junior if who == JUNIOR else 0 for c in live):  # one call per junior of a pool
                    self._turn(who, [c for c in live if who == SENIOR or c.junior == j])
                    moved = True
            if not moved:
                return
        for c in chains:
            if not c.done:
                c.end = "rounds"

    def _turn(self, who: int, chains: list[Chain]) -> None:
        m = self.chain_models(chains[0])[who]  # every chain of a junior turn has the same junior
        ids, caps, go = [], [], []
        for c in chains:
            x = m.encode(c.prompts[who] + c.text)
            cap = c.budget - c.used
            if m.context is not None:
                cap = min(cap, m.context - len(x))
            if cap < 1:
                c.end = "context"
                continue
            ids.append(x)
            caps.append(cap)
            go.append(c)
        if not go:
            return
        seeds = [row_seed(c.seed, len(c.turns)) for c in go]
        for c, (text, n, end, lp) in zip(go, m.turns(ids, seeds, caps), strict=True):
            c.turns.append((who, text, n, end))
            c.logprobs.append(lp)
            c.text += text
            c.used += n
            if end == "eos":
                c.end = "eos"
            elif end == "length" or c.used >= c.budget:
                c.end = "budget" if c.used >= c.budget else "length"
            else:
                c.author = self._author(c)

    def sample_chunk(self, chunk, cfg, sample_seed) -> list[dict]:
        """Sample rows (``eval.sample.sampler`` format plus ``turns``) of ``cfg.n`` chains per problem of ``chunk``
        for the ``config.EvalConfig`` ``cfg``; ``sample_seed(seed, problem, sample)`` is the sampler's row seed
        (the chain seed)."""
        task = cfg.problems.run_task  # the run's task: its prompt and its verifier
        chains = [self.new_chain(p, s, sample_seed(cfg.decoding.seed, p, s), task)
                  for p in chunk for s in range(cfg.n)]
        self.run(chains)
        grades = task.grade([c.text for c in chains], [task_row(c.problem) for c in chains])
        return [self.row(c, g) for c, g in zip(chains, grades, strict=True)]

    def row(self, c: Chain, grade) -> dict:
        """A samples.jsonl row of a finished chain."""
        s_tok, j_tok = (m.tokenizer for m in self.chain_models(c))
        ids, mask, j_count = [], [], [0, 0]
        for who, text, _, _ in c.turns:
            x = s_tok.encode(text, add_special_tokens=False)
            ids += x
            mask += [int(who == SENIOR)] * len(x)
            j_count[who] += len(j_tok.encode(text, add_special_tokens=False))
        chars = [sum(len(t[1]) for t in c.turns if t[0] == w) for w in (SENIOR, JUNIOR)]
        p = c.problem
        return {"benchmark": p.benchmark, "problem_id": str(p.problem_id), "sample_idx": c.sample_idx,
                "response": c.text, "correct": grade.score == 1.0, "reason": grade.reason,
                "senior_share": _share(sum(mask), len(mask)), "tokens": len(ids), "finished": c.end == "eos",
                "token_ids": ids, "senior_mask": mask, "seed": c.seed, "answer": p.answer,
                "problem_fp": problem_fingerprint(p), "senior_share_chars": _share(chars[0], sum(chars)),
                "senior_share_junior_tokens": _share(j_count[0], sum(j_count)), "generated_tokens": c.used,
                "end": c.end,
                "junior_lp_sum": sum(lp for (w, *_), lp in zip(c.turns, c.logprobs, strict=True) if w == JUNIOR),
                "turns": [{"author": ROLES[w], "text": t, "tokens": n, "end": e, "logprob_sum": lp}
                          for (w, t, n, e), lp in zip(c.turns, c.logprobs, strict=True)]}


def _share(a: int, total: int) -> float:
    return a / total if total else 0.0


def open_text_handoff(cfg, schedule: str):
    """(TextHandoff, senior tokenizer, close) for an ``EvalConfig`` on an engine that runs text turns
    (``engines.base.EngineKind.text_turns``): our transformers models, or vLLM engines
    (``text_handoff_vllm``)."""
    from ...engines.base import ENGINES, engine_kind
    from ...models import load_model, load_tokenizer, resolve_device

    kind = engine_kind(cfg.decoding.engine)
    if not kind.text_turns:
        ok = " or ".join(k for k, e in ENGINES.items() if e.text_turns)
        raise TandemError(f"--protocol text runs on --engine {ok} (got {cfg.decoding.engine}); use --protocol "
                          "stream with a server")
    juniors = list(cfg.pool.names) if cfg.pool is not None else [cfg.models.junior or cfg.models.senior]
    if kind.transformers:
        dev = resolve_device(cfg.models.device)
        jdev = resolve_device(cfg.models.junior_device) if cfg.models.junior_device else dev
        models = [TurnModel(load_model(spec, d, cfg.models.dtype), load_tokenizer(spec), cfg.decoding.sampling,
                            cfg.problems.template)
                  for spec, d in ((cfg.models.senior, dev), *((j, jdev) for j in juniors))]
    else:
        from .text_handoff_vllm import open_vllm_turn_models

        models = open_vllm_turn_models(cfg, juniors)

    def close():
        for m in models:
            m.close()

    pool = None
    if cfg.pool is not None:
        from .pool_decoding import recorded_pool

        pool = recorded_pool(cfg.pool)
    return (TextHandoff(models[0], models[1], schedule, p=cfg.decoding.p,
                        max_new_tokens=cfg.decoding.sampling.max_new_tokens, juniors=models[1:], pool=pool),
            models[0].tokenizer, close)
