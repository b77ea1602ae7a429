"""Rollouts overlap training (``max_staleness`` k >= 1): the generation batches of the next k rollout steps
are decoded by a worker thread while this one trains.

The schedule is fixed, not timed, so an overlapped run is as reproducible as a synchronous one:

- At the rollout step that trains at update t (TRL calls ``TandemRollout`` with its prompts), the batch that
  was started k rollout steps earlier is taken (its prompts must be the ones TRL hands over: a misaligned
  prefetch is an error, never a silent swap); when none was started (the first k rollout steps, the first of
  each data epoch, the first after a resume) it is decoded now, by the weights of update t.
- Then the weights of update t reach the engine, and the generation batches of the next rollout steps whose
  prompts the data loader already holds (``TandemGRPOTrainer.upcoming_prompts``: the current data epoch) are
  started, each by those weights: a rollout consumed at update s was drawn by the weights of update s - k x
  (updates per rollout step) at most, and its coins, sampler seeds and pool draws are those of update s, as in
  a synchronous run (only the weights that decode it differ).
- Weights move between generations, never during one: with k = 1 the push is on the training thread while the
  worker is idle (every started batch has been taken); with k >= 2 a batch started while others are still queued
  carries a snapshot of the senior's weights (one copy per queued batch, in the engine's dtype) that the worker
  pushes before decoding it. Validation waits for the started batches before it pushes (``drain``).

Each batch carries the version (update) of the weights that drew it; ``staleness`` = consuming update minus that
version, logged per rollout step with the time the trainer waited for rollouts, the weight push and the
generation itself (``wall/*_s``). The loss corrects the staleness by importance sampling on senior tokens
(``rl.losses.importance_weights``), from the behaviour log-probs every rollout carries.

Why not TRL's ``AsyncGRPOTrainer``: docs/overlap.md.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from ..errors import TandemError

SWITCH_INTERVAL_S = 0.0005  # the interpreter's thread switch interval while rollouts overlap training


@dataclass
class Started:
    """A generation batch handed to the worker: what it decodes (``planned``, ``rl.rollout.Planned``), the update
    whose weights draw it (``version``) and the worker's result (the rollout and its decode seconds)."""

    planned: object
    version: int
    future: Future


class Overlap:
    """The prefetch schedule of one training run (module docstring). ``rollout``: the run's ``TandemRollout``
    (``plan`` / ``decode`` / ``finish``, its ``EngineSync``); ``k``: ``max_staleness``."""

    def __init__(self, rollout, k: int):
        self.rollout, self.k = rollout, k
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tandem-rollouts")
        self.started: dict[int, Started] = {}  # consuming update -> its batch, in start order
        self.engine_version = None  # the update whose weights the engine holds, as the worker last pushed them
        rollout.sync.before_push = self.drain  # validation's push waits for the started batches
        # The worker thread's Python (a server's request and response handling, the authorship replay) shares the
        # interpreter lock with training, which holds it between its many small kernels: at the default 5 ms
        # switch interval each of a batch's requests can wait that long to be sent or read
        self.switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self.switch_interval, SWITCH_INTERVAL_S))

    def drain(self) -> None:
        """Wait until every started batch is decoded (they stay to be taken)."""
        for s in list(self.started.values()):
            s.future.exception()

    def close(self) -> None:
        """Stop the worker (a started batch finishes first; no new one starts)."""
        self.worker.shutdown(wait=True, cancel_futures=True)
        self.started.clear()
        sys.setswitchinterval(self.switch_interval)

    def _decode(self, planned, snapshot, version: int, senior_id: int):
        """On the worker: push the snapshot (k >= 2, when the engine is behind), then decode."""
        if snapshot is not None:
            self.rollout.sync.engine.load_weights(snapshot)
            self.rollout.sync.synced = (senior_id, version)
        t0 = time.perf_counter()
        roll = self.rollout.decode(planned)
        return roll, time.perf_counter() - t0

    def __call__(self, prompts: list, trainer) -> dict:
        rollout = self.rollout
        step = int(trainer.state.global_step)
        senior = trainer.accelerator.unwrap_model(trainer.model)
        t0 = time.perf_counter()
        mine = self.started.pop(step, None)
        if mine is not None:
            roll, decode_s = mine.future.result()
            planned, version = mine.planned, mine.version
            texts = rollout.render(prompts)
            if planned.prompts != texts:
                raise TandemError(f"overlap: the rollouts prefetched for update {step} are of other prompts than "
                                  "the trainer's batch (the data order changed under the prefetch)")
        wait_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        if self.started:  # k >= 2: batches still queued keep their weights; this update's go in snapshots
            push_s = 0.0
        else:
            rollout.push(senior, step)
            push_s = time.perf_counter() - t1
        if mine is None:  # nothing was started for this update: decode it now, on-policy
            planned, version = rollout.plan(prompts, trainer, step), step
            t2 = time.perf_counter()
            roll = rollout.decode(planned)
            decode_s = time.perf_counter() - t2
            wait_s += decode_s
        self._start_upcoming(trainer, senior, step)
        timing = {"wall/rollout_wait_s": wait_s, "wall/weight_sync_s": push_s, "wall/generate_s": decode_s}
        return rollout.finish(planned, roll, trainer, version=version, timing=timing)

    def _start_upcoming(self, trainer, senior, step: int) -> None:
        """Start the next k rollout steps' batches whose prompts the data loader holds, by update ``step``'s
        weights (every process plans the same steps: the plan gathers the global batch's prompts); none past the run's
        last update."""
        per = self.rollout.cfg.loop.updates_per_batch
        for j, prompts in enumerate(trainer.upcoming_prompts(self.k), start=1):
            s = step + j * per
            if trainer.state.max_steps and s >= trainer.state.max_steps:
                break  # the run ends before it
            if s in self.started:
                continue
            planned = self.rollout.plan(prompts, trainer, s)
            snapshot = None
            if self.started:  # the worker is still busy with older weights: this batch carries its own
                dtype = self.rollout.sync.engine.weight_dtype
                snapshot = _snapshot(senior, dtype)
            future = self.worker.submit(self._decode, planned, snapshot, step, id(senior))
            self.started[s] = Started(planned, step, future)


@torch.no_grad()
def _snapshot(senior, dtype) -> list[tuple[str, torch.Tensor]]:
    """The senior's weight stream (``rl.weights.senior_weights``) copied now, for a later push."""
    from .weights import senior_weights

    return [(n, t.detach().clone()) for n, t in senior_weights(senior, dtype)]
