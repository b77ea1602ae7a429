"""The drift-world study (issue 6): GRPO vs Tandem vs KL-Reg over seeds and two juniors, one command.

    python -m tandem_rlvr.study drift --seeds 0,1,2 --out runs/drift-study
    tandem study drift --seeds 0,1,2 --out runs/drift-study        (the same)

What it does, per seed s (the RL seed; the world is fixed):

1. trains, with the project's own trainer and the ``tiny-drift`` preset, from the drift
   world's base model: ``grpo`` (senior alone; the junior only enters its KL monitor, so one
   run serves both juniors), ``tandem-self`` / ``klreg-self`` (junior = the base model,
   self-pairing) and ``tandem-weak`` / ``klreg-weak`` (junior = the world's junior: a smaller
   model trained on the word style only, which never saw the shorthand);
2. evaluates every senior's final checkpoint (``--checkpoint best``: the validation-best)
   and, once for all seeds, the base model and the weak junior, with the battery: solo
   pass@k, paragraph round-robin handoff pass@k with each junior, junior legibility (CE, alpha) for each junior, drift against each junior
   (KL, survival, top over-emitted tokens, recovery), ``compare`` tables with paired
   one-sided t-tests against GRPO (per seed and junior), and the style of every solo
   response (``world.style``);
3. aggregates over seeds into ``OUT/study.json`` and ``OUT/study.md``: mean and standard
   error over seeds per variant, plus paired one-sided t-tests over problems of the
   seed-averaged per-problem statistics (Tandem/KL-Reg vs GRPO).

Resumable: every step is skipped when its result file exists (training: ``summary.json``;
evaluation: ``metrics.json``, ``legibility.json``, ``drift.json``, ``compare.json``), and
the evaluation sampler itself resumes inside a run. Rerun the same command to finish an
interrupted study or to add seeds. Layout::

    OUT/shared/eval/{base,junior-weak}/...   OUT/seed<s>/runs/<variant>/
    OUT/seed<s>/eval/<variant>/{solo,handoff-self,handoff-weak,legibility-self,legibility-weak}
    OUT/seed<s>/drift-{self,weak}/           OUT/seed<s>/compare-{self,weak}/
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import TandemError
from .io import atomic_write, write_json
from .rundir import output_dir

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


def _world(s: StudySettings):
    from .world.build import WorldConfig, build_world, named_world

    cfg = WorldConfig.for_tests(**{k: v for k, v in _drift_fields().items()}) if s.quick else named_world(s.world)
    return build_world(cfg, progress=not s.quick)


def _drift_fields() -> dict:
    from .world.build import DRIFT_WORLD

    return dict(DRIFT_WORLD)


def run_study(out: str | Path, settings: StudySettings, print_fn=print) -> dict:
    """Run (or finish) the study into ``out``; return the aggregate (also OUT/study.json)."""
    from .config import EvalConfig, load_train_config
    from .decoding.sampling import SamplingParams
    from .eval.sampler import evaluate
    from .rl.train import train
    from .runtime import configure_cpu_threads

    out = output_dir(out)
    _check_settings(out, settings)
    threads = configure_cpu_threads()
    t0 = time.perf_counter()
    world = _world(settings)
    base, weak = str(world.base), str(world.junior)
    junior_of = {"self": base, "weak": weak}
    sampling = SamplingParams(temperature=settings.temperature, max_new_tokens=settings.max_tokens)
    ev = EvalConfig(benchmarks=["tiny"], split=settings.split, sampling=sampling, template="plain",
                    limit=settings.limit, n=settings.n)
    print_fn(f"study: world {world.root} ({threads} CPU thread(s)); seeds {settings.seeds}; juniors {settings.juniors}")

    def eval_senior(ckpt: str, d: Path) -> None:
        if not _done(d / "solo" / "metrics.json"):
            evaluate(replace(ev, senior=ckpt), d / "solo", progress=False)
        for j in settings.juniors:
            if not _done(d / f"handoff-{j}" / "metrics.json"):
                evaluate(replace(ev, senior=ckpt, junior=junior_of[j], mode="handoff", schedule="paragraph-roundrobin"),
                         d / f"handoff-{j}", progress=False)
            if not _done(d / f"legibility-{j}" / "legibility.json"):
                from .eval.legibility import run_legibility

                run_legibility(d / "solo", junior_of[j], d / f"legibility-{j}", benchmarks=["tiny"],
                               split=settings.split, progress=False)

    shared = out / "shared" / "eval"
    print_fn("study: base model and weak junior (once for all seeds)")
    eval_senior(base, shared / "base")
    if "weak" in settings.juniors and not _done(shared / "junior-weak" / "solo" / "metrics.json"):
        evaluate(replace(ev, senior=weak), shared / "junior-weak" / "solo", progress=False)

    for seed in settings.seeds:
        sd = out / f"seed{seed}"
        for v in _variants(settings.juniors):
            run = sd / "runs" / v
            method, _, j = v.partition("-")
            if not _done(run / "summary.json"):
                t1 = time.perf_counter()
                print_fn(f"study: seed {seed}: training {v}")
                over = dict(method=method, senior=base, junior=junior_of[j] if j else None, seed=seed,
                            output_dir=str(run), **settings.train)
                train(load_train_config(settings.preset, overrides=over), print_fn=lambda *a, **k: None)
                print_fn(f"study: seed {seed}: {v} trained in {time.perf_counter() - t1:.0f} s")
            ckpt = run / settings.checkpoint if (run / settings.checkpoint).is_dir() else run / "final"
            t1 = time.perf_counter()
            eval_senior(str(ckpt), sd / "eval" / v)
            print_fn(f"study: seed {seed}: {v} evaluated ({time.perf_counter() - t1:.0f} s)")
        for j in settings.juniors:
            _seed_battery(sd, shared, j, settings.juniors)
        print_fn(f"study: seed {seed} done ({time.perf_counter() - t0:.0f} s since start)")

    result = aggregate(out, settings)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    write_json(out / "study.json", result)
    with atomic_write(out / "study.md") as f:
        f.write(to_markdown(result))
    print_fn((out / "study.md").read_text(encoding="utf-8"))
    return result


def _seed_battery(sd: Path, shared: Path, j: str, juniors: list[str]) -> None:
    """Drift against junior ``j`` and the comparison tables (paired t-tests vs GRPO) of one seed."""
    from .eval.compare import run_compare
    from .eval.drift import run_drift

    names = {"grpo": sd / "eval" / "grpo", "tandem": sd / "eval" / f"tandem-{j}", "klreg": sd / "eval" / f"klreg-{j}"}
    jsamples = shared / "base" / "solo" if j == "self" else shared / "junior-weak" / "solo"
    seniors = {n: d / "solo" for n, d in names.items()}
    if j != "self":
        seniors = {"base": shared / "base" / "solo", **seniors}
    if not _done(sd / f"drift-{j}" / "drift.json"):
        run_drift(jsamples, seniors, sd / f"drift-{j}", reference="grpo", candidate="tandem")
    if not _done(sd / f"compare-{j}" / "compare.json"):
        all_names = {"base": shared / "base", **names}
        run_compare([], sd / f"compare-{j}", solo=[f"{n}={d / 'solo'}" for n, d in all_names.items()],
                    handoff=[f"{n}:handoff-{k}={d / f'handoff-{k}'}" for n, d in all_names.items() for k in juniors],
                    legibility=[f"{n}={d / f'legibility-{j}'}" for n, d in all_names.items()],
                    drift=str(sd / f"drift-{j}"), baseline="grpo")


def _check_settings(out: Path, s: StudySettings) -> None:
    path = out / "settings.json"
    mine = {k: v for k, v in s.__dict__.items() if k != "seeds"}
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        old_cmp = {k: v for k, v in old.items() if k != "seeds"}
        if old_cmp != mine:
            raise TandemError(f"{out} holds a study with other settings ({path}); use another --out")
        mine["seeds"] = sorted(set(old.get("seeds", [])) | set(s.seeds))
    else:
        mine["seeds"] = list(s.seeds)
    write_json(path, mine)


# --------------------------------------------------------------------------- aggregation
def _read_rows(run_dir: Path) -> list[dict]:
    from .eval.sampler import read_samples

    return read_samples(run_dir / "samples.jsonl")


def _per_problem(rows: list[dict]) -> dict[str, float]:
    acc: dict[str, list[float]] = {}
    for r in rows:
        acc.setdefault(f"{r['benchmark']}/{r['problem_id']}", []).append(float(r["correct"]))
    return {k: sum(v) / len(v) for k, v in acc.items()}


def _macro(path: Path, key: str) -> float | None:
    if not path.is_file():
        return None
    m = json.loads(path.read_text(encoding="utf-8"))["macro"]
    return m[key]["mean"] if key in m else None


def senior_stats(d: Path, juniors: list[str]) -> tuple[dict, dict]:
    """One evaluated senior: scalar statistics, and per-problem vectors for the t-tests."""
    from .world.style import style_summary

    stats, per = {}, {}
    rows = _read_rows(d / "solo")
    sty = style_summary([r["response"] for r in rows], [r["correct"] for r in rows])
    stats.update({"solo_pass@1": _macro(d / "solo" / "metrics.json", "pass@1"),
                  "solo_pass@4": _macro(d / "solo" / "metrics.json", "pass@4"),
                  "shorthand_share": sty["shorthand_share"], "frac_shorthand": sty["frac_shorthand"],
                  "frac_word": sty["frac_word"], "frac_mixed": sty["frac_mixed"], "frac_other": sty["frac_other"],
                  "acc_word": sty["acc_word"], "acc_shorthand": sty["acc_shorthand"],
                  "solo_tokens": sum(r["tokens"] for r in rows) / max(1, len(rows))})
    per["solo"] = _per_problem(rows)
    for j in juniors:
        h = d / f"handoff-{j}"
        if (h / "metrics.json").is_file():
            stats[f"handoff_{j}_pass@1"] = _macro(h / "metrics.json", "pass@1")
            stats[f"handoff_{j}_pass@4"] = _macro(h / "metrics.json", "pass@4")
            per[f"handoff_{j}"] = _per_problem(_read_rows(h))
        lg = d / f"legibility-{j}" / "legibility.json"
        if lg.is_file():
            summ = json.loads(lg.read_text(encoding="utf-8"))["summary"]
            stats[f"ce_{j}"] = summ["ce"]["macro"]["mean"]
            stats[f"alpha_{j}"] = summ["alpha"]["macro"]["mean"]
            with open(d / f"legibility-{j}" / "per_problem.jsonl", encoding="utf-8") as f:
                pp = [json.loads(x) for x in f if x.strip()]
            per[f"ce_{j}"] = {f"{p['benchmark']}/{p['problem_id']}": p["ce"] for p in pp if p.get("ce") is not None}
    return stats, per


def _mean_se(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return {"mean": None, "se": None, "n": 0}
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else None
    return {"mean": m, "se": se, "n": len(xs)}


def aggregate(out: Path, s: StudySettings) -> dict:
    """Mean and SE over seeds per variant; paired one-sided t-tests over seed-averaged problems."""
    from .eval.metrics import paired_ttest

    seeds = json.loads((out / "settings.json").read_text(encoding="utf-8"))["seeds"]
    shared = out / "shared" / "eval"
    per_seed: dict[str, list[dict]] = {}
    per_problem: dict[str, list[dict]] = {}
    base_stats, base_pp = senior_stats(shared / "base", s.juniors)
    per_seed["base"], per_problem["base"] = [base_stats], [base_pp]
    done_seeds = []
    for seed in seeds:
        sd = out / f"seed{seed}"
        if not all((sd / "eval" / v / "solo" / "metrics.json").is_file() for v in _variants(s.juniors)):
            continue
        done_seeds.append(seed)
        for v in _variants(s.juniors):
            st, pp = senior_stats(sd / "eval" / v, s.juniors)
            for j in s.juniors:
                dj = sd / f"drift-{j}" / "drift.json"
                name = v.split("-")[0]
                if dj.is_file() and (v == "grpo" or v.endswith(j)):
                    dr = json.loads(dj.read_text(encoding="utf-8"))
                    st[f"kl_to_{j}"] = dr["models"].get(name, {}).get("kl_to_junior")
                    if v.startswith("tandem") and dr.get("recovery"):
                        st[f"recovery_{j}"] = dr["recovery"].get("share_moved_back", dr["recovery"].get("share"))
            runlog = sd / "runs" / v / "summary.json"
            if runlog.is_file():
                summ = json.loads(runlog.read_text(encoding="utf-8"))
                st["best_step"] = (summ.get("best") or {}).get("step") if isinstance(summ.get("best"), dict) else None
                st["train_wall_s"] = summ.get("wall_total_s")
            per_seed.setdefault(v, []).append(st)
            per_problem.setdefault(v, []).append(pp)
    keys = sorted({k for rows in per_seed.values() for r in rows for k, v in r.items() if isinstance(v, (int, float))})
    table = {v: {k: _mean_se([r.get(k) for r in rows]) for k in keys} for v, rows in per_seed.items()}
    tests = {}
    if "grpo" in per_problem:
        def avg(vecs: list[dict]) -> dict:
            common = set.intersection(*(set(x) for x in vecs)) if vecs else set()
            return {p: sum(x[p] for x in vecs) / len(vecs) for p in common}

        for v in per_problem:
            if v in ("grpo", "base"):
                continue
            for stat in sorted(set(per_problem[v][0]) & set(per_problem["grpo"][0])):
                cand = avg([pp[stat] for pp in per_problem[v]])
                ref = avg([pp[stat] for pp in per_problem["grpo"]])
                common = sorted(set(cand) & set(ref))
                if len(common) < 2:
                    continue
                alt = "less" if stat.startswith("ce_") else "greater"
                t = paired_ttest([cand[p] for p in common], [ref[p] for p in common], alternative=alt)
                tests[f"{v} vs grpo: {stat}"] = {"alternative": alt, "n_problems": len(common),
                                                 "mean_diff": sum(cand[p] - ref[p] for p in common) / len(common), **t}
    top = _top_tokens(out, done_seeds, s.juniors)
    return {"settings": {**s.__dict__, "seeds": seeds}, "seeds_done": done_seeds, "per_seed": per_seed,
            "table": table, "tests": tests, "top_over_emitted": top}


def _top_tokens(out: Path, seeds: list[int], juniors: list[str], rows: int = 10) -> dict:
    """The tokens GRPO over-emits most against each junior (first finished seed), with counts."""
    res = {}
    for j in juniors:
        for seed in seeds:
            p = out / f"seed{seed}" / f"drift-{j}" / "drift.json"
            if p.is_file():
                dr = json.loads(p.read_text(encoding="utf-8"))
                # Tokens GRPO emitted at least 10 times: with add-one smoothing, a token seen once
                # by GRPO and never by the junior otherwise tops the list.
                frequent = [r for r in dr["over_emitted"]["rows"] if r["counts"].get("grpo", 0) >= 10]
                rec = {k: v for k, v in (dr.get("recovery") or {}).items() if not isinstance(v, list)}
                res[j] = {"seed": seed, "rows": frequent[:rows], "recovery": rec}
                break
    return res


COLUMNS = [("solo_pass@1", "solo p@1"), ("solo_pass@4", "solo p@4"), ("handoff_self_pass@1", "handoff self p@1"),
           ("handoff_weak_pass@1", "handoff weak p@1"), ("shorthand_share", "shorthand share"),
           ("acc_word", "acc (word)"), ("acc_shorthand", "acc (shorthand)"), ("kl_to_self", "KL to base"),
           ("kl_to_weak", "KL to weak"), ("ce_self", "CE base"), ("alpha_self", "alpha base"),
           ("ce_weak", "CE weak"), ("alpha_weak", "alpha weak")]


def _cell(m: dict | None) -> str:
    if not m or m.get("mean") is None:
        return "-"
    return f"{m['mean']:.3f}" + (f" ± {m['se']:.3f}" if m.get("se") is not None else "")


def to_markdown(res: dict) -> str:
    lines = [f"# Drift-world study (seeds finished: {res['seeds_done']})", "",
             "Mean ± standard error over seeds (base: one evaluation). p@k: pass@k on "
             f"{res['settings']['limit']} test problems x {res['settings']['n']} samples.", ""]
    cols = [c for c in COLUMNS if any(c[0] in t for t in res["table"].values())]
    lines.append("| senior | " + " | ".join(h for _, h in cols) + " |")
    lines.append("|---" * (len(cols) + 1) + "|")
    for v, t in res["table"].items():
        lines.append(f"| {v} | " + " | ".join(_cell(t.get(k)) for k, _ in cols) + " |")
    lines += ["", "Paired one-sided t-tests over problems (per-problem statistic averaged over seeds; "
              "candidate > GRPO, CE: candidate < GRPO):", "", "| test | mean diff | t | p |", "|---|---|---|---|"]
    for name, t in res["tests"].items():
        stat = name.split(": ")[-1]
        if stat.startswith("ce_") and not name.split(" ")[0].endswith(stat[3:]):
            continue  # CE against the other junior: in study.json
        lines.append(f"| {name} | {t['mean_diff']:+.4f} | {_fmt(t.get('t'))} | {_fmt(t.get('p'))} |")
    for j, top in res["top_over_emitted"].items():
        lines += ["", f"Top tokens GRPO over-emits vs the {j} junior (seed {top['seed']}; GRPO count >= 10; "
                  "'junior' = the junior's solo samples):", "",
                  "| token | counts | log-ratio grpo |", "|---|---|---|"]
        for r in top["rows"]:
            lines.append(f"| {json.dumps(r.get('token'))} | {r['counts']} | {r['log_ratio'].get('grpo', float('nan')):.2f} |")
    return "\n".join(lines) + "\n"


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


# --------------------------------------------------------------------------- command line
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", choices=["drift"], help="which study (drift: the drift world, docs/drift_world.md)")
    p.add_argument("--seeds", default="0,1,2", help="RL seeds, comma-separated (default 0,1,2)")
    p.add_argument("--out", required=True, help="study directory (rerun to resume or add seeds)")
    p.add_argument("--juniors", default="self,weak", help="self (the base), weak (the world's small word-only junior) or both")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the preset's)")
    p.add_argument("--limit", type=int, default=200, help="test problems per evaluation (default 200)")
    p.add_argument("--n", type=int, default=4, help="samples per problem (default 4)")
    p.add_argument("--checkpoint", default="final", choices=["final", "best"],
                   help="evaluate each run's final (default) or validation-best checkpoint")
    p.add_argument("--quick", action="store_true", help="seconds-long smoke version on a throwaway world")


def settings_from_args(a) -> StudySettings:
    try:
        seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    except ValueError:
        raise TandemError(f"--seeds must be comma-separated integers, got {a.seeds!r}") from None
    juniors = [x.strip() for x in a.juniors.split(",") if x.strip()]
    bad = [x for x in juniors if x not in JUNIORS]
    if bad or not juniors or not seeds:
        raise TandemError(f"--juniors must name some of {', '.join(JUNIORS)} and --seeds some seeds")
    train = {"max_steps": a.steps} if a.steps else {}
    if a.quick:
        train = dict(max_steps=2, eval_every=1, save_every=1, val_size=8, limit=200, max_new_tokens=48)
        return StudySettings(seeds=seeds, juniors=juniors, train=train, limit=4, n=2, max_tokens=48, quick=True,
                             checkpoint=a.checkpoint)
    return StudySettings(seeds=seeds, juniors=juniors, train=train, limit=a.limit, n=a.n, checkpoint=a.checkpoint)


def register(sub, parser_class) -> None:
    """``tandem study drift ...`` (the same as ``python -m tandem_rlvr.study drift ...``)."""
    p = sub.add_parser("study", help="multi-seed studies: drift = GRPO vs Tandem vs KL-Reg on the drift world")
    add_arguments(p)
    p.set_defaults(fn=lambda a: run_study(a.out, settings_from_args(a)))


def build_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tandem_rlvr.study", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = build_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        run_study(a.out, settings_from_args(a))
    except TandemError as e:
        print(f"study: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
