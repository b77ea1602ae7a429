"""The program's side of a judged run: run the program, then answer the judge's calls (stdlib only).

Copied into the work directory and run by the guard as ``_serve.py program.py``, with fd 0 carrying
the judge's requests and fd 1 taking the replies. Before the program runs, those two are moved to
private descriptors and fd 0/1 become ``/dev/null``/stderr, so the program's ``input()`` reads
nothing and its prints cannot interleave with replies. The program runs as ``__main__``; then one
``ready`` line, then one reply line per request line:

- request ``{"op": "call", "ref": R, "args": [...], "kwargs": {...}}`` (also ``getattr`` with
  ``"name"``, ``iter``, ``next``, ``bool``), with ``R`` a reference (``{"g": name}``: a global of the
  program; ``{"h": id}``: an object an earlier reply handed out);
- reply ``{"ok": value}`` (``_wire``: plain data copied; any other object handed out by id) or
  ``{"err": [type name, message]}``.

This file runs inside the program's process, so the program can replace any of it: nothing here is
trusted. The judge treats whatever comes back as the program's answers (``_judge.py``).
"""

import builtins
import os
import sys
import types
from json import dumps, loads  # bound before the program runs: it may replace json's own

import _wire


def main() -> None:
    program = sys.argv[1]
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "w", encoding="ascii")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    _wire.unlimited_ints()
    module = types.ModuleType("__main__")
    module.__file__, module.__builtins__ = program, builtins
    sys.modules["__main__"] = module
    with open(program, encoding="utf-8") as f:
        exec(compile(f.read(), program, "exec"), module.__dict__)
    sys.stdout.flush()
    held: list = []

    def hand_out(obj) -> dict:
        held.append(obj)
        return {"h": len(held) - 1}

    def ref(tag, key):
        if tag == "h":
            return held[key]
        if key not in module.__dict__:
            raise NameError(f"name {key!r} is not defined")
        return module.__dict__[key]

    replies.write('{"ready":1}\n')
    replies.flush()
    for line in requests:
        try:
            req = loads(line)
            target = _wire.unpack(req["ref"], ref)
            op = req["op"]
            if op == "call":
                args, kwargs = _wire.unpack(req["args"], ref), _wire.unpack(req["kwargs"], ref)
                value = target(*args, **kwargs)
            elif op == "getattr":
                value = getattr(target, req["name"])
            elif op == "iter":
                value = iter(target)
            elif op == "bool":
                value = bool(target)
            else:
                value = next(target)
            reply = '{"ok":' + _wire.encode(value, hand_out) + "}"
        except BaseException as e:  # noqa: BLE001 - the test sees it as the program's exception
            reply = dumps({"err": [type(e).__name__, str(e)[:300]]})
        sys.stdout.flush()
        replies.write(reply + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
