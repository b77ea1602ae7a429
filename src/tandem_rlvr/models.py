"""Load the senior and the junior: hub id, local directory or GGUF file.

- ``load_model(spec, device, dtype)``: a directory with ``config.json`` (or a LoRA save of
  ``tandem train``: ``adapters.py``), a ``.gguf`` file
  (converted once to safetensors in the cache by ``gguf.gguf_to_dir``, because loading a
  GGUF dequantises it every time), or a Hugging Face hub id (needs the hub; offline it fails with a clear
  error naming the id).
- ``model_config(spec)``: a model's transformers config alone (shipped for the presets' hub ids).
- ``load_pair(senior, junior, ...)``: both models plus the one tokenizer they share; the
  junior is frozen (``eval()``, ``requires_grad=False``) and may sit on another device.
  Tokenizers must be identical (same token -> id map); otherwise a ``TandemError`` names
  both vocabularies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .adapters import base_spec, corrupt_weights, is_adapter_dir, merge_on_load, merged_dir
from .errors import TandemError
from .gguf import gguf_to_dir

log = logging.getLogger("tandem_rlvr")

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def resolve_device(device: str | None) -> torch.device:
    """'auto' -> this process's GPU if available (cuda:$LOCAL_RANK under accelerate launch or
    torchrun, else cuda:0), else cpu; an unavailable device is a TandemError."""
    if device in (None, "", "auto"):
        if not torch.cuda.is_available():
            return torch.device("cpu")
        local = int(os.environ.get("LOCAL_RANK", "0") or 0)
        return torch.device(f"cuda:{local if local < torch.cuda.device_count() else 0}")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise TandemError(f"unknown device {device!r}") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (dev.index or 0) >= n:
            raise TandemError(f"device {device!r} does not exist on this machine ({n} CUDA device(s))")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise TandemError(f"device {device!r} is not available on this machine")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "", "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise TandemError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def _shipped(name: str) -> str:
    from .world.shipped import shipped_model

    return str(shipped_model(name))


def _skill(name: str) -> str | None:
    """A skill junior's name (``tiny-skill30``: ``tandem world build --juniors``), its directory; else None."""
    from .world.skill import skill_model

    found = skill_model(name)
    return None if found is None else str(found)


def _fetched(name: str) -> str:
    from .fetch import fetch

    return str(fetch(name))


# Built-in names a user can pass instead of a path: the shipped worlds' models (world/shipped.py; never
# built on use) and the fetched SmolLM2. The skill juniors' names (``tiny-skill30``, world/skill.py) resolve
# too, once ``tandem world build --juniors`` has built them on this machine.
NAMED_MODELS = {**{n: (lambda n=n: _shipped(n)) for n in ("tiny", "tiny-junior", "tiny-drift", "tiny-drift-junior",
                                                          "tiny-code", "tiny-code-junior", "tiny-xjunior")},
                "smol": lambda: _fetched("smol")}


def recorded_model(spec: str | None) -> str | None:
    """The name a run records for model ``spec``, and the name to read an old record by: a built-in model
    by its built-in name (given by name, or by a path into the shipped worlds of this install or of
    another, ``world.shipped.shipped_name``), so a record stays right wherever the package lives; any
    other local path absolute (``outdir.abs_spec``); a hub id as is."""
    if not spec or spec in NAMED_MODELS:
        return spec
    from .world.shipped import shipped_name

    name = shipped_name(Path(spec))
    if name is not None:
        return name
    from .outdir import abs_spec

    return abs_spec(spec, NAMED_MODELS)


def recorded_pool(pool):
    """``pool`` (a ``JuniorPool``) with each junior named by ``recorded_model``, its weights as they are."""
    from .pool import JuniorPool

    return JuniorPool(tuple(recorded_model(n) for n in pool.names), pool.weights)


def recorded_pool_spec(spec: str | None) -> str | None:
    """``recorded_model`` of each junior of a recorded (canonical) junior spec or pool spec, as its spec."""
    if not spec:
        return spec
    from .pool import JuniorPool

    return recorded_pool(JuniorPool.parse(spec)).spec()


def recorded_labels(pool) -> tuple[str, ...]:
    """The labels (``JuniorPool.labels``) of ``pool``'s juniors by their recorded names: a built-in model's
    label is its built-in name however it was given (a path into the shipped worlds: ``tiny-junior``, not
    ``junior``), as the run's config.json and an evaluation's rows name it."""
    return recorded_pool(pool).labels


def resolve_model_path(spec: str) -> str:
    """A built-in name, a directory, a .gguf file (converted), or a hub id (returned as is)."""
    if spec in NAMED_MODELS:
        return NAMED_MODELS[spec]()
    p = Path(spec).expanduser()
    skill = None if p.exists() else _skill(spec)
    if skill is not None:
        return skill
    if p.suffix == ".gguf":
        if not p.is_file():
            raise TandemError(f"model file not found: {spec}")
        return str(gguf_to_dir(p))
    if is_adapter_dir(p):  # a LoRA save: its merged/ weights, else the folder itself (merged on load)
        return str(merged_dir(p) or p)
    if p.exists():
        check_model_dir(p, spec)
        return str(p)
    if spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise TandemError(f"model not found: {spec} (not a directory, a .gguf file or a hub id owner/name)")
    return spec


def readable_here(specs) -> bool:
    """Whether every model spec is a built-in name or a local directory: what a check before any download may read
    (a hub id is checked by its load)."""
    return all(isinstance(s, str) and (s in NAMED_MODELS or Path(s).expanduser().is_dir()) for s in specs)


def model_config(spec: str):
    """The transformers config of a model spec, without its weights (the memory plan, LoRA's target check).
    A hub id with a config shipped in ``presets/models`` uses that one (the presets can be planned without
    the hub)."""
    from importlib import resources

    from transformers import AutoConfig

    shipped = resources.files("tandem_rlvr").joinpath("presets", "models", spec.replace("/", "--") + ".json")
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")) and shipped.is_file():
        data = json.loads(shipped.read_text(encoding="utf-8"))
        return AutoConfig.for_model(data.pop("model_type"), **data)
    try:
        return AutoConfig.from_pretrained(resolve_model_path(spec))
    except (OSError, ValueError) as e:
        raise TandemError(f"cannot read the config of model {spec}: {str(e).splitlines()[0][:160]}") from None


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def check_model_dir(p: Path, spec: str) -> None:
    """A local model directory has config.json and a weights file; a training run directory
    (``tandem train --output-dir``: best/, final/, checkpoint-N/ inside) is the likeliest
    mistake, so the error names the model folders it holds."""
    if not p.is_dir():
        raise TandemError(f"model {spec} is a file, not a model directory or a .gguf file")
    if (p / "config.json").is_file() and any((p / f).is_file() for f in WEIGHT_FILES):
        return
    inner = sorted((d.name for d in p.iterdir() if is_adapter_dir(d) or d.is_dir() and (d / "config.json").is_file()
                    and any((d / f).is_file() for f in WEIGHT_FILES)), key=lambda n: (n not in ("best", "final"), n))
    if inner:
        use = " or ".join(f"{spec.rstrip('/')}/{n}" for n in [n for n in inner if n in ("best", "final")] or inner[:1])
        raise TandemError(f"{spec} is not a model directory (a training run's?); it holds the model folders "
                          f"{', '.join(n + '/' for n in inner)}: use e.g. {use}")
    missing = "config.json" if not (p / "config.json").is_file() else f"weights file ({', '.join(WEIGHT_FILES)})"
    raise TandemError(f"model directory {spec} has no {missing}")


def check_tokenizer_dir(path: str, spec: str) -> None:
    """A local model directory must carry its tokenizer (a checkpoint saved without one loads no vocabulary)."""
    p = Path(path)
    if p.is_dir() and not any((p / f).is_file() for f in TOKENIZER_FILES):
        raise TandemError(f"model directory {spec} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                          f"save the tokenizer with the model (tokenizer.save_pretrained)")


GENERIC_DIRS = ("final", "best", "senior", "junior")


def model_name(spec: str | None) -> str:
    """A short, readable name of a model spec for tables and legends (never a full path).

    A built-in name or a hub id stays as is; a tiny-world model directory becomes its world's
    name ("tiny-drift", "tiny-drift-junior"; an unnamed world "world-<key>[-junior]"); any other
    directory its base name, with the parent's in front when the base name alone says nothing
    ("grpo/final", "run/checkpoint-60"). The full spec belongs in a provenance section.
    """
    if not spec:
        return "-"
    p = Path(spec).expanduser()
    if spec in NAMED_MODELS or not (spec.startswith((".", "/", "~")) or p.exists()):
        return spec
    from .world.shipped import shipped_name

    if shipped_name(p):
        return shipped_name(p)
    world = p.parent / "world.json"
    if p.name in ("senior", "junior") and world.is_file():
        from .world.build import NAMED_WORLDS

        key = _json_key(world)
        name = next((n for n, make in NAMED_WORLDS.items() if make().key() == key), f"world-{key}")
        return name if p.name == "senior" else f"{name}-junior"
    if p.name in GENERIC_DIRS or p.name.startswith("checkpoint-"):
        return f"{p.parent.name}/{p.name}"
    return p.name


def _json_key(path: Path) -> str:
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("key"))
    except (OSError, ValueError):
        return "?"


def _from_pretrained(loader, spec: str, **kw):
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-tensor "Loading weights" bars; ours show real work
    path = resolve_model_path(spec)
    if loader.__name__ == "AutoTokenizer":
        check_tokenizer_dir(path, spec)
    try:
        return loader.from_pretrained(path, **kw)
    except TandemError:
        raise
    except Exception as e:
        bad = _bad_json_file(Path(path))  # a cut-short or binary config/tokenizer file: transformers names none
        if bad:
            raise TandemError(f"cannot load model {spec}: {bad}") from None
        if isinstance(e, OSError):
            raise TandemError(f"cannot load model {spec}: {str(e).splitlines()[0][:200]}") from None
        if not corrupt_weights(e):
            raise
        raise TandemError(f"cannot load model {spec}: corrupt or truncated weights "
                          f"({str(e).splitlines()[0][:200]})") from None


MODEL_JSON_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                    "special_tokens_map.json", "adapter_config.json")


def _bad_json_file(d: Path) -> str | None:
    """What is wrong with the first JSON file of model directory ``d`` that is not UTF-8 JSON (file and line), else
    None."""
    from .io import read_json

    for name in MODEL_JSON_FILES if d.is_dir() else ():
        if (d / name).is_file():
            try:
                read_json(d / name)
            except TandemError as e:
                return str(e)
    return None


def load_tokenizer(spec: str):
    from transformers import AutoTokenizer

    tok = _from_pretrained(AutoTokenizer, spec)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(spec: str, device: str | torch.device | None = None, dtype=None, trainable: bool = False):
    """Load a causal LM onto ``device``; frozen (eval, no grad) unless ``trainable``."""
    from transformers import AutoModelForCausalLM

    dev = device if isinstance(device, torch.device) else resolve_device(device)
    if is_adapter_dir(Path(resolve_model_path(spec))):  # a LoRA save without merged/: merged on load in fp32
        base = load_model(base_spec(Path(spec).expanduser()), dev, torch.float32, trainable=True)
        model = merge_on_load(Path(spec).expanduser(), base).to(resolve_dtype(dtype, dev))
    else:
        model = _from_pretrained(AutoModelForCausalLM, spec, dtype=resolve_dtype(dtype, dev)).to(dev)
    if not trainable:
        model.eval()
        model.requires_grad_(False)
    return model


def check_same_tokenizer(tok_a, tok_b, name_a: str = "senior", name_b: str = "junior") -> None:
    """Raise a TandemError unless both tokenizers map every token to the same id."""
    va, vb = tok_a.get_vocab(), tok_b.get_vocab()
    if va != vb:
        diff = len(set(va.items()) ^ set(vb.items()))
        raise TandemError(
            f"{name_a} and {name_b} do not share one tokenizer: {name_a} vocabulary "
            f"{getattr(tok_a, 'name_or_path', '?')} ({len(va)} tokens) vs {name_b} vocabulary "
            f"{getattr(tok_b, 'name_or_path', '?')} ({len(vb)} tokens), {diff} differing entries")


def eos_ids(tokenizer, generation_config=None) -> list[int]:
    """Ids that end a response: the tokenizer's EOS plus the generation config's EOS id(s)."""
    ids = {tokenizer.eos_token_id}
    extra = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    ids |= set(extra if isinstance(extra, (list, tuple)) else [extra])
    return sorted(i for i in ids if i is not None)


@dataclass
class Pair:
    """A senior (trainable or not), a frozen junior and their shared tokenizer; ``xjunior``: the
    junior's own tokenizer and prompts when it has another one (``decoding.xtandem.XJunior``)."""

    senior: object
    junior: object | None
    tokenizer: object
    xjunior: object | None = None
    juniors: tuple = ()  # a junior pool's frozen juniors in pool order (``junior`` is the first); empty: one junior
    xjuniors: tuple = ()  # a pool's ``XJunior`` per junior of another tokenizer, None per one of the senior's (aligned
    # with ``juniors``; ``xjunior`` is the first's); empty: every junior shares the senior's tokenizer

    @property
    def eos_ids(self) -> list[int]:
        return eos_ids(self.tokenizer, getattr(self.senior, "generation_config", None))

    def decoder(self, schedule: str, sampling, p: float = 0.5, K: int = 32, **options):
        """A TandemDecoder for this pair under the named schedule (boundary sets from the tokenizer);
        ``options``: TandemDecoder's keyword options (preallocate, compact, parallel)."""
        from .decoding.schedule import make_schedule
        from .decoding.tandem import TandemDecoder

        sched = make_schedule(schedule, self.tokenizer, p=p, K=K, vocab_size=self.senior.config.vocab_size)
        return TandemDecoder(self.senior, self.junior, sched, sampling, self.eos_ids, self.tokenizer.pad_token_id,
                             **options)


def load_tokenizers(senior: str, junior: str | None) -> tuple:
    """(the senior's tokenizer, the junior's or None): what ``load_pair`` reads, loaded once by a caller
    that checks them first (``rl.xjunior.other_tokenizer``)."""
    return load_tokenizer(senior), load_tokenizer(junior) if junior is not None else None


def load_pool_tokenizers(names) -> tuple:
    """The tokenizer of each of ``names`` (a pool's juniors after the first), each loaded once."""
    return tuple(load_tokenizer(n) for n in names)


def load_pool_juniors(pair: Pair, names, devices, dtype, tokenizers: tuple | None = None,
                      other_tokenizer: bool = False) -> None:
    """Give ``pair`` (loaded with ``names[0]`` as its junior) every junior of a pool, each loaded once and
    frozen on its device (None: the senior's). ``tokenizers``: each junior's tokenizer in pool order, already
    loaded (``rl.prepare``; default: loaded here). Each junior must share the senior's tokenizer, unless
    ``other_tokenizer``: then one of another tokenizer gets its ``XJunior`` in ``pair.xjuniors`` (text-level
    handoff, ``decoding.xtandem``) once the caller has checked what it can train with (``rl.xjunior``)."""
    s_dev = next(pair.senior.parameters()).device
    toks = tokenizers[1:] if tokenizers is not None else load_pool_tokenizers(names[1:])
    xjuniors = [pair.xjunior]
    for name, j_tok in zip(names[1:], toks, strict=True):
        if other_tokenizer and j_tok.get_vocab() != pair.tokenizer.get_vocab():
            from .decoding.xtandem import XJunior

            xjuniors.append(XJunior(j_tok, pair.tokenizer))
        else:
            check_same_tokenizer(pair.tokenizer, j_tok, name_b=f"junior {name}")
            xjuniors.append(None)
    pair.juniors = (pair.junior, *(load_model(n, resolve_device(d) if d else s_dev, dtype)
                                   for n, d in zip(names[1:], devices[1:], strict=True)))
    pair.xjuniors = tuple(xjuniors) if any(x is not None for x in xjuniors) else ()


def load_pair(senior: str, junior: str | None, senior_device=None, junior_device=None, dtype=None,
              trainable: bool = False, senior_dtype=None, other_tokenizer: bool = False,
              tokenizers: tuple | None = None, junior_context=contextlib.nullcontext) -> Pair:
    """Load the senior, the junior (frozen; None = solo) and their shared tokenizer.

    ``senior_dtype`` (default: ``dtype``) lets a trainable senior hold fp32 master weights
    while the frozen junior stays in the compute dtype. ``other_tokenizer``: a junior of another
    tokenizer is accepted (text-level handoff, ``decoding.xtandem``) and given as ``Pair.xjunior``.
    ``tokenizers``: ``load_tokenizers(senior, junior)`` already loaded (default: loaded here).
    ``junior_context()`` is entered around the junior's load (a ZeRO-3 run's keeps it whole)."""
    tok, j_tok = tokenizers if tokenizers is not None else load_tokenizers(senior, junior)
    xjunior = None
    if junior is not None:
        if other_tokenizer and j_tok.get_vocab() != tok.get_vocab():
            from .decoding.xtandem import XJunior

            xjunior = XJunior(j_tok, tok)
        else:
            check_same_tokenizer(tok, j_tok)
    s_dev = resolve_device(senior_device)
    j_dev = resolve_device(junior_device) if junior_device else s_dev
    s = load_model(senior, s_dev, senior_dtype if senior_dtype is not None else dtype, trainable=trainable)
    with junior_context():
        j = load_model(junior, j_dev, dtype) if junior is not None else None
    return Pair(s, j, tok, xjunior)
