"""``tandem eval regrade``: today's grader over saved samples, beside the originals.

The run below is written by hand: five Minerva-style samples whose saved verdicts are what a
defective grader gave (the replication's cases, ChrisG777/Tandem-RLVR docs/REPRODUCTION_AUDIT.md:
``p(s)=...`` vs the bare expression, ``b=m`` vs ``m``, ``2.55e-10`` read with Euler's e; and a
false accept of unevaluated powers), plus one untouched verdict on another benchmark.
Expected flips and pass@1 are counted by hand in the comments.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.errors import TandemError
from tandem_rlvr.eval.measure.regrade import RECORD, REGRADED, regrade

# (benchmark, problem_id, response, gold, saved verdict, today's verdict)
SAMPLES = [
    ("minerva", "82", r"so \boxed{p(s)=s^{2}+\omega^{2}}", r"s^{2}+\omega^{2}", False, True),
    ("minerva", "119", r"hence \boxed{b=m}", "m", False, True),
    ("minerva", "198", r"\boxed{2.55 \times 10^{-10}} m", "2.55e-10", False, True),
    ("minerva", "7", r"\boxed{1.1 \times 10^{-21}}", r"1 \times 10^{-20}", True, False),
    ("minerva", "9", r"\boxed{9.7}", "9.6", False, False),
    ("gsm8k", "0", r"\boxed{18}", "18", True, True),
]
# By hand: minerva 0->1 = 3 (82, 119, 198), 1->0 = 1 (7); pass@1 before 1/5 = 0.2, after 3/5 = 0.6.
# gsm8k: no flips, 1.0 before and after.


def _run(path, samples=SAMPLES):
    path.mkdir(parents=True)
    config = {"schedule": {"name": "senior"}, "benchmarks": ["minerva", "gsm8k"], "n": 1, "ks": [1],
              "answer_mode": "last-box", "models": {"senior": "hand-written"}}
    (path / "config.json").write_text(json.dumps(config))
    with open(path / "samples.jsonl", "w") as f:
        for b, pid, resp, gold, saved, _ in samples:
            f.write(json.dumps({"benchmark": b, "problem_id": pid, "sample_idx": 0, "response": resp, "answer": gold,
                                "correct": saved, "token_ids": [1, 2], "senior_mask": [1, 1], "senior_share": 1.0,
                                "tokens": 2}) + "\n")
    return path


def test_regrade_rescores_with_todays_grader_and_counts_flips_per_benchmark(tmp_path):
    run = _run(tmp_path / "run")
    before = {p: p.read_bytes() for p in run.iterdir()}
    rec = regrade(run)
    assert not rec["unchanged"]
    assert rec["benchmarks"]["minerva"] == {"0->1": 3, "1->0": 1, "samples": 5, "pass@1_before": pytest.approx(0.2),
                                            "pass@1_after": pytest.approx(0.6)}
    assert rec["benchmarks"]["gsm8k"]["0->1"] == rec["benchmarks"]["gsm8k"]["1->0"] == 0
    assert all(p.read_bytes() == b for p, b in before.items())  # the originals are never touched
    rows = [json.loads(line) for line in (run / REGRADED).read_text().splitlines()]
    assert [r["correct"] for r in rows] == [s[5] for s in SAMPLES]
    assert [r["original_correct"] for r in rows] == [s[4] for s in SAMPLES]
    g = rec["grader"]
    assert len(g["grader_sha256"]) == 64
    assert g["packages"]["math-verify"] and g["packages"]["sympy"] and g["tandem_rlvr"]
    assert len(rec["inputs_sha256"]) == 64


def test_regrade_rerun_is_a_no_op_and_changed_samples_are_refused(tmp_path):
    run = _run(tmp_path / "run")
    regrade(run)
    stamp = (run / RECORD).stat().st_mtime_ns, (run / REGRADED).stat().st_mtime_ns
    assert regrade(run)["unchanged"]
    assert ((run / RECORD).stat().st_mtime_ns, (run / REGRADED).stat().st_mtime_ns) == stamp
    with open(run / "samples.jsonl", "a") as f:  # a resumed run appended samples
        f.write(json.dumps({"benchmark": "gsm8k", "problem_id": "1", "sample_idx": 0, "response": r"\boxed{3}",
                            "answer": "3", "correct": True, "token_ids": [1], "senior_mask": [1]}) + "\n")
    with pytest.raises(TandemError, match="samples that have changed since; pass --replace"):
        regrade(run)
    assert regrade(run, replace=True)["benchmarks"]["gsm8k"]["samples"] == 2


def test_regrade_cli_prints_flips_and_rejects_rows_without_text(tmp_path, capsys):
    run = _run(tmp_path / "run")
    assert main(["eval", "regrade", str(run)]) == 0
    out = capsys.readouterr().out
    assert "minerva" in out and "0.200" in out and "0.600" in out
    assert main(["eval", "regrade", str(run)]) == 0 and "nothing to do" in capsys.readouterr().out
    bare = _run(tmp_path / "bare")
    lines = [json.loads(line) for line in (bare / "samples.jsonl").read_text().splitlines()]
    (bare / "samples.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "response"}) + "\n"
                                                for r in lines))
    assert main(["eval", "regrade", str(bare)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tandem: error:") and "no response text" in err[0]
    assert not (bare / RECORD).exists() and not (bare / REGRADED).exists()


def test_compare_reads_regraded_verdicts_and_says_so(tmp_path, capsys):
    a = _run(tmp_path / "a" / "solo")
    shutil.copytree(a, tmp_path / "b" / "solo")
    regrade(a)  # only senior a is regraded
    assert main(["compare", f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}", "--n-boot", "50",
                 "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    comp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert comp["solo"]["a"]["minerva"]["pass@1"]["mean"] == pytest.approx(0.6)  # regraded
    assert comp["solo"]["b"]["minerva"]["pass@1"]["mean"] == pytest.approx(0.2)  # as sampled
    assert list(comp["regraded"]) == ["a (solo)"]
    assert "Regraded verdicts used" in out and "Regraded verdicts used" in (tmp_path / "cmp" / "compare.md").read_text()

    with open(a / "samples.jsonl", "a") as f:  # samples changed after the regrade: refused, not silently mixed
        f.write(json.dumps({"benchmark": "gsm8k", "problem_id": "1", "sample_idx": 0, "response": r"\boxed{3}",
                            "answer": "3", "correct": True, "token_ids": [1], "senior_mask": [1]}) + "\n")
    assert main(["compare", f"a={tmp_path / 'a'}", "--n-boot", "50", "--out", str(tmp_path / "cmp2")]) != 0
    assert "made from other samples" in capsys.readouterr().err


def test_report_sample_marks_use_the_regraded_verdicts(tmp_path):
    from tandem_rlvr.eval.report.samples import samples_html

    a = _run(tmp_path / "a" / "solo", samples=SAMPLES[1:2])  # b=m vs m: saved wrong, right today
    before = samples_html({"runs": {"a": {"solo": str(a), "handoff": {}}}}, 1)
    regrade(a)
    after = samples_html({"runs": {"a": {"solo": str(a), "handoff": {}}}}, 1)
    assert 'data-correct="false"' in before and 'data-correct="true"' in after


def test_regrade_reads_runs_recorded_with_a_task_and_refuses_non_math_tasks(tmp_path):
    a = _run(tmp_path / "a", samples=SAMPLES[1:2])
    cfg = json.loads((a / "config.json").read_text())
    (a / "config.json").write_text(json.dumps({**cfg, "task": "math", "verifier": "math@1:last-box"}))
    assert regrade(a)["benchmarks"]["minerva"]["0->1"] == 1  # b=m vs m, by hand
    c = _run(tmp_path / "c", samples=SAMPLES[1:2])
    (c / "config.json").write_text(json.dumps({**cfg, "task": "code", "verifier": "code@1"}))
    with pytest.raises(TandemError, match="task is 'code'"):
        regrade(c)


# Saved verdicts are ours; today's are the paper's grader's, worked out from its extraction rules
# (rewards/paper_grader.py): \fbox never counts, \boxed 7 is no answer, \dfrac12 and 0.5 are both
# \frac{1}{2} after mathd normalisation, an unclosed last box is no answer for either grader.
PAPER_SAMPLES = [
    ("minerva", "1", r"so \fbox{5}", "5", True, False),
    ("minerva", "2", r"so \boxed 7", "7", True, False),
    ("minerva", "3", r"\boxed{\dfrac12}", "0.5", True, True),
    ("minerva", "4", r"\boxed{3} or \boxed{4", "4", False, False),
]
# By hand: 2 of 4 verdicts change, both 1->0; pass@1 3/4 = 0.75 before, 1/4 = 0.25 after.


def test_regrade_with_the_papers_grader_counts_changed_verdicts_and_refuses_mixing(tmp_path, capsys):
    from tandem_rlvr.eval.measure.comparable import refuse_mixed_verdicts
    from tandem_rlvr.eval.measure.regrade import apply_regrade
    from tandem_rlvr.eval.run_files import read_run

    run = _run(tmp_path / "a" / "solo", samples=PAPER_SAMPLES)
    shutil.copytree(run, tmp_path / "b" / "solo")
    assert main(["eval", "regrade", str(run), "--grader", "paper"]) == 0
    assert "2 of 4 verdicts changed" in capsys.readouterr().out
    rec = json.loads((run / RECORD).read_text())
    assert rec["grader_name"] == "paper" and rec["verifier"] == "math@1:last-box:grader=paper"
    assert rec["benchmarks"]["minerva"] == {"0->1": 0, "1->0": 2, "samples": 4, "pass@1_before": 0.75,
                                            "pass@1_after": 0.25}
    rows = [json.loads(line) for line in (run / REGRADED).read_text().splitlines()]
    assert [r["correct"] for r in rows] == [s[5] for s in PAPER_SAMPLES]
    # the run was sampled with ours: regrading it by default is another grader than the record's
    assert main(["eval", "regrade", str(run)]) == 2
    assert "another grader" in capsys.readouterr().err
    # a paper-regraded run and an ours-graded run are different verifiers: compare refuses to mix them
    a, b = read_run(run), read_run(tmp_path / "b" / "solo")
    apply_regrade(a)
    with pytest.raises(TandemError, match="differ in verifier .*never mixed"):
        refuse_mixed_verdicts({"a": a, "b": b})
    assert main(["compare", f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}", "--n-boot", "50",
                 "--out", str(tmp_path / "cmp")]) == 2
