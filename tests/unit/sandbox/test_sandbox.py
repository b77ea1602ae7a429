"""The code sandbox contains what untrusted programs do: each hazard ends in a recorded status.

Every test runs real programs in the real sandbox (tandem_rlvr.sandbox). Tests of the OS layer
alone (``guard=False``) skip where this OS does not give the sandbox that layer (no namespaces, not
root). The fork bomb runs last, with a low process limit.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.sandbox import Limits, run_pool, run_program
from tandem_rlvr.sandbox.runner import PROGRAM_ENV, run_uid

FAST = Limits(wall_s=20, cpu_s=20)


def _isolated() -> dict:
    return run_program("pass", "", FAST).isolation


def test_a_program_reads_its_stdin_and_its_stdout_comes_back():
    out = run_program("print(input()[::-1])", "abc\n", FAST)
    assert (out.status, out.exit_code, out.stdout) == ("ok", 0, "cba\n")


def test_no_inherited_environment_reaches_the_program(monkeypatch):
    monkeypatch.setenv("TANDEM_TEST_SECRET", "hunter2")
    out = run_program("import os\nprint(sorted(os.environ))", "", FAST)
    assert out.stdout.strip() == str(sorted(PROGRAM_ENV)) and "hunter2" not in out.stdout


def test_each_run_has_a_fresh_work_directory_that_is_removed_after():
    first = run_program("import os\nopen('left.txt', 'w').write('x')\nprint(os.getcwd())", "", FAST)
    second = run_program("import os\nprint(os.path.exists('left.txt'), os.listdir('.'))", "", FAST)
    assert first.status == "ok" and second.stdout.split(" ", 1)[0] == "False"
    if not first.isolation.get("private_root"):  # else /work is a path of its own, gone with its tmpfs
        assert not os.path.exists(first.stdout.strip())  # the first run's directory is gone


def test_an_infinite_loop_is_killed_at_the_wall_clock_limit():
    out = run_program("while True:\n    pass", "", Limits(wall_s=2, cpu_s=60))
    assert out.status == "timeout" and out.exit_code is None


def test_a_sleeping_program_is_killed_at_the_wall_clock_limit():
    out = run_program("import time\ntime.sleep(600)", "", Limits(wall_s=2, cpu_s=60))
    assert out.status == "timeout"


def test_cpu_time_is_limited_even_within_the_wall_clock():
    out = run_program("while True:\n    pass", "", Limits(wall_s=300, cpu_s=1))
    assert out.status == "timeout" and out.wall_s < 300


def test_a_10_gb_allocation_fails_with_memory_status():
    out = run_program("x = bytearray(10 * 1024 ** 3)\nprint('allocated')", "", FAST)
    assert out.status == "memory" and "allocated" not in out.stdout


@pytest.mark.parametrize("guard", [True, False])
def test_a_network_call_is_refused(guard):
    if not guard and "net" not in _isolated().get("namespaces", ""):
        pytest.skip("no network namespace on this OS: the guard is the only network barrier")
    src = "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=5)\nprint('connected')"
    out = run_program(src, "", FAST, guard=guard)
    assert out.status == "network blocked" and "connected" not in out.stdout


@pytest.mark.parametrize("guard", [True, False])
def test_a_write_outside_the_work_directory_is_refused(guard):
    if not guard and os.getuid() != 0:
        pytest.skip("the OS layer drops to an unprivileged uid only when the grader runs as root")
    here = Path(__file__).resolve().parent  # a writable place outside the tmpfs-covered dirs, which hide their paths
    hidden = ("/tmp", "/var/tmp", "/dev/shm")
    base = Path.home() if str(here).startswith(hidden) else here  # a clone under /tmp: the home directory instead
    target = base / f"pwned-{os.getpid()}.txt"
    try:
        src = (f"import os\nos.makedirs({str(base)!r}, exist_ok=True)\n"
               f"open({str(target)!r}, 'w').write('x')\nprint('wrote')")
        out = run_program(src, "", FAST, guard=guard)  # in a private root the directory is not there: making it fails
        assert out.status == "write refused" and not target.exists() and "wrote" not in out.stdout
    finally:
        target.unlink(missing_ok=True)


def test_a_write_to_tmp_lands_in_a_private_tmpfs_without_the_guard():
    if not _isolated().get("private_root"):
        pytest.skip("no mount namespace on this OS")
    name = f"/tmp/tandem-sandbox-test-{os.getpid()}"
    out = run_program(f"open({name!r}, 'w').write('x')\nprint(open({name!r}).read())", "", FAST, guard=False)
    assert out.stdout.strip() == "x" and not os.path.exists(name)


def test_output_beyond_the_cap_is_cut_and_reported():
    out = run_program("import sys\nwhile True:\n    sys.stdout.write('y' * 65536)", "",
                      Limits(wall_s=60, output_bytes=1 << 20))
    assert out.status == "output limit" and len(out.stdout) <= 1 << 20


def test_the_pool_never_runs_more_jobs_than_workers_and_keeps_order():
    lock, running, peak = threading.Lock(), [0], [0]

    def job(i):
        def run(slot):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            out = run_program(f"print({i})", "", FAST, slot)
            with lock:
                running[0] -= 1
            return int(out.stdout), slot

        return run

    results = run_pool([job(i) for i in range(6)], workers=2)
    assert [r[0] for r in results] == list(range(6)) and peak[0] <= 2 and {r[1] for r in results} <= {0, 1}


def test_bad_limits_are_an_error():
    with pytest.raises(TandemError, match="positive"):
        Limits(wall_s=0)


def test_zz_a_fork_bomb_is_contained_and_leaves_no_process_behind():
    """Last in the file: a fork bomb under a process limit of 16 and a 3 s wall clock; the slot is reusable at once."""
    src = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    out = run_program(src, "", Limits(wall_s=3, cpu_s=10, nproc=16), slot=7)
    assert out.status in ("timeout", "process limit")
    if os.getuid() == 0:  # every process of the slot's uid is gone
        left = [p for p in os.listdir("/proc") if p.isdigit() and _uid(p) == run_uid(7)]
        assert left == []
    # the slot's next program starts clean: its own 4 children fit under the same process limit
    forks = "import os\nfor _ in range(4):\n    if os.fork() == 0:\n        os._exit(0)\n    os.wait()\nprint('ok')"
    after = run_program(forks, "", Limits(wall_s=30, nproc=16), slot=7)
    assert (after.status, after.stdout) == ("ok", "ok\n")


def _uid(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


def test_a_judged_program_cannot_read_the_expected_value_from_any_process():
    """The expected value is only in the judge (and the grader); a program that searches every
    process's stdin pipe, environment and memory for it finds nothing and fails."""
    from tandem_rlvr.sandbox import run_judged

    secret = f"s3cr3t-{os.getpid()}-{threading.get_ident() % 1000}"
    thief = '''
import os, re
def _search():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for part in ("fd/0", "environ", "cmdline"):
            try:
                m = re.search(rb"s3cr3t-[0-9]+-[0-9]+", open(f"/proc/{pid}/{part}", "rb").read(1 << 16))
                if m:
                    return m.group().decode()
            except OSError:
                pass
        try:
            maps, mem = open(f"/proc/{pid}/maps").read().splitlines(), open(f"/proc/{pid}/mem", "rb")
        except OSError:
            continue
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            try:
                if "rw" in line.split()[1] and hi - lo < 1 << 26:
                    mem.seek(lo)
                    m = re.search(rb"s3cr3t-[0-9]+-[0-9]+", mem.read(hi - lo))
                    if m:
                        return m.group().decode()
            except (OSError, ValueError, OverflowError):
                pass
    return "not found"
def answer():
    return _search()
'''
    spec = {"context": [], "imports": [], "remote": ["answer"], "tests": [f"assert answer() == {secret!r}"]}
    run = run_judged(thief, spec, Limits(wall_s=60, cpu_s=30))
    assert run.report["ended"] is None and run.report["results"][0].startswith("AssertionError")
    honest = run_judged(f"def answer():\n    return {secret!r}\n", spec, Limits(wall_s=60, cpu_s=30))
    assert honest.report == {"results": [None], "ended": None}
