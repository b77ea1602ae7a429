"""``tandem eval --task``: the task's prompt and verifier are used and recorded; compare refuses mixed verifiers.

Runs made before tasks existed (no ``task``/``verifier`` in config.json) are the math task's
verifier: they resume and compare with new math runs, and are refused beside another verifier.
"""

from __future__ import annotations

import json
import shutil

from tandem_rlvr.cli import main

from helpers.evals import write_bench


def _eval(out, senior, bench, *extra):
    return main(["eval", "solo", "--senior", str(senior), "--benchmarks", str(bench), "--n", "2", "--max-tokens", "3",
                 "--template", "plain", "--out", str(out), *extra])


def _compare(capsys, tmp_path, *runs):
    capsys.readouterr()
    rc = main(["compare", *runs, "--n-boot", "50", "--out", str(tmp_path / "cmp")])
    return rc, [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("tandem: error:")]


def test_a_code_eval_grades_in_the_sandbox_and_records_its_verifier(tmp_path, chat_models):
    out = tmp_path / "code"
    assert _eval(out, chat_models["a"], "humaneval", "--task", "code", "--limit", "2") == 0
    cfg = json.loads((out / "config.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert cfg["task"] == "code" and cfg["verifier"].startswith("code@")
    assert metrics["config"]["verifier"] == cfg["verifier"]
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    # three random tokens are no HumanEval solution: every sample is graded, none passes, each has a reason
    assert len(rows) == 4 and not any(r["correct"] for r in rows) and all(r["reason"] != "passed" for r in rows)


def test_compare_refuses_runs_of_different_verifiers(tmp_path, capsys, chat_models):
    bench = write_bench(tmp_path / "b.jsonl")
    assert _eval(tmp_path / "x" / "solo", chat_models["a"], bench) == 0
    assert _eval(tmp_path / "y" / "solo", chat_models["b"], bench, "--task", "answer-tag") == 0
    rc, err = _compare(capsys, tmp_path, f"x={tmp_path / 'x'}", f"y={tmp_path / 'y'}")
    assert rc != 0 and len(err) == 1 and "differ in task (math vs answer-tag)" in err[0] and "and 1 more" in err[0]


def test_a_run_from_before_tasks_resumes_and_compares_as_the_math_verifier(tmp_path, capsys, chat_models):
    bench = write_bench(tmp_path / "b.jsonl")
    assert _eval(tmp_path / "x" / "solo", chat_models["a"], bench) == 0
    shutil.copytree(tmp_path / "x", tmp_path / "old")
    cfg_path = tmp_path / "old" / "solo" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    assert (cfg.pop("task"), cfg.pop("verifier")) == ("math", "math@1:last-box")
    cfg_path.write_text(json.dumps(cfg))
    assert _eval(tmp_path / "old" / "solo", chat_models["a"], bench) == 0  # resumes: nothing to sample, not refused
    rc, err = _compare(capsys, tmp_path, f"x={tmp_path / 'x'}", f"old={tmp_path / 'old'}")
    assert rc == 0 and err == []
    assert _eval(tmp_path / "z" / "solo", chat_models["b"], bench, "--task", "gsm8k") == 0
    rc, err = _compare(capsys, tmp_path, f"old={tmp_path / 'old'}", f"z={tmp_path / 'z'}")
    assert rc != 0 and "differ in task (math vs gsm8k)" in err[0]


def test_an_unknown_task_is_a_one_line_error_before_any_model_loads(tmp_path, capsys, chat_models):
    assert _eval(tmp_path / "x", chat_models["a"], write_bench(tmp_path / "b.jsonl"), "--task", "poetry") == 2
    err = capsys.readouterr().err
    assert err.startswith("tandem: error: unknown task 'poetry'") and not (tmp_path / "x").exists()


def test_legibility_of_a_code_run_re_makes_the_code_prompts(tmp_path, chat_models):
    """The legibility scorer reloads a run's problems through its task (humaneval is no math benchmark)."""
    from tandem_rlvr.eval.run_files import read_run, recorded_task, run_problems
    from tandem_rlvr.tasks import get_task

    run = tmp_path / "code"
    assert _eval(run, chat_models["a"], "humaneval", "--task", "code", "--limit", "1") == 0
    cfg = read_run(run).config
    _, problems = run_problems(run, cfg)
    assert recorded_task(cfg).name == "code" and problems[("humaneval",
                                                           "HumanEval/0")].meta["gold"]["kind"] == "humaneval"
    assert get_task("code").verifier == cfg["verifier"]
    assert main(["eval", "legibility", "--samples", str(run), "--junior", str(chat_models["b"]),
                 "--out", str(tmp_path / "leg")]) == 0
