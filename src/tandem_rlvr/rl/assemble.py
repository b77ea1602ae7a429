"""Assembly of a training run: the rollout engine, the reward functions, the callbacks and TRL's
trainer, put together from a ``TrainConfig`` once its data is prepared (``rl.prepare``), its
identity checked (``rl.run_identity``) and its directory held (``rl.run_start``).

Everything that can be refused is refused before the run directory is touched (config, data,
models, tokenizers, prompt lengths, the engine); a failure after it ends through ``RunStart.close``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from ..config import TrainConfig
from ..errors import TandemError
from ..io import write_json
from ..models import Pair, resolve_device
from .precision import RolloutModel
from .prepare import Prepared, prepare
from .run_identity import check_run_dir, model_card, stored_config
from .run_start import RunStart
from . import same_settings
from . import backends
from .lora import check_targets as check_lora_targets, peft_config as lora_config
from .lora import prepare_trainer as prepare_lora
from .sharding import from_launcher
from .trl_args import grpo_args


def reward_functions(cfg: TrainConfig, task, run_dir: Path, given=None) -> tuple[list, list[float], object]:
    """(TRL reward functions, their weights, the judge or None) from the run's reward terms
    (``rewards.terms``); the judge's verdict cache lives in the run directory, so a resumed run
    pays for no verdict twice. ``given``: the Python API's reward functions, weighted by ``reward_weights``."""
    from ..rewards.terms import build_terms, parse_terms

    if given is not None:
        return list(given.reward_funcs), list(given.reward_weights), None
    judge = user = None
    r = cfg.rewards
    if r.reward:
        from ..rewards.user import load_reward

        user = load_reward(r.reward)
    if r.judge:
        from ..engines.judge_local import open_judge

        judge = open_judge(cfg.judge_settings(), cache=run_dir / "judge_cache.sqlite")
    funcs, weights = build_terms(parse_terms(r.reward_terms), task, ceiling=cfg.length_ceiling_tokens, judge=judge,
                                 judge_mode=r.judge_mode, user=user)
    return funcs, weights, judge


@dataclass
class Run:
    """A ready-to-train run: the trainer and the pieces tests and benchmarks reach into."""

    trainer: object
    prep: Prepared
    rollout: object
    runlog: object
    validation: object
    resume_step: int
    start: RunStart  # the run directory as this run holds it (lock, fresh start, what to close)
    judge: object = None  # rewards.judge.Judge of a judge reward term

    @property
    def lock(self):
        return self.start.lock

    def close(self, failed: bool = False) -> None:
        """Free the rollout engine and the judge, release the directory (``RunStart.close``)."""
        self.start.close(failed)


def _check_launch(cfg: TrainConfig) -> None:
    """A sharded run needs a distributed launch (and, for ZeRO-3, DeepSpeed)."""
    sharding = cfg.models.sharding
    if cfg.models.backend.shards_parameters and "LOCAL_RANK" not in os.environ:  # torchrun's, accelerate's
        raise TandemError(f"--sharding {sharding} needs a distributed launch: `torchrun --nproc_per_node N -m "
                          "tandem_rlvr.cli train ...` or `accelerate launch ... -m tandem_rlvr.cli train ...`")
    backends.require(cfg)  # one line naming what to install


def build_run(cfg: TrainConfig, print_fn=print, given=None, make_trainer=None, stored: dict | None = None) -> Run:
    """Validate everything, then create the run directory and the trainer (nothing trained yet).

    The Python API (``api.TandemGRPOTrainer``) passes ``given`` (``rl.prepare.Given``: its models, data and
    rewards as objects), ``make_trainer`` (initialises itself with the trainer's arguments) and ``stored``
    (config.json's extra entries: the dataset's fingerprint, the reward functions' names)."""
    import datasets
    from accelerate import PartialState

    from .rollout import TandemRollout

    cfg = from_launcher(cfg)
    check_run_dir(cfg, stored)  # refuse a different config before loading anything
    _check_launch(cfg)
    check_lora_targets(cfg)  # from the senior's config alone, before its weights load
    check_server_juniors(cfg)  # a server's juniors are the run's, before any model loads
    on_cpu = resolve_device(cfg.models.senior_device).type == "cpu"
    # cpu=True: under torchrun on a CPU machine, accelerate only joins the launcher's processes
    # (gloo) when told the run is on CPU; without it every process trains alone.
    state = PartialState(cpu=on_cpu, timeout=timedelta(seconds=cfg.models.dist_timeout_s))
    same_settings.check(cfg, stored)  # every process with rank 0's settings, before any model loads
    args = grpo_args(cfg, state.num_processes, on_cpu)
    backends.configure(args, cfg, on_cpu)
    # after args: under ZeRO-3 the senior loads straight into its partitions (rl/zero3.py, "Loading")
    prep = prepare(cfg, given)
    if given is None:
        ds = datasets.Dataset.from_list(prep.dataset_rows())
    else:  # the user's rows whose prompt fits (prepare dropped the rest, with a warning)
        kept = {p.problem_id for p in prep.train}
        ds = given.dataset.filter(lambda row: str(row["problem_id"]) in kept)
    check_overlap(cfg, prep.pair, state.num_processes)
    engine = open_rollout_engine(cfg, prep.pair, state.num_processes)  # fails before the run directory is touched
    start = RunStart.take(cfg.loop.output_dir, state.is_main_process)
    start.closers.append(engine.close)
    try:
        resume_step = check_run_dir(cfg, stored)  # again, now that no other writer can change the directory
        if state.is_main_process:
            write_json(start.out / "config.json", {**stored_config(cfg), **(stored or {})})
        rollout_log = None
        if not cfg.models.pool.single:  # rollouts.jsonl: each rollout's junior (rl/pool_log.py)
            from .pool_log import RolloutLog

            rollout_log = RolloutLog(start.out, resume_step, state.is_main_process)
        problem_ids = {prep.prompt_text(p): p.problem_id for p in prep.train}  # the pool's draw keys
        rollout = TandemRollout(cfg, prep.pair, engine, problem_ids, rollout_log)
        if cfg.rollout.max_staleness:
            rollout.start_overlap()
            start.closers.insert(0, rollout.overlap.close)  # the worker stops before the engine closes
        run = _assemble(cfg, prep, args, ds, rollout, start, resume_step, print_fn, make_trainer, stored)
    except BaseException:
        start.close(failed=True)
        raise
    return run


def _assemble(cfg, prep, args, ds, rollout, start: RunStart, resume_step: int, print_fn, make_trainer=None,
              stored: dict | None = None) -> Run:
    """The callbacks, the reward functions and the trainer over a held run directory (``make_trainer``:
    how the trainer is made from its arguments, default a new ``rl.trainer.TandemGRPOTrainer``; ``stored``:
    config.json's extra entries, as ``build_run``)."""
    from transformers import PrinterCallback, ProgressCallback

    from .callbacks import CheckpointWeights, MergedCheckpoint, RunLog, Validation
    from .guard import FiniteGuard
    from .trainer import TandemGRPOTrainer

    out = start.out
    runlog = RunLog(out, resume_step, print_fn, cfg.loop.updates_per_batch)
    validation = Validation(prep, out, runlog, rollout, cfg.models.precision.compute)
    weights = CheckpointWeights(out, cfg.models.sync_bucket_mb << 20, cfg.models.precision.master)
    reward_funcs, args.reward_weights, judge = reward_functions(cfg, prep.task, out, prep.given)
    if judge is not None:
        start.closers.append(judge.close)
    loss = cfg.loss
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*rollout_func.*")
        warnings.filterwarnings("ignore", category=FutureWarning)
        trainer = (make_trainer or TandemGRPOTrainer)(
            model=prep.pair.senior, reward_funcs=reward_funcs, args=args, train_dataset=ds,
            processing_class=prep.pair.tokenizer, rollout_func=rollout,
            callbacks=[FiniteGuard(lambda: check_run_dir(cfg, stored)), runlog, validation, weights],
            junior=prep.pair.junior,
            method=cfg.method_kind, beta=loss.beta, junior_imitation=loss.junior_imitation, kl_clamp=loss.kl_clamp,
            junior_token_weight=loss.junior_token_weight, loss_normalizer=loss.loss_normalizer,
            importance=(cfg.rollout.importance_correction, cfg.rollout.importance_clip)
            if cfg.rollout.max_staleness else None,
            model_card=lambda steps: model_card(cfg, steps, stored), peft_config=lora_config(cfg))
    if cfg.models.lora_r:
        prepare_lora(trainer, cfg, print_fn)
        if cfg.models.save_merged:
            trainer.add_callback(MergedCheckpoint(out, cfg.models.precision.compute, prep.pair.tokenizer,
                                                  cfg.models.sync_bucket_mb << 20))
    for cb in (PrinterCallback, ProgressCallback):  # our RunLog prints one line per step instead
        trainer.remove_callback(cb)
    validation.trainer = weights.trainer = trainer
    return Run(trainer, prep, rollout, runlog, validation, resume_step, start, judge)


def server_settings(cfg: TrainConfig):
    """The ``engines.server_client.ServerSettings`` of a run on ``--engine vllm-server`` (key: $VLLM_API_KEY),
    else None."""
    from ..engines.server_client import ServerSettings

    return ServerSettings(cfg.rollout.server, api_key=os.environ.get("VLLM_API_KEY")) if cfg.rollout.server else None


def check_server_juniors(cfg: TrainConfig) -> None:
    """On ``--engine vllm-server`` with a junior: the server holds the run's juniors in the run's order, or a
    one-line error naming the server and the juniors that differ (``engines.served_pool``)."""
    from ..engines.base import engine_kind

    if engine_kind(cfg.rollout.engine).remote and cfg.rollout_schedule != "senior":
        from ..engines.served_pool import check_served_juniors

        check_served_juniors(server_settings(cfg), cfg.models.pool.names)


def check_overlap(cfg: TrainConfig, pair: Pair, num_processes: int) -> None:
    """What ``max_staleness`` needs once the devices are known (the rest: ``TrainConfig._check_overlap``): the hf
    engine's copy on another device than the senior trains on; above 1, one training process (the rollout worker
    pushes its snapshots alone, outside the processes' collectives)."""
    k = cfg.rollout.max_staleness
    if not k:
        return
    from ..engines.base import engine_kind

    if engine_kind(cfg.rollout.engine).rollout_device:
        train = next(pair.senior.parameters()).device
        if resolve_device(cfg.models.rollout_device) == train:
            raise TandemError(f"max_staleness {k}: rollout_device {cfg.models.rollout_device} is the device the "
                              f"senior trains on ({train}), so decoding there cannot overlap training; use another "
                              "device, or engine vllm-server")
    if k > 1 and num_processes > 1:
        raise TandemError(f"max_staleness {k}: above 1 needs one training process ({num_processes} here); several "
                          "processes overlap with max_staleness 1")


def open_rollout_engine(cfg: TrainConfig, pair: Pair, num_processes: int):
    """The run's rollout engine (``engines.base.ENGINES[cfg.rollout.engine]``) on its loaded pair: the
    junior (a pool's spec: the vLLM engine holds every junior) only for a tandem schedule, the hf engine's
    compute-dtype copy on ``rollout_device``, a vLLM engine in-process (all processes' engines started
    together when data-parallel)."""
    from ..engines.base import EngineSetup, engine_kind

    m, r = cfg.models, cfg.rollout
    kind = engine_kind(r.engine)
    from ..engines.vllm_engine import VLLMSettings

    server = server_settings(cfg)
    vllm = VLLMSettings(gpu_memory_utilization=r.vllm_gpu_memory_utilization, kv_cache_gib=r.vllm_kv_cache_gib,
                        max_model_len=cfg.data.max_prompt_tokens + r.max_new_tokens) if kind.vllm_settings else None
    tandem = cfg.rollout_schedule != "senior"
    return kind.open(EngineSetup(
        m.senior, m.pool.spec() if tandem else None, next(pair.senior.parameters()).device,
        dtype=m.dtype, seed=cfg.loop.seed, vllm_settings=vllm, server=server, pair=pair,
        rollout_copy=RolloutModel(m.senior, m.precision.compute, m.rollout_device if kind.rollout_device else None,
                                  sharded=m.backend.shards_parameters, merged=bool(m.lora_r)),
        batch_rows=r.rollout_batch_rows, sleep=r.vllm_sleep, in_process=True, data_parallel=num_processes > 1))

