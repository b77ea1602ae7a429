"""Entry point of ``test_vllm_train.py``'s data-parallel test (not a test module).

Run as ``python tests/distributed/vllm_dp_entry.py CONFIG.json`` (one process) or under
``accelerate launch --cpu --num_processes 2`` (two): trains the run the JSON describes with
``engine: vllm`` and a reward that varies inside a group, then, in every process, checks its
own engine against its own trained senior and writes ``rank<R>.json`` into the run directory.
"""

from __future__ import annotations

import json
import sys

import torch


def parity_reward(completions, **kw):  # random models never box the answer: a reward that varies in a group
    return [float(len(c) % 2) for c in completions]


parity_reward.__name__ = "accuracy_reward"


def teacher_forced(model, prompts, responses):
    out = []
    with torch.no_grad():
        for p, r in zip(prompts, responses, strict=True):
            logits = model(torch.tensor([p + r])).logits[0, len(p) - 1: len(p) + len(r) - 1].float()
            out.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(r)[:, None]).squeeze(-1))
    return out


def main(path: str) -> None:
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.decoding.sampling import SamplingParams
    from tandem_rlvr.engines.base import RolloutSpec
    from tandem_rlvr.rl.assemble import build_run

    cfg = load_train_config(None, None, json.loads(open(path).read()))
    run = build_run(cfg, print_fn=lambda *_: None)
    try:
        eng, senior, tok = run.rollout.engine, run.prep.pair.senior, run.prep.pair.tokenizer
        eng.open()  # single-process runs open it on first use
        junior0 = eng.engine_params("junior")
        run.trainer.reward_funcs[0] = parity_reward
        run.trainer.train()
        step = run.trainer.state.global_step
        prompts = [tok.encode(x) for x in ("Mia has 7 shells.", "Leo has", "The answer is", "Tom")]
        run.rollout.sync(senior, step)
        roll = eng.generate(prompts, [1, 2, 3, 4], RolloutSpec("senior", SamplingParams(temperature=0.0,
                                                                                      max_new_tokens=10)))
        resp = [roll.row_tokens(b) for b in range(len(prompts))]
        err = max(float((roll.logprobs[b, : len(e)] - e).abs().max())
                  for b, e in enumerate(teacher_forced(senior.eval(), prompts, resp)))
        junior1 = eng.engine_params("junior")
        rank = run.trainer.accelerator.process_index
        result = {"rank": rank, "processes": run.trainer.accelerator.num_processes, "step": step,
                  "senior_logprob_max_err": err, "syncs": eng.syncs,
                  "junior_identical": junior0.keys() == junior1.keys() and all(
                      torch.equal(junior0[k], junior1[k]) for k in junior0)}
        (run.runlog.path.parent / f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        run.close()
        if run.lock is not None:
            run.lock.release()


if __name__ == "__main__":  # vLLM on CPU may spawn: keep the guard
    main(sys.argv[1])
