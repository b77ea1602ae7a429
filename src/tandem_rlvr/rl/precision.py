"""Master weights and compute dtype of the trained senior, and the copy rollouts decode with.

AdamW at the paper's learning rate (1e-6) cannot update bf16 weights: an Adam step moves a
weight by about lr, while half a bf16 ulp of a weight w is about |w| x 2^-8, larger than
1e-6 for every |w| > 2.6e-4 (Qwen weights are ~0.02, norm weights ~1), so the update rounds
back to the old value. verl therefore keeps fp32 parameters and computes in bf16. We do the
same: with ``master_dtype: float32`` the trainable senior is loaded in fp32, forward and
backward run under autocast in ``dtype`` (TRL/accelerate mixed precision), and AdamW updates
the fp32 weights. Checkpoints hold the fp32 masters (a resume loses nothing); ``final/`` and
``best/`` are exported in the compute dtype (said in their model card).

Rollouts and validation decode with ``RolloutModel.get``: the senior itself when its dtype is
the compute dtype and no other device is asked for, else a copy in the compute dtype on
``rollout_device``, refreshed from the masters once per update (the vLLM engine gets the same
cast in its weight push). The copy is loaded like the junior (same code path, same dtype), so
a self-paired tandem rollout at step 0 runs two bit-identical bodies.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import TandemError
from ..models import load_model, resolve_device, resolve_dtype


def precision(cfg) -> tuple[str, torch.dtype, torch.dtype]:
    """(senior device type, compute dtype, master dtype) of a ``TrainConfig``. The device need
    not exist here (a GPU preset can be inspected on a CPU machine); ``auto`` is this machine's."""
    spec = cfg.senior_device
    kind = ("cuda" if torch.cuda.is_available() else "cpu") if spec in (None, "", "auto") else torch.device(spec).type
    compute = resolve_dtype(cfg.dtype, torch.device(kind))
    master = torch.float32 if cfg.master_dtype == "float32" else compute
    return kind, compute, master


class RolloutModel:
    """The senior that rollouts and validation decode with (see module docstring).

    The hf engine's consumer of the weight stream (``rl.sharding``): a sharded senior cannot be
    decoded as it is (its parameters are shards), so a sharded run always decodes the copy, which
    every rank refreshes by gathering the senior bucket by bucket (``get`` is collective then)."""

    def __init__(self, spec: str, compute_dtype: torch.dtype, device: str | None = None, bucket_bytes: int = 512 << 20):
        self.spec, self.dtype, self.bucket_bytes = spec, compute_dtype, bucket_bytes
        self.device = resolve_device(device) if device else None
        self.copy = None
        self.synced = None  # (id of the master model, global step) the copy holds
        self.syncs = 0
        self.last_sync = None  # {"seconds", "bytes"} of the last refresh (rl.sharding.push)

    def needs_copy(self, senior) -> bool:
        from .sharding import is_sharded

        p = next(senior.parameters())
        return p.dtype != self.dtype or (self.device is not None and p.device != self.device) or is_sharded(senior)

    @torch.no_grad()
    def get(self, senior, step: int):
        """``senior`` itself, or its copy in the compute dtype holding the weights of update ``step``."""
        from .sharding import push

        if not self.needs_copy(senior):
            return senior
        if self.copy is None:
            dev = self.device or next(senior.parameters()).device
            self.copy = load_model(self.spec, dev, self.dtype)  # frozen, like the junior
        if self.synced != (id(senior), step):
            self.last_sync = push(senior, self.load_weights, self.dtype, self.bucket_bytes)
            self.synced = (id(senior), step)
            self.syncs += 1
        return self.copy

    @torch.no_grad()
    def load_weights(self, weights) -> None:
        """Copy full tensors ``(name, tensor)`` into the copy (the engine contract's ``load_weights``);
        every parameter and persistent buffer of the copy must arrive once."""
        from .sharding import named_tensors

        mine = dict(named_tensors(self.copy))
        seen = set()
        for name, t in weights:
            if name not in mine:
                raise TandemError(f"rollout copy has no tensor {name!r}")
            mine[name].copy_(t)
            seen.add(name)
        if missing := sorted(set(mine) - seen):
            raise TandemError(f"the senior's weights lacked {len(missing)} tensors of the rollout copy, e.g. {missing[0]!r}")


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
