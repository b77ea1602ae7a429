"""Build the tiny world: a tokenizer, a base model (the senior's start) and a junior, on CPU.

What: a ``Qwen3ForCausalLM`` of 0.36M parameters (hidden 128, 2 layers) is pretrained by
supervised next-token training on the word problems of ``tasks.py`` (loss on the solution
tokens only, the prompt masked). Its training solutions carry an arithmetic slip with
probability ``slip_prob``, so the base model slips too and its solo accuracy at temperature 1
sits well inside (0, 1): RL has room to improve it. The junior is either an earlier
checkpoint of the same run (``junior="early"``, default) or a smaller model trained the same
way (``junior="small"``). Both are saved with the identical tokenizer, loadable by
``AutoModelForCausalLM.from_pretrained(dir)`` and ``AutoTokenizer.from_pretrained(dir)``.

Why: every command of the project must run end to end on a laptop with no downloads; a
real architecture keeps the code paths (KV caches, generate, TRL) those of Qwen3 at scale.

The built-in worlds ship built (``world/shipped.py``): a built-in model name loads the project's
own build and never runs this; ``tandem world build`` and ``tandem world verify`` do.

How: ``build_world(WorldConfig())`` trains in a few minutes and caches the result under
``cache_dir()/worlds/<key>``; the build happens in a temporary sibling folder renamed into
place when complete, so an interrupted build leaves no half world and a complete one is reused.
At the end it measures solo accuracies on held-out test problems and writes them, with sizes
and timings, to ``world.json``. Run: ``python -m tandem_rlvr.world.build``.

Reproducible: the build always runs on ``runtime.BUILD_THREADS`` (1) torch threads, whatever
the load or ``$TANDEM_THREADS`` (a float32 sum split over another number of threads rounds
differently, and 600 steps of training carry such a difference into another model), and the
key hashes the config with everything else that decides the weights (``build_fingerprint``:
the format version, that thread count, the build's source files, the torch, transformers and
tokenizers versions). A cached world is reused only if all of them match.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from ..errors import TandemError
from ..io import write_json
from ..paths import cache_dir
from ..progress import progress_bar
from ..prompting import plain_prompt
from ..runtime import BUILD_THREADS, intra_op_threads
from .evaluate import solo_accuracy, style_measure
from .code import grade_code, make_code_problems, noisy_code
from .tasks import WorldProblem, draw_solutions, make_problems, render_shorthand
from .tokenizer import boundary_ids, train_tokenizer

FORMAT_VERSION = 2  # 2: always built on BUILD_THREADS threads (1 built on threads picked from the load)
JUNIORS = ("early", "small")
# The source files (relative to the package) whose code decides the weights: any edit changes the key.
BUILD_SOURCES = ("world/build.py", "world/tasks.py", "world/code.py", "world/tokenizer.py", "prompting.py")
WORLD_TASKS = ("math", "code")  # what the world's problems ask: word problems, or their code slice (world/code.py)


@functools.lru_cache(maxsize=1)
def build_fingerprint() -> dict:
    """Everything besides the config that decides what a build makes, for the key and world.json.

    The code as a hash of ``BUILD_SOURCES`` (line endings normalised, so a Windows checkout keys
    alike), not a hand-bumped number alone: an edit that nobody thought changes the weights
    still rebuilds. The libraries by version: torch's kernels and RNG, transformers' Qwen3
    initialisation and the tokenizers BPE trainer all shape the result."""
    import tokenizers
    import transformers

    return {"format": FORMAT_VERSION, "threads": BUILD_THREADS,
            "code": source_hash(Path(__file__).resolve().parents[1]), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}


def source_hash(pkg: Path) -> str:
    """16-hex sha256 over the ``BUILD_SOURCES`` of the package directory ``pkg`` (CRLF read as LF)."""
    code = hashlib.sha256()
    for rel in BUILD_SOURCES:
        code.update(rel.encode() + b"\0" + (pkg / rel).read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return code.hexdigest()[:16]


@dataclass
class WorldConfig:
    """Everything that determines a tiny world; its hash names the cache folder."""

    seed: int = 0  # problems, initialisation, noise and evaluation sampling
    n_train: int = 20000  # distinct training problems
    vocab_size: int = 512  # BPE vocabulary (256 bytes + merges + eos)
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    intermediate: int = 256  # MLP width
    steps: int = 600  # optimiser steps of the base model
    batch: int = 32  # sequences per step
    lr: float = 3e-3  # AdamW peak; linear warm-up then cosine decay to lr/10
    warmup: int = 30
    slip_prob: float = 0.15  # chance a training solution carries an arithmetic slip
    junior: str = "early"  # "early": base checkpoint at junior_at*steps; "small": smaller model
    junior_at: float = 0.5
    small_hidden: int = 64  # the "small" junior: hidden size and layers (heads: 2, kv: 1)
    small_layers: int = 2
    n_eval: int = 200  # held-out test problems for the accuracies in world.json
    # Style axis (the drift world, docs/drift_world.md). shorthand_frac = 0: the default
    # single-style world; these three fields then do not enter the cache key.
    shorthand_frac: float = 0.0  # share of training solutions written in the compact shorthand
    shorthand_slip_prob: float = 0.02  # slip chance of a shorthand solution (word: slip_prob)
    shorthand_from: float = 0.0  # shorthand appears only after this fraction of the steps
    junior_shorthand: bool = True  # False: the "small" junior is trained on the word style only
    # "code": the code slice (world/code.py, graded by the code task in the sandbox); "math" does not
    # enter the cache key.
    task: str = "math"

    def __post_init__(self) -> None:
        for name in ("n_train", "hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate",
                     "steps", "batch", "small_hidden", "small_layers", "n_eval"):
            if getattr(self, name) < 1:
                raise TandemError(f"WorldConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise TandemError(f"WorldConfig.heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.vocab_size < 260:
            raise TandemError(f"WorldConfig.vocab_size must be >= 260, got {self.vocab_size}")
        if not 0.0 <= self.slip_prob < 1.0:
            raise TandemError(f"WorldConfig.slip_prob must be in [0, 1), got {self.slip_prob}")
        if self.lr <= 0 or self.warmup < 0:
            raise TandemError(f"WorldConfig.lr must be > 0 and warmup >= 0, got {self.lr}, {self.warmup}")
        if self.junior not in JUNIORS:
            raise TandemError(f"WorldConfig.junior must be one of {', '.join(JUNIORS)}, got {self.junior!r}")
        if not 0.0 < self.junior_at < 1.0:
            raise TandemError(f"WorldConfig.junior_at must be in (0, 1), got {self.junior_at}")
        for name in ("shorthand_frac", "shorthand_slip_prob", "shorthand_from"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise TandemError(f"WorldConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.task not in WORLD_TASKS:
            raise TandemError(f"WorldConfig.task must be one of {', '.join(WORLD_TASKS)}, got {self.task!r}")
        if self.task == "code" and self.shorthand_frac > 0:
            raise TandemError("WorldConfig: the code world has one style (shorthand_frac must be 0)")

    @classmethod
    def code(cls, **overrides) -> WorldConfig:
        """The code world (``tiny-code``): the word problems' code slice (world/code.py), longer
        sequences, the base model a little larger; see docs/tasks.md."""
        return cls(**{**CODE_WORLD, **overrides})

    @classmethod
    def drift(cls, **overrides) -> WorldConfig:
        """The drift world (``tiny-drift``): two solution styles, the shorthand rewarded more often.

        Word solutions slip at 0.7, shorthand ones at 0.02; 60% of the base model's solutions
        are shorthand; the junior is the small model trained on the word style only
        (``junior_shorthand=False``), so it never learned the shorthand. See docs/drift_world.md.
        """
        return cls(**{**DRIFT_WORLD, **overrides})

    @classmethod
    def for_tests(cls, **overrides) -> WorldConfig:
        """A world that builds in seconds: mechanics only, its accuracy means nothing."""
        fast = dict(n_train=300, vocab_size=300, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16,
                    intermediate=64, steps=6, batch=8, warmup=2, n_eval=4, small_hidden=16,
                    small_layers=1)
        return cls(**{**fast, **overrides})

    def key(self) -> str:
        """Short hash of the fields that shape the build and of ``build_fingerprint()``: the
        world's folder name.

        The other junior kind's fields are left out, so changing them never invalidates a world.
        """
        fields = dataclasses.asdict(self)
        for name in ("small_hidden", "small_layers") if self.junior == "early" else ("junior_at",):
            del fields[name]
        if self.shorthand_frac == 0.0:  # single-style world: the unused style fields do not key it
            for name in ("shorthand_frac", "shorthand_slip_prob", "shorthand_from", "junior_shorthand"):
                del fields[name]
        if self.task == "math":
            del fields["task"]
        blob = json.dumps({"build": build_fingerprint(), **fields}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


DRIFT_WORLD = dict(slip_prob=0.7, shorthand_frac=0.6, shorthand_slip_prob=0.02, junior="small", junior_shorthand=False)
CODE_WORLD = dict(task="code", slip_prob=0.3)
# Built-in world names (model names "<world>" / "<world>-junior" in models.NAMED_MODELS).
NAMED_WORLDS = {"tiny": lambda: WorldConfig(), "tiny-drift": lambda: WorldConfig.drift(),
                "tiny-code": lambda: WorldConfig.code()}


def named_world(name: str) -> WorldConfig:
    if name not in NAMED_WORLDS:
        raise TandemError(f"unknown world {name!r}; valid: {', '.join(NAMED_WORLDS)}")
    return NAMED_WORLDS[name]()


@dataclass
class WorldPaths:
    """A built world: the base model (the senior's initialisation; stored in ``root/senior``) and the junior."""

    root: Path
    base: Path
    junior: Path
    meta: dict = field(default_factory=dict)  # the contents of root/world.json


def world_root(cfg: WorldConfig, cache: str | os.PathLike | None = None) -> Path:
    """Where the world of ``cfg`` lives: ``<cache or cache_dir()>/worlds/<cfg.key()>``."""
    return Path(cache if cache is not None else cache_dir()).expanduser() / "worlds" / cfg.key()


def _paths(root: Path) -> WorldPaths:
    from .records import read_record

    meta = read_record(root / "world.json", ("key",),
                       fix=f"remove {root} and build it again (`tandem world build --force`)")
    return WorldPaths(root, root / "senior", root / "junior", meta)


def load_world(cfg: WorldConfig | None = None, build_if_missing: bool = True,
               cache: str | os.PathLike | None = None) -> WorldPaths:
    """The cached world of ``cfg``; built first if missing (else a ``TandemError``)."""
    cfg = cfg or WorldConfig()
    root = world_root(cfg, cache)
    if (root / "world.json").is_file():
        return _paths(root)
    if not build_if_missing:
        raise TandemError(f"no tiny world for this config at {root}; build it with build_world()")
    return build_world(cfg, cache=cache)


def build_world(cfg: WorldConfig | None = None, cache: str | os.PathLike | None = None,
                force: bool = False, progress: bool = True) -> WorldPaths:
    """Build (or reuse) the world of ``cfg``; ``force=True`` rebuilds and replaces it."""
    cfg = cfg or WorldConfig()
    root = world_root(cfg, cache)
    if (root / "world.json").is_file() and not force:
        return _paths(root)
    build_then_publish(root, lambda tmp: _build_into(tmp, cfg, progress), force)
    return _paths(root)


def build_then_publish(root: Path, build, force: bool = False) -> None:
    """Run ``build(tmp)`` in a fresh directory beside ``root``, then move it into place: a cache
    entry is either whole or absent. An existing ``root`` is replaced only with ``force``;
    otherwise a concurrent build that finished first is kept and this one dropped.

    Nothing is left behind by an interrupted build: Ctrl-C, SIGTERM and SIGHUP remove the
    temporary directory on the way out (``_signals_exit``), and one killed outright (SIGKILL, a
    power cut) is removed by the next build in the same cache (``sweep_orphans``): the temporary
    names carry this host and process id, so only a dead process's folders are swept."""
    root.parent.mkdir(parents=True, exist_ok=True)
    sweep_orphans(root.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.build-{_owner()}-", dir=root.parent))
    try:
        with _signals_exit():
            tmp.chmod(0o755)  # mkdtemp makes it private; the entry is an ordinary shared cache entry
            build(tmp)
            if root.exists() and force:
                old = Path(tempfile.mkdtemp(prefix=f".{root.name}.old-{_owner()}-", dir=root.parent))
                os.replace(root, old / "world")  # move aside, then swap in; never a moment with half a world
                os.replace(tmp, root)
                shutil.rmtree(old, ignore_errors=True)
            elif root.exists():  # a concurrent build finished first: keep that one
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_TEMP = re.compile(r"^\..+\.(?:build|old)-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-")


def _owner() -> str:
    """``<8-hex hash of the host name>-<pid>``: whose temporary build folder this is."""
    return f"{hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]}-{os.getpid()}"


def sweep_orphans(worlds: Path) -> list[Path]:
    """Remove the temporary build folders in ``worlds`` whose process (on this host) is gone; return them."""
    host = _owner().split("-")[0]
    gone = []
    for p in worlds.iterdir() if worlds.is_dir() else ():
        m = _TEMP.match(p.name)
        if m and m["host"] == host and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"])):
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


_EXIT_SIGNALS = (signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))


@contextlib.contextmanager
def _signals_exit():
    """SIGTERM and SIGHUP raise ``SystemExit(128 + signal)`` inside the block (Python's default ends the
    process without running ``finally``), so a build's clean-up runs; restored after. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    saved = {sig: signal.signal(sig, stop) for sig in _EXIT_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _build_into(out: Path, cfg: WorldConfig, progress: bool) -> None:
    """Train tokenizer, base model and junior into ``out``; measure them; write world.json."""
    t0 = time.perf_counter()
    problems = make_code_problems if cfg.task == "code" else make_problems
    train = problems(cfg.n_train, cfg.seed, "train")
    test = problems(cfg.n_eval, cfg.seed, "test")
    texts = [plain_prompt(p.problem) + p.solution for p in train]
    if cfg.shorthand_frac > 0:  # the tokenizer must know the second style too
        texts += [plain_prompt(p.problem) + render_shorthand(p)[0] for p in train]
    tok = train_tokenizer(texts, cfg.vocab_size)
    with intra_op_threads(BUILD_THREADS):
        torch.manual_seed(cfg.seed)
        senior = _new_model(tok, cfg.hidden, cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.intermediate)
        if cfg.junior == "early":
            at = max(1, round(cfg.junior_at * cfg.steps))

            def save_early(step: int, model: Qwen3ForCausalLM) -> None:
                if step == at:
                    _save(model, tok, out / "junior")

            train_lm(senior, tok, train, cfg, "base model", progress, on_step=save_early)
        else:
            train_lm(senior, tok, train, cfg, "base model", progress)
            torch.manual_seed(cfg.seed + 1)
            small = _new_model(tok, cfg.small_hidden, cfg.small_layers, 2, 1, cfg.head_dim, 2 * cfg.small_hidden)
            jcfg = cfg if cfg.junior_shorthand else dataclasses.replace(cfg, shorthand_frac=0.0)
            train_lm(small, tok, train, jcfg, "small junior", progress)
            _save(small, tok, out / "junior")
        _save(senior, tok, out / "senior")
        train_s = time.perf_counter() - t0
        junior = Qwen3ForCausalLM.from_pretrained(out / "junior")
        acc, styles = {}, {}
        with progress_bar(progress) as bar:
            task = bar.add_task("tiny world: accuracies", total=4 + (2 if cfg.shorthand_frac > 0 else 0))
            for who, model in (("senior", senior), ("junior", junior)):
                for mode, temp in (("t1", 1.0), ("greedy", 0.0)):
                    acc[f"{who}/acc_{mode}"] = solo_accuracy(model, tok, test, temperature=temp, seed=cfg.seed,
                                                             grade=grade_code if cfg.task == "code" else None)
                    bar.advance(task)
            if cfg.shorthand_frac > 0:  # which style each model writes at temperature 1, and how often it is right
                for who, model in (("senior", senior), ("junior", junior)):
                    styles[who] = style_measure(model, tok, test, seed=cfg.seed)
                    bar.advance(task)
    write_json(out / "world.json", {
        "key": cfg.key(), "format": FORMAT_VERSION, "build": build_fingerprint(), "config": dataclasses.asdict(cfg),
        "accuracy": acc, "n_eval": len(test), "eval_split": "test",
        "params": {"senior": _n_params(senior), "junior": _n_params(junior)},
        "tokenizer": {"vocab": len(tok), "word_initial_ids": len(boundary_ids(tok)),
                      "paragraph_id": tok.convert_tokens_to_ids("ĊĊ")},
        "seconds": {"train": round(train_s, 1), "eval": round(time.perf_counter() - t0 - train_s, 1),
                    "total": round(time.perf_counter() - t0, 1)},
        "threads": BUILD_THREADS,
        **({"styles": styles} if styles else {}),
    })


def _new_model(tok, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
               intermediate: int) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3 of the given shape over ``tok``'s vocabulary (eos = pad = bos)."""
    eos = tok.eos_token_id
    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        max_position_embeddings=512, tie_word_embeddings=True, max_window_layers=layers,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos
    return model


def _n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied embeddings counted once


def _save(model: Qwen3ForCausalLM, tok, path: Path) -> None:
    model.save_pretrained(path)
    tok.save_pretrained(path)


def make_batch(problems: list[WorldProblem], tok, rng: random.Random, slip_prob: float,
               shorthand_frac: float = 0.0, shorthand_slip_prob: float = 0.0) -> dict[str, torch.Tensor]:
    """Right-padded (B, T) input_ids / attention_mask / labels; labels are -100 off the solution.

    Each solution (plus eos) is drawn fresh with ``noisy_solution``, so the model sees slips
    at rate ``slip_prob`` without memorising which problems carry one. With
    ``shorthand_frac > 0`` each solution is first given a style (shorthand with that chance,
    slipping at ``shorthand_slip_prob``); at 0 no extra random draw is made, so the default
    world's data stream is unchanged.
    """
    prompts = tok([plain_prompt(p.problem) for p in problems])["input_ids"]
    if problems and not isinstance(problems[0], WorldProblem):  # the code world's problems
        texts = [noisy_code(p, rng, slip_prob) for p in problems]
    else:
        texts = draw_solutions(problems, rng, slip_prob, shorthand_frac, shorthand_slip_prob)
    sols = tok(texts)["input_ids"]
    seqs = [pr + so + [tok.eos_token_id] for pr, so in zip(prompts, sols, strict=True)]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), tok.pad_token_id)  # (B, T)
    labels = torch.full((len(seqs), T), -100)  # (B, T)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)  # (B, T)
    for b, (pr, s) in enumerate(zip(prompts, seqs, strict=True)):
        ids[b, : len(s)] = torch.tensor(s)
        labels[b, len(pr): len(s)] = ids[b, len(pr): len(s)]
        mask[b, : len(s)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def train_lm(model: Qwen3ForCausalLM, tok, problems: list[WorldProblem], cfg: WorldConfig, label: str,
             progress: bool, on_step: Callable[[int, Qwen3ForCausalLM], object] | None = None) -> float:
    """Supervised next-token training on noisy solutions; returns the last step's loss.

    ``on_step(step, model)`` runs after every optimiser step (1-based); the build saves the
    early junior from it.
    """
    rng = random.Random(f"tiny-world:{cfg.seed}:batches")  # same data order for every model
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.01)

    def lr_at(step: int) -> float:  # linear warm-up, cosine decay to lr/10
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    loss_val = float("nan")
    with progress_bar(progress, extra="loss {task.fields[loss]:.3f}") as bar:
        task = bar.add_task(f"tiny world: {label}", total=cfg.steps, loss=loss_val)
        for step in range(1, cfg.steps + 1):
            frac = cfg.shorthand_frac if step > round(cfg.shorthand_from * cfg.steps) else 0.0
            batch = make_batch(rng.sample(problems, min(cfg.batch, len(problems))), tok, rng, cfg.slip_prob,
                               frac, cfg.shorthand_slip_prob)
            loss = model(**batch).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            loss_val = loss.item()
            bar.update(task, advance=1, loss=loss_val)
            if on_step is not None:
                on_step(step, model)
    model.eval()
    return loss_val


def main(argv: list[str] | None = None) -> None:
    """``python -m tandem_rlvr.world.build [--force] [--junior small] [--steps N]``: build, print world.json."""
    ap = argparse.ArgumentParser(description="Build (or reuse) the tiny world and print its world.json.")
    ap.add_argument("--force", action="store_true", help="rebuild even if cached")
    ap.add_argument("--junior", default=None, choices=JUNIORS, help="junior kind (default: the world's)")
    ap.add_argument("--steps", type=int, default=None, help="optimiser steps of the base model (default: the world's)")
    ap.add_argument("--seed", type=int, default=0, help="world seed")
    ap.add_argument("--world", default="tiny", choices=sorted(NAMED_WORLDS),
                    help="tiny, tiny-drift (style axis) or tiny-code (the code slice)")
    args = ap.parse_args(argv)
    over = {k: v for k, v in (("steps", args.steps), ("junior", args.junior)) if v is not None}
    cfg = dataclasses.replace(named_world(args.world), seed=args.seed, **over)
    paths = build_world(cfg, force=args.force)
    print(json.dumps({"root": str(paths.root), **paths.meta}, indent=2))


if __name__ == "__main__":
    main()
