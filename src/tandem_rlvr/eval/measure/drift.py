"""Distributional drift: how far each senior's token usage moved away from the junior's.

What (paper section 5, Figure 4): from solo samples of the junior and of one or more seniors
on the same benchmarks (the responses' token_ids, EOS included):

- marginal token distributions, add-``smoothing`` estimates over the full vocabulary
  (without smoothing a token one model never emits has an infinite log-ratio and KL);
- the per-token signed log-ratio r_m(v) = log(p_m(v) / p_jun(v)) (> 0: over-emitted);
- the full-vocabulary KL(p_m || p_jun) in nats;
- survival curves S_m(tau): the share of the tokens frequent in the junior's outputs (count
  >= ``min_count``) whose |r_m| exceeds tau;
- recovery: the ``top_n`` (500) tokens most over-emitted by the reference senior (GRPO),
  among the tokens it emitted at least ``min_ref_count`` (5) times (see MIN_REF_COUNT; the
  paper ranks every token, so a smoothed never-emitted token could count), the share of them the
  candidate (Tandem) moves back toward the junior (r_cand < r_ref), and
  the Spearman correlation, with its p-value, between the reference's drift r_ref and the
  candidate's shift relative to it, r_cand - r_ref (paper: 87%, rho = -0.58); with fewer
  than 10 qualifying tokens both are reported as not defined;
- a table of the most over-emitted tokens with counts per model.

The runs must have sampled the same problems: one (benchmark, problem id) with two problem
fingerprints among them is refused (``comparable.check_same_problems``); drift.json records the
fingerprints of every run it read (``config.inputs``).

Token strings come from the tokenizer of the junior run's model (config.json models.senior);
if it cannot be loaded, only ids are stored and the vocabulary size is the largest id + 1.

Run:  tandem eval drift --junior-samples J_DIR --seniors grpo=G_DIR,tandem=T_DIR \\
          --reference grpo --candidate tandem --out DIR
Writes DIR/over_emitted.csv, DIR/counts.npz (names, (M, V) counts) and, last, DIR/drift.json. This
module measures; the command then writes DIR/drift.md (``report.tables.write_drift_md``).
"""

from __future__ import annotations

import csv
import io
import logging
import os
from pathlib import Path

import numpy as np

from ...errors import TandemError
from ...io import atomic_write, write_json
from ...runtime import invocation
from ...outdir import output_dir
from .comparable import check_same_problems
from ..run_files import INPUTS, EvalRun, check_same_benchmarks, read_run, split_named
from .legibility import check_tokenizer
from .metrics import drift_recovery, kl_divergence, log_ratio, smoothed_distribution, survival_curve, token_counts

log = logging.getLogger("tandem_rlvr")

JUNIOR = "junior"
GRID_POINTS = 101
# A token counts as over-emitted by the reference only if the reference emitted it at least this
# often. Its log-ratio then has a Poisson sampling SE of about 1/sqrt(5) = 0.45 nats (below the
# |log-ratio| > 1 of the survival summary) and smoothing pulls it by at most log(6/5) = 0.18
# nats; at 1-2 emissions the SE is 0.7-1 nats and the sign of a "drift" is noise. Under
# add-one smoothing a token nobody emitted gets r_ref = log((N_jun + V) / (N_ref + V)) > 0 from
# the totals alone, so without this minimum unemitted tokens would fill the over-emitted set.
MIN_REF_COUNT = 5
MIN_RECOVERY_TOKENS = 10  # fewer qualifying tokens: the recovery share and Spearman rho are not defined


def drift_statistics(counts: dict[str, np.ndarray], junior: str = JUNIOR, reference: str | None = None,
                     candidate: str | None = None, smoothing: float = 1.0, min_count: int = 10, top_n: int = 500,
                     table_rows: int = 50, token_str=None, min_ref_count: int = MIN_REF_COUNT,
                     min_tokens: int = MIN_RECOVERY_TOKENS) -> dict:
    """drift.json's statistics from {model: (V,) counts}; ``junior`` names the reference distribution.

    Only tokens the reference emitted at least ``min_ref_count`` times can be over-emitted
    (recovery set, correlation and the over-emitted table); fewer than ``min_tokens`` such
    tokens leave the recovery share and rho undefined (None). token_str(id) -> str gives
    token strings for the table (None: ids only).
    """
    seniors = [n for n in counts if n != junior]
    if not seniors:
        raise TandemError("drift needs at least one senior besides the junior")
    p = {n: smoothed_distribution(c, smoothing) for n, c in counts.items()}  # (V,) each
    lr = {n: log_ratio(p[n], p[junior]) for n in seniors}
    frequent = counts[junior] >= min_count  # (V,)
    if not frequent.any():
        log.warning("no token occurs %d times in the junior's outputs; survival curves are empty", min_count)
    hi = max([float(np.abs(lr[n][frequent]).max()) for n in seniors if frequent.any()] or [1.0])
    grid = np.linspace(0.0, hi, GRID_POINTS)
    models = {n: {"tokens": int(counts[n].sum()), "kl_to_junior": kl_divergence(p[n], p[junior]),
                  "share_abs_log_ratio_gt_1": float((np.abs(lr[n][frequent]) > 1).mean()) if frequent.any() else None}
              for n in seniors}
    reference = reference or seniors[0]
    recovery = None
    if candidate is not None:
        recovery = {"reference": reference, "candidate": candidate, "min_ref_count": min_ref_count,
                    # a candidate with the junior's exact counts (its checkpoint, e.g. a best/ chosen at step 0)
                    # "moves back" every token with rho = -1 trivially
                    "candidate_is_junior": bool(np.array_equal(counts[candidate], counts[junior])),
                    **drift_recovery(lr[reference], lr[candidate], top_n, counts[reference] >= min_ref_count,
                                     min_tokens)}
    real = (counts[reference] >= min_ref_count) & (lr[reference] > 0)  # (V,) the over-emitted set
    order = np.argsort(-np.where(real, lr[reference], -np.inf), kind="stable")[: min(table_rows, int(real.sum()))]
    rows = [{"id": int(v), "token": token_str(int(v)) if token_str else None,
             "counts": {n: int(c[v]) for n, c in counts.items()}, "log_ratio": {n: float(lr[n][v]) for n in seniors}}
            for v in order]
    return {"junior_tokens": int(counts[junior].sum()), "models": models,
            "survival": {"grid": grid.tolist(), "min_count": min_count, "frequent_tokens": int(frequent.sum()),
                         "curves": {n: survival_curve(np.abs(lr[n][frequent]), grid).tolist() for n in seniors}},
            "recovery": recovery, "over_emitted": {"reference": reference, "rows": rows}}


def _parse_seniors(spec: str) -> dict[str, Path]:
    out = {}
    for item in (s for s in spec.split(",") if s.strip()):
        name, path = split_named(item.strip(), "--seniors entry")
        if name in out or name == JUNIOR:
            raise TandemError(f"--seniors: name {name!r} is {'reserved' if name == JUNIOR else 'given twice'}")
        out[name] = path
    if not out:
        raise TandemError("--seniors needs at least one NAME=DIR")
    return out


def _tokenizer(run: EvalRun):
    """The tokenizer of the run's model, or None (with a warning) if it cannot be loaded."""
    from ...models import load_tokenizer

    spec = (run.config.get("models") or {}).get("senior")
    if not spec:
        return None
    try:
        return load_tokenizer(spec)
    except Exception as e:  # noqa: BLE001 - a missing tokenizer degrades the table to ids, nothing else
        log.warning("cannot load the tokenizer of %s (%s); storing token ids only", spec, str(e).splitlines()[0][:200])
        return None


def run_drift(junior_samples: str | os.PathLike, seniors: str | dict, out: str | os.PathLike,
              reference: str | None = None, candidate: str | None = None, smoothing: float = 1.0,
              min_count: int = 10, top_n: int = 500,
              table_rows: int = 50, min_ref_count: int = MIN_REF_COUNT) -> dict:
    """Read the runs, compute ``drift_statistics``, write its files to ``out`` (module docstring); return
    drift.json's content."""
    output_dir(out, create=False)
    dirs = _parse_seniors(seniors) if isinstance(seniors, str) else {k: Path(v) for k, v in seniors.items()}
    for flag, name in (("--reference", reference), ("--candidate", candidate)):
        if name is not None and name not in dirs:
            raise TandemError(f"{flag} {name!r} is not among --seniors ({', '.join(dirs)})")
    reference = reference or next((n for n in dirs if n != candidate), None)
    if candidate is None and len(dirs) > 1:
        candidate = next(n for n in dirs if n != reference)
    if candidate is not None and candidate == reference:
        raise TandemError("--candidate must differ from --reference")
    if top_n < 1 or min_count < 1 or min_ref_count < 1:
        raise TandemError(f"--top-n, --min-count and --min-ref-count must be >= 1, "
                          f"got {top_n}, {min_count}, {min_ref_count}")
    runs = {JUNIOR: read_run(junior_samples), **{n: read_run(d) for n, d in dirs.items()}}
    for n, run in runs.items():
        if run.schedule != "senior":
            raise TandemError(f"{run.path / 'config.json'}: {n}'s run is a {run.schedule!r} handoff run; "
                              "drift needs solo samples")
    check_same_benchmarks(runs)
    check_same_problems(runs)
    tok = _tokenizer(runs[JUNIOR])
    if tok is not None:
        for run in runs.values():
            check_tokenizer(run, tok, f"{runs[JUNIOR].config['models']['senior']} (junior run)", len(tok))
        V = len(tok)
    else:
        V = 1 + max(int(r["token_ids"].max()) for run in runs.values() for r in run.rows if r["token_ids"].size)
    counts = {n: token_counts((r["token_ids"] for r in run.rows), V) for n, run in runs.items()}
    token_str = (lambda v: tok.decode([v])) if tok is not None else None
    result = drift_statistics(counts, JUNIOR, reference, candidate, smoothing, min_count, top_n, table_rows, token_str,
                              min_ref_count)
    result["config"] = {"junior_samples": str(runs[JUNIOR].path.resolve()),
                        "seniors": {n: str(d.resolve()) for n, d in dirs.items()},
                        "smoothing": smoothing, "min_count": min_count, "top_n": top_n, "min_ref_count": min_ref_count,
                        "vocab_size": V, INPUTS: {n: run.config.get(INPUTS) for n, run in runs.items()},
                        "tokenizer": runs[JUNIOR].config["models"]["senior"] if tok is not None else None,
                        **invocation()}
    _write(Path(out), result, counts)
    return result


def _write(out: Path, result: dict, counts: dict[str, np.ndarray]) -> None:
    rows = result["over_emitted"]["rows"]
    names, seniors = list(counts), list(result["models"])
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["token", "id", *[f"count_{n}" for n in names], *[f"log_ratio_{n}" for n in seniors]])
    for r in rows:
        w.writerow([r["token"] or "", r["id"], *[r["counts"][n] for n in names],
                    *[f"{r['log_ratio'][n]:.4f}" for n in seniors]])
    with atomic_write(out / "over_emitted.csv") as f:
        f.write(buf.getvalue())
    with atomic_write(out / "counts.npz", "wb") as f:
        np.savez_compressed(f, names=np.array(names), counts=np.stack([counts[n] for n in names]))
    write_json(out / "drift.json", result)

