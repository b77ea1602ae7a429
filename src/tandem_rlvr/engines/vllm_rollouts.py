"""``--engine vllm`` behind the seam: one vLLM engine for a run's rollouts and validation.

``VLLMRollouts`` owns one ``engines.vllm_engine.VLLMEngine``: the tandem model (senior + junior)
when a junior is given, else the senior's own vLLM class (``grpo``, ``klreg``, ``eval solo``: no
junior is loaded into the engine). Every schedule and sampling setting draws from that one
engine and its KV cache. An evaluation opens it at once; a training run opens it in-process,
colocated with the trainer, on first use (a data-parallel run at once, in every process
together, since the engines' start-up is collective).

Weights: ``load_weights`` feeds the stream to vLLM's in-place reload
(``collective_rpc("reload_weights", weights_iterator=..., is_checkpoint_format=True)``) one
tensor at a time: the checkpoint-format names go through the model's own ``load_weights`` and
vLLM's layer-wise reload re-runs every layer's ``process_weights_after_loading`` (CPU weight
repacking, tied heads). Layers that receive no weights, the whole junior half, get their own
tensors back untouched (tested: bit-identical). Then the prefix cache is reset, since cached KV
blocks were computed with the old weights. The trainer casts the stream to ``weight_dtype``,
the engine's dtype.

A junior pool (``junior_path``: a list of directories; a training run's ``EngineSetup.junior`` is the pool's
spec) is one engine whose model holds every junior; ``generate(..., juniors=[index per row])`` names each
row's junior in its request, and ``load_weights`` reloads the senior half only, as before (docs/pool.md).

Memory: ``vllm_gpu_memory_utilization`` bounds the engine on a shared GPU; ``vllm_sleep``
frees the engine's GPU memory between rollouts (vLLM sleep level 1) and wakes it before the
next call; vLLM has no sleep mode on CPU, where it is ignored.
"""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

import torch

from ..errors import TandemError
from .base import EngineSetup, RolloutSpec

log = logging.getLogger("tandem_rlvr")


class VLLMRollouts:
    """Rollouts on one vLLM engine; see the module docstring."""

    name = "vllm"

    def __init__(self, senior_path: str, junior_path: str | None, tokenizer, eos_ids, settings, *, seed: int = 0,
                 sleep_mode: bool = False, in_process: bool = False, data_parallel: bool = False, lazy: bool = False):
        self.senior_path, self.junior_path, self.tandem = senior_path, junior_path, junior_path is not None
        self.tokenizer, self.eos_ids, self.settings, self.seed = tokenizer, list(eos_ids), settings, seed
        self.sleep_mode, self.in_process, self.data_parallel = sleep_mode, in_process, data_parallel
        self.weight_dtype = getattr(torch, settings.dtype)  # settings come resolved (with_dtype)
        self.engine = None
        self.asleep = False
        self.syncs = 0
        if not lazy:
            self.open()

    def open(self) -> None:
        """Start the engine (once)."""
        if self.engine is None:
            from .vllm_engine import VLLMEngine

            self.engine = VLLMEngine(self.senior_path, self.junior_path, self.tokenizer, self.eos_ids,
                                     tandem=self.tandem, seed=self.seed, settings=self.settings,
                                     sleep_mode=self.sleep_mode, in_process=self.in_process,
                                     data_parallel=self.data_parallel)
        self.wake()

    def decoder(self, spec: RolloutSpec):
        self.open()
        return self.engine.decoder(spec.schedule, spec.sampling, p=spec.p, K=spec.K)

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], spec: RolloutSpec,
                 juniors: Sequence[int] | None = None):
        """Rollouts of ``prompts``; ``juniors``: a pool's junior index per row (None: the first)."""
        return self.decoder(spec).generate(prompts, seeds, juniors)  # one call: vLLM batches continuously

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Reload the senior half in place from the stream (transformers names), then drop the
        prefix cache."""
        self.open()
        llm = self.engine.llm
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True})
        llm.reset_prefix_cache()
        self.syncs += 1

    def sleep(self) -> None:
        if self.engine is not None and self.sleep_mode and not self.asleep and self.engine.can_sleep:
            self.engine.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            self.engine.llm.wake_up()
            self.asleep = False

    def engine_params(self, half: str) -> dict[str, torch.Tensor]:
        """Copies of the engine's parameters of one half (``senior`` / ``junior``, a pool's others
        ``junior_1``, ...; tests), as the engine computes with them (``half_params``)."""
        self.open()
        return half_params(self.engine.llm, half, self.tandem)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def module_weights(module) -> dict[str, torch.Tensor]:
    """Copies of the parameters of a vLLM model (or one half of it) as the engine computes with them.

    On CPU, vLLM may hand a linear layer's weight to a packed kernel (oneDNN, sgl) and leave an empty
    tensor in its place (``dispatch_cpu_unquantized_gemm(remove_weight=True)``: float32 on this
    project's machines). Such a weight is read back through the layer's own kernel: the layer applied
    to the identity gives W^T exactly (each output is one weight times 1 plus zeros). Without that, a
    check of the engine's weights would compare empty tensors and pass whatever the engine held."""
    out = {k: v.detach().clone() for k, v in module.named_parameters()}
    for name, mod in module.named_modules():
        w = getattr(mod, "weight", None)
        if hasattr(mod, "cpu_linear") and isinstance(w, torch.Tensor) and w.numel() == 0:
            eye = torch.eye(mod.input_size_per_partition, dtype=w.dtype, device=w.device)
            out[f"{name}.weight" if name else "weight"] = mod.cpu_linear(eye, w, None).t().contiguous()
    return out


def half_params(llm, half: str, tandem: bool = True) -> dict[str, torch.Tensor]:
    """``module_weights`` of one half of vLLM engine ``llm``'s model (``senior``, ``junior``,
    ``junior_1``, ...; ``tandem`` False: a stock engine, whose whole model is the senior)."""
    if half != "senior" and not (half == "junior" or half.startswith("junior_") and half[7:].isdigit()):
        raise TandemError(f"unknown half {half!r}")

    def grab(model):
        sub = getattr(model, half, None) if tandem else (model if half == "senior" else None)
        return {} if sub is None else module_weights(sub)

    return llm.apply_model(grab)[0]


def open_vllm(setup: EngineSetup) -> VLLMRollouts:
    """The engine of ``setup``: a training run's (its pair's tokenizer, in-process, opened on first
    use unless data-parallel) or an evaluation's (checkpoints, opened now)."""
    from ..models import check_same_tokenizer, load_tokenizer, resolve_model_path
    from ..pool import JuniorPool
    from .vllm_engine import VLLMSettings, model_eos_ids, require_vllm, with_dtype

    if setup.pair is None and setup.junior_device not in (None, "", setup.device):  # training's junior is its own
        raise TandemError("--junior-device is not supported by --engine vllm (both models share the engine's devices; "
                          "use --vllm-tensor-parallel-size to spread them)")
    require_vllm()  # fail before anything is loaded or written
    settings = with_dtype(setup.vllm_settings or VLLMSettings(), setup.dtype, setup.device)
    s_path = resolve_model_path(setup.senior)
    names = list(JuniorPool.parse(setup.junior).names) if setup.junior is not None else []  # one junior or a pool
    j_paths = [resolve_model_path(n) for n in names]
    if setup.pair is not None:  # training: the run's tokenizer and EOS ids (its prepare checked every junior's)
        tok, eos = setup.pair.tokenizer, setup.pair.eos_ids
    else:
        tok = load_tokenizer(setup.senior)
        for n in names:
            check_same_tokenizer(tok, load_tokenizer(n))
        eos = model_eos_ids(tok, s_path)
    j_path = None if not j_paths else (j_paths[0] if len(j_paths) == 1 else j_paths)
    return VLLMRollouts(s_path, j_path, tok, eos, settings, seed=setup.seed, sleep_mode=setup.sleep,
                        in_process=setup.in_process, data_parallel=setup.data_parallel,
                        lazy=setup.pair is not None and not setup.data_parallel)
