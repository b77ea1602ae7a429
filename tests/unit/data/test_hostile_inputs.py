"""Hostile inputs of issue 26 (items 5 and 6) through the `tandem` command: each gets one line
`tandem: error: ...` naming it and exit status 2, or, where the input is valid but unusual
(a byte-order mark), the right result. Every case here was a traceback or a silently wrong
result before the fix."""

from __future__ import annotations

import json
import shutil

import pytest

from tandem_rlvr.cli import main

from conftest import make_model


def _one_line_error(capsys, argv, *needles):
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and ": error: " in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


@pytest.fixture()
def problems(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"problem": f"Mia has {i} shells.", "answer": str(i)}) + "\n" for i in range(3)))
    return path


def _eval(model_dir, bench, out, *extra):
    return ["eval", "solo", "--senior", str(model_dir), "--benchmarks", str(bench), "--n", "2", "--max-tokens", "2",
            "--out", str(out), *extra]


# --------------------------------------------------------------------------- item 5: tracebacks
def test_a_training_run_directory_as_senior_names_best_and_final(capsys, tmp_path, model_dir):
    run = tmp_path / "runs" / "x"
    for sub in ("final", "best", "checkpoint-2"):
        shutil.copytree(model_dir, run / sub)
    (run / "config.json").write_text(json.dumps({"method": "tandem", "dtype": "auto", "seed": 0}))  # the run's config
    err = _one_line_error(capsys, ["generate", "--prompt", "x", "--senior", str(run)],
                          "best/", "final/", "checkpoint-2/", f"{run}/best or {run}/final")
    assert "not a model directory" in err


@pytest.mark.parametrize("argv,needle", [
    (["train", "--preset", "tiny", "--seed", "-1", "--dry-run"], "got -1"),
    (["train", "--preset", "tiny", "--seed", str(2**32), "--dry-run"], f"got {2**32}"),
    (["generate", "--prompt", "x", "--seed", "12345678901234567890123"], "12345678901234567890123"),
    (["eval", "solo", "--seed", "-3", "--out", "never-written"], "got -3"),
])
def test_seeds_outside_0_to_2_pow_32_are_refused_naming_the_value(capsys, argv, needle):
    _one_line_error(capsys, argv, "seed", needle)


def test_a_truncated_safetensors_file_is_named_as_corrupt(capsys, tmp_path, model_dir):
    bad = tmp_path / "bad"
    shutil.copytree(model_dir, bad)
    weights = bad / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    _one_line_error(capsys, ["generate", "--prompt", "x", "--senior", str(bad)], str(bad), "truncated")


# --------------------------------------------------------------------------- item 6: silently wrong
def test_a_model_directory_without_tokenizer_names_the_missing_files(capsys, tmp_path, tok):
    d = tmp_path / "notok"
    make_model(len(tok), 0, hidden=32, layers=1).save_pretrained(d)
    _one_line_error(capsys, ["generate", "--prompt", "x", "--senior", str(d)], str(d), "no tokenizer", "tokenizer.json")


def test_a_byte_order_mark_loses_no_problem_in_jsonl_or_json(tmp_path):
    from tandem_rlvr.data.benchmarks import load_benchmark

    rows = [{"problem": "a", "answer": "1"}, {"problem": "b", "answer": "2"}]
    lines = tmp_path / "bom.jsonl"
    lines.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    array = tmp_path / "bom.json"
    array.write_bytes(b"\xef\xbb\xbf" + json.dumps(rows).encode())
    for path in (lines, array):
        assert [(p.problem, p.answer) for p in load_benchmark(str(path))] == [("a", "1"), ("b", "2")]


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_an_infinite_or_nan_temperature_is_refused(capsys, model_dir, value):
    _one_line_error(capsys, ["generate", "--prompt", "x", "--senior", str(model_dir), "--temperature", value],
                    "temperature", value)
    _one_line_error(capsys, ["train", "--preset", "tiny", "--temperature", value, "--dry-run"], "temperature", value)


def test_compare_refuses_fewer_than_two_bootstrap_resamples(capsys, tmp_path, model_dir, problems):
    assert main(_eval(model_dir, problems, tmp_path / "ev")) == 0
    for n in ("0", "1"):
        _one_line_error(capsys, ["compare", f"a={tmp_path / 'ev'}", "--n-boot", n, "--out", str(tmp_path / "c")],
                        "--n-boot", n)
    assert not (tmp_path / "c" / "compare.json").exists()


def test_a_yaml_key_given_twice_is_named(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("lr: 1e-4\nseed: 3\nlr: 2e-4\n")
    _one_line_error(capsys, ["train", "--config", str(cfg), "--dry-run"], str(cfg), "'lr' given twice", "lines 1 and 3")


def test_tandem_data_pointing_nowhere_is_named(capsys, tmp_path, monkeypatch, model_dir):
    from tandem_rlvr.data import benchmarks
    from tandem_rlvr.errors import TandemError

    def offline(hub_id, config, split):  # the hub is unreachable in tests; fail at once, as offline
        raise TandemError(f"could not load hub dataset {hub_id}:{split} (offline)")

    monkeypatch.setattr(benchmarks, "_fetch_hub", offline)
    monkeypatch.setenv("TANDEM_DATA", str(tmp_path / "nowhere"))
    _one_line_error(capsys, _eval(model_dir, "olympiadbench", tmp_path / "ev"), f"$TANDEM_DATA={tmp_path / 'nowhere'}",
                    "is not a folder")
    assert not (tmp_path / "ev").exists()


# --------------------------------------------------------------------------- item 5: a full disk in training
def test_a_full_disk_while_a_checkpoint_is_saved_is_one_line_and_the_rerun_resumes(capsys, tmp_path, monkeypatch, tok,
                                                                                    model_dir, problems):
    """ENOSPC as safetensors reports it (its own error type, not an OSError) while checkpoint-2 is
    written: one line, exit 2; the same command re-run resumes from checkpoint-1 and finishes."""
    import transformers.modeling_utils as mu
    from safetensors import SafetensorError

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"problem": f"Mia has {i} shells.",
                                        "answer": str(i)}) + "\n" for i in range(20)))
    argv = ["train", "--senior", str(model_dir), "--junior", str(model_dir), "--dataset", str(data), "--val-size", "4",
            "--template", "plain", "--group-size", "2", "--prompts-per-step", "2", "--prompts-per-minibatch", "2",
            "--max-prompt-tokens", "64", "--max-new-tokens", "4", "--max-steps", "2", "--eval-every", "0",
            "--save-every", "1", "--output-dir", str(tmp_path / "run")]
    real, saves = mu.safe_save_file, []

    def full_disk(tensors, filename, *a, **k):
        saves.append(filename)
        if "checkpoint-2" in str(filename):
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real(tensors, filename, *a, **k)

    monkeypatch.setattr(mu, "safe_save_file", full_disk)
    _one_line_error(capsys, argv, "No space left on device", "re-run the same command")
    assert (tmp_path / "run" / "checkpoint-1" / "trainer_state.json").is_file()
    assert not (tmp_path / "run" / "summary.json").exists()

    monkeypatch.setattr(mu, "safe_save_file", real)
    assert main(argv) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 2
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()
             if "reward/mean" in json.loads(x)]
    assert steps == [1, 2]  # step 1 was not trained again, step 2 once


# --------------------------------------------------------------------------- issue 32 item 5: round 3
def test_a_responses_file_that_is_not_utf8_is_one_line_naming_it(capsys, tmp_path):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes('{"problem_id": "0", "response": "caf\u00e9 \\\\boxed{1}"}\n'.encode("latin-1"))
    _one_line_error(capsys, ["grade", "--benchmark", "tiny", "--responses", str(bad), "--out", str(tmp_path / "g")],
                    f"{bad}:1: not UTF-8 text (byte 0xe9")
    assert not (tmp_path / "g").exists()


def test_a_training_log_that_is_not_utf8_is_one_line_naming_it(capsys, tmp_path, model_dir, problems):
    assert main(_eval(model_dir, problems, tmp_path / "x" / "solo")) == 0
    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"step": 1, "loss": 0.5}\n{"step": 2, "note": "\xff"}\n')
    _one_line_error(capsys, ["report", f"x={tmp_path / 'x'}", "--train-log", str(log), "--out", str(tmp_path / "rep")],
                    f"{log}:2: not UTF-8 text (byte 0xff")


MIXED = "Caf\u00e9 \u041f\u0440\u0438\u0432\u0435\u0442 \u4f60\u597d \U0001F600 \u200f a\x00b: Mia has 2 shells."


def test_mixed_script_problems_are_evaluated_and_a_lone_surrogate_is_refused(capsys, tmp_path, model_dir):
    bench = tmp_path / "mixed.jsonl"
    # accents, Cyrillic, Chinese, an emoji, a right-to-left mark and a NUL are Unicode: byte-level BPE encodes them;
    # "\ud83d" (half an emoji, a valid JSON escape) is no character: the tokenizers library raised a TypeError on it
    bench.write_text(json.dumps({"problem": MIXED, "answer": "2"}) + "\n"
                     + '{"problem": "half an emoji \\ud83d: Mia has 3 shells.", "answer": "3"}\n')
    assert main(_eval(model_dir, bench, tmp_path / "o")) == 0
    rows = [json.loads(x) for x in (tmp_path / "o" / "samples.jsonl").read_text().splitlines()]
    assert {r["problem_id"] for r in rows} == {"0"} and len(rows) == 2  # the mixed problem, n = 2 samples
    capsys.readouterr()
    only = tmp_path / "surrogate.jsonl"
    only.write_text('{"problem": "\\udc80", "answer": "1"}\n')
    _one_line_error(capsys, _eval(model_dir, only, tmp_path / "o2"), "no valid problems")
    _one_line_error(capsys, ["generate", "--senior", str(model_dir), "--prompt", "bad \udcff byte"],
                    "--prompt holds a lone surrogate U+DCFF")
