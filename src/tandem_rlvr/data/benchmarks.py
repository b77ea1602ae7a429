"""Benchmark loaders: every source of math problems becomes one list of ``Problem`` records.

What: ``load_benchmark(spec)`` where ``spec`` is

- a registered name (``aime24``, ``math500``, ``minerva``, ``gsm8k``, ...; ``BENCHMARKS`` lists
  them): the file ``<stem>.jsonl|.json|.parquet`` in ``tandem_rlvr.paths.data_dirs()`` (the
  package's own data first, then ``$TANDEM_DATA``), else the Hugging Face hub id known for it;
  a pooled set (``POOLED``: ``aime`` = AIME 2024-2026, 90 problems, as the paper's tables report
  AIME); ``tiny``, the built-in tiny world's problems (``tiny_benchmark``, from
  ``world.tasks``); or a Python loader added with ``register_benchmark``;
- a local path ending ``.jsonl``, ``.json`` (a list of objects, or JSON lines) or ``.parquet``;
- a hub id ``owner/name`` or ``owner/name:split`` (``datasets.load_dataset``; needs the network
  or the local HF cache).

Why one record: publishers disagree on everything (``problem``/``question``/``prompt``; answers
as strings, floats like ``27.0``, after GSM8K's ``####``, or only inside Minerva's
``\\boxed{}``); the rest of the project sees ``Problem`` and nothing else.

How rows are read (``_to_problem``): problem text from the first non-empty of ``problem``,
``question``, ``prompt``; answer from ``answer`` or ``final_answer`` (numbers canonical, 27.0 ->
"27"; lists joined with ", "; an enclosing ``$...$`` dropped; GSM8K ``#### 1,000`` -> "1000"),
else the last ``\\boxed{}`` of ``solution``; id from ``id``/``idx``/``unique_id``, else the row
index. A row without problem text or answer, a duplicate id, or a malformed JSON line is logged as
a warning with file:line and skipped (the first ``MAX_ROW_WARNINGS`` individually, then a count);
a source with no valid row at all is a ``TandemError``. ``split`` selects hub splits and is passed
to registered loaders; a local file is a single split, and a file shipped in the package holds the
split ``SHIPPED_SPLITS`` names: a registered name asked for another split goes to the hub, or is
refused in one line (never a test split handed to training as its train split).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..errors import TandemError
from ..io import lone_surrogate
from ..paths import PACKAGE_DATA, data_dirs
from ..rewards.math import extract_boxed

logger = logging.getLogger("tandem_rlvr")

MAX_ROW_WARNINGS = 20
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
_TEXT_KEYS = ("problem", "question", "prompt")
_ANSWER_KEYS = ("answer", "final_answer")
_ID_KEYS = ("id", "idx", "unique_id")
_HUB_SPEC = re.compile(r"[\w.-]+/[\w.-]+(?::[\w.-]+)?")
_SPLIT_NAMES = {"test", "train", "validation", "val", "dev", "data"}
_NUMBER_WITH_COMMAS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_HUB_LOGGERS = ("huggingface_hub", "datasets", "fsspec", "filelock", "urllib3")


@dataclass(frozen=True)
class Problem:
    """One benchmark problem. ``answer`` is the gold answer as text (what ``rewards.math.score`` takes)."""

    benchmark: str
    problem_id: str
    problem: str
    answer: str
    solution: str | None = None
    meta: dict = field(default_factory=dict, compare=False, hash=False)  # the row's other fields


Loader = Callable[[str | None, int | None], list[Problem]]
_REGISTRY: dict[str, Loader] = {}


def register_benchmark(name: str, loader_fn: Loader, *, overwrite: bool = False) -> None:
    """Make ``load_benchmark(name)`` call ``loader_fn(split, limit) -> list[Problem]``."""
    if not name or "/" in name or name.lower().endswith(FILE_SUFFIXES):
        raise TandemError(f"bad benchmark name {name!r}: it must not look like a path or a hub id")
    if name in _REGISTRY and not overwrite and _REGISTRY[name] is not loader_fn:
        raise TandemError(f"benchmark {name!r} is already registered (pass overwrite=True to replace it)")
    _REGISTRY[name] = loader_fn


def benchmark_names() -> list[str]:
    """The registered benchmark names, sorted."""
    return sorted(_REGISTRY)


def load_benchmark(spec: str, *, split: str | None = None, limit: int | None = None) -> list[Problem]:
    """Problems of ``spec`` (a registered name, a .jsonl/.json/.parquet path or a hub id), in order."""
    if limit is not None and limit < 0:
        raise TandemError(f"limit must be >= 0, got {limit}")
    if spec in _REGISTRY:
        return list(_REGISTRY[spec](split, limit))[:limit]
    if spec.lower().endswith(FILE_SUFFIXES):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise TandemError(f"benchmark file not found: {spec}")
        return load_file(path, benchmark=_name_of_path(path), limit=limit)
    if _HUB_SPEC.fullmatch(spec) and not Path(spec).exists():
        hub_id, _, hub_split = spec.partition(":")
        return load_hub(hub_id, split=hub_split or split or "test", benchmark=hub_id.split("/")[1], limit=limit)
    raise TandemError(
        f"unknown benchmark {spec!r}; valid names: {', '.join(benchmark_names())}; "
        "or a .jsonl/.json/.parquet path, or a hub id owner/name[:split]"
    )


def load_benchmarks(
    specs: Iterable[str], *, split: str | None = None, limit: int | None = None
) -> dict[str, list[Problem]]:
    """``{benchmark name: problems}`` for several specs; two specs with one name are an error."""
    out: dict[str, list[Problem]] = {}
    for spec in specs:
        problems = load_benchmark(spec, split=split, limit=limit)
        name = problems[0].benchmark if problems else spec
        if name in out:
            raise TandemError(f"two benchmark specs resolve to the same name {name!r} (second: {spec})")
        out[name] = problems
    return out


def load_file(path: str | Path, *, benchmark: str, limit: int | None = None) -> list[Problem]:
    """Problems of one local .jsonl/.json/.parquet file (see the module docstring for the rules)."""
    path = Path(path)
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises several types for a corrupt file
            raise TandemError(f"{path}: unreadable parquet file ({_one_line(e)})") from None
        rows: Iterable = ((f"{path}:row {i}", row) for i, row in enumerate(table.to_pylist()))
    else:
        try:
            text = path.read_text(encoding="utf-8-sig")  # a leading byte-order mark is not part of the first row
        except (OSError, UnicodeDecodeError) as e:
            raise TandemError(f"{path}: unreadable ({_one_line(e)})") from None
        rows = _json_array_rows(path, text) if text.lstrip().startswith("[") else _json_lines_rows(path, text)
    return _collect(rows, benchmark=benchmark, source=str(path), limit=limit)


def load_hub(
    hub_id: str, *, split: str, benchmark: str, config: str | None = None, limit: int | None = None
) -> list[Problem]:
    """Problems of a Hugging Face hub dataset split; a ``TandemError`` if it cannot be fetched."""
    return _hub_problems(_fetch_hub(hub_id, config, split), f"{hub_id}:{split}", benchmark, limit)


def _fetch_hub(hub_id: str, config: str | None, split: str):
    try:
        import datasets

        with _quiet_hub_clients():
            return datasets.load_dataset(hub_id, config, split=split)
    except Exception as e:  # offline, missing dataset, bad split or config: all one message
        raise TandemError(f"could not load hub dataset {hub_id}:{split} ({_one_line(e)})") from None


@contextlib.contextmanager
def _quiet_hub_clients():
    """Silence the hub clients' own retry warnings ("... thrown while requesting HEAD ...", one per
    retry): a failed fetch is reported once, as the one-line ``TandemError`` above."""
    loggers = [logging.getLogger(n) for n in _HUB_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _hub_problems(ds, source: str, benchmark: str, limit: int | None) -> list[Problem]:
    rows = ((f"{source}:row {i}", row) for i, row in enumerate(ds))
    return _collect(rows, benchmark=benchmark, source=source, limit=limit)


def _named(name: str, stems: tuple[str, ...], hub: tuple[str, str | None, str] | None) -> Loader:
    """Loader for a built-in name: a local file with one of ``stems``, else ``hub`` = (id, config, split)."""

    def load(split: str | None, limit: int | None) -> list[Problem]:
        other = None  # a shipped file of another split than the one asked for
        for folder in data_dirs():
            for stem in stems:
                for suffix in FILE_SUFFIXES:
                    path = folder / f"{stem}{suffix}"
                    if not path.is_file():
                        continue
                    held = SHIPPED_SPLITS.get(name) if folder == PACKAGE_DATA.resolve() else None
                    if split and held and _split_name(split) != held:
                        other = other or (path, held)
                        continue
                    return load_file(path, benchmark=name, limit=limit)
        if other is not None:
            return _other_split(name, split, other, hub, limit)
        where = ", ".join(str(d) for d in data_dirs()) or "no data folder exists"
        if not os.environ.get("TANDEM_DATA"):
            where += "; $TANDEM_DATA, a folder of further files, is not set"
        elif not Path(os.environ["TANDEM_DATA"]).expanduser().is_dir():
            where += f"; $TANDEM_DATA={os.environ['TANDEM_DATA']} is not a folder"
        if hub is None:
            raise TandemError(f"benchmark {name!r}: no file {stems[0]}.jsonl/.json/.parquet found locally ({where})")
        hub_id, config, default_split = hub
        split = split or default_split
        try:
            ds = _fetch_hub(hub_id, config, split)
        except TandemError as e:
            raise TandemError(
                f"benchmark {name!r}: file {stems[0]}.jsonl/.json/.parquet not found locally ({where}) "
                f"and the hub is unreachable: {e}"
            ) from None
        return _hub_problems(ds, f"{hub_id}:{split}", name, limit)

    return load


# The split each file shipped in the package holds (data/files/README.md). A named benchmark asked for
# another split is never served from it: ``--dataset gsm8k`` (training's split: train) would otherwise
# train on GSM8K's test split, the only one that ships.
SHIPPED_SPLITS = {"aime24": "test", "aime25": "test", "aime26": "test", "amc23": "test", "amc23_25": "test",
                  "amc": "test", "math500": "test", "minerva": "test", "gsm8k": "test", "math_train": "train",
                  "deepscaler_sample": "train"}


def _split_name(split: str) -> str:
    return {"validation": "val", "dev": "val"}.get(split, split)


def _other_split(name: str, split: str, other: tuple[Path, str], hub, limit: int | None) -> list[Problem]:
    """Split ``split`` of benchmark ``name`` from the hub, when the file shipped offline (``other``: its path
    and split) holds another; else a TandemError saying so and how to use the shipped split knowingly."""
    path, held = other
    knowingly = (f"to use its {held} split knowingly, ask for split {held} (tandem train --dataset-split {held}; "
                 f"tandem eval --split {held})")
    if hub is None:
        raise TandemError(f"benchmark {name!r}: split {split!r} asked for, but the only copy here ({path}) is its "
                          f"{held} split; give a file of the {split} split (a .jsonl path), or {knowingly}")
    hub_id, config, _ = hub
    try:
        ds = _fetch_hub(hub_id, config, split)
    except TandemError as e:
        raise TandemError(f"benchmark {name!r}: split {split!r} asked for, but the copy shipped offline "
                          f"({path.name}) is its {held} split and the hub ({hub_id}:{split}) is unreachable ({e}); "
                          f"give a file of the {split} split (a .jsonl path), or {knowingly}") from None
    return _hub_problems(ds, f"{hub_id}:{split}", name, limit)


def _to_problem(row: dict, *, benchmark: str, index: int) -> Problem:
    """One normalised record; raises ``ValueError`` naming what the row lacks."""
    text = next((row[k].strip() for k in _TEXT_KEYS if isinstance(row.get(k), str) and row[k].strip()), None)
    if text is None:
        raise ValueError("no problem text (fields problem/question/prompt)")
    if (bad := lone_surrogate(text)) is not None:
        raise ValueError(f"problem text holds {bad}")
    solution = row.get("solution")
    if isinstance(solution, list):
        solution = "\n\n".join(str(s) for s in solution)
    solution = solution if isinstance(solution, str) and solution.strip() else None
    raw = next((row[k] for k in _ANSWER_KEYS if row.get(k) not in (None, "", [])), None)
    if isinstance(raw, str) and "####" in raw:  # GSM8K: rationale #### final number
        rationale, _, raw = raw.rpartition("####")
        solution = solution or rationale.strip() or None
        raw = raw.strip()
        if _NUMBER_WITH_COMMAS.fullmatch(raw):
            raw = raw.replace(",", "")
    answer = _answer_text(raw)
    if answer is None and solution is not None:  # Minerva: the answer lives in the solution
        answer = extract_boxed(solution)
    if not answer:
        raise ValueError("no answer (fields answer/final_answer, or a \\boxed{} in solution)")
    ident = next((row[k] for k in _ID_KEYS if row.get(k) not in (None, "")), index)
    used = {*_TEXT_KEYS, *_ANSWER_KEYS, *_ID_KEYS, "solution"}
    meta = {k: v for k, v in row.items() if k not in used}
    return Problem(benchmark, str(ident), text, answer, solution, meta)


def _answer_text(value: object) -> str | None:
    """A gold answer as canonical text: 27.0 -> "27", "$x$" -> "x", ["1", "2"] -> "1, 2"."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, (list, tuple)):
        parts = [_answer_text(v) for v in value]
        return ", ".join(p for p in parts if p) or None
    if isinstance(value, str):
        value = value.strip()
        if len(value) > 2 and value.startswith("$") and value.endswith("$") and "$" not in value[1:-1]:
            value = value[1:-1].strip()
        return value or None
    return None


def _collect(rows: Iterable[tuple[str, object]], *, benchmark: str, source: str, limit: int | None) -> list[Problem]:
    """Normalise ``(location, row)`` pairs, reporting and skipping bad ones; stop at ``limit``."""
    problems: list[Problem] = []
    seen: set[str] = set()
    bad = total = 0
    for index, (where, row) in enumerate(rows):
        if limit is not None and len(problems) >= limit:
            break
        total += 1
        try:
            if isinstance(row, Exception):  # a malformed JSON line, passed through to be counted
                raise row
            if not isinstance(row, dict):
                raise ValueError(f"expected a JSON object, got {type(row).__name__}")
            problem = _to_problem(row, benchmark=benchmark, index=index)
            if problem.problem_id in seen:
                raise ValueError(f"duplicate problem id {problem.problem_id!r}")
        except ValueError as e:
            bad += 1
            if bad <= MAX_ROW_WARNINGS:
                logger.warning("%s: skipped row: %s", where, e)
            continue
        seen.add(problem.problem_id)
        problems.append(problem)
    if bad:
        logger.warning("%s: skipped %d of %d rows (bad rows above%s)", source, bad, total,
                       f"; first {MAX_ROW_WARNINGS} shown" if bad > MAX_ROW_WARNINGS else "")
    if not problems and limit != 0:
        raise TandemError(f"{source}: no valid problems ({total} rows read, {bad} skipped)")
    return problems


def _json_lines_rows(path: Path, text: str) -> Iterator[tuple[str, object]]:
    """``(path:line, row or ValueError)`` per non-blank line; a file with no parseable line is an error."""
    parsed = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            parsed += 1
        except json.JSONDecodeError as e:
            row = ValueError(f"malformed JSON ({e.msg}, column {e.colno})")
        yield f"{path}:{lineno}", row
    if not parsed:
        raise TandemError(f"{path}: empty, or not JSON lines or a JSON list")


def _json_array_rows(path: Path, text: str) -> Iterator[tuple[str, object]]:
    """``(path:line, row)`` per element of a top-level JSON list, with each element's start line."""
    decoder, ws = json.JSONDecoder(), re.compile(r"\s*")
    pos, line = ws.match(text).end() + 1, 1  # just past "["
    line += text.count("\n", 0, pos)
    try:
        while True:
            start = ws.match(text, pos).end()
            line += text.count("\n", pos, start)
            if text.startswith("]", start):
                return
            row, end = decoder.raw_decode(text, start)
            yield f"{path}:{line}", row
            line += text.count("\n", start, end)
            pos = ws.match(text, end).end()
            line += text.count("\n", end, pos)
            if text.startswith(",", pos):
                pos += 1
            elif not text.startswith("]", pos):
                raise json.JSONDecodeError("expected ',' or ']'", text, pos)
    except json.JSONDecodeError as e:
        raise TandemError(f"{path}:{e.lineno}: malformed JSON list ({e.msg})") from None


def _name_of_path(path: Path) -> str:
    """aime24.jsonl -> "aime24"; data/aime24/test.jsonl -> "aime24" (a split-named file takes its folder's name)."""
    stem = path.name[: -len(next(s for s in FILE_SUFFIXES if path.name.lower().endswith(s)))]
    return path.resolve().parent.name if stem.lower() in _SPLIT_NAMES and path.resolve().parent.name else stem


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0]}" if msg else type(e).__name__


BENCHMARKS: dict[str, tuple[tuple[str, ...], tuple[str, str | None, str] | None]] = {
    # name: (local file stems, (hub id, config, default split) or None)
    "aime24": (("aime24",), ("HuggingFaceH4/aime_2024", None, "train")),
    "aime25": (("aime25",), ("math-ai/aime25", None, "test")),
    "aime26": (("aime26",), None),
    "amc23": (("amc23",), ("math-ai/amc23", None, "test")),
    "amc": (("amc",), ("AI-MO/aimo-validation-amc", None, "train")),
    "amc23_25": (("amc23_25",), None),  # the paper's AMC set (AMC 2023 + AMC12 2024-2025, 121)
    "math500": (("math500",), ("HuggingFaceH4/MATH-500", None, "test")),
    "minerva": (("minerva_math", "minerva"), ("math-ai/minervamath", None, "test")),
    "olympiadbench": (("olympiadbench",), ("math-ai/olympiadbench", None, "test")),
    "gsm8k": (("gsm8k",), ("openai/gsm8k", "main", "test")),
    "math_train": (("math_train",), None),
    "deepscaler_sample": (("deepscaler_sample",), None),
    "deepscaler": (("deepscaler",), ("agentica-org/DeepScaleR-Preview-Dataset", None, "train")),
}
for _name, (_stems, _hub) in BENCHMARKS.items():
    register_benchmark(_name, _named(_name, _stems, _hub))

POOLED: dict[str, tuple[str, ...]] = {
    # name: member benchmarks, in order; the paper's tables report AIME 2024-2026 as one set
    "aime": ("aime24", "aime25", "aime26"),
}


def _pooled(name: str, members: tuple[str, ...]) -> Loader:
    """Loader for one set made of several: problem ids become ``<member>/<id>`` (unique across members)."""

    def load(split: str | None, limit: int | None) -> list[Problem]:
        out = [Problem(name, f"{m}/{p.problem_id}", p.problem, p.answer, p.solution, p.meta)
               for m in members for p in load_benchmark(m, split=split)]
        return out[:limit]

    return load


for _name, _members in POOLED.items():
    register_benchmark(_name, _pooled(_name, _members))

# The paper code's default evaluation sets (CSSLab/Tandem-RLVR eval/common.py, DEFAULT_SETS): its macro average
# weighs these four equally (``tandem compare --macro paper``).
PAPER_MACRO_SETS = ("aime24", "aime25", "aime26", "amc23_25")


# The built-in tiny world as benchmark "tiny": problems per split for the whole benchmark (no limit).
TINY_SIZES = {"train": 20000, "val": 500, "test": 2000}
_TINY_SPLIT_ALIASES = {"validation": "val", "dev": "val"}


def tiny_benchmark(split: str | None = None, limit: int | None = None) -> list[Problem]:
    """The tiny world (``world.tasks``, seed 0) as ``Problem`` records; ``split`` defaults to test."""
    from ..world.tasks import make_problems

    name = _TINY_SPLIT_ALIASES.get(split or "test", split or "test")
    if name not in TINY_SIZES:
        raise TandemError(f"unknown split {split!r} of benchmark 'tiny'; valid: {', '.join(TINY_SIZES)}")
    n = TINY_SIZES[name] if limit is None else min(limit, TINY_SIZES[name])
    return [Problem("tiny", p.problem_id, p.problem, p.answer, p.solution, {"split": name})
            for p in make_problems(n, seed=0, split=name)]


register_benchmark("tiny", tiny_benchmark)
