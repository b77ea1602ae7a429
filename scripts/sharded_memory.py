"""One rank of the sharded memory check, FSDP2 or DeepSpeed ZeRO-3 (run by `scripts/memory_check.py
--fsdp2` / `--zero3` under torchrun).

A randomly initialised model of the run's senior config, `fully_shard` on every decoder layer
and on a root that scores tokens with TRL's chunked log-prob head (the function TRL's fused head
calls; every position on CPU, the response positions where Triton runs, as TRL does), AdamW, 2
updates of accumulated micro-batches after a 1-row warm-up update (communication buffers,
autograd threads, the moments). On CPU (gloo) float32, peak resident memory reset after the
warm-up (/proc/self/clear_refs); on a GPU (nccl) fp32 master shards with
`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`, `torch.cuda.max_memory_allocated`
after `reset_peak_memory_stats`. Compared with the plan's `Layout(world, "fsdp2")` over its update
items (the resident ones, shards and moments, are there before). Then one weight sync is timed:
every parameter cast to bf16 on its shard (half the bytes), gathered, in buckets of the stated size.

ZeRO-3 (``zero3``): the same model and loop under ``deepspeed.initialize`` with the run's DeepSpeed
settings (``rl.zero3.ds_settings``: stage 3, fp32 gradient reduction; bf16 partitions over fp32
masters on a GPU), torch's AdamW, DeepSpeed's persistence threshold and bucket sizes as accelerate
fills them (10 x hidden, hidden^2, 0.9 x hidden^2); compared with ``Layout(world, "zero3")``. Its
weight sync is the trainer's own stream (``rl.weight_stream.buckets``: a bucket gathered together).

LoRA (``lora_r`` > 0 in the overrides): PEFT's adapters (``rl.lora.peft_config``) injected into the model
before it is sharded, AdamW over the adapters alone, compared with ``Layout(world, sharding, lora_r=r)``;
the timed sync is the trainer's merged stream (``rl.lora.stream_source``: FSDP2 merges shard by shard,
ZeRO-3 gathers each layer's W, A and B together).

Run: torchrun --nproc_per_node N scripts/sharded_memory.py OVERRIDES_JSON BUCKET_MIB [fsdp2|zero3]
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import AutoModelForCausalLM
from trl.kernels import ChunkedLogProbFunction

from tandem_rlvr.config import load_train_config
from tandem_rlvr.planner.memory import Layout, Plan, plan
from tandem_rlvr.models import model_config


def rss(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


class Scorer(torch.nn.Module):
    """The FSDP root: the body, then TRL's chunked head (its parameters are whole inside the root's forward)."""

    def __init__(self, lm, prompt: int | None):
        super().__init__()
        self.lm, self.prompt = lm, prompt

    def forward(self, ids):
        hidden = self.lm.model(input_ids=ids, use_cache=False).last_hidden_state[:, :-1]  # (B, T-1, H)
        targets = ids[:, 1:]
        if self.prompt:  # Triton: only the labelled (response) positions are scored
            hidden, targets = hidden[:, self.prompt - 1:], targets[:, self.prompt - 1:]
        h = hidden.reshape(-1, hidden.shape[-1])
        lp = ChunkedLogProbFunction.apply(h, self.lm.lm_head.weight, None, targets.reshape(-1), 1.0, 32768)[0]
        return -lp.float().sum() / lp.numel()


def zero3_model(cfg, lm, gpu: bool, accumulate: int):
    """``Scorer(lm)`` under ``deepspeed.initialize`` with the run's ZeRO-3 settings (module docstring)."""
    import deepspeed

    from tandem_rlvr.rl.zero3 import ds_settings

    compute = torch.bfloat16 if gpu else torch.float32
    ds = ds_settings(cfg, compute, torch.float32)
    h = lm.config.hidden_size
    ds.update(train_micro_batch_size_per_gpu=cfg.loop.micro_batch_rows or 1, gradient_accumulation_steps=accumulate,
              gradient_clipping=1.0, bf16={"enabled": gpu}, fp16={"enabled": False})
    ds.pop("train_batch_size")
    ds["zero_optimization"].update(reduce_bucket_size=h * h, stage3_prefetch_bucket_size=int(0.9 * h * h),
                                   stage3_param_persistence_threshold=10 * h)
    scorer = Scorer(lm, cfg.data.max_prompt_tokens if gpu else None)
    opt = torch.optim.AdamW([q for q in lm.parameters() if q.requires_grad], lr=1e-5)
    engine, *_ = deepspeed.initialize(model=scorer, optimizer=opt, config=ds)
    deepspeed.zero.register_external_parameter(scorer, lm.lm_head.weight)  # the head is read in the root's forward
    return engine


def main() -> None:
    gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(dev)
    torch.set_num_threads(1)
    overrides, bucket_mib = json.loads(sys.argv[1]), float(sys.argv[2])
    sharding = sys.argv[3] if len(sys.argv) > 3 else "fsdp2"
    if gpu:  # the paper's precision: fp32 master shards, bf16 compute
        overrides.update(dtype="bfloat16", master_dtype="float32", senior_device="cuda:0")
    cfg = load_train_config(None, None, overrides)
    name = "cuda:0" if gpu else "cpu"
    full = plan(cfg, gpu_gib=80 if gpu else None, layout=Layout(world, sharding, lora_r=cfg.models.lora_r,
                                                                 sync_bucket_mib=bucket_mib))
    p = Plan([i for i in full.items if i.phase.split("/")[0] in ("resident", "update") and i.device == name
              and "junior" not in i.name and "rollouts decode" not in i.name])  # the loop trains only
    predicted, phase = p.peak(name)
    held = sum(i.nbytes for i in p.items if i.phase == "resident")

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(model_config(cfg.models.senior), dtype=torch.float32).to(dev)
    if cfg.models.gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    peft = None
    if cfg.models.lora_r:  # PEFT injects the adapters into lm itself and freezes its base
        from peft import get_peft_model

        from tandem_rlvr.rl.lora import peft_config

        peft = get_peft_model(lm, peft_config(cfg))
        if cfg.models.gradient_checkpointing:
            lm.enable_input_require_grads()
    rows = cfg.loop.prompts_per_minibatch * cfg.rollout.group_size // world
    micro = cfg.loop.micro_batch_rows or rows
    seq = cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens
    g = torch.Generator().manual_seed(rank)
    if sharding == "zero3":
        model = zero3_model(cfg, lm, gpu, rows // micro)
        step = model.step
    else:
        mp = {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)} if gpu else {}
        for layer in lm.model.layers:
            fully_shard(layer, **mp)
        model = fully_shard(Scorer(lm, cfg.data.max_prompt_tokens if gpu else None), **mp)
        opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-5)

        def step():
            opt.step()
            opt.zero_grad(set_to_none=True)
    backward = model.backward if sharding == "zero3" else torch.Tensor.backward
    for _ in range(rows // micro if sharding == "zero3" else 1):  # warm-up: one update (ZeRO-3 steps at its boundary)
        ids = torch.randint(0, lm.config.vocab_size, (1, cfg.data.max_prompt_tokens + 8), generator=g)
        backward(model(ids.to(dev)))
        step()
    dist.barrier()
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        open("/proc/self/clear_refs", "w").write("5")  # reset the peak resident size
        base = rss("VmRSS:")
    for _ in range(2):
        for _ in range(rows // micro):
            ids = torch.randint(0, lm.config.vocab_size, (micro, seq), generator=g).to(dev)
            if sharding == "zero3":  # DeepSpeed divides by its accumulation steps and steps at the boundary
                model.backward(model(ids))
                model.step()
            else:
                (model(ids) / (rows // micro)).backward()
        if sharding != "zero3":
            step()
    peak = (torch.cuda.max_memory_allocated() if gpu else rss("VmHWM:")) - base
    dist.barrier()
    t0 = time.perf_counter()
    limit, bucket, size, gathered = bucket_mib * (1 << 20), [], 0, 0
    if sharding == "zero3" or peft is not None:  # the trainer's own stream: one bucket gathered, then released
        from tandem_rlvr.rl.lora import stream_source
        from tandem_rlvr.rl.weight_stream import buckets

        source, named = stream_source(peft) if peft is not None else (lm, None)
        parts = buckets(source, torch.bfloat16, int(limit), **({"named": named} if named else {}))
        gathered = sum(t.numel() for part in parts for _, t in part)
    for param in model.parameters() if sharding != "zero3" and peft is None else ():  # every rank, the same order
        t = param.detach().to(torch.bfloat16).full_tensor()
        bucket.append(t)
        size += t.numel() * 2
        gathered += t.numel()
        if size >= limit:  # a consumer would take the bucket here; then it is dropped before the next gathers
            bucket, size = [], 0
    if gpu:
        torch.cuda.synchronize()
    dist.barrier()
    print(json.dumps({"rank": rank, "world": world, "device": str(dev), "measured": peak, "predicted": predicted - held,
                      "phase": phase, "sync_s": time.perf_counter() - t0, "synced": gathered}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
