"""A run resumed in its second epoch trains on the order the uninterrupted run trains on
(rl/epoch_sampler.py): the sampler's epoch e is TRL's (e + 1)-th draw from its seed, whether the epochs
before were iterated or skipped. A real run killed in its second epoch and resumed gets the uninterrupted run's
losses: tests/integration/test_train_slow.py (the one-process kill test answers it)."""

from __future__ import annotations

from trl.trainer.utils import RepeatSampler

from tandem_rlvr.rl.epoch_sampler import EpochRepeatSampler, epoch_aware


def _orders(sampler, epochs: int) -> list[list[int]]:
    return [list(sampler) for _ in range(epochs)]


def test_a_fresh_sampler_set_to_epoch_e_gives_the_order_the_uninterrupted_sampler_draws_at_epoch_e():
    data = list(range(10))
    uninterrupted = _orders(RepeatSampler(data, mini_repeat_count=2, batch_size=4, repeat_count=1, seed=7), 4)
    assert len({tuple(o) for o in uninterrupted}) == 4  # each epoch its own order
    for epoch in range(4):
        fresh = epoch_aware(RepeatSampler(data, mini_repeat_count=2, batch_size=4, repeat_count=1, seed=7))
        assert isinstance(fresh, EpochRepeatSampler)
        fresh.set_epoch(epoch)
        assert list(fresh) == uninterrupted[epoch], epoch
    # set before every epoch, as transformers does, it draws the uninterrupted sequence
    again = epoch_aware(RepeatSampler(data, mini_repeat_count=2, batch_size=4, repeat_count=1, seed=7))
    assert [again.set_epoch(e) or list(again) for e in range(4)] == uninterrupted


def test_an_iteration_no_set_epoch_reached_takes_its_epoch_from_epoch_of_and_set_epoch_comes_first():
    """A multi-process run resumed mid-epoch wraps the sampler deeper than accelerate forwards set_epoch."""
    data = list(range(10))
    uninterrupted = _orders(RepeatSampler(data, mini_repeat_count=1, batch_size=2, seed=3), 3)
    fresh = epoch_aware(RepeatSampler(data, mini_repeat_count=1, batch_size=2, seed=3), epoch_of=lambda: 2)
    assert list(fresh) == uninterrupted[2]
    fresh.set_epoch(1)
    assert list(fresh) == uninterrupted[1]  # set_epoch named this iteration's epoch
    assert list(fresh) == uninterrupted[2]  # and only this one's


def test_an_unseeded_shuffling_sampler_is_left_as_it_is():
    s = RepeatSampler(list(range(4)), mini_repeat_count=1, seed=None)
    assert type(epoch_aware(s)) is RepeatSampler
