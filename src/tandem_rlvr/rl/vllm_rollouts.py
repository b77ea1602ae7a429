"""Training rollouts on an in-process vLLM engine colocated with the trainer (``engine: vllm``).

``EngineRollouts`` owns one ``engines.vllm_engine.VLLMEngine``: the tandem model (senior +
junior) for ``--method tandem``, the senior's own vLLM class for ``grpo`` and ``klreg`` (no
junior is loaded into the engine). Rollouts and validation both draw decoders from it, so
they share one engine and one KV cache.

Weights in sync: before any generation, if the trainer's senior has changed since the last
sync (a new optimiser step, or the first call of a run, which covers a resumed run), its
state dict is pushed into the engine with vLLM's in-place reload
(``collective_rpc("reload_weights", weights_iterator=..., is_checkpoint_format=True)``): the
checkpoint-format names go through the model's own ``load_weights`` and vLLM's layer-wise
reload re-runs every layer's ``process_weights_after_loading`` (CPU weight repacking, tied
heads). Layers that receive no weights, the whole junior half, get their own tensors back
untouched (tested: bit-identical). Then the prefix cache is reset, since cached KV blocks were
computed with the old weights.

Memory: ``vllm_gpu_memory_utilization`` bounds the engine on a shared GPU; ``vllm_sleep``
frees the engine's GPU memory between rollouts (vLLM sleep level 1) and wakes it before the
next; vLLM has no sleep mode on CPU, where it is ignored.
"""

from __future__ import annotations

import logging

import torch

from ..errors import TandemError

log = logging.getLogger("tandem_rlvr")


class EngineRollouts:
    """The colocated engine of one training run (opened on first use); see the module docstring."""

    def __init__(self, cfg, tokenizer, eos_ids, tandem: bool, data_parallel: bool = False):
        from ..engines.vllm_engine import VLLMSettings
        from ..models import resolve_model_path

        self.cfg, self.tok, self.eos_ids, self.tandem = cfg, tokenizer, list(eos_ids), tandem
        self.senior_path = resolve_model_path(cfg.senior)
        self.junior_path = resolve_model_path(cfg.junior or cfg.senior) if tandem else None
        self.settings = VLLMSettings(gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                                     kv_cache_gib=cfg.vllm_kv_cache_gib,
                                     max_model_len=cfg.max_prompt_tokens + cfg.max_new_tokens)
        self.data_parallel = data_parallel  # one engine per training process (see open)
        self.engine = None
        self.synced = None  # (id of the model, global step) whose weights the engine holds
        self.asleep = False
        self.syncs = 0

    def open(self, model) -> None:
        """Start the engine with ``model``'s dtype. Single-process runs open it on first use; a
        data-parallel run opens it in every process at once before training, since the engines'
        start-up is collective (validation later runs on the main process alone)."""
        if self.engine is not None:
            return
        from ..engines.vllm_engine import VLLMEngine, with_dtype

        settings = with_dtype(self.settings, self.cfg.dtype, next(model.parameters()).device)  # the senior's dtype
        self.engine = VLLMEngine(self.senior_path, self.junior_path, self.tok, self.eos_ids, tandem=self.tandem,
                                 seed=self.cfg.seed, settings=settings, sleep_mode=self.cfg.vllm_sleep,
                                 in_process=True, data_parallel=self.data_parallel)

    def decoder(self, model, step: int, schedule: str, sampling, p: float = 0.5, K: int = 32):
        """A decoder on the engine, holding ``model``'s current weights (synced if they changed)."""
        self.open(model)
        self.wake()
        if self.synced != (id(model), step):
            self.sync(model)
            self.synced = (id(model), step)
        return self.engine.decoder(schedule, sampling, p=p, K=K)

    @torch.no_grad()
    def sync(self, model) -> None:
        """Push ``model``'s weights (transformers names) into the engine's senior."""
        state = model.state_dict()
        llm = self.engine.llm
        dtype = getattr(torch, self.engine.settings.dtype)  # fp32 master weights are pushed cast, tensor by tensor
        llm.collective_rpc("reload_weights", kwargs={
            "weights_iterator": ((k, v.detach().to(dtype)) for k, v in state.items()), "is_checkpoint_format": True})
        llm.reset_prefix_cache()
        self.syncs += 1

    def sleep(self) -> None:
        if self.engine is not None and self.cfg.vllm_sleep and not self.asleep and self.engine.can_sleep:
            self.engine.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            self.engine.llm.wake_up()
            self.asleep = False

    def engine_params(self, half: str) -> dict[str, torch.Tensor]:
        """Copies of the engine's parameters of one half (``senior`` / ``junior``; tests)."""
        if half not in ("senior", "junior"):
            raise TandemError(f"unknown half {half!r}")

        def grab(model):
            sub = getattr(model, half, None) if self.tandem else (model if half == "senior" else None)
            return {} if sub is None else {k: v.detach().clone() for k, v in sub.named_parameters()}

        return self.engine.llm.apply_model(grab)[0]

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
