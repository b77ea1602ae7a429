"""``TrainConfig``: one training run's settings, made of six frozen parts plus the method.

``models`` (senior, junior, devices, dtypes, layout), ``data`` (problems, validation, prompts, task),
``rollout`` (schedule, p, K, group, sampling, engine), ``loss`` (objective, KL, optimiser), ``rewards``
(terms, judge), ``loop`` (steps, batches, eval, save, logging). Each part checks its own fields when
built and derives its values there (``models.precision``, ``data.run_task``, ``rollout.sampling``,
``loop.updates_per_batch``); this module adds only the rules that join parts.

Settings travel by their *keys*, the flat names of today's YAML files, flags and config.json
(``lr``, ``schedule``, ...): ``TrainConfig.from_keys(**keys)`` builds a config from them,
``to_dict()`` gives them back, ``with_keys(**keys)`` is a changed copy. Adding a setting is one line
in one part; its key, flag and help follow.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from ..errors import TandemError
from .data import DataPart
from .fields import setting
from .loop import LoopPart
from .loss import LossPart, check_trl_loss
from .methods import METHODS, MethodKind, method_help, method_kind, method_names
from .models import ModelsPart
from .rewards import RewardsPart
from .rollout import RolloutPart

PARTS = {"models": ModelsPart, "data": DataPart, "rollout": RolloutPart, "loss": LossPart, "rewards": RewardsPart,
         "loop": LoopPart}


def part_of_key() -> dict[str, str]:
    """Each config key's part (``{"lr": "loss", ...}``); ``method`` is the config's own."""
    return {f.name: name for name, cls in PARTS.items() for f in fields(cls)}


def config_fields() -> list:
    """Every setting's dataclass field, ``method`` first, then part by part (the flags of ``tandem train``)."""
    return [f for f in fields(TrainConfig) if f.name == "method"] + [f for cls in PARTS.values() for f in fields(cls)]


@dataclass(frozen=True)
class TrainConfig:
    """All settings of one training run (see module docstring and ``config.loop`` for units)."""

    method: str = setting("tandem", "training method (a registry row: config/methods.py)", choices=METHODS,
                          names=lambda: method_help())
    models: ModelsPart = field(default_factory=ModelsPart)
    data: DataPart = field(default_factory=DataPart)
    rollout: RolloutPart = field(default_factory=RolloutPart)
    loss: LossPart = field(default_factory=LossPart)
    rewards: RewardsPart = field(default_factory=RewardsPart)
    loop: LoopPart = field(default_factory=LoopPart)

    def __post_init__(self):
        kind = method_kind(self.method)
        if kind.reference is not None and self.loss.beta == 0:  # the row's default beta
            object.__setattr__(self, "loss", replace(self.loss, beta=kind.beta))
        if kind.reference is None and self.loss.beta != 0:
            raise TandemError(f"beta={self.loss.beta} is only for a method with a KL reference "
                              f"({method_names(lambda k: k.reference is not None)}; got method {self.method})")
        for name in ("junior_token_weight", "junior_imitation"):
            if getattr(self.loss, name) > 0 and not kind.junior_in_rollout:
                raise TandemError(f"{name} > 0 needs a method whose rollouts have junior tokens "
                                  f"({method_names(lambda k: k.junior_in_rollout)}; got method {self.method})")
        check_trl_loss(self.loop.trl)
        kind.card_words(self.to_dict())  # a card naming no config key fails here, not at the first checkpoint
        rows = self.loop.prompts_per_minibatch * self.rollout.group_size
        if self.loop.micro_batch_rows and rows % self.loop.micro_batch_rows:
            raise TandemError(f"micro_batch_rows ({self.loop.micro_batch_rows}) must divide the rows of a mini-batch "
                              f"({self.loop.prompts_per_minibatch} x {self.rollout.group_size})")
        if kind.rollout == "schedule":
            from ..engines.base import engine_kind

            engine_kind(self.rollout.engine).check_schedule(self.rollout.schedule)
        if self.rewards.judge:
            self.judge_settings()
        self._check_pool()
        self._check_overlap()

    def _check_overlap(self) -> None:
        """``max_staleness`` >= 1 on an engine that decodes elsewhere than the trainer trains (``EngineKind.overlaps``;
        hf: with a ``rollout_device``, compared with the training device when the run starts), one generation batch
        per rollout step (``rl.overlap``); above 1, a whole senior (the worker pushes snapshots of it)."""
        from ..engines.base import engine_kind

        k, r = self.rollout.max_staleness, self.rollout
        if not k:
            return
        kind = engine_kind(r.engine)
        if not kind.overlaps or (kind.rollout_device and self.models.rollout_device is None):
            where = "" if kind.overlaps else " in the training process"
            raise TandemError(f"max_staleness {k}: engine {r.engine} decodes{where} on the training devices, so it "
                              "cannot overlap training (use engine vllm-server, or hf with a rollout_device other "
                              "than training's)")
        if k > 1 and self.models.backend.shards_parameters:
            raise TandemError(f"max_staleness {k}: above 1 the rollout worker pushes snapshots of a whole senior; "
                              f"a sharded senior ({self.models.sharding}) overlaps with max_staleness 1")

    def _check_pool(self) -> None:
        """A pool of several juniors trains Tandem RLVR (every engine: docs/pool.md); best/ by a junior of the pool."""
        pool, kind = self.models.pool, self.method_kind
        if not pool.single:
            if not kind.junior_in_rollout or kind.reference is not None:
                pooled = method_names(lambda k: k.junior_in_rollout and k.reference is None).replace(", ", " | ")
                raise TandemError(f"a junior pool ({self.models.junior}) needs --method {pooled} (got {self.method}): "
                                  "rollouts a junior co-writes, and no KL reference, which is one junior (a mixture "
                                  "of juniors has no per-token log-prob the k3 term could use without choosing one; "
                                  "docs/pool.md)")
        if self.loop.best_by_junior != "pool-mean":
            try:
                pool.index(self.loop.best_by_junior)
            except TandemError as e:
                raise TandemError(f"best_by_junior: {e}") from None
            if self.validation_schedule == "senior":
                raise TandemError(f"best_by_junior {self.loop.best_by_junior}: validation {self.data.validation} "
                                  f"decodes the senior alone, with no junior to choose by")

    @classmethod
    def from_keys(cls, **keys) -> "TrainConfig":
        """The config of these keys (the rest at their defaults); an unknown key is a TandemError. The
        ``plugins`` it names are imported first (``tandem_rlvr.plugins``), so their names are valid."""
        where = part_of_key()
        unknown = [k for k in keys if k != "method" and k not in where]
        if unknown:
            raise TandemError(f"unknown config key {unknown[0]!r}")
        if keys.get("plugins"):  # their names must be registered before the parts check theirs
            from ..plugins import load_plugins, module_list

            load_plugins(module_list(keys["plugins"]))
        by_part: dict[str, dict] = {name: {} for name in PARTS}
        for k, v in keys.items():
            if k != "method":
                by_part[where[k]][k] = v
        return cls(keys.get("method", "tandem"), **{name: PARTS[name](**kw) for name, kw in by_part.items()})

    def to_dict(self) -> dict:
        """Every key with its value (config.json, ``--dry-run``): ``method``, then part by part."""
        return {"method": self.method, **{f.name: _plain(getattr(getattr(self, name), f.name))
                                          for name, cls in PARTS.items() for f in fields(cls)}}

    def with_keys(self, **keys) -> "TrainConfig":
        """A copy with these keys changed, checked as a new config."""
        return TrainConfig.from_keys(**{**self.to_dict(), **keys})

    @property
    def method_kind(self) -> MethodKind:
        """The method's registry row (``config.methods``)."""
        return method_kind(self.method)

    @property
    def rollout_schedule(self) -> str:
        """The schedule that generates training rollouts: the run's schedule for a method whose rollouts
        are co-written (``rollout`` schedule), else ``senior`` or ``junior`` (the one model alone)."""
        rollout = self.method_kind.rollout
        return self.rollout.schedule if rollout == "schedule" else rollout

    @property
    def validation_schedule(self) -> str:
        """The schedule validation samples with: the method's rollout schedule, or the senior alone."""
        return "senior" if self.data.validation == "solo" else self.rollout_schedule

    def unread_keys(self) -> dict[str, str]:
        """The rollout keys this run never reads, each with the reason: ``schedule``, ``p`` and ``K`` under a method
        whose rollouts one model writes alone, ``p`` or ``K`` under a schedule that has no use for it
        (``ScheduleKind.knobs``). ``load_train_config`` refuses them when the user set them."""
        from ..decoding.schedule import schedule_kind

        if self.method_kind.rollout != "schedule":
            why = f"method {self.method} rolls out with the {self.rollout_schedule} alone"
            return {k: why for k in ("schedule", "p", "K")}
        knobs = schedule_kind(self.rollout.schedule).knobs
        return {k: f"schedule {self.rollout.schedule} does not read it" for k in ("p", "K") if k not in knobs}

    @property
    def length_ceiling_tokens(self) -> int:
        """Tokens at which the length term's penalty is full."""
        return self.rewards.length_ceiling or self.rollout.max_new_tokens

    def judge_settings(self):
        """The judge term's ``rewards.judge.JudgeSettings`` (validated: template, parser, numbers)."""
        from ..rewards.judge import JudgeSettings

        r, m = self.rewards, self.models
        return JudgeSettings(r.judge, r.judge_template, r.judge_parser, r.judge_model, r.judge_max_tokens,
                             r.judge_timeout, r.judge_retries, r.judge_concurrency, r.judge_concurrency,
                             r.judge_device or m.senior_device, m.dtype)


def _plain(value):
    return list(value) if isinstance(value, list) else value


