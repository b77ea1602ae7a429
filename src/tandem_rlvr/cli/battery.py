"""Commands of the evaluation battery, added to ``tandem``'s parser by ``cli.build_parser``.

- ``tandem eval legibility --samples RUN_DIR --junior M [--senior M] --out DIR``
- ``tandem eval cot-rating --samples RUN_DIR --judge URL|MODEL --out DIR``
- ``tandem eval regrade RUN_DIR [--grader ours|paper] [--replace]``
- ``tandem eval drift --junior-samples DIR --seniors NAME=DIR,... [--reference N --candidate N] --out DIR``
- ``tandem eval replay RUN_DIR [--tokenizer M] [--out DIR]``: check every saved trace's authorship
- ``tandem compare RUN... [--solo|--handoff|--<measure> NAME=DIR] [--drift DIR] --out DIR`` (a flag per
  registered measure, ``eval.measure.registry``: ``--legibility``, ``--cot-rating``, ...)
- ``tandem report (RUN... | --compare DIR) [--train-log [NAME=]log.jsonl] [--note TEXT] --out DIR``

Thin, like ``cli/__init__.py``: parse, call ``eval.measure.legibility/drift/compare/report``, print
(``tables.print_tables``).
"""

from __future__ import annotations

from ..errors import TandemError
from ..eval.measure.registry import measures
from .flags import COUNT, grader_flag, number

RUN_HELP = ("[NAME=]DIR of one senior's results: an eval dir, or a dir whose subdirs are eval dirs (solo run = "
            "schedule 'senior'; other sampling runs = handoff, labelled by dir name; a measure's result file such as "
            "legibility.json; drift.json)")


def _ks(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise TandemError(f"--ks must be comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise TandemError(f"--ks must be positive integers, got {text!r}")
    return ks


def cmd_legibility(a) -> None:
    from ..eval.measure.legibility import run_legibility
    from ..eval.report.tables import Table, print_tables

    benchmarks = [b for b in (a.benchmarks or "").split(",") if b] or None
    res = run_legibility(a.samples, a.junior, a.out, a.senior, benchmarks, a.split, a.device, a.dtype, a.batch_tokens,
                         ce_protocol=a.ce_protocol)
    s = res["summary"]
    pm = lambda stat, b: f"{s[stat][b]['mean']:.3f} ± {s[stat][b]['se']:.3f}" if stat in s else "n/a"  # noqa: E731
    print_tables([Table(f"junior legibility of {res['config']['senior']} for {a.junior} ({res['samples']} samples, "
                        f"--ce-protocol {a.ce_protocol})",
                  ["benchmark", "problems", "CE (nats/token)", "CE (nats/char)", "alpha"],
                  [[b, str(s["ce"][b]["problems"]), pm("ce", b), pm("ce_per_char", b), pm("alpha", b)]
                   for b in s["ce"]])])
    if "dropped" in res:
        print(f"dropped {res['dropped']['4088']} chain(s) of 4088 junior tokens or more and "
              f"{res['dropped']['context']} longer than the junior's context")
    t = res["timing"]
    print(f"scored {res['scored_tokens']} response tokens in {t['seconds']:.2f} s ({t['tokens_per_s']:.0f} tok/s, "
          f"{t['device']}); results in {a.out}")


def cmd_cot_rating(a) -> None:
    from ..eval.measure.cot_rating import run_cot_rating
    from ..eval.measure.registry import measure, mean_se
    from ..eval.report.tables import Table, print_tables
    from ..rewards.judge import JudgeSettings

    benchmarks = [b for b in (a.benchmarks or "").split(",") if b] or None
    judge = JudgeSettings(a.judge, served_model=a.judge_served_model, max_tokens=a.judge_max_tokens,
                          batch_size=a.judge_batch_size, device=a.device, dtype=a.dtype)
    res = run_cot_rating(a.samples, judge, a.out, benchmarks, a.split)
    s = res["summary"]
    print_tables([Table(f"{measure('cot-rating').title}: {a.samples} ({res['samples']} samples; unrated: "
                        f"{res['failed']['legibility']} / {res['failed']['coverage']})",
                        ["benchmark", "problems", "legibility", "coverage"],
                        [[b, str(s["legibility"][b]["problems"]), mean_se(s["legibility"][b]),
                          mean_se(s["coverage"][b])] for b in s["legibility"]])])
    print(f"results in {a.out}")


def cmd_regrade(a) -> None:
    from ..eval.measure.regrade import RECORD, REGRADED, regrade
    from ..eval.report.tables import Table, print_tables

    rec = regrade(a.run, replace=a.replace, progress=True, grader=a.grader)
    g = rec["grader"]
    changed = sum(f["0->1"] + f["1->0"] for f in rec["benchmarks"].values())
    total = sum(f["samples"] for f in rec["benchmarks"].values())
    print_tables([Table(f"regrade of {a.run} with --grader {rec['grader_name']}: {changed} of {total} verdicts "
                        f"changed (grader {g['grader_sha256'][:12]}, tandem-rlvr {g['tandem_rlvr']}, "
                        f"math-verify {g['packages'].get('math-verify')}, sympy {g['packages'].get('sympy')})",
                        ["benchmark", "samples", "0->1", "1->0", "pass@1 before", "pass@1 after"],
                        [[b, str(f["samples"]), str(f["0->1"]), str(f["1->0"]), f"{f['pass@1_before']:.3f}",
                          f"{f['pass@1_after']:.3f}"] for b, f in rec["benchmarks"].items()])])
    if rec["unchanged"]:
        print(f"already regraded with this grader; nothing to do ({a.run}/{RECORD})")
    else:
        print(f"{REGRADED} and {RECORD} in {a.run}; samples.jsonl unchanged")


def cmd_drift(a) -> None:
    from ..eval.measure.drift import run_drift
    from ..eval.report.tables import drift_tables, print_tables, recovery_sentence, write_drift_md

    res = run_drift(a.junior_samples, a.seniors, a.out, a.reference, a.candidate, a.smoothing, a.min_count, a.top_n,
                    min_ref_count=a.min_ref_count)
    write_drift_md(a.out, res)
    print_tables(drift_tables(res))
    if res.get("recovery"):
        print(recovery_sentence(res["recovery"]))
    print(f"results in {a.out}")


def cmd_replay(a) -> None:
    from ..eval.measure.replay import run_replay
    from ..eval.report.tables import Table, print_tables

    res = run_replay(a.run_dir, a.tokenizer, a.out)
    sched = ", ".join(f"{k}={v}" for k, v in res["schedule"].items())
    print_tables([Table(f"Trace replay of {a.run_dir} (schedule {sched}): traces whose recorded authorship differs "
                        "from the schedule's", ["benchmark", "samples", "invalid"],
                        [[b, str(x["samples"]), str(x["invalid"])] for b, x in res["benchmarks"].items()]
                        + [["all", str(res["samples"]), str(res["invalid"])]])])
    for ex in res["examples"]:
        print(f"{ex['where']}: {ex['kind']}" if "recorded" not in ex else  # text-level rows say it in kind
              f"{ex['where']}: {ex['kind']} at token {ex['position']} (recorded {ex['recorded']}, "
              f"schedule says {ex['expected']})")
    if res["invalid"]:
        per = ", ".join(f"{b}: {x['invalid']}" for b, x in res["benchmarks"].items() if x["invalid"])
        raise TandemError(f"{res['invalid']} of {res['samples']} traces are invalid ({per}); first: "
                          f"{res['examples'][0]['where']}")
    print(f"all {res['samples']} traces agree with the schedule")


def _compare_flags(p) -> None:
    p.add_argument("--solo", action="append", default=[], metavar="NAME=DIR", help="a senior's solo run (repeatable)")
    p.add_argument("--handoff", action="append", default=[], metavar="NAME[:LABEL]=DIR",
                   help="a senior's handoff run; LABEL defaults to DIR's name (repeatable)")
    for m in measures():  # --legibility, --cot-rating, a plug-in's measure: one flag per registered row
        p.add_argument(f"--{m.name}", action="append", default=[], metavar="NAME=DIR", dest=_dest(m.name),
                       help=f"a senior's {m.name} dir, with {m.result_file} (repeatable)")
    p.add_argument("--drift", default=None, metavar="DIR", help="a `tandem eval drift` output dir")
    p.add_argument("--baseline", default=None, metavar="NAME",
                   help="senior the t-tests compare against (default: the first)")
    p.add_argument("--ks", default=None, metavar="K,K,...",
                   help="pass@k values, e.g. 1,2,4,8 (default: each run's, up to its n); "
                   "a k above the samples per problem is an error")
    p.add_argument("--n-boot", type=number(int, 2, 10**7), default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--macro", choices=("ours", "paper"), default="ours",
                   help="ours (default): the macro over the runs' benchmarks; paper: also the paper code's macro over "
                        "aime24, aime25, aime26 and amc23_25, equal weights (a pooled aime run counts by year)")
    p.add_argument("--allow-mixed", action="store_true",
                   help="compare runs whose settings differ (junior, schedule, sampling, n, --limit, ...) instead of "
                        "refusing; the differences are printed and recorded in compare.json (problems that differ "
                        "under one id are refused regardless)")


def _dest(measure: str) -> str:
    return "measure_" + measure.replace("-", "_")


def _compare_kw(a) -> dict:
    found = {m.name: getattr(a, _dest(m.name)) for m in measures() if getattr(a, _dest(m.name), None)}
    return dict(solo=a.solo, handoff=a.handoff, measures=found, drift=a.drift, baseline=a.baseline,
                ks=_ks(a.ks), n_boot=a.n_boot, allow_mixed=a.allow_mixed, macro=a.macro)


def cmd_compare(a) -> None:
    from ..eval.measure.compare import run_compare
    from ..eval.report.tables import print_tables, write_compare_md

    print_tables(write_compare_md(a.out, run_compare(a.runs, a.out, **_compare_kw(a))))
    print(f"compare.json and compare.md in {a.out}")


def cmd_report(a) -> None:
    from ..eval.report.html import run_report

    path = run_report(a.out, a.compare, a.runs, a.train_log, a.samples_per_run, a.note, **_compare_kw(a))
    print(f"report: {path}")


def register(sub, esub) -> None:
    """Add ``eval legibility``, ``eval drift`` and ``eval replay`` to ``esub`` (the subparsers of ``tandem eval``),
    ``compare`` and ``report`` to ``sub`` (``tandem``'s)."""

    lg = esub.add_parser("legibility", help="junior cross-entropy and overlap alpha on a senior's solo samples")
    lg.add_argument("--samples", required=True, help="a `tandem eval solo` run dir of the senior")
    lg.add_argument("--junior", required=True, help="the junior (dir, .gguf, hub id, or tiny-junior); any tokenizer "
                    "with --ce-protocol paper, the senior's with ids")
    lg.add_argument("--ce-protocol", default="paper", choices=("paper", "ids"),
                    help="paper (default; the paper's code): the junior scores the response text re-tokenised with "
                         "its own tokenizer and prompt, EOS excluded, chains of 4088 tokens or more dropped, averaged "
                         "per sample, then per benchmark, then over benchmarks; ids: the sampled ids teacher-forced, "
                         "EOS included, averaged sample -> problem -> benchmark (docs/evaluation.md)")
    lg.add_argument("--senior", default=None, help="the senior (default: models.senior of the run's config.json)")
    lg.add_argument("--benchmarks", default=None, help="comma-separated benchmark specs to re-make the prompts "
                    "(default: the names in config.json; give the files for benchmarks sampled from local files)")
    lg.add_argument("--split", default=None, help="split of registered/hub benchmarks, as given to `eval solo`")
    lg.add_argument("--batch-tokens", type=COUNT, default=16384, help="padded tokens per forward batch (default 16384)")
    lg.add_argument("--device", default="auto", help="auto, cpu, cuda:0, ... (default auto)")
    lg.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto (bf16 on CUDA, else fp32)")
    lg.add_argument("--out", required=True, help="output dir: legibility.json, per_problem.jsonl, per_sample.jsonl")
    lg.set_defaults(fn=cmd_legibility)

    cr = esub.add_parser("cot-rating",
                         help="a judge's 0-4 legibility and coverage rating of each solo chain of thought")
    cr.add_argument("--samples", required=True, help="a `tandem eval solo` run dir of the senior")
    cr.add_argument("--judge", required=True, help="the judge: an http(s) URL of an OpenAI-compatible server, or a "
                    "local model (dir, hub id)")
    cr.add_argument("--judge-served-model", default=None, help="the model name at the URL (default: the first listed)")
    cr.add_argument("--judge-max-tokens", type=COUNT, default=512, help="reply budget per rating (default 512)")
    cr.add_argument("--judge-batch-size", type=COUNT, default=16,
                    help="rows a local judge decodes together (default 16)")
    cr.add_argument("--benchmarks", default=None, help="comma-separated benchmark specs (default: the run's sources)")
    cr.add_argument("--split", default=None, help="split of registered/hub benchmarks, as given to `eval solo`")
    cr.add_argument("--device", default="auto", help="a local judge's device: auto, cpu, cuda:0, ... (default auto)")
    cr.add_argument("--dtype", default="auto", help="a local judge's dtype: float32, bfloat16, float16 or auto")
    cr.add_argument("--out", required=True, help="output dir: cot_rating.json, per_problem.jsonl, per_sample.jsonl, "
                    "judge_cache.sqlite")
    cr.set_defaults(fn=cmd_cot_rating)

    rg = esub.add_parser("regrade", help="rescore a run's saved samples with today's grader (beside the originals)",
                         description="Writes samples.regraded.jsonl and regrade.json (grader version, package "
                         "versions, input hash, flips per benchmark) in RUN_DIR; samples.jsonl is never changed. "
                         "compare and report then use the regraded verdicts.")
    rg.add_argument("run", metavar="RUN_DIR", help="a `tandem eval solo|handoff` run directory")
    rg.add_argument("--replace", action="store_true",
                    help="regrade again a run regraded by another grader or from samples that changed since")
    grader_flag(rg, default=None, help_default="the grader the run was sampled with")
    rg.set_defaults(fn=cmd_regrade)

    dr = esub.add_parser("drift", help="token-distribution drift of seniors from the junior (solo samples)")
    dr.add_argument("--junior-samples", required=True, help="a `tandem eval solo` run dir of the junior")
    dr.add_argument("--seniors", required=True, help="NAME=DIR,NAME=DIR: solo run dirs of the seniors")
    dr.add_argument("--reference", default=None,
                    help="senior whose over-emitted tokens are tracked, e.g. GRPO (default: first)")
    dr.add_argument("--candidate", default=None,
                    help="senior whose recovery is measured, e.g. tandem (default: second)")
    dr.add_argument("--smoothing", type=number(float, 0, lo_open=True), default=1.0,
                    help="additive pseudo-count per token (default 1.0)")
    dr.add_argument("--min-count", type=COUNT, default=10, help="junior count for a token to be frequent (default 10)")
    dr.add_argument("--top-n", type=COUNT, default=500, help="over-emitted tokens tracked for recovery (default 500)")
    dr.add_argument("--min-ref-count", type=COUNT, default=5,
                    help="times the reference must have emitted a token for it to count as over-emitted "
                    "(default 5; see docs/evaluation.md)")
    dr.add_argument("--out", required=True, help="output dir: drift.json, drift.md, over_emitted.csv, counts.npz")
    dr.set_defaults(fn=cmd_drift)

    rq = esub.add_parser("replay", help="check every saved trace's author switches against the run's schedule",
                         description="Re-derive each sample's authorship from its schedule, seed and token ids (as a "
                         "server's client does) and compare it with the recorded senior mask; exits non-zero if any "
                         "trace is invalid.")
    rq.add_argument("run_dir", metavar="RUN_DIR", help="a `tandem eval solo|handoff` run dir")
    rq.add_argument("--tokenizer", default=None, help="tokenizer whose boundary sets the run used (default: "
                    "models.senior of the run's config.json)")
    rq.add_argument("--out", default=None, help="optional output dir for replay.json (every count and the first "
                    "invalid traces)")
    rq.set_defaults(fn=cmd_replay)

    cp = sub.add_parser("compare", help="the paper's tables from several evaluated seniors",
                        description="Solo/handoff pass@k, legibility, drift and paired one-sided t-tests of several "
                        "seniors; writes compare.json and compare.md.")
    cp.add_argument("runs", nargs="*", metavar="RUN", help=RUN_HELP)
    _compare_flags(cp)
    cp.add_argument("--out", required=True, help="output dir: compare.json, compare.md")
    cp.set_defaults(fn=cmd_compare)

    rp = sub.add_parser("report", help="self-contained HTML report: figures, tables, author-coloured samples",
                        description="From a `tandem compare` dir (--compare) or from RUN dirs read like compare.")
    rp.add_argument("runs", nargs="*", metavar="RUN", help=RUN_HELP)
    rp.add_argument("--compare", default=None, metavar="DIR", help="a `tandem compare` output dir")
    _compare_flags(rp)
    rp.add_argument("--train-log", action="append", default=[], metavar="[NAME=]LOG",
                    help="training log jsonl (step, reward/mean, completions/mean_length, senior/token_share, "
                    "wall/step_s)")
    rp.add_argument("--samples-per-run", type=number(int, 0), default=3,
                    help="problems shown in Sample solutions, every senior side by side (default 3)")
    rp.add_argument("--note", action="append", default=[], metavar="TEXT",
                    help="a paragraph shown beside the solo table (repeatable), e.g. what a world builds in")
    rp.add_argument("--out", required=True, help="output dir: report.html, figures/*.png, figures/styles.json")
    rp.set_defaults(fn=cmd_report)
