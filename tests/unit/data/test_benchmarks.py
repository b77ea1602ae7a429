"""Benchmark loaders: the packaged data files, every file format, bad rows, errors, the registry."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from tandem_rlvr.data import benchmarks
from tandem_rlvr.data.benchmarks import Problem, load_benchmark, load_benchmarks, register_benchmark
from tandem_rlvr.errors import TandemError
from tandem_rlvr.paths import PACKAGE_DATA as DATA
from tandem_rlvr.rewards import extract_boxed
# name: (file, rows in the file, rows without an answer that must be reported and skipped)
SHARED = {
    "aime24": ("aime24.jsonl", 30, 0),
    "aime25": ("aime25.jsonl", 30, 0),
    "aime26": ("aime26.jsonl", 30, 0),
    "amc23": ("amc23.jsonl", 40, 0),
    "amc": ("amc.json", 83, 0),
    "math500": ("math500.jsonl", 500, 0),
    "minerva": ("minerva_math.jsonl", 272, 0),
    "gsm8k": ("gsm8k.jsonl", 1319, 0),
    "math_train": ("math_train.json", 7474, 4),  # two null and two empty answers
    "deepscaler_sample": ("deepscaler_sample.json", 803, 0),
}


@pytest.fixture
def shared(monkeypatch):
    """The packaged files, with ``$TANDEM_DATA`` unset: nothing outside the package is read."""
    monkeypatch.delenv("TANDEM_DATA", raising=False)


@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_file_loads_with_documented_rows(name, shared, caplog):
    file, rows, bad = SHARED[name]
    with caplog.at_level(logging.WARNING, logger="tandem_rlvr"):
        problems = load_benchmark(name)
    assert len(problems) == rows - bad
    assert all(p.benchmark == name and p.problem.strip() and p.answer.strip() for p in problems)
    assert len({p.problem_id for p in problems}) == len(problems)
    skipped = [r for r in caplog.records if "skipped row" in r.getMessage()]
    assert len(skipped) == bad
    assert all(re.search(rf"{re.escape(file)}:\d+: skipped row: no answer", r.getMessage()) for r in skipped)


def test_float_answers_become_integers(shared):
    amc23 = load_benchmark("amc23")
    assert amc23[0].answer == "27" and amc23[0].problem_id == "0"
    assert all(re.fullmatch(r"-?\d+", p.answer) for p in amc23 + load_benchmark("amc"))


def test_minerva_answers_come_from_the_solution_box(shared):
    minerva = load_benchmark("minerva")
    assert minerva[0].answer == "1.6"
    assert all(p.answer == extract_boxed(p.solution) for p in minerva)


def test_gsm8k_answers_follow_hashes_without_commas(shared):
    gsm8k = load_benchmark("gsm8k")
    assert gsm8k[0].answer == "18" and "####" not in gsm8k[0].solution
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", p.answer) for p in gsm8k)
    raw = [json.loads(line)["answer"].rpartition("####")[2].strip() for line in (DATA / "gsm8k.jsonl").open()]
    with_commas = [(r, p.answer) for r, p in zip(raw, gsm8k, strict=True) if "," in r]
    assert with_commas and all(r.replace(",", "") == a for r, a in with_commas)


def test_ids_and_meta(shared):
    math500 = load_benchmark("math500", limit=3)
    assert len(math500) == 3 and math500[0].problem_id == "test/precalculus/807.json"
    assert set(math500[0].meta) == {"subject", "level"} and math500[0].solution
    assert load_benchmark("aime24")[0].problem_id == "60"


def test_package_data_is_read_first_then_tandem_data(tmp_path, monkeypatch):
    """A name resolves to the packaged file even when ``$TANDEM_DATA`` holds one of the same name;
    a name the package lacks is read from ``$TANDEM_DATA`` before the hub is tried."""
    _write(tmp_path / "gsm8k.jsonl", [{"problem": "decoy", "answer": "1"}])
    _write(tmp_path / "olympiadbench.jsonl", [{"problem": "local", "answer": "2"}])
    monkeypatch.setenv("TANDEM_DATA", str(tmp_path))
    assert benchmarks.data_dirs() == [DATA.resolve(), tmp_path.resolve()]
    assert load_benchmark("gsm8k", limit=1)[0].problem != "decoy"
    assert [p.problem for p in load_benchmark("olympiadbench")] == ["local"]


def test_pooled_aime_is_the_three_years_in_order(shared):
    """The paper's AIME: 2024, 2025 and 2026 as one 90-problem set, each problem once, ids kept per year."""
    pooled = load_benchmark("aime")
    years = [load_benchmark(y) for y in ("aime24", "aime25", "aime26")]
    assert len(pooled) == 90 == sum(len(y) for y in years)
    assert [(p.problem, p.answer) for p in pooled] == [(p.problem, p.answer) for y in years for p in y]
    assert pooled[0].problem_id == "aime24/60" and pooled[30].problem_id == "aime25/0"
    assert {p.benchmark for p in pooled} == {"aime"} and len({p.problem_id for p in pooled}) == 90
    assert len(load_benchmark("aime", limit=31)) == 31


ROWS = [
    {"id": "a", "problem": "What is 1+1?", "answer": "2"},
    {"question": "What is 3 times 9?", "answer": 27.0, "url": "u"},
    {"prompt": "Half of one?", "solution": r"It is \boxed{\frac{1}{2}}."},
    {"question": "Jobs?", "answer": "So 10 * 100 = 1000.\n#### 1,000"},
    {"problem": "Pair?", "final_answer": ["$(1, 2)$"]},
]
EXPECTED = [("a", "2"), ("1", "27"), ("2", r"\frac{1}{2}"), ("3", "1000"), ("4", "(1, 2)")]


def _write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        path.write_text(json.dumps(rows, indent=2))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_json_formats_normalise_every_field_spelling(tmp_path, fmt):
    problems = load_benchmark(str(_write(tmp_path / f"mine.{fmt}", ROWS)))
    assert [(p.problem_id, p.answer) for p in problems] == EXPECTED
    assert {p.benchmark for p in problems} == {"mine"}
    assert problems[1].meta == {"url": "u"} and problems[3].solution == "So 10 * 100 = 1000."


def test_parquet(tmp_path):
    pd = pytest.importorskip("pandas")
    path = tmp_path / "typed.parquet"
    pd.DataFrame({"problem": ["3 times 9?", "Half of one?"], "answer": [27.0, float("nan")],
                  "solution": [None, r"so \boxed{\frac12}"], "level": [1, 2]}).to_parquet(path)
    problems = load_benchmark(str(path))
    assert [(p.problem_id, p.answer, p.meta) for p in problems] == [
        ("0", "27", {"level": 1}),
        ("1", r"\frac12", {"level": 2}),
    ]


def test_malformed_json_line_is_reported_and_skipped(tmp_path, caplog):
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps(ROWS[0]), "{not json", "", json.dumps({"problem": "no answer"}), json.dumps(ROWS[1])]
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="tandem_rlvr"):
        problems = load_benchmark(str(path))
    assert [p.answer for p in problems] == ["2", "27"]
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{path}:2: skipped row: malformed JSON" in m for m in messages)
    assert any(f"{path}:4: skipped row: no answer" in m for m in messages)
    assert any("skipped 2 of 4 rows" in m for m in messages)


def test_bad_row_in_json_list_is_reported_with_its_line(tmp_path, caplog):
    path = _write(tmp_path / "list.json", [ROWS[0], {"answer": "3"}, ROWS[1]])
    with caplog.at_level(logging.WARNING, logger="tandem_rlvr"):
        assert len(load_benchmark(str(path))) == 2
    line = path.read_text().splitlines().index("  {", 5) + 1  # the second object's opening brace
    assert any(f"{path}:{line}: skipped row: no problem text" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("content", ["", "\n\n", "[]", "{oops\n[1,\n", '[{"problem": "x", "answer": "1"} {}]'])
def test_empty_or_unparseable_file_is_an_error(tmp_path, content):
    path = tmp_path / ("x.json" if content.startswith("[") else "x.jsonl")
    path.write_text(content)
    with pytest.raises(TandemError, match=re.escape(str(path))):
        load_benchmark(str(path))


def test_missing_file_and_unknown_name_are_errors(tmp_path):
    with pytest.raises(TandemError, match="not found: .*nope.jsonl"):
        load_benchmark(str(tmp_path / "nope.jsonl"))
    with pytest.raises(TandemError, match="unknown benchmark 'aime2024'; valid names: .*aime24.*math500"):
        load_benchmark("aime2024")


def test_hub_fallback_offline_is_a_clear_error(monkeypatch, tmp_path):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'math-ai/olympiadbench' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr(benchmarks, "data_dirs", lambda: [tmp_path])
    with pytest.raises(TandemError, match="'olympiadbench'.*not found locally.*hub is unreachable.*ConnectionError"):
        load_benchmark("olympiadbench")
    with pytest.raises(TandemError, match="no file aime26.jsonl"):
        load_benchmark("aime26")  # no hub id known


def test_hub_id_spec(monkeypatch):
    import datasets

    calls = []

    def fake(hub_id, config, split):
        calls.append((hub_id, config, split))
        return [{"question": "q", "answer": "1", "idx": 7}]

    monkeypatch.setattr(datasets, "load_dataset", fake)
    assert load_benchmark("someone/olymp:dev") == [Problem("olymp", "7", "q", "1")]
    assert load_benchmark("someone/olymp", split="train")[0].benchmark == "olymp"
    assert calls == [("someone/olymp", None, "dev"), ("someone/olymp", None, "train")]


def test_registry_and_load_benchmarks(tmp_path):
    seen = []

    def tiny(split, limit):
        seen.append((split, limit))
        return [Problem("tiny", str(i), f"{i}+0?", str(i)) for i in range(5)]

    register_benchmark("tiny_for_test", tiny)
    register_benchmark("tiny_for_test", tiny)  # the same function again is a no-op
    try:
        assert [p.answer for p in load_benchmark("tiny_for_test", split="test", limit=2)] == ["0", "1"]
        assert seen == [("test", 2)]
        with pytest.raises(TandemError, match="already registered"):
            register_benchmark("tiny_for_test", lambda split, limit: [])
        with pytest.raises(TandemError, match="bad benchmark name"):
            register_benchmark("a/b", tiny)
        path = _write(tmp_path / "test.jsonl", ROWS[:2])  # a split-named file takes its folder's name
        both = load_benchmarks(["tiny_for_test", str(path)])
        assert list(both) == ["tiny", tmp_path.name] and len(both["tiny"]) == 5
        with pytest.raises(TandemError, match="same name 'tiny'"):
            load_benchmarks(["tiny_for_test", "tiny_for_test"])
    finally:
        benchmarks._REGISTRY.pop("tiny_for_test")


def test_problem_is_hashable_and_meta_is_not_identity():
    a = Problem("b", "1", "p", "2", meta={"level": 1})
    assert hash(a) == hash(Problem("b", "1", "p", "2")) and a == Problem("b", "1", "p", "2", meta={"x": 0})


def test_a_shipped_test_split_is_never_served_as_the_train_split(shared, monkeypatch, tmp_path, capsys):
    """GSM8K ships only its test split (data/files/README.md: data/gsm8k/test.jsonl, 1319 rows): training's
    split (train) goes to the hub, and offline it is refused in one line, before any run directory exists."""
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(TandemError, match=r"'gsm8k': split 'train' asked for, .*gsm8k.jsonl\) is its test split"):
        load_benchmark("gsm8k", split="train")
    with pytest.raises(TandemError,
                       match="'aime26': split 'train' asked for.*only copy here .*aime26.jsonl.*test split"):
        load_benchmark("aime26", split="train")  # no hub id known
    assert len(load_benchmark("gsm8k", split="test")) == len(load_benchmark("gsm8k")) == 1319  # asked for knowingly
    assert len(load_benchmark("math_train", split="train")) == 7474 - 4  # a shipped train split serves "train"

    from tandem_rlvr.cli import main

    assert main(["train", "--preset", "tiny", "--dataset", "gsm8k", "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tandem: error: benchmark 'gsm8k'") and "\n" not in err and "--dataset-split test" in err
    assert not (tmp_path / "run").exists()


def test_a_train_split_asked_of_a_shipped_test_set_comes_from_the_hub(shared, monkeypatch):
    import datasets

    calls = []

    def hub(hub_id, config, split):
        calls.append((hub_id, config, split))
        return [{"question": "Tom has 2 apples.", "answer": "so #### 2", "idx": 0}]

    monkeypatch.setattr(datasets, "load_dataset", hub)
    # GSM8K's answer field: the rationale (kept as the solution), then #### and the number
    assert load_benchmark("gsm8k", split="train") == [Problem("gsm8k", "0", "Tom has 2 apples.", "2", "so")]
    assert calls == [("openai/gsm8k", "main", "train")]
