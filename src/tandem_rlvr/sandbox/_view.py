"""The filesystem a program sees: exactly what its interpreter needs to run, and nothing else.

``view(python)`` (cached per interpreter) says what the launcher (``_launch.py``) builds on an empty
tmpfs root before it ``pivot_root``s into it:

- ``binds``: read-only bind mounts of real paths, each at its own path: the interpreter's
  executable, its ELF loader, every shared library the interpreter maps once it has imported all of
  its standard library's extension modules, and the standard library's directories;
- ``links``: the symlinks met on the way to those (``/lib64 -> usr/lib64``, ``/bin -> usr/bin``,
  the loader's own link), recreated so the same paths resolve the same way inside;
- ``masks``: the interpreter's site-packages directories that lie inside a bound directory
  (a pyenv or venv Python keeps them inside its standard library): covered by an empty read-only
  tmpfs, so no installed package (this project's data files among them) is readable.

It is found by running the interpreter once (``_PROBE``) and reading ``/proc/self/maps``, so it
holds for any CPython on Linux (Debian's ``/usr/bin/python3``, pyenv, a venv's base) without a list
of library names. Paths outside the view (the project, the data files, responses, run directories,
home, ``/etc``) do not exist inside.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import subprocess

from ..errors import TandemError

_PROBE = r"""
import json, os, pkgutil, site, sys, sysconfig
paths = sysconfig.get_paths()
stdlib = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib")}
dynload = [p for p in sys.path if p.endswith("lib-dynload")]
for m in pkgutil.iter_modules(dynload):
    try:
        __import__(m.name)
    except Exception:
        pass
maps = set()
for line in open("/proc/self/maps"):
    parts = line.split(None, 5)
    if len(parts) == 6 and parts[5].startswith("/"):
        maps.add(parts[5].strip())
sites = set(site.getsitepackages()) | {paths["purelib"], paths["platlib"]}
files = sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})
print(json.dumps({"executable": sys.executable, "stdlib": sorted(stdlib | set(dynload)), "maps": sorted(maps),
                  "sites": sorted(sites), "files": files}))
"""


def _interp(path: str) -> str | None:
    """The ELF interpreter (``PT_INTERP``) of a 64-bit little-endian executable, else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            for i in range(phnum):
                f.seek(phoff + i * phentsize)
                ptype, _, offset, _, _, size = struct.unpack("<IIQQQQ", f.read(40))
                if ptype == 3:
                    f.seek(offset)
                    return f.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def _resolve(path: str, links: dict) -> str:
    """``path`` with every symlink on it followed; each link met is added to ``links`` (location -> target)."""
    todo, done, hops = [p for p in path.split("/") if p], "/", 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        here = os.path.dirname(done.rstrip("/")) or "/" if part == ".." else os.path.join(done, part)
        if part != ".." and os.path.islink(here):
            hops += 1
            if hops > 40:
                raise OSError(f"too many symlinks on {path}")
            target = os.readlink(here)
            links[here] = target
            todo = [p for p in target.split("/") if p] + todo
            done = "/" if target.startswith("/") else done
            continue
        done = here
    return done


def _inside(path: str, dirs) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


@functools.lru_cache(maxsize=None)
def view(python: str) -> dict:
    """``{"binds": [...], "links": [[location, target], ...], "masks": [...]}`` for programs run on ``python``."""
    try:
        out = subprocess.run([python, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
        probe = json.loads(out.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        raise TandemError(f"cannot inspect the sandbox interpreter {python}: {e}") from None
    links: dict[str, str] = {}
    sites = [os.path.realpath(s) for s in probe["sites"]]
    stdlib = [_resolve(d, links) for d in probe["stdlib"] if os.path.isdir(d)]
    binds = set(stdlib)
    wanted = [python, probe["executable"], _interp(os.path.realpath(python)) or ""]
    wanted += [m for m in probe["maps"] if os.path.isfile(m) and not m.startswith(("/dev/", "/proc/"))]
    wanted += [f for f in probe["files"] if not _inside(os.path.realpath(f), sites)]  # sitecustomize in /etc, say
    for p in wanted:
        if p and os.path.exists(p):
            real = _resolve(p, links)
            if not _inside(real, sites):
                binds.add(real)
    for d in {os.path.dirname(b) for b in binds if os.path.isfile(b)}:  # sonames: libz.so.1 -> libz.so.1.2.13
        for e in os.scandir(d):
            if e.is_symlink() and os.path.realpath(e.path) in binds:
                links[e.path] = os.readlink(e.path)
    binds = {b for b in binds if not _inside(b, binds - {b})}
    links = {at: to for at, to in links.items() if not _inside(at, {b for b in binds if os.path.isdir(b)})}
    masks = sorted(s for s in sites if os.path.isdir(s) and _inside(s, binds))
    return {"binds": sorted(binds), "links": sorted(links.items()), "masks": masks}
