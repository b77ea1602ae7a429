"""Peak memory of a training run per device, before the GPU hours (``tandem train --dry-run``).

What is counted (bytes; P parameters of the senior, N tokens of a micro-batch = rows x
(prompt + response) tokens, the longest prompt and response assumed):

- training device: the senior's weights (master dtype), its gradients (same dtype), AdamW's
  two moments (same dtype: torch's AdamW keeps them in the parameter's dtype), under mixed
  precision the compute-dtype copies autocast makes of every matrix during the forward
  pass (they live until the backward pass has used them), the activations the backward pass
  needs, and TRL's chunked log-prob head: a 4,096-token x 32,768-vocabulary tile, the hidden
  states it keeps, its backward's fp32 accumulator for the head matrix (vocab x hidden x 4 B;
  with tied embeddings autograd holds it through the whole backward pass until the
  embedding's gradient is added to it) and, without Triton (CPU), the tile-sized temporaries
  of TRL's torch fallback; the (rows, tokens, vocab) logits never exist.
- activations per token and layer are *counted*, not guessed: ``activation_profile`` runs
  the architecture's own transformers layer (at small widths, 1 and 2 layers, under the
  run's precision) and records every tensor autograd saves (``saved_tensors_hooks``); as
  those bytes are linear in the widths (hidden, q, kv, intermediate, heads), a least-squares
  fit over a few widths gives the bytes at the real widths. With gradient checkpointing each
  layer keeps only its input (hidden x residual dtype) and one layer is recomputed at a time.
  Under LoRA the layer is counted as it trains (PEFT's adapters on the frozen base): a frozen
  matrix or norm saves nothing for its own gradient, the adapters save their inputs and the
  rank-wide middle (fp32, every linear layer adapted: SmolLM2-135M 9% less per layer than full
  fine-tuning, the tiny world's Qwen3 15%).
  The backward pass's working set (the gradients of one layer's tensors while it runs) is
  taken as one layer's activations with checkpointing and two without: a rule read off the
  CPU measurements of ``scripts/memory_check.py`` (docs/scale.md, "The plan against measured peaks"), not derived.
- rollouts (engine hf): the decoder's pre-allocated KV caches, rows x (prompt + response) x
  layers x 2 x kv_heads x head_dim x dtype per model (the senior's on the rollout device, the
  junior's on its own), the senior's compute-dtype copy when the masters are fp32, and the
  prefill's transient (rows x prompt x (2 x intermediate + 4 x hidden) x dtype). Validation
  decodes like a rollout batch of ``rollout_batch_rows`` (or 256) rows.
- a junior pool: every junior's weights on its device; the juniors decode one sub-batch each in turn
  (and the KL monitor scores one junior at a time), so a device's rollout and monitor transients are
  the largest of its juniors' (per phase: the most parameters need not hold the largest KV cache), sized
  for the whole batch (a draw may give one junior every row).
- KL-Reg: the junior's reference forward (no gradient) per micro-batch; the KL monitor: one
  teacher-forced junior forward of 16,384 tokens with a 4,096 x vocabulary fp32 logit chunk.
- engine vllm: ``vllm_gpu_memory_utilization`` x the device's memory while awake (freed
  during the update with ``vllm_sleep``); on CPU its KV cache plus the weights it holds: the senior and
  every junior of a pool (one engine holds them all).

Phases do not overlap: the peak of a device is its resident memory (weights, moments) plus
the largest of its phase transients (rollout, update, validation). The update has two
sub-phases that add to its shared items (gradients, autocast copies, layer inputs) but not to
each other: ``update/head`` (the head's backward, first) and ``update/layers`` (then one layer
at a time). Not counted: the CUDA
context and allocator fragmentation (about 1-3 GiB on a GPU; the plan keeps a margin for them),
Python objects, the tokenizer and the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..config.shardings import PLAN_NAMES, plan_kind
from ..errors import TandemError
from ..models import model_config
from ..rl.lora import adapter_weights_per_rank, check_lora
from .shapes import LoraSpec, Shape, layer_types, activation_profile
from .shapes import dtype_bytes as _bytes

GiB = 1 << 30
TILE_TOKENS, TILE_VOCAB = 4096, 32768  # TRL's chunked log-prob tile (trl.kernels.chunked_logprob)
KL_BATCH_TOKENS, KL_CHUNK = 16384, 4096  # decoding.teacher_forcing.response_logprobs defaults
VALIDATION_ROWS = 256  # rl.callbacks.Validation.batch_rows when rollout_batch_rows is 0
GPU_MARGIN_GIB = 3.0  # CUDA context + allocator slack kept free on a GPU
# Without Triton (CPU), TRL's chunked head folds each recomputed tile with torch ops
# (trl.kernels.chunked_logprob._backward_tile). Live together at its peak, beside the tile:
# five fp32 tile-sized tensors (scaled logits, z, log p, p, the gradient), two of the three
# temporaries of the gradient's update (indicator as float, 1[target] - p, their product; each
# is freed once the next is made) and the boolean target mask: 7.25 fp32 tiles.
# tests/unit/rl/test_paper_training.py measures it on TRL's own function.
CPU_FALLBACK_TILES = 7.25


@dataclass
class Item:
    device: str
    phase: str  # "resident" or the phase it belongs to: rollout, update (update/head, update/layers), validation
    name: str
    nbytes: float


@dataclass
class Plan:
    items: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, device, phase, name, nbytes):
        if nbytes:
            self.items.append(Item(str(device), phase, name, float(nbytes)))

    def devices(self) -> list[str]:
        return list(dict.fromkeys(i.device for i in self.items))

    def peak(self, device: str) -> tuple[float, str]:
        """(peak bytes, the phase that sets it) of one device."""
        def total(phases) -> float:
            return sum(i.nbytes for i in self.items if i.device == device and i.phase in phases)

        # a sub-phase ("update/head") adds its items to its parent's ("update"), which hold throughout
        phases = {i.phase for i in self.items if i.phase != "resident"}
        best = max(((total({ph, ph.split("/")[0]}), ph) for ph in phases), default=(0.0, "resident"))
        return total({"resident"}) + best[0], best[1]


def _plan_device(spec: str | None, gpu: bool) -> str:
    """A device name for planning: 'auto' is cuda:0 when planning for GPUs, else this machine's;
    a named device is taken as written (it need not exist here)."""
    if spec in (None, "", "auto"):
        if gpu:
            return "cuda:0"
        from ..models import resolve_device

        return str(resolve_device("auto"))
    return spec


def _rollout_device(cfg, gpu: bool, d0: str) -> str:
    """Where the in-process engine decodes: the run's ``rollout_device`` where its engine has one, else ``d0``."""
    if cfg.models.rollout_device and _kind(cfg).rollout_device:
        return _plan_device(cfg.models.rollout_device, gpu)
    return d0


def rollout_rows(cfg, processes: int) -> int:
    """Rows one process decodes at once in a rollout step: ``rollout_batch_rows``, or its whole share of the batch."""
    return cfg.rollout.rollout_batch_rows or cfg.loop.prompts_per_step * cfg.rollout.group_size // processes


SHARDINGS = PLAN_NAMES.keys()  # the plan's names of the backends (config/shardings.py): ddp is none
OFFLOADS = ("none", "optimizer", "all")
HOST = "host"  # CPU RAM of the training process (offloaded shards)


@dataclass(frozen=True)
class Layout:
    """How the senior's training state is spread: ``processes`` training processes (one GPU each),
    ``sharding`` ddp (whole copies), fsdp2 (torch ``fully_shard`` per decoder layer and the root,
    fp32 master shards, ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``) or zero3
    (DeepSpeed), ``offload`` of shards to host memory (fsdp2: all = ``CPUOffloadPolicy``; zero3:
    optimizer = ``offload_optimizer``, all = with ``offload_param``), ``lora_r`` > 0: only LoRA
    adapters of that rank on every linear layer of the body train, and the weight-sync bucket."""

    processes: int = 1
    sharding: str = "ddp"
    offload: str = "none"
    lora_r: int = 0
    sync_bucket_mib: float = 512.0

    def __post_init__(self):
        if not isinstance(self.processes, int) or self.processes < 1:
            raise TandemError(f"plan processes must be a whole number >= 1, got {self.processes!r}")
        kind = plan_kind(self.sharding)
        if self.offload not in OFFLOADS:
            raise TandemError(f"plan offload must be one of {', '.join(OFFLOADS)}, got {self.offload!r}")
        if self.offload != "none" and not kind.can_offload:
            offloading = " or ".join(k.plan_name for k in PLAN_NAMES.values() if k.can_offload)
            raise TandemError(f"plan offload needs sharding ({offloading}): {kind.label} keeps whole copies on the GPU")
        if self.offload not in kind.offloads:
            raise TandemError(f"plan offload {self.offload}: {kind.label} takes offload {' or '.join(kind.offloads)}")
        if self.lora_r < 0 or self.sync_bucket_mib <= 0:
            raise TandemError(f"plan lora_r must be >= 0 and the sync bucket > 0 MiB, got {self.lora_r}, "
                              f"{self.sync_bucket_mib}")

    @property
    def kind(self):
        """The backend's row (``config/shardings.py``): what the plan asks instead of its name."""
        return plan_kind(self.sharding)

    @property
    def sharded(self) -> bool:
        """Each process holds a part of the senior's training state (not DDP's whole copies)."""
        return self.kind.shards_parameters

    def describe(self) -> str:
        text = self.kind.label + f" x {self.processes}"
        text += {"none": "", "optimizer": ", optimiser offload", "all": ", parameter + optimiser offload"}[self.offload]
        return text + (f", LoRA r={self.lora_r}" if self.lora_r else "")


def _senior(p: Plan, dev: str, lay: Layout, S: Shape, master: torch.dtype, compute: torch.dtype,
            lora_per_rank: int = 0) -> None:
    """The trained senior's weights, gradients and AdamW moments on one rank (see ``Layout``). LoRA
    (rl/lora.py): the frozen base in the compute dtype, adapters of ``lora_per_rank`` x r weights in the
    masters' dtype, and only they have gradients and moments (whole under DDP, shards under FSDP2)."""
    bm, bc = _bytes(master), _bytes(compute)
    trained = lay.lora_r * (lora_per_rank or S.lora_per_rank) if lay.lora_r else S.params
    what = f"LoRA r={lay.lora_r}: {count(trained)} adapter weights" if lay.lora_r else f"{count(S.params)} weights"
    weights = S.params + (trained if lay.lora_r else 0)
    if not lay.sharded and lay.lora_r:
        p.add(dev, "resident", f"senior weights ({count(S.params)} x {bc} B frozen base, {str(compute)[6:]}, + "
                               f"{count(trained)} x {bm} B adapters)", S.params * bc + trained * bm)
        p.add(dev, "resident", f"AdamW moments (2 x {bm} B per trained weight; {what})", 2 * trained * bm)
        p.add(dev, "update", f"gradients ({bm} B per trained weight)", trained * bm)
        return
    if not lay.sharded:
        p.add(dev, "resident", f"senior weights ({count(weights)} x {bm} B, {str(master)[6:]})", weights * bm)
        p.add(dev, "resident", f"AdamW moments (2 x {bm} B per trained weight; {what})", 2 * trained * bm)
        p.add(dev, "update", f"gradients ({bm} B per trained weight)", trained * bm)
        return
    lay.kind.memory_terms()(p, dev, lay, S, master, compute, trained, what)


def plan(cfg, num_processes: int = 1, gpu_gib: float | None = None, layout: Layout | None = None) -> Plan:
    """The memory plan of one training process of ``cfg`` (see module docstring).

    ``gpu_gib``: plan for GPUs of this size ('auto' devices become cuda:0); None: this machine.
    ``layout``: sharding, offload, LoRA and the process count (default: DDP over ``num_processes``).
    """
    from ..rl.grpo_config import micro_batching

    gpu = gpu_gib is not None
    d0 = _plan_device(cfg.models.senior_device, gpu)
    droll = _rollout_device(cfg, gpu, d0)
    on_gpu = d0.startswith("cuda")
    _, compute, master = cfg.models.dtypes_on("cuda" if on_gpu else "cpu")
    mixed = master != compute
    s_cfg = model_config(cfg.models.senior)
    S = Shape.of(s_cfg)
    juniors = _juniors(cfg, gpu, d0, S)  # (label, device, shape) of each junior
    dj, J = juniors[0][1], juniors[0][2]
    bm, bc = _bytes(master), _bytes(compute)
    lay = layout or Layout(num_processes, lora_r=cfg.models.lora_r)
    num_processes = lay.processes
    micro, accumulate = micro_batching(cfg, num_processes)
    seq = cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens
    p = Plan()

    # the trained senior: its weights and optimiser states, then the update's transients
    if lay.lora_r:  # targets and rank against the senior's layers, before any adapter is built to measure
        check_lora(cfg.models.senior, s_cfg, cfg.models.lora_targets, lay.lora_r,
                   "lora_r" if lay.lora_r == cfg.models.lora_r else "--plan-lora-r")
    per_rank = adapter_weights_per_rank(s_cfg, cfg.models.lora_targets) if lay.lora_r else 0
    _senior(p, d0, lay, S, master, compute, per_rank)
    lora_base = lay.lora_r and not lay.sharded  # LoRA: the frozen base is held in the compute dtype
    grad_dtype = compute if lay.kind.grads_in_compute and mixed else master  # e.g. FSDP2's param_dtype
    if mixed and not lay.sharded and not lora_base:  # FSDP2's policy and ZeRO-3 gather bf16: no autocast copies
        p.add(d0, "update", f"autocast copies of the matrices ({bc} B per weight)", S.matrix_params * bc)
    ckpt = cfg.models.gradient_checkpointing
    act_dtype = compute if lora_base else master
    lora = LoraSpec(lay.lora_r, tuple(cfg.models.lora_targets), cfg.models.lora_dropout, input_grads=ckpt) \
        if lay.lora_r else None
    prof = activation_profile(s_cfg, act_dtype, compute, lora)  # what the forward saves (LoRA: as it trains)
    # The backward's working set is the gradients of a layer's activations, whose shapes do not depend on
    # which weights train: full fine-tuning's layer, under LoRA too (measured: docs/scale.md, "LoRA activations").
    work = activation_profile(s_cfg, act_dtype, compute) if lora else prof
    tokens = micro * seq
    # The backward pass holds the update's shared items throughout, and at any moment either the
    # head's backward (first) or one layer's (then, layer by layer): two sub-phases, not a sum.
    if ckpt:
        p.add(d0, "update", f"activations, checkpointed: layer inputs ({micro} rows x {seq} tokens)",
              tokens * (S.layers * S.hidden * (bm if mixed and not lora_base else bc) + prof.model_level))
        p.add(d0, "update/layers", "one layer recomputed + its backward's working set",
              tokens * (prof.max_layer + work.max_layer))
    else:  # all layers saved, plus the backward pass's working set: about two layers' worth (measured on CPU)
        p.add(d0, "update", f"activations ({micro} rows x {seq} tokens, {prof.per_layer / 1024:.1f} KiB per token "
                            f"and layer)", tokens * (S.layers * prof.per_layer + prof.model_level))
        p.add(d0, "update/layers", "one layer's backward working set (two layers' activations)",
              tokens * 2 * work.max_layer)
    # TRL's chunked head scores only the labelled (response) positions with Triton, every position without
    head_tokens = micro * cfg.rollout.max_new_tokens if on_gpu else micro * (seq - 1)
    tile = min(head_tokens, TILE_TOKENS) * min(S.vocab, TILE_VOCAB)
    p.add(d0, "update", "log-prob head: hidden states it keeps", head_tokens * S.hidden * bc + 8 * head_tokens * 4)
    p.add(d0, "update/head", "log-prob head: TRL's tile and the hidden states' fp32 gradient",
          tile * bc + head_tokens * S.hidden * 4)
    if mixed and not lay.sharded and not lora_base:
        p.add(d0, "update/head", "log-prob head: compute-dtype copy of one vocabulary slice of the head",
              min(S.vocab, TILE_VOCAB) * S.hidden * bc)
    if not lay.lora_r:
        p.add(d0, "update/head", "log-prob head: fp32 accumulator of the head's gradient", S.vocab * S.hidden * 4)
    if not on_gpu:  # no Triton: TRL folds each tile with plain torch ops
        p.add(d0, "update/head", f"log-prob head: temporaries of TRL's torch fallback ({CPU_FALLBACK_TILES:g} fp32 "
                                 f"tiles)", CPU_FALLBACK_TILES * tile * 4)
    if not lay.lora_r and (S.tied or lay.kind.holds_root_grads):
        # tied: autograd adds the embedding's gradient to the head's at the end; FSDP2: the root
        # reduce-scatters its gradients once all of them (head and embedding) are there
        p.add(d0, "update/layers", "the head's gradient, held until the end of the backward pass "
              + ("(tied embedding)" if S.tied else f"({lay.kind.label} reduces the root's gradients together)"),
              S.vocab * S.hidden * _bytes(grad_dtype))

    # scoring forwards without gradient (old log-probs when a rollout feeds several updates; KL-Reg's reference)
    tile = min(micro * cfg.rollout.max_new_tokens, TILE_TOKENS) * min(S.vocab, TILE_VOCAB) * bc
    no_grad = micro * seq * (4 * S.hidden + 2 * S.intermediate) * bc + tile
    if cfg.loop.updates_per_batch > 1:
        p.add(d0, "scoring", f"old log-probs forward ({micro} rows, no gradient)", no_grad)
    for label, dev, shape in juniors:
        p.add(dev, "resident", f"junior {label + ' ' if len(juniors) > 1 else ''}weights ({count(shape.params)} x "
              f"{bc} B)", shape.params * bc)
    if cfg.method_kind.reference is not None:
        p.add(dj, "scoring", f"reference (junior) forward ({micro} rows, no gradient)",
              micro * seq * (4 * J.hidden + 2 * J.intermediate) * bc
              + min(micro * cfg.rollout.max_new_tokens, TILE_TOKENS) * min(J.vocab, TILE_VOCAB) * bc)
    batch_rows = cfg.loop.prompts_per_step * cfg.rollout.group_size // num_processes
    if cfg.loop.kl_every and (cfg.method_kind.junior_in_rollout or cfg.models.junior):
        kl_tokens = min(KL_BATCH_TOKENS, batch_rows * seq)

        def kl_bytes(Jd: Shape) -> int:
            return (kl_tokens * (4 * Jd.hidden + 2 * Jd.intermediate) * bc
                    + 2 * min(KL_CHUNK, batch_rows * cfg.rollout.max_new_tokens) * Jd.vocab * 4)

        for dev, Jd in _largest_per_device(juniors, kl_bytes).items():
            p.add(dev, "kl-monitor",
                  f"KL monitor: teacher-forced junior forward ({kl_tokens} tokens, fp32 logit chunk)", kl_bytes(Jd))

    # rollouts and validation
    phases = [("rollout", rollout_rows(cfg, num_processes), cfg.rollout_schedule)]
    if cfg.loop.eval_every:
        phases.append(("validation",
                       min(cfg.rollout.rollout_batch_rows or VALIDATION_ROWS, cfg.data.val_size * cfg.loop.eval_n),
                       cfg.validation_schedule))
    if lay.lora_r and lay.kind.lora_sync_per_layer:  # one layer's W + (alpha / r) B A formed in fp32 as it gathers
        p.add(d0, "sync", "weight sync: one layer's gathered W and its merged sum in fp32",
              S.intermediate * S.hidden * (bc + 4))
    if lora_base:  # the merged stream: one W + (alpha / r) B A at a time (fp32 W, fp32 delta, the cast result)
        p.add(d0, "sync", "weight sync: one merged matrix at a time (fp32 base and update, cast copy)",
              S.intermediate * S.hidden * (4 + 4 + bc))
    elif lay.sharded or lay.lora_r:  # every rank gathers one bucket of full bf16 tensors at a time
        p.add(d0, "sync", f"weight sync: one gathered bucket ({lay.sync_bucket_mib:g} MiB at most, "
              f"{str(compute)[6:]})", min(lay.sync_bucket_mib * (1 << 20), S.params * bc))
    if _kind(cfg).remote:
        p.notes.append(f"engine {cfg.rollout.engine}: rollouts and validation run on the server; "
                       "its memory is the server's")
        return p
    if _kind(cfg).vllm_settings:
        if not gpu and not on_gpu:
            p.notes.append("engine vllm on CPU: its KV cache is vllm_kv_cache_gib (default 1 GiB) plus its weights")
        # the engine holds the senior and, for a tandem run, every junior of the pool (one model: engines/vllm_model.py)
        held = sum(sh.params for _, _, sh in juniors) if cfg.method_kind.junior_in_rollout else 0
        engine_weights = (S.params + held) * bc
        share = cfg.rollout.vllm_gpu_memory_utilization * (gpu_gib or 0) * GiB if on_gpu else \
            (cfg.rollout.vllm_kv_cache_gib or 1.0) * GiB + engine_weights
        if on_gpu and len(juniors) > 1 and cfg.method_kind.junior_in_rollout:
            p.notes.append(f"engine vllm: its share holds the senior and all {len(juniors)} juniors' weights "
                           f"({engine_weights / GiB:.2f} GiB); its KV cache (every junior's layers too) is the rest")
            if engine_weights >= share:
                p.notes.append("engine vllm: the senior and the pool's juniors do not fit vllm_gpu_memory_utilization "
                               "of this GPU; raise it or use fewer/smaller juniors")
        for phase in [ph for ph, _, _ in phases] + (["sync"] if lay.sharded or lay.lora_r else []):
            p.add(d0, phase, "vLLM engine (weights + KV cache), asleep during updates" if cfg.rollout.vllm_sleep
                  else "vLLM engine (weights + KV cache)", share)
        if not cfg.rollout.vllm_sleep:
            p.add(d0, "update", "vLLM engine (awake during updates; vllm_sleep frees it)", share)
        return p
    largest = _largest_per_device(juniors, lambda Jd: seq * Jd.kv_bytes_per_token(compute) + Jd.state_bytes_per_row)
    if mixed or droll != d0 or lay.sharded or lay.lora_r:  # a sharded or LoRA senior: a plain merged copy
        p.add(droll, "resident", f"senior copy the rollouts decode ({str(compute)[6:]})", S.params * bc)
    for phase, rows, schedule in phases:
        p.add(droll, phase, f"senior KV cache ({rows} rows x {seq} tokens)", rows * seq * S.kv_bytes_per_token(compute))
        p.add(droll, phase, f"senior linear-attention states ({rows} rows)", rows * S.state_bytes_per_row)
        p.add(droll, phase, f"prefill ({rows} rows x {cfg.data.max_prompt_tokens} prompt tokens) and step logits",
              rows * cfg.data.max_prompt_tokens * (2 * S.intermediate + 4 * S.hidden) * bc + 2 * rows * S.vocab * 4)
        if schedule != "senior":
            for dev, Jd in largest.items():
                p.add(dev, phase, f"junior KV cache ({rows} rows x {seq} tokens)",
                      rows * seq * Jd.kv_bytes_per_token(compute))
                p.add(dev, phase, f"junior linear-attention states ({rows} rows)", rows * Jd.state_bytes_per_row)
    return p


def floor(cfg, num_processes: int = 1) -> dict[str, tuple[float, str]]:
    """Per device of this machine, (bytes, what): what one process of the run allocates at once whatever its data,
    from the models' configs alone (no layer is profiled, so it costs milliseconds). Either the in-process engine's
    rollout batch KV caches, which the decoder allocates whole at the prefill for prompt + max_new_tokens positions
    (``decoding.kvcache``; counted here for a one-token prompt, full-attention layers only: the senior's, and the
    junior's where the schedule has one, on their devices), or the update's layer inputs, which even gradient
    checkpointing keeps (counted for one prompt and one response token per row: micro-batch rows x 2 x layers x
    hidden, in the compute dtype). The larger of the two per device; the whole plan (``plan``) counts the real
    lengths, weights, moments and the measured activations."""
    from ..rl.grpo_config import micro_batching

    d0 = _plan_device(cfg.models.senior_device, False)
    _, compute, _ = cfg.models.dtypes_on("cuda" if d0.startswith("cuda") else "cpu")
    s_cfg = model_config(cfg.models.senior)
    S = Shape.of(s_cfg)
    micro, _ = micro_batching(cfg, num_processes)
    out = {d0: (float(micro * 2 * S.layers * S.hidden * _bytes(compute)),
                f"the update's layer inputs ({micro} rows x {S.layers} layers, 2 tokens a row at the least)")}
    if _kind(cfg).remote or _kind(cfg).vllm_settings:  # the engine's KV cache is bounded by its own setting
        return out
    rows, capacity = rollout_rows(cfg, num_processes), 1 + cfg.rollout.max_new_tokens

    def cache(config) -> float:
        full = layer_types(config).count("full_attention")  # the layers the decoder pre-allocates
        shape = Shape.of(config)
        return float(rows * capacity * full * 2 * shape.kv_heads * shape.head_dim * _bytes(compute))

    caches = {_rollout_device(cfg, False, d0): cache(s_cfg)}
    if cfg.rollout_schedule != "senior":
        m = cfg.models  # each junior's config read once (self-pairing: the senior's), on its device
        for dev, name in zip(m.junior_devices, m.pool.names, strict=True) if m.junior else [(m.junior_device, None)]:
            dev = _plan_device(dev, False) if dev else d0
            caches[dev] = caches.get(dev, 0.0) + cache(s_cfg if name is None else model_config(name))
    for dev, nbytes in caches.items():
        if nbytes > out.get(dev, (0.0, ""))[0]:
            out[dev] = (nbytes, f"the rollout batch's KV caches ({rows} rows x {capacity} positions at the least)")
    return out


def device_bytes(device: str) -> float | None:
    """Physical memory of a device of this machine (CPU: RAM; a CUDA device: its total), None when unknown."""
    import os

    if device == "cpu":
        try:
            return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            return None
    if device.startswith("cuda") and torch.cuda.is_available():
        index = int(device.partition(":")[2] or 0)
        if index < torch.cuda.device_count():
            return float(torch.cuda.get_device_properties(index).total_memory)
    return None


def refuse_beyond_machine(cfg, num_processes: int = 1) -> None:
    """A TandemError when ``floor`` alone exceeds a device's physical memory: a run that cannot fit is refused
    before any model loads (not killed for memory or failing an allocation mid-run), naming the knobs that size
    it."""
    for dev, (need, what) in floor(cfg, num_processes).items():
        have = device_bytes(dev)
        if have is not None and need > have:
            raise TandemError(f"{what} alone need {need / GiB:,.1f} GiB on {dev}, more than its {have / GiB:,.1f} "
                              "GiB: lower group_size, prompts_per_step or max_new_tokens (or micro_batch_rows, "
                              "rollout_batch_rows); `tandem train --dry-run` prints the whole memory plan")


def check_fits_machine(cfg) -> None:
    """``refuse_beyond_machine`` for this process (``$WORLD_SIZE`` processes), where every model's config is here
    to read (a built-in name or a local directory; a hub id is checked by its load), once the output directory's
    name is checked. ``tandem train`` and ``TandemGRPOTrainer`` call it before any model loads."""
    import os

    from ..models import readable_here
    from ..outdir import output_dir

    output_dir(cfg.loop.output_dir, "--output-dir", create=False)  # a bad directory is said before a model resolves
    m = cfg.models
    if readable_here((m.senior, *(m.pool.names if m.junior else ()))):
        refuse_beyond_machine(cfg, int(os.environ.get("WORLD_SIZE", "1") or 1))


def _juniors(cfg, gpu: bool, d0: str, S: Shape) -> list[tuple[str, str, Shape]]:
    """(label, planned device, shape) of every junior of the run's pool (self-pairing: the senior's shape)."""
    m = cfg.models
    if not m.junior:
        return [(m.pool.labels[0], _plan_device(m.junior_device, gpu) if m.junior_device else d0, S)]
    return [(label, _plan_device(dev, gpu) if dev else d0, Shape.of(model_config(name)))
            for label, name, dev in zip(m.pool.labels, m.pool.names, m.junior_devices, strict=True)]


def _largest_per_device(juniors, size) -> dict[str, Shape]:
    """The junior of each device whose transient ``size(shape)`` is largest (its juniors run one at a time;
    the most parameters need not mean the largest KV cache)."""
    out: dict[str, Shape] = {}
    for _, dev, shape in juniors:
        if dev not in out or size(shape) > size(out[dev]):
            out[dev] = shape
    return out


def _kind(cfg):
    """The run's engine row (``engines.base.ENGINES``): the plan follows its capabilities, not its name."""
    from ..engines.base import engine_kind

    return engine_kind(cfg.rollout.engine)


def advice(cfg, phase: str) -> str:
    """Which knob lowers a device's peak when ``phase`` sets it."""
    if phase.startswith("update"):
        knobs = []
        if cfg.loop.micro_batch_rows != 1:
            knobs.append("a smaller micro_batch_rows")
        if not cfg.models.gradient_checkpointing:
            knobs.append("gradient_checkpointing true")
        if _kind(cfg).vllm_settings and not cfg.rollout.vllm_sleep:
            knobs.append("vllm_sleep true")
        knobs.append("more GPUs with sharded optimiser states (accelerate launch with FSDP or DeepSpeed ZeRO, "
                     "optionally with CPU offload)")
        return "; ".join(knobs)
    if phase in ("rollout", "validation"):
        knobs = ["a smaller rollout_batch_rows"]
        if _kind(cfg).rollout_device and not cfg.models.rollout_device:
            knobs.append("rollout_device on another GPU (beside the junior)")
        if _kind(cfg).vllm_settings:
            knobs.append("a smaller vllm_gpu_memory_utilization")
        return "; ".join(knobs)
    return "a smaller micro_batch_rows"


def _size(n: float) -> str:
    return f"{n / GiB:8.2f} GiB" if n >= GiB else f"{n / (1 << 20):8.1f} MiB"


def count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def render(cfg, p: Plan, gpu_gib: float | None) -> str:
    """The plan as text: per device, its items, peak, and whether it fits ``gpu_gib``."""
    lines = []
    fits_all = True
    for dev in p.devices():
        peak, phase = p.peak(dev)
        lines.append(f"{dev}: peak {_size(peak).strip()} (during {phase})")
        for it in p.items:
            if it.device == dev:
                lines.append(f"  {it.phase:>13}  {_size(it.nbytes)}  {it.name}")
        if gpu_gib is not None and dev.startswith("cuda"):
            room = gpu_gib - GPU_MARGIN_GIB
            ok = peak / GiB <= room
            fits_all &= ok
            lines.append(f"  {'fits' if ok else 'DOES NOT FIT'} in {gpu_gib:g} GiB (keeping {GPU_MARGIN_GIB:g} GiB "
                         f"for the CUDA context)" + ("" if ok else f": try {advice(cfg, phase)}"))
    lines += [f"note: {n}" for n in p.notes]
    if gpu_gib is not None:
        lines.append("plan: fits" if fits_all else "plan: does not fit")
    return "\n".join(lines)


def disk_plan(cfg, gpu: bool = True) -> str:
    """What a run's saves take on disk, in words (``tandem train --dry-run``): each full checkpoint
    (master weights, AdamW's two moments, in the master dtype), how many save_total_limit keeps, and
    with ``keep_weights`` each save's exported weights in the compute dtype, kept for good."""
    S = Shape.of(model_config(cfg.models.senior))
    _, compute, master = cfg.models.dtypes_on("cuda" if gpu else "cpu")
    kept = "every" if cfg.loop.save_total_limit is None else f"the last {cfg.loop.save_total_limit}"
    if cfg.models.lora_r:  # the adapter and its moments in fp32 (rl/lora.py); merged/ weights with save_merged
        adapter = (cfg.models.lora_r
                   * adapter_weights_per_rank(model_config(cfg.models.senior), cfg.models.lora_targets) * 4)
        merged = S.params * _bytes(compute) if cfg.models.save_merged else 0
        extra = f" + merged/ {_size(merged).strip()}" if merged else ""
        return (f"disk: each checkpoint-* {_size(3 * adapter).strip()}{extra} (LoRA adapter and its AdamW moments in "
                f"float32), {kept} kept, every {cfg.loop.save_every} {cfg.loop.step_unit} steps; best/ and final/ "
                f"{_size(adapter).strip()}{extra}" + ("; keep_weights: as much more per save in weights/, never pruned"
                                                      if cfg.loop.keep_weights else ""))
    ckpt = S.params * 3 * _bytes(master)
    line = (f"disk: each checkpoint-* {_size(ckpt).strip()} (weights and AdamW moments in {str(master)[6:]}), {kept} "
            f"kept, every {cfg.loop.save_every} {cfg.loop.step_unit} steps; "
            f"best/ and final/ {_size(S.params * _bytes(compute)).strip()}")
    if cfg.loop.keep_weights:
        line += (f"; keep_weights: {_size(S.params * _bytes(compute)).strip()} more per save in weights/ "
                 f"({str(compute)[6:]}), never pruned")
    return line
