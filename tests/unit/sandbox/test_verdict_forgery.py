"""Programs that tamper with the code verifier instead of solving the task score 0; their correct twins pass.

Each forger is a wrong solution (it returns a string, or prints a wrong answer) plus a trick aimed
at the harness: a result line in the old harness's format (its nonce read from the globals), a
replaced ``json.dumps``, ``print``, ``exec`` or builtins the tests use, an ``atexit`` hook, an
early exit, a profile hook rewriting test lists, writes to every open descriptor, an object equal
to everything, the answer key read from its own source file, and a write to the judge's report pipe
through ``/proc`` with ``ctypes`` (past the guard). Each runs on HumanEval, MBPP, APPS (call-based
and stdin/stdout) and the tiny code world. Under the old in-process harness most of these scored
1.0; the twin is the same trick around the reference solution (or, for tricks that break any
program, the reference alone) and must still pass.
"""

from __future__ import annotations

import pytest

from tandem_rlvr.sandbox import Limits
from tandem_rlvr.tasks.code import CodeTask
from tandem_rlvr.tasks.code_data import load_code
from tandem_rlvr.world.code import code_rows

TASK = CodeTask(limits=Limits(wall_s=60, cpu_s=30), workers=2)


def _row(benchmark: str, problem_id: str) -> dict:
    return next(r for r in load_code(benchmark) if r["problem_id"] == problem_id)


def _cases() -> dict:
    """benchmark -> (row, function under test or None for stdin/stdout, the reference, a wrong program)."""
    he, mbpp = _row("humaneval", "HumanEval/0"), _row("mbpp", "2")
    call, stdio, tiny = _row("apps-sample", "4184"), _row("apps-sample", "111"), code_rows("test", 1)[0]
    return {
        "humaneval": (he, "has_close_elements", he["gold"]["prompt"] + he["solution"],
                      "def has_close_elements(numbers, threshold):\n    return 'yes'\n"),
        "mbpp": (mbpp, "similar_elements", mbpp["solution"], "def similar_elements(a, b):\n    return 'x'\n"),
        "apps-call": (call, "is_prime", call["solution"], "def is_prime(n):\n    return 'yes'\n"),
        "apps-stdio": (stdio, None, stdio["solution"], "print('wrong')\n"),
        "tiny-code": (tiny, tiny["gold"]["tests"][0].split()[1].split("(")[0], tiny["solution"],
                      "def " + tiny["gold"]["tests"][0].split()[1].split("(")[0] + "(n):\n    return 'n'\n"),
    }


CASES = _cases()

FORGERS = {  # name -> (code placed after the solution, whether a correct program survives it: True, False, or
    # "judged": where its prints are no answer, i.e. on every benchmark but stdin/stdout)
    "result lines in the old and new formats": ('''
import json as _json
for _v in list(globals().values()):
    if isinstance(_v, str) and len(_v) == 32:  # the old harness's nonce was a global
        print("\\n" + _v + _json.dumps([None] * 50), flush=True)
print('{"ready":1}\\n{"ok":true}\\n{"results":[null,null,null],"ended":null}', flush=True)
''', "judged"),
    "json.dumps replaced": ('''
import json
json.dumps = lambda *a, **k: "[null]"
''', True),
    "print replaced": ('''
import builtins
_print = builtins.print
builtins.print = lambda *a, **k: _print(*[x.split("[")[0] + "[null]" if isinstance(x, str) and "[" in x else x
                                          for x in a], **k)
''', True),
    "exec replaced": ('''
import builtins
builtins.exec = lambda *a, **k: None
''', True),
    "an atexit hook prints a passing line": ('''
import atexit, os
def _fake():
    for _v in list(globals().values()):
        if isinstance(_v, str) and len(_v) == 32:
            print("\\n" + _v + "[null]", flush=True)
    print('{"results":[null],"ended":null}', flush=True)
    os._exit(0)
atexit.register(_fake)
''', "judged"),
    "a profile hook rewrites lists of tests": ('''
import sys
def _rewrite(frame, event, arg):
    if event == "call":
        for _v in list(frame.f_globals.values()):
            if type(_v) is list and _v and all(type(t) is str for t in _v):
                _v[:] = ["pass"] * len(_v)
sys.setprofile(_rewrite)
''', True),
    "the judge's report pipe through /proc with ctypes": ('''
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
for _pid in os.listdir("/proc"):
    try:
        if _pid.isdigit() and b"_judge.py" in open(f"/proc/{_pid}/cmdline", "rb").read():
            _fd = _libc.open(f"/proc/{_pid}/fd/1".encode(), os.O_WRONLY)
            if _fd >= 0:
                os.write(_fd, b'{"results":[null],"ended":null}\\n')
    except OSError:
        pass
''', True),
    "exit 0 before the tests": ("import sys\nsys.exit(0)\n", False),
    "builtins the tests use replaced": ('''
import builtins
builtins.set = builtins.sorted = builtins.tuple = builtins.abs = builtins.isinstance = lambda *a, **k: 0
''', False),
    "writes to every open descriptor": ('''
import os
for _fd in range(3, 64):
    for _msg in (b'{"ready":1}\\n', b'{"ok":true}\\n', b'{"results":[null],"ended":null}\\n'):
        try:
            os.write(_fd, _msg)
        except OSError:
            pass
''', False),
}
FN_FORGERS = {  # tricks on the function under test: {fn} is its name
    "an object equal to everything": '''
class _Equal(str):
    __eq__ = lambda self, other: True
    __ne__ = lambda self, other: False
    __hash__ = lambda self: 0
class _Anything:
    __eq__ = lambda self, other: True
    __ne__ = lambda self, other: False
    __bool__ = lambda self: True
    __hash__ = lambda self: 0
_calls = [0]
def {fn}(*a, **k):
    _calls[0] += 1
    return _Equal("") if _calls[0] % 2 else _Anything()
''',
    "the answer key from its own source": '''
import ast, re
_key = {{}}
for _m in re.finditer(r"assert (?:candidate|{fn})\\((.*)\\) == (.*)", open(__file__).read()):
    try:
        _key[repr(ast.literal_eval("(" + _m.group(1) + ",)"))] = ast.literal_eval(_m.group(2))
    except Exception:
        pass
def {fn}(*a):
    return _key.get(repr(a), "?")
''',
    "exit 0 during a test": '''
import os
def {fn}(*a, **k):
    os._exit(0)
''',
}


def _programs(bench: str) -> list[tuple[str, str, str]]:
    """(trick, forged program, its correct twin) for each trick that applies to ``bench``."""
    row, fn, good, bad = CASES[bench]
    keep = {True: True, False: False, "judged": fn is not None}
    out = [(name, bad + trick, good + trick if keep[keeps] else good) for name, (trick, keeps) in FORGERS.items()]
    return out + [(name, bad + trick.format(fn=fn), good) for name, trick in FN_FORGERS.items() if fn is not None]


@pytest.mark.parametrize("bench", list(CASES))
def test_forging_programs_score_zero_and_their_correct_twins_pass(bench):
    row, programs = CASES[bench][0], _programs(bench)
    grades = TASK.grade([p for _, f, t in programs for p in (f, t)], [row] * (2 * len(programs)))
    forged = {name: (g.score, g.reason)
              for (name, _, _), g in zip(programs, grades[::2], strict=False) if g.score != 0.0}
    twins = {name: (g.score, g.reason)
             for (name, _, _), g in zip(programs, grades[1::2], strict=False) if g.score != 1.0}
    assert (forged, twins) == ({}, {})
    assert all(g.reason != "passed" for g in grades[::2])
