"""The code verifier: a response's program runs against unit tests in the sandbox; reward = all pass.

The ``code`` task (``tasks.code.CodeTask``: loader and prompts) grades with it, and so does the code
world's build (``world.code``); it sits here beside the math verifier (``rewards.math``) so that
neither the world nor the verifier depends on the task registry.

Answer extraction (``extract_code``): the last fenced code block labelled python/py/python3 or
unlabelled (an unclosed last fence, a response cut at the token limit, counts up to the end), else
the whole completion; nothing but whitespace is "no code found".

How each benchmark's program is assembled and tested (rows from ``code_data``):

- HumanEval: the prompt (header and docstring) + the extracted code + the benchmark's ``check``
  function; the one test is ``check(entry_point)``. A response that repeats the whole function
  works too (the later definition wins), as does a bare body that continues the prompt.
- MBPP: the test imports, the code, the setup code, then each assert run as its own test.
- APPS call-based: a header of common imports (``typing``, ``math``, ``collections``, ...), the code;
  each (arguments, expected) pair is one test (``Solution().fn`` when a ``class Solution`` exists).
- APPS stdin/stdout: the code alone, one sandboxed run per input; stdout must equal the expected
  output line by line (trailing spaces and blank lines ignored), else token by token.

In-process tests report through a result line that starts with a per-run random nonce (given on
stdin before the program starts), so a program that prints "passed" or exits early scores 0.

Within one ``grade_programs`` call (one ``CodeTask.grade``) a program is run once per distinct
(extracted code less trailing whitespace, tests) pair and its grade shared by every response that
carries it (a program that reads the clock or a random source gets one verdict there, not one per
copy). A GRPO group often writes one program several times.

``Grade.score`` is 1.0 iff every test passes (binary, as the replication); ``details`` hold
``pass_fraction`` and ``tests``. Reasons: ``passed``, ``failed test K`` (the first failing test,
1-based), ``timeout``, ``memory``, ``output limit``, ``process limit``, ``network blocked``,
``write refused``, ``crashed``, ``no code found``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from functools import partial

from ..sandbox import Limits, run_pool, run_program, sandbox_python_version
from .grade import Grade

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PY_LABELS = {"", "python", "py", "python3"}
APPS_HEADER = ("from typing import *\nimport math, sys, collections, itertools, heapq, bisect, functools, re, "
               "string\nfrom collections import *\nfrom itertools import *\nfrom functools import *\n")
_HARNESS = '''
def _tandem_report():
    import json as _j
    _results = []
    for _t in _TANDEM_TESTS:
        try:
            exec(_t, globals())
            _results.append(None)
        except BaseException as _e:
            _results.append(f"{type(_e).__name__}: {_e}"[:300])
    print("\\n" + _TANDEM_NONCE + _j.dumps(_results), flush=True)


_tandem_report()
'''
_APPS_CHECK = '''
def _tandem_apps_check(fn_name, args, expected):
    import json as _j
    fn = getattr(Solution(), fn_name) if "Solution" in globals() and isinstance(Solution, type) else globals()[fn_name]
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


def _in_process(code: str, gold: dict) -> tuple[str, list[str]]:
    """(program source, test snippets) of an in-process benchmark (module docstring)."""
    kind = gold["kind"]
    if kind == "humaneval":
        return f"{gold['prompt']}{code}\n\n{gold['test']}\n", [f"check({gold['entry_point']})"]
    if kind == "asserts":
        return f"{gold['header']}\n{code}\n\n{gold['setup']}\n", list(gold["tests"])
    if kind == "call":
        tests = [f"_tandem_apps_check({gold['fn_name']!r}, {json.dumps(a)!r}, {json.dumps(o)!r})"
                 for a, o in zip(gold["inputs"], gold["outputs"], strict=True)]
        return f"{APPS_HEADER}\n{code}\n{_APPS_CHECK}", tests
    raise ValueError(f"unknown test kind {kind!r}")


def harness(source: str, tests: list[str]) -> str:
    """``source`` with the nonce read first and the tests run (and reported) after it."""
    return (f"import sys as _tandem_sys\n_TANDEM_NONCE = _tandem_sys.stdin.readline().strip()\n"
            f"{source}\n_TANDEM_TESTS = {tests!r}\n{_HARNESS}")


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
    return f"code@1:py{sandbox_python_version()}"


def grade_programs(responses: list[str], golds: list, limits: Limits, workers: int) -> list[Grade]:
    """Grade each response against its gold test description (a dict, or its JSON text), ``workers``
    programs at a time; one sandbox run per distinct (program, tests) pair (module docstring)."""
    if len(responses) != len(golds):
        raise ValueError(f"{len(responses)} responses for {len(golds)} rows")
    golds = [json.loads(g) if isinstance(g, str) else g for g in golds]
    keys = [((extract_code(r) or "").rstrip(), json.dumps(g, sort_keys=True))  # trailing blanks mean nothing
            for r, g in zip(responses, golds)]
    first: dict = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    order = list(first.values())
    graded = run_pool([partial(grade_one, responses[i], golds[i], limits) for i in order], workers)
    by_key = {keys[i]: g for i, g in zip(order, graded)}
    return [by_key[k] for k in keys]


def grade_one(response: str, gold: dict, limits: Limits, slot: int = 0) -> Grade:
    """Grade one response in sandbox slot ``slot``."""
    code = extract_code(response)
    if code is None:
        return Grade(0.0, "no code found", {"pass_fraction": 0.0, "tests": 0})
    if gold["kind"] == "stdio":
        return _stdio(code, gold, limits, slot)
    source, tests = _in_process(code, gold)
    nonce = secrets.token_hex(16)
    out = run_program(harness(source, tests), nonce + "\n", limits, slot)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(nonce):
            return _verdict(json.loads(line[len(nonce):]))
    status = out.status if out.status != "ok" else "crashed"  # exited before the tests reported
    if status == "crashed":
        status = _refusal(out.stderr) or status
    return Grade(0.0, status, {"pass_fraction": 0.0, "tests": len(tests), "stderr": out.stderr[-300:]})


def _stdio(code: str, gold: dict, limits: Limits, slot: int) -> Grade:
    results: list[str | None] = []
    for inp, expected in zip(gold["inputs"], gold["outputs"], strict=True):
        inp = "\n".join(inp) if isinstance(inp, list) else str(inp)
        out = run_program(code, inp, limits, slot)
        if out.status != "ok":
            results.append(f"{out.status}: {out.stderr[-200:]}")
            if out.status in _FATAL:  # the rest would cost as much; they count as failed
                results += [out.status] * (len(gold["inputs"]) - len(results))
                g = _verdict(results)
                return Grade(0.0, out.status, g.details)
        else:
            results.append(None if stdout_matches(out.stdout, expected) else "wrong output")
    g = _verdict(results)
    if g.score == 0.0 and results and results[next(i for i, r in enumerate(results) if r)].startswith("crashed"):
        return Grade(0.0, _refusal(g.details["error"]) or "crashed", g.details)
    return g
