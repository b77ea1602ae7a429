"""Does an overlapped run learn like a synchronous one? ``tandem study overlap --seeds 0,1,2 --out DIR``.

Per seed, the preset (with ``method`` instead of the preset's, when given) trains twice through one rollout server
(``tandem serve --weight-sync``, pinned to one core; the trainer to another, as ``recipes.bench_overlap``):
``max_staleness`` 0 and ``max_staleness`` K, otherwise the same settings. Each run's own validation (the preset's
``val_size`` problems, at its ``eval_every`` cadence and at the end) gives its final and best accuracy, its log the
training reward of the first and last 10 rollout steps (validation on a small world can move less than the reward
does); the study reports per arm the mean and standard error over seeds, the seed-paired difference overlapped -
synchronous with its standard error, and each arm's mean rollout-step wall-clock. "Within noise" means the paired
difference is within two of its standard errors of zero.

Reruns resume: a finished run is not trained again (its directory's ``summary.json``), and a study directory of
other settings is refused (``study_stats.record_settings``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import TandemError
from ..io import atomic_write
from .study_stats import mean_se


@dataclass(frozen=True)
class OverlapStudySettings:
    seeds: tuple[int, ...] = (0, 1, 2)
    preset: str = "tiny"
    steps: int | None = None  # rollout steps per run (None: the preset's max_steps)
    max_staleness: int = 1
    method: str | None = None  # the training method of both arms (None: the preset's)


def _run_dir(out: Path, k: int, seed: int) -> Path:
    return out / f"staleness{k}-seed{seed}"


def _figures(run: Path, updates_per_batch: int) -> dict:
    """A finished run's final and best validation accuracy and its mean rollout-step seconds (first two untimed)."""
    from ..rl.callbacks import read_log
    from .bench_overlap import split

    log = read_log(run / "log.jsonl")
    val = [r for r in log if "val/accuracy" in r]
    if not val:
        raise TandemError(f"{run}: the run logged no validation (the study needs eval_every > 0)")
    rewards = [r["reward/mean"] for r in log if "reward/mean" in r]  # one per rollout step
    return {"final": val[-1]["val/accuracy"], "best": max(r["val/accuracy"] for r in val),
            "first_reward": sum(rewards[:10]) / len(rewards[:10]),
            "late_reward": sum(rewards[-10:]) / len(rewards[-10:]),
            "final_step": val[-1]["step"], "step_s": split(run / "log.jsonl", updates_per_batch, 2)["step_s"]}


def summarize(figures: dict[tuple[int, int], dict], seeds: list[int], k: int) -> dict:
    """Per arm mean / se over seeds; paired differences (overlapped - synchronous) over seeds; the verdict."""
    res = {"seeds": seeds, "max_staleness": k, "arms": {}, "paired": {}}
    for arm in (0, k):
        res["arms"][f"staleness{arm}"] = {key: mean_se([figures[(arm, s)][key] for s in seeds])
                                          for key in ("final", "best", "first_reward", "late_reward", "step_s")}
    for key in ("final", "best", "late_reward"):
        d = mean_se([figures[(k, s)][key] - figures[(0, s)][key] for s in seeds])
        d["within_noise"] = None if d["se"] is None else abs(d["mean"]) <= 2 * d["se"] or d["mean"] == 0
        res["paired"][key] = d
    return res


def to_markdown(res: dict) -> str:
    k = res["max_staleness"]

    def cell(m):
        return f"{m['mean']:.3f}" + ("" if m["se"] is None else f" ± {m['se']:.3f}")

    lines = [f"seeds {', '.join(map(str, res['seeds']))}; mean ± standard error over seeds", "",
             "| max_staleness | final validation accuracy | best validation accuracy | training reward, first 10 "
             "rollout steps | training reward, last 10 | rollout step (s) |", "|---|---|---|---|---|---|"]
    for arm in (0, k):
        a = res["arms"][f"staleness{arm}"]
        lines.append(f"| {arm} | {cell(a['final'])} | {cell(a['best'])} | {cell(a['first_reward'])} | "
                     f"{cell(a['late_reward'])} | {cell(a['step_s'])} |")
    names = {"final": "final validation accuracy", "best": "best validation accuracy",
             "late_reward": "training reward, last 10 rollout steps"}
    for key in ("final", "best", "late_reward"):
        d = res["paired"][key]
        verdict = "n/a (one seed)" if d["within_noise"] is None else \
            ("within noise" if d["within_noise"] else "outside 2 standard errors")
        lines.append(f"\n{names[key]}, overlapped - synchronous (paired by seed): {cell(d)}: {verdict}")
    return "\n".join(lines) + "\n"


def run_overlap_study(out: str | Path, settings: OverlapStudySettings, print_fn=print) -> dict:
    """Train what is missing, then write OUT/study.json and OUT/study.md (module docstring)."""
    import os

    from ..config import load_train_config
    from ..engines.vllm_engine import require_vllm
    from .bench_overlap import serve_pinned, stop_server, train_pinned
    from .study_stats import record_settings

    if settings.max_staleness < 1:
        raise TandemError(f"--max-staleness must be >= 1 (the overlapped arm), got {settings.max_staleness}")
    cfg = load_train_config(settings.preset)
    if settings.method is not None:
        from ..config.methods import method_kind

        method_kind(settings.method)  # an unknown name: one line, before anything is written
    if not cfg.loop.eval_every:
        raise TandemError(f"preset {settings.preset} validates never (eval_every 0); the study compares validation")
    out = Path(out)
    k = settings.max_staleness

    def missing(seeds):
        return [(arm, s) for s in seeds for arm in (0, k) if not (_run_dir(out, arm, s) / "summary.json").is_file()]

    if missing(settings.seeds):
        require_vllm()  # before anything is written
    out.mkdir(parents=True, exist_ok=True)
    seeds = record_settings(out, settings, "an overlap study")
    runs = [(arm, s) for s in seeds for arm in (0, k)]
    todo = missing(seeds)
    steps = settings.steps or cfg.loop.rollout_steps(cfg.loop.max_updates)
    every = max(1, cfg.loop.updates(cfg.loop.eval_every) // cfg.loop.updates_per_batch)  # in rollout steps
    if todo:
        require_vllm()  # a seed recorded earlier may still be missing its runs
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            raise TandemError(f"the study needs two cores this process may run on (allowed: {allowed})")
        print_fn(f"{len(todo)} of {len(runs)} runs to train ({steps} rollout steps each); server on core "
                 f"{allowed[0]}, trainer on core {allowed[1]}")
        proc, url = serve_pinned(cfg.models.senior, cfg.models.junior_spec, allowed[0], out / "server.log")
        try:
            for arm, s in todo:
                print_fn(f"seed {s}, max_staleness {arm}")
                train_pinned(settings.preset, url, arm, steps, allowed[1], _run_dir(out, arm, s), print_fn,
                       extra=["--seed", str(s), "--eval-every", str(every)]
                       + (["--method", settings.method] if settings.method else []))
        finally:
            stop_server(proc)
    per = cfg.loop.updates_per_batch
    figures = {(arm, s): _figures(_run_dir(out, arm, s), per) for arm, s in runs}
    res = summarize(figures, seeds, k)
    res["runs"] = {f"staleness{arm}-seed{s}": figures[(arm, s)] for arm, s in runs}
    with atomic_write(out / "study.json") as f:
        f.write(json.dumps(res, indent=2) + "\n")
    md = to_markdown(res)
    with atomic_write(out / "study.md") as f:
        f.write(md)
    print_fn(md)
    return res
