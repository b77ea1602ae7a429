"""Junior legibility: how well the frozen junior can read the senior's solo chain of thought.

Two protocols (``--ce-protocol``): ``paper``, the default, is the paper's released code: the
junior reads the response *text* with its own tokenizer and prompt (any junior; see
``legibility_text``). ``ids``, below, teacher-forces the senior's sampled ids through both
models (one shared tokenizer), which also gives alpha at every sampled position.

What (``ids``; paper section 4, "junior legibility"): for every senior sample of a solo run,
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

import logging
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import TandemError
from ...io import write_json
from ...outdir import output_dir
from ...runtime import invocation
from ..run_files import INPUTS, EvalRun, check_problems, read_legibility, read_run, recorded_task, run_problems  # noqa: F401 (read_legibility: re-exported)
from .comparable import legibility_differences
from .metrics import mean_se_summary
from .registry import Column, HeadlineColumn, Measure, MeasureInputs, PairedStat, mean_se, register_measure
from .legibility_text import check_tokenizer, f as _f, run_paper_legibility, write_jsonl as _write_jsonl  # noqa: F401 (check_tokenizer: drift)
from ...decoding.teacher_forcing import pack_batches, score_sequences, token_ce_alpha  # noqa: F401 (re-exported: the scoring lives there)

log = logging.getLogger("tandem_rlvr")

CE_PROTOCOLS = ("paper", "ids")  # --ce-protocol; the first is the default


# --------------------------------------------------------------------------- run-level
def _prompts_for(run: EvalRun, tokenizer, benchmarks: Sequence[str] | None, split: str | None) -> list[list[int]]:
    """Prompt ids of every row, re-made from config.json's template and the benchmark problems."""
    from ...prompting import encode_prompt
    from ...tasks import prompt_text

    template = run.config.get("template")
    task = recorded_task(run.config)  # its prompt: the run's task and instruction
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


def run_legibility(samples: str | os.PathLike, junior: str, out: str | os.PathLike, senior: str | None = None,
                   benchmarks: Sequence[str] | None = None, split: str | None = None, device: str = "auto",
                   dtype: str = "auto", batch_tokens: int = 16384, progress: bool = True,
                   ce_protocol: str = "paper") -> dict:
    """Score a solo run's samples (see module docstring), write ``out``, return legibility.json's content.

    ``ce_protocol``: "paper" (the junior reads the text with its own tokenizer; ``legibility_text``)
    or "ids" (teacher-forced sampled ids, both models, one tokenizer)."""
    if ce_protocol not in CE_PROTOCOLS:
        raise TandemError(f"unknown --ce-protocol {ce_protocol!r}; valid: {', '.join(CE_PROTOCOLS)}")
    output_dir(out, create=False)
    from ...models import load_pair, recorded_model

    run = read_run(samples)
    if (run.config.get("schedule") or {}).get("name", "senior") != "senior":
        log.warning("%s is a handoff run; legibility is defined on the senior's solo samples", run.path)
    senior = senior or (run.config.get("models") or {}).get("senior")
    if not senior:
        raise TandemError(f"{run.path / 'config.json'}: no senior model recorded; pass --senior")
    if batch_tokens < 1:
        raise TandemError(f"--batch-tokens must be >= 1, got {batch_tokens}")
    fingerprints = _check_senior(run, senior, junior)
    if ce_protocol == "paper":
        return run_paper_legibility(run, senior, junior, out, fingerprints, benchmarks, split, device, dtype,
                                    batch_tokens, progress)
    from ...models import load_tokenizer

    if load_tokenizer(senior).get_vocab() != load_tokenizer(junior).get_vocab():
        raise TandemError(f"--ce-protocol ids teacher-forces the senior's ids, and junior {junior} has another "
                          f"vocabulary than senior {senior}; use --ce-protocol paper (the junior reads the text)")
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
    summary = {stat: mean_se_summary({b: [p[stat] for p in ps] for b, ps in by_bench.items()})
               for stat in ("ce", "alpha")}
    n_tokens = int(scores["tokens"].sum())
    result = {"summary": summary, "samples": len(per_sample), "scored_tokens": n_tokens,
              "config": {"samples": str(run.path.resolve()), "senior": recorded_model(senior),
                         "junior": recorded_model(junior), "template": run.config.get("template"),
                         "benchmarks": sorted(by_bench), "run_config": run.config, INPUTS: fingerprints,
                         "ce_protocol": "ids",
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
    from ...fingerprint import model_fingerprint
    from ...models import resolve_model_path

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


def _per_problem(per_sample: list[dict]) -> list[dict]:
    """Mean CE and alpha over each problem's scored (non-empty) samples."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for s in per_sample:
        if s["ce"] is not None:
            groups.setdefault((s["benchmark"], s["problem_id"]), []).append(s)
    return [{"benchmark": b, "problem_id": pid, "samples": len(ss), "tokens": sum(s["tokens"] for s in ss),
             "ce": float(np.mean([s["ce"] for s in ss])), "alpha": float(np.mean([s["alpha"] for s in ss]))}
            for (b, pid), ss in groups.items()]


# --------------------------------------------------------------------------- the registry row
def legibility_current(d: Path, inputs: MeasureInputs) -> bool:
    """Whether ``d`` holds a finished legibility run of ``inputs.junior``'s files as they are now (the caller
    checked its solo samples); a changed junior is refused, naming it."""
    from ...fingerprint import model_fingerprint
    from ...io import read_json
    from ...models import resolve_model_path

    old = (read_json(d / "legibility.json").get("config") or {}).get(INPUTS) or {}
    now = model_fingerprint(resolve_model_path(inputs.junior))
    if old.get("junior") != now:
        raise TandemError(f"{d / 'legibility.json'}: the junior model's files changed since it was scored "
                          f"(fingerprint {old.get('junior')} -> {now}); remove it to score again")
    return True


def _junior_name(x: dict) -> str:
    from ...models import model_name

    return model_name(x["junior"])


LEGIBILITY = register_measure(Measure(
    name="legibility", title="Junior legibility (macro over benchmarks)", result_file="legibility.json",
    read=read_legibility,
    summary=lambda res: {"summary": res["summary"], "junior": res["config"]["junior"], "samples": res["samples"]},
    compute=lambda i: run_legibility(i.solo, i.junior, i.out, benchmarks=list(i.benchmarks) if i.benchmarks else None,
                                     split=i.split, progress=i.progress),
    stats=(PairedStat("ce", "junior CE", "less"), PairedStat("alpha", "junior alpha", "greater")),
    columns=(Column("junior", _junior_name), Column("CE (nats)", lambda x: mean_se(x["summary"]["ce"]["macro"])),
             Column("alpha", lambda x: mean_se(x["summary"]["alpha"]["macro"]) if "alpha" in x["summary"] else "n/a"),
             Column("samples", lambda x: str(x["samples"]))),
    headline=(HeadlineColumn("junior CE (nats)", ".2f", lambda x: x["summary"]["ce"]["macro"]["mean"],
                             stat="junior CE", claim="legibility",
                             what="the junior's cross-entropy on the senior's solo text (nats/token)"),),
    differences=lambda results: legibility_differences({n: res["config"] for n, res in results.items()}),
    needs=frozenset({"junior"}), current=legibility_current,
    about=lambda cfg: {"junior": cfg.get("junior")}))
