"""The one stream of a trained senior's full weights, whatever its layout (whole, FSDP2 shards,
DeepSpeed ZeRO-3 partitions): rollout engines, validation and saves need full tensors and read the
senior through ``buckets``/``push``/``save_streamed``, never through a backend's own API.
 Every rank walks the parameters in the same order; each tensor is cast to the
target dtype on its shard *before* the all-gather (half the bytes in bf16, bit-identical to
casting after) and gathered whole; tensors are handed over in buckets of at most
``bucket_bytes`` (a larger tensor is a bucket of its own), and the next bucket is gathered only
after the consumer has taken the last one, so at most one bucket of full tensors exists per rank
and no rank ever builds a second full state dict. Under ZeRO-3 a bucket's parameters are gathered
together (``rl.zero3.gathered_bucket``) and released when the next bucket is asked for. An
unsharded model streams the same way without collectives. Consumers take
``Iterable[tuple[str, Tensor]]`` (``push`` flattens the buckets; a tied tensor comes under each of
its names, gathered once): the hf engine's
``RolloutModel.load_weights`` (every rank refreshes its plain copy), the vllm engine's
``load_weights`` (every rank's colocated engine, one layer-wise reload fed as the buckets arrive),
the vllm-server engine's on rank 0 alone (``push(..., every_rank=False)``: the other ranks gather
in lockstep and drop the tensors, so rank 0 pushes each bucket to the server before the next
gather), and ``save_streamed`` (rank 0 writes each bucket as one safetensors shard).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

# Prefixes wrappers add to parameter names (FSDP's activation checkpointing, torch.compile).
WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.")


def is_sharded(model) -> bool:
    """Whether ``model``'s parameters are shards (FSDP2 DTensors, ZeRO-3 partitions) rather than whole tensors."""
    from torch.distributed.tensor import DTensor

    from .zero3 import is_partitioned

    return any(isinstance(p, DTensor) for p in model.parameters()) or is_partitioned(model)


def local_fraction(model) -> dict[str, float]:
    """Per parameter: elements this rank holds / elements of the whole tensor (1.0 unsharded)."""
    from torch.distributed.tensor import DTensor

    from . import zero3

    def share(p) -> float:
        if hasattr(p, "ds_id"):
            return zero3.local_fraction(p)
        return (p.to_local().numel() if isinstance(p, DTensor) else p.numel()) / max(p.numel(), 1)

    return {name: share(p) for name, p in model.named_parameters()}


def clean_name(name: str) -> str:
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def named_tensors(model):
    """(name, tensor) of every parameter (tied ones once) and persistent buffer, in module order."""
    yield from ((clean_name(n), p) for n, p in model.named_parameters())
    for mod_name, mod in model.named_modules():
        for b_name, b in mod._buffers.items():
            if b is not None and b_name not in mod._non_persistent_buffers_set:
                yield clean_name(f"{mod_name}.{b_name}" if mod_name else b_name), b


def gathered(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The whole tensor in ``dtype``: a shard is cast first, then gathered (collective: every rank)."""
    from torch.distributed.tensor import DTensor

    if not isinstance(t, DTensor):
        return t.detach().to(dtype)
    local = t.to_local().detach().to(t.device_mesh.device_type, dtype)  # on the mesh's device under offload
    return DTensor.from_local(local, t.device_mesh, t.placements, shape=t.shape, stride=t.stride()).full_tensor()


def tied_aliases(model) -> dict[str, list[str]]:
    """First name of each tied parameter -> its other names (a tied head: ``lm_head.weight``)."""
    first, out = {}, {}
    for name, p in model.named_parameters(remove_duplicate=False):
        name = clean_name(name)
        if id(p) in first:
            out.setdefault(first[id(p)], []).append(name)
        else:
            first[id(p)] = name
    return out


@torch.no_grad()
def buckets(model, dtype: torch.dtype, bucket_bytes: int, aliases: bool = False, named=named_tensors):
    """Lists of (name, full tensor in ``dtype``) of at most ``bucket_bytes`` each (module docstring).
    FSDP2 gathers tensor by tensor; ZeRO-3 gathers a bucket's parameters together (``rl.zero3``).
    aliases: a tied tensor also comes under its other names, right after its first (the same
    gathered tensor, no second gather): an engine's reload needs its tied head by name. ``named`` walks
    the model's tensors (``rl.lora.merged_tensors``: a LoRA senior merged; ``rl.lora.stream_source``)."""
    from . import zero3

    alias = tied_aliases(model) if aliases else {}
    partitioned = zero3.is_partitioned(model)
    for part in _bucket_plan(model, dtype, bucket_bytes, named):
        if partitioned:
            with zero3.gathered_bucket(part, dtype) as full:
                yield _with_aliases(full, alias)
        else:
            yield _with_aliases([(name, gathered(t, dtype)) for name, t in part], alias)


def _with_aliases(full: list, alias: dict[str, list[str]]) -> list:
    """``full`` with each tied tensor repeated under its other names, right after its first."""
    return [pair for name, t in full for pair in [(name, t), *((other, t) for other in alias.get(name, ()))]]


def _bucket_plan(model, dtype: torch.dtype, bucket_bytes: int, named=named_tensors):
    """The (name, tensor) lists ``buckets`` gathers, from shapes alone (no gathering)."""
    from .zero3 import numel

    bucket, size = [], 0
    for name, t in named(model):
        nbytes = numel(t) * dtype.itemsize
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += nbytes
    if bucket:
        yield bucket


def push(model, load_weights, dtype: torch.dtype, bucket_bytes: int, every_rank: bool = True,
         named=named_tensors) -> dict:
    """Feed ``model``'s full tensors (tied ones under each name; ``named`` walks them, as in ``buckets``)
    to ``load_weights`` (on every rank, or on the main one while the others gather in lockstep); returns
    ``{"seconds", "bytes", "buckets"}`` of this rank's stream (bytes gathered: a tied tensor once)."""
    t0 = time.perf_counter()
    stream = _counted(buckets(model, dtype, bucket_bytes, aliases=True, named=named))
    if every_rank or _rank() == 0:
        load_weights(stream)
    for _ in stream:  # the rest (other ranks; a consumer that stopped early), so every rank gathers alike
        pass
    return {"seconds": time.perf_counter() - t0, "bytes": stream.bytes, "buckets": stream.buckets}


class _counted:
    """The flattened stream of ``buckets``, counting buckets and distinct tensors' bytes."""

    def __init__(self, bucket_iter):
        self.it, self.bytes, self.buckets = iter(()), 0, 0
        self.bucket_iter, self.last = bucket_iter, None

    def __iter__(self):
        return self

    def __next__(self):
        for name, t in self.it:
            if t is not self.last:  # an alias repeats the tensor just counted
                self.bytes += t.numel() * t.element_size()
            self.last = t
            return name, t
        self.it = iter(next(self.bucket_iter))  # StopIteration ends the stream
        self.buckets += 1
        return next(self)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def save_streamed(model, out: Path, dtype: torch.dtype, bucket_bytes: int, named=named_tensors) -> None:
    """``model`` as loadable HF weights in ``dtype`` under ``out`` (collective: call on every rank).

    Rank 0 writes each bucket as one safetensors shard (``model.safetensors`` when there is one),
    the index and ``config.json``; no rank holds more than one bucket of full tensors."""
    from safetensors.torch import save_file

    from .zero3 import numel

    plan = sum(1 for _ in _bucket_plan(model, dtype, bucket_bytes, named))
    main = _rank() == 0
    out = Path(out)
    if main:
        out.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for i, bucket in enumerate(buckets(model, dtype, bucket_bytes, named=named)):
        if not main:
            continue
        file = "model.safetensors" if plan == 1 else f"model-{i + 1:05d}-of-{plan:05d}.safetensors"
        save_file({n: t.to("cpu").contiguous() for n, t in bucket}, str(out / file), metadata={"format": "pt"})
        weight_map.update({n: file for n, _ in bucket})
    if not main:
        return
    if plan > 1:
        total = sum(numel(t) for _, t in named(model)) * dtype.itemsize
        (out / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n", encoding="utf-8")
    model.config.save_pretrained(out)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(out)
    data = json.loads((out / "config.json").read_text(encoding="utf-8"))
    data["dtype"] = str(dtype).removeprefix("torch.")
    data.pop("torch_dtype", None)
    (out / "config.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
