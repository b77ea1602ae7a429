"""Compare evaluated seniors: run directories in, the paper's tables out.

What: ``tandem compare RUN... --out DIR`` reads each senior's evaluation directories and
writes DIR/compare.json and DIR/compare.md (and prints the tables): solo pass@k with SE
per benchmark and macro (paper Table 1, Figure 2), handoff pass@k per handoff set-up
(Table 2, Figure 3), junior legibility, drift (section 5) and paired one-sided t-tests on
per-problem statistics pooled over benchmarks (Table 3). It is also home of ``read_run``,
the validating reader of ``samples.jsonl`` that every battery command uses.

How RUN is read: ``[NAME=]DIR`` (NAME defaults to DIR's base name). DIR is an eval
directory itself or holds them as subdirectories: one with ``samples.jsonl`` and a
config.json whose schedule is ``senior`` is the solo run; any other sampling run is a
handoff run, labelled by its directory name (``handoff``, ``handoff-ood``, ...); one with
``legibility.json`` is the legibility result; one with ``drift.json`` is the drift result
(``--drift`` names it explicitly). ``--solo/--handoff/--legibility NAME=DIR`` add or
replace single entries (``--handoff NAME:LABEL=DIR`` sets the label).

Statistics: pass@k is recomputed from samples.jsonl (so metrics.json is not trusted and k
can be chosen; a k larger than the samples per problem is an error). The t-tests pair the
problems two seniors share, pooled over all benchmarks: pass@1 (the per-problem fraction
correct; H1 candidate > baseline), junior CE (H1 candidate < baseline) and alpha (H1
candidate > baseline); every senior is tested against ``--baseline`` (default: the first).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import TandemError
from ..io import atomic_write, write_json
from ..rundir import output_dir
from .metrics import paired_ttest, pair_by_key, pass_at_k_summary
from .sampler import validate_sample_row

log = logging.getLogger("tandem_rlvr")



# --------------------------------------------------------------------------- run directories
@dataclass
class EvalRun:
    """One sampling run (``tandem eval solo|handoff``): config.json and validated sample rows.

    rows[i]["token_ids"] and rows[i]["senior_mask"] are (T_i,) int64 arrays; lines[i] is
    row i's line number in samples.jsonl, for error messages.
    """

    path: Path
    config: dict
    rows: list[dict]
    lines: list[int]

    @property
    def samples_path(self) -> Path:
        return self.path / "samples.jsonl"

    @property
    def schedule(self) -> str:
        return (self.config.get("schedule") or {}).get("name", "senior")

    def where(self, i: int) -> str:
        return f"{self.samples_path}:{self.lines[i]}"

    def per_problem_correct(self) -> dict[tuple[str, str], float]:
        """{(benchmark, problem_id): fraction of its samples that are correct} (= pass@1)."""
        nc = self.counts()
        return {key: c / n for key, (n, c) in nc.items()}

    def counts(self) -> dict[tuple[str, str], tuple[int, int]]:
        """{(benchmark, problem_id): (n samples, c correct)}."""
        out: dict[tuple[str, str], list[int]] = {}
        for r in self.rows:
            x = out.setdefault((r["benchmark"], str(r["problem_id"])), [0, 0])
            x[0] += 1
            x[1] += int(bool(r["correct"]))
        return {k: (n, c) for k, (n, c) in out.items()}


def _read_json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TandemError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise TandemError(f"{path}: expected a JSON object")
    return obj


def read_run(path: str | os.PathLike) -> EvalRun:
    """Read and validate a sampling run directory; any defect is a TandemError naming file and line."""
    path = Path(path)
    if not path.is_dir():
        raise TandemError(f"{path}: no such run directory")
    if not any(path.iterdir()):
        raise TandemError(f"{path}: empty run directory")
    for name in ("config.json", "samples.jsonl"):
        if not (path / name).is_file():
            raise TandemError(f"{path}: not an eval run directory (no {name})")
    config = _read_json(path / "config.json")
    benchmarks = config.get("benchmarks") or []
    rows, lines, seen = [], [], set()
    samples = path / "samples.jsonl"
    with open(samples, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{samples}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TandemError(f"{where}: truncated or malformed JSON line ({e.msg})") from None
            validate_sample_row(row, where)
            if benchmarks and row["benchmark"] not in benchmarks:
                raise TandemError(f"{where}: benchmark {row['benchmark']!r} is not in config.json's benchmarks "
                                  f"({', '.join(benchmarks)}): a samples file from another benchmark set?")
            row["token_ids"] = np.asarray(row["token_ids"], dtype=np.int64)
            row["senior_mask"] = np.asarray(row["senior_mask"], dtype=np.int64)
            if row["token_ids"].shape != row["senior_mask"].shape:
                raise TandemError(f"{where}: token_ids and senior_mask differ in length")
            key = (row["benchmark"], str(row["problem_id"]), row["sample_idx"])
            if key in seen:
                raise TandemError(f"{where}: duplicate sample {key}")
            seen.add(key)
            rows.append(row)
            lines.append(lineno)
    if not rows:
        raise TandemError(f"{samples}: no samples")
    return EvalRun(path, config, rows, lines)


@dataclass
class Senior:
    """Where one senior's results live: solo run, handoff runs by label, legibility dir."""

    name: str
    solo: Path | None = None
    handoff: dict[str, Path] = field(default_factory=dict)
    legibility: Path | None = None


def split_named(spec: str, what: str = "RUN") -> tuple[str, Path]:
    """'NAME=DIR' -> (NAME, DIR); 'DIR' -> (DIR's base name, DIR)."""
    name, sep, d = spec.partition("=")
    if not sep:
        d, name = spec, Path(spec).resolve().name
    if not name or not d:
        raise TandemError(f"bad {what} {spec!r}: expected NAME=DIR or DIR")
    return name, Path(d)


def classify(path: Path) -> tuple[str, str] | None:
    """('solo'|'handoff'|'legibility'|'drift', label) of an eval directory, None if none."""
    if (path / "samples.jsonl").is_file() and (path / "config.json").is_file():
        sched = (_read_json(path / "config.json").get("schedule") or {}).get("name", "senior")
        return ("solo", "solo") if sched == "senior" else ("handoff", path.name)
    for kind in ("legibility", "drift"):
        if (path / f"{kind}.json").is_file():
            return kind, path.name
    return None


def discover(run_specs: Sequence[str], solo=(), handoff=(), legibility=()) -> tuple[dict[str, Senior], Path | None]:
    """Seniors from RUN specs plus explicit entries; also the drift dir found among them (or None)."""
    seniors: dict[str, Senior] = {}
    drift = None
    for spec in run_specs:
        name, d = split_named(spec)
        if not d.is_dir():
            raise TandemError(f"{d}: no such run directory")
        if not any(d.iterdir()):
            raise TandemError(f"{d}: empty run directory")
        s = seniors.setdefault(name, Senior(name))
        own = classify(d)
        found = [(d, own)] if own else [(c, classify(c)) for c in sorted(d.iterdir()) if c.is_dir()]
        found = [(p, k) for p, k in found if k]
        if not found:
            raise TandemError(f"{d}: no eval results (no samples.jsonl, legibility.json or drift.json in it or "
                              "its subdirectories)")
        for p, (kind, label) in found:
            if kind == "solo":
                if s.solo is not None:
                    raise TandemError(f"{d}: two solo runs ({s.solo}, {p}); pass --solo {name}=DIR")
                s.solo = p
            elif kind == "handoff":
                s.handoff[label] = p
            elif kind == "legibility":
                s.legibility = p
            else:
                drift = p
    for spec in solo:
        name, d = split_named(spec, "--solo")
        seniors.setdefault(name, Senior(name)).solo = d
    for spec in handoff:
        name, d = split_named(spec, "--handoff")
        name, _, label = name.partition(":")
        seniors.setdefault(name, Senior(name)).handoff[label or d.resolve().name] = d
    for spec in legibility:
        name, d = split_named(spec, "--legibility")
        seniors.setdefault(name, Senior(name)).legibility = d
    if not seniors:
        raise TandemError("nothing to compare: give RUN directories or --solo/--handoff/--legibility NAME=DIR")
    return seniors, drift


# --------------------------------------------------------------------------- statistics
def check_same_benchmarks(runs: dict[str, EvalRun]) -> None:
    """Runs compared in one table must cover the benchmarks of the first run, no more, no less."""
    (ref_name, ref), *rest = runs.items()
    ref_b = {r["benchmark"] for r in ref.rows}
    for run in dict(rest).values():
        for i, r in enumerate(run.rows):
            if r["benchmark"] not in ref_b:
                raise TandemError(f"{run.where(i)}: benchmark {r['benchmark']!r} is not in the benchmark set of "
                                  f"{ref_name} ({', '.join(sorted(ref_b))}): a samples file from another benchmark set?")
        missing = ref_b - {r["benchmark"] for r in run.rows}
        if missing:
            raise TandemError(f"{run.samples_path}: no samples of {', '.join(sorted(missing))}, which {ref_name} has")


def run_pass_at_k(run: EvalRun, ks: Sequence[int] | None = None, n_boot: int = 10_000) -> dict:
    """metrics.json-like pass@k of a run from its samples; an explicit k above any problem's n is an error."""
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
    ks = list(ks or [k for k in run.config.get("ks") or (1,) if k <= min(n for ns, _ in per_bench.values() for n in ns)])
    m = pass_at_k_summary(per_bench, ks, n_boot)
    shares = np.array([r.get("senior_share", 1.0) for r in run.rows], dtype=np.float64)
    m["senior_share"] = {"mean": float(shares.mean()), "sd": float(shares.std())}
    m["config"] = {k: run.config.get(k) for k in ("models", "schedule", "sampling", "n", "template")}
    return m


def build_comparison(seniors: dict[str, Senior], drift_dir: Path | None = None, baseline: str | None = None,
                     ks: Sequence[int] | None = None, n_boot: int = 10_000) -> dict:
    """compare.json's content from discovered seniors (see the module docstring)."""
    from .legibility import read_legibility

    baseline = baseline or next(iter(seniors))
    if baseline not in seniors:
        raise TandemError(f"--baseline {baseline!r} is not among the compared seniors ({', '.join(seniors)})")
    solo_runs = {n: read_run(s.solo) for n, s in seniors.items() if s.solo}
    labels = list(dict.fromkeys(lb for s in seniors.values() for lb in s.handoff))
    handoff_runs = {lb: {n: read_run(s.handoff[lb]) for n, s in seniors.items() if lb in s.handoff} for lb in labels}
    for group in [solo_runs, *handoff_runs.values()]:
        if group:
            check_same_benchmarks(group)
    leg = {n: read_legibility(s.legibility) for n, s in seniors.items() if s.legibility}
    juniors = sorted({str(res["config"].get("junior")) for res, _ in leg.values()})
    if len(juniors) > 1:
        log.warning("legibility results were scored with different juniors (%s): not comparable", ", ".join(juniors))
    if drift_dir and not (drift_dir / "drift.json").is_file():
        raise TandemError(f"{drift_dir}: not a drift directory (no drift.json)")
    drift = _read_json(drift_dir / "drift.json") if drift_dir else None

    ttests = []
    for cand in (n for n in seniors if n != baseline):
        tests = []
        if cand in solo_runs and baseline in solo_runs:
            tests.append(("solo pass@1", "greater", solo_runs[cand].per_problem_correct(),
                          solo_runs[baseline].per_problem_correct()))
        for lb, runs in handoff_runs.items():
            if cand in runs and baseline in runs:
                tests.append((f"handoff pass@1 ({lb})", "greater", runs[cand].per_problem_correct(),
                              runs[baseline].per_problem_correct()))
        if cand in leg and baseline in leg:
            for stat, alt in (("ce", "less"), ("alpha", "greater")):
                tests.append((f"junior {'CE' if stat == 'ce' else 'alpha'}", alt,
                              {k: r[stat] for k, r in leg[cand][1].items()}, {k: r[stat] for k, r in leg[baseline][1].items()}))
        for stat, alt, a, b in tests:
            x, y, keys = pair_by_key(a, b)
            if not keys:
                raise TandemError(f"{cand} and {baseline} share no problems for {stat}")
            ttests.append({"candidate": cand, "baseline": baseline, "statistic": stat, **paired_ttest(x, y, alt)})

    return {"baseline": baseline,
            # absolute, so `report --compare DIR` finds the runs from any working directory
            "runs": {n: {"solo": _abs(s.solo), "handoff": {lb: _abs(p) for lb, p in s.handoff.items()},
                         "legibility": _abs(s.legibility)} for n, s in seniors.items()},
            "solo": {n: run_pass_at_k(r, ks, n_boot) for n, r in solo_runs.items()},
            "handoff": {lb: {n: run_pass_at_k(r, ks, n_boot) for n, r in runs.items()} for lb, runs in handoff_runs.items()},
            "legibility": {n: {"summary": res["summary"], "junior": res["config"]["junior"], "samples": res["samples"]}
                           for n, (res, _) in leg.items()},
            "drift": drift, "drift_dir": _abs(drift_dir), "ttests": ttests}


def _abs(path: Path | None) -> str | None:
    return str(Path(path).resolve()) if path else None


# --------------------------------------------------------------------------- tables
@dataclass
class Table:
    """A rendered table: plain strings, shared by the terminal, markdown and HTML."""

    title: str
    columns: list[str]
    rows: list[list[str]]


def _pm(m: dict | None) -> str:
    return "-" if not m else f"{m['mean']:.3f} ± {m['se']:.3f}"


def _num(x, fmt: str = ".3f", undefined: str = "n/a") -> str:
    return undefined if x is None else format(x, fmt)


def recovery_sentence(rec: dict) -> str:
    """One line saying what the recovery figure measures and over how many tokens (or that it is undefined)."""
    which = (f"{rec.get('qualifying', rec['top_n'])} tokens qualify as over-emitted by {rec['reference']} "
             f"(log-ratio > 0, emitted >= {rec.get('min_ref_count', 1)} times)")
    if rec.get("defined") is False or rec["share_moved_back"] is None:
        return f"{which}: too few (< {rec.get('min_tokens', 10)}); recovery share and Spearman rho are not defined"
    sp = rec["spearman"]
    rho = "not defined" if sp["rho"] is None else f"{sp['rho']:.2f} (p = {sp['p']:.2g})"
    note = (f" (trivially: {rec['candidate']}'s token counts equal the junior's, the same checkpoint?)"
            if rec.get("candidate_is_junior") else "")
    return (f"{which}; of the top {rec['top_n']}, {rec['candidate']} moves {rec['share_moved_back']:.1%} back toward "
            f"the junior; Spearman rho {rho}{note}")


def _pass_tables(title: str, metrics: dict[str, dict]) -> list[Table]:
    first = next(iter(metrics.values()))
    ks = [k for k in first["macro"] if k.startswith("pass@")]
    benches = [b for b, m in first.items() if isinstance(m, dict) and "problems" in m and b != "macro"]
    macro = Table(f"{title}: pass@k, {macro_coverage(benches)} ({first['macro']['problems']} problems)",
                  ["senior", *ks, "senior share"],
                  [[n, *[_pm(m["macro"].get(k)) for k in ks], f"{m['senior_share']['mean']:.3f}"] for n, m in metrics.items()])
    per = Table(f"{title}: pass@1 per benchmark", ["senior", *benches, "macro"],
                [[n, *[_pm(m.get(b, {}).get("pass@1")) for b in [*benches, "macro"]]] for n, m in metrics.items()])
    return [macro, per] if len(benches) > 1 else [macro]


def macro_coverage(benches: Sequence[str]) -> str:
    """Which sets a macro average covers, e.g. "macro over 3 benchmarks: aime, amc23, math500"; names
    the paper's pooling when the AIME years are separate sets (each then weighs as much as AMC)."""
    text = f"macro over {len(benches)} benchmark{'s' if len(benches) != 1 else ''}: {', '.join(benches)}"
    years = [b for b in ("aime24", "aime25", "aime26") if b in benches]
    if len(years) > 1 and "aime" not in benches:
        text += f" ({', '.join(years)} as {len(years)} sets; the paper pools AIME 2024-2026 as one set, 'aime')"
    return text


def drift_tables(drift: dict, top: int = 20) -> list[Table]:
    """KL and survival summary per model, the recovery line, and the most over-emitted tokens."""
    out = [Table("Drift to the junior (solo generations)", ["model", "tokens", "KL(model || junior)",
                 f"share |log-ratio| > 1 ({drift['survival']['frequent_tokens']} frequent tokens)"],
                 [[n, str(m["tokens"]), f"{m['kl_to_junior']:.4f}", _num(m["share_abs_log_ratio_gt_1"])]
                  for n, m in drift["models"].items()])]
    rec = drift.get("recovery")
    if rec:
        sp = rec["spearman"]
        undefined = "not defined" if rec.get("defined") is False else "n/a"
        out.append(Table(f"Recovery: {rec['candidate']} vs {rec['reference']}'s top-{rec['top_n']} over-emitted tokens",
                         ["reference", "candidate", "qualifying tokens", "tracked", "share moved back", "Spearman rho", "p"],
                         [[rec["reference"], rec["candidate"], str(rec.get("qualifying", "?")), str(rec["top_n"]),
                           _num(rec["share_moved_back"], undefined=undefined), _num(sp["rho"], undefined=undefined),
                           _num(sp["p"], ".2g", undefined=undefined)]]))
    ov = drift["over_emitted"]
    names = list(ov["rows"][0]["counts"]) if ov["rows"] else []
    out.append(Table(f"Tokens most over-emitted by {ov['reference']} (counts; log-ratio to the junior)",
                     ["token", "id", *names, "log-ratio"],
                     [[repr(r["token"]) if r["token"] is not None else "", str(r["id"]), *[str(r["counts"][n]) for n in names],
                       f"{r['log_ratio'][ov['reference']]:+.2f}"] for r in ov["rows"][:top]]))
    return out


def comparison_tables(comp: dict) -> list[Table]:
    """All tables of a comparison, in the paper's order. Models appear by ``models.model_name``
    (never a full path; the report's provenance section has those)."""
    from ..models import model_name

    tables = _pass_tables("Solo", comp["solo"]) if comp["solo"] else []
    for lb, metrics in comp["handoff"].items():
        cfg = next(iter(metrics.values()))["config"]
        label = "Handoff" if lb == "handoff" else f"Handoff {lb}"
        tables += _pass_tables(f"{label} (junior {model_name(cfg['models'].get('junior'))}, "
                               f"{(cfg['schedule'] or {}).get('name')})", metrics)
    if comp["legibility"]:
        tables.append(Table("Junior legibility (macro over benchmarks)", ["senior", "junior", "CE (nats)", "alpha", "samples"],
                            [[n, model_name(x["junior"]), _pm(x["summary"]["ce"]["macro"]), _pm(x["summary"]["alpha"]["macro"]),
                              str(x["samples"])] for n, x in comp["legibility"].items()]))
    if comp["drift"]:
        tables += drift_tables(comp["drift"])
    if comp["ttests"]:
        tables.append(Table(f"Paired one-sided t-tests vs {comp['baseline']} (per-problem, pooled over benchmarks)",
                            ["candidate", "statistic", "H1", "problems", "candidate", "baseline", "diff", "t", "p"],
                            [[t["candidate"], t["statistic"], f"cand {'>' if t['alternative'] == 'greater' else '<'} base",
                              str(t["n"]), _num(t["mean_candidate"]), _num(t["mean_baseline"]), _num(t["mean_diff"], "+.3f"),
                              _num(t["t"], ".2f"), _num(t["p"], ".2g")] for t in comp["ttests"]]))
    return tables


def to_markdown(tables: Sequence[Table]) -> str:
    """Tables as GitHub markdown, each under a heading."""
    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", "\\n")

    parts = []
    for t in tables:
        parts += [f"### {t.title}", "", "| " + " | ".join(map(esc, t.columns)) + " |",
                  "|" + "|".join("---" for _ in t.columns) + "|", *["| " + " | ".join(map(esc, r)) + " |" for r in t.rows], ""]
    return "\n".join(parts)


def run_compare(runs: Sequence[str], out: str | os.PathLike, solo=(), handoff=(), legibility=(), drift: str | None = None,
                baseline: str | None = None, ks: Sequence[int] | None = None, n_boot: int = 10_000) -> tuple[dict, list[Table]]:
    """Discover, compute, and write out/compare.json and out/compare.md; return them."""
    output_dir(out, create=False)
    seniors, found_drift = discover(runs, solo, handoff, legibility)
    comp = build_comparison(seniors, Path(drift) if drift else found_drift, baseline, ks, n_boot)
    tables = comparison_tables(comp)
    out = Path(out)
    write_json(out / "compare.json", comp)
    with atomic_write(out / "compare.md") as f:
        f.write("# Comparison\n\n" + to_markdown(tables))
    return comp, tables
