"""TRL's private surface that rl/trainer.py relies on is still where we left it.

Every private name we touch is listed in ``rl.trainer.PRIVATE_SURFACE``; when a TRL (or
transformers) release moves one, this test names it instead of a training run failing deep
inside TRL. The behaviour behind the names is tested in test_train.py and test_loss_reference.py.
"""

import importlib
import inspect

from trl import GRPOTrainer

from tandem_rlvr.rl.trainer import PRIVATE_SURFACE, SENIOR_MASK, TandemGRPOTrainer

WHERE = "; rl/trainer.py relies on it (PRIVATE_SURFACE): adapt it to this TRL/transformers release"


def _source() -> str:
    return "".join(inspect.getsource(c) for c in GRPOTrainer.__mro__ if c.__module__.startswith(("trl",
                                                                                                 "transformers")))


def test_private_methods_we_override_or_call_exist():
    missing = [m for m in PRIVATE_SURFACE["methods"] if not callable(getattr(GRPOTrainer, m, None))]
    assert not missing, f"GRPOTrainer has no method {', '.join(missing)}{WHERE}"


def test_private_attributes_we_read_or_write_are_set_by_trl():
    src = _source()
    missing = [a for a in PRIVATE_SURFACE["attributes"] if f"self.{a} =" not in src]
    assert not missing, f"GRPOTrainer no longer sets self.{', self.'.join(missing)}{WHERE}"


def test_helpers_for_the_junior_reference_are_importable():
    missing = []
    for path in PRIVATE_SURFACE["helpers"]:
        module, _, name = path.rpartition(".")
        if not hasattr(importlib.import_module(module), name):
            missing.append(path)
    assert not missing, f"TRL moved {', '.join(missing)}{WHERE}"


def test_rollout_func_contract_carries_the_senior_mask():
    assert "rollout_func" in inspect.signature(GRPOTrainer.__init__).parameters, f"GRPOTrainer lost rollout_func{WHERE}"
    src = _source()
    assert '"env_mask"' in src and f'"{SENIOR_MASK}"' in src, \
        f"GRPOTrainer no longer turns a rollout's env_mask into the loss batch's {SENIOR_MASK}{WHERE}"


def test_our_overrides_keep_trls_signatures():
    for m in ("_compute_loss", "_generate_and_score_completions", "save_model"):  # save_model: its _internal_call
        ours = list(inspect.signature(getattr(TandemGRPOTrainer, m)).parameters)
        theirs = list(inspect.signature(getattr(GRPOTrainer, m)).parameters)
        assert ours == theirs, f"GRPOTrainer.{m}{tuple(theirs)} differs from our override {tuple(ours)}{WHERE}"
