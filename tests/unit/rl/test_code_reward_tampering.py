"""A training run on the code task in which tampering with the verifier raises no reward term.

One real GRPO step (`train`, TRL's GRPOTrainer) on the tiny code world, whose rollouts are replaced,
per group of four, by the reference solution and three programs that solve nothing but tamper with
the test harness (tricks that scored 1.0 under the old in-process harness: a replaced
``json.dumps``, a replaced ``print``, an ``atexit`` hook printing a passing line). Only the
reference earns the reward, so the step's ``reward/correct`` is exactly 1/4 (it was 1.0).
"""

from __future__ import annotations

import json

from conftest import make_model
from tandem_rlvr.config import load_train_config
from tandem_rlvr.rl.rollout import TandemRollout
from tandem_rlvr.rl.train import train
from tandem_rlvr.world.code import code_rows

TAMPERING = [
    "import json\njson.dumps = lambda *a, **k: '[null]'\n",
    "import builtins\n_p = builtins.print\nbuiltins.print = lambda *a, **k: _p(*[x.split('[')[0] + '[null]' "
    "if isinstance(x, str) and '[' in x else x for x in a], **k)\n",
    "import atexit, os\ndef _fake():\n    for v in list(globals().values()):\n"
    "        if isinstance(v, str) and len(v) == 32:\n            print('\\n' + v + '[null]', flush=True)\n"
    "    os._exit(0)\natexit.register(_fake)\n",
]


def test_tampering_rollouts_earn_no_correctness_reward_in_training(tmp_path, tok, monkeypatch):
    for name, seed in (("senior", 0), ("junior", 1)):
        make_model(len(tok), seed, hidden=32, layers=1).save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    solutions = {r["question"]: r["solution"] for r in code_rows("train")}
    real = TandemRollout.__call__

    def rollouts(self, prompts, trainer):
        out = real(self, prompts, trainer)
        texts = []
        for i, prompt in enumerate(prompts):
            reference = next(s for q, s in solutions.items() if q in prompt)
            texts.append(reference if i % 4 == 0 else TAMPERING[i % 4 - 1])
        ids = [tok.encode(t, add_special_tokens=False) + [tok.eos_token_id] for t in texts]
        return {**out, "completion_ids": ids, "logprobs": [[0.0] * len(x) for x in ids],
                "env_mask": [[1] * len(x) for x in ids]}

    monkeypatch.setattr(TandemRollout, "__call__", rollouts)
    cfg = load_train_config(None, None, dict(
        senior=str(tmp_path / "senior"), junior=str(tmp_path / "junior"), method="grpo", task="code",
        reward_terms=["correct"], dataset="tiny-code", dataset_split="train", val_size=4, template="plain",
        lr=1e-3, group_size=4, prompts_per_step=2, prompts_per_minibatch=2, max_prompt_tokens=256,
        max_new_tokens=8, temperature=1.0, max_steps=1, eval_every=0, save_every=1, kl_every=0,
        output_dir=str(tmp_path / "run")))
    train(cfg, print_fn=lambda *_: None)
    steps = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    rewards = [s["reward/correct"] for s in steps if "reward/correct" in s]
    assert rewards == [0.25]  # 2 prompts x (1 reference + 3 tampering programs): 2 of 8 rollouts pass
