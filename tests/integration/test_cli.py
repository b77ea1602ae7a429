"""Bad input through the `tandem` command: one line naming it, exit status 2, nothing written."""

import json

import pytest

from tandem_rlvr.cli import main

from conftest import make_model, make_tokenizer


@pytest.fixture(scope="module")
def other_tok_dir(tmp_path_factory):
    t = make_tokenizer(280)
    d = tmp_path_factory.mktemp("o") / "other"
    make_model(len(t), 1, hidden=32, layers=1).save_pretrained(d)
    t.save_pretrained(d)
    return d


def _err(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    return rc, err


def _one_line_error(capsys, argv, *needles):
    rc, err = _err(capsys, argv)
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("tandem") and ": error: " in err, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, err
    return err


def test_unknown_model_path(capsys, tmp_path):
    _one_line_error(capsys, ["generate", "--prompt", "x", "--senior", str(tmp_path / "nope")], "nope")


def test_mismatched_tokenizers_name_both(capsys, model_dir, other_tok_dir):
    _one_line_error(capsys, ["generate", "--prompt", "x", "--senior", str(model_dir), "--junior", str(other_tok_dir)],
                    "do not share one tokenizer", str(model_dir), str(other_tok_dir))


@pytest.mark.parametrize("flags,needle",
                         [(["--max-tokens", "0"], "argument --max-tokens"), (["--p", "1.5"], "argument --p:"),
                          (["--K", "0"], "argument --K:"), (["--temperature", "-1"], "temperature")])
def test_bad_sampling_and_schedule_flags(capsys, model_dir, flags, needle):
    _one_line_error(capsys, ["generate", "--prompt", "x", "--senior", str(model_dir), *flags], needle)


def test_prompt_longer_than_context(capsys, model_dir):
    _one_line_error(capsys, ["generate", "--prompt", "Mia has 7 shells. " * 200, "--senior", str(model_dir),
                             "--schedule", "senior"], "does not fit the model context")


def test_empty_dataset_and_malformed_row_leave_no_output(capsys, caplog, model_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = tmp_path / "ev"
    _one_line_error(capsys, ["eval", "solo", "--senior", str(model_dir), "--benchmarks", str(empty), "--out", str(out)],
                    "empty.jsonl")
    assert not out.exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "a", "answer": "1"}\n{"problem": \n')
    rc = main(["eval", "solo", "--senior", str(model_dir), "--benchmarks", str(bad), "--n", "1", "--max-tokens", "4",
               "--out", str(out)])
    assert rc == 0 and "bad.jsonl:2" in caplog.text  # the malformed row is reported by file and line, then skipped
    assert len(open(out / "samples.jsonl").read().splitlines()) == 1


def test_unknown_command_flag_and_train_key(capsys, tmp_path):
    _one_line_error(capsys, ["bogus"], "bogus")
    _one_line_error(capsys, ["train", "--method", "ppo"], "ppo")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("lrr: 1\n")
    _one_line_error(capsys, ["train", "--config", str(cfg), "--dry-run"], "'lrr'", "did you mean 'lr'")


def test_eval_resume_refuses_a_different_config(capsys, model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"problem": f"p{i}", "answer": str(i)}) + "\n" for i in range(3)))
    out = tmp_path / "ev"
    base = ["eval", "solo", "--senior", str(model_dir), "--benchmarks", str(data), "--max-tokens", "4", "--out",
            str(out)]
    assert main(base + ["--n", "2"]) == 0
    before = (out / "samples.jsonl").read_text()
    _one_line_error(capsys, base + ["--n", "3"], "config.json", "different n")
    assert (out / "samples.jsonl").read_text() == before


def test_generate_prints_both_authors_and_the_senior_share(capsys, model_dir, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich colours the authors even into a captured stream
    rc = main(["generate", "--prompt", "Mia has 7 shells.", "--senior", str(model_dir), "--max-tokens", "12",
               "--schedule", "token", "--seed", "3"])
    legend, response, summary = capsys.readouterr().out.splitlines()[:3]
    assert rc == 0 and "schedule=token" in legend
    senior, junior = "\x1b[1;36m", "\x1b[35m"  # bold cyan, magenta
    assert senior in response and junior in response  # the response itself shows both authors
    share = float(summary.split("senior share:")[1].split()[0])
    assert 0 < share < 1
    monkeypatch.delenv("FORCE_COLOR")
    assert main(["generate", "--prompt", "Mia has 7 shells.", "--senior", str(model_dir), "--max-tokens", "12",
                 "--schedule", "token", "--seed", "3", "--no-color"]) == 0
    assert "\x1b[" not in capsys.readouterr().out


def test_bench_decode_json_has_the_contract_keys(capsys, model_dir):
    rc = main(["bench", "decode", "--json", "--senior", str(model_dir), "--batch", "2", "--new-tokens", "4",
               "--repeats", "1"])
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0
    for key in ("solo_tok_s", "tandem_tok_s", "naive_tandem_tok_s", "hf_generate_tok_s", "bound"):
        assert res[key] > 0
    assert 0 < res["bound"] < 1


def test_legibility_of_a_run_sampled_from_a_local_file_needs_no_benchmarks_flag(model_dir, tmp_path, monkeypatch):
    data = tmp_path / "probs.jsonl"
    data.write_text('{"problem": "Mia has 7 shells.", "answer": "7"}\n{"problem": "Tom has 3.", "answer": "3"}\n')
    monkeypatch.chdir(tmp_path)  # a relative path, recorded as an absolute one
    assert main(["eval", "solo", "--senior", str(model_dir), "--benchmarks", "probs.jsonl", "--n", "2",
                 "--max-tokens", "6", "--template", "plain", "--out", "ev"]) == 0
    assert json.loads((tmp_path / "ev" / "sources.json").read_text())["benchmarks"] == [str(data)]
    monkeypatch.chdir(tmp_path.parent)  # scored from elsewhere: the recorded path still resolves
    assert main(["eval", "legibility", "--samples", str(tmp_path / "ev"), "--junior", str(model_dir),
                 "--out", str(tmp_path / "leg")]) == 0
    assert json.loads((tmp_path / "leg" / "legibility.json").read_text())["summary"]["ce"]


_OFFLINE_HUB = """
import logging, sys, warnings
import datasets

def offline(*args, **kwargs):  # what an unreachable hub does: client warnings per retry, then an error
    for attempt in range(3):
        logging.getLogger("huggingface_hub.utils._http").warning(
            "'[Errno -2] Name or service not known' thrown while requesting HEAD https://huggingface.co/x")
    warnings.warn("the hub is unreachable")
    raise ConnectionError("Couldn't reach 'math-ai/olympiadbench' on the Hub (LocalEntryNotFoundError)")

datasets.load_dataset = offline
from tandem_rlvr.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_unfindable_benchmark_stderr_is_exactly_one_line(tmp_path):
    """A benchmark in neither the package, $TANDEM_DATA nor the (unreachable) hub: the hub clients'
    retry warnings are not shown; stderr is the one error line and nothing else."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TANDEM_DATA"}
    res = subprocess.run([sys.executable, "-c", _OFFLINE_HUB, "eval", "solo", "--senior", "tiny", "--benchmarks",
                          "olympiadbench", "--out", str(tmp_path / "ev")], capture_output=True, text=True,
                         timeout=120, env=dict(env, TANDEM_THREADS="1"))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("tandem: error: benchmark 'olympiadbench'"), res.stderr
    assert "hub is unreachable" in res.stderr and not (tmp_path / "ev").exists()
