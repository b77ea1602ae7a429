"""``--engine hf``: our transformers decoder (``decoding.tandem.TandemDecoder``) behind the seam.

The reference engine: every other engine is tested against it. An evaluation opens it from
checkpoints (``models.load_pair``); a training run hands it its loaded pair, and the engine
then decodes either the trained senior itself or, when the senior holds fp32 master weights
(or ``rollout_device`` asks for another device), a copy in the compute dtype
(``rl.precision.RolloutModel``, given as ``EngineSetup.rollout_copy``) that ``load_weights``
refreshes from the trainer's stream once per update. A senior that decodes itself needs no
weights: ``load_weights`` leaves the stream unread.

A batch is decoded ``batch_rows`` rows at a time (``rollout_batch_rows``; None: all at once),
the parts padded to one width, so the KV caches stay bounded however large the batch.

A junior pool (``juniors``: the pool's frozen juniors, ``models.Pair.juniors``) decodes a batch whose
rows have different juniors: ``generate(..., juniors=[index per row])`` decodes the rows of each junior
as one sub-batch with that junior and puts the rows back in their order. Every draw of a row comes from
its row seed, so its tokens and senior mask do not depend on which rows share its sub-batch; its
log-probs agree to float rounding (another sub-batch pads the prompts to another width).

A junior of another tokenizer (``xjunior``, a ``decoding.xtandem.XJunior``) makes every tandem
schedule decode with ``decoding.xtandem.CrossTandemDecoder`` (text-level word handoff); solo
schedules and a junior of the senior's tokenizer decode as before. A pool may mix both
(``xjuniors``: an ``XJunior`` or None per junior, ``models.Pair.xjuniors``): the sub-batch of an
other-tokenizer junior decodes with the text-level decoder, the others' token by token, and the rows
come back in their order as above (the senior's ids and mask mean the same in both decoders).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

from ..decoding.schedule import make_schedule
from ..decoding.tandem import Rollout, TandemDecoder
from ..errors import TandemError
from .base import EngineSetup, RolloutSpec


class HFRollouts:
    """Rollouts from our transformers decoder; see the module docstring."""

    name = "hf"

    def __init__(self, senior, junior, tokenizer, eos_ids, batch_rows: int | None = None, rollout_copy=None,
                 xjunior=None, juniors=(), xjuniors=()):
        self.juniors = tuple(juniors) or (junior,)
        self.junior, self.tokenizer, self.eos_ids, self.batch_rows = junior, tokenizer, list(eos_ids), batch_rows
        self.xjunior = xjunior
        self.xjuniors = tuple(xjuniors) or (xjunior, *(None,) * (len(self.juniors) - 1))  # aligned with juniors
        if len(self.xjuniors) != len(self.juniors) or self.xjuniors[0] is not xjunior:
            raise TandemError("hf engine: xjuniors must give one entry per junior, the first being xjunior")
        self.vocab_size = senior.config.vocab_size
        # the copy decodes when the trained senior is not in the compute dtype or on the rollout device
        self.rollout_copy = rollout_copy if rollout_copy is not None and rollout_copy.needs_copy(senior) else None
        self.senior = None if self.rollout_copy is not None else senior
        self.weight_dtype = self.rollout_copy.dtype if self.rollout_copy is not None else None
        self.schedules = {}
        self.syncs = 0

    def schedule(self, spec: RolloutSpec):
        key = (spec.schedule, spec.p, spec.K)
        if key not in self.schedules:
            self.schedules[key] = make_schedule(spec.schedule, self.tokenizer, p=spec.p, K=spec.K,
                                                vocab_size=self.vocab_size)
        return self.schedules[key]

    def decoder(self, spec: RolloutSpec, j: int = 0) -> TandemDecoder:
        """The decoder of ``spec`` with junior ``j`` of the pool (default: the first; the others by ``generate``)."""
        junior, xj = self.juniors[j], self.xjuniors[j]
        senior = self.senior if self.rollout_copy is None else self.rollout_copy.copy
        if senior is None:
            raise TandemError("the hf engine's rollout copy holds no weights yet: load_weights comes first")
        if xj is not None and self.schedule(spec).uses_junior:
            return self.cross_decoder(senior, spec, junior, xj)
        return TandemDecoder(senior, junior, self.schedule(spec), spec.sampling, self.eos_ids,
                             self.tokenizer.pad_token_id)

    def cross_decoder(self, senior, spec: RolloutSpec, junior, xj):
        """The text-level decoder (``decoding.xtandem``) of ``junior``, of another tokenizer (``xj``), for ``spec``."""
        from ..decoding.xtandem import CrossTandemDecoder
        from ..models import eos_ids

        return CrossTandemDecoder(senior, junior, self.tokenizer, xj.tokenizer, spec.schedule, spec.sampling,
                                  self.eos_ids, eos_ids(xj.tokenizer, getattr(junior, "generation_config", None)),
                                  p=spec.p, K=spec.K, xjunior=xj)

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], spec: RolloutSpec,
                 juniors: Sequence[int] | None = None) -> Rollout:
        """Rollouts of ``prompts`` (one row seed each); ``juniors``: a pool's junior index per row (None: the first)."""
        if juniors is None or len(self.juniors) == 1 or not self.schedule(spec).uses_junior:
            return self._decode(self.decoder(spec), prompts, seeds)
        order, parts = [], []
        for j in range(len(self.juniors)):
            rows = [b for b, x in enumerate(juniors) if x == j]
            if rows:
                order += rows
                parts.append(self._decode(self.decoder(spec, j), [prompts[b] for b in rows],
                                          [seeds[b] for b in rows]))
        merged = _concat(parts, self.tokenizer.pad_token_id)
        dev = merged.tokens.device
        back = torch.empty(len(order), dtype=torch.long, device=dev)  # (B,) batch row b is row back[b] of the parts
        back[torch.tensor(order, device=dev)] = torch.arange(len(order), device=dev)
        fields = ("tokens", "senior_mask", "logprobs", "lengths", "finished")
        return Rollout(*(getattr(merged, f)[back] for f in fields))

    def _decode(self, dec, prompts, seeds) -> Rollout:
        """``dec`` over ``prompts``, ``batch_rows`` rows at a time."""
        n = self.batch_rows or len(prompts)
        parts = [dec.generate(prompts[i:i + n], seeds[i:i + n]) for i in range(0, len(prompts), n)]
        return parts[0] if len(parts) == 1 else _concat(parts, self.tokenizer.pad_token_id)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Refresh the rollout copy from the stream (nothing to do when the senior decodes itself)."""
        if self.rollout_copy is None:
            return
        self.rollout_copy.load_weights(weights)
        self.syncs += 1

    def sleep(self) -> None:
        """Nothing to free: the models are the run's own."""

    def close(self) -> None:
        self.senior = self.junior = self.rollout_copy = None
        self.juniors = self.xjuniors = ()


def _concat(parts: list[Rollout], pad_id: int) -> Rollout:
    """One Rollout of several decoded parts, each right-padded to the widest."""
    T = max(p.tokens.shape[1] for p in parts)

    def padcat(name, value):
        return torch.cat([torch.nn.functional.pad(getattr(p, name), (0, T - p.tokens.shape[1]), value=value)
                          for p in parts])

    return Rollout(padcat("tokens", pad_id), padcat("senior_mask", False), padcat("logprobs", 0.0),
                   torch.cat([p.lengths for p in parts]), torch.cat([p.finished for p in parts]))


def open_hf(setup: EngineSetup) -> HFRollouts:
    """The training run's pair (``setup.pair``) or the checkpoints of ``setup`` loaded here; a junior pool's
    spec as ``setup.junior`` loads every junior (``junior_device``: one for all, or one per junior)."""
    pair = setup.pair
    if pair is None:
        from ..models import load_pair, load_pool_juniors
        from ..pool import JuniorPool

        pool = JuniorPool.parse(setup.junior) if setup.junior else None
        devices = pool.devices(setup.junior_device) if pool is not None else (setup.junior_device,)
        pair = load_pair(setup.senior, pool.names[0] if pool else None, setup.device, devices[0], setup.dtype)
        if pool is not None and not pool.single:
            load_pool_juniors(pair, pool.names, devices, pair.junior.dtype)
    return HFRollouts(pair.senior, pair.junior, pair.tokenizer, pair.eos_ids, setup.batch_rows, setup.rollout_copy,
                      pair.xjunior, pair.juniors, pair.xjuniors)
