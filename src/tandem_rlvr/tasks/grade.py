"""``tandem grade``: grade another system's responses (JSONL) with a task's verifier, resumably.

    tandem grade --task code --benchmark humaneval --responses answers.jsonl --out graded/

Input: one JSON object a line with ``problem_id`` (a problem of ``--benchmark``) and ``response``
(text); every other column is kept. Output in ``--out``:

- ``config.json``: task, verifier, benchmark, split, the responses file's rows and SHA-256 (and its
  path, which may change); a re-run with other settings or another responses file is refused;
- ``graded.jsonl``: one row per input row, in input order: the input's columns plus ``score``
  (the task's reward in [0, 1]), ``reason`` (passed, wrong answer, failed test K, timeout, memory,
  crashed, no code found, ...) and ``details`` (``pass_fraction`` and test count for code);
  these three column names are the grader's (an input column of the same name is replaced);
- ``summary.json``: responses, mean score, the count of each reason, written last.

Rows are graded in chunks, in parallel (the code task's sandbox pool), and each chunk is appended
and synced before the next, so an interrupted run resumes at the first ungraded row; a finished run
re-run is a no-op. Bad input (unreadable JSON, a missing or mistyped field, an unknown problem id)
is a one-line error naming file and line, checked before anything is graded or written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from pathlib import Path

from ..errors import TandemError
from ..io import jsonl_objects, read_json, read_text, write_json
from ..outdir import RunLock, output_dir, refuse_other_config, remove_failed_start
from . import task_for_eval

log = logging.getLogger("tandem_rlvr")

CONFIG, GRADED, SUMMARY = "config.json", "graded.jsonl", "summary.json"
CHUNK = 64


def read_responses(path: Path) -> list[dict]:
    """The responses file's rows; TandemError naming file:line for any malformed one."""
    if not path.is_file():
        raise TandemError(f"--responses {path}: no such file")
    rows = []
    for where, row in jsonl_objects(path):
        if not isinstance(row, dict) or "problem_id" not in row or "response" not in row:
            raise TandemError(f"{where}: each line must be an object with problem_id and response")
        if not isinstance(row["response"], str) or not isinstance(row["problem_id"], (str, int)) \
                or isinstance(row["problem_id"], bool):
            raise TandemError(f"{where}: response must be a string and problem_id a string or an integer")
        rows.append(row)
    if not rows:
        raise TandemError(f"--responses {path}: no responses")
    return rows


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def _done_rows(path: Path, inputs: list[dict]) -> list[dict]:
    """Graded rows already written; a torn last line (an interrupted write) is dropped and the file rewritten."""
    if not path.exists():
        return []
    text = read_text(path)
    lines = text.split("\n")
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) and not text.endswith("\n"):
                log.warning("%s: dropping a torn last line from an interrupted run", path)
                path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
                break
            raise TandemError(f"{path}:{i}: malformed JSON line") from None
    # a resumed file holds a prefix of the responses: only the rows it has are compared
    if len(rows) > len(inputs) or any(str(r.get("problem_id")) != str(x["problem_id"])
                                      for r, x in zip(rows, inputs, strict=False)):
        raise TandemError(f"{path}: its rows do not follow the responses file; use a new --out directory")
    return rows


def summarize(rows: list[dict], config: dict) -> dict:
    scores = [r["score"] for r in rows]
    return {"task": config["task"], "verifier": config["verifier"], "benchmark": config["benchmark"],
            "responses": len(rows), "mean_score": sum(scores) / len(scores) if scores else 0.0,
            "reasons": dict(Counter(r["reason"] for r in rows).most_common())}


def grade_file(task_name: str, benchmark: str, responses: str | os.PathLike, out: str | os.PathLike,
               split: str | None = None, workers: int | None = None, grader: str = "ours") -> dict:
    """Grade every row of ``responses`` against ``benchmark`` with ``task_name``'s verifier (for math,
    ``grader``: ours or the paper's, ``rewards.math.GRADERS``); the summary."""
    from dataclasses import replace

    from ..prompting import DEFAULT_INSTRUCTION

    task = task_for_eval(task_name, instruction=DEFAULT_INSTRUCTION, answer_mode="last-box", grader=grader)
    if workers is not None:
        if workers < 1:
            raise TandemError(f"--workers must be >= 1, got {workers}")
        if hasattr(task, "workers"):
            task = replace(task, workers=workers)
    output_dir(out, "--out", create=False)  # before the benchmark loads
    path = Path(responses).expanduser()
    inputs = read_responses(path)
    problems = {str(r["problem_id"]): r for r in task.load(benchmark, split=split)}
    for i, row in enumerate(inputs):
        if str(row["problem_id"]) not in problems:
            raise TandemError(f"{path}: row {i + 1}: problem_id {row['problem_id']!r} is not a problem of {benchmark} "
                              f"({len(problems)} problems)")
    config = {"task": task.name, "verifier": task.verifier, "benchmark": benchmark, "split": split,
              "responses": {"rows": len(inputs), "sha256": _sha256(path)}, "responses_path": str(path.resolve())}
    dir_was_new = not Path(out).expanduser().exists()
    out = output_dir(out)
    with RunLock(out):
        fresh, wrote = not (out / CONFIG).exists(), False
        try:
            if not refuse_other_config(out / CONFIG, config, "use a new --out directory", ignore=("responses_path",)):
                write_json(out / CONFIG, config)
            if (out / SUMMARY).is_file():
                return read_json(out / SUMMARY)
            done = _done_rows(out / GRADED, inputs)
            if done:
                log.info("resuming %s: %d of %d responses graded", out, len(done), len(inputs))
            with open(out / GRADED, "a", encoding="utf-8") as f:
                for start in range(len(done), len(inputs), CHUNK):
                    chunk = inputs[start:start + CHUNK]
                    grades = task.grade([r["response"] for r in chunk], [problems[str(r["problem_id"])] for r in chunk])
                    new = [{**r, "score": g.score, "reason": g.reason, "details": g.details}
                           for r, g in zip(chunk, grades, strict=True)]
                    f.write("".join(json.dumps(r) + "\n" for r in new))
                    f.flush()
                    os.fsync(f.fileno())
                    wrote = True
                    done.extend(new)
            summary = summarize(done, config)
            write_json(out / SUMMARY, summary)
        except BaseException:
            if fresh and not wrote:
                remove_failed_start(out, [CONFIG, GRADED], dir_was_new)
            raise
    return summary
