"""The sharded senior's memory terms per backend: what each rank holds of the trained senior's weights,
optimiser states and gradients, and what the update gathers. A backend's row names its function here
(``ShardingKind.memory``, ``config/shardings.py``); ``memory.plan`` calls it for a sharded layout and
compares no backend names. A plug-in backend gives its own function of the same signature.

Each function is ``terms(p, dev, lay, S, master, compute, trained, what)``: ``p`` the plan to add items
to, ``dev`` the training device, ``lay`` the ``memory.Layout``, ``S`` the senior's ``Shape``, ``trained``
the number of trained weights (all of them, or LoRA's adapters), ``what`` those words for the items.
"""

from __future__ import annotations

import torch

from .memory import HOST, count
from .shapes import dtype_bytes as _bytes


def _off(lay, dev: str):
    """The device of an item offloaded at the levels given: host memory when the layout offloads one of them."""
    return lambda levels: HOST if lay.offload in levels else dev


def fsdp2(p, dev: str, lay, S, master: torch.dtype, compute: torch.dtype, trained: int, what: str) -> None:
    """torch ``fully_shard`` per decoder layer and the root: master-dtype shards of weights, AdamW moments and
    gradients (offload all: ``CPUOffloadPolicy``), layers gathered in ``MixedPrecisionPolicy``'s param dtype,
    the root kept whole from forward to backward, one layer's gradient and its fp32 reduce-scatter input."""
    n, bm, bc = lay.processes, _bytes(master), _bytes(compute)
    off = _off(lay, dev)
    weights = S.params + (trained if lay.lora_r else 0)
    gather = bc if master != compute else bm  # MixedPrecisionPolicy(param_dtype=compute)
    if lay.lora_r:  # the frozen base in the compute dtype, the adapters in the masters'
        p.add(off(("all",)), "resident", f"senior weight shards ({bc} B x {count(S.params)} frozen base + {bm} B "
                                         f"x {count(trained)} adapters, / {n})", (S.params * bc + trained * bm) / n)
    else:
        p.add(off(("all",)), "resident", f"senior weight shards ({bm} B x {count(weights)} / {n})", weights * bm / n)
    p.add(off(("all",)), "resident", f"AdamW moment shards (2 x {bm} B x {what} / {n})", 2 * trained * bm / n)
    p.add(off(("all",)), "update", f"gradient shards ({bm} B / {n} per trained weight)", trained * bm / n)
    if lay.offload == "all":  # the CPU step moves each layer's shard to the GPU to gather it
        p.add(dev, "update", "current + prefetched layers' shards copied in for the all-gather",
              2 * S.layer_params * bm / n)
    p.add(dev, "update", f"all-gathered layers: current + prefetched ({count(S.layer_params)} x {gather} B each)",
          2 * S.layer_params * gather)
    p.add(dev, "update", "the root (embeddings, output layer, final norm) kept whole from forward to backward",
          S.root_params * gather)
    layer_grad = S.layer_params if not lay.lora_r else lay.lora_r * S.lora_per_rank / S.layers
    p.add(dev, "update/layers", "one layer's unsharded gradient and its fp32 reduce-scatter input",
          layer_grad * (gather + 4))


def zero3(p, dev: str, lay, S, master: torch.dtype, compute: torch.dtype, trained: int, what: str) -> None:
    """DeepSpeed's own accounting (``estimate_zero3_model_states_mem_needs``): compute-dtype parameter partitions,
    fp32 master + AdamW moments (12 B) and fp32 gradients (4 B) per trained weight over the ranks (offload
    optimizer: those to host; all: the parameters too), plus the gathered layers."""
    n, bm, bc = lay.processes, _bytes(master), _bytes(compute)
    off = _off(lay, dev)
    weights = S.params + (trained if lay.lora_r else 0)
    short = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(compute, "fp32")  # the compute dtype's
    if lay.lora_r:  # the frozen base loaded (zero.Init) as compute-dtype partitions; PEFT's fp32 adapters stay fp32
        # (DeepSpeed casts no parameter of a zero.Init model; measured: docs/sharding.md, "LoRA")
        p.add(off(("all",)), "resident", f"{short} parameter partitions ({bc} B x {count(S.params)} frozen base + "
                                         f"{bm} B x {count(trained)} adapters, / {n})",
              (S.params * bc + trained * bm) / n)
    else:
        p.add(off(("all",)), "resident", f"{short} parameter partitions ({bc} B x {count(weights)} / {n})",
              weights * bc / n)
    p.add(off(("optimizer", "all")), "resident", f"fp32 master + AdamW moment partitions (12 B x {what} / {n})",
          12 * trained / n)
    # DeepSpeed allocates the fp32 gradient partitions once, in deepspeed.initialize
    # (DeepSpeedZeroOptimizer_Stage3._setup_for_real_optimizer), and keeps them: resident, not per update
    p.add(off(("optimizer", "all")), "resident", f"fp32 gradient partitions (4 B / {n} per trained weight, "
                                                 f"allocated at initialize)", 4 * trained / n)
    if dev.startswith("cuda"):
        p.add(dev, "update", "gathered: current + prefetched layers and the largest module (embedding or output layer)",
              2 * S.layer_params * bc + S.vocab * S.hidden * 2 * bc)
    else:  # traced on DeepSpeed's cpu accelerator: every parameter stays gathered from its forward until its
        # backward re-partitions it (docs/scale.md, "The plan against measured peaks"), whatever the reuse distance
        p.add(dev, "update", "gathered: the whole model from forward to backward (DeepSpeed's cpu accelerator)",
              S.params * bc + (trained * bm if lay.lora_r else 0))
