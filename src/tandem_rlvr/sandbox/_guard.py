"""The in-process guard: audit hooks installed before user code, then the program runs as ``__main__``.

Copied into each work directory by ``sandbox.runner`` and run as ``python -I -B _guard.py
program.py [args]`` (a judged run: ``_guard.py _serve.py program.py``). An audit hook (PEP 578)
cannot be removed by Python code once added; it refuses

- network use: ``socket.connect``/``bind``/``sendto``/``sendmsg`` and name look-ups, with
  ``PermissionError("sandbox: network refused")`` (the OS layer, an empty network namespace, also
  refuses where it exists: "Network is unreachable");
- writes outside the work directory: opening a path for writing, creating, removing, renaming,
  linking, truncating or changing the mode/owner of a path that does not resolve inside it, with
  ``PermissionError("sandbox: write outside the work directory refused")``.

It is a second layer, not a wall: C code (``ctypes``, extension modules) bypasses audit hooks. The
walls are the OS limits and namespaces that ``_launch.py`` sets up (docs/tasks.md says which hold
on which OS).
"""

import os
import runpy
import sys

_WORK = os.path.realpath(os.getcwd())
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_NET_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
               "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"}
_PATH_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.symlink": (1,),
                "os.link": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
                "shutil.rmtree": (0,), "os.mkfifo": (0,), "os.mknod": (0,)}
_ALLOWED = {"/dev/null"}


def _inside(path) -> bool:
    if isinstance(path, int):  # a file descriptor the program already holds
        return True
    try:
        full = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return full in _ALLOWED or full == _WORK or full.startswith(_WORK + os.sep)


def _hook(event: str, args: tuple) -> None:
    if event in _NET_EVENTS:
        raise PermissionError("sandbox: network refused")
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, 0))[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
        if writing and path is not None and not _inside(path):
            raise PermissionError("sandbox: write outside the work directory refused")
    elif event in _PATH_EVENTS:
        if not all(_inside(args[i]) for i in _PATH_EVENTS[event] if i < len(args) and args[i] is not None):
            raise PermissionError("sandbox: write outside the work directory refused")


def main() -> None:
    program = sys.argv[1]
    sys.argv = sys.argv[1:]  # the program's own arguments follow it
    sys.path.insert(0, _WORK)
    sys.addaudithook(_hook)
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()
