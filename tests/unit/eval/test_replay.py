"""``tandem eval replay``: every saved trace's authorship re-derived from (schedule, seed, ids).

Valid runs come from the real sampler (``run_eval`` with our decoder) under several schedules;
doctored copies flip one author (a switch the schedule does not allow; a switch it requires,
removed) and must be reported by file:line with a non-zero exit."""

from __future__ import annotations

import json
import shutil

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.data.benchmarks import Problem
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.schedule import make_schedule
from tandem_rlvr.decoding.tandem import TandemDecoder
from tandem_rlvr.config import EvalConfig
from tandem_rlvr.eval.sample.sampler import run_eval

PROBLEMS = {"alpha": [Problem("alpha", str(i), f"Mia has {i} shells.", str(i)) for i in range(3)],
            "beta": [Problem("beta", str(i), f"Leo has {i} cards.\n\nHe", str(i)) for i in range(2)]}


def _run(tmp_path, tok, pair, model_dir, name, K=3):
    senior, junior = (m.cpu() for m in pair)
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    sched = make_schedule(name, tok, p=0.5, K=K, vocab_size=len(tok))
    dec = TandemDecoder(senior, junior, sched, sp, [tok.eos_token_id], tok.pad_token_id)
    cfg = EvalConfig.from_keys(mode="handoff", schedule=name, protocol="stream", p=0.5, K=K, n=2, sampling=sp,
                               template="plain", seed=1, senior=str(model_dir), junior="j", benchmarks=list(PROBLEMS),
                               batch_size=20)
    out = tmp_path / name
    run_eval(cfg, dec, tok, PROBLEMS, out, progress=False)
    return out


def _rows(run):
    return [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]


def _write(run, rows):
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("name", ["word", "paragraph-roundrobin", "chunk", "token"])
def test_valid_runs_replay_clean_and_a_flipped_author_is_reported(tmp_path, tok, pair, model_dir, capsys, name):
    run = _run(tmp_path, tok, pair, model_dir, name)
    assert main(["eval", "replay", str(run), "--out", str(tmp_path / "rep")]) == 0
    assert "all 10 traces agree with the schedule" in capsys.readouterr().out
    res = json.loads((tmp_path / "rep" / "replay.json").read_text())
    assert (res["samples"], res["invalid"], res["benchmarks"]["beta"]["samples"]) == (10, 0, 4)

    rows = _rows(run)
    bad = next(i for i, r in enumerate(rows) if r["benchmark"] == "beta" and len(r["senior_mask"]) >= 4)
    m = rows[bad]["senior_mask"]
    t = len(m) - 1
    m[t] = 1 - m[t]  # the last token's author flipped
    doctored = tmp_path / "doctored"
    shutil.copytree(run, doctored)
    _write(doctored, rows)
    assert main(["eval", "replay", str(doctored)]) == 2
    cap = capsys.readouterr()
    assert f"samples.jsonl:{bad + 1}: " in cap.out and f"at token {t}" in cap.out
    want = "switch not allowed" if m[t] != m[t - 1] else "missing switch"
    assert want in cap.out
    assert "tandem: error: 1 of 10 traces are invalid (beta: 1)" in cap.err


def test_doctored_switch_inside_a_chunk_and_a_removed_switch_are_both_named(tmp_path, tok, pair, model_dir, capsys):
    """chunk, K = 3: authors are senior at 0-2, junior at 3-5, ... whatever the tokens; a switch at
    token 1 is not allowed, and keeping the senior at token 3 removes a required switch."""
    run = _run(tmp_path, tok, pair, model_dir, "chunk")
    rows = _rows(run)
    long = [i for i, r in enumerate(rows) if len(r["senior_mask"]) >= 5][:2]
    assert len(long) == 2
    rows[long[0]]["senior_mask"][1] = 0
    rows[long[1]]["senior_mask"][3] = 1
    _write(run, rows)
    assert main(["eval", "replay", str(run)]) == 2
    out = capsys.readouterr().out
    assert f"samples.jsonl:{long[0] + 1}: switch not allowed at token 1 (recorded junior, schedule says senior)" in out
    assert f"samples.jsonl:{long[1] + 1}: missing switch at token 3 (recorded senior, schedule says junior)" in out


def test_replay_refuses_what_it_cannot_check(tmp_path, tok, pair, model_dir, capsys):
    run = _run(tmp_path, tok, pair, model_dir, "word-atomic")
    assert main(["eval", "replay", str(run)]) == 2
    assert "word-atomic" in capsys.readouterr().err
    run = _run(tmp_path, tok, pair, model_dir, "word")
    rows = _rows(run)
    del rows[2]["seed"]
    _write(run, rows)
    assert main(["eval", "replay", str(run)]) == 2
    assert "samples.jsonl:3: the row records no seed" in capsys.readouterr().err
    assert main(["eval", "replay", str(tmp_path / "nope")]) == 2
