"""The drift-world study's aggregate: collect, reduce, test; and its markdown table.

Over the evaluation directories ``recipes.study`` wrote (read through ``eval.run_files``):

1. ``collect``: per evaluated senior and seed, scalar statistics (solo and handoff pass@k,
   the style of the solo responses, KL to each junior, recovery, junior CE and alpha, the
   training run's best step and wall-clock) and per-problem vectors (pass@1 per run, CE per
   junior) for the tests;
2. ``reduce``: mean and standard error over seeds per variant;
3. ``paired_tests``: paired one-sided t-tests over problems of the seed-averaged per-problem
   statistics, each variant against GRPO (CE: candidate < GRPO; else candidate > GRPO), each
   with the paired bootstrap 95% interval of the same difference (macro over benchmarks).

Diagnostics per seed: the share of solo responses that hit the token budget without EOS
(``solo_truncated``; absent where the samples do not record it), the distinct problems solved
(``solo_solved``: pass@n > 0) and the author switches per handoff sequence
(``handoff_<junior>_switches``).

``aggregate`` chains them (plus the tokens GRPO over-emits most) into OUT/study.json's
content; ``to_markdown`` renders OUT/study.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import TandemError
from ..eval.measure.metrics import paired_bootstrap, sample_diagnostics, switches_summary
from ..eval.run_files import read_drift, read_legibility, read_metrics, read_run
from ..io import read_json, write_json
from ..outdir import config_diff


def _by_problem(per_problem: dict[tuple[str, str], float]) -> dict[str, float]:
    """{(benchmark, problem_id): x} as {"benchmark/problem_id": x}."""
    return {f"{b}/{pid}": x for (b, pid), x in per_problem.items()}


def _macro(run_dir: Path, key: str) -> float | None:
    m = read_metrics(run_dir)
    return m["macro"][key]["mean"] if m is not None and key in m["macro"] else None


def senior_stats(d: Path, juniors: list[str]) -> tuple[dict, dict]:
    """One evaluated senior: scalar statistics, and per-problem vectors for the t-tests."""
    from ..world.style import style_summary

    solo = read_run(d / "solo")
    rows = solo.rows
    sty = style_summary([r["response"] for r in rows], [r["correct"] for r in rows])
    stats = {"solo_pass@1": _macro(d / "solo", "pass@1"), "solo_pass@4": _macro(d / "solo", "pass@4"),
             **{k: sty[k] for k in ("shorthand_share", "frac_shorthand", "frac_word", "frac_mixed", "frac_other",
                                    "acc_word", "acc_shorthand")},
             "solo_tokens": sum(r["tokens"] for r in rows) / max(1, len(rows))}
    diag = sample_diagnostics(rows, solo.counts(), handoff=False)
    if "all" in diag["truncation"]:
        stats["solo_truncated"] = diag["truncation"]["all"]["rate"]
    stats["solo_solved"] = diag["solved"]["all"]["solved"]
    per = {"solo": _by_problem(solo.per_problem_correct())}
    for j in juniors:
        h = d / f"handoff-{j}"
        if read_metrics(h) is not None:
            stats[f"handoff_{j}_pass@1"] = _macro(h, "pass@1")
            stats[f"handoff_{j}_pass@4"] = _macro(h, "pass@4")
            hrun = read_run(h)
            per[f"handoff_{j}"] = _by_problem(hrun.per_problem_correct())
            sw = switches_summary(r["senior_mask"] for r in hrun.rows)
            if sw is not None:
                stats[f"handoff_{j}_switches"] = sw["mean"]
        lg = d / f"legibility-{j}"
        if (lg / "legibility.json").is_file():
            result, problems = read_legibility(lg)
            stats[f"ce_{j}"] = result["summary"]["ce"]["macro"]["mean"]
            stats[f"alpha_{j}"] = result["summary"]["alpha"]["macro"]["mean"]
            per[f"ce_{j}"] = _by_problem({k: p["ce"] for k, p in problems.items() if p.get("ce") is not None})
    return stats, per


def mean_se(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return {"mean": None, "se": None, "n": 0}
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else None
    return {"mean": m, "se": se, "n": len(xs)}


def collect(out: Path, seeds: list[int], variants: list[str], juniors: list[str]) -> tuple[dict, dict, list[int]]:
    """({variant: [stats per seed]}, {variant: [per-problem vectors per seed]}, finished seeds).

    The base model (evaluated once) is variant "base"; a seed counts once every variant has its
    solo metrics."""
    shared = out / "shared" / "eval"
    base_stats, base_pp = senior_stats(shared / "base", juniors)
    per_seed: dict[str, list[dict]] = {"base": [base_stats]}
    per_problem: dict[str, list[dict]] = {"base": [base_pp]}
    done_seeds = []
    for seed in seeds:
        sd = out / f"seed{seed}"
        if not all(read_metrics(sd / "eval" / v / "solo") is not None for v in variants):
            continue
        done_seeds.append(seed)
        for v in variants:
            st, pp = senior_stats(sd / "eval" / v, juniors)
            for j in juniors:
                name = v.split("-")[0]
                if (sd / f"drift-{j}" / "drift.json").is_file() and (v == "grpo" or v.endswith(j)):
                    dr = read_drift(sd / f"drift-{j}")
                    st[f"kl_to_{j}"] = dr["models"].get(name, {}).get("kl_to_junior")
                    if v.startswith("tandem") and dr.get("recovery"):
                        st[f"recovery_{j}"] = dr["recovery"].get("share_moved_back", dr["recovery"].get("share"))
            runlog = sd / "runs" / v / "summary.json"
            if runlog.is_file():
                summ = read_json(runlog)
                st["best_step"] = (summ.get("best") or {}).get("step") if isinstance(summ.get("best"), dict) else None
                st["train_wall_s"] = summ.get("wall_total_s")
            per_seed.setdefault(v, []).append(st)
            per_problem.setdefault(v, []).append(pp)
    return per_seed, per_problem, done_seeds


def reduce(per_seed: dict[str, list[dict]]) -> dict[str, dict]:
    """{variant: {statistic: mean, SE and count over seeds}} for every numeric statistic."""
    keys = sorted({k for rows in per_seed.values() for r in rows for k, v in r.items() if isinstance(v, (int, float))})
    return {v: {k: mean_se([r.get(k) for r in rows]) for k in keys} for v, rows in per_seed.items()}


def _seed_average(vecs: list[dict]) -> dict:
    common = set.intersection(*(set(x) for x in vecs)) if vecs else set()
    return {p: sum(x[p] for x in vecs) / len(vecs) for p in common}


def paired_tests(per_problem: dict[str, list[dict]]) -> dict[str, dict]:
    """Each variant vs GRPO on every per-problem statistic both have (seed-averaged, paired by problem)."""
    from ..eval.measure.metrics import paired_ttest

    tests = {}
    if "grpo" not in per_problem:
        return tests
    for v in per_problem:
        if v in ("grpo", "base"):
            continue
        for stat in sorted(set(per_problem[v][0]) & set(per_problem["grpo"][0])):
            cand = _seed_average([pp[stat] for pp in per_problem[v]])
            ref = _seed_average([pp[stat] for pp in per_problem["grpo"]])
            common = sorted(set(cand) & set(ref))
            if len(common) < 2:
                continue
            alt = "less" if stat.startswith("ce_") else "greater"
            t = paired_ttest([cand[p] for p in common], [ref[p] for p in common], alternative=alt)
            boot = paired_bootstrap({tuple(p.split("/", 1)): cand[p] for p in common},
                                    {tuple(p.split("/", 1)): ref[p] for p in common})
            tests[f"{v} vs grpo: {stat}"] = {"alternative": alt, "n_problems": len(common),
                                             "mean_diff": sum(cand[p] - ref[p] for p in common) / len(common), **t,
                                             "bootstrap_macro": boot["macro"]}
    return tests


def aggregate(out: Path, settings: dict, variants: list[str]) -> dict:
    """OUT/study.json's content (without the wall-clock): settings, finished seeds, statistics
    per seed, their mean and SE, the paired tests and the top over-emitted tokens."""
    seeds = read_json(out / "settings.json")["seeds"]
    per_seed, per_problem, done_seeds = collect(out, seeds, variants, settings["juniors"])
    return {"settings": {**settings, "seeds": seeds}, "seeds_done": done_seeds, "per_seed": per_seed,
            "table": reduce(per_seed), "tests": paired_tests(per_problem),
            "top_over_emitted": _top_tokens(out, done_seeds, settings["juniors"])}


def _top_tokens(out: Path, seeds: list[int], juniors: list[str], rows: int = 10) -> dict:
    """The tokens GRPO over-emits most against each junior (first finished seed), with counts."""
    res = {}
    for j in juniors:
        for seed in seeds:
            d = out / f"seed{seed}" / f"drift-{j}"
            if (d / "drift.json").is_file():
                dr = read_drift(d)
                # Tokens GRPO emitted at least 10 times: with add-one smoothing, a token seen once
                # by GRPO and never by the junior otherwise tops the list.
                frequent = [r for r in dr["over_emitted"]["rows"] if r["counts"].get("grpo", 0) >= 10]
                rec = {k: v for k, v in (dr.get("recovery") or {}).items() if not isinstance(v, list)}
                res[j] = {"seed": seed, "rows": frequent[:rows], "recovery": rec}
                break
    return res


COLUMNS = [("solo_pass@1", "solo p@1"), ("solo_pass@4", "solo p@4"), ("handoff_self_pass@1", "handoff self p@1"),
           ("handoff_weak_pass@1", "handoff weak p@1"), ("solo_truncated", "solo truncated"),
           ("solo_solved", "solo problems solved"), ("handoff_self_switches", "switches/seq self"),
           ("handoff_weak_switches", "switches/seq weak"), ("shorthand_share", "shorthand share"),
           ("acc_word", "acc (word)"), ("acc_shorthand", "acc (shorthand)"), ("kl_to_self", "KL to base"),
           ("kl_to_weak", "KL to weak"), ("ce_self", "CE base"), ("alpha_self", "alpha base"),
           ("ce_weak", "CE weak"), ("alpha_weak", "alpha weak")]


def _cell(m: dict | None) -> str:
    if not m or m.get("mean") is None:
        return "-"
    return f"{m['mean']:.3f}" + (f" ± {m['se']:.3f}" if m.get("se") is not None else "")


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def _ci(m: dict | None) -> str:
    """"[lo, hi]" of a bootstrap interval, or "n/a (why)" where it is not defined (or not computed: older
    study.json)."""
    if not m or m.get("lo") is None:
        return "n/a" + (f" ({m['why']})" if m and m.get("why") else "")
    return f"[{m['lo']:+.4f}, {m['hi']:+.4f}]"


def to_markdown(res: dict) -> str:
    """OUT/study.md: the table of means and SEs, the paired tests, the top over-emitted tokens."""
    lines = [f"# Drift-world study (seeds finished: {res['seeds_done']})", "",
             "Mean ± standard error over seeds (base: one evaluation). p@k: pass@k on "
             f"{res['settings']['limit']} test problems x {res['settings']['n']} samples.", ""]
    cols = [c for c in COLUMNS if any(c[0] in t for t in res["table"].values())]
    lines.append("| senior | " + " | ".join(h for _, h in cols) + " |")
    lines.append("|---" * (len(cols) + 1) + "|")
    for v, t in res["table"].items():
        lines.append(f"| {v} | " + " | ".join(_cell(t.get(k)) for k, _ in cols) + " |")
    lines += ["", "Paired one-sided t-tests over problems (per-problem statistic averaged over seeds; "
              "candidate > GRPO, CE: candidate < GRPO), with the paired bootstrap 95% interval of the difference "
              "(problems resampled within each benchmark, 10000 resamples, seed 0; macro = mean of benchmark "
              "differences):", "", "| test | mean diff | 95% interval (macro) | t | p |", "|---|---|---|---|---|"]
    for name, t in res["tests"].items():
        stat = name.split(": ")[-1]
        if stat.startswith("ce_") and not name.split(" ")[0].endswith(stat[3:]):
            continue  # CE against the other junior: in study.json
        lines.append(f"| {name} | {t['mean_diff']:+.4f} | {_ci(t.get('bootstrap_macro'))} | {_fmt(t.get('t'))} | "
                     f"{_fmt(t.get('p'))} |")
    for j, top in res["top_over_emitted"].items():
        lines += ["", f"Top tokens GRPO over-emits vs the {j} junior (seed {top['seed']}; GRPO count >= 10; "
                  "'junior' = the junior's solo samples):", "",
                  "| token | counts | log-ratio grpo |", "|---|---|---|"]
        for r in top["rows"]:
            grpo = r["log_ratio"].get("grpo", float("nan"))
            lines.append(f"| {json.dumps(r.get('token'))} | {r['counts']} | {grpo:.2f} |")
    return "\n".join(lines) + "\n"


def record_settings(out: Path, settings, what: str) -> list[int]:
    """Refuse a study directory ``out`` of other settings (every field of ``settings`` but ``seeds``);
    record the union of its seeds and this run's in OUT/settings.json, written only when that changes
    (a finished study re-run writes nothing); return the union. ``what`` names the study in the error."""
    path = out / "settings.json"
    mine = {k: v for k, v in settings.__dict__.items() if k != "seeds"}
    seeds = list(settings.seeds)
    if path.is_file():
        old = read_json(path)
        if config_diff(old, mine, ignore=("seeds",)):
            raise TandemError(f"{out} holds {what} with other settings ({path}); use another --out")
        seeds = sorted(set(old.get("seeds", [])) | set(settings.seeds))
        if old == {**mine, "seeds": seeds}:
            return seeds
    write_json(path, {**mine, "seeds": seeds})
    return seeds
