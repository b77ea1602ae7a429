"""Junior legibility the paper's way: ``tandem eval legibility --ce-protocol paper`` (the default).

What (the paper's ``eval/measure/legibility.py``): the junior reads the senior's solo chain of thought
as text. For each sample, the junior's own prompt for the problem (its tokenizer, the run's
template resolved for it) followed by the response text is tokenised with the junior's
tokenizer; the tokens after the prompt's are scored teacher-forced, and their mean
-log p_jun is the sample's CE. The response text carries no EOS, so none is scored. A sample
whose prompt + text is ``CUT`` (4,088 = 4,096 - 8) junior tokens or more is dropped and
counted, as the paper's code drops it (and so is one longer than the junior's context, counted
apart). Averaging: per sample, then the mean over a benchmark's samples, then the mean over
benchmarks (the paper's order; ``--ce-protocol ids`` averages sample -> problem -> benchmark).
Reported per junior token (nats/token) and per character of the scored text (nats/char): the
second compares juniors whose tokenizers cut the text differently.

alpha (the overlap of the two distributions) needs both models on one vocabulary: it is
computed when the senior's and the junior's vocabularies are identical (the senior then reads
the same junior-tokenised sequence) and left out otherwise.

The SE beside each mean is the bootstrap over problems of per-problem means (the paper reports
none); per_problem.jsonl keeps those per-problem means for ``compare``'s paired t-tests.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ...errors import TandemError
from ...io import atomic_write
from ...prompting import encode_prompt, resolve_template
from ...runtime import invocation
from .metrics import mean_se_summary
from ...tasks import prompt_text
from ..run_files import INPUTS, EvalRun, check_problems, recorded_task, run_problems

CUT = 4096 - 8  # the paper's MAX_MODEL_LEN - CONTEXT_RESERVE: chains this long or longer are dropped


def texts_for(run: EvalRun, tokenizer, benchmarks, split) -> tuple[list[str], list[str]]:
    """(junior prompt text, response text) of every row: the prompt in the junior's template."""
    specs, problems = run_problems(run.path, run.config, benchmarks, split)
    if INPUTS in run.config:
        check_problems(run.rows, problems, run.where)
    template = resolve_template(tokenizer, run.config.get("template") or "auto")
    task = recorded_task(run.config)  # its prompt: the run's task and instruction
    prompts, responses = [], []
    for i, r in enumerate(run.rows):
        key = (r["benchmark"], str(r["problem_id"]))
        if key not in problems:
            raise TandemError(f"{run.where(i)}: problem {key[1]!r} of benchmark {key[0]!r} is not in the loaded "
                              f"benchmarks ({', '.join(specs)}): a samples file from another benchmark set?")
        if "response" not in r:
            raise TandemError(f"{run.where(i)}: no response text; --ce-protocol paper reads the text "
                              "(use --ce-protocol ids)")
        prompts.append(prompt_text(tokenizer, task, problems[key], template))
        responses.append(r["response"])
    return prompts, responses


def paper_scores(junior, tokenizer, prompts, responses, senior=None, batch_tokens: int = 16384,
                 progress: bool = False) -> dict:
    """Per sample: CE per token, total nats, scored tokens, characters, alpha (with ``senior``:
    same vocabulary) and ``dropped`` ("" | "4088" | "context"). Arrays of length S."""
    import torch

    from ...decoding.teacher_forcing import response_logprobs, score_sequences

    S = len(prompts)
    context = getattr(junior.config, "max_position_embeddings", None)
    pre, res, keep, dropped = [], [], [], [""] * S
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        full, head = encode_prompt(tokenizer, p + r), encode_prompt(tokenizer, p)
        if len(full) >= CUT:
            dropped[i] = "4088"
        elif context is not None and len(full) > context:
            dropped[i] = "context"
        elif len(full) > len(head):
            keep.append(i)
        pre.append(full[: len(head)])
        res.append(full[len(head):])
    ce = np.full(S, np.nan)
    alpha = np.full(S, np.nan)
    tokens = np.array([len(x) if not dropped[i] else 0 for i, x in enumerate(res)], dtype=np.int64)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if keep:
        if senior is not None:
            sc = score_sequences(senior, junior, [pre[i] for i in keep], [res[i] for i in keep], pad, batch_tokens,
                                 progress=progress)
            ce[keep], alpha[keep] = sc["ce"], sc["alpha"]
        else:
            lps = response_logprobs(junior, [pre[i] for i in keep], [res[i] for i in keep], pad,
                                    batch_tokens=batch_tokens)
            ce[keep] = [-float(torch.as_tensor(lp, dtype=torch.float64).mean()) for lp in lps]
    chars = np.array([len(r) for r in responses], dtype=np.int64)
    nats = ce * tokens
    return {"ce": ce, "nats": nats, "tokens": tokens, "chars": chars, "alpha": alpha, "dropped": dropped,
            "ce_per_char": nats / np.maximum(chars, 1)}


def paper_summary(per_sample: list[dict], per_problem: list[dict], stats: list[str]) -> dict:
    """{stat: {benchmark | "macro": {mean, se, problems, samples}}}: means in the paper's order
    (samples -> benchmark -> macro over benchmarks), SE bootstrapped over per-problem means."""
    out = {}
    for stat in stats:
        by_p: dict[str, list] = {}
        for p in per_problem:
            by_p.setdefault(p["benchmark"], []).append(p[stat])
        summ = mean_se_summary(by_p)
        by_s: dict[str, list] = {}
        for s in per_sample:
            if s[stat] is not None:
                by_s.setdefault(s["benchmark"], []).append(s[stat])
        for b, v in by_s.items():
            summ[b].update(mean=float(np.mean(v)), samples=len(v))
        summ["macro"].update(mean=float(np.mean([np.mean(v) for v in by_s.values()])),
                             samples=sum(len(v) for v in by_s.values()))
        out[stat] = summ
    return out


def run_paper_legibility(run: EvalRun, senior: str, junior: str, out, fingerprints: dict, benchmarks, split,
                         device: str, dtype: str, batch_tokens: int, progress: bool) -> dict:
    """``run_legibility`` under ``--ce-protocol paper``: write ``out``, return legibility.json's content."""
    from ...io import write_json
    from ...models import load_model, load_tokenizer, recorded_model, resolve_device
    jtok, stok = load_tokenizer(junior), load_tokenizer(senior)
    check_tokenizer(run, stok, senior, len(stok))  # the text scored is the text the senior's ids spell
    same_vocab = jtok.get_vocab() == stok.get_vocab()
    dev = resolve_device(device)
    jm = load_model(junior, dev, dtype)
    sm = load_model(senior, dev, dtype) if same_vocab else None
    prompts, responses = texts_for(run, jtok, benchmarks, split)
    t0 = time.perf_counter()
    sc = paper_scores(jm, jtok, prompts, responses, sm, batch_tokens, progress)
    seconds = time.perf_counter() - t0
    stats = ["ce", "ce_per_char", *(["alpha"] if same_vocab else [])]
    per_sample = [{"benchmark": r["benchmark"], "problem_id": str(r["problem_id"]), "sample_idx": r["sample_idx"],
                   "tokens": int(sc["tokens"][i]), "chars": int(sc["chars"][i]), "dropped": sc["dropped"][i] or None,
                   **{k: f(sc[k][i]) for k in stats}} for i, r in enumerate(run.rows)]
    groups: dict[tuple[str, str], list[dict]] = {}
    for s in per_sample:
        if s["ce"] is not None:
            groups.setdefault((s["benchmark"], s["problem_id"]), []).append(s)
    per_problem = [{"benchmark": b, "problem_id": pid, "samples": len(ss), "tokens": sum(s["tokens"] for s in ss),
                    **{k: float(np.mean([s[k] for s in ss])) for k in stats}} for (b, pid), ss in groups.items()]
    if not per_problem:
        raise TandemError(f"{run.samples_path}: no sample left to score (every response empty or cut at {CUT} "
                          "junior tokens)")
    dropped = {k: sum(d == k for d in sc["dropped"]) for k in ("4088", "context")}
    n_tokens = int(sc["tokens"].sum())
    result = {"summary": paper_summary(per_sample, per_problem, stats), "samples": len(per_sample),
              "scored_samples": sum(s["ce"] is not None for s in per_sample), "dropped": dropped,
              "scored_tokens": n_tokens,
              "config": {"samples": str(run.path.resolve()), "senior": recorded_model(senior),
                         "junior": recorded_model(junior), "template": run.config.get("template"),
                         "benchmarks": sorted({s["benchmark"] for s in per_sample}), "run_config": run.config,
                         INPUTS: fingerprints, "ce_protocol": "paper", "cut": CUT, "same_vocab": same_vocab,
                         **invocation()},
              "timing": {"seconds": round(seconds, 3), "tokens_per_s": round(n_tokens / max(seconds, 1e-9), 1),
                         "device": str(dev), "batch_tokens": batch_tokens}}
    out = Path(out)
    write_jsonl(out / "per_sample.jsonl", per_sample)
    write_jsonl(out / "per_problem.jsonl", per_problem)
    write_json(out / "legibility.json", result)
    return result


def check_tokenizer(run: EvalRun, tokenizer, name: str, vocab_size: int) -> None:
    """Every row's ids must lie in the vocabulary and decode to its response text; else the
    samples came from another tokenizer (TandemError naming the file and line)."""
    for i, r in enumerate(run.rows):
        ids = r["token_ids"]
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise TandemError(f"{run.where(i)}: token id {int(ids.max())} outside the vocabulary of {name} "
                              f"({vocab_size}): a samples file from another tokenizer?")
        if "response" in r and tokenizer.decode(ids.tolist(), skip_special_tokens=True) != r["response"]:
            raise TandemError(f"{run.where(i)}: token_ids do not decode to the response with the tokenizer of "
                              f"{name}: a samples file from another tokenizer?")


def f(x) -> float | None:
    return None if not np.isfinite(x) else float(x)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with atomic_write(path) as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
