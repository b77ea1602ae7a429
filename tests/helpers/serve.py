"""A real ``tandem serve`` for tests: a free port on 127.0.0.1, bounded retries, always shut down
(SIGTERM to its whole process group, SIGKILL if it lingers). ``WeightDigest`` is a vLLM worker
extension (``--worker-extension-cls helpers.serve.WeightDigest``, with tests/ on the server's
PYTHONPATH) through which ``server_digest`` reads a digest of each of the served senior's tensors."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import torch

from tandem_rlvr.engines.serve import healthy
from tandem_rlvr.engines.server_rollouts import free_port


class WeightDigest:
    """Mixed into the server's vLLM worker: ``senior_digest`` answers vLLM's /collective_rpc."""

    def senior_digest(self) -> dict[str, str]:
        import hashlib

        from tandem_rlvr.engines.vllm_rollouts import module_weights

        model = self.model_runner.get_model()
        half = getattr(model, "senior", model)
        # the weights as the engine computes with them: on CPU in float32 vLLM packs the linear layers'
        # matrices into oneDNN and leaves empty tensors, whose digest would not change with the weights
        return {n: hashlib.sha256(p.to("cpu").contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()
                for n, p in module_weights(half).items()}


def server_digest(url: str) -> dict[str, str]:
    """sha256 of every tensor of the served senior, under vLLM's own names (dev endpoint)."""
    import requests

    r = requests.post(f"{url}/collective_rpc", json={"method": "senior_digest"}, timeout=300)
    r.raise_for_status()
    return r.json()["results"][0]


START_TRIES, READY_POLLS = 3, 600  # ports tried; 1-second health polls per try (a slow CI start-up is minutes)


def push_weights(url: str, senior, weights) -> None:
    """Push ``weights`` ((name, tensor) pairs, or a name -> tensor dict) to the server at ``url`` as the
    trainer does: through the ``vllm-server`` engine's ``load_weights``, the engine opened for ``senior``
    (its tokenizer and config) and closed again."""
    from tandem_rlvr.engines import EngineSetup, open_engine
    from tandem_rlvr.engines.server_client import ServerSettings

    eng = open_engine("vllm-server", EngineSetup(str(senior), server=ServerSettings(url)))
    try:
        eng.load_weights(list(weights.items()) if isinstance(weights, dict) else list(weights))
    finally:
        eng.close()


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
        port = free_port()
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


class SharedServer:
    """One ``tandem serve`` for every vLLM test module that needs a single-junior server (issue 32:
    each start costs a minute or two of CPU in CI): the senior (seed 0) and junior (seed 1) of
    ``save_training_inputs(root, tok, layers=2, hidden=128)``, float32, weight sync on, with the
    digest extension. Training tests push weights into it, so a module that needs the served senior
    to be the checkpoint asks ``fresh()``, which pushes the checkpoint's tensors back (and checks the
    digest says so); a module that kills it (``kills_shared_server``: conftest runs those last) leaves
    the next ``fresh()`` to start another."""

    def __init__(self, root):
        self.root = root
        self._stack = contextlib.ExitStack()
        self._url = None
        self._digest = None  # the checkpoint's digest, as the first start serves it

    @property
    def senior(self) -> str:
        return str(self.root / "senior")

    @property
    def junior(self) -> str:
        return str(self.root / "junior")

    def _start(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()
        tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
        args = [self.senior, "--junior", self.junior, "--dtype", "float32", "--kv-cache-gib", "0.25",
                "--max-num-seqs", "16", "--weight-sync", "--worker-extension-cls", "helpers.serve.WeightDigest"]
        self.log = self.root / "server.log"
        self._url = None
        url = self._stack.enter_context(running_server(args, self.log, env=env))
        # tandem serve polls /health once a second before it prints its URL, so the test's own poll can
        # see the server healthy a moment before that line is written (CI lost this race once)
        for _ in range(READY_POLLS):
            if "ready at" in self.log.read_text():
                break
            time.sleep(0.2)
        assert "ready at" in self.log.read_text(), "tandem serve printed no URL"
        self._url = url

    def url(self) -> str:
        """The running server's URL (a new server if the last one is gone)."""
        if self._url is None or not healthy(self._url):
            self._start()
            if self._digest is None:
                self._digest = server_digest(self._url)
        return self._url

    def fresh(self) -> str:
        """The URL of a server whose senior is the checkpoint's again, bit for bit."""
        url = self.url()
        if server_digest(url) != self._digest:
            from safetensors.torch import load_file

            push_weights(url, self.senior, load_file(self.root / "senior" / "model.safetensors"))
            assert server_digest(url) == self._digest, "the pushed checkpoint is not what the server first served"
        return url

    def close(self) -> None:
        self._stack.close()
