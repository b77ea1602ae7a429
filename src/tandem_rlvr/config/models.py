"""The models part: which senior and junior, on which devices, in which dtypes, laid out how.

Derived once, here: ``precision`` (the senior's device type, the compute dtype, the master dtype),
which training, the rollout copy, validation, the saves and the model card all read.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from functools import cached_property
from typing import NamedTuple

import torch

from ..errors import TandemError
from ..models import resolve_dtype
from ..pool import JuniorPool
from .fields import at_least, check_part, setting
from .shardings import REGISTRY as SHARDING_KINDS
from .shardings import SHARDINGS, ShardingKind, sharding_help, sharding_kind


class Precision(NamedTuple):
    """The senior's device type (``cuda``/``cpu``), the dtype forwards run in, the dtype AdamW updates."""

    device_type: str
    compute: torch.dtype
    master: torch.dtype


@dataclass(frozen=True)
class ModelsPart:
    """The senior (trained), the junior (frozen), their devices and dtypes, and the senior's layout."""

    senior: str = setting("tiny", "senior initialisation: directory, .gguf, hub id, or tiny")
    junior: str | None = setting(None, "frozen junior, or a pool of them (A,B equal; A:0.5,B:0.5 weighted; a YAML "
                                 "file or list; docs/pool.md), recorded as its canonical spec; default: the senior's "
                                 "initial checkpoint (self-pairing)")
    senior_device: str = setting("auto", "device of the senior (auto: this process's GPU, cuda:$LOCAL_RANK, if "
                                 "available, else cpu)")
    junior_device: str | None = setting(None, "device of the junior (default: the senior's); a pool: one device for "
                                        "all its juniors or one per junior, comma-separated (cuda:1,cuda:2)")
    dtype: str = setting("auto", "float32, bfloat16 or auto (bf16 on CUDA, fp32 on CPU)")
    master_dtype: str = setting("float32", "dtype of the weights AdamW updates: float32 (fp32 master weights, forward "
                                "and backward in `dtype` under autocast, as verl trains) or compute (the weights stay "
                                "in `dtype`; with bf16 and lr 1e-6 most updates round away: only for comparison)",
                                choices=("float32", "compute"))
    gradient_checkpointing: bool = setting(True, "recompute each layer's activations in the backward pass (less "
                                           "memory, about a third more compute; the paper's runs and TRL's default: "
                                           "on)")
    rollout_device: str | None = setting(None, "engine hf: device of the senior copy the rollouts decode with "
                                         "(default: the senior's device). With fp32 master weights the rollouts "
                                         "decode a copy in `dtype`, refreshed after each update; beside the junior "
                                         "it keeps the training device free (the paper preset: cuda:1)")
    sharding: str = setting("none", "how the trained senior is laid out over the training processes (an "
                            "accelerate FSDP or DeepSpeed ZeRO-3 config under `accelerate launch` chooses fsdp2 or "
                            "zero3); docs/sharding.md", choices=SHARDINGS,
                            names=lambda: sharding_help())
    shard_offload: bool = setting(False, "fsdp2/zero3: keep parameter shards, gradients and AdamW states in host "
                                  "memory (FSDP2's CPUOffloadPolicy; ZeRO-3's offload_param and offload_optimizer on "
                                  "the CPU); the optimiser step runs on the CPU")
    dist_timeout_s: int = setting(1800, "seconds a training process waits at a collective for the others (gradient "
                                  "reduction, weight gathers) before it fails: a lost process or node is an error, "
                                  "not a hang (transformers' ddp_timeout); at most 30 days (torch.distributed counts "
                                  "it in int64 nanoseconds, so beyond about 292 years it wraps to an instant timeout)",
                                  range=(1, 30 * 86400, False))
    sync_bucket_mb: int = setting(512, "MiB of full tensors gathered at a time when the senior's weights go to the "
                                  "rollout copy, an engine or a save (bounds the gather's memory on every rank)")
    # LoRA (rl/lora.py): r = 0 is full fine-tuning
    lora_r: int = setting(0, "LoRA rank: > 0 trains PEFT LoRA adapters of this rank on lora_targets (base frozen; "
                          "rollouts decode the merged weights); 0 = full fine-tuning", range=(0, None, False))
    lora_alpha: float = setting(32.0, "LoRA alpha: the adapter's update is (alpha / r) B A (TRL's default 32)",
                                range=(0, None, True))
    lora_dropout: float = setting(0.0, "LoRA dropout on the adapter's input during the training forward, in [0, 1)",
                                  range=(0, 1, False))
    lora_targets: list[str] = setting(["all-linear"], "LoRA target modules (comma-separated names as PEFT matches "
                                      "them: q_proj,v_proj,...); all-linear (PEFT's keyword, default) = every linear "
                                      "layer of the body, the output layer excepted")
    save_merged: bool = setting(False, "LoRA: also write merged HF weights (compute dtype) to merged/ inside "
                                "checkpoint-N, best/ and final/, beside the adapter")

    def __post_init__(self):
        if self.junior not in (None, ""):
            try:
                # a YAML list or file: its spec
                object.__setattr__(self, "junior", JuniorPool.parse(self.junior).spec())
            except TandemError as e:  # named once: the pool's own errors may name the spec already
                said = str(e)
                raise TandemError(said if repr(str(self.junior)) in said
                                  else f"junior {self.junior!r}: {said}") from None
        check_part(self)
        _ = self.junior_devices  # one device for all juniors or one each: a mismatch fails here
        if self.shard_offload and not self.backend.can_offload:
            offloading = " or ".join(k.name for k in SHARDING_KINDS.values() if k.can_offload)
            raise TandemError(f"shard_offload needs --sharding {offloading} (it offloads the shards)")
        at_least(self, 1, "dist_timeout_s", "sync_bucket_mb")
        self._check_lora()

    def _check_lora(self) -> None:
        """r >= 0 (0 = full fine-tuning), alpha > 0 and dropout in [0, 1) (their ranges), targets a
        non-empty list of names (comma-separated on the command line), merged/ only for LoRA."""
        targets = self.lora_targets
        if isinstance(targets, str):
            targets = [t.strip() for t in targets.split(",") if t.strip()]
            object.__setattr__(self, "lora_targets", targets)
        if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
            raise TandemError(f"lora_targets must be module names (comma-separated), got {targets!r}")
        if self.lora_dropout >= 1.0:
            raise TandemError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.save_merged and not self.lora_r:
            raise TandemError("save_merged needs lora_r > 0 (a full fine-tuning run saves whole weights already)")
        if not self.lora_r:  # a LoRA setting without a rank would train the whole model without a word
            given = [f.name for f in fields(self) if f.name in ("lora_alpha", "lora_dropout", "lora_targets")
                     and getattr(self, f.name) != (f.default_factory() if f.default is MISSING else f.default)]
            if given:
                raise TandemError(f"{', '.join(given)} set without lora_r: LoRA needs a rank (--lora-r R, e.g. 16); "
                                  "lora_r 0 is full fine-tuning")

    @property
    def backend(self) -> ShardingKind:
        """The sharding backend's row (``config/shardings.py``): what it shards, needs and offloads."""
        return sharding_kind(self.sharding)

    @property
    def junior_spec(self) -> str:
        """The junior's checkpoint: ``junior``, or the senior's initial one (self-pairing); a pool's spec."""
        return self.junior or self.senior

    @cached_property
    def pool(self) -> JuniorPool:
        """The run's juniors and their draw weights (one junior: today's fixed junior)."""
        return JuniorPool.parse(self.junior_spec)

    @cached_property
    def junior_devices(self) -> tuple[str | None, ...]:
        """Each pool junior's device (None: the senior's), from ``junior_device``: one for all, or one per junior."""
        return self.pool.devices(self.junior_device)

    def dtypes_on(self, device_type: str) -> Precision:
        """The precision this part gives a senior on a ``device_type`` device (the memory plan asks for a GPU
        it may not have)."""
        compute = resolve_dtype(self.dtype, torch.device(device_type))
        return Precision(device_type, compute, torch.float32 if self.master_dtype == "float32" else compute)

    @cached_property
    def precision(self) -> Precision:
        """The run's precision on this machine. The device need not exist (a GPU preset can be inspected on a
        CPU machine); ``auto`` is this machine's GPU, if any."""
        spec = self.senior_device
        auto = spec in (None, "", "auto")
        return self.dtypes_on(("cuda" if torch.cuda.is_available() else "cpu") if auto else torch.device(spec).type)
