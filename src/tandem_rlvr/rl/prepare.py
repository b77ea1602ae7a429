"""Data preparation of a training run: its problems (training and validation), its model pair, its
prompts, and the rows TRL's dataset is made of. Everything here is checked before the run directory
is touched; a problem set too small to train is an error naming it.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass

import numpy as np

from ..config import PAPER_TEST_SETS, TrainConfig
from ..data.benchmarks import Problem
from ..errors import TandemError
from ..models import Pair, load_pair, load_pool_juniors
from ..prompting import encode_prompt, resolve_template
from .backends import junior_context

log = logging.getLogger("tandem_rlvr")


@dataclass
class Prepared:
    """Everything a run needs, built and validated before anything is written."""

    cfg: TrainConfig
    pair: Pair
    train: list[Problem]
    val: list[Problem]
    template: str
    task: object = None  # tasks.Task; default: the run's, derived once by cfg.data
    given: object = None  # Given: the Python API's data and reward functions (None: the config's)

    def __post_init__(self):
        if self.task is None:
            self.task = self.cfg.data.run_task

    def prompt_text(self, p: Problem) -> str:
        """The prompt of problem ``p``, exactly as ``tandem eval`` builds it (``tasks.prompt_text``):
        the task's user message under the chat template, the bare problem under ``plain``; for math
        that is today's ``format_prompt`` with the run's instruction."""
        from ..tasks import prompt_text

        if self.given is not None:  # a user's dataset: the prompt as rendered from its row (api.data)
            return p.problem
        return prompt_text(self.pair.tokenizer, self.task, p, self.template)

    def grade(self, texts: list[str], problems: list[Problem]) -> list[float]:
        """The task's correctness of each response (validation accuracy)."""
        from ..tasks import task_row

        if self.given is not None:
            return self.given.grade(list(texts), problems)
        return [float(g.score) for g in self.task.grade(list(texts), [task_row(p) for p in problems])]

    def dataset_rows(self) -> list[dict]:
        """The training problems as TRL's dataset rows; ``task_row`` is the task's row as JSON (nested gold
        such as unit tests fits any Arrow schema), for the reward terms."""
        from ..tasks import task_row

        return [{"prompt": self.prompt_text(p), "answer": p.answer, "problem_id": str(p.problem_id),
                 "task_row": json.dumps(task_row(p), sort_keys=True, default=str)} for p in self.train]


@dataclass
class Given:
    """A run's models, data and rewards as Python objects (``api.TandemGRPOTrainer``), instead of the config's
    names: the loaded pair, the problems (rendered prompts), TRL's training dataset and the reward functions."""

    pair: Pair | None  # None: loaded from the config's senior and junior names, as tandem train loads them
    train: list[Problem]
    val: list[Problem]
    dataset: object  # datasets.Dataset TRL trains on (the user's columns and problem_id)
    reward_funcs: list
    reward_weights: list[float]
    grade: object  # (texts, problems) -> scores: validation's (api.data.RewardGrade)


def _load(cfg: TrainConfig, spec: str, split: str | None, limit: int | None) -> list[Problem]:
    """A dataset's problems through the task's loader, each carrying its task row as ``meta`` (math's
    loader is ``load_benchmark``, as before: the same problems, prompts and answers)."""
    from ..tasks import load_problems

    return next(iter(load_problems(cfg.data.run_task, [spec], split=split, limit=limit).values()), [])


def held_out_rows(n_rows: int, size: int, seed: int, draw: str) -> list[int]:
    """The row indices held out for validation. ``shuffle``: the first ``size`` of a ``random.Random(seed)``
    shuffle. ``pandas``: the rows of ``DataFrame.sample(n=size, random_state=seed)`` in its order, which
    is ``numpy.random.RandomState(seed).permutation(n_rows)[:size]`` (pandas samples without replacement
    through the legacy ``RandomState.choice``, which takes a permutation's head): the paper's
    ``data/build_deepscaler.py`` draws its 1,000 held-out DeepScaleR rows so."""
    if draw == "pandas":
        return [int(i) for i in np.random.RandomState(seed).permutation(n_rows)[:size]]
    order = list(range(n_rows))
    random.Random(seed).shuffle(order)
    return order[:size]


def split_problems(cfg: TrainConfig) -> tuple[list[Problem], list[Problem]]:
    """(training problems, validation problems) of ``cfg.data``."""
    d = cfg.data
    train = _load(cfg, d.dataset, d.dataset_split, d.limit)
    if d.validation == "paper-test-sets":  # the older stack's: test sets, all of the training data trains
        log.warning("validation paper-test-sets selects checkpoints on the test sets %s (the older stack's "
                    "protocol); numbers on those sets are then not held out", ", ".join(PAPER_TEST_SETS))
        val = [p for name in PAPER_TEST_SETS for p in _load(cfg, name, None, None)]
    elif d.val_dataset:
        val = _load(cfg, d.val_dataset, d.val_split, d.val_size)
    else:  # a seeded held-out slice of the training data
        if len(train) <= d.val_size:
            raise TandemError(f"dataset {d.dataset} has {len(train)} problems, too few to hold out "
                              f"val_size={d.val_size}")
        picked = held_out_rows(len(train), d.val_size, cfg.loop.seed, d.val_draw)
        held = set(picked)
        val = [train[i] for i in (picked if d.val_draw == "pandas" else sorted(held))]
        train = [p for i, p in enumerate(train) if i not in held]
    for name, ps in (("training", train), ("validation", val)):
        if not ps:
            raise TandemError(f"the {name} set is empty")
        missing = [p.problem_id for p in ps if not str(p.answer).strip()]
        if missing:
            raise TandemError(f"{name} problem {missing[0]} has no answer; the verifier needs one")
    if len(train) < cfg.loop.prompts_per_step:  # a rollout batch takes prompts_per_step distinct problems
        raise TandemError(f"the training set has {len(train)} problems, fewer than one rollout batch "
                          f"(prompts_per_step={cfg.loop.prompts_per_step}): nothing would be trained")
    return train, val


def prepare(cfg: TrainConfig, given: Given | None = None) -> Prepared:
    """The run's problems and loaded pair (the senior trainable, in the master dtype), overlong prompts dropped.
    Under ZeRO-3 call it once the run's GRPOConfig exists: the senior then loads as partitions. ``given``: the
    pair and problems as objects (nothing is loaded)."""
    from .xjunior import attach_junior_prompts, checked_tokenizers

    m = cfg.models
    # each tokenizer once, read by load_pair and load_pool_juniors; refuses what a junior of another
    # tokenizer cannot train, before the data
    load = given is None or given.pair is None
    tokenizers, junior_tokenizers, other = checked_tokenizers(cfg) if load else [None] * 3
    train, val = split_problems(cfg) if given is None else (given.train, given.val)
    if given is not None and given.pair is not None:  # models given as objects: nothing to load
        prep = Prepared(cfg, given.pair, train, val, "plain", given=given)
        drop_overlong_prompts(prep)
        return prep
    base = m.precision.compute if m.lora_r else m.precision.master  # LoRA: the frozen base in the compute dtype
    whole = junior_context(cfg)  # ZeRO-3: the senior into partitions (zero.Init), the juniors whole (rl/zero3.py)
    pool = m.pool
    pair = load_pair(m.senior, pool.names[0], m.senior_device, m.junior_devices[0], m.precision.compute,
                     trainable=True, senior_dtype=base, other_tokenizer=other[0], tokenizers=tokenizers,
                     junior_context=whole)
    if not pool.single:  # the pool's other juniors, frozen on their devices (docs/pool.md)
        with whole():
            load_pool_juniors(pair, pool.names, m.junior_devices, m.precision.compute, tokenizers=junior_tokenizers,
                              other_tokenizer=any(other))
    # given data: the rows' own prompts (a junior of another tokenizer re-encodes their text, as under plain)
    template = "plain" if given is not None else resolve_template(pair.tokenizer, cfg.data.template)
    prep = Prepared(cfg, pair, train, val, template, given=given)
    attach_junior_prompts(prep)  # a junior of another tokenizer reads each prompt in its own template
    drop_overlong_prompts(prep)
    return prep


def drop_overlong_prompts(prep: Prepared) -> None:
    """As verl's ``filter_overlong_prompts``: problems whose prompt is over ``max_prompt_tokens`` leave
    ``prep.train`` and ``prep.val`` up front, with a warning naming how many (after the validation
    split, as the paper's held-out file is drawn before verl filters it); too few left is an error."""
    limit, tok = prep.cfg.data.max_prompt_tokens, prep.pair.tokenizer
    for name in ("train", "val"):
        kept = [p for p in getattr(prep, name) if len(encode_prompt(tok, prep.prompt_text(p))) <= limit]
        dropped = len(getattr(prep, name)) - len(kept)
        if dropped:
            log.warning("%s: dropped %d of %d problems whose prompt is over max_prompt_tokens=%d",
                        "training set" if name == "train" else "validation set", dropped, len(getattr(prep, name)),
                        limit)
        # a user's run without an eval_dataset validates nothing (api.TandemGRPOTrainer): no validation problem needed
        needed = prep.cfg.loop.prompts_per_step if name == "train" else int(prep.given is None or bool(prep.val))
        if len(kept) < needed:
            raise TandemError(f"{len(kept)} {name} problems have a prompt within max_prompt_tokens={limit}: too few "
                              "to train")
        setattr(prep, name, kept)
