"""Evaluation runs on disk: the one place that reads and writes them.

An evaluation run (``tandem eval solo|handoff``, the demo, the study) is a directory of

- ``config.json``: what was sampled (``sampler.run_config`` of the ``EvalConfig``) and the fingerprints of what it
  was sampled from (``inputs``: model files, benchmark problem sets; ``fingerprint``); a
  resume with other inputs or another config is refused (``check_config``: a changed input
  by name first, then any other key by ``outdir.config_diff``);
- ``samples.jsonl``: one row per sample (``SAMPLE_TYPES``, plus the gold ``answer`` and the
  ``problem_fp`` of the problem it answers; written by ``append_rows``, whole problems at a
  time; ``check_problems`` matches the rows against the problems loaded now);
- ``metrics.json``: pass@k and senior share (``write_metrics``/``read_metrics``);
- ``sources.json``: where the problems came from and the command line (``write_sources``;
  ``run_problems`` loads them again).

Two readers of samples.jsonl, both on one line parser (``_parse_samples``): ``read_run``, the
validating reader every consumer uses (compare, legibility, drift, report, demo, study;
returns an ``EvalRun``); and ``read_samples``, the sampler's resume reader, which drops a
torn last line (a crash mid-write) and the rest of any incomplete problem and rewrites the
file without them. Any other defect is a ``TandemError`` naming file and line.

Also here: the outputs beside runs that commands read back (``read_legibility``,
``read_drift``) and the discovery of a senior's runs (``discover``: solo, handoff by label,
a result dir per measure by the result file its registry row names, drift) for ``compare`` and
``report``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..errors import TandemError
from ..io import atomic_write, read_json, read_jsonl, read_text, write_json
from ..outdir import refuse_other_config

log = logging.getLogger("tandem_rlvr")

CONFIG, SAMPLES, METRICS, SOURCES = "config.json", "samples.jsonl", "metrics.json", "sources.json"
SAMPLE_TYPES = {"benchmark": (str,), "problem_id": (str, int), "sample_idx": (int,), "correct": (bool,),
                "token_ids": (list,), "senior_mask": (list,)}
OPTIONAL_TYPES = {"response": (str,), "senior_share": (int, float), "tokens": (int,), "finished": (bool,),
                  "answer": (str,), "problem_fp": (str,), "reason": (str,), "junior": (str,)}
INPUTS = "inputs"  # config.json's fingerprints (``fingerprint``): models and benchmark sets


# --------------------------------------------------------------------------- sample rows
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


def problem_of(row: dict) -> tuple[str, str]:
    """(benchmark, problem_id) of a sample row: the key of every per-problem statistic."""
    return row["benchmark"], str(row["problem_id"])


def problem_counts(rows: Sequence[dict]) -> dict[tuple[str, str], tuple[int, int]]:
    """{(benchmark, problem_id): (n samples, c correct)}, in first-seen order."""
    out: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        x = out.setdefault(problem_of(r), [0, 0])
        x[0] += 1
        x[1] += int(bool(r["correct"]))
    return {k: (n, c) for k, (n, c) in out.items()}


def _parse_samples(path: Path, torn_ok: bool = False) -> tuple[list[dict], list[int], bool]:
    """(validated rows, their line numbers, whether a torn last line was dropped) of a samples file.

    With ``torn_ok`` an unparseable last line without a trailing newline is dropped with a
    warning (what a crash mid-write leaves); otherwise, and for any other line, a TandemError.
    """
    rows, lines, seen, named = [], [], set(), {}
    text = read_text(path)
    parts = text.split("\n")
    for lineno, line in enumerate(parts, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if torn_ok and lineno == len(parts) and not text.endswith("\n"):
                log.warning("%s: dropping a torn last line from an interrupted run", where)
                return rows, lines, True
            raise TandemError(f"{where}: truncated or malformed JSON line ({e.msg})") from None
        validate_sample_row(row, where)
        if "junior" in row:  # a pool's junior by the name a run records today (``recorded_names``)
            if row["junior"] not in named:
                from ..models import recorded_model

                named[row["junior"]] = recorded_model(row["junior"])
            row["junior"] = named[row["junior"]]
        key = (*problem_of(row), row["sample_idx"])
        if key in seen:
            raise TandemError(f"{where}: duplicate sample {key} (two writers on one run directory?)")
        seen.add(key)
        rows.append(row)
        lines.append(lineno)
    return rows, lines, False


def read_samples(path: Path, n: int | None = None) -> list[dict]:
    """The sampler's resume reader: validated rows of samples.jsonl (token ids as lists).

    A torn last line (a crash or a full disk mid-write) is dropped; with ``n`` given, so are
    the rows of every problem that lacks any of its n samples (the rest of a torn write), and
    the file is rewritten atomically without them, so the run regenerates those problems whole.
    """
    if not path.exists():
        return []
    rows, _, torn = _parse_samples(path, torn_ok=True)
    partial: set = set()
    if n is not None:
        have: dict[tuple[str, str], set] = {}
        for r in rows:
            have.setdefault(problem_of(r), set()).add(r["sample_idx"])
        partial = {k for k, idx in have.items() if idx != set(range(n))}
        if partial:
            log.warning("%s: regenerating %d problem(s) with missing samples", path, len(partial))
            rows = [r for r in rows if problem_of(r) not in partial]
    if torn or partial:
        with atomic_write(path) as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def append_rows(f, rows: list[dict]) -> None:
    """Append sample rows and make them durable (one write per chunk of whole problems)."""
    f.write("".join(json.dumps(r) + "\n" for r in rows))
    f.flush()
    os.fsync(f.fileno())


# --------------------------------------------------------------------------- a run
@dataclass
class EvalRun:
    """One sampling run (``tandem eval solo|handoff``): config.json and validated sample rows.

    rows[i]["token_ids"] and rows[i]["senior_mask"] are (T_i,) int64 arrays; lines[i] is
    row i's line number in samples.jsonl, for error messages.
    """

    path: Path
    config: dict
    rows: list[dict]
    lines: list[int]

    @property
    def samples_path(self) -> Path:
        return self.path / SAMPLES

    @property
    def schedule(self) -> str:
        return schedule_name(self.config)

    def where(self, i: int) -> str:
        return f"{self.samples_path}:{self.lines[i]}"

    def per_problem_correct(self) -> dict[tuple[str, str], float]:
        """{(benchmark, problem_id): fraction of its samples that are correct} (= pass@1)."""
        return {key: c / n for key, (n, c) in self.counts().items()}

    def counts(self) -> dict[tuple[str, str], tuple[int, int]]:
        """{(benchmark, problem_id): (n samples, c correct)}."""
        return problem_counts(self.rows)


def schedule_name(config: dict) -> str:
    """The schedule a run's config.json records ("senior" = a solo run)."""
    return (config.get("schedule") or {}).get("name", "senior")


def read_config(path: Path) -> dict:
    """A run's config.json as a dict (TandemError naming the file if malformed), its models read by the
    names a run records today (``recorded_names``)."""
    obj = read_json(path)
    if not isinstance(obj, dict):
        raise TandemError(f"{path}: expected a JSON object")
    return recorded_names(obj)


def recorded_names(config: dict) -> dict:
    """``config`` with its senior, junior and pool juniors as ``models.recorded_model`` names them: a run
    recorded with an absolute path into the shipped worlds (before built-in names were recorded, or by another
    install or worktree, whose path may be gone) reads as the built-in model, wherever the package lives now."""
    from ..models import recorded_model, recorded_pool_spec

    out = dict(config)
    models = out.get("models")
    if isinstance(models, dict):
        models = out["models"] = dict(models)
        if isinstance(models.get("senior"), str):
            models["senior"] = recorded_model(models["senior"])
        if isinstance(models.get("junior"), str):
            try:
                models["junior"] = recorded_pool_spec(models["junior"])
            except TandemError:  # not a spec we can read: as recorded (it then differs, by name)
                pass
    schedule = out.get("schedule")
    if isinstance(schedule, dict) and isinstance(schedule.get("pool"), dict) and \
            isinstance(schedule["pool"].get("juniors"), list):
        out["schedule"] = {**schedule, "pool": {**schedule["pool"], "juniors": [
            recorded_model(n) if isinstance(n, str) else n for n in schedule["pool"]["juniors"]]}}
    return out


def read_run(path: str | os.PathLike) -> EvalRun:
    """Read and validate a sampling run directory; any defect is a TandemError naming file and line."""
    path = Path(path)
    if not path.is_dir():
        raise TandemError(f"{path}: no such run directory")
    if not any(path.iterdir()):
        raise TandemError(f"{path}: empty run directory")
    for name in (CONFIG, SAMPLES):
        if not (path / name).is_file():
            raise TandemError(f"{path}: not an eval run directory (no {name})")
    config = read_config(path / CONFIG)
    benchmarks = config.get("benchmarks") or []
    rows, lines, _ = _parse_samples(path / SAMPLES)
    for row, lineno in zip(rows, lines, strict=True):
        where = f"{path / SAMPLES}:{lineno}"
        if benchmarks and row["benchmark"] not in benchmarks:
            raise TandemError(f"{where}: benchmark {row['benchmark']!r} is not in config.json's benchmarks "
                              f"({', '.join(benchmarks)}): a samples file from another benchmark set?")
        row["token_ids"] = np.asarray(row["token_ids"], dtype=np.int64)
        row["senior_mask"] = np.asarray(row["senior_mask"], dtype=np.int64)
        if row["token_ids"].shape != row["senior_mask"].shape:
            raise TandemError(f"{where}: token_ids and senior_mask differ in length")
    if not rows:
        raise TandemError(f"{path / SAMPLES}: no samples")
    return EvalRun(path, config, rows, lines)


def check_config(out: Path, config: dict) -> None:
    """Write a new run's config.json; refuse an existing run whose inputs or config differ.

    A run made before fingerprints were recorded is refused too: its samples cannot be checked
    against today's model and problems (docs/evaluation.md, "Fingerprints").
    """
    path = out / CONFIG
    if path.exists():
        old = read_config(path)
        if INPUTS not in old:
            raise TandemError(f"{path}: this run was made before runs recorded input fingerprints, so its samples "
                              "cannot be checked against the model and problems now; use a new --out directory")
        check_inputs(path, old[INPUTS], config[INPUTS])
    if not refuse_other_config(path, config, "use a new --out directory", ignore=(INPUTS,),
                               defaults=legacy_defaults(read_config(path)) if path.exists() else None,
                               canonical=recorded_names):
        write_json(path, config)


def legacy_defaults(config: dict) -> dict:
    """What a run recorded before a setting existed: engine ``hf`` (before --engine), task ``math`` and
    its verifier under the run's answer mode (before --task: every run was the math task)."""
    from ..tasks.answers import MathTask

    return {"engine": "hf", "task": "math", "grader": "ours",
            "verifier": MathTask(answer_mode=config.get("answer_mode", "last-box")).verifier}


def check_inputs(path: Path, old: dict, new: dict) -> None:
    """TandemError naming the first input (model, benchmark) whose fingerprint differs (a pool junior's
    role ``junior/NAME`` read by its recorded name, ``recorded_names``, on both sides)."""
    old_models, new_models = _recorded_roles(old.get("models") or {}), _recorded_roles(new.get("models") or {})
    for role in sorted(set(old_models) | set(new_models)):
        a, b = old_models.get(role), new_models.get(role)
        if a != b:
            raise TandemError(f"{path}: the {role} model's files changed since this run was sampled (fingerprint "
                              f"{a} -> {b}); its samples would be stale; use a new --out directory")
    for name in sorted(set(old.get("benchmarks") or {}) | set(new.get("benchmarks") or {})):
        a, b = (old.get("benchmarks") or {}).get(name), (new.get("benchmarks") or {}).get(name)
        if a != b:
            raise TandemError(f"{path}: benchmark {name} differs from the one this run sampled ({set_change(a, b)}); "
                              "use a new --out directory")


def _recorded_roles(models: dict) -> dict:
    from ..models import recorded_model

    return {f"junior/{recorded_model(r[len('junior/'):])}" if r.startswith("junior/") else r: fp
            for r, fp in models.items()}


def set_change(a: dict | None, b: dict | None) -> str:
    """How two problem-set fingerprints differ, in words (for one-line refusals)."""
    if not a or not b:
        return f"{'not ' if not a else ''}in one, {'not ' if not b else ''}in the other"
    if a["problems"] != b["problems"]:
        return f"{a['problems']} problems vs {b['problems']}: another --limit, or problems added or removed"
    return (f"{a['problems']} problems in both, but fingerprint {a['sha256']} vs {b['sha256']}: problems or "
            "answers edited, problems replaced or reordered")


def check_problems(rows: Sequence[dict], problems: dict, where) -> None:
    """Every row must answer the problem of its (benchmark, problem_id) as loaded now: same
    ``problem_fp`` (text and answer); ``problems`` maps that key to a ``Problem``; ``where(i)``
    names row i. TandemError naming the first row that does not."""
    from ..fingerprint import problem_fingerprint

    fps: dict = {}
    for i, r in enumerate(rows):
        key = problem_of(r)
        if key not in problems:
            raise TandemError(f"{where(i)}: problem {key[1]!r} of benchmark {key[0]!r} is not in the loaded "
                              "benchmarks: a samples file from another benchmark set?")
        if key not in fps:
            fps[key] = problem_fingerprint(problems[key])
        if r.get("problem_fp") != fps[key]:
            what = "has no problem fingerprint (an older run)" if "problem_fp" not in r else \
                "was sampled from another version of it (its text or answer changed)"
            raise TandemError(f"{where(i)}: problem {key[1]!r} of benchmark {key[0]!r} {what}; its verdicts and "
                              "prompts would not match the problem loaded now")


def write_metrics(out: Path, metrics: dict) -> None:
    write_json(Path(out) / METRICS, metrics)


def read_metrics(run_dir: str | os.PathLike) -> dict | None:
    """metrics.json of a finished run, None if it has none (yet)."""
    path = Path(run_dir) / METRICS
    return read_json(path) if path.is_file() else None


def write_sources(out: str | os.PathLike, benchmarks: Sequence[str], split: str | None) -> None:
    """``sources.json``: where the problems came from (a local file as an absolute path), so the
    legibility scorer can re-make the prompts without being told the benchmark files again, and
    the command line that made the run (``argv``, ``cwd``), for the report's provenance."""
    from ..runtime import invocation

    specs = [str(Path(b).resolve()) if Path(b).is_file() else b for b in benchmarks]
    write_json(Path(out) / SOURCES, {"benchmarks": specs, "split": split, **invocation()})


def run_problems(path: Path, config: dict, benchmarks: Sequence[str] | None = None,
                 split: str | None = None) -> tuple[list[str], dict]:
    """(benchmark specs, {(benchmark, problem_id): Problem}) of the run in ``path``: the given
    ``benchmarks``/``split``, else those of its sources.json, else config.json's names."""
    from ..tasks import load_problems

    sources = Path(path) / SOURCES  # file benchmarks as absolute paths
    recorded = read_json(sources) if sources.is_file() else {}
    specs = list(benchmarks or recorded.get("benchmarks") or config.get("benchmarks") or [])
    if split is None:
        split = recorded.get("split")
    loaded = load_problems(recorded_task(config), specs, split=split)
    return specs, {(p.benchmark, str(p.problem_id)): p for ps in loaded.values() for p in ps}


def recorded_task(config: dict):
    """The task (``tasks``) a run was sampled with, as its config.json records it (math before tasks were
    recorded; ``reason-step`` the instruction of runs from before instructions were recorded)."""
    from ..tasks import task_for_eval

    return task_for_eval(config.get("task", "math"), instruction=config.get("instruction", "reason-step"),
                         answer_mode=config.get("answer_mode", "last-box"), grader=config.get("grader", "ours"))


def check_same_benchmarks(runs: dict[str, EvalRun]) -> None:
    """Runs compared in one table must cover the benchmarks of the first run, no more, no less."""
    (ref_name, ref), *rest = runs.items()
    ref_b = {r["benchmark"] for r in ref.rows}
    for run in dict(rest).values():
        for i, r in enumerate(run.rows):
            if r["benchmark"] not in ref_b:
                raise TandemError(f"{run.where(i)}: benchmark {r['benchmark']!r} is not in the benchmark set of "
                                  f"{ref_name} ({', '.join(sorted(ref_b))}): a samples file from another "
                                  "benchmark set?")
        missing = ref_b - {r["benchmark"] for r in run.rows}
        if missing:
            raise TandemError(f"{run.samples_path}: no samples of {', '.join(sorted(missing))}, which {ref_name} has")


# --------------------------------------------------------------------------- results beside runs
def read_legibility(path: str | os.PathLike) -> tuple[dict, dict[tuple[str, str], dict]]:
    """legibility.json's content and {(benchmark, problem_id): per-problem row} of a legibility dir."""
    path = Path(path)
    result = read_json(path / "legibility.json", f"{path}: not a legibility directory (no legibility.json)")
    rows = read_jsonl(path / "per_problem.jsonl") if (path / "per_problem.jsonl").is_file() else []
    return result, {problem_of(r): r for r in rows}


def read_drift(path: str | os.PathLike) -> dict:
    """drift.json's content of a ``tandem eval drift`` directory."""
    path = Path(path)
    return read_json(path / "drift.json", f"{path}: not a drift directory (no drift.json)")


# --------------------------------------------------------------------------- discovery
@dataclass
class Senior:
    """Where one senior's results live: solo run, handoff runs by label, and a result dir per measure
    (``eval.measure.registry``: {measure name: dir})."""

    name: str
    solo: Path | None = None
    handoff: dict[str, Path] = field(default_factory=dict)
    measures: dict[str, Path] = field(default_factory=dict)


def split_named(spec: str, what: str = "RUN") -> tuple[str, Path]:
    """'NAME=DIR' -> (NAME, DIR); 'DIR' -> (DIR's base name, DIR)."""
    name, sep, d = spec.partition("=")
    if not sep:
        d, name = spec, Path(spec).resolve().name
    if not name or not d:
        raise TandemError(f"bad {what} {spec!r}: expected NAME=DIR or DIR")
    return name, Path(d)


def classify(path: Path, results: Mapping[str, str] = {}) -> tuple[str, str] | None:
    """('solo'|'handoff'|'drift'|a measure's name, label) of an eval directory, None if none; ``results``
    maps a measure's result file to its name (``registry.result_files``)."""
    if (path / SAMPLES).is_file() and (path / CONFIG).is_file():
        return ("solo", "solo") if schedule_name(read_config(path / CONFIG)) == "senior" else ("handoff", path.name)
    for file, kind in {**results, "drift.json": "drift"}.items():
        if (path / file).is_file():
            return kind, path.name
    return None


def discover(run_specs: Sequence[str], solo=(), handoff=(), measures: Mapping[str, Sequence[str]] = {},
             results: Mapping[str, str] = {}) -> tuple[dict[str, Senior], Path | None]:
    """Seniors from RUN specs plus explicit entries (``measures``: {measure: [NAME=DIR, ...]}); also the drift
    dir found among them (or None). ``results``: {result file: measure name} that marks a measure's dir."""
    seniors: dict[str, Senior] = {}
    drift = None
    for spec in run_specs:
        name, d = split_named(spec)
        if not d.is_dir():
            raise TandemError(f"{d}: no such run directory")
        if not any(d.iterdir()):
            raise TandemError(f"{d}: empty run directory")
        s = seniors.setdefault(name, Senior(name))
        own = classify(d, results)
        found = [(d, own)] if own else [(c, classify(c, results)) for c in sorted(d.iterdir()) if c.is_dir()]
        found = [(p, k) for p, k in found if k]
        if not found:
            files = ", ".join(["samples.jsonl", *results, "drift.json"])
            raise TandemError(f"{d}: no eval results (none of {files} in it or its subdirectories)")
        for p, (kind, label) in found:
            if kind == "solo":
                if s.solo is not None:
                    raise TandemError(f"{d}: two solo runs ({s.solo}, {p}); pass --solo {name}=DIR")
                s.solo = p
            elif kind == "handoff":
                s.handoff[label] = p
            elif kind == "drift":
                drift = p
            else:
                s.measures[kind] = p
    for spec in solo:
        name, d = split_named(spec, "--solo")
        seniors.setdefault(name, Senior(name)).solo = d
    for spec in handoff:
        name, d = split_named(spec, "--handoff")
        name, _, label = name.partition(":")
        seniors.setdefault(name, Senior(name)).handoff[label or d.resolve().name] = d
    for kind, specs in measures.items():
        for spec in specs:
            name, d = split_named(spec, f"--{kind}")
            seniors.setdefault(name, Senior(name)).measures[kind] = d
    if not seniors:
        raise TandemError("nothing to compare: give RUN directories or --solo/--handoff/--<measure> NAME=DIR")
    return seniors, drift
