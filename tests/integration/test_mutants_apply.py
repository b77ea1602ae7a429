"""Every planted bug of ``scripts/mutants.py`` still applies to today's code: its file exists, its
text occurs there exactly once, and the tests it runs exist. A module that moves or a line that
changes would otherwise turn a mutant into a no-op that nothing catches (the script would report
it as an error only when someone runs it, minutes per mutant)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mutants():
    spec = importlib.util.spec_from_file_location("mutants_script", ROOT / "scripts" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module.MUTANTS


MUTANTS = _mutants()


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_applies_once_to_an_existing_file_and_names_existing_tests(mutant):
    src = ROOT / "src" / "tandem_rlvr" / mutant.path
    assert src.is_file(), f"{mutant.name}: {mutant.path} is gone"
    assert src.read_text(encoding="utf-8").count(mutant.old) == 1, \
        f"{mutant.name}: its text is not in {mutant.path} once"
    assert mutant.old != mutant.new
    for test in mutant.tests:
        assert (ROOT / test.split("::")[0]).is_file(), f"{mutant.name}: {test} is gone"


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
