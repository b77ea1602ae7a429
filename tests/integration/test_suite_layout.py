"""The test tree's own rules: no test module imports another (shared fixtures live in tests/conftest.py,
shared builders in tests/helpers/, independent references in tests/reference/), and neither package holds a
module pytest would collect as tests."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


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
