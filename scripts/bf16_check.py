"""bfloat16 consistency of the tandem decoder (used by scripts/gpu_check.sh).

Tandem-decode a batch in bf16, then re-score every emitted token with a full-prefix
forward of its author (no cache, no padding). Exact token equality is not expected in
bf16 (cached and uncached attention round differently); the log-probs must agree within
mean 0.02 and max 0.25 nats.  Usage: python scripts/bf16_check.py MODEL SENIOR_DEV JUNIOR_DEV
"""

import sys

import torch

from tandem_rlvr.decoding.sampling import SamplingParams, scaled_logprobs
from tandem_rlvr.models import load_pair
from tandem_rlvr.prompting import encode_prompt, format_prompt

model, sdev, jdev = sys.argv[1], sys.argv[2], sys.argv[3]
pair = load_pair(model, model, sdev, jdev, "bfloat16")
tok = pair.tokenizer
problems = ["Mia has 7 shells. She finds 5 more. How many shells does Mia have now?",
            "What is the sum of the first 10 positive integers?"] * 4
prompts = [encode_prompt(tok, format_prompt(tok, p, "auto")) for p in problems]
sp = SamplingParams(1.0, max_new_tokens=64)
dec = pair.decoder("word", sp)
roll = dec.generate(prompts, list(range(len(prompts))))
diffs = []
with torch.no_grad():
    for b, p in enumerate(prompts):
        toks, mask = roll.row_tokens(b), roll.row_mask(b)
        ids = torch.tensor([p + toks])
        for model_, flag in ((pair.senior, 1), (pair.junior, 0)):
            logits = model_(ids.to(next(model_.parameters()).device)).logits[0, len(p) - 1: len(p) - 1 + len(toks)]
            lp = scaled_logprobs(logits, sp).gather(-1, torch.tensor(toks, device=logits.device)[:, None]).squeeze(-1).cpu()
            sel = torch.tensor(mask) == flag
            diffs.append((lp[sel] - roll.logprobs[b, : len(toks)].cpu()[sel]).abs())
d = torch.cat(diffs)
print(f"bf16 tokens {d.numel()}, mean |dlogp| {d.mean():.4f}, max {d.max():.4f}")
sys.exit(0 if d.mean() <= 0.02 and d.max() <= 0.25 else 1)
