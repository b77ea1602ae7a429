"""TRL's prompt sampler made to give epoch ``e`` the same order whether the run got there without a stop
or resumed from a checkpoint.

TRL's ``RepeatSampler`` seeds its own ``torch.Generator`` once and draws a new permutation at each
``__iter__``, so epoch ``e`` is the generator's (e + 1)-th draw. Nothing saves that generator: a run resumed
in its second epoch or later builds a fresh sampler, transformers skips the updates done in the current
epoch on it, and the resumed run trains on the first epoch's order (which the uninterrupted run never
repeats). ``EpochRepeatSampler.set_epoch`` (transformers calls it, through accelerate's data loader, before
each epoch) re-seeds the generator and makes the ``e`` draws before it, so every epoch's order is a function
of the seed and the epoch alone, and equal to what the uninterrupted sampler draws.

Wiring: the trainer's ``_get_train_sampler`` returns ``epoch_aware(super()._get_train_sampler(dataset))``.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import RepeatSampler


class EpochRepeatSampler(RepeatSampler):
    """``RepeatSampler`` whose epoch ``e`` order depends on (seed, e) only (module docstring)."""

    def set_epoch(self, epoch: int) -> None:
        if self.shuffle:
            self.generator.manual_seed(self.seed)
            for _ in range(epoch):
                torch.randperm(self.num_samples, generator=self.generator)


def epoch_aware(sampler):
    """``sampler`` as an ``EpochRepeatSampler`` when it is TRL's seeded ``RepeatSampler``, else unchanged."""
    if type(sampler) is RepeatSampler and (not sampler.shuffle or sampler.seed is not None):
        sampler.__class__ = EpochRepeatSampler
    return sampler
