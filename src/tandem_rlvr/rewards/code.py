"""The code verifier: a response's program runs against unit tests in the sandbox; reward = all pass.

The ``code`` task (``tasks.code.CodeTask``: loader and prompts) grades with it, and so does the code
world's build (``world.code``); it sits here beside the math verifier (``rewards.math``) so that
neither the world nor the verifier depends on the task registry.

Answer extraction (``extract_code``): the last fenced code block labelled python/py/python3 or
unlabelled (an unclosed last fence, a response cut at the token limit, counts up to the end), else
the whole completion; nothing but whitespace is "no code found".

How each benchmark's program is assembled and tested (rows from ``code_data``; ``judge_spec``):

- HumanEval: the program is the prompt (header and docstring) + the extracted code; the judge runs
  the prompt and the benchmark's ``check`` and its one test ``check(entry_point)``, the entry point
  being the program's. A response that repeats the whole function works too (the later definition
  wins), as does a bare body that continues the prompt.
- MBPP: the program is the test imports, the code, the setup code; the judge runs each assert as
  its own test, the names they call being the program's (``_test_names``).
- APPS call-based: the program is a header of common imports (``typing``, ``math``,
  ``collections``, ...) and the code; each (arguments, expected) pair is one test, run by the
  judge (``Solution().fn`` when the program has a ``class Solution``).
- APPS stdin/stdout: the code alone, one sandboxed run per input, all under one wall-clock limit;
  stdout, compared here, must equal the expected output line by line (trailing spaces and blank
  lines ignored), else token by token.

Call-based tests run in a judge process (``sandbox.run_judged``) that calls the program over a pipe
and compares its return values itself, so nothing the program does in its own process can write
the verdict (docs/tasks.md, "A verdict the program cannot write").

Within one ``grade_programs`` call (one ``CodeTask.grade``) a program is run once per distinct
(extracted code, tests) pair, the code compared byte for byte (a trailing ``\\`` then a space is a
syntax error where ``\\`` then a newline is not), and its grade shared by every response that
carries it (a program that reads the clock or a random source gets one verdict there, not one per
copy). A GRPO group often writes one program several times.

Any response text is a row's verdict, never an error: code with a lone surrogate is no Python
source file (``crashed``, not run), a NUL makes a file the interpreter refuses (``crashed``), a
response of megabytes runs like any other (a program larger than the sandbox's ``disk_mb`` cannot be
set up: ``crashed``).

``Grade.score`` is 1.0 iff every test passes (binary, as the replication); ``details`` hold
``pass_fraction`` and ``tests``. Reasons: ``passed``, ``failed test K`` (the first failing test,
1-based), ``timeout``, ``memory``, ``output limit``, ``process limit``, ``network blocked``,
``write refused``, ``crashed``, ``tampered`` (a reply that is none), ``judge error``, ``no code found``.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import sys
import time
from dataclasses import replace
from functools import partial

from ..sandbox import Judged, Limits, run_judged, run_pool, run_program, sandbox_python_version
from .grade import Grade

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PY_LABELS = {"", "python", "py", "python3"}
APPS_HEADER = ("from typing import *\nimport math, sys, collections, itertools, heapq, bisect, functools, re, "
               "string\nfrom collections import *\nfrom itertools import *\nfrom functools import *\n")
_APPS_CHECK = '''
def _tandem_apps_check(fn_name, args, expected):
    import json as _j
    try:
        fn = getattr(Solution(), fn_name)
    except NameError:  # no class Solution: the function itself
        fn = globals()[fn_name]
    got = fn(*_j.loads(args))
    got = list(got) if isinstance(got, tuple) else got
    want = _j.loads(expected)
    assert got == want or (isinstance(want, list) and len(want) == 1 and got == want[0]), f"got {got!r:.100}"
'''
_REFUSALS = (("sandbox: network refused", "network blocked"), ("Network is unreachable", "network blocked"),
             ("sandbox: write outside", "write refused"), ("MemoryError", "memory"),
             ("Resource temporarily unavailable", "process limit"))
_FATAL = ("timeout", "memory", "process limit", "output limit")


def extract_code(response: str) -> str | None:
    """The last python (or unlabelled) fenced block, else the whole response; None if only whitespace."""
    if not isinstance(response, str):
        return None
    blocks = [body for label, body in _FENCE.findall(response) if label.lower() in _PY_LABELS]
    code = blocks[-1] if blocks else response
    return code if code.strip() else None


def judge_spec(code: str, gold: dict) -> tuple[str, dict]:
    """(the program's source, the judge's spec) of an in-process benchmark (module docstring): the
    tests and the benchmark's own test code go to the judge only, never into the program."""
    kind = gold["kind"]
    if kind == "humaneval":
        spec = {"context": [gold["prompt"], gold["test"]], "imports": [], "remote": [gold["entry_point"]],
                "tests": [f"check({gold['entry_point']})"]}
        return f"{gold['prompt']}{code}\n", spec
    if kind == "asserts":
        tests = list(gold["tests"])
        remote, imports = _test_names(tests, gold["header"], set(gold.get("targets", ())))
        spec = {"context": [gold["header"]], "imports": imports, "remote": remote, "tests": tests}
        return f"{gold['header']}\n{code}\n\n{gold['setup']}\n", spec
    if kind == "call":
        tests = [f"_tandem_apps_check({gold['fn_name']!r}, {json.dumps(a)!r}, {json.dumps(o)!r})"
                 for a, o in zip(gold["inputs"], gold["outputs"], strict=True)]
        spec = {"context": [_APPS_CHECK], "imports": [], "remote": ["Solution", gold["fn_name"]], "tests": tests}
        return f"{APPS_HEADER}\n{code}\n", spec
    raise ValueError(f"unknown test kind {kind!r}")


def _test_names(tests: list[str], header: str, targets: set) -> tuple[list[str], list[str]]:
    """(names the judge binds to the program's globals, stdlib modules it imports itself) for asserts.

    A name the tests read and the header does not bind is the program's, unless it is a builtin or a
    standard-library module: those stay the judge's own, so a program cannot redefine ``set``,
    ``abs`` or ``math`` under a test. ``targets`` (the reference solution's top-level functions and
    classes) are the program's even when they are builtin names (MBPP 126 asks for ``sum``).
    """
    bound = set()
    for node in ast.walk(ast.parse(header)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name):
            bound.add(node.id)
    read = set()
    for t in tests:
        try:
            read |= {n.id for n in ast.walk(ast.parse(t)) if isinstance(n, ast.Name)}
        except SyntaxError:  # the judge reports it as that test's failure
            pass
    read -= bound
    remote = sorted(n for n in read if n in targets or not (hasattr(builtins, n) or n in sys.stdlib_module_names))
    return remote, sorted(n for n in read if n not in targets and n in sys.stdlib_module_names)


def defined_names(source: str | None) -> list[str]:
    """Top-level function and class names of a reference solution (none if it does not parse)."""
    try:
        body = ast.parse(source or "").body
    except SyntaxError:
        return []
    return sorted(n.name for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)))


def _refusal(text: str) -> str | None:
    found = [(text.rfind(m), reason) for m, reason in _REFUSALS if m in text]
    return max(found)[1] if found else None


def _lines(text) -> list[str]:
    text = "\n".join(text) if isinstance(text, list) else str(text)
    lines = [x.rstrip() for x in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def stdout_matches(got: str, expected) -> bool:
    """APPS stdin/stdout: equal line by line (trailing spaces, blank last lines ignored), else token by token."""
    a, b = _lines(got), _lines(expected)
    return a == b or " ".join(a).split() == " ".join(b).split()


def _verdict(results: list[str | None]) -> Grade:
    n, ok = len(results), sum(r is None for r in results)
    details = {"pass_fraction": ok / n if n else 0.0, "tests": n}
    if n and ok == n:
        return Grade(1.0, "passed", details)
    first = next(i for i, r in enumerate(results) if r is not None)
    return Grade(0.0, _refusal(results[first]) or f"failed test {first + 1}", {**details, "error": results[first]})


def default_workers() -> int:
    """Programs run at once by default: one per core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


def code_verifier() -> str:
    """The verifier identifier runs and results record: the grader's version and the sandbox's Python."""
    return f"code@2:py{sandbox_python_version()}"


def grade_programs(responses: list[str], golds: list, limits: Limits, workers: int) -> list[Grade]:
    """Grade each response against its gold test description (a dict, or its JSON text), ``workers``
    programs at a time; one sandbox run per distinct (program, tests) pair (module docstring)."""
    if len(responses) != len(golds):
        raise ValueError(f"{len(responses)} responses for {len(golds)} rows")
    golds = [json.loads(g) if isinstance(g, str) else g for g in golds]
    # the exact bytes run
    keys = [(extract_code(r), json.dumps(g, sort_keys=True)) for r, g in zip(responses, golds, strict=True)]
    first: dict = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    order = list(first.values())
    graded = run_pool([partial(grade_one, responses[i], golds[i], limits) for i in order], workers)
    by_key = {keys[i]: g for i, g in zip(order, graded, strict=True)}
    return [by_key[k] for k in keys]


def grade_one(response: str, gold: dict, limits: Limits, slot: int = 0) -> Grade:
    """Grade one response in sandbox slot ``slot``."""
    code = extract_code(response)
    if code is None:
        return Grade(0.0, "no code found", {"pass_fraction": 0.0, "tests": 0})
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: no Python source file holds it
        return Grade(0.0, "crashed", {"pass_fraction": 0.0, "tests": _n_tests(gold), "error": f"not UTF-8: {e.reason} "
                                      f"at character {e.start}"})
    if gold["kind"] == "stdio":
        return _stdio(code, gold, limits, slot)
    source, spec = judge_spec(code, gold)
    return judged_grade(run_judged(source, spec, limits, slot), len(spec["tests"]))


def _n_tests(gold: dict) -> int:
    if gold["kind"] == "asserts":
        return len(gold["tests"])
    return 1 if gold["kind"] == "humaneval" else len(gold["inputs"])


def judged_grade(run: Judged, n: int) -> Grade:
    """The verdict of a judged run of ``n`` tests: from the judge's report alone, never from the program's
    output; a run whose channel broke, ran out of time or output, or whose judge failed scores 0."""
    report, out = run.report, run.outcome
    results = list(report["results"]) if report else []
    details = {"pass_fraction": sum(r is None for r in results) / n if n else 0.0, "tests": n}
    if report is not None and report["ended"] is None and len(results) == n:
        return _verdict(results)
    if report is None and run.judge_error:
        return Grade(0.0, "judge error", {**details, "error": run.judge_error})
    kind, detail = report["ended"] if report and report["ended"] else ("exited", "")
    if kind in ("tampered", "output limit", "judge error"):
        return Grade(0.0, kind, {**details, "error": detail})
    status = out.status if out.status != "ok" else "crashed"  # ended before the tests did
    if status == "crashed":
        status = _refusal(out.stderr) or status
    return Grade(0.0, status, {**details, "stderr": out.stderr[-300:]})


def _stdio(code: str, gold: dict, limits: Limits, slot: int) -> Grade:
    """One sandboxed run per input, compared here; one wall-clock limit for all of them: the first input
    that meets it (or memory, process or output limits) ends the grade, the rest count as failed."""
    deadline = time.monotonic() + limits.wall_s
    results: list[str | None] = []
    n = len(gold["inputs"])
    for inp, expected in zip(gold["inputs"], gold["outputs"], strict=True):
        left = deadline - time.monotonic()
        out = run_program(code, "\n".join(inp) if isinstance(inp, list) else str(inp),
                          replace(limits, wall_s=left), slot) if left > 0 else None
        status = out.status if out is not None else "timeout"
        if status == "ok":
            results.append(None if stdout_matches(out.stdout, expected) else "wrong output")
            continue
        results.append(f"{status}: {out.stderr[-200:] if out else 'no time left'}")
        if status in _FATAL:  # the rest would cost as much; they count as failed
            details = _verdict(results + [status] * (n - len(results))).details
            return Grade(0.0, status, {**details, "error": f"{status} on input {len(results)}"})
    g = _verdict(results)
    if g.score == 0.0 and g.details["error"].startswith("crashed"):
        return Grade(0.0, _refusal(g.details["error"]) or "crashed", g.details)
    return g
