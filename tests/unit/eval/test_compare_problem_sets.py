"""``tandem compare`` refuses runs on different problem sets of the same size.

A benchmark's problem set is fingerprinted (``problem_set_fingerprint``: the ordered (id, text,
gold answer) list), not counted: two runs of 4 problems each whose files differ only in order,
or in one problem replaced by another, are refused with one line naming the benchmark;
``--allow-mixed`` pairs them anyway, saying so (a warning) and in compare.json (``mixed``), and
its t-test pairs exactly the problems both runs share. One id naming two problems (a text or an
answer edited in place) is refused even with ``--allow-mixed``: pairing those means nothing
(``eval/measure/comparable.py``).
"""

import json

import pytest

from tandem_rlvr.data.benchmarks import Problem
from tandem_rlvr.fingerprint import problem_set_fingerprint

from helpers.evals import eval_ok, run_compare
from helpers.evals import write_bench

BASE = [Problem("b", str(i), f"Mia has {i} shells.", str(i)) for i in range(4)]


@pytest.mark.parametrize("change", ["order", "text", "answer", "replaced", "id"])
def test_problem_set_fingerprint_sees_every_change_but_not_the_count(change):
    p = list(BASE)
    if change == "order":
        p = p[::-1]
    elif change == "text":
        p[2] = Problem("b", "2", "Mia has 2 shells!", "2")
    elif change == "answer":
        p[2] = Problem("b", "2", p[2].problem, "3")
    elif change == "replaced":
        p[2] = Problem("b", "9", "Tom has 9 cards.", "9")
    else:
        p[2] = Problem("b", "7", p[2].problem, p[2].answer)
    a, b = problem_set_fingerprint(BASE), problem_set_fingerprint(p)
    assert a["problems"] == b["problems"] == 4 and a["sha256"] != b["sha256"]
    assert problem_set_fingerprint([Problem(*x) for x in ((q.benchmark, q.problem_id, q.problem, q.answer)
                                                          for q in BASE)]) == a  # a copy is the same set


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(bench):
    return [json.loads(x) for x in bench.read_text().splitlines()]


@pytest.mark.parametrize("edit,shared", [("order", 4), ("replaced", 3)])
def test_same_size_different_problem_sets_are_refused_and_allow_mixed_pairs_them_saying_so(
        tmp_path, capsys, caplog, chat_models, edit, shared):
    bench = write_bench(tmp_path / "b.jsonl")
    rows = _rows(bench)
    if edit == "order":
        rows = rows[::-1]  # the same problems under the same ids, in another order
    else:
        rows[1] = {"id": "9", "problem": "Tom has 9 cards.", "answer": "9"}  # one problem swapped for another
    copy = _write(tmp_path / "copy" / "b.jsonl", rows)
    eval_ok(tmp_path / "x" / "solo", chat_models["a"], bench)
    eval_ok(tmp_path / "y" / "solo", chat_models["b"], copy)
    runs = [f"x={tmp_path / 'x'}", f"y={tmp_path / 'y'}"]
    rc, _, err = run_compare(capsys, tmp_path, *runs)
    assert rc == 2 and len(err) == 1 and "differ in benchmark b (4 problems in both, but fingerprint" in err[0], err
    assert "--allow-mixed" in err[0] and not (tmp_path / "cmp" / "compare.json").exists()

    caplog.clear()
    rc, _, err = run_compare(capsys, tmp_path, *runs, "--allow-mixed")
    comp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert rc == 0 and err == []
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("--allow-mixed" in m and "differ in benchmark b" in m for m in said), said
    assert len(comp["mixed"]) == 1 and "differ in benchmark b" in comp["mixed"][0]
    (test,) = [t for t in comp["ttests"] if t["statistic"] == "solo pass@1"]
    assert test["n"] == shared  # paired on the problems both runs have


@pytest.mark.parametrize("field,value", [("problem", "Mia has 2 shells!"), ("answer", "3")])
def test_one_id_naming_two_problems_is_refused_even_with_allow_mixed(tmp_path, capsys, chat_models, field, value):
    bench = write_bench(tmp_path / "b.jsonl")
    rows = _rows(bench)
    rows[2][field] = value  # problem "2" edited in place: its text or its gold answer
    copy = _write(tmp_path / "copy" / "b.jsonl", rows)
    eval_ok(tmp_path / "x" / "solo", chat_models["a"], bench)
    eval_ok(tmp_path / "y" / "solo", chat_models["b"], copy)
    for extra in ([], ["--allow-mixed"]):
        rc, _, err = run_compare(capsys, tmp_path, f"x={tmp_path / 'x'}", f"y={tmp_path / 'y'}", *extra)
        assert rc == 2 and len(err) == 1 and "problem '2' of b is not the problem" in err[0], (extra, err)
