"""Tables of the evaluation battery: built once as plain strings, rendered three ways.

``Table`` (title, columns, rows of strings) is what ``compare``, ``drift`` and the report
share; ``comparison_tables`` builds the paper's tables from compare.json's content in the
paper's order: each section's (``registry.sections()``: ``solo_tables``, ``handoff_tables``,
``measures_tables``, a registered measure's from its row by ``measure_table``,
``drift_section_tables``, a plug-in section's own), then the t-tests and diagnostics;
``drift_tables`` are those of a drift result. Rendered as GitHub markdown
(``to_markdown``; the files compare.md and drift.md beside the measured results:
``write_compare_md``, ``write_drift_md``), on the terminal (``print_tables``, rich) and as
HTML (``html.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ...io import atomic_write
from ..measure.registry import measures, sections


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
    macro = Table(f"{title}: pass@k, {macro_coverage(benches)} ({problem_counts_text(metrics)})",
                  ["senior", *ks, "senior share"],
                  [[n, *[_pm(m["macro"].get(k)) for k in ks], f"{m['senior_share']['mean']:.3f}"]
                   for n, m in metrics.items()])
    per = Table(f"{title}: pass@1 per benchmark", ["senior", *benches, "macro"],
                [[n, *[_pm(m.get(b, {}).get("pass@1")) for b in [*benches, "macro"]]] for n, m in metrics.items()])
    tables = [macro, per] if len(benches) > 1 else [macro]
    if "macro_paper" in first:
        sets = ", ".join(first["macro_paper"]["sets"])
        tables.append(Table(f"{title}: pass@k, the paper's macro ({sets}; equal weights, "
                            f"{first['macro_paper']['problems']} problems)", ["senior", *ks],
                            [[n, *[_pm(m["macro_paper"].get(k)) for k in ks]] for n, m in metrics.items()]))
    return tables


def problem_counts_text(metrics: dict[str, dict]) -> str:
    """"200 problems" when every run of a table has that many; else each run's count."""
    counts = {n: m["macro"]["problems"] for n, m in metrics.items()}
    if len(set(counts.values())) == 1:
        return f"{next(iter(counts.values()))} problems"
    return "problems: " + ", ".join(f"{n} {c}" for n, c in counts.items())


def _distinct(metrics: dict[str, dict], value) -> str:
    """``value(config)`` when every run agrees; else each run's, named."""
    vals = {n: value(m["config"]) for n, m in metrics.items()}
    if len(set(vals.values())) == 1:
        return next(iter(vals.values()))
    return "; ".join(f"{n}: {v}" for n, v in vals.items())


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
                         ["reference", "candidate", "qualifying tokens", "tracked", "share moved back", "Spearman rho",
                          "p"],
                         [[rec["reference"], rec["candidate"], str(rec.get("qualifying", "?")), str(rec["top_n"]),
                           _num(rec["share_moved_back"], undefined=undefined), _num(sp["rho"], undefined=undefined),
                           _num(sp["p"], ".2g", undefined=undefined)]]))
    ov = drift["over_emitted"]
    names = list(ov["rows"][0]["counts"]) if ov["rows"] else []
    out.append(Table(f"Tokens most over-emitted by {ov['reference']} (counts; log-ratio to the junior)",
                     ["token", "id", *names, "log-ratio"],
                     [[repr(r["token"]) if r["token"] is not None else "", str(r["id"]),
                       *[str(r["counts"][n]) for n in names], f"{r['log_ratio'][ov['reference']]:+.2f}"]
                      for r in ov["rows"][:top]]))
    return out


def _junior_words(spec: str | None) -> str:
    """"junior NAME", or "pool of A, B" for a junior pool's spec (``pool.JuniorPool``)."""
    from ...models import model_name
    from ...pool import JuniorPool

    if spec and "," in spec:
        return "pool of " + ", ".join(model_name(n) for n in JuniorPool.parse(spec).names)
    return f"junior {model_name(spec)}"


def _pool_tables(label: str, metrics: dict[str, dict]) -> list[Table]:
    """A handoff set-up with a junior pool: each senior's pass@k (macro) per junior, over the samples that
    junior got ("—" where no problem had k of them: metrics' ``why``); the pooled row is the table above."""
    from ...models import model_name

    pooled = {n: m for n, m in metrics.items() if m.get("juniors")}
    if not pooled:
        return []
    ks = [k for k in next(iter(metrics.values()))["macro"] if k.startswith("pass@")]
    rows = [[n, model_name(j), str(x["samples"]), *[_pm(x["macro"].get(k)) if (x["macro"].get(k) or {}).get("mean")
                                                    is not None else "—" for k in ks]]
            for n, m in pooled.items() for j, x in m["juniors"].items()]
    return [Table(f"{label} per junior of the pool: pass@k over the samples each junior got (—: no problem had k of "
                  "them)", ["senior", "junior", "samples", *ks], rows)]


def comparison_tables(comp: dict) -> list[Table]:
    """All tables of a comparison, in the paper's order. Models appear by ``models.model_name``
    (never a full path; the report's provenance section has those)."""
    tables = [Table("Compared with --allow-mixed: these runs differ in settings", ["difference"],
                    [[d] for d in comp["mixed"]])] if comp.get("mixed") else []
    tables += [regraded_table(comp["regraded"])] if comp.get("regraded") else []
    for section in sections():  # solo, handoff, the measures, drift, plug-ins' (registry.Section)
        tables += section.show("tables")(comp)
    if comp["ttests"]:
        tables.append(Table(f"Paired one-sided t-tests vs {comp['baseline']} (per-problem, pooled over benchmarks)",
                            ["candidate", "statistic", "H1", "problems", "candidate", "baseline", "diff", "t", "p"],
                            [[t["candidate"], t["statistic"],
                              f"cand {'>' if t['alternative'] == 'greater' else '<'} base", str(t["n"]),
                              _num(t["mean_candidate"]), _num(t["mean_baseline"]), _num(t["mean_diff"], "+.3f"),
                              _num(t["t"], ".2f"), _num(t["p"], ".2g")] for t in comp["ttests"]]))
    return tables + diagnostics_tables(comp)


def solo_tables(comp: dict) -> list[Table]:
    """The solo section's tables: pass@k macro, pass@1 per benchmark (and the paper's macro)."""
    return _pass_tables("Solo", comp["solo"]) if comp["solo"] else []


def handoff_tables(comp: dict) -> list[Table]:
    """Each handoff set-up's pass@k tables, named by its junior and schedule, and its junior pool's."""
    tables = []
    for lb, metrics in comp["handoff"].items():
        label = "Handoff" if lb == "handoff" else f"Handoff {lb}"
        junior = _distinct(metrics, lambda c: _junior_words(c["models"].get("junior")))
        if len({m["config"].get("junior_fingerprint") for m in metrics.values()}) > 1 and "; " not in junior:
            junior += " (other files in each run)"  # one name, different weights (--allow-mixed)
        schedule = _distinct(metrics, lambda c: str((c["schedule"] or {}).get("name")))
        tables += _pass_tables(f"{label} ({junior}, {schedule})", metrics)
        tables += _pool_tables(label, metrics)
    return tables


def measures_tables(comp: dict) -> list[Table]:
    """Every registered measure's table that the comparison has results of."""
    return [measure_table(m, comp[m.name]) for m in measures() if comp.get(m.name)]


def drift_section_tables(comp: dict) -> list[Table]:
    """The drift section's tables (``drift_tables``), when the comparison has one."""
    return drift_tables(comp["drift"]) if comp.get("drift") else []


def measure_table(m, section: dict[str, dict]) -> Table:
    """A registered measure's table (``registry.Measure.columns``): a row per senior of its section of
    compare.json ({senior: the row's summary})."""
    return Table(m.title, ["senior", *[c.title for c in m.columns]],
                 [[n, *[c.cell(x) for c in m.columns]] for n, x in section.items()])


_BOOT_META = ("n_boot", "seed", "level")


def _interval(x: dict | None) -> str:
    """"+0.033 [-0.012, +0.080]", or the difference with why its interval is not defined."""
    if not x or x.get("diff") is None:
        return "n/a" + (f" ({x['why']})" if x and x.get("why") else "")
    if x.get("lo") is None:
        return f"{x['diff']:+.3f} (no interval: {x.get('why', 'undefined')})"
    return f"{x['diff']:+.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}]"


def _runs_of(comp: dict) -> list[tuple[str, str, dict]]:
    """(run kind, senior, its metrics) of every sampling run of a comparison, solo first."""
    out = [("solo", n, m) for n, m in comp["solo"].items()]
    return out + [(lb, n, m) for lb, ms in comp["handoff"].items() for n, m in ms.items()]


def _per_bench_table(title: str, runs: list[tuple[str, str, dict]], cell) -> Table | None:
    """One row per run, one column per benchmark and "all"; ``cell(d, key)`` renders a run's entry."""
    if not runs:
        return None
    benches = list(dict.fromkeys(k for _, _, d in runs for k in d if isinstance(d.get(k), (dict, type(None)))
                                 and k != "all"))
    return Table(title, ["run", "senior", *benches, "all"],
                 [[kind, n, *[cell(d, b) for b in [*benches, "all"]]] for kind, n, d in runs])


def diagnostics_tables(comp: dict) -> list[Table]:
    """Paired bootstrap intervals beside the t-tests, then truncation, distinct problems solved and
    author switches per sequence. A figure from an empty set is "n/a" with the reason."""
    tables = []
    boots = comp.get("bootstrap") or []
    if boots:
        benches = list(dict.fromkeys(k for bt in boots for k in bt
                                     if isinstance(bt[k], dict) and k != "macro"))
        b0 = boots[0]
        tables.append(Table(f"Paired bootstrap {b0['level']:.0%} intervals of candidate - {comp['baseline']} "
                            f"(mean per-problem difference; problems resampled within each benchmark, "
                            f"{b0['n_boot']} resamples, seed {b0['seed']}; macro = mean of benchmark differences)",
                            ["candidate", "statistic", *benches, "macro"],
                            [[bt["candidate"], bt["statistic"], *[_interval(bt.get(b)) for b in [*benches, "macro"]]]
                             for bt in boots]))
    runs = [(k, n, m["diagnostics"]) for k, n, m in _runs_of(comp) if "diagnostics" in m]
    trunc = [(k, n, d["truncation"]) for k, n, d in runs]

    def trunc_cell(d, b):
        if "why" in d:
            return f"n/a ({d['why']})" if b == "all" else "n/a"
        x = d.get(b)
        return "-" if x is None else f"{x['rate']:.1%} ({x['truncated']}/{x['samples']})"

    solved = [(k, n, d["solved"]) for k, n, d in runs]

    def solved_cell(d, b):
        x = d.get(b)
        return "-" if x is None else f"{x['solved']}/{x['problems']}"

    ns = {str(d.get("n")) for _, _, d in solved}
    switches = [(k, n, d["switches"]) for k, n, d in runs if "switches" in d]

    def switch_cell(d, b):
        if b not in d:
            return "-"
        x = d[b]
        return "n/a (no sequences)" if x is None else f"{x['mean']:.2f} ± {x['sd']:.2f}"

    for t in (_per_bench_table("Truncation: share of responses that hit the token budget without EOS", trunc,
                               trunc_cell),
              _per_bench_table(f"Distinct problems solved (pass@n > 0: at least one of n = {', '.join(sorted(ns))} "
                               "samples correct)", solved, solved_cell),
              _per_bench_table("Author switches per sequence in handoff runs (mean ± sd over sequences)", switches,
                               switch_cell)):
        if t is not None:
            tables.append(t)
    return tables


def regraded_table(regraded: dict[str, dict]) -> Table:
    """Which runs' verdicts come from `tandem eval regrade` (not the grader they were sampled with)."""
    rows = []
    for label, info in regraded.items():
        for b, f in info["benchmarks"].items():
            rows.append([label, b, info["grader"]["grader_sha256"][:12], str(f["0->1"]), str(f["1->0"]),
                         f"{f['pass@1_before']:.3f} -> {f['pass@1_after']:.3f}"])
    return Table("Regraded verdicts used (tandem eval regrade; the originals stay in samples.jsonl)",
                 ["run", "benchmark", "grader", "0->1", "1->0", "pass@1"], rows)


def to_markdown(tables: Sequence[Table]) -> str:
    """Tables as GitHub markdown, each under a heading."""
    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", "\\n")

    parts = []
    for t in tables:
        parts += [f"### {t.title}", "", "| " + " | ".join(map(esc, t.columns)) + " |",
                  "|" + "|".join("---" for _ in t.columns) + "|",
                  *["| " + " | ".join(map(esc, r)) + " |" for r in t.rows], ""]
    return "\n".join(parts)


def write_compare_md(out: str | os.PathLike, comp: dict) -> list[Table]:
    """Write out/compare.md, the tables of a comparison (compare.json's content), and return them."""
    tables = comparison_tables(comp)
    with atomic_write(Path(out) / "compare.md") as f:
        f.write("# Comparison\n\n" + to_markdown(tables))
    return tables


def write_drift_md(out: str | os.PathLike, drift: dict) -> None:
    """Write out/drift.md: the recovery sentence and every table of a drift result (drift.json's content),
    the over-emitted table at all its rows."""
    rec = drift.get("recovery")
    with atomic_write(Path(out) / "drift.md") as f:
        f.write("# Drift to the junior\n\n" + (f"{recovery_sentence(rec)}.\n\n" if rec else "")
                + to_markdown(drift_tables(drift, top=len(drift["over_emitted"]["rows"]))))


def print_tables(tables: Sequence[Table]) -> None:
    """Tables on the terminal (rich), first column left-aligned."""
    from rich.markup import escape
    from rich.table import Table as RichTable

    from ...progress import console

    con = console()
    for t in tables:  # cells are text, never rich markup ("[5cd361de]" would vanish)
        rt = RichTable(title=escape(t.title), title_justify="left")
        for i, c in enumerate(t.columns):
            rt.add_column(escape(c), justify="left" if i == 0 else "right")
        for r in t.rows:
            rt.add_row(*map(escape, r))
        con.print(rt)
