"""Seconds of one weight sync per bucket size: a sharded senior streamed into a rollout engine.

Each process shards the senior (``fully_shard`` on every decoder layer and the root, float32
masters, as ``--sharding fsdp2`` trains it), opens the run's engine for it and times
``rl.weights.EngineSync``'s path (``rl.weight_stream.push``: cast to bf16 on the shard, gather, hand
over bucket by bucket, every process in lockstep) for each bucket size, ``--repeats`` times:

- ``hf``: the plain bf16 rollout copy (``rl.precision.RolloutModel``) on every process;
- ``vllm``: every process's colocated vLLM engine (bf16; vLLM's torchrun-compatible executor),
  one layer-wise reload per sync fed as the buckets arrive.

Run (CPU, gloo; vLLM's venv for ``vllm``):
  torchrun --standalone --nproc_per_node 2 scripts/sync_buckets.py --senior tiny --engine vllm \
      --bucket-kib 16 64 256 1024 524288
Prints one line per bucket size (the median seconds and the buckets of each process) and, on the
main process, writes ``--out`` (JSON) when given.
"""

import argparse
import json
import statistics
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--senior", default="tiny")
    ap.add_argument("--engine", choices=("hf", "vllm"), default="vllm")
    ap.add_argument("--bucket-kib", type=int, nargs="+", default=[16, 64, 256, 1024, 524288])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    from tandem_rlvr.models import load_model, resolve_model_path
    from tandem_rlvr.rl.weight_stream import local_fraction, push

    path = resolve_model_path(a.senior)
    senior = load_model(path, torch.device("cpu"), torch.float32)
    mesh = init_device_mesh("cpu", (world,))
    for layer in senior.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(senior, mesh=mesh)
    assert world == 1 or max(local_fraction(senior).values()) < 1.0, "the senior is not sharded"
    if a.engine == "vllm":
        from tandem_rlvr.engines import EngineSetup, open_engine
        from tandem_rlvr.engines.vllm_engine import VLLMSettings

        engine = open_engine("vllm", EngineSetup(path, dtype="bfloat16", device="cpu", in_process=True,
                                                 data_parallel=world > 1, vllm_settings=VLLMSettings(kv_cache_gib=0.1)))
        load = engine.load_weights
    else:
        from tandem_rlvr.rl.precision import RolloutModel

        engine = RolloutModel(path, torch.bfloat16, sharded=True)
        load = engine.load_weights
    rows = []
    push(senior, load, torch.bfloat16, 1 << 30)  # warm-up: the engine's first reload, the copy's load
    for kib in a.bucket_kib:
        secs, stats = [], None
        for _ in range(a.repeats):
            dist.barrier()
            stats = push(senior, load, torch.bfloat16, kib << 10)
            secs.append(stats["seconds"])
        mine = {"rank": rank, "median_s": statistics.median(secs), "min_s": min(secs), "buckets": stats["buckets"],
                "bytes": stats["bytes"]}
        every = [None] * world
        dist.all_gather_object(every, mine)
        row = {"bucket_kib": kib, "processes": every}
        rows.append(row)
        if rank == 0:
            per = ", ".join(f"rank {p['rank']} {p['median_s']:.3f} s" for p in every)
            print(f"bucket {kib:>7} KiB: {every[0]['buckets']:>3} buckets of {every[0]['bytes']:,} bytes; median "
                  f"{per} ({a.repeats} syncs)", flush=True)
    if rank == 0 and a.out:
        with open(a.out, "w") as f:
            json.dump({"senior": a.senior, "engine": a.engine, "processes": world, "rows": rows}, f, indent=2)
    if a.engine == "vllm":
        engine.close()  # vLLM's shutdown takes the process group down with it
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":  # vLLM on CPU may spawn workers: keep the guard
    sys.exit(main())
