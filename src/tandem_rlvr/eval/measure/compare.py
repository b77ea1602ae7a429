"""Compare evaluated seniors: run directories in, the paper's tables out.

What: ``tandem compare RUN... --out DIR`` reads each senior's evaluation directories and
writes DIR/compare.json (``run_compare``): solo pass@k with SE per benchmark and macro (paper
Table 1, Figure 2), handoff pass@k per handoff set-up (Table 2, Figure 3), every registered
measure of the seniors' solo samples (``registry``: junior legibility, a judge's chain-of-thought
rating, plug-ins' measures; each under its name), drift (section 5) and paired one-sided t-tests on per-problem
statistics pooled over benchmarks (Table 3). Runs are found and read through ``run_files`` (``discover``,
``read_run``). This module measures; presenting is the report layer's: the command then writes
DIR/compare.md and prints the tables (``report.tables.write_compare_md``).

How RUN is read: ``[NAME=]DIR`` (NAME defaults to DIR's base name). DIR is an eval
directory itself or holds them as subdirectories: one with ``samples.jsonl`` and a
config.json whose schedule is ``senior`` is the solo run; any other sampling run is a
handoff run, labelled by its directory name (``handoff``, ``handoff-ood``, ...); one with a
measure's result file (``legibility.json``, ``cot_rating.json``, ...) is that measure's result; one
with ``drift.json`` is the drift result (``--drift`` names it explicitly). ``--solo/--handoff/--<measure>
NAME=DIR`` add or replace single entries (``--handoff NAME:LABEL=DIR`` sets the label).

What may be compared (``comparable``): runs in one table and one t-test must agree on every
setting that changes what is measured (schedule, p, K, sampling, n, template, instruction,
answer mode; the junior of handoff runs, by the fingerprint of its files; each benchmark's
problem set, so ``--limit`` too), else a one-line refusal naming the difference;
``--allow-mixed`` compares them anyway, with the differences printed and recorded in
compare.json (``mixed``). One problem id meaning two problems (an edited or reordered copy of
a benchmark) is always refused.

Statistics: pass@k is recomputed from samples.jsonl (so metrics.json is not trusted and k
can be chosen; a k larger than the samples per problem is an error). The t-tests pair the
problems two seniors share, pooled over all benchmarks: pass@1 (the per-problem fraction
correct; H1 candidate > baseline) and each measure's paired stats in the direction its row
claims (junior CE: candidate < baseline; alpha and the judge's ratings: candidate > baseline;
results scored by different juniors or judges are refused as settings differences); every senior is tested against
``--baseline`` (default: the first).
Beside each t-test, the paired bootstrap 95% interval of the same difference per benchmark
and macro (``metrics.paired_bootstrap``, seed 0). Every run also carries its diagnostics
(``metrics.sample_diagnostics``): truncation rate, distinct problems solved, and for handoff
runs author switches per sequence.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ...errors import TandemError
from ...io import write_json
from ...outdir import output_dir
from .metrics import paired_bootstrap, paired_ttest, pair_by_key, pass_at_k_summary, sample_diagnostics
from .comparable import check_same_problems, refuse_mixed_verdicts, refuse_or_warn, settings_differences
from .pool_metrics import junior_pass_at_k, per_junior_correct, run_juniors
from .regrade import apply_regrade
from .registry import Compared, Section, measures, register_section, result_files, sections
from ..run_files import EvalRun, Senior, check_same_benchmarks, discover, read_drift, read_run


MACROS = ("ours", "paper")


def paper_macro_counts(run: EvalRun) -> dict[str, tuple[list[int], list[int]]]:
    """{paper set: (n per problem, correct per problem)} over ``PAPER_MACRO_SETS``; problems of the
    pooled ``aime`` set count in their year (ids ``aime24/<id>``). A missing set is a TandemError."""
    from ...data.benchmarks import PAPER_MACRO_SETS, POOLED

    out: dict[str, tuple[list[int], list[int]]] = {s: ([], []) for s in PAPER_MACRO_SETS}
    for (b, pid), (n, c) in run.counts().items():
        year = pid.split("/", 1)[0] if b in POOLED else b
        if year in out:
            out[year][0].append(n)
            out[year][1].append(c)
    missing = [s for s, (ns, _) in out.items() if not ns]
    if missing:
        raise TandemError(f"{run.samples_path}: --macro paper needs samples of {', '.join(PAPER_MACRO_SETS)} "
                          f"(the paper's four sets); none of {', '.join(missing)}")
    return out


def run_pass_at_k(run: EvalRun, ks: Sequence[int] | None = None, n_boot: int = 10_000, macro: str = "ours") -> dict:
    """metrics.json-like pass@k of a run from its samples; an explicit k above any problem's n is an error.
    With ``macro="paper"`` also ``macro_paper``: the mean over the paper's four sets, equal weights."""
    per_bench: dict[str, tuple[list[int], list[int]]] = {}
    asked = run.config.get("n")
    short = {key: n for key, (n, _) in run.counts().items() if isinstance(asked, int) and n < asked}
    if short:
        (b, pid), n = next(iter(short.items()))
        raise TandemError(f"{run.samples_path}: {len(short)} problem(s) have fewer than the n={asked} samples asked "
                          f"(first: {b}/{pid} has {n}); re-run the evaluation command to complete them")
    for (b, pid), (n, c) in run.counts().items():
        per_bench.setdefault(b, ([], []))[0].append(n)
        per_bench[b][1].append(c)
        for k in ks or ():
            if k > n:
                i = next(i for i, r in enumerate(run.rows) if (r["benchmark"], str(r["problem_id"])) == (b, pid))
                raise TandemError(f"{run.where(i)}: k={k} is larger than the n={n} samples of problem {pid!r} ({b})")
    ks = list(ks or [k for k in run.config.get("ks") or (1,)
                     if k <= min(n for ns, _ in per_bench.values() for n in ns)])
    m = pass_at_k_summary(per_bench, ks, n_boot)
    if macro == "paper":
        m["macro_paper"] = pass_at_k_summary(paper_macro_counts(run), ks, n_boot)["macro"]
    elif macro != "ours":
        raise TandemError(f"unknown --macro {macro!r}; valid: {', '.join(MACROS)}")
    shares = np.array([r.get("senior_share", 1.0) for r in run.rows], dtype=np.float64)
    m["senior_share"] = {"mean": float(shares.mean()), "sd": float(shares.std())}
    m["config"] = {k: run.config.get(k) for k in ("models", "schedule", "sampling", "n", "template")}
    m["config"]["junior_fingerprint"] = ((run.config.get("inputs") or {}).get("models") or {}).get("junior")
    m["diagnostics"] = sample_diagnostics(run.rows, run.counts(), handoff=run.schedule != "senior")
    if run_juniors(run.rows):  # a junior pool: pass@k of each junior over the samples it got
        ids = {b: list(dict.fromkeys(pid for bb, pid in run.counts() if bb == b)) for b in per_bench}
        m["juniors"] = junior_pass_at_k(run.rows, ids, ks, run_juniors(run.rows), n_boot)
    return m


def build_comparison(seniors: dict[str, Senior], drift_dir: Path | None = None, baseline: str | None = None,
                     ks: Sequence[int] | None = None, n_boot: int = 10_000, allow_mixed: bool = False,
                     macro: str = "ours") -> dict:
    """compare.json's content from discovered seniors (see the module docstring)."""
    baseline = baseline or next(iter(seniors))
    if baseline not in seniors:
        raise TandemError(f"--baseline {baseline!r} is not among the compared seniors ({', '.join(seniors)})")
    regraded: dict[str, dict] = {}

    def read(path: Path, label: str) -> EvalRun:  # a run's verdicts: regraded ones where `eval regrade` left them
        run = read_run(path)
        info = apply_regrade(run)
        if info:
            regraded[label] = info
        return run

    solo_runs = {n: read(s.solo, f"{n} (solo)") for n, s in seniors.items() if s.solo}
    labels = list(dict.fromkeys(lb for s in seniors.values() for lb in s.handoff))
    handoff_runs = {lb: {n: read(s.handoff[lb], f"{n} (handoff {lb})") for n, s in seniors.items() if lb in s.handoff}
                    for lb in labels}
    groups = [("solo", solo_runs, False), *((f"handoff ({lb})", runs, True) for lb, runs in handoff_runs.items())]
    for _, group, _ in groups:
        if group:
            check_same_benchmarks(group)
    every = {f"{n} ({what})": run for what, group, _ in groups for n, run in group.items()}
    check_same_problems(every)
    refuse_mixed_verdicts(every)
    mixed = [d for what, group, handoff in groups if group
             for d in refuse_or_warn(settings_differences(group, what, handoff), allow_mixed)]
    rows = {m.name: m for m in measures()}
    unknown = next((k for s in seniors.values() for k in s.measures if k not in rows), None)
    if unknown:
        raise TandemError(f"unknown measure {unknown!r}; valid: {', '.join(rows)}")
    results = {m.name: {n: m.read(s.measures[m.name]) for n, s in seniors.items() if m.name in s.measures}
               for m in rows.values()}
    for m in rows.values():
        if results[m.name]:
            mixed += refuse_or_warn(m.differences({n: res for n, (res, _) in results[m.name].items()}), allow_mixed)
    compared = Compared(seniors, solo_runs, handoff_runs, results, drift_dir, ks, n_boot, macro)
    secs = sections()

    ttests, bootstrap = [], []
    for cand in (n for n in seniors if n != baseline):
        tests = [t for sec in secs for t in sec.tests(compared, cand, baseline)]
        for stat, alt, a, b in tests:
            x, y, keys = pair_by_key(a, b)
            if not keys and ", junior " in stat:
                continue  # no problem where both seniors handed off to this junior of the pool
            if not keys:
                raise TandemError(f"{cand} and {baseline} share no problems for {stat}")
            ttests.append({"candidate": cand, "baseline": baseline, "statistic": stat, **paired_ttest(x, y, alt)})
            bootstrap.append({"candidate": cand, "baseline": baseline, "statistic": stat,
                              **paired_bootstrap(a, b, n_boot)})

    out = {"baseline": baseline,
           # absolute, so `report --compare DIR` finds the runs from any working directory
           "runs": {n: {"solo": _abs(s.solo), "handoff": {lb: _abs(p) for lb, p in s.handoff.items()},
                        **{k: _abs(p) for k, p in s.measures.items()}} for n, s in seniors.items()}}
    for sec in secs:
        out.update(sec.build(compared))
    return {**out, "ttests": ttests, "bootstrap": bootstrap, "mixed": mixed, "regraded": regraded}


# --------------------------------------------------------------------------- the sections of compare.json
def _solo_tests(c: Compared, cand: str, base: str) -> list[tuple]:
    if cand in c.solo and base in c.solo:
        return [("solo pass@1", "greater", c.solo[cand].per_problem_correct(), c.solo[base].per_problem_correct())]
    return []


def _handoff_tests(c: Compared, cand: str, base: str) -> list[tuple]:
    tests = []
    for lb, runs in c.handoff.items():
        if cand in runs and base in runs:
            tests.append((f"handoff pass@1 ({lb})", "greater", runs[cand].per_problem_correct(),
                          runs[base].per_problem_correct()))
            tests += pool_tests(lb, runs[cand].rows, runs[base].rows)
    return tests


def _measure_tests(c: Compared, cand: str, base: str) -> list[tuple]:
    tests = []
    for m in measures():
        got = c.results.get(m.name) or {}
        if cand in got and base in got:
            for st in m.stats:
                a, b = ({k: r[st.key] for k, r in got[who][1].items() if r.get(st.key) is not None}
                        for who in (cand, base))
                if a and b:  # a stat a result lacks (alpha across vocabularies; an unrated problem) is left out
                    tests.append((st.label, st.alternative, a, b))
    return tests


def _measure_sections(c: Compared) -> dict:
    """Each registered measure's section: {measure: {senior: its row's summary}} (empty without results)."""
    rows = {m.name: m for m in measures()}
    return {name: {n: rows[name].summary(res) for n, (res, _) in got.items()} for name, got in c.results.items()}


_REPORT = "tandem_rlvr.eval.report"
SOLO = register_section(Section(
    "solo", ("solo",), lambda c: {"solo": {n: run_pass_at_k(r, c.ks, c.n_boot, c.macro) for n, r in c.solo.items()}},
    tests=_solo_tests, tables=f"{_REPORT}.tables:solo_tables", headline=f"{_REPORT}.headline:solo_columns",
    figures=f"{_REPORT}.html:solo_figures", captions=f"{_REPORT}.html:solo_captions"))
HANDOFF = register_section(Section(
    "handoff", ("handoff",),
    lambda c: {"handoff": {lb: {n: run_pass_at_k(r, c.ks, c.n_boot, c.macro) for n, r in runs.items()}
                           for lb, runs in c.handoff.items()}},
    tests=_handoff_tests, tables=f"{_REPORT}.tables:handoff_tables", headline=f"{_REPORT}.headline:handoff_columns",
    figures=f"{_REPORT}.html:handoff_figures", captions=f"{_REPORT}.html:handoff_captions"))
MEASURES_SECTION = register_section(Section(
    "measures", (), _measure_sections, tests=_measure_tests, tables=f"{_REPORT}.tables:measures_tables",
    headline=f"{_REPORT}.headline:measure_columns"))
DRIFT = register_section(Section(
    "drift", ("drift", "drift_dir"),
    lambda c: {"drift": read_drift(c.drift_dir) if c.drift_dir else None, "drift_dir": _abs(c.drift_dir)},
    tables=f"{_REPORT}.tables:drift_section_tables", headline=f"{_REPORT}.headline:drift_columns",
    figures=f"{_REPORT}.html:drift_figures", captions=f"{_REPORT}.html:drift_captions",
    provenance=f"{_REPORT}.provenance:drift_provenance"))


def pool_tests(label: str, cand_rows: list[dict], base_rows: list[dict]) -> list[tuple]:
    """The per-junior paired tests of two handoff runs with a junior pool: pass@1 of the samples each junior got
    (H1 candidate > baseline), on the problems where both runs handed off to that junior."""
    from ...models import model_name

    juniors = [j for j in run_juniors(cand_rows) if j in set(run_juniors(base_rows))]
    return [(f"handoff pass@1 ({label}, junior {model_name(j)})", "greater", per_junior_correct(cand_rows, j),
             per_junior_correct(base_rows, j)) for j in juniors]


def _abs(path: Path | None) -> str | None:
    return str(Path(path).resolve()) if path else None


def run_compare(runs: Sequence[str], out: str | os.PathLike, solo=(), handoff=(),
                measures: Mapping[str, Sequence[str]] | None = None, drift: str | None = None,
                baseline: str | None = None, ks: Sequence[int] | None = None, n_boot: int = 10_000,
                allow_mixed: bool = False, macro: str = "ours") -> dict:
    """Discover, compute, write out/compare.json and return its content. ``measures``: {measure name:
    [NAME=DIR, ...]}, the explicit result dirs of registered measures (``--legibility NAME=DIR``, ...)."""
    if n_boot < 2:  # a bootstrap SE is the sd of >= 2 resampled means; 0 or 1 would print "± nan"
        raise TandemError(f"--n-boot must be >= 2 bootstrap resamples, got {n_boot}")
    output_dir(out, create=False)
    seniors, found_drift = discover(runs, solo, handoff, measures or {}, result_files())
    if macro not in MACROS:
        raise TandemError(f"unknown --macro {macro!r}; valid: {', '.join(MACROS)}")
    comp = build_comparison(seniors, Path(drift) if drift else found_drift, baseline, ks, n_boot, allow_mixed, macro)
    write_json(Path(out) / "compare.json", comp)
    return comp
