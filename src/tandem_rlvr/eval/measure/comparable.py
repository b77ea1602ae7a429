"""What may share a table: the checks ``compare`` and ``drift`` run before they pair runs.

Two sampling runs in one table (the solo runs; the handoff runs of one label) and in one
paired t-test must measure the same quantity on the same problems. So:

- **settings** (``COMPARED``) must agree: schedule (name, p, K, ...), sampling (temperature,
  top-p, top-k, max new tokens), n, template, instruction, the
  models' compute dtype (where both runs record it); for
  handoff runs the junior, by the fingerprint of its files (by path for runs made before
  fingerprints); and per benchmark the problem set (count and fingerprint: another
  ``--limit``, an edited or reordered copy). ``settings_differences`` lists every difference,
  one line each. Exempt, because they do not change what is measured: the senior (what is
  compared), ``seed`` (independent draws of the same quantity), ``engine`` (the same
  distribution drawn with other random streams), ``ks`` (compare recomputes pass@k) and the
  paths of the models (their fingerprints are compared instead).
- **problems**: a (benchmark, problem id) must be one problem (text and gold answer, by the
  rows' ``problem_fp``) in every run that has it (``check_same_problems``). A conflict is
  always refused: pairing different problems means nothing.
- **legibility**: the juniors that scored the seniors must be one model
  (``legibility_differences``).

- **verdicts** (``VERDICTS``: task, verifier, answer mode; a run made before task and verifier were
  recorded is the math task's) must agree among every run of one comparison
  (``refuse_mixed_verdicts``), ``--allow-mixed`` or not: a correct under one verifier
  and a correct under another are not one quantity (the README: verifiers are never mixed).

``compare --allow-mixed`` turns the other settings differences into warnings recorded in compare.json
(``mixed``); runs made before fingerprints were recorded are read with a warning that their
problems cannot be checked.
"""

from __future__ import annotations

import json
import logging

from ...errors import TandemError
from ..run_files import INPUTS, EvalRun, legacy_defaults, problem_of, set_change

log = logging.getLogger("tandem_rlvr")

COMPARED = ("schedule", "sampling", "n", "template", "instruction", "dtype")  # --allow-mixed may mix these
VERDICTS = ("task", "verifier", "answer_mode")  # what makes a sample's verdict: never mixed
RECORDED_LATER = ("dtype",)  # compared only where both runs record it
EXEMPT = ("models", "seed", "engine", "ks")


def _text(x) -> str:
    return json.dumps(x, sort_keys=True) if isinstance(x, (dict, list)) else str(x)


def _differ(a, b) -> str:
    """``a vs b`` in words; of two mappings only the fields that differ (a schedule's protocol, say, is
    named however long the rest of it is)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        a, b = {k: a.get(k) for k in keys}, {k: b.get(k) for k in keys}
    return f"{_text(a)} vs {_text(b)}"


def model_identity(config: dict, role: str) -> str:
    """A run's ``role`` model in words: its short name and, where recorded, its files' fingerprint."""
    from ...models import model_name

    fp = ((config.get(INPUTS) or {}).get("models") or {}).get(role)
    name = model_name((config.get("models") or {}).get(role))
    return f"{name} [{fp}]" if fp else name


def _setting(config: dict, key: str):
    """A run's recorded ``key``; the task and verifier of a run made before they were recorded are math's."""
    if key in ("task", "verifier") and key not in config:
        return legacy_defaults(config)[key]
    return config.get(key)


def _same_model(a: dict, b: dict, role: str) -> bool:
    fa = ((a.get(INPUTS) or {}).get("models") or {}).get(role)
    fb = ((b.get(INPUTS) or {}).get("models") or {}).get(role)
    if fa and fb:
        return fa == fb
    return (a.get("models") or {}).get(role) == (b.get("models") or {}).get(role)


def _pool_roles(config: dict) -> list[str]:
    """The ``junior/NAME`` roles of a pool run's fingerprints (``config.EvalConfig.model_roles``)."""
    return sorted(r for r in ((config.get(INPUTS) or {}).get("models") or {}) if r.startswith("junior/"))


def _problem_sets(run: EvalRun) -> dict[str, dict]:
    """{benchmark: {"problems": count, "sha256": fingerprint or None}} of a run."""
    counts: dict[str, set] = {}
    for r in run.rows:
        counts.setdefault(r["benchmark"], set()).add(str(r["problem_id"]))
    recorded = (run.config.get(INPUTS) or {}).get("benchmarks") or {}
    return {b: {"problems": len(ids), "sha256": (recorded.get(b) or {}).get("sha256")} for b, ids in counts.items()}


def settings_differences(runs: dict[str, EvalRun], what: str, handoff: bool) -> list[str]:
    """One line per setting in which a run differs from the first of ``runs`` (see the module docstring)."""
    (ref_name, ref), *rest = runs.items()
    ref_sets = _problem_sets(ref)
    out = []
    for name, run in rest:
        pair = f"{ref_name} and {name}"
        for key in COMPARED:
            a, b = (_setting(ref.config, key), _setting(run.config, key))
            if a != b and not (key in RECORDED_LATER and (a is None or b is None)):
                out.append(f"{what} runs {pair} differ in {key} ({_differ(a, b)})")
        if handoff and not _same_model(ref.config, run.config, "junior"):
            out.append(f"{what} runs {pair} have different juniors ({model_identity(ref.config, 'junior')} vs "
                       f"{model_identity(run.config, 'junior')})")
        for role in _pool_roles(ref.config) if handoff else ():  # the juniors of a pool (the pool itself: schedule)
            fa, fb = (((c.get(INPUTS) or {}).get("models") or {}).get(role) for c in (ref.config, run.config))
            if fa != fb:
                out.append(f"{what} runs {pair} have different files for pool junior {role.partition('/')[2]} "
                           f"({fa} vs {fb})")
        for bench, s in _problem_sets(run).items():
            r = ref_sets.get(bench)
            if r is None:
                continue  # check_same_benchmarks names benchmarks that are not shared
            if r["problems"] != s["problems"] or (r["sha256"] and s["sha256"] and r["sha256"] != s["sha256"]):
                out.append(f"{what} runs {pair} differ in benchmark {bench} ({set_change(r, s)})")
    return out


def refuse_mixed_verdicts(runs: dict[str, EvalRun]) -> None:
    """TandemError if two of ``runs`` were graded differently (``VERDICTS``); no flag allows it."""
    if not runs:
        return
    (ref_name, ref), *rest = runs.items()
    found = [f"runs {ref_name} and {name} differ in {key} ({_differ(a, b)})" for name, run in rest
             for key in VERDICTS if (a := _setting(ref.config, key)) != (b := _setting(run.config, key))]
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise TandemError(f"{found[0]}{more}: verdicts of different verifiers are never mixed in one table or "
                          "t-test, --allow-mixed or not; compare runs of one task, verifier and answer mode")


def check_same_problems(runs: dict[str, EvalRun]) -> None:
    """TandemError if one (benchmark, problem id) is two different problems among ``runs``; a
    warning per run without problem fingerprints (made before they were recorded)."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (fingerprint, run name)
    for name, run in runs.items():
        if not any("problem_fp" in r for r in run.rows):
            log.warning("%s: no problem fingerprints (a run made before they were recorded); whether its problems "
                        "are those of the other runs is not checked", run.samples_path)
            continue
        for i, r in enumerate(run.rows):
            key, fp = problem_of(r), r.get("problem_fp")
            other = seen.setdefault(key, (fp, name))
            if other[0] != fp:
                raise TandemError(f"{run.where(i)}: problem {key[1]!r} of {key[0]} is not the problem {other[1]} has "
                                  f"under that id (fingerprint {fp} vs {other[0]}): runs sampled from different "
                                  "versions of a benchmark cannot be paired")


def legibility_differences(juniors: dict[str, dict]) -> list[str]:
    """One line per legibility result scored by another junior than the first ({senior: its config})."""
    (ref_name, ref), *rest = juniors.items()

    def ident(cfg: dict) -> str | None:
        return (cfg.get(INPUTS) or {}).get("junior") or cfg.get("junior")

    out = []
    for name, cfg in rest:  # results before --ce-protocol existed were "ids"
        if ref.get("ce_protocol", "ids") != cfg.get("ce_protocol", "ids"):
            out.append(f"legibility of {ref_name} and {name} was scored under different --ce-protocol "
                       f"({ref.get('ce_protocol', 'ids')} vs {cfg.get('ce_protocol', 'ids')})")
        a, b = (ref.get(INPUTS) or {}).get("junior"), (cfg.get(INPUTS) or {}).get("junior")
        same = a == b if a and b else ref.get("junior") == cfg.get("junior")
        if not same:
            out.append(f"legibility of {ref_name} and {name} was scored by different juniors ({ident(ref)} vs "
                       f"{ident(cfg)})")
    return out


def refuse_or_warn(differences: list[str], allow_mixed: bool) -> list[str]:
    """Without ``allow_mixed`` a TandemError on the first difference; with it, warnings. Returns them."""
    if differences and not allow_mixed:
        more = f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""
        raise TandemError(f"{differences[0]}{more}: not comparable in one table or t-test; use runs made with the "
                          "same settings, or --allow-mixed to compare them anyway")
    for d in differences:
        log.warning("comparing anyway (--allow-mixed): %s", d)
    return differences
