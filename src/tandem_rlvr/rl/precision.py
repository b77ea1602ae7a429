"""Master weights and compute dtype of the trained senior, and the copy rollouts decode with.

AdamW at the paper's learning rate (1e-6) cannot update bf16 weights: an Adam step moves a
weight by about lr, while half a bf16 ulp of a weight w is about |w| x 2^-8, larger than
1e-6 for every |w| > 2.6e-4 (Qwen weights are ~0.02, norm weights ~1), so the update rounds
back to the old value. verl therefore keeps fp32 parameters and computes in bf16. We do the
same: with ``master_dtype: float32`` the trainable senior is loaded in fp32, forward and
backward run under autocast in ``dtype`` (TRL/accelerate mixed precision), and AdamW updates
the fp32 weights. Checkpoints hold the fp32 masters (a resume loses nothing); ``final/`` and
``best/`` are exported in the compute dtype (said in their model card).

Rollouts and validation on the hf engine (``engines.hf``) decode the senior itself when its
dtype is the compute dtype and no other device is asked for, else a ``RolloutModel``: a copy in
the compute dtype on ``rollout_device``, refreshed once per update from the trainer's weight
stream (``rl.weights``: the masters cast to the compute dtype, as every engine receives them).
The copy is loaded like the junior (same code path, same dtype), so a self-paired tandem
rollout at step 0 runs two bit-identical bodies.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import TandemError
from ..models import load_model, resolve_device


class RolloutModel:
    """The senior that rollouts and validation decode with (see module docstring).

    The hf engine's consumer of the weight stream (``rl.weights.EngineSync``). A sharded senior
    (``sharded``: the run trains under FSDP2, which shards the model only once the trainer prepares
    it) cannot be decoded as it is, its parameters being shards, so a sharded run always decodes the
    copy, which every rank refreshes from the senior gathered bucket by bucket (``rl.weight_stream.push``).
    A LoRA senior (``merged``: PEFT's layers) always decodes the copy too, refreshed from the merged
    weights W + (alpha / r) B A (``rl.lora.merged_weights``)."""

    def __init__(self, spec: str, compute_dtype: torch.dtype, device: str | None = None, sharded: bool = False,
                 merged: bool = False):
        self.spec, self.dtype, self.sharded, self.merged = spec, compute_dtype, sharded, merged
        self.device = resolve_device(device) if device else None
        self.copy = None

    def needs_copy(self, senior) -> bool:
        p = next(senior.parameters())
        return (self.sharded or self.merged or p.dtype != self.dtype
                or (self.device is not None and p.device != self.device))

    @torch.no_grad()
    def load_weights(self, weights) -> None:
        """Refresh the copy from a stream of full tensors ``(name, tensor)`` under the senior's names,
        one tensor at a time (the hf rollout engine's entry point, ``engines.hf``; back-to-back calls
        may each carry a part). The copy is loaded on first use, on ``rollout_device`` or else where
        the stream's tensors are; a name the copy lacks is an error."""
        mine = None
        for name, tensor in weights:
            if mine is None:
                if self.copy is None:
                    from .zero3 import outside_zero3

                    with outside_zero3():  # a plain copy, never ZeRO-3 partitions
                        self.copy = load_model(self.spec, self.device or tensor.device, self.dtype)  # frozen
                mine = dict(self.copy.named_parameters(remove_duplicate=False))  # tied: under each name
                mine.update(self.copy.named_buffers())
            if name not in mine:
                raise TandemError(f"rollout copy has no tensor {name!r}")
            mine[name].copy_(tensor)


def save_in_dtype(model, out: Path, dtype: torch.dtype) -> None:
    """``model.save_pretrained(out)`` with its weights (and config.json's dtype) in ``dtype``;
    tensors are cast one by one on the CPU, so the device holds no second copy."""
    state = {k: v.detach().to("cpu", dtype) for k, v in model.state_dict().items()}
    model.save_pretrained(out, state_dict=state)
    cfg_path = Path(out) / "config.json"
    data = json.loads(cfg_path.read_text(encoding="utf-8"))
    name = str(dtype).removeprefix("torch.")
    for key in ("dtype", "torch_dtype"):
        if key in data:
            data[key] = name
    cfg_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
