"""The code task: extraction, program assembly per benchmark, verdicts and reasons, shipped data.

Reference solutions must pass in our sandbox (a fast subset here; every one in
``tests/unit/world/test_shipped_code_solutions.py``, slow),
and a one-token mutation of each, chosen by hand so that it changes a tested output, must fail.
"""

from __future__ import annotations

import json

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.paths import PACKAGE_DATA
from tandem_rlvr.sandbox import Limits
from tandem_rlvr.tasks import get_task
from tandem_rlvr.tasks.code import CodeTask, extract_code, stdout_matches
from tandem_rlvr.tasks.code_data import CODE_BENCHMARKS, load_code

TASK = CodeTask(limits=Limits(wall_s=30, cpu_s=30), workers=2)


def _row(benchmark: str, problem_id: str) -> dict:
    return next(r for r in load_code(benchmark) if r["problem_id"] == problem_id)


def test_extraction_takes_the_last_python_block_else_the_whole_completion():
    assert extract_code("text\n```python\na = 1\n```\nmore\n```py\nb = 2\n```\nend") == "b = 2\n"
    assert extract_code("```python\na = 1\n```\n```bash\nls\n```") == "a = 1\n"  # other languages are skipped
    assert extract_code("```\nc = 3\n```") == "c = 3\n"  # an unlabelled fence counts
    assert extract_code("```python\nd = 4\n") == "d = 4\n"  # cut at the token limit: up to the end
    assert extract_code("    return x + 1\n") == "    return x + 1\n"  # no fence: the whole completion
    assert extract_code("  \n") is None and extract_code(None) is None


def test_shipped_sizes_are_the_published_ones():
    sizes = {name: len(load_code(name)) for name in CODE_BENCHMARKS}
    assert sizes == {"humaneval": 164, "mbpp": 427, "mbpp-full": 974, "apps-sample": 4}
    kinds = [r["gold"]["kind"] for r in load_code("apps-sample")]
    assert kinds == ["stdio", "stdio", "call", "call"]  # two stdin/stdout, two call-based


MUTATIONS = [  # (benchmark, problem id, original text, mutated text): each changes a tested output
    ("humaneval", "HumanEval/0", "distance < threshold", "distance > threshold"),
    ("mbpp", "2", "&", "|"),
    ("mbpp-full", "1", "min(", "max("),
    ("apps-sample", "1", "print(k)", "print(k + 1)"),
    ("apps-sample", "2404", "return k + lo + 1", "return k + lo + 2"),
    ("apps-sample", "4184", "if n < 2:\n        return False", "if n < 2:\n        return True"),
]


@pytest.mark.parametrize("bench,pid,old,new", MUTATIONS, ids=[f"{b}-{p}" for b, p, _, _ in MUTATIONS])
def test_the_reference_solution_passes_and_a_mutated_one_fails(bench, pid, old, new):
    row = _row(bench, pid)
    assert old in row["solution"]
    good, bad = TASK.grade([row["solution"], row["solution"].replace(old, new, 1)], [row, row])
    assert (good.score, good.reason, good.details["pass_fraction"]) == (1.0, "passed", 1.0)
    assert bad.score == 0.0 and bad.reason.startswith("failed test")


def test_fast_subset_of_references_passes_in_the_sandbox():
    rows = [r for name in CODE_BENCHMARKS for r in load_code(name, limit=4)]
    grades = TASK.grade([r["solution"] for r in rows], rows)
    assert [(r["problem_id"], g.reason) for r, g in zip(rows, grades, strict=True) if g.score != 1.0] == []


def test_pass_fraction_and_the_first_failing_test_are_reported():
    row = _row("mbpp", "2")  # tests: {4,5}, {3,4}, {13,14}; returning (3, 4) passes only the second
    (g,) = TASK.grade(["```python\ndef similar_elements(a, b):\n    return (3, 4)\n```"], [row])
    assert (g.score, g.reason, g.details["pass_fraction"], g.details["tests"]) == (0.0, "failed test 1", 1 / 3, 3)


def test_humaneval_accepts_a_bare_body_and_a_whole_function():
    row = _row("humaneval", "HumanEval/0")
    whole = "```python\n" + row["gold"]["prompt"] + row["solution"] + "```"
    grades = TASK.grade([row["solution"], whole], [row, row])
    assert [g.reason for g in grades] == ["passed", "passed"]


HAZARDS = {  # HumanEval/0 responses: what each does -> the reason recorded
    "while True:\n    pass\n": "timeout",
    "x = bytearray(10 * 1024 ** 3)\n": "memory",
    "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=5)\n": "network blocked",
    "open('/etc/tandem-pwned', 'w').write('x')\n": "write refused",
    "import sys\nprint('passed')\nsys.exit(0)\n": "crashed",  # exits before the tests report: no credit
    "def has_close_elements(:\n": "crashed",  # a syntax error
    "   \n": "no code found",
}


def test_each_hazard_scores_zero_with_its_reason():
    row = _row("humaneval", "HumanEval/0")
    task = CodeTask(limits=Limits(wall_s=60, cpu_s=3), workers=2)  # the loop ends on CPU time, not the clock
    grades = task.grade(list(HAZARDS), [row] * len(HAZARDS))
    assert [(g.score, g.reason) for g in grades] == [(0.0, r) for r in HAZARDS.values()]


def test_a_forged_result_line_without_the_nonce_earns_nothing():
    row = _row("mbpp", "2")
    forged = "import sys\nprint('\\n' + 'x' * 32 + '[null, null, null]')\nsys.exit(0)\n"
    (g,) = TASK.grade([forged], [row])
    assert g.score == 0.0


def test_apps_stdout_comparison_ignores_trailing_space_but_not_content():
    assert stdout_matches("1 \n6\n-1\n\n", "1\n6\n-1\n")
    assert stdout_matches("1 6 -1", "1\n6\n-1\n")  # token by token
    assert not stdout_matches("1\n6\n1\n", "1\n6\n-1\n")


def test_apps_stdin_program_with_a_wrong_answer_fails_its_test():
    row = _row("apps-sample", "111")
    (g,) = TASK.grade(["print(0)"], [row])
    assert (g.score, g.reason, g.details["tests"]) == (0.0, "failed test 1", 1)


def test_apps_rows_from_a_local_file_in_the_hub_format(tmp_path):
    src = load_code("apps-sample")
    path = tmp_path / "apps.jsonl"
    path.write_text((PACKAGE_DATA / "code" / "apps_sample.jsonl").read_text())
    rows = get_task("code").load(str(path))
    assert [r["problem_id"] for r in rows] == [r["problem_id"] for r in src] and rows[0]["benchmark"] == "apps"
    path.write_text(json.dumps({"foo": 1}) + "\n")
    with pytest.raises(TandemError, match="not HumanEval, MBPP or APPS rows"):
        get_task("code").load(str(path))


def test_an_unreachable_hub_id_is_a_one_line_error(monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError("no network\nmore")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(TandemError, match="cannot load codeparrot/apps from the Hugging Face hub"):
        load_code("codeparrot/apps")


def test_the_verifier_names_the_python_that_runs_the_programs():
    from tandem_rlvr.sandbox import run_program

    out = run_program("import sys\nprint('%d.%d' % sys.version_info[:2])", "", Limits(wall_s=30))
    assert CodeTask().verifier == f"code@2:py{out.stdout.strip()}"


def test_a_hub_id_goes_through_datasets_load_dataset_with_its_split(monkeypatch):
    """The hub path itself, fed locally: load_dataset is asked for the id and split, its rows become APPS rows."""
    import datasets

    raw = [json.loads(x) for x in (PACKAGE_DATA / "code" / "apps_sample.jsonl").read_text().splitlines()]
    asked = []

    def fake(hub_id, split=None):
        asked.append((hub_id, split))
        return datasets.Dataset.from_list(raw)

    monkeypatch.setattr(datasets, "load_dataset", fake)
    rows = load_code("codeparrot/apps:train", limit=3)
    assert asked == [("codeparrot/apps", "train")] and [r["problem_id"] for r in rows] == ["1", "111", "2404"]
    assert rows[0]["benchmark"] == "apps" and rows[2]["gold"]["fn_name"] == "findKthPositive"


def _stdio_row(n: int) -> dict:
    return {"problem_id": "t", "gold": {"kind": "stdio", "inputs": [f"{i}\n" for i in range(n)],
                                        "outputs": [f"{i}\n" for i in range(n)]}}


def _spied_runs(monkeypatch) -> list:
    """(start time, wall-clock budget) of each sandbox run the stdin/stdout grader starts."""
    import time

    import tandem_rlvr.rewards.code as code_mod

    runs, real = [], code_mod.run_program

    def spy(source, stdin, limits, *a, **k):
        runs.append((time.monotonic(), limits.wall_s))
        return real(source, stdin, limits, *a, **k)

    monkeypatch.setattr(code_mod, "run_program", spy)
    return runs


def test_a_stdin_program_that_times_out_on_one_input_is_stopped_there(monkeypatch):
    runs = _spied_runs(monkeypatch)
    echo_but_loop_on_1 = "s = input()\nwhile s == '1':\n    pass\nprint(s)\n"
    task = CodeTask(limits=Limits(wall_s=6, cpu_s=60), workers=1)
    (g,) = task.grade([echo_but_loop_on_1], [_stdio_row(4)])
    # input 0 passes, input 1 meets the wall clock; inputs 2 and 3 are never run, and count as failed
    assert (g.score, g.reason, g.details["pass_fraction"], len(runs)) == (0.0, "timeout", 0.25, 2)
    assert g.details["error"] == "timeout on input 2"


def test_a_stdin_grade_takes_one_wall_clock_limit_whatever_the_inputs(monkeypatch):
    """Each input runs under what is left of one limit: three inputs of 0.6 limits each cannot all
    finish (the old grader gave every input a full limit and passed this program)."""
    runs = _spied_runs(monkeypatch)
    slow_echo = "import time\ntime.sleep(3.6)\nprint(input())\n"
    task = CodeTask(limits=Limits(wall_s=6, cpu_s=60), workers=1)
    (g,) = task.grade([slow_echo], [_stdio_row(3)])
    assert (g.score, g.reason, len(runs)) == (0.0, "timeout", 2)
    assert runs[0][1] == pytest.approx(6,
                                       abs=0.05)  # the whole limit for the first input, what is left of it for the next
    ends = [start + budget for start, budget in runs]
    assert max(ends) - min(ends) < 0.05  # every run ends by the same deadline: the first start + 6 s


ON_INPUT_1 = {  # a stdin program that misbehaves on input "1" of "0".."3" -> (reason, runs started, pass fraction)
    "x = bytearray(10 * 1024 ** 3) if s == '1' else b''": ("memory", 2, 0.25),
    "while s == '1':\n    sys.stdout.write('y' * 65536)": ("output limit", 2, 0.25),
    "if s == '1':\n    raise ValueError('boom')": ("crashed", 4, 0.75),  # not a limit: the other inputs still run
}


@pytest.mark.parametrize("misbehaviour", list(ON_INPUT_1))
def test_a_stdin_program_that_meets_a_limit_on_one_input_is_stopped_there_and_a_crash_is_not(monkeypatch, misbehaviour):
    """Siblings of the timeout: memory and output limits end the grade at that input like the clock does
    (the rest would cost as much and count as failed); a plain crash fails its own input only."""
    runs = _spied_runs(monkeypatch)
    program = f"import sys\ns = input()\n{misbehaviour}\nprint(s)\n"
    task = CodeTask(limits=Limits(wall_s=60, cpu_s=60, output_bytes=1 << 16), workers=1)
    (g,) = task.grade([program], [_stdio_row(4)])
    reason, n_runs, fraction = ON_INPUT_1[misbehaviour]
    assert (g.score, g.reason, len(runs), g.details["pass_fraction"],
            g.details["tests"]) == (0.0, reason, n_runs, fraction, 4)
    if n_runs == 2:
        assert g.details["error"] == f"{reason} on input 2"


def test_the_code_worlds_rows_are_drawn_once_per_split_and_handed_out_as_copies(monkeypatch):
    """``load_code("tiny-code")`` draws a split once per process (``world.code.code_rows``, counted here) and
    gives each caller rows of its own: one caller's edit does not reach the next."""
    import tandem_rlvr.tasks.code_data as code_data
    import tandem_rlvr.world.code as code_world

    drawn = []
    real = code_world.code_rows
    monkeypatch.setattr(code_world, "code_rows",
                        lambda split, limit: drawn.append((split, limit)) or real(split, limit))
    code_data._tiny_code_rows.cache_clear()
    try:
        first = load_code("tiny-code", 5, "val")
        first[0]["gold"]["tests"].append("assert False")
        first[0]["question"] = "edited"
        again = load_code("tiny-code", 5, "val")
        assert drawn == [("val", 5)]
        assert again == real("val", 5) and again[0]["question"] != "edited"
        load_code("tiny-code", 5, "test")
        assert drawn == [("val", 5), ("test", 5)]
    finally:
        code_data._tiny_code_rows.cache_clear()  # later tests draw with the real function
