"""Trace validator: re-derive every saved sample's authorship from its schedule and compare.

What: ``tandem eval replay RUN_DIR`` reads a sampling run (config.json's schedule: name, p, K;
each row's seed and token ids), recomputes who wrote each token by replaying the schedule
(``decoding.schedule.replay``: the same pure function of (seed, token ids) the decoder, the
vLLM logits processor and a server's client use), and compares it with the row's recorded
``senior_mask``. A trace is invalid when any position differs: an author switch the schedule's
rule does not allow there, or one it requires and the trace lacks. Prints a table of invalid
traces per benchmark and the first few (file:line, position, what differs); exits non-zero
(``TandemError``) when any trace is invalid.

Why: a Tandem-vs-GRPO verdict rests on the senior mask (training) and on who wrote what
(handoff evaluation); the replication validated every switch of its word-handoff traces. This
checks more than "switches only at boundaries": it re-derives the coins, so a switch at a
boundary where the row's coin kept the author is caught too.

Which tokenizer: the run's senior (``config.json`` ``models.senior``) or ``--tokenizer``; the
boundary sets come from it as at sampling time. ``word-atomic`` decides authors before it
samples and cannot be replayed from the emitted tokens: refused with a line saying so.
Text-level handoff runs (``protocol`` ``text``) record turns; ``check_text_traces`` checks each
turn's author against the schedule (round-robin from the senior, or the chain's coin per turn),
that every turn but the last ended at a paragraph break, that the turns make the response, and
that the token ids and senior mask are the turns re-tokenised by the senior's tokenizer.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ...errors import TandemError
from ...io import write_json
from ..run_files import EvalRun, read_run

SHOWN = 5  # invalid traces listed by file:line


def check_traces(run: EvalRun, tokenizer, rows_per_batch: int = 512) -> dict:
    """{"schedule", "samples", "invalid", "benchmarks": {b: {"samples", "invalid"}}, "examples": [...]}.

    Each example: where (file:line), benchmark, problem_id, sample_idx, position (first differing
    token), recorded and expected author there, and ``kind``: "switch not allowed" (the trace
    changes author where the schedule keeps it), "missing switch" (the schedule changes it, the
    trace does not) or "first author differs"."""
    from ...decoding.schedule import make_schedule, replay, schedule_kind

    cfg = run.config
    if (cfg.get("schedule") or {}).get("protocol") == "text":  # eval.sample.text_handoff records it there
        return check_text_traces(run, tokenizer)
    sched_cfg = cfg.get("schedule") or {"name": "senior"}
    name = sched_cfg.get("name", "senior")
    if not schedule_kind(name).replays:
        raise TandemError(f"{run.path}: schedule {name!r} decides each author before it samples the token; "
                          "its traces cannot be re-derived from the emitted tokens")
    missing = [i for i, r in enumerate(run.rows) if not isinstance(r.get("seed"), int)]
    if missing:
        raise TandemError(f"{run.where(missing[0])}: the row records no seed, so its authorship cannot be replayed "
                          f"({len(missing)} such rows)")
    V = max(len(tokenizer), max((int(r["token_ids"].max()) + 1 for r in run.rows if len(r["token_ids"])), default=0))
    sched = make_schedule(name, tokenizer, p=sched_cfg.get("p", 0.5), K=sched_cfg.get("K") or 32, vocab_size=V)
    out = {"schedule": sched.describe(), "samples": len(run.rows), "invalid": 0, "benchmarks": {}, "examples": []}
    for start in range(0, len(run.rows), rows_per_batch):
        idx = list(range(start, min(start + rows_per_batch, len(run.rows))))
        rows = [run.rows[i] for i in idx]
        want = replay(sched, torch.tensor([r["seed"] for r in rows], dtype=torch.int64),
                      [r["token_ids"].tolist() for r in rows])
        for i, r, w in zip(idx, rows, want, strict=True):
            b = out["benchmarks"].setdefault(r["benchmark"], {"samples": 0, "invalid": 0})
            b["samples"] += 1
            got = [bool(x) for x in r["senior_mask"].tolist()]
            if got == w:
                continue
            b["invalid"] += 1
            out["invalid"] += 1
            if len(out["examples"]) < SHOWN:
                t = next(t for t, (x, y) in enumerate(zip(got, w, strict=True)) if x != y)
                switched = t > 0 and got[t] != got[t - 1]
                out["examples"].append({"where": run.where(i), "benchmark": r["benchmark"],
                                        "problem_id": str(r["problem_id"]), "sample_idx": r["sample_idx"],
                                        "position": t, "recorded": "senior" if got[t] else "junior",
                                        "expected": "senior" if w[t] else "junior",
                                        "kind": "first author differs" if t == 0 else
                                        "switch not allowed" if switched else "missing switch"})
    return out


def _record_invalid(out: dict, run: EvalRun, i: int, r: dict, turn: int, kind: str) -> None:
    b = out["benchmarks"].setdefault(r["benchmark"], {"samples": 0, "invalid": 0})
    b["invalid"] += 1
    out["invalid"] += 1
    if len(out["examples"]) < SHOWN:
        out["examples"].append({"where": run.where(i), "benchmark": r["benchmark"], "problem_id": str(r["problem_id"]),
                                "sample_idx": r["sample_idx"], "position": turn, "kind": kind})


def check_text_traces(run: EvalRun, tokenizer) -> dict:
    """``check_traces`` for text-level handoff rows (module docstring); ``position`` is a turn index."""
    from ...decoding import rng
    from ...decoding.schedule import REGISTRY

    sched = run.config["schedule"]
    name, p = sched.get("name"), float(sched.get("p", 0.5))
    who = getattr(REGISTRY.get(name), "text_turns", None)  # who writes each turn: "alternate" or "coin"
    if who is None:
        raise TandemError(f"{run.path}: unknown text-level schedule {name!r}")
    out = {"schedule": sched, "samples": len(run.rows), "invalid": 0, "benchmarks": {}, "examples": []}
    for i, r in enumerate(run.rows):
        out["benchmarks"].setdefault(r["benchmark"], {"samples": 0, "invalid": 0})["samples"] += 1
        turns = r.get("turns")
        if not isinstance(turns, list) or not isinstance(r.get("seed"), int):
            raise TandemError(f"{run.where(i)}: a text-level row without its turns or seed cannot be checked")
        authors = [t.get("author") for t in turns]
        for k in range(len(turns)):
            if who == "alternate":
                want = "senior" if k % 2 == 0 else "junior"
            else:
                coin = rng.uniform(torch.tensor([r["seed"]], dtype=torch.long), k, rng.COIN)
                want = "senior" if bool(coin[0] < p) else "junior"
            if authors[k] != want:
                _record_invalid(out, run, i, r, k, f"turn {k} written by the {authors[k]}; the schedule says {want}")
                break
        else:
            early = next((k for k, t in enumerate(turns[:-1]) if t.get("end") != "break"), None)
            ids, mask = [], []
            for t in turns:
                x = tokenizer.encode(t["text"], add_special_tokens=False)
                ids += x
                mask += [t["author"] == "senior"] * len(x)
            if early is not None:
                _record_invalid(out, run, i, r, early, f"turn {early} ended ({turns[early].get('end')}) before "
                                                       "a paragraph break, yet the chain went on")
            elif "".join(t["text"] for t in turns) != r["response"]:
                _record_invalid(out, run, i, r, len(turns), "the turns' texts do not make the response")
            elif ids != r["token_ids"].tolist() or mask != [bool(x) for x in r["senior_mask"].tolist()]:
                _record_invalid(out, run, i, r, len(turns), "token ids or senior mask differ from the turns "
                                                            "re-tokenised by the senior's tokenizer")
    return out


def run_replay(run_dir: str | os.PathLike, tokenizer_spec: str | None = None,
               out: str | os.PathLike | None = None) -> dict:
    """Validate a run's traces (``check_traces``); write ``out``/replay.json if given. The caller
    decides what an invalid trace means (the CLI exits non-zero)."""
    from ...models import load_tokenizer
    from ...outdir import output_dir

    if out is not None:
        output_dir(out, create=False)  # a bad --out fails before the work, leaving nothing behind
    run = read_run(run_dir)
    spec = tokenizer_spec or (run.config.get("models") or {}).get("senior")
    if not spec:
        raise TandemError(f"{run.path / 'config.json'}: no models.senior to load the tokenizer from; pass --tokenizer")
    try:
        tok = load_tokenizer(spec)
    except TandemError as e:
        raise TandemError(f"{e}; pass --tokenizer with the run's tokenizer") from None
    res = {"run": str(Path(run_dir).resolve()), "tokenizer": spec, **check_traces(run, tok)}
    if out is not None:
        write_json(output_dir(out) / "replay.json", res)
    return res
