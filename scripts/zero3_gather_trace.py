"""Where the ZeRO-3 memory check's per-rank peak comes from (docs/results.md, "ZeRO-3 + LoRA on SmolLM2").

One update of `scripts/fsdp2_memory.py`'s ZeRO-3 loop (its model, DeepSpeed settings and warm-up),
with hooks on decoder layers 0, 1, 15, 28 and 29 that print rank 0's resident memory (MiB) and the
MiB of non-persistent ZeRO-3 parameters whose storage is gathered (`p.data.numel() > 0`, fp32),
after each forward and backward of those layers and after the forward, backward and step.

Run: MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0 MALLOC_ARENA_MAX=2 \
     torchrun --standalone --nproc_per_node 2 scripts/zero3_gather_trace.py OVERRIDES_JSON [ZERO_OPTIMIZATION_JSON]
(OVERRIDES_JSON: a `tandem train` config as `scripts/memory_check.py` builds it for the sharded loop;
ZERO_OPTIMIZATION_JSON: keys merged into DeepSpeed's `zero_optimization`, e.g. {"stage3_max_reuse_distance": 0}.)
"""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch, torch.distributed as dist
from transformers import AutoModelForCausalLM
import fsdp2_memory as F
from tandem_rlvr.config import load_train_config
from tandem_rlvr.rl.memory_shapes import model_config

def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    overrides = json.loads(sys.argv[1])
    extra = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    cfg = load_train_config(None, None, overrides)
    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(model_config(cfg.models.senior), dtype=torch.float32)
    if cfg.models.gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.models.lora_r:
        from peft import get_peft_model
        from tandem_rlvr.rl.lora import peft_config
        get_peft_model(lm, peft_config(cfg))
        if cfg.models.gradient_checkpointing:
            lm.enable_input_require_grads()
    from tandem_rlvr.rl import zero3
    orig = zero3.ds_settings
    def patched(*a, **k):
        d = orig(*a, **k)
        d["zero_optimization"].update(extra)
        return d
    zero3.ds_settings = patched
    world = dist.get_world_size()
    rows = cfg.loop.prompts_per_minibatch * cfg.rollout.group_size // world
    micro = cfg.loop.micro_batch_rows or rows
    seq = cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens
    model = F.zero3_model(cfg, lm, False, rows // micro)
    params = [p for p in lm.parameters()]
    def gathered():
        return sum(p.ds_numel for p in params if p.data.numel() > 0 and not p.ds_persist)
    log = []
    def mark(tag):
        log.append((tag, F.rss("VmRSS:") >> 20, gathered() * 4 >> 20))
    layers = lm.model.layers if hasattr(lm, "model") else lm.base_model.model.model.layers
    for i, layer in enumerate(layers):
        if i in (0, 1, 15, 28, 29):
            layer.register_forward_hook(lambda m, a, o, i=i: mark(f"fwd L{i}"))
            layer.register_full_backward_hook(lambda m, gi, go, i=i: mark(f"bwd L{i}"))
    g = torch.Generator().manual_seed(rank)
    for _ in range(rows // micro):
        model.backward(model(torch.randint(0, lm.config.vocab_size, (1, cfg.data.max_prompt_tokens + 8), generator=g)))
        model.step()
    dist.barrier()
    log.clear()
    open("/proc/self/clear_refs", "w").write("5")
    base = F.rss("VmRSS:")
    mark("start")
    for _ in range(1):
        for k in range(rows // micro):
            ids = torch.randint(0, lm.config.vocab_size, (micro, seq), generator=g)
            loss = model(ids); mark(f"after fwd {k}")
            model.backward(loss); mark(f"after bwd {k}")
            model.step(); mark(f"after step {k}")
    peak = F.rss("VmHWM:") - base
    if rank == 0:
        print("base MiB", base >> 20, "peak above base MiB", peak >> 20)
        for t in log:
            print(t)
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
