"""``TandemGRPOConfig``: TRL's ``GRPOConfig`` plus the tandem settings, and its translation to and from the
run settings (``config.TrainConfig``) that ``tandem train`` reads.

Every ``GRPOConfig`` field keeps TRL's meaning and default. The added fields are the settings that TRL has
no name for (method, junior, schedule, p, K, the junior-token weight, ...), each with the help text of its
``TrainConfig`` key, from which it is generated (one source: a new key is a new field). A handful of TRL's
fields are fixed by the method; a config that sets one otherwise is refused naming why (``FIXED``).

One path: ``tandem train`` builds its ``TandemGRPOConfig`` from its ``TrainConfig`` (``from_train_config``),
and ``TandemGRPOTrainer`` turns a user's ``TandemGRPOConfig`` into the ``TrainConfig`` it records and runs
(``train_keys``): the GRPOConfig fields that no key sets travel in the ``trl`` key. Both ways are one
mapping (``SAME``, ``IN_UPDATES``, ``_batch_keys``), and ``tests/unit/api/test_api.py`` checks the round trip.
"""

from __future__ import annotations

from dataclasses import MISSING, field, fields, make_dataclass

import torch
from trl import GRPOConfig

from ..config import TrainConfig, config_fields
from ..errors import TandemError

# GRPOConfig field -> TrainConfig key of the same meaning (values equal)
SAME = {"learning_rate": "lr", "epsilon": "clip", "beta": "beta", "num_generations": "group_size",
        "max_completion_length": "max_new_tokens", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
        "num_train_epochs": "epochs", "save_total_limit": "save_total_limit", "seed": "seed",
        "output_dir": "output_dir", "weight_decay": "weight_decay"}
# counted in optimiser updates here, in the key's step_unit there (the paper's preset counts rollout batches)
IN_UPDATES = {"max_steps": "max_steps", "save_steps": "save_every", "eval_every": "eval_every"}

# GRPOConfig fields the method fixes: field -> (the value it must keep, why)
FIXED = {
    "num_iterations": (1, "each rollout batch feeds its updates once (the paper's ppo_epochs = 1); rollouts "
                          "overlapping training is max_staleness"),
    "remove_unused_columns": (False, "the rollout and the reward functions read the dataset's extra columns"),
    "use_vllm": (False, "rollouts are the tandem engine's (`engine`: hf, vllm, vllm-server), not TRL's vLLM"),
    "logging_nan_inf_filter": (False, "a NaN loss is logged as NaN and stops the run, never averaged away"),
    "save_only_model": (False, "a resumed run needs the optimiser state"),
    "disable_tqdm": (True, "the run log prints one line per step"),
    "logging_steps": (1, "log.jsonl holds every update"),
    "dataloader_num_workers": (0, "the rollout batch is drawn in the training process"),
    "eval_strategy": ("no", "validation is the tandem validation (`eval_every`, on `eval_dataset`), not TRL's "
                            "evaluation loop"),
    "entropy_coef": (0.0, "the paper's objective has no entropy bonus"),
}

# TrainConfig keys with no GRPOConfig field: TandemGRPOConfig's own fields, in this order
OWN = ("method", "junior", "junior_device", "schedule", "p", "K", "junior_draw", "junior_token_weight",
       "loss_normalizer", "junior_imitation", "kl_clamp", "engine", "server", "rollout_batch_rows", "rollout_device",
       "max_staleness", "importance_correction", "importance_clip",
       "validation", "val_size", "val_draw", "eval_every", "eval_n", "decline_drop", "best_by_junior", "kl_every",
       "keep_weights", "task", "grader", "max_prompt_tokens", "sync_bucket_mb", "plugins")


def _fields():
    """The added fields (from their TrainConfig keys' fields), then the fixed ones at the value they keep."""
    by_name = {f.name: f for f in config_fields()}
    for name in OWN:
        f = by_name[name]
        meta = {"help": f.metadata["help"]}
        if f.default_factory is not MISSING:  # list settings (plugins)
            yield name, f.type, field(default_factory=f.default_factory, metadata=meta)
        else:
            yield name, f.type, field(default=f.default, metadata=meta)
    trl = {f.name: f for f in fields(GRPOConfig)}
    for name, (value, why) in FIXED.items():
        yield name, trl[name].type, field(default=value, metadata={"help": f"fixed to {value!r}: {why}"})


def _post_init(self):
    GRPOConfig.__post_init__(self)
    for name, (value, why) in FIXED.items():
        if getattr(self, name) != value:
            raise TandemError(f"TandemGRPOConfig: {name}={getattr(self, name)!r} is fixed to {value!r}: {why}")


TandemGRPOConfig = make_dataclass(
    "TandemGRPOConfig", list(_fields()), bases=(GRPOConfig,),
    namespace={"__post_init__": _post_init, "__module__": __name__, "__doc__": (
        "TRL's GRPOConfig with the Tandem RLVR settings (method, junior, schedule, p, K, ...).\n\n"
        "Every GRPOConfig field keeps TRL's meaning; those in ``FIXED`` default to, and must keep, the value the "
        "method needs. ``beta`` is KL-Reg's coefficient of KL(senior || junior): its reference is the junior, "
        "not the initial policy.")})


def micro_batching(cfg: TrainConfig, num_processes: int) -> tuple[int, int]:
    """(rows per forward/backward on each process, micro-batches accumulated per update)."""
    rows = cfg.loop.prompts_per_minibatch * cfg.rollout.group_size
    if rows % num_processes:
        raise TandemError(f"{rows} rollouts per mini-batch do not split over {num_processes} processes")
    per_process = rows // num_processes
    micro = cfg.loop.micro_batch_rows or per_process
    if per_process % micro:
        raise TandemError(f"micro_batch_rows={micro} does not divide the {per_process} rows of a mini-batch "
                          "per process")
    return micro, per_process // micro


def report_targets(report_to: str) -> list[str]:
    """``report_to`` (comma-separated: trackio, wandb, tensorboard, ...; none) as TRL's list."""
    names = [n.strip() for n in report_to.split(",") if n.strip()]
    return [] if names in ([], ["none"]) else names


def check_trl_overrides(overrides: dict) -> None:
    """The ``trl`` key's GRPOConfig fields: each a field of GRPOConfig, not one a key sets, not a fixed one."""
    known = {f.name for f in fields(GRPOConfig)}
    by_key = {**SAME, **IN_UPDATES, "per_device_train_batch_size": "micro_batch_rows", "gradient_accumulation_steps":
              "prompts_per_minibatch", "steps_per_generation": "prompts_per_step", "delta": "dual_clip",
              "scale_rewards": "scale_rewards", "report_to": "report_to", "gradient_checkpointing":
              "gradient_checkpointing"}
    for name in overrides:
        if name not in known:
            raise TandemError(f"trl: {name!r} is not a GRPOConfig field (TRL {_trl_version()})")
        if name in by_key:
            raise TandemError(f"trl: {name} is set by the key {by_key[name]!r}; set that instead")
        if name in FIXED:
            raise TandemError(f"trl: {name} is fixed to {FIXED[name][0]!r}: {FIXED[name][1]}")


def _trl_version() -> str:
    import trl

    return trl.__version__


def from_train_config(cfg: TrainConfig, num_processes: int, on_cpu: bool, sharded: dict | None = None):
    """The ``TandemGRPOConfig`` of a run: one update per mini-batch, accumulated over its micro-batches, in the
    run's precision; the ``trl`` key's fields last. ``sharded``: the FSDP or DeepSpeed fields of its layout."""
    micro, accumulate = micro_batching(cfg, num_processes)
    _, compute, master = cfg.models.precision
    mixed = master != compute  # autocast in the compute dtype over fp32 master weights
    m, loss, loop = cfg.models, cfg.loss, cfg.loop
    check_trl_overrides(loop.trl)
    keys = cfg.to_dict()
    values = {grpo: keys[key] for grpo, key in SAME.items()}
    values.update({k: keys[k] for k in OWN})
    values.update({grpo: loop.updates(keys[key]) for grpo, key in IN_UPDATES.items()})
    try:
        return TandemGRPOConfig(
            **values, scale_rewards="group" if loss.scale_rewards else "none",
            per_device_train_batch_size=micro, gradient_accumulation_steps=accumulate,
            # TRL counts one "step" per micro-batch here: a rollout batch feeds updates_per_batch x accumulate of them
            steps_per_generation=loop.updates_per_batch * accumulate,
            report_to=report_targets(loop.report_to), use_cpu=on_cpu, bf16=mixed and compute == torch.bfloat16,
            fp16=mixed and compute == torch.float16,
            gradient_checkpointing=m.gradient_checkpointing and not m.backend.own_checkpointing,
            delta=loss.dual_clip or None,  # TRL's cap of the ratio; for A < 0 it is verl's dual-clip
            ddp_timeout=m.dist_timeout_s, **{**RUN_DEFAULTS, **loop.trl},
            # KL-Reg is plain k3 (the paper's verl low_var_kl); newer TRL multiplies it by the ratio by default
            **({"use_bias_correction_kl": False}
               if "use_bias_correction_kl" in GRPOConfig.__dataclass_fields__ else {}),
            **(sharded or {}))
    except (ValueError, TypeError) as e:
        raise TandemError(f"GRPOConfig refused the run's settings: {e}") from None


# GRPOConfig fields whose run default is not TRL's (the paper's verl settings): the ``trl`` key may change them
RUN_DEFAULTS = {"loss_type": "dapo", "lr_scheduler_type": "constant", "warmup_steps": 0, "max_grad_norm": 1.0,
                "log_completions": False}

# the fields from_train_config sets from the keys (so a user's config records them through the keys)
_DERIVED = set(SAME) | set(OWN) | set(IN_UPDATES) | set(FIXED) | {
    "scale_rewards", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
    "report_to", "use_cpu", "bf16", "fp16", "gradient_checkpointing", "delta", "ddp_timeout", "use_bias_correction_kl",
    "fsdp", "fsdp_config", "deepspeed", "activation_checkpointing", "generation_batch_size"}
# fields that only say where or how fast, never what is trained (not recorded in the run's identity)
NOT_RECORDED = {"accelerator_config", "debug", "pad_to_multiple_of", "logging_dir", "push_to_hub", "hub_model_id",
                "hub_token", "run_name", "project", "trackio_space_id", "dataloader_pin_memory", "output_dir"}


def train_keys(args, num_processes: int) -> dict:
    """The ``TrainConfig`` keys of a user's ``TandemGRPOConfig``: the mapped fields by their keys, the batch
    layout in prompts, and in the ``trl`` key every other GRPOConfig field that differs from the run's default
    (``RUN_DEFAULTS``, else TRL's)."""
    keys = {key: getattr(args, grpo) for grpo, key in SAME.items()}
    keys.update({k: getattr(args, k) for k in OWN})
    keys.update({key: getattr(args, grpo) for grpo, key in IN_UPDATES.items()}, step_unit="update")
    if keys["save_every"] != int(keys["save_every"]):
        raise TandemError(f"save_steps={args.save_steps}: a fraction of the run is not supported; give updates")
    keys["save_every"] = int(keys["save_every"])
    keys.update(_batch_keys(args, num_processes))
    keys["dual_clip"] = args.delta or 0.0
    if args.scale_rewards not in ("group", "none", True, False):
        raise TandemError(f"scale_rewards={args.scale_rewards!r}: the tandem methods scale by the group (group) or "
                          "not at all (none)")
    keys["scale_rewards"] = args.scale_rewards in ("group", True)
    keys["report_to"] = ",".join(args.report_to) or "none"
    keys["gradient_checkpointing"] = bool(args.gradient_checkpointing)
    trl = {}
    for f in fields(GRPOConfig):
        if f.name in _DERIVED or f.name in NOT_RECORDED or not f.init:
            continue
        value = _plain(getattr(args, f.name))
        default = RUN_DEFAULTS[f.name] if f.name in RUN_DEFAULTS else \
            _plain(f.default_factory() if f.default_factory is not MISSING else f.default)
        if value != default:
            trl[f.name] = value
    keys["trl"] = trl
    return keys


def _plain(value):
    """An enum field's value as its text (TrainingArguments turns strings into enums)."""
    return value.value if hasattr(value, "value") else value


def _batch_keys(args, num_processes: int) -> dict:
    """prompts_per_minibatch, prompts_per_step and micro_batch_rows from TRL's batch fields: an update is
    per_device_train_batch_size x gradient_accumulation_steps rows on each process; a generation batch is
    steps_per_generation micro-batches (default: gradient_accumulation_steps, one update per rollout batch)."""
    micro, accumulate, G = args.per_device_train_batch_size, args.gradient_accumulation_steps, args.num_generations
    steps = args.steps_per_generation or accumulate
    rows = micro * accumulate * num_processes
    if rows % G or steps % accumulate:
        raise TandemError(f"an update of {rows} rows (per_device_train_batch_size x gradient_accumulation_steps x "
                          f"{num_processes} processes) must be whole groups of num_generations={G}, and "
                          f"steps_per_generation={steps} a multiple of gradient_accumulation_steps={accumulate}")
    per_update = rows // G
    return {"prompts_per_minibatch": per_update, "prompts_per_step": per_update * (steps // accumulate),
            "micro_batch_rows": 0 if accumulate == 1 else micro}  # 0: the whole mini-batch at once
