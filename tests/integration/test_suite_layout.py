"""The test tree's own rules: no test module imports another (shared fixtures live in tests/conftest.py,
shared builders in tests/helpers/, independent references in tests/reference/), neither package holds a
module pytest would collect as tests, every test module sits in unit/<package>/, integration/ or distributed/,
and every test path the docs, scripts, sources and tests name exists."""

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
# where test paths are named: docs, README, CI, scripts, module docstrings, other tests
NAMING = ["docs/*.md", "README.md", "CHANGELOG.md", ".ci/run", "scripts/*", "src/**/*.py", "src/**/*.md",
          "tests/**/*.py", "tests/**/*.md"]
# paths of another repository: the authors' release's senior-gate test
ELSEWHERE = {"docs/paper_fidelity.md": {"tests/test_senior_gate.py"}}


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_test_module_imports_another():
    test_modules = {p.stem for p in TESTS.rglob("test_*.py")}
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        hits = _imported_modules(path) & test_modules
        if hits:
            found[str(path.relative_to(TESTS))] = sorted(hits)
    assert found == {}, f"test modules imported by others (what they share belongs in conftest.py or helpers/): {found}"


def test_helpers_and_references_hold_no_test_modules():
    for package in ("helpers", "reference"):
        assert (TESTS / package / "__init__.py").is_file()
        assert not list((TESTS / package).rglob("test_*.py")), package


def test_every_test_module_sits_in_a_folder_of_its_kind():
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []
    kinds = {p.relative_to(TESTS).parts[0] for p in TESTS.rglob("test_*.py")}
    assert kinds <= {"unit", "integration", "distributed"}, kinds


def test_every_test_path_named_in_the_tree_exists():
    missing = {}
    for pattern in NAMING:
        for path in ROOT.glob(pattern):
            if not path.is_file() or "egg-info" in str(path) or path == Path(__file__).resolve():
                continue
            named = set(re.findall(r"(?<![\w/.])tests/[\w/]+\.py", path.read_text(encoding="utf-8", errors="replace")))
            gone = {n for n in named if not (ROOT / n).is_file()}
            if gone:
                missing[str(path.relative_to(ROOT))] = gone
    assert missing == ELSEWHERE, f"test paths that do not exist: {missing}"
