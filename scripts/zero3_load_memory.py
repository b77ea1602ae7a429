"""Peak resident memory per process of loading a ZeRO-3 senior, straight into partitions or whole first
(`--sharding zero3` loads through DeepSpeed's `zero.Init`, so no GPU holds the whole senior;
on CPU this measures host memory, where process 0 still reads the whole checkpoint; docs/sharding.md).

For each model (the tiny world's senior; Qwen3-0.6B from its shipped config alone, random weights
saved once in fp32), two processes under `torchrun` (gloo on CPU) load it as a `--sharding zero3`
run does and report their peak resident memory (/proc/self/status VmHWM, reset by
/proc/self/clear_refs once the process has imported everything and joined the process group)
above their resident memory at that point:

- `init`: the run's own path (`rl.assemble.build_run`): the GRPOConfig with the run's DeepSpeed
  settings exists first, so transformers' `from_pretrained` builds the model under `zero.Init`
  (each process allocates only its partitions) and copies the checkpoint in module by module
  (process 0 reads the file; the others take the values from it);
- `whole`: how the senior was loaded before: `from_pretrained` outside any ZeRO-3 config (every
  process holds the whole model), then partitioned as `deepspeed.initialize` does with a module
  that is not partitioned yet (`zero.Init(module=...)`).

glibc is told to hand large allocations straight back (MALLOC_MMAP_THRESHOLD_), as in
scripts/memory_check.py, so resident memory follows live tensors.

Run: python scripts/zero3_load_memory.py [--arch tiny,Qwen/Qwen3-0.6B] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def rss(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


def rank_main(model_dir: str, mode: str, out: str) -> None:
    """One process: load ``model_dir`` as ``mode`` says (module docstring); its figures to ``out/rankR.json``."""
    import torch
    from accelerate import PartialState

    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.models import load_model
    from tandem_rlvr.rl import zero3
    from tandem_rlvr.rl.trl_args import grpo_args

    torch.set_num_threads(1)
    cfg = load_train_config(None, None, dict(method="grpo", senior=model_dir, dataset="unused.jsonl", template="plain",
                                             dtype="float32", sharding="zero3", output_dir=tempfile.mkdtemp()))
    state = PartialState(cpu=True)
    args = grpo_args(cfg, state.num_processes, True)
    zero3.configure(args, torch.float32, True)
    import deepspeed

    open("/proc/self/clear_refs", "w").write("5")  # the peak from here on
    base = rss("VmRSS:")
    if mode == "init":  # as rl.prepare loads the senior once the config exists
        model = load_model(model_dir, "cpu", torch.float32, trainable=True)
    else:
        with zero3.outside_zero3():
            model = load_model(model_dir, "cpu", torch.float32, trainable=True)
        deepspeed.zero.Init(module=model, config_dict_or_path=args.hf_deepspeed_config.config)
    held = sum(p.ds_tensor.numel() * p.ds_tensor.element_size() for p in model.parameters())
    whole = sum(p.ds_numel for p in model.parameters()) * 4
    (Path(out) / f"rank{state.process_index}.json").write_text(json.dumps(
        {"rank": state.process_index, "mode": mode, "peak": rss("VmHWM:") - base, "partitions": held,
         "whole_fp32": whole}))


def saved_model(arch: str, root: Path) -> str:
    """``arch``'s directory: the tiny world's senior as shipped, else random fp32 weights from its config."""
    if arch == "tiny":
        from tandem_rlvr.models import resolve_model_path

        return resolve_model_path("tiny")
    import torch
    from transformers import AutoModelForCausalLM

    from tandem_rlvr.models import load_tokenizer, model_config, resolve_model_path

    out = root / arch.replace("/", "--")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(model_config(arch), dtype=torch.float32).save_pretrained(out)
    load_tokenizer(resolve_model_path("tiny")).save_pretrained(out)  # the loader needs one; weights are the point
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="tiny,Qwen/Qwen3-0.6B", help="comma-separated models (module docstring)")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    a = ap.parse_args()
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_ARENA_MAX": "2",
           "TANDEM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in a.arch.split(","):
            model = saved_model(arch, Path(tmp))
            for mode in ("whole", "init"):
                out = Path(tempfile.mkdtemp(dir=tmp))
                res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                      "2", __file__, "--rank", model, mode, str(out)], env=env, capture_output=True,
                                     text=True)
                if res.returncode:
                    sys.exit(f"zero3_load_memory: {arch} {mode} failed:\n{res.stderr[-3000:]}")
                for r in (json.loads((out / f"rank{k}.json").read_text()) for k in (0, 1)):
                    r["arch"] = arch
                    rows.append(r)
                    print(f"{arch:16s} {mode:5s} rank {r['rank']} | peak above start {r['peak'] / 2**20:8.1f} MiB | "
                          f"partitions {r['partitions'] / 2**20:7.1f} MiB of {r['whole_fp32'] / 2**20:7.1f} MiB (fp32)",
                          flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        main()
