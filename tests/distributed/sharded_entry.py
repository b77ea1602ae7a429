"""Entry point of the sharded-training tests (``tests/distributed/test_sharded_training.py``), run under torchrun.

``python -m torch.distributed.run --standalone --nproc_per_node N tests/distributed/sharded_entry.py OUT FLAGS...``
trains like ``tandem train FLAGS...`` (the same ``rl.train`` path), and each process writes
``OUT/rank{R}.json`` with what the tests check that only the process itself can see: the share of
each parameter it holds (ZeRO-3: each partition's size against the whole tensor's, and whether the
senior was already partitions when the run was built, before any step: loaded under ``zero.Init``), whether its hf
rollout copy equals the senior gathered (plain DTensor ``full_tensor()``; ZeRO-3: the optimiser's fp32
master, ``safe_get_full_fp32_param``) and then cast to the rollout dtype, the mixed precision of its
FSDP2 units or DeepSpeed engine (parameter and gradient-reduction dtypes), whether
its junior is whole and equal to its checkpoint, the
last weight sync's seconds and bytes, and its peak resident memory.

With a vLLM engine (``engine_check``, run on every process as the run closes): the engine's
senior after the run's last sync, and after a bf16 push of the same stream, each against what
the engine holds once it is fed the reference (the senior gathered with plain
``full_tensor()``, ZeRO-3: the fp32 masters, then cast, as one list; a LoRA senior's reference is
worked out by hand in plain torch from the senior on disk and ``final/``'s saved adapter,
W + (alpha / r) B A, ``hand_merged``). vllm: each process compares its own engine's
parameters; vllm-server: the main process records the server's digests
(``helpers.serve.server_digest``) and writes the reference as ``OUT/reference.safetensors`` for
the test to feed the server.
"""

import json
import resource
import sys
from pathlib import Path

import torch


def main(out: Path, argv: list[str]) -> None:
    from tandem_rlvr.cli import build_parser
    from tandem_rlvr.runtime import configure_cpu_threads
    from tandem_rlvr.config import config_fields, load_train_config
    from tandem_rlvr.rl import train as train_mod
    from tandem_rlvr.rl.lora import stream_source
    from tandem_rlvr.rl.weight_stream import local_fraction, push
    from tandem_rlvr.rl.zero3 import is_partitioned, outside_zero3
    from tandem_rlvr.models import load_model

    a = build_parser().parse_args(["train", *argv])
    overrides = {f.name: getattr(a, f.name) for f in config_fields() if getattr(a, f.name) is not None}
    cfg = load_train_config(a.preset, a.config, overrides)
    configure_cpu_threads()
    seen = {}
    build = train_mod.build_run

    def spy(cfg, print_fn=print):
        run = build(cfg, print_fn)
        seen["run"] = run
        # before any training step (DeepSpeed's engine is made in train()): loaded as partitions?
        seen["loaded_partitioned"] = is_partitioned(run.prep.pair.senior)
        eng = run.rollout.engine
        seen["copy"] = getattr(eng, "rollout_copy", None)  # the hf engine's copy (closed with the run)
        if eng.name != "hf":
            seen["engine0"] = eng.engine_params("senior") if eng.name == "vllm" else None
            close = run.close

            def checked_close():
                if seen.get("trained"):  # on every process alike (not closing after an error)
                    seen["engine"] = engine_check(run, out, seen["engine0"], cfg.models.sync_bucket_mb << 20)
                    senior = run.trainer.accelerator.unwrap_model(run.trainer.model)
                    seen["base_unchanged"] = base_unchanged(senior, cfg)  # gathers: before vLLM's close ends
                close()  # the process group DeepSpeed's partitions gather over (vLLM's external launcher)

            run.close = checked_close
        return run

    train_mod.build_run = spy
    save_final = train_mod._save_final

    def saved(*args):  # final/ gathered: the run trained to its end
        save_final(*args)
        seen["trained"] = True

    train_mod._save_final = saved
    # quiet but for the resume line, which tests/helpers/sharded.py's kill_resume_and_compare looks for
    summary = train_mod.train(cfg, print_fn=lambda msg, *_: print(msg) if "resuming from" in str(msg) else None)
    run = seen["run"]
    trainer = run.trainer
    senior = trainer.accelerator.unwrap_model(trainer.model)
    rank = trainer.accelerator.process_index
    fractions = local_fraction(senior)
    sync, rm = run.rollout.sync, seen["copy"]
    if rm is not None and sync.synced != (id(senior), trainer.state.global_step):  # stale: the last update's weights
        model, named = stream_source(senior)  # a LoRA senior merged
        push(model, rm.load_weights, rm.dtype, cfg.models.sync_bucket_mb << 20,
             named=named)  # collective, as the engine takes them
    copy = rm.copy if rm is not None else None
    copy_equal = None
    zero3 = hasattr(next(senior.parameters()), "ds_id")
    if copy is not None:
        mine = dict(copy.named_parameters())
        copy_equal = True
        for name, full in reference(senior, zero3):  # gathered in fp32 (ZeRO-3: the fp32 master), then cast
            copy_equal &= bool(torch.equal(full.to(copy.dtype), mine[name]))
    if zero3:  # DeepSpeed's: the dtype of its parameter partitions and of its gradient reduce-scatter
        mixed = {"param": str(next(senior.parameters()).dtype),
                 "reduce": str(trainer.model_wrapped.communication_data_type)}
        master = str(trainer.model_wrapped.optimizer.fp32_partitioned_groups_flat[0].dtype)
        partitions = {n: {"local": p.ds_tensor.numel(), "whole": p.ds_numel, "resident": p.data.numel(),
                          "dims": len(p.ds_shape)}
                      for n, p in senior.named_parameters()}
    else:
        policies = {(str(m._get_fsdp_state()._mp_policy.param_dtype), str(m._get_fsdp_state()._mp_policy.reduce_dtype))
                    for m in senior.modules() if hasattr(m, "_get_fsdp_state")}  # every FSDP2 unit's policy
        mixed = sorted(policies)
        if len(policies) == 1:
            ((param, reduce),) = policies
            mixed = {"param": param, "reduce": reduce}
        master, partitions = str(next(senior.parameters()).dtype), None
    unchanged = seen["base_unchanged"] if "base_unchanged" in seen else base_unchanged(senior, cfg)
    junior = run.prep.pair.junior
    with outside_zero3():  # under a live ZeRO-3 config transformers would partition what it loads
        on_disk = load_model(run.prep.cfg.models.junior or run.prep.cfg.models.senior, "cpu",
                             next(junior.parameters()).dtype)
    on_disk_params = dict(on_disk.named_parameters())
    junior_same = all(torch.equal(p.detach(), on_disk_params[n]) for n, p in junior.named_parameters())
    rec = {"rank": rank, "junior_fractions": local_fraction(junior), "junior_unchanged": junior_same,
           "mixed_precision": mixed, "master_dtype": master, "partitions": partitions, "summary": summary,
           "fractions": fractions, "copy_equal": copy_equal, "base_unchanged": unchanged,
           "loaded_partitioned": seen["loaded_partitioned"],
           "adapter_dtypes": sorted({str(p.dtype) for n, p in senior.named_parameters() if ".lora_" in n}),
           "copy_syncs": sync.syncs, "last_sync": sync.last_sync, "engine": seen.get("engine"),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    (out / f"rank{rank}.json").write_text(json.dumps(rec))


def base_unchanged(senior, cfg):
    """A LoRA senior: whether every weight but the adapters' is the senior on disk, bit for bit (collective
    under sharding); None for any other senior."""
    from tandem_rlvr.models import load_model
    from tandem_rlvr.rl.zero3 import outside_zero3

    if not hasattr(senior, "get_base_model"):
        return None
    with outside_zero3():  # under a live ZeRO-3 config transformers would load it as partitions
        on_disk = dict(load_model(cfg.models.senior, "cpu", torch.float32).named_parameters())
    zero3 = hasattr(next(senior.parameters()), "ds_id")
    return all(torch.equal(full, on_disk[name]) for name, full in whole_tensors(senior, zero3) if ".lora_" not in name)


def whole_tensors(model, zero3: bool):
    """(name, whole fp32 tensor) of every parameter, gathered (collective), wrapper prefixes removed
    and PEFT's: ``x.base_layer.weight`` as ``x.weight``, adapters as ``x.lora_A.weight``."""
    from torch.distributed.tensor import DTensor

    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    for name, p in model.named_parameters():
        full = p.full_tensor() if isinstance(p, DTensor) else fp32_master(p) if zero3 else p.detach()
        name = name.replace("_checkpoint_wrapped_module.", "").replace(".base_layer.", ".").replace(".default.", ".")
        yield name, full


def reference(senior, zero3: bool):
    """(name, whole fp32 tensor) of what the rollouts must decode: the senior's parameters, a LoRA
    senior's merged by hand, W + (alpha / r) B A, from its gathered base and adapters."""
    whole = dict(whole_tensors(senior, zero3))
    scale = None
    if hasattr(senior, "get_base_model"):
        c = senior.peft_config["default"]
        scale = c.lora_alpha / c.r
    for name, t in whole.items():
        if ".lora_" in name:
            continue
        owner = name.removesuffix(".weight")
        if scale is not None and f"{owner}.lora_A.weight" in whole:
            t = t + scale * (whole[f"{owner}.lora_B.weight"] @ whole[f"{owner}.lora_A.weight"])
        yield name, t


def fp32_master(p) -> torch.Tensor:
    """A ZeRO-3 parameter's whole fp32 master weight, gathered from the optimiser's partitions (collective);
    a frozen one (LoRA's base) has no master: its partitions gathered, in fp32."""
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param

    if p.requires_grad:
        return safe_get_full_fp32_param(p)
    with deepspeed.zero.GatheredParameters([p], modifier_rank=None):  # a frozen partition (LoRA's base): no master
        return p.data.float().clone()


def hand_merged(senior: Path, saved: Path) -> dict:
    """The merged senior by hand, in plain torch and fp32: each weight W of the senior on disk, plus
    (alpha / r) B A where ``saved`` (a LoRA save: PEFT's ``adapter_model.safetensors`` and
    ``adapter_config.json``) holds an adapter for it; every other tensor as on disk."""
    from safetensors.torch import load_file

    base = load_file(str(senior / "model.safetensors"))
    adapter = load_file(str(saved / "adapter_model.safetensors"))
    conf = json.loads((saved / "adapter_config.json").read_text())
    scale = conf["lora_alpha"] / conf["r"]
    out = {}
    for name, w in base.items():
        owner = name.removesuffix(".weight")
        a = adapter.get(f"base_model.model.{owner}.lora_A.weight")  # (r, in)
        b = None if a is None else adapter[f"base_model.model.{owner}.lora_B.weight"]
        out[name] = w.float() if a is None else w.float() + scale * (b @ a)
    return out


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def engine_check(run, out: Path, engine0, bucket_bytes: int) -> dict:
    """The engine's senior against the reference, in its own dtype and in bf16 (module docstring)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from tandem_rlvr.rl.weight_stream import clean_name, push

    from tandem_rlvr.rl.lora import is_lora, stream_source

    trainer, eng, sync = run.trainer, run.rollout.engine, run.rollout.sync
    senior = trainer.accelerator.unwrap_model(trainer.model)
    sync(senior, trainer.state.global_step)  # nothing when the engine holds this update already
    if is_lora(senior):  # final/ is complete: the main process wrote it before its close
        dist.barrier()
        ref = hand_merged(Path(run.prep.cfg.models.senior), Path(run.prep.cfg.loop.output_dir) / "final")
    else:
        ref = {clean_name(n): (p.full_tensor() if isinstance(p, DTensor) else fp32_master(p) if hasattr(p, "ds_id")
                               else p.detach()).clone()
               for n, p in senior.named_parameters(remove_duplicate=False)}  # gathered in fp32 (collective)
    model, named = stream_source(senior)  # a LoRA senior's merged stream, as the run's syncs send it
    main = dist.get_rank() == 0
    rec = {"weight_dtype": str(eng.weight_dtype)}
    if eng.name == "vllm":
        synced = eng.engine_params("senior")
        rec["changed"] = not _same(engine0, synced)  # training reached the engine
        eng.load_weights([(n, t.to(eng.weight_dtype)) for n, t in ref.items()])
        rec["equal"] = _same(synced, eng.engine_params("senior"))
        push(model, eng.load_weights, torch.bfloat16, bucket_bytes, named=named)
        pushed = eng.engine_params("senior")
        eng.load_weights([(n, t.to(torch.bfloat16)) for n, t in ref.items()])
        rec["equal_bf16"] = _same(pushed, eng.engine_params("senior"))
        rec["bf16_rounded"] = not _same(pushed, synced)
        return rec
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for its helpers package
    from helpers.serve import server_digest

    url = eng.settings.url
    if main:
        from safetensors.torch import save_file

        save_file(ref, str(out / "reference.safetensors"))
        rec["digest"] = server_digest(url)
    push(model, eng.load_weights, torch.bfloat16, bucket_bytes, every_rank=False, named=named)
    dist.barrier()
    if main:
        rec["digest_bf16"] = server_digest(url)
    return rec


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]), sys.argv[2:])
