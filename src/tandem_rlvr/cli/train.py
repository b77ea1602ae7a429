"""``tandem train``: every ``TrainConfig`` field as a flag, and ``--dry-run``'s memory plan."""

from __future__ import annotations

import argparse
import json

from ..runtime import configure_cpu_threads
from .flags import plan_flags


def _train_flags(p: argparse.ArgumentParser) -> None:
    """Every TrainConfig field as a flag (default None = keep the preset/file value)."""
    from dataclasses import MISSING

    from ..config import config_fields, preset_names

    p.add_argument("--preset", default=None, help=f"preset name ({', '.join(preset_names())}); its values replace "
                   "the base defaults shown below")
    p.add_argument("--config", default=None, help="YAML file of config keys (over the preset)")
    g = p.add_argument_group("config keys (override preset and file)",
                             "Each flag overrides the --config file, which overrides the --preset, which overrides the "
                             "base default shown. `tandem train --preset NAME --dry-run` prints the resolved values.")
    for f in config_fields():
        default = f.default if f.default is not MISSING else None
        kind = _parse_bool if "bool" in f.type else int if "int" in f.type else float if "float" in f.type else \
            _parse_mapping if f.type == "dict" else str
        if "None" in f.type and kind is not str:
            kind = _optional(kind)
        extra = {"choices": f.metadata["choices"]} if "choices" in f.metadata else {}
        names = f"; registered: {f.metadata['names']()}" if "names" in f.metadata else ""
        g.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=None, type=kind,
                       metavar="BOOL" if kind is _parse_bool else "NAME=VALUE,..." if kind is _parse_mapping else None,
                       help=f"{f.metadata['help']}{names} (base default {default})", **extra)


def _optional(kind):
    def parse(x: str):
        return None if x.lower() in ("none", "null") else kind(x)

    parse.__name__ = kind.__name__
    return parse


def torch_cuda_gib() -> float | None:
    """Memory of the first visible GPU in GiB, or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / (1 << 30)


def _parse_mapping(text: str) -> dict:
    """``NAME=VALUE,NAME=VALUE`` as a dict, each value read as YAML reads it (0.1, true, cosine, [a, b])."""
    import yaml

    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE[,NAME=VALUE...], got {item!r}")
        out[name.strip()] = yaml.safe_load(value)
    return out


def _parse_bool(x: str) -> bool:
    if x.lower() in ("1", "true", "yes", "on"):
        return True
    if x.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {x!r}")


def cmd_train(a):
    from ..config import config_fields, load_train_config
    from ..rl.train import train

    overrides = {f.name: getattr(a, f.name) for f in config_fields() if getattr(a, f.name) is not None}
    cfg = load_train_config(a.preset, a.config, overrides)
    if a.dry_run:
        from ..planner.layouts import dry_run_report, requested_layout
        from ..planner.memory import disk_plan

        from ..rl.grpo_config import check_trl_overrides

        tokenizer_refusals(cfg)
        check_trl_overrides(cfg.loop.trl)  # the run refuses them before any model loads; so does its plan
        print(json.dumps(cfg.to_dict(), indent=2))
        gib = a.plan_gpu_gib
        if gib is None and torch_cuda_gib() is not None:
            gib = torch_cuda_gib()
        lay = requested_layout(cfg, a.plan_processes, a.plan_sharding, a.plan_offload, a.plan_lora_r,
                               a.plan_sync_bucket_mib)
        print(dry_run_report(cfg, lay, gib))
        print(disk_plan(cfg, gpu=gib is not None))
        return
    from ..planner.memory import check_fits_machine

    check_fits_machine(cfg)  # a batch bigger than the machine is one line, not a process killed for memory
    configure_cpu_threads()
    summary = train(cfg)
    print(json.dumps(summary, indent=2))


def tokenizer_refusals(cfg) -> None:
    """What ``tandem train`` refuses from the pair's tokenizers (a junior of another tokenizer on a vLLM
    engine, under KL-Reg, with a schedule that cannot hand off between tokenizers: ``rl.xjunior``), said by
    ``--dry-run`` too, where every model of the run is a built-in name or a directory here. A hub id is not
    fetched for a plan (the plan reads the configs shipped in presets/models), so its run is checked when it
    starts."""
    from ..models import readable_here
    from ..rl.xjunior import checked_tokenizers

    m = cfg.models
    if m.junior and readable_here((m.senior, *m.pool.names)):
        checked_tokenizers(cfg)


def register(sub) -> None:
    t = sub.add_parser("train", help="train a senior with a training method (--method; TRL GRPOTrainer)")
    t.add_argument("--dry-run", action="store_true", help="print the resolved config and its memory plan (peak "
                   "memory per device), then exit")
    plan_flags(t)
    _train_flags(t)
    t.set_defaults(fn=cmd_train)
