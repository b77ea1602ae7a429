"""A training run's identity: what its config.json records, which run directory it may resume, and
the model card that describes it.

The run directory is not part of a run's identity (``runs/x``, ``./runs/x/``, its absolute path or
the directory after a move are one run); everything else recorded must match, or the resume is
refused naming the keys that differ. Runs recorded before tasks, reward terms and sharding existed
resume with those keys at the values they ran with (``legacy_defaults``).

A model directory keeps its path when its files are replaced, so the record also holds the fingerprint
(``fingerprint.model_fingerprint``) of each senior or single junior given as a local directory or file
(``FINGERPRINTS``); a resume whose model's fingerprint differs is refused naming that model. Built-in
models (fixed by the install) and hub ids are recorded by name only, and a run recorded without
fingerprints resumes unchecked.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

from ..config import RewardsPart, TrainConfig
from ..errors import TandemError
from ..io import read_json
from ..outdir import abs_spec, output_dir, refuse_other_config
from .checkpoint_files import latest

# config.json keys that are not the run's identity: where it lives, where its server is, transport sizes
NOT_IDENTITY = ("output_dir", "server", "sync_bucket_mb", "dist_timeout_s")
FINGERPRINTS = "model_fingerprints"  # {"senior": ..., "junior": ...} of local model files (check_models)


def model_fingerprints(d: dict) -> dict:
    """{role: fingerprint} of a stored config's senior and single junior that are local files or directories
    (``models.recorded_model`` makes those absolute; built-in names and hub ids are not fingerprinted)."""
    from ..fingerprint import model_fingerprint

    out = {}
    for role in ("senior", "junior"):
        spec = d.get(role)
        if isinstance(spec, str) and Path(spec).is_absolute() and Path(spec).exists():
            fp = model_fingerprint(spec)
            if fp is not None:
                out[role] = fp
    return out


def stored_config(cfg: TrainConfig) -> dict:
    """config.json's content: local model and data paths made absolute, so the run is recognised
    and its files work from any directory."""
    from ..data.benchmarks import benchmark_names
    from ..models import recorded_model, recorded_pool

    d = cfg.to_dict()
    d["senior"] = recorded_model(d["senior"])  # a built-in model by its name, another local path absolute
    pool = cfg.models.pool
    if pool.single:
        d["junior"] = recorded_model(d["junior"])
    else:  # the pool's canonical spec, each junior recorded so (a resume with another pool is refused)
        d["junior"] = recorded_pool(pool).spec()
    for key in ("dataset", "val_dataset"):
        d[key] = abs_spec(d[key], benchmark_names())
    d["output_dir"] = str(Path(cfg.loop.output_dir).expanduser().resolve())
    d["verifier"] = cfg.data.run_task.verifier
    reward, template = cfg.rewards.reward, cfg.rewards.judge_template
    if reward and Path(reward.rpartition(":")[0]).expanduser().is_file():
        where, _, name = reward.rpartition(":")
        d["reward"] = f"{Path(where).expanduser().resolve()}:{name}"
    if Path(template).expanduser().is_file():
        d["judge_template"] = str(Path(template).expanduser().resolve())
    fps = model_fingerprints(d)
    if fps:
        d[FINGERPRINTS] = fps
    return d


def check_models(path: Path, new: dict) -> None:
    """A TandemError naming the model whose files changed since the run in ``path`` (its config.json) was
    recorded; nothing for a run recorded without fingerprints or a model it did not fingerprint."""
    if not path.is_file():
        return
    old = read_json(path)
    before, now = (c.get(FINGERPRINTS) if isinstance(c, dict) else None for c in (old, new))
    if not isinstance(before, dict) or not isinstance(now, dict):
        return
    for role in ("senior", "junior"):
        if role in before and role in now and before[role] != now[role]:
            also = " (the self-paired junior too)" if role == "senior" and new.get("junior") is None else ""
            raise TandemError(f"{path}: the {role} {new[role]}{also} has changed since the run started (its files' "
                              f"fingerprint was {before[role]}, now {now[role]}); restore its files or use another "
                              "--output-dir")


def legacy_defaults() -> dict:
    """The values of keys that runs recorded before tasks, reward terms, sharding, LoRA, junior pools and
    plug-ins existed ran with (every rewards key, task and grader at their defaults; one junior; no plug-ins;
    synchronous rollouts)."""
    base = TrainConfig().to_dict()
    keys = [f.name for f in fields(RewardsPart)] + ["task", "grader"]
    lora = {k: base[k] for k in ("lora_r", "lora_alpha", "lora_dropout", "lora_targets", "save_merged")}  # before LoRA
    pool = {k: base[k] for k in ("junior_draw", "best_by_junior")}  # before junior pools: one junior, drawn alike
    return {**{k: base[k] for k in keys}, "verifier": "math@1:last-box", "sharding": "none", "shard_offload": False,
            **lora, **pool, "plugins": [], "trl": {},  # before plug-in modules and GRPOConfig fields
            **{k: base[k] for k in ("max_staleness", "importance_correction", "importance_clip")}}  # before overlap


def recorded_names(old: dict) -> dict:
    """An existing config.json with its senior and junior(s) read as ``models.recorded_model`` names them
    today: a run recorded with an absolute path into the shipped worlds (before built-in names were recorded,
    or by another install) is the same run as one recorded by the built-in name."""
    from ..models import recorded_model, recorded_pool_spec

    out = dict(old)
    if isinstance(out.get("senior"), str):
        out["senior"] = recorded_model(out["senior"])
    if isinstance(out.get("junior"), str):
        try:
            out["junior"] = recorded_pool_spec(out["junior"])
        except Exception:  # noqa: BLE001 - an unreadable record stays as it is (and differs, naming junior)
            pass
    return out


def check_run_dir(cfg: TrainConfig, extra: dict | None = None) -> int:
    """The step of the last checkpoint to resume from (0 = fresh); a TandemError if the directory
    holds another run's config (keys the run never reads, ``TrainConfig.unread_keys``, do not count).
    ``extra``: config.json entries beyond the config's (the Python API's dataset fingerprint and reward
    functions), which must match too."""
    out = output_dir(cfg.loop.output_dir, "--output-dir", create=False)  # before any model loads or world builds
    stored = {**stored_config(cfg), **(extra or {})}
    check_models(out / "config.json", stored)
    refuse_other_config(out / "config.json", stored, "use another --output-dir", defaults=legacy_defaults(),
                        ignore=(*NOT_IDENTITY, FINGERPRINTS, *cfg.unread_keys()), canonical=recorded_names)
    ckpt = latest(out)
    return int(ckpt.name.split("-", 1)[1]) if ckpt else 0


def completed(cfg: TrainConfig, extra: dict | None = None) -> dict | None:
    """summary.json of a finished run in ``cfg.loop.output_dir`` (same config), else None."""
    out = Path(cfg.loop.output_dir).expanduser()
    if (out / "summary.json").is_file() and (out / "final").is_dir():
        check_run_dir(cfg, extra)
        return read_json(out / "summary.json")
    return None


def said_complete(cfg: TrainConfig, print_fn, extra: dict | None = None) -> dict | None:
    """``completed(cfg)``, said once (by the first process) when the run is finished."""
    done = completed(cfg, extra)
    if done is not None and int(os.environ.get("RANK", "0") or 0) == 0:
        print_fn(f"{cfg.loop.output_dir}: run already complete ({done['steps']} steps); nothing to do")
    return done


def model_card(cfg: TrainConfig, steps: int, extra: dict | None = None) -> str:
    """README.md of a run and of its final/ weights (instead of TRL's placeholder card); ``extra``: config.json's
    entries beyond the config's, whose ``reward_funcs`` (the Python API's) are the reward instead of its terms."""
    stored, r, d, loop, loss = stored_config(cfg), cfg.rollout, cfg.data, cfg.loop, cfg.loss
    kind = cfg.method_kind
    return "\n".join([
        f"# {Path(stored['output_dir']).name}", "",
        f"Trained with tandem-rlvr (`tandem train`), method **{cfg.method}**: {kind.card_words(cfg.to_dict())}.", "",
        f"- base model (senior initialisation): `{stored['senior']}`",
        f"- junior (frozen): `{stored['junior'] or stored['senior']}`"
        + ("" if kind.uses_junior else " (not used by the rollouts or the loss of this method)"),
        f"- training data: `{stored['dataset']}` (split {d.dataset_split}), validation: "
        f"{'`' + str(stored['val_dataset']) + '`' if d.val_dataset else f'a held-out slice of {d.val_size} problems'}",
        f"- optimiser steps: {steps} (updates; {loop.rollout_steps(steps)} rollout steps of "
        f"{loop.updates_per_batch}; max_steps {loop.max_steps} {loop.step_unit}s); {loop.prompts_per_minibatch} "
        f"prompts x {r.group_size} rollouts per update, lr {loss.lr}, clip {loss.clip}, temperature {r.temperature}",
        f"- task: `{d.task}` (verifier `{stored['verifier']}`); reward: {_reward_words(cfg, extra)}; seed {loop.seed}",
        f"- weights: {_weights_note(cfg)}", "",
        "Full configuration: `config.json` of the run directory; per-step log: `log.jsonl`.", ""])


def _reward_words(cfg: TrainConfig, extra: dict | None) -> str:
    """The reward in words: the user's reward functions with their weights, else the config's terms."""
    from ..rewards.terms import describe_terms  # each term's words from its registry row

    if extra and extra.get("reward_funcs"):
        return "your reward functions: " + " + ".join(
            f"{w:g} x `{n}`" for w, n in zip(extra["reward_weights"], extra["reward_funcs"], strict=True))
    return describe_terms(cfg)


def _weights_note(cfg: TrainConfig) -> str:
    compute, master = (str(d).removeprefix("torch.") for d in cfg.models.precision[1:])
    m = cfg.models
    if m.lora_r:
        return (f"LoRA adapters (r = {m.lora_r}, alpha = {m.lora_alpha:g}, on {', '.join(m.lora_targets)}) in "
                f"{master} over a frozen {compute} base; every save holds the adapter (PEFT format)"
                + (f", and merged/ the merged weights in {compute}" if m.save_merged else ""))
    if master == compute:
        return f"trained and saved in {compute}"
    return (f"trained with {master} master weights and {compute} compute; checkpoint-* hold the {master} masters, "
            f"final/ and best/ are exported in {compute}")
