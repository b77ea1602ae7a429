"""Measures as registry rows (``eval/measure/registry.py``) and the one headline rule
(``metrics.paired_verdict``).

- The rule on hand-computed paired t-tests: with 3 degrees of freedom Student's t has the closed-form
  CDF F(t) = 1/2 + (1/pi) [ (t/sqrt3) / (1 + t^2/3) + atan(t/sqrt3) ], so p is derived here without scipy.
- A bad row is refused at registration, in one line.
- The contributor path: a measure registered from outside the package (a plug-in module in tmp_path,
  named by ``$TANDEM_PLUGINS`` and loaded by ``tandem_rlvr.plugins`` when ``tandem`` starts) is computed
  through its row, found by ``tandem compare`` by its result file, tested paired, and shown in
  compare.md and the HTML report (its table, its headline column, its flag), with no file of the
  package edited.
"""

from __future__ import annotations

import json
import math
import re
import textwrap

import numpy as np
import pytest
from scipy import stats

from tandem_rlvr.cli import main
from tandem_rlvr.errors import TandemError
from tandem_rlvr.eval.measure import registry
from tandem_rlvr.eval.measure.metrics import paired_ttest, paired_verdict
from tandem_rlvr.eval.measure.registry import Measure, PairedStat, measure, measures, register_measure


def _t3_upper(t: float) -> float:
    """P(T > t) for Student's t with 3 degrees of freedom, by its closed-form CDF."""
    x = t / math.sqrt(3)
    return 1 - (0.5 + (x / (1 + t * t / 3) + math.atan(x)) / math.pi)


def test_the_headline_rule_is_a_paired_one_sided_test_at_alpha_005():
    # d = [2, 1, 2, 2]: mean 1.75, sd 0.5, se 0.25, t = 7.0, p = P(T3 > 7) = 0.00299
    shows = paired_ttest([3, 4, 5, 6], [1, 3, 3, 4], "greater")
    assert shows["t"] == pytest.approx(7.0)
    assert shows["p"] == pytest.approx(_t3_upper(7.0)) == pytest.approx(0.00299, abs=1e-5)
    assert paired_verdict(shows) == "shows"
    # the same differences against a claim that the candidate is lower: p = 1 - 0.00303, the other way
    other = paired_ttest([3, 4, 5, 6], [1, 3, 3, 4], "less")
    assert other["p"] == pytest.approx(1 - _t3_upper(7.0)) and paired_verdict(other) == "does not show"
    # d = [1, -1, 2, -1]: mean 0.25, sd 1.5, se 0.75, t = 1/3, p = 0.3804: neither way at 0.05
    unsure = paired_ttest([2, 0, 3, 0], [1, 1, 1, 1], "greater")
    assert unsure["p"] == pytest.approx(_t3_upper(1 / 3)) == pytest.approx(0.3804, abs=1e-4)
    assert paired_verdict(unsure) == "does not separate"
    # the level is 0.05: a p of 0.04 shows, one of 0.06 does not separate, one of 0.96 goes the other way
    assert [paired_verdict({"p": p, "alternative": "greater", "mean_diff": 0.1, "n": 9}) for p in (0.04, 0.06, 0.96)] \
        == ["shows", "does not separate", "does not show"]
    # every difference alike (no variance, t infinite): its sign decides; one problem, or none, cannot
    assert paired_verdict(paired_ttest([2, 3], [1, 2], "greater")) == "shows"
    assert paired_verdict(paired_ttest([2, 3], [1, 2], "less")) == "does not show"
    assert paired_verdict(paired_ttest([2], [1], "greater")) == paired_verdict(paired_ttest([1, 1], [1, 1])) \
        == "does not separate"


def _row(**kw) -> Measure:
    base = dict(name="probe-x", title="t", result_file="probe_x.json", read=lambda d: ({}, {}),
                summary=lambda r: r, compute=lambda i: {})
    return Measure(**{**base, **kw})


def test_a_bad_measure_row_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(registry, "MEASURES", dict(registry.MEASURES))
    measures()
    for kw, words in ((dict(name="ttests"), "taken by compare.json"), (dict(needs=frozenset({"gpu"})), "valid needs"),
                      (dict(result_file="legibility.json"), "measure 'legibility'"),
                      (dict(stats=(PairedStat("x", "x", "higher"),)), "'greater' or 'less'")):
        with pytest.raises(TandemError, match=words) as e:
            register_measure(_row(**kw))
        assert "\n" not in str(e.value)
    with pytest.raises(TandemError, match="unknown measure 'nope'; valid: legibility, cot-rating"):
        measure("nope")


PLUGIN = '''
"""A contributor's measure: the mean number of response tokens per sample, per problem (lower claimed better)."""
import json
from pathlib import Path

import numpy as np

from tandem_rlvr.eval.measure.registry import Column, HeadlineColumn, Measure, PairedStat, register_measure
from tandem_rlvr.eval.run_files import problem_of, read_run


def compute(inputs):
    run = read_run(inputs.solo)
    per = {}
    for r in run.rows:
        per.setdefault(problem_of(r), []).append(len(r["token_ids"]))
    rows = [{"benchmark": b, "problem_id": p, "length": float(np.mean(v))} for (b, p), v in per.items()]
    inputs.out.mkdir(parents=True, exist_ok=True)
    (inputs.out / "per_problem.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
    result = {"mean": float(np.mean([r["length"] for r in rows])), "config": {"made_by": "plug-in"}}
    (inputs.out / "length.json").write_text(json.dumps(result))
    return result


def read(d):
    rows = [json.loads(x) for x in (Path(d) / "per_problem.jsonl").read_text().splitlines()]
    return json.loads((Path(d) / "length.json").read_text()), {(r["benchmark"], r["problem_id"]): r for r in rows}


register_measure(Measure(
    name="resp-length", title="Response length (plug-in)", result_file="length.json", read=read,
    summary=lambda res: {"mean": res["mean"]}, compute=compute,
    stats=(PairedStat("length", "response length", "less"),),
    columns=(Column("tokens per sample", lambda x: format(x["mean"], ".2f")),),
    headline=(HeadlineColumn("length (tokens)", ".1f", lambda x: x["mean"], stat="response length", claim="brevity"),),
    about=lambda cfg: {"made by": cfg.get("made_by")}))
'''


def test_a_measure_registered_from_outside_the_package_is_compared_and_reported(tmp_path, monkeypatch, tok):
    from helpers.report import write_sampling_run

    site = tmp_path / "site"
    site.mkdir()
    (site / "length_measure_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("TANDEM_PLUGINS", "length_measure_plugin")
    monkeypatch.setattr(registry, "MEASURES", dict(registry.MEASURES))  # the row leaves with the test
    rng = np.random.default_rng(3)
    data = {}
    for name in ("long", "short"):
        data[name] = write_sampling_run(tmp_path / name / "solo", [0.5] * 5, tok, "m", rng)
        for r in data[name]:  # response lengths that differ by problem: a real paired comparison
            r["token_ids"] = r["token_ids"][:int(rng.integers(2, 12)) if name == "short" else 12]
            r["senior_mask"] = [1] * len(r["token_ids"])
        (tmp_path / name / "solo" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data[name]))

    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "long"), "--out", str(tmp_path / "none"), "--n-boot", "20"]) == 0  # loads it
    row = measure("resp-length")  # registered by the plug-in module, through tandem_rlvr.plugins
    for name in ("long", "short"):
        row.compute(registry.MeasureInputs(tmp_path / name / "solo", tmp_path / name / row.dir_name()))
    assert main(["compare", str(tmp_path / "long"), str(tmp_path / "short"), "--out", str(out), "--n-boot", "20"]) == 0
    comp = json.loads((out / "compare.json").read_text())

    def lengths(rows):  # per problem, in the tests' key order
        keys = sorted({(r["benchmark"], r["problem_id"]) for r in rows})
        return np.array([np.mean([len(r["token_ids"]) for r in rows if (r["benchmark"], r["problem_id"]) == k])
                         for k in keys])

    short, long = lengths(data["short"]), lengths(data["long"])
    assert comp["resp-length"]["short"]["mean"] == pytest.approx(short.mean())
    test = next(t for t in comp["ttests"] if t["statistic"] == "response length")
    assert test["p"] == pytest.approx(stats.ttest_rel(short, long, alternative="less").pvalue) and test["n"] == 10
    md = (out / "compare.md").read_text()
    assert "### Response length (plug-in)" in md and f"| short | {short.mean():.2f} |" in md
    assert main(["report", "--compare", str(out), "--out", str(tmp_path / "rep")]) == 0
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "<h3>Response length (plug-in)</h3>" in page and "length (tokens)" in page
    assert f"<td>{short.mean():.1f}</td>" in page  # the headline column's value
    assert "resp-length: " in page and "made by <code>plug-in</code>" in page  # provenance through its row
    # its explicit flag, generated from the row, finds the result too
    assert main(["compare", "--solo", f"a={tmp_path / 'long' / 'solo'}", "--solo", f"b={tmp_path / 'short' / 'solo'}",
                 "--resp-length", f"a={tmp_path / 'long' / 'resp-length'}",
                 "--resp-length", f"b={tmp_path / 'short' / 'resp-length'}", "--out", str(tmp_path / "c2"),
                 "--n-boot", "20"]) == 0
    assert set(json.loads((tmp_path / "c2" / "compare.json").read_text())["resp-length"]) == {"a", "b"}


SECTION_PLUGIN = '''
"""A contributor's section of compare.json: each senior's mean solo response length, tested paired, in a
table, a headline column, a figure and its caption."""
import numpy as np
from matplotlib.figure import Figure

from tandem_rlvr.eval.measure.registry import Section, register_section
from tandem_rlvr.eval.report.tables import Table
from tandem_rlvr.eval.run_files import problem_of


def per_problem(run):
    per = {}
    for r in run.rows:
        per.setdefault(problem_of(r), []).append(len(r["token_ids"]))
    return {k: float(np.mean(v)) for k, v in per.items()}


def build(c):
    return {"solo-length": {n: float(np.mean(list(per_problem(r).values()))) for n, r in c.solo.items()}}


def tests(c, cand, base):
    return [("solo tokens", "less", per_problem(c.solo[cand]), per_problem(c.solo[base]))]


def figure(comp):
    fig = Figure()
    ax = fig.subplots()
    ax.bar(list(comp["solo-length"]), list(comp["solo-length"].values()))
    return {"solo_length.png": fig}


register_section(Section(
    "solo-length", ("solo-length",), build, tests=tests,
    tables=lambda comp: [Table("Solo length (plug-in section)", ["senior", "tokens"],
                               [[n, format(v, ".2f")] for n, v in comp["solo-length"].items()])],
    headline=lambda comp: [("solo tokens", ".1f", comp["solo-length"])],
    figures=figure, captions=lambda comp: {"solo_length.png": "Mean solo response tokens per senior (plug-in)."},
    provenance=lambda comp: ["<h3>solo-length</h3><ul><li>counted from each solo run's token ids</li></ul>"]))
'''


def test_a_section_registered_from_outside_the_package_is_compared_and_reported(tmp_path, monkeypatch, tok):
    from helpers.report import write_sampling_run

    site = tmp_path / "site"
    site.mkdir()
    (site / "length_section_plugin.py").write_text(textwrap.dedent(SECTION_PLUGIN))
    registry.sections()  # the package's own rows first, then the copy the plug-in's row leaves with
    monkeypatch.setattr(registry, "SECTIONS", dict(registry.SECTIONS))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("TANDEM_PLUGINS", "length_section_plugin")
    rng = np.random.default_rng(4)
    data = {}
    for name in ("long", "short"):
        data[name] = write_sampling_run(tmp_path / name / "solo", [0.5] * 5, tok, "m", rng)
        for r in data[name]:
            r["token_ids"] = r["token_ids"][:int(rng.integers(2, 12)) if name == "short" else 12]
            r["senior_mask"] = [1] * len(r["token_ids"])
        (tmp_path / name / "solo" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data[name]))
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "long"), str(tmp_path / "short"), "--out", str(out), "--n-boot", "20"]) == 0
    assert [s.name for s in registry.sections()] == ["solo", "handoff", "measures", "drift", "solo-length"]
    comp = json.loads((out / "compare.json").read_text())

    def lengths(rows):  # mean tokens per problem, by hand from the rows written
        keys = sorted({(r["benchmark"], r["problem_id"]) for r in rows})
        return np.array([np.mean([len(r["token_ids"]) for r in rows if (r["benchmark"], r["problem_id"]) == k])
                         for k in keys])

    short, long = lengths(data["short"]), lengths(data["long"])
    assert comp["solo-length"] == {"long": pytest.approx(long.mean()), "short": pytest.approx(short.mean())}
    assert list(comp)[:4] == ["baseline", "runs", "solo", "handoff"]  # the package's sections keep their places
    test = next(t for t in comp["ttests"] if t["statistic"] == "solo tokens")
    assert test["p"] == pytest.approx(stats.ttest_rel(short, long, alternative="less").pvalue) and test["n"] == 10
    assert [t["statistic"] for t in comp["ttests"]] == ["solo pass@1", "solo tokens"]  # in the sections' order
    md = (out / "compare.md").read_text()
    assert "### Solo length (plug-in section)" in md and f"| short | {short.mean():.2f} |" in md
    assert md.index("### Solo: pass@k") < md.index("### Solo length") < md.index("### Paired one-sided t-tests")
    assert main(["report", "--compare", str(out), "--out", str(tmp_path / "rep")]) == 0
    page = (tmp_path / "rep" / "report.html").read_text()
    headline = page[page.index('id="headline"'):page.index("<figure>")]
    assert "<th>solo tokens</th>" in headline and f"<td>{short.mean():.1f}</td>" in headline
    figures = re.findall(r'<figure><img alt="([^"]+)"[^>]*><figcaption>(.*?)</figcaption></figure>', page, re.S)
    assert figures == [("pass_at_k_solo.png", figures[0][1]),
                       ("solo_length.png", "Mean solo response tokens per senior (plug-in).")]
    assert (tmp_path / "rep" / "figures" / "solo_length.png").read_bytes()[:4] == b"\x89PNG"
    assert "<h3>solo-length</h3><ul><li>counted from each solo run" in page[page.index('id="provenance"'):]


def test_a_section_taking_a_key_of_compare_json_or_a_measure_is_refused_in_one_line(monkeypatch):
    from tandem_rlvr.eval.measure.registry import Section, register_section

    registry.sections()
    monkeypatch.setattr(registry, "SECTIONS", dict(registry.SECTIONS))
    monkeypatch.setattr(registry, "MEASURES", dict(registry.MEASURES))
    register_measure(_row(name="probe-y", result_file="probe_y.json"))  # a measure's name, whatever loaded before
    for name, keys, taken in (("mine", ("ttests",), "'ttests'"), ("mine", ("solo",), "'solo'"),
                              ("probe-y", ("probe-y",), "'probe-y'"), ("drift", ("x",), "'drift'")):
        with pytest.raises(TandemError, match=f"section '{name}': {taken} is taken in compare.json") as e:
            register_section(Section(name, keys, build=lambda c: {}))
        assert "\n" not in str(e.value)
    register_section(Section("mine", ("mine-key",), build=lambda c: {}))
    with pytest.raises(TandemError, match="a key of compare.json's section 'mine'"):
        register_measure(_row(name="mine-key", result_file="mine.json"))
