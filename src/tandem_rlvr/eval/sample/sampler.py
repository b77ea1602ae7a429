"""Sample n responses per problem under a handoff schedule; resumable; writes the run dir.

The run directory's files are read and written through ``eval.run_files`` (the one run layer);
this module samples and scores.

Used by ``tandem eval solo`` (schedule ``senior``), ``tandem eval handoff`` (paragraph or
word schedules with any junior) and the demo. Output, in ``out``:

- ``config.json``: models, schedule, sampling, template, instruction, answer mode, task and its
  verifier (``tasks``: the prompt and the grader; ``math`` by default), n, dtype, benchmarks, and
  ``inputs``: fingerprints of the senior's and junior's files and of each benchmark's problem set
  (``fingerprint``). Written first; a resume with other inputs or
  another config is refused with a line naming what changed (``run_files.check_config``), and so
  is a row whose problem text or answer no longer matches (``run_files.check_problems``).
- ``samples.jsonl``: one row per sample: benchmark, problem_id, sample_idx, response,
  correct, senior_share, tokens (count), token_ids, senior_mask, seed, the gold answer,
  the grader's ``reason`` (passed, wrong answer, failed test 2, timeout, ...), the problem's
  fingerprint (``problem_fp``) and ``junior_lp_sum`` (the sum of the junior's log-probs of the
  tokens it wrote, as sampled). A problem's n rows
  are appended together once all are done, so an interrupted run resumes at the first
  unfinished problem without redoing finished ones.
- ``metrics.json``: pass@k mean and bootstrap SE per benchmark and "macro", senior share
  mean and sd, for handoff runs author switches per sequence and the junior's mean log-prob
  of its own tokens (``metrics.handoff_diagnostics``), written atomically at the end.

Row seeds are ``row_seed(seed, crc32(benchmark/problem_id), sample_idx)``: a sample's text
does not depend on batch size or on which problems were already done.
"""

from __future__ import annotations

import logging
import os
import zlib
from pathlib import Path

import numpy as np

from ...config import EvalConfig
from ...data.benchmarks import Problem
from ...decoding.rng import row_seed
from ...errors import TandemError
from ...fingerprint import problem_fingerprint, problem_set_fingerprint
from ...progress import progress_bar
from ...prompting import encode_prompt
from ...outdir import RunLock, output_dir, remove_failed_start
from ...tasks import prompt_text, task_row
from ..measure.metrics import handoff_diagnostics, pass_at_k_summary
from ..measure.pool_metrics import junior_pass_at_k
from .pool_decoding import open_pool_stream, record_juniors, recorded_pool
from ..run_files import (CONFIG, INPUTS, SAMPLES, append_rows, check_config, check_problems, problem_counts,
                         read_samples, write_metrics, write_sources)

log = logging.getLogger("tandem_rlvr")

SOLO_KS = (1, 2, 4, 8, 16, 32)  # the pass@k a solo run reports (the battery's solo reasoning)
HANDOFF_KS = (1, 2, 4, 8)  # the pass@k a handoff run reports


def report_ks(cfg: EvalConfig) -> tuple[int, ...]:
    """The k of the pass@k a run of ``cfg`` reports (those <= n are computed)."""
    return SOLO_KS if cfg.mode == "solo" else HANDOFF_KS


def run_config(cfg: EvalConfig, decoder, tokenizer, problems: dict[str, list[Problem]],
               fingerprints: dict | None = None, dtype: str | None = None) -> dict:
    """config.json's content for ``cfg`` sampled by ``decoder``: the evaluation's settings, what the decoder
    and tokenizer resolved (the schedule's description, the template; a server's models) and, under
    ``INPUTS``, the fingerprints of the models' files (``fingerprints``, per role) and of each benchmark's
    problem set. ``fingerprints`` and ``dtype`` are unknown (empty, None) for models built in memory."""
    from ...models import recorded_model
    from ...prompting import resolve_template

    m, d, pr = cfg.models, cfg.decoding, cfg.problems
    models = getattr(decoder, "models", None) or {  # a server decoder names the checkpoints it loaded
        "senior": recorded_model(m.senior),  # a built-in model by its name, another local path absolute
        "junior": recorded_pool(cfg.pool).spec() if cfg.pool else
                  recorded_model(cfg.junior_spec) if cfg.junior_spec else None}
    return {"n": cfg.n, "sampling": d.sampling.to_dict(), "schedule": decoder.schedule.describe(),
            "template": resolve_template(tokenizer, pr.template), "instruction": pr.instruction,
            "answer_mode": pr.answer_mode, "seed": d.seed, "models": models, "ks": list(report_ks(cfg)),
            "benchmarks": list(problems), "engine": d.engine, "dtype": dtype, "task": pr.task, "grader": pr.grader,
            "verifier": pr.run_task.verifier,
            INPUTS: {"models": dict(fingerprints or {}),
                     "benchmarks": {b: problem_set_fingerprint(ps) for b, ps in problems.items()}}}


def problem_key(p: Problem) -> int:
    return zlib.crc32(f"{p.benchmark}/{p.problem_id}".encode())


def sample_seed(seed: int, p: Problem, s: int) -> int:
    """The row seed of sample ``s`` of problem ``p`` under the run's ``seed`` (module docstring)."""
    return row_seed(seed, problem_key(p), s)


def run_eval(cfg: EvalConfig, decoder, tokenizer, problems: dict[str, list[Problem]], out: str | os.PathLike,
             progress: bool = True, *, fingerprints: dict | None = None, dtype: str | None = None) -> dict:
    """Sample ``cfg.n`` responses per problem with ``decoder`` (opened for ``cfg``, or built in memory), score
    them, write the run dir; return metrics. ``fingerprints`` and ``dtype``: what config.json records of the
    models' files (``run_config``); ``evaluate`` passes them, models built in memory have none.

    The directory is locked for the whole run (a second writer gets an error naming this
    one); a run that fails before its first sample leaves nothing behind.
    """
    if not problems or not any(problems.values()):
        raise TandemError("no problems to evaluate (empty benchmark set)")
    if decoder.schedule.name != cfg.schedule_name:
        raise TandemError(f"the decoder runs schedule {decoder.schedule.name!r}, the evaluation {cfg.schedule_name!r}")
    dir_was_new = not Path(out).expanduser().exists()
    out = output_dir(out)
    with RunLock(out):
        fresh, wrote = not (out / "config.json").exists(), False
        try:
            config = run_config(cfg, decoder, tokenizer, problems, fingerprints, dtype)
            check_config(out, config)
            samples_path = out / SAMPLES
            rows = read_samples(samples_path, cfg.n)
            by_key = {(p.benchmark, str(p.problem_id)): p for ps in problems.values() for p in ps}
            check_problems(rows, by_key, lambda i: f"{samples_path}: sample row {i + 1}")
            done = {(r["benchmark"], str(r["problem_id"])) for r in rows}
            todo = [p for ps in problems.values() for p in ps if (p.benchmark, str(p.problem_id)) not in done]
            if done:
                log.info("resuming %s: %d problems done, %d to go", out, len(done), len(todo))

            per_batch = max(1, cfg.decoding.batch_size // cfg.n)
            template = config["template"]
            with progress_bar(progress) as bar, open(samples_path, "a", encoding="utf-8") as f:
                task = bar.add_task(f"sampling ({decoder.schedule.name}, n={cfg.n})", total=len(todo))
                for start in range(0, len(todo), per_batch):
                    chunk = todo[start:start + per_batch]
                    own = getattr(decoder, "sample_chunk", None)  # the text-level handoff samples its own rows
                    new = (own(chunk, cfg, sample_seed) if own
                           else _sample_chunk(decoder, tokenizer, chunk, cfg, template))
                    if getattr(decoder, "pool", None) is not None:  # a junior pool: each row names its junior
                        record_juniors(new, decoder.pool)
                    wrote = True
                    try:
                        append_rows(f, new)
                    except OSError as e:
                        raise TandemError(f"{samples_path}: write failed ({e.strerror or e}); finished problems are "
                                          "kept, re-run the same command to resume") from None
                    rows.extend(new)
                    bar.advance(task, len(chunk))
            metrics = summarize(rows, problems, cfg)
            metrics["config"] = {k: v for k, v in config.items() if k != INPUTS}
            write_metrics(out, metrics)
        except BaseException:
            if fresh and not wrote:
                remove_failed_start(out, [CONFIG, SAMPLES], dir_was_new)
            raise
    return metrics


def finished_metrics(cfg: EvalConfig, out: str | os.PathLike) -> dict | None:
    """A finished run's metrics after checking, without loading a model, that its inputs are those ``cfg``
    names now (the models' file fingerprints, the benchmark problem sets); None when ``out`` holds no
    finished run. A changed input is a ``TandemError`` naming it, as ``evaluate`` would refuse it: the
    recipes' re-runs (``tandem study``, ``tandem demo``) keep finished evaluations only through this check.
    """
    from ...fingerprint import model_fingerprint
    from ...models import resolve_model_path
    from ..run_files import check_inputs, read_config, read_metrics

    out = Path(out)
    metrics = read_metrics(out)
    if metrics is None or not (out / CONFIG).is_file():
        return None
    old = read_config(out / CONFIG)
    problems = _problems(cfg)
    new = {"models": {role: model_fingerprint(resolve_model_path(spec)) for role, spec in cfg.model_roles.items()},
           "benchmarks": {b: problem_set_fingerprint(ps) for b, ps in problems.items()}}
    if INPUTS not in old:
        raise TandemError(f"{out / CONFIG}: made before runs recorded input fingerprints, so its samples cannot be "
                          "checked against the models and problems now; remove it to sample again")
    check_inputs(out / CONFIG, old[INPUTS], new)
    return metrics


def plan_line(cfg: EvalConfig, problems: dict[str, list[Problem]]) -> str:
    """What an evaluation loads and its cost at most, said before any model loads (loading and the first
    samples take minutes on a large model, and a handoff decodes with two models: the user should know
    what was asked for before waiting): problems x samples x max new tokens, the schedule and protocol."""
    rows, n, tokens = sum(len(ps) for ps in problems.values()), cfg.n, cfg.decoding.sampling.max_new_tokens
    url = getattr(cfg.decoding.server, "url", None)
    models = f"senior {cfg.models.senior}" + (f", junior {cfg.junior_spec}" if cfg.schedule_name != "senior" else "")
    models += f" (engine {cfg.decoding.engine}" + (f" at {url})" if url else ")")
    if cfg.schedule_name == "senior":
        how = "solo (the senior alone)"
    else:
        how = (f"handoff schedule {cfg.schedule_name}, protocol {cfg.handoff_protocol}: two models decode, "
               + ("each turn re-encoded as text" if cfg.handoff_protocol == "text" else "in one token stream")
               + ", so it costs several times a solo run")
    return (f"loading {models}; {rows} problems x {n} samples x up to {tokens} new tokens = "
            f"{rows * n * tokens:,} tokens at most, {how}")


def evaluate(cfg: EvalConfig, out: str | os.PathLike, progress: bool = True, say=None) -> dict:
    """Load models and problems, then ``run_eval``: the library form of ``tandem eval solo|handoff``.

    ``cfg`` says what to sample (see ``config.EvalConfig``; defaults are the paper's evaluation); ``say``
    (a function of one line, e.g. ``print``) is told ``plan_line`` before any model loads.
    """
    from ...engines import open_decoder
    from ...engines.base import engine_kind
    from ...fingerprint import model_fingerprint
    from ...models import recorded_model, resolve_device, resolve_dtype, resolve_model_path

    output_dir(out, "--out", create=False)  # a bad --out fails before any model loads or world builds
    cfg = as_recorded(cfg, out)
    if cfg.handoff_protocol == "text" and not engine_kind(cfg.decoding.engine).text_turns:
        raise TandemError(f"--engine {cfg.decoding.engine} serves in-stream handoffs only, and a paragraph "
                          "schedule's default protocol is text (the paper's, on every engine): pass --protocol stream")
    served_juniors = _check_server_juniors(cfg)  # a server's juniors are the run's, before any sampling
    problems = _problems(cfg)
    if cfg.handoff_protocol != "text" and (cfg.pool is not None or cfg.handoff_protocol == "stream"):
        _check_stream_vocab(cfg)  # from the tokenizers alone: a refusal is the only line said
    if say is not None:
        say(plan_line(cfg, problems))
    name = cfg.schedule_name
    if cfg.handoff_protocol == "text":
        from .text_handoff import open_text_handoff

        dec, tok, close = open_text_handoff(cfg, name)
    elif cfg.pool is not None:  # in-stream handoff with a junior pool
        dec, tok, close = open_pool_stream(cfg)
    else:
        dec, tok, close = open_decoder(cfg.decoding.engine, cfg.engine_setup, cfg.rollout_spec)
    try:
        served = getattr(dec, "models", None)  # a server decoder: {"senior": the checkpoint it loaded, "junior"}
        if served is None:
            roles = cfg.model_roles
        else:  # a server's senior is fingerprinted where its files are here; its juniors as checked
            roles = {"senior": served["senior"]} if Path(served["senior"]).is_dir() else {}
        fingerprints = {role: model_fingerprint(resolve_model_path(spec)) for role, spec in roles.items()}
        if served_juniors is not None:  # --junior on a server: record the juniors it was checked to hold
            dec.models["junior"] = recorded_pool(cfg.pool).spec() if cfg.pool else recorded_model(cfg.models.junior)
            junior_roles = [r for r in cfg.model_roles if r != "senior"]  # "junior", or "junior/NAME" in pool order
            fingerprints.update({r: j["fingerprint"] for r, j in zip(junior_roles, served_juniors, strict=True)
                                 if j["fingerprint"]})
        dtype = str(resolve_dtype(cfg.models.dtype, resolve_device(cfg.models.device))).removeprefix("torch.")
        metrics = run_eval(cfg, dec, tok, problems, out, progress, fingerprints=fingerprints, dtype=dtype)
    finally:
        close()
    write_sources(out, cfg.problems.benchmarks, cfg.problems.split)
    return metrics


def _check_server_juniors(cfg: EvalConfig) -> list[dict] | None:
    """``tandem eval handoff --server URL --junior A[,B]``: the server holds those juniors in that order, or a
    one-line error naming the server and the juniors that differ (``engines.served_pool``); returns each
    junior's recorded name and fingerprint (the served weights' where the server reports them). None without
    ``--junior`` (the server's first junior writes, as it always did) or off a server."""
    from ...engines.base import engine_kind

    if not engine_kind(cfg.decoding.engine).remote or cfg.models.junior is None or cfg.schedule_name == "senior":
        return None
    from ...engines.served_pool import check_served_juniors

    names = cfg.pool.names if cfg.pool is not None else (cfg.models.junior,)
    return check_served_juniors(cfg.decoding.server, names)


def _problems(cfg: EvalConfig) -> dict[str, list[Problem]]:
    """The evaluation's problems by benchmark, through its task's loader."""
    from ...tasks import load_problems

    pr = cfg.problems
    return load_problems(pr.run_task, list(pr.benchmarks), split=pr.split, limit=pr.limit)


def as_recorded(cfg: EvalConfig, out: str | os.PathLike) -> EvalConfig:
    """``cfg`` with the protocol an existing handoff run in ``out`` was made with, when ``--protocol`` was not
    given: config.json's ``schedule`` names ``protocol`` "text"; a schedule without one is an in-stream run
    (made before the text protocol, or under the old vLLM default), so it resumes in-stream as it was."""
    path = Path(out) / CONFIG
    if cfg.mode != "handoff" or cfg.protocol is not None or not path.is_file():
        return cfg
    from ..run_files import read_config

    recorded = (read_config(path).get("schedule") or {}).get("protocol", "stream")
    if recorded != cfg.handoff_protocol:
        log.info("%s: resuming with --protocol %s, the protocol this run was made with", out, recorded)
    return cfg.with_keys(protocol=recorded)


def _check_stream_vocab(cfg: EvalConfig) -> None:
    """The in-stream handoff needs one vocabulary: a junior of another tokenizer, alone or in a pool, is
    refused before any model loads, with the protocol that takes it (text: each junior reads and writes
    text in its own tokenizer, so a pool may mix tokenizers there; docs/pool.md)."""
    from ...engines.base import engine_kind
    from ...models import load_tokenizer

    if engine_kind(cfg.decoding.engine).remote or not cfg.models.junior:  # a server holds its junior
        return
    names = cfg.pool.names if cfg.pool is not None else (cfg.models.junior,)
    s = load_tokenizer(cfg.models.senior)
    for name in names:
        if name == cfg.models.senior:
            continue
        j = load_tokenizer(name)
        if s.get_vocab() != j.get_vocab():
            who = f"junior {name}" + (" of the pool" if cfg.pool is not None else "")
            raise TandemError(f"--protocol stream needs one tokenizer, and {who} has another vocabulary "
                              f"than senior {cfg.models.senior} ({len(j.get_vocab())} vs {len(s.get_vocab())} tokens); "
                              "use --protocol text")


def _sample_chunk(decoder, tokenizer, chunk: list[Problem], cfg: EvalConfig, template: str) -> list[dict]:
    """Rows of ``cfg.n`` samples per problem of ``chunk``, prompted in the resolved ``template``."""
    task = cfg.problems.run_task
    prompts, seeds, meta = [], [], []
    for p in chunk:
        ids = encode_prompt(tokenizer, prompt_text(tokenizer, task, p, template))
        for s in range(cfg.n):
            prompts.append(ids)
            seeds.append(sample_seed(cfg.decoding.seed, p, s))
            meta.append((p, s))
    roll = decoder.generate(prompts, seeds)
    share = roll.senior_share.tolist()
    junior_lp = ((roll.logprobs.double() * (~roll.senior_mask & roll.response_mask)).sum(-1)).tolist()  # (B,)
    toks = [roll.row_tokens(b) for b in range(len(meta))]
    texts = [tokenizer.decode(t, skip_special_tokens=True) for t in toks]
    grades = task.grade(texts, [task_row(p) for p, _ in meta])
    rows = []
    for b, ((p, s), g) in enumerate(zip(meta, grades, strict=True)):
        rows.append({"benchmark": p.benchmark, "problem_id": str(p.problem_id), "sample_idx": s, "response": texts[b],
                     "correct": g.score == 1.0, "reason": g.reason, "senior_share": share[b], "tokens": len(toks[b]),
                     "finished": bool(roll.finished[b]), "token_ids": toks[b], "senior_mask": roll.row_mask(b),
                     "seed": seeds[b], "answer": p.answer, "problem_fp": problem_fingerprint(p),
                     "junior_lp_sum": junior_lp[b]})
    return rows


def summarize(rows: list[dict], problems: dict[str, list[Problem]], cfg: EvalConfig) -> dict:
    """metrics.json's measures from sample rows (only the benchmarks and problems asked for); ``run_eval``
    adds the run's ``config``."""
    counts = problem_counts(rows)
    per_bench = {}
    for b, ps in problems.items():
        nc = [counts.get((b, str(p.problem_id)), (0, 0)) for p in ps]
        per_bench[b] = ([x[0] for x in nc], [x[1] for x in nc])
    short = [(b, pid, n) for b, (ns, _) in per_bench.items()
             for pid, n in zip((p.problem_id for p in problems[b]), ns, strict=True) if n != cfg.n]
    if short:
        b, pid, n = short[0]
        raise TandemError(f"{len(short)} problem(s) have other than n={cfg.n} samples (first: {b}/{pid} has {n}); "
                          "no metric is reported over fewer samples than asked")
    metrics = pass_at_k_summary(per_bench, report_ks(cfg))
    shares = np.array([r["senior_share"] for r in rows]) if rows else np.zeros(1)
    lengths = np.array([r["tokens"] for r in rows]) if rows else np.zeros(1)
    metrics["senior_share"] = {"mean": float(shares.mean()), "sd": float(shares.std())}
    for key in ("senior_share_chars", "senior_share_junior_tokens"):  # text-level handoff rows
        if rows and all(key in r for r in rows):
            x = np.array([r[key] for r in rows])
            metrics[key] = {"mean": float(x.mean()), "sd": float(x.std())}
    metrics["response_tokens"] = {"mean": float(lengths.mean())}
    if cfg.schedule_name != "senior":
        metrics.update(handoff_diagnostics(rows))
    if cfg.pool is not None:  # per junior of the pool (metrics.json's top-level figures pool them all)
        metrics["juniors"] = junior_pass_at_k(rows, problems, [k for k in report_ks(cfg) if k <= cfg.n],
                                              list(recorded_pool(cfg.pool).names))
    return metrics
