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

    A sharded senior (FSDP2, ZeRO-3) reaches the engine as ``rl.weight_stream.push`` streams it: full tensors
    gathered ``bucket_bytes`` at a time, every process in the same order, each feeding its own
    engine (hf: its copy; vllm: its colocated engine). An engine that several processes share
    (``EngineKind.one_sender``: vllm-server) is fed by the main process alone while the others
    gather alongside (sharded) or wait (whole copies); then every process waits at a barrier until
    the push is complete, so no process draws from a half-updated server. The waits are bounded by
    the run's collective timeout (``dist_timeout_s``): a lost process, or a main process whose push
    failed, is a one-line error on the others."""

    def __init__(self, engine, bucket_bytes: int = 512 << 20):
        from ..engines.base import ENGINES

        self.engine, self.bucket_bytes = engine, bucket_bytes
        kind = ENGINES.get(getattr(engine, "name", None))
        self.one_sender = bool(kind and kind.one_sender)
        self.synced = None  # (id of the model, global step) the engine holds
        self.syncs = 0
        self.last_sync = None  # {"seconds", "bytes", "buckets"} of the last sharded push (rl.weight_stream.push)
        self.before_push = None  # called before a push (rl.overlap: wait for the batches the engine is decoding)

    @torch.no_grad()
    def __call__(self, senior: torch.nn.Module, step: int) -> None:
        import torch.distributed as dist

        from .lora import stream_source
        from .weight_stream import is_sharded, push

        if self.synced == (id(senior), step):
            return
        if self.before_push is not None:
            self.before_push()
        dtype = self.engine.weight_dtype
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        try:
            if is_sharded(senior):  # collective: every process gathers each bucket (a LoRA senior merged)
                model, named = stream_source(senior)
                self.last_sync = push(model, self.engine.load_weights, dtype or next(senior.parameters()).dtype,
                                      self.bucket_bytes, every_rank=not self.one_sender, named=named)
            elif not self.one_sender or world == 1 or dist.get_rank() == 0:
                self.engine.load_weights(senior_weights(senior, dtype))
            if self.one_sender and world > 1:
                dist.barrier()  # the push is complete before any process draws from the engine
        except RuntimeError as e:  # DistError, and gloo's plain RuntimeErrors
            from ..errors import TandemError, collective_failure

            if (lost := collective_failure(e)) is None:
                raise
            rank = dist.get_rank() if world > 1 else 0
            raise TandemError(f"process {rank}, weight sync to engine {self.engine.name} (did process 0's push fail?): "
                              f"{lost}") from None
        self.synced = (id(senior), step)
        self.syncs += 1
