"""The first lines of the demo's summary: what this run shows of the paper's three properties.

The paper's claims for Tandem RLVR against vanilla GRPO (arXiv 2606.28166, sections 4-5): (1) the
trained senior stays robust to handoffs with the junior, (2) its solo reasoning stays legible to the
junior, (3) it drifts less from the junior's token distribution. A demo's budget (minutes on a laptop
CPU) may be too small to show them, so the summary opens with one line per property saying, from
this run's own numbers, whether it shows it, by the one headline rule (``metrics.paired_verdict``):
the paired one-sided t-test of Tandem against GRPO over the problems (the comparison's, in
``compare/compare.json``) "shows" the claim at p < ``metrics.ALPHA``, "does not show" it when the
opposite test reaches that level, and else "does not separate" the two at this budget. Property 1
is handoff pass@1; property 2 is each headline claim of the registered measures of the solo text
(``eval.measure.registry``: the junior's cross-entropy; a judge's ratings when the run had a judge).
Drift has no paired test (one KL of two token marginals), so its line gives the numbers, and
Tandem's share of GRPO's over-emitted tokens moved back when that is defined. A last line gives solo
pass@1, the price or not. ``--quick`` opens with a line saying its numbers show nothing.

Inputs: the demo's ``results`` (solo and handoff pass@1 per senior) and its output folder's
``compare/compare.json`` and ``eval/drift/drift.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..eval.measure.metrics import ALPHA, paired_verdict
from ..eval.measure.registry import measures
from ..eval.report.headline import p_text


def headline(out: Path, results: dict, quick: bool, best_steps: dict | None = None) -> list[str]:
    """The summary's opening lines (see the module docstring). ``best_steps``: ``{method: step}`` of the
    checkpoints evaluated when they are the validation-best ones; a Tandem best at step 0 is the base
    model itself, which the second line then says (its figures are the base's, not training's)."""
    if quick:
        return ["What this run shows: nothing about the method. `--quick` is a smoke test of the wiring "
                "(2 training steps, 6 problems x 2 samples); run `tandem demo` for the figures."]
    if not {"grpo", "tandem"} <= set(results):
        return []
    lines = ["What this run shows (Tandem RLVR against vanilla GRPO, this run's numbers; a difference counts "
             f"when a paired one-sided t-test over the problems reaches p < {ALPHA:g}):"]
    if (best_steps or {}).get("tandem") == 0:
        lines.append("Tandem RLVR's validation-best checkpoint is its step 0, the base model itself: every Tandem "
                     "figure below is the base's, so this run shows nothing of what Tandem training does.")
    path = out / "compare" / "compare.json"
    comp = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    tests = {t["statistic"]: t for t in comp.get("ttests", ())
             if t["candidate"] == "tandem" and t["baseline"] == "grpo"}
    hand = {m: (results[m].get("handoff", {}).get("pass@1") or {}).get("mean") for m in ("grpo", "tandem", "base")}
    if "handoff pass@1 (handoff)" in tests:
        lines.append(_line("1. handoff robustness", "handoff pass@1 with the junior", hand,
                           tests["handoff pass@1 (handoff)"], ".3f"))
    for m in measures():
        for col in m.headline if comp.get(m.name) else ():
            if col.claim and col.stat in tests:
                vals = {n: col.value(x) for n, x in comp[m.name].items()}
                lines.append(_line(f"2. {col.claim}", col.what or col.title, vals, tests[col.stat], col.fmt))
    drift = _drift(out / "eval" / "drift" / "drift.json")
    if drift:
        lines.append(drift)
    solo = {m: results[m].get("solo", {}).get("pass@1") for m in ("grpo", "tandem", "base")}
    if solo["grpo"] and solo["tandem"]:
        d = solo["tandem"]["mean"] - solo["grpo"]["mean"]
        lines.append(f"Solo pass@1: Tandem {solo['tandem']['mean']:.3f} vs GRPO {solo['grpo']['mean']:.3f} "
                     f"({d:+.3f}){_base({k: v and v['mean'] for k, v in solo.items()})}.")
    return lines


def _line(name: str, what: str, vals: dict, test: dict, fmt: str) -> str:
    """"NAME: VERDICT (WHAT: Tandem x vs GRPO y, base z; paired one-sided t-test over n problems, p = ...)"."""
    return (f"{name}: {paired_verdict(test)} ({what}: Tandem {vals['tandem']:{fmt}} vs GRPO {vals['grpo']:{fmt}}"
            f"{_base(vals, fmt)}; paired one-sided t-test over {test['n']} problems, {p_text(test)}).")


def _base(vals: dict, fmt: str = ".3f") -> str:
    return f", base {vals['base']:{fmt}}" if vals.get("base") is not None else ""


def _drift(path: Path) -> str | None:
    if not path.is_file():
        return None
    d = json.loads(path.read_text(encoding="utf-8"))
    kl = {m: d["models"][m]["kl_to_junior"] for m in ("grpo", "tandem") if m in d.get("models", {})}
    if len(kl) < 2:
        return None
    rec = d.get("recovery") or {}
    moved = (f"; Tandem moves {rec['share_moved_back']:.0%} of GRPO's {rec['qualifying']} most over-emitted tokens "
             "back toward the junior" if rec.get("defined") and rec.get("share_moved_back") is not None else "")
    lower = "lower" if kl["tandem"] < kl["grpo"] else "not lower"
    return (f"3. less drift from the junior: no paired test, one KL per model (KL of the solo token distribution to "
            f"the junior's: Tandem {_kl(kl['tandem'])} vs GRPO {_kl(kl['grpo'])}, {lower} for Tandem{moved}).")


def _kl(x: float) -> str:
    """Three decimals, or three significant digits below 0.001 (a KL of 2e-5 is not "0.000")."""
    return f"{x:.3f}" if x == 0 or abs(x) >= 1e-3 else f"{x:.3g}"
