"""Plug-ins from outside the package reach every process of a run (``tandem_rlvr.plugins``).

A dummy distribution is "installed" in a temporary directory (a package and its ``.dist-info`` with an
``entry_points.txt``, found through ``PYTHONPATH`` as pip's would be in site-packages): through the
entry-point group ``tandem_rlvr.plugins`` it registers the schedule ``junior-first-2`` (the one of
``contrib_plugin``). A second module, named only by the run's ``plugins`` setting, registers the
reward term ``plug-even``. Each module leaves a mark per process (its pid and torchrun ``RANK``), so
the tests see which processes imported it. Before, neither name was known in a fresh process: the
parser refused the schedule and the config the term.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parents[1] / "src"

SCHEDULE_PLUGIN = """
import os
from pathlib import Path

from contrib_plugin import JuniorFirstTwo  # the contributor-path test's schedule: junior for tokens 0 and 1

from tandem_rlvr.decoding.schedule import ScheduleKind, register_schedule

Path(os.environ["PLUG_MARKS"], f"schedule.{os.getpid()}.{os.environ.get('RANK', 'none')}").touch()
register_schedule(ScheduleKind("junior-first-2", build=lambda tok, p, K, V: JuniorFirstTwo(), draws_coins=False))
"""

TERM_PLUGIN = """
import os
from pathlib import Path

from tandem_rlvr.rewards.terms import TERMS, TermKind

Path(os.environ["PLUG_MARKS"], f"term.{os.getpid()}.{os.environ.get('RANK', 'none')}").touch()


def even(prompts, completions, completion_ids=None, **kwargs):
    return [float(len(ids) % 2 == 0) for ids in completion_ids]


TERMS["plug-even"] = TermKind(0.5, lambda ctx: even, lambda cfg: "plug-in even-length bonus")
"""


def install(tmp_path: Path) -> dict:
    """The dummy distribution (entry point) and the module named by the setting, in ``tmp_path/site``;
    the environment a child process needs to find them."""
    site, marks = tmp_path / "site", tmp_path / "marks"
    (site / "plugdemo").mkdir(parents=True)
    marks.mkdir()
    (site / "plugdemo" / "__init__.py").write_text(textwrap.dedent(SCHEDULE_PLUGIN))
    (site / "plugterm.py").write_text(textwrap.dedent(TERM_PLUGIN))
    info = site / "plugdemo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugdemo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tandem_rlvr.plugins]\nplugdemo = plugdemo\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TANDEM_PLUGINS", "RANK")}
    return {**env, "PYTHONPATH": os.pathsep.join([str(SRC), str(site), str(TESTS)]), "PLUG_MARKS": str(marks),
            "TANDEM_THREADS": "1"}


def marks(env: dict) -> list[str]:
    """``KIND.RANK`` of every mark left (one per process that imported a module)."""
    return sorted(f"{kind}.{rank}" for kind, _, rank in (p.name.split(".") for p in Path(env["PLUG_MARKS"]).iterdir()))


def tandem(env, *argv):
    return subprocess.run([sys.executable, "-m", "tandem_rlvr.cli", *argv], env=env, capture_output=True, text=True)


def python(env, code: str) -> str:
    """stdout of ``python -c code`` in ``env``; its stderr's tail if it fails."""
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_an_installed_plugin_and_a_named_one_are_seen_by_a_fresh_command(tmp_path):
    env = install(tmp_path)
    res = tandem(env, "train", "--preset", "tiny", "--schedule", "junior-first-2", "--plugins", "plugterm",
                 "--reward-terms", "correct,plug-even", "--output-dir", str(tmp_path / "run"), "--dry-run")
    assert res.returncode == 0, res.stderr[-2000:]
    cfg = json.loads(res.stdout[: res.stdout.index("\n}\n") + 2])
    assert cfg["schedule"] == "junior-first-2" and cfg["plugins"] == ["plugterm"]
    assert cfg["reward_terms"] == ["correct:1", "plug-even:0.5"]
    assert marks(env) == ["schedule.none", "term.none"]  # one process, each module imported once


def test_without_the_plugin_the_names_are_unknown(tmp_path):
    env = install(tmp_path)
    bare = {**env, "PYTHONPATH": str(SRC)}
    res = tandem(bare, "train", "--preset", "tiny", "--schedule", "junior-first-2", "--dry-run")
    assert res.returncode == 2 and "invalid choice: 'junior-first-2'" in res.stderr
    res = tandem(env, "train", "--preset", "tiny", "--reward-terms", "correct,plug-even", "--dry-run")
    assert res.returncode == 2 and "unknown reward term 'plug-even'" in res.stderr


def test_a_plugin_that_fails_to_import_is_one_line(tmp_path):
    env = install(tmp_path)
    res = tandem(env, "train", "--preset", "tiny", "--plugins", "no_such_plugin_mod", "--dry-run")
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("tandem: error: plug-in module 'no_such_plugin_mod' failed to load: "
                                 "ModuleNotFoundError")


def test_the_setting_reaches_child_processes_through_the_environment(tmp_path):
    """A config naming a module exports it in $TANDEM_PLUGINS, which a child's load_plugins reads (what
    vLLM's engine processes and `tandem serve`'s server do through the vllm.general_plugins hook)."""
    env = install(tmp_path)
    code = ("import os, subprocess, sys\n"
            "from tandem_rlvr.config import TrainConfig\n"
            "cfg = TrainConfig.from_keys(plugins='plugterm', reward_terms=['correct', 'plug-even'])\n"
            "assert os.environ['TANDEM_PLUGINS'] == 'plugterm', os.environ.get('TANDEM_PLUGINS')\n"
            "child = 'from tandem_rlvr.plugins import load_plugins; print(load_plugins())'\n"
            "print(subprocess.run([sys.executable, '-c', child], capture_output=True, text=True, check=True).stdout)\n")
    out = python(env, code)
    assert "plugterm" in out and "plugdemo=plugdemo" in out
    assert marks(env) == ["schedule.none", "schedule.none", "term.none", "term.none"]  # parent and child, each once


@pytest.mark.slow
def test_a_two_process_torchrun_run_imports_the_plugins_in_every_worker(tmp_path):
    env = install(tmp_path)
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "tandem_rlvr.cli", "train", "--preset", "tiny", "--limit", "64", "--val-size", "4",
                          "--max-new-tokens", "16", "--group-size", "2", "--prompts-per-step", "4",
                          "--prompts-per-minibatch", "4", "--max-steps", "1", "--eval-every", "0", "--save-every", "1",
                          "--schedule", "junior-first-2", "--plugins", "plugterm",
                          "--reward-terms", "correct,plug-even", "--output-dir", str(out)],
                         env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["processes"] == 2
    assert marks(env) == ["schedule.0", "schedule.1", "term.0", "term.1"]  # every worker imported both
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["plugins"] == ["plugterm"] and cfg["schedule"] == "junior-first-2"
    row = json.loads((out / "log.jsonl").read_text().splitlines()[0])
    assert "reward/plug-even" in row
    assert 0 < row["senior/token_share"] < 1  # the junior wrote the first two tokens of every rollout


@pytest.mark.vllm
def test_vllms_plugin_hook_imports_the_plugins(tmp_path):
    """What every vLLM process runs at start (``tandem serve``'s server and engine processes included):
    vLLM's general-plugin loader calls our hook, which imports the entry-point plug-in and the modules of
    $TANDEM_PLUGINS, so the logits processor can replay a plug-in schedule by name."""
    env = {**install(tmp_path), "TANDEM_PLUGINS": "plugterm"}
    code = ("from vllm.plugins import load_general_plugins\n"
            "load_general_plugins()\n"
            "from tandem_rlvr.decoding.schedule import REGISTRY\n"
            "from tandem_rlvr.rewards.terms import TERMS\n"
            "print('junior-first-2' in REGISTRY, 'plug-even' in TERMS)\n")
    assert python(env, code).split()[-2:] == ["True", "True"]
