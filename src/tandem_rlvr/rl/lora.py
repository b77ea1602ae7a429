"""LoRA training of the senior through PEFT, as TRL's GRPOTrainer takes it (``peft_config``).

``--lora-r R`` (> 0) trains rank-R adapters on the senior's linear layers (``--lora-targets``,
default PEFT's ``all-linear``: every ``nn.Linear`` of the body, the output layer excepted; on a
Llama/Qwen body the seven projections q, k, v, o, gate, up, down) with scaling alpha / r
(``--lora-alpha``, default 32 as TRL's ``ModelConfig``) and ``--lora-dropout`` on the adapter's
input. r = 0 (the default) is full fine-tuning, untouched: no PEFT import, no wrapper.

What changes under LoRA, and why:

- Only the adapters train: TRL wraps the senior with ``get_peft_model``, which freezes the base, so
  the Trainer's AdamW holds only A and B (``trainable_counts`` logs how many weights that is). The
  frozen base is loaded in the compute dtype (bf16 on GPU; it never changes, so fp32 masters of it
  would only double its memory); PEFT keeps the adapters in fp32, the masters that do train.
- Rollouts decode the merged senior W + (alpha / r) B A. ``merged_weights`` is the weight stream
  every engine takes (``rl.weights.senior_weights`` dispatches to it): the base model's names
  (``model.layers.0.self_attn.q_proj.weight``, never PEFT's ``base_layer``/``lora_A`` names), each
  merged tensor computed out of place in fp32 (the base weights stay bit-identical; PEFT's own
  ``merge_adapter``/``unmerge_adapter`` round trip would not) and cast to the engine's dtype. So the
  hf engine's plain rollout copy, the vLLM engine and a ``tandem serve`` take it unchanged.
- KL-Reg's reference stays the junior (``rl.trainer`` installs it after TRL's set-up, which under
  PEFT would otherwise use the adapter-disabled base).
- Saves (``save_lora``): ``checkpoint-N``, ``best/``, ``final/`` hold the adapter in PEFT's format
  (``adapter_config.json``, ``adapter_model.safetensors``; loadable with
  ``PeftModel.from_pretrained(base, DIR)``) with the base's fingerprint (``adapters.BASE_RECORD``), and
  with ``--save-merged`` a ``merged/`` folder of plain HF weights in the compute dtype with the
  tokenizer. ``tandem eval`` loads a LoRA folder's ``merged/`` when it has one, else merges on load (``adapters.py``).
- Under ``--sharding fsdp2`` the base and the adapters are FSDP2 shards: the merged stream adds each
  process's rows of B A to its rows of W and gathers the sum as any sharded tensor (``_sharded_merge``),
  and saves gather the adapter collectively. Under ``--sharding zero3`` the base and the adapters are
  DeepSpeed partitions: the merged stream gathers each targeted layer's W, A and B together, one layer
  at a time (``Zero3Merge``), and saves gather the adapter's fp32 masters (docs/sharding.md, "LoRA").

TRL disables dropout in the trained model (``disable_dropout``, as the paper's runs have none), which
would silently zero the adapter's dropout too; ``prepare_trainer`` puts ``--lora-dropout`` back.
"""

from __future__ import annotations

import logging

import torch

from ..errors import TandemError

log = logging.getLogger("tandem_rlvr")

ALL_LINEAR = "all-linear"  # PEFT's keyword: every nn.Linear but the output layer


def peft_targets(targets) -> str | list[str]:
    """``LoraConfig.target_modules`` for a run's ``--lora-targets``: PEFT takes its all-linear keyword as a
    bare string (in a list it would be a module name); module names as a list."""
    return ALL_LINEAR if list(targets) == [ALL_LINEAR] else list(targets)


OUTPUT_LAYERS = ("lm_head",)  # TRL refuses an adapter there (its chunked head reads lm_head.weight directly)


def linear_widths(config) -> dict[str, tuple[int, int]]:
    """{name: (in, out)} of the ``nn.Linear`` modules of a transformers config's model (built on the meta device)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return {n: (m.in_features, m.out_features) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def _targeted(name: str, targets) -> bool:
    """PEFT's match of a body layer: all-linear (the output layer excepted), the module's name or its last dotted
    parts."""
    if name.rsplit(".", 1)[-1] in OUTPUT_LAYERS:
        return any(name == t or name.endswith("." + t) for t in targets if t != ALL_LINEAR)
    return any(t == ALL_LINEAR or name == t or name.endswith("." + t) for t in targets)


def check_lora(senior: str, config, targets, r: int, what: str = "lora_r") -> None:
    """Every target names a linear layer of the senior's body, not its output layer, and the rank ``r`` fits
    the layers it adapts: a rank-r update B A of an (out, in) layer has rank at most min(in, out), so a larger
    r only adds r x (in + out) weights per layer that can raise nothing (a mistyped 1000000000 would try to
    allocate terabytes). Read from ``config`` on the meta device, before any weights or adapters exist;
    ``what`` names the setting in the error (``lora_r``, or the plan's ``--plan-lora-r``)."""
    widths = linear_widths(config)
    for target in targets:
        if target == ALL_LINEAR:
            continue
        if target in OUTPUT_LAYERS:
            raise TandemError(f"lora target {target!r} is the output layer: TRL's log-prob head reads its weight "
                              "directly and would never train an adapter there")
        if not any(n == target or n.endswith("." + target) for n in widths):
            leaves = sorted({n.rsplit(".", 1)[-1] for n in widths} - set(OUTPUT_LAYERS))
            raise TandemError(f"lora target {target!r} names no linear layer of {senior}; its linear layers: "
                              f"{', '.join(leaves)} (or {ALL_LINEAR})")
    name, (d_in, d_out) = min(((n, w) for n, w in widths.items() if _targeted(n, targets)), key=lambda nw: min(nw[1]))
    if r > min(d_in, d_out):
        raise TandemError(f"{what} {r} is wider than the layers it adapts: {name} of {senior} is {d_in} -> {d_out}, "
                          f"so a LoRA update there has rank at most {min(d_in, d_out)}; "
                          f"give {what} <= {min(d_in, d_out)}")


def check_targets(cfg) -> None:
    """``check_lora`` of the run's settings (PEFT installed), from the senior's config alone."""
    if not cfg.models.lora_r:
        return
    try:
        import peft  # noqa: F401
    except ImportError:
        raise TandemError("LoRA (lora_r > 0) needs PEFT: pip install -e '.[lora]' (or pip install peft)") from None
    from ..models import model_config

    m = cfg.models
    check_lora(m.senior, model_config(m.senior), m.lora_targets, m.lora_r)


_PER_RANK: dict = {}


def adapter_weights_per_rank(config, targets) -> int:
    """LoRA weights per unit of rank: the sum of (in + out) over the body's linear layers that
    ``targets`` selects (the memory plan's count; PEFT's rank-r adapter of an (out, in) layer has
    r x (in + out) weights)."""
    from transformers import AutoModelForCausalLM

    key = (config.to_json_string(), tuple(targets))
    if key not in _PER_RANK:
        with torch.device("meta"):
            layers = AutoModelForCausalLM.from_config(config).get_decoder().layers
        _PER_RANK[key] = sum(m.in_features + m.out_features for n, m in layers.named_modules()
                             if isinstance(m, torch.nn.Linear) and (ALL_LINEAR in targets or any(
                                 n == t or n.endswith("." + t) for t in targets)))
    return _PER_RANK[key]


def peft_config(cfg):
    """TRL's ``peft_config`` for the run: a ``peft.LoraConfig``, or None for full fine-tuning."""
    if not cfg.models.lora_r:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.models.lora_r, lora_alpha=cfg.models.lora_alpha, lora_dropout=cfg.models.lora_dropout,
                      target_modules=peft_targets(cfg.models.lora_targets), bias="none", task_type="CAUSAL_LM")


def is_lora(model) -> bool:
    """Whether ``model`` is a PEFT model (imports nothing when PEFT was never loaded)."""
    import sys

    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def trainable_counts(model) -> tuple[int, int]:
    """(weights that train, all weights) of ``model``, tied ones once."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def prepare_trainer(trainer, cfg, print_fn=print) -> None:
    """After TRL wrapped the senior: the adapter's dropout restored, and the trained share reported."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout) and ".lora_dropout." in f"{name}.":
            module.p = cfg.models.lora_dropout
    trained, total = trainable_counts(model)
    if trainer.accelerator.is_main_process:
        print_fn(f"LoRA r={cfg.models.lora_r} alpha={cfg.models.lora_alpha:g} on {', '.join(cfg.models.lora_targets)}: "
                 f"{trained:,} of {total:,} weights train ({100 * trained / total:.2f}%)")


def _adapter_param(name: str) -> bool:
    from peft.tuners.lora import LoraLayer

    return any(f".{k}." in f".{name}" for k in LoraLayer.adapter_layer_names)


def _delta(layer) -> torch.Tensor | None:
    """(alpha / r) B A of a PEFT LoRA layer's active adapters, in fp32 (None when merged or inactive)."""
    if getattr(layer, "merged", False) or getattr(layer, "disable_adapters", False):
        return None
    parts = [layer.get_delta_weight(a).float() for a in layer.active_adapters if a in layer.lora_A]
    return sum(parts) if parts else None


def _sharded_merge(layer, w):
    """W + (alpha / r) B A of an FSDP2-sharded LoRA layer, as a DTensor sharded as W is: each process
    adds B's rows it holds (FSDP2 splits B and W by the same output rows) times the whole A (gathered:
    r x in weights, collective) to its rows of W, so no process forms the whole merged matrix."""
    from torch.distributed.tensor import DTensor, Shard

    if getattr(layer, "merged", False) or getattr(layer, "disable_adapters", False):
        return w
    local = w.to_local().float()
    for a in layer.active_adapters:
        if a not in layer.lora_A:
            continue
        b, a_full = layer.lora_B[a].weight, layer.lora_A[a].weight.full_tensor().float()
        if b.placements != (Shard(0),) or w.placements != (Shard(0),) or b.to_local().shape[0] != local.shape[0]:
            raise TandemError(f"LoRA under FSDP2: {type(layer).__name__} is not sharded by rows as its adapter")
        local = local + layer.scaling[a] * (b.to_local().float() @ a_full)  # (out / N, in)
    return DTensor.from_local(local, w.device_mesh, w.placements, shape=w.shape, stride=w.stride())


class Zero3Merge:
    """A ZeRO-3 LoRA layer's merged weight W + (alpha / r) B A, worked out only when its bucket is
    gathered (``rl.zero3.gathered_bucket`` calls ``merged_in``): W, A and B are partitions, so the walk
    that plans the buckets (from sizes) must not gather them. ``ds_numel`` is W's, as the plan counts."""

    def __init__(self, layer, weight):
        self.layer, self.weight, self.ds_numel = layer, weight, weight.ds_numel

    @torch.no_grad()
    def merged_in(self, dtype: torch.dtype) -> torch.Tensor:
        """The merged tensor in ``dtype`` (collective: every rank, the same layers in the same order).
        The layer's W and its adapters' A and B are gathered together (``GatheredParameters`` on the
        three), the sum formed in fp32 out of place, and released before the next layer; adapters held
        as bf16 partitions (DeepSpeed's bf16 mode) contribute their fp32 masters instead."""
        import deepspeed
        from deepspeed.utils import safe_get_full_fp32_param

        layer = self.layer
        adapters = [a for a in layer.active_adapters if a in layer.lora_A]
        if getattr(layer, "merged", False) or getattr(layer, "disable_adapters", False):
            adapters = []
        pairs = [(layer.lora_A[a].weight, layer.lora_B[a].weight, layer.scaling[a]) for a in adapters]
        masters = [(safe_get_full_fp32_param(a), safe_get_full_fp32_param(b), s) for a, b, s in pairs
                   if a.dtype != torch.float32]  # the optimiser's fp32 masters (collective), before the gather
        params = [self.weight] + ([] if masters else [t for a, b, _ in pairs for t in (a, b)])
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            out = self.weight.data.float()
            for a, b, s in masters or pairs:
                out = out + s * (b.data.float() @ a.data.float())  # (out, r) @ (r, in)
            return out.to(dtype)


@torch.no_grad()
def _merged(base, dtype: torch.dtype | None, remove_duplicate: bool):
    """(name, merged tensor) over ``base``'s parameters (the transformers model PEFT injected into):
    adapter tensors skipped, ``x.base_layer.weight`` yielded as ``x.weight`` = W + (alpha / r) B A.
    Under FSDP2 a merged weight stays a DTensor of W's shards (``_sharded_merge``; the stream gathers it);
    under ZeRO-3 it is a ``Zero3Merge`` the stream gathers (with the base's partitions as they are)."""
    from peft.tuners.lora import LoraLayer
    from torch.distributed.tensor import DTensor

    from .weight_stream import clean_name

    layers = {n: m for n, m in base.named_modules() if isinstance(m, LoraLayer)}
    for name, p in base.named_parameters(remove_duplicate=remove_duplicate):
        if _adapter_param(name):
            continue
        t = p.detach()
        # a ZeRO-3 partition: the parameter itself, which its bucket gathers (detach drops ds_id)
        if hasattr(p, "ds_id"):
            t = p
        owner, sep, leaf = name.rpartition(".base_layer.")
        if sep:
            name = f"{owner}.{leaf}"
            if leaf == "weight" and owner in layers and hasattr(p, "ds_id"):
                yield clean_name(name), Zero3Merge(layers[owner], p)  # gathered with its bucket (dtype: the bucket's)
                continue
            if leaf == "weight" and owner in layers and isinstance(t, DTensor):
                t = _sharded_merge(layers[owner], t)
            elif (delta := _delta(layers[owner]) if leaf == "weight" and owner in layers else None) is not None:
                t = t.float() + delta
        yield clean_name(name), t if dtype is None or t is p else t.to(dtype)


def merged_weights(model, dtype: torch.dtype | None = None):
    """The merged senior as a weight stream (``rl.weights.senior_weights``'s form: every parameter
    name, tied ones under each of their names, one merged tensor alive at a time)."""
    yield from _merged(model.get_base_model(), dtype, remove_duplicate=False)


def merged_tensors(base):
    """The merged senior's tensors for a save (tied ones once, persistent buffers too), as
    ``rl.weight_stream.save_streamed`` walks them; ``base`` is the PEFT-injected transformers model."""
    yield from _merged(base, None, remove_duplicate=True)
    for mod_name, mod in base.named_modules():
        for b_name, b in mod._buffers.items():
            if b is not None and b_name not in mod._non_persistent_buffers_set:
                yield f"{mod_name}.{b_name}".replace(".base_layer.", "."), b


def stream_source(model):
    """(model, tensor walk) for ``rl.sharding.push``/``buckets``: a LoRA senior's base model with
    ``merged_tensors`` (W + (alpha / r) B A under the base names), any other model as it is."""
    from .weight_stream import named_tensors

    return (model.get_base_model(), merged_tensors) if is_lora(model) else (model, named_tensors)


def _save_gathered_adapter(model, out, main: bool) -> None:
    """A sharded PEFT model's adapter, gathered whole on every process (collective; it is small) and
    written by the main one in PEFT's format: ``adapter_model.safetensors`` under PEFT's key names
    (the adapter name dropped) and ``adapter_config.json`` in inference mode, as ``save_pretrained``
    writes them. Not through ``save_pretrained``: PEFT picks the adapter's entries by module name,
    and FSDP's activation-checkpoint wrapper (``_checkpoint_wrapped_module``) renames the modules
    but not the state dict's keys, so it would select none."""
    import copy

    from safetensors.torch import save_file

    from .weight_stream import clean_name, gathered

    name = model.active_adapter

    def whole(t):  # ZeRO-3: the adapter's fp32 master (collective; a partition's state_dict entry is empty)
        if hasattr(t, "ds_id"):
            from deepspeed.utils import safe_get_full_fp32_param

            return safe_get_full_fp32_param(t)
        return gathered(t, t.dtype)

    from .zero3 import is_partitioned

    items = model.named_parameters() if is_partitioned(model) else model.state_dict().items()
    adapter = {clean_name(n).replace(f".{name}.", "."): whole(t).cpu().contiguous()
               for n, t in items if _adapter_param(n)}
    if not main:
        return
    out.mkdir(parents=True, exist_ok=True)
    save_file(adapter, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = copy.deepcopy(model.peft_config[name])
    config.inference_mode = True
    config.save_pretrained(str(out))


def save_lora(model, out, dtype: torch.dtype, tokenizer=None, merged: bool = False, bucket_bytes: int = 512 << 20):
    """The adapter in PEFT's format under ``out`` (as held: fp32 masters) and, with ``merged``, plain
    HF weights of the merged senior in ``dtype`` with the tokenizer under ``out/merged``. Call it on
    every process when the senior is sharded (FSDP2, ZeRO-3): the adapter is gathered whole (it is small),
    the merged weights bucket by bucket; the main process writes."""
    from pathlib import Path

    import torch.distributed as dist

    from ..adapters import record_base
    from .weight_stream import is_sharded, save_streamed

    main, sharded = not dist.is_initialized() or dist.get_rank() == 0, is_sharded(model)
    if not (main or sharded):
        return
    if sharded:
        _save_gathered_adapter(model, Path(out), main)
    elif main:
        model.save_pretrained(str(out))
    if main:  # the base's fingerprint: loading refuses a base whose files changed (adapters.check_base)
        record_base(Path(out), model.peft_config[model.active_adapter].base_model_name_or_path)
    if merged:
        save_streamed(model.get_base_model(), Path(out) / "merged", dtype, bucket_bytes, named=merged_tensors)
        if tokenizer is not None and main:
            tokenizer.save_pretrained(Path(out) / "merged")

