"""A real ``tandem serve`` for tests: a free port on 127.0.0.1, bounded retries, always shut down
(SIGTERM to its whole process group, SIGKILL if it lingers)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

from tandem_rlvr.engines.serve import healthy

START_TRIES, READY_POLLS = 3, 600  # ports tried; 1-second health polls per try (a slow CI start-up is minutes)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass


@contextlib.contextmanager
def running_server(args: list[str], log_path):
    """Yield the URL of ``tandem serve ARGS --port FREE`` once it answers /health."""
    for _ in range(START_TRIES):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log_path, "w") as f:
            proc = subprocess.Popen([sys.executable, "-m", "tandem_rlvr.cli", "serve", *args, "--port", str(port)],
                                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            for _ in range(READY_POLLS):
                if proc.poll() is not None or healthy(url):
                    break
                time.sleep(1.0)
            if proc.poll() is None and healthy(url):
                break
        except BaseException:
            _stop(proc)
            raise
        _stop(proc)  # the port was taken meanwhile, or the start failed: another port
    else:
        raise RuntimeError(f"tandem serve did not start in {START_TRIES} tries:\n{open(log_path).read()[-3000:]}")
    try:
        yield url
    finally:
        _stop(proc)
