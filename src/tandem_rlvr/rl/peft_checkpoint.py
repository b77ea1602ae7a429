"""PEFT's adapter state dict under FSDP's activation checkpointing (``rl.sharding``): the adapter's entries,
not none.

The Trainer saves and loads an FSDP2 LoRA run's resume checkpoint (``pytorch_model_fsdp_0``) as the adapter
alone (transformers passes accelerate ``adapter_only=True``, which asks PEFT's ``get_peft_model_state_dict`` /
``set_peft_model_state_dict``). PEFT picks the adapter's entries by the names of its tuner layers
(``peft.tuners.tuners_utils._get_tuner_state_dict_key_prefixes``, from ``named_modules``), and strips
FSDP1's ``_fsdp_wrapped_module.`` from them but not ``_checkpoint_wrapped_module.``: torch's activation
checkpoint wrapper, which FSDP's ``activation_checkpointing`` puts around each decoder layer, adds that
segment to module names while its state-dict hooks remove it from the keys. No prefix then matches a key:
the checkpoint held no tensor, and a resumed run trained on from the initial adapter (B = 0) with the
restored AdamW moments, without a word.

``install`` wraps PEFT's prefix function so that its prefixes are named as the state dict's keys are
(the wrapper's segment removed, as ``rl.weight_stream.clean_name`` does). It is idempotent; a PEFT that
no longer has the function is refused in one line rather than saving empty checkpoints.
"""

from __future__ import annotations

from ..errors import TandemError

SEGMENT = "_checkpoint_wrapped_module."
NAME = "_get_tuner_state_dict_key_prefixes"


def install() -> None:
    """Make PEFT's adapter-entry prefixes match state-dict keys under activation checkpointing (idempotent)."""
    from peft.tuners import tuners_utils

    original = getattr(tuners_utils, NAME, None)
    if original is None:
        import peft

        raise TandemError(f"peft {peft.__version__} has no tuners_utils.{NAME}, which tandem corrects for FSDP's "
                          "activation checkpointing (rl/peft_checkpoint.py); install the peft version pyproject.toml "
                          "names")
    if getattr(original, "_tandem_wrapper_names", False):
        return

    def prefixes(model, *args, **kwargs) -> set[str]:
        return {p.replace(SEGMENT, "") for p in original(model, *args, **kwargs)}

    prefixes._tandem_wrapper_names = True
    prefixes.__wrapped__ = original
    prefixes.__doc__ = original.__doc__
    setattr(tuners_utils, NAME, prefixes)
