"""Decoder variants side by side, one process, best of 3: solo and tandem at 1 and 2 intra-op
threads, the two bodies in turn or in two Python threads, and the lean step on or off
(``preallocate``). On a checkout older than these options (no ``parallel`` argument) it times
what that decoder has: solo and tandem at 1 and 2 threads. docs/results.md, "What each change bought".

Usage: python scripts/bench_decoder_variants.py MODEL BATCH NEW_TOKENS   (e.g. tiny 64 128, smol 16 64)
"""
import inspect
import sys
import time

import torch

from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.schedule import make_schedule
from tandem_rlvr.decoding.tandem import TandemDecoder
from tandem_rlvr.models import load_pair

if __name__ == "__main__":
    model, B, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    pair = load_pair(model, None)
    tok, V = pair.tokenizer, pair.senior.config.vocab_size
    prompts = [tok.encode("Mia has 7 shells. She finds 5 more.")] * B
    sp = SamplingParams(1.0, max_new_tokens=N)
    new_api = "parallel" in inspect.signature(TandemDecoder.__init__).parameters

    def run(name, threads, **opts):
        junior = pair.senior if name != "senior" else None
        dec = TandemDecoder(pair.senior, junior, make_schedule(name, tok, vocab_size=V), sp, [], tok.pad_token_id, **opts)
        torch.set_num_threads(threads)
        dec.generate(prompts, list(range(B)))
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            dec.generate(prompts, list(range(B)))
            best = min(best, time.perf_counter() - t0)
        print(f"{name:7s} threads={threads} {opts}: {B * N / best:9.0f} tok/s", flush=True)

    cases = [("senior", 1, {}), ("senior", 2, {}), ("word", 1, {}), ("word", 2, {})]
    if new_api:
        cases += [("word", 2, {"parallel": True}), ("senior", 1, {"preallocate": False}),
                  ("word", 1, {"preallocate": False})]
    for name, threads, opts in cases:
        run(name, threads, **opts)
