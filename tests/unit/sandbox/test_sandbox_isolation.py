"""Nothing survives a sandboxed run and nothing outside it is visible (tandem_rlvr.sandbox).

Programs here try what a policy farming the code reward would: remember across runs (SysV shared
memory, POSIX message queues, the kernel keyring, files in every world-writable place of this
machine and the usual ones: ``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock``), read the answer
key (the shipped benchmark files, with each benchmark's reference solution or expected output) and
look for the grader in ``/proc``. Each first shows its mechanism works inside one run (it stores and
reads back), then that a later run, in the same slot or another, finds nothing, and that a cheater
which would pass with the answer key in reach fails on every shipped code benchmark.
"""

from __future__ import annotations

import json
import os
import platform
import uuid

import pytest

from tandem_rlvr.sandbox import Limits, run_program
from tandem_rlvr.tasks.code import CodeTask
from tandem_rlvr.tasks.code_data import CODE_BENCHMARKS, CODE_DIR, load_code

FAST = Limits(wall_s=30, cpu_s=20)
_COMMON = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/run/shm", "/dev/mqueue")


def _isolated() -> bool:
    return bool(run_program("pass", "", FAST).isolation.get("private_root"))


pytestmark = pytest.mark.skipif(not _isolated(), reason="no private root on this OS (docs/tasks.md, The sandbox)")


def _world_writable_dirs(depth: int = 3) -> list[str]:
    """Directories of this machine that anyone may write to (a bounded walk of /, without /proc and /sys)."""
    found, todo = set(_COMMON), [("/", 0)]
    while todo:
        d, level = todo.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False) and e.path not in ("/proc", "/sys"):
                if e.stat(follow_symlinks=False).st_mode & 0o002:
                    found.add(e.path)
                if level + 1 < depth:
                    todo.append((e.path, level + 1))
    return sorted(found)


_LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nTOKEN = {token!r}\n"
STORE = {  # mechanism -> (store source, recall source); recall prints "found" only if it reads the token
    "sysv shm": ("""
key = int(TOKEN[-6:], 16)
libc.shmat.restype = ctypes.c_void_p
sid = libc.shmget(key, 4096, 0o1000 | 0o666)
addr = libc.shmat(sid, None, 0)
ctypes.memmove(addr, TOKEN.encode(), len(TOKEN))
print("stored" if ctypes.string_at(addr, len(TOKEN)).decode() == TOKEN else "not stored")
""", """
key = int(TOKEN[-6:], 16)
libc.shmat.restype = ctypes.c_void_p
sid = libc.shmget(key, 0, 0)
print("found" if sid >= 0 and ctypes.string_at(libc.shmat(sid, None, 0), len(TOKEN)).decode() == TOKEN else "nothing")
"""),
    "posix mqueue": ("""
q = libc.mq_open(("/" + TOKEN).encode(), os.O_CREAT | os.O_RDWR, 0o666, None)
ok = q >= 0 and libc.mq_send(q, TOKEN.encode(), len(TOKEN), 0) == 0
print("stored" if ok else f"not stored {ctypes.get_errno()}")
""", """
q = libc.mq_open(("/" + TOKEN).encode(), os.O_RDONLY | os.O_NONBLOCK)
buf = ctypes.create_string_buffer(1 << 16)
print("found" if q >= 0 and libc.mq_receive(q, buf, 1 << 16, None) > 0 else "nothing")
"""),
    "keyring": ("""
kid = libc.syscall(248, b"user", TOKEN.encode(), TOKEN.encode(), len(TOKEN), -4)  # add_key to the user keyring
print("stored" if kid > 0 else f"not stored {ctypes.get_errno()}")
""", """
kid = libc.syscall(249, b"user", TOKEN.encode(), None, 0)  # request_key
print("found" if kid > 0 else "nothing")
"""),
    "files": ("""
n = 0
for d in PLACES:
    try:
        with open(os.path.join(d, TOKEN), "w") as f:
            f.write(TOKEN)
        n += open(os.path.join(d, TOKEN)).read() == TOKEN
    except OSError:
        pass
print("stored" if n else "not stored")
""", """
print("found" if any(os.path.exists(os.path.join(d, TOKEN)) for d in PLACES) else "nothing")
"""),
}


@pytest.mark.parametrize("mechanism", sorted(STORE))
def test_nothing_a_program_stores_is_found_by_a_later_run(mechanism):
    if mechanism == "keyring" and platform.machine() != "x86_64":
        pytest.skip("the keyring syscall numbers here are x86_64's")
    token = "tandem" + uuid.uuid4().hex[:12]
    head = _LIBC.format(token=token) + f"PLACES = {_world_writable_dirs()!r}\n"
    store, recall = STORE[mechanism]
    # guard=False: the OS layer alone must hold (C code bypasses the guard's audit hooks)
    first = run_program(head + store + recall, "", FAST, slot=0, guard=False)  # stores, reads it back within the run
    assert first.stdout.split() == ["stored", "found"], (first.stdout, first.stderr[-500:])
    for slot in (0, 1):
        later = run_program(head + recall, "", FAST, slot=slot, guard=False)
        assert (later.status, later.stdout.strip()) == ("ok", "nothing"), (slot, later.stdout, later.stderr[-500:])
    if mechanism == "files":  # and nothing landed on this machine's disk
        assert not [d for d in _world_writable_dirs() if os.path.exists(os.path.join(d, token))]


def test_a_program_sees_neither_the_project_nor_other_processes():
    """A program looks for the shipped benchmark files, the project's sources, any ``*.jsonl`` in a
    bounded walk of ``/``, and any process of the grader in ``/proc``: it finds only itself."""
    src_dir = os.path.dirname(os.path.dirname(CODE_DIR))
    probe = f"""
import json, os, time
found = [p for p in ({str(CODE_DIR)!r}, {src_dir!r}, {os.getcwd()!r}, "/root", "/home") if os.path.exists(p)]
end = time.monotonic() + 10
for d, dirs, files in os.walk("/"):
    if d == "/proc" or time.monotonic() > end:
        dirs[:] = []
        continue
    found += [os.path.join(d, f) for f in files if f.endswith((".jsonl", ".parquet", ".py")) and "python3" not in d]
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) != os.getpid():
        found.append("/proc/" + pid)
print(json.dumps(found[:20]))
"""
    out = run_program(probe, "", FAST, guard=False)
    visible = json.loads(out.stdout)
    # its own files (/program/program.py, /program/_guard.py) and nothing else
    assert out.status == "ok" and [p for p in visible if not p.startswith("/program/")] == [], visible


_ROWS = {"humaneval": "HumanEval/0", "mbpp": "2", "mbpp-full": "2", "apps-sample": "1"}


def _cheater(benchmark: str, row: dict) -> str:
    """A response that answers from the shipped file's reference solution (or expected output) when it can
    read it, and otherwise gives a wrong answer."""
    path, pid, gold = str(CODE_DIR / CODE_BENCHMARKS[benchmark]), row["problem_id"], row["gold"]
    kind = gold["kind"]
    take = {"humaneval": 'r["prompt"] + r["canonical_solution"]', "asserts": 'r["code"]',
            "call": 'json.loads(r["solutions"])[0]'}.get(kind)
    ident = {"humaneval": "task_id", "asserts": "task_id"}.get(kind, "problem_id")
    if kind == "stdio":
        use, fallback = ('io = json.loads(r["input_output"])\n        data = sys.stdin.read()\n'
                         '        print(dict(zip(io["inputs"], io["outputs"])).get(data, ""), end="")'), "print(0)"
    else:
        name = gold.get("entry_point") or gold.get("fn_name") or row["solution"].split("def ", 1)[1].split("(")[0]
        use, fallback = f"exec({take}, globals())", f"def {name}(*a, **k):\n        return None"
    return f"""```python
import json, sys
solved = False
try:
    for line in open({path!r}):
        r = json.loads(line)
        if str(r[{ident!r}]) == {pid!r}:
            solved = True
            {use.replace(chr(10) + '        ', chr(10) + '            ')}
except OSError:
    pass
if not solved:
    {fallback}
```"""


@pytest.mark.parametrize("bench", sorted(_ROWS))
def test_a_program_that_reads_the_answer_key_scores_nothing(bench):
    row = next(r for r in load_code(bench) if r["problem_id"] == _ROWS[bench])
    task = CodeTask(limits=FAST, workers=1)
    (g,) = task.grade([_cheater(bench, row)], [row])
    assert g.score == 0.0, (g.reason, g.details)
    (ok,
     ) = task.grade([f"```python\n{row['solution']}\n```"], [row])  # the reference itself passes: the row is gradable
    assert ok.score == 1.0, (ok.reason, ok.details)
