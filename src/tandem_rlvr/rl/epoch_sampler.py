"""TRL's prompt sampler made to give epoch ``e`` the same order whether the run got there without a stop
or resumed from a checkpoint.

TRL's ``RepeatSampler`` seeds its own ``torch.Generator`` once and draws a new permutation at each
``__iter__``, so epoch ``e`` is the generator's (e + 1)-th draw. Nothing saves that generator: a run resumed
in its second epoch or later builds a fresh sampler, transformers skips the updates done in the current
epoch on it, and the resumed run trains on the first epoch's order (which the uninterrupted run never
repeats). ``EpochRepeatSampler.set_epoch`` (transformers calls it, through accelerate's data loader, before
each epoch) re-seeds the generator and makes the ``e`` draws before it, so every epoch's order is a function
of the seed and the epoch alone, and equal to what the uninterrupted sampler draws.

``set_epoch`` does not always reach it: accelerate forwards it two wrappers deep, and a multi-process run
resumed mid-epoch wraps the sampler three deep (``SkipBatchSampler`` > ``BatchSamplerShard`` > ``BatchSampler``).
An iteration that no ``set_epoch`` preceded takes its epoch from ``epoch_of`` (the trainer's state, restored
from the checkpoint before the data loader starts), when given.

Wiring: the trainer's ``_get_train_sampler`` returns
``epoch_aware(super()._get_train_sampler(dataset), epoch_of=lambda: int(self.state.epoch or 0))``.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import RepeatSampler


class EpochRepeatSampler(RepeatSampler):
    """``RepeatSampler`` whose epoch ``e`` order depends on (seed, e) only (module docstring)."""

    epoch_of = None  # () -> the current epoch, for an iteration no set_epoch preceded
    _asked: int | None = None  # the epoch set_epoch named for the next iteration

    def set_epoch(self, epoch: int) -> None:
        self._asked = epoch

    def _position(self, epoch: int) -> None:
        self.generator.manual_seed(self.seed)
        for _ in range(epoch):
            torch.randperm(self.num_samples, generator=self.generator)

    def __iter__(self):
        epoch, self._asked = self._asked, None
        if epoch is None and self.epoch_of is not None:
            epoch = self.epoch_of()
        if epoch is not None and self.shuffle:
            self._position(epoch)
        return super().__iter__()


def epoch_aware(sampler, epoch_of=None):
    """``sampler`` as an ``EpochRepeatSampler`` when it is TRL's seeded ``RepeatSampler``, else unchanged;
    ``epoch_of``: () -> the current epoch, used when no ``set_epoch`` reached it (module docstring)."""
    if type(sampler) is RepeatSampler and (not sampler.shuffle or sampler.seed is not None):
        sampler.__class__ = EpochRepeatSampler
        sampler.epoch_of = epoch_of
    return sampler
