"""Configurations: one dataclass per component, validated on construction, passed whole.

``TrainConfig`` holds every knob of ``tandem train``; each field carries help text (shown
by ``tandem train --help``, where every field is also a flag). Presets live in
``presets/*.yaml``; ``load_train_config(preset, file, overrides)`` layers defaults <
preset < file < flags, and rejects unknown keys naming the closest valid one.
``EvalConfig`` holds one ``tandem eval solo|handoff`` run (``eval.sampler.evaluate``).

Units: an *update* is one optimiser step (TRL's ``global_step``), i.e. one mini-batch of
``prompts_per_minibatch`` prompts x ``group_size`` rollouts. A *rollout step* is one rollout
batch of ``prompts_per_step`` prompts, which feeds ``prompts_per_step / prompts_per_minibatch``
updates (the paper: 16 prompts x 8 rollouts, mini-batches of 8 prompts, two updates per
rollout step; the paper's "step" is the rollout step). ``step_unit`` says which unit
``max_steps``, ``eval_every`` and ``save_every`` count; logs carry both (``step``,
``rollout_step``). A mini-batch may be split into micro-batches of ``micro_batch_rows`` rows
per process whose gradients accumulate into the same update.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import yaml

from .decoding.sampling import SamplingParams
from .decoding.schedule import SCHEDULES, check_p_K
from .engines.base import ENGINES, engine_kind
from .errors import TandemError, check_number
from .io import read_text
from .prompting import DEFAULT_INSTRUCTION, INSTRUCTIONS
from .rl.losses import LOSS_NORMALIZERS
from .rl.sharding import SHARDINGS

METHODS = ("tandem", "grpo", "klreg")
# what validation measures (TrainConfig.validation); paper-test-sets validates on these benchmarks
VALIDATIONS = ("method", "solo", "paper-test-sets")
PAPER_TEST_SETS = ("amc23_25", "aime", "minerva")
SEED_MAX = 2**32 - 1  # numpy's legacy seeding (transformers.set_seed) takes 0 .. 2**32 - 1


def check_seed(seed: int, name: str = "seed") -> int:
    """``seed`` if it is an int in [0, SEED_MAX], else a TandemError naming it."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise TandemError(f"{name} must be an integer in [0, {SEED_MAX}], got {seed!r}")
    return seed


# The range of each numeric TrainConfig field beyond "finite" (every float field must be finite, every
# int field an integer): (lo, hi, lo_open). Checked first by TrainConfig.__post_init__, the one check for
# a preset, a config file, the flags, the dry-run and the run. Fields with cross-field rules (max_steps,
# save_every, dual_clip, beta, ...) keep those below.
RANGES = {
    "lr": (0, None, True), "clip": (0, None, True), "epochs": (0, None, True), "decline_drop": (0, 1, True),
    "eval_n": (1, None, False), "val_size": (1, None, False), "limit": (1, None, False),
    "save_total_limit": (1, None, False), "top_k": (0, None, False), "top_p": (0, 1, True),
    "weight_decay": (0, None, False), "kl_clamp": (0, None, False), "dual_clip": (0, None, False),
    "beta": (0, None, False), "junior_imitation": (0, None, False), "judge_max_tokens": (1, None, False),
    "judge_timeout": (0, None, True), "judge_retries": (0, None, False), "judge_concurrency": (1, None, False),
    "vllm_kv_cache_gib": (0, None, True), "length_ceiling": (1, None, False),
    "lora_r": (0, None, False), "lora_alpha": (0, None, True), "lora_dropout": (0, 1, False),
}


def _check_numbers(cfg) -> None:
    """Every int/float field of ``cfg`` finite, of its type and in its ``RANGES`` entry (NaN fails every rule)."""
    for f in fields(cfg):
        kind = f.type.replace(" | None", "")
        if kind in ("int", "float"):
            lo, hi, lo_open = RANGES.get(f.name, (None, None, False))
            check_number(getattr(cfg, f.name), f.name, lo, hi, lo_open=lo_open, integer=kind == "int",
                         optional="None" in f.type)


def _f(default, help: str, **kw):
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrainConfig:
    """All settings of one training run (see module docstring for units)."""

    method: str = _f("tandem", "tandem (senior+junior co-write rollouts), grpo (senior alone) or klreg "
                     "(senior alone + beta * KL(senior || junior))", choices=METHODS)
    senior: str = _f("tiny", "senior initialisation: directory, .gguf, hub id, or tiny")
    junior: str | None = _f(None, "frozen junior; default: the senior's initial checkpoint (self-pairing)")
    senior_device: str = _f("auto", "device of the senior (auto: this process's GPU, cuda:$LOCAL_RANK, if available, else cpu)")
    junior_device: str | None = _f(None, "device of the junior (default: the senior's)")
    dtype: str = _f("auto", "float32, bfloat16 or auto (bf16 on CUDA, fp32 on CPU)")
    dataset: str = _f("tiny", "training problems: benchmark name, local file or hub id")
    dataset_split: str | None = _f("train", "split of a registered or hub dataset")
    val_dataset: str | None = _f(None, "validation problems (default: a held-out slice of the training data, "
                                 "never a reported benchmark)")
    val_split: str | None = _f("val", "split of the validation dataset (registered/hub datasets)")
    val_size: int = _f(200, "validation problems (held out from training when val_dataset is unset)")
    val_draw: str = _f("shuffle", "how the held-out slice is drawn: shuffle (a seeded Python shuffle) or pandas "
                       "(pandas' DataFrame.sample(n=val_size, random_state=seed), the paper's draw of its 1,000 rows)",
                       choices=("shuffle", "pandas"))
    template: str = _f("auto", "prompt template: auto, plain or chat")
    instruction: str = _f(DEFAULT_INSTRUCTION, "instruction after the problem in chat prompts: paper (the paper's "
                          "exact text, default), reason-step (this project's earlier wording) or none",
                          choices=tuple(INSTRUCTIONS))
    schedule: str = _f("word", "handoff schedule of tandem rollouts", choices=SCHEDULES)
    task: str = _f("math", "what is asked and how it is graded (tasks.TASKS: math, gsm8k, answer-tag, ...); its "
                   "verifier is recorded in config.json")
    grader: str = _f("ours", "math grader of the reward: ours (math-verify with repairs) or paper (the paper's "
                     "cascade, docs/paper_fidelity.md); part of the run's verifier", choices=("ours", "paper"))
    reward_terms: list[str] = field(default_factory=lambda: ["correct"], metadata={"help": (
        "reward = sum of coef x term over NAME[:COEF] specs (comma-separated on the command line): correct (the "
        "task's correctness, coef 1), length (-tokens/ceiling, EOS counted, coef 0.2), format (answer in the task's "
        "form, coef 0.1), judge (judge verdict on correct responses, coef 0.5), user (--reward's function, coef 1); "
        "each logged per step as rewards/NAME/mean. Default: correct")})
    reward: str | None = _f(None, "your own TRL reward function, module:function or path/to/file.py:function "
                            "(prompts, completions, dataset columns as kwargs -> list of floats); the reward term "
                            "user (added with coef 1 unless reward_terms names it)")
    length_ceiling: int | None = _f(None, "length term: tokens at which the penalty is full (default max_new_tokens)")
    judge: str | None = _f(None, "judge term: the judge model, local (directory, hub id, tiny; our hf engine) or "
                           "the http(s) URL of an OpenAI-compatible server (API key: $TANDEM_JUDGE_API_KEY)")
    judge_model: str | None = _f(None, "judge term: the model name at the judge server (default: the first it lists)")
    judge_template: str = _f("elegance", "judge term: the judge's user prompt, a built-in (elegance, yes-no) or a "
                             "text file with {question}, {response}, {answer}")
    judge_parser: str = _f("elegant-bashy", "judge term: how the verdict is read from the reply: elegant-bashy, "
                           "yes-no or score:N (the last word/number; unreadable = a logged zero)")
    judge_mode: str = _f("multiply", "judge term: multiply (term = verdict x correct, so correct x (1 + coef x "
                         "verdict): coef 0.5 is the replication's x1.5 for elegant correct solutions) or add (term "
                         "= verdict on correct responses, a flat bonus)", choices=("multiply", "add"))
    judge_max_tokens: int = _f(512, "judge term: reply budget in tokens")
    judge_timeout: float = _f(120.0, "judge term: seconds per request to a judge server")
    judge_retries: int = _f(2, "judge term: retries of a failed request to a judge server")
    judge_concurrency: int = _f(8, "judge term: requests in flight to a judge server (a local judge: rows per batch)")
    judge_device: str | None = _f(None, "judge term: device of a local judge (default: the senior's)")
    p: float = _f(0.5, "probability that the senior writes after a redraw (paper: 0.5)")
    K: int = _f(32, "word schedules: tokens before a forced redraw (paper: 32); chunk, chunk-word: tokens or words per chunk")
    lr: float = _f(1e-6, "learning rate (AdamW)")
    clip: float = _f(0.2, "PPO/GRPO clip epsilon")
    beta: float = _f(0.0, "KL(senior || junior) coefficient; klreg default 1e-3, must be 0 otherwise")
    junior_token_weight: float = _f(0.0, "weight w of junior-written tokens in the clipped GRPO objective (the "
                                    "paper's tandem_jr_tkn_weight; paper: 0; 1 = vanilla GRPO on tandem rollouts)")
    loss_normalizer: str = _f("response_tokens", "token-mean denominator: response_tokens (every response token of "
                              "the batch, junior ones included: the paper's released patch) or senior_tokens (the tokens in "
                              "the loss only, as the paper's gate test reads it; about 1/senior-share larger gradients, "
                              "which AdamW cancels but gradient clipping does not)", choices=LOSS_NORMALIZERS)
    junior_imitation: float = _f(0.0, "coefficient of a junior-imitation NLL on junior-written tokens (tandem only; "
                                 "our extension, not in the paper: 0 = off; the paper's launcher's lambda_jun is "
                                 "junior_token_weight here)")
    group_size: int = _f(8, "rollouts per prompt (G)")
    prompts_per_step: int = _f(16, "prompts per rollout batch")
    prompts_per_minibatch: int = _f(8, "prompts per optimiser step (mini-batch)")
    max_prompt_tokens: int = _f(1024, "longest prompt; longer prompts are an error")
    max_new_tokens: int = _f(3000, "longest response")
    temperature: float = _f(0.6, "rollout sampling temperature")
    top_p: float = _f(1.0, "rollout top-p")
    top_k: int = _f(0, "rollout top-k (0 = off)")
    scale_rewards: bool = _f(True, "divide advantages by the group reward std (paper: yes)")
    max_steps: int = _f(-1, "steps to train, in step_unit (-1: epochs x steps per epoch)")
    epochs: float = _f(2.0, "passes over the training problems when max_steps is -1")
    limit: int | None = _f(None, "use only the first N training problems")
    eval_every: int = _f(20, "steps (in step_unit) between validation accuracy checks (0 = off)")
    validation: str = _f("method", "what validation measures: method (accuracy under the method's own rollout "
                         "schedule: tandem rollouts for tandem, as the paper's text selects checkpoints) or solo "
                         "(the senior alone, as the paper's released code validates) or paper-test-sets (the older "
                         "stack's: tandem rollouts on AMC 23-25, AIME 24-26 and Minerva, best by macro pass@eval_n; "
                         "selects on test sets)", choices=VALIDATIONS)
    eval_n: int = _f(1, "samples per validation problem")
    decline_drop: float = _f(0.10, "flag a decline when validation accuracy falls this far below its best")
    save_every: int = _f(20, "steps (in step_unit) between checkpoints (a whole number of rollout steps)")
    step_unit: str = _f("update", "unit of max_steps, eval_every and save_every: update (one optimiser step) or "
                        "rollout (one rollout batch = prompts_per_step / prompts_per_minibatch updates: the paper's "
                        "step)", choices=("update", "rollout"))
    save_total_limit: int | None = _f(2, "checkpoints kept besides the best")
    keep_weights: bool = _f(False, "also export every save's senior weights to weights/step-N (compute dtype, "
                            "loadable with from_pretrained) and never prune them, as the paper keeps every save; "
                            "checkpoint-* with the optimiser state still follow save_total_limit")
    kl_every: int = _f(1, "steps between KL-to-junior monitoring forwards (0 = off)")
    seed: int = _f(0, "seed of data order, initial rollouts and authorship coins")
    output_dir: str = _f("runs/tandem", "run directory: checkpoints, log.jsonl, best/")
    report_to: str = _f("none", "TRL/transformers report_to: none, tensorboard, wandb")
    rollout_batch_rows: int = _f(0, "rows decoded together (0: the whole per-process rollout batch)")
    master_dtype: str = _f("float32", "dtype of the weights AdamW updates: float32 (fp32 master weights, forward and "
                           "backward in `dtype` under autocast, as verl trains) or compute (the weights stay in "
                           "`dtype`; with bf16 and lr 1e-6 most updates round away: only for comparison)",
                           choices=("float32", "compute"))
    micro_batch_rows: int = _f(0, "rows per forward/backward on each process; gradients of a mini-batch's "
                               "micro-batches accumulate into one update (0: the whole mini-batch at once)")
    gradient_checkpointing: bool = _f(True, "recompute each layer's activations in the backward pass (less memory, "
                                      "about a third more compute; the paper's runs and TRL's default: on)")
    rollout_device: str | None = _f(None, "engine hf: device of the senior copy the rollouts decode with (default: "
                                    "the senior's device). With fp32 master weights the rollouts decode a copy in "
                                    "`dtype`, refreshed after each update; beside the junior it keeps the training "
                                    "device free (the paper preset: cuda:1)")
    weight_decay: float = _f(0.01, "AdamW weight decay (paper / verl: 0.01)")
    dual_clip: float = _f(3.0, "dual-clip constant c for negative advantages: the ratio is capped at c there (verl: "
                          "3; 0 = off); must exceed 1 + clip")
    kl_clamp: float = _f(10.0, "klreg: clamp each token's k3 KL term to [-c, c] (verl: 10; 0 = off)")
    engine: str = _f("hf", "rollout and validation engine: hf (our transformers decoder) or vllm (an in-process "
                     "vLLM engine colocated with training; the senior's weights are synced after every "
                     "optimiser step; vllm-server: a running `tandem serve --weight-sync` at --server, "
                     "weights pushed after every optimiser step)", choices=tuple(ENGINES))
    server: str | None = _f(None, "engine vllm-server: the server's URL, e.g. http://127.0.0.1:8000")
    vllm_gpu_memory_utilization: float = _f(0.3, "vllm engine: share of GPU memory for its weights + KV cache "
                                            "(training shares the device)")
    vllm_kv_cache_gib: float | None = _f(None, "vllm engine: KV-cache GiB (default: from the share on GPU, 1 on CPU)")
    vllm_sleep: bool = _f(False, "vllm engine: sleep (free its GPU memory) between rollouts, wake before the next; "
                          "GPU only (vLLM has no sleep mode on CPU)")
    sharding: str = _f("none", "how the trained senior is laid out over the training processes: none (each holds "
                       "the whole senior; several processes are DDP) or fsdp2 (FSDP2 through accelerate: fp32 master "
                       "shards, bf16 compute with fp32 gradient reduction, FSDP's activation checkpointing; also "
                       "chosen by an accelerate FSDP config under `accelerate launch`; docs/sharding.md)",
                       choices=SHARDINGS)
    shard_offload: bool = _f(False, "fsdp2: keep parameter shards, gradients and AdamW states in host memory "
                             "(FSDP2's CPUOffloadPolicy; the optimiser step runs on the CPU)")
    dist_timeout_s: int = _f(1800, "seconds a training process waits at a collective for the others (gradient "
                             "reduction, weight gathers) before it fails: a lost process or node is an error, not "
                             "a hang (transformers' ddp_timeout)")
    sync_bucket_mb: int = _f(512, "MiB of full tensors gathered at a time when the senior's weights go to the "
                             "rollout copy, an engine or a save (bounds the gather's memory on every rank)")
    # LoRA (rl/lora.py): r = 0 is full fine-tuning
    lora_r: int = _f(0, "LoRA rank: > 0 trains PEFT LoRA adapters of this rank on lora_targets (base frozen; rollouts "
                     "decode the merged weights); 0 = full fine-tuning")
    lora_alpha: float = _f(32.0, "LoRA alpha: the adapter's update is (alpha / r) B A (TRL's default 32)")
    lora_dropout: float = _f(0.0, "LoRA dropout on the adapter's input during the training forward, in [0, 1)")
    lora_targets: list[str] = field(default_factory=lambda: ["all-linear"], metadata={"help": (
        "LoRA target modules (comma-separated names as PEFT matches them: q_proj,v_proj,...); all-linear (PEFT's "
        "keyword, default) = every linear layer of the body, the output layer excepted")})
    save_merged: bool = _f(False, "LoRA: also write merged HF weights (compute dtype) to merged/ inside "
                           "checkpoint-N, best/ and final/, beside the adapter")

    def __post_init__(self):
        _check_numbers(self)
        if self.method not in METHODS:
            raise TandemError(f"unknown method {self.method!r}; valid: {', '.join(METHODS)}")
        if self.schedule not in SCHEDULES:
            raise TandemError(f"unknown schedule {self.schedule!r}; valid: {', '.join(SCHEDULES)}")
        if not self.lr > 0:
            raise TandemError(f"lr must be > 0, got {self.lr}")
        if self.group_size < 2:
            raise TandemError(f"group_size must be >= 2 (GRPO compares rollouts of one prompt), got {self.group_size}")
        check_p_K(self.p, self.K)
        for name in ("prompts_per_step", "prompts_per_minibatch", "max_prompt_tokens", "max_new_tokens", "val_size"):
            if getattr(self, name) < 1:
                raise TandemError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prompts_per_step % self.prompts_per_minibatch:
            raise TandemError(f"prompts_per_step ({self.prompts_per_step}) must be a multiple of "
                              f"prompts_per_minibatch ({self.prompts_per_minibatch})")
        if self.step_unit not in ("update", "rollout"):
            raise TandemError(f"unknown step_unit {self.step_unit!r}; valid: update, rollout")
        if self.max_steps == 0 or self.max_steps < -1:
            raise TandemError(f"max_steps must be -1 (epochs decide) or >= 1, got {self.max_steps}")
        for name in ("eval_every", "save_every", "micro_batch_rows", "rollout_batch_rows", "kl_every"):
            if getattr(self, name) < 0:
                raise TandemError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.save_every < 1:
            raise TandemError(f"save_every must be >= 1, got {self.save_every}")
        if self.updates(self.save_every) % self.updates_per_batch:
            raise TandemError(f"save_every ({self.save_every} {self.step_unit}s) must be a multiple of the updates per "
                              f"rollout batch ({self.updates_per_batch}) so a resumed run regenerates the same rollouts")
        if self.micro_batch_rows and (self.prompts_per_minibatch * self.group_size) % self.micro_batch_rows:
            raise TandemError(f"micro_batch_rows ({self.micro_batch_rows}) must divide the rows of a mini-batch "
                              f"({self.prompts_per_minibatch} x {self.group_size})")
        if self.master_dtype not in ("float32", "compute"):
            raise TandemError(f"unknown master_dtype {self.master_dtype!r}; valid: float32, compute")
        if self.validation not in VALIDATIONS:
            raise TandemError(f"unknown validation {self.validation!r}; valid: {', '.join(VALIDATIONS)}")
        if self.validation == "paper-test-sets" and self.val_dataset:
            raise TandemError("validation paper-test-sets validates on its own sets; leave val_dataset unset")
        if self.weight_decay < 0 or self.kl_clamp < 0:
            raise TandemError(f"weight_decay and kl_clamp must be >= 0, got {self.weight_decay}, {self.kl_clamp}")
        if self.dual_clip and self.dual_clip <= 1 + self.clip:
            raise TandemError(f"dual_clip must be 0 (off) or > 1 + clip = {1 + self.clip}, got {self.dual_clip}")
        if not (self.clip > 0 and 0 < self.temperature < float("inf")):
            raise TandemError(f"clip and temperature must be finite and > 0, got {self.clip}, {self.temperature}")
        check_seed(self.seed)
        if self.beta < 0 or self.junior_imitation < 0:
            raise TandemError(f"beta and junior_imitation must be >= 0, got {self.beta}, {self.junior_imitation}")
        if self.method == "klreg" and self.beta == 0:
            self.beta = 1e-3
        if self.method != "klreg" and self.beta != 0:
            raise TandemError(f"beta={self.beta} is only for --method klreg (got method {self.method})")
        kind = engine_kind(self.engine)
        if kind.remote != bool(self.server):
            raise TandemError("--engine vllm-server and --server URL go together")
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise TandemError(f"vllm_gpu_memory_utilization must be in (0, 1], got {self.vllm_gpu_memory_utilization}")
        if self.method == "tandem":
            kind.check_schedule(self.schedule)
        if self.sharding not in SHARDINGS:
            raise TandemError(f"unknown sharding {self.sharding!r}; valid: {', '.join(SHARDINGS)}")
        if self.shard_offload and self.sharding == "none":
            raise TandemError("shard_offload needs --sharding fsdp2 (it offloads the shards)")
        if self.dist_timeout_s < 1:
            raise TandemError(f"dist_timeout_s must be >= 1, got {self.dist_timeout_s}")
        if self.sync_bucket_mb < 1:
            raise TandemError(f"sync_bucket_mb must be >= 1, got {self.sync_bucket_mb}")
        if self.instruction not in INSTRUCTIONS:
            raise TandemError(f"unknown instruction {self.instruction!r}; valid: {', '.join(INSTRUCTIONS)}")
        if self.loss_normalizer not in LOSS_NORMALIZERS:
            raise TandemError(f"unknown loss_normalizer {self.loss_normalizer!r}; valid: {', '.join(LOSS_NORMALIZERS)}")
        if not 0.0 <= self.junior_token_weight <= 1.0:
            raise TandemError(f"junior_token_weight must be in [0, 1], got {self.junior_token_weight}")
        if self.junior_token_weight > 0 and self.method != "tandem":
            raise TandemError("junior_token_weight > 0 needs --method tandem (there are no junior tokens otherwise)")
        if self.junior_imitation > 0 and self.method != "tandem":
            raise TandemError("junior_imitation > 0 needs --method tandem (there are no junior tokens otherwise)")
        self._check_rewards()
        from .rl.lora import check_settings

        check_settings(self)

    def _check_rewards(self) -> None:
        """Task, reward terms, the user's reward and the judge settings; specs made canonical (NAME:COEF)."""
        from .rewards.terms import parse_terms
        from .tasks import get_task

        get_task(self.task)
        terms = parse_terms(self.reward_terms)
        names = [t.name for t in terms]
        if self.reward and "user" not in names:
            terms = [*terms, *parse_terms(["user"])]
        self.reward_terms = [str(t) for t in terms]
        if self.reward:
            from .rewards.user import load_reward

            load_reward(self.reward)  # a bad spec fails now, before anything is loaded
        elif "user" in names:
            raise TandemError("reward term 'user' needs --reward module:function (your reward function)")
        if self.length_ceiling is not None and self.length_ceiling < 1:
            raise TandemError(f"length_ceiling must be >= 1, got {self.length_ceiling}")
        if ("judge" in names) != bool(self.judge):
            raise TandemError("reward term 'judge' and --judge MODEL go together (the judge grades for that term)")
        if self.judge:
            self.judge_settings()
        else:  # checked even unused, so a config file's typo is caught before it matters
            from .rewards.judge import check_parser, template_text

            if not isinstance(self.judge_template, str) or not isinstance(self.judge_parser, str):
                raise TandemError("judge_template and judge_parser must be strings")
            template_text(self.judge_template)
            check_parser(self.judge_parser)
        if self.judge_mode not in ("multiply", "add"):
            raise TandemError(f"unknown judge_mode {self.judge_mode!r}; valid: multiply, add")

    def judge_settings(self):
        """The judge term's ``rewards.judge.JudgeSettings`` (validated: template, parser, numbers)."""
        from .rewards.judge import JudgeSettings

        return JudgeSettings(self.judge, self.judge_template, self.judge_parser, self.judge_model,
                             self.judge_max_tokens, self.judge_timeout, self.judge_retries, self.judge_concurrency,
                             self.judge_concurrency, self.judge_device or self.senior_device, self.dtype)

    @property
    def updates_per_batch(self) -> int:
        return self.prompts_per_step // self.prompts_per_minibatch

    def updates(self, n: int) -> int:
        """``n`` steps of ``step_unit`` in optimiser updates (-1 and 0 pass through)."""
        return n * self.updates_per_batch if self.step_unit == "rollout" and n > 0 else n

    @property
    def validation_schedule(self) -> str:
        """The schedule validation samples with: the method's rollout schedule, or the senior alone."""
        return "senior" if self.validation == "solo" else self.rollout_schedule

    @property
    def rollout_schedule(self) -> str:
        """The schedule that generates training rollouts: vanilla GRPO and KL-Reg use the senior alone."""
        return self.schedule if self.method == "tandem" else "senior"

    @property
    def sampling(self) -> SamplingParams:
        """How rollouts and validation sample."""
        return SamplingParams(self.temperature, self.top_p, self.top_k, self.max_new_tokens)

    def to_dict(self) -> dict:
        return asdict(self)


def config_fields() -> list:
    return [f for f in fields(TrainConfig)]


PRESETS_DIR = "presets"


def preset_names() -> list[str]:
    files = resources.files("tandem_rlvr").joinpath(PRESETS_DIR).iterdir()
    return sorted(Path(str(f)).stem for f in files if str(f).endswith(".yaml"))


class _DuplicateKey(Exception):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a mapping key given twice is an error (PyYAML keeps the last
    silently, so a config file's earlier setting of the same key would be ignored unseen)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                break
            if first != key_node.start_mark.line + 1:
                raise _DuplicateKey(f"key {key!r} given twice (lines {first} and {key_node.start_mark.line + 1})")
        return super().construct_mapping(node, deep)


def _read_yaml(text: str, origin: str) -> dict:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader) or {}
    except _DuplicateKey as e:
        raise TandemError(f"{origin}: {e}") from None
    except yaml.YAMLError as e:
        raise TandemError(f"{origin}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise TandemError(f"{origin}: expected a mapping of config keys")
    return data


# Keys that were renamed: the old name gets a one-line error saying where it went.
RENAMED = {"lambda_jun": "junior_imitation (the paper's launcher's lambda_jun is our junior_token_weight)"}


def _check_keys(data: dict, origin: str) -> None:
    valid = [f.name for f in config_fields()]
    for k in data:
        if k in RENAMED:
            raise TandemError(f"{origin}: config key {k!r} was renamed {RENAMED[k]}")
        if k not in valid:
            close = difflib.get_close_matches(k, valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TandemError(f"{origin}: unknown config key {k!r}{hint}")


def load_preset(name: str) -> dict:
    if name not in preset_names():
        raise TandemError(f"unknown preset {name!r}; valid: {', '.join(preset_names())}")
    text = resources.files("tandem_rlvr").joinpath(PRESETS_DIR, f"{name}.yaml").read_text(encoding="utf-8")
    data = _read_yaml(text, f"preset {name}")
    _check_keys(data, f"preset {name}")
    return data


def _typed(f, value):
    """``value`` checked against field ``f``'s type (and choices); TandemError naming the key.

    YAML's ``"no"`` (a string) is not a boolean and 2.5 is not an int: both are errors, never
    coerced. An int or a number's text (``1e-6``) is accepted for a float, a whole float (3.0) for an int.
    """
    kind = f.type.replace(" | None", "")
    if value is None:
        if "None" in f.type:
            return None
        raise TandemError(f"config key {f.name!r}: expected {kind}, got null")
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and not isinstance(value, bool):
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    if kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "float" and isinstance(value, str):  # PyYAML reads 1e-6 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if kind == "str" and isinstance(value, str):
        return value  # choices (method, schedule) are checked by TrainConfig.__post_init__
    if kind not in ("bool", "int", "float", "str"):
        return value
    raise TandemError(f"config key {f.name!r}: expected {kind}, got {value!r} ({type(value).__name__})")


def load_train_config(preset: str | None = None, file: str | None = None, overrides: dict | None = None) -> TrainConfig:
    """defaults < preset < YAML file < overrides (flags). Unknown keys are errors."""
    data: dict = {}
    if preset:
        data.update(load_preset(preset))
    if file:
        p = Path(file)
        if not p.is_file():
            raise TandemError(f"config file not found: {file}")
        extra = _read_yaml(read_text(p), file)
        _check_keys(extra, file)
        data.update(extra)
    if overrides:
        _check_keys(overrides, "flags")
        data.update({k: v for k, v in overrides.items() if v is not None})
    for f in config_fields():  # "none" on the command line means None for optional keys
        if "None" in f.type and isinstance(data.get(f.name), str) and data[f.name].lower() in ("none", "null"):
            data[f.name] = None
    for f in config_fields():
        if f.name in data:
            data[f.name] = _typed(f, data[f.name])
    return TrainConfig(**data)


def paper_eval_sampling() -> SamplingParams:
    """The paper's evaluation sampling: temperature 0.7, top-p 0.8, top-k 20, 3000 new tokens."""
    return SamplingParams(0.7, 0.8, 20, 3000)


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation run (``tandem eval solo|handoff``); built once by the caller, passed whole.

    mode "solo" samples the senior alone; "handoff" uses ``schedule`` with ``junior``
    (default: the senior's checkpoint). Defaults are the paper's evaluation: its sampling,
    its prompt instruction, its last-box grading. ``engine``: "hf" (our decoder, the
    reference) or "vllm" (with ``vllm_settings``, an ``engines.vllm_engine.VLLMSettings``).
    """

    senior: str = "tiny"
    junior: str | None = None
    mode: str = "solo"
    schedule: str = "paragraph-roundrobin"  # handoff mode only
    benchmarks: Sequence[str] = ("tiny",)
    split: str | None = None
    limit: int | None = None  # first N problems of each benchmark
    n: int = 8  # samples per problem
    sampling: SamplingParams = field(default_factory=paper_eval_sampling)
    template: str = "auto"
    instruction: str = DEFAULT_INSTRUCTION
    answer_mode: str = "last-box"  # rewards.math.ANSWER_MODES
    grader: str = "ours"  # rewards.math.GRADERS (math task): ours or the paper's cascade
    task: str = "math"  # tasks.TASKS: prompt and verifier (docs/tasks.md)
    seed: int = 0
    p: float = 0.5
    K: int = 32
    device: str = "auto"
    junior_device: str | None = None
    dtype: str = "auto"
    batch_size: int = 64  # rows decoded together
    engine: str = "hf"
    vllm_settings: Any = None
    server: Any = None  # engines.server_client.ServerSettings (engine vllm-server)
    # handoff mode: "text" (turns re-tokenised per model, the paper's code; eval/text_handoff.py) or
    # "stream" (one token stream, one shared tokenizer); None = text for paragraph-* schedules, else stream
    protocol: str | None = None

    def __post_init__(self):
        from .prompting import user_message
        from .rewards.math import check_answer_mode

        if self.mode not in ("solo", "handoff"):
            raise TandemError(f"unknown evaluation mode {self.mode!r}; valid: solo, handoff")
        if self.n < 1:
            raise TandemError(f"n (samples per problem) must be >= 1, got {self.n}")
        check_seed(self.seed)
        check_p_K(self.p, self.K)
        if self.batch_size < 1 or (self.limit is not None and self.limit < 1):
            raise TandemError(f"batch size and limit must be >= 1, got {self.batch_size} and {self.limit}")
        if self.mode == "solo" and (self.junior is not None or self.junior_device is not None):
            raise TandemError("--junior/--junior-device have no effect on a solo evaluation (the senior samples "
                              "alone); use `tandem eval handoff` to sample with a junior")
        if self.mode == "handoff" and self.schedule == "senior":
            raise TandemError("--schedule senior hands nothing off (the junior would be ignored); use `tandem eval solo`")
        if self.protocol not in (None, "text", "stream"):
            raise TandemError(f"unknown handoff protocol {self.protocol!r}; valid: text, stream")
        if self.mode == "solo" and self.protocol is not None:
            raise TandemError("--protocol applies to `tandem eval handoff` only (a solo run has no handoff)")
        if self.handoff_protocol == "text" and not self.schedule.startswith("paragraph-"):
            raise TandemError(f"--protocol text hands off at paragraph breaks; schedule {self.schedule!r} needs "
                              "--protocol stream")
        check_answer_mode(self.answer_mode)
        from .tasks import task_for_eval

        task_for_eval(self.task, instruction=self.instruction, answer_mode=self.answer_mode,
                      grader=self.grader)  # a bad name fails here
        user_message("", self.instruction)  # an unknown instruction name fails here, before any loading

    @property
    def handoff_protocol(self) -> str | None:
        """"text" or "stream" for a handoff run (the default by schedule), None for a solo run."""
        if self.mode == "solo":
            return None
        # text, the paper's protocol, for paragraph schedules on every engine (a run made under another default
        # resumes under the protocol it recorded: eval.sampler.as_recorded; docs/evaluation.md)
        return self.protocol or ("text" if self.schedule.startswith("paragraph-") else "stream")

    @property
    def schedule_name(self) -> str:
        """The schedule the decoder runs: ``senior`` for a solo evaluation."""
        return "senior" if self.mode == "solo" else self.schedule
