"""Self-contained HTML report of a comparison: figures, tables and author-coloured samples.

What: ``tandem report --compare DIR --out OUT`` (or ``tandem report RUN... --out OUT``, read
like ``tandem compare``) writes OUT/report.html, one file with every figure embedded as a
base64 PNG (the same PNGs also go to OUT/figures/, with ``styles.json``: every figure's line
colours and styles read back from the drawn artists), containing:

- a headline first (``report.headline``): one table of every senior's solo and handoff pass@1,
  junior CE and KL to the junior beside its difference from the base model, the sentences
  that say it, and the caller's notes (the demo's: what its world builds in, which checkpoint);
- pass@k curves per benchmark and macro: solo (paper Figure 2) and per handoff set-up (Figure 3);
- drift survival curves and the top-500 recovery scatter (Figure 4), if drift was compared (these
  figures and their captions are each section's, ``registry.sections()``: a plug-in section's too);
- training dynamics (Figure 5) from ``--train-log [NAME=]log.jsonl`` files: reward, response
  length, senior token share, validation accuracy, KL to the junior, wall-clock per step and
  accumulated, and the accumulated wall-clock to the best validation step; whichever of these
  keys a log has;
- every table of ``tandem compare`` (models by short name, ``models.model_name``);
- sample solutions: the same problems for every senior side by side, solo and handoff, words
  coloured by author and answers marked (``report.samples``);
- provenance: full model paths, sampling settings and command lines (``provenance``).

Every method has one colour and line style in every figure (``palette``), and every figure has
a caption saying what it measures. Where runs measured a quantity differently (Tandem's reward
and validation come from rollouts co-written with the junior, GRPO's from the senior alone),
the panel says so. Figures are drawn on ``matplotlib.figure.Figure`` directly (no pyplot, no
display backend).
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from ...errors import TandemError
from ...io import atomic_write, read_json
from ...outdir import output_dir
from ..measure.compare import run_compare
from ..measure.registry import sections
from .palette import drawn_styles, line_style
from .provenance import provenance_html
from .headline import headline_sentences, headline_table
from .samples import samples_html
from ..run_files import split_named
from .tables import Table, comparison_tables, recovery_sentence, write_compare_md


# Lenient training-log keys: the first present of each list is plotted.
TRAIN_KEYS = {"reward": ("reward/mean", "reward", "train/reward"),
              "response length (tokens)": ("response/mean_length", "completions/mean_length", "completion_length",
                                           "response_length/mean"),
              "senior token share": ("senior/token_share", "senior_share"),
              "validation accuracy": ("val/accuracy",),
              "KL(senior || junior)": ("kl/junior",),
              "author switches per sequence": ("senior/switches_per_seq",),
              "junior log-prob per emitted token": ("junior/logprob",),
              "wall-clock per step (s)": ("wall/step_s", "step_time", "time/step_s")}
VAL_PREFIXES = ("val/", "eval/", "validation/")


# --------------------------------------------------------------------------- figures
def pass_at_k_figure(metrics: dict[str, dict], title: str) -> Figure:
    """pass@k vs k (log2 axis) with SE bars, one panel per benchmark and one for the macro."""
    first = next(iter(metrics.values()))
    panels = [b for b, m in first.items() if isinstance(m, dict) and "problems" in m and b != "macro"] + ["macro"]
    fig = Figure(figsize=(3.6 * len(panels), 3.2), layout="constrained")
    for ax, b in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        for name, m in metrics.items():
            ks = [int(k[5:]) for k in m.get(b, {}) if k.startswith("pass@")]
            ax.errorbar(ks, [m[b][f"pass@{k}"]["mean"] for k in ks], yerr=[m[b][f"pass@{k}"]["se"] for k in ks],
                        capsize=3, label=name, **line_style(name))
        ax.set_xscale("log", base=2)
        ks = sorted({int(k[5:]) for m in metrics.values() for k in m.get(b, {}) if k.startswith("pass@")})
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set(title=b, xlabel="k", ylabel="pass@k")
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return fig


def survival_figure(drift: dict) -> Figure:
    """Share of the junior's frequent tokens with |log-ratio| above each threshold, per senior."""
    s = drift["survival"]
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.subplots()
    for name, curve in s["curves"].items():
        ax.plot(s["grid"], curve, label=name, **_line(name))
    ax.set(xlabel="|log(p_model / p_junior)|", ylabel="share of tokens above",
           title=f"Drift survival over {s['frequent_tokens']} frequent junior tokens", yscale="log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def recovery_figure(rec: dict) -> Figure:
    """Reference drift r_ref vs the candidate's shift r_cand - r_ref over the top-N tokens."""
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.subplots()
    ax.scatter(rec["ref_drift"], rec["cand_shift"], s=8, alpha=0.6, color=_line(rec["candidate"])["color"],
               label=rec["candidate"])
    ax.axhline(0, color="grey", lw=0.8)
    sp = rec["spearman"]
    rho = "not defined" if sp["rho"] is None else f"{sp['rho']:.2f} (p={sp['p']:.2g})"
    share = "not defined" if rec["share_moved_back"] is None else f"{rec['share_moved_back']:.0%}"
    ax.set(xlabel=f"{rec['reference']} drift log(p_ref / p_junior)",
           ylabel=f"{rec['candidate']} shift log(p_cand / p_ref)")
    # two short lines: one long title was cut off at the figure's width
    ax.set_title(f"{rec.get('qualifying', rec['top_n'])} over-emitted tokens, top {rec['top_n']} tracked\n"
                 f"moved back: {share}; Spearman rho {rho}", fontsize=9)
    ax.grid(alpha=0.3)
    return fig


def _line(name: str) -> dict[str, str]:
    """Colour and line style of ``name`` (``palette.line_style`` without the marker)."""
    style = line_style(name)
    return {"color": style["color"], "linestyle": style["linestyle"]}


def read_train_log(path: str | os.PathLike) -> list[dict]:
    """Rows of a training log (jsonl); rows without numbers are skipped, a malformed line is an error."""
    from ...io import read_jsonl

    if not Path(path).is_file():
        raise TandemError(f"{path}: no such training log")
    rows = [r for r in read_jsonl(path) if any(isinstance(v, (int, float)) for v in r.values())]
    if not rows:
        raise TandemError(f"{path}: no numeric rows in the training log")
    return rows


def _series(rows: list[dict], keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
    key = next((k for k in keys if any(isinstance(r.get(k), (int, float)) for r in rows)), None)
    if key is None:
        return None
    pts = [(r.get("step", i), r[key]) for i, r in enumerate(rows) if isinstance(r.get(key), (int, float))]
    return np.array([p[0] for p in pts], dtype=float), np.array([p[1] for p in pts], dtype=float)


def training_summary(rows: list[dict]) -> dict:
    """Training steps, total wall-clock, and the best validation step with the wall-clock accumulated up to it.

    Steps counts the steps with a training quantity: a validation-only row (the step-0 baseline
    measurement) is not a step."""
    wall = _series(rows, TRAIN_KEYS["wall-clock per step (s)"])
    train_keys = [k for t, keys in TRAIN_KEYS.items() if t != "validation accuracy" for k in keys]
    trained = {r.get("step", i) for i, r in enumerate(rows)
               if any(isinstance(r.get(k), (int, float)) for k in train_keys)}
    out = {"steps": len(trained), "wall_s": float(wall[1].sum()) if wall else None}
    val_key = next((k for r in rows for k in r if k.startswith(VAL_PREFIXES) and isinstance(r[k], (int, float))), None)
    if val_key:
        steps, vals = _series(rows, (val_key,))
        best = float(steps[int(np.argmax(vals))])
        out.update(best_key=val_key, best_step=best, best_value=float(vals.max()),
                   wall_to_best_s=float(wall[1][wall[0] <= best].sum()) if wall else None)
    return out


def measured_by(logs: dict[str, list[dict]], title: str) -> str:
    """How each run measured a panel's quantity, when that can differ between runs: "" or a line
    like "grpo, klreg: senior alone; tandem: with the junior (word)".

    Validation: the log's ``val/schedule`` (the senior alone, or tandem rollouts with the junior).
    Reward: the rollouts the run trained on, co-written when its senior token share is below 1."""
    how: dict[str, list[str]] = {}
    for name, rows in logs.items():
        if title == "validation accuracy":
            sched = next((r["val/schedule"] for r in rows if isinstance(r.get("val/schedule"), str)), None)
            desc = None if sched is None else "senior alone" if sched == "senior" else f"with the junior ({sched})"
        elif title == "reward":
            shares = [r["senior/token_share"] for r in rows if isinstance(r.get("senior/token_share"), (int, float))]
            desc = None if not shares else "senior alone" if min(shares) >= 1.0 else "co-written with the junior"
        else:
            desc = None
        if desc is not None:
            how.setdefault(desc, []).append(name)
    return "; ".join(f"{', '.join(names)}: {desc}" for desc, names in how.items()) if len(how) > 1 else ""


def training_figure(logs: dict[str, list[dict]]) -> Figure | None:
    """One panel per training quantity any log has (plus accumulated wall-clock); None if none.

    A panel whose quantity the runs measured differently (``measured_by``) says how in a second
    title line: Tandem's validation accuracy with the junior is not GRPO's of the senior alone."""
    panels = [(t, keys) for t, keys in TRAIN_KEYS.items() if any(_series(rows, keys) for rows in logs.values())]
    if not panels:
        return None
    wall = TRAIN_KEYS["wall-clock per step (s)"]
    extra = any(_series(rows, wall) for rows in logs.values())
    n = len(panels) + extra
    cols = min(n, 3)
    fig = Figure(figsize=(4.2 * cols, 3.2 * -(-n // cols)), layout="constrained")
    axes = fig.subplots(-(-n // cols), cols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    axes = axes[:n]
    # not strict: with ``extra`` the last axis is left for the wall-clock panel drawn below
    for ax, (title, keys) in zip(axes, panels, strict=False):
        for name, rows in logs.items():
            if (s := _series(rows, keys)) is not None:
                ax.plot(*s, label=name, **_line(name), marker=line_style(name)["marker"] if len(s[0]) < 30 else None)
        how = measured_by(logs, title)
        ax.set_title(f"{title}\n{how}", fontsize=9) if how else ax.set_title(title)
        ax.set(xlabel="step")
        ax.grid(alpha=0.3)
    if extra:
        for name, rows in logs.items():
            if (s := _series(rows, wall)) is not None:
                axes[-1].plot(s[0], np.cumsum(s[1]) / 60, label=name, **_line(name))
        axes[-1].set(title="accumulated wall-clock (min)", xlabel="step")
        axes[-1].grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return fig


# --------------------------------------------------------------------------- html
CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1150px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}img{max-width:100%}
.sample{white-space:pre-wrap;overflow-wrap:anywhere;font-family:ui-monospace,monospace;\
font-size:0.85em;border:1px solid #ddd;
padding:0.4em;margin:0.2em 0;max-height:24em;overflow:auto}
.sen{background:#cfe8ff}.jun{background:#ffd9ec}
.note{border-left:4px solid #e0a800;background:#fff8e1;padding:0.5em 0.8em;max-width:60em}
.grid{display:grid;gap:6px;margin-bottom:1.5em}.colhead,.rowhead{font-weight:bold;padding:2px}
.cell{border:2px solid #ccc;padding:3px;min-width:0}.cell.ok{border-color:#2e7d32}.cell.bad{border-color:#c62828}
.ok .mark,.ok-mark{color:#2e7d32}.bad .mark,.bad-mark{color:#c62828}.mark{font-weight:bold;font-size:0.85em}
.problem{font-style:italic}#provenance+div code{word-break:break-all}
figure{margin:1em 0 2em}figcaption{font-size:0.9em;color:#444;max-width:60em}"""


def _table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in t.rows)
    return f"<h3>{html.escape(t.title)}</h3>\n<table><tr>{head}</tr>{body}</table>"


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def build_report(comp: dict, train_logs: dict[str, list[dict]] | None = None, samples_per_run: int = 3,
                 notes: Sequence[str] = (), train_dirs: dict[str, Path] | None = None) -> tuple[str, dict[str, bytes]]:
    """(report.html text, {figure file name: bytes}) of a comparison.

    The figures are PNGs plus ``styles.json``: the colour and line style of every labelled line
    of every figure, read back from the drawn artists. The page opens with the headline
    (``report.headline``) and ``notes``, paragraphs of the caller's (the demo says what its world
    builds in and which checkpoints it evaluated); ``train_dirs`` are the training runs'
    directories, for provenance."""
    figs: dict[str, Figure] = {}
    for section in sections():  # solo, handoff, drift, plug-ins' (registry.Section)
        figs.update(section.show("figures")(comp))
    summaries = {}
    if train_logs:
        if (f := training_figure(train_logs)) is not None:
            figs["training.png"] = f
        summaries = {n: training_summary(rows) for n, rows in train_logs.items()}
    pngs = {name: _png(f) for name, f in figs.items()}
    styles = json.dumps({name: drawn_styles(f) for name, f in figs.items()}, indent=1).encode()
    tables = comparison_tables(comp)
    if summaries:
        best = {n: f"{s['best_step']:g} ({s['best_key']})" if "best_step" in s else "-" for n, s in summaries.items()}
        tables.append(Table("Training",
                            ["run", "steps", "wall-clock (min)", "best validation step", "wall-clock to best (min)"],
                            [[n, str(s["steps"]), _minutes(s["wall_s"]), best[n], _minutes(s.get("wall_to_best_s"))]
                             for n, s in summaries.items()]))
    notes_html = [f'<p class="note">{html.escape(n)}</p>' for n in notes]
    caps = captions(comp, train_logs)
    body = ["<h1>Tandem RLVR evaluation report</h1>", '<h2 id="headline">Headline</h2>',
            _table_html(headline_table(comp)).replace("<h3>Headline</h3>\n", ""),
            *[f"<p>{html.escape(x)}</p>" for x in headline_sentences(comp)], *notes_html,
            f"<p>Baseline for the t-tests: {html.escape(comp['baseline'])}. "
            'Full model paths, sampling settings and commands: <a href="#provenance">Provenance</a>.</p>',
            "<h2>Figures</h2>"]
    body += [f'<figure><img alt="{n}" src="data:image/png;base64,{base64.b64encode(b).decode()}">'
             f"<figcaption>{html.escape(caps.get(n, ''))}</figcaption></figure>" for n, b in pngs.items()]
    body += ["<h2>Tables</h2>", *map(_table_html, tables),
             '<h2 id="samples">Sample solutions</h2>', samples_html(comp, samples_per_run),
             '<h2 id="provenance">Provenance</h2>', provenance_html(comp, train_dirs or {})]
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Tandem RLVR report</title>"
            f"<style>{CSS}</style>"
            f"</head><body>\n" + "\n".join(body) + "\n</body></html>\n")
    return page, {**pngs, "styles.json": styles}


def captions(comp: dict, train_logs: dict[str, list[dict]] | None = None) -> dict[str, str]:
    """What each figure of ``build_report`` measures, by file name: one or two plain sentences (each
    section's, ``registry.sections()``, then the training figure's)."""
    out = {}
    for section in sections():
        out.update(section.show("captions")(comp))
    if train_logs:
        val = measured_by(train_logs, "validation accuracy")
        out["training.png"] = (
            "Training dynamics per optimiser step, from each run's log: reward of the rollouts the run trained on, "
            "response length, the senior's share of the tokens, validation accuracy on held-out training problems, "
            "KL(senior || junior) on the senior's rollouts and wall-clock, whichever the logs hold. "
            + (f"Validation differs by method ({val}), so its curves compare each run with itself, not the "
               "methods with one another." if val else ""))
    return out


# --------------------------------------------------------------------------- the sections' figures
EST = "unbiased pass@k per problem, averaged over problems; error bars: bootstrap standard errors over problems"


def _sampling(metrics: dict) -> str:
    cfg = next(iter(metrics.values())).get("config", {})
    sp = cfg.get("sampling") or {}
    return (f"{cfg.get('n', '?')} samples per problem at temperature {sp.get('temperature', '?')}, "
            f"top-p {sp.get('top_p', '?')}, top-k {sp.get('top_k', '?')}, "
            f"at most {sp.get('max_new_tokens', '?')} new tokens")


def solo_figures(comp: dict) -> dict[str, Figure]:
    """Solo pass@k per benchmark and macro (paper Figure 2)."""
    return {"pass_at_k_solo.png": pass_at_k_figure(comp["solo"], "Solo reasoning: pass@k")} if comp["solo"] else {}


def solo_captions(comp: dict) -> dict[str, str]:
    if not comp["solo"]:
        return {}
    return {"pass_at_k_solo.png": f"Solo reasoning: each senior answers alone; {EST}; {_sampling(comp['solo'])}."}


def handoff_figures(comp: dict) -> dict[str, Figure]:
    """Handoff pass@k per handoff set-up (paper Figure 3)."""
    return {f"pass_at_k_handoff_{lb}.png": pass_at_k_figure(metrics, f"Handoff robustness ({lb}): pass@k")
            for lb, metrics in comp["handoff"].items()}


def handoff_captions(comp: dict) -> dict[str, str]:
    from ...models import model_name

    out = {}
    for lb, metrics in comp["handoff"].items():
        cfg = next(iter(metrics.values()))["config"]
        out[f"pass_at_k_handoff_{lb}.png"] = (
            f"Handoff robustness: each senior co-writes with the junior {model_name(cfg['models'].get('junior'))} "
            f"under the {(cfg['schedule'] or {}).get('name')} schedule (the same junior for every senior); {EST}; "
            f"{_sampling(metrics)}.")
    return out


def drift_figures(comp: dict) -> dict[str, Figure]:
    """Drift survival curves and the top-N recovery scatter (paper Figure 4)."""
    drift = comp.get("drift")
    if not drift:
        return {}
    figs = {"drift_survival.png": survival_figure(drift)}
    if drift.get("recovery"):
        figs["drift_recovery.png"] = recovery_figure(drift["recovery"])
    return figs


def drift_captions(comp: dict) -> dict[str, str]:
    drift = comp.get("drift") or {}
    out = {}
    if drift:
        out["drift_survival.png"] = (
            f"Drift: over the {drift['survival']['frequent_tokens']} tokens frequent in the junior's own solo outputs, "
            "the share whose |log(p_model / p_junior)| (smoothed token frequencies of each model's solo outputs) "
            "exceeds the threshold on the x axis; a curve further up is further from the junior.")
        if drift.get("recovery"):
            rec = drift["recovery"]
            out["drift_recovery.png"] = (
                f"Recovery: each dot is one of the tokens {rec['reference']} over-emits most relative to the junior; "
                f"x: {rec['reference']}'s log-ratio to the junior; y: {rec['candidate']}'s shift relative to "
                f"{rec['reference']} (below 0: moved back toward the junior). {recovery_sentence(rec)}.")
    return out


def _minutes(s: float | None) -> str:
    return "-" if s is None else f"{s / 60:.1f}"


def run_report(out: str | os.PathLike, compare_dir: str | None = None, runs: Sequence[str] = (),
               train_logs: Sequence[str] = (), samples_per_run: int = 3, notes: Sequence[str] = (),
               **compare_kw) -> Path:
    """Write OUT/report.html and OUT/figures/*.png from a compare dir or from RUN specs; return the html path."""
    out = output_dir(out, create=False)
    if compare_dir and runs:
        raise TandemError("give either --compare DIR or RUN directories, not both")
    if compare_dir:
        comp = read_json(Path(compare_dir) / "compare.json",
                         f"{compare_dir}: not a compare directory (no compare.json); run `tandem compare` first")
    elif runs or any(compare_kw.get(k) for k in ("solo", "handoff", "measures")):
        comp = run_compare(runs, out, **compare_kw)
        write_compare_md(out, comp)
    else:
        raise TandemError("nothing to report: give --compare DIR or RUN directories")
    logs, dirs = {}, {}
    for spec in train_logs:
        name, path = split_named(spec, "--train-log")
        name = name if "=" in spec else path.parent.name
        logs[name], dirs[name] = read_train_log(path), path.parent
    page, pngs = build_report(comp, logs, samples_per_run, notes, dirs)
    for name, data in pngs.items():
        with atomic_write(out / "figures" / name, "wb") as f:
            f.write(data)
    with atomic_write(out / "report.html") as f:
        f.write(page)
    return out / "report.html"
