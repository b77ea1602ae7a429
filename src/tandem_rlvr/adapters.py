"""A LoRA save of ``tandem train --lora-r`` (``checkpoint-N``, ``best/``, ``final/``) as a model to load.

Such a folder holds PEFT's adapter (``adapter_config.json``, ``adapter_model.safetensors``) and the
tokenizer, and with ``--save-merged`` a ``merged/`` folder of plain HF weights. ``models.load_model``
and every ``tandem eval`` command take the folder as a model: its ``merged/`` weights when it has
them, else the base named in ``adapter_config.json`` (``base_model_name_or_path``) loaded in fp32 with
the adapter merged into it (W + (alpha / r) B A, PEFT's ``merge_and_unload``) and then cast to the
dtype asked for: the same tensors as the run's rollouts decoded and ``merged/`` holds (rl/lora.py).

An adapter is only valid on the weights it was trained over, and a base directory keeps its name when its
files are replaced; so every save also records the base's fingerprint (``BASE_RECORD``,
``fingerprint.model_fingerprint``), and merging on load refuses a base whose fingerprint differs, naming
the base, before its weights load. A save without the record (PEFT's own, or an older one) loads unchecked.
"""

from __future__ import annotations

from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
BASE_RECORD = "base_fingerprint.json"  # {"base": the base as PEFT records it, "fingerprint": its model_fingerprint}


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
    check_base(p, base)
    return base


def record_base(p: Path, base: str) -> None:
    """Write ``BASE_RECORD`` of the save ``p`` for the base model ``base`` (a directory, a file or a hub id)."""
    from .fingerprint import model_fingerprint
    from .io import write_json

    write_json(Path(p) / BASE_RECORD, {"base": base, "fingerprint": model_fingerprint(base)})


def check_base(p: Path, base: str) -> None:
    """A TandemError naming ``base`` when its files are not those the adapter of ``p`` was saved over."""
    from .errors import TandemError
    from .fingerprint import model_fingerprint
    from .io import read_json

    if not (p / BASE_RECORD).is_file():
        return
    rec = read_json(p / BASE_RECORD)
    saved = rec.get("fingerprint") if isinstance(rec, dict) else None
    if not isinstance(saved, str):
        raise TandemError(f"{p / BASE_RECORD}: no base fingerprint recorded (expected {{\"fingerprint\": ...}})")
    now = model_fingerprint(base)
    if now != saved:
        raise TandemError(f"the base model {base} of the LoRA adapter {p} has changed since the adapter was saved "
                          f"(fingerprint {saved}, now {now}); the adapter is valid only on the weights it was "
                          "trained over")


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
