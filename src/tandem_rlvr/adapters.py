"""A LoRA save of ``tandem train --lora-r`` (``checkpoint-N``, ``best/``, ``final/``) as a model to load.

Such a folder holds PEFT's adapter (``adapter_config.json``, ``adapter_model.safetensors``) and the
tokenizer, and with ``--save-merged`` a ``merged/`` folder of plain HF weights. ``models.load_model``
and every ``tandem eval`` command take the folder as a model: its ``merged/`` weights when it has
them, else the base named in ``adapter_config.json`` (``base_model_name_or_path``) loaded in fp32 with
the adapter merged into it (W + (alpha / r) B A, PEFT's ``merge_and_unload``) and then cast to the
dtype asked for: the same tensors as the run's rollouts decoded and ``merged/`` holds (rl/lora.py).
"""

from __future__ import annotations

from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_dir(p: Path) -> bool:
    """A folder with a PEFT adapter and no full model of its own (a LoRA run's save)."""
    return p.is_dir() and (p / ADAPTER_CONFIG).is_file() and not (p / "config.json").is_file()


def merged_dir(p: Path) -> Path | None:
    """The save's ``merged/`` model folder, if it has one."""
    m = p / "merged"
    return m if (m / "config.json").is_file() else None


def base_spec(p: Path) -> str:
    """The base model the adapter was trained on, as recorded by PEFT."""
    from .errors import TandemError
    from .io import read_json

    config = read_json(p / ADAPTER_CONFIG)
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not isinstance(base, str) or not base:
        raise TandemError(f"{p / ADAPTER_CONFIG} names no base model (base_model_name_or_path)")
    return base


def merge_on_load(p: Path, base):
    """``base`` (a transformers model, fp32) with the adapter of ``p`` merged in and unloaded."""
    from peft import PeftModel

    from .errors import TandemError

    try:
        return PeftModel.from_pretrained(base, str(p)).merge_and_unload()
    except TandemError:
        raise
    except Exception as e:  # safetensors' or torch's error, a size mismatch: PEFT names neither file nor fault
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        what = "corrupt or truncated weights" if corrupt_weights(e) else "not an adapter of this base"
        raise TandemError(f"cannot load the LoRA adapter {p}: {what} ({first})") from None


def corrupt_weights(e: BaseException) -> bool:
    """A truncated or corrupt weights file: safetensors' error, or torch's zip reader's."""
    return type(e).__name__ == "SafetensorError" or "PytorchStreamReader" in str(e)
