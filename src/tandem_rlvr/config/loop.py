"""The loop part: how long to train, in which unit, how batches split, when to validate, save and log,
and the plug-in modules the run imports (``plugins``).

Units: an *update* is one optimiser step (TRL's ``global_step``), i.e. one mini-batch of
``prompts_per_minibatch`` prompts x ``group_size`` rollouts. A *rollout step* is one rollout batch of
``prompts_per_step`` prompts, which feeds ``updates_per_batch = prompts_per_step / prompts_per_minibatch``
updates (the paper: 16 prompts x 8 rollouts, mini-batches of 8 prompts, two updates per rollout step;
the paper's "step" is the rollout step). ``step_unit`` says which unit ``max_steps``, ``eval_every`` and
``save_every`` count; logs carry both (``step``, ``rollout_step``). A mini-batch may be split into
micro-batches of ``micro_batch_rows`` rows per process whose gradients accumulate into the same update.

Derived once, here: the update counts (``updates_per_batch``, ``max_updates``, ``save_updates``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import TandemError
from ..plugins import module_list
from .fields import at_least, check_part, check_seed, setting


@dataclass(frozen=True)
class LoopPart:
    """Steps and their unit, batch sizes, validation and checkpoint cadence, seed, run directory, logging."""

    prompts_per_step: int = setting(16, "prompts per rollout batch")
    prompts_per_minibatch: int = setting(8, "prompts per optimiser step (mini-batch)")
    micro_batch_rows: int = setting(0, "rows per forward/backward on each process; gradients of a mini-batch's "
                                    "micro-batches accumulate into one update (0: the whole mini-batch at once)")
    max_steps: int = setting(-1, "steps to train, in step_unit (-1: epochs x steps per epoch)")
    epochs: float = setting(2.0, "passes over the training problems when max_steps is -1", range=(0, None, True))
    step_unit: str = setting("update", "unit of max_steps, eval_every and save_every: update (one optimiser step) or "
                             "rollout (one rollout batch = prompts_per_step / prompts_per_minibatch updates: the "
                             "paper's step)", choices=("update", "rollout"))
    eval_every: int = setting(20, "steps (in step_unit) between validation accuracy checks (0 = off)")
    eval_n: int = setting(1, "samples per validation problem", range=(1, None, False))
    decline_drop: float = setting(0.10, "flag a decline when validation accuracy falls this far below its best",
                                  range=(0, 1, True))
    best_by_junior: str = setting("pool-mean", "a junior pool: best/ is the step with the best validation accuracy "
                                  "averaged over the pool's juniors by their weights (pool-mean), or with one named "
                                  "junior (its name or label in the pool)")
    save_every: int = setting(20, "steps (in step_unit) between checkpoints (a whole number of rollout steps)")
    save_total_limit: int | None = setting(2, "checkpoints kept besides the best", range=(1, None, False))
    keep_weights: bool = setting(False, "also export every save's senior weights to weights/step-N (compute dtype, "
                                 "loadable with from_pretrained) and never prune them, as the paper keeps every save; "
                                 "checkpoint-* with the optimiser state still follow save_total_limit")
    kl_every: int = setting(1, "steps between KL-to-junior monitoring forwards (0 = off)")
    seed: int = setting(0, "seed of data order, initial rollouts and authorship coins")
    output_dir: str = setting("runs/tandem", "run directory: checkpoints, log.jsonl, best/")
    report_to: str = setting("none", "trackers that receive the training and validation figures, comma-separated: "
                             "trackio, tensorboard, wandb, ... (transformers' report_to names; offline modes follow "
                             "their own variables, e.g. WANDB_MODE=offline), or none")
    trl: dict = field(default_factory=dict, metadata={"help": (
        "TRL GRPOConfig fields no key above sets, by TRL's name (YAML: a mapping; flag: NAME=VALUE,...; e.g. "
        "loss_type=dr_grpo,lr_scheduler_type=cosine,warmup_steps=0.1); the run's defaults are the paper's: loss_type "
        "dapo, a constant learning rate, no warm-up, max_grad_norm 1")})
    plugins: list[str] = setting([], "modules that register your schedules, tasks, reward terms, engines or benchmarks "
                                 "(comma-separated on the command line), imported before the settings are checked, in "
                                 "every process of the run (docs/contributing.md); installed plug-ins (entry points "
                                 "tandem_rlvr.plugins) need no naming")

    def __post_init__(self):
        check_part(self)
        object.__setattr__(self, "plugins", module_list(self.plugins))
        if not isinstance(self.trl, dict) or not all(isinstance(k, str) for k in self.trl):
            raise TandemError(f"trl must be a mapping of GRPOConfig field names to values, got {self.trl!r}")
        if not isinstance(self.report_to, str) or not self.report_to.strip():
            raise TandemError(f"report_to must be tracker names (comma-separated) or none, got {self.report_to!r}")
        at_least(self, 1, "prompts_per_step", "prompts_per_minibatch")
        if self.prompts_per_step % self.prompts_per_minibatch:
            raise TandemError(f"prompts_per_step ({self.prompts_per_step}) must be a multiple of "
                              f"prompts_per_minibatch ({self.prompts_per_minibatch})")
        if self.max_steps == 0 or self.max_steps < -1:
            raise TandemError(f"max_steps must be -1 (epochs decide) or >= 1, got {self.max_steps}")
        at_least(self, 0, "eval_every", "save_every", "micro_batch_rows", "kl_every")
        at_least(self, 1, "save_every")
        if self.save_updates % self.updates_per_batch:
            raise TandemError(f"save_every ({self.save_every} {self.step_unit}s) must be a multiple of the updates per "
                              f"rollout batch ({self.updates_per_batch}) so a resumed run regenerates the same "
                              "rollouts")
        check_seed(self.seed)

    @property
    def updates_per_batch(self) -> int:
        """Optimiser updates one rollout batch feeds."""
        return self.prompts_per_step // self.prompts_per_minibatch

    def updates(self, n: int) -> int:
        """``n`` steps of ``step_unit`` in optimiser updates (-1 and 0 pass through)."""
        return n * self.updates_per_batch if self.step_unit == "rollout" and n > 0 else n

    def rollout_steps(self, updates: int) -> int:
        """The rollout steps ``updates`` optimiser updates take (a started rollout step counts)."""
        return -(-updates // self.updates_per_batch)

    @property
    def max_updates(self) -> int:
        return self.updates(self.max_steps)

    @property
    def save_updates(self) -> int:
        return self.updates(self.save_every)
