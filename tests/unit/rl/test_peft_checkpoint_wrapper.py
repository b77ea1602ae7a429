"""PEFT's adapter state dict under torch's activation-checkpoint wrapper (what FSDP's
``activation_checkpointing`` puts around each decoder layer): with ``rl.peft_checkpoint.install`` it holds
every LoRA tensor under the state dict's own key names and loads back into the wrapped model; without it,
PEFT 0.21 selects no entry (an FSDP2 LoRA run's resume checkpoint then held no tensor)."""

from __future__ import annotations

import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

from conftest import make_model
from tandem_rlvr.rl.peft_checkpoint import install


def _wrapped_lora():
    model = get_peft_model(make_model(64, seed=0, hidden=16, layers=2),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    layer = type(model.base_model.model.model.layers[0])
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, layer))
    assert any("_checkpoint_wrapped_module" in n for n, _ in model.named_modules())
    return model


def test_the_adapter_state_dict_under_the_checkpoint_wrapper_holds_every_lora_tensor_and_loads_back():
    install()
    install()  # idempotent
    model = _wrapped_lora()
    sd = get_peft_model_state_dict(model)
    # 2 layers x (q_proj, v_proj) x (A, B), named as the state dict names them (no wrapper segment, no adapter name)
    assert sorted(sd) == sorted(f"base_model.model.model.layers.{i}.self_attn.{m}.lora_{ab}.weight"
                                for i in (0, 1) for m in ("q_proj", "v_proj") for ab in "AB")
    saved = {k: v.clone() for k, v in sd.items()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.zero_()
    result = set_peft_model_state_dict(model, saved)
    assert not [k for k in result.unexpected_keys if "lora_" in k]
    back = get_peft_model_state_dict(model)
    for k, v in saved.items():
        assert torch.equal(back[k], v), k
    assert any(v.abs().sum() > 0 for v in saved.values())
