"""Trainer callbacks: the run log (jsonl + console line) and validation with best-checkpoint keeping.

``RunLog`` writes every TRL log record to ``run_dir/log.jsonl`` with our namespaced keys
(``reward/mean``, ``reward/NAME`` per reward term, ``senior/token_share``, ``wall/step_s``, ``wall/total_s``) next to
TRL's own, and prints one line per step. On resume it first drops records past the checkpoint,
so the log continues without a gap or a duplicate, and carries the accumulated wall-clock on.

``Validation`` measures validation accuracy every ``eval_every`` steps (in ``step_unit``)
with the method's own rollout schedule (tandem rollouts for Tandem RLVR, the senior alone
for GRPO and KL-Reg, as the paper's text selects checkpoints) or, with ``validation: solo``,
the senior alone (as the paper's released code validates), keeps the best weights in
``run_dir/best`` (written atomically, in the compute dtype) and flags a sharp decline. With our
decoder (engine hf), a sharded senior or one server for every process (vllm-server), every
training process validates its share of the rows and the counts are gathered (so no process
waits alone at a collective: a sharded senior's refresh, a server's push); an unsharded senior
on per-process vLLM engines validates on the main process. With a junior pool and a schedule that
uses the junior, every validation problem is decoded with each junior (the same row seeds, so the
juniors' accuracies are paired): ``val/junior/<label>/accuracy`` each, ``val/accuracy`` their mean
weighted by the pool's weights, and ``best/`` by that mean or by one junior (``best_by_junior``).

``CheckpointWeights`` adds loadable HF weights (the fp32 masters) to each ``checkpoint-N`` of a
sharded run (FSDP2 or ZeRO-3), whose Trainer checkpoint holds only per-rank shards.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
from accelerate import PartialState
from accelerate.utils import gather_object
from transformers import TrainerCallback

from ..decoding.rng import row_seed
from ..engines.base import RolloutSpec, engine_kind
from ..io import read_text, write_json
from ..prompting import encode_prompt
from .lora import is_lora, save_lora
from .precision import save_in_dtype
from .weight_stream import is_sharded, save_streamed

log = logging.getLogger("tandem_rlvr")

# row_seed's step slot for validation draws: fixed, so every validation of a run reuses the
# same coins (accuracy moves with the weights alone), and a step no run reaches, so they are
# not the coins of a training rollout.
VALIDATION_STEP_SEED = 7_000_003

# TRL's completion lengths count only the tokens its env_mask marks (senior tokens in a tandem run);
# ``response/mean_length`` (all tokens) comes from our rollout.
RENAME = {"reward": "reward/mean", "reward_std": "reward/std", "completions/mean_length": "response/senior_mean_length",
          "kl": "kl/beta_term"}


def term_aliases(rec: dict) -> dict:
    """``reward/NAME`` for each reward term's unweighted step mean TRL logs as ``rewards/NAME/mean``
    (``reward/correct``, ``reward/length``, ...; ``reward/mean`` stays the weighted sum); TRL's keys stay too."""
    out = {}
    for k, v in rec.items():
        parts = k.split("/")
        if len(parts) == 3 and parts[0] == "rewards" and parts[2] == "mean" and parts[1] not in ("mean", "std"):
            out[f"reward/{parts[1]}"] = v
    return out


def read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in read_text(path).splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a torn last line from a killed run
    return rows


class RunLog(TrainerCallback):
    def __init__(self, run_dir: Path, resume_step: int, print_fn=print, updates_per_batch: int = 1):
        self.path = run_dir / "log.jsonl"
        rows = [r for r in read_log(self.path) if r.get("step", 0) <= resume_step]
        self.is_main = PartialState().is_main_process  # one writer of the run's log, however many processes or nodes
        if self.is_main:  # the log cut back to the resumed step
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            os.replace(tmp, self.path)
        self.total = max([r.get("wall/total_s", 0.0) for r in rows] or [0.0])
        self.print = print_fn
        self.updates_per_batch = updates_per_batch  # optimiser updates per rollout batch (rollout_step = its count)
        self.resume_step = resume_step
        self._t0 = None
        self.step_s = None
        self.session_s = 0.0  # wall-clock of the steps run by this process (for the ETA)

    def on_train_begin(self, args, state, control, **kw):
        self.is_main = state.is_world_process_zero

    def on_step_begin(self, args, state, control, **kw):
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        if self._t0 is not None:
            self.step_s = time.perf_counter() - self._t0
            self.total += self.step_s
            self.session_s += self.step_s

    def write(self, step: int, record: dict) -> None:
        if not self.is_main:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "rollout_step": -(-step // self.updates_per_batch), **record}) + "\n")

    def _eta(self, state) -> str:
        """' of N, ETA' from this session's mean step time (no ETA before a step has been timed)."""
        total = state.max_steps or 0
        done = state.global_step - self.resume_step
        if not total:
            return ""
        if done <= 0 or self.session_s <= 0:
            return f"/{total}"
        left = (total - state.global_step) * self.session_s / done
        return f"/{total} eta {int(left // 60)}m{int(left % 60):02d}s"

    def on_log(self, args, state, control, logs=None, **kw):
        if not logs or "train_runtime" in logs:
            return
        rec = {RENAME.get(k, k): v for k, v in logs.items()}
        rec.update(term_aliases(rec))
        if self.step_s is not None and "loss" in rec:
            rec["wall/step_s"] = self.step_s
        rec["wall/total_s"] = self.total
        self.write(state.global_step, rec)
        if self.is_main and "loss" in rec:  # an update; rollout figures only on the update that generated
            rollout = (f"reward {rec['reward/mean']:.3f} | len {rec.get('response/mean_length', float('nan')):6.1f} | "
                       f"senior {rec.get('senior/token_share', float('nan')):.2f} | kl(jun) "
                       f"{rec.get('kl/junior', float('nan')):.4f}") if "reward/mean" in rec else \
                "same rollout batch (update {} of {})".format((state.global_step - 1) % self.updates_per_batch + 1,
                                                              self.updates_per_batch)
            self.print(f"step {state.global_step:4d}{self._eta(state)} | {rollout} | clip "
                       f"{rec.get('clip_ratio/region_mean', 0.0):.3f} | {rec.get('wall/step_s', 0.0) * 1000:.0f} ms")


def macro_pass_at_n(benchmarks: list[str], problems: list[int], correct: list[float]) -> float:
    """Mean over benchmarks of the share of problems with a correct sample among their n: pass@n from
    n samples (the older stack's checkpoint rule, n = 4). One entry per sample, aligned."""
    solved: dict[int, bool] = {}
    bench: dict[int, str] = {}
    for b, i, c in zip(benchmarks, problems, correct, strict=True):
        solved[i] = solved.get(i, False) or c > 0
        bench[i] = b
    per: dict[str, list[bool]] = {}
    for i, ok in solved.items():
        per.setdefault(bench[i], []).append(ok)
    return float(np.mean([np.mean(v) for v in per.values()]))


def to_trackers(trainer, record: dict) -> None:
    """A record's numbers to the run's trackers (the ``report_to`` callbacks: trackio, wandb, tensorboard, ...)
    at the trainer's step, beside TRL's per-step figures; ``RunLog`` has written the whole record to log.jsonl.
    Not through ``trainer.log``: TRL's would fold its pending per-step metrics into this record."""
    from transformers.integrations import INTEGRATION_TO_CALLBACK

    trackers = tuple(INTEGRATION_TO_CALLBACK.values())
    numbers = {k: float(v) for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
               and k != "wall/total_s"}
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, trackers):
            cb.on_log(trainer.args, trainer.state, trainer.control, logs=numbers)


class Validation(TrainerCallback):
    """Validation accuracy with the method's rollout schedule; keeps ``best/``.

    prep: the run's ``rl.prepare.Prepared`` (its config, model pair, validation problems and
    prompt template); run_dir: where ``best/`` goes; runlog: the run's ``RunLog``; rollout: the
    run's ``rl.rollout.TandemRollout``, whose engine validation draws from (synced by the same
    ``EngineSync``); dtype: what ``best/`` is saved in (the compute dtype, as ``final/``).
    """

    batch_rows = 256  # rows decoded together when the config sets no rollout_batch_rows

    def __init__(self, prep, run_dir: Path, runlog: RunLog, rollout, dtype):
        cfg, pair = prep.cfg, prep.pair
        self.cfg, self.run_dir, self.problems, self.runlog = cfg, run_dir, prep.val, runlog
        self.tok = pair.tokenizer
        self.prompts = [encode_prompt(self.tok, prep.prompt_text(p)) for p in prep.val]  # the run's task's prompts
        self.grade = prep.grade  # the run's task's correctness
        self.spec = RolloutSpec(cfg.validation_schedule, cfg.rollout.sampling, cfg.rollout.p, cfg.rollout.K)
        self.engine, self.sync, self.dtype = rollout.engine, rollout.sync, dtype
        # every process validates its share of the rows, so no process waits alone at a collective (a sharded
        # senior's refresh and saves, a shared engine's push), whenever the engine decodes this process's own
        # models (hf), the senior is sharded, or one engine serves every process (vllm-server)
        kind = engine_kind(cfg.rollout.engine)
        self.split_rows = kind.transformers or kind.one_sender or cfg.models.backend.shards_parameters
        best = run_dir / "best" / "best.json"
        self.best = json.loads(best.read_text()) if best.exists() else {"accuracy": -1.0, "step": -1}
        self.pool = cfg.models.pool
        self.per_junior = not self.pool.single and cfg.validation_schedule != "senior"  # each junior validates
        if self.per_junior:
            self.best.setdefault("by", cfg.loop.best_by_junior)
        self.trainer = None

    def accuracy(self, model, step: int = 0, junior: int | None = None) -> float:
        """Validation accuracy of ``model``; ``junior``: the pool junior every row decodes with (None: the first)."""
        rows = [(i, k) for i in range(len(self.prompts)) for k in range(self.cfg.loop.eval_n)]
        state = PartialState()
        if self.split_rows:  # this process's share; the counts are gathered below
            rows = rows[state.process_index::state.num_processes]
        correct = []
        was_training = model.training
        model.eval()
        try:
            self.sync(model, step)  # the engine decodes this update's weights
            # the rollouts' row budget bounds the KV caches here too
            n = self.cfg.rollout.rollout_batch_rows or self.batch_rows
            for s in range(0, len(rows), n):
                chunk = rows[s:s + n]
                seeds = [row_seed(self.cfg.loop.seed, VALIDATION_STEP_SEED, i, k) for i, k in chunk]
                prompts = [self.prompts[i] for i, _ in chunk]
                roll = self.engine.generate(prompts, seeds, self.spec) if junior is None else \
                    self.engine.generate(prompts, seeds, self.spec, juniors=[junior] * len(chunk))
                texts = [self.tok.decode(roll.row_tokens(b), skip_special_tokens=True) for b in range(len(chunk))]
                correct += self.grade(texts, [self.problems[i] for i, _ in chunk])
        finally:
            model.train(was_training)
            self.engine.sleep()  # vllm_sleep: free the engine's memory for the next optimiser step
        if self.split_rows and state.num_processes > 1:  # every process's share, in one order on every process
            rows, correct = gather_object(rows), gather_object(correct)
        if self.cfg.data.validation == "paper-test-sets":
            return macro_pass_at_n([self.problems[i].benchmark for i, _ in rows], [i for i, _ in rows], correct)
        return float(np.mean(correct))

    def _run(self, state, model):
        if not self.split_rows and not state.is_world_process_zero:
            return
        step = state.global_step
        figures = {}
        if self.per_junior:
            accs = [self.accuracy(model, step, j) for j in range(len(self.pool.names))]
            from ..models import recorded_labels

            figures = {f"val/junior/{label}/accuracy": a
                       for label, a in zip(recorded_labels(self.pool), accs, strict=True)}
            mean = sum(w * a for w, a in zip(self.pool.weights, accs, strict=True))
            by = self.cfg.loop.best_by_junior
            figures.update({"val/accuracy": mean, "val/best_by": by})
            acc = mean if by == "pool-mean" else accs[self.pool.index(by)]
        else:
            acc = self.accuracy(model, step)
            figures["val/accuracy"] = acc
        if acc > self.best["accuracy"]:
            self.best = {"accuracy": acc, "step": step}
            if self.per_junior:
                self.best["by"] = self.cfg.loop.best_by_junior
            self._save_best(model)
        decline = self.best["accuracy"] - acc >= self.cfg.loop.decline_drop
        if decline and state.is_world_process_zero:
            log.warning("validation accuracy %.3f at step %d is %.3f below the best (%.3f at step %d): sharp decline",
                        acc, step, self.best["accuracy"] - acc, self.best["accuracy"], self.best["step"])
        rec = {**figures, "val/best": self.best["accuracy"], "val/best_step": self.best["step"],
               "val/decline": int(decline), "val/problems": len(self.prompts), "val/schedule": self.spec.schedule,
               "wall/total_s": self.runlog.total}
        self.runlog.write(step, rec)
        if self.trainer is not None and state.is_world_process_zero:
            to_trackers(self.trainer, {**rec, "val/best_step": self.best["step"]})
        if self.runlog.is_main:
            pooled = f", pool mean; by {self.cfg.loop.best_by_junior} {acc:.3f}" if self.per_junior else ""
            self.runlog.print(f"step {step:4d} | validation accuracy {figures['val/accuracy']:.3f} "
                              f"({self.spec.schedule}{pooled}) | best {self.best['accuracy']:.3f} "
                              f"at step {self.best['step']}"
                              + ("  ** sharp decline **" if decline else ""))

    def _save_best(self, model):
        self._export(model, self.run_dir / "best", {"best.json": self.best})

    def _export(self, model, out: Path, extra: dict) -> None:
        """The senior's weights (compute dtype, as final/) and tokenizer in ``out``, replaced atomically;
        on every process that calls it (a sharded senior is gathered collectively), written by the main one."""
        tmp = out.parent / f".{out.name}.tmp"
        main, sharded = PartialState().is_main_process, is_sharded(model)
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        if sharded:
            PartialState().wait_for_everyone()  # no process writes into the old tmp
        if is_lora(model):  # the adapter, and merged/ weights with save_merged (collective when sharded)
            save_lora(model, tmp, self.dtype, self.tok, self.cfg.models.save_merged,
                      self.cfg.models.sync_bucket_mb << 20)
        elif sharded:
            save_streamed(model, tmp, self.dtype, self.cfg.models.sync_bucket_mb << 20)
        if not main:
            return
        if not (sharded or is_lora(model)):
            save_in_dtype(model, tmp, self.dtype)  # the compute dtype, as final/
        self.tok.save_pretrained(tmp)
        for name, data in extra.items():
            write_json(tmp / name, data)
        old = out.parent / f".{out.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)

    def on_train_begin(self, args, state, control, model=None, **kw):
        if self.cfg.loop.eval_every and state.global_step == 0 and self.best["step"] < 0:
            self._run(state, self._unwrap(model))

    def on_step_end(self, args, state, control, model=None, **kw):
        if self.cfg.loop.eval_every and state.global_step % self.cfg.loop.updates(self.cfg.loop.eval_every) == 0:
            self._run(state, self._unwrap(model))

    def on_save(self, args, state, control, model=None, **kw):
        """keep_weights: every save's weights in ``weights/checkpoint-N`` (N as the checkpoint's), never pruned."""
        if self.cfg.loop.keep_weights and model is not None:  # every process: a sharded senior is gathered collectively
            out = self.run_dir / "weights" / f"checkpoint-{state.global_step}"
            out.parent.mkdir(exist_ok=True)
            rollout_step = state.global_step // self.cfg.loop.updates_per_batch
            self._export(self._unwrap(model), out, {"step.json": {"step": state.global_step,
                                                                  "rollout_step": rollout_step}})

    def _unwrap(self, model):
        return self.trainer.accelerator.unwrap_model(model) if self.trainer is not None else model


class CheckpointWeights(TrainerCallback):
    """Loadable HF weights (in the masters' dtype) in each ``checkpoint-N`` of a sharded run.

    FSDP's sharded checkpoint and DeepSpeed's (what resume reads) hold each rank's shards only; these files let
    ``from_pretrained`` load a checkpoint as it is. Gathered bucket by bucket on every process,
    written beside and moved in by the main one, so a kill mid-write leaves no torn weight file."""

    def __init__(self, run_dir: Path, bucket_bytes: int, dtype=None):
        self.run_dir, self.bucket_bytes = run_dir, bucket_bytes
        self.dtype = dtype  # the masters' (None: the parameters' own; ZeRO-3's are bf16 partitions of fp32 masters)
        self.trainer = None

    def on_save(self, args, state, control, model=None, **kw):
        model = self.trainer.accelerator.unwrap_model(model) if self.trainer is not None else model
        if not is_sharded(model):
            return
        ckpt = self.run_dir / f"checkpoint-{state.global_step}"
        tmp = ckpt / ".hf.tmp"
        dtype = self.dtype or next(p for p in model.parameters()).dtype
        if is_lora(model):  # FSDP's sharded checkpoint leaves the Trainer no adapter to write: gathered here
            save_lora(model, tmp, dtype)
        else:
            save_streamed(model, tmp, dtype, self.bucket_bytes)
        if state.is_world_process_zero:
            for f in tmp.iterdir():
                os.replace(f, ckpt / f.name)
            tmp.rmdir()


class MergedCheckpoint(TrainerCallback):
    """``save_merged`` (LoRA): merged HF weights in ``checkpoint-N/merged`` beside the adapter the Trainer
    (or, sharded, ``CheckpointWeights``) saved there (``rl.lora``), gathered on every process when the
    senior is sharded, written beside and moved in by the main process."""

    def __init__(self, run_dir: Path, dtype, tokenizer, bucket_bytes: int):
        self.run_dir, self.dtype, self.tokenizer, self.bucket_bytes = run_dir, dtype, tokenizer, bucket_bytes

    def on_save(self, args, state, control, model=None, **kw):
        from accelerate.utils import extract_model_from_parallel

        from .lora import merged_tensors

        if model is None:
            return
        base = extract_model_from_parallel(model).get_base_model()
        main, sharded = state.is_world_process_zero, is_sharded(base)
        if not (main or sharded):
            return
        ckpt = self.run_dir / f"checkpoint-{state.global_step}"
        tmp = ckpt / ".merged.tmp"
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        if sharded:  # FSDP2: every process gathers the merged weights
            PartialState().wait_for_everyone()
        save_streamed(base, tmp, self.dtype, self.bucket_bytes, named=merged_tensors)
        if main:
            self.tokenizer.save_pretrained(tmp)
            os.replace(tmp, ckpt / "merged")
