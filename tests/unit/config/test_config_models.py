"""The models part of a run's settings (config/models.py): settings that would train something other
than what was asked are refused with one line naming them."""

from __future__ import annotations

import pytest

from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError


@pytest.mark.parametrize("overrides, named", [
    ({"lora_targets": "q_proj", "lora_alpha": 64.0}, "lora_alpha, lora_targets"),
    ({"lora_alpha": 64.0}, "lora_alpha"),
    ({"lora_dropout": 0.1}, "lora_dropout"),
])
def test_lora_settings_without_a_rank_are_refused_not_full_fine_tuning(overrides, named):
    with pytest.raises(TandemError, match=f"^{named} set without lora_r"):
        load_train_config(overrides=overrides)


def test_lora_settings_with_a_rank_or_defaults_without_one_are_accepted():
    cfg = load_train_config(overrides={"lora_r": 4, "lora_targets": "q_proj", "lora_alpha": 64.0})
    assert (cfg.models.lora_r, cfg.models.lora_targets, cfg.models.lora_alpha) == (4, ["q_proj"], 64.0)
    assert load_train_config(overrides={}).models.lora_r == 0  # full fine-tuning, the default


@pytest.mark.parametrize("seconds", [999999999999, 30 * 86400 + 1, 0])
def test_a_collective_timeout_outside_1s_to_30_days_is_refused(seconds):
    # torch.distributed keeps the timeout in int64 ns: 2**63 ns is about 9.2e9 s, past which it wraps
    with pytest.raises(TandemError, match=r"dist_timeout_s must be an integer in \[1, 2592000\]"):
        load_train_config(overrides={"dist_timeout_s": seconds})
    assert load_train_config(overrides={"dist_timeout_s": 30 * 86400}).models.dist_timeout_s == 30 * 86400
