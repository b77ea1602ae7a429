"""``tandem train``: Tandem RLVR, vanilla GRPO or KL-Reg on TRL's GRPOTrainer, from a TrainConfig.

The three methods share the data, the decoder, the sampling, the reward and the loss;
only the rollout schedule differs (tandem: ``cfg.rollout.schedule`` with the junior; grpo and
klreg: the senior alone), plus beta * KL(senior || junior) for klreg. So any difference
between them comes from rollout structure (and the KL term) alone.

A run by job: its data (``rl.prepare``), its identity and model card (``rl.run_identity``), TRL's
arguments (``rl.trl_args``), its assembly (``rl.assemble``), its hold on the run directory and the
one cleanup (``rl.run_start``); this module runs it. Re-running the same command resumes from the
last checkpoint in ``output_dir``; a different config for an existing run is refused.

Run: ``tandem train --preset tiny --method tandem --output-dir runs/tiny-tandem``.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import torch

from ..config import TrainConfig
from ..io import atomic_write, write_json
from ..runtime import invocation
from .assemble import build_run
from .precision import save_in_dtype
from .run_identity import model_card, said_complete
from .lora import is_lora, save_lora
from .sharding import from_launcher
from .weight_stream import is_sharded, save_streamed

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# transformers 5.x renames gradient_checkpointing -> activation_checkpointing and warns on every
# TrainingArguments; TRL still uses the old name. Nothing for our users to act on.
warnings.filterwarnings("ignore", message=".*(gradient|activation)_checkpointing.*", category=FutureWarning)


def train(cfg: TrainConfig, print_fn=print) -> dict:
    """Run (or resume) one training run; returns a summary dict (also written to summary.json).

    A finished run (summary.json and final/ present) is not trained again: re-running it
    prints that it is complete and returns its summary. A run that fails before its first
    checkpoint removes what it wrote, so a corrected command starts clean.
    """
    cfg = from_launcher(cfg)
    if (done := said_complete(cfg, print_fn)) is not None:
        return done
    return run_training(build_run(cfg, print_fn), cfg, print_fn)


def run_training(run, cfg: TrainConfig, print_fn=print, extra: dict | None = None) -> dict:
    """Train a built run (``rl.assemble.build_run``) from its last checkpoint, then write final/ and
    summary.json; ``extra``: the Python API's config.json entries (its rows, its reward functions)."""
    trainer, out, loop = run.trainer, Path(cfg.loop.output_dir).expanduser(), cfg.loop
    ckpt = str(out / f"checkpoint-{run.resume_step}") if run.resume_step else None
    if ckpt and trainer.accelerator.is_main_process:
        print_fn(f"{loop.output_dir}: resuming from checkpoint-{run.resume_step} (update {run.resume_step}, "
                 f"rollout step {loop.rollout_steps(run.resume_step)})")
    try:
        if (done := said_complete(cfg, print_fn, extra)) is not None:  # finished by another process meanwhile
            run.close()
            return done
        if 0 < loop.max_updates <= run.resume_step:  # killed after the last step, before summary.json
            trainer.load_finished_checkpoint(ckpt)  # TRL would train one step more when resumed here
        else:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=FutureWarning)
                trainer.train(resume_from_checkpoint=ckpt)
        steps = trainer.state.global_step
        best = run.validation.best
        summary = {"method": cfg.method, "steps": steps, "rollout_steps": loop.rollout_steps(steps),
                   "best": best, "processes": trainer.accelerator.num_processes,
                   "wall_total_s": run.runlog.total, "output_dir": str(out.resolve()), **invocation()}
        if best.get("step") == 0 and steps > 0:  # no trained step validated above the base: best/ is the base
            summary["best_is_untrained"] = True
            if trainer.accelerator.is_main_process:
                print_fn(f"{loop.output_dir}: no trained step validated above step 0 ({best['accuracy']:.3f}), so "
                         "best/ holds the untrained senior; final/ holds the trained one")
        # every process: sharded weights are gathered
        _save_final(trainer, run.prep.pair.tokenizer, out, model_card(cfg, steps, extra), cfg.models.precision.compute,
                    cfg.models.sync_bucket_mb << 20, cfg.models.save_merged)
        if trainer.accelerator.is_main_process:
            write_json(out / "summary.json", summary)  # last: its presence marks the run complete
    except BaseException:
        run.close(failed=True)
        raise
    run.close()
    return summary


def _save_final(trainer, tokenizer, out: Path, card: str, dtype: torch.dtype, bucket_bytes: int,
                merged: bool = False) -> None:
    """final/ (weights in the compute dtype, tokenizer, model card) written beside and moved into place
    whole. Called on every process: FSDP and ZeRO-3 weights are gathered collectively; the main one writes."""
    tmp, old = out / ".final.tmp", out / ".final.old"
    main = trainer.accelerator.is_main_process
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()  # no process writes into the old .final.tmp
    senior = trainer.accelerator.unwrap_model(trainer.model)
    if is_lora(senior):  # the adapter, and merged/ weights with save_merged (rl/lora.py; collective when sharded)
        save_lora(senior, tmp, dtype, tokenizer, merged, bucket_bytes)
    elif trainer.is_fsdp_enabled or is_sharded(senior):  # FSDP2 shards, ZeRO-3 partitions: gathered bucket by bucket
        save_streamed(senior, tmp, dtype, bucket_bytes)
    elif trainer.is_deepspeed_enabled:
        trainer.save_model(str(tmp))  # ZeRO 1/2: whole weights, in the masters' dtype
    elif main:
        save_in_dtype(senior, tmp, dtype)
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
