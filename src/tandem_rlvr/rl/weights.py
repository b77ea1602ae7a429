"""The trained senior's weights on their way to the rollout engine: one stream per update.

Every engine takes new senior weights the same way (``engines.base.RolloutEngine.load_weights``):
a stream of ``(name, tensor)`` pairs under the senior's transformers names, each tensor full and
cast to the engine's ``weight_dtype`` as it is reached, so the stream never holds a second
state dict (one cast tensor at a time at most). ``EngineSync`` sends it once per update: before
the first generation of a run (which covers a resumed run) and whenever the trainer's global
step, or the model object, has changed since the last push. Rollouts and validation share one
``EngineSync``, so a validation right after a rollout of the same step pushes nothing.
"""

from __future__ import annotations

from typing import Iterator

import torch


def senior_weights(model: torch.nn.Module, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """``model``'s named parameters in order, each detached and cast to ``dtype`` (None: as held)
    only when the consumer reaches it. A tied parameter comes under each of its names (a tied
    head as ``lm_head.weight`` too, as in a checkpoint): vLLM's layer-wise reload leaves a head
    that receives nothing stale, even when it is tied to the embedding it did receive. A LoRA
    senior (PEFT) streams its merged weights under the base model's names (``rl.lora``)."""
    from .lora import is_lora, merged_weights

    if is_lora(model):
        yield from merged_weights(model, dtype)
        return
    for name, p in model.named_parameters(remove_duplicate=False):
        p = p.detach()
        yield name, p if dtype is None else p.to(dtype)


class EngineSync:
    """Keeps an engine's senior weights at the trainer's current update (module docstring).

    A sharded senior (FSDP2) reaches the engine as ``rl.sharding.push`` streams it: full tensors
    gathered ``bucket_bytes`` at a time, every process in the same order, each feeding its own
    engine (the hf engine's copy; the vLLM engines refuse sharded training)."""

    def __init__(self, engine, bucket_bytes: int = 512 << 20):
        self.engine, self.bucket_bytes = engine, bucket_bytes
        self.synced = None  # (id of the model, global step) the engine holds
        self.syncs = 0
        self.last_sync = None  # {"seconds", "bytes"} of the last sharded push (rl.sharding.push)

    @torch.no_grad()
    def __call__(self, senior: torch.nn.Module, step: int) -> None:
        from .sharding import is_sharded, push

        if self.synced == (id(senior), step):
            return
        dtype = self.engine.weight_dtype
        if is_sharded(senior):  # collective: every process gathers each bucket
            self.last_sync = push(senior, self.engine.load_weights, dtype or next(senior.parameters()).dtype,
                                  self.bucket_bytes)
        else:
            self.engine.load_weights(senior_weights(senior, dtype))
        self.synced = (id(senior), step)
        self.syncs += 1
