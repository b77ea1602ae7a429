"""A real ``tandem serve`` for tests: a free port on 127.0.0.1, bounded retries, always shut down
(SIGTERM to its whole process group, SIGKILL if it lingers). ``WeightDigest`` is a vLLM worker
extension (``--worker-extension-cls serve_helpers.WeightDigest``, with tests/ on the server's
PYTHONPATH) through which ``server_digest`` reads a digest of each of the served senior's tensors."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import torch

from tandem_rlvr.engines.serve import healthy

class WeightDigest:
    """Mixed into the server's vLLM worker: ``senior_digest`` answers vLLM's /collective_rpc."""

    def senior_digest(self) -> dict[str, str]:
        import hashlib

        model = self.model_runner.get_model()
        half = getattr(model, "senior", model)
        return {n: hashlib.sha256(p.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()
                for n, p in half.named_parameters()}


def server_digest(url: str) -> dict[str, str]:
    """sha256 of every tensor of the served senior, under vLLM's own names (dev endpoint)."""
    import requests

    r = requests.post(f"{url}/collective_rpc", json={"method": "senior_digest"}, timeout=300)
    r.raise_for_status()
    return r.json()["results"][0]


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
def running_server(args: list[str], log_path, env: dict | None = None):
    """Yield the URL of ``tandem serve ARGS --port FREE`` once it answers /health (``env``: the
    server's environment, default ours)."""
    for _ in range(START_TRIES):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log_path, "w") as f:
            proc = subprocess.Popen([sys.executable, "-m", "tandem_rlvr.cli", "serve", *args, "--port", str(port)],
                                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=env)
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
