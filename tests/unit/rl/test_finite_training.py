"""Training that would go non-finite stops with one line, before it is saved (issue 38): a huge
learning rate, a NaN gradient or loss, and reward functions that return anything but one finite
number per completion (or raise, ``SystemExit`` included) each end the run naming the step, and the
run directory keeps its last good checkpoint."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rewards.terms import build_terms, parse_terms
from tandem_rlvr.rewards.user import load_reward
from tandem_rlvr.rl.guard import FiniteGuard
from tandem_rlvr.rl.train import train

REWARDS = '''
import os, math
def parity(completions, **kw):
    # rewards that differ inside a group, so every step has a gradient
    return [float(len(c) % 2) for c in completions]
def fails_later(completions, trainer_state=None, **kw):
    if trainer_state.global_step >= 1 and os.path.exists(os.environ["I38_FAIL_MARKER"]):
        raise ValueError("the grader is down")
    return [float(len(c) % 2) for c in completions]
def raises(completions, **kw): raise RuntimeError("boom")
def exits(completions, **kw): raise SystemExit(3)
def short(completions, **kw): return [1.0] * (len(completions) - 1)
def nan(completions, **kw): return [math.nan] * len(completions)
def inf(completions, **kw): return [math.inf] + [0.0] * (len(completions) - 1)
def strings(completions, **kw): return ["1.0"] * len(completions)
def none(completions, **kw): return None
def generator(completions, **kw): return (1.0 for _ in completions)
def scalar(completions, **kw): return 1.0
def fine(completions, **kw): return [0.5, None]
'''


@pytest.fixture(scope="module")
def setup(train_root):
    """test_reward_training's tiny senior, junior and data, plus the reward functions above."""
    (train_root / "rewards.py").write_text(REWARDS)
    return train_root


def _cfg(root, out, **kw):
    base = dict(senior=str(root / "senior"), junior=str(root / "junior"), dataset=str(root / "data.jsonl"),
                dataset_split=None, val_size=4, template="plain", lr=1e-2, group_size=4, prompts_per_step=2,
                prompts_per_minibatch=2, max_prompt_tokens=64, max_new_tokens=12, temperature=1.0, max_steps=3,
                eval_every=0, save_every=1, kl_every=0, output_dir=str(out), method="grpo",
                reward_terms="user", reward=f"{root / 'rewards.py'}:parity")
    base.update(kw)
    return load_train_config(None, None, base)


def _all_finite(path) -> bool:
    return all(torch.isfinite(t).all() for t in load_file(path).values())


def test_a_learning_rate_that_overflows_the_weights_stops_before_they_are_saved(setup, tmp_path):
    # step 1's update (AdamW: about lr = 1e30 per weight, clipped gradients) leaves finite weights of about
    # 1e27-1e30; step 2's forward squares them in RMSNorm (beyond float32's 3.4e38): a NaN loss and gradient
    out = tmp_path / "run"
    with pytest.raises(TandemError, match=r"training step 2: the gradient is not finite .*checkpoint-1 is "
                                          r"the last saved step") as e:
        train(_cfg(setup, out, lr=1e30), print_fn=lambda *a: None)
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    assert not (out / "final").exists() and not (out / "summary.json").exists()
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert _all_finite(out / "checkpoint-1" / "model.safetensors")  # intact and loadable


def test_a_reward_function_that_fails_mid_run_names_itself_and_the_run_resumes(setup, tmp_path, monkeypatch):
    marker = tmp_path / "fail"
    marker.write_text("")
    monkeypatch.setenv("I38_FAIL_MARKER", str(marker))
    out = tmp_path / "run"
    cfg = _cfg(setup, out, max_steps=2, reward=f"{setup / 'rewards.py'}:fails_later")
    with pytest.raises(TandemError, match=r"reward function .*fails_later \(--reward\) raised ValueError: the "
                                          r"grader is down at training step 2"):
        train(cfg, print_fn=lambda *a: None)
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-1"]
    marker.unlink()  # the grader is back: the same command resumes from checkpoint-1 and finishes
    said = []
    summary = train(cfg, print_fn=said.append)
    assert summary["steps"] == 2 and any("resuming from checkpoint-1" in s for s in said)


@pytest.mark.parametrize("name, message", [
    ("raises", r"raised RuntimeError: boom at training step 5"),
    ("exits", r"raised SystemExit: 3 at training step 5"),
    ("short", r"returned 1 rewards for 2 completions at training step 5"),
    ("nan", r"returned nan \(float\) for completion 0 at training step 5"),
    ("inf", r"returned inf \(float\) for completion 0"),
    ("strings", r"returned '1.0' \(str\) for completion 0"),
    ("none", r"returned NoneType at training step 5, not a list"),
    ("generator", r"returned generator at training step 5"),
    ("scalar", r"returned float at training step 5"),
])
def test_a_bad_user_reward_is_one_line_naming_the_function_and_the_step(setup, name, message):
    fn = load_reward(f"{setup / 'rewards.py'}:{name}")
    with pytest.raises(TandemError, match=rf"reward function .*rewards.py:{name} \(--reward\) {message}") as e:
        fn(prompts=["a", "b"], completions=["x", "yy"], trainer_state=SimpleNamespace(global_step=4))
    assert "\n" not in str(e.value)


def test_finite_numbers_and_none_pass_unchanged(setup):
    fn = load_reward(f"{setup / 'rewards.py'}:fine")
    assert fn(prompts=["a", "b"], completions=["x", "yy"]) == [0.5, None]


def test_a_built_in_term_that_goes_non_finite_is_named_too():
    class InfTask:
        name = "inf"

        def grade(self, responses, rows):
            return [SimpleNamespace(score=math.inf, details={}) for _ in responses]

    (correct,), _ = build_terms(parse_terms("correct"), InfTask(), ceiling=10)
    assert correct.__name__ == "correct"  # TRL logs it as rewards/correct/mean
    with pytest.raises(TandemError, match=r"reward term correct returned inf \(float\) for completion 0 at training "
                                          r"step 1"):
        correct(prompts=["q"], completions=["a"], task_row=[json.dumps({})],
                trainer_state=SimpleNamespace(global_step=0))


def _model_with(grad=None, weight=None):
    m = torch.nn.Linear(2, 2)
    with torch.no_grad():
        if weight is not None:
            m.weight[0, 0] = weight
    m.weight.grad, m.bias.grad = torch.zeros_like(m.weight), torch.zeros_like(m.bias)
    if grad is not None:
        m.weight.grad[1, 1] = grad
    return m


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_guard_names_a_non_finite_gradient_weight_loss_and_gradient_norm(bad):
    guard, state = FiniteGuard(lambda: 3), SimpleNamespace(global_step=4)
    guard.on_pre_optimizer_step(None, state, None, model=_model_with())  # finite: nothing happens
    guard.on_step_end(None, state, None, model=_model_with())
    guard.on_log(None, state, None, logs={"loss": 0.5, "grad_norm": 1.0})
    with pytest.raises(TandemError, match=r"training step 5: the gradient is not finite \(NaN or inf in 1 of 2 "
                                          r"tensors, first weight\).*checkpoint-3 is the last saved step"):
        guard.on_pre_optimizer_step(None, state, None, model=_model_with(grad=bad))
    with pytest.raises(TandemError, match=r"training step 4: the updated weights are not finite"):
        guard.on_step_end(None, state, None, model=_model_with(weight=bad))
    with pytest.raises(TandemError, match=rf"training step 4: the loss is {bad}"):
        guard.on_log(None, state, None, logs={"loss": bad})
    with pytest.raises(TandemError, match=rf"training step 4: the gradient norm is {bad}"):
        guard.on_log(None, state, None, logs={"loss": 0.1, "grad_norm": bad})
