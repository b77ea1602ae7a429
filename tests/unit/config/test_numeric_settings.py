"""Every numeric setting is checked where it is parsed (issue 38, issue 32 item 5): each numeric flag
of every command refuses 0 or negative values (where they mean nothing), NaN, inf and huge values
with one line naming the flag and exit 2, before any work; ``tandem train``'s settings get the same
check from a flag, a config file, the dry-run and the run; ``$TANDEM_THREADS`` too."""

from __future__ import annotations

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.errors import TandemError, check_number

# (command, flag, values it must refuse): NaN and inf for every float flag, and each flag's own edges
FLAGS = [
    (["eval", "solo"], "--n", ["0", "-1"]), (["eval", "solo"], "--limit", ["0"]),
    (["eval", "solo"], "--batch-size", ["0"]), (["eval", "solo"], "--max-tokens", ["0", "-5"]),
    (["eval", "solo"], "--top-k", ["-1"]), (["eval", "solo"], "--top-p", ["0", "1.5", "nan"]),
    (["eval", "solo"], "--temperature", ["-0.1", "nan", "inf"]),
    (["eval", "solo"], "--vllm-gpu-memory-utilization", ["0", "2", "nan"]),
    (["eval", "solo"], "--vllm-kv-cache-gib", ["0", "-1", "inf"]), (["eval", "solo"], "--vllm-max-model-len", ["0"]),
    (["eval", "solo"], "--vllm-tensor-parallel-size", ["0"]), (["eval", "solo"], "--server-timeout", ["0", "inf"]),
    (["eval", "solo"], "--server-retries", ["-1"]), (["eval", "solo"], "--server-concurrency", ["0"]),
    (["eval", "handoff"], "--p", ["nan", "-0.5", "1.5", "inf"]), (["eval", "handoff"], "--K", ["0"]),
    (["generate"], "--max-tokens", ["0"]), (["generate"], "--p", ["nan"]),
    (["bench", "decode"], "--batch", ["0"]), (["bench", "decode"], "--new-tokens", ["0"]),
    (["bench", "decode"], "--repeats", ["0"]), (["bench", "decode"], "--threads", ["0"]),
    (["bench", "decode"], "--median-frac", ["0", "nan"]), (["bench", "decode"], "--sigma", ["-1", "inf"]),
    (["bench", "train"], "--steps", ["1"]), (["bench", "memory"], "--rows", ["0"]),
    (["study", "drift"], "--steps", ["0"]), (["study", "drift"], "--limit", ["0"]), (["study", "drift"], "--n", ["0"]),
    (["study", "elegance"], "--coef", ["nan", "inf", "-1"]), (["study", "elegance"], "--test-size", ["0"]),
    (["study", "elegance"], "--judge-max-tokens", ["0"]),
    (["compare"], "--n-boot", ["1", "100000000"]), (["report"], "--samples-per-run", ["-1"]),
    (["eval", "legibility"], "--batch-tokens", ["0"]), (["eval", "drift"], "--smoothing", ["0", "nan"]),
    (["eval", "drift"], "--top-n", ["0"]), (["eval", "drift"], "--min-count", ["-1"]),
    (["probe", "forced-junior"], "--seed", ["-1"]), (["probe", "forced-junior"], "--limit", ["0"]),
    (["probe", "forced-junior"], "--batch-size", ["0"]), (["grade"], "--workers", ["0"]),
    (["serve", "tiny"], "--port", ["0", "70000"]), (["serve", "tiny"], "--kv-cache-gib", ["nan"]),
]


@pytest.mark.parametrize("command, flag, values", FLAGS, ids=[f"{' '.join(c)} {f}" for c, f, _ in FLAGS])
def test_each_numeric_flag_refuses_its_edges_naming_it(capsys, command, flag, values):
    for value in values:
        assert main([*command, flag, value]) == 2, value
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"argument {flag}: " in err and value.lstrip("-") in err.lower(), err


@pytest.mark.parametrize("flag, value, key", [("--lr", "inf", "lr"), ("--lr", "nan", "lr"), ("--lr", "0", "lr"),
                                              ("--junior-imitation", "inf", "junior_imitation"),
                                              ("--junior-imitation", "nan", "junior_imitation"),
                                              ("--decline-drop", "nan", "decline_drop"), ("--eval-n", "0", "eval_n"),
                                              ("--epochs", "inf", "epochs"), ("--weight-decay", "nan", "weight_decay"),
                                              ("--judge-timeout", "nan", "judge_timeout"),
                                              ("--vllm-kv-cache-gib", "-1", "vllm_kv_cache_gib")])
def test_train_settings_are_refused_alike_by_the_dry_run_the_run_and_a_config_file(capsys, tmp_path, flag, value, key):
    errors = []
    out = tmp_path / "run"
    (tmp_path / "c.yaml").write_text(f"{key}: {value if value not in ('inf', 'nan') else '.' + value}\n")
    for argv in (["train", "--dry-run", flag, value], ["train", "--output-dir", str(out), flag, value],
                 ["train", "--dry-run", "--config", str(tmp_path / "c.yaml")]):
        assert main(argv) == 2
        errors.append(capsys.readouterr().err.strip())
    assert all(len(e.splitlines()) == 1 and e.startswith(f"tandem: error: {key} must be") for e in errors), errors
    assert not out.exists()  # the run refused before it wrote anything


@pytest.mark.parametrize("value, needle", [("abc", "integer"), ("0", "[1, "), ("100000", "[1, "), ("-2", "[1, ")])
def test_tandem_threads_is_checked_before_any_work(capsys, monkeypatch, tmp_path, value, needle):
    monkeypatch.setenv("TANDEM_THREADS", value)
    assert main(["eval", "solo", "--senior", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tandem: error: $TANDEM_THREADS") and needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), "1", None, True])
def test_check_number_refuses_what_a_plain_comparison_lets_through(value):
    # NaN compares false with every bound: `not x < 0` holds for it, so a range test must be positive
    with pytest.raises(TandemError, match=r"^x must be a finite number >= 0, got "):
        check_number(value, "x", 0)


def test_an_empty_output_path_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["eval", "solo", "--senior", "tiny", "--out", ""], ["train", "--preset", "tiny", "--output-dir", ""],
                 ["compare", str(tmp_path), "--out", " "]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "an empty path" in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_bench_decode_refuses_more_new_tokens_than_the_context_holds(capsys, model_dir):
    # conftest's models have max_position_embeddings 512: no prompt leaves room for 100000 new tokens
    assert main(["bench", "decode", "--senior", str(model_dir), "--batch", "2", "--new-tokens", "100000",
                 "--repeats", "1", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--new-tokens 100000" in err and "context of 512 tokens" in err, err
