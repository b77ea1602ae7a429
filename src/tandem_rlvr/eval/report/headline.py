"""The report's headline: a compact table and the few sentences a researcher reads first.

What: ``headline(comp)`` turns a comparison (``compare.json``'s content) into one ``Table``, a
row per senior with solo pass@1, handoff pass@1 for each handoff set-up, each registered
measure's headline columns (``registry``: the junior's cross-entropy on the senior's solo text,
a judge's ratings, ...) and the KL of its solo token distribution to the junior's (each section's
columns, ``registry.sections()``: a plug-in section's too), each beside
its difference from the base model when one of the seniors is called ``base``; and two or
three sentences: every senior's solo and handoff pass@1 against the base, and which paired
one-sided t-tests against the comparison's baseline show their claim under the one headline
rule (``metrics.paired_verdict``: p < ``metrics.ALPHA``).

Why: a report that opens with figures leaves the reader to find the answer; the headline
states it, with the base model as the reference a reader needs (a method that beats GRPO but
not its own starting point has not helped). Only numbers of the comparison enter it.
"""

from __future__ import annotations

from ..measure.metrics import ALPHA, paired_verdict
from ..measure.registry import measures, sections
from .tables import Table


def _macro(m: dict | None) -> float | None:
    return None if not m or "pass@1" not in m.get("macro", {}) else m["macro"]["pass@1"]["mean"]


def _cell(v: float | None, base: float | None, fmt: str = ".3f") -> list[str]:
    """The value, and its difference from the base ("" without a base)."""
    if v is None:
        return ["-", "" if base is None else "-"]
    return [format(v, fmt), "" if base is None else format(v - base, "+" + fmt)]


def _columns(comp: dict) -> list[tuple[str, str, dict[str, float | None]]]:
    """(column title, number format, {senior: value}) of each headline quantity the comparison has, section
    by section (``registry.sections()``: solo, handoff, the measures, drift, plug-ins')."""
    return [col for section in sections() for col in section.show("headline")(comp)]


def solo_columns(comp: dict) -> list[tuple[str, str, dict[str, float | None]]]:
    """Solo pass@1 (macro) of every senior."""
    return [("solo pass@1", ".3f", {n: _macro(m) for n, m in comp["solo"].items()})] if comp["solo"] else []


def handoff_columns(comp: dict) -> list[tuple[str, str, dict[str, float | None]]]:
    """Handoff pass@1 (macro) of every senior, a column per handoff set-up named by its junior and schedule."""
    from ...models import model_name

    cols = []
    for metrics in comp["handoff"].values():
        cfg = next(iter(metrics.values()))["config"]
        who = f"with {model_name(cfg['models'].get('junior'))}, {(cfg['schedule'] or {}).get('name')}"
        cols.append((f"handoff pass@1 ({who})", ".3f", {n: _macro(m) for n, m in metrics.items()}))
    return cols


def measure_columns(comp: dict) -> list[tuple[str, str, dict[str, float | None]]]:
    """Each registered measure's headline columns, from its section of compare.json."""
    return [(col.title, col.fmt, {n: col.value(x) for n, x in comp[m.name].items()})
            for m in measures() for col in (m.headline if comp.get(m.name) else ())]


def drift_columns(comp: dict) -> list[tuple[str, str, dict[str, float | None]]]:
    """KL of each model's solo token distribution to the junior's."""
    if not comp.get("drift"):
        return []
    return [("KL to junior", ".3f", {n: m["kl_to_junior"] for n, m in comp["drift"]["models"].items()})]


def headline_table(comp: dict) -> Table:
    """One row per senior: each headline quantity and, with a ``base`` senior, its difference from it."""
    cols = _columns(comp)
    names = list(dict.fromkeys(n for _, _, vals in cols for n in vals))
    has_base = "base" in names
    header = ["senior"]
    for title, _, _ in cols:
        header += [title, "vs base"] if has_base else [title]
    rows = []
    for n in names:
        row = [n]
        for _, fmt, vals in cols:
            cells = _cell(vals.get(n), None if n == "base" else vals.get("base"), fmt)
            row += (cells if n != "base" else [cells[0], ""]) if has_base else cells[:1]
        rows.append(row)
    return Table("Headline", header, rows)


def _against_base(title: str, vals: dict[str, float | None]) -> str:
    base = vals.get("base")
    parts = [f"{n} {v:.3f}" + (f" ({v - base:+.3f})" if base is not None else "")
             for n, v in vals.items() if n != "base" and v is not None]
    lead = f"{title} against the base model's {base:.3f}: " if base is not None else f"{title}: "
    return lead + ", ".join(parts) + "."


def headline_sentences(comp: dict) -> list[str]:
    """Solo and handoff pass@1 of every senior against the base; the t-tests that reach p < ``ALPHA``."""
    out = [_against_base(title[0].upper() + title[1:], vals) for title, _, vals in _columns(comp) if "pass@1" in title]
    if comp.get("ttests"):
        sig = [t for t in comp["ttests"] if paired_verdict(t) == "shows" and t["candidate"] != "base"]
        base = comp["baseline"]
        if sig:
            out.append(f"Paired one-sided t-tests against {base} at p < {ALPHA}: " + "; ".join(
                f"{t['candidate']} {t['statistic']} {'higher' if t['alternative'] == 'greater' else 'lower'} "
                f"({t['mean_diff']:+.3f}, {p_text(t)})" for t in sig) + ".")
        else:
            out.append(f"No paired one-sided t-test against {base} reaches p < {ALPHA}.")
    return out


def p_text(test: dict) -> str:
    """"p = 0.0012", or why a test has no p (every paired difference the same: ``metrics.paired_verdict``)."""
    return f"p = {test['p']:.2g}" if test.get("p") is not None else f"every one of {test['n']} paired differences alike"
