"""``tandem demo``: the whole pipeline on a built-in tiny world, on a laptop CPU.

Two worlds (``--world``):

- ``tiny-drift`` (default): the drift world (docs/drift_world.md), where the paper's claim
  can show. Its base model writes two styles, legible words and a compact shorthand that
  the senior alone gets right more often; the junior is a smaller model that learned the
  word style only. All three methods pair the senior with that weak junior.
- ``tiny``: the single-style world, every method self-paired with the base (the paper's
  default pairing). Nothing there lets GRPO drift, so the three seniors end alike.
- ``tiny-code`` (``--world code``): the code world (``world.code``, docs/tasks.md): the stories
  answered by Python functions graded by unit tests in the sandbox, the preset's reward
  ``correct + 0.2 x length``, every method paired with the world's junior (its half-way
  checkpoint). Step 3 adds the forced-junior probe of each senior's correct solo samples
  (``eval.sample.probe``, at most ``PROBE_LIMIT``), and the summary a table of each reward term's
  per-step mean and the senior share over the first and last ``TERM_STEPS`` training steps.

1. Load the world as the package ships it (``world/shipped.py``; never a build).
2. Train three seniors from the base: vanilla GRPO, Tandem RLVR (word-level handoffs,
   p = 0.5, K = 32) and KL-Reg (beta = 1e-3 to the junior).
3. Evaluate the base, each senior's final checkpoint in the drift world (drift is what
   training does to the senior, every method is measured after the same steps, and Tandem's
   validation, with the junior, is no yardstick for GRPO's, alone, and where a run's validation
   peaks at step 0 its "best" is the base itself; ``summary.md`` and the report say which checkpoint,
   with each run's best step) or its validation-best one in the tiny world, and, in the drift
   world, the junior alone: solo pass@k and
   paragraph round-robin handoff pass@k with the junior, on held-out test problems, the
   junior legibility of each solo run, and (drift world) the share of shorthand paragraphs
   in the solo responses.
4. Write training curves side by side (``curves.png``, in the report's per-method colours),
   a summary table (``summary.md``/``summary.json``; in the drift world with a note, from
   the world's slip rates and this run's numbers, on what the world builds in: the shorthand
   is the more accurate style alone, so anchoring Tandem to the legible style costs solo
   accuracy here, a cost the paper does not report, and one on the checkpoints evaluated),
   then run the rest of the battery (drift against the junior's own samples, comparison tables
   with paired t-tests against GRPO) and write the HTML report (``report/report.html``, which
   opens with a headline table against the base model and the same notes).

Threads: the demo runs on ``runtime.DEMO_THREADS`` (1) torch thread unless ``$TANDEM_THREADS``
is set, so its figures do not depend on the machine's load (summary.json records the count).

Training, evaluation and the battery are ``recipes.pipeline``'s, shared with the study.

``--quick`` runs a short version (two training steps, a few problems) on the same shipped world:
a smoke test of the wiring, its numbers mean nothing.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ..errors import TandemError
from ..eval.run_files import read_run
from ..io import atomic_write, write_json
from ..runtime import DEMO_THREADS, configure_cpu_threads
from ..outdir import output_dir
from .demo_headline import headline
from .pipeline import (METHODS, QUICK_TRAIN, battery, checkpoint, eval_settings, evaluate_senior, method_config,
                       world_paths)

log = logging.getLogger("tandem_rlvr")

WORLDS = ("tiny-drift", "tiny", "tiny-code")
WORLD_ALIASES = {"code": "tiny-code"}  # tandem demo --world code
PROBE_LIMIT = 300  # correct solo samples per senior the code world's forced-junior probe takes
TERM_STEPS = 10  # rollout steps at each end of training the code world's reward-term table averages


def _settings(quick: bool, world: str) -> dict:
    if quick:
        return dict(train=QUICK_TRAIN, eval=dict(limit=6, n=2), max_tokens=96)
    if world == "tiny-drift":  # the drift study's evaluation, on more problems
        return dict(train=dict(), eval=dict(limit=500, n=4), max_tokens=96)
    if world == "tiny-code":  # every sample's program runs in the sandbox
        return dict(train=dict(), eval=dict(limit=500, n=2), max_tokens=128)
    return dict(train=dict(), eval=dict(limit=1000, n=2), max_tokens=96)


def plot_curves(runs: dict[str, Path], out: Path) -> Path:
    """Reward, response length, senior share, validation accuracy, KL to the junior and
    wall-clock per step, one line per method in the report's colours (``eval.report.html.training_figure``)."""
    from ..eval.report.html import training_figure
    from ..rl.callbacks import read_log

    fig = training_figure({method: read_log(run / "log.jsonl") for method, run in runs.items()})
    path = out / "curves.png"
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    return path


def drift_note(world_config: dict, results: dict) -> str:
    """Two plain sentences on what the drift world builds in, from the world's slip rates and
    this run's solo pass@1 and shorthand shares (shown beside the solo table)."""
    word, short = world_config["slip_prob"], world_config["shorthand_slip_prob"]
    p1 = {n: r["solo"]["pass@1"]["mean"] for n, r in results.items() if "pass@1" in r.get("solo", {})}
    sh = {n: r.get("shorthand_share") for n, r in results.items()}
    first = (f"In this drift world the compact shorthand is the more accurate style for the senior alone, by "
             f"construction: the base model's shorthand training solutions slip {short:.0%} of the time, its word "
             f"solutions {word:.0%}.")
    if not {"grpo", "tandem"} <= set(p1):
        return first
    shares = (f" (shorthand share of solo responses: GRPO {sh['grpo']:.2f}, Tandem {sh['tandem']:.2f}"
              + (f", base {sh['base']:.2f}" if sh.get("base") is not None else "") + ")"
              if sh.get("grpo") is not None and sh.get("tandem") is not None else "")
    base = f", base {p1['base']:.3f}" if "base" in p1 else ""
    nums = f"solo pass@1 GRPO {p1['grpo']:.3f}, Tandem {p1['tandem']:.3f}{base}"
    if p1["tandem"] < p1["grpo"]:
        second = (f" So GRPO's drift toward it{shares} buys solo accuracy, and anchoring Tandem RLVR to the legible "
                  f"style costs solo accuracy here ({nums}); the paper reports no such cost, because there GRPO's "
                  f"drift did not buy accuracy.")
    else:
        second = (f" Here anchoring Tandem RLVR to the legible style{shares} did not cost solo accuracy ({nums}).")
    return first + second


def checkpoint_note(ckpt: str, trained: dict[str, dict], runs: dict[str, Path]) -> str:
    """Which checkpoint of each training run the demo evaluates and why, from the runs' summaries
    (``{method: rl.train's summary}``: steps, best validation step) and logs (how each validated)."""
    from ..eval.report.html import measured_by
    from ..rl.callbacks import read_log

    best = {m: t["best"]["step"] for m, t in trained.items() if t.get("best")}
    steps = sorted({t["steps"] for t in trained.values()})
    at = ", ".join(f"{m} step {b}" for m, b in best.items())
    how = measured_by({m: read_log(r / "log.jsonl") for m, r in runs.items()}, "validation accuracy")
    how = f" (validation measured {how})" if how else ""
    if ckpt == "final":
        why = ("the base model itself for every run, so 'best' would evaluate the base again"
               if best and set(best.values()) == {0} else "the drift world asks what training does to the senior")
        return (f"The trained seniors are each run's final checkpoint (step {'/'.join(map(str, steps))}), not the "
                f"validation-best one: validation accuracy peaked at {at}{how}; {why}.")
    return (f"The trained seniors are each run's validation-best checkpoint: {at} of {'/'.join(map(str, steps))}"
            f"{how}; a best at step 0 is the base model itself.")


def run_demo(out: str | Path = "demo_out", quick: bool = False, print_fn=print, world: str = "tiny-drift") -> dict:
    """Run the demo into ``out`` (see the module docstring); return the summary."""
    from ..rl.train import train

    t0 = time.perf_counter()
    world = WORLD_ALIASES.get(world, world)
    if world not in WORLDS:
        raise TandemError(f"unknown demo world {world!r}; valid: {', '.join([*WORLDS, *WORLD_ALIASES])}")
    out = output_dir(out, create=False)
    threads = configure_cpu_threads(fixed=DEMO_THREADS)  # not from the load: the figures must reproduce
    drift, code = world == "tiny-drift", world == "tiny-code"
    s = _settings(quick, world)
    built = world_paths(world)
    base = str(built.base)
    junior = str(built.junior) if drift or code else base
    runs = {method: out / "runs" / method for method in METHODS}
    cfgs = {m: method_config(world, m, base, junior, runs[m], s["train"]) for m in METHODS}  # every clash before work
    print_fn(f"[1/4] {world} world ({'quick' if quick else 'default'}; {threads} CPU thread(s))")

    trained = {}
    for i, method in enumerate(METHODS, 1):
        print_fn(f"[2/4] training {method} ({i}/{len(METHODS)})")
        trained[method] = train(cfgs[method], print_fn=print_fn)

    print_fn(f"[3/4] evaluating base{', junior' if drift else ''} and seniors: solo and paragraph-handoff "
             "pass@k on held-out problems")
    ckpt = "final" if drift else "best"
    seniors = {"base": base, **{m: str(checkpoint(r, ckpt)) for m, r in runs.items()}}
    ev = eval_settings(**s["eval"], max_tokens=s["max_tokens"],
                       **(dict(task="code", benchmark="tiny-code") if code else {}))
    results = {}
    if drift or code:  # the junior alone: its accuracy, and the reference samples of the drift metrics
        solo = evaluate_senior(junior, out / "eval" / "junior", {}, ev)["solo"]
        results["junior"] = {"solo": solo["macro"], **(_style(out / "eval" / "junior" / "solo") if drift else {})}
    for name, path in seniors.items():
        m = evaluate_senior(path, out / "eval" / name, {"": junior}, ev)
        results[name] = {"solo": m["solo"]["macro"], "handoff": m["handoff"]["macro"],
                         "handoff_senior_share": m["handoff"]["senior_share"]}
        if drift:
            results[name].update(_style(out / "eval" / name / "solo"))
    if code:
        print_fn("[3/4] forced-junior probe of each senior's correct solo samples")
        for name in seniors:
            results[name]["probe"] = _probe(out / "eval" / name, junior, 8 if quick else PROBE_LIMIT)

    print_fn("[4/4] curves, summary and report")
    curves = plot_curves(runs, out)
    summary = {"wall_s": time.perf_counter() - t0, "quick": quick, "world_name": world, "world": str(built.root),
               "junior": junior, "checkpoint": ckpt, "threads": threads, "world_accuracy": built.meta.get("accuracy"),
               "curves": str(curves), "results": results}
    notes = [checkpoint_note(ckpt, trained, runs)] + ([drift_note(built.meta["config"], results)] if drift else [])
    if code:
        summary["training_terms"] = reward_terms_table(runs)
        notes.append(code_note())
    drift_ref = out / "eval" / "junior" / "solo" if drift or code else None
    battery_tables(out, list(seniors), junior_samples=drift_ref)
    best_steps = {m: t["best"]["step"] for m, t in trained.items() if t.get("best")} if ckpt == "best" else None
    summary["shows"] = headline(out, results, quick, best_steps)  # the summary's first lines: what this run shows
    summary["notes"] = notes
    _write_summary(out, summary)
    summary["report"] = str(report_of(out, runs, [*summary["shows"], *notes]))
    summary["wall_s"] = time.perf_counter() - t0
    write_json(out / "summary.json", summary)
    print_fn((out / "summary.md").read_text(encoding="utf-8"))
    print_fn(f"demo finished in {summary['wall_s']:.0f} s; outputs in {out}")
    return summary


def _probe(eval_dir: Path, junior: str, limit: int) -> dict | None:
    """The forced-junior probe (``eval.sample.probe``) of a senior's correct solo samples; None when it has none."""
    from ..eval.sample.probe import ProbeSettings, run_probe
    from ..eval.run_files import read_run

    if not any(r["correct"] for r in read_run(eval_dir / "solo").rows):
        return None
    p = run_probe(ProbeSettings(samples=str(eval_dir / "solo"), junior=junior, limit=limit), eval_dir / "probe")
    return {"probed": p["overall"]["probed"], "success_rate": p["overall"]["success_rate"],
            "ci95": p["overall"]["ci95"], "no_divergence": p["no_divergence"]}


def reward_terms_table(runs: dict[str, Path]) -> dict:
    """Per method, each reward term's per-step mean (``reward/NAME``) and the senior share, averaged over the
    first and the last ``TERM_STEPS`` rollout steps of its log."""
    from ..rl.callbacks import read_log

    out = {}
    for method, run in runs.items():
        rows = [r for r in read_log(run / "log.jsonl") if "reward/mean" in r]
        keys = sorted({k for r in rows for k in r if k.startswith("reward/") and k != "reward/std"})
        keys.append("senior/token_share")
        avg = lambda rs, k: (sum(r[k] for r in rs if k in r) / n) if (n := sum(k in r for r in rs)) else None  # noqa: E731
        out[method] = {"steps": len(rows), **{f"first/{k}": avg(rows[:TERM_STEPS], k) for k in keys},
                       **{f"last/{k}": avg(rows[-TERM_STEPS:], k) for k in keys}}
    return out


def code_note() -> str:
    return ("Code world: a sample is correct when its function passes all three unit tests, run in the sandbox "
            "(tandem_rlvr.sandbox); the probe forces the junior's greedy token at the first position where the two "
            "models' greedy tokens differ in a correct solo sample, lets the senior finish and re-grades "
            "(probe kept = the share still correct, with a bootstrap 95% interval; probed of correct = the samples "
            "whose two greedy paths differ somewhere, of the correct solo samples taken).")


def _style(solo_dir: Path) -> dict:
    """Drift world: how much of a model's solo output is in the shorthand style."""
    from ..world.style import style_summary

    sty = style_summary([r["response"] for r in read_run(solo_dir).rows])
    return {"shorthand_share": sty["shorthand_share"]}


def _write_summary(out: Path, summary: dict) -> None:
    drift = summary.get("world_name") == "tiny-drift"
    code = summary.get("world_name") == "tiny-code"
    head = "| senior | solo pass@1 | solo pass@2 | handoff pass@1 | handoff senior share |"
    extra = " shorthand share |" if drift else " probe kept (95% CI); probed of correct |" if code else ""
    lines = [head + extra, "|---|---|---|---|---|" + ("---|" if extra else "")]
    cell = lambda m, k: f"{m[k]['mean']:.3f} ± {m[k]['se']:.3f}" if k in m else "-"  # noqa: E731
    for name, r in summary["results"].items():
        hand = r.get("handoff", {})
        share = f"{r['handoff_senior_share']['mean']:.2f}" if "handoff_senior_share" in r else "-"
        line = (f"| {name} | {cell(r['solo'], 'pass@1')} | {cell(r['solo'], 'pass@2')} | {cell(hand, 'pass@1')} "
                f"| {share} |")
        if drift:
            sh = r.get("shorthand_share")
            line += f" {sh:.2f} |" if sh is not None else " - |"
        if code:
            pr = r.get("probe")
            line += (f" {pr['success_rate']:.3f} [{pr['ci95'][0]:.3f}, {pr['ci95'][1]:.3f}]; {pr['probed']} of "
                     f"{pr['probed'] + pr['no_divergence']} |" if pr and pr.get("probed") else " - |")
        lines.append(line)
    if code and summary.get("training_terms"):
        lines += ["", _terms_markdown(summary["training_terms"])]
    from ..models import model_name
    from ..runtime import invocation

    notes = "".join(f"\n{n}\n" for n in summary.get("notes", []))
    argv = invocation()["argv"]
    cmd = " ".join([Path(argv[0]).name, *argv[1:]])
    shows = "".join(f"{line}\n" for line in summary.get("shows", []))
    text = (shows + ("\n" if shows else "")
            + f"{summary.get('world_name', 'tiny')} world, junior {model_name(summary.get('junior'))}\n\n"
            + "\n".join(lines) + "\n" + notes
            + f"\nProvenance: junior {summary.get('junior', '-')}, world {summary.get('world', '-')}, command `{cmd}`; "
              "full model paths, sampling settings and commands per run in report/report.html.\n")
    with atomic_write(out / "summary.md") as f:
        f.write(text)


def _terms_markdown(terms: dict) -> str:
    """The training-rollout table of the code world: each reward term and the senior share, first vs last steps."""
    keys = sorted({k.split("/", 1)[1] for t in terms.values() for k in t if k.startswith("last/")})
    head = "| method | " + " | ".join(f"{k} (first / last {TERM_STEPS} steps)" for k in keys) + " |"
    rows = [head, "|---|" + "---|" * len(keys)]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for method, t in terms.items():
        rows.append(f"| {method} | " + " | ".join(f"{fmt(t.get('first/' + k))} / {fmt(t.get('last/' + k))}"
                                                    for k in keys) + " |")
    return "Training rollouts (per-step means from each run's log.jsonl):\n\n" + "\n".join(rows)


def report_of(out: Path, runs: dict[str, Path], notes: list[str] = ()) -> Path:
    """The HTML report of the demo's comparison tables and training logs, opening with ``notes``."""
    from ..eval.report.html import run_report

    return run_report(out / "report", compare_dir=str(out / "compare"),
                      train_logs=[f"{m}={r / 'log.jsonl'}" for m, r in runs.items()], notes=notes)


def battery_tables(out: Path, names: list[str], junior_samples: Path | None = None) -> None:
    """Drift and comparison tables over the demo's eval dirs.

    Drift compares each senior with ``junior_samples`` (a solo eval dir of the junior; default
    the base's, which is the junior under self-pairing)."""
    ev = out / "eval"
    trained = [n for n in names if n != "base"]
    compared = names if junior_samples is not None else trained  # the base drifts from a weaker junior too
    battery({n: ev / n for n in names}, ["handoff"], "legibility", junior_samples or ev / "base" / "solo", compared,
            ev / "drift", out / "compare", baseline="grpo" if "grpo" in names else None)
