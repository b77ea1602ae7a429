"""Handoff evaluation with a junior pool: which junior each sample hands off to, and the in-stream decoder.

``tandem eval handoff --junior A,B,C`` (weights and YAML lists as in training, ``pool.JuniorPool``)
gives each sample one junior of the pool by a seeded draw: ``sample_junior(pool, row seed)``, the
pool's inverse-CDF draw (``JuniorPool.draw``) keyed by the sample's row seed, which is itself a hash
of (run seed, problem, sample index) (``sampler.sample_seed``). So the junior of a sample depends on
nothing else (not the batch, not which problems were done before a resume), and a resumed run draws
the same juniors; each row records its junior's name (``junior``). Why one draw per sample, not
every junior on every sample: the pooled pass@k then estimates what a user of the pool sees, at the
cost of a one-junior evaluation (docs/evaluation.md, "a junior pool").

The text protocol (paragraph schedules, the default) runs the pool inside ``text_handoff`` (one
turn model per junior, each junior's turns one batched call). The in-stream protocol runs here:
``PoolStreamDecoder`` decodes each row with the junior its seed draws. On the hf engine it splits a
batch by junior, decodes each part with that junior's decoder (all share one loaded senior) and puts
the rows back in order. On ``vllm`` and ``vllm-server`` one engine holds the whole pool (the tandem
model's juniors, ``engines.vllm_model``; a server started with ``tandem serve SENIOR --junior A,B``,
whose juniors ``engines.served_pool`` checked first): the batch goes to it in one call, each row's
request naming its junior's index, as training's rollouts do. config.json records the pool in
``schedule.pool`` (juniors by built-in name or absolute path, ``recorded_pool``; weights, draw), so a
resume with another pool, or a ``compare`` of runs of different pools, is refused as any other schedule
difference is.
"""

from __future__ import annotations

import torch

from ...decoding.tandem import Rollout
from ...pool import JuniorPool

DRAW = "sample"  # one junior per sample, drawn from its row seed
EVAL_STEP = 0  # the pool draw's step coordinate: an evaluation has no update step


def sample_junior(pool: JuniorPool, row_seed: int) -> int:
    """The index in ``pool`` of the junior of the sample whose row seed is ``row_seed``."""
    return pool.draw(row_seed, EVAL_STEP, 0, 0)


def recorded_pool(pool: JuniorPool) -> JuniorPool:
    """``pool`` with its juniors named as config.json and the rows record them (``models.recorded_model``:
    a built-in model by its built-in name, also when given as a path into the shipped worlds; another local
    path absolute; a hub id as given), so a run is the same run from any working directory and install."""
    from ...models import recorded_model

    return JuniorPool(tuple(recorded_model(n) for n in pool.names), pool.weights)


def pool_record(pool: JuniorPool) -> dict:
    """config.json's ``schedule.pool``: the juniors (absolute), their weights and the draw."""
    return {"juniors": list(pool.names), "weights": list(pool.weights), "draw": DRAW}


def record_juniors(rows: list[dict], pool: JuniorPool) -> list[dict]:
    """Each sample row with its junior's name (from its row seed, as the decoder drew it)."""
    for r in rows:
        r["junior"] = pool.names[sample_junior(pool, r["seed"])]
    return rows


class PoolStreamDecoder:
    """The in-stream decoder of a pool: ``generate(prompts, seeds)`` as a ``TandemDecoder``'s, each row
    decoded with the junior its seed draws. Either ``decoders[j]`` decodes with junior ``j`` of ``pool``
    (hf), or ``engine`` holds every junior and ``engine.generate(prompts, seeds, spec, juniors=[index per
    row])`` routes each row (vllm, vllm-server; ``engines.base.RolloutEngine``)."""

    def __init__(self, decoders: list, pool: JuniorPool, pad_id: int, engine=None, spec=None):
        self.decoders, self.pool, self.pad_id, self.engine, self.spec = decoders, pool, pad_id, engine, spec
        self.base = decoders[0].schedule
        served = getattr(decoders[0], "models", None)  # a server decoder names the checkpoint it serves
        if served is not None:
            self.models = dict(served)

    @property
    def schedule(self):
        return self  # the sampler reads ``decoder.schedule.name`` and ``.describe()``

    @property
    def name(self) -> str:
        return self.base.name

    def describe(self) -> dict:
        return {**self.base.describe(), "pool": pool_record(self.pool)}

    def generate(self, prompts, seeds) -> Rollout:
        which = [sample_junior(self.pool, int(s)) for s in seeds]
        if self.engine is not None:  # one engine holds the pool: one call, each request names its junior
            return self.engine.generate(prompts, seeds, self.spec, juniors=which)
        parts = {}
        for j in dict.fromkeys(which):
            rows = [i for i, w in enumerate(which) if w == j]
            parts[j] = (rows, self.decoders[j].generate([prompts[i] for i in rows], [seeds[i] for i in rows]))
        return _in_order(parts, len(prompts), self.pad_id)


def _in_order(parts: dict, B: int, pad_id: int) -> Rollout:
    """One Rollout of B rows from {junior: (row indices, its Rollout)}, right-padded to the widest part."""
    T = max(r.tokens.shape[1] for _, r in parts.values())
    first = next(iter(parts.values()))[1]
    out = Rollout(torch.full((B, T), pad_id, dtype=first.tokens.dtype), torch.zeros(B, T, dtype=torch.bool),
                  torch.zeros(B, T, dtype=first.logprobs.dtype), torch.zeros(B, dtype=first.lengths.dtype),
                  torch.zeros(B, dtype=torch.bool))
    for rows, r in parts.values():
        idx, t = torch.tensor(rows), r.tokens.shape[1]
        out.tokens[idx, :t], out.senior_mask[idx, :t], out.logprobs[idx, :t] = r.tokens.cpu(), r.senior_mask.cpu(), \
            r.logprobs.cpu()
        out.lengths[idx], out.finished[idx] = r.lengths.cpu(), r.finished.cpu()
    return out


def open_pool_stream(cfg):
    """(PoolStreamDecoder, tokenizer, close) of an ``EvalConfig`` whose junior is a pool (``cfg.pool``).

    Every junior shares the senior's tokenizer (``sampler._check_stream_vocab`` refuses one of another
    before this: the in-stream protocol hands off ids). hf: the senior is loaded once and every junior beside
    it. vllm: one engine whose model holds every junior (``cfg.engine_setup.junior`` is the pool's spec);
    vllm-server: the server's pool, which ``sampler.evaluate`` checked is the run's, in order."""
    from ...engines import open_engine
    from ...engines.base import engine_kind
    from ...models import Pair, load_model, load_tokenizer, resolve_device

    pool, m, d = cfg.pool, cfg.models, cfg.decoding
    kind = engine_kind(d.engine)
    if kind.transformers:
        tok = load_tokenizer(m.senior)
        dev = resolve_device(m.device)
        jdev = resolve_device(m.junior_device) if m.junior_device else dev
        senior = load_model(m.senior, dev, m.dtype)
        decoders = [Pair(senior, load_model(name, jdev, m.dtype), tok).decoder(cfg.schedule_name, d.sampling, d.p, d.K)
                    for name in pool.names]
        return PoolStreamDecoder(decoders, recorded_pool(pool), tok.pad_token_id), tok, lambda: None
    kind.check_schedule(cfg.schedule_name)
    engine = open_engine(d.engine, cfg.engine_setup)
    try:
        tok = engine.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else engine.eos_ids[0]
        dec = PoolStreamDecoder([engine.decoder(cfg.rollout_spec)], recorded_pool(pool), pad, engine, cfg.rollout_spec)
    except BaseException:
        engine.close()
        raise
    return dec, tok, engine.close
