"""``tandem probe forced-junior``: does a senior's correct solution survive one forced junior token?

The replication's probe, on any task. From a saved solo run (``tandem eval solo``) take the
senior's correct samples; teacher-force each response through the senior and the junior and find
the positions where their greedy (argmax) tokens differ; pick one per sample (``first``, or a
``random`` one, seeded per sample); force the junior's token there (the response up to that
position, then the junior's token) and let the senior continue alone with the run's sampling
settings, for at most the run's token budget in all; grade with the run's task. Reported: the
success rate (the share of forced samples still correct) with a bootstrap 95% interval, overall and
by the position's relative place in the response (quarters). A sample whose two greedy paths never
differ is counted apart (``no_divergence``), not probed.

Output in ``--out``: ``config.json`` (what was probed, refused if it changes on a resume),
``probe.jsonl`` (one row per probed sample: position, length, the two tokens, the forced sample's
text, correct, reason), ``probe.json`` (the summary, written last). Rows are appended in chunks,
so an interrupted probe resumes; a finished one re-run is a no-op.

Greedy tokens come from our transformers models (teacher forcing); the continuation runs on
``--engine`` (``hf``, or ``vllm`` with the models loaded again there).
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...decoding.rng import row_seed
from ...decoding.sampling import SamplingParams
from ...errors import TandemError
from ...io import read_json, read_jsonl, write_json
from ...prompting import encode_prompt
from ...outdir import RunLock, output_dir, refuse_other_config, remove_failed_start
from ...tasks import prompt_text, task_row
from ..run_files import check_problems, read_run, recorded_task, run_problems

log = logging.getLogger("tandem_rlvr")

POSITIONS = ("first", "random")
QUARTERS = ("0-25%", "25-50%", "50-75%", "75-100%")
CONFIG, ROWS, SUMMARY = "config.json", "probe.jsonl", "probe.json"


@dataclass(frozen=True)
class ProbeSettings:
    """What ``tandem probe forced-junior`` probes (flags of the same names)."""

    samples: str
    junior: str
    senior: str | None = None  # default: the run's senior
    position: str = "first"
    seed: int = 0
    limit: int | None = None  # first N correct samples
    engine: str = "hf"
    device: str = "auto"
    junior_device: str | None = None
    dtype: str = "auto"
    batch_size: int = 16
    n_boot: int = 10_000

    def __post_init__(self):
        if self.position not in POSITIONS:
            raise TandemError(f"unknown --position {self.position!r}; valid: {', '.join(POSITIONS)}")
        if self.batch_size < 1 or (self.limit is not None and self.limit < 1) or self.n_boot < 1:
            raise TandemError("--batch-size, --limit and --n-boot must be >= 1")


@torch.no_grad()
def greedy_tokens(model, prompts: list[list[int]], responses: list[list[int]], pad_id: int) -> list[np.ndarray]:
    """Per row, (T_row,) the model's argmax token at each response position, teacher-forced."""
    from ...decoding.teacher_forcing import collate, hidden_states, pack_batches

    out = [np.zeros(0, dtype=np.int64) for _ in prompts]
    head, dev = model.get_output_embeddings(), next(model.parameters()).device
    live = [i for i in range(len(prompts)) if responses[i]]
    for batch in pack_batches([len(prompts[i]) + len(responses[i]) for i in live], 8192):
        idx = [live[j] for j in batch]
        ids, attn, rows, cols, _, owner = collate(prompts, responses, idx, pad_id)
        arg = head(hidden_states(model, ids, attn)[rows.to(dev), cols.to(dev)]).argmax(-1).cpu()  # (N,)
        for i in idx:
            out[i] = arg[owner == i].numpy()
    return out


def choose_position(senior_greedy: np.ndarray, junior_greedy: np.ndarray, how: str,
                    rng: np.random.Generator) -> int | None:
    """The forced position: the first (or a random) index where the greedy tokens differ; None if none."""
    differ = np.flatnonzero(senior_greedy != junior_greedy)
    if differ.size == 0:
        return None
    return int(differ[0]) if how == "first" else int(rng.choice(differ))


def bootstrap_interval(values, n_boot: int, seed: int) -> list[float] | None:
    """Percentile 95% interval of the mean over ``n_boot`` resamples; None for no values."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return None
    means = x[np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def summarize(rows: list[dict], correct_samples: int, n_boot: int, seed: int) -> dict:
    probed = [r for r in rows if r["position"] is not None]

    def block(rs):
        ok = [float(r["correct"]) for r in rs]
        return {"probed": len(rs), "success_rate": float(np.mean(ok)) if ok else None,
                "ci95": bootstrap_interval(ok, n_boot, seed)}

    by_quarter = {q: block([r for r in probed if min(int(4 * r["relative_position"]), 3) == i])
                  for i, q in enumerate(QUARTERS)}
    return {"correct_solo_samples": correct_samples, "no_divergence": len(rows) - len(probed),
            "overall": block(probed), "by_relative_position": by_quarter}


def run_probe(s: ProbeSettings, out: str | os.PathLike) -> dict:
    """Probe the correct samples of ``s.samples`` (module docstring); the summary."""
    from ...engines import EngineSetup, RolloutSpec, engine_kind, open_decoder
    from ...fingerprint import model_fingerprint
    from ...models import load_pair, resolve_model_path

    output_dir(out, "--out", create=False)  # a bad --out fails before any model resolves (or world builds)
    run = read_run(s.samples)
    cfg = run.config
    if run.schedule != "senior":
        raise TandemError(f"{s.samples}: a {run.schedule} run; the probe needs a solo run (tandem eval solo)")
    senior = s.senior or (cfg.get("models") or {}).get("senior")
    if not senior:
        raise TandemError(f"{s.samples}: config.json names no senior; give --senior")
    task = recorded_task(cfg)
    _, problems = run_problems(run.path, cfg)
    check_problems(run.rows, problems, run.where)
    chosen = [r for r in run.rows if r["correct"]][: s.limit]
    if not chosen:
        raise TandemError(f"{s.samples}: no correct samples to probe")
    sampling = SamplingParams(**{k: v for k, v in (cfg.get("sampling") or {}).items()
                                 if k in ("temperature", "top_p", "top_k", "max_new_tokens")})
    config = {"samples": str(Path(s.samples).resolve()), "task": task.name, "verifier": task.verifier,
              "senior": model_fingerprint(resolve_model_path(senior)),
              "junior": model_fingerprint(resolve_model_path(s.junior)),
              "position": s.position, "seed": s.seed, "limit": s.limit, "sampling": sampling.to_dict(),
              "template": cfg.get("template"), "correct_samples": len(chosen)}
    dir_was_new = not Path(out).expanduser().exists()
    out = output_dir(out)
    with RunLock(out):
        fresh, wrote = not (out / CONFIG).exists(), False
        try:
            if not refuse_other_config(out / CONFIG, config, "use a new --out directory", ignore=("samples",)):
                write_json(out / CONFIG, config)
            if (out / SUMMARY).is_file():
                return read_json(out / SUMMARY)
            done = read_jsonl(out / ROWS) if (out / ROWS).is_file() else []
            keys = {(r["benchmark"], r["problem_id"], r["sample_idx"]) for r in done}
            todo = [r for r in chosen if (r["benchmark"], str(r["problem_id"]), r["sample_idx"]) not in keys]
            if todo:
                pair = load_pair(senior, s.junior, s.device, s.junior_device, s.dtype)
                tok = pair.tokenizer
                chunks = [todo[i:i + s.batch_size] for i in range(0, len(todo), s.batch_size)]
                if engine_kind(s.engine).transformers:  # force and continue chunk by chunk on the loaded pair
                    dec, close = pair.decoder("senior", sampling), (lambda: None)
                    forced = (_force(pair, tok, task, problems, c, cfg["template"], s) for c in chunks)
                else:  # another engine: every position forced with our models first, then they are freed and the
                    # engine opened once (both models and the engine's copy of the senior never share memory)
                    forced = [_force(pair, tok, task, problems, c, cfg["template"], s) for c in chunks]
                    del pair
                    _free_memory()
                    dec, tok, close = open_decoder(s.engine, EngineSetup(senior, device=s.device, dtype=s.dtype,
                                                                         seed=s.seed), RolloutSpec("senior", sampling))
                try:
                    with open(out / ROWS, "a", encoding="utf-8") as f:
                        for chunk_forced in forced:
                            new = _continue(dec, tok, task, problems, chunk_forced, sampling, s.seed)
                            f.write("".join(json.dumps(r) + "\n" for r in new))
                            f.flush()
                            os.fsync(f.fileno())
                            wrote = True
                            done.extend(new)
                finally:
                    close()
            summary = {**summarize(done, len(chosen), s.n_boot, s.seed), "config": config}
            write_json(out / SUMMARY, summary)
        except BaseException:
            if fresh and not wrote:
                remove_failed_start(out, [CONFIG, ROWS], dir_was_new)
            raise
    return summary


def _free_memory() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _key(r: dict) -> int:
    return zlib.crc32(f"{r['benchmark']}/{r['problem_id']}".encode())


def _force(pair, tok, task, problems, chunk, template, s: ProbeSettings) -> list[dict]:
    """Per sample: its prompt ids, response ids, the chosen position and the junior's greedy token there."""
    prompts = [encode_prompt(tok, prompt_text(tok, task, problems[(r["benchmark"], str(r["problem_id"]))], template))
               for r in chunk]
    responses = [[int(x) for x in r["token_ids"]] for r in chunk]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    s_arg = greedy_tokens(pair.senior, prompts, responses, pad)
    j_arg = greedy_tokens(pair.junior, prompts, responses, pad)
    out = []
    for r, p, resp, sa, ja in zip(chunk, prompts, responses, s_arg, j_arg, strict=True):
        rng = np.random.default_rng(row_seed(s.seed, _key(r), r["sample_idx"]))
        t = choose_position(sa, ja, s.position, rng)
        out.append({"row": r, "prompt": p, "response": resp, "position": t,
                    "senior_token": None if t is None else int(sa[t]),
                    "junior_token": None if t is None else int(ja[t])})
    return out


def _continue(dec, tok, task, problems, forced: list[dict], sampling: SamplingParams, seed: int) -> list[dict]:
    """The senior continues each forced prefix; the whole response (at most the run's budget) is graded."""
    live = [x for x in forced if x["position"] is not None]
    prefixes = [x["response"][: x["position"]] + [x["junior_token"]] for x in live]
    ended = [tok.eos_token_id is not None and p[-1] == tok.eos_token_id for p in prefixes]
    roll = dec.generate([x["prompt"] + p for x, p in zip(live, prefixes, strict=True)],
                        [row_seed(seed, _key(x["row"]), x["row"]["sample_idx"], 1) for x in live]) if live else None
    texts = []
    for b, (p, end) in enumerate(zip(prefixes, ended, strict=True)):
        cont = [] if end else roll.row_tokens(b)[: max(0, sampling.max_new_tokens - len(p))]
        texts.append(tok.decode(p + cont, skip_special_tokens=True))
    rows_for = [problems[(x["row"]["benchmark"], str(x["row"]["problem_id"]))] for x in live]
    grades = task.grade(texts, [task_row(p) for p in rows_for]) if live else []
    out, it = [], iter(zip(texts, grades, strict=True))
    for x in forced:
        r, t = x["row"], x["position"]
        base = {"benchmark": r["benchmark"], "problem_id": str(r["problem_id"]), "sample_idx": r["sample_idx"],
                "position": t, "length": len(x["response"])}
        if t is None:
            out.append({**base, "relative_position": None, "correct": None, "reason": "no divergence"})
            continue
        text, g = next(it)
        out.append({**base, "relative_position": t / len(x["response"]),
                    "senior_token": tok.decode([x["senior_token"]]), "junior_token": tok.decode([x["junior_token"]]),
                    "correct": g.score == 1.0, "reason": g.reason, "response": text})
    return out
