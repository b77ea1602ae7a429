"""The junior-pool study (docs/pool_study.md): does a senior trained with a pool of
juniors hand off better to a junior it never trained with, and at what cost to its solo accuracy?

    tandem study pool --seeds 0,1,2 --out runs/pool-study
    tandem study pool --quick --seeds 0 --out runs/pool-quick      (seconds of training: mechanics only)

World: the drift world (``tiny-drift``, docs/drift_world.md), whose base writes two styles (words and
a compact shorthand). Three juniors of different strengths and styles:

- ``weak``: the world's junior, a small model trained on the word style only;
- ``base``: the base model itself (self-pairing);
- ``mid``: an intermediate checkpoint, the base after a short GRPO run (``mid_steps`` steps, seed
  ``MID_SEED``, trained once for all seeds): part of the way along GRPO's drift toward shorthand.

Arms, per RL seed s, all Tandem RLVR from the base with the ``tiny-drift`` preset:
``alone-<j>`` (one junior j) for each junior, and ``pool-no-<h>`` (the pool of the other two juniors,
equal weights, the training's default draw) for each held-out junior h. Every trained senior (its
``final`` checkpoint by default) and, once, the base are evaluated by ``recipes.pipeline``'s
``evaluate_senior``: solo pass@k, paragraph round-robin handoff pass@k with each of the three
juniors, and each junior's legibility (CE, alpha) of the solo samples.

The question, as paired one-sided t-tests over problems of seed-averaged per-problem statistics (the
drift study's tests, ``recipes.study_stats``), each with its paired bootstrap 95% interval, for every
held-out junior h and every single-junior arm j:

- ``pool-no-h vs alone-j: handoff_h`` (H1: the pool-trained senior hands off better to h);
- ``pool-no-h vs alone-j: solo`` (H1: better alone too; the mean difference is the cost).

Against ``alone-h`` (the arm that trained with h itself) the test says how far the pool gets from
training with the held-out junior. Resumable as the drift study: every training run, evaluation and
legibility directory is kept once finished (checked against the models' files as they are now); a
finished study re-run is a no-op (it prints OUT/study.md). Layout::

    OUT/shared/mid/ (the mid junior's GRPO run)   OUT/shared/eval/base/{solo,handoff-<j>,legibility-<j>}
    OUT/seed<s>/runs/<arm>/                       OUT/seed<s>/eval/<arm>/{solo,handoff-<j>,legibility-<j>}
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TandemError
from ..io import atomic_write, read_json, write_json
from ..outdir import output_dir
from ..progress import progress_bar
from .pipeline import checkpoint, eval_settings, evaluate_senior, train_method, world_paths
from .study_stats import record_settings, reduce, senior_stats

JUNIORS = ("weak", "base", "mid")
MID_SEED = 1000  # the mid junior's GRPO run: one seed, apart from the study's RL seeds


@dataclass
class PoolStudySettings:
    """Everything that shapes the pool study's numbers; OUT/settings.json (a resume must match, seeds aside)."""

    world: str = "tiny-drift"
    preset: str = "tiny-drift"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    train: dict = field(default_factory=dict)  # TrainConfig overrides of every arm on top of the preset
    mid_steps: int = 10  # GRPO steps of the intermediate-checkpoint junior
    mid_train: dict = field(default_factory=dict)  # overrides of the mid junior's run (--quick: shorter)
    limit: int = 200
    n: int = 4
    temperature: float = 1.0
    max_tokens: int = 96
    split: str = "test"
    quick: bool = False
    checkpoint: str = "final"


def arms() -> list[str]:
    """The trained seniors of one seed: each junior alone, then each pool with one junior held out."""
    return [f"alone-{j}" for j in JUNIORS] + [f"pool-no-{h}" for h in JUNIORS]


def arm_junior(arm: str, paths: dict[str, str]) -> str:
    """The ``--junior`` of an arm: one junior's checkpoint, or the pool of the others (``A,B``)."""
    if arm.startswith("alone-"):
        return paths[arm.removeprefix("alone-")]
    held = arm.removeprefix("pool-no-")
    return ",".join(paths[j] for j in JUNIORS if j != held)


def run_pool_study(out: str | Path, settings: PoolStudySettings, print_fn=print, progress: bool = True) -> dict:
    """Run (or finish) the pool study into ``out``; return the aggregate (also OUT/study.json, OUT/study.md)."""
    from ..runtime import DEMO_THREADS, configure_cpu_threads

    out = output_dir(out)
    seeds = record_settings(out, settings, "a pool study")
    if _finished(out, seeds, settings.world):
        print_fn(f"study pool: {out} is complete (seeds {seeds}); nothing to do")
        print_fn((out / "study.md").read_text(encoding="utf-8"))
        return read_json(out / "study.json")
    threads = configure_cpu_threads(fixed=DEMO_THREADS)  # the recipes' fixed count: figures must not follow the load
    t0 = time.perf_counter()
    world = world_paths(settings.world)
    base = str(world.base)
    ev = eval_settings(settings.limit, settings.n, settings.max_tokens, settings.temperature, settings.split)
    mid_run = out / "shared" / "mid"
    steps = [("mid junior (GRPO)", None)] + [("base", None)] + [(a, s) for s in settings.seeds for a in arms()]
    print_fn(f"study pool: world {world.root} ({threads} CPU thread(s)); seeds {settings.seeds}; juniors "
             f"{', '.join(JUNIORS)}; {len(arms())} arms per seed")
    with progress_bar(progress) as bar:
        task = bar.add_task("study pool", total=len(steps))
        if not (mid_run / "summary.json").is_file():
            train_method(settings.preset, "grpo", base, None, mid_run,
                         {"seed": MID_SEED, "max_steps": settings.mid_steps, **settings.mid_train},
                         print_fn=lambda *a, **k: None)
        paths = {"weak": str(world.junior), "base": base, "mid": str(checkpoint(mid_run, "final"))}
        bar.advance(task)
        evaluate_senior(base, out / "shared" / "eval" / "base", paths, ev, skip_done=True, progress=False)
        bar.advance(task)
        for seed in settings.seeds:
            for arm in arms():
                run = out / f"seed{seed}" / "runs" / arm
                if not (run / "summary.json").is_file():
                    train_method(settings.preset, "tandem", base, arm_junior(arm, paths), run,
                                 dict(seed=seed, **settings.train), print_fn=lambda *a, **k: None)
                evaluate_senior(str(checkpoint(run, settings.checkpoint)), out / f"seed{seed}" / "eval" / arm, paths,
                                ev, skip_done=True, progress=False)
                bar.advance(task)
                print_fn(f"study pool: seed {seed}: {arm} done ({time.perf_counter() - t0:.0f} s since start)")
    result = aggregate(out, {**settings.__dict__, "seeds": seeds})
    result["wall_s"], result["threads"] = round(time.perf_counter() - t0, 1), threads
    result["world_models"] = _world_models(settings.world)
    write_json(out / "study.json", result)
    with atomic_write(out / "study.md") as f:
        f.write(to_markdown(result))
    print_fn((out / "study.md").read_text(encoding="utf-8"))
    return result


def _world_models(world: str) -> dict[str, str | None]:
    """The fingerprints of the world's two models the study starts from (its base and its weak junior;
    the mid junior and every arm are trained from them)."""
    from ..fingerprint import model_fingerprint

    w = world_paths(world)
    return {"base": model_fingerprint(str(w.base)), "weak": model_fingerprint(str(w.junior))}


def _finished(out: Path, seeds: list[int], world: str) -> bool:
    """A study whose aggregate already covers every seed asked for, made from the world's models as they
    are now; one made from other models (another install's shipped worlds, say) is refused, naming them,
    rather than printed as if it were this world's."""
    path = out / "study.json"
    if not (path.is_file() and (out / "study.md").is_file()):
        return False
    done = read_json(path)
    if done.get("seeds_done") != seeds:
        return False
    now, then = _world_models(world), done.get("world_models")
    if then is None:  # an aggregate written before it recorded them: redo the checked steps and re-aggregate
        return False
    if then != now:
        raise TandemError(f"{path}: the {world} world's models changed since this study ran (fingerprints "
                          f"{then} -> {now}); its figures are not this world's; use another --out")
    return True


# --------------------------------------------------------------------------- aggregate
def aggregate(out: Path, settings: dict) -> dict:
    """study.json's content: per-seed statistics of every arm (and the base), their mean and SE over seeds,
    and the held-out tests."""
    juniors = list(JUNIORS)
    base_stats, _ = senior_stats(out / "shared" / "eval" / "base", juniors)
    per_seed: dict[str, list[dict]] = {"base": [base_stats]}
    per_problem: dict[str, list[dict]] = {}
    done = []
    for seed in settings["seeds"]:
        d = out / f"seed{seed}" / "eval"
        if not all((d / a / "solo" / "metrics.json").is_file() for a in arms()):
            continue
        done.append(seed)
        for a in arms():
            st, pp = senior_stats(d / a, juniors)
            per_seed.setdefault(a, []).append(st)
            per_problem.setdefault(a, []).append(pp)
    return {"settings": settings, "seeds_done": done, "per_seed": per_seed, "table": reduce(per_seed),
            "tests": held_out_tests(per_problem)}


def _seed_mean(vecs: list[dict]) -> dict:
    """{problem: mean over seeds} on the problems every seed has."""
    common = set.intersection(*(set(v) for v in vecs)) if vecs else set()
    return {p: sum(v[p] for v in vecs) / len(vecs) for p in common}


def held_out_tests(per_problem: dict[str, list[dict]]) -> dict[str, dict]:
    """Each pool against each single-junior arm on handoff to its held-out junior and on solo (module docstring)."""
    from ..eval.measure.metrics import paired_bootstrap, paired_ttest

    tests = {}
    for h in JUNIORS:
        pool = f"pool-no-{h}"
        if pool not in per_problem:
            continue
        for j in JUNIORS:
            alone = f"alone-{j}"
            for stat in (f"handoff_{h}", "solo"):
                cand = _seed_mean([v[stat] for v in per_problem[pool] if stat in v])
                ref = _seed_mean([v[stat] for v in per_problem.get(alone, []) if stat in v])
                common = sorted(set(cand) & set(ref))
                if not common:
                    continue
                t = paired_ttest([cand[p] for p in common], [ref[p] for p in common], alternative="greater")
                boot = paired_bootstrap({tuple(p.split("/", 1)): cand[p] for p in common},
                                        {tuple(p.split("/", 1)): ref[p] for p in common})
                tests[f"{pool} vs {alone}: {stat}"] = {**t, "held_out": h, "n_problems": len(common),
                                                       "bootstrap_macro": boot["macro"]}
    return tests


def _cell(m: dict | None) -> str:
    if not m or m.get("mean") is None:
        return "-"
    return f"{m['mean']:.3f}" + (f" ± {m['se']:.3f}" if m.get("se") is not None else "")


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def to_markdown(res: dict) -> str:
    """OUT/study.md: solo and per-junior handoff pass@1 of every arm (mean ± SE over seeds), then the tests."""
    s = res["settings"]
    cols = [("solo_pass@1", "solo p@1"), *((f"handoff_{j}_pass@1", f"handoff {j} p@1") for j in JUNIORS),
            ("shorthand_share", "shorthand share"), *((f"ce_{j}", f"CE {j}") for j in JUNIORS)]
    lines = [f"# Junior-pool study (seeds finished: {res['seeds_done']})", "",
             f"Mean ± standard error over seeds (base: one evaluation); p@1 on {s['limit']} test problems x {s['n']} "
             "samples; alone-J: trained with junior J; pool-no-H: trained with the other two juniors (H held out).", "",
             "| senior | " + " | ".join(h for _, h in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for arm, t in res["table"].items():
        lines.append(f"| {arm} | " + " | ".join(_cell(t.get(k)) for k, _ in cols) + " |")
    lines += ["", "Paired one-sided t-tests over problems (per-problem pass@1 averaged over seeds; H1: the pool arm > "
              "the single-junior arm), with the paired bootstrap 95% interval of the difference (macro):", "",
              "| test | held out | problems | mean diff | 95% interval | t | p |", "|---|---|---|---|---|---|---|"]
    for name, t in res["tests"].items():
        b = t.get("bootstrap_macro") or {}
        ci = f"[{b['lo']:+.4f}, {b['hi']:+.4f}]" if b.get("lo") is not None else "n/a"
        lines.append(f"| {name} | {t['held_out']} | {t['n_problems']} | {_num(t['mean_diff'], '+.4f')} | {ci} | "
                     f"{_num(t['t'], '.3g')} | {_num(t['p'], '.3g')} |")
    return "\n".join(lines) + "\n"
