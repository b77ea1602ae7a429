"""tandem compare and tandem report on synthetic run directories: the tables' numbers and t-tests
against scipy on the same arrays, bad input, and the HTML report rendered in headless Chromium."""

import html
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from scipy import stats

from tandem_rlvr.cli import main
from tandem_rlvr.eval.measure.metrics import mean_se_summary
from tandem_rlvr.eval.report.html import read_train_log, training_figure, training_summary
from tandem_rlvr.errors import TandemError

from helpers.report import BENCHES, write_sampling_run


def write_legibility(d, ce_by_problem, junior="jr"):
    per_problem = [{"benchmark": b, "problem_id": f"{b}-{p}", "ce": ce, "alpha": 1 / (1 + ce), "samples": 4,
                    "tokens": 48}
                   for b in BENCHES for p, ce in enumerate(ce_by_problem)]
    d.mkdir(parents=True)
    (d / "per_problem.jsonl").write_text("".join(json.dumps(r) + "\n" for r in per_problem))
    summary = {s: mean_se_summary({b: [r[s] for r in per_problem if r["benchmark"] == b] for b in BENCHES}, n_boot=100)
               for s in ("ce", "alpha")}
    (d / "legibility.json").write_text(json.dumps({"summary": summary, "samples": 40, "config": {"junior": junior}}))
    return per_problem


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tok, pair):
    """Two seniors (grpo, trl), each with solo, handoff and legibility dirs; the tokenizer's model dir."""
    root = tmp_path_factory.mktemp("runs")
    pair[0].save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    rng = np.random.default_rng(0)
    data = {}
    for name, solo_acc, hand_acc, ce in (
            ("grpo", [0.9, 0.8, 0.5, 0.4, 0.2], [0.2, 0.1, 0.3, 0.0, 0.1], [2.0, 2.5, 3.0, 2.2, 2.8]),
            ("trl", [0.8, 0.8, 0.6, 0.3, 0.2], [0.6, 0.5, 0.4, 0.3, 0.5], [1.0, 1.6, 1.9, 1.1, 1.7])):
        data[name] = {"solo": write_sampling_run(root / name / "solo", solo_acc, tok, str(root / "model"), rng),
                      "handoff": write_sampling_run(root / name / "handoff", hand_acc, tok, str(root / "model"), rng,
                                                    schedule="paragraph-roundrobin"),
                      "legibility": write_legibility(root / name / "legibility", ce, junior=str(root / "model"))}
    return root, data


def _per_problem_acc(rows):
    keys = sorted({(r["benchmark"], r["problem_id"]) for r in rows})
    return np.array([np.mean([r["correct"] for r in rows if (r["benchmark"], r["problem_id"]) == k]) for k in keys])


def test_compare_tables_and_ttests_match_scipy(runs, tmp_path, capsys):
    root, data = runs
    out = tmp_path / "cmp"
    assert main(["compare", str(root / "grpo"), str(root / "trl"), "--out", str(out), "--n-boot", "500"]) == 0
    assert "Paired one-sided t-tests vs grpo" in capsys.readouterr().out
    comp = json.loads((out / "compare.json").read_text())
    for name in ("grpo", "trl"):
        want = _per_problem_acc(data[name]["solo"]).mean()
        assert comp["solo"][name]["macro"]["pass@1"]["mean"] == pytest.approx(want)
        assert set(comp["solo"][name]) >= {"alpha", "beta", "macro"} and "pass@4" in comp["solo"][name]["macro"]
    tests = {t["statistic"]: t for t in comp["ttests"]}
    assert set(tests) == {"solo pass@1", "handoff pass@1 (handoff)", "junior CE", "junior alpha"}
    for stat, kind, alt in (("solo pass@1", "solo", "greater"), ("handoff pass@1 (handoff)", "handoff", "greater")):
        ref = stats.ttest_rel(_per_problem_acc(data["trl"][kind]), _per_problem_acc(data["grpo"][kind]),
                              alternative=alt)
        assert tests[stat]["n"] == 10 and tests[stat]["p"] == pytest.approx(ref.pvalue)
        assert tests[stat]["t"] == pytest.approx(ref.statistic)
    ce = [np.array([r["ce"] for r in data[n]["legibility"]]) for n in ("trl", "grpo")]
    assert tests["junior CE"]["p"] == pytest.approx(stats.ttest_rel(*ce, alternative="less").pvalue)
    md = (out / "compare.md").read_text()
    for title in ("Solo: pass@k", "Solo: pass@1 per benchmark", "Handoff (junior", "Junior legibility",
                  "Paired one-sided"):
        assert title in md
    assert "Solo: pass@k, macro over 2 benchmarks: alpha, beta (10 problems)" in md
    assert comp["solo"]["grpo"]["macro"]["sets"] == ["alpha", "beta"]


def test_macro_coverage_names_the_sets_and_the_papers_aime_pooling():
    from tandem_rlvr.eval.report.tables import macro_coverage

    assert macro_coverage(["aime", "amc23", "minerva"]) == "macro over 3 benchmarks: aime, amc23, minerva"
    text = macro_coverage(["aime24", "aime25", "aime26", "amc23"])
    assert text.startswith("macro over 4 benchmarks: aime24, aime25, aime26, amc23 (aime24, aime25, aime26 as 3 sets;")
    assert "pools AIME 2024-2026 as one set, 'aime'" in text


def test_compare_bad_input_is_one_line_and_overwrites_nothing(runs, tmp_path, tok, capsys):
    root, _ = runs
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare.json").write_text("old")

    def fails(argv, *needles):
        assert main(argv + ["--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and all(n in err for n in needles), err

    fails(["compare", str(root / "grpo"), "--ks", "1,8"], "grpo/solo/samples.jsonl:1:", "k=8", "n=4")
    (tmp_path / "empty").mkdir()
    fails(["compare", str(tmp_path / "empty")], "empty run directory")
    bad = tmp_path / "bad"
    shutil.copytree(root / "trl" / "solo", bad / "solo")
    text = (bad / "solo" / "samples.jsonl").read_text()
    (bad / "solo" / "samples.jsonl").write_text(text[:-30])
    fails(["compare", str(root / "grpo"), str(bad)], f"bad/solo/samples.jsonl:{text.count(chr(10))}", "truncated")
    other = tmp_path / "other"
    write_sampling_run(other / "solo", [0.5] * 5, tok, "x", np.random.default_rng(1))
    lines = (other / "solo" / "samples.jsonl").read_text().replace('"beta"', '"gamma"')
    (other / "solo" / "samples.jsonl").write_text(lines)
    (other / "solo" / "config.json").write_text(json.dumps({"benchmarks": ["alpha", "gamma"],
                                                            "schedule": {"name": "senior"}}))
    fails(["compare", str(root / "grpo"), str(other)], "other/solo/samples.jsonl:21", "another benchmark set")
    assert (out / "compare.json").read_text() == "old"


def test_training_log_keys_are_optional(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "reward": s / 10,
                                       "val/acc": [0.1, 0.5, 0.3][s]}) + "\n" for s in range(3)))
    rows = read_train_log(log)
    assert training_figure({"run": rows}) is not None
    assert training_summary(rows) == {"steps": 3, "wall_s": None, "best_key": "val/acc", "best_step": 1.0,
                                      "best_value": 0.5, "wall_to_best_s": None}
    # every key but step may be missing: no wall-clock, no validation, no quantity at all
    only_reward = [{"step": 1, "reward/mean": 0.1}, {"step": 2, "reward/mean": 0.2}]
    assert training_figure({"run": only_reward}) is not None
    assert training_summary(only_reward) == {"steps": 2, "wall_s": None}
    assert training_figure({"run": [{"step": 1}]}) is None and training_summary([{"step": 1}]) == {"steps": 0,
                                                                                                   "wall_s": None}
    log.write_text('{"step": 1}\n{"step": 2, "rew')
    with pytest.raises(TandemError, match="log.jsonl:2"):
        read_train_log(log)


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory):
    root, _ = runs
    out = tmp_path_factory.mktemp("report")
    logs = []
    for name, share in (("grpo", 1.0), ("trl", 0.5)):
        log = out / name / "log.jsonl"
        log.parent.mkdir()
        log.write_text("".join(json.dumps({"step": s, "reward/mean": s / 20, "completions/mean_length": 50 - s,
                                           "senior/token_share": share, "wall/step_s": 1.5}) + "\n" for s in range(1,
                                                                                                                   21)))
        logs += ["--train-log", f"{name}={log}"]
    assert main(["compare", str(root / "grpo"), str(root / "trl"), "--out", str(out / "cmp"), "--n-boot", "200"]) == 0
    assert main(["report", "--compare", str(out / "cmp"), *logs, "--out", str(out / "rep")]) == 0
    return out / "rep"


def test_report_html_has_figures_tables_and_coloured_samples(report):
    page = (report / "report.html").read_text()
    assert page.count("<table>") >= 6 and page.count('src="data:image/png;base64,') == 3
    assert {p.name for p in (report / "figures").iterdir()} == {"pass_at_k_solo.png", "pass_at_k_handoff_handoff.png",
                                                                 "training.png", "styles.json"}
    samples = page[page.index("Sample solutions"):]
    assert samples.count('<span class="sen">') > 6 and samples.count('<span class="jun">') > 6


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1200,2000"]
# Injected into a copy of the page: the rendered box of every sample cell, for --dump-dom to print.
LAYOUT_PROBE = """<script>window.addEventListener('load', () => {
  const out = [...document.querySelectorAll('.cell')].map(c => {const r = c.getBoundingClientRect();
    return [c.closest('.problem-block').dataset.problem, c.dataset.kind, c.dataset.senior, r.left, r.top, r.width];});
  const pre = document.createElement('pre'); pre.id = 'layout'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);});</script>"""


def _chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return exe


def test_report_renders_in_headless_chromium(report, tmp_path):
    exe = _chromium()
    from matplotlib.image import imread

    shot = tmp_path / "shot.png"
    subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                    (report / "report.html").resolve().as_uri()], capture_output=True, timeout=120, check=True)
    img = imread(shot)[..., :3]  # (H, W, 3) floats in [0, 1]
    assert img.shape[:2] == (2000, 1200)
    non_white = (img < 0.9).any(-1).mean()
    assert 0.02 < non_white < 0.9 and img.std() > 0.05


def test_rendered_samples_sit_side_by_side_and_rendered_tables_hold_no_paths(report, runs, tmp_path):
    exe = _chromium()
    root, _ = runs
    page = (report / "report.html").read_text().replace("</body>", LAYOUT_PROBE + "</body>")
    probe = tmp_path / "probe.html"
    probe.write_text(page)
    dom = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          probe.resolve().as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    cells = json.loads(html.unescape(re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S).group(1)))
    assert len(cells) == 3 * 4  # 3 problems x (solo, handoff) x (grpo, trl)
    rows: dict[tuple[str, str], list] = {}
    for problem, kind, senior, left, top, width in cells:
        rows.setdefault((problem, kind), []).append((senior, left, top, width))
    for row in rows.values():
        assert [r[0] for r in row] == ["grpo", "trl"]
        assert row[1][1] > row[0][1] + row[0][3] - 1  # the second senior's cell starts right of the first's
        assert abs(row[0][2] - row[1][2]) < 1 and min(r[3] for r in row) > 200  # one row, readable widths
    for problem in {p for p, _ in rows}:
        assert rows[(problem, "handoff")][0][2] > rows[(problem, "solo")][0][2]  # handoff row below the solo row
    for text in re.findall(r"<t[dh]>(.*?)</t[dh]>", dom):
        assert str(root) not in text and not ABS_PATH.search(text), text


def test_training_steps_leave_out_the_step0_validation_row(tmp_path):
    log = tmp_path / "log.jsonl"
    rows = [{"step": 0, "val/accuracy": 0.2}]
    rows += [{"step": s, "reward/mean": 0.1, "val/accuracy": 0.3} for s in (1, 2, 3)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert training_summary(read_train_log(log))["steps"] == 3  # 3 training steps, not 4 distinct step values


# The documented mapping (docs/evaluation.md, "Figures"): matplotlib's tab10 colours.
EXPECTED_STYLE = {"tandem": ("#2ca02c", "-"), "trl": ("#2ca02c", "-"), "grpo": ("#ff7f0e", "--"),
                  "klreg": ("#1f77b4", "-."), "base": ("#7f7f7f", ":"), "junior": ("#9467bd", ":")}


def test_every_method_has_one_colour_and_line_style_in_every_report_figure(report):
    styles = json.loads((report / "figures" / "styles.json").read_text())
    assert set(styles) == {"pass_at_k_solo.png", "pass_at_k_handoff_handoff.png", "training.png"}
    seen = set()
    for fig, panels in styles.items():
        assert panels, fig
        for panel, lines in panels.items():
            assert set(lines) == {"grpo", "trl"}, (fig, panel)
            for label, st in lines.items():
                assert (st["color"], st["linestyle"]) == EXPECTED_STYLE[label], (fig, panel, label)
                seen.add(label)
    assert seen == {"grpo", "trl"}


def test_drift_and_training_figures_draw_each_method_in_its_colour():
    from matplotlib.colors import to_hex

    from tandem_rlvr.eval.report.html import recovery_figure, survival_figure

    names = ["base", "grpo", "tandem", "klreg", "junior"]
    grid = np.linspace(0, 2, 5).tolist()
    surv = survival_figure({"survival": {"grid": grid, "frequent_tokens": 9,
                                         "curves": {n: [1.0, 0.5, 0.3, 0.2, 0.1] for n in names}}})
    train = training_figure({n: [{"step": s, "reward/mean": s / 10} for s in range(1, 4)] for n in names})
    for fig in (surv, train):
        drawn = {ln.get_label(): (to_hex(ln.get_color()),
                                  ln.get_linestyle()) for ax in fig.axes for ln in ax.get_lines()}
        assert drawn == {n: EXPECTED_STYLE[n] for n in names}
    assert len({EXPECTED_STYLE[n][0] for n in names}) == len(names)  # five methods, five colours
    rec = recovery_figure({"ref_drift": [1.0, 2.0], "cand_shift": [-0.5, 0.1], "top_n": 2, "reference": "grpo",
                           "candidate": "tandem", "share_moved_back": 0.5, "spearman": {"rho": None, "p": None}})
    (dots,) = rec.axes[0].collections
    assert to_hex(dots.get_facecolor()[0]) == EXPECTED_STYLE["tandem"][0]


ABS_PATH = re.compile(r"(^|[\s(=:,])(/|~/)[\w.-]+/")


def test_report_tables_name_models_briefly_and_provenance_has_the_full_paths(report, runs):
    root, _ = runs
    page = (report / "report.html").read_text()
    cells = re.findall(r"<t[dh]>(.*?)</t[dh]>", page)
    titles = re.findall(r"<h3>(.*?)</h3>\n<table>", page)
    assert cells and titles
    for text in cells + titles:
        assert str(root) not in text and not ABS_PATH.search(text), text
    legibility = page[page.index("Junior legibility"):]
    legibility = legibility[:legibility.index("</table>")]
    assert legibility.count("<td>model</td>") == 2  # the junior directory's base name, once per senior
    provenance = page[page.index('id="provenance"'):]
    assert provenance.count(str(root / "model")) >= 4  # senior of each run, junior of handoff and legibility runs
    assert "Sampling, every run:" in provenance and "command" in provenance


def test_samples_show_the_same_problems_side_by_side_with_verdicts(report, runs):
    _, data = runs
    page = (report / "report.html").read_text()
    section = page[page.index('id="samples"'):page.index('id="provenance"')]
    blocks = re.findall(r'data-problem="([^"]+)"(.*?)(?=data-problem=|$)', section, re.S)
    assert len(blocks) == 3
    verdict = {(kind, name, r["problem_id"]): r["correct"] for name in ("grpo", "trl") for kind in ("solo", "handoff")
               for r in data[name][kind] if r["sample_idx"] == 0}
    differing = {pid for pid in {k[2] for k in verdict}
                 if len({verdict[(kind, n, pid)] for kind in ("solo", "handoff") for n in ("grpo", "trl")}) > 1}
    assert len(differing) >= 3  # the fixture has enough problems where the methods differ
    pattern = {pid: tuple(verdict[(kind, n, pid)] for kind in ("solo", "handoff") for n in ("grpo", "trl"))
               for pid in differing}
    shown = [key.split("/")[1] for key, _ in blocks]
    assert len(set(pattern.values())) >= 3  # the fixture splits the methods in several ways ...
    assert len({pattern[pid] for pid in shown if pid in pattern}) == 3  # ... and each shown problem in another
    for key, body in blocks:
        bench, pid = key.split("/")
        assert pid in differing, pid
        cells = re.findall(r'class="cell (ok|bad)" data-senior="(\w+)" data-kind="(\w+)" data-correct="(\w+)"', body)
        assert [(c[2], c[1]) for c in cells] == [("solo", "grpo"), ("solo", "trl"), ("handoff", "grpo"),
                                                 ("handoff", "trl")]
        for mark, senior, kind, correct in cells:
            assert correct == str(verdict[(kind, senior, pid)]).lower()
            assert mark == ("ok" if verdict[(kind, senior, pid)] else "bad")


def test_training_summary_counts_optimiser_steps_not_the_step_zero_validation(tmp_path):
    rows = [{"step": 0, "val/accuracy": 0.1}]
    rows += [{"step": s, "reward/mean": 0.5, "wall/step_s": 1.0} for s in range(1, 61)]
    rows.append({"step": 60, "val/accuracy": 0.4})
    assert training_summary(rows)["steps"] == 60


def test_recovery_figure_title_fits_inside_the_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from tandem_rlvr.eval.report.html import recovery_figure

    rec = {"reference": "grpo-long-name", "candidate": "tandem-long-name", "top_n": 500, "qualifying": 500,
           "share_moved_back": 0.985, "spearman": {"rho": -0.3212, "p": 8.9e-13}, "ref_drift": [1.0, 2.0],
           "cand_shift": [-1.0, 0.5]}
    fig = recovery_figure(rec)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box = fig.axes[0].title.get_window_extent(canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # pixels: the title is not cut at either edge


def _comp_with_base():
    """A comparison by hand: base, grpo, tandem; solo and handoff pass@1, junior CE, KL, t-tests."""
    def run(p1, share=1.0):
        return {"macro": {"problems": 500, "pass@1": {"mean": p1, "se": 0.01}},
                "senior_share": {"mean": share, "sd": 0.0},
                "config": {"models": {"senior": "/m", "junior": "/w/jr"}, "schedule": {"name": "paragraph-roundrobin"},
                           "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 96}, "n": 4}}

    def leg(ce):
        return {"summary": {"ce": {"macro": {"mean": ce, "se": 0.1}}, "alpha": {"macro": {"mean": 0.5, "se": 0.01}}},
                "junior": "/w/jr", "samples": 2000}

    return {"baseline": "grpo",
            "solo": {"base": run(0.223), "grpo": run(0.251), "tandem": run(0.165)},
            "handoff": {"handoff": {"base": run(0.134, 0.47), "grpo": run(0.111, 0.46), "tandem": run(0.147, 0.49)}},
            "legibility": {"base": leg(6.27), "grpo": leg(9.69), "tandem": leg(1.83)},
            "drift": None,
            "ttests": [{"candidate": "tandem", "baseline": "grpo", "statistic": "handoff pass@1 (handoff)", "n": 500,
                        "alternative": "greater", "mean_diff": 0.036, "t": 3.1, "df": 499, "p": 0.001},
                       {"candidate": "tandem", "baseline": "grpo", "statistic": "solo pass@1", "n": 500,
                        "alternative": "greater", "mean_diff": -0.086, "t": -6.0, "df": 499, "p": 0.9999},
                       {"candidate": "base", "baseline": "grpo", "statistic": "solo pass@1", "n": 500,
                        "alternative": "greater", "mean_diff": -0.028, "t": -2.0, "df": 499, "p": 0.97}]}


def test_headline_compares_every_senior_with_the_base():
    from tandem_rlvr.eval.report.headline import headline_sentences, headline_table

    t = headline_table(_comp_with_base())
    assert t.columns == ["senior", "solo pass@1", "vs base", "handoff pass@1 (with jr, paragraph-roundrobin)",
                         "vs base",
                         "junior CE (nats)", "vs base"]
    # differences by hand: 0.251 - 0.223, 0.165 - 0.223, 0.111 - 0.134, 0.147 - 0.134, 9.69 - 6.27, 1.83 - 6.27
    assert t.rows == [["base", "0.223", "", "0.134", "", "6.27", ""],
                      ["grpo", "0.251", "+0.028", "0.111", "-0.023", "9.69", "+3.42"],
                      ["tandem", "0.165", "-0.058", "0.147", "+0.013", "1.83", "-4.44"]]
    solo, hand, tests = headline_sentences(_comp_with_base())
    assert solo == "Solo pass@1 against the base model's 0.223: grpo 0.251 (+0.028), tandem 0.165 (-0.058)."
    assert hand.startswith("Handoff pass@1 (with jr, paragraph-roundrobin) against the base model's 0.134: ")
    # only the test below 0.05 is named, in its own direction; the base's own test is not a method's
    assert tests == ("Paired one-sided t-tests against grpo at p < 0.05: tandem handoff pass@1 (handoff) higher "
                     "(+0.036, p = 0.001).")
    no_base = _comp_with_base()
    for part in ("solo", "legibility"):
        del no_base[part]["base"]
    del no_base["handoff"]["handoff"]["base"]
    assert headline_table(no_base).columns == ["senior", "solo pass@1",
                                               "handoff pass@1 (with jr, paragraph-roundrobin)",
                                               "junior CE (nats)"]
    assert headline_sentences(no_base)[0] == "Solo pass@1: grpo 0.251, tandem 0.165."


def test_report_opens_with_the_headline_and_every_figure_says_what_it_measures(report):
    page = (report / "report.html").read_text()
    body = page[page.index("<body>"):]
    assert body.index('id="headline"') < body.index("<figure>") < body.index("<h2>Tables</h2>")
    headline = body[body.index('id="headline"'):body.index("<figure>")]
    assert "<table>" in headline and "Solo pass@1: grpo" in headline and "Handoff pass@1" in headline
    figures = re.findall(r'<figure><img alt="([^"]+)"[^>]*><figcaption>(.*?)</figcaption></figure>', body, re.S)
    assert [f for f, _ in figures] == ["pass_at_k_solo.png", "pass_at_k_handoff_handoff.png", "training.png"]
    assert all(len(cap) > 40 for _, cap in figures)
    caps = dict(figures)
    assert "answers alone" in caps["pass_at_k_solo.png"] and "4 samples per problem" in caps["pass_at_k_solo.png"]
    assert "co-writes with the junior" in caps["pass_at_k_handoff_handoff.png"]


def test_training_panels_say_when_methods_measured_validation_and_reward_differently():
    logs = {"grpo": [{"step": 0, "val/accuracy": 0.2, "val/schedule": "senior"},
                     {"step": 1, "reward/mean": 0.3, "senior/token_share": 1.0}],
            "klreg": [{"step": 0, "val/accuracy": 0.2, "val/schedule": "senior"},
                      {"step": 1, "reward/mean": 0.3, "senior/token_share": 1.0}],
            "tandem": [{"step": 0, "val/accuracy": 0.1, "val/schedule": "word"},
                       {"step": 1, "reward/mean": 0.2, "senior/token_share": 0.5}]}
    titles = [ax.get_title() for ax in training_figure(logs).axes if ax.get_visible()]
    assert "validation accuracy\ngrpo, klreg: senior alone; tandem: with the junior (word)" in titles
    assert "reward\ngrpo, klreg: senior alone; tandem: co-written with the junior" in titles
    same = {m: logs[m] for m in ("grpo", "klreg")}  # measured alike: a plain title
    titles = [ax.get_title() for ax in training_figure(same).axes if ax.get_visible()]
    assert "validation accuracy" in titles and "reward" in titles
