"""Run one untrusted Python program in the sandbox, or many over a bounded pool; the parent's side.

``run_program(source, stdin, limits, slot)`` makes a fresh private work directory, writes the
program and the guard (``_guard.py``) into it, starts the launcher (``_launch.py``) in a new
session with a clean environment, feeds stdin, reads stdout and stderr up to ``output_bytes``
each, and kills the whole process group (SIGKILL) at the wall-clock limit or when output
overflows. The work directory is removed afterwards. Its two halves, ``Launch`` (start a program
with given pipes) and ``drain`` (read pipes to a deadline or a cap), also make the judged runs of
``sandbox.judged``. ``Outcome.status`` says how it ended:

``ok`` (exit 0), ``timeout`` (wall clock or CPU time), ``memory`` (MemoryError or the address-space
limit), ``output limit``, ``process limit`` (fork refused by RLIMIT_NPROC), ``network blocked``,
``write refused`` (outside the work directory), ``crashed`` (any other non-zero exit or signal).

``run_pool(jobs, workers)`` runs ``job(slot)`` callables on at most ``workers`` threads, each job
holding one slot (so at most ``workers`` programs run at once). As root a program runs under an
unprivileged uid of its grader process and slot (``run_uid``), inside a user namespace of its own:
no two graders on a machine share one, and the process limit counts one slot's processes only.
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
from ._view import view

HERE = Path(__file__).resolve().parent
UID_BASE = 1_990_000_000  # unprivileged uids no account uses: 2 per (grader pid, slot), below 2**32 - 1
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
    disk_mb: int = 64  # every writable place of a run together (its private tmpfs)

    def __post_init__(self):
        if min(self.wall_s, self.cpu_s, self.memory_mb, self.nproc, self.file_mb, self.output_bytes, self.disk_mb) <= 0:
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


def run_uid(slot: int, judge: bool = False) -> int:
    """The host uid of slot ``slot``'s programs (``judge``: of its judges) in this grader process."""
    return UID_BASE + (os.getpid() % (1 << 22)) * 512 + (slot % 256) * 2 + int(judge)


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
    with Launch(source, limits, slot, guard=guard) as run:
        data = stdin.encode("utf-8", "surrogatepass")
        threading.Thread(target=feed, args=(run.proc.stdin, data), daemon=True).start()
        return run.finish(drain(run.bufs, {run.proc.stdout, run.proc.stderr}, limits.output_bytes, run.deadline))


class Launch:
    """One program started in the sandbox (a context manager: its work directory goes on exit).

    ``files`` are copied beside the guard into the work directory; ``argv`` follows the guard (default
    ``program.py``); ``stdin``/``stdout`` are pipes of this process (default: new pipes,
    ``proc.stdin``/``proc.stdout``). ``status`` is the launcher's report pipe; ``bufs`` the buffers
    ``drain`` fills for the program's own pipes and ``status``; ``deadline`` is the start plus the
    wall-clock limit (``time.monotonic()``).
    """

    def __init__(self, source: str, limits: Limits, slot: int, guard: bool = True, files: tuple = (),
                 argv: tuple = ("program.py",), stdin=subprocess.PIPE, stdout=subprocess.PIPE):
        python, self.limits = sandbox_python(), limits
        self.work = Path(tempfile.mkdtemp(prefix="tandem-sbx-"))  # staging: the launcher copies it to /program
        try:
            # a lone surrogate is written as-is (surrogatepass): the interpreter then refuses the file
            (self.work / "program.py").write_bytes(source.encode("utf-8", "surrogatepass"))
            names = ["program.py", "_guard.py", *files]
            for name in names[1:]:
                shutil.copyfile(HERE / name, self.work / name)
            uid = run_uid(slot) if os.getuid() == 0 else None
            (self.work / "root").mkdir()
            if uid is not None:  # where no namespace is possible the program runs here, as uid
                for p in (self.work, *(self.work / n for n in names)):
                    os.chown(p, uid, uid)
            read_fd, write_fd = os.pipe()
            cmd = [python, "-I", "-B", *(["_guard.py"] if guard else []), *argv]
            spec = {"stage": str(self.work), "root": str(self.work / "root"), "files": names, "view": view(python),
                    "argv": cmd, "env": PROGRAM_ENV, "uid": uid, "status_fd": write_fd, "cpu_s": limits.cpu_s,
                    "memory_mb": limits.memory_mb, "nproc": limits.nproc, "file_mb": limits.file_mb,
                    "disk_mb": limits.disk_mb}
            self.start = time.monotonic()
            self.deadline = self.start + limits.wall_s
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", str(HERE / "_launch.py"), json.dumps(spec)],
                                         stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, pass_fds=(write_fd,),
                                         start_new_session=True, env=PROGRAM_ENV)
            os.close(write_fd)
            self.status = os.fdopen(read_fd, "rb")
            self.bufs = {f: bytearray() for f in (self.proc.stdout, self.proc.stderr, self.status) if f is not None}
        except BaseException:
            shutil.rmtree(self.work, ignore_errors=True)
            raise

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.proc.poll() is None:
                _stop(self.proc, bytes(self.bufs[self.status]))
            _wait(self.proc, self.bufs[self.status])
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr, self.status):
                if f is not None:
                    f.close()
        finally:
            shutil.rmtree(self.work, ignore_errors=True)

    def finish(self, why: str | None) -> Outcome:
        """The run's ``Outcome`` once ``drain`` returned ``why`` (the program stopped first if it is over
        time or output; ``stdout`` empty where this process does not read it)."""
        if why is not None:
            _stop(self.proc, bytes(self.bufs[self.status]))
        _wait(self.proc, self.bufs[self.status], max(0.0, self.deadline - time.monotonic()))
        cap = self.limits.output_bytes
        stdout = self.bufs.get(self.proc.stdout, b"")
        stderr = self.bufs[self.proc.stderr]
        reports = []
        for x in bytes(self.bufs[self.status]).decode("utf-8", "replace").splitlines():
            try:
                reports.append(json.loads(x))
            except ValueError:
                pass
        iso = reports[0] if reports else {}
        report = reports[2] if len(reports) > 2 else {"signal": signal.SIGKILL}
        out, err = bytes(stdout[:cap]).decode("utf-8", "replace"), bytes(stderr[:cap]).decode("utf-8", "replace")
        return Outcome(_classify(why == "timeout", why == "overflow", report, err), report.get("exit"),
                       report.get("signal"), out, err, time.monotonic() - self.start, iso)


def feed(pipe, data: bytes) -> None:
    """Write ``data`` to ``pipe`` and close it; a reader that went away is no error."""
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def drain(bufs: dict, capped: set, cap: int, deadline: float, done=None) -> str | None:
    """Read every file of ``bufs`` into its buffer until all are closed, or ``done(closed files)`` holds:
    None; at ``deadline``: "timeout"; when a ``capped`` file's buffer passes ``cap`` bytes: "overflow"."""
    sel, closed = selectors.DefaultSelector(), set()
    for f in bufs:
        sel.register(f, selectors.EVENT_READ)
    try:
        while sel.get_map() and not (done and done(closed)):
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            for key, _ in sel.select(min(left, 1.0)):
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    closed.add(key.fileobj)
                    continue
                bufs[key.fileobj] += chunk
                if key.fileobj in capped and len(bufs[key.fileobj]) > cap:
                    return "overflow"
        return None
    finally:
        sel.close()


def _wait(proc: subprocess.Popen, status: bytes, grace: float = 0.0) -> None:
    """Wait for the launcher to exit: within ``grace`` + 5 s, else it and its program are stopped first."""
    try:
        proc.wait(timeout=grace + 5)
    except subprocess.TimeoutExpired:
        _stop(proc, bytes(status))
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


def _stop(proc: subprocess.Popen, status: bytes) -> None:
    """End a program and everything it started, and return once they are gone.

    With a PID namespace: SIGKILL its init, which takes every process of the namespace down; the
    launcher waits for that and exits, so its exit means the namespace is empty (a slot's next
    program then starts with no leftovers counting against its process limit). Without one, or if
    the launcher does not finish, SIGKILL the launcher's process group (a process that left the
    group with ``setsid`` escapes this; docs/tasks.md).
    """
    lines = []
    for x in status.decode("utf-8", "replace").splitlines():
        try:
            lines.append(json.loads(x))
        except ValueError:
            pass
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
