"""``tandem eval solo|handoff``: n samples per problem into a run directory, pass@k printed."""

from __future__ import annotations

from ..config.data import task_names
from ..runtime import configure_cpu_threads
from .flags import (COUNT, answer_mode_flag, engine_flags, engine_of, model_flags, protocol_flag, sampling_flags,
                    sampling_from_args, schedule_flags, seed_type, server_settings, template_flag, vllm_settings)


def cmd_eval(a, mode: str):
    from ..config import EvalConfig
    from ..eval.sample.sampler import evaluate

    cfg = EvalConfig.from_keys(senior=a.senior, junior=getattr(a, "junior", None), mode=mode,
                               schedule=getattr(a, "schedule", "senior"), benchmarks=[b for b in a.benchmarks.split(",") if b],
                               split=a.split, limit=a.limit, n=a.n, sampling=sampling_from_args(a), template=a.template,
                               instruction=a.instruction, answer_mode=a.answer_mode, grader=a.grader, task=a.task, seed=a.seed, p=a.p, K=a.K,
                               device=a.device, junior_device=getattr(a, "junior_device", None), dtype=a.dtype,
                               batch_size=a.batch_size, engine=engine_of(a, mode == "handoff"), vllm_settings=vllm_settings(a),
                               server=server_settings(a), protocol=getattr(a, "protocol", None))
    configure_cpu_threads()
    metrics = evaluate(cfg, a.out)
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
    for mode, helptext in (("solo", "pass@k of the senior alone"), ("handoff", "pass@k with paragraph/word handoffs to a junior")):
        x = esub.add_parser(mode, help=helptext)
        x.add_argument("--benchmarks", default="tiny", help="comma-separated names, files or hub ids (default tiny)")
        x.add_argument("--split", default=None, help="split for registered/hub benchmarks (tiny: test)")
        x.add_argument("--limit", type=COUNT, default=None, help="first N problems of each benchmark")
        x.add_argument("--n", type=COUNT, default=8, help="samples per problem (default 8)")
        x.add_argument("--out", required=True, help="run directory (resumes if it exists)")
        x.add_argument("--seed", type=seed_type, default=0, help="base of every row's seed (default 0)")
        x.add_argument("--batch-size", type=COUNT, default=64,
                       help="rows decoded together (vllm: rows handed to the engine at once; finished problems are "
                            "saved after each batch)")
        model_flags(x, junior=mode == "handoff")  # solo samples the senior alone: --junior is an error
        sampling_flags(x, temperature=0.7, top_p=0.8, top_k=20, max_tokens=3000)
        template_flag(x)
        answer_mode_flag(x)
        x.add_argument("--task", default="math", help=f"what is asked and how it is graded: {task_names()} (default "
                       "math; docs/tasks.md); recorded as the run's verifier")
        engine_flags(x, server=True)
        if mode == "handoff":
            schedule_flags(x, "paragraph-roundrobin")
            protocol_flag(x)
        else:
            x.set_defaults(p=0.5, K=32)
        x.set_defaults(fn=lambda a, m=mode: cmd_eval(a, m))
    return esub
