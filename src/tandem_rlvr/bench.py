"""Decoding benchmark: our solo and tandem loops vs a naive tandem loop and ``generate()``.

All four decoders produce exactly ``new_tokens`` tokens per row (EOS ignored) from the same
prompts, so tokens/s compare like for like. Ratios are taken within one run. The FLOP
bound of tandem over solo for the pair: per generated token a solo rollout costs
body + head of one model, a tandem rollout costs the bodies of both plus the head of the
active model (p senior, 1 - p junior), so bound = solo / tandem FLOPs. Matmul FLOPs are
2 x parameters; attention adds 4 x layers x heads x head_dim x context per token.

Run: ``tandem bench decode --json`` (defaults: tiny world, batch 64, 128 new tokens).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .decoding.sampling import SamplingParams
from .decoding.schedule import make_schedule
from .decoding.tandem import ModelRunner, TandemDecoder, left_pad
from .decoding import rng
from .decoding.sampling import sample


def flops_per_token(model, context: float) -> tuple[float, float]:
    """(body FLOPs, head FLOPs) for one decoded token at average context length ``context``."""
    cfg = model.config
    head = model.get_output_embeddings().weight.numel()
    embed = model.get_input_embeddings().weight.numel()
    body_params = sum(p.numel() for p in model.get_decoder().parameters()) - embed
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    attn = 4 * cfg.num_hidden_layers * heads * head_dim * context
    return 2.0 * body_params + attn, 2.0 * head


def flop_bound(senior, junior, p: float, context: float) -> float:
    """Tandem/solo throughput bound (solo = senior alone)."""
    bs, hs = flops_per_token(senior, context)
    bj, hj = flops_per_token(junior, context)
    return (bs + hs) / (bs + bj + p * hs + (1 - p) * hj)


@torch.no_grad()
def naive_tandem(senior, junior, prompts, seeds, sampling: SamplingParams, p: float, tokenizer):
    """The straightforward loop: both models run full forwards with both output layers every step."""
    runners = [ModelRunner(senior), ModelRunner(junior)]
    ids, attn, pos = left_pad(prompts, tokenizer.pad_token_id)
    dev = runners[0].device
    ids, attn, pos = ids.to(dev), attn.to(dev), pos.to(dev)
    seeds = torch.as_tensor(seeds, device=dev)
    sched = make_schedule("word", tokenizer, p=p, vocab_size=senior.config.vocab_size)
    state = sched.start(seeds)
    caches = [None, None]
    cur, cur_pos = ids, pos
    for t in range(sampling.max_new_tokens):
        logits = []
        for i, m in enumerate((senior, junior)):
            out = m(input_ids=cur, attention_mask=attn, position_ids=cur_pos, use_cache=True,
                    **{runners[i].cache_kw: caches[i]})
            caches[i] = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
            logits.append(out.logits[:, -1].float())
        mixed = torch.where(state.author[:, None], logits[0], logits[1])
        tok = sample(mixed, rng.uniform(seeds, t, rng.SAMPLE), sampling)
        sched.advance(state, tok, t)
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        cur, cur_pos = tok[:, None], cur_pos[:, -1:] + 1


def _time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_decode(senior, junior, tokenizer, prompts: list[str], batch: int = 64, new_tokens: int = 128,
                 p: float = 0.5, repeats: int = 3, temperature: float = 1.0, progress=None) -> dict:
    """Tokens/s of four decoders on the same batch; see the module docstring."""
    enc = [tokenizer.encode(prompts[i % len(prompts)]) for i in range(batch)]
    seeds = list(range(batch))
    sp = SamplingParams(temperature=temperature, max_new_tokens=new_tokens)
    pad = tokenizer.pad_token_id
    solo = TandemDecoder(senior, None, make_schedule("senior"), sp, eos_ids=[], pad_id=pad)
    tandem = TandemDecoder(senior, junior, make_schedule("word", tokenizer, p=p, vocab_size=senior.config.vocab_size),
                           sp, eos_ids=[], pad_id=pad)
    ids, attn, _ = left_pad(enc, pad)
    dev = next(senior.parameters()).device
    ids, attn = ids.to(dev), attn.to(dev)

    def hf():
        senior.generate(input_ids=ids, attention_mask=attn, do_sample=True, temperature=temperature, top_k=0,
                        top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=pad)

    cases = {
        "solo": lambda: solo.generate(enc, seeds),
        "tandem": lambda: tandem.generate(enc, seeds),
        "naive_tandem": lambda: naive_tandem(senior, junior, enc, seeds, sp, p, tokenizer),
        "hf_generate": hf,
    }
    for fn in cases.values():  # warm-up (allocator, kernels, lazy init)
        fn()
    secs = {}
    for name, fn in cases.items():
        secs[name] = _time(fn, repeats)
        if progress:
            progress(name)
    toks = batch * new_tokens
    res = {f"{k}_tok_s": toks / v for k, v in secs.items()}
    avg_ctx = sum(len(e) for e in enc) / batch + new_tokens / 2
    res.update({
        "bound": flop_bound(senior, junior, p, avg_ctx),
        "tandem_over_solo": res["tandem_tok_s"] / res["solo_tok_s"],
        "naive_over_solo": res["naive_tandem_tok_s"] / res["solo_tok_s"],
        "solo_over_hf_generate": res["solo_tok_s"] / res["hf_generate_tok_s"],
        "batch": batch, "new_tokens": new_tokens, "p": p, "repeats": repeats,
        "device": str(dev), "threads": torch.get_num_threads(),
    })
    res["tandem_over_solo_vs_bound"] = res["tandem_over_solo"] / res["bound"]
    return res


def bench_train_step(preset: str = "tiny", overrides: dict | None = None, steps: int = 4, methods=("grpo", "tandem"), print_fn=print) -> dict:
    """Mean wall-clock of an optimiser step per method (first step dropped as warm-up), same
    config otherwise; reports tandem / GRPO. Runs in throwaway directories."""
    import shutil
    import tempfile

    from .config import load_train_config
    from .rl.callbacks import read_log
    from .rl.train import train

    overrides = dict(overrides or {})
    res = {}
    for method in methods:
        tmp = tempfile.mkdtemp(prefix=f"tandem-bench-{method}-")
        try:
            cfg = load_train_config(preset, overrides={**overrides, "method": method, "max_steps": steps,
                                                       "eval_every": 0, "save_every": steps * 1000, "output_dir": tmp})
            train(cfg, print_fn=lambda *_: None)
            times = [r["wall/step_s"] for r in read_log(Path(tmp) / "log.jsonl") if "wall/step_s" in r][1:]
            res[f"{method}_step_s"] = sum(times) / len(times)
            print_fn(f"{method}: {res[f'{method}_step_s'] * 1000:.0f} ms per step")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if "tandem_step_s" in res and "grpo_step_s" in res:
        res["tandem_over_grpo"] = res["tandem_step_s"] / res["grpo_step_s"]
    res["steps_timed"] = steps - 1
    res["threads"] = torch.get_num_threads()
    return res
