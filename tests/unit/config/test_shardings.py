"""Sharding backends as registry rows (``config/shardings.py``, ``rl/backends.py``): code above the rows
asks them (the memory plan too: a backend's terms are its row's ``memory`` function), and a backend
registered from outside the package is a valid ``--sharding`` whose module the run calls, whose terms the
plan prices and whose words the help lists."""

import re
import sys
from pathlib import Path

import pytest
import torch

from tandem_rlvr.config import TrainConfig
from tandem_rlvr.config.shardings import PLAN_NAMES, REGISTRY, ShardingKind, register_sharding
from tandem_rlvr.errors import TandemError

SRC = Path(__file__).resolve().parents[3] / "src" / "tandem_rlvr"


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
    assert (SRC / "planner" / "memory.py").is_file()  # the memory plan is scanned like every other module
    hits = [f"{p.relative_to(SRC).as_posix()}:{i}: {line.strip()}" for p in sorted(SRC.rglob("*.py"))
            if p.relative_to(SRC).as_posix() != "config/shardings.py"
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


def plan_terms(p, dev, lay, S, master, compute, trained, what):
    p.add(dev, "resident", f"ring shards of {what}", 2 * trained / lay.processes)
'''


@pytest.fixture
def ring(tmp_path, monkeypatch):
    (tmp_path / "ring_backend.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    kind = register_sharding(ShardingKind("ring", "Ring", "ring", module="ring_backend", offloads=("none", "all"),
                                          about="shards passed round a ring", memory="ring_backend:plan_terms"))
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


def test_the_memory_plan_prices_a_backend_registered_from_outside_by_its_rows_terms(ring, tmp_path):
    from transformers import AutoModelForCausalLM

    from tandem_rlvr.models import model_config
    from tandem_rlvr.planner.layouts import candidates
    from tandem_rlvr.planner.memory import Layout, plan

    cfg = TrainConfig.from_keys(output_dir=str(tmp_path / "run"))
    with torch.device("meta"):  # the senior's parameters, counted on its own class
        params = sum(t.numel() for t in AutoModelForCausalLM.from_config(model_config(cfg.models.senior)).parameters())
    items = [i for i in plan(cfg, layout=Layout(2, "ring", "none")).items if i.name.startswith("ring shards")]
    assert [i.nbytes for i in items] == [2 * params / 2]  # the plug-in's own formula: 2 B per weight over 2 ranks
    # cheapest first: each offload level over the rows in registry order, the plug-in's after the built-ins
    assert candidates() == [("ddp", "none"), ("fsdp2", "none"), ("zero3", "none"), ("ring", "none"),
                            ("zero3", "optimizer"), ("fsdp2", "all"), ("zero3", "all"), ("ring", "all")]


def test_a_sharded_backend_without_memory_terms_is_refused_by_the_plan_in_one_line_and_never_a_candidate(tmp_path):
    from tandem_rlvr.planner.layouts import candidates
    from tandem_rlvr.planner.memory import Layout, plan

    register_sharding(ShardingKind("bare", "Bare", "bare", module="bare_backend"))
    try:
        cfg = TrainConfig.from_keys(output_dir=str(tmp_path / "run"))
        with pytest.raises(TandemError, match="the memory plan has no terms for sharding 'bare'"):
            plan(cfg, layout=Layout(2, "bare", "none"))
        assert all(name != "bare" for name, _ in candidates())
    finally:
        del REGISTRY["bare"], PLAN_NAMES["bare"]


def test_the_sharding_help_lists_every_registered_backend_a_plugin_too(ring):
    from tandem_rlvr.cli import build_parser
    from tandem_rlvr.config.shardings import sharding_help

    assert "ring: shards passed round a ring" in sharding_help()
    assert sharding_help().startswith("none: ") and "fsdp2: FSDP2" in sharding_help()
    assert "ddp: each process" in sharding_help(plan=True)
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    helps = {o: a.help for a in train._actions for o in a.option_strings}
    assert "ring: shards passed round a ring" in helps["--plan-sharding"]
    assert "ring" in train.format_help().split("--sharding", 1)[1].split("\n", 1)[0]  # its choices: {none,...,ring}
