"""``tandem world build --juniors``: the skill juniors of a tiny world, measured by ``tandem eval solo``.

What: for each asked level, ``world/skill.py``'s search along the senior's training path, each probe
measured by the library form of ``tandem eval solo`` (``eval.sample.sampler.evaluate``: the paper's
evaluation sampling, temperature 0.7, top-p 0.8, top-k 20, on the tiny benchmark's test split, with
``SkillConfig``'s problems, samples and token cap); each finished level published on its own (see
``world/skill.py`` for the layout). The world's base is measured first (``base/``), so a level above
it is refused before any search.

Why here: the measurement is the evaluation layer's, a floor above the worlds; this recipe joins them.

Run: ``tandem world build --world tiny --juniors 0.3,0.5,0.7`` (docs/skill_juniors.md).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from ..io import read_json, read_jsonl, write_json
from ..progress import progress_bar
from ..runtime import BUILD_THREADS, intra_op_threads
from ..world.build import WorldConfig, build_then_publish, build_world, named_world
from ..world.skill import (MEASURE_JSON, SKILL_JSON, SkillConfig, check_world, keep_measurement, level_name, point,
                           refuse_unreachable, save_point, search, skill_juniors, skill_path, skill_root, write_skill)


def world_models(world: WorldConfig, name: str, cache=None, progress: bool = True):
    """The world's ``WorldPaths``: the shipped one when ``world`` is the built-in ``name``'s own config
    (a built-in world never builds), else the cached build, built first if missing."""
    from ..world.shipped import SHIPPED_WORLDS, shipped_world

    if name in SHIPPED_WORLDS and world == named_world(name):
        return shipped_world(name)
    return build_world(world, cache=cache, progress=progress)


def measure(model: Path, out: Path, cfg: SkillConfig) -> float:
    """Solo pass@1 of ``model`` on the first ``cfg.limit`` tiny test problems (``cfg.eval_command``), run
    into ``out``."""
    from ..config import EvalConfig
    from ..decoding.sampling import SamplingParams
    from ..eval.sample.sampler import evaluate

    sampling = SamplingParams(0.7, 0.8, 20, cfg.max_tokens)  # the paper's evaluation sampling, tokens capped
    ev = EvalConfig.from_keys(senior=str(model), benchmarks=["tiny"], split="test", limit=cfg.limit, n=cfg.n,
                              sampling=sampling, seed=cfg.seed)
    return float(evaluate(ev, out, progress=False)["tiny"]["pass@1"]["mean"])


def _pass1(run: Path) -> dict:
    """pass@1 (mean, bootstrap SE) of a finished measurement run."""
    return read_json(run / "metrics.json")["tiny"]["pass@1"]


def build_skill_juniors(world_name: str, levels: tuple[float, ...], world: WorldConfig | None = None,
                        cfg: SkillConfig | None = None, cache: str | os.PathLike | None = None,
                        progress: bool = True) -> Path:
    """Build the juniors of ``levels`` (accuracies, ``world.skill.parse_levels``) for world ``world_name``
    (``world``: its config, default the built-in one); return the skill root. Levels already built are
    kept as they are, so a finished build run again does nothing."""
    world, cfg = world or named_world(world_name), cfg or SkillConfig()
    check_world(world)
    root = skill_root(world, cfg, cache)
    todo = [lv for lv in levels if not (root / level_name(lv) / SKILL_JSON).is_file()]
    if not todo:
        return root
    w = world_models(world, world_name, cache, progress)
    with intra_op_threads(BUILD_THREADS):  # one thread, whatever the load: the same command gives the same bytes
        if not (root / "base" / MEASURE_JSON).is_file():
            build_then_publish(root / "base", lambda tmp: _measure_base(w.base, tmp, cfg))
        base_acc = float(read_json(root / "base" / MEASURE_JSON)["accuracy"])
        refuse_unreachable(tuple(todo), base_acc, cfg, world_name)
        # the model names (tiny-skill30) name the built-in world's juniors at the default settings only
        prefix = world_name if world == named_world(world_name) and cfg == SkillConfig() else None
        _search_levels(root, todo, skill_path(world, w.base, w.junior), w.base, base_acc, cfg, prefix, progress)
    return root


def _search_levels(root: Path, todo: list[float], path, base: Path, base_acc: float, cfg: SkillConfig,
                   prefix: str | None, progress: bool) -> None:
    with progress_bar(progress) as bar:
        task = bar.add_task("skill juniors: probes", total=len(todo) * cfg.max_probes)
        for lv in todo:
            def build(tmp: Path, lv=lv) -> None:
                _build_level(tmp, lv, path, base, base_acc, cfg, prefix, lambda: bar.advance(task))

            build_then_publish(root / level_name(lv), build)
        bar.update(task, completed=len(todo) * cfg.max_probes)


def _measure_base(base: Path, out: Path, cfg: SkillConfig) -> None:
    acc = measure(base, out / "run", cfg)
    keep_measurement(out / "run", out / "eval")
    pass1 = _pass1(out / "run")
    _rm(out / "run")
    write_json(out / MEASURE_JSON, {"accuracy": acc, "se": pass1["se"], "command": cfg.eval_command(str(base))})


def _build_level(out: Path, level: float, path, base: Path, base_acc: float, cfg: SkillConfig, prefix: str | None,
                 tick) -> None:
    """Search the dial for ``level`` with probes under ``out/.probes``; the chosen point becomes ``out``.
    ``prefix``: the world's name when the junior has a model name (``<prefix>-skill30``), else None."""
    probes = out / ".probes"

    def at(t: float, what: str = "model") -> Path:
        return probes / f"{what}-t{t:.10f}"

    def probe(t: float) -> float:
        save_point(point(path, t), base, at(t))
        tick()
        return measure(at(t), at(t, "eval"), cfg)

    found = search(level, probe, cfg, base_acc)
    t = found["t"]
    if t == 1.0:  # the base itself meets the level
        save_point(point(path, t), base, at(t))
        keep_measurement(out.parent / "base" / "eval", out / "eval")
        se = read_json(out.parent / "base" / MEASURE_JSON)["se"]
    else:
        keep_measurement(at(t, "eval"), out / "eval")
        se = _pass1(at(t, "eval"))["se"]
    for f in sorted(at(t).iterdir()):
        os.replace(f, out / f.name)
    _rm(probes)
    model = f"{prefix}-{level_name(level)}" if prefix else None
    write_skill(out, {"level": level, "accuracy": found["accuracy"], "se": se, "tol": cfg.tol, "t": t, "model": model,
                      "answered": answered_share(out / "eval" / "samples.jsonl"),
                      "path": "initialisation, early junior, base" if len(path) == 3 else "initialisation, base",
                      "probes": found["probes"], "measure": dataclasses.asdict(cfg),
                      "command": cfg.eval_command(model or "THIS_DIR"), "eval": "eval/samples.jsonl"})


def answered_share(samples: Path) -> float:
    """Share of a measurement's samples that give an answer at all (right or wrong): a junior that is wrong
    in arithmetic but writes the solution's form reads as a weaker solver, one that gives no answer as noise."""
    from ..tasks.answers import NO_ANSWER

    rows = read_jsonl(samples)
    return sum(r["reason"] != NO_ANSWER for r in rows) / len(rows)


def _rm(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True)


def list_juniors(root: Path) -> list[dict]:
    """The finished juniors under ``root`` as rows: name, level, measured accuracy, path."""
    return [{"name": rec["model"] or d, "level": rec["level"], "accuracy": rec["accuracy"], "t": rec["t"],
             "path": str(root / d)} for d, rec in skill_juniors(root).items()]
