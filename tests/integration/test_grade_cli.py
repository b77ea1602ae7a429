"""``tandem grade``: one output row per response with score and reason; resumable; bad input refused."""

from __future__ import annotations

import json

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.tasks import grade as grade_mod
from tandem_rlvr.tasks.code import CodeTask
from tandem_rlvr.tasks.code_data import load_code


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _responses(tmp_path):
    he = {r["problem_id"]: r for r in load_code("humaneval", 3)}
    rows = [{"problem_id": "HumanEval/0", "response": he["HumanEval/0"]["solution"], "model": "a"},
            {"problem_id": "HumanEval/1", "response": "    return None\n", "model": "b"},
            {"problem_id": "HumanEval/2", "response": "I do not know.", "model": "c"},
            {"problem_id": "HumanEval/2", "response": "", "model": "d"}]
    return _write(tmp_path / "resp.jsonl", rows)


def _graded(out):
    return [json.loads(x) for x in (out / "graded.jsonl").read_text().splitlines()]


def test_grade_writes_one_row_per_response_with_score_reason_and_the_other_columns(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["grade", "--task", "code", "--benchmark", "humaneval", "--responses", str(_responses(tmp_path)),
                 "--out", str(out), "--workers", "2"]) == 0
    rows = _graded(out)
    # HumanEval/0's reference passes; None fails check's first assert; prose is not Python; empty is no code
    assert [(r["model"], r["score"], r["reason"]) for r in rows] == [
        ("a", 1.0, "passed"), ("b", 0.0, "failed test 1"), ("c", 0.0, "crashed"), ("d", 0.0, "no code found")]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["responses"] == 4 and summary["mean_score"] == 0.25 and summary["verifier"].startswith("code@")
    assert "mean score 0.250" in capsys.readouterr().out


def test_a_finished_grade_rerun_is_a_no_op(tmp_path, monkeypatch):
    out, resp = tmp_path / "out", _responses(tmp_path)
    args = ["grade", "--task", "code", "--benchmark", "humaneval", "--responses", str(resp), "--out", str(out)]
    assert main(args) == 0
    before = (out / "graded.jsonl").read_text()

    def boom(*a, **k):
        raise AssertionError("graded again")

    monkeypatch.setattr(CodeTask, "grade", boom)
    assert main(args) == 0 and (out / "graded.jsonl").read_text() == before


def test_an_interrupted_grade_resumes_without_regrading_finished_rows(tmp_path, monkeypatch):
    out, resp = tmp_path / "out", _responses(tmp_path)
    monkeypatch.setattr(grade_mod, "CHUNK", 2)
    real, calls = CodeTask.grade, []

    def failing_second(self, responses, rows):
        calls.append(len(responses))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, responses, rows)

    monkeypatch.setattr(CodeTask, "grade", failing_second)
    args = ["grade", "--task", "code", "--benchmark", "humaneval", "--responses", str(resp), "--out", str(out)]
    assert main(args) == 130
    assert len(_graded(out)) == 2 and not (out / "summary.json").exists()
    calls.clear()
    monkeypatch.setattr(CodeTask, "grade", lambda self, r, rows: (calls.append(len(r)), real(self, r, rows))[1])
    assert main(args) == 0
    assert calls == [2] and [r["model"] for r in _graded(out)] == ["a", "b", "c", "d"]


def test_grade_with_the_math_task_uses_the_boxed_verifier(tmp_path):
    out = tmp_path / "out"
    resp = _write(tmp_path / "r.jsonl", [{"problem_id": "0", "response": "so \\boxed{18}"},
                                         {"problem_id": "0", "response": "so \\boxed{17}"}])
    assert main(["grade", "--benchmark", "gsm8k", "--responses", str(resp), "--out", str(out)]) == 0
    assert [(r["score"], r["reason"]) for r in _graded(out)] == [(1.0, "passed"), (0.0, "wrong answer")]


@pytest.mark.parametrize("content,message", [
    ('{"problem_id": "HumanEval/0", "response": "x"}\n{not json\n', "resp.jsonl:2: malformed JSON line"),
    ('{"problem_id": "HumanEval/0"}\n', "resp.jsonl:1: each line must be an object with problem_id and response"),
    ('{"problem_id": "HumanEval/0", "response": 3}\n', "resp.jsonl:1: response must be a string"),
    ('{"problem_id": "nope", "response": "x"}\n', "problem_id 'nope' is not a problem of humaneval"),
])
def test_bad_input_is_a_one_line_error_and_leaves_nothing(tmp_path, capsys, content, message):
    resp = tmp_path / "resp.jsonl"
    resp.write_text(content)
    out = tmp_path / "out"
    assert main(["grade", "--task", "code", "--benchmark", "humaneval", "--responses", str(resp),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tandem: error:") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_another_responses_file_into_the_same_out_is_refused(tmp_path, capsys):
    out, resp = tmp_path / "out", _responses(tmp_path)
    args = ["grade", "--task", "code", "--benchmark", "humaneval", "--responses", str(resp), "--out", str(out)]
    assert main(args) == 0
    _write(resp, [{"problem_id": "HumanEval/0", "response": "pass"}])
    assert main(args) == 2 and "different responses" in capsys.readouterr().err


def test_grade_with_the_papers_grader_records_it_and_applies_its_rules(tmp_path):
    """``\\boxed 18`` is an answer for ours, none for the paper's grader (it unwraps ``\\boxed{`` only)."""
    resp = _write(tmp_path / "r.jsonl", [{"problem_id": "0", "response": "so \\boxed{18}"},
                                         {"problem_id": "0", "response": "so \\boxed 18"}])
    ours, paper = tmp_path / "ours", tmp_path / "paper"
    assert main(["grade", "--benchmark", "gsm8k", "--responses", str(resp), "--out", str(ours)]) == 0
    assert main(["grade", "--benchmark", "gsm8k", "--responses", str(resp), "--out", str(paper),
                 "--grader", "paper"]) == 0
    assert [r["score"] for r in _graded(ours)] == [1.0, 1.0]
    assert [(r["score"], r["reason"]) for r in _graded(paper)] == [(1.0, "passed"), (0.0, "no answer found")]
    assert json.loads((paper / "summary.json").read_text())["verifier"] == "math@1:last-box:grader=paper"
    assert main(["grade", "--benchmark", "gsm8k", "--responses", str(resp), "--out", str(paper)]) == 2  # other grader
