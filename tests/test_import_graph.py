"""No import cycles in ``tandem_rlvr``, and nothing below the entry points imports them.

A pure-stdlib walk over the package's source: every ``import``/``from ... import`` anywhere
in a module (function-level, lazy imports included: a cycle through a lazy import is still a
cycle, it only fails later), resolved to the module it names. Importing ``a.b.c`` also runs
the ``__init__`` of ``a`` and ``a.b``, so the importer gets an edge to each such package that
is not one of its own (``data.benchmarks`` importing ``world.tasks`` runs ``world/__init__``).

Run: ``python -m pytest -q tests/test_import_graph.py`` (or ``python tests/test_import_graph.py``,
which prints any cycle). The cycle finder is tested on a synthetic graph below, so a broken
finder cannot pass silently.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "tandem_rlvr"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE
# Entry points and recipes sit on top: no module below them may import them.
TOP = ("tandem_rlvr.cli", "tandem_rlvr.recipes", "tandem_rlvr.study", "tandem_rlvr.demo", "tandem_rlvr.__main__")


def module_names(src: Path = SRC) -> dict[str, Path]:
    """{dotted module name: file} of every module of the package (``__init__`` = the package)."""
    out = {}
    for f in sorted(src.rglob("*.py")):
        parts = [PACKAGE, *f.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of our modules (``pkg.mod.func`` -> ``pkg.mod``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules that ``module`` imports anywhere in its body, with the packages that run first."""
    is_pkg = path.name == "__init__.py"
    here = module if is_pkg else module.rpartition(".")[0]
    named = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            named.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            named.update(f"{base}.{a.name}" for a in node.names)  # a submodule, or a name in ``base``
    own = {module.rsplit(".", i)[0] for i in range(module.count(".") + 1)}
    out = set()
    for name in named:
        target = _resolve(name, modules)
        if target is None:
            continue
        parts = target.split(".")
        out.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if p not in own)
    out.discard(module)
    return out


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = module_names(src)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (or a self-loop), each as a
    closed path through it (Tarjan's algorithm, iterative)."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph.get(v, ()):
                    comps.append(_closed_path(sorted(comp), graph))
    return comps


def _closed_path(comp: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A cycle through the component's first module: a -> ... -> a (breadth-first, inside it)."""
    start, members = comp[0], set(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def test_the_cycle_finder_finds_a_synthetic_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    cycles = find_cycles(graph)
    assert sorted(map(tuple, cycles)) == [("a", "b", "c", "a"), ("e", "e")]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_walk_sees_lazy_relative_and_package_imports(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "data").mkdir(parents=True)
    (pkg / "world").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "__init__.py").write_text("")
    (pkg / "data" / "bench.py").write_text("from ..world.tasks import make\n")
    (pkg / "world" / "__init__.py").write_text("def f():\n    from ..data import bench\n")
    (pkg / "world" / "tasks.py").write_text("from . import __name__ as _\n")
    graph = import_graph(pkg)
    assert graph[f"{PACKAGE}.data.bench"] == {f"{PACKAGE}.world", f"{PACKAGE}.world.tasks"}
    assert find_cycles(graph) == [[f"{PACKAGE}.data.bench", f"{PACKAGE}.world", f"{PACKAGE}.data.bench"]]


def test_the_package_has_no_import_cycle():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_every_module_imports():
    """Every module imports (those of the optional vLLM engine only where vLLM is installed)."""
    import importlib

    for name in module_names():
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:  # the optional vLLM engine
            if not (e.name or "").startswith("vllm"):
                raise


def test_nothing_below_the_entry_points_imports_them():
    upward = [(m, t) for m, ts in import_graph().items() for t in ts
              if t.startswith(TOP) and not m.startswith(TOP)]
    assert not upward, f"modules importing the CLI or a recipe: {upward}"


if __name__ == "__main__":
    found = find_cycles(import_graph())
    print("\n".join(" -> ".join(c) for c in found) or "no import cycle")
    sys.exit(1 if found else 0)
