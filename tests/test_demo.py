"""`tandem demo --quick` runs the whole pipeline end to end and writes its outputs."""

import json
import subprocess
import sys

import pytest


@pytest.mark.parametrize("world", [None, "tiny"])
def test_quick_demo_writes_curves_summary_and_eval_dirs(tmp_path, monkeypatch, world):
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "demo"
    res = subprocess.run([sys.executable, "-m", "tandem_rlvr.cli", "demo", "--quick", "--out", str(out)]
                         + (["--world", world] if world else []), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    drift = world is None  # the default world is the drift world, with its weak junior
    assert summary["world_name"] == ("tiny-drift" if drift else "tiny")
    assert set(summary["results"]) == {"base", "grpo", "tandem", "klreg"} | ({"junior"} if drift else set())
    assert summary["junior"].endswith("junior" if drift else "senior")
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
    tandem_log = [json.loads(x) for x in (out / "runs" / "tandem" / "log.jsonl").read_text().splitlines()]
    shares = [r["senior/token_share"] for r in tandem_log if "senior/token_share" in r]
    assert all(0.0 < s < 1.0 for s in shares)  # tandem rollouts really mix both authors


def test_demo_unknown_world_is_a_one_line_error(tmp_path):
    res = subprocess.run([sys.executable, "-m", "tandem_rlvr.cli", "demo", "--world", "huge", "--out", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "huge" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()
