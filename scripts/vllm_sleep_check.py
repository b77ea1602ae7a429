"""vLLM sleep/wake on a GPU, as ``tandem train --engine vllm --vllm-sleep true`` uses it.

    python scripts/vllm_sleep_check.py MODEL [--junior JUNIOR]

Opens a tandem engine with sleep mode on, generates a greedy batch, puts the engine to sleep
(level 1: weights to host memory, KV cache dropped), reads the GPU's free memory, wakes it,
pushes the senior's weights again (as training does after every optimiser step), and generates
the same batch again. Passes when sleeping freed at least half of what the engine held and the
two batches are token-for-token equal. Prints one JSON line with the figures. On a machine
without CUDA it prints that it was skipped and exits 0 (vLLM has no sleep mode on CPU).
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--junior", default=None)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"sleep_check": "skipped: no CUDA device (vLLM has no sleep mode on CPU)"}))
        return 0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tandem_rlvr.decoding.sampling import SamplingParams
    from tandem_rlvr.engines.vllm_engine import VLLMEngine, VLLMSettings, model_eos_ids, with_dtype
    from tandem_rlvr.models import resolve_model_path

    senior = resolve_model_path(a.model)
    junior = resolve_model_path(a.junior or a.model)
    tok = AutoTokenizer.from_pretrained(senior)
    free0 = torch.cuda.mem_get_info()[0]
    # the engine and the weights pushed after wake in one dtype, as training resolves it (bf16 on CUDA)
    settings = with_dtype(VLLMSettings(gpu_memory_utilization=a.gpu_memory_utilization, max_model_len=1024), "auto",
                          torch.device("cuda:0"))
    eng = VLLMEngine(senior, junior, tok, model_eos_ids(tok, senior), tandem=True, sleep_mode=True, in_process=True,
                     settings=settings)
    dec = eng.decoder("word", SamplingParams(temperature=0.0, max_new_tokens=64))
    prompts = [tok.encode(f"Question {i}: what is {i} times {i + 3}? Think step by step.") for i in range(8)]
    before = dec.generate(prompts, list(range(8)))
    awake = torch.cuda.mem_get_info()[0]
    eng.llm.sleep(level=1)
    asleep = torch.cuda.mem_get_info()[0]
    eng.llm.wake_up()
    model = AutoModelForCausalLM.from_pretrained(senior, torch_dtype=getattr(torch, settings.dtype))
    eng.llm.collective_rpc("reload_weights", kwargs={
        "weights_iterator": ((k, v.cuda()) for k, v in model.state_dict().items()), "is_checkpoint_format": True})
    eng.llm.reset_prefix_cache()
    after = dec.generate(prompts, list(range(8)))
    held, freed = free0 - awake, asleep - awake
    same = all(before.row_tokens(b) == after.row_tokens(b) for b in range(len(prompts)))
    ok = same and freed >= 0.5 * held
    print(json.dumps({"engine_gib": held / 2**30, "freed_by_sleep_gib": freed / 2**30, "same_tokens_after_wake": same,
                      "ok": ok}))
    eng.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
