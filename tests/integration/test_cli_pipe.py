"""The ``tandem`` command (cli/__init__.py) writing into a pipe whose reader has gone (``| head``): it ends
quietly, as Unix tools do, with no traceback and no "Exception ignored" from the interpreter's last flush."""

from __future__ import annotations

import subprocess
import sys


def test_output_into_a_closed_pipe_ends_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "tandem_rlvr.cli", "world", "ls", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader leaves before the first byte: every write meets EPIPE
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=120)
    assert err == "", err
    assert rc == 141  # 128 + SIGPIPE: what a shell reports for a tool its pipe closed on
