"""``tandem eval solo|handoff``: n samples per problem into a run directory, pass@k printed.

The flags are the ``EvalConfig`` settings (``config/evaluation.py``), made here from each field's help,
choices and range, so a setting is declared once; sampling and the engine's settings come from the flag
groups other commands share (``cli/flags.py``). Without ``--junior``, a handoff pairs the senior with the
junior of its training run when the senior is a checkpoint of one (``best/``, ``final/``,
``checkpoint-N/`` and the folders inside them: the run's config.json names the junior, the senior's base
when self-paired), and is refused otherwise: the trained senior paired with itself is rarely what is meant.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import MISSING
from pathlib import Path

from ..errors import TandemError
from ..runtime import configure_cpu_threads
from .flags import engine_flags, engine_of, number, sampling_flags, sampling_from_args, server_settings, vllm_settings

NOT_GENERATED = ("shared", "command")  # settings whose flags come from shared groups, or the subcommand itself


def _default(f):
    return f.default_factory() if f.default is MISSING else f.default


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(x for x in text.split(",") if x)


def _flag_type(f):
    """argparse type of setting ``f``: numbers through ``flags.number`` (its range), lists comma-separated."""
    from ..config.fields import kind, optional

    k = kind(f)
    if k in ("int", "float"):
        lo, hi, lo_open = f.metadata.get("range", (None, None, False))
        return number(int if k == "int" else float, lo, hi, lo_open=lo_open, optional=optional(f))
    return _comma_list if k.startswith("Sequence") else str


def setting_flags(p: argparse.ArgumentParser, mode: str) -> list[str]:
    """A flag for every ``EvalConfig`` setting of ``mode`` (its help, choices and default from the field),
    grouped by part; returns the settings' names, which ``cmd_eval`` reads back."""
    from ..config.evaluation import eval_fields

    groups, names = {}, []
    for part, f in eval_fields():
        meta = f.metadata
        if meta.get("flag") in NOT_GENERATED or meta.get("mode", mode) != mode:
            continue
        g = groups.get(part) or groups.setdefault(part, p.add_argument_group(part))
        default = _default(f)
        shown = "" if default is None else f" (default {','.join(default) if isinstance(default, tuple) else default})"
        registered = f"; registered: {meta['names']()}" if "names" in meta else ""
        extra = {"choices": meta["choices"]} if "choices" in meta and "names" not in meta else {}
        g.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=default, type=_flag_type(f),
                       help=f"{meta['help']}{registered}{shown}", **extra)
        names.append(f.name)
    return names


def run_junior(senior: str) -> str | None:
    """The junior of the training run whose checkpoint ``senior`` is (its config.json: the junior, or the
    senior it started from when self-paired), or None when ``senior`` is not inside a run of ours."""
    p = Path(senior).expanduser()
    if not p.is_dir():
        return None
    for run in (p.resolve().parent, p.resolve().parent.parent):
        cfg = run / "config.json"
        if not cfg.is_file():
            continue
        try:
            rec = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TandemError(f"{cfg}: the training run's config.json cannot be read ({type(e).__name__}); "
                              "give --junior") from None
        if isinstance(rec, dict) and "method" in rec and "output_dir" in rec and isinstance(rec.get("senior"), str):
            junior = rec.get("junior") or rec["senior"]
            if not isinstance(junior, str):
                raise TandemError(f"{cfg}: the run's junior is not a model name ({junior!r}); give --junior")
            return junior
    return None


def cmd_eval(a, mode: str, names: list[str]):
    from ..config import EvalConfig
    from ..eval.sample.sampler import evaluate

    keys = {n: getattr(a, n) for n in names}
    if mode == "handoff" and keys["junior"] is None and not getattr(a, "server", None):  # a server holds its juniors
        keys["junior"] = run_junior(a.senior)
        if keys["junior"] is None:
            raise TandemError(f"--junior is required: the senior {a.senior} is not a checkpoint of a training run "
                              "whose config.json names its junior (give --junior, or --junior SENIOR to pair the "
                              "senior with itself)")
        print(f"junior: {keys['junior']} (the junior of the senior's training run)", file=sys.stderr)
    keys.setdefault("schedule", "senior")  # solo: the senior alone
    cfg = EvalConfig.from_keys(**keys, mode=mode, sampling=sampling_from_args(a),
                               engine=engine_of(a, mode == "handoff"), vllm_settings=vllm_settings(a),
                               server=server_settings(a))
    configure_cpu_threads()
    metrics = evaluate(cfg, a.out, say=print)  # what loads and what it costs, on stdout (stderr: one-line errors)
    _print_metrics(metrics, a.out)


def _print_metrics(metrics: dict, out: str) -> None:
    from rich.table import Table

    from ..progress import console

    ks = [k for k in metrics["macro"] if k.startswith("pass@")]
    t = Table(title=f"results in {out}")
    t.add_column("benchmark")
    t.add_column("problems", justify="right")
    for k in ks:
        t.add_column(k, justify="right")
    for b, m in metrics.items():
        if isinstance(m, dict) and "problems" in m:
            t.add_row(b, str(m["problems"]), *[f"{m[k]['mean']:.3f} ± {m[k]['se']:.3f}" for k in ks])
    console().print(t)
    if "juniors" in metrics:  # a junior pool: pass@k (macro) of each junior over the samples it got
        from ..models import model_name

        jt = Table(title="per junior (macro over the samples each junior got; the table above pools them)")
        jt.add_column("junior")
        jt.add_column("samples", justify="right")
        for k in ks:
            jt.add_column(k, justify="right")
        for name, m in metrics["juniors"].items():
            cells = [(f"{f['mean']:.3f} ± {f['se']:.3f}" if f["mean"] is not None else "—") if (f := m["macro"].get(k))
                     else "—" for k in ks]
            jt.add_row(model_name(name), str(m["samples"]), *cells)
        console().print(jt)
        print("—: a junior with fewer than k samples of every problem of a benchmark has no pass@k there (metrics.json "
              "says why)")
    print(f"senior share {metrics['senior_share']['mean']:.3f} (sd {metrics['senior_share']['sd']:.3f})")
    if "senior_share_chars" in metrics:  # text-level handoff: the share in characters and in the junior's tokens
        print(f"senior share in characters {metrics['senior_share_chars']['mean']:.3f}, in the junior's tokens "
              f"{metrics['senior_share_junior_tokens']['mean']:.3f}")


def register(sub, parser_class):
    """Add ``tandem eval solo|handoff``; the ``eval`` subparsers, for the battery's commands."""
    e = sub.add_parser("eval", help="evaluation battery")
    esub = e.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=parser_class)
    for mode, helptext in (("solo", "pass@k of the senior alone"),
                           ("handoff", "pass@k with paragraph/word handoffs to a junior")):
        x = esub.add_parser(mode, help=helptext)
        x.add_argument("--out", required=True, help="run directory (resumes if it exists)")
        names = setting_flags(x, mode)  # solo samples the senior alone: no --junior, --schedule, --p, --K, --protocol
        sampling_flags(x, temperature=0.7, top_p=0.8, top_k=20, max_tokens=3000)
        engine_flags(x, server=True)
        x.set_defaults(fn=lambda a, m=mode, names=names: cmd_eval(a, m, names))
    return esub
