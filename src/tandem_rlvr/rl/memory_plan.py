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
  The backward pass's working set (the gradients of one layer's tensors while it runs) is
  taken as one layer's activations with checkpointing and two without: a rule read off the
  CPU measurements of ``scripts/memory_check.py`` (docs/results.md), not derived.
- rollouts (engine hf): the decoder's pre-allocated KV caches, rows x (prompt + response) x
  layers x 2 x kv_heads x head_dim x dtype per model (the senior's on the rollout device, the
  junior's on its own), the senior's compute-dtype copy when the masters are fp32, and the
  prefill's transient (rows x prompt x (2 x intermediate + 4 x hidden) x dtype). Validation
  decodes like a rollout batch of ``rollout_batch_rows`` (or 256) rows.
- KL-Reg: the junior's reference forward (no gradient) per micro-batch; the KL monitor: one
  teacher-forced junior forward of 16,384 tokens with a 4,096 x vocabulary fp32 logit chunk.
- engine vllm: ``vllm_gpu_memory_utilization`` x the device's memory while awake (freed
  during the update with ``vllm_sleep``).

Phases do not overlap: the peak of a device is its resident memory (weights, moments) plus
the largest of its phase transients (rollout, update, validation). The update has two
sub-phases that add to its shared items (gradients, autocast copies, layer inputs) but not to
each other: ``update/head`` (the head's backward, first) and ``update/layers`` (then one layer
at a time). Not counted: the CUDA
context and allocator fragmentation (about 1-3 GiB on a GPU; the plan keeps a margin for them),
Python objects, the tokenizer and the data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources

import torch

from ..errors import TandemError

GiB = 1 << 30
TILE_TOKENS, TILE_VOCAB = 4096, 32768  # TRL's chunked log-prob tile (trl.kernels.chunked_logprob)
KL_BATCH_TOKENS, KL_CHUNK = 16384, 4096  # eval.teacher_forcing.response_logprobs defaults
VALIDATION_ROWS = 256  # rl.callbacks.Validation.batch_rows when rollout_batch_rows is 0
GPU_MARGIN_GIB = 3.0  # CUDA context + allocator slack kept free on a GPU
# Without Triton (CPU), TRL's chunked head folds each recomputed tile with torch ops
# (trl.kernels.chunked_logprob._backward_tile). Live together at its peak, beside the tile:
# five fp32 tile-sized tensors (scaled logits, z, log p, p, the gradient), two of the three
# temporaries of the gradient's update (indicator as float, 1[target] - p, their product; each
# is freed once the next is made) and the boolean target mask: 7.25 fp32 tiles.
# tests/test_paper_training.py measures it on TRL's own function.
CPU_FALLBACK_TILES = 7.25


def _bytes(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def model_config(spec: str):
    """The transformers config of a model spec. A hub id with a config shipped in
    ``presets/models`` uses that one (the paper preset can be planned without the hub)."""
    from transformers import AutoConfig

    from ..models import resolve_model_path

    shipped = resources.files("tandem_rlvr").joinpath("presets", "models", spec.replace("/", "--") + ".json")
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")) and shipped.is_file():
        data = json.loads(shipped.read_text(encoding="utf-8"))
        return AutoConfig.for_model(data.pop("model_type"), **data)
    try:
        return AutoConfig.from_pretrained(resolve_model_path(spec))
    except (OSError, ValueError) as e:
        raise TandemError(f"cannot read the config of model {spec}: {str(e).splitlines()[0][:160]}") from None


@dataclass(frozen=True)
class Shape:
    """The widths of a decoder-only model that memory depends on."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    params: int  # all parameters (tied matrices once)
    matrix_params: int  # parameters of the nn.Linear layers (what autocast casts)

    @classmethod
    def of(cls, config) -> "Shape":
        with torch.device("meta"):
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_config(config)
        params = sum(p.numel() for p in model.parameters())
        matrix = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
        hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.num_attention_heads,
                   getattr(config, "num_key_value_heads", None) or config.num_attention_heads, hd, config.vocab_size,
                   bool(getattr(config, "tie_word_embeddings", False)), params, matrix)

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * _bytes(dtype)


def _saved_bytes(config, layers: int, master: torch.dtype, compute: torch.dtype, rows: int, tokens: int) -> int:
    """Bytes autograd saves in one forward of ``rows`` x ``tokens`` through the model's body
    (parameters themselves excluded: they are counted as weights)."""
    from transformers import AutoModelForCausalLM

    cfg = _variant(config, num_hidden_layers=layers, vocab_size=64, attn_implementation="sdpa", bos_token_id=None,
                   eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=master).train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    ids = torch.randint(0, 64, (rows, tokens))
    attn = torch.ones(rows, tokens, dtype=torch.long)
    attn[0, : tokens // 4] = 0  # left padding, as batched prompts have
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=compute, enabled=compute != master):
            model.model(input_ids=ids, attention_mask=attn, use_cache=False)
    return sum(seen.values())


@dataclass(frozen=True)
class ActivationProfile:
    per_layer: float  # bytes per token and layer
    model_level: float  # bytes per token outside the layers (embedding output, final norm, ...)


def activation_profile(config, master: torch.dtype, compute: torch.dtype) -> ActivationProfile:
    """Saved activation bytes per token at ``config``'s widths (see module docstring): counted at
    nine small widths of the same architecture and extended linearly to the real ones. Exact at
    held-out widths in tests; one key/value head (multi-query attention) saves about 8% less than
    the extension says, because repeating a single head needs no copy."""
    # (hidden, heads, kv heads, head dim, intermediate): each width varies alone at least once, so
    # the seven coefficients are determined (heads and head dim vary apart: q = heads x head dim)
    widths = [(64, 4, 2, 16, 160), (96, 4, 2, 16, 160), (64, 8, 2, 16, 160), (64, 4, 4, 16, 160), (64, 4, 2, 16, 320),
              (64, 4, 2, 32, 160), (64, 8, 4, 32, 224), (128, 8, 4, 16, 224), (96, 6, 2, 24, 192)]
    rows, tokens = 2, 32
    X, y_layer, y_model = [], [], []
    for h, nh, nkv, hd, i in widths:
        cfg = _variant(config, hidden_size=h, num_attention_heads=nh, num_key_value_heads=nkv, head_dim=hd,
                       intermediate_size=i)
        one = _saved_bytes(cfg, 1, master, compute, rows, tokens)
        two = _saved_bytes(cfg, 2, master, compute, rows, tokens)
        X.append([h, nh * hd, nkv * hd, i, nh, nkv, 1.0])
        y_layer.append((two - one) / (rows * tokens))
        y_model.append((2 * one - two) / (rows * tokens))
    A = torch.tensor(X, dtype=torch.float64)
    real = torch.tensor([config.hidden_size, config.num_attention_heads * _head_dim(config),
                         _kv_heads(config) * _head_dim(config), config.intermediate_size,
                         config.num_attention_heads, _kv_heads(config), 1.0], dtype=torch.float64)
    coef_layer = torch.linalg.lstsq(A, torch.tensor(y_layer, dtype=torch.float64)[:, None]).solution[:, 0]
    coef_model = torch.linalg.lstsq(A, torch.tensor(y_model, dtype=torch.float64)[:, None]).solution[:, 0]
    return ActivationProfile(float(real @ coef_layer), float(real @ coef_model))


def _variant(config, **changes):
    """``config`` with some widths changed (per-layer lists such as ``layer_types`` follow the depth)."""
    data = {**config.to_dict(), **changes}
    for key in ("layer_types", "max_window_layers"):
        data.pop(key, None)
    data.pop("model_type", None)
    return config.__class__(**data)


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _kv_heads(config) -> int:
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads


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


def plan(cfg, num_processes: int = 1, gpu_gib: float | None = None) -> Plan:
    """The memory plan of one training process of ``cfg`` (see module docstring).

    ``gpu_gib``: plan for GPUs of this size ('auto' devices become cuda:0); None: this machine.
    """
    from ..models import DTYPES
    from .train import micro_batching

    gpu = gpu_gib is not None
    d0 = _plan_device(cfg.senior_device, gpu)
    dj = _plan_device(cfg.junior_device, gpu) if cfg.junior_device else d0
    droll = _plan_device(cfg.rollout_device, gpu) if cfg.rollout_device and cfg.engine == "hf" else d0
    on_gpu = d0.startswith("cuda")
    compute = torch.bfloat16 if cfg.dtype == "auto" and on_gpu else (
        torch.float32 if cfg.dtype == "auto" else DTYPES.get(cfg.dtype, torch.float32))
    master = torch.float32 if cfg.master_dtype == "float32" else compute
    mixed = master != compute
    s_cfg = model_config(cfg.senior)
    j_cfg = model_config(cfg.junior) if cfg.junior else s_cfg
    S, J = Shape.of(s_cfg), Shape.of(j_cfg)
    bm, bc = _bytes(master), _bytes(compute)
    micro, accumulate = micro_batching(cfg, num_processes)
    seq = cfg.max_prompt_tokens + cfg.max_new_tokens
    p = Plan()

    # the trained senior
    p.add(d0, "resident", f"senior weights ({_count(S.params)} x {bm} B, {str(master)[6:]})", S.params * bm)
    p.add(d0, "resident", f"AdamW moments (2 x {bm} B per weight)", 2 * S.params * bm)
    p.add(d0, "update", f"gradients ({bm} B per weight)", S.params * bm)
    if mixed:
        p.add(d0, "update", f"autocast copies of the matrices ({bc} B per weight)", S.matrix_params * bc)
    prof = activation_profile(s_cfg, master, compute)
    tokens = micro * seq
    # The backward pass holds the update's shared items throughout, and at any moment either the
    # head's backward (first) or one layer's (then, layer by layer): two sub-phases, not a sum.
    if cfg.gradient_checkpointing:
        p.add(d0, "update", f"activations, checkpointed: layer inputs ({micro} rows x {seq} tokens)",
              tokens * (S.layers * S.hidden * (bm if mixed else bc) + prof.model_level))
        p.add(d0, "update/layers", "one layer recomputed + its backward's working set", tokens * 2 * prof.per_layer)
    else:  # all layers saved, plus the backward pass's working set: about two layers' worth (measured on CPU)
        p.add(d0, "update", f"activations ({micro} rows x {seq} tokens, {prof.per_layer / 1024:.1f} KiB per token "
                            f"and layer)", tokens * (S.layers * prof.per_layer + prof.model_level))
        p.add(d0, "update/layers", "one layer's backward working set (two layers' activations)",
              tokens * 2 * prof.per_layer)
    # TRL's chunked head scores only the labelled (response) positions with Triton, every position without
    head_tokens = micro * cfg.max_new_tokens if on_gpu else micro * (seq - 1)
    tile = min(head_tokens, TILE_TOKENS) * min(S.vocab, TILE_VOCAB)
    p.add(d0, "update", "log-prob head: hidden states it keeps", head_tokens * S.hidden * bc + 8 * head_tokens * 4)
    p.add(d0, "update/head", "log-prob head: TRL's tile and the hidden states' fp32 gradient",
          tile * bc + head_tokens * S.hidden * 4)
    if mixed:
        p.add(d0, "update/head", "log-prob head: compute-dtype copy of one vocabulary slice of the head",
              min(S.vocab, TILE_VOCAB) * S.hidden * bc)
    p.add(d0, "update/head", "log-prob head: fp32 accumulator of the head's gradient", S.vocab * S.hidden * 4)
    if not on_gpu:  # no Triton: TRL folds each tile with plain torch ops
        p.add(d0, "update/head", f"log-prob head: temporaries of TRL's torch fallback ({CPU_FALLBACK_TILES:g} fp32 "
                                 f"tiles)", CPU_FALLBACK_TILES * tile * 4)
    if S.tied:
        p.add(d0, "update/layers", "the head's gradient, held until the tied embedding's gradient joins it",
              S.vocab * S.hidden * bm)

    # scoring forwards without gradient (old log-probs when a rollout feeds several updates; KL-Reg's reference)
    tile = min(micro * cfg.max_new_tokens, TILE_TOKENS) * min(S.vocab, TILE_VOCAB) * bc
    no_grad = micro * seq * (4 * S.hidden + 2 * S.intermediate) * bc + tile
    if cfg.updates_per_batch > 1:
        p.add(d0, "scoring", f"old log-probs forward ({micro} rows, no gradient)", no_grad)
    p.add(dj, "resident", f"junior weights ({_count(J.params)} x {bc} B)", J.params * bc)
    if cfg.method == "klreg":
        p.add(dj, "scoring", f"reference (junior) forward ({micro} rows, no gradient)",
              micro * seq * (4 * J.hidden + 2 * J.intermediate) * bc
              + min(micro * cfg.max_new_tokens, TILE_TOKENS) * min(J.vocab, TILE_VOCAB) * bc)
    batch_rows = cfg.prompts_per_step * cfg.group_size // num_processes
    if cfg.kl_every and (cfg.method == "tandem" or cfg.junior):
        kl_tokens = min(KL_BATCH_TOKENS, batch_rows * seq)
        p.add(dj, "kl-monitor", f"KL monitor: teacher-forced junior forward ({kl_tokens} tokens, fp32 logit chunk)",
              kl_tokens * (4 * J.hidden + 2 * J.intermediate) * bc
              + 2 * min(KL_CHUNK, batch_rows * cfg.max_new_tokens) * J.vocab * 4)

    # rollouts and validation
    phases = [("rollout", cfg.rollout_batch_rows or batch_rows, cfg.rollout_schedule)]
    if cfg.eval_every:
        phases.append(("validation", min(cfg.rollout_batch_rows or VALIDATION_ROWS, cfg.val_size * cfg.eval_n),
                       cfg.validation_schedule))
    if cfg.engine == "vllm-server":
        p.notes.append("engine vllm-server: rollouts and validation run on the server; its memory is the server's")
        return p
    if cfg.engine == "vllm":
        if not gpu and not on_gpu:
            p.notes.append("engine vllm on CPU: its KV cache is vllm_kv_cache_gib (default 1 GiB) plus its weights")
        share = cfg.vllm_gpu_memory_utilization * (gpu_gib or 0) * GiB if on_gpu else \
            (cfg.vllm_kv_cache_gib or 1.0) * GiB + (S.params + (J.params if cfg.method == "tandem" else 0)) * bc
        for phase, _, _ in phases:
            p.add(d0, phase, "vLLM engine (weights + KV cache), asleep during updates" if cfg.vllm_sleep
                  else "vLLM engine (weights + KV cache)", share)
        if not cfg.vllm_sleep:
            p.add(d0, "update", "vLLM engine (awake during updates; vllm_sleep frees it)", share)
        return p
    if mixed or droll != d0:
        p.add(droll, "resident", f"senior copy the rollouts decode ({str(compute)[6:]})", S.params * bc)
    for phase, rows, schedule in phases:
        p.add(droll, phase, f"senior KV cache ({rows} rows x {seq} tokens)", rows * seq * S.kv_bytes_per_token(compute))
        p.add(droll, phase, f"prefill ({rows} rows x {cfg.max_prompt_tokens} prompt tokens) and step logits",
              rows * cfg.max_prompt_tokens * (2 * S.intermediate + 4 * S.hidden) * bc + 2 * rows * S.vocab * 4)
        if schedule != "senior":
            p.add(dj, phase, f"junior KV cache ({rows} rows x {seq} tokens)", rows * seq * J.kv_bytes_per_token(compute))
    return p


def advice(cfg, phase: str) -> str:
    """Which knob lowers a device's peak when ``phase`` sets it."""
    if phase.startswith("update"):
        knobs = []
        if cfg.micro_batch_rows != 1:
            knobs.append("a smaller micro_batch_rows")
        if not cfg.gradient_checkpointing:
            knobs.append("gradient_checkpointing true")
        if cfg.engine == "vllm" and not cfg.vllm_sleep:
            knobs.append("vllm_sleep true")
        knobs.append("more GPUs with sharded optimiser states (accelerate launch with FSDP or DeepSpeed ZeRO, "
                     "optionally with CPU offload)")
        return "; ".join(knobs)
    if phase in ("rollout", "validation"):
        knobs = ["a smaller rollout_batch_rows"]
        if cfg.engine == "hf" and not cfg.rollout_device:
            knobs.append("rollout_device on another GPU (beside the junior)")
        if cfg.engine == "vllm":
            knobs.append("a smaller vllm_gpu_memory_utilization")
        return "; ".join(knobs)
    return "a smaller micro_batch_rows"


def _size(n: float) -> str:
    return f"{n / GiB:8.2f} GiB" if n >= GiB else f"{n / (1 << 20):8.1f} MiB"


def _count(n: int) -> str:
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
    from ..models import DTYPES

    S = Shape.of(model_config(cfg.senior))
    compute = torch.bfloat16 if cfg.dtype == "auto" and gpu else (
        torch.float32 if cfg.dtype == "auto" else DTYPES.get(cfg.dtype, torch.float32))
    master = torch.float32 if cfg.master_dtype == "float32" else compute
    ckpt = S.params * 3 * _bytes(master)
    kept = "every" if cfg.save_total_limit is None else f"the last {cfg.save_total_limit}"
    line = (f"disk: each checkpoint-* {_size(ckpt).strip()} (weights and AdamW moments in {str(master)[6:]}), {kept} "
            f"kept, every {cfg.save_every} {cfg.step_unit} steps; best/ and final/ {_size(S.params * _bytes(compute)).strip()}")
    if cfg.keep_weights:
        line += (f"; keep_weights: {_size(S.params * _bytes(compute)).strip()} more per save in weights/ "
                 f"({str(compute)[6:]}), never pruned")
    return line
