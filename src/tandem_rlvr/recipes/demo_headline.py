"""The first lines of the demo's summary: what this run shows of the paper's three properties.

The paper's claims for Tandem RLVR against vanilla GRPO (arXiv 2606.28166, sections 4-5): (1) the
trained senior stays robust to handoffs with the junior, (2) its solo reasoning stays legible to the
junior, (3) it drifts less from the junior's token distribution. A demo's budget (minutes on a laptop
CPU) may be too small to show them, so the summary opens with one line per property saying, from
this run's own numbers, whether it shows it: a difference of more than twice its standard error in
the claimed direction "shows", within that "does not separate" the two at this budget, the other way
"does not show". Drift has no standard error here (one KL of two token marginals), so its line gives
the numbers, and Tandem's share of GRPO's over-emitted tokens moved back when that is defined. A last
line gives solo pass@1, the price or not. ``--quick`` opens with a line saying its numbers show nothing.

Inputs: the demo's ``results`` (solo and handoff pass@1 per senior) and its output folder's
``eval/<senior>/legibility/legibility.json`` and ``eval/drift/drift.json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

Z = 2.0  # standard errors a difference must exceed to count as shown


def verdict(diff: float, se: float, higher_is_better: bool) -> str:
    """"shows", "does not separate" or "does not show" for Tandem minus GRPO ``diff`` with standard error ``se``."""
    good = diff if higher_is_better else -diff
    if se > 0 and abs(diff) <= Z * se or se == 0 and diff == 0:
        return "does not separate"
    return "shows" if good > 0 else "does not show"


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
             f"when it exceeds {Z:g} standard errors):"]
    if (best_steps or {}).get("tandem") == 0:
        lines.append("Tandem RLVR's validation-best checkpoint is its step 0, the base model itself: every Tandem "
                     "figure below is the base's, so this run shows nothing of what Tandem training does.")
    hand = {m: results[m].get("handoff", {}).get("pass@1") for m in ("grpo", "tandem", "base")}
    if hand["grpo"] and hand["tandem"]:
        lines.append(_line("1. handoff robustness", "handoff pass@1 with the junior", hand, True))
    ce = {m: _ce(out / "eval" / m / "legibility" / "legibility.json") for m in ("grpo", "tandem", "base")}
    if ce["grpo"] and ce["tandem"]:
        lines.append(_line("2. legibility", "the junior's cross-entropy on the senior's solo text (nats/token)", ce,
                           False))
    drift = _drift(out / "eval" / "drift" / "drift.json")
    if drift:
        lines.append(drift)
    solo = {m: results[m].get("solo", {}).get("pass@1") for m in ("grpo", "tandem", "base")}
    if solo["grpo"] and solo["tandem"]:
        d = solo["tandem"]["mean"] - solo["grpo"]["mean"]
        lines.append(f"Solo pass@1: Tandem {solo['tandem']['mean']:.3f} vs GRPO {solo['grpo']['mean']:.3f} "
                     f"({d:+.3f}){_base(solo)}.")
    return lines


def _line(name: str, what: str, fig: dict, higher: bool) -> str:
    t, g = fig["tandem"], fig["grpo"]
    diff, se = t["mean"] - g["mean"], math.hypot(t["se"], g["se"])
    v = verdict(diff, se, higher)
    return (f"{name}: {v} ({what}: Tandem {t['mean']:.3f} ± {t['se']:.3f} vs GRPO {g['mean']:.3f} ± {g['se']:.3f}"
            f"{_base(fig)}).")


def _base(fig: dict) -> str:
    return f", base {fig['base']['mean']:.3f}" if fig.get("base") else ""


def _ce(path: Path) -> dict | None:
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))["summary"]["ce"]["macro"]


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
    v = "shows" if kl["tandem"] < kl["grpo"] else "does not show"
    return (f"3. less drift from the junior: {v} (KL of the solo token distribution to the junior's: Tandem "
            f"{_kl(kl['tandem'])} vs GRPO {_kl(kl['grpo'])}{moved}).")


def _kl(x: float) -> str:
    """Three decimals, or three significant digits below 0.001 (a KL of 2e-5 is not "0.000")."""
    return f"{x:.3f}" if x == 0 or abs(x) >= 1e-3 else f"{x:.3g}"
