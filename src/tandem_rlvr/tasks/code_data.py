"""Code benchmarks as task rows: HumanEval, MBPP (sanitized and full), APPS (shipped sample, hub, file).

``load_code(spec, limit, split)`` where ``spec`` is a shipped name (``CODE_BENCHMARKS``: files in
``tandem_rlvr/data/files/code/``, provenance and licences in its README), a local
.jsonl/.json/.parquet file in one of those formats (recognised by its fields), or a hub id such as
``codeparrot/apps`` (``datasets.load_dataset``, APPS's row format; split ``test`` unless given as
``owner/name:split`` or ``--split``). Every row becomes::

    {benchmark, problem_id, question, gold, solution}

``question`` is what the prompt shows (HumanEval's function header and docstring, MBPP's text,
APPS's statement); ``solution`` the reference program; ``gold`` how a response is tested:

- ``{"kind": "humaneval", "prompt", "test", "entry_point"}``: the response completes ``prompt``;
  the program is prompt + completion + ``test``, and the one test is ``check(entry_point)``;
- ``{"kind": "asserts", "header", "setup", "tests"}`` (MBPP): ``header`` (sanitized MBPP's
  ``test_imports``), the response's code, ``setup`` (full MBPP's ``test_setup_code``), then each
  assert of ``tests`` (``test_list``; full MBPP's ``challenge_test_list`` is not used, as usual);
- ``{"kind": "call", "fn_name", "inputs", "outputs", "starter"}`` (APPS call-based): the function
  (or ``Solution().fn_name`` when the code defines ``class Solution``) is called with each input's
  arguments; the return value must equal the output (or its only element, APPS's convention);
- ``{"kind": "stdio", "inputs", "outputs"}`` (APPS standard input/output): one run per input.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import re
from pathlib import Path

from ..errors import TandemError
from ..io import read_text
from ..paths import PACKAGE_DATA

log = logging.getLogger("tandem_rlvr")

CODE_DIR = PACKAGE_DATA / "code"
CODE_BENCHMARKS = {"humaneval": "humaneval.jsonl", "mbpp": "mbpp.jsonl", "mbpp-full": "mbpp_full.jsonl",
                   "apps-sample": "apps_sample.jsonl"}
_HUB_SPEC = re.compile(r"[\w.-]+/[\w.-]+(?::[\w.-]+)?")


def humaneval_row(r: dict, benchmark: str) -> dict:
    gold = {"kind": "humaneval", "prompt": r["prompt"], "test": r["test"], "entry_point": r["entry_point"]}
    return {"benchmark": benchmark, "problem_id": str(r["task_id"]), "question": r["prompt"], "gold": gold,
            "solution": r.get("canonical_solution")}


def mbpp_row(r: dict, benchmark: str) -> dict:
    """Sanitized MBPP (``prompt``, ``test_imports``) or full MBPP (``text``, ``test_setup_code``)."""
    gold = {"kind": "asserts", "header": "\n".join(r.get("test_imports") or []),
            "setup": r.get("test_setup_code") or "", "tests": list(r["test_list"])}
    return {"benchmark": benchmark, "problem_id": str(r["task_id"]), "question": r.get("prompt") or r["text"],
            "gold": gold, "solution": r.get("code")}


def _json_field(value, default):
    if isinstance(value, str):
        return json.loads(value) if value.strip() else default
    return default if value is None else value


def apps_row(r: dict, benchmark: str) -> dict | None:
    """An APPS row (hub ``codeparrot/apps`` schema: JSON strings in ``solutions`` and ``input_output``);
    None when it has no tests."""
    io = _json_field(r.get("input_output"), {})
    if not io or not io.get("inputs"):
        return None
    solutions = _json_field(r.get("solutions"), [])
    if io.get("fn_name"):
        gold = {"kind": "call", "fn_name": io["fn_name"], "inputs": io["inputs"], "outputs": io["outputs"],
                "starter": r.get("starter_code") or ""}
    else:
        gold = {"kind": "stdio", "inputs": io["inputs"], "outputs": io["outputs"]}
    return {"benchmark": benchmark, "problem_id": str(r["problem_id"]), "question": r["question"], "gold": gold,
            "solution": solutions[0] if solutions else None}


def row_maker(fields: set):
    """The row builder for a source with these fields; None if it is no known code format."""
    if {"entry_point", "test", "prompt"} <= fields:
        return humaneval_row
    if "test_list" in fields and ({"prompt"} <= fields or {"text"} <= fields):
        return mbpp_row
    if {"input_output", "question"} <= fields:
        return apps_row
    return None


def _read_file(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = read_text(path)
    if path.suffix == ".json" and text.lstrip().startswith("["):
        return json.loads(text)
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise TandemError(f"{path}:{i}: malformed JSON line ({e.msg})") from None
    return rows


def _rows(raw, benchmark: str, source: str, limit: int | None) -> list[dict]:
    out, seen = [], set()
    for r in raw:
        if limit is not None and len(out) >= limit:
            break
        make = row_maker(set(r)) if isinstance(r, dict) else None
        if make is None:
            raise TandemError(f"{source}: rows are not HumanEval, MBPP or APPS rows (fields: "
                              f"{', '.join(sorted(r)) if isinstance(r, dict) else type(r).__name__})")
        row = make(r, benchmark)
        if row is None:
            log.warning("%s: problem %s has no tests; skipped", source, r.get("problem_id"))
            continue
        if row["problem_id"] in seen:
            raise TandemError(f"{source}: duplicate problem id {row['problem_id']!r}")
        seen.add(row["problem_id"])
        out.append(row)
    if not out:
        raise TandemError(f"{source}: no problems")
    return out


@functools.lru_cache(maxsize=8)
def _tiny_code_rows(split: str | None, limit: int | None) -> list[dict]:
    """The code world's rows of ``split``, drawn once per process (a whole split takes ~0.3 s to draw: a
    demo asks for each split a few times); ``load_code`` hands out copies."""
    from ..world.code import code_rows

    return code_rows(split, limit)


def load_code(spec: str, limit: int | None = None, split: str | None = None) -> list[dict]:
    """Task rows of a shipped code benchmark, a local file or a hub id (module docstring)."""
    if limit is not None and limit < 0:
        raise TandemError(f"limit must be >= 0, got {limit}")
    if spec == "tiny-code":  # the code world's problems (world/code.py), generated once per process
        return copy.deepcopy(_tiny_code_rows(split, limit))
    if spec in CODE_BENCHMARKS:
        path = CODE_DIR / CODE_BENCHMARKS[spec]
        return _rows(_read_file(path), spec, str(path), limit)
    path = Path(spec).expanduser()
    if path.suffix in (".jsonl", ".json", ".parquet"):
        if not path.is_file():
            raise TandemError(f"benchmark file not found: {spec}")
        return _rows(_read_file(path), path.stem, str(path), limit)
    if _HUB_SPEC.fullmatch(spec):
        return _rows(_hub_rows(spec, split), spec.split(":")[0].split("/")[1], spec, limit)
    raise TandemError(f"unknown code benchmark {spec!r}; valid names: {', '.join([*CODE_BENCHMARKS, 'tiny-code'])}; "
                      "or a .jsonl/.json/.parquet file of HumanEval, MBPP or APPS rows, or a hub id such as "
                      "codeparrot/apps")


def _hub_rows(spec: str, split: str | None):
    """Rows of a hub dataset (``datasets.load_dataset``; the network or the local HF cache)."""
    import datasets

    hub_id, _, hub_split = spec.partition(":")
    try:
        return datasets.load_dataset(hub_id, split=hub_split or split or "test")
    except Exception as e:  # datasets raises many types for an unreachable hub or a missing split
        raise TandemError(f"cannot load {spec} from the Hugging Face hub ({str(e).splitlines()[0][:160]}); "
                          "give a local file of its rows instead") from None
