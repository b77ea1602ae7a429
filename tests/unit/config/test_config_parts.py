"""Settings in frozen parts (issue 34): every key, preset and flag of before builds the same settings,
run directories written before resume, derived values are derived once, and ``config`` imports
nothing above it.

The expected settings come from the inputs themselves (each preset's YAML, each README command's
flags) and from ``tests/data/main_configs``, written by the code before the redesign (its README
says how), never from the code under test.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
from dataclasses import FrozenInstanceError
from importlib import resources
from pathlib import Path

import pytest
import torch
import yaml

from tandem_rlvr import cli
from tandem_rlvr.cli import eval as cli_eval
from tandem_rlvr.config import TrainConfig, load_train_config, preset_names
from tandem_rlvr.errors import TandemError

DATA = Path(__file__).resolve().parents[2] / "data" / "main_configs"
BEFORE = json.loads((DATA / "commands.json").read_text())
SRC = Path(__file__).resolve().parents[3] / "src" / "tandem_rlvr"
# Training settings added after the fixture was written, at the defaults their issue gives them (LoRA,
# issue 31: r = 0 is full fine-tuning, alpha TRL's 32, no dropout, PEFT's all-linear, no merged/ copy).
ADDED_SETTINGS = {"lora_r": 0, "lora_alpha": 32.0, "lora_dropout": 0.0, "lora_targets": ["all-linear"],
                  "save_merged": False, "plugins": [],
                  # a junior pool (issue 36): one junior per GRPO group, best/ by the pool's weighted mean
                  "junior_draw": "group", "best_by_junior": "pool-mean",
                  "trl": {},  # GRPOConfig fields beyond the keys' (issue 47): none by default
                  # rollouts overlapping training (issue 50): off, and TRL's truncated IS weights when on
                  "max_staleness": 0, "importance_correction": "token_truncate", "importance_clip": 3.0}
# README commands added after the fixture (their flags are checked against what they say, below).
ADDED_COMMANDS = [
    ["train", "--preset", "tiny", "--method", "tandem", "--lora-r", "16", "--lora-alpha", "32", "--save-merged", "true",
     "--output-dir", "runs/tiny-lora"],
    ["eval", "solo", "--senior", "runs/tiny-lora/best", "--benchmarks", "tiny", "--split", "test", "--n", "8",
     "--out", "ev/lora"],
    ["eval", "handoff", "--senior", "runs/tiny-tandem/best", "--junior", "tiny,tiny-junior", "--benchmarks", "tiny",
     "--split", "test", "--n", "8", "--out", "ev/handoff-pool"],
    ["train", "--preset", "tiny", "--method", "tandem", "--junior", "tiny:0.5,tiny-junior:0.5", "--best-by-junior",
     "tiny-junior", "--output-dir", "runs/tiny-pool"],  # a junior pool (issue 36)
    ["eval", "handoff", "--server", "http://127.0.0.1:8002", "--junior", "tiny,tiny-junior", "--protocol", "stream",
     "--schedule", "word", "--benchmarks", "tiny", "--split", "test", "--n", "8",
     "--out", "ev/served-pool"],  # served pool
    ["train", "--preset", "tiny", "--engine", "vllm-server", "--server", "http://127.0.0.1:8001",
     "--max-staleness", "1", "--output-dir", "runs/overlap"],  # rollouts overlap training (issue 50)
]


def _as_now(before: dict) -> dict:
    """A training config of the fixture with the settings added since, at their defaults."""
    return {**before, **ADDED_SETTINGS} if "lr" in before else before


def _preset_yaml(name: str) -> dict:
    return yaml.safe_load(resources.files("tandem_rlvr").joinpath("presets", f"{name}.yaml").read_text())


def _same(got, want) -> bool:
    """Equal as YAML means it: ``1.0e-4`` and 0.0001, 3 and 3.0 are one value."""
    if isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(got, (int, float)):
        return float(got) == float(want)
    return got == want


def test_the_fixtures_cover_every_shipped_preset():
    assert sorted(BEFORE["presets"]) == preset_names()


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_builds_the_settings_its_yaml_says_and_the_same_as_before(name):
    got = load_train_config(name).to_dict()
    for key, value in _preset_yaml(name).items():
        if key != "reward_terms":  # written NAME, kept as canonical NAME:COEF
            assert _same(got[key], value), key
    assert got == _as_now(BEFORE["presets"][name])


@pytest.mark.parametrize("name", preset_names())
def test_a_preset_written_in_parts_is_the_same_preset(name, tmp_path):
    """The new spelling: keys grouped under their part (``loss: {lr: ...}``) mean what they mean flat."""
    from tandem_rlvr.config import part_of_key

    where, grouped = part_of_key(), {}
    for key, value in _preset_yaml(name).items():
        if key == "method":
            grouped[key] = value
        else:
            grouped.setdefault(where[key], {})[key] = value
    f = tmp_path / "grouped.yaml"
    f.write_text(yaml.safe_dump(grouped))
    assert load_train_config(None, str(f)).to_dict() == load_train_config(name).to_dict()


def test_a_key_under_the_wrong_part_or_given_twice_is_an_error(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("models:\n  lr: 0.1\n")
    with pytest.raises(TandemError, match="'lr' belongs under 'loss', not 'models'"):
        load_train_config(None, str(f))
    f.write_text("lr: 0.1\nloss:\n  lr: 0.2\n")
    with pytest.raises(TandemError, match="'lr' given twice"):
        load_train_config(None, str(f))


def _flag_values(argv: list[str]) -> dict:
    """``--some-key VALUE`` pairs of a command line, by config key (``some_key``)."""
    pairs = zip(argv, argv[1:], strict=False)
    return {a[2:].replace("-", "_"): v for a, v in pairs if a.startswith("--") and not v.startswith("--")}


def _flag_value(text: str):
    """A flag's text as the value it names (``1e-4`` is a number on the command line; YAML 1.1 reads a string)."""
    value = yaml.safe_load(text)
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def _captured(argv: list[str], monkeypatch, tmp_path) -> dict:
    """The config the CLI builds from ``argv`` (training or evaluation), caught where it is handed on."""
    import tandem_rlvr.eval.sample.sampler as sampler
    import tandem_rlvr.rl.train as rtrain

    seen = []
    monkeypatch.setattr(rtrain, "train", lambda cfg, print_fn=print: seen.append(cfg.to_dict()) or {})
    monkeypatch.setattr(sampler, "evaluate", lambda cfg, out, progress=True, say=None: seen.append(cfg.to_dict()))
    monkeypatch.setattr(cli_eval, "_print_metrics", lambda *a: None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.yaml").write_text(BEFORE["my.yaml"])
    assert cli.main(argv) in (0, None)
    assert len(seen) == 1
    return json.loads(json.dumps(seen[0], default=str))


@pytest.mark.parametrize("row", BEFORE["commands"], ids=lambda r: " ".join(r["argv"])[:70])
def test_every_readme_command_builds_the_settings_its_flags_say_and_the_same_as_before(row, monkeypatch, tmp_path):
    got = _captured(row["argv"], monkeypatch, tmp_path)
    assert got == _as_now(row["config"])
    _assert_flags_say(row["argv"], got)


def _assert_flags_say(argv: list[str], got: dict) -> None:
    if argv[0] == "train":
        for key, text in _flag_values(argv).items():
            if key in got and key not in ("reward_terms",):
                assert _same(got[key], _flag_value(text)), key
        if "--config" in argv:
            assert all(_same(got[k], v) for k, v in yaml.safe_load(BEFORE["my.yaml"]).items())


@pytest.mark.parametrize("argv", ADDED_COMMANDS, ids=lambda a: " ".join(a)[:70])
def test_a_readme_command_added_since_builds_the_settings_its_flags_say(argv, monkeypatch, tmp_path):
    got = _captured(argv, monkeypatch, tmp_path)
    _assert_flags_say(argv, got)
    if argv[0] == "eval":
        flag = dict(zip(argv, argv[1:], strict=False))
        assert (got["server"]["url"] if "--server" in flag else got["senior"], got["benchmarks"], got["n"]) == \
            (flag.get("--server", flag.get("--senior")), ["tiny"], 8)
        assert got["junior"] == flag.get("--junior")  # a pool as written (its spec; parsed where it is sampled)


def test_the_readme_commands_in_the_fixture_are_the_readmes_own():
    """A README command added since the fixture was written would go unchecked: say so."""
    text = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if re.match(r"\s*tandem (train|eval (solo|handoff)) ", line)]
    assert len(lines) == len(BEFORE["commands"]) + len(ADDED_COMMANDS)
    flat = [" ".join(shlex.split(line.split("#")[0])[1:]) for line in lines]
    assert all(" ".join(a) in flat for a in ADDED_COMMANDS)


@pytest.mark.parametrize("name,keys", [
    ("train_tiny", {}),
    ("train_tiny_klreg", {"method": "klreg", "reward_terms": "correct,length:0.2,format", "step_unit": "rollout",
                          "prompts_per_step": 16, "prompts_per_minibatch": 8, "save_every": 2, "eval_every": 1,
                          "judge_parser": "yes-no"}),
    ("train_tiny_judge", {"reward_terms": "correct,judge:0.5", "judge": "http://127.0.0.1:8", "judge_mode": "add",
                          "junior_token_weight": 0.25, "loss_normalizer": "senior_tokens", "schedule": "chunk",
                          "K": 16})])
def test_a_training_run_directory_written_before_resumes(name, keys, tmp_path):
    from tandem_rlvr.rl.run_identity import check_run_dir

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(DATA / f"{name}.json", run / "config.json")
    cfg = load_train_config("tiny", None, {**keys, "output_dir": str(run)})
    # recognised as the same run (its output_dir then was elsewhere; train_tiny_judge recorded p 0.7, which its
    # chunk schedule never reads, and this config has the default p)
    assert check_run_dir(cfg) == 0
    with pytest.raises(TandemError, match="different .*seed"):
        check_run_dir(cfg.with_keys(seed=1))


@pytest.mark.parametrize("mode", ["solo", "handoff"])
def test_an_evaluation_run_directory_written_before_resumes(mode, tmp_path):
    from tandem_rlvr.config import EvalConfig
    from tandem_rlvr.decoding.sampling import SamplingParams
    from tandem_rlvr.eval.sample.sampler import evaluate

    out = tmp_path / "ev"
    out.mkdir()
    shutil.copy(DATA / f"eval_{mode}.json", out / "config.json")
    extra = {"junior": "tiny", "schedule": "word", "K": 4} if mode == "handoff" else {}
    cfg = EvalConfig.from_keys(senior="tiny", mode=mode, benchmarks=("tiny",), split="test", limit=1, n=1,
                               sampling=SamplingParams(max_new_tokens=2), **extra)
    metrics = evaluate(cfg, out, progress=False)
    assert metrics["tiny"]["problems"] == 1
    assert json.loads((out / "config.json").read_text()) == json.loads((DATA / f"eval_{mode}.json").read_text())


def test_parts_are_frozen_and_a_changed_copy_is_checked_again():
    cfg = load_train_config("tiny")
    with pytest.raises(FrozenInstanceError):
        cfg.loss.lr = 1.0
    with pytest.raises(FrozenInstanceError):
        cfg.loss = None
    assert cfg.with_keys(lr=0.5).loss.lr == 0.5 and cfg.loss.lr == 1e-4
    with pytest.raises(TandemError, match="lr must be a finite number > 0"):
        cfg.with_keys(lr=-1.0)


@pytest.mark.parametrize("dtype,master,want", [("auto", "float32", (torch.float32, torch.float32)),
                                               ("bfloat16", "float32", (torch.bfloat16, torch.float32)),
                                               ("bfloat16", "compute", (torch.bfloat16, torch.bfloat16))])
def test_precision_is_derived_by_the_models_part(dtype, master, want):
    """On a CPU senior: auto is fp32; fp32 masters under bf16 compute unless master_dtype is compute. A GPU
    plan's auto is bf16 (the memory plan asks for the GPU it may not have)."""
    cfg = TrainConfig.from_keys(senior_device="cpu", dtype=dtype, master_dtype=master)
    assert cfg.models.precision == ("cpu", *want)
    assert cfg.models.precision is cfg.models.precision  # derived once
    assert TrainConfig.from_keys(dtype="auto").models.dtypes_on("cuda").compute == torch.bfloat16


def test_update_counts_and_the_task_are_derived_by_their_parts():
    # 16 prompts per rollout step in mini-batches of 8: 2 updates per rollout step; 3 rollout steps = 6 updates
    cfg = TrainConfig.from_keys(prompts_per_step=16, prompts_per_minibatch=8, step_unit="rollout", max_steps=3,
                                save_every=1)
    assert (cfg.loop.updates_per_batch, cfg.loop.max_updates, cfg.loop.save_updates) == (2, 6, 2)
    assert cfg.loop.rollout_steps(5) == 3
    paper = TrainConfig.from_keys(grader="paper")
    assert paper.data.run_task.verifier == "math@1:last-box:grader=paper"
    assert paper.data.run_task is paper.data.run_task  # derived once
    with pytest.raises(TandemError, match="--grader paper applies to the math task only"):
        TrainConfig.from_keys(task="gsm8k", grader="paper")  # refused when the config is built, before any work


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, lazy imports included, as absolute ``tandem_rlvr.*`` names."""
    pkg = ".".join(["tandem_rlvr", *path.relative_to(SRC).with_suffix("").parts[:-1]])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = pkg.rsplit(".", node.level - 1)[0] if node.level else ""
            out.add(f"{base}.{node.module}" if node.level and node.module else base or node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_settings_import_nothing_above_them():
    """config -> rl, eval, recipes or cli would be an arrow back up (docs/architecture.md's floors)."""
    files = sorted((SRC / "config").glob("*.py")) if (SRC / "config").is_dir() else [SRC / "config.py"]
    above = ("tandem_rlvr.rl", "tandem_rlvr.eval", "tandem_rlvr.recipes", "tandem_rlvr.cli")
    bad = {f.name: m for f in files for m in _imports(f) if m.startswith(above)}
    assert bad == {}


def test_a_setting_is_one_line_in_one_part():
    """Every key belongs to exactly one part (or is the config's own ``method``) and becomes a flag."""
    from tandem_rlvr.config import PARTS, config_fields

    keys = [f.name for f in config_fields()]
    assert len(keys) == len(set(keys)) == 1 + sum(len(cls.__dataclass_fields__) for cls in PARTS.values())
    text = cli.build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    assert all(f"--{k.replace('_', '-')}" in text for k in keys)
