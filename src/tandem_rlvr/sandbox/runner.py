"""Run one untrusted Python program in the sandbox, or many over a bounded pool; the parent's side.

``run_program(source, stdin, limits, slot)`` makes a fresh private work directory, writes the
program and the guard (``_guard.py``) into it, starts the launcher (``_launch.py``) in a new
session with a clean environment, feeds stdin, reads stdout and stderr up to ``output_bytes``
each, and kills the whole process group (SIGKILL) at the wall-clock limit or when output
overflows. The work directory is removed afterwards. ``Outcome.status`` says how it ended:

``ok`` (exit 0), ``timeout`` (wall clock or CPU time), ``memory`` (MemoryError or the address-space
limit), ``output limit``, ``process limit`` (fork refused by RLIMIT_NPROC), ``network blocked``,
``write refused`` (outside the work directory), ``crashed`` (any other non-zero exit or signal).

``run_pool(jobs, workers)`` runs ``job(slot)`` callables on at most ``workers`` threads, each job
holding one slot (so at most ``workers`` programs run at once); as root each slot runs programs
under its own unprivileged uid (``SLOT_UID_BASE + slot``), so the process limit counts one slot's
processes only.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

from ..errors import TandemError

HERE = Path(__file__).resolve().parent
SLOT_UID_BASE = 1_990_000_000  # unprivileged uids no account uses; one per pool slot
PROGRAM_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PYTHONIOENCODING": "utf-8", "PYTHONHASHSEED": "0", "HOME": "/nonexistent", "TMPDIR": "/tmp"}
_FALLBACK_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """What one program may use. ``cpu_s`` and ``wall_s`` are seconds; memory is the address space."""

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 2048
    nproc: int = 32
    file_mb: int = 16
    output_bytes: int = 1 << 20

    def __post_init__(self):
        if min(self.wall_s, self.cpu_s, self.memory_mb, self.nproc, self.file_mb, self.output_bytes) <= 0:
            raise TandemError(f"sandbox limits must be positive, got {self}")


@dataclass
class Outcome:
    """How one program run ended: ``status`` (module docstring), exit code or signal, capped output."""

    status: str
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    wall_s: float
    isolation: dict = field(default_factory=dict)


def _world_runnable(path: str) -> bool:
    """Whether an unprivileged uid can execute ``path`` (every directory on the way searchable)."""
    real = Path(os.path.realpath(path))
    if not real.is_file() or not os.stat(real).st_mode & 0o001:
        return False
    return all(os.stat(d).st_mode & 0o001 for d in real.parents)


def sandbox_python() -> str:
    """The interpreter programs run on: this one, unless root must drop to a uid that cannot reach it."""
    if os.getuid() != 0 or _world_runnable(sys.executable):
        return sys.executable
    for p in _FALLBACK_PYTHONS:
        if os.path.exists(p) and _world_runnable(p):
            return p
    raise TandemError(f"as root the sandbox runs programs as an unprivileged user, who cannot execute "
                      f"{sys.executable} (a directory on its path is private) and no {' or '.join(_FALLBACK_PYTHONS)} "
                      "exists; install a system python3 or run as an ordinary user")


@functools.lru_cache(maxsize=None)
def sandbox_python_version() -> str:
    """``major.minor`` of the interpreter programs run on (part of the code task's verifier)."""
    python = sandbox_python()
    if python == sys.executable:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    out = subprocess.run([python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=60, env=PROGRAM_ENV)
    return out.stdout.strip() or "unknown"


def _classify(timed_out: bool, overflow: bool, report: dict, stderr: str) -> str:
    if timed_out:
        return "timeout"
    if overflow:
        return "output limit"
    sig, code = report.get("signal"), report.get("exit")
    if sig == signal.SIGXCPU:
        return "timeout"
    if sig == signal.SIGXFSZ:
        return "output limit"
    tail = stderr[-4000:]
    if code == 0 and sig is None:
        return "ok"
    markers = (("MemoryError", "memory"), ("sandbox: network refused", "network blocked"),
               ("Network is unreachable", "network blocked"), ("name resolution", "network blocked"),
               ("sandbox: write outside", "write refused"), ("Read-only file system", "write refused"),
               ("PermissionError", "write refused"), ("Resource temporarily unavailable", "process limit"),
               ("can't start new thread", "process limit"))
    found = [(tail.rfind(m), status) for m, status in markers if m in tail]
    return max(found)[1] if found else "crashed"


def run_program(source: str, stdin: str = "", limits: Limits = Limits(), slot: int = 0, guard: bool = True) -> Outcome:
    """Run ``source`` as ``__main__`` in the sandbox with ``stdin``; never raises for what the program does.

    ``guard=False`` leaves out the in-process audit hooks (``_guard.py``), so only the OS layer holds:
    for tests of that layer, never for grading.
    """
    python = sandbox_python()
    work = Path(tempfile.mkdtemp(prefix="tandem-sbx-"))
    try:
        (work / "program.py").write_text(source, encoding="utf-8")
        shutil.copyfile(HERE / "_guard.py", work / "_guard.py")
        uid = SLOT_UID_BASE + slot if os.getuid() == 0 else None
        if uid is not None:
            for p in (work, work / "program.py", work / "_guard.py"):
                os.chown(p, uid, uid)
        read_fd, write_fd = os.pipe()
        argv = [python, "-I", "-B", *(["_guard.py"] if guard else []), "program.py"]
        spec = {"work": str(work), "argv": argv, "env": PROGRAM_ENV, "uid": uid, "status_fd": write_fd,
                "cpu_s": limits.cpu_s, "memory_mb": limits.memory_mb, "nproc": limits.nproc, "file_mb": limits.file_mb}
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-I", "-S", str(HERE / "_launch.py"), json.dumps(spec)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                pass_fds=(write_fd,), start_new_session=True, env=PROGRAM_ENV)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as status:
            out, err, status_text, timed_out, overflow = _communicate(proc, stdin.encode("utf-8"), status, limits)
        wall = time.monotonic() - start
    finally:
        shutil.rmtree(work, ignore_errors=True)
    reports = [json.loads(x) for x in status_text.decode().splitlines() if x.strip()]
    iso = reports[0] if reports else {}
    report = reports[2] if len(reports) > 2 else {"signal": signal.SIGKILL}
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    return Outcome(_classify(timed_out, overflow, report, stderr), report.get("exit"), report.get("signal"),
                   stdout, stderr, wall, iso)


def _communicate(proc: subprocess.Popen, data: bytes, status, limits: Limits):
    """Feed stdin, read the three pipes until they close; SIGKILL the group at the deadline or overflow."""
    def feed():
        try:
            proc.stdin.write(data)
        except (BrokenPipeError, OSError):
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    threading.Thread(target=feed, daemon=True).start()
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray(), status: bytearray()}
    sel = selectors.DefaultSelector()
    for f in bufs:
        sel.register(f, selectors.EVENT_READ)
    deadline = time.monotonic() + limits.wall_s
    timed_out = overflow = False
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        for key, _ in sel.select(min(left, 1.0)):
            chunk = os.read(key.fileobj.fileno(), 1 << 16)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            bufs[key.fileobj] += chunk
            if key.fileobj is not status and len(bufs[key.fileobj]) > limits.output_bytes:
                overflow = True
        if overflow:
            break
    if timed_out or overflow:
        _stop(proc, bytes(bufs[status]))
    sel.close()
    proc.wait()
    for f in (proc.stdout, proc.stderr):
        f.close()
    cap = limits.output_bytes
    return bytes(bufs[proc.stdout][:cap]), bytes(bufs[proc.stderr][:cap]), bytes(bufs[status]), timed_out, overflow


def _stop(proc: subprocess.Popen, status: bytes) -> None:
    """End a program and everything it started, and return once they are gone.

    With a PID namespace: SIGKILL its init, which takes every process of the namespace down; the
    launcher waits for that and exits, so its exit means the namespace is empty (a slot's next
    program then starts with no leftovers counting against its process limit). Without one, or if
    the launcher does not finish, SIGKILL the launcher's process group (a process that left the
    group with ``setsid`` escapes this; docs/tasks.md).
    """
    lines = [json.loads(x) for x in status.decode().splitlines() if x.strip()]
    init = next((x["init"] for x in lines if "init" in x), None)
    if init is not None and "pid" in (lines[0].get("namespaces") or ""):
        try:
            os.kill(init, signal.SIGKILL)
            proc.wait(timeout=30)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher's session: launcher, its init, the program's group
    except ProcessLookupError:
        pass


def run_pool(jobs: list[Callable[[int], T]], workers: int) -> list[T]:
    """``[job(slot) for job in jobs]`` on at most ``workers`` threads; each running job holds its own slot."""
    if workers < 1:
        raise TandemError(f"sandbox workers must be >= 1, got {workers}")
    slots: queue.SimpleQueue[int] = queue.SimpleQueue()
    for s in range(workers):
        slots.put(s)

    def call(job):
        slot = slots.get()
        try:
            return job(slot)
        finally:
            slots.put(slot)

    if workers == 1 or len(jobs) <= 1:
        return [call(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(call, jobs))
