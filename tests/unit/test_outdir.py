"""Run directories through the `tandem` command: resume loses nothing, one writer at a time,
paths work from anywhere, bad rows and bad --out paths are one-line errors (issue 13)."""

import errno
import json
import os
import socket

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.errors import TandemError


N = 4


@pytest.fixture
def data(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text("".join(json.dumps({"problem": f"Mia has {i} shells.", "answer": str(i)}) + "\n" for i in range(5)))
    return f


def _solo(model_dir, data, out, *extra):
    return ["eval", "solo", "--senior", str(model_dir), "--benchmarks", str(data), "--n", str(N), "--max-tokens", "6",
            "--batch-size", "8", "--temperature", "1.0", "--out", str(out), *extra]


def _one_line_error(capsys, argv, *needles):
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("tandem"), err
    assert ": error: " in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


def _rows(out):
    return [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]


def test_torn_last_line_is_regenerated_and_every_sample_is_kept(model_dir, data, tmp_path):
    out = tmp_path / "ev"
    assert main(_solo(model_dir, data, out)) == 0
    full = (out / "samples.jsonl").read_bytes()
    assert len(_rows(out)) == 5 * N
    (out / "samples.jsonl").write_bytes(full[: len(full) - 40])  # a full disk tore the last row
    assert main(_solo(model_dir, data, out)) == 0
    assert sorted(map(json.dumps, _rows(out))) == sorted(json.dumps(json.loads(x)) for x in full.decode().splitlines())
    metrics = json.loads((out / "metrics.json").read_text())
    assert "pass@4" in metrics["macro"]  # every problem has its 4 samples again


def test_a_problem_missing_a_sample_is_regenerated_not_reported_over_fewer(model_dir, data, tmp_path, capsys):
    out = tmp_path / "ev"
    assert main(_solo(model_dir, data, out)) == 0
    rows = _rows(out)
    kept = [r for r in rows if not (r["problem_id"] == rows[0]["problem_id"] and r["sample_idx"] == 3)]
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    # a reader of the incomplete run says so instead of dropping pass@4
    _one_line_error(capsys, ["compare", str(out), "--out", str(tmp_path / "cmp")], "fewer than the n=4", "has 3")
    assert main(_solo(model_dir, data, out)) == 0
    assert len(_rows(out)) == 5 * N and sorted(map(json.dumps, _rows(out))) == sorted(map(json.dumps, rows))


def test_a_second_writer_is_refused_naming_the_holder_and_a_stale_lock_is_not(model_dir, data, tmp_path, capsys):
    from tandem_rlvr.outdir import RunLock

    out = tmp_path / "ev"
    out.mkdir()
    with RunLock(out):
        _one_line_error(capsys, _solo(model_dir, data, out), str(out),
                        f"pid {os.getpid()} on host {socket.gethostname()}")
    assert not (out / "samples.jsonl").exists()
    # a lock file left by a killed process (its flock died with it) does not block the resume
    (out / ".lock").write_text("pid 999999 on host elsewhere\n")
    assert main(_solo(model_dir, data, out)) == 0
    assert len(_rows(out)) == 5 * N  # each sample once


def test_resume_does_not_depend_on_path_spelling_or_working_directory(model_dir, data, tmp_path, monkeypatch, capsys):
    import shutil

    work = tmp_path / "work"
    shutil.copytree(model_dir, work / "m")
    monkeypatch.chdir(work)
    assert main(_solo("m", data, "runs/x")) == 0
    before = (work / "runs/x/samples.jsonl").read_bytes()
    for spelling in ("./runs/x", "runs/x/", str(work / "runs" / "x")):
        assert main(_solo("m", data, spelling)) == 0, capsys.readouterr().err
    assert (work / "runs/x/samples.jsonl").read_bytes() == before
    assert main(["compare", "runs/x", "--n-boot", "20", "--out", "cmp"]) == 0
    # stored model and run paths are absolute: legibility and report work from another directory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["eval", "legibility", "--samples", str(work / "runs/x"), "--junior", str(model_dir),
                 "--out", "leg"]) == 0, capsys.readouterr().err
    assert main(["report", str(work / "runs/x"), "--out", "rep"]) == 0, capsys.readouterr().err
    assert main(["report", "--compare", str(work / "cmp"), "--out", "rep2"]) == 0, capsys.readouterr().err


def test_a_failed_start_leaves_nothing_and_the_corrected_run_starts(model_dir, tmp_path, capsys):
    bad = tmp_path / "long.jsonl"
    bad.write_text(json.dumps({"problem": "Mia has 7 shells. " * 300, "answer": "7"}) + "\n")
    out = tmp_path / "ev"
    _one_line_error(capsys, _solo(model_dir, bad, out), "does not fit")
    assert not out.exists()
    bad.write_text(json.dumps({"problem": "Mia has 7 shells.", "answer": "7"}) + "\n")
    assert main(_solo(model_dir, bad, out)) == 0 and len(_rows(out)) == N


def test_sample_rows_with_wrong_types_are_errors_naming_file_and_line(model_dir, data, tmp_path, capsys):
    out = tmp_path / "ev"
    assert main(_solo(model_dir, data, out)) == 0
    rows = _rows(out)
    rows[2]["correct"] = "false"  # a hand edit: a non-empty string would count as correct
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    where = f"{out / 'samples.jsonl'}:3"
    _one_line_error(capsys, ["compare", str(out), "--out", str(tmp_path / "cmp")], where, "correct must be true/false")
    _one_line_error(capsys, _solo(model_dir, data, out), where, "correct")
    rows[2]["correct"], rows[2]["sample_idx"] = False, "1"
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _one_line_error(capsys, ["compare", str(out), "--out", str(tmp_path / "cmp")], where,
                    "sample_idx must be an integer")


@pytest.mark.parametrize("flags,needle",
                         [(["--junior", "x"], "--junior"), (["--junior-device", "cpu"], "--junior-device"),
                          (["--batch-size", "0"], "argument --batch-size"), (["--limit", "0"], "argument --limit")])
def test_flags_that_make_no_sense_are_errors(model_dir, data, tmp_path, capsys, flags, needle):
    out = tmp_path / "ev"
    _one_line_error(capsys, _solo(model_dir, data, out, *flags), needle)
    assert not out.exists()


def test_generate_and_handoff_refuse_a_junior_they_would_ignore(model_dir, data, tmp_path, capsys):
    _one_line_error(capsys, ["generate", "--prompt", "x", "--senior", str(model_dir), "--schedule", "senior",
                             "--junior", str(model_dir)], "--junior")
    hand = ["handoff" if a == "solo" else a for a in _solo(model_dir, data, tmp_path / "ev")]
    _one_line_error(capsys, hand + ["--schedule", "senior", "--junior", str(model_dir)], "eval solo")
    assert not (tmp_path / "ev").exists()


def _readonly(monkeypatch, root):
    """Make file creation under ``root`` fail as on a read-only mount (we run as root, so chmod can't)."""
    real_open, real_mkstemp = os.open, __import__("tempfile").mkstemp

    def ro_open(path, *a, **k):
        if str(path).startswith(str(root)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *a, **k)

    def ro_mkstemp(*a, dir=None, **k):
        if dir is not None and str(dir).startswith(str(root)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))
        return real_mkstemp(*a, dir=dir, **k)

    monkeypatch.setattr(os, "open", ro_open)
    monkeypatch.setattr("tempfile.mkstemp", ro_mkstemp)


def _out_commands(model_dir, data, run, out):
    return {"eval": _solo(model_dir, data, out), "train": ["train", "--preset", "tiny", "--output-dir", str(out)],
            "compare": ["compare", str(run), "--out", str(out)], "report": ["report", str(run), "--out", str(out)]}


@pytest.mark.parametrize("command", ["eval", "train", "compare", "report"])
def test_bad_out_paths_are_one_line_errors_naming_path_and_reason(model_dir, data, tmp_path, capsys, monkeypatch,
                                                                  command):
    run = tmp_path / "run"
    assert main(_solo(model_dir, data, run)) == 0
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing")
    readonly = tmp_path / "ro"
    readonly.mkdir()
    for out, reason in ((a_file, "not a directory"), (dangling, "does not exist"), (readonly, "Read-only file system")):
        argv = _out_commands(model_dir, data, run, out)[command]
        if out is readonly:
            _readonly(monkeypatch, readonly)
        _one_line_error(capsys, argv, str(out), reason)
    assert a_file.read_text() == "keep me" and not (tmp_path / "missing").exists() and not any(readonly.iterdir())


def test_a_full_disk_during_eval_is_one_line_and_the_rerun_completes(model_dir, data, tmp_path, capsys, monkeypatch):
    from tandem_rlvr.eval.sample import sampler

    out = tmp_path / "ev"
    assert main(_solo(model_dir, data, tmp_path / "ref")) == 0
    real = sampler.append_rows
    calls = []

    def full_after_one(f, rows):
        calls.append(1)
        if len(calls) == 1:
            return real(f, rows)
        text = "".join(json.dumps(r) + "\n" for r in rows)
        f.write(text[: len(text) // 2])  # half a write reached the disk
        f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(sampler, "append_rows", full_after_one)
    _one_line_error(capsys, _solo(model_dir, data, out), str(out / "samples.jsonl"), "No space left on device")
    assert not (out / "metrics.json").exists()
    monkeypatch.setattr(sampler, "append_rows", real)
    assert main(_solo(model_dir, data, out)) == 0
    assert sorted(map(json.dumps, _rows(out))) == sorted(map(json.dumps, _rows(tmp_path / "ref")))


def test_one_config_check_names_the_differing_keys_and_fills_old_defaults(tmp_path):
    from tandem_rlvr.outdir import config_diff, refuse_other_config

    assert config_diff({"a": 1, "b": 2, "out": "x"}, {"a": 1, "b": 3, "c": 0, "out": "y"},
                       ignore=("out",)) == ["b", "c"]
    path = tmp_path / "config.json"
    assert refuse_other_config(path, {"a": 1}, "use another --out") is False  # no run yet
    path.write_text(json.dumps({"a": 1}))
    assert refuse_other_config(path, {"a": 1, "engine": "hf"}, "hint", defaults={"engine": "hf"}) is True
    with pytest.raises(TandemError, match=r"existing run has a different a; use another --out"):
        refuse_other_config(path, {"a": 2}, "use another --out")
