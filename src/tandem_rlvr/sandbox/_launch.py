"""The sandbox launcher: isolate, limit, drop privileges, then exec the guarded program (stdlib only).

Run by ``sandbox.runner`` as ``python -I -S _launch.py SPEC_JSON`` in a new session, with the
program's stdin/stdout/stderr already connected and one extra pipe (``status_fd``) for reports.
It never runs user code itself. Steps:

1. New namespaces, the strongest the OS allows: network + PID + mount (needs CAP_SYS_ADMIN, e.g.
   root); else the same inside a new user namespace (unprivileged user namespaces); else none (the
   guard's refusing socket hooks are then the only network barrier). Reported on ``status_fd``.
2. In a mount namespace: mounts made private, fresh size-limited tmpfs over ``/tmp``, ``/var/tmp``
   and ``/dev/shm``, so the world-writable places are empty and vanish with the program; the work
   directory (usually under ``/tmp``) is bind-mounted back at its own path.
3. Fork a process that is PID 1 of the new PID namespace (its exit kills every process the program
   left behind, including ones that escaped the process group); it forks the program and reaps.
4. In the program's process: die with the launcher (``PR_SET_PDEATHSIG``), resource limits
   (CPU seconds, address space, process count, file size, open files, no core files), then as root
   drop to the slot's unprivileged uid/gid (no supplementary groups), enter the work directory and
   ``execve`` the interpreter on ``_guard.py`` with the clean environment from the spec.

On ``status_fd`` the launcher reports what it isolated, ``{"init": pid}``, then ``{"exit": code}``
or ``{"signal": number}`` of the program. To stop a program the parent SIGKILLs that init: the
kernel then kills the whole PID namespace, and the launcher's wait returns only once it is empty.
"""

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG = 1
TMPFS_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def _isolate(libc, work: str) -> tuple[dict, int]:
    """Unshare what the OS allows; (what was done, for the record and the docs' claims; an fd of the
    work directory in the namespace the program will see)."""
    want = CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS
    if libc.unshare(want) == 0:
        iso = {"namespaces": "net,pid,mount", "user_namespace": False}
    elif libc.unshare(CLONE_NEWUSER | want) == 0:
        iso = {"namespaces": "net,pid,mount", "user_namespace": True}
    else:
        return {"namespaces": "", "user_namespace": False, "tmpfs": []}, os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    iso["tmpfs"] = []
    work_fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)  # in the new namespace, before tmpfs hides its path
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0:
        for d in TMPFS_DIRS:
            if os.path.isdir(d) and libc.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                                                b"size=16m,mode=1777") == 0:
                iso["tmpfs"].append(d)
        if any(work.startswith(d + "/") for d in iso["tmpfs"]):  # the work directory, mounted back in place
            os.makedirs(work, exist_ok=True)
            if libc.mount(f"/proc/self/fd/{work_fd}".encode(), work.encode(), None, MS_BIND, None) != 0:
                raise OSError(ctypes.get_errno(), f"cannot bind the work directory {work}")
    return iso, work_fd


def _limit(spec: dict) -> None:
    cpu, mem = int(spec["cpu_s"]), int(spec["memory_mb"]) << 20
    for res, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (mem, mem)),
                       (resource.RLIMIT_NPROC, (spec["nproc"],) * 2), (resource.RLIMIT_CORE, (0, 0)),
                       (resource.RLIMIT_FSIZE, ((spec["file_mb"] << 20),) * 2), (resource.RLIMIT_NOFILE, (256, 256))):
        resource.setrlimit(res, value)


def _program(libc, spec: dict, work_fd: int) -> None:
    """In the program's process: never returns (execs, or exits 126 on a set-up failure)."""
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _limit(spec)
        if os.getuid() == 0 and spec.get("uid") is not None:
            os.setgroups([])
            os.setgid(spec["uid"])
            os.setuid(spec["uid"])
        os.fchdir(work_fd)
        os.close(work_fd)
        os.execve(spec["argv"][0], spec["argv"], spec["env"])
    except BaseException as e:  # noqa: BLE001 - reported as a set-up failure, never user code
        os.write(2, f"sandbox: set-up failed: {e!r}\n".encode())
    os._exit(126)


def _init(libc, spec: dict, work_fd: int) -> None:
    """PID 1 of the new namespace (or a plain intermediate process): fork the program, reap, relay."""
    pid = os.fork()
    if pid == 0:
        _program(libc, spec, work_fd)
    while True:
        got, status = os.wait()
        if got == pid:
            break
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def main() -> None:
    spec = json.loads(sys.argv[1])
    status = os.fdopen(spec["status_fd"], "w")
    libc = ctypes.CDLL(None, use_errno=True)
    iso, work_fd = _isolate(libc, spec["work"])
    status.write(json.dumps(iso) + "\n")
    status.flush()
    pid = os.fork()
    if pid == 0:
        status.close()
        _init(libc, spec, work_fd)
    status.write(json.dumps({"init": pid}) + "\n")  # the parent kills this one to end the namespace
    status.flush()
    _, st = os.waitpid(pid, 0)  # returns once every process of the PID namespace is gone
    code = os.waitstatus_to_exitcode(st)
    # _init relays a signal death as 128 + signal; a death of _init itself arrives negative
    report = {"signal": code - 128} if code > 128 else {"signal": -code} if code < 0 else {"exit": code}
    status.write(json.dumps(report) + "\n")
    status.close()


if __name__ == "__main__":
    main()
