"""Rescore an evaluation run's saved samples with today's grader, beside the originals.

What: ``tandem eval regrade RUN_DIR [--grader ours|paper]`` scores every row of
``RUN_DIR/samples.jsonl`` again (the row's ``response`` against its gold ``answer``, with the run's
answer mode, by the grader named, else the one the run was sampled with) and writes

- ``samples.regraded.jsonl``: one line per sample, ``benchmark, problem_id, sample_idx,
  correct`` (today's verdict) and ``original_correct`` (the verdict saved at sampling time);
- ``regrade.json``: the grader that made the new verdicts (``rewards.math.grader_identity``:
  tandem-rlvr's version, a SHA-256 of the grader's source, the versions of math-verify,
  latex2sympy2_extended, sympy, antlr and pylatexenc), ``grader_name`` (ours or paper) and the
  ``verifier`` it amounts to, a SHA-256 of the inputs (config.json and
  samples.jsonl), the SHA-256 of the regraded file, and per benchmark the flips (0->1, 1->0)
  and pass@1 before and after.

``samples.jsonl`` and ``metrics.json`` are never touched. Re-running with the same grader on
the same samples is a no-op; a run regraded by another grader (or whose samples changed since)
is refused unless ``--replace``. ``tandem compare`` and ``tandem report`` use the regraded
verdicts whenever a run holds a current ``regrade.json`` (``apply_regrade``) and say so; the run
then counts as graded by the regrade's verifier, so a run regraded with ``--grader paper`` is
compared only with runs graded by the paper's grader (``eval.measure.comparable``).

Why: the replication of the paper found its Minerva verdicts swung by a grader defect
(docs/verifier_and_data.md); a fixed grader must be applicable to runs already sampled,
without re-sampling and without losing the verdicts the run was first reported with.

Run it::

    tandem eval regrade runs/grpo/solo
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ...errors import TandemError
from ...io import atomic_write, read_json, read_text, write_json
from ..run_files import CONFIG, SAMPLES, EvalRun, problem_of, read_run, run_problems

REGRADED, RECORD = "samples.regraded.jsonl", "regrade.json"


def _sha256(*paths: Path) -> str:
    digest = hashlib.sha256()
    for p in paths:
        digest.update(p.name.encode() + b"\0" + p.read_bytes())
    return digest.hexdigest()


def inputs_sha256(run_dir: Path) -> str:
    """SHA-256 over the run's config.json and samples.jsonl: what a regrade was computed from."""
    return _sha256(run_dir / CONFIG, run_dir / SAMPLES)


def _golds(run: EvalRun) -> list[str]:
    """Each row's gold answer: the row's own ``answer``, else the problem loaded from the run's sources."""
    if all(isinstance(r.get("answer"), str) for r in run.rows):
        return [r["answer"] for r in run.rows]
    _, problems = run_problems(run.path, run.config)
    golds = []
    for i, r in enumerate(run.rows):
        if isinstance(r.get("answer"), str):
            golds.append(r["answer"])
        elif problem_of(r) in problems:
            golds.append(problems[problem_of(r)].answer)
        else:
            raise TandemError(f"{run.where(i)}: no gold answer in the row and problem {problem_of(r)} is not in the "
                              "run's benchmarks as loaded now")
    return golds


def _pass_at_1(keys: list[tuple[str, str]], verdicts: list[bool]) -> dict[str, float]:
    """{benchmark: mean over its problems of the fraction of samples correct}."""
    per: dict[tuple[str, str], list[bool]] = {}
    for k, v in zip(keys, verdicts, strict=True):
        per.setdefault(k, []).append(v)
    by_bench: dict[str, list[float]] = {}
    for (b, _), vs in per.items():
        by_bench.setdefault(b, []).append(sum(vs) / len(vs))
    return {b: sum(xs) / len(xs) for b, xs in by_bench.items()}


def regrade(run_dir: str | os.PathLike, *, replace: bool = False, progress: bool = False,
            grader: str | None = None) -> dict:
    """Regrade one run (see the module docstring); returns regrade.json's content, with
    ``"unchanged": True`` when an identical regrade was already there. ``progress``: a rich bar
    (math-verify takes a few ms per sample). ``grader``: ``rewards.math.GRADERS``; None: the run's own."""
    from ...progress import progress_bar
    from ...rewards.math import check_answer_mode, check_grader, get_verifier, grader_identity
    from ...tasks.answers import MathTask

    path = Path(run_dir)
    run = read_run(path)
    identity, inputs = grader_identity(), inputs_sha256(path)
    answer_mode = check_answer_mode(run.config.get("answer_mode") or "last-box")
    grader = check_grader(grader or run.config.get("grader") or "ours", answer_mode)
    record_path = path / RECORD
    if record_path.exists():
        old = read_json(record_path)
        same_grader = old.get("grader") == identity and old.get("grader_name", "ours") == grader
        if same_grader and old.get("inputs_sha256") == inputs and _current(path, old):
            return {**old, "unchanged": True}
        if not replace:
            why = "another grader" if not same_grader else "samples that have changed since"
            raise TandemError(f"{record_path}: this run was regraded with {why}; pass --replace to regrade it again "
                              "(samples.jsonl is never touched)")
    missing = [i for i, r in enumerate(run.rows) if not isinstance(r.get("response"), str)]
    if missing:
        raise TandemError(f"{run.where(missing[0])}: no response text saved ({len(missing)} rows), "
                          "so it cannot be regraded")
    task = run.config.get("task") or "math"
    if task != "math":  # only the math grader has changed under saved runs; the other tasks grade as sampled
        raise TandemError(f"{path}: regrade rescores math runs; this run's task is {task!r}")
    verify = get_verifier("math")
    golds = _golds(run)
    new = []
    with progress_bar(progress) as bar:
        task = bar.add_task("regrade", total=len(run.rows))
        for r, g in zip(run.rows, golds, strict=True):
            new.append(verify(r["response"], g, answer_mode=answer_mode, grader=grader) == 1.0)
            bar.advance(task)
    old_v = [bool(r["correct"]) for r in run.rows]
    keys = [problem_of(r) for r in run.rows]

    flips: dict[str, dict[str, int]] = {}
    for (b, _), o, n in zip(keys, old_v, new, strict=True):
        f = flips.setdefault(b, {"0->1": 0, "1->0": 0, "samples": 0})
        f["samples"] += 1
        f["0->1"] += int(n and not o)
        f["1->0"] += int(o and not n)
    before, after = _pass_at_1(keys, old_v), _pass_at_1(keys, new)
    with atomic_write(path / REGRADED) as f:
        for r, o, n in zip(run.rows, old_v, new, strict=True):
            f.write(json.dumps({"benchmark": r["benchmark"], "problem_id": r["problem_id"],
                                "sample_idx": r["sample_idx"], "correct": n, "original_correct": o}) + "\n")
    record = {"grader": identity, "inputs_sha256": inputs, "regraded_sha256": _sha256(path / REGRADED),
              "answer_mode": answer_mode, "grader_name": grader,
              "verifier": MathTask(answer_mode=answer_mode, grader=grader).verifier,
              "benchmarks": {b: {**flips[b], "pass@1_before": before[b], "pass@1_after": after[b]} for b in flips}}
    write_json(record_path, record)  # last: a record exists only beside a complete regraded file
    return {**record, "unchanged": False}


def _current(path: Path, record: dict) -> bool:
    regraded = path / REGRADED
    return regraded.is_file() and _sha256(regraded) == record.get("regraded_sha256")


def apply_regrade(run: EvalRun) -> dict | None:
    """Swap the regraded verdicts into ``run.rows`` if the run holds a current regrade.json;
    return {"grader", "benchmarks"} of that regrade, else None. A regrade made from other samples
    than the run holds now (a resumed or re-sampled run) is a TandemError, never silently used."""
    record_path = run.path / RECORD
    if not record_path.is_file():
        return None
    record = read_json(record_path)
    if record.get("inputs_sha256") != inputs_sha256(run.path) or not _current(run.path, record):
        raise TandemError(f"{record_path}: made from other samples than {run.samples_path} holds now; run "
                          f"`tandem eval regrade {run.path} --replace`, or delete {RECORD} to use the original "
                          "verdicts")
    verdicts = {}
    for line in read_text(run.path / REGRADED).splitlines():
        r = json.loads(line)
        verdicts[(*problem_of(r), r["sample_idx"])] = bool(r["correct"])
    for i, r in enumerate(run.rows):
        key = (*problem_of(r), r["sample_idx"])
        if key not in verdicts:
            raise TandemError(f"{run.where(i)}: sample {key} has no verdict in {run.path / REGRADED}")
        r["original_correct"], r["correct"] = r["correct"], verdicts[key]
    if record.get("verifier"):  # the run is now graded by the regrade's verifier (compare checks it)
        run.config["verifier"], run.config["grader"] = record["verifier"], record.get("grader_name", "ours")
    return {"grader": record["grader"], "benchmarks": record["benchmarks"]}
