"""bfloat16 consistency of the tandem decoder (used by scripts/gpu_check.sh).

Tandem-decode a batch in bf16, then re-score every emitted token with a full-prefix
forward of its author (no cache, no padding). Exact token equality is not expected in
bf16: cached and uncached attention round differently, and by how much depends on the
hardware's kernels. So the yardstick is measured in the same run: transformers' own
cached bf16 decoding (``generate``) of the senior alone on the same left-padded batch,
sampled, re-scored the same way. The
tandem decoder passes if its mean and max |delta log-prob| stay within twice that floor
(and in any case within 0.02 nats mean, 0.25 max). A real bug (a wrong position, cache
row or mask) shows as whole nats. Usage: python scripts/bf16_check.py MODEL SENIOR_DEV JUNIOR_DEV
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
            "What is the sum of the first 10 positive integers?"]
prompts = [encode_prompt(tok, format_prompt(tok, p, "auto")) for p in problems * 4]
sp = SamplingParams(1.0, max_new_tokens=64)


def rescore(model_, prompt, toks):
    """Log-probs of ``toks`` after ``prompt`` from one full-prefix forward, on the CPU."""
    ids = torch.tensor([prompt + toks], device=next(model_.parameters()).device)
    logits = model_(ids).logits[0, len(prompt) - 1: len(prompt) - 1 + len(toks)]
    return scaled_logprobs(logits, sp).gather(-1, torch.tensor(toks, device=logits.device)[:, None]).squeeze(-1).cpu()


with torch.no_grad():
    roll = pair.decoder("word", sp).generate(prompts, list(range(len(prompts))))
    diffs = []
    for b, p in enumerate(prompts):
        toks, mask = roll.row_tokens(b), torch.tensor(roll.row_mask(b))
        for model_, flag in ((pair.senior, 1), (pair.junior, 0)):
            sel = mask == flag
            diffs.append((rescore(model_, p, toks)[sel] - roll.logprobs[b, : len(toks)].cpu()[sel]).abs())
    d = torch.cat(diffs)

    # transformers' cached bf16 decoding of the same left-padded batch, sampled, re-scored the same way
    dev = next(pair.senior.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else pair.eos_ids[0]
    L = max(map(len, prompts))
    ids = torch.tensor([[pad] * (L - len(p)) + p for p in prompts], device=dev)
    attn = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts], device=dev)
    torch.manual_seed(0)
    g = pair.senior.generate(ids, attention_mask=attn, max_new_tokens=64, do_sample=True, temperature=1.0, top_k=0,
                             top_p=1.0, output_logits=True, return_dict_in_generate=True, pad_token_id=pad,
                             eos_token_id=pair.eos_ids)
    floor = []
    for b, p in enumerate(prompts):
        toks = g.sequences[b, L:].tolist()
        n = next((i + 1 for i, t in enumerate(toks) if t in pair.eos_ids), len(toks))
        toks = toks[:n]
        cached = torch.stack([scaled_logprobs(g.logits[i][b: b + 1], sp)[0, t] for i, t in enumerate(toks)]).cpu()
        floor.append((rescore(pair.senior, p, toks) - cached).abs())
    f = torch.cat(floor)

mean_tol, max_tol = max(0.02, 2 * float(f.mean())), max(0.25, 2 * float(f.max()))
print(f"bf16 tandem: {d.numel()} tokens, mean |dlogp| {d.mean():.4f}, max {d.max():.4f}; "
      f"transformers generate() floor: mean {f.mean():.4f}, max {f.max():.4f}; "
      f"tolerance mean {mean_tol:.4f}, max {max_tol:.4f}")
sys.exit(0 if d.mean() <= mean_tol and d.max() <= max_tol else 1)
