"""GGUF files as model directories: convert a ``.gguf`` once into safetensors in the cache.

Loading a GGUF dequantises it on every load, so ``models.resolve_model_path`` (a ``.gguf``
senior or junior) and ``fetch`` (``tandem models fetch smol``) convert it once, here, and
load the directory afterwards. The cache key is the file's absolute path, size and mtime.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch

from .errors import TandemError
from .paths import cache_dir

log = logging.getLogger("tandem_rlvr")


def gguf_to_dir(path: Path) -> Path:
    """Convert a GGUF file once into a safetensors directory under the cache; return it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    st = path.stat()
    key = hashlib.sha1(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    out = cache_dir() / "gguf" / f"{path.stem}-{key}"
    if (out / "config.json").exists():
        return out
    log.info("converting %s to safetensors in %s (once)", path, out)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except Exception as e:  # noqa: BLE001 - gguf metadata errors come in many types
        raise TandemError(f"GGUF file {path} has no usable tokenizer "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    if tokenizer is None or len(tokenizer) == 0:
        raise TandemError(f"GGUF file {path} has no tokenizer")
    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001
        raise TandemError(f"cannot load GGUF model {path} "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    # The weights are dequantised on load; drop the GGUF "quantizer" so they save as plain tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
