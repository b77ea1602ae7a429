"""What crosses from a program to its judge is data: hostile replies are verdicts, never crashes.

A program can take over its side of the call channel (here by replacing the codec ``_serve.py``
answers with, or by writing to every descriptor); whatever it sends, grading returns a ``Grade``
with score 0 and a reason. Also: an exception the program raises cannot steer the test's control
flow (``StopIteration`` ending a ``map`` early), and values arrive as plain data of their own type.
"""

from __future__ import annotations

import json

import pytest

from tandem_rlvr.sandbox import Limits
from tandem_rlvr.sandbox._wire import WireError, decode, encode
from tandem_rlvr.tasks.code import CodeTask
from tandem_rlvr.tasks.code_data import load_code

TASK = CodeTask(limits=Limits(wall_s=60, cpu_s=30), workers=2)
HE0 = next(r for r in load_code("humaneval", 1))
WRONG = "def has_close_elements(numbers, threshold):\n    return 'yes'\n"

REPLIES = [  # what the program's side sends as the value of every call -> the reason
    ("GARBAGE", "tampered"),  # the reply line '{"ok":GARBAGE}' is not JSON
    ('{"zz":1}', "tampered"),  # no tag of the codec
    ('{"s":[[1]]}', "tampered"),  # a set of lists: unhashable
    ('{"d":[[1]]}', "tampered"),  # a dict entry that is no pair
    ("[" * 100_000 + "]" * 100_000, "tampered"),  # nesting past any recursion limit
    ('"' + "x" * (2 << 20) + '"', "output limit"),  # a reply over the 1 MiB cap
    ('{"c":[1' + "0" * 400 + ',0]}', "tampered"),  # a complex number no float holds: complex() overflows
    ("null", "failed test 1"),  # a value, just a wrong one
    ('{"h":99}', "failed test 1"),  # a reference to nothing: an object equal to nothing here
]


@pytest.mark.parametrize("reply,reason", REPLIES, ids=[r[:12] for r, _ in REPLIES])
def test_any_reply_of_a_program_is_a_verdict_with_a_reason(reply, reason):
    takeover = f"import sys\nsys.modules['_wire'].encode = lambda value, other: {reply!r}\n"
    (g,) = TASK.grade([WRONG + takeover], [HE0])
    assert (g.score, g.reason) == (0.0, reason)


def test_the_old_harness_crashes_are_now_verdicts():
    """The issue's two: a result line that is not JSON, and one holding a dict instead of a list."""
    forged = ["import sys\nfor _v in list(globals().values()):\n    if isinstance(_v, str) and len(_v) == 32:\n"
              f"        print('\\n' + _v + {text!r}, flush=True)\nsys.exit(0)\n" for text in ("not json", '{"a": 1}')]
    grades = TASK.grade([WRONG + f for f in forged], [HE0, HE0])
    assert [(g.score, g.reason) for g in grades] == [(0.0, "crashed"), (0.0, "crashed")]


def test_writes_to_every_descriptor_are_tampering():
    spray = "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'\\xff\\xfe{\"ok\": true}\\n')\n" \
            "    except OSError:\n        pass\n"
    (g,) = TASK.grade([HE0["gold"]["prompt"] + HE0["solution"] + spray], [HE0])
    assert (g.score, g.reason) == (0.0, "tampered")


def _asserts(*tests: str) -> dict:
    return {"problem_id": "x", "gold": {"kind": "asserts", "header": "", "setup": "", "tests": list(tests)}}


def test_a_program_raising_stopiteration_cannot_end_a_tests_map_early():
    row = _asserts("assert all(map(lambda x: double(x) == 2 * x, [1, 2, 3]))")
    forged, twin = "def double(x):\n    raise StopIteration\n", "def double(x):\n    return 2 * x\n"
    assert [g.score for g in TASK.grade([forged, twin], [row, row])] == [0.0, 1.0]


def test_values_cross_as_plain_data_of_their_own_type():
    from collections import Counter, namedtuple

    Point = namedtuple("Point", "x y")
    values = [None, True, 3, 2 ** 100, -0.0, float("inf"), "s\udcff", [1, (2, 3)], {1: "a", (2,): {3}},
              frozenset({4}), b"\x00\xff", 1 + 2j, int, Point(1, 2), Counter("aab")]
    back = decode(encode(values, lambda obj: {"h": 0}), lambda tag, key: (tag, key))
    assert back == [None, True, 3, 2 ** 100, -0.0, float("inf"), "s\udcff", [1, (2, 3)], {1: "a", (2,): {3}},
                    frozenset({4}), b"\x00\xff", 1 + 2j, int, (1, 2), {"a": 2, "b": 1}]
    assert [type(v) for v in back[-2:]] == [tuple, dict]  # subclasses arrive as their base type, without methods
    assert decode(encode(object(), lambda obj: {"h": 7}), lambda tag, key: (tag, key)) == ("h", 7)
    for bad in ('{"a":1,"b":2}', '{"t":1}', '{"c":["x",1]}', '{"x":"1e5"}', '{"y":"eval"}', "nope"):
        with pytest.raises(WireError):
            decode(bad, lambda tag, key: None)
    assert json.loads(encode([1.5], None)) == [1.5]
