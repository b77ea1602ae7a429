"""``examples/``: each script runs as written (slow: a minute or two each on CPU); the README's "From Python"
block is ``examples/tandem_trainer.py``'s code; the TRL script becomes tandem by one import and one argument;
docs/api.md's table of fixed fields is the code's."""

from __future__ import annotations

import difflib
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _code(path: Path) -> str:
    text = path.read_text()
    return text[text.index('"""', 3) + 3:].strip()  # without the module docstring


def test_the_readme_s_python_block_is_the_example_script():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## From Python"):]
    block = section[section.index("```python\n") + len("```python\n"): section.index("```\n",
                                                                                     section.index("```python"))]
    want = _code(EXAMPLES / "tandem_trainer.py")
    assert block.strip() == want[want.index("import random"):]


def test_a_trl_script_becomes_tandem_by_one_import_and_one_argument():
    before = _code(EXAMPLES / "grpo_script.py").splitlines()
    after = _code(EXAMPLES / "tandem_rollout_script.py").splitlines()
    diff = [d for d in difflib.ndiff(before, after) if d[:2] in ("+ ", "- ")]
    changed = [d for d in diff if "output_dir" not in d]  # the run directory's name differs, nothing else
    assert changed == ["+ from tandem_rlvr import tandem_rollout",
                       '+     rollout_func=tandem_rollout("tiny-junior"),  # the frozen junior: any model of the '
                       "policy's tokenizer"]


def test_docs_api_tables_every_fixed_field():
    from tandem_rlvr.rl.grpo_config import FIXED

    doc = (ROOT / "docs" / "api.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", doc, re.M))
    assert {k: rows.get(k) for k in FIXED} == {k: repr(v) for k, (v, _) in FIXED.items()}


@pytest.mark.slow
@pytest.mark.parametrize("script", ["grpo_script.py", "tandem_rollout_script.py", "tandem_trainer.py"])
def test_each_example_runs_as_written(script, tmp_path, monkeypatch, capsys):
    """``python examples/SCRIPT`` in an empty folder, run here as ``__main__`` (``runpy``, what the interpreter
    does with a script path; a fresh interpreter would only add its imports); torch's thread count, which a
    training run sets, is put back after."""
    import runpy

    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / script)])
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the script's folder first, as the interpreter puts it
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    finally:
        torch.set_num_threads(threads)
    done = capsys.readouterr()
    if script == "tandem_trainer.py":
        run = tmp_path / "runs" / "tandem-trainer"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["steps"] == 4 and (run / "best").is_dir()
        metrics = json.loads((run / "handoff-eval" / "metrics.json").read_text())
        assert f"handoff pass@1: {metrics['macro']['pass@1']}" in done.out
        assert list((run / "runs").rglob("events.out.tfevents.*"))  # report_to="tensorboard"
