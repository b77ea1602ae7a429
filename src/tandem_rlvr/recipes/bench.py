"""Decoding benchmark: our solo and tandem loops vs a naive tandem loop and ``generate()``.

Equal budgets: every decoder runs under the same number of intra-op threads N (``threads``,
default torch's current count), i.e. on the same cores, and the JSON says how each used
them (``budget``). On a CPU every decoder runs one body at a time with N threads (our tandem
decoder can split them between its two bodies in two threads, ``parallel=True``; measured
slower, docs/architecture.md, "Measured: decoding speed"). Solo
is also timed at every count below N and the fastest is reported beside it
(``solo_best_*``): on small models extra intra-op threads can slow a single body down, and
a ratio against a handicapped solo would flatter tandem.

Two length modes. ``fixed``: every row produces exactly ``new_tokens`` tokens (EOS ignored),
so tokens/s compare like for like. ``lognormal``: row b stops after L_b tokens, L_b drawn
from a log-normal with median ``median_frac`` x ``new_tokens`` (clipped to [1, new_tokens]),
as RL rollouts end at very different lengths. Our decoders get the lengths as per-row caps;
``generate()`` and the naive loop get them as a forced EOS, and both keep decoding finished
rows until the longest ends, as they do in real use. Reported tokens/s count useful tokens
only (sum of L_b). Our decoders are also timed with compaction off to show what it buys.

The FLOP bound of tandem over solo for the pair: per generated token a solo rollout costs
body + head of one model, a tandem rollout costs the bodies of both plus the head of the
active model (p senior, 1 - p junior), so bound = solo / tandem FLOPs. Matmul FLOPs are
2 x parameters; attention adds 4 x layers x heads x head_dim x context per token. With fixed
lengths the roofline bound is reported too (``roofline.py``): it also charges every weight
matrix its memory traffic at the measured bandwidth, which at small batches is the limit.

Run: ``tandem bench decode --json`` (defaults: tiny world, batch 64, 128 new tokens).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..decoding.sampling import SamplingParams
from ..decoding.schedule import make_schedule
from ..decoding.tandem import ModelRunner, TandemDecoder, context_limit, left_pad
from ..decoding import rng
from ..decoding.sampling import sample
from ..errors import TandemError
from ..runtime import configure_cpu_threads, intra_op_threads
from .roofline import Shapes, best_seconds, machine_rates, roofline_bound


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
def naive_tandem(senior, junior, prompts, seeds, sampling: SamplingParams, p: float, tokenizer, lengths=None):
    """The straightforward loop: both models run full forwards with both output layers every step,
    every row until the longest ends (``lengths``: per-row stops, finished rows then emit padding)."""
    runners = [ModelRunner(senior), ModelRunner(junior)]
    ids, attn, pos = left_pad(prompts, tokenizer.pad_token_id)
    dev = runners[0].device
    ids, attn, pos = ids.to(dev), attn.to(dev), pos.to(dev)
    seeds = torch.as_tensor(seeds, device=dev)
    sched = make_schedule("word", tokenizer, p=p, vocab_size=senior.config.vocab_size)
    state = sched.start(seeds)
    caches = [None, None]
    cur, cur_pos = ids, pos
    steps = sampling.max_new_tokens if lengths is None else max(lengths)
    stop = None if lengths is None else torch.as_tensor(lengths, device=dev)
    for t in range(steps):
        logits = []
        for i, m in enumerate((senior, junior)):
            out = m(input_ids=cur, attention_mask=attn, position_ids=cur_pos, use_cache=True,
                    **{runners[i].cache_kw: caches[i]})
            caches[i] = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
            logits.append(out.logits[:, -1].float())
        mixed = torch.where(state.author[:, None], logits[0], logits[1])
        tok = sample(mixed, rng.uniform(seeds, t, rng.SAMPLE), sampling)
        if stop is not None:
            tok = torch.where(stop <= t, tokenizer.pad_token_id, tok)
        sched.advance(state, tok, t)
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        cur, cur_pos = tok[:, None], cur_pos[:, -1:] + 1


def lognormal_lengths(batch: int, cap: int, median_frac: float = 0.25, sigma: float = 1.0, seed: int = 0) -> list[int]:
    """Per-row response lengths: log-normal with median ``median_frac`` x ``cap``, clipped to [1, cap]."""
    import numpy as np

    x = np.random.default_rng(seed).lognormal(np.log(median_frac * cap), sigma, batch)
    return [int(v) for v in np.clip(np.rint(x), 1, cap)]


class _ForcedLengths:
    """A ``generate()`` logits processor: row b may not emit EOS before its L_b-th token and must emit it then."""

    def __init__(self, lengths, prompt_len: int, eos: int):
        self.stop = torch.as_tensor(lengths) - 1  # step at which row b emits EOS
        self.prompt_len, self.eos = prompt_len, eos

    def __call__(self, input_ids, scores):
        t = input_ids.shape[1] - self.prompt_len
        stop = self.stop.to(scores.device)
        scores[:, self.eos] = torch.where(stop > t, float("-inf"), scores[:, self.eos])
        force = stop == t
        if bool(force.any()):
            scores[force] = float("-inf")
            scores[force, self.eos] = 0.0
        return scores


def bench_decode(senior, junior, tokenizer, prompts: list[str], batch: int = 64, new_tokens: int = 128,
                 p: float = 0.5, repeats: int = 3, temperature: float = 1.0, threads: int | None = None,
                 lengths: str = "fixed", median_frac: float = 0.25, sigma: float = 1.0,
                 compact_sweep: tuple[float, ...] = (), progress=None) -> dict:
    """Tokens/s of the decoders on the same batch at an equal thread budget; see the module docstring."""
    from transformers import LogitsProcessorList

    N = threads or torch.get_num_threads()
    enc = [tokenizer.encode(prompts[i % len(prompts)]) for i in range(batch)]
    seeds = list(range(batch))
    sp = SamplingParams(temperature=temperature, max_new_tokens=new_tokens)
    pad = tokenizer.pad_token_id
    word = make_schedule("word", tokenizer, p=p, vocab_size=senior.config.vocab_size)
    caps = lognormal_lengths(batch, new_tokens, median_frac, sigma) if lengths == "lognormal" else [new_tokens] * batch
    ids, attn, _ = left_pad(enc, pad)
    context = min([c for m in (senior, junior) if m is not None and (c := context_limit(m))] or [10**12])
    if ids.shape[1] + new_tokens > context:  # ours would stop at the context, the naive loop and generate() not
        raise TandemError(f"--new-tokens {new_tokens}: the longest prompt ({ids.shape[1]} tokens) plus the new tokens "
                          f"exceed the models' context of {context} tokens; use --new-tokens {context - ids.shape[1]} "
                          "or less")
    dev = next(senior.parameters()).device
    ids, attn = ids.to(dev), attn.to(dev)
    eos = tokenizer.eos_token_id

    def decoder(junior_model, schedule, compact="default"):
        opts = {} if compact == "default" else {"compact": compact}
        return TandemDecoder(senior, junior_model, schedule, sp, eos_ids=[], pad_id=pad, **opts)

    def ours(dec):
        return lambda: dec.generate(enc, seeds, max_new_tokens=caps)

    def hf():
        kw = dict(min_new_tokens=new_tokens) if lengths == "fixed" else dict(
            logits_processor=LogitsProcessorList([_ForcedLengths(caps, ids.shape[1], eos)]), eos_token_id=eos)
        senior.generate(input_ids=ids, attention_mask=attn, do_sample=True, temperature=temperature, top_k=0,
                        top_p=1.0, max_new_tokens=new_tokens, pad_token_id=pad, **kw)

    tandem = decoder(junior, word)
    cases = {
        "solo": ours(decoder(None, make_schedule("senior"))),
        "tandem": ours(tandem),
        "naive_tandem": lambda: naive_tandem(senior, junior, enc, seeds, sp, p, tokenizer,
                                             None if lengths == "fixed" else caps),
        "hf_generate": hf,
    }
    if lengths == "lognormal":
        cases["solo_no_compact"] = ours(decoder(None, make_schedule("senior"), None))
        cases["tandem_no_compact"] = ours(decoder(junior, word, None))
    for c in compact_sweep:  # the compaction threshold (TandemDecoder's ``compact``), one decoder each
        cases[f"solo_compact_{c:g}"] = ours(decoder(None, make_schedule("senior"), c))
        cases[f"tandem_compact_{c:g}"] = ours(decoder(junior, word, c))
    secs = {}
    with intra_op_threads(N):
        for fn in cases.values():  # warm-up (allocator, kernels, lazy init)
            fn()
        for name, fn in cases.items():
            secs[name] = best_seconds(fn, repeats)
            if progress:
                progress(name)
    solo_at = {N: secs["solo"]}
    for n in range(1, N):
        with intra_op_threads(n):
            solo_at[n] = best_seconds(cases["solo"], repeats)
    best_n = min(solo_at, key=solo_at.get)
    toks = sum(caps)
    res = {f"{k}_tok_s": toks / v for k, v in secs.items()}
    res["solo_best_tok_s"], res["solo_best_threads"] = toks / solo_at[best_n], best_n
    res["solo_tok_s_by_threads"] = {str(n): toks / v for n, v in sorted(solo_at.items())}
    avg_ctx = sum(len(e) for e in enc) / batch + sum(caps) / batch / 2
    res.update({
        "bound": flop_bound(senior, junior, p, avg_ctx),
        "tandem_over_solo": res["tandem_tok_s"] / res["solo_tok_s"],
        "tandem_over_best_solo": res["tandem_tok_s"] / res["solo_best_tok_s"],
        "tandem_over_naive": res["tandem_tok_s"] / res["naive_tandem_tok_s"],
        "naive_over_solo": res["naive_tandem_tok_s"] / res["solo_tok_s"],
        "solo_over_hf_generate": res["solo_tok_s"] / res["hf_generate_tok_s"],
        "tandem_over_hf_generate": res["tandem_tok_s"] / res["hf_generate_tok_s"],
        "batch": batch, "new_tokens": new_tokens, "p": p, "repeats": repeats, "device": str(dev),
        "threads": N, "lengths": lengths, "useful_tokens": toks, "padded_tokens": batch * max(caps),
        "budget": {"solo": _threads(N), "naive_tandem": f"{_threads(N)}, bodies in turn", "hf_generate": _threads(N),
                   "tandem": _tandem_budget(tandem, N)},
    })
    if lengths == "lognormal":
        res.update({"median_frac": median_frac, "sigma": sigma, "length_median": sorted(caps)[batch // 2],
                    "length_mean": toks / batch, "length_max": max(caps)})
    res["tandem_over_solo_vs_bound"] = res["tandem_over_solo"] / res["bound"]
    res["tandem_over_best_solo_vs_bound"] = res["tandem_over_best_solo"] / res["bound"]
    if lengths == "fixed":  # every step has all rows: the roofline at `batch` rows applies
        with intra_op_threads(N):
            flops, bw = machine_rates(dev, next(senior.parameters()).dtype)
        res["machine"] = {"matmul_gflop_s": flops / 1e9, "memory_gb_s": bw / 1e9, "threads": N}
        res["roofline_bound"] = roofline_bound(Shapes.of(senior), Shapes.of(junior), batch, p, avg_ctx, flops, bw)
        res["tandem_over_solo_vs_roofline"] = res["tandem_over_solo"] / res["roofline_bound"]
        res["tandem_over_best_solo_vs_roofline"] = res["tandem_over_best_solo"] / res["roofline_bound"]
    return res


def _threads(n: int) -> str:
    return f"{n} intra-op thread{'s' if n != 1 else ''}"


def _tandem_budget(dec: TandemDecoder, N: int) -> str:
    with intra_op_threads(N):
        parallel, per_body = dec.threads()
    if not parallel:
        return f"{_threads(N)}, bodies in turn"
    return f"2 bodies in 2 threads x {_threads(per_body)}" if per_body else "2 bodies in 2 threads (their devices)"


def format_decode(res: dict) -> list[str]:
    """Human-readable lines of a ``bench_decode`` result."""
    mode = (f"lengths log-normal, median {res['length_median']}, mean {res['length_mean']:.0f}, "
            f"max {res['length_max']} of {res['new_tokens']} (useful tokens/s)" if res["lengths"] == "lognormal" else
            f"every row {res['new_tokens']} tokens")
    lines = [f"batch {res['batch']}, {mode}; {res['device']}, budget {res['threads']} thread(s) for every decoder"]
    sweep = [k[: -len("_tok_s")] for k in res if "_compact_" in k and "no_compact" not in k and k.endswith("_tok_s")]
    for k in ("solo", "solo_best", "tandem", "naive_tandem", "hf_generate", "solo_no_compact", "tandem_no_compact",
              *sweep):
        if f"{k}_tok_s" in res:
            extra = f" ({res['solo_best_threads']} thread(s))" if k == "solo_best" else f" ({res['budget'][k]})" \
                if k in res["budget"] else ""
            lines.append(f"  {k:18s} {res[k + '_tok_s']:10.0f} tok/s{extra}")
    lines.append(f"tandem/solo {res['tandem_over_solo']:.3f} = {res['tandem_over_solo_vs_bound']:.3f} of the FLOP "
                 f"bound {res['bound']:.3f} (vs the fastest solo: {res['tandem_over_best_solo_vs_bound']:.3f}); "
                 f"tandem/naive {res['tandem_over_naive']:.2f}x; solo/generate() {res['solo_over_hf_generate']:.2f}x, "
                 f"tandem/generate() {res['tandem_over_hf_generate']:.2f}x")
    if "roofline_bound" in res:
        m = res["machine"]
        lines.append(f"tandem/solo = {res['tandem_over_solo_vs_roofline']:.3f} of the roofline bound "
                     f"{res['roofline_bound']:.3f} at {res['batch']} rows (measured here: matrix products "
                     f"{m['matmul_gflop_s']:.0f} GFLOP/s, memory {m['memory_gb_s']:.1f} GB/s)")
    return lines


def meta_model(path: str):
    """The model's module tree on the meta device: parameter counts for FLOPs, no weights loaded."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))


def bench_decode_vllm(senior: str, junior: str, tokenizer, prompts: list[str], batch: int = 64,
                      new_tokens: int = 128, p: float = 0.5, repeats: int = 3, temperature: float = 1.0,
                      settings=None, progress=None) -> dict:
    """Tokens/s inside vLLM: the senior's own vLLM model (solo) vs ``TandemForCausalLM`` under the
    word schedule (tandem), same prompts, every row exactly ``new_tokens`` (EOS ignored). The
    engines run one after the other on the same devices. The bound is that of a decoder that
    runs both output layers on every token, as the plugin does: (bs + hs) / (bs + bj + hs + hj)."""
    from ..engines.vllm_engine import VLLMEngine

    enc = [tokenizer.encode(prompts[i % len(prompts)]) for i in range(batch)]
    seeds = list(range(batch))
    sp = SamplingParams(temperature=temperature, max_new_tokens=new_tokens)
    secs = {}
    for name, tandem in (("solo", False), ("tandem", True)):
        eng = VLLMEngine(senior, junior, tokenizer, [], tandem=tandem, settings=settings)
        try:
            dec = eng.decoder("word" if tandem else "senior", sp, p=p, ignore_eos=True)
            dec.generate(enc, seeds)  # warm-up
            secs[name] = best_seconds(lambda dec=dec: dec.generate(enc, seeds), repeats)
            device = str(eng.llm.llm_engine.vllm_config.device_config.device)
        finally:
            eng.close()
        if progress:
            progress(name)
    toks = batch * new_tokens
    res = {f"{k}_tok_s": toks / v for k, v in secs.items()}
    ms, mj = meta_model(senior), meta_model(junior)
    avg_ctx = sum(len(e) for e in enc) / batch + new_tokens / 2
    bs, hs = flops_per_token(ms, avg_ctx)
    bj, hj = flops_per_token(mj, avg_ctx)
    res.update({
        "engine": "vllm", "bound": (bs + hs) / (bs + bj + hs + hj),
        "bound_active_head_only": flop_bound(ms, mj, p, avg_ctx),
        "tandem_over_solo": res["tandem_tok_s"] / res["solo_tok_s"],
        "batch": batch, "new_tokens": new_tokens, "p": p, "repeats": repeats, "device": device,
        "threads": torch.get_num_threads(), "note": "solo and tandem each ran alone on the same device(s)",
    })
    res["tandem_over_solo_vs_bound"] = res["tandem_over_solo"] / res["bound"]
    return res


def bench_train_step(preset: str = "tiny", overrides: dict | None = None, steps: int = 4, methods=("grpo", "tandem"),
                     print_fn=print) -> dict:
    """Mean wall-clock of an optimiser step per method (first step dropped as warm-up), same
    config otherwise; reports tandem / GRPO. Runs in throwaway directories."""
    import shutil
    import tempfile

    from ..config import load_train_config
    from ..rl.callbacks import read_log
    from ..rl.train import train

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


def kv_bytes(model, tokens: int, rows: int) -> int:
    """KV-cache bytes of one model: layers x 2 (K and V) x kv heads x head dim x tokens x rows x bytes."""
    cfg = model.config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers * 2 * heads * head_dim * tokens * rows * next(model.parameters()).element_size()


def _memory_child(senior: str, junior: str, rows: int, new_tokens: int) -> dict:
    """Runs in a fresh process: RSS before loading, after loading, and peak while decoding."""
    import threading

    import psutil

    from ..models import load_pair
    from ..prompting import plain_prompt as tiny_prompt
    from ..world.tasks import make_problems

    configure_cpu_threads()  # a fresh process: same thread choice as the CLI (TANDEM_THREADS)
    import transformers  # noqa: F401 - library code is not model memory: import it before the baseline
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    pair = load_pair(senior, junior)
    import gc

    # transformers maps float32 safetensors files instead of copying them: the weights only
    # become resident when a forward touches them. Touch every page now, so that "loaded"
    # includes the weights and "decode extra" is the decoding's own memory (KV and temporaries).
    with torch.no_grad():
        for m in {id(pair.senior): pair.senior, id(pair.junior): pair.junior}.values():
            for t in list(m.parameters()) + list(m.buffers()):
                t.float().sum()
    gc.collect()
    rss_loaded = proc.memory_info().rss
    tok = pair.tokenizer
    prompts = [tok.encode(tiny_prompt(p.problem)) for p in make_problems(rows, split="test")]
    dec = TandemDecoder(pair.senior, pair.junior, make_schedule("word", tok, vocab_size=pair.senior.config.vocab_size),
                        SamplingParams(1.0, max_new_tokens=new_tokens), eos_ids=[], pad_id=tok.pad_token_id)
    peak = [rss_loaded]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.005)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    out = dec.generate(prompts, list(range(rows)))
    stop.set()
    th.join()
    peak[0] = max(peak[0], proc.memory_info().rss)
    tokens = max(len(p) for p in prompts) + out.tokens.shape[1]
    models = {id(pair.senior): pair.senior, id(pair.junior): pair.junior}.values()  # a self-pair counts once
    weights = sum(p.numel() * p.element_size() for m in models for p in m.parameters())
    kv = kv_bytes(pair.senior, tokens, rows) + kv_bytes(pair.junior, tokens, rows)
    return {"new_tokens": new_tokens, "rows": rows, "context": tokens, "weights_mb": weights / 2**20,
            "kv_mb": kv / 2**20, "rss_before_models_mb": rss0 / 2**20, "rss_loaded_mb": rss_loaded / 2**20,
            "peak_mb": peak[0] / 2**20, "decode_extra_mb": (peak[0] - rss_loaded) / 2**20,
            "ratio": (peak[0] - rss0) / (kv + weights), "decode_over_kv": (peak[0] - rss_loaded) / max(kv, 1)}


def bench_memory(senior: str, junior: str, rows: int, lengths=(256, 512, 1024), print_fn=print) -> list[dict]:
    """Peak memory of a tandem rollout batch per response length, each in a fresh process,
    against the KV-cache arithmetic plus the weights."""
    import json
    import subprocess
    import sys

    out = []
    for n in lengths:
        code = ("import json,sys; from tandem_rlvr.recipes.bench import _memory_child; "
                f"print(json.dumps(_memory_child({senior!r}, {junior!r}, {rows}, {n})))")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "memory child failed")
        row = json.loads(res.stdout.strip().splitlines()[-1])
        print_fn(f"{n:5d} new tokens: peak {row['peak_mb']:.0f} MB, weights {row['weights_mb']:.0f} MB, "
                 f"KV {row['kv_mb']:.0f} MB, (peak - pre-load RSS) / (KV + weights) = {row['ratio']:.2f}, "
                 f"decoding's own memory {row['decode_extra_mb']:.0f} MB = {row['decode_over_kv']:.2f} x KV")
        out.append(row)
    return out
