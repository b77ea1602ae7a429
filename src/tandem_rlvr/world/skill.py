"""Juniors at chosen skill levels: checkpoints of a tiny world whose measured accuracy is each asked level.

What: ``tandem world build --world tiny --juniors 0.3,0.5,0.7`` makes, beside the world, one model
directory per level (``skill30/``, ``skill50/``, ``skill70/``; model names ``tiny-skill30``, ...)
whose solo accuracy on the world's held-out problems, measured by ``tandem eval solo``'s own
evaluation (``SkillConfig.eval_command``), is within ``SkillConfig.tol`` of the level. They are the
paper's second direction for future work in small: juniors "calibrated to human skill levels", so a
pool calibrated by skill can be built and studied on CPU (docs/skill_juniors.md).

How: each junior is a point on the senior's own training path, the piecewise-linear path through
the run's checkpoints that the world holds: its initialisation (step 0, rebuilt exactly from the
world's seed, as the build makes it), its early checkpoint (the world's junior, when that is one,
``junior="early"``) and the trained base. The dial ``t`` in [0, 1] runs along that path (t = 0 the
initialisation, 1 the base); ``search`` bisects it until the measured accuracy is within the
tolerance of the level (accuracy rises along the path: 0 at the start, the base's at the end). No
training is needed, so a level costs a handful of evaluations. A level above the base's measured
accuracy plus the tolerance is refused before any search.

Why interpolation and not saved snapshots: the build does not keep its intermediate checkpoints
(and its sources are hashed into every world's key, so it may not change), and retracing its 600
steps to save some costs more than the whole search; a point between two checkpoints of one run is
a model the run passes near, and the dial is continuous, so every reachable level is met to the
tolerance rather than to the spacing of a checkpoint grid.

Layout, keyed like the cross junior (``world/cross.py``): ``cache_dir()/worlds/<world key>-s<key>/``
holds ``base/`` (the base's measurement) and one ``skillNN/`` per level, each a normal model
directory with ``skill.json`` (level, measured accuracy and its standard error, t, the probes of its
search, the command that measures it) and ``eval/samples.jsonl`` (the measurement's graded samples). Each is
built in a temporary folder renamed into place when complete (``build.build_then_publish``), so a
killed build leaves finished levels and nothing half-written, and a finished level is never redone.

The measurement itself (``tandem eval solo``) sits on a floor above this package; the recipe
``recipes/skill.py`` passes it in as ``measure``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..errors import TandemError
from ..io import write_json
from ..paths import cache_dir
from .build import WorldConfig, _new_model, build_fingerprint

SKILL_JSON = "skill.json"
SKILL_KEYS = ("level", "accuracy", "t", "model")  # what ``list_juniors`` and ``skill_model`` read of it
MEASURE_JSON = "measure.json"
EVAL_FILES = ("samples.jsonl",)  # what of a measurement's run directory a junior keeps: the graded samples
SKILL_WORLDS = ("tiny", "tiny-drift")  # the math worlds: measured on the tiny benchmark
_NAME = re.compile(r"^(?P<world>.+)-skill(?P<pct>\d{1,2})$")


def parse_levels(text: str) -> tuple[float, ...]:
    """Accuracies from ``0.3,0.5,0.7`` or ``30%,50%,70%``: each in (0, 1) in whole percents, none twice;
    sorted. Anything else is a ``TandemError`` naming the bad part."""
    levels = []
    for part in (p.strip() for p in str(text).split(",")):
        try:
            value = float(part[:-1]) / 100 if part.endswith("%") else float(part)
        except ValueError:
            value = float("nan")
        pct = round(value * 100) if math.isfinite(value) else -1
        if not 0 < pct < 100 or abs(value * 100 - pct) > 1e-6:
            raise TandemError(f"--juniors: {part!r} is not a skill level; give accuracies in (0, 1) in whole "
                              "percents, e.g. 0.3,0.5,0.7 or 30%,50%,70%")
        if pct / 100 in levels:
            raise TandemError(f"--juniors: level {part} given twice")
        levels.append(pct / 100)
    return tuple(sorted(levels))


def level_name(level: float) -> str:
    """The folder (and model-name suffix) of a level: 0.3 -> ``skill30``."""
    return f"skill{round(level * 100)}"


@dataclass(frozen=True)
class SkillConfig:
    """How juniors are measured and how close each must come to its level (all enter the key)."""

    tol: float = 0.02  # |measured accuracy - level| a junior must meet
    max_probes: int = 14  # evaluations one level's search may spend
    limit: int = 200  # test problems measured (the first ``limit`` of the tiny benchmark's test split)
    n: int = 2  # samples per problem
    max_tokens: int = 128  # new tokens per sample (the world's solutions are well under 100)
    seed: int = 0  # the evaluation's seed

    def __post_init__(self):
        if not 0 < self.tol < 0.5:
            raise TandemError(f"SkillConfig.tol must be in (0, 0.5), got {self.tol}")
        for name in ("max_probes", "limit", "n", "max_tokens"):
            if getattr(self, name) < 1:
                raise TandemError(f"SkillConfig.{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def for_tests(cls, **overrides) -> SkillConfig:
        """Measured on 20 problems x 2 samples (steps of 0.025), so the tolerance is wider: mechanics."""
        return cls(**{**dict(tol=0.05, max_probes=10, limit=20, n=2, max_tokens=96), **overrides})

    def key(self, world: WorldConfig) -> str:
        blob = json.dumps({"world": world.key(), "build": build_fingerprint(), "skill": dataclasses.asdict(self),
                           "code": hashlib.sha256(Path(__file__).read_bytes().replace(b"\r\n", b"\n")).hexdigest()},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def eval_command(self, model: str) -> str:
        """The ``tandem eval solo`` command that makes this measurement of ``model``."""
        return (f"tandem eval solo --senior {model} --benchmarks tiny --split test --limit {self.limit} --n {self.n} "
                f"--max-tokens {self.max_tokens} --seed {self.seed} --out OUT")


def skill_root(world: WorldConfig, cfg: SkillConfig, cache: str | os.PathLike | None = None) -> Path:
    cache_root = Path(cache if cache is not None else cache_dir()).expanduser()
    return cache_root / "worlds" / f"{world.key()}-s{cfg.key(world)}"


def check_world(world: WorldConfig) -> None:
    """Skill juniors are measured on the tiny benchmark (word problems): the code world is refused."""
    if world.task != "math":
        raise TandemError(f"--juniors: the {world.task} world has no skill juniors yet (math worlds: "
                          f"{', '.join(SKILL_WORLDS)})")


# --------------------------------------------------------------------------- the dial
def skill_path(world: WorldConfig, base: Path, junior: Path) -> list[dict[str, torch.Tensor]]:
    """The senior's training path as state dicts: [initialisation, early junior (if one), base].

    The initialisation is the build's own (``torch.manual_seed(seed)``, then the base's shape), so
    on the stack that built the world it is the run's step 0 exactly."""
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(base)
    torch.manual_seed(world.seed)
    init = _new_model(tok, world.hidden, world.layers, world.heads, world.kv_heads, world.head_dim,
                      world.intermediate).state_dict()
    points = [init]
    if world.junior == "early":
        points.append(Qwen3ForCausalLM.from_pretrained(junior).state_dict())
    points.append(Qwen3ForCausalLM.from_pretrained(base).state_dict())
    return points


def point(path: list[dict[str, torch.Tensor]], t: float) -> dict[str, torch.Tensor]:
    """The state dict at ``t`` in [0, 1] along ``path`` (each segment an equal share of the dial)."""
    if not 0.0 <= t <= 1.0:
        raise TandemError(f"skill dial t must be in [0, 1], got {t}")
    segments = len(path) - 1
    i = min(int(t * segments), segments - 1)
    w = t * segments - i
    a, b = path[i], path[i + 1]
    return {k: torch.lerp(a[k], b[k], w) if a[k].is_floating_point() else b[k] for k in b}


def search(level: float, measure: Callable[[float], float], cfg: SkillConfig, base_acc: float) -> dict:
    """Bisect the dial for a point whose measured accuracy is within ``cfg.tol`` of ``level``.

    ``measure(t)`` is the accuracy at ``t``; the base (t = 1) measured ``base_acc``. Returns {"t",
    "accuracy", "probes": [[t, accuracy], ...]}; a level no probe meets is a ``TandemError`` naming
    the nearest. The probes are dyadic, so the same measurements give the same junior."""
    lo, hi = 0.0, 1.0
    probes = [[1.0, base_acc]]
    while abs(probes[-1][1] - level) > cfg.tol and len(probes) <= cfg.max_probes:
        mid = (lo + hi) / 2
        acc = measure(mid)
        probes.append([mid, acc])
        lo, hi = (mid, hi) if acc < level else (lo, mid)
    t, acc = min(probes, key=lambda p: (abs(p[1] - level), -p[0]))
    if abs(acc - level) > cfg.tol:
        raise TandemError(f"--juniors {level:g}: no point of the world's training path measured within "
                          f"{cfg.tol:g} of it in {len(probes) - 1} probes (nearest: t={t:g}, accuracy {acc:.3f})")
    return {"t": t, "accuracy": acc, "probes": probes}


def refuse_unreachable(levels: tuple[float, ...], base_acc: float, cfg: SkillConfig, world_name: str) -> None:
    """A level above the base's measured accuracy plus the tolerance is out of the world's reach."""
    top = min(math.floor(round((base_acc + cfg.tol) * 100, 6)) / 100, 0.99)  # the highest whole percent in reach
    high = [f"{lv:g}" for lv in levels if lv > top]
    if high:
        raise TandemError(f"--juniors {','.join(high)}: above what world {world_name} reaches (its base measures "
                          f"{base_acc:.3f} on {cfg.limit} test problems x {cfg.n}; levels up to {top:.2f} can be made)")


# --------------------------------------------------------------------------- what is built
def save_point(state: dict[str, torch.Tensor], base: Path, out: Path) -> None:
    """A model directory at ``out``: the base's architecture with ``state``, and the base's own
    tokenizer files copied byte for byte (the junior shares the senior's tokenizer)."""
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(base)
    model.load_state_dict(state)
    model.save_pretrained(out)
    for f in sorted(base.iterdir()):
        if f.is_file() and f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copyfile(f, out / f.name)


def keep_measurement(run: Path, out: Path) -> None:
    """Copy a measurement's graded samples into ``out`` (not its config or metrics, which name the probe's
    temporary path: the same command twice must give the same bytes)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in EVAL_FILES:
        shutil.copyfile(run / name, out / name)


def write_skill(out: Path, record: dict) -> None:
    write_json(out / SKILL_JSON, record)


def skill_juniors(root: Path) -> dict[str, dict]:
    """{folder name: skill.json} of the finished juniors under a skill root, by level."""
    from .records import read_record

    found = {d.name: read_record(d / SKILL_JSON, SKILL_KEYS, ("level", "accuracy", "t"),
                                 f"remove {d} and build it again (`tandem world build --juniors LEVEL`)")
             for d in sorted(root.iterdir()) if (d / SKILL_JSON).is_file()} if root.is_dir() else {}
    return dict(sorted(found.items(), key=lambda kv: kv[1]["level"]))


def skill_model(name: str, cache: str | os.PathLike | None = None) -> Path | None:
    """The directory of a skill-junior model name (``tiny-skill30``, ``tiny-drift-skill50``) built on
    this machine with the default ``SkillConfig``; None if ``name`` is not such a name; a name
    whose junior is not built yet is a ``TandemError`` saying the command that builds it."""
    from .build import named_world

    m = _NAME.match(name)
    if not m or m["world"] not in SKILL_WORLDS:
        return None
    level = int(m["pct"]) / 100
    d = skill_root(named_world(m["world"]), SkillConfig(), cache) / level_name(level)
    if not (d / SKILL_JSON).is_file():
        raise TandemError(f"{name} is not built on this machine: run `tandem world build --world {m['world']} "
                          f"--juniors {level:g}`")
    return d
