"""The drift-world study (docs/drift_world.md): GRPO vs Tandem vs KL-Reg over seeds and two juniors, one command.

    tandem study drift --seeds 0,1,2 --out runs/drift-study
    python -m tandem_rlvr.study drift --seeds 0,1,2 --out runs/drift-study   (the same)

What it does, per seed s (the RL seed; the world is fixed):

1. trains, with the project's own trainer and the ``tiny-drift`` preset, from the drift
   world's base model: ``grpo`` (senior alone; the junior only enters its KL monitor, so one
   run serves both juniors), ``tandem-self`` / ``klreg-self`` (junior = the base model,
   self-pairing) and ``tandem-weak`` / ``klreg-weak`` (junior = the world's junior: a smaller
   model trained on the word style only, which never saw the shorthand);
2. evaluates every senior's final checkpoint (``--checkpoint best``: the validation-best)
   and, once for all seeds, the base model and the weak junior, with the battery: solo
   pass@k, paragraph round-robin handoff pass@k with each junior, junior legibility (CE, alpha) for
   each junior, drift against each junior (KL, survival, top over-emitted tokens, recovery),
   ``compare`` tables with paired one-sided t-tests against GRPO (per seed and junior), and the
   style of every solo response (``world.style``);
3. aggregates over seeds into ``OUT/study.json`` and ``OUT/study.md`` (``study_stats``):
   mean and standard error over seeds per variant, plus paired one-sided t-tests over
   problems of the seed-averaged per-problem statistics (Tandem/KL-Reg vs GRPO).

Training, evaluation and the battery are ``recipes.pipeline``'s, shared with the demo.

Resumable: every step is skipped when its result file exists (training: ``summary.json``;
evaluation: ``metrics.json``, ``legibility.json``, ``drift.json``, ``compare.json``), a finished
evaluation only once its inputs check out against the models' and problems' files now (a changed
checkpoint is refused, naming it: ``sampler.finished_metrics``), and the evaluation sampler itself
resumes inside a run. Rerun the same command to finish an
interrupted study or to add seeds. Layout::

    OUT/shared/eval/{base,junior-weak}/...   OUT/seed<s>/runs/<variant>/
    OUT/seed<s>/eval/<variant>/{solo,handoff-self,handoff-weak,legibility-self,legibility-weak}
    OUT/seed<s>/drift-{self,weak}/           OUT/seed<s>/compare-{self,weak}/
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..io import atomic_write, write_json
from ..outdir import output_dir
from .pipeline import battery, checkpoint, eval_settings, evaluate_senior, train_method, world_paths
from .study_stats import aggregate, record_settings, to_markdown

log = logging.getLogger("tandem_rlvr")

JUNIORS = ("self", "weak")
VARIANTS = ("grpo", "tandem-self", "klreg-self", "tandem-weak", "klreg-weak")


@dataclass
class StudySettings:
    """Everything that shapes a study's numbers; written to OUT/settings.json (a resume must match)."""

    world: str = "tiny-drift"  # built-in world: its base model is the senior, its junior the weak junior
    preset: str = "tiny-drift"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    juniors: list[str] = field(default_factory=lambda: list(JUNIORS))
    train: dict = field(default_factory=dict)  # TrainConfig overrides on top of the preset
    limit: int = 200  # test problems per evaluation
    n: int = 4  # samples per problem (solo and handoff)
    temperature: float = 1.0  # evaluation sampling (the tiny models are trained and rolled out at 1.0)
    max_tokens: int = 96
    split: str = "test"
    quick: bool = False  # a throwaway for-tests world (mechanics only)
    # Which checkpoint is evaluated: "final" (default: drift is what training does to the
    # senior, and at 40 steps the validation-best is often step 0, the base itself) or "best".
    checkpoint: str = "final"


def _done(path: Path) -> bool:
    return path.is_file()


def _variants(juniors: list[str]) -> list[str]:
    return [v for v in VARIANTS if v == "grpo" or v.split("-")[1] in juniors]


def run_study(out: str | Path, settings: StudySettings, print_fn=print) -> dict:
    """Run (or finish) the study into ``out``; return the aggregate (also OUT/study.json)."""
    from ..runtime import DEMO_THREADS, configure_cpu_threads
    out = output_dir(out)
    record_settings(out, settings, "a study")
    threads = configure_cpu_threads(fixed=DEMO_THREADS)  # the demo's fixed count: figures must not follow the load
    t0 = time.perf_counter()
    world = world_paths(settings.world)
    base, weak = str(world.base), str(world.junior)
    junior_of = {"self": base, "weak": weak}
    juniors = {j: junior_of[j] for j in settings.juniors}
    ev = eval_settings(settings.limit, settings.n, settings.max_tokens, settings.temperature, settings.split)
    print_fn(f"study: world {world.root} ({threads} CPU thread(s)); seeds {settings.seeds}; juniors {settings.juniors}")

    shared = out / "shared" / "eval"
    print_fn("study: base model and weak junior (once for all seeds)")
    evaluate_senior(base, shared / "base", juniors, ev, skip_done=True, progress=False)
    if "weak" in settings.juniors:
        evaluate_senior(weak, shared / "junior-weak", {}, ev, skip_done=True, progress=False)

    for seed in settings.seeds:
        sd = out / f"seed{seed}"
        for v in _variants(settings.juniors):
            run = sd / "runs" / v
            method, _, j = v.partition("-")
            if not _done(run / "summary.json"):
                t1 = time.perf_counter()
                print_fn(f"study: seed {seed}: training {v}")
                train_method(settings.preset, method, base, junior_of[j] if j else None, run,
                             dict(seed=seed, **settings.train), print_fn=lambda *a, **k: None)
                print_fn(f"study: seed {seed}: {v} trained in {time.perf_counter() - t1:.0f} s")
            t1 = time.perf_counter()
            evaluate_senior(str(checkpoint(run, settings.checkpoint)), sd / "eval" / v, juniors, ev, skip_done=True,
                            progress=False)
            print_fn(f"study: seed {seed}: {v} evaluated ({time.perf_counter() - t1:.0f} s)")
        for j in settings.juniors:
            _seed_battery(sd, shared, j, settings.juniors)
        print_fn(f"study: seed {seed} done ({time.perf_counter() - t0:.0f} s since start)")

    result = aggregate(out, settings.__dict__, _variants(settings.juniors))
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    result["threads"] = threads
    write_json(out / "study.json", result)
    with atomic_write(out / "study.md") as f:
        f.write(to_markdown(result))
    print_fn((out / "study.md").read_text(encoding="utf-8"))
    return result


def _seed_battery(sd: Path, shared: Path, j: str, juniors: list[str]) -> None:
    """Drift against junior ``j`` and the comparison tables (paired t-tests vs GRPO) of one seed."""
    names = {"grpo": sd / "eval" / "grpo", "tandem": sd / "eval" / f"tandem-{j}", "klreg": sd / "eval" / f"klreg-{j}"}
    jsamples = shared / "base" / "solo" if j == "self" else shared / "junior-weak" / "solo"
    drifted = list(names) if j == "self" else ["base", *names]
    battery({"base": shared / "base", **names}, [f"handoff-{k}" for k in juniors], f"legibility-{j}", jsamples,
            drifted, sd / f"drift-{j}", sd / f"compare-{j}", baseline="grpo", skip_done=True)
