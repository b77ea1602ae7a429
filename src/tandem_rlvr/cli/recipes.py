"""The recipes' subcommands of ``tandem`` (added by ``cli.build_parser``; thin: parse, call).

- ``tandem demo [--out DIR] [--world tiny-drift|tiny|code] [--quick]`` (``recipes.demo``)
- ``tandem study drift --seeds 0,1,2 --out DIR ...`` (``recipes.study``)
- ``tandem study pool --seeds 0,1,2 --out DIR ...`` (``recipes.study_pool``)
- ``tandem study elegance --problems FILE --judge MODEL_OR_URL --out DIR ...`` (``recipes.elegance``)
- ``tandem bench decode|train|memory`` (``recipes.bench``)
"""

from __future__ import annotations

import argparse
import json
import shlex

from .flags import COUNT, FRACTION, engine_flags, number, model_flags, pair_from_args, vllm_settings
from ..engines.base import DEFAULT_ENGINE, LOCAL_ENGINES, engine_help, engine_kind
from ..errors import TandemError
from ..runtime import configure_cpu_threads


def cmd_demo(a) -> None:
    from ..recipes.demo import run_demo

    run_demo(a.out, quick=a.quick, world=a.world)


# the flags each study reads (``--out`` all of them): another study's flag is refused, never ignored
STUDY_FLAGS = {
    "drift": {"seeds", "juniors", "steps", "limit", "n", "checkpoint", "quick"},
    "pool": {"seeds", "steps", "limit", "n", "checkpoint", "quick", "mid_steps"},
    "overlap": {"seeds", "steps", "preset", "max_staleness", "method"},
    "elegance": {"steps", "n", "quick", "problems", "judge", "senior", "junior", "preset", "coef", "judge_template",
                 "judge_parser", "judge_max_tokens", "test_size", "max_tokens"},
}


class _Given(argparse.Action):
    """argparse's store (``nargs=0``: store ``const``), remembering in ``given`` that the flag was on the command
    line."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        namespace.given = getattr(namespace, "given", frozenset()) | {self.dest}


def refuse_other_studies_flags(a) -> None:
    """A TandemError naming the flags given to ``tandem study STUDY`` that STUDY does not read."""
    ignored = sorted(getattr(a, "given", frozenset()) - STUDY_FLAGS[a.study])
    if ignored:
        names = ", ".join("--" + n.replace("_", "-") for n in ignored)
        users = sorted({s for n in ignored for s, used in STUDY_FLAGS.items() if n in used})
        raise TandemError(f"study {a.study} does not read {names} (a flag of study {' and '.join(users)}); drop it")


def cmd_study(a) -> None:
    refuse_other_studies_flags(a)
    if a.study == "elegance":
        from ..recipes.elegance import run_elegance

        run_elegance(a.out, elegance_settings(a))
        return
    if a.study == "overlap":
        from ..recipes.study_overlap import OverlapStudySettings, run_overlap_study

        try:
            seeds = tuple(int(x) for x in a.seeds.split(",") if x.strip())
        except ValueError:
            raise TandemError(f"--seeds must be comma-separated integers, got {a.seeds!r}") from None
        if not seeds:
            raise TandemError("--seeds must name some seeds")
        run_overlap_study(a.out, OverlapStudySettings(seeds=seeds, preset=a.preset, steps=a.steps,
                                                      max_staleness=a.max_staleness, method=a.method))
        return
    if a.study == "pool":
        from ..recipes.study_pool import run_pool_study

        run_pool_study(a.out, pool_study_settings(a))
        return
    from ..recipes.study import run_study

    run_study(a.out, study_settings(a))


def study_settings(a):
    """``recipes.study.StudySettings`` from ``tandem study drift``'s flags (--seeds and --juniors: comma lists)."""
    from ..recipes.pipeline import QUICK_TRAIN
    from ..recipes.study import JUNIORS, StudySettings

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
        train = dict(QUICK_TRAIN)
        return StudySettings(seeds=seeds, juniors=juniors, train=train, limit=4, n=2, max_tokens=48, quick=True,
                             checkpoint=a.checkpoint)
    return StudySettings(seeds=seeds, juniors=juniors, train=train, limit=a.limit, n=a.n, checkpoint=a.checkpoint)


def pool_study_settings(a):
    """``recipes.study_pool.PoolStudySettings`` from ``tandem study pool``'s flags."""
    from ..recipes.pipeline import QUICK_TRAIN
    from ..recipes.study_pool import PoolStudySettings

    try:
        seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    except ValueError:
        raise TandemError(f"--seeds must be comma-separated integers, got {a.seeds!r}") from None
    if not seeds:
        raise TandemError("--seeds must name some seeds")
    if a.quick:
        return PoolStudySettings(seeds=seeds, train=dict(QUICK_TRAIN), mid_train=dict(QUICK_TRAIN), limit=4, n=2,
                                 max_tokens=48, quick=True, checkpoint=a.checkpoint)
    train = {"max_steps": a.steps} if a.steps else {}
    return PoolStudySettings(seeds=seeds, train=train, mid_steps=a.mid_steps, limit=a.limit, n=a.n,
                             checkpoint=a.checkpoint)


# --quick of the elegance study: seconds of training on the shipped four problems (mechanics only)
ELEGANCE_QUICK = dict(max_steps=2, eval_every=1, save_every=1, val_size=1, prompts_per_step=2, prompts_per_minibatch=2,
                      max_new_tokens=48)


def elegance_settings(a):
    from ..recipes.elegance import EleganceSettings

    if not a.problems or not a.judge:
        raise TandemError("study elegance needs --problems FILE (or sample) and --judge MODEL_OR_URL")
    train = {"val_dataset": "none", **({"max_steps": a.steps} if a.steps else {})}
    kw = dict(problems=a.problems, judge=a.judge, senior=a.senior, junior=a.junior, preset=a.preset, coef=a.coef,
              judge_template=a.judge_template, judge_parser=a.judge_parser, judge_max_tokens=a.judge_max_tokens,
              test_size=a.test_size, n=a.n, max_tokens=a.max_tokens)
    if a.quick:
        kw.update(n=2, max_tokens=48, judge_max_tokens=16, test_size=1)
        train.update(ELEGANCE_QUICK)
    return EleganceSettings(train=train, **kw)


def register_demo(sub) -> None:
    d = sub.add_parser("demo", help="the whole pipeline on a built-in tiny world")
    d.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    d.add_argument("--world", default="tiny-drift", choices=["tiny-drift", "tiny", "code", "tiny-code"],
                   help="tiny-drift (default): two styles and a weak junior, where GRPO drifts and Tandem "
                        "anchors; tiny: one style, self-paired; code (= tiny-code): the word problems answered "
                        "by Python functions, unit tests in the sandbox, reward terms and the forced-junior probe")
    d.add_argument("--quick", action="store_true", help="a smaller, faster run (smoke test)")
    d.set_defaults(fn=cmd_demo)


def register_study(sub) -> None:
    p = sub.add_parser("study", help="multi-seed studies: drift = GRPO vs Tandem vs KL-Reg on the drift world")
    p.add_argument("study", choices=["drift", "elegance", "pool", "overlap"], help="which study (drift: the drift "
                   "world, docs/drift_world.md; elegance: judge-rewarded elegance, tandem vs GRPO, docs/tasks.md; "
                   "pool: juniors trained as a pool vs alone, one held out, docs/pool_study.md; overlap: overlapped "
                   "vs synchronous rollouts through a server, docs/overlap.md)")
    p.add_argument("--seeds", action=_Given, default="0,1,2", help="RL seeds, comma-separated (default 0,1,2)")
    p.add_argument("--out", required=True, help="study directory (rerun to resume or add seeds)")
    p.add_argument("--juniors", action=_Given, default="self,weak", help="comma-separated juniors: self (the base), "
                   "weak (the world's small word-only junior); default self,weak")
    p.add_argument("--steps", action=_Given, type=number(int, 1, optional=True), default=None,
                   help="training steps (default: the preset's)")
    p.add_argument("--limit", action=_Given, type=COUNT, default=200, help="test problems per evaluation (default 200)")
    p.add_argument("--n", action=_Given, type=COUNT, default=4, help="samples per problem (default 4)")
    p.add_argument("--checkpoint", action=_Given, default="final", choices=["final", "best"],
                   help="evaluate each run's final (default) or validation-best checkpoint")
    p.add_argument("--quick", action=_Given, nargs=0, const=True, default=False, help="a minutes-long smoke version "
                   "on the shipped world (mechanics only: seconds of training)")
    p.add_argument("--max-staleness", action=_Given, type=COUNT, default=1,
                   help="study overlap: the overlapped arm's max_staleness (default 1)")
    p.add_argument("--method", action=_Given, default=None,
                   help="study overlap: the training method of both arms (default: the preset's; "
                   "registered: config/methods.py)")
    p.add_argument("--mid-steps", action=_Given, type=COUNT, default=10,
                   help="study pool: GRPO steps of the intermediate-checkpoint junior (default 10)")
    e = p.add_argument_group("study elegance")
    e.add_argument("--problems", action=_Given, default=None, help="problems with labelled solution paths (JSONL; "
                   "sample = the shipped four-problem example; format: docs/tasks.md)")
    e.add_argument("--judge", action=_Given, default=None,
                   help="the judge: a local model or an OpenAI-compatible server's URL")
    e.add_argument("--senior", action=_Given, default="tiny", help="base model of both methods (default tiny)")
    e.add_argument("--junior", action=_Given, default=None, help="tandem's junior (default: the senior's checkpoint)")
    e.add_argument("--preset", action=_Given, default="tiny", help="training preset (default tiny)")
    e.add_argument("--coef", action=_Given, type=number(float, 0), default=0.5,
                   help="judge bonus: correct x (1 + coef x verdict) (default 0.5)")
    e.add_argument("--judge-template", action=_Given, default="elegance",
                   help="judge prompt template (default elegance)")
    e.add_argument("--judge-parser", action=_Given, default="elegant-bashy",
                   help="verdict parser (default elegant-bashy)")
    e.add_argument("--judge-max-tokens", action=_Given, type=COUNT, default=512,
                   help="judge reply budget (default 512)")
    e.add_argument("--test-size", action=_Given, type=COUNT, default=2,
                   help="problems held out for the solo evaluation (default 2)")
    e.add_argument("--max-tokens", action=_Given, type=COUNT, default=1024,
                   help="solo evaluation: new tokens per sample (default 1024)")
    p.set_defaults(fn=cmd_study)


def cmd_bench_decode(a):
    from ..prompting import plain_prompt
    from ..world.tasks import make_problems

    configure_cpu_threads()
    prompts = [plain_prompt(p.problem) for p in make_problems(64, seed=0, split="test")]
    if engine_kind(a.engine).vllm_settings:  # the vLLM engine's own benchmark
        from ..recipes.bench import bench_decode_vllm
        from ..models import load_tokenizer, resolve_model_path

        res = bench_decode_vllm(resolve_model_path(a.senior), resolve_model_path(a.junior or a.senior),
                                load_tokenizer(a.senior), prompts, a.batch, a.new_tokens, a.p, a.repeats,
                                settings=vllm_settings(a))
        res["senior"], res["junior"] = a.senior, a.junior or a.senior
        if a.json:
            print(json.dumps(res))
        else:
            print(f"vLLM engine ({res['device']}), batch {a.batch} x {a.new_tokens}: "
                  f"solo {res['solo_tok_s']:.0f} tok/s, "
                  f"tandem {res['tandem_tok_s']:.0f} tok/s; tandem/solo {res['tandem_over_solo']:.3f} = "
                  f"{res['tandem_over_solo_vs_bound']:.3f} of the bound {res['bound']:.3f} (both output layers)")
        return
    from ..recipes.bench import bench_decode, format_decode

    if _cross_bench(a, prompts):  # a junior of another tokenizer: its own benchmark (bench_cross.py)
        return
    pair = pair_from_args(a, need_junior=True)
    res = bench_decode(pair.senior, pair.junior, pair.tokenizer, prompts, a.batch, a.new_tokens, a.p, a.repeats,
                       threads=a.threads, lengths=a.lengths, median_frac=a.median_frac, sigma=a.sigma,
                       compact_sweep=_fractions(a.compact_sweep))
    res["senior"], res["junior"] = a.senior, a.junior or a.senior
    print(json.dumps(res) if a.json else "\n".join(format_decode(res)))


def _cross_bench(a, prompts) -> bool:
    """``bench decode`` with a junior of another tokenizer: solo, same-tokenizer and cross-tokenizer
    tandem in one run (``recipes.bench_cross``). False when the junior shares the senior's tokenizer."""
    from ..models import check_same_tokenizer, load_model, load_pair, load_tokenizer

    tok = load_tokenizer(a.senior)
    if not a.junior or load_tokenizer(a.junior).get_vocab() == tok.get_vocab():
        return False
    from ..recipes.bench_cross import bench_cross_decode, format_cross

    if a.vs_junior:
        check_same_tokenizer(tok, load_tokenizer(a.vs_junior), "senior", "--vs-junior")
    pair = load_pair(a.senior, a.junior, a.device, a.junior_device, a.dtype, other_tokenizer=True)
    same = load_model(a.vs_junior, pair.senior.device, a.dtype) if a.vs_junior else pair.senior
    res = bench_cross_decode(pair.senior, same, pair.junior, pair.xjunior, prompts, a.batch, a.new_tokens, a.p,
                             a.repeats, threads=a.threads)
    res["senior"], res["junior"], res["vs_junior"] = a.senior, a.junior, a.vs_junior or a.senior
    print(json.dumps(res) if a.json else "\n".join(format_cross(res)))
    return True


def _fractions(text: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise TandemError(f"--compact-sweep takes comma-separated numbers in [0, 1], got {text!r}") from None
    if any(not 0 <= v <= 1 for v in vals):
        raise TandemError(f"--compact-sweep takes comma-separated numbers in [0, 1], got {text!r}")
    return vals


def cmd_bench_train(a):
    from ..recipes.bench import bench_train_step

    configure_cpu_threads()
    res = bench_train_step(a.preset, overrides={"engine": a.engine}, steps=a.steps,
                           print_fn=(lambda *_: None) if a.json else print)
    res["engine"] = a.engine
    print(json.dumps(res) if a.json else f"tandem step / GRPO step: {res['tandem_over_grpo']:.2f}x")


def cmd_bench_overlap(a):
    from ..recipes.bench_overlap import bench_overlap, report

    cores = None
    if a.cores:
        try:
            cores = tuple(int(x) for x in a.cores.split(","))
        except ValueError:
            raise TandemError(f"--cores must be two comma-separated core numbers, got {a.cores!r}") from None
    try:
        serve_args = shlex.split(a.serve_args)
    except ValueError as e:
        raise TandemError(f"--serve-args {a.serve_args!r}: {e}") from None
    res = bench_overlap(a.preset, steps=a.steps, k=a.max_staleness, warmup=a.warmup, cores=cores, keep=a.keep,
                        max_new_tokens=a.max_new_tokens, repeats=a.repeats, serve_args=serve_args,
                        print_fn=(lambda *_: None) if a.json else print)
    print(json.dumps(res) if a.json else report(res))


def cmd_bench_memory(a):
    from ..recipes.bench import bench_memory
    from ..models import resolve_model_path

    try:
        lengths = [int(x) for x in a.lengths.split(",") if x]
    except ValueError:
        raise TandemError(f"--lengths must be comma-separated integers, got {a.lengths!r}") from None
    senior = resolve_model_path(a.senior)
    rows = bench_memory(senior, resolve_model_path(a.junior) if a.junior else senior, a.rows, lengths,
                        print_fn=(lambda *_: None) if a.json else print)
    if a.json:
        print(json.dumps(rows))


def register_bench(sub, parser_class) -> None:
    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=parser_class)
    bd = bsub.add_parser("decode", help="tokens/s: our solo and tandem vs a naive tandem loop and generate()")
    bd.add_argument("--json", action="store_true", help="print one JSON object")
    bd.add_argument("--batch", type=COUNT, default=64)
    bd.add_argument("--new-tokens", type=COUNT, default=128)
    bd.add_argument("--p", type=FRACTION, default=0.5, help="senior probability of the word schedule")
    bd.add_argument("--repeats", type=COUNT, default=3, help="timed repeats per decoder (best is kept)")
    bd.add_argument("--threads", type=number(int, 1, optional=True), default=None,
                    help="thread budget of every decoder (default: the CLI's pick, $TANDEM_THREADS or idle cores)")
    bd.add_argument("--lengths", default="fixed", choices=("fixed", "lognormal"),
                    help="fixed: every row --new-tokens (EOS ignored); lognormal: per-row lengths, long-tailed")
    bd.add_argument("--median-frac", type=number(float, 0, 1, lo_open=True), default=0.25,
                    help="lognormal: median length / --new-tokens")
    bd.add_argument("--sigma", type=number(float, 0), default=1.0, help="lognormal: sigma of log-length")
    bd.add_argument("--compact-sweep", default="",
                    help="comma-separated compaction thresholds to time as well (fraction of finished rows, 0-1)")
    bd.add_argument("--vs-junior", default=None, help="a --junior of another tokenizer is timed against same-tokenizer "
                    "tandem with this junior (default: the senior itself)")
    model_flags(bd)
    engine_flags(bd)
    bd.set_defaults(fn=cmd_bench_decode)

    bt = bsub.add_parser("train", help="optimiser-step wall-clock: tandem vs GRPO on a preset")
    bt.add_argument("--preset", default="tiny")
    bt.add_argument("--steps", type=number(int, 2), default=6,
                    help="steps per method (the first is dropped as warm-up)")
    bt.add_argument("--json", action="store_true", help="print one JSON object")
    bt.add_argument("--engine", default=DEFAULT_ENGINE, choices=LOCAL_ENGINES,
                    help=f"rollout engine of both methods, weights synced per step: {engine_help(LOCAL_ENGINES)} "
                         f"(default {DEFAULT_ENGINE})")
    bt.set_defaults(fn=cmd_bench_train)

    bo = bsub.add_parser("overlap", help="rollout-step wall-clock, synchronous vs overlapped (max_staleness), with a "
                         "rollout server and the trainer on one core each (needs vLLM)")
    bo.add_argument("--preset", default="tiny")
    bo.add_argument("--steps", type=COUNT, default=12, help="rollout steps per run")
    bo.add_argument("--warmup", type=number(int, 0), default=2, help="first rollout steps of each run not timed; "
                    "also the length of the server's warm-up run before the pairs (at least 1)")
    bo.add_argument("--max-staleness", type=COUNT, default=1, help="the overlapped run's max_staleness")
    bo.add_argument("--cores", default=None, help="SERVER,TRAINER core numbers (default: the first two allowed)")
    bo.add_argument("--keep", default=None, help="a folder to keep both runs and the server's log in")
    bo.add_argument("--max-new-tokens", type=COUNT, default=None, help="the rollouts' length cap (default: the "
                    "preset's)")
    bo.add_argument("--repeats", type=COUNT, default=1, help="pairs of runs, alternating synchronous and overlapped "
                    "(figures: the mean over each arm's runs; every pair's ratio / bound is printed too)")
    bo.add_argument("--serve-args", default="", help="more flags for the server's tandem serve, one string "
                    "(e.g. --serve-args='--max-num-seqs 16'; vLLM's flags pass through)")
    bo.add_argument("--json", action="store_true", help="print one JSON object")
    bo.set_defaults(fn=cmd_bench_overlap)

    bm = bsub.add_parser("memory", help="peak memory of a tandem rollout batch vs KV-cache arithmetic")
    bm.add_argument("--senior", default="tiny")
    bm.add_argument("--junior", default=None, help="default: the senior's checkpoint (loaded as a second copy)")
    bm.add_argument("--rows", type=COUNT, default=8)
    bm.add_argument("--lengths", default="256,512,1024", help="comma-separated new-token counts")
    bm.add_argument("--json", action="store_true")
    bm.set_defaults(fn=cmd_bench_memory)
