"""Training logs carry author switches per sequence and the junior's mean log-prob of the emitted
tokens: checked on one real tandem rollout batch against raw counts and a plain junior forward."""

from __future__ import annotations

import torch

from tandem_rlvr.rl.assemble import build_run

from helpers.train import train_cfg


def test_tandem_rollout_logs_switches_and_junior_logprob_of_every_emitted_token(train_inputs, tmp_path):
    run = build_run(train_cfg(train_inputs, tmp_path, schedule="alternating"), print_fn=lambda *_: None)
    trainer, rollout = run.trainer, run.rollout
    prompts = [f"Mia has {i} shells. She finds 5 more." for i in (1, 1, 2, 2)]
    out = rollout(prompts, trainer)
    masks, comps = out["env_mask"], out["completion_ids"]
    switches = [sum(a != b for a, b in zip(m, m[1:], strict=False)) for m in masks]  # raw count per sequence
    assert sum(switches) > 0, "no author change in the batch: the check is vacuous"
    assert rollout.last["senior/switches_per_seq"] == sum(switches) / len(switches)

    junior = run.rollout.junior
    total, count = 0.0, 0
    with torch.no_grad():
        for p, c in zip(out["prompt_ids"], comps, strict=True):
            logits = junior(torch.tensor([p + c])).logits[0, len(p) - 1: len(p) + len(c) - 1].double()  # (T, V)
            total += float(torch.log_softmax(logits / 1.0, -1)[torch.arange(len(c)), torch.tensor(c)].sum())
            count += len(c)
    assert abs(rollout.last["junior/logprob"] - total / count) < 1e-4


def test_grpo_rollout_logs_zero_switches(train_inputs, tmp_path):
    run = build_run(train_cfg(train_inputs, tmp_path, method="grpo"), print_fn=lambda *_: None)
    run.rollout(["Mia has 3 shells. She finds 5 more."] * 2, run.trainer)
    assert run.rollout.last["senior/switches_per_seq"] == 0.0 and "junior/logprob" in run.rollout.last


def test_handoff_eval_metrics_carry_switches_and_the_juniors_logprob_of_its_tokens(tmp_path, tok, pair):
    """metrics.json of a handoff run: switches per sequence = raw count over samples.jsonl's masks;
    the junior's mean log-prob of the tokens it wrote = a plain junior forward at the sampling
    temperature, over those tokens."""
    import json

    from tandem_rlvr.data.benchmarks import Problem
    from tandem_rlvr.decoding.sampling import SamplingParams
    from tandem_rlvr.decoding.schedule import make_schedule
    from tandem_rlvr.decoding.tandem import TandemDecoder
    from tandem_rlvr.config import EvalConfig
    from tandem_rlvr.eval.sample.sampler import run_eval
    from tandem_rlvr.prompting import encode_prompt, format_prompt

    senior, junior = (m.cpu() for m in pair)
    sp = SamplingParams(temperature=0.7, max_new_tokens=10)
    dec = TandemDecoder(senior, junior, make_schedule("chunk", tok, K=3, vocab_size=len(tok)), sp,
                        [tok.eos_token_id], tok.pad_token_id)
    cfg = EvalConfig.from_keys(mode="handoff", schedule="chunk", K=3, n=2, sampling=sp, template="plain", seed=3,
                               senior="s", junior="j", benchmarks=["bench"], batch_size=6)
    problems = {"bench": [Problem("bench", str(i), f"Mia has {i} shells.", str(i)) for i in range(3)]}
    metrics = run_eval(cfg, dec, tok, problems, tmp_path / "h", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "h" / "samples.jsonl").read_text().splitlines()]
    counts = [sum(a != b for a, b in zip(r["senior_mask"], r["senior_mask"][1:], strict=False)) for r in rows]
    assert metrics["switches_per_seq"]["mean"] == sum(counts) / len(rows) and sum(counts) > 0
    total, n = 0.0, 0
    with torch.no_grad():
        for r in rows:
            p = encode_prompt(tok, format_prompt(tok, problems["bench"][int(r["problem_id"])].problem, "plain"))
            c = r["token_ids"]
            logits = junior(torch.tensor([p + c])).logits[0, len(p) - 1: len(p) + len(c) - 1].double() / 0.7
            lp = torch.log_softmax(logits, -1)[torch.arange(len(c)), torch.tensor(c)]
            jun = torch.tensor(r["senior_mask"]) == 0
            total, n = total + float(lp[jun].sum()), n + int(jun.sum())
    assert metrics["junior_logprob"]["tokens"] == n > 0
    assert abs(metrics["junior_logprob"]["mean"] - total / n) < 1e-4
