"""The server engine's client reports the CPU its own threads spent on a batch (``Rollout.client_cpu_s``), which
the training log carries as ``cpu/rollout_client_s`` (docs/overlap.md, "The server's side")."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

BURN_S = 0.04  # CPU seconds each stub request spends in its own thread


def _burn(seconds: float) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        pass


class _Completions:
    def __init__(self):
        self.threads = set()

    def create(self, *, prompt, **kw):
        self.threads.add(threading.get_ident())
        _burn(BURN_S)
        time.sleep(0.05)  # waiting on the server: no CPU
        choice = SimpleNamespace(token_ids=[5, 6, 7], logprobs=SimpleNamespace(token_logprobs=[-0.1, -0.2, -0.3]),
                                 finish_reason="length", text="", model_extra={})
        return SimpleNamespace(choices=[choice])


def test_the_server_client_counts_the_cpu_of_every_request_thread_and_not_the_wait(tok):
    from tandem_rlvr.decoding.sampling import SamplingParams
    from tandem_rlvr.engines.server_client import ServerDecoder, ServerSettings

    completions = _Completions()
    client = SimpleNamespace(completions=completions)
    dec = ServerDecoder(ServerSettings("http://127.0.0.1:1", concurrency=4), client, "m", None, tok,
                        [tok.eos_token_id], "word", SamplingParams(max_new_tokens=3))
    wall = time.perf_counter()
    roll = dec.generate([[1, 2], [3], [4, 5, 6], [7], [8, 9], [10], [11], [12]], list(range(8)))
    wall = time.perf_counter() - wall
    assert len(completions.threads) > 1  # the requests ran on the pool's threads, not this one
    # 8 requests x 0.04 s of CPU each, plus this thread's replay of 8 three-token rows (well under 0.05 s);
    # the 8 x 0.05 s asleep count for nothing
    assert 8 * BURN_S <= roll.client_cpu_s < 8 * BURN_S + 0.05
    assert wall >= 2 * 0.05  # 8 requests, 4 at a time: two rounds asleep at least
    assert roll.tokens.tolist() == [[5, 6, 7]] * 8


def test_the_training_log_names_the_clients_cpu_only_when_a_server_decoded(tmp_path):
    import json

    from tandem_rlvr.recipes.bench_overlap import split

    rows = [{"step": i, "loss": 0.1, "wall/step_s": 2.0, "wall/rollout_wait_s": 1.0, "wall/weight_sync_s": 0.0,
             "wall/generate_s": 1.0, "overlap/staleness": 0.0, "cpu/rollout_client_s": c}
            for i, c in ((1, 0.5), (2, 0.1), (3, 0.2))]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert split(tmp_path / "log.jsonl", 1, 1)["client_cpu_s"] == pytest.approx(0.15)  # steps 2 and 3
    for r in rows:
        del r["cpu/rollout_client_s"]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "client_cpu_s" not in split(tmp_path / "log.jsonl", 1, 1)
