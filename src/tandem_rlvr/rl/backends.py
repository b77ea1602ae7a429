"""The training side of the sharding backends (rows: ``config/shardings.py``): a run asks its row's
module for the ``GRPOConfig`` fields, the set-up after the arguments exist, the install check and the
context its whole models load under, and never compares backend names."""

from __future__ import annotations

import importlib
from contextlib import nullcontext

import torch


def _module(cfg):
    kind = cfg.models.backend
    return importlib.import_module(kind.module) if kind.module else None


def trl_fields(cfg, compute: torch.dtype, master: torch.dtype) -> dict:
    """The backend's ``GRPOConfig`` fields ({} unsharded)."""
    mod = _module(cfg)
    return mod.trl_fields(cfg, compute, master) if mod else {}


def configure(args, cfg, on_cpu: bool) -> None:
    """The backend's fix-ups of ``args`` (after it exists, before the trainer and the senior load)."""
    mod = _module(cfg)
    if mod:
        mod.configure(args, cfg.models.precision.compute, on_cpu)


def require(cfg) -> None:
    """A one-line TandemError naming what to install when the backend's library is absent."""
    mod = _module(cfg)
    if mod and hasattr(mod, "require"):
        mod.require()


def junior_context(cfg):
    """The context (a callable returning one) under which models that stay whole load."""
    mod = _module(cfg)
    return getattr(mod, "junior_context", nullcontext) if mod else nullcontext
