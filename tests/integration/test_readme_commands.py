"""Every `tandem` command of README.md's Usage block, run as written.

The commands are read from the README itself (so an edited README is what gets tested), run in
README order in one working directory, each through the CLI's ``main(argv)`` in this process (what the
``tandem`` entry point calls, with ``sys.argv`` set to the command: a fresh interpreter per command cost
its imports, ~4 s, each time), with small settings appended where a flag for them exists (later flags win
in argparse; the README's own values stay on the line). Each must exit 0 and leave the files or print the
output the README and the public contract promise. Commands that need vLLM are left to ``pytest -m vllm``;
none here needs the hub or a GPU. The built-in worlds ship built; ``tandem world build`` runs with ``--steps 4``.

Slow (minutes): ``python -m pytest -q -p no:cacheprovider -m slow tests/integration/test_readme_commands.py``.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
TRAIN_QUICK = ["--max-steps", "2", "--eval-every", "1", "--save-every", "1", "--val-size", "8", "--limit", "200",
               "--max-new-tokens", "48"]
# Small settings appended per command (by its first words); a command not listed runs as written.
QUICK = {
    ("train", "--preset"): TRAIN_QUICK,
    ("eval", "solo"): ["--limit", "4", "--max-tokens", "48"],
    ("eval", "handoff"): ["--limit", "4", "--max-tokens", "48"],
    ("bench", "decode"): ["--batch", "4", "--new-tokens", "16", "--repeats", "1"],
    ("bench", "train"): ["--steps", "2"],
    ("study", "drift"): ["--quick", "--seeds", "0"],
    ("study", "pool"): ["--quick", "--seeds", "0"],
    ("world", "build"): ["--steps", "4"],  # the full build is minutes on one core; the shipped world is the real one
}


def usage_commands() -> list[list[str]]:
    """The `tandem ...` commands of the README's Usage code block, as argv lists (continuation
    lines joined, comments dropped, an optional ``[...]`` part left out), vLLM ones excepted."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Usage\n.*?```bash\n(.*?)```", text, re.S).group(1)
    cmds = []
    for line in block.replace("\\\n", " ").splitlines():
        argv = shlex.split(re.sub(r"\[[^\]]*\]", "", line), comments=True)
        if argv[:1] == ["tandem"] and "vllm" not in argv:
            cmds.append(argv[1:])
    return cmds


COMMANDS = usage_commands()


def _id(argv: list[str]) -> str:
    return " ".join(argv)[:60]


def test_the_usage_block_has_the_commands_this_file_checks():
    firsts = {tuple(c[:2]) for c in COMMANDS}
    assert {("generate", "--prompt"), ("train", "--preset"), ("train", "--config"), ("eval", "solo"),
            ("eval", "handoff"), ("bench", "decode"), ("bench", "train"), ("world", "build"),
            ("study", "drift")} <= firsts


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    (d / "my.yaml").write_text("method: grpo\nlr: 0.0001\n")  # the README leaves my.yaml to the user
    return d


def _run(argv: list[str], cwd: Path, capsys, monkeypatch):
    """``tandem ARGV`` (plus its small settings) run in ``cwd`` in this process; what it printed (``.out``,
    ``.err``). The process-wide state a command sets (torch's thread count) is put back after it."""
    from tandem_rlvr.cli import main

    quick = next((q for k, q in QUICK.items() if tuple(argv[: len(k)]) == k), [])
    argv = [("runs/tiny-tandem/best" if a == "DIR" else a) for a in argv] + quick  # DIR: a model directory
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["tandem", *argv])  # what a run records as its command line
    capsys.readouterr()
    threads = torch.get_num_threads()
    try:
        rc = main(argv)
    finally:
        torch.set_num_threads(threads)
    res = capsys.readouterr()
    assert rc == 0, f"tandem {' '.join(argv)}\n{res.err[-3000:]}"
    return res


def _check_eval(out: Path, n: int, problems: int) -> None:
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == problems * n
    assert {"benchmark", "problem_id", "sample_idx", "response", "correct", "senior_share", "tokens"} <= set(rows[0])
    metrics = json.loads((out / "metrics.json").read_text())
    assert {f"pass@{k}" for k in (1, 2, 4, 8) if k <= n} <= set(metrics["macro"])
    assert all({"mean", "se"} <= set(metrics["macro"][f"pass@{k}"]) for k in (1, 2) if k <= n)


def _check_study_reruns_as_a_no_op(argv: list[str], out: Path, monkeypatch) -> None:
    """The README's study again (in process, same settings): it trains and samples nothing and gives the
    same table; other settings on that directory are refused. (The slow tests' one study run is the README's.)"""
    from tandem_rlvr.cli import build_parser
    from tandem_rlvr.errors import TandemError
    from tandem_rlvr.cli.recipes import study_settings
    from tandem_rlvr.eval.sample import sampler
    from tandem_rlvr.recipes import study
    from tandem_rlvr.rl import train as train_mod

    first = json.loads((out / "study.json").read_text())
    assert {"grpo", "tandem-self", "klreg-weak", "base"} <= set(first["table"])
    assert any(k.startswith("tandem-self vs grpo") for k in first["tests"])
    calls = []
    monkeypatch.setattr(train_mod, "train", lambda *x, **k: calls.append("train"))
    monkeypatch.setattr(sampler, "evaluate", lambda *x, **k: calls.append("eval"))
    again = build_parser().parse_args([*argv, *QUICK[("study", "drift")], "--out", str(out)])
    res = study.run_study(again.out, study_settings(again), print_fn=lambda *x: None)
    assert calls == [] and res["table"] == first["table"]
    assert json.loads((out / "settings.json").read_text())["seeds"] == [0]
    other = build_parser().parse_args([*argv, *QUICK[("study", "drift")], "--out", str(out), "--juniors", "self"])
    with pytest.raises(TandemError, match="other settings"):
        study.run_study(other.out, study_settings(other), print_fn=lambda *x: None)


@pytest.mark.parametrize("argv", COMMANDS, ids=_id)
def test_readme_command_runs_as_written(argv, workdir, capsys, monkeypatch):
    res = _run(argv, workdir, capsys, monkeypatch)
    flag = dict(zip(argv, argv[1:], strict=False))
    if argv[0] == "generate":
        assert "senior share:" in res.out and f"schedule={flag['--schedule']}" in res.out
    elif argv[0] == "train" and "--dry-run" in argv:
        cfg, _ = json.JSONDecoder().raw_decode(res.out)  # the resolved config first (a memory plan may follow)
        assert cfg["method"] == "grpo" and cfg["lr"] == 1e-4  # the YAML file's values
    elif argv[0] == "train":
        out = workdir / flag["--output-dir"]
        assert json.loads((out / "summary.json").read_text())["steps"] == 2
        if "--lora-r" in argv:  # a LoRA run saves the adapter (PEFT's format) and, asked, merged weights beside it
            for save in ("final", "best"):
                assert (out / save / "adapter_model.safetensors").is_file()
                assert (out / save / "adapter_config.json").is_file()
                assert (out / save / "merged" / "model.safetensors").is_file() == (flag.get("--save-merged") == "true")
        else:
            assert (out / "final" / "model.safetensors").is_file() and (out / "best" / "config.json").is_file()
        if "," in flag.get("--junior", ""):  # a pool: every rollout's junior recorded, figures per junior, best/ by one
            labels = [part.split(":")[0] for part in flag["--junior"].split(",")]
            drawn = {json.loads(x)["junior"] for x in (out / "rollouts.jsonl").read_text().splitlines()}
            assert drawn <= set(labels)
            log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
            assert all(f"junior/{j}/count" in r for r in log if "reward/mean" in r for j in labels)
            assert json.loads((out / "best" / "best.json").read_text())["by"] == flag["--best-by-junior"]
    elif argv[:2] == ["eval", "regrade"]:
        record = json.loads((workdir / argv[2] / "regrade.json").read_text())
        assert record["grader"] and set(record["benchmarks"]) == {"tiny"}
    elif argv[:2] == ["eval", "replay"]:
        assert "traces agree with the schedule" in res.out
    elif argv[0] == "eval":
        benchmarks = flag["--benchmarks"].split(",")
        per = 4 if benchmarks == ["tiny"] else 4 * len(benchmarks)  # --limit 4 per benchmark
        _check_eval(workdir / flag["--out"], int(flag["--n"]), per)
    elif argv[:2] == ["bench", "decode"]:
        res_json = json.loads(res.out)
        assert {"solo_tok_s", "tandem_tok_s", "naive_tandem_tok_s", "hf_generate_tok_s", "bound"} <= set(res_json)
        assert all(res_json[k] > 0 for k in ("solo_tok_s", "tandem_tok_s", "bound"))
    elif argv[:2] == ["bench", "train"]:
        assert "tandem step / GRPO step:" in res.out
    elif argv[:2] == ["world", "build"]:
        world = json.loads(res.out)
        assert Path(world["senior"], "config.json").is_file() and Path(world["junior"], "config.json").is_file()
    elif argv[:2] == ["world", "ls"]:  # every shipped world listed, with its folder
        shipped = [line.split() for line in res.out.splitlines() if line.startswith("shipped")]
        assert [row[1] for row in shipped] == ["tiny", "tiny-drift", "tiny-code"]
        assert all(Path(row[-1], "world.json").is_file() for row in shipped)
    elif argv[:2] == ["study", "pool"]:
        out = workdir / flag["--out"]
        res = json.loads((out / "study.json").read_text())
        assert res["seeds_done"] == [0] and {"alone-weak", "pool-no-mid", "base"} <= set(res["table"])
        assert "pool-no-mid vs alone-weak: handoff_mid" in res["tests"]
        samples = out / "seed0/eval/pool-no-mid/handoff-mid/samples.jsonl"
        rows = [json.loads(x) for x in samples.read_text().splitlines()]
        assert rows and "junior" not in rows[0]  # handoff to the held-out junior alone: a one-junior run
        assert "," in json.loads((out / "seed0/runs/pool-no-mid/config.json").read_text())["junior"]  # a pool of two
        before = {f: f.stat().st_mtime_ns for f in out.rglob("*") if f.is_file()}
        # a finished study re-run is a no-op: nothing trained, sampled or rewritten
        again = _run(argv, workdir, capsys, monkeypatch)
        assert "is complete" in again.out
        assert {f: f.stat().st_mtime_ns for f in out.rglob("*") if f.is_file()} == before
    elif argv[:2] == ["study", "drift"]:
        out = workdir / flag["--out"]
        assert (out / "study.md").is_file() and json.loads((out / "study.json").read_text())["seeds_done"] == [0]
        _check_study_reruns_as_a_no_op(argv, out, monkeypatch)
    else:
        pytest.fail(f"no check for README command {argv}")
