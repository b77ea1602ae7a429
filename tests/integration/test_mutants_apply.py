"""Every planted bug of ``scripts/mutants.py`` still applies to today's code: its file exists, the definition
it is anchored to (``where``) is there once, its code occurs inside that definition exactly once (as tokens:
a re-wrapped line still matches), the mutated file still parses, and the tests it runs exist. A module that
moves or code that changes would otherwise turn a mutant into a no-op that nothing catches (the script would
report it as an error only when someone runs it, minutes per mutant)."""

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("mutants_script", ROOT / "scripts" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


SCRIPT = _script()
MUTANTS = SCRIPT.MUTANTS


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_applies_once_inside_its_definition_and_names_existing_tests(mutant):
    src = ROOT / "src" / "tandem_rlvr" / mutant.path
    assert src.is_file(), f"{mutant.name}: {mutant.path} is gone"
    text = src.read_text(encoding="utf-8")
    assert SCRIPT.occurrences(text, mutant.where, mutant.old) == 1, \
        f"{mutant.name}: its code is not inside {mutant.where} of {mutant.path} once"
    mutated = SCRIPT.apply(text, mutant.where, mutant.old, mutant.new)
    assert mutated != text
    ast.parse(mutated)  # a bug in the code, not a syntax error in the copy
    for test in mutant.tests:
        assert (ROOT / test.split("::")[0]).is_file(), f"{mutant.name}: {test} is gone"


def test_the_anchor_survives_a_rewrap_and_an_edit_elsewhere_but_not_a_change_of_its_own_code():
    """A mutant's code found as tokens inside its definition: wrapped over two lines and with a line above it
    changed it still applies (the plain text would not be found); changed itself, it is reported."""
    text = "def f(x):\n    y = 1\n    return g(x, 2)\n\n\ndef h():\n    return g(x, 2)\n"
    wrapped = "def f(x):\n    y = 3  # edited\n    return g(x,\n             2)\n\n\ndef h():\n    return g(x, 2)\n"
    assert wrapped.count("return g(x, 2)") == 1  # h's, not f's: text anchoring would mutate the wrong function
    assert SCRIPT.apply(text, "f", "return g(x, 2)", "return g(x, 3)").splitlines()[2] == "    return g(x, 3)"
    assert SCRIPT.apply(wrapped, "f", "return g(x, 2)", "return g(x, 3)").splitlines()[2] == "    return g(x, 3)"
    assert SCRIPT.occurrences(wrapped.replace("g(x,", "g(z,", 1), "f", "return g(x, 2)") == 0
    with pytest.raises(LookupError):
        SCRIPT.apply(text, "missing", "return g(x, 2)", "pass")


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
