"""Junior legibility: how well the frozen junior can read the senior's solo chain of thought.

What (paper section 4, "junior legibility"): for every senior sample of a solo run,
teacher-forced over prompt + response,

- CE: the junior's per-token cross-entropy -log p_jun(y_t | x, y_<t) in nats, averaged over
  the sample's response tokens (EOS included when the senior emitted it);
- alpha: the distribution overlap sum_v min(p_sen(v | .), p_jun(v | .)) (= 1 - total
  variation distance), averaged over the same positions. Both are the models' raw
  distributions (softmax at temperature 1), not the top-p/top-k sampling distribution.

Per sample -> per problem (mean over its samples) -> per benchmark and macro (mean over
problems, bootstrap SE over problems, stratified by benchmark for the macro).

How: teacher-forced batch forwards, never decoding. Samples are sorted by length and
packed into right-padded batches of at most ``batch_tokens`` tokens with an attention mask
(right padding is inert under the causal mask). Each model runs its decoder once per batch
and its output layer only at response positions, in chunks of ``chunk`` positions, so
(N, V) logits for a whole batch never materialise (151k-token vocabularies). This assumes
logits = lm_head(final hidden state), true for Qwen, Llama and Mistral families.

The prompt is re-made exactly as the sampler made it: config.json's template applied to
the problem text, loaded with ``load_benchmarks`` (``--benchmarks`` overrides the names in
config.json, e.g. for benchmarks sampled from a local file). What is read is checked against
what was sampled: each row's problem fingerprint against the problem loaded now, and the
senior's files against the fingerprint the run recorded (a refusal naming the difference;
runs made before fingerprints get a warning). legibility.json records the fingerprints of
the senior and junior it used (``config.inputs``), so ``compare`` can tell juniors apart.

Run:  tandem eval legibility --samples RUN_DIR --junior tiny-junior --out DIR
Writes DIR/legibility.json (summary, config, timing), DIR/per_problem.jsonl, DIR/per_sample.jsonl.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..errors import TandemError
from ..io import atomic_write, write_json
from ..rundir import abs_spec, output_dir
from ..runtime import invocation
from ..progress import progress_bar
from .runs import INPUTS, EvalRun, check_problems, read_legibility, read_run, run_problems, run_task  # noqa: F401 (read_legibility: re-exported)
from .metrics import mean_se_summary
from .teacher_forcing import collate, hidden_states, pack_batches

log = logging.getLogger("tandem_rlvr")


def token_ce_alpha(logits_sen: torch.Tensor, logits_jun: torch.Tensor,
                   targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Junior CE (N,) and overlap alpha (N,) at N positions.

    logits_sen (N, V_s), logits_jun (N, V_j): both models' logits predicting (N,) targets.
    If the two output layers differ in size (padded vocabularies), alpha sums over the
    shared ids; ids past the tokenizer carry no mass in practice.
    """
    V = min(logits_sen.shape[-1], logits_jun.shape[-1])
    logp_jun = torch.log_softmax(logits_jun.float(), dim=-1)  # (N, V_j)
    ce = -logp_jun.gather(-1, targets[:, None]).squeeze(-1)  # (N,)
    p_sen = torch.softmax(logits_sen.float(), dim=-1)[:, :V]
    alpha = torch.minimum(p_sen, logp_jun[:, :V].exp()).sum(-1)  # (N,)
    return ce, alpha


@torch.no_grad()
def score_sequences(senior, junior, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
                    batch_tokens: int = 16384, chunk: int = 4096, progress: bool = False) -> dict[str, np.ndarray]:
    """Teacher-forced legibility of S (prompt, response) pairs.

    Returns {"ce": (S,), "alpha": (S,), "tokens": (S,)}: per-sample means over response
    tokens (NaN for an empty response) and response lengths.
    """
    S = len(prompts)
    if any(len(p) == 0 for p in prompts):
        raise TandemError("teacher forcing needs a non-empty prompt for every sample")
    n_tok = torch.tensor([len(r) for r in responses], dtype=torch.float64)
    sums = torch.zeros(2, S, dtype=torch.float64)  # CE, alpha
    dev = next(senior.parameters()).device
    live = [i for i in range(S) if len(responses[i])]
    batches = pack_batches([len(prompts[i]) + len(responses[i]) for i in live], batch_tokens)
    head_s, head_j = senior.get_output_embeddings(), junior.get_output_embeddings()
    with progress_bar(progress) as bar:
        task = bar.add_task("legibility (teacher-forced)", total=len(live))
        for batch in batches:
            idx = [live[j] for j in batch]
            ids, attn, rows, cols, targets, owner = collate(prompts, responses, idx, pad_id)
            h_s = hidden_states(senior, ids, attn)[rows.to(dev), cols.to(dev)]  # (N, H_s)
            h_j = hidden_states(junior, ids, attn)
            h_j = h_j[rows.to(h_j.device), cols.to(h_j.device)]  # (N, H_j)
            for c in range(0, targets.numel(), chunk):
                ce, alpha = token_ce_alpha(head_s(h_s[c:c + chunk]), head_j(h_j[c:c + chunk]).to(dev),
                                           targets[c:c + chunk].to(dev))
                sums.index_add_(1, owner[c:c + chunk], torch.stack([ce, alpha]).double().cpu())
            bar.advance(task, len(idx))
    means = (sums / n_tok.clamp(min=1)).numpy()
    means[:, n_tok.numpy() == 0] = np.nan
    return {"ce": means[0], "alpha": means[1], "tokens": n_tok.numpy().astype(np.int64)}


# --------------------------------------------------------------------------- run-level
def _prompts_for(run: EvalRun, tokenizer, benchmarks: Sequence[str] | None, split: str | None) -> list[list[int]]:
    """Prompt ids of every row, re-made from config.json's template and the benchmark problems."""
    from ..prompting import encode_prompt
    from ..tasks import prompt_text

    template = run.config.get("template")
    task = run_task(run.config)  # its prompt: the run's task and instruction
    if not template:
        raise TandemError(f"{run.path / 'config.json'}: no 'template' recorded; cannot re-make the prompts")
    specs, problems = run_problems(run.path, run.config, benchmarks, split)
    if INPUTS in run.config:
        check_problems(run.rows, problems, run.where)
    else:
        log.warning("%s: made before runs recorded fingerprints; whether its problems are those loaded now (%s) is "
                    "not checked", run.path, ", ".join(specs))
    cache: dict[tuple[str, str], list[int]] = {}
    out = []
    for i, r in enumerate(run.rows):
        key = (r["benchmark"], str(r["problem_id"]))
        if key not in problems:
            raise TandemError(f"{run.where(i)}: problem {key[1]!r} of benchmark {key[0]!r} is not in the loaded "
                              f"benchmarks ({', '.join(specs)}): a samples file from another benchmark set?")
        if key not in cache:
            cache[key] = encode_prompt(tokenizer, prompt_text(tokenizer, task, problems[key], template))
        out.append(cache[key])
    return out


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


def run_legibility(samples: str | os.PathLike, junior: str, out: str | os.PathLike, senior: str | None = None,
                   benchmarks: Sequence[str] | None = None, split: str | None = None, device: str = "auto",
                   dtype: str = "auto", batch_tokens: int = 16384, progress: bool = True) -> dict:
    """Score a solo run's samples (see module docstring), write ``out``, return legibility.json's content."""
    output_dir(out, create=False)
    from ..models import NAMED_MODELS, load_pair

    run = read_run(samples)
    if (run.config.get("schedule") or {}).get("name", "senior") != "senior":
        log.warning("%s is a handoff run; legibility is defined on the senior's solo samples", run.path)
    senior = senior or (run.config.get("models") or {}).get("senior")
    if not senior:
        raise TandemError(f"{run.path / 'config.json'}: no senior model recorded; pass --senior")
    if batch_tokens < 1:
        raise TandemError(f"--batch-tokens must be >= 1, got {batch_tokens}")
    fingerprints = _check_senior(run, senior, junior)
    pair = load_pair(senior, junior, device, None, dtype)
    check_tokenizer(run, pair.tokenizer, senior, min(pair.senior.config.vocab_size, pair.junior.config.vocab_size))
    prompts = _prompts_for(run, pair.tokenizer, benchmarks, split)
    t0 = time.perf_counter()
    scores = score_sequences(pair.senior, pair.junior, prompts, [r["token_ids"].tolist() for r in run.rows],
                             pair.tokenizer.pad_token_id, batch_tokens, progress=progress)
    seconds = time.perf_counter() - t0

    per_sample = [{"benchmark": r["benchmark"], "problem_id": str(r["problem_id"]), "sample_idx": r["sample_idx"],
                   "tokens": int(scores["tokens"][i]), "ce": _f(scores["ce"][i]), "alpha": _f(scores["alpha"][i])}
                  for i, r in enumerate(run.rows)]
    per_problem = _per_problem(per_sample)
    if not per_problem:
        raise TandemError(f"{run.samples_path}: every response is empty; nothing to score")
    by_bench = {}
    for p in per_problem:
        by_bench.setdefault(p["benchmark"], []).append(p)
    summary = {stat: mean_se_summary({b: [p[stat] for p in ps] for b, ps in by_bench.items()}) for stat in ("ce", "alpha")}
    n_tokens = int(scores["tokens"].sum())
    result = {"summary": summary, "samples": len(per_sample), "scored_tokens": n_tokens,
              "config": {"samples": str(run.path.resolve()), "senior": abs_spec(senior, NAMED_MODELS),
                         "junior": abs_spec(junior, NAMED_MODELS), "template": run.config.get("template"),
                         "benchmarks": sorted(by_bench), "run_config": run.config, INPUTS: fingerprints,
                         **invocation()},
              "timing": {"seconds": round(seconds, 3), "tokens_per_s": round(n_tokens / max(seconds, 1e-9), 1),
                         "device": str(next(pair.senior.parameters()).device), "batch_tokens": batch_tokens}}
    out = Path(out)
    _write_jsonl(out / "per_sample.jsonl", per_sample)
    _write_jsonl(out / "per_problem.jsonl", per_problem)
    write_json(out / "legibility.json", result)
    return result


def _check_senior(run: EvalRun, senior: str, junior: str) -> dict:
    """{"senior", "junior"} fingerprints; TandemError if the senior's files are not those that sampled ``run``."""
    from ..fingerprint import model_fingerprint
    from ..models import resolve_model_path

    fps = {role: model_fingerprint(resolve_model_path(spec)) for role, spec in (("senior", senior), ("junior", junior))}
    recorded = ((run.config.get(INPUTS) or {}).get("models") or {}).get("senior")
    if INPUTS not in run.config:
        log.warning("%s: made before runs recorded fingerprints; whether %s is the senior that sampled it is not "
                    "checked", run.path, senior)
    elif recorded and recorded != fps["senior"]:
        raise TandemError(f"{run.path / 'config.json'}: senior {senior} is not the model that sampled this run "
                          f"(fingerprint {fps['senior']} vs {recorded}: its files changed since, or --senior names "
                          "another); its samples would be scored under another senior")
    return fps


def _f(x) -> float | None:
    return None if not np.isfinite(x) else float(x)


def _per_problem(per_sample: list[dict]) -> list[dict]:
    """Mean CE and alpha over each problem's scored (non-empty) samples."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for s in per_sample:
        if s["ce"] is not None:
            groups.setdefault((s["benchmark"], s["problem_id"]), []).append(s)
    return [{"benchmark": b, "problem_id": pid, "samples": len(ss), "tokens": sum(s["tokens"] for s in ss),
             "ce": float(np.mean([s["ce"] for s in ss])), "alpha": float(np.mean([s["alpha"] for s in ss]))}
            for (b, pid), ss in groups.items()]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with atomic_write(path) as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
