"""The sandbox launcher: isolate, limit, drop privileges, then exec the guarded program (stdlib only).

Run by ``sandbox.runner`` as ``python -I -S _launch.py SPEC_JSON`` in a new session, with the
program's stdin/stdout/stderr already connected and one extra pipe (``status_fd``) for reports.
It never runs user code itself. Steps:

1. New namespaces: user, network, PID, mount, IPC and UTS. As root, a helper process left in the
   parent namespace writes the new user namespace's id maps (inside 0 -> root for the set-up,
   inside ``INSIDE_ID`` -> the run's own unprivileged uid and gid); unprivileged, the launcher maps
   its own uid to ``INSIDE_ID``. Where user namespaces are refused, root unshares the rest alone and
   the program runs as the run's uid directly; with no namespaces at all the guard is the only
   layer (docs/tasks.md). What was isolated is reported on ``status_fd``.
2. Fork the init, PID 1 of the new PID namespace (its exit kills every process the program left).
   In a mount namespace it builds the program's whole filesystem on a fresh tmpfs (``disk_mb`` in
   total, every writable place on it): read-only binds of the interpreter's files
   (``sandbox._view``), ``/dev`` with null, zero, full, random, urandom, empty ``/tmp`` and
   ``/dev/shm``, ``/program`` (the program's files, copied from the staging directory), and a ``/proc``
   of the new PID namespace; then it ``pivot_root``s there and detaches the old root.
3. The init forks the program: die with the init (``PR_SET_PDEATHSIG``), no new privileges,
   resource limits (CPU seconds, address space, process count, file size, open files, no core
   files), the unprivileged ids (no supplementary groups), ``/program``, then ``execve`` of the
   interpreter on ``_guard.py`` with the clean environment from the spec.

On ``status_fd`` the launcher reports what it isolated, ``{"init": pid}``, then ``{"exit": code}``
or ``{"signal": number}`` of the program. To stop a program the parent SIGKILLs that init: the
kernel then kills the whole PID namespace, and the launcher's wait returns only once it is empty;
the namespaces, the tmpfs and everything in them go with it.
"""

import ctypes
import json
import os
import platform
import resource
import shutil
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
NAMESPACES = CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 0x1000, 0x4000, 0x40000, 0x2
ST_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC))
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())
INSIDE_ID = 1000  # the program's uid and gid inside its user namespace
DEVICES = ("null", "zero", "full", "random", "urandom")
WORK = "/program"  # the work directory inside


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _write_maps(pid: int, uid: int) -> None:
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(f"0 0 1\n{INSIDE_ID} {uid} 1\n")


def _unshare(libc, spec: dict) -> str:
    """Enter new namespaces: "user" (a user namespace, ids mapped), "root" (root without one) or "none"."""
    if os.geteuid() != 0:
        euid, egid = os.geteuid(), os.getegid()
        if libc.unshare(CLONE_NEWUSER | NAMESPACES) != 0:
            return "none"
        for name, text in (("setgroups", "deny"), ("uid_map", f"{INSIDE_ID} {euid} 1\n"),
                           ("gid_map", f"{INSIDE_ID} {egid} 1\n")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        return "user"
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    me, helper = os.getpid(), os.fork()
    if helper == 0:  # stays in the parent namespaces, where root may map any id
        os.close(go_w)
        ok = b"0"
        if os.read(go_r, 1) == b"u":
            try:
                _write_maps(me, spec["uid"])
                ok = b"1"
            except OSError as e:
                os.write(2, f"sandbox: cannot map the user namespace: {e}\n".encode())
        os.write(done_w, ok)
        os._exit(0)
    os.close(go_r)
    os.close(done_w)
    entered = libc.unshare(CLONE_NEWUSER | NAMESPACES) == 0
    os.write(go_w, b"u" if entered else b"-")
    os.close(go_w)
    mapped = os.read(done_r, 1) == b"1"
    os.close(done_r)
    os.waitpid(helper, 0)
    if entered:
        if not mapped:
            raise OSError("the new user namespace could not be mapped")
        return "user"
    return "root" if libc.unshare(NAMESPACES) == 0 else "none"


def _mount(libc, src, dst: str, fstype, flags: int, data) -> None:
    def enc(s):
        return None if s is None else s.encode()

    _check(libc.mount(enc(src), dst.encode(), enc(fstype), flags, enc(data)), f"mount {dst}")


def _bind(libc, src: str, dst: str, flags: int) -> None:
    """Bind ``src`` at ``dst`` (made first), then remount it with ``flags`` plus the source's locked ones."""
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    _mount(libc, src, dst, None, MS_BIND | MS_REC, None)
    kept = os.statvfs(src).f_flag
    flags |= sum(ms for st, ms in ST_FLAGS if kept & st)
    _mount(libc, None, dst, None, MS_REMOUNT | MS_BIND | flags, None)


def _build_root(libc, spec: dict, owner: int) -> None:
    """The program's filesystem on a fresh tmpfs at ``spec["root"]``, then ``pivot_root`` into it."""
    root, view = spec["root"], spec["view"]
    _mount(libc, "none", "/", None, MS_REC | MS_PRIVATE, None)
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(spec['disk_mb'])}m,mode=755")
    for at, to in view["links"]:
        os.makedirs(os.path.dirname(root + at), exist_ok=True)
        if not os.path.lexists(root + at):
            os.symlink(to, root + at)
    for path in view["binds"]:
        _bind(libc, path, root + path, MS_RDONLY | MS_NOSUID | MS_NODEV)
    for path in view["masks"]:
        _mount(libc, "tmpfs", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=555")
    for name in DEVICES:
        _bind(libc, f"/dev/{name}", f"{root}/dev/{name}", MS_NOSUID | MS_NOEXEC)
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{root}/dev/{name}")
    os.symlink("/proc/self/fd", f"{root}/dev/fd")
    for d in ("/tmp", "/dev/shm"):
        os.makedirs(root + d, exist_ok=True)
        os.chmod(root + d, 0o1777)
    os.makedirs(root + WORK)
    for name in spec["files"]:
        shutil.copyfile(os.path.join(spec["stage"], name), root + WORK + "/" + name)
    os.chown(root + WORK, owner, owner)
    os.makedirs(root + "/proc")
    _mount(libc, "proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    os.chdir(root)
    _check(libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


def _limit(spec: dict) -> None:
    cpu, mem = int(spec["cpu_s"]), int(spec["memory_mb"]) << 20
    for res, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (mem, mem)),
                       (resource.RLIMIT_NPROC, (spec["nproc"],) * 2), (resource.RLIMIT_CORE, (0, 0)),
                       (resource.RLIMIT_FSIZE, ((spec["file_mb"] << 20),) * 2), (resource.RLIMIT_NOFILE, (256, 256))):
        resource.setrlimit(res, value)


def _program(libc, spec: dict, mode: str, cwd: str) -> None:
    """In the program's process: never returns (execs, or exits 126 on a set-up failure)."""
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _limit(spec)
        uid = INSIDE_ID if mode == "user" else spec.get("uid")
        if os.getuid() == 0 and uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.chdir(cwd)
        os.execve(spec["argv"][0], spec["argv"], spec["env"])
    except BaseException as e:  # noqa: BLE001 - reported as a set-up failure, never user code
        os.write(2, f"sandbox: set-up failed: {e!r}\n".encode())
    os._exit(126)


def _init(libc, spec: dict, mode: str) -> None:
    """PID 1 of the new namespace (or a plain intermediate process): build the root, fork the program, reap."""
    try:
        cwd = spec["stage"]
        if mode != "none" and SYS_PIVOT_ROOT is not None:
            _build_root(libc, spec, INSIDE_ID if mode == "user" else spec["uid"])
            cwd = WORK
    except BaseException as e:  # noqa: BLE001 - the program never runs on a half-built root
        os.write(2, f"sandbox: set-up failed: {e!r}\n".encode())
        os._exit(126)
    pid = os.fork()
    if pid == 0:
        _program(libc, spec, mode, cwd)
    while True:
        got, status = os.wait()
        if got == pid:
            break
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def main() -> None:
    spec = json.loads(sys.argv[1])
    status = os.fdopen(spec["status_fd"], "w")
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        mode = _unshare(libc, spec)
    except OSError as e:
        os.write(2, f"sandbox: set-up failed: {e!r}\n".encode())
        os._exit(126)
    names = {"user": "user,net,pid,mount,ipc,uts", "root": "net,pid,mount,ipc,uts", "none": ""}[mode]
    private = mode != "none" and SYS_PIVOT_ROOT is not None
    status.write(json.dumps({"namespaces": names, "user_namespace": mode == "user", "private_root": private}) + "\n")
    status.flush()
    pid = os.fork()
    if pid == 0:
        status.close()
        _init(libc, spec, mode)
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
