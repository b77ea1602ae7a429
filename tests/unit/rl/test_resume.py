"""Resume means no duplicates and the same numbers.

- Evaluation: a rerun with the same config generates nothing and appends nothing; after an
  interrupted run (samples.jsonl cut after the first problem) the rerun generates only the
  missing problems, and the finished file has each (benchmark, problem, sample) exactly once,
  equal row for row to an uninterrupted run.
- Training: a rerun after a kill (the last checkpoint gone) logs the same values for the
  redone step as the first run did, not just the same step numbers.
"""

import json
import shutil

import pytest

from tandem_rlvr.data.benchmarks import Problem
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.schedule import make_schedule
from tandem_rlvr.decoding.tandem import TandemDecoder
from tandem_rlvr.eval.run_files import read_samples
from tandem_rlvr.config import EvalConfig
from tandem_rlvr.eval.sample.sampler import run_eval
from tandem_rlvr.rl import assemble as assembly
from tandem_rlvr.rl.train import train

from helpers.train import train_cfg


def _decoder(tok, pair, generated):
    dec = TandemDecoder(pair[0], pair[1], make_schedule("word", tok, K=4, vocab_size=len(tok)),
                        SamplingParams(temperature=1.0, max_new_tokens=8), [tok.eos_token_id], tok.pad_token_id)
    inner = dec.generate

    def counting(prompts, seeds, *a, **k):
        generated.extend(seeds)
        return inner(prompts, seeds, *a, **k)

    dec.generate = counting
    return dec


def _cfg_eval():
    return EvalConfig.from_keys(mode="handoff", schedule="word", K=4, n=2, template="plain", seed=3, senior="s",
                                junior="j", sampling=SamplingParams(temperature=1.0, max_new_tokens=8),
                                benchmarks=["bench"], batch_size=4)


PROBLEMS = {"bench": [Problem("bench", str(i), f"Mia has {i} shells.", str(i)) for i in range(4)]}


def _keys(rows):
    return [(r["benchmark"], str(r["problem_id"]), r["sample_idx"]) for r in rows]


def test_eval_rerun_generates_nothing_twice_and_duplicates_no_row(tmp_path, tok, pair):
    generated = []
    full = tmp_path / "full"
    run_eval(_cfg_eval(), _decoder(tok, pair, generated), tok, PROBLEMS, full, progress=False)
    first = read_samples(full / "samples.jsonl")
    assert len(generated) == len(first) == 8 and len(set(_keys(first))) == 8

    generated.clear()  # same config again: nothing to do
    run_eval(_cfg_eval(), _decoder(tok, pair, generated), tok, PROBLEMS, full, progress=False)
    assert generated == [] and read_samples(full / "samples.jsonl") == first

    part = tmp_path / "part"  # an interrupted run: only problem 0's samples were written
    part.mkdir()
    shutil.copy(full / "config.json", part / "config.json")
    (part / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first if r["problem_id"] == "0"))
    generated.clear()
    metrics = run_eval(_cfg_eval(), _decoder(tok, pair, generated), tok, PROBLEMS, part, progress=False)
    resumed = read_samples(part / "samples.jsonl")
    assert len(generated) == 6  # problems 1-3, two samples each; problem 0 not again
    assert len(resumed) == 8 and sorted(_keys(resumed)) == sorted(_keys(first))
    key = lambda r: (r["problem_id"], r["sample_idx"])  # noqa: E731
    # same seeds, same samples; the junior's log-prob sums are floats of a batched forward (another
    # batch, other last bits), so they agree to rounding
    floats = lambda r: {k: v for k, v in r.items() if k != "junior_lp_sum"}  # noqa: E731
    assert [floats(r) for r in sorted(resumed, key=key)] == [floats(r) for r in sorted(first, key=key)]
    assert [r["junior_lp_sum"] for r in sorted(resumed, key=key)] == \
        pytest.approx([r["junior_lp_sum"] for r in sorted(first, key=key)], abs=1e-4)
    assert metrics["bench"]["problems"] == 4


def test_training_rerun_after_a_kill_reproduces_the_step_values(train_inputs, tmp_path, monkeypatch):
    def parity_reward(completions, **kw):  # a reward that varies inside a group, so step 1 changes the senior
        return [float(len(c) % 2) for c in completions]

    parity_reward.__name__ = "accuracy_reward"
    monkeypatch.setattr(assembly, "reward_functions", lambda *a: ([parity_reward], [1.0], None))
    cfg = train_cfg(train_inputs, tmp_path, max_steps=2, save_every=1, eval_every=0)
    train(cfg, print_fn=lambda *_: None)
    log = tmp_path / "run" / "log.jsonl"
    before = {r["step"]: r for r in map(json.loads, log.read_text().splitlines()) if "reward/mean" in r}
    for name in ("checkpoint-2", "final"):  # killed after step 2's log line, before its checkpoint (and
        shutil.rmtree(tmp_path / "run" / name)  # before final/ and summary.json, which would make the rerun a no-op)
    (tmp_path / "run" / "summary.json").unlink()
    train(cfg, print_fn=lambda *_: None)
    after = {r["step"]: r for r in map(json.loads, log.read_text().splitlines()) if "reward/mean" in r}
    assert sorted(after) == [1, 2]
    timing = ("wall/", "step_time", "time/")
    keys = [k for k in before[2] if not k.startswith(timing) and isinstance(before[2][k], (int, float))]
    assert {"reward/mean", "loss", "senior/token_share", "response/mean_length"} <= set(keys)
    for k in keys:
        assert after[2][k] == pytest.approx(before[2][k], rel=1e-5, abs=1e-7), k
