"""The ``tandem`` command: parse, call the library, print. No logic lives here.

The only argparse of the package: a module per command group (``generate``, ``world`` (and
``models``), ``train``, ``eval`` (solo|handoff), ``battery`` (eval legibility|drift|regrade|replay,
compare, report), ``probe``, ``grade``, ``serve``, ``recipes`` (demo, study, bench)), the flags
they share in ``flags``; this module builds the parser from them and runs ``main``.

Plug-ins (``tandem_rlvr.plugins``: entry points, ``$TANDEM_PLUGINS``, ``--plugins``) are imported
before the parser is built, in every process that runs a command (torchrun workers included).
Bad input raises ``TandemError`` somewhere below; ``main`` prints it as one line
(``tandem: error: ...``) and exits with status 2, without a traceback. Output into a closed pipe
(``tandem world ls --json | head -1``) ends quietly with status 141, as Unix tools do.
Run: ``tandem --help`` or ``python -m tandem_rlvr.cli --help``.
"""

from __future__ import annotations

import argparse
import errno
import logging
import sys

from ..errors import TandemError, collective_failure
from ..plugins import load_plugins, module_list
from ..runtime import env_threads

log = logging.getLogger("tandem_rlvr")
_FS_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR,
              errno.EEXIST, errno.ELOOP, errno.ENAMETOOLONG}


# --------------------------------------------------------------------------- parser
def _named_plugins(argv: list[str]) -> list[str]:
    """The modules of a ``--plugins`` flag (``tandem train``'s ``plugins`` setting), read before the
    parser is built; the rest of the command line is parsed later."""
    named = [v for flag, v in zip(argv, argv[1:], strict=False) if flag == "--plugins"]  # each word and the next
    named += [x.split("=", 1)[1] for x in argv if x.startswith("--plugins=")]
    return [m for v in named for m in module_list(v)]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole ``tandem`` parser: each command group registers its subcommands from its own module."""
    from . import battery, eval as eval_cmd, generate, grade, probe, recipes, serve, train, world

    P = _Parser(prog="tandem", description="Tandem RLVR: train and evaluate a senior that a frozen "
                                "junior can follow (arXiv 2606.28166).")
    P.add_argument("-v", "--verbose", action="store_true", help="log details (boundary-set sizes, resumes, ...)")
    sub = P.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    recipes.register_demo(sub)  # demo (recipes/demo.py)
    generate.register(sub)  # generate
    recipes.register_bench(sub, _Parser)  # bench decode|train|memory (recipes/bench.py)
    serve.register(sub, _Parser)  # serve (engines/serve.py)
    world.register_world(sub, _Parser)  # world build|verify
    train.register(sub)  # train (rl/train.py)
    world.register_models(sub, _Parser)  # models fetch
    esub = eval_cmd.register(sub, _Parser)  # eval solo|handoff (eval/sample/sampler.py)
    battery.register(sub, esub)  # eval legibility|drift|regrade|replay, compare, report
    recipes.register_study(sub)  # study drift|elegance (recipes/study.py, docs/drift_world.md)
    grade.register(sub)  # grade (tasks/grade.py, docs/tasks.md)
    probe.register(sub)  # probe forced-junior (eval/sample/probe.py, docs/tasks.md)
    return P


def _not_the_cpu_notice(record: logging.LogRecord) -> bool:
    return "Setting accelerator to CPU" not in record.getMessage()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # plug-ins first: the parser's choices and help read the registries they add to
        load_plugins(_named_plugins(argv))
    except TandemError as e:
        print(f"tandem: error: {e}", file=sys.stderr)
        return 2
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, already printed as one line)
        return int(e.code or 0)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-tensor load/save bars; ours show the real work
    # DeepSpeed (imported by accelerate when installed) logs to stdout that it found no GPU, which
    # breaks a command's --json output on a CPU machine; its other messages stay
    logging.getLogger("DeepSpeed").addFilter(_not_the_cpu_notice)
    try:
        env_threads()  # a bad $TANDEM_THREADS fails here, before any work
        a.fn(a)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except BrokenPipeError:  # stdout's reader left (`| head`): end quietly, as Unix tools do
        _silence_stdout()
        return 141  # 128 + SIGPIPE, a shell's status for a tool the pipe closed on
    except TandemError as e:
        print(f"tandem: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tandem: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # the file system refused (full disk, read-only, permissions): one line, no traceback
        if e.errno not in _FS_ERRNOS:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"tandem: error: {where}{e.strerror or e}{_RERUN if e.errno in (errno.ENOSPC, errno.EDQUOT) else ''}",
              file=sys.stderr)
        return 2
    except Exception as e:
        if (lost := collective_failure(e)) is not None:  # a lost training process: one line, like bad input
            print(f"tandem: error: {lost}", file=sys.stderr)
            return 2
        if not _write_failed(e):
            raise
        print(f"tandem: error: a file could not be written, is the disk full? ({str(e).splitlines()[0][:200]})"
              f"{_RERUN}", file=sys.stderr)
        return 2
    return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit meets no closed pipe."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no real file behind stdout (captured): nothing left to flush
        pass


_RERUN = "; free space and re-run the same command (it resumes from the last complete checkpoint or sample)"


def _write_failed(e: Exception) -> bool:
    """A failed write reported by a library as its own error rather than an OSError: safetensors
    ("I/O error: No space left on device (os error 28)") or torch.save's zip writer ("[enforce fail
    at inline_container.cc] ... unexpected pos", "PytorchStreamWriter failed writing file")."""
    text = str(e)
    if type(e).__name__ == "SafetensorError":
        return "I/O error" in text or "os error" in text
    return isinstance(e, RuntimeError) and ("PytorchStreamWriter" in text
                                            or ("inline_container.cc" in text and "unexpected pos" in text))

