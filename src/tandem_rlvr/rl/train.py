"""``tandem train``: Tandem RLVR, vanilla GRPO or KL-Reg on TRL's GRPOTrainer, from a TrainConfig.

The three methods share the data, the decoder, the sampling, the reward and the loss;
only the rollout schedule differs (tandem: ``cfg.schedule`` with the junior; grpo and
klreg: the senior alone), plus beta * KL(senior || junior) for klreg. So any difference
between them comes from rollout structure (and the KL term) alone.

Everything is checked before the run directory is touched (config, data, models,
tokenizers, prompt lengths). Re-running the same command resumes from the last
checkpoint in ``output_dir``; a different config for an existing run is refused.

Run: ``tandem train --preset tiny --method tandem --output-dir runs/tiny-tandem``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch

from ..config import TrainConfig
from ..data.benchmarks import Problem
from ..errors import TandemError
from ..io import atomic_write, read_json, write_json
from ..models import Pair, load_pair
from ..prompting import encode_prompt, resolve_template
from ..runtime import invocation
from .lora import check_targets as check_lora_targets, is_lora, peft_config as lora_config
from .lora import prepare_trainer as prepare_lora, save_lora
from .precision import RolloutModel, precision, save_in_dtype
from .sharding import configure as configure_sharding, from_launcher, fsdp_settings, save_streamed
from ..rundir import RunLock, abs_spec, output_dir, refuse_other_config, remove_failed_start

log = logging.getLogger("tandem_rlvr")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# transformers 5.x renames gradient_checkpointing -> activation_checkpointing and warns on every
# TrainingArguments; TRL still uses the old name. Nothing for our users to act on.
warnings.filterwarnings("ignore", message=".*(gradient|activation)_checkpointing.*", category=FutureWarning)


def run_task(cfg: TrainConfig):
    """The run's task (``tasks``); math prompts with the run's instruction and grades the last box."""
    from ..tasks import task_for_eval

    return task_for_eval(cfg.task, instruction=cfg.instruction, answer_mode="last-box", grader=cfg.grader)


def _load(cfg: TrainConfig, spec: str, split: str | None, limit: int | None) -> list[Problem]:
    """A dataset's problems through the task's loader, each carrying its task row as ``meta`` (math's
    loader is ``load_benchmark``, as before: the same problems, prompts and answers)."""
    from ..tasks import load_problems

    return next(iter(load_problems(run_task(cfg), [spec], split=split, limit=limit).values()), [])


def reward_functions(cfg: TrainConfig, task, run_dir: Path) -> tuple[list, list[float], object]:
    """(TRL reward functions, their weights, the judge or None) from the run's reward terms
    (``rewards.terms``); the judge's verdict cache lives in the run directory, so a resumed run
    pays for no verdict twice."""
    from ..rewards.terms import build_terms, parse_terms

    judge = user = None
    if cfg.reward:
        from ..rewards.user import load_reward

        user = load_reward(cfg.reward)
    if cfg.judge:
        from ..rewards.judge import Judge

        judge = Judge(cfg.judge_settings(), cache=run_dir / "judge_cache.sqlite")
    funcs, weights = build_terms(parse_terms(cfg.reward_terms), task, ceiling=cfg.length_ceiling or cfg.max_new_tokens,
                                 judge=judge, judge_mode=cfg.judge_mode, user=user)
    return funcs, weights, judge


@dataclass
class Prepared:
    """Everything a run needs, built and validated before anything is written."""

    cfg: TrainConfig
    pair: Pair
    train: list[Problem]
    val: list[Problem]
    template: str
    task: object = None  # tasks.Task

    def prompt_text(self, p: Problem) -> str:
        """The prompt of problem ``p``, exactly as ``tandem eval`` builds it (``tasks.prompt_text``):
        the task's user message under the chat template, the bare problem under ``plain``; for math
        that is today's ``format_prompt`` with the run's instruction."""
        from ..tasks import prompt_text

        return prompt_text(self.pair.tokenizer, self.task, p, self.template)

    def grade(self, texts: list[str], problems: list[Problem]) -> list[float]:
        """The task's correctness of each response (validation accuracy)."""
        from ..tasks import task_row

        return [float(g.score) for g in self.task.grade(list(texts), [task_row(p) for p in problems])]


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
    train = _load(cfg, cfg.dataset, cfg.dataset_split, cfg.limit)
    if cfg.validation == "paper-test-sets":  # the older stack's: test sets, all of the training data trains
        from ..config import PAPER_TEST_SETS

        log.warning("validation paper-test-sets selects checkpoints on the test sets %s (the older stack's "
                    "protocol); numbers on those sets are then not held out", ", ".join(PAPER_TEST_SETS))
        val = [p for name in PAPER_TEST_SETS for p in _load(cfg, name, None, None)]
    elif cfg.val_dataset:
        val = _load(cfg, cfg.val_dataset, cfg.val_split, cfg.val_size)
    else:  # a seeded held-out slice of the training data
        if len(train) <= cfg.val_size:
            raise TandemError(f"dataset {cfg.dataset} has {len(train)} problems, too few to hold out val_size={cfg.val_size}")
        picked = held_out_rows(len(train), cfg.val_size, cfg.seed, cfg.val_draw)
        held = set(picked)
        val = [train[i] for i in (picked if cfg.val_draw == "pandas" else sorted(held))]
        train = [p for i, p in enumerate(train) if i not in held]
    for name, ps in (("training", train), ("validation", val)):
        if not ps:
            raise TandemError(f"the {name} set is empty")
        missing = [p.problem_id for p in ps if not str(p.answer).strip()]
        if missing:
            raise TandemError(f"{name} problem {missing[0]} has no answer; the verifier needs one")
    if len(train) < cfg.prompts_per_step:  # a rollout batch takes prompts_per_step distinct problems
        raise TandemError(f"the training set has {len(train)} problems, fewer than one rollout batch "
                          f"(prompts_per_step={cfg.prompts_per_step}): nothing would be trained")
    return train, val


def prepare(cfg: TrainConfig) -> Prepared:
    train, val = split_problems(cfg)
    _, compute, master = precision(cfg)
    base = compute if cfg.lora_r else master  # LoRA: the frozen base in the compute dtype (rl/lora.py)
    pair = load_pair(cfg.senior, cfg.junior or cfg.senior, cfg.senior_device, cfg.junior_device, compute,
                     trainable=True, senior_dtype=base)
    template = resolve_template(pair.tokenizer, cfg.template)
    prep = Prepared(cfg, pair, train, val, template, run_task(cfg))
    drop_overlong_prompts(prep)
    return prep


def drop_overlong_prompts(prep: Prepared) -> None:
    """As verl's ``filter_overlong_prompts``: problems whose prompt is over ``max_prompt_tokens`` leave
    ``prep.train`` and ``prep.val`` up front, with a warning naming how many (after the validation
    split, as the paper's held-out file is drawn before verl filters it); too few left is an error."""
    cfg, tok = prep.cfg, prep.pair.tokenizer
    for name in ("train", "val"):
        kept = [p for p in getattr(prep, name) if len(encode_prompt(tok, prep.prompt_text(p))) <= cfg.max_prompt_tokens]
        dropped = len(getattr(prep, name)) - len(kept)
        if dropped:
            log.warning("%s: dropped %d of %d problems whose prompt is over max_prompt_tokens=%d",
                        "training set" if name == "train" else "validation set", dropped, len(getattr(prep, name)),
                        cfg.max_prompt_tokens)
        if len(kept) < (cfg.prompts_per_step if name == "train" else 1):
            raise TandemError(f"{len(kept)} {name} problems have a prompt within max_prompt_tokens="
                              f"{cfg.max_prompt_tokens}: too few to train")
        setattr(prep, name, kept)


def stored_config(cfg: TrainConfig) -> dict:
    """config.json's content: local model and data paths made absolute, so the run is recognised
    and its files work from any directory."""
    from ..data.benchmarks import benchmark_names
    from ..models import NAMED_MODELS

    d = cfg.to_dict()
    for key in ("senior", "junior"):
        d[key] = abs_spec(d[key], NAMED_MODELS)
    for key in ("dataset", "val_dataset"):
        d[key] = abs_spec(d[key], benchmark_names())
    d["output_dir"] = str(Path(cfg.output_dir).expanduser().resolve())
    d["verifier"] = run_task(cfg).verifier
    if cfg.reward and Path(cfg.reward.rpartition(":")[0]).expanduser().is_file():
        where, _, name = cfg.reward.rpartition(":")
        d["reward"] = f"{Path(where).expanduser().resolve()}:{name}"
    if Path(cfg.judge_template).expanduser().is_file():
        d["judge_template"] = str(Path(cfg.judge_template).expanduser().resolve())
    return d


# Keys that runs recorded before tasks, reward terms and sharding existed get these values when resumed.
def _reward_defaults() -> dict:
    from dataclasses import MISSING, fields

    out = {"verifier": "math@1:last-box"}
    for f in fields(TrainConfig):
        if f.name in ("task", "grader") or f.name.startswith(("reward", "judge", "length_ceiling")):
            out[f.name] = f.default_factory() if f.default is MISSING else f.default
    out["reward_terms"] = ["correct:1"]
    out.update(sharding="none", shard_offload=False)
    out.update({f.name: f.default_factory() if f.default is MISSING else f.default for f in fields(TrainConfig)
                if f.name.startswith("lora_") or f.name == "save_merged"})  # runs from before LoRA
    return out


def _check_run_dir(cfg: TrainConfig) -> int:
    """Return the step of the last checkpoint to resume from (0 = fresh). Refuses a different config.

    The run directory is not part of a run's identity (``runs/x``, ``./runs/x/``, its absolute
    path or the directory after a move are one run); everything else must match.
    """
    out = output_dir(cfg.output_dir, "--output-dir", create=False)  # before any model loads or world builds
    saved = out / "config.json"
    refuse_other_config(saved, stored_config(cfg), "use another --output-dir", defaults=_reward_defaults(),
                        ignore=("output_dir", "server", "sync_bucket_mb", "dist_timeout_s"))  # not the run's identity
    steps = [int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if p.name.split("-")[1].isdigit()
             and (p / "trainer_state.json").exists()]
    return max(steps, default=0)


def completed(cfg: TrainConfig) -> dict | None:
    """summary.json of a finished run in ``cfg.output_dir`` (same config), else None."""
    out = Path(cfg.output_dir).expanduser()
    if (out / "summary.json").is_file() and (out / "final").is_dir():
        _check_run_dir(cfg)
        return read_json(out / "summary.json")
    return None


def model_card(cfg: TrainConfig, steps: int) -> str:
    """README.md of a run and of its final/ weights (instead of TRL's placeholder card)."""
    stored = stored_config(cfg)
    partner = {"tandem": f"Tandem RLVR (arXiv 2606.28166): rollouts co-written with the frozen junior, schedule "
                         f"`{cfg.schedule}`, p = {cfg.p}, K = {cfg.K}; GRPO loss on the senior's tokens only",
               "grpo": "vanilla GRPO (rollouts by the senior alone)",
               "klreg": f"KL-regularised GRPO: beta = {cfg.beta} x KL(senior || junior) on the senior's own rollouts"}
    return "\n".join([
        f"# {Path(stored['output_dir']).name}", "",
        f"Trained with tandem-rlvr (`tandem train`), method **{cfg.method}**: {partner[cfg.method]}.", "",
        f"- base model (senior initialisation): `{stored['senior']}`",
        f"- junior (frozen): `{stored['junior'] or stored['senior']}`"
        + (" (not used by the rollouts of this method)" if cfg.method == "grpo" else ""),
        f"- training data: `{stored['dataset']}` (split {cfg.dataset_split}), validation: "
        f"{'`' + str(stored['val_dataset']) + '`' if cfg.val_dataset else f'a held-out slice of {cfg.val_size} problems'}",
        f"- optimiser steps: {steps} (updates; {-(-steps // cfg.updates_per_batch)} rollout steps of "
        f"{cfg.updates_per_batch}; max_steps {cfg.max_steps} {cfg.step_unit}s); {cfg.prompts_per_minibatch} prompts x "
        f"{cfg.group_size} rollouts per update, lr {cfg.lr}, clip {cfg.clip}, temperature {cfg.temperature}",
        f"- task: `{cfg.task}` (verifier `{stored['verifier']}`); reward: {_reward_note(cfg)}; seed {cfg.seed}",
        f"- weights: {_weights_note(cfg)}", "",
        "Full configuration: `config.json` of the run directory; per-step log: `log.jsonl`.", ""])


def _reward_note(cfg: TrainConfig) -> str:
    """The reward in words: its terms with their coefficients (rewards.terms)."""
    words = {"correct": "correctness" + (" (binary verifier on the last \\boxed{} answer)" if cfg.task == "math" else ""),
             "length": f"length penalty -tokens/{cfg.length_ceiling or cfg.max_new_tokens}",
             "format": "answer-format bonus",
             "judge": f"judge bonus ({cfg.judge_mode}; judge `{cfg.judge}`, template `{cfg.judge_template}`, parser "
                      f"`{cfg.judge_parser}`)",
             "user": f"`{cfg.reward}`"}
    parts = []
    for spec in cfg.reward_terms:
        name, _, coef = spec.partition(":")
        parts.append(f"{coef} x {words[name]}" if float(coef) != 1 else words[name])
    return " + ".join(parts)


def _weights_note(cfg: TrainConfig) -> str:
    compute, master = (str(d).removeprefix("torch.") for d in precision(cfg)[1:])
    if cfg.lora_r:
        return (f"LoRA adapters (r = {cfg.lora_r}, alpha = {cfg.lora_alpha:g}, on {', '.join(cfg.lora_targets)}) in "
                f"{master} over a frozen {compute} base; every save holds the adapter (PEFT format)"
                + (f", and merged/ the merged weights in {compute}" if cfg.save_merged else ""))
    if master == compute:
        return f"trained and saved in {compute}"
    return (f"trained with {master} master weights and {compute} compute; checkpoint-* hold the {master} masters, "
            f"final/ and best/ are exported in {compute}")


def micro_batching(cfg: TrainConfig, num_processes: int) -> tuple[int, int]:
    """(rows per forward/backward on each process, micro-batches accumulated per update)."""
    rows = cfg.prompts_per_minibatch * cfg.group_size
    if rows % num_processes:
        raise TandemError(f"{rows} rollouts per mini-batch do not split over {num_processes} processes")
    per_process = rows // num_processes
    micro = cfg.micro_batch_rows or per_process
    if per_process % micro:
        raise TandemError(f"micro_batch_rows={micro} does not divide the {per_process} rows of a mini-batch per process")
    return micro, per_process // micro


def grpo_args(cfg: TrainConfig, num_processes: int, on_cpu: bool):
    """TRL's GRPOConfig for ``cfg``: one update per mini-batch, accumulated over its micro-batches."""
    from trl import GRPOConfig

    micro, accumulate = micro_batching(cfg, num_processes)
    _, compute, master = precision(cfg)
    mixed = master != compute  # autocast in the compute dtype over fp32 master weights
    # fsdp2: FSDP's activation checkpointing and mixed-precision policy instead (rl/sharding.configure)
    sharded = {"fsdp": True, "fsdp_config": fsdp_settings(cfg)} if cfg.sharding == "fsdp2" else {}
    return GRPOConfig(
        output_dir=cfg.output_dir, learning_rate=cfg.lr, epsilon=cfg.clip, beta=cfg.beta, loss_type="dapo",
        scale_rewards="group" if cfg.scale_rewards else "none", num_generations=cfg.group_size,
        per_device_train_batch_size=micro, gradient_accumulation_steps=accumulate,
        # TRL counts one "step" per micro-batch here: a rollout batch feeds updates_per_batch x accumulate of them
        steps_per_generation=cfg.updates_per_batch * accumulate, num_iterations=1,
        max_completion_length=cfg.max_new_tokens,
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, max_steps=cfg.updates(cfg.max_steps),
        num_train_epochs=cfg.epochs, save_steps=cfg.updates(cfg.save_every), save_total_limit=cfg.save_total_limit,
        logging_steps=1, report_to=[] if cfg.report_to == "none" else [cfg.report_to], seed=cfg.seed,
        use_cpu=on_cpu, bf16=mixed and compute == torch.bfloat16, fp16=mixed and compute == torch.float16,
        gradient_checkpointing=cfg.gradient_checkpointing and not sharded, entropy_coef=0.0, disable_dropout=True,
        delta=cfg.dual_clip or None,  # TRL's cap of the ratio; for A < 0 it is verl's dual-clip (docs/paper_fidelity.md)
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=cfg.weight_decay, max_grad_norm=1.0,
        logging_nan_inf_filter=False,  # a NaN loss is logged as NaN (rl.guard stops the run), never averaged away
        log_completions=False, remove_unused_columns=False, save_only_model=False, disable_tqdm=True,
        dataloader_num_workers=0, ddp_timeout=cfg.dist_timeout_s,
        # KL-Reg is plain k3 (the paper's verl low_var_kl); newer TRL multiplies it by the ratio by default
        **({"use_bias_correction_kl": False} if "use_bias_correction_kl" in GRPOConfig.__dataclass_fields__ else {}),
        **sharded,
    )


@dataclass
class Run:
    """A ready-to-train run: the trainer and the pieces tests and benchmarks reach into."""

    trainer: object
    prep: Prepared
    rollout: object
    runlog: object
    validation: object
    resume_step: int
    lock: RunLock | None = None  # held until the run ends (or this object is collected)
    fresh: bool = False  # this call created config.json (a failed start may remove it)
    dir_was_new: bool = False
    judge: object = None  # rewards.judge.Judge of a judge reward term

    def close(self) -> None:
        """Free the rollout engine and the judge, if any."""
        self.rollout.engine.close()
        if self.judge is not None:
            self.judge.close()


def build_run(cfg: TrainConfig, print_fn=print) -> Run:
    """Validate everything, then create the run directory and the trainer (nothing trained yet)."""
    import datasets
    from accelerate import PartialState
    from transformers import PrinterCallback, ProgressCallback

    from ..engines.base import engine_kind
    from ..tasks import task_row
    from .callbacks import CheckpointWeights, MergedCheckpoint, RunLog, Validation
    from .guard import FiniteGuard
    from .rollout import TandemRollout
    from .trainer import TandemGRPOTrainer

    cfg = from_launcher(cfg)
    _check_run_dir(cfg)  # refuse a different config before loading anything
    if cfg.sharding != "none" and "LOCAL_RANK" not in os.environ:  # what torchrun and accelerate launch set
        raise TandemError(f"--sharding {cfg.sharding} needs a distributed launch: `torchrun --nproc_per_node N -m "
                          "tandem_rlvr.cli train ...` or `accelerate launch ... -m tandem_rlvr.cli train ...`")
    if cfg.sharding != "none" and not engine_kind(cfg.engine).sharded_training:
        raise TandemError(f"engine {cfg.engine} takes the senior's weights as a whole state dict; --sharding "
                          f"{cfg.sharding} shards them: train with engine hf, or without sharding (DDP)")
    check_lora_targets(cfg)  # from the senior's config alone, before its weights load
    prep = prepare(cfg)
    on_cpu = next(prep.pair.senior.parameters()).device.type == "cpu"
    # cpu=True: under torchrun on a CPU machine, accelerate only joins the launcher's processes
    # (gloo) when told the run is on CPU; without it every process trains alone.
    state = PartialState(cpu=on_cpu, timeout=timedelta(seconds=cfg.dist_timeout_s))
    args = grpo_args(cfg, state.num_processes, on_cpu)
    _, compute, _ = precision(cfg)
    if cfg.sharding == "fsdp2":
        configure_sharding(args, compute, on_cpu)
    tok = prep.pair.tokenizer
    # task_row: the task's row as JSON (nested gold such as unit tests fits any Arrow schema), for the reward terms
    rows = [{"prompt": prep.prompt_text(p), "answer": p.answer, "problem_id": str(p.problem_id),
             "task_row": json.dumps(task_row(p), sort_keys=True, default=str)} for p in prep.train]
    ds = datasets.Dataset.from_list(rows)
    engine = open_rollout_engine(cfg, prep.pair, state.num_processes)  # fails before the run directory is touched
    rollout = TandemRollout(cfg, prep.pair, engine)

    dir_was_new = not Path(cfg.output_dir).expanduser().exists()
    out = output_dir(cfg.output_dir, "--output-dir")
    lock = RunLock(out) if state.is_main_process else None
    fresh = False
    judge = None
    try:
        resume_step = _check_run_dir(cfg)  # again, now that no other writer can change the directory
        fresh = not (out / "config.json").exists()
        if state.is_main_process:
            write_json(out / "config.json", stored_config(cfg))
        runlog = RunLog(out, resume_step, print_fn, cfg.updates_per_batch)
        validation = Validation(prep, out, runlog, rollout, precision(cfg)[1])
        weights = CheckpointWeights(out, cfg.sync_bucket_mb << 20)
        reward_funcs, args.reward_weights, judge = reward_functions(cfg, prep.task, out)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*rollout_func.*")
            warnings.filterwarnings("ignore", category=FutureWarning)
            trainer = TandemGRPOTrainer(
                model=prep.pair.senior, reward_funcs=reward_funcs, args=args, train_dataset=ds,
                processing_class=tok, rollout_func=rollout,
                callbacks=[FiniteGuard(lambda: _check_run_dir(cfg)), runlog, validation, weights], junior=prep.pair.junior,
                require_senior_mask=cfg.method == "tandem", junior_imitation=cfg.junior_imitation,
                ref_is_junior=cfg.method == "klreg", kl_clamp=cfg.kl_clamp,
                junior_token_weight=cfg.junior_token_weight, loss_normalizer=cfg.loss_normalizer,
                model_card=lambda steps: model_card(cfg, steps), peft_config=lora_config(cfg))
        if cfg.lora_r:
            prepare_lora(trainer, cfg, print_fn)
            if cfg.save_merged:
                trainer.add_callback(MergedCheckpoint(out, compute, tok, cfg.sync_bucket_mb << 20))
        for cb in (PrinterCallback, ProgressCallback):  # our RunLog prints one line per step instead
            trainer.remove_callback(cb)
        validation.trainer = weights.trainer = trainer
        if _zero3(trainer):  # an accelerate launch config's DeepSpeed (its FSDP became cfg.sharding above)
            raise TandemError("DeepSpeed ZeRO-3 partitions the senior, and the partitions do not reach the rollout "
                              "copy, engines or saves: shard with --sharding fsdp2 (docs/sharding.md), or use ZeRO 1-2")
    except BaseException:
        engine.close()
        if judge is not None:
            judge.close()
        if lock is not None:
            if fresh:
                remove_failed_start(out, ["config.json", "log.jsonl", "judge_cache.sqlite"], dir_was_new)
            lock.release()
        raise
    return Run(trainer, prep, rollout, runlog, validation, resume_step, lock, fresh, dir_was_new, judge)


def open_rollout_engine(cfg: TrainConfig, pair: Pair, num_processes: int):
    """The run's rollout engine (``engines.base.ENGINES[cfg.engine]``) on its loaded pair: the
    junior only for a tandem schedule, the hf engine's compute-dtype copy on ``rollout_device``,
    a vLLM engine in-process (all processes' engines started together when data-parallel)."""
    from ..engines.base import EngineSetup, engine_kind

    kind = engine_kind(cfg.engine)
    if num_processes > 1 and not kind.data_parallel:
        raise TandemError(f"engine {cfg.engine} trains in one process (one sender of the weights)")
    from ..engines.server_client import ServerSettings
    from ..engines.vllm_engine import VLLMSettings

    server = ServerSettings(cfg.server, api_key=os.environ.get("VLLM_API_KEY")) if cfg.server else None
    vllm = VLLMSettings(gpu_memory_utilization=cfg.vllm_gpu_memory_utilization, kv_cache_gib=cfg.vllm_kv_cache_gib,
                        max_model_len=cfg.max_prompt_tokens + cfg.max_new_tokens) if kind.vllm_settings else None
    _, compute, _ = precision(cfg)
    tandem = cfg.rollout_schedule != "senior"
    return kind.open(EngineSetup(
        cfg.senior, (cfg.junior or cfg.senior) if tandem else None, next(pair.senior.parameters()).device,
        dtype=cfg.dtype, seed=cfg.seed, vllm_settings=vllm, server=server, pair=pair,
        rollout_copy=RolloutModel(cfg.senior, compute, cfg.rollout_device if kind.rollout_device else None,
                                  sharded=cfg.sharding != "none", merged=bool(cfg.lora_r)),
        batch_rows=cfg.rollout_batch_rows, sleep=cfg.vllm_sleep, in_process=True, data_parallel=num_processes > 1))


def _zero3(trainer) -> bool:
    """Whether DeepSpeed ZeRO-3 partitions the senior's parameters over the processes."""
    ds = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return bool(trainer.is_deepspeed_enabled and ds is not None and getattr(ds, "zero_stage", 0) == 3)


def train(cfg: TrainConfig, print_fn=print) -> dict:
    """Run (or resume) one training run; returns a summary dict (also written to summary.json).

    A finished run (summary.json and final/ present) is not trained again: re-running it
    prints that it is complete and returns its summary. A run that fails before its first
    checkpoint removes what it wrote, so a corrected command starts clean.
    """
    cfg = from_launcher(cfg)
    if (done := _said_complete(cfg, print_fn)) is not None:
        return done
    run = build_run(cfg, print_fn)
    trainer, out = run.trainer, Path(cfg.output_dir).expanduser()
    ckpt = str(out / f"checkpoint-{run.resume_step}") if run.resume_step else None
    if ckpt and trainer.accelerator.is_main_process:
        print_fn(f"{cfg.output_dir}: resuming from checkpoint-{run.resume_step} (update {run.resume_step}, "
                 f"rollout step {-(-run.resume_step // cfg.updates_per_batch)})")
    try:
        if (done := _said_complete(cfg, print_fn)) is not None:  # finished by another process meanwhile
            return done
        if 0 < cfg.updates(cfg.max_steps) <= run.resume_step:  # killed after the last step, before summary.json
            trainer.load_finished_checkpoint(ckpt)  # TRL would train one step more when resumed here
        else:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=FutureWarning)
                trainer.train(resume_from_checkpoint=ckpt)
        summary = {"method": cfg.method, "steps": trainer.state.global_step,
                   "rollout_steps": -(-trainer.state.global_step // cfg.updates_per_batch), "best": run.validation.best,
                   "processes": trainer.accelerator.num_processes, "wall_total_s": run.runlog.total, "output_dir": str(out.resolve()), **invocation()}
        _save_final(trainer, run.prep.pair.tokenizer, out, model_card(cfg, trainer.state.global_step),
                    precision(cfg)[1], cfg.sync_bucket_mb << 20, cfg.save_merged)  # every process: sharded weights are gathered
        if trainer.accelerator.is_main_process:
            write_json(out / "summary.json", summary)  # last: its presence marks the run complete
    except BaseException:
        if run.fresh and run.lock is not None and not any(out.glob("checkpoint-*")):
            for name in ("best", ".best.tmp", ".best.old", ".final.tmp"):
                shutil.rmtree(out / name, ignore_errors=True)
            if run.judge is not None:
                run.judge.close()  # its cache file is closed before it is removed
            remove_failed_start(out, ["config.json", "log.jsonl", "README.md", "judge_cache.sqlite"], run.dir_was_new)
        raise
    finally:
        run.close()
        if run.lock is not None:
            run.lock.release()
    return summary


def _said_complete(cfg: TrainConfig, print_fn) -> dict | None:
    done = completed(cfg)
    if done is not None and int(os.environ.get("RANK", "0") or 0) == 0:  # once, not once per process
        print_fn(f"{cfg.output_dir}: run already complete ({done['steps']} steps); nothing to do")
    return done


def _save_final(trainer, tokenizer, out: Path, card: str, dtype: torch.dtype, bucket_bytes: int,
                merged: bool = False) -> None:
    """final/ (weights in the compute dtype, tokenizer, model card) written beside and moved into place
    whole. Called on every process: FSDP and ZeRO-3 weights are gathered collectively; the main one writes."""
    tmp, old = out / ".final.tmp", out / ".final.old"
    main = trainer.accelerator.is_main_process
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()  # no process writes into the old .final.tmp
    if trainer.is_fsdp_enabled:
        save_streamed(trainer.accelerator.unwrap_model(trainer.model), tmp, dtype, bucket_bytes)
    elif is_lora(senior := trainer.accelerator.unwrap_model(trainer.model)):
        if main:  # the adapter, and merged/ weights with save_merged (rl/lora.py)
            save_lora(senior, tmp, dtype, tokenizer, merged, bucket_bytes)
    elif trainer.is_deepspeed_enabled:
        trainer.save_model(str(tmp))  # gathers ZeRO-3 weights; saved in the masters' dtype
    elif main:
        save_in_dtype(trainer.accelerator.unwrap_model(trainer.model), tmp, dtype)
    if not main:
        return
    tokenizer.save_pretrained(tmp)
    (tmp / "README.md").write_text(card, encoding="utf-8")
    shutil.rmtree(old, ignore_errors=True)
    if (out / "final").exists():
        os.replace(out / "final", old)
    os.replace(tmp, out / "final")
    shutil.rmtree(old, ignore_errors=True)
    with atomic_write(out / "README.md") as f:
        f.write(card)
