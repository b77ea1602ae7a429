"""``tandem demo``: the whole pipeline on the built-in tiny world, on a laptop CPU.

1. Build (or reuse) the tiny world: tokenizer, base model, weaker junior.
2. Train three seniors from the base, self-paired with it: vanilla GRPO, Tandem RLVR
   (word-level handoffs, p = 0.5, K = 32) and KL-Reg (beta = 1e-3 to the junior).
3. Evaluate the base and each senior's best checkpoint: solo pass@k and paragraph
   round-robin handoff pass@k with the base as junior, on held-out test problems.
4. Write training curves side by side (``curves.png``), a summary table
   (``summary.md``/``summary.json``), then run the rest of the battery (junior
   legibility, drift against the base, comparison tables with paired t-tests against
   GRPO) and write the HTML report (``report/report.html``).

``--quick`` runs a seconds-long version on a throwaway world (a smoke test of the wiring;
its numbers mean nothing).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .config import load_train_config
from .decoding.sampling import SamplingParams
from .errors import TandemError
from .io import atomic_write, write_json
from .runtime import configure_cpu_threads

log = logging.getLogger("tandem_rlvr")

METHODS = ("grpo", "tandem", "klreg")


def _settings(quick: bool) -> dict:
    if quick:
        return dict(train=dict(max_steps=2, eval_every=1, save_every=1, val_size=8, limit=200, max_new_tokens=48),
                    eval=dict(limit=6, n=2), max_tokens=48)
    return dict(train=dict(), eval=dict(limit=1000, n=2), max_tokens=96)


def _senior_checkpoint(run_dir: Path) -> Path:
    return run_dir / "best" if (run_dir / "best").is_dir() else run_dir / "final"


def plot_curves(runs: dict[str, Path], out: Path) -> Path:
    """Reward, validation accuracy, senior share and KL to the junior per step, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .rl.callbacks import read_log

    panels = [("reward/mean", "training reward"), ("val/accuracy", "validation accuracy"),
              ("senior/token_share", "senior token share"), ("kl/junior", "KL(senior || junior)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for method, run in runs.items():
        rows = read_log(run / "log.jsonl")
        for ax, (key, title) in zip(axes, panels):
            pts = [(r["step"], r[key]) for r in rows if key in r]
            if pts:
                ax.plot(*zip(*pts), label=method, marker="." if key == "val/accuracy" else None)
            ax.set_title(title)
            ax.set_xlabel("step")
    axes[0].legend()
    fig.tight_layout()
    path = out / "curves.png"
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return path


def run_demo(out: str | Path = "demo_out", quick: bool = False, print_fn=print) -> dict:
    from .eval.sampler import evaluate
    from .rl.train import train
    from .world.build import WorldConfig, build_world

    t0 = time.perf_counter()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TandemError(f"--out {out} exists and is not a directory")
    threads = configure_cpu_threads()
    s = _settings(quick)
    print_fn(f"[1/4] tiny world ({'quick' if quick else 'default'}; {threads} CPU thread(s))")
    world = build_world(WorldConfig.for_tests() if quick else WorldConfig())
    base = str(world.senior)

    runs = {}
    for i, method in enumerate(METHODS, 1):
        print_fn(f"[2/4] training {method} ({i}/{len(METHODS)})")
        cfg = load_train_config("tiny", overrides=dict(method=method, senior=base, junior=base,
                                                       output_dir=str(out / "runs" / method), **s["train"]))
        train(cfg, print_fn=print_fn)
        runs[method] = out / "runs" / method

    print_fn("[3/4] evaluating base and seniors: solo and paragraph-handoff pass@k on held-out problems")
    sampling = SamplingParams(temperature=1.0, max_new_tokens=s["max_tokens"])
    seniors = {"base": base, **{m: str(_senior_checkpoint(r)) for m, r in runs.items()}}
    results = {}
    for name, path in seniors.items():
        solo = evaluate(path, None, out / "eval" / name / "solo", mode="solo", benchmarks=["tiny"], split="test",
                        sampling=sampling, template="plain", **s["eval"])
        hand = evaluate(path, base, out / "eval" / name / "handoff", mode="handoff", schedule="paragraph-roundrobin",
                        benchmarks=["tiny"], split="test", sampling=sampling, template="plain", **s["eval"])
        results[name] = {"solo": solo["macro"], "handoff": hand["macro"], "handoff_senior_share": hand["senior_share"]}

    print_fn("[4/4] curves, summary and report")
    curves = plot_curves(runs, out)
    summary = {"wall_s": time.perf_counter() - t0, "quick": quick, "world": str(world.root),
               "world_accuracy": world.meta.get("accuracy"), "curves": str(curves), "results": results}
    _write_summary(out, summary)
    summary["report"] = str(run_battery(out, list(seniors), runs, junior=base))
    summary["wall_s"] = time.perf_counter() - t0
    write_json(out / "summary.json", summary)
    print_fn((out / "summary.md").read_text(encoding="utf-8"))
    print_fn(f"demo finished in {summary['wall_s']:.0f} s; outputs in {out}")
    return summary


def _write_summary(out: Path, summary: dict) -> None:
    lines = ["| senior | solo pass@1 | solo pass@2 | handoff pass@1 | handoff senior share |", "|---|---|---|---|---|"]
    for name, r in summary["results"].items():
        cell = lambda m, k: f"{m[k]['mean']:.3f} ± {m[k]['se']:.3f}" if k in m else "-"  # noqa: E731
        lines.append(f"| {name} | {cell(r['solo'], 'pass@1')} | {cell(r['solo'], 'pass@2')} | "
                     f"{cell(r['handoff'], 'pass@1')} | {r['handoff_senior_share']['mean']:.2f} |")
    text = "\n".join(lines) + "\n"
    with atomic_write(out / "summary.md") as f:
        f.write(text)


def run_battery(out: Path, names: list[str], runs: dict[str, Path], junior: str, split: str = "test") -> Path:
    """Legibility, drift, comparison tables and the HTML report over the demo's eval dirs."""
    from .eval.compare import run_compare
    from .eval.drift import run_drift
    from .eval.legibility import run_legibility
    from .eval.report import run_report

    ev = out / "eval"
    for name in names:
        run_legibility(ev / name / "solo", junior, ev / name / "legibility", benchmarks=["tiny"], split=split)
    trained = [n for n in names if n != "base"]
    run_drift(ev / "base" / "solo", {n: ev / n / "solo" for n in trained}, ev / "drift",
              reference="grpo" if "grpo" in trained else None, candidate="tandem" if "tandem" in trained else None)
    run_compare([f"{n}={ev / n}" for n in names], out / "compare", drift=str(ev / "drift"),
                baseline="grpo" if "grpo" in names else None)
    return run_report(out / "report", compare_dir=str(out / "compare"),
                      train_logs=[f"{m}={r / 'log.jsonl'}" for m, r in runs.items()])
