"""`tandem demo --quick` runs the whole pipeline end to end and writes its outputs.

Slow (minutes): run with ``python -m pytest -m slow tests/integration/test_demo.py``.
"""

import json
import re
import subprocess
import sys

import pytest


@pytest.mark.slow  # runs the pipeline thrice, on the shipped worlds: minutes
@pytest.mark.parametrize("world", [None, "tiny", "code"])
def test_quick_demo_writes_curves_summary_and_eval_dirs(tmp_path, monkeypatch, capsys, world):
    """``tandem demo --quick`` through the CLI's ``main`` in this process (as the entry point calls it, with
    ``sys.argv`` the command's: a fresh interpreter would only add its imports); torch's thread count, which
    the demo fixes at 1, is put back after."""
    import torch

    from tandem_rlvr.cli import main

    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TANDEM_THREADS", raising=False)  # the demo's own fixed count, 1
    out = tmp_path / "demo"
    argv = ["demo", "--quick", "--out", str(out)] + (["--world", world] if world else [])
    monkeypatch.setattr(sys, "argv", ["tandem", *argv])  # what each run records as its command line
    threads = torch.get_num_threads()
    try:
        rc = main(argv)
    finally:
        torch.set_num_threads(threads)
    assert rc == 0, capsys.readouterr().err[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    drift = world is None  # the default world is the drift world, with its weak junior
    code = world == "code"  # the code world: its junior is the world's half-way checkpoint
    assert summary["world_name"] == ("tiny-drift" if drift else "tiny-code" if code else "tiny")
    assert set(summary["results"]) == {"base", "grpo", "tandem", "klreg"} | ({"junior"} if drift or code else set())
    assert summary["junior"].endswith("junior" if drift or code else "senior")
    assert ("shorthand share" in (out / "summary.md").read_text()) == drift
    assert (out / "curves.png").stat().st_size > 10_000
    html = (out / "report" / "report.html").read_text()
    assert "<table" in html and "data:image/png;base64" in html
    assert json.loads((out / "compare" / "compare.json").read_text())
    for m in ("grpo", "tandem", "klreg"):
        assert (out / "runs" / m / "final" / "config.json").exists()
        rows = [json.loads(x) for x in (out / "runs" / m / "log.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2]
    for name in set(summary["results"]) - {"junior"}:
        for mode in ("solo", "handoff"):
            assert (out / "eval" / name / mode / "metrics.json").exists()
            assert (out / "eval" / name / mode / "samples.jsonl").read_text().count("\n") == 12
    if code:
        _check_code_demo(out, summary)
    styles = json.loads((out / "report" / "figures" / "styles.json").read_text())
    expected = {"base": "#7f7f7f", "grpo": "#ff7f0e", "tandem": "#2ca02c", "klreg": "#1f77b4"}  # docs/evaluation.md
    drawn = {(fig, label, st["color"]) for fig, panels in styles.items() for lines in panels.values()
             for label, st in lines.items()}
    assert {f for f, _, _ in drawn} >= {"pass_at_k_solo.png", "training.png"}
    assert all(color == expected[label] for _, label, color in drawn), drawn
    for cell in re.findall(r"<t[dh]>(.*?)</t[dh]>", html):
        assert str(tmp_path) not in cell, cell  # models by name in tables; full paths in the provenance section
    from tandem_rlvr.fingerprint import model_fingerprint
    from tandem_rlvr.world.shipped import shipped_world

    # the package's own world: built-in models are recorded by name (models.recorded_model), so the
    # provenance shows the shipped base's files by their fingerprint
    assert model_fingerprint(str(shipped_world(summary["world_name"]).base)) in html[html.index('id="provenance"'):]
    assert not (tmp_path / "cache" / "worlds").exists()  # nothing built
    for rec in (json.loads((out / "eval" / "grpo" / "solo" / "sources.json").read_text()),
                json.loads((out / "eval" / "grpo" / "legibility" / "legibility.json").read_text())["config"],
                json.loads((out / "runs" / "tandem" / "summary.json").read_text())):
        assert rec["argv"][1:] == argv  # the command that made each run, for the provenance section
    assert "demo --quick --out" in html[html.index('id="provenance"'):]
    if drift:  # the note on what the drift world builds in: its slip rates (docs/drift_world.md) beside the table
        assert "slip 2% of the time, its word solutions 70%" in (out / "summary.md").read_text()
        assert "slip 2% of the time, its word solutions 70%" in html
    # what is evaluated, and why, is said where a reader looks: summary.md and the report's headline
    ckpt = "final checkpoint" if drift else "validation-best checkpoint"
    assert ckpt in (out / "summary.md").read_text() and ckpt in html
    assert html.index('id="headline"') < html.index("<figure>")
    assert summary["threads"] == 1 or torch.cuda.is_available()  # CPU runs: the fixed count, whatever the load
    tandem_log = [json.loads(x) for x in (out / "runs" / "tandem" / "log.jsonl").read_text().splitlines()]
    shares = [r["senior/token_share"] for r in tandem_log if "senior/token_share" in r]
    assert all(0.0 < s < 1.0 for s in shares)  # tandem rollouts really mix both authors


def _check_code_demo(out, summary):
    """The code world's extras: programs graded by the code task, the probe per senior, the reward terms."""
    samples = [json.loads(x) for x in (out / "eval" / "base" / "solo" / "samples.jsonl").read_text().splitlines()]
    assert any(r["correct"] for r in samples)  # the real code world's base writes passing functions
    config = json.loads((out / "eval" / "base" / "solo" / "config.json").read_text())
    assert config["task"] == "code" and config["verifier"].startswith("code@")
    for name in ("base", "grpo", "tandem", "klreg"):
        probe = json.loads((out / "eval" / name / "probe" / "probe.json").read_text())
        correct = sum(r["correct"] for r in map(json.loads, (out / "eval" / name / "solo" / "samples.jsonl")
                                                 .read_text().splitlines()))
        assert probe["correct_solo_samples"] == min(correct, 8)
        assert summary["results"][name]["probe"]["probed"] == probe["overall"]["probed"]
    for m in ("grpo", "tandem", "klreg"):
        steps = [r for r in map(json.loads, (out / "runs" / m / "log.jsonl").read_text().splitlines())
                 if "reward/mean" in r]
        for r in steps:  # each term under reward/NAME; the reward is their weighted sum (length coef 0.2)
            assert r["reward/mean"] == pytest.approx(r["reward/correct"] + 0.2 * r["reward/length"])
        terms = summary["training_terms"][m]
        assert terms["last/reward/correct"] == pytest.approx(sum(r["reward/correct"] for r in steps) / len(steps))
    assert "probe kept" in (out / "summary.md").read_text() and "reward/length" in (out / "summary.md").read_text()


def test_demo_unknown_world_is_a_one_line_error(tmp_path):
    res = subprocess.run([sys.executable, "-m", "tandem_rlvr.cli", "demo", "--world", "huge", "--out",
                          str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "huge" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


def _results(grpo, tandem, base):
    cell = lambda p: {"solo": {"pass@1": {"mean": p, "se": 0.01}}}  # noqa: E731
    return {"base": {**cell(base), "shorthand_share": 0.58}, "grpo": {**cell(grpo), "shorthand_share": 0.9},
            "tandem": {**cell(tandem), "shorthand_share": 0.1}}


def test_drift_note_states_the_world_slip_rates_and_the_run_numbers():
    from tandem_rlvr.recipes.demo import drift_note

    world = {"slip_prob": 0.7, "shorthand_slip_prob": 0.02}
    note = drift_note(world, _results(0.262, 0.154, 0.249))
    for s in ("slip 2% of the time", "word solutions 70%", "GRPO 0.262", "Tandem 0.154", "base 0.249",
              "shorthand share of solo responses: GRPO 0.90, Tandem 0.10, base 0.58", "costs solo accuracy",
              "paper reports no such cost"):
        assert s in note, s
    assert note.count(". ") <= 2  # two plain sentences
    even = drift_note({"slip_prob": 0.5, "shorthand_slip_prob": 0.1}, _results(0.2, 0.25, 0.2))
    assert "slip 10% of the time, its word solutions 50%" in even and "did not cost solo accuracy" in even
    assert "costs solo accuracy" not in even


def _logs(tmp_path, schedules):
    runs = {}
    for m, sched in schedules.items():
        runs[m] = tmp_path / m
        runs[m].mkdir()
        (runs[m] / "log.jsonl").write_text(json.dumps({"step": 0, "val/accuracy": 0.2, "val/schedule": sched}) + "\n")
    return runs


def test_checkpoint_note_says_which_checkpoint_and_why(tmp_path):
    from tandem_rlvr.recipes.demo import checkpoint_note

    runs = _logs(tmp_path, {"grpo": "senior", "tandem": "word", "klreg": "senior"})
    at0 = {m: {"steps": 40, "best": {"step": 0, "accuracy": 0.2}} for m in runs}
    note = checkpoint_note("final", at0, runs)
    assert note.startswith("The trained seniors are each run's final checkpoint (step 40), not the validation-best one")
    assert "grpo step 0, tandem step 0, klreg step 0" in note and "the base model itself for every run" in note
    assert "grpo, klreg: senior alone; tandem: with the junior (word)" in note
    mixed = {**at0, "tandem": {"steps": 40, "best": {"step": 30, "accuracy": 0.3}}}
    note = checkpoint_note("final", mixed, runs)
    assert "tandem step 30" in note and "base model itself" not in note
    best = checkpoint_note("best", {m: {"steps": 60, "best": {"step": 50}} for m in runs}, runs)
    assert best.startswith("The trained seniors are each run's validation-best checkpoint: grpo step 50, "
                           "tandem step 50, klreg step 50 of 60")


def test_demo_threads_are_fixed_whatever_the_load(monkeypatch):
    import os

    import torch

    from tandem_rlvr import runtime

    if torch.cuda.is_available():
        pytest.skip("CUDA runs keep torch's own thread count")
    saved = torch.get_num_threads()
    try:
        monkeypatch.delenv("TANDEM_THREADS", raising=False)
        monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine ...
        monkeypatch.setattr(os, "cpu_count", lambda: 8)
        assert runtime.configure_cpu_threads(fixed=runtime.DEMO_THREADS) == 1 == torch.get_num_threads()
        assert runtime.configure_cpu_threads() == 8  # ... where the load-based pick takes every idle core
        monkeypatch.setattr(os, "getloadavg", lambda: (7.0, 7.0, 7.0))  # a busy one
        assert runtime.configure_cpu_threads(fixed=runtime.DEMO_THREADS) == 1 and runtime.configure_cpu_threads() == 1
        monkeypatch.setenv("TANDEM_THREADS", "2")  # an explicit choice wins
        assert runtime.configure_cpu_threads(fixed=runtime.DEMO_THREADS) == 2 == torch.get_num_threads()
    finally:
        torch.set_num_threads(saved)


def test_code_world_term_table_averages_the_first_and_last_steps_of_each_log(tmp_path, monkeypatch):
    import tandem_rlvr.recipes.demo as demo

    monkeypatch.setattr(demo, "TERM_STEPS", 2)
    run = tmp_path / "tandem"
    run.mkdir()
    rows = [{"step": 0, "val/accuracy": 0.5}]  # a validation record: no rollout figures, not a step of the table
    for step, (c, ln, share) in enumerate([(0.5, -0.6, 0.4), (0.7, -0.5, 0.6), (0.9, -0.4, 0.5), (1.0, -0.2, 0.7)], 1):
        rows.append({"step": step, "reward/mean": c + 0.2 * ln, "reward/correct": c, "reward/length": ln,
                     "senior/token_share": share})
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = demo.reward_terms_table({"tandem": run})["tandem"]
    assert t["steps"] == 4
    assert t["first/reward/correct"] == pytest.approx(0.6) and t["last/reward/correct"] == pytest.approx(0.95)
    assert t["first/reward/length"] == pytest.approx(-0.55) and t["last/reward/length"] == pytest.approx(-0.3)
    assert t["first/senior/token_share"] == pytest.approx(0.5) and t["last/senior/token_share"] == pytest.approx(0.6)
    md = demo._terms_markdown({"tandem": t})
    assert "| tandem | 0.600 / 0.950 | -0.550 / -0.300 |" in md and "first / last 2 steps" in md


def _write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _ttest(stat, alternative, p, diff, n=500):
    return {"candidate": "tandem", "baseline": "grpo", "statistic": stat, "alternative": alternative, "n": n,
            "mean_diff": diff, "t": None, "df": n - 1, "p": p}


def test_summary_opens_with_what_the_run_shows_of_each_property(tmp_path):
    """Each property's verdict is the paired one-sided t-test of compare.json at p < 0.05 (the one rule of
    metrics.paired_verdict), never a rule of standard errors: a difference of 0.015 with SEs of 0.008, which
    a 2-SE rule would call "does not separate", shows when its paired test has p = 0.01."""
    from tandem_rlvr.recipes.demo_headline import headline

    pm = lambda m, se: {"pass@1": {"mean": m, "se": se}}  # noqa: E731
    results = {"base": {"solo": pm(0.24, 0.01), "handoff": pm(0.135, 0.008)},
               "grpo": {"solo": pm(0.27, 0.01), "handoff": pm(0.11, 0.008)},
               "tandem": {"solo": pm(0.17, 0.01), "handoff": pm(0.125, 0.008)}}
    leg = lambda ce: {"summary": {"ce": {"macro": {"mean": ce, "se": 0.1}}}, "junior": "jr", "samples": 9}  # noqa: E731
    comp = {"legibility": {"grpo": leg(9.6), "tandem": leg(1.8), "base": leg(6.3)},
            "ttests": [_ttest("handoff pass@1 (handoff)", "greater", 0.01, 0.015),
                       _ttest("junior CE", "less", 0.30, -7.8)]}
    _write_json(tmp_path / "compare" / "compare.json", comp)
    _write_json(tmp_path / "eval" / "drift" / "drift.json",
                {"models": {"grpo": {"kl_to_junior": 1.78}, "tandem": {"kl_to_junior": 0.10}},
                 "recovery": {"defined": True, "share_moved_back": 0.89, "qualifying": 366}})
    lines = headline(tmp_path, results, quick=False)
    assert "paired one-sided t-test over the problems reaches p < 0.05" in lines[0]
    assert lines[1] == ("1. handoff robustness: shows (handoff pass@1 with the junior: Tandem 0.125 vs GRPO 0.110, "
                        "base 0.135; paired one-sided t-test over 500 problems, p = 0.01).")
    # a large difference whose paired test does not reach 0.05 does not separate
    assert lines[2].startswith("2. legibility: does not separate (the junior's cross-entropy on the senior's solo text "
                               "(nats/token): Tandem 1.80 vs GRPO 9.60, base 6.30;")
    assert lines[3].startswith("3. less drift from the junior: no paired test") and "89% of GRPO's 366" in lines[3]
    assert lines[4] == "Solo pass@1: Tandem 0.170 vs GRPO 0.270 (-0.100), base 0.240."
    comp["ttests"][0]["p"] = 0.99  # the opposite one-sided test has p = 0.01: the other way
    _write_json(tmp_path / "compare" / "compare.json", comp)
    assert headline(tmp_path, results, quick=False)[1].startswith("1. handoff robustness: does not show (")
    comp["ttests"][0]["p"] = 0.5
    _write_json(tmp_path / "compare" / "compare.json", comp)
    assert headline(tmp_path, results, quick=False)[1].startswith("1. handoff robustness: does not separate (")
    assert headline(tmp_path, results, quick=True)[0].startswith("What this run shows: nothing about the method")


def test_a_tandem_best_at_step_0_is_said_to_be_the_base_and_small_kls_keep_their_digits(tmp_path):
    from tandem_rlvr.recipes.demo_headline import headline

    pm = lambda m: {"pass@1": {"mean": m, "se": 0.01}}  # noqa: E731
    results = {m: {"solo": pm(0.6), "handoff": pm(0.6)} for m in ("base", "grpo", "tandem")}
    _write_json(tmp_path / "eval" / "drift" / "drift.json",
                {"models": {"grpo": {"kl_to_junior": 2.4e-4}, "tandem": {"kl_to_junior": 0.0}}, "recovery": {}})
    lines = headline(tmp_path, results, quick=False, best_steps={"grpo": 60, "tandem": 0, "klreg": 50})
    assert lines[1].startswith("Tandem RLVR's validation-best checkpoint is its step 0, the base model itself")
    drift = next(x for x in lines if x.startswith("3."))
    assert "Tandem 0.000 vs GRPO 0.00024, lower for Tandem" in drift  # not "0.000 vs 0.000"
    assert not any("step 0" in x for x in headline(tmp_path, results, quick=False, best_steps={"tandem": 30}))
    assert not any("step 0" in x for x in headline(tmp_path, results, quick=False))  # final checkpoints evaluated
