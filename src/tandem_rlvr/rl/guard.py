"""Stop a training run at the first step whose numbers are not finite, before it is saved.

A learning rate far too large, a loss term that overflows or a reward that is inf makes NaN or inf
weights, and transformers' Trainer goes on: it saves them as checkpoints and ``final/`` and logs a
normal summary (its ``logging_nan_inf_filter`` even hides a NaN loss; ``rl.trl_args.grpo_args`` turns it
off). ``FiniteGuard`` checks, in the order the Trainer runs a step:

1. ``on_pre_optimizer_step``: the gradients (after clipping; a NaN or inf loss makes them NaN);
2. ``on_step_end``: the updated weights (finite gradients times a huge step can still overflow);
3. ``on_log``: the step's loss and gradient norm as the Trainer logs them (an inf gradient norm is
   clipped to zero gradients, so only the norm shows it).

Each comes before the Trainer's checkpoint save, ``Validation``'s ``best/`` (the guard is the first
callback) and ``final/``; so a non-finite step raises a one-line ``TandemError`` naming the step and
what went non-finite, and the run directory keeps its last good checkpoint to resume from.
"""

from __future__ import annotations

import math

import torch
from transformers import TrainerCallback

from ..errors import TandemError


def first_non_finite(named) -> tuple[str, int, int] | None:
    """(name of the first tensor holding a NaN or inf, how many such tensors, how many tensors) of
    ``(name, tensor)`` pairs (None tensors skipped), or None when all are finite. One sync in all."""
    names, flags = [], []
    for name, t in named:
        if t is not None:
            t = t.to_local() if hasattr(t, "to_local") else t  # a DTensor shard (FSDP2): this process's part
            names.append(name)
            flags.append(torch.isfinite(t.detach()).all())
    if not flags:
        return None
    finite = torch.stack([f.to(flags[0].device) for f in flags]).tolist()  # one sync
    bad = [n for n, ok in zip(names, finite, strict=True) if not ok]
    return (bad[0], len(bad), len(names)) if bad else None


class FiniteGuard(TrainerCallback):
    """Raise a TandemError at the first non-finite gradient, weight, loss or gradient norm (module docstring)."""

    def __init__(self, last_good: callable = lambda: None):
        self.last_good = last_good  # () -> the step of the newest checkpoint on disk (None: none yet)

    def _stop(self, step: int, what: str) -> None:
        good = self.last_good()
        kept = f"checkpoint-{good} is the last saved step" if good else "no checkpoint was saved"
        raise TandemError(f"training step {step}: {what}; the run stopped before saving it ({kept}). A learning "
                          "rate or loss coefficient too large, or a non-finite reward, is the usual cause")

    def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
        bad = first_non_finite((n, p.grad) for n, p in model.named_parameters()) if model is not None else None
        if bad:
            self._stop(state.global_step + 1, f"the gradient is not finite (NaN or inf in {bad[1]} of {bad[2]} "
                                              f"tensors, first {bad[0]}): the loss or its gradient overflowed")

    def on_step_end(self, args, state, control, model=None, **kw):
        bad = first_non_finite(model.named_parameters()) if model is not None else None
        if bad:
            self._stop(state.global_step, f"the updated weights are not finite (NaN or inf in {bad[1]} of {bad[2]} "
                                          f"tensors, first {bad[0]})")

    def on_log(self, args, state, control, logs=None, **kw):
        for key in ("loss", "grad_norm"):
            value = (logs or {}).get(key)
            if isinstance(value, float) and not math.isfinite(value):
                self._stop(state.global_step, f"the {'loss' if key == 'loss' else 'gradient norm'} is {value}")
