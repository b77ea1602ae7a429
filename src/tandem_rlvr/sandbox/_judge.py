"""The judge: runs a program's tests in a process of its own, calling the program over a pipe (stdlib only).

Started by ``sandbox.judged`` as ``python -I -S -B _judge.py REQUEST_FD REPLY_FD`` before the
program exists, under another uid than the program's when the grader is root. It never runs program
code. Steps:

1. Become non-dumpable (``PR_SET_DUMPABLE`` 0: no same-uid process may ptrace it or open its
   ``/proc`` files), set its own limits, keep stdout for its report and send fd 1 to stderr (what
   the tests print), write ``{"armed": 1}``; only then does the grader start the program.
2. Read the spec from stdin: ``context`` (benchmark code run here: HumanEval's prompt and ``check``,
   MBPP's test imports, our APPS check), ``imports`` (stdlib modules the tests name), ``remote``
   (names that stand for the program's globals), ``tests`` (snippets), ``cap`` (bytes per reply).
3. Wait for the program's ``ready`` line, then run each test with ``exec``. Each use of a remote
   name (a call, an attribute, iteration, truth) is one request; the reply's value (``_wire``: plain data,
   or a reference to an object that stays in the program) is what the test then compares, here.
4. Write ``{"results": [null or error per test], "ended": null or [kind, detail]}``: ``ended`` says
   the channel broke (``exited``: the program went away; ``tampered``: a reply that is no reply;
   ``output limit``: a reply over the cap), and then the run cannot pass.

What the program can send is data, compared by the tests in this process; the expected values
never leave it (docs/tasks.md, "A verdict the program cannot write").
"""

import builtins
import ctypes
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's directory out
import _wire  # noqa: E402

PR_SET_DUMPABLE = 4


class _Ended(BaseException):
    """The channel broke: stop the tests (a BaseException, so a test's ``except Exception`` keeps it)."""


class ProgramError(Exception):
    """An exception the program raised that is not rebuilt as a builtin one here."""


class Ref:
    """An object of the program (a global by name, or one a reply handed out): usable only by asking it."""

    __slots__ = ("_key",)

    def __init__(self, key: dict):
        object.__setattr__(self, "_key", key)

    def __call__(self, *args, **kwargs):
        return CHANNEL.ask("call", self, args=list(args), kwargs=kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):  # protocol probes (copy, pickle, ...) stay here
            raise AttributeError(name)
        return CHANNEL.ask("getattr", self, name=name)

    def __iter__(self):
        return CHANNEL.ask("iter", self)

    def __next__(self):
        return CHANNEL.ask("next", self)

    def __bool__(self):  # a returned re.Match, say: its truth is the program's answer, as any value
        return CHANNEL.ask("bool", self) is True

    def __repr__(self):
        return f"<program object {json.dumps(self._key)}>"


class Channel:
    """Requests to the program and its replies; the first broken reply ends the run."""

    def __init__(self, requests, replies, cap: int):
        self.requests, self.replies, self.cap, self.ended = requests, replies, cap, None

    def _end(self, kind: str, detail: str):
        self.ended = self.ended or [kind, detail]
        raise _Ended

    def line(self, what: str):
        raw = self.replies.readline(self.cap + 1)
        if not raw.endswith(b"\n"):
            self._end("output limit" if len(raw) > self.cap else "exited", f"no reply {what}")
        return raw

    def ask(self, op: str, ref: Ref, **fields):
        if self.ended:
            raise _Ended
        msg = {"op": op, "ref": ref._key, **{k: _wire.pack(v, _refuse) for k, v in fields.items()}}
        try:
            self.requests.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
            self.requests.flush()
        except OSError:
            self._end("exited", f"the program stopped reading ({op})")
        raw = self.line(f"to {op}")
        try:
            reply = json.loads(raw)
            if type(reply) is not dict or len(reply) != 1 or next(iter(reply)) not in ("ok", "err"):
                raise _wire.WireError("not a reply")
            if "ok" in reply:
                return _wire.unpack(reply["ok"], lambda tag, key: Ref({tag: key}))
            name, message = reply["err"]
            if not (isinstance(name, str) and isinstance(message, str)):
                raise _wire.WireError("a malformed error")
        except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as e:
            self._end("tampered", f"{type(e).__name__}: {e}"[:200])
        raise _rebuilt(op, name, message)


def _refuse(obj):
    if isinstance(obj, Ref):
        return obj._key
    raise TypeError(f"cannot pass {type(obj).__name__} to the program")


def _rebuilt(op: str, name: str, message: str) -> Exception:
    """The program's exception as the builtin exception of that name (tests may expect one), else
    ``ProgramError``. ``StopIteration`` only answers ``next``: raised by a call it would end a
    ``map``/``filter`` in the test early, and an ``all(...)`` over none is true."""
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception) and (op == "next" or not issubclass(
            kind, (StopIteration, StopAsyncIteration))):
        try:
            return kind(message)
        except Exception:  # noqa: BLE001 - an exception type that wants other arguments
            pass
    return ProgramError(f"{name}: {message}")


def _arm(spec_limits: dict) -> None:
    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    mem = int(spec_limits["memory_mb"]) << 20
    cpu = int(spec_limits["cpu_s"])
    for res, value in ((resource.RLIMIT_AS, (mem, mem)), (resource.RLIMIT_CPU, (cpu, cpu + 1)),
                       (resource.RLIMIT_CORE, (0, 0)), (resource.RLIMIT_FSIZE, (0, 0))):
        resource.setrlimit(res, value)


def run(spec: dict, channel: Channel) -> list:
    """Each test's result (None: passed; else its error), stopping when the channel breaks."""
    channel.line("before the tests")  # the program's ready line: whatever it says, replies follow
    ns = {"__name__": "__tandem_tests__", "__builtins__": builtins}
    for source in spec["context"]:
        exec(compile(source, "<tests>", "exec"), ns)
    for name in spec["imports"]:
        ns[name] = __import__(name)
    for name in spec["remote"]:
        ns[name] = Ref({"g": name})
    results = []
    for test in spec["tests"]:
        try:
            exec(compile(test, "<test>", "exec"), ns)
            results.append(None)
        except _Ended:
            break
        except BaseException as e:  # noqa: BLE001 - a failed test, whatever it raised
            results.append(f"{type(e).__name__}: {e}"[:300])
        if channel.ended:
            break
    return results


def main() -> None:
    global CHANNEL
    limits = json.loads(sys.argv[3])
    _arm(limits)
    report = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    report.write('{"armed":1}\n')
    report.flush()
    spec = json.loads(sys.stdin.read())
    _wire.unlimited_ints()
    CHANNEL = Channel(os.fdopen(int(sys.argv[1]), "wb"), os.fdopen(int(sys.argv[2]), "rb"), int(spec["cap"]))
    try:
        results = run(spec, CHANNEL)
    except _Ended:
        results = []
    report.write(json.dumps({"results": results, "ended": CHANNEL.ended}) + "\n")
    report.flush()


CHANNEL: Channel


if __name__ == "__main__":
    main()
