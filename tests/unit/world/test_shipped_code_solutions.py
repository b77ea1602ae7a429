"""Every shipped reference solution passes in our sandbox, checked again only when what it checks changed.

The slow check grades every reference program of the shipped code sets (HumanEval, MBPP sanitized and
full, the APPS sample: about 1,570 programs) in the sandbox, two to four minutes on two cores. Its
verdict is a function of the inputs hashed by ``data_key``, so a run with ``$TANDEM_CI_STAMPS`` set (a
folder kept between runs on one machine; ``.ci/run`` sets ``~/.cache/tandem-rlvr-ci``) skips it when a
passing run left a stamp of the same key there. Without the variable (a developer's run) it always runs.

The key is the SHA-256 of, each file as its path and its content, in sorted order (so a file added,
removed or renamed changes it too). A Python file's content is its syntax tree without docstrings
(``ast.dump`` of the parsed module, the first string statement of each module, class and function
dropped; comments, blank lines and wrapping are not in the tree), so an edit that leaves the code as
it was (a docstring or a comment reworded, a line re-wrapped) keeps the key and a passing verdict,
and any edit of the code changes it. A file that reads ``__doc__`` (as a name or an attribute: its
docstrings are behaviour) and every other file is keyed on its bytes. The inputs:

- every file of the packages the grading runs: ``tandem_rlvr/sandbox/`` (the launcher, the judge and
  the server that run inside the sandbox), ``tandem_rlvr/tasks/`` (the code task and its loaders) and
  ``tandem_rlvr/rewards/`` (the verifiers the task modules import);
- the package modules those import: ``tandem_rlvr/__init__.py``, ``errors.py``, ``io.py``,
  ``paths.py``, ``prompting.py``;
- the shipped code data: every file of ``tandem_rlvr/data/files/code/``;
- this test file;
- the interpreters and the machine: this one (``sys.version``, ``sys.executable``), the one the
  programs run on (``sandbox.sandbox_python()``, another when root must drop to a uid that cannot
  reach this one, and its ``sys.version``), whether we run as root (the sandbox isolates differently),
  and ``platform.platform()`` (which names the kernel release: the sandbox rests on the kernel's
  namespaces and limits).

Installed third-party packages are not in it: the reference programs import the standard library only,
and a test below checks that. Another runs the grading path's imports in a fresh interpreter and
requires every ``tandem_rlvr`` module it loads to be hashed, so a new import cannot slip out of the key.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tandem_rlvr.sandbox import Limits, sandbox_python
from tandem_rlvr.tasks.code import CodeTask
from tandem_rlvr.tasks.code_data import CODE_BENCHMARKS, load_code

SRC = Path(__file__).resolve().parents[3] / "src"
PACKAGES = ("tandem_rlvr/sandbox", "tandem_rlvr/tasks", "tandem_rlvr/rewards", "tandem_rlvr/data/files/code")
MODULES = ("tandem_rlvr/__init__.py", "tandem_rlvr/errors.py", "tandem_rlvr/io.py", "tandem_rlvr/paths.py",
           "tandem_rlvr/prompting.py")
GRADING_IMPORTS = "import tandem_rlvr.sandbox, tandem_rlvr.tasks.code, tandem_rlvr.tasks.code_data"


def covered_files(src: Path = SRC) -> list[Path]:
    """The source and data files in the key, relative to ``src`` (byte-code caches left out)."""
    files = [Path(m) for m in MODULES]
    for pkg in PACKAGES:
        files += [p.relative_to(src) for p in (src / pkg).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return sorted(set(files))


def keyed_content(path: Path) -> bytes:
    """What the key hashes of one file: a Python file's syntax tree without docstrings, unless its code reads
    ``__doc__``; any other file's bytes (the module docstring says why)."""
    data = path.read_bytes()
    if path.suffix != ".py":
        return data
    tree = ast.parse(data, filename=str(path))
    if any(isinstance(n, ast.Name) and n.id == "__doc__" or isinstance(n, ast.Attribute) and n.attr == "__doc__"
           for n in ast.walk(tree)):
        return data
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) and \
                isinstance(node.body[0].value.value, str):
            node.body = node.body[1:]
    return b"ast\0" + ast.dump(tree).encode()


def data_key(src: Path = SRC, test_file: Path = Path(__file__)) -> str:
    """Hex SHA-256 of everything the slow check's verdict depends on (the module docstring lists it)."""
    h = hashlib.sha256()
    for rel in covered_files(src):
        h.update(str(rel).encode() + b"\0" + keyed_content(src / rel) + b"\0")
    h.update(b"test\0" + keyed_content(test_file) + b"\0")
    program_python = sandbox_python()
    program_version = subprocess.run([program_python, "-I", "-c", "import sys; print(sys.version)"],
                                     capture_output=True, text=True, check=True).stdout
    h.update(f"{sys.version}\0{sys.executable}\0{program_python}\0{program_version}\0{os.getuid() == 0}\0"
             f"{platform.platform()}".encode())
    return h.hexdigest()


def _stamp() -> Path | None:
    folder = os.environ.get("TANDEM_CI_STAMPS")
    return Path(folder) / f"shipped-code-solutions-{data_key()[:32]}" if folder else None


@pytest.mark.slow
def test_every_reference_solution_passes_in_the_sandbox():
    stamp = _stamp()
    if stamp is not None and stamp.is_file():
        pytest.skip(f"passed on these exact inputs before ({stamp}); see the module docstring for the key")
    # MBPP 123 needs ~3.5 CPU s. Four at once keep two cores busy while a run waits on its launch and
    # pipes: a little faster than two when idle (HumanEval 12.2 vs 13.1 s), much faster under load.
    task = CodeTask(limits=Limits(wall_s=120, cpu_s=60), workers=4)
    for name in CODE_BENCHMARKS:
        rows = load_code(name)
        grades = task.grade([r["solution"] for r in rows], rows)
        assert [(r["problem_id"], g.reason) for r, g in zip(rows, grades, strict=True) if g.score != 1.0] == [], name
    if stamp is not None:  # reached only when every set passed
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(time.strftime("%Y-%m-%dT%H:%M:%S") + "\n")


def test_the_key_covers_every_module_the_grading_imports():
    code = f"{GRADING_IMPORTS}; import sys, json; print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items() " \
           "if n.split('.')[0] == 'tandem_rlvr' and getattr(m, '__file__', None))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SRC.parent)
    loaded = {Path(f).resolve().relative_to(SRC) for f in json.loads(out.stdout)}
    assert len(loaded) >= 10 and loaded - set(covered_files()) == set()


def test_the_key_changes_with_each_kind_of_input_it_covers(tmp_path):
    src = tmp_path / "src"
    for rel in covered_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SRC / rel, src / rel)
    test_copy = tmp_path / "test.py"
    shutil.copyfile(__file__, test_copy)
    before = data_key(src, test_copy)
    assert before == data_key(src, test_copy)  # a function of the content, not of the path or the time
    for rel, edit in (("tandem_rlvr/sandbox/_launch.py", b"\nINSIDE_ID = 1001\n"),  # code
                      ("tandem_rlvr/data/files/code/mbpp.jsonl", b"\n"),  # data: its bytes
                      ("tandem_rlvr/errors.py", b"\nassert True\n")):
        f = src / rel
        body = f.read_bytes()
        f.write_bytes(body + edit)
        assert data_key(src, test_copy) != before, rel
        f.write_bytes(body)
    prompting = src / "tandem_rlvr/prompting.py"  # a docstring reworded and a comment added: the same code
    body = prompting.read_text()
    first = ast.get_docstring(ast.parse(body)).splitlines()[0]
    prompting.write_text(body.replace(first, "Reworded: " + first, 1) + "# a comment\n")
    assert "Reworded: " in prompting.read_text() and data_key(src, test_copy) == before
    prompting.write_text(body)
    (src / "tandem_rlvr/sandbox/new_helper.py").write_text("")  # a file added to a covered package
    assert data_key(src, test_copy) != before
    (src / "tandem_rlvr/sandbox/new_helper.py").unlink()
    test_copy.write_text(test_copy.read_text() + "\nX = 1\n")
    assert data_key(src, test_copy) != before


def test_a_docstring_or_comment_edit_keeps_the_key_and_a_code_edit_changes_it(tmp_path):
    """The syntax-tree key, worked on a small module: docstrings of the module, a class and a function
    reworded, a comment and blank lines added, a call re-wrapped give the tree of the original; a changed
    constant, a string statement after the first, or any edit of a module that reads ``__doc__`` do not."""
    original = 'X = 1\n\n\nclass A:\n    def f(self):\n        return g(1, 2)\n'
    documented = ('"""Module."""\n# a comment\nX = 1  # one\n\n\nclass A:\n    """A class."""\n\n'
                  '    def f(self):\n        """A method,\n        two lines."""\n        return g(1,\n'
                  '                 2)\n')
    changed = original.replace("X = 1", "X = 2")
    code_string = original.replace("X = 1\n", 'X = 1\n"not the first statement: kept"\n')
    f = tmp_path / "m.py"
    keys = {}
    for name, text in (("original", original), ("documented", documented), ("changed", changed),
                       ("code_string", code_string)):
        f.write_text(text)
        keys[name] = keyed_content(f)
    assert keys["documented"] == keys["original"]
    assert len({keys["original"], keys["changed"], keys["code_string"]}) == 3
    reader = 'import argparse\n\nap = argparse.ArgumentParser(description=__doc__)\n'
    f.write_text(reader)
    plain = keyed_content(f)
    f.write_text('"""What it does."""\n' + reader)
    assert keyed_content(f) != plain == reader.encode()  # keyed on its bytes
    (tmp_path / "d.jsonl").write_text('{"a": 1}\n')
    assert keyed_content(tmp_path / "d.jsonl") == b'{"a": 1}\n'


def test_the_shipped_sources_key_on_their_trees_but_for_the_one_that_reads_its_docstring():
    """Every Python file of the key parses, and the one whose code reads ``__doc__`` (the reward worker's
    argparse description) is keyed on its bytes: a rewording there reruns the check."""
    on_bytes = [str(rel) for rel in covered_files() if rel.suffix == ".py"
                and not keyed_content(SRC / rel).startswith(b"ast\0")]
    assert on_bytes == ["tandem_rlvr/rewards/_worker.py"]


def _imports(code: str) -> set[str]:
    """Top-level names of the modules ``code`` imports (a HumanEval body is indented: dedented first)."""
    names = set()
    for node in ast.walk(ast.parse(textwrap.dedent(code))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_reference_programs_import_the_standard_library_only():
    """Why installed packages are not in the key: no reference program, nor the code of its tests, imports one."""
    imported = set()
    for name in CODE_BENCHMARKS:
        for row in load_code(name):
            imported |= _imports(row["solution"])  # every solution parses
            for field in ("prompt", "test", "header", "setup", "tests"):  # the test code, by benchmark kind
                value = row["gold"].get(field)
                for code in value if isinstance(value, list) else [value] if value else []:
                    imported |= _imports(code)
    assert len(imported) >= 5 and imported - set(sys.stdlib_module_names) == set(), imported
