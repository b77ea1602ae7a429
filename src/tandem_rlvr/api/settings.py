"""A ``TandemGRPOTrainer``'s arguments as a run: its ``TrainConfig`` (what ``tandem train`` would read),
its ``rl.prepare.Given`` (the objects it was handed), config.json's extra entries and the reward's words.

Models given by id or path are recorded and loaded as ``tandem train`` loads them; model objects are
recorded by their ``name_or_path`` and used as they are (the senior trainable, the junior frozen). A
``peft_config`` becomes the LoRA keys (``lora_r``, ``lora_alpha``, ``lora_dropout``, ``lora_targets``).
"""

from __future__ import annotations

from ..errors import TandemError


def _spec(model, what: str) -> str | None:
    if model is None or isinstance(model, str):
        return model
    path = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if not path:
        raise TandemError(f"{what}: a model object needs a name_or_path (its directory or hub id) to be recorded")
    return path


def _lora_keys(peft_config) -> dict:
    if peft_config is None:
        return {}
    from peft import LoraConfig

    if not isinstance(peft_config, LoraConfig):
        raise TandemError(f"peft_config: only a LoraConfig trains here, got {type(peft_config).__name__}")
    targets = peft_config.target_modules
    targets = [targets] if isinstance(targets, str) else sorted(targets or ["all-linear"])
    return {"lora_r": peft_config.r, "lora_alpha": float(peft_config.lora_alpha),
            "lora_dropout": float(peft_config.lora_dropout), "lora_targets": targets}


def _dtype(args) -> str:
    return "bfloat16" if args.bf16 else "float16" if args.fp16 else "float32"


def _objects_pair(model, junior, tokenizer, method_needs_junior: bool):
    """The pair of model objects: the senior trainable, the junior frozen (default: a frozen copy of the
    senior's initial weights)."""
    import copy

    from ..models import Pair

    if isinstance(junior, str):
        from ..models import load_model

        junior = load_model(junior, next(model.parameters()).device, next(model.parameters()).dtype)
    if junior is None and method_needs_junior:
        junior = copy.deepcopy(model)
    if junior is not None:
        junior.requires_grad_(False).eval()
    model.requires_grad_(True).train()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return Pair(model, junior, tokenizer)


def run_settings(model, junior, reward_funcs, args, train_dataset, eval_dataset, processing_class, peft_config):
    """(TrainConfig, Given, config.json's extra entries) of a TandemGRPOTrainer's arguments."""
    import os

    from ..config import TrainConfig
    from ..rl.prepare import Given
    from ..rl.grpo_config import TandemGRPOConfig, train_keys
    from ..fingerprint import rows_fingerprint
    from .data import RewardGrade, as_dataset, func_name, problems, with_problem_ids

    if not isinstance(args, TandemGRPOConfig):
        raise TandemError(f"args must be a TandemGRPOConfig (TRL's GRPOConfig with the tandem settings), got "
                          f"{type(args).__name__}")
    if not reward_funcs:
        raise TandemError("reward_funcs: give at least one reward function (TRL's convention)")
    funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
    weights = list(args.reward_weights) if args.reward_weights is not None else [1.0] * len(funcs)
    if len(weights) != len(funcs):
        raise TandemError(f"reward_weights has {len(weights)} weights for {len(funcs)} reward functions")
    if train_dataset is None:
        raise TandemError("train_dataset: give a datasets.Dataset with a 'prompt' column")
    keys = train_keys(args, int(os.environ.get("WORLD_SIZE", "1")))  # the launch's processes (build_run joins them)
    senior_spec, junior_spec = _spec(model, "model"), _spec(junior, "junior") or args.junior
    keys.update(senior=senior_spec, junior=junior_spec, dtype=_dtype(args), master_dtype="float32",
                senior_device="cpu" if args.use_cpu else "auto", **_lora_keys(peft_config))
    if eval_dataset is None:
        keys["eval_every"] = 0
    train = with_problem_ids(as_dataset(train_dataset, "train_dataset"))
    val = with_problem_ids(as_dataset(eval_dataset, "eval_dataset")) if eval_dataset is not None else None
    extra = {"dataset": f"rows:{rows_fingerprint(train)}",
             "val_dataset": f"rows:{rows_fingerprint(val)}" if val else None,
             "reward_funcs": [func_name(f) for f in funcs], "reward_weights": weights}
    keys.update(dataset=extra["dataset"], val_dataset=extra["val_dataset"], val_size=max(len(val or []), 1))
    cfg = TrainConfig.from_keys(**keys)
    objects = not isinstance(model, str) or not (junior is None or isinstance(junior, str))
    if objects and isinstance(model, str):
        from ..models import load_model

        model = load_model(model, cfg.models.senior_device, cfg.models.precision.master, trainable=True)
    if processing_class is None:
        from ..models import load_tokenizer

        processing_class = load_tokenizer(senior_spec)
    pair = _objects_pair(model, junior, processing_class, cfg.method_kind.uses_junior) \
        if objects else None
    train_problems = problems(train, processing_class, "train")
    val_problems = problems(val, processing_class, "eval") if val is not None else []
    given = Given(pair, train_problems, val_problems, train, funcs, weights, RewardGrade(funcs, weights))
    return cfg, given, extra
