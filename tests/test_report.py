"""tandem compare and tandem report on synthetic run directories: the tables' numbers and t-tests
against scipy on the same arrays, bad input, and the HTML report rendered in headless Chromium."""

import json
import shutil
import subprocess

import numpy as np
import pytest
from scipy import stats

from tandem_rlvr.cli import main
from tandem_rlvr.eval.metrics import mean_se_summary
from tandem_rlvr.eval.report import read_train_log, training_figure, training_summary
from tandem_rlvr.errors import TandemError

BENCHES = ("alpha", "beta")


def write_sampling_run(d, acc, tok, senior, rng, schedule="senior", n=4, problems=5):
    """n samples for each problem of BENCHES; problem p is correct with probability acc[p]."""
    d.mkdir(parents=True)
    rows = []
    for b in BENCHES:
        for p in range(problems):
            for s in range(n):
                ids = rng.integers(1, len(tok), 12).tolist()
                mask = [1] * 12 if schedule == "senior" else [int(i % 6 < 3) for i in range(12)]
                rows.append({"benchmark": b, "problem_id": f"{b}-{p}", "sample_idx": s, "correct": bool(rng.random() < acc[p]),
                             "response": tok.decode(ids, skip_special_tokens=True), "senior_share": float(np.mean(mask)),
                             "tokens": 12, "token_ids": ids, "senior_mask": mask})
    cfg = {"n": n, "schedule": {"name": schedule}, "template": "plain", "benchmarks": list(BENCHES), "ks": [1, 2, 4],
           "models": {"senior": senior, "junior": None if schedule == "senior" else senior}}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def write_legibility(d, ce_by_problem):
    per_problem = [{"benchmark": b, "problem_id": f"{b}-{p}", "ce": ce, "alpha": 1 / (1 + ce), "samples": 4, "tokens": 48}
                   for b in BENCHES for p, ce in enumerate(ce_by_problem)]
    d.mkdir(parents=True)
    (d / "per_problem.jsonl").write_text("".join(json.dumps(r) + "\n" for r in per_problem))
    summary = {s: mean_se_summary({b: [r[s] for r in per_problem if r["benchmark"] == b] for b in BENCHES}, n_boot=100)
               for s in ("ce", "alpha")}
    (d / "legibility.json").write_text(json.dumps({"summary": summary, "samples": 40, "config": {"junior": "jr"}}))
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
                      "legibility": write_legibility(root / name / "legibility", ce)}
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
        assert comp["solo"][name]["macro"]["pass@1"]["mean"] == pytest.approx(_per_problem_acc(data[name]["solo"]).mean())
        assert set(comp["solo"][name]) >= {"alpha", "beta", "macro"} and "pass@4" in comp["solo"][name]["macro"]
    tests = {t["statistic"]: t for t in comp["ttests"]}
    assert set(tests) == {"solo pass@1", "handoff pass@1 (handoff)", "junior CE", "junior alpha"}
    for stat, kind, alt in (("solo pass@1", "solo", "greater"), ("handoff pass@1 (handoff)", "handoff", "greater")):
        ref = stats.ttest_rel(_per_problem_acc(data["trl"][kind]), _per_problem_acc(data["grpo"][kind]), alternative=alt)
        assert tests[stat]["n"] == 10 and tests[stat]["p"] == pytest.approx(ref.pvalue)
        assert tests[stat]["t"] == pytest.approx(ref.statistic)
    ce = [np.array([r["ce"] for r in data[n]["legibility"]]) for n in ("trl", "grpo")]
    assert tests["junior CE"]["p"] == pytest.approx(stats.ttest_rel(*ce, alternative="less").pvalue)
    md = (out / "compare.md").read_text()
    for title in ("Solo: pass@k", "Solo: pass@1 per benchmark", "Handoff (junior", "Junior legibility", "Paired one-sided"):
        assert title in md


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
    (other / "solo" / "config.json").write_text(json.dumps({"benchmarks": ["alpha", "gamma"], "schedule": {"name": "senior"}}))
    fails(["compare", str(root / "grpo"), str(other)], "other/solo/samples.jsonl:21", "another benchmark set")
    assert (out / "compare.json").read_text() == "old"


def test_training_log_keys_are_optional(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "reward": s / 10, "val/acc": [0.1, 0.5, 0.3][s]}) + "\n" for s in range(3)))
    rows = read_train_log(log)
    assert training_figure({"run": rows}) is not None
    assert training_summary(rows) == {"steps": 3, "wall_s": None, "best_key": "val/acc", "best_step": 1.0,
                                      "best_value": 0.5, "wall_to_best_s": None}
    log.write_text('{"step": 1}\n{"step": 2, "rew')
    with pytest.raises(TandemError, match="log.jsonl:2"):
        read_train_log(log)


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory):
    root, _ = runs
    out = tmp_path_factory.mktemp("report")
    log = out / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "reward/mean": s / 20, "completions/mean_length": 50 - s,
                                       "senior/token_share": 0.5, "wall/step_s": 1.5}) + "\n" for s in range(1, 21)))
    assert main(["compare", str(root / "grpo"), str(root / "trl"), "--out", str(out / "cmp"), "--n-boot", "200"]) == 0
    assert main(["report", "--compare", str(out / "cmp"), "--train-log", f"grpo={log}", "--out", str(out / "rep")]) == 0
    return out / "rep"


def test_report_html_has_figures_tables_and_coloured_samples(report):
    page = (report / "report.html").read_text()
    assert page.count("<table>") >= 6 and page.count('src="data:image/png;base64,') == 3
    assert {p.name for p in (report / "figures").iterdir()} == {"pass_at_k_solo.png", "pass_at_k_handoff_handoff.png",
                                                                 "training.png"}
    samples = page[page.index("Sample solutions"):]
    assert samples.count('<span class="sen">') > 6 and samples.count('<span class="jun">') > 6


def test_report_renders_in_headless_chromium(report, tmp_path):
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    from matplotlib.image import imread

    shot = tmp_path / "shot.png"
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={shot}", "--window-size=1200,2000", (report / "report.html").resolve().as_uri()],
                   capture_output=True, timeout=120, check=True)
    img = imread(shot)[..., :3]  # (H, W, 3) floats in [0, 1]
    assert img.shape[:2] == (2000, 1200)
    non_white = (img < 0.9).any(-1).mean()
    assert 0.02 < non_white < 0.9 and img.std() > 0.05


def test_training_summary_counts_optimiser_steps_not_the_step_zero_validation(tmp_path):
    rows = [{"step": 0, "val/accuracy": 0.1}] + [{"step": s, "reward/mean": 0.5, "wall/step_s": 1.0} for s in range(1, 61)]
    rows.append({"step": 60, "val/accuracy": 0.4})
    assert training_summary(rows)["steps"] == 60


def test_each_senior_shows_its_own_sample_solutions(runs, tmp_path):
    root, _ = runs
    third = tmp_path / "third"
    shutil.copytree(root / "trl", third)
    hand = third / "handoff" / "samples.jsonl"
    rows = [json.loads(x) for x in hand.read_text().splitlines()]
    for r in rows:
        r["token_ids"], r["senior_share"] = r["token_ids"][::-1], 0.123
    hand.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", f"grpo={root / 'grpo'}", f"trl={root / 'trl'}", f"third={third}", "--samples-per-run", "1",
                 "--n-boot", "50", "--out", str(tmp_path / "rep")]) == 0
    page = (tmp_path / "rep" / "report.html").read_text()
    texts, shares = {}, {}
    for name, d in (("grpo", root / "grpo"), ("trl", root / "trl"), ("third", third)):
        section = page.split(f"<h3>{name}: ")[1].split("<h3>")[0]
        texts[name] = section.split('<div class="sample">')[1].split("</div>")[0]
        first = next(json.loads(x) for x in (d / "handoff" / "samples.jsonl").read_text().splitlines())
        assert f"{first['problem_id']} sample 0" in section and f"senior share {first['senior_share']:.2f}" in section, name
    assert len(set(texts.values())) == 3  # three seniors, three different solutions


def test_recovery_figure_title_fits_inside_the_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from tandem_rlvr.eval.report import recovery_figure

    rec = {"reference": "grpo-long-name", "candidate": "tandem-long-name", "top_n": 500, "qualifying": 500,
           "share_moved_back": 0.985, "spearman": {"rho": -0.3212, "p": 8.9e-13}, "ref_drift": [1.0, 2.0], "cand_shift": [-1.0, 0.5]}
    fig = recovery_figure(rec)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box = fig.axes[0].title.get_window_extent(canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # pixels: the title is not cut at either edge
