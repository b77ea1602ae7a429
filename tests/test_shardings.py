"""Sharding backends as registry rows (``config/shardings.py``, ``rl/backends.py``): code above the rows
asks them, a backend registered from outside the package is a valid ``--sharding`` whose module the run
calls, and only the planner's own accounting (listed below) still names backends."""

import re
import sys
from pathlib import Path

import pytest
import torch

from tandem_rlvr.config import TrainConfig
from tandem_rlvr.config.shardings import PLAN_NAMES, REGISTRY, ShardingKind, register_sharding
from tandem_rlvr.errors import TandemError

SRC = Path(__file__).resolve().parents[1] / "src" / "tandem_rlvr"
# The memory planner's formulas are per backend (what FSDP2's policy or a ZeRO-3 gather holds): its own math.
PLANNER = ("planner/memory.py", "planner/layouts.py")


def _patterns():
    q = r"""["']"""
    # "none" is every setting's word for nothing: a comparison with it is caught by the sharding variable's name
    names = "|".join(sorted({*REGISTRY, *PLAN_NAMES} - {"none"}, key=len, reverse=True))
    return [re.compile(rf"(==|!=)\s*{q}({names}){q}|{q}({names}){q}\s*(==|!=)"),
            re.compile(rf"\bin\s*[\(\[\{{][^)\]}}]*{q}({names}){q}"),
            re.compile(r"\bsharding\w*\s*(==|!=)|\bsharding\w*\s+(not\s+)?in\b")]


def _hits(line: str) -> bool:
    return any(p.search(line) for p in _patterns())


def test_no_module_outside_the_registry_compares_sharding_names():
    assert all((SRC / f).is_file() for f in PLANNER)
    hits = [f"{p.relative_to(SRC).as_posix()}:{i}: {line.strip()}" for p in sorted(SRC.rglob("*.py"))
            if p.relative_to(SRC).as_posix() not in ("config/shardings.py", *PLANNER)
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if _hits(line)]
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize("line", ['if cfg.models.sharding == "fsdp2":', 'sharded=m.sharding != "none", merged=1',
                                  'elif m.sharding == "zero3":', 'if asked not in ("none", "fsdp2"):',
                                  'if sharding in SHARDED:', 'lay = {"none": "ddp"}.get(s, s) if "ddp" == x else 0'])
def test_the_sharding_name_scan_catches_each_way_code_decided_by_name(line):
    assert _hits(line), line


@pytest.mark.parametrize("line", ['if cfg.models.backend.shards_parameters:', 'for kind in REGISTRY.values():',
                                  'return cfg.with_keys(sharding="fsdp2", shard_offload=offload)'])
def test_the_sharding_name_scan_leaves_row_questions_alone(line):
    assert not _hits(line), line


def test_every_registered_backend_module_has_the_training_hooks():
    import importlib

    for kind in REGISTRY.values():
        if kind.module:
            mod = importlib.import_module(kind.module)
            assert callable(mod.trl_fields) and callable(mod.configure), kind.name


PLUGIN = '''
from contextlib import contextmanager

from tandem_rlvr.errors import TandemError

CALLS = []


def trl_fields(cfg, compute, master):
    CALLS.append(("trl_fields", compute, master))
    return {"ddp_find_unused_parameters": True}


def configure(args, compute, on_cpu):
    CALLS.append(("configure", compute, on_cpu))


def require():
    raise TandemError("--sharding ring needs the ring library: pip install ring")


@contextmanager
def junior_context():
    CALLS.append(("junior_context",))
    yield
'''


@pytest.fixture
def ring(tmp_path, monkeypatch):
    (tmp_path / "ring_backend.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    kind = register_sharding(ShardingKind("ring", "Ring", "ring", module="ring_backend", offloads=("none", "all")))
    yield kind, __import__("ring_backend")
    del REGISTRY["ring"], PLAN_NAMES["ring"]
    sys.modules.pop("ring_backend", None)


def test_a_backend_registered_from_outside_is_a_sharding_whose_module_the_run_calls(ring, tmp_path):
    from tandem_rlvr.rl import backends
    from tandem_rlvr.planner.memory import Layout
    from tandem_rlvr.rl.trl_args import grpo_args

    kind, mod = ring
    cfg = TrainConfig.from_keys(sharding="ring", shard_offload=True, output_dir=str(tmp_path / "run"))
    assert cfg.models.backend is kind and kind.shards_parameters and kind.can_offload
    args = grpo_args(cfg, 1, True)
    assert args.ddp_find_unused_parameters is True and not args.fsdp and args.deepspeed is None
    backends.configure(args, cfg, on_cpu=True)
    with backends.junior_context(cfg)():
        pass
    compute, master = cfg.models.precision.compute, cfg.models.precision.master
    assert mod.CALLS == [("trl_fields", compute, master), ("configure", compute, True), ("junior_context",)]
    with pytest.raises(TandemError, match="needs the ring library"):
        backends.require(cfg)
    assert Layout(2, "ring", "all").describe().startswith("Ring x 2")
    with pytest.raises(TandemError, match="Ring takes offload none or all"):
        Layout(2, "ring", "optimizer")


def test_a_taken_name_or_a_row_without_offload_none_is_refused():
    with pytest.raises(TandemError, match="registered already"):
        register_sharding(ShardingKind("fsdp2", "Again", "again"))
    with pytest.raises(TandemError, match="offloads starts with 'none'"):
        register_sharding(ShardingKind("odd", "Odd", "odd", offloads=("all",)))
    assert "odd" not in REGISTRY and "again" not in PLAN_NAMES


def test_an_unsharded_run_asks_no_backend_module_and_offload_needs_one_that_offloads(tmp_path):
    from tandem_rlvr.rl import backends

    cfg = TrainConfig.from_keys(output_dir=str(tmp_path / "run"))
    assert backends.trl_fields(cfg, torch.bfloat16, torch.float32) == {}
    with pytest.raises(TandemError, match="shard_offload needs --sharding fsdp2 or zero3"):
        TrainConfig.from_keys(shard_offload=True, output_dir=str(tmp_path / "run"))
