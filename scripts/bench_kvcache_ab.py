"""A/B of the pre-allocated KV cache (and with it the lean decode step): the same decoder with
TandemDecoder(preallocate=False) and preallocate=True,
alternated, 3 times each (docs/results.md, "Memory at length").
Usage: TANDEM_THREADS=1 python scripts/bench_kvcache_ab.py MODEL ROWS NEW_TOKENS"""
import sys, time
import torch
from tandem_rlvr.runtime import configure_cpu_threads
from tandem_rlvr.models import load_pair
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.prompting import encode_prompt, format_prompt
configure_cpu_threads()
model, rows, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pair = load_pair(model, model, "cpu", "cpu")
tok = pair.tokenizer
probs = ["Mia has 7 shells. She finds 5 more. How many shells does Mia have now?"] * rows
prompts = [encode_prompt(tok, format_prompt(tok, p, "auto")) for p in probs]
sp = SamplingParams(1.0, max_new_tokens=new)
for name in ("senior", "word"):
    for rep in range(3):
        for flag in (False, True):
            dec = pair.decoder(name, sp, preallocate=flag); dec.eos_ids = torch.tensor([], dtype=torch.long)
            t0 = time.perf_counter(); out = dec.generate(prompts, list(range(rows))); dt = time.perf_counter() - t0
            print(f"{name} prealloc={flag} {rows*out.tokens.shape[1]/dt:.0f} tok/s", flush=True)
