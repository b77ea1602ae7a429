"""The import graph of ``tandem_rlvr`` runs one way: no cycle, no arrow back up, no private names.

A pure-stdlib walk over the package's source: every ``import``/``from ... import`` anywhere
in a module (function-level, lazy imports included: a cycle through a lazy import is still a
cycle, it only fails later), resolved to the module it names. Importing ``a.b.c`` also runs
the ``__init__`` of ``a`` and ``a.b``, so the importer gets an edge to each such package that
is not one of its own (``data.benchmarks`` importing ``world.tasks`` runs ``world/__init__``);
a module that names its own package's ``__init__`` (``from . import check_vllm_schedule``) gets
that edge too, since it runs code of that ``__init__``.

The rules (docs/architecture.md, "Floors"; DESIGN.md's layout):

- no module-level cycle, and no package-level knot (a cycle between top-level packages, e.g.
  ``rewards -> engines -> models -> world -> rewards``);
- every package sits on a floor (``FLOORS``) and imports only its own floor or those below; on a
  floor, ``APART`` pairs never import each other (``rl`` and ``eval``: training never needs the
  evaluation battery); inside a package with floors of its own (``INNER_FLOORS``: ``eval``'s
  report > sample > measure > run files) the same holds between its parts, so measuring never
  imports presenting;
- nothing imports another module's ``_private`` names, nor a ``_private`` module of another package
  (``PRIVATE_EXCEPTIONS`` lists the one kept, with its reason);
- only ``cli/`` parses arguments, and the library below it never sees the parsed flags: a command's
  ``fn`` is a function of ``cli/``, and no call from ``cli/`` into the library passes the namespace
  (``namespace_leaks``; ``cli/`` turns flags into settings objects first).

Run: ``python -m pytest -q tests/unit/test_import_graph.py`` (or ``python tests/unit/test_import_graph.py``,
which prints every violation and the count of arrows back up). Each finder is tested on a
synthetic package below, so a broken finder cannot pass silently.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = "tandem_rlvr"
SRC = Path(__file__).resolve().parents[2] / "src" / PACKAGE
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
        out.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p not in own)
        out.add(target)  # named itself: an edge even to the importer's own package
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


# --------------------------------------------------------------------------- floors
# Higher floors import lower ones (and their own); never the other way. The ground floor holds
# what everything may use (errors, io, paths, runtime, progress, outdir, fingerprint, prompting,
# gguf, fetch): every top-level name not listed here.
FLOORS = {
    "cli": 6, "study": 6, "demo": 6, "__main__": 6,  # the entry points (study, demo: aliases)
    "recipes": 5, "api": 5,  # the Python API (TandemGRPOTrainer, tandem_rollout, evaluate) on rl and eval
    "planner": 5,  # the memory plan: reads settings and rl's rules; rl never reads it back
    "rl": 4, "eval": 4, "client": 4,
    "engines": 3, "config": 3,
    "models": 2, "data": 2, "world": 2, "tasks": 2,
    "decoding": 1, "rewards": 1, "sandbox": 1,
}
APART = {("rl", "eval"), ("eval", "rl")}  # same floor, never importing each other
# Floors inside a package, by its submodule or subpackage: presenting (report) reads what measuring
# computes; the sampler scores with measuring's pure functions; everything reads and writes run
# directories through run_files; ``eval.metrics`` is the contract's path of measure.metrics.
INNER_FLOORS = {"eval": {"report": 3, "sample": 2, "measure": 1, "metrics": 1, "run_files": 0}}
# Submodules that name their own package's __init__, kept: tasks/__init__ is the task registry and
# never imports grade, which consumes it (``python -m pkg`` modules, ``__main__``, always may).
OWN_INIT_USERS = {"tandem_rlvr.tasks.grade"}
# (importer, imported module): a private name import kept, with its reason
PRIVATE_EXCEPTIONS = {
    # world/build.py and world/cross.py are hashed into the key of every built world (the shipped
    # ones too): renaming build.py's helpers to public names would change every world's key.
    ("tandem_rlvr.world.cross", "tandem_rlvr.world.build"),
    # the skill juniors' dial starts at the build's own initialisation (``_new_model``), for the same reason
    ("tandem_rlvr.world.skill", "tandem_rlvr.world.build"),
}


def package_of(module: str) -> str:
    """The top-level package (or ground-floor module) of a dotted name: ``tandem_rlvr.eval.x`` -> ``eval``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def floor(package: str) -> int:
    return FLOORS.get(package, 0)


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """{package: packages it imports}, between distinct top-level packages (the root itself left out)."""
    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        for t in targets:
            a, b = package_of(m), package_of(t)
            if a and b and a != b:
                out.setdefault(a, set()).add(b)
    return out


def part_of(module: str) -> str | None:
    """The part of its package a module is in (``tandem_rlvr.eval.measure.drift`` -> ``measure``); None
    for the package itself."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


def inner_floor(package: str, part: str) -> int:
    """The floor of ``part`` inside ``package`` (``INNER_FLOORS``); a part without one is an error, so a
    new part of such a package must be placed."""
    floors = INNER_FLOORS[package]
    if part not in floors:
        raise AssertionError(f"{package}/{part} has no floor in INNER_FLOORS {floors}")
    return floors[part]


def arrows_back_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every (importer, imported) module pair whose package is on a higher floor, or an ``APART``
    pair, or, inside a package of ``INNER_FLOORS``, whose part is on a higher inner floor; and every
    submodule naming its own package's ``__init__``, which sits above its parts (it imports them:
    ``engines/__init__`` <-> ``engines.server_client`` was such a knot)."""
    bad = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            a, b = package_of(m), package_of(t)
            pa, pb = part_of(m), part_of(t)
            if a and b and a != b and (floor(b) > floor(a) or (a, b) in APART):
                bad.append((m, t))
            elif (a == b and a in INNER_FLOORS and pa and pb and pa != pb
                  and inner_floor(a, pb) > inner_floor(a, pa)):
                bad.append((m, t))
            elif b and m.startswith(t + ".") and m.rpartition(".")[2] != "__main__" and m not in OWN_INIT_USERS:
                bad.append((m, t))
    return bad


def private_imports(src: Path = SRC) -> list[tuple[str, str, str]]:
    """(importer, module, name) of every import of another module's ``_private`` name (``from m
    import _x``, or ``m._x`` on an imported module ``m``), and of a ``_private`` module from
    outside its package. Dunder names (``__version__``) are public."""
    modules = module_names(src)
    private = lambda n: n.startswith("_") and not (n.startswith("__") and n.endswith("__"))  # noqa: E731
    found = []
    for module, path in modules.items():
        is_pkg = path.name == "__init__.py"
        here = module if is_pkg else module.rpartition(".")[0]
        bound: dict[str, str] = {}  # local name -> our module it is bound to
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                if _resolve(base, modules) is None:
                    continue
                for a in node.names:
                    full = f"{base}.{a.name}"
                    if full in modules:  # a submodule
                        bound[a.asname or a.name] = full
                    if private(a.name) and full not in modules and base != module:
                        found.append((module, base, a.name))
                    for mod in (full if full in modules else base,):
                        parts = mod.split(".")
                        for i, part in enumerate(parts):
                            owner = ".".join(parts[:i])
                            if private(part) and not module.startswith(owner + "."):
                                found.append((module, mod, part))
                                break
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules and a.asname:
                        bound[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and private(node.attr) and bound[node.value.id] != module):
                found.append((module, bound[node.value.id], node.attr))
    return sorted(set(found))


def top_level_names(path: Path) -> set[str] | None:
    """Names a module defines at its top level (defs, classes, assignments, imports, also inside
    top-level ``if``/``try``); None if it star-imports (its names cannot be listed)."""
    names: set[str] = set()
    todo = list(ast.parse(path.read_text(encoding="utf-8"), str(path)).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            todo += [*node.body, *node.orelse, *getattr(node, "finalbody", []),
                     *(s for h in getattr(node, "handlers", []) for s in h.body)]
    return names


def unresolved_imports(src: Path = SRC) -> list[tuple[str, int, str]]:
    """(module, line, what) of every import of ours, lazy ones included, that names no module of
    the package or a name its module does not define: a relative import of the wrong depth after a
    move, or a name that moved elsewhere, fails here before the line ever runs."""
    modules = module_names(src)
    defined = {m: top_level_names(p) for m, p in modules.items()}
    bad = []
    for module, path in modules.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                elif not base.startswith(PACKAGE):
                    continue
                if base not in modules:
                    bad.append((module, node.lineno, base))
                    continue
                for a in node.names:
                    known = defined[base]
                    if (a.name != "*" and f"{base}.{a.name}" not in modules and known is not None
                            and a.name not in known):
                        bad.append((module, node.lineno, f"{base}.{a.name}"))
            elif isinstance(node, ast.Import):
                bad += [(module, node.lineno, a.name) for a in node.names
                        if a.name.startswith(PACKAGE) and a.name not in modules]
    return bad


def test_every_import_of_ours_names_something_that_exists():
    bad = unresolved_imports()
    assert not bad, "imports naming nothing:\n" + "\n".join(f"{m}:{line}: {what}" for m, line, what in bad)


def test_the_resolver_sees_a_wrong_depth_and_a_moved_name(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "eval" / "sample").mkdir(parents=True)
    for init in (pkg, pkg / "eval", pkg / "eval" / "sample"):
        (init / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("class TandemError(ValueError):\n    pass\n")
    (pkg / "eval" / "sample" / "sampler.py").write_text(
        "from ...errors import TandemError\ndef f():\n    from ..errors import TandemError\n"
        "    from ...errors import number\n")
    assert unresolved_imports(pkg) == [(f"{PACKAGE}.eval.sample.sampler", 3, f"{PACKAGE}.eval.errors"),
                                       (f"{PACKAGE}.eval.sample.sampler", 4, f"{PACKAGE}.errors.number")]


def test_the_rule_finders_see_an_arrow_up_a_knot_and_private_names(tmp_path):
    pkg = tmp_path / PACKAGE
    for sub in ("rl", "eval", "rewards", "engines", "world"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "rl" / "rollout.py").write_text("def f():\n    from ..eval.metrics import switches\n")
    (pkg / "eval" / "metrics.py").write_text("switches = 0\n")
    (pkg / "rewards" / "judge.py").write_text("from ..engines.open import _opener\n")
    (pkg / "engines" / "open.py").write_text("from ..world import build\n_opener = build._make\n")
    (pkg / "world" / "build.py").write_text("from ..rewards import judge\n_make = 1\n")
    (pkg / "world" / "cross.py").write_text("from . import build\nx = build._make\n")
    graph = import_graph(pkg)
    assert arrows_back_up(graph) == [(f"{PACKAGE}.rewards.judge", f"{PACKAGE}.engines"),
                                     (f"{PACKAGE}.rewards.judge", f"{PACKAGE}.engines.open"),
                                     (f"{PACKAGE}.rl.rollout", f"{PACKAGE}.eval"),
                                     (f"{PACKAGE}.rl.rollout", f"{PACKAGE}.eval.metrics")]
    assert find_cycles(package_graph(graph)) == [["engines", "world", "rewards", "engines"]]
    assert private_imports(pkg) == [(f"{PACKAGE}.engines.open", f"{PACKAGE}.world.build", "_make"),
                                    (f"{PACKAGE}.rewards.judge", f"{PACKAGE}.engines.open", "_opener"),
                                    (f"{PACKAGE}.world.cross", f"{PACKAGE}.world.build", "_make")]


def test_the_inner_floors_see_measuring_import_presenting(tmp_path):
    pkg = tmp_path / PACKAGE
    for sub in ("eval", "eval/measure", "eval/report", "eval/sample"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "eval" / "run_files.py").write_text("")
    (pkg / "eval" / "measure" / "compare.py").write_text("from ..run_files import x\nfrom ..report.tables import t\n")
    (pkg / "eval" / "report" / "tables.py").write_text("from ..measure import compare\n")
    (pkg / "eval" / "sample" / "sampler.py").write_text("def f():\n    from ..report import tables\n")
    assert arrows_back_up(import_graph(pkg)) == [
        (f"{PACKAGE}.eval.measure.compare", f"{PACKAGE}.eval.report"),
        (f"{PACKAGE}.eval.measure.compare", f"{PACKAGE}.eval.report.tables"),
        (f"{PACKAGE}.eval.sample.sampler", f"{PACKAGE}.eval.report"),
        (f"{PACKAGE}.eval.sample.sampler", f"{PACKAGE}.eval.report.tables")]
    (pkg / "eval" / "present.py").write_text("from .measure import compare\n")
    with pytest.raises(AssertionError, match="eval/present has no floor"):
        arrows_back_up(import_graph(pkg))


def test_a_submodule_naming_its_own_package_closes_a_cycle(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "engines").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engines" / "__init__.py").write_text("from .base import ENGINES\ndef check():\n    pass\n")
    (pkg / "engines" / "base.py").write_text("def open_():\n    from .client import C\n")
    (pkg / "engines" / "client.py").write_text("def f():\n    from . import check\n")
    cycles = find_cycles(import_graph(pkg))
    assert cycles == [[f"{PACKAGE}.engines", f"{PACKAGE}.engines.base", f"{PACKAGE}.engines.client",
                       f"{PACKAGE}.engines"]]


def test_no_package_level_knot():
    knots = find_cycles(package_graph(import_graph()))
    assert not knots, "packages importing each other:\n" + "\n".join(" -> ".join(c) for c in knots)


def test_no_arrow_back_up():
    """config -> rl, rl -> eval, rewards -> engines, eval/measure -> eval/report, and every other import of a
    higher floor."""
    up = arrows_back_up(import_graph())
    assert not up, "imports of a higher floor:\n" + "\n".join(f"{m} -> {t}" for m, t in up)


def test_no_import_of_another_modules_private_names():
    found = [f for f in private_imports() if (f[0], f[1]) not in PRIVATE_EXCEPTIONS]
    assert not found, "private names imported:\n" + "\n".join(f"{m} imports {t}: {n}" for m, t, n in found)


def test_only_the_cli_parses_arguments():
    """argparse is imported by ``cli/`` alone (and by the math worker's own process entry point,
    ``rewards/_worker.py``, and world/build.py's build script, whose source keys every world)."""
    users = sorted(m for m, p in module_names().items() if re.search(r"^\s*(import argparse|from argparse )",
                                                                        p.read_text(encoding="utf-8"), re.M))
    assert [m for m in users if not m.startswith("tandem_rlvr.cli")] == ["tandem_rlvr.rewards._worker",
                                                                            "tandem_rlvr.world.build"]


def _is_namespace(x: ast.expr, ns: str) -> bool:
    """``x`` is the name ``ns``, ``*ns`` or ``vars(ns)``: the parsed flags passed on."""
    return (isinstance(x, ast.Name) and x.id == ns) or (isinstance(x, ast.Starred) and _is_namespace(x.value, ns)) or (
        isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id == "vars"
        and any(_is_namespace(a, ns) for a in x.args))


def namespace_leaks(src: Path = SRC) -> list[tuple[str, int, str]]:
    """(cli module, line, what) of every place the parsed flags reach the library: a ``set_defaults(fn=X)``
    whose X is not a function of ``cli/``, or a call of a library function with the namespace as an
    argument (whole, ``*a``, ``**vars(a)``). The namespace is the first parameter of each command function
    (a ``fn``), and of any ``cli/`` function a namespace is passed to (followed to a fixed point)."""
    modules = {m: p for m, p in module_names(src).items() if m.startswith(f"{PACKAGE}.cli")}
    trees = {m: ast.parse(p.read_text(encoding="utf-8"), str(p)) for m, p in modules.items()}
    defs = {m: {n.name: n for n in t.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            for m, t in trees.items()}
    library = {m: set() for m in modules}  # names bound to something outside cli/
    cli_funcs = {m: dict(defs[m]) for m in modules}  # name -> FunctionDef of cli/
    for m, t in trees.items():
        here = m if modules[m].name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(t):
            if isinstance(node, ast.ImportFrom):
                anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)] if node.level else []
                base = ".".join([*anchor, *([node.module] if node.module else [])])
                for a in node.names:
                    if base.startswith(f"{PACKAGE}.cli"):
                        target = defs.get(base, {}).get(a.name)
                        if target is not None:
                            cli_funcs[m][a.asname or a.name] = target
                    elif base.startswith(PACKAGE):
                        library[m].add(a.asname or a.name)
    holders: set[tuple[int, int]] = set()  # (id of a FunctionDef, index of the parameter holding the namespace)
    leaks = []
    for m, t in trees.items():
        for node in ast.walk(t):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set_defaults":
                for kw in (k for k in node.keywords if k.arg == "fn"):
                    if isinstance(kw.value, ast.Name) and kw.value.id in cli_funcs[m]:
                        holders.add((id(cli_funcs[m][kw.value.id]), 0))
                    elif isinstance(kw.value, ast.Lambda):
                        holders.add((id(kw.value), 0))
                    else:
                        leaks.append((m, node.lineno, f"fn={ast.unparse(kw.value)} is not a function of cli/"))
    funcs = {id(f): (m, f) for m, t in trees.items() for f in ast.walk(t)
             if isinstance(f, (ast.FunctionDef, ast.Lambda))}
    done: set[tuple[int, int]] = set()
    while holders - done:
        fid, i = next(iter(holders - done))
        done.add((fid, i))
        m, f = funcs[fid]
        params = [a.arg for a in f.args.args]
        if i >= len(params):
            continue
        ns = params[i]
        for call in (n for n in ast.walk(f) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
            passed = [j for j, x in enumerate(call.args) if _is_namespace(x, ns)]
            passed_kw = [k for k in call.keywords if _is_namespace(k.value, ns)]
            if call.func.id in cli_funcs[m]:
                holders.update((id(cli_funcs[m][call.func.id]), j) for j in passed)
            elif (passed or passed_kw) and call.func.id in library[m]:
                leaks.append((m, call.lineno, f"{call.func.id}({ns}) gets the parsed flags"))
    return sorted(set(leaks))


def test_the_namespace_finder_sees_a_library_fn_and_a_passed_namespace(tmp_path):
    pkg = tmp_path / PACKAGE
    for sub in ("cli", "engines"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "engines" / "serve.py").write_text("def run_server(a):\n    pass\ndef settings(**kw):\n    pass\n")
    (pkg / "cli" / "flags.py").write_text("from ..engines.serve import run_server, settings\n"
                                          "def helper(x, a):\n    run_server(a)\n    settings(**vars(a))\n")
    (pkg / "cli" / "serve.py").write_text(
        "from ..engines.serve import run_server, settings\nfrom .flags import helper\n"
        "def cmd(a):\n    helper(1, a)\n    settings(port=a.port)\n"
        "def register(s):\n    s.set_defaults(fn=run_server)\n    s.set_defaults(fn=cmd)\n"
        "    s.set_defaults(fn=lambda a: run_server(a))\n")
    assert namespace_leaks(pkg) == [(f"{PACKAGE}.cli.flags", 3, "run_server(a) gets the parsed flags"),
                                    (f"{PACKAGE}.cli.flags", 4, "settings(a) gets the parsed flags"),
                                    (f"{PACKAGE}.cli.serve", 7, "fn=run_server is not a function of cli/"),
                                    (f"{PACKAGE}.cli.serve", 9, "run_server(a) gets the parsed flags")]


def test_the_library_never_sees_the_parsed_flags():
    leaks = namespace_leaks()
    assert not leaks, "parsed flags passed below cli/:\n" + "\n".join(f"{m}:{n}: {w}" for m, n, w in leaks)


if __name__ == "__main__":
    g = import_graph()
    problems = [*(" -> ".join(c) for c in find_cycles(g)), *(" -> ".join(c) for c in find_cycles(package_graph(g))),
                *(f"up: {m} -> {t}" for m, t in arrows_back_up(g)),
                *(f"private: {m} imports {t}.{n}" for m, t, n in private_imports() if (m, t) not in PRIVATE_EXCEPTIONS),
                *(f"flags: {m}:{n}: {w}" for m, n, w in namespace_leaks())]
    print("\n".join(problems) or "no violation")
    print(f"arrows back up: {len(arrows_back_up(g))} module imports, "
          f"{len({(package_of(m), package_of(t)) for m, t in arrows_back_up(g)})} package pairs")
    sys.exit(1 if problems else 0)
