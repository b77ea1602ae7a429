"""Evaluation measures as registry rows: how a measure of a senior's solo samples is computed, read
back, compared and shown, in one place.

A measure scores one senior's solo run into a result directory (junior legibility: ``legibility.json``
and ``per_problem.jsonl``; the judge's chain-of-thought rating: ``cot_rating.json``, ...). Its row
(``Measure``) says

- **computed**: ``compute(MeasureInputs) -> result`` writes the result directory; ``needs`` names the
  inputs it cannot do without (``"junior"``, ``"judge"``), so the pipeline runs it only where they are
  given, once per junior when it needs one; ``current`` says whether a finished directory may be kept;
- **read back**: ``result_file`` marks a directory as this measure's result (``tandem compare RUN``
  finds it among a senior's subdirectories); ``read(dir) -> (result, {(benchmark, problem_id): row})``;
- **compared**: ``differences`` lists, one line each, why two seniors' results are not one quantity
  (scored by other juniors, rated by other judges); ``stats`` are the per-problem keys of the rows that
  ``compare`` tests paired, candidate against baseline, one-sided in the direction the row names;
- **shown**: ``summary(result)`` is what compare.json keeps per senior, under the measure's name;
  ``columns`` is its table in ``compare``, compare.md and the report; ``headline`` its columns in the
  report's headline table. The verdict a headline states is the one rule of ``metrics.paired_verdict``
  (a paired one-sided test at ``metrics.ALPHA``) on the measure's paired stats, never a rule of its own.

Register a row with ``register_measure`` (from a plug-in module too: ``tandem_rlvr.plugins``); every
reader iterates ``measures()``.

What compare.json holds besides one senior's measure results is a ``Section`` row: the seniors' solo
pass@k, their handoff pass@k per handoff set-up, the registered measures as one group, drift, and any
a plug-in registers (``register_section``). A section is **computed** by ``build`` from what ``compare``
read (``Compared``) into its keys of compare.json, **compared** by ``tests`` (its paired tests of a
candidate against the baseline) and **shown** by four presenters of compare.json's content: ``tables``
(the tables of ``compare``, compare.md and the report), ``headline`` (the report's headline columns),
``figures`` and ``captions`` (the report's figures and what each measures), ``provenance`` (the report's
provenance entries of the section's own inputs, HTML). ``compare``, the headline,
the report's tables and figures iterate ``sections()`` in order, so a section shown everywhere is one
row. The package's own rows name their presenters as ``"module:function"`` of the report layer, imported
when shown, so measuring never imports presenting. docs/evaluation.md, "Measures".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from ...errors import TandemError

# compare.json's own keys: a measure's section sits beside them, under its name
RESERVED = frozenset({"baseline", "runs", "solo", "handoff", "drift", "drift_dir", "ttests", "bootstrap", "mixed",
                      "regraded", "measures"})
OWN_KEYS = frozenset({"baseline", "runs", "ttests", "bootstrap", "mixed", "regraded"})  # no section's
NEEDS = frozenset({"junior", "judge"})


@dataclass(frozen=True)
class PairedStat:
    """A per-problem key of a measure's rows that ``compare`` tests paired: ``label`` in the t-test table,
    ``alternative`` the claimed direction of candidate - baseline ("greater" or "less")."""

    key: str
    label: str
    alternative: str


@dataclass(frozen=True)
class Column:
    """A column of a measure's table: ``cell(summary of one senior) -> text``."""

    title: str
    cell: Callable[[dict], str]


@dataclass(frozen=True)
class HeadlineColumn:
    """A headline quantity: ``value(summary) -> float | None`` printed with ``fmt``; ``stat`` names the
    ``PairedStat`` label whose test is its verdict and ``claim`` the property it stands for ("legibility")."""

    title: str
    fmt: str
    value: Callable[[dict], float | None]
    stat: str | None = None
    claim: str | None = None
    what: str = ""  # the quantity in words, for a headline line (default: the title)


@dataclass(frozen=True)
class MeasureInputs:
    """What a measure may be computed from: the senior's solo run, the result directory to write, and the
    optional inputs ``Measure.needs`` names (a junior model; a ``rewards.judge.JudgeSettings``)."""

    solo: Path
    out: Path
    junior: str | None = None
    judge: object | None = None
    benchmarks: tuple[str, ...] | None = None
    split: str | None = None
    progress: bool = True


@dataclass
class Compared:
    """What ``compare`` read, for the sections' ``build`` and ``tests``: each senior's runs, the solo and
    handoff runs read from them ({senior: EvalRun}; {label: {senior: EvalRun}}), each measure's results
    ({measure: {senior: (result, {(benchmark, problem_id): row})}}), the drift directory, and the pass@k
    settings (``ks``, ``n_boot``, ``macro``)."""

    seniors: dict
    solo: dict
    handoff: dict
    results: dict
    drift_dir: Path | None = None
    ks: tuple | None = None
    n_boot: int = 10_000
    macro: str = "ours"


Presenter = Callable[[dict], object] | str | None


@dataclass(frozen=True)
class Section:
    """One section of compare.json (see the module docstring): ``keys`` are the compare.json keys ``build``
    writes; a presenter is a callable of compare.json's content, or ``"module:function"`` naming one."""

    name: str
    keys: tuple[str, ...]
    build: Callable[[Compared], dict]
    tests: Callable[[Compared, str, str], list[tuple]] = lambda compared, candidate, baseline: []
    tables: Presenter = None
    headline: Presenter = None
    figures: Presenter = None
    captions: Presenter = None
    provenance: Presenter = None

    def show(self, hook: str) -> Callable[[dict], list | dict]:
        """The presenter ``hook`` ("tables", "headline", "provenance": lists; "figures", "captions": dicts) as a
        callable of compare.json's content; one that gives nothing where the row has none."""
        fn = getattr(self, hook)
        if fn is None:
            return lambda comp: {} if hook in ("figures", "captions") else []
        if isinstance(fn, str):
            from importlib import import_module

            module, _, name = fn.partition(":")
            fn = getattr(import_module(module), name)
        return fn


@dataclass(frozen=True)
class Measure:
    """One registered measure (see the module docstring for each field's role)."""

    name: str
    title: str
    result_file: str
    read: Callable[[Path], tuple[dict, dict]]
    summary: Callable[[dict], dict]
    compute: Callable[[MeasureInputs], dict]
    stats: tuple[PairedStat, ...] = ()
    columns: tuple[Column, ...] = ()
    headline: tuple[HeadlineColumn, ...] = ()
    differences: Callable[[dict[str, dict]], list[str]] = lambda results: []
    needs: frozenset = frozenset()
    current: Callable[[Path, MeasureInputs], bool] | None = None
    about: Callable[[dict], dict] = lambda config: {}  # a result's config -> {what: value} for provenance

    def dir_name(self, label: str = "") -> str:
        """The result directory's name beside a senior's runs: ``NAME``, or ``NAME-LABEL`` per junior."""
        return f"{self.name}-{label}" if label and "junior" in self.needs else self.name

    def ready(self, inputs: MeasureInputs) -> bool:
        """Whether ``inputs`` hold everything this measure needs."""
        return all(getattr(inputs, need) is not None for need in self.needs)

    def is_current(self, d: Path, inputs: MeasureInputs) -> bool:
        """Whether a finished result in ``d`` may be kept (a recipe's resume)."""
        if not (Path(d) / self.result_file).is_file():
            return False
        return self.current(Path(d), inputs) if self.current else True


MEASURES: dict[str, Measure] = {}
SECTIONS: dict[str, Section] = {}
_BUILTINS = ("legibility", "cot_rating")  # modules of this package whose import registers a row
_SECTION_BUILTINS = ("compare",)  # the module whose import registers solo, handoff, the measures and drift


def _own_first(rows: dict, kind: type, modules: tuple[str, ...]) -> None:
    """Put the package's own rows (the ``kind`` rows of its ``modules``, in their order) first in ``rows``: a
    module registers its rows once, at import, so the order would otherwise be the order of first imports, and
    a registry swapped since (a test's copy) would lose them."""
    from importlib import import_module

    own = {r.name: r for mod in modules for r in vars(import_module(f"{__package__}.{mod}")).values()
           if isinstance(r, kind)}
    if [(k, id(v)) for k, v in list(rows.items())[:len(own)]] != [(k, id(v)) for k, v in own.items()]:
        rest = {k: v for k, v in rows.items() if k not in own}
        rows.clear()
        rows.update({**own, **rest})


def register_measure(m: Measure) -> Measure:
    """Add ``m`` to the registry (a one-line TandemError for a name compare.json uses itself, unknown
    needs, a result file another measure has, or a direction that is not "greater"/"less")."""
    if not m.name or m.name in RESERVED:
        raise TandemError(f"measure name {m.name!r} is taken by compare.json itself ({', '.join(sorted(RESERVED))})")
    if not m.needs <= NEEDS:
        raise TandemError(f"measure {m.name!r} needs {sorted(m.needs - NEEDS)}; "
                          f"valid needs: {', '.join(sorted(NEEDS))}")
    bad = [s.label for s in m.stats if s.alternative not in ("greater", "less")]
    if bad:
        raise TandemError(f"measure {m.name!r}: paired stat {bad[0]!r} needs alternative 'greater' or 'less'")
    section = next((x.name for x in SECTIONS.values() if m.name in x.keys), None)
    if section:
        raise TandemError(f"measure name {m.name!r} is a key of compare.json's section {section!r}")
    other = next((o.name for o in MEASURES.values() if o.result_file == m.result_file and o.name != m.name), None)
    if other:
        raise TandemError(f"measure {m.name!r}: result file {m.result_file} is measure {other!r}'s")
    MEASURES[m.name] = m
    return m


def measures() -> list[Measure]:
    """Every registered measure: the package's own first, then plug-ins' (``plugins.load_plugins``)."""
    _own_first(MEASURES, Measure, _BUILTINS)
    from ...plugins import load_plugins

    load_plugins()
    return list(MEASURES.values())


def register_section(s: Section) -> Section:
    """Add ``s`` after the sections registered before it (a one-line TandemError for a name or key that
    compare.json, a registered section or a measure has)."""
    taken = next((k for k in (s.name, *s.keys) if k in OWN_KEYS or k in MEASURES
                  or any(k in (x.name, *x.keys) for x in SECTIONS.values())), None)
    if not s.name or taken:
        raise TandemError(f"section {s.name!r}: {taken!r} is taken in compare.json (by itself, a measure or a section)")
    SECTIONS[s.name] = s
    return s


def sections() -> list[Section]:
    """Every section of compare.json in the order it is shown: solo, handoff, the measures, drift, then
    plug-ins' (``measures()`` loads the plug-ins)."""
    _own_first(SECTIONS, Section, _SECTION_BUILTINS)
    measures()
    return list(SECTIONS.values())


def measure(name: str) -> Measure:
    """The registered measure ``name``; a TandemError listing the valid names."""
    rows = {m.name: m for m in measures()}
    if name not in rows:
        raise TandemError(f"unknown measure {name!r}; valid: {', '.join(rows)}")
    return rows[name]


def result_files() -> Mapping[str, str]:
    """{result file: measure name}: how discovery tells a measure's directory."""
    return {m.result_file: m.name for m in measures()}


def mean_se(m: dict | None) -> str:
    """"1.234 ± 0.056" of a summary entry ({"mean", "se"}), "-" without one."""
    return "-" if not m else f"{m['mean']:.3f} ± {m['se']:.3f}"
