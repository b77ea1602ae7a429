"""The paper's evaluation sets: the shipped ``amc23_25`` benchmark and ``tandem compare --macro paper``.

The macro runs are written by hand (2 samples per problem) and their expected figures worked
out in the comments, so the test does not lean on the code it checks.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.data.benchmarks import PAPER_MACRO_SETS, load_benchmark


def test_amc23_25_ships_the_papers_121_problems(monkeypatch):
    monkeypatch.delenv("TANDEM_DATA", raising=False)  # the packaged file only
    problems = load_benchmark("amc23_25")
    assert len(problems) == 121 and len({p.problem_id for p in problems}) == 121
    # AMC 2023 (40) + AMC12 2024 A and B (41) + AMC12 2025 (40), per the data README
    assert Counter(p.problem_id[:5] for p in problems) == {"amc23": 40, "amc24": 41, "amc25": 40}
    assert all(p.benchmark == "amc23_25" and p.problem.strip() and p.answer.strip() for p in problems)
    assert problems[0].answer == "27" and all(not re.fullmatch(r"\(?[A-E]\)?", p.answer) for p in problems)
    assert PAPER_MACRO_SETS == ("aime24", "aime25", "aime26", "amc23_25")


# (benchmark, problem_id, correct verdicts of its 2 samples)
PROBLEMS = [
    ("aime24", "0", [1, 1]), ("aime24", "1", [0, 0]),  # pass@1 0.5; pass@2 0.5
    ("aime25", "0", [1, 0]),  # pass@1 0.5; pass@2 1 - C(1,2)/C(2,2) = 1
    ("aime26", "0", [0, 0]),  # 0; 0
    ("amc23_25", "amc23-00", [1, 1]), ("amc23_25", "amc24-12A-01", [0, 1]),  # pass@1 0.75; pass@2 1
    ("minerva", "0", [1, 1]),  # 1; 1 (in our macro, not the paper's)
]
# paper macro pass@1 = (0.5 + 0.5 + 0 + 0.75) / 4 = 0.4375, pass@2 = (0.5 + 1 + 0 + 1) / 4 = 0.625
# our macro pass@1 over the five sets = (0.5 + 0.5 + 0 + 0.75 + 1) / 5 = 0.55
# pooled AIME run (benchmark "aime", ids "aime24/0", ...): aime pass@1 = (1 + 0 + 0.5 + 0) / 4 = 0.375,
#   our macro = (0.375 + 0.75 + 1) / 3 = 0.708333..., the paper's still 0.4375 (it splits AIME by year)


def _run(path, pooled=False, drop=()):
    path.mkdir(parents=True)
    rows = []
    for b, pid, verdicts in PROBLEMS:
        if b in drop:
            continue
        if pooled and b.startswith("aime"):
            b, pid = "aime", f"{b}/{pid}"
        rows += [{"benchmark": b, "problem_id": pid, "sample_idx": i, "response": "", "correct": bool(v),
                  "token_ids": [1], "senior_mask": [1], "senior_share": 1.0} for i, v in enumerate(verdicts)]
    config = {"schedule": {"name": "senior"}, "benchmarks": sorted({r["benchmark"] for r in rows}), "n": 2,
              "ks": [1, 2], "models": {"senior": "hand-written"}}
    (path / "config.json").write_text(json.dumps(config))
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("pooled,ours", [(False, 0.55), (True, 0.375 / 3 + 0.75 / 3 + 1 / 3)])
def test_paper_macro_weighs_the_four_sets_equally(tmp_path, capsys, pooled, ours):
    _run(tmp_path / "grpo" / "solo", pooled)
    assert main(["compare", str(tmp_path / "grpo"), "--macro", "paper", "--n-boot", "50",
                 "--out", str(tmp_path / "cmp")]) == 0
    m = json.loads((tmp_path / "cmp" / "compare.json").read_text())["solo"]["grpo"]
    assert m["macro_paper"]["pass@1"]["mean"] == pytest.approx(0.4375)
    assert m["macro_paper"]["pass@2"]["mean"] == pytest.approx(0.625)
    assert m["macro_paper"]["sets"] == list(PAPER_MACRO_SETS) and m["macro_paper"]["problems"] == 6
    assert m["macro"]["pass@1"]["mean"] == pytest.approx(ours)  # ours is still there, unchanged
    out = capsys.readouterr().out
    assert "the paper's macro" in out and "0.438" in out


def test_paper_macro_is_only_computed_when_asked_and_needs_all_four_sets(tmp_path, capsys):
    _run(tmp_path / "a" / "solo")
    assert main(["compare", str(tmp_path / "a"), "--n-boot", "50", "--out", str(tmp_path / "c1")]) == 0
    assert "macro_paper" not in json.loads((tmp_path / "c1" / "compare.json").read_text())["solo"]["a"]
    _run(tmp_path / "b" / "solo", drop=("aime26",))
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "b"), "--macro", "paper", "--n-boot", "50", "--out",
                 str(tmp_path / "c2")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tandem: error:") and "none of aime26" in err[0]
    assert not (tmp_path / "c2" / "compare.json").exists()
