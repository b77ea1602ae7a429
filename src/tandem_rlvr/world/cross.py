"""A junior of the tiny world with a tokenizer of its own (model name ``tiny-xjunior``).

What: a small ``Qwen3ForCausalLM`` trained on the tiny world's training problems, as the
world's junior is, but over a second byte-level BPE: another vocabulary size (400 against
the world's 512) learned from another corpus (the solutions alone, not prompt + solution),
so its merges, its ids and how it cuts a text all differ from the senior's. Paired with the
world's senior it exercises ``tandem eval handoff --protocol text`` and ``tandem eval
legibility --ce-protocol paper`` across tokenizers, the paper's out-of-family juniors
(Qwen3-0.6B/1.7B beside its 4B seniors) at the world's scale.

Why a separate build: the world's own key hashes ``world/build.py`` and its siblings, so
adding this junior there would rebuild every cached world. This one is keyed by the base
world's key, its own config, ``build_fingerprint()`` and this file's text, and cached beside
the worlds (``cache_dir()/worlds/<world key>-x<key>``), built in a temporary folder renamed
into place when complete, on ``runtime.BUILD_THREADS`` threads like the world.

Run: ``python -m tandem_rlvr.world.cross`` (prints its cross.json).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import TandemError
from ..io import write_json
from ..paths import cache_dir
from ..runtime import BUILD_THREADS, intra_op_threads
from .build import (WorldConfig, _n_params, _new_model, _save, build_fingerprint, build_then_publish, load_world,
                    train_lm)
from .evaluate import solo_accuracy
from .tasks import make_problems
from .tokenizer import train_tokenizer


@dataclass(frozen=True)
class CrossJuniorConfig:
    """The second-tokenizer junior: its tokenizer and model shape, and how long it trains."""

    vocab_size: int = 400  # the world's is 512
    hidden: int = 64
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 32
    intermediate: int = 128
    steps: int = 300  # the world's base model: 600
    n_eval: int = 100  # held-out test problems for the accuracies in cross.json

    @classmethod
    def for_tests(cls) -> "CrossJuniorConfig":
        """Builds in seconds on ``WorldConfig.for_tests()``: mechanics only."""
        return cls(vocab_size=290, hidden=16, layers=1, heads=2, kv_heads=1, head_dim=8, intermediate=32, steps=4,
                   n_eval=4)

    def key(self, world: WorldConfig) -> str:
        blob = json.dumps({"world": world.key(), "build": build_fingerprint(), "cross": dataclasses.asdict(self),
                           "code": hashlib.sha256(Path(__file__).read_bytes().replace(b"\r\n", b"\n")).hexdigest()},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cross_root(world: WorldConfig, cfg: CrossJuniorConfig, cache: str | os.PathLike | None = None) -> Path:
    cache_root = Path(cache if cache is not None else cache_dir()).expanduser()
    return cache_root / "worlds" / f"{world.key()}-x{cfg.key(world)}"


def build_cross_junior(world: WorldConfig | None = None, cfg: CrossJuniorConfig | None = None,
                       cache: str | os.PathLike | None = None, progress: bool = True) -> Path:
    """The model directory of the second-tokenizer junior of ``world``; built first if missing."""
    world, cfg = world or WorldConfig(), cfg or CrossJuniorConfig()
    if cfg.vocab_size == world.vocab_size:
        raise TandemError(f"the cross junior's vocabulary must differ from the world's ({world.vocab_size})")
    root = cross_root(world, cfg, cache)
    if (root / "cross.json").is_file():
        return root / "junior"
    load_world(world, cache=cache)  # the senior it pairs with, and a sign the world's cache is usable
    build_then_publish(root, lambda tmp: _build_into(tmp, world, cfg, progress))
    return root / "junior"


def _build_into(out: Path, world: WorldConfig, cfg: CrossJuniorConfig, progress: bool) -> None:
    t0 = time.perf_counter()
    train = make_problems(world.n_train, world.seed, "train")
    tok = train_tokenizer([p.solution for p in train], cfg.vocab_size)
    tcfg = dataclasses.replace(world, steps=cfg.steps, warmup=min(world.warmup, cfg.steps))
    with intra_op_threads(BUILD_THREADS):
        torch.manual_seed(world.seed + 2)
        model = _new_model(tok, cfg.hidden, cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.intermediate)
        train_lm(model, tok, train, tcfg, "cross-tokenizer junior", progress)
        _save(model, tok, out / "junior")
        train_s = time.perf_counter() - t0
        test = make_problems(cfg.n_eval, world.seed, "test")
        acc = {f"acc_{m}": solo_accuracy(model, tok, test, temperature=t, seed=world.seed)
               for m, t in (("t1", 1.0), ("greedy", 0.0))}
    write_json(out / "cross.json", {"world": world.key(), "key": cfg.key(world), "config": dataclasses.asdict(cfg),
                                    "build": build_fingerprint(), "accuracy": acc, "n_eval": cfg.n_eval,
                                    "params": _n_params(model), "tokenizer": {"vocab": len(tok)},
                                    "seconds": {"train": round(train_s, 1),
                                                "total": round(time.perf_counter() - t0, 1)}})


if __name__ == "__main__":
    path = build_cross_junior()
    print(json.dumps({"junior": str(path), **json.loads((path.parent / "cross.json").read_text())}, indent=2))
