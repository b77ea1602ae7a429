"""``rl.callbacks.Validation``: when a later validation only ties the best accuracy, ``best/`` and
``best/best.json`` keep the first checkpoint that reached it (docs/architecture.md, "Checkpoint
selection"): a tie brings no evidence that the later weights are better, and the earlier step is the
one whose wall-clock to the best the battery reports.

A real two-update run of the tiny models (a reward that varies between rollouts, so every update
moves the weights; ``keep_weights`` exports each step's weights to compare with). The validation
accuracy itself is scripted by step (0.25, 0.5, 0.5): what is tested is what the run keeps.
"""

import json

import pytest
import torch
from safetensors.torch import load_file

from tandem_rlvr.config import load_train_config
from tandem_rlvr.rl.callbacks import Validation
from tandem_rlvr.rl.train import train

from conftest import save_training_inputs

SCRIPT = {0: 0.25, 1: 0.5, 2: 0.5}  # step -> validation accuracy: the best reached at 1, tied at 2
REWARD = "def variety(completions, **kw):\n    return [len(set(c)) / (1 + len(c)) for c in completions]\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tok):
    root = save_training_inputs(tmp_path_factory.mktemp("best-tie"), tok)
    (root / "reward.py").write_text(REWARD)
    cfg = load_train_config(None, None, dict(
        senior=str(root / "senior"), junior=str(root / "junior"), dataset=str(root / "data.jsonl"), dataset_split=None,
        val_size=4, template="plain", lr=1e-2, group_size=4, prompts_per_step=2, prompts_per_minibatch=2,
        max_prompt_tokens=64, max_new_tokens=12, temperature=1.0, max_steps=2, eval_every=1, save_every=1,
        keep_weights=True, kl_every=0, reward_terms="user", reward=f"{root / 'reward.py'}:variety",
        output_dir=str(root / "run")))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Validation, "accuracy", lambda self, model, step=0, junior=None: SCRIPT[step])
        train(cfg, print_fn=lambda *_: None)
    return root / "run"


def _weights(folder) -> dict:
    return load_file(folder / "model.safetensors")


def test_a_tie_keeps_the_first_step_that_reached_the_best(run_dir):
    assert json.loads((run_dir / "best" / "best.json").read_text()) == {"accuracy": 0.5, "step": 1}
    records = [json.loads(x) for x in (run_dir / "log.jsonl").read_text().splitlines()]
    val = {r["step"]: r for r in records if "val/accuracy" in r}
    assert [val[s]["val/accuracy"] for s in sorted(val)] == [SCRIPT[s] for s in sorted(SCRIPT)]
    assert [val[s]["val/best_step"] for s in sorted(val)] == [0, 1, 1]


def test_best_holds_the_weights_of_that_first_step(run_dir):
    best = _weights(run_dir / "best")
    first, tied = _weights(run_dir / "weights" / "checkpoint-1"), _weights(run_dir / "weights" / "checkpoint-2")
    assert best.keys() == first.keys()
    assert all(torch.equal(best[k], first[k]) for k in best)
    assert any(not torch.equal(first[k], tied[k]) for k in first)  # the tied step's weights are other weights
