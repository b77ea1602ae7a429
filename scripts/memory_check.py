"""Predicted vs measured peak memory of `tandem train` on CPU (issue 22's check of the memory plan).

Each configuration trains 2 updates of a randomly initialised model of a real architecture
(the tiny world's, SmolLM2-135M's) in a fresh process and reads the process's peak resident
memory (/proc/self/status VmHWM) minus its resident memory once the run is built (models
loaded, trainer made), against the plan's peak minus the model weights loaded by then: the
framework's own objects (about 100 MB: datasets, TRL, the tokenizer) are no part of the plan,
which is about tensors. glibc is told to
hand every allocation of 64 KiB or more straight back to the system (MALLOC_MMAP_THRESHOLD_), so
resident memory follows live tensors. Random weights rarely emit EOS, so every rollout runs to
max_new_tokens, the length the plan assumes; prompts are all max_prompt_tokens long.

`--fsdp2` checks the sharded plan instead: each configuration runs under `torchrun
--nproc_per_node 2` (gloo, CPU) a short training loop of our own, not `tandem train` (the
trainer's FSDP2 path is another branch's): a randomly initialised model of the architecture with
`fully_shard` on every decoder layer and on a root that scores responses with TRL's chunked
log-prob head (the function TRL's fused head calls), float32, AdamW, 2 updates of accumulated
micro-batches, after a 1-row warm-up update (communication buffers, autograd threads, the
moments) and a reset of the peak (/proc/self/clear_refs). Each rank's peak above its level then
is compared with the plan's `Layout(2, "fsdp2")` peak over its update items (resident ones, the
shards and moments, are there before). It also times one weight sync: every parameter cast to bf16 on its shard, gathered, in
buckets of the plan's size (`rl/memory_plan.py`).

Run: python scripts/memory_check.py [--quick] [--fsdp2] [--out docs/memory_check.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys
def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
import torch
torch.set_num_threads(2)
from tandem_rlvr.config import load_train_config
from tandem_rlvr.rl import train as T
from tandem_rlvr.rl.memory_plan import plan
overrides = json.loads(sys.argv[1])
cfg = load_train_config(None, None, overrides)
p = plan(cfg)
predicted, phase = p.peak("cpu")
loaded = sum(i.nbytes for i in p.items if i.phase == "resident" and "weights" in i.name)
run = T.build_run(cfg, print_fn=lambda *_: None)  # the models are loaded: the baseline
for model in (run.prep.pair.senior, run.prep.pair.junior):  # fault in weights still mapped from their files
    for t in model.parameters():
        float(t.detach().sum())
base = rss("VmRSS:")
run.trainer.train()
print(json.dumps({"measured": rss("VmHWM:") - base, "predicted": predicted - loaded, "phase": phase}))
"""


def make_model(arch: str, root: Path) -> Path:
    """A randomly initialised model of ``arch`` with its tokenizer, saved under ``root``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tandem_rlvr.models import load_tokenizer, resolve_model_path

    src = resolve_model_path(arch)
    out = root / arch
    if not out.exists():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
        model.save_pretrained(out)
        load_tokenizer(src).save_pretrained(out)
    return out


def make_data(root: Path, tokenizer_dir: Path, prompt_tokens: int) -> tuple[Path, int]:
    """40 problems whose plain prompts are exactly as long (the longest sets max_prompt_tokens)."""
    from tandem_rlvr.models import load_tokenizer
    from tandem_rlvr.prompting import encode_prompt, format_prompt

    tok = load_tokenizer(str(tokenizer_dir))
    rows, n = [], 0
    for i in range(40):
        words = " ".join(["one"] * prompt_tokens)
        text = f"{i} {words}"
        ids = encode_prompt(tok, format_prompt(tok, text, "plain", "none"))
        ids = ids[:prompt_tokens]
        text = tok.decode(ids[:-1] if len(ids) > 1 else ids, skip_special_tokens=True)
        n = max(n, len(encode_prompt(tok, format_prompt(tok, text, "plain", "none"))))
        rows.append({"problem": text, "answer": "2"})
    path = root / f"data-{tokenizer_dir.name}-{prompt_tokens}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, n


WORKER = r"""
import json, os, sys, time
def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM
from trl.kernels import ChunkedLogProbFunction
from tandem_rlvr.config import load_train_config
from tandem_rlvr.rl.memory_plan import Layout, Plan, plan
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
overrides, bucket_mib = json.loads(sys.argv[1]), float(sys.argv[2])
cfg = load_train_config(None, None, overrides)
layout = Layout(2, "fsdp2", sync_bucket_mib=bucket_mib)
full = plan(cfg, layout=layout)
p = Plan([i for i in full.items if i.phase.split("/")[0] in ("resident", "update") and i.device == "cpu"
          and "junior" not in i.name and "rollouts decode" not in i.name])  # the loop trains only
predicted, phase = p.peak("cpu")
held = sum(i.nbytes for i in p.items if i.phase == "resident")  # shards and moments, there after the warm-up

class Scorer(torch.nn.Module):  # the root: body, then TRL's chunked head over every position (no Triton on CPU)
    def __init__(self, lm):
        super().__init__()
        self.lm = lm
    def forward(self, ids):
        hidden = self.lm.model(input_ids=ids, use_cache=False).last_hidden_state[:, :-1]
        h = hidden.reshape(-1, hidden.shape[-1])
        lp = ChunkedLogProbFunction.apply(h, self.lm.lm_head.weight, None, ids[:, 1:].reshape(-1), 1.0, 32768)[0]
        return -lp.sum() / lp.numel()

torch.manual_seed(0)
lm = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(cfg.senior), dtype=torch.float32)
if cfg.gradient_checkpointing:
    lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
for layer in lm.model.layers:
    fully_shard(layer)
model = fully_shard(Scorer(lm))
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
micro = cfg.micro_batch_rows or cfg.prompts_per_minibatch * cfg.group_size // 2
accumulate = cfg.prompts_per_minibatch * cfg.group_size // 2 // micro
seq = cfg.max_prompt_tokens + cfg.max_new_tokens
g = torch.Generator().manual_seed(rank)
model(torch.randint(0, lm.config.vocab_size, (1, 16), generator=g)).backward()  # warm-up: gloo, autograd threads,
opt.step()  # the moments; then the peak is reset (clear_refs 5) and measured from here
opt.zero_grad(set_to_none=True)
dist.barrier()
open("/proc/self/clear_refs", "w").write("5")
base = rss("VmRSS:")
for step in range(2):
    for _ in range(accumulate):
        ids = torch.randint(0, lm.config.vocab_size, (micro, seq), generator=g)
        (model(ids) / accumulate).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
peak = rss("VmHWM:") - base
dist.barrier()
t0 = time.perf_counter()
limit, bucket, gathered = bucket_mib * (1 << 20), [], 0
for param in model.parameters():  # the sync: cast on the shard (half the bytes), gather, one bucket at a time
    t = param.detach().to(torch.bfloat16).full_tensor()
    bucket.append(t)
    gathered += t.numel()
    if sum(x.numel() * 2 for x in bucket) >= limit:
        bucket = []
bucket = []
dist.barrier()
sync_s = time.perf_counter() - t0
print(json.dumps({"rank": rank, "measured": peak, "predicted": predicted - held, "phase": phase,
                  "sync_s": sync_s, "synced": gathered}), flush=True)
dist.destroy_process_group()
"""

CONFIGS = [  # (architecture, prompt tokens, response tokens, micro_batch_rows, gradient checkpointing)
    ("tiny", 64, 192, 0, True),
    ("tiny", 64, 192, 0, False),
    ("tiny", 64, 448, 8, False),
    ("tiny", 64, 448, 4, True),
    ("smol", 32, 96, 4, True),
    ("smol", 32, 96, 4, False),
]


FSDP_CONFIGS = [  # (architecture, prompt tokens, response tokens, micro_batch_rows, gradient checkpointing)
    ("tiny", 64, 192, 0, True),
    ("tiny", 64, 192, 0, False),
    ("smol", 32, 96, 4, True),
    ("smol", 32, 96, 4, False),
]


def fsdp2_row(arch: str, root: Path, prompt: int, new: int, micro: int, ckpt: bool, env: dict) -> list[dict]:
    """One 2-process FSDP2 configuration under torchrun; one result per rank."""
    model = make_model(arch, root)
    overrides = dict(method="grpo", senior=str(model), dataset="unused.jsonl", dataset_split=None, template="plain",
                     group_size=8, prompts_per_step=2, prompts_per_minibatch=2, max_prompt_tokens=prompt,
                     max_new_tokens=new, micro_batch_rows=micro, gradient_checkpointing=ckpt, dtype="float32",
                     eval_every=0, kl_every=0, output_dir=str(root / "unused"))
    script = root / "fsdp2_worker.py"
    script.write_text(WORKER, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          str(script), json.dumps(overrides), "512"], env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"memory_check: FSDP2 configuration {arch} failed:\n{out.stderr[-3000:]}")
    rows = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    for r in rows:
        r.update(arch=arch, prompt=prompt, response=new, micro=micro or 8, checkpointing=ckpt, layout="fsdp2 x 2",
                 ratio=r["predicted"] / r["measured"])
    return sorted(rows, key=lambda r: r["rank"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the first configuration of each architecture only")
    ap.add_argument("--fsdp2", action="store_true", help="2-process FSDP2 runs (torchrun, gloo) against the sharded plan")
    ap.add_argument("--out", default=None, help="write the table as JSON here")
    a = ap.parse_args()
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_ARENA_MAX": "2",
           "TANDEM_THREADS": "2"}
    results = []
    configs = [c for i, c in enumerate(CONFIGS) if not a.quick or i in (0, 4)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for arch, prompt, new, micro, ckpt in FSDP_CONFIGS if a.fsdp2 else []:
            for r in fsdp2_row(arch, root, prompt, new, micro, ckpt, env):
                results.append(r)
                print(f"{arch:5s} FSDP2 rank {r['rank']} prompt {prompt} response {new} micro {r['micro']} ckpt "
                      f"{str(ckpt):5s} | predicted {r['predicted'] / 2**20:8.1f} MiB ({r['phase']}) | measured "
                      f"{r['measured'] / 2**20:8.1f} MiB | predicted/measured {r['ratio']:.2f} | sync "
                      f"{r['sync_s']:.2f} s for {r['synced'] / 1e6:.1f}M weights", flush=True)
        if a.fsdp2:
            configs = []
        for arch, prompt, new, micro, ckpt in configs:
            model = make_model(arch, root)
            data, prompt_len = make_data(root, model, prompt)
            run = root / f"run-{len(results)}"
            overrides = dict(method="tandem", senior=str(model), dataset=str(data), dataset_split=None, val_size=4,
                             template="plain", instruction="none", lr=1e-5, group_size=8, prompts_per_step=2,
                             prompts_per_minibatch=2, max_prompt_tokens=prompt_len, max_new_tokens=new,
                             micro_batch_rows=micro, gradient_checkpointing=ckpt, max_steps=2, eval_every=0,
                             save_every=100, kl_every=0, dtype="float32", output_dir=str(run))
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(overrides)], env=env, capture_output=True,
                                 text=True)
            if out.returncode:
                sys.exit(f"memory_check: configuration {arch} failed:\n{out.stderr[-2000:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r.update(arch=arch, prompt=prompt_len, response=new, micro=micro or 16, checkpointing=ckpt,
                     ratio=r["predicted"] / r["measured"])
            results.append(r)
            print(f"{arch:5s} prompt {prompt_len:4d} response {new:4d} micro {r['micro']:3d} ckpt {str(ckpt):5s} | "
                  f"predicted {r['predicted'] / 2**20:8.1f} MiB ({r['phase']}) | measured {r['measured'] / 2**20:8.1f} "
                  f"MiB | predicted/measured {r['ratio']:.2f}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    worst = max(abs(r["ratio"] - 1) for r in results)
    print(f"worst |predicted/measured - 1| = {worst:.2f} over {len(results)} configurations (2 CPU threads)")


if __name__ == "__main__":
    main()
