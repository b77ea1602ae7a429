"""Sample n responses per problem under a handoff schedule; resumable; writes the run dir.

Used by ``tandem eval solo`` (schedule ``senior``), ``tandem eval handoff`` (paragraph or
word schedules with any junior) and the demo. Output, in ``out``:

- ``config.json``: models, schedule, sampling, template, instruction, answer mode, n,
  benchmarks (written first; a resume with a different config is refused).
- ``samples.jsonl``: one row per sample: benchmark, problem_id, sample_idx, response,
  correct, senior_share, tokens (count), token_ids, senior_mask, seed. A problem's n rows
  are appended together once all are done, so an interrupted run resumes at the first
  unfinished problem without redoing finished ones.
- ``metrics.json``: pass@k mean and bootstrap SE per benchmark and "macro", senior share
  mean and sd, written atomically at the end.

Row seeds are ``row_seed(seed, crc32(benchmark/problem_id), sample_idx)``: a sample's text
does not depend on batch size or on which problems were already done.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..config import EvalConfig
from ..data.benchmarks import Problem
from ..decoding.rng import row_seed
from ..decoding.sampling import SamplingParams
from ..decoding.tandem import TandemDecoder
from ..errors import TandemError
from ..io import atomic_write, read_json, write_json
from ..progress import progress_bar
from ..prompting import DEFAULT_INSTRUCTION, encode_prompt, format_prompt
from ..rewards.math import score
from ..rundir import RunLock, abs_spec, output_dir, remove_failed_start
from .metrics import pass_at_k_summary

log = logging.getLogger("tandem_rlvr")

SOLO_KS = (1, 2, 4, 8, 16, 32)
HANDOFF_KS = (1, 2, 4, 8)


@dataclass
class EvalSpec:
    """What an evaluation run samples; recorded in config.json."""

    n: int
    sampling: SamplingParams
    schedule: dict
    template: str
    seed: int
    models: dict
    ks: Sequence[int]
    instruction: str = DEFAULT_INSTRUCTION  # prompting.INSTRUCTIONS name (chat prompts)
    answer_mode: str = "last-box"  # rewards.math.ANSWER_MODES
    engine: str = "hf"  # engines.ENGINES

    def to_dict(self, benchmarks: Sequence[str]) -> dict:
        return {"n": self.n, "sampling": self.sampling.to_dict(), "schedule": self.schedule, "template": self.template,
                "instruction": self.instruction, "answer_mode": self.answer_mode, "seed": self.seed,
                "models": self.models, "ks": list(self.ks), "benchmarks": list(benchmarks), "engine": self.engine}


def problem_key(p: Problem) -> int:
    return zlib.crc32(f"{p.benchmark}/{p.problem_id}".encode())


SAMPLE_TYPES = {"benchmark": (str,), "problem_id": (str, int), "sample_idx": (int,), "correct": (bool,),
                "token_ids": (list,), "senior_mask": (list,)}
OPTIONAL_TYPES = {"response": (str,), "senior_share": (int, float), "tokens": (int,), "finished": (bool,)}


def validate_sample_row(row, where: str) -> dict:
    """Check one samples.jsonl row's keys and value types; TandemError naming ``where`` (file:line).

    A hand-edited ``"correct": "false"`` would otherwise count as correct (a non-empty string).
    """
    if not isinstance(row, dict):
        raise TandemError(f"{where}: expected a JSON object per line")
    missing = [k for k in SAMPLE_TYPES if k not in row]
    if missing:
        raise TandemError(f"{where}: not a sample row (missing {', '.join(missing)})")
    for k, types in [*SAMPLE_TYPES.items(), *((k, t) for k, t in OPTIONAL_TYPES.items() if k in row)]:
        v = row[k]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            want = " or ".join({"str": "a string", "int": "an integer", "bool": "true/false", "float": "a number",
                                "list": "a list"}[t.__name__] for t in types)
            raise TandemError(f"{where}: {k} must be {want}, got {json.dumps(v)[:40]}")
    for k in ("token_ids", "senior_mask"):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in row[k]):
            raise TandemError(f"{where}: {k} must be a list of integers")
    if not all(v in (0, 1) for v in row["senior_mask"]):
        raise TandemError(f"{where}: senior_mask must hold 0 or 1 per token")
    if row["sample_idx"] < 0 or ("senior_share" in row and not 0.0 <= row["senior_share"] <= 1.0):
        raise TandemError(f"{where}: sample_idx must be >= 0 and senior_share in [0, 1]")
    return row


def read_samples(path: Path, n: int | None = None) -> list[dict]:
    """Validated rows of samples.jsonl, ready to resume from.

    A torn last line (a crash or a full disk mid-write) is dropped; with ``n`` given, so are
    the rows of every problem that lacks any of its n samples (the rest of a torn write), and
    the file is rewritten atomically without them, so the run regenerates those problems whole.
    Any other malformed row, or a duplicate sample, is a TandemError naming file and line.
    """
    if not path.exists():
        return []
    rows, seen, torn = [], set(), False
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) and not text.endswith("\n"):
                log.warning("%s:%d: dropping a torn last line from an interrupted run", path, i)
                torn = True
                break
            raise TandemError(f"{path}:{i}: malformed sample row ({e.msg})") from None
        validate_sample_row(row, f"{path}:{i}")
        key = (row["benchmark"], str(row["problem_id"]), row["sample_idx"])
        if key in seen:
            raise TandemError(f"{path}:{i}: duplicate sample {key} (two writers on one run directory?)")
        seen.add(key)
        rows.append(row)
    if n is not None:
        have: dict[tuple[str, str], set] = {}
        for r in rows:
            have.setdefault((r["benchmark"], str(r["problem_id"])), set()).add(r["sample_idx"])
        partial = {k for k, idx in have.items() if idx != set(range(n))}
        if partial:
            log.warning("%s: regenerating %d problem(s) with missing samples", path, len(partial))
            rows = [r for r in rows if (r["benchmark"], str(r["problem_id"])) not in partial]
    if torn or (n is not None and partial):
        with atomic_write(path) as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _check_config(out: Path, config: dict) -> None:
    path = out / "config.json"
    if path.exists():
        old = read_json(path)
        old.setdefault("engine", "hf")  # runs written before --engine existed
        diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
        if diff:
            raise TandemError(f"{path}: existing run has a different {', '.join(diff)}; use a new --out directory")
    else:
        write_json(path, config)


def append_rows(f, rows: list[dict]) -> None:
    """Append sample rows and make them durable (one write per chunk of whole problems)."""
    f.write("".join(json.dumps(r) + "\n" for r in rows))
    f.flush()
    os.fsync(f.fileno())


def run_eval(decoder: TandemDecoder, tokenizer, problems: dict[str, list[Problem]], spec: EvalSpec, out: str | os.PathLike,
             batch_size: int = 64, progress: bool = True) -> dict:
    """Sample ``spec.n`` responses per problem, score them, write the run dir; return metrics.

    The directory is locked for the whole run (a second writer gets an error naming this
    one); a run that fails before its first sample leaves nothing behind.
    """
    if not problems or not any(problems.values()):
        raise TandemError("no problems to evaluate (empty benchmark set)")
    if batch_size < 1:
        raise TandemError(f"batch size must be >= 1, got {batch_size}")
    dir_was_new = not Path(out).expanduser().exists()
    out = output_dir(out)
    with RunLock(out):
        fresh, wrote = not (out / "config.json").exists(), False
        try:
            _check_config(out, spec.to_dict(list(problems)))
            samples_path = out / "samples.jsonl"
            rows = read_samples(samples_path, spec.n)
            done = {(r["benchmark"], str(r["problem_id"])) for r in rows}
            todo = [p for ps in problems.values() for p in ps if (p.benchmark, str(p.problem_id)) not in done]
            if done:
                log.info("resuming %s: %d problems done, %d to go", out, len(done), len(todo))

            per_batch = max(1, batch_size // spec.n)
            with progress_bar(progress) as bar, open(samples_path, "a", encoding="utf-8") as f:
                task = bar.add_task(f"sampling ({decoder.schedule.name}, n={spec.n})", total=len(todo))
                for start in range(0, len(todo), per_batch):
                    chunk = todo[start:start + per_batch]
                    new = _sample_chunk(decoder, tokenizer, chunk, spec)
                    wrote = True
                    try:
                        append_rows(f, new)
                    except OSError as e:
                        raise TandemError(f"{samples_path}: write failed ({e.strerror or e}); finished problems are "
                                          "kept, re-run the same command to resume") from None
                    rows.extend(new)
                    bar.advance(task, len(chunk))
            metrics = summarize(rows, problems, spec)
            write_json(out / "metrics.json", metrics)
        except BaseException:
            if fresh and not wrote:
                remove_failed_start(out, ["config.json", "samples.jsonl"], dir_was_new)
            raise
    return metrics


def evaluate(cfg: EvalConfig, out: str | os.PathLike, progress: bool = True) -> dict:
    """Load models and problems, then ``run_eval``: the library form of ``tandem eval solo|handoff``.

    ``cfg`` says what to sample (see ``config.EvalConfig``; defaults are the paper's evaluation).
    """
    from ..data.benchmarks import load_benchmarks
    from ..engines import open_decoder
    from ..models import NAMED_MODELS
    from ..prompting import resolve_template

    problems = load_benchmarks(list(cfg.benchmarks), split=cfg.split, limit=cfg.limit)
    name = cfg.schedule_name
    dec, tok, close = open_decoder(cfg.engine, cfg.senior, cfg.junior or cfg.senior, name, cfg.sampling, p=cfg.p,
                                   K=cfg.K, device=cfg.device, junior_device=cfg.junior_device, dtype=cfg.dtype,
                                   seed=cfg.seed, vllm_settings=cfg.vllm_settings)
    try:
        spec = EvalSpec(n=cfg.n, sampling=cfg.sampling, schedule=dec.schedule.describe(),
                        template=resolve_template(tok, cfg.template), seed=cfg.seed,
                        ks=SOLO_KS if cfg.mode == "solo" else HANDOFF_KS, instruction=cfg.instruction,
                        answer_mode=cfg.answer_mode, engine=cfg.engine,
                        models={"senior": abs_spec(cfg.senior, NAMED_MODELS),
                                "junior": abs_spec(cfg.junior or cfg.senior, NAMED_MODELS) if name != "senior" else None})
        metrics = run_eval(dec, tok, problems, spec, out, cfg.batch_size, progress)
    finally:
        close()
    write_sources(out, cfg.benchmarks, cfg.split)
    return metrics


def write_sources(out: str | os.PathLike, benchmarks: Sequence[str], split: str | None) -> None:
    """``sources.json``: where the problems came from (a local file as an absolute path), so the
    legibility scorer can re-make the prompts without being told the benchmark files again, and
    the command line that made the run (``argv``, ``cwd``), for the report's provenance."""
    from ..runtime import invocation

    specs = [str(Path(b).resolve()) if Path(b).is_file() else b for b in benchmarks]
    write_json(Path(out) / "sources.json", {"benchmarks": specs, "split": split, **invocation()})


def run_problems(path: Path, config: dict, benchmarks: Sequence[str] | None = None,
                 split: str | None = None) -> tuple[list[str], dict[tuple[str, str], Problem]]:
    """(benchmark specs, {(benchmark, problem_id): Problem}) of the run in ``path``: the given
    ``benchmarks``/``split``, else those of its sources.json, else config.json's names."""
    from ..data.benchmarks import load_benchmarks

    sources = Path(path) / "sources.json"  # file benchmarks as absolute paths
    recorded = read_json(sources) if sources.is_file() else {}
    specs = list(benchmarks or recorded.get("benchmarks") or config.get("benchmarks") or [])
    if split is None:
        split = recorded.get("split")
    return specs, {(p.benchmark, str(p.problem_id)): p for ps in load_benchmarks(specs, split=split).values() for p in ps}


def _sample_chunk(decoder, tokenizer, chunk: list[Problem], spec: EvalSpec) -> list[dict]:
    prompts, seeds, meta = [], [], []
    for p in chunk:
        ids = encode_prompt(tokenizer, format_prompt(tokenizer, p.problem, spec.template, spec.instruction))
        for s in range(spec.n):
            prompts.append(ids)
            seeds.append(row_seed(spec.seed, problem_key(p), s))
            meta.append((p, s))
    roll = decoder.generate(prompts, seeds)
    share = roll.senior_share.tolist()
    rows = []
    for b, (p, s) in enumerate(meta):
        toks = roll.row_tokens(b)
        text = tokenizer.decode(toks, skip_special_tokens=True)
        rows.append({"benchmark": p.benchmark, "problem_id": str(p.problem_id), "sample_idx": s, "response": text,
                     "correct": bool(score(text, p.answer, answer_mode=spec.answer_mode)), "senior_share": share[b], "tokens": len(toks),
                     "finished": bool(roll.finished[b]), "token_ids": toks, "senior_mask": roll.row_mask(b),
                     "seed": seeds[b]})
    return rows


def summarize(rows: list[dict], problems: dict[str, list[Problem]], spec: EvalSpec) -> dict:
    """metrics.json content from sample rows (only the benchmarks and problems asked for)."""
    counts: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        n_c = counts.setdefault((r["benchmark"], str(r["problem_id"])), [0, 0])
        n_c[0] += 1
        n_c[1] += int(bool(r["correct"]))
    per_bench = {}
    for b, ps in problems.items():
        nc = [counts.get((b, str(p.problem_id)), [0, 0]) for p in ps]
        per_bench[b] = ([x[0] for x in nc], [x[1] for x in nc])
    short = [(b, pid, n) for b, (ns, _) in per_bench.items() for pid, n in zip((p.problem_id for p in problems[b]), ns)
             if n != spec.n]
    if short:
        b, pid, n = short[0]
        raise TandemError(f"{len(short)} problem(s) have other than n={spec.n} samples (first: {b}/{pid} has {n}); "
                          "no metric is reported over fewer samples than asked")
    metrics = pass_at_k_summary(per_bench, spec.ks)
    shares = np.array([r["senior_share"] for r in rows]) if rows else np.zeros(1)
    lengths = np.array([r["tokens"] for r in rows]) if rows else np.zeros(1)
    metrics["senior_share"] = {"mean": float(shares.mean()), "sd": float(shares.std())}
    metrics["response_tokens"] = {"mean": float(lengths.mean())}
    metrics["config"] = spec.to_dict(list(problems))
    return metrics
