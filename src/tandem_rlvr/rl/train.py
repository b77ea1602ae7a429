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

import logging
import os
import random
import warnings
from dataclasses import dataclass
from pathlib import Path


from ..config import TrainConfig
from ..data.benchmarks import Problem, load_benchmark
from ..decoding.sampling import SamplingParams
from ..decoding.schedule import make_schedule
from ..errors import TandemError
from ..io import read_json, write_json
from ..models import Pair, load_pair
from ..prompting import encode_prompt, format_prompt, resolve_template
from ..rewards.math import score
from ..runtime import invocation

log = logging.getLogger("tandem_rlvr")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# transformers 5.x renames gradient_checkpointing -> activation_checkpointing and warns on every
# TrainingArguments; TRL still uses the old name. Nothing for our users to act on.
warnings.filterwarnings("ignore", message=".*(gradient|activation)_checkpointing.*", category=FutureWarning)


def accuracy_reward(completions, answer, **kwargs) -> list[float]:
    """Binary verifier reward on the last \\boxed{} of each completion (TRL reward function)."""
    return [score(c if isinstance(c, str) else c[-1]["content"], a) for c, a in zip(completions, answer)]


@dataclass
class Prepared:
    """Everything a run needs, built and validated before anything is written."""

    cfg: TrainConfig
    pair: Pair
    train: list[Problem]
    val: list[Problem]
    template: str


def split_problems(cfg: TrainConfig) -> tuple[list[Problem], list[Problem]]:
    train = load_benchmark(cfg.dataset, split=cfg.dataset_split, limit=cfg.limit)
    if cfg.val_dataset:
        val = load_benchmark(cfg.val_dataset, split=cfg.val_split, limit=cfg.val_size)
    else:  # a seeded held-out slice of the training data
        order = list(range(len(train)))
        random.Random(cfg.seed).shuffle(order)
        if len(train) <= cfg.val_size:
            raise TandemError(f"dataset {cfg.dataset} has {len(train)} problems, too few to hold out val_size={cfg.val_size}")
        held = set(order[: cfg.val_size])
        val = [train[i] for i in sorted(held)]
        train = [p for i, p in enumerate(train) if i not in held]
    for name, ps in (("training", train), ("validation", val)):
        if not ps:
            raise TandemError(f"the {name} set is empty")
        missing = [p.problem_id for p in ps if not str(p.answer).strip()]
        if missing:
            raise TandemError(f"{name} problem {missing[0]} has no answer; the verifier needs one")
    return train, val


def prepare(cfg: TrainConfig) -> Prepared:
    train, val = split_problems(cfg)
    pair = load_pair(cfg.senior, cfg.junior or cfg.senior, cfg.senior_device, cfg.junior_device, cfg.dtype,
                     trainable=True)
    template = resolve_template(pair.tokenizer, cfg.template)
    for p in train[:256] + val:
        n = len(encode_prompt(pair.tokenizer, format_prompt(pair.tokenizer, p.problem, template, cfg.instruction)))
        if n > cfg.max_prompt_tokens:
            raise TandemError(f"problem {p.benchmark}/{p.problem_id} has a {n}-token prompt, over max_prompt_tokens={cfg.max_prompt_tokens}")
    return Prepared(cfg, pair, train, val, template)


def _check_run_dir(cfg: TrainConfig) -> int:
    """Return the step of the last checkpoint to resume from (0 = fresh). Refuses a different config."""
    out = Path(cfg.output_dir)
    saved = out / "config.json"
    if saved.exists():
        old = read_json(saved)
        diff = sorted(k for k in set(old) | set(cfg.to_dict()) if old.get(k) != cfg.to_dict().get(k))
        if diff:
            raise TandemError(f"{saved}: existing run has a different {', '.join(diff)}; use another --output-dir")
    steps = [int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if p.name.split("-")[1].isdigit()
             and (p / "trainer_state.json").exists()]
    return max(steps, default=0)


def grpo_args(cfg: TrainConfig, num_processes: int, on_cpu: bool):
    from trl import GRPOConfig

    rows = cfg.prompts_per_minibatch * cfg.group_size
    if rows % num_processes:
        raise TandemError(f"{rows} rollouts per mini-batch do not split over {num_processes} processes")
    bf16 = cfg.dtype in ("bfloat16", "bf16") or (cfg.dtype == "auto" and not on_cpu)
    return GRPOConfig(
        output_dir=cfg.output_dir, learning_rate=cfg.lr, epsilon=cfg.clip, beta=cfg.beta, loss_type="dapo",
        scale_rewards="group" if cfg.scale_rewards else "none", num_generations=cfg.group_size,
        per_device_train_batch_size=rows // num_processes, gradient_accumulation_steps=1,
        steps_per_generation=cfg.updates_per_batch, num_iterations=1, max_completion_length=cfg.max_new_tokens,
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, max_steps=cfg.max_steps,
        num_train_epochs=cfg.epochs, save_steps=cfg.save_every, save_total_limit=cfg.save_total_limit,
        logging_steps=1, report_to=[] if cfg.report_to == "none" else [cfg.report_to], seed=cfg.seed,
        use_cpu=on_cpu, bf16=bf16 and not on_cpu, entropy_coef=0.0, disable_dropout=True,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        log_completions=False, remove_unused_columns=False, save_only_model=False, disable_tqdm=True,
        dataloader_num_workers=0,
        # KL-Reg is plain k3 (the paper's verl low_var_kl); newer TRL multiplies it by the ratio by default
        **({"use_bias_correction_kl": False} if "use_bias_correction_kl" in GRPOConfig.__dataclass_fields__ else {}),
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


def build_run(cfg: TrainConfig, print_fn=print) -> Run:
    """Validate everything, then create the run directory and the trainer (nothing trained yet)."""
    import datasets
    from accelerate import PartialState
    from transformers import PrinterCallback, ProgressCallback

    from .callbacks import RunLog, Validation
    from .rollout import TandemRollout
    from .trainer import TandemGRPOTrainer

    resume_step = _check_run_dir(cfg)
    prep = prepare(cfg)
    state = PartialState()
    on_cpu = next(prep.pair.senior.parameters()).device.type == "cpu"
    args = grpo_args(cfg, state.num_processes, on_cpu)
    tok = prep.pair.tokenizer
    rows = [{"prompt": format_prompt(tok, p.problem, prep.template, cfg.instruction), "answer": p.answer, "problem_id": str(p.problem_id)}
            for p in prep.train]
    ds = datasets.Dataset.from_list(rows)
    sampling = SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens)
    rollout = TandemRollout(prep.pair.junior, tok, cfg.rollout_schedule, sampling, prep.pair.eos_ids, cfg.seed,
                            p=cfg.p, K=cfg.K, max_prompt_tokens=cfg.max_prompt_tokens,
                            rows_per_batch=cfg.rollout_batch_rows, kl_every=cfg.kl_every)

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if state.is_main_process:
        write_json(out / "config.json", cfg.to_dict())
    runlog = RunLog(out, resume_step, print_fn)
    val_prompts = [encode_prompt(tok, format_prompt(tok, p.problem, prep.template, cfg.instruction)) for p in prep.val]
    val_sched = make_schedule(cfg.rollout_schedule, tok, p=cfg.p, K=cfg.K, vocab_size=prep.pair.senior.config.vocab_size)
    validation = Validation(out, prep.val, val_prompts, prep.pair.junior, tok, val_sched, sampling, prep.pair.eos_ids,
                            cfg.seed, cfg.eval_every, cfg.eval_n, cfg.decline_drop, runlog)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*rollout_func.*")
        warnings.filterwarnings("ignore", category=FutureWarning)
        trainer = TandemGRPOTrainer(
            model=prep.pair.senior, reward_funcs=[accuracy_reward], args=args, train_dataset=ds,
            processing_class=tok, rollout_func=rollout, callbacks=[runlog, validation], junior=prep.pair.junior,
            require_senior_mask=cfg.method == "tandem", lambda_jun=cfg.lambda_jun, ref_is_junior=cfg.method == "klreg",
            junior_token_weight=cfg.junior_token_weight, loss_normalizer=cfg.loss_normalizer)
    for cb in (PrinterCallback, ProgressCallback):  # our RunLog prints one line per step instead
        trainer.remove_callback(cb)
    validation.trainer = trainer
    return Run(trainer, prep, rollout, runlog, validation, resume_step)


def train(cfg: TrainConfig, print_fn=print) -> dict:
    """Run (or resume) one training run; returns a summary dict (also written to summary.json)."""
    run = build_run(cfg, print_fn)
    trainer, out = run.trainer, Path(cfg.output_dir)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        trainer.train(resume_from_checkpoint=str(out / f"checkpoint-{run.resume_step}") if run.resume_step else None)
    summary = {"method": cfg.method, "steps": trainer.state.global_step, "best": run.validation.best,
               "wall_total_s": run.runlog.total, "output_dir": str(out), **invocation()}
    if trainer.accelerator.is_main_process:
        trainer.save_model(str(out / "final"))
        run.prep.pair.tokenizer.save_pretrained(out / "final")
        write_json(out / "summary.json", summary)
    return summary
