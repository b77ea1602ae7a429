"""The elegance study (the replication's third extension): with a judge bonus for elegant correct
solutions, are Tandem RLVR's rollouts, and its trained senior on its own, less elegant than GRPO's?

    tandem study elegance --problems FILE --judge MODEL_OR_URL --senior S --out DIR [--preset P] [--steps N]

Input: problems with labelled solution paths (JSON lines; ``data/files/elegance/README.md``,
``--problems sample`` is the shipped four-problem example). Steps, each skipped when its result
file exists (rerun the command to resume):

1. a seeded split: ``test_size`` problems for the solo evaluation, the rest for training
   (``OUT/data/{train,test}.jsonl``: problem_id, problem, answer);
2. judge calibration: the judge grades every labelled path; its agreement with the labels
   (overall and per label) says how far its verdicts can be trusted (``OUT/calibration.json``);
3. training, for each method (grpo, tandem): ``tandem train`` from the preset with
   ``reward_terms: [correct, judge:COEF]`` and the judge (``OUT/runs/<method>``);
4. the training rollouts' elegance, from each run's log: per step ``rewards/correct/mean`` (the
   rollouts' accuracy), ``rewards/judge/mean`` (the share of rollouts both correct and judged
   elegant) and ``judge/mean_verdict`` (the share judged elegant among the correct ones the judge
   read), pooled over steps weighted by the rollouts they cover;
5. the solo evaluation afterwards: the base model and each trained senior (``final/``) sample
   ``n`` solutions per test problem alone (``OUT/eval/<name>/solo``, ``tandem eval``'s run
   format), and the judge grades every correct one (``OUT/eval/<name>/elegance.json``);
6. ``OUT/elegance.json`` and ``OUT/elegance.md``: both tables.

Every setting is checked before anything is written (the training configs of both methods, the
judge's settings, the evaluation's), and a start that fails before the calibration leaves nothing
behind, so the corrected command is not refused as "another study".

One judge, one verdict cache (``OUT/judge_cache.sqlite`` for calibration and evaluation; each
training run keeps its own), greedy, so a resumed study pays for no verdict twice.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config.methods import method_kind
from ..errors import TandemError
from ..io import atomic_write, jsonl_objects, read_json, write_json
from ..outdir import config_diff, output_dir, remove_failed_start

LABELS = ("elegant", "bashy")
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "files" / "elegance" / "sample.jsonl"


@dataclass
class EleganceSettings:
    """Everything that shapes the study's numbers; written to OUT/settings.json (a resume must match)."""

    problems: str
    judge: str
    senior: str = "tiny"
    junior: str | None = None  # tandem's junior (default: the senior's checkpoint, self-pairing)
    preset: str = "tiny"
    methods: list[str] = field(default_factory=lambda: ["grpo", "tandem"])
    coef: float = 0.5  # judge term coefficient: correct x (1 + coef x verdict), the replication's x1.5
    judge_template: str = "elegance"
    judge_parser: str = "elegant-bashy"
    judge_max_tokens: int = 512
    train: dict = field(default_factory=dict)  # TrainConfig overrides over the preset
    test_size: int = 2
    n: int = 4  # solo samples per test problem
    temperature: float = 0.7
    max_tokens: int = 1024
    template: str = "auto"
    seed: int = 0


def load_paths(path: str) -> list[dict]:
    """The problems of a labelled-paths file (module docstring); one-line errors naming file:line."""
    p = SAMPLE if path == "sample" else Path(path).expanduser()
    if not p.is_file():
        raise TandemError(f"--problems: no such file {path}")
    rows, seen = [], set()
    for where, r in jsonl_objects(p):
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str) and r[k].strip()
                                              for k in ("problem_id", "problem", "answer")):
            raise TandemError(f"{where}: needs non-empty strings problem_id, problem and answer")
        paths = r.get("paths")
        if not isinstance(paths, list) or not paths or not all(
                isinstance(x, dict) and x.get("label") in LABELS and isinstance(x.get("solution"), str) for x in paths):
            raise TandemError(f"{where}: paths must be a non-empty list of {{label: elegant|bashy, solution: text}}")
        if r["problem_id"] in seen:
            raise TandemError(f"{where}: problem_id {r['problem_id']!r} given twice")
        seen.add(r["problem_id"])
        rows.append(r)
    return rows


def _judge(s: EleganceSettings, out: Path):
    from ..engines.judge_local import open_judge
    from ..rewards.judge import JudgeSettings

    return open_judge(JudgeSettings(s.judge, s.judge_template, s.judge_parser, max_tokens=s.judge_max_tokens),
                      cache=out / "judge_cache.sqlite")


def calibrate(judge, rows: list[dict]) -> dict:
    """The judge's agreement with the labelled paths: overall, per label, and how many it failed to read."""
    items = [(r["problem"], x["solution"], r["answer"], x["label"]) for r in rows for x in r["paths"]]
    verdicts, stats = judge.verdicts([i[:3] for i in items])
    out = {"paths": len(items), "failures": stats.failed}
    for label in (None, *LABELS):
        hits = [v == float(lab == "elegant") for (*_, lab), v in zip(items, verdicts, strict=True)
                if v is not None and label in (None, lab)]
        out[f"agreement_{label}" if label else "agreement"] = sum(hits) / len(hits) if hits else None
    return out


def training_elegance(run_dir: Path) -> dict:
    """Pooled over a run's logged steps: accuracy, elegant-correct share, elegant share among judged correct."""
    from ..rl.callbacks import read_log

    steps = [r for r in read_log(run_dir / "log.jsonl") if "rewards/judge/mean" in r]
    if not steps:
        return {"steps": 0}
    read = [r.get("judge/asked", 0.0) - r.get("judge/failures", 0.0) for r in steps]
    elegant = sum(r.get("judge/mean_verdict", 0.0) * k for r, k in zip(steps, read, strict=True))
    return {"steps": len(steps), "accuracy": sum(r["rewards/correct/mean"] for r in steps) / len(steps),
            "elegant_correct_share": sum(r["rewards/judge/mean"] for r in steps) / len(steps),
            "elegant_share_of_correct": elegant / sum(read) if sum(read) else None,
            "judged": int(sum(read)), "judge_failures": int(sum(r.get("judge/failures", 0.0) for r in steps))}


def solo_elegance(judge, samples: list[dict], answers: dict[str, tuple[str, str]]) -> dict:
    """Accuracy and elegance of a solo evaluation's samples (the judge reads the correct ones)."""
    correct = [r for r in samples if r["correct"]]
    items = [(answers[r["problem_id"]][0], r["response"], answers[r["problem_id"]][1]) for r in correct]
    verdicts, stats = judge.verdicts(items) if items else ([], None)
    ok = [v for v in verdicts if v is not None]
    return {"samples": len(samples), "accuracy": len(correct) / len(samples) if samples else None,
            "elegant_correct_share": sum(ok) / len(samples) if samples else None,
            "elegant_share_of_correct": sum(ok) / len(ok) if ok else None, "judged": len(ok),
            "judge_failures": stats.failed if stats else 0}


def _train_overrides(s: EleganceSettings, out: Path, method: str) -> dict:
    """The TrainConfig keys of ``method``'s training run over the preset."""
    return dict(dataset=str(out / "data" / "train.jsonl"), dataset_split=None, seed=s.seed,
                reward_terms=f"correct,judge:{s.coef:g}", judge=s.judge, judge_template=s.judge_template,
                judge_parser=s.judge_parser, judge_max_tokens=s.judge_max_tokens, **s.train)


def _eval_config(s: EleganceSettings, out: Path, model: str):
    from ..config import EvalConfig
    from ..decoding.sampling import SamplingParams

    return EvalConfig.from_keys(senior=model, benchmarks=[str(out / "data" / "test.jsonl")], template=s.template,
                                n=s.n, seed=s.seed, sampling=SamplingParams(s.temperature, 1.0, 0, s.max_tokens))


def _check_before_writing(s: EleganceSettings, out: Path) -> None:
    """Every setting of the study's runs, validated as they will be built (nothing is written)."""
    from ..config import load_train_config
    from ..rewards.judge import JudgeSettings

    output_dir(out, "--out", create=False)
    JudgeSettings(s.judge, s.judge_template, s.judge_parser, max_tokens=s.judge_max_tokens)
    for method in s.methods:
        load_train_config(s.preset, overrides=dict(method=method, senior=s.senior,
                                                   output_dir=str(out / "runs" / method),
                                                   junior=s.junior if method_kind(method).uses_junior else None,
                                                   **_train_overrides(s, out, method)))
    _eval_config(s, out, s.senior)


def run_elegance(out: str | Path, s: EleganceSettings, print_fn=print) -> dict:
    """Run (or finish) the study into ``out``; return its result (also OUT/elegance.json)."""
    rows = load_paths(s.problems)
    if not 0 < s.test_size < len(rows):
        raise TandemError(f"--test-size must be in [1, {len(rows) - 1}] for {len(rows)} problems, got {s.test_size}")
    _check_before_writing(s, Path(out).expanduser())
    dir_was_new = not Path(out).expanduser().exists()
    out = output_dir(out, "--out")
    fresh = not (out / "settings.json").is_file()
    _check_settings(out, s)
    try:
        return _run(out, s, rows, print_fn)
    except BaseException:
        if fresh and not (out / "calibration.json").is_file():  # nothing measured yet: leave no study behind
            import shutil

            shutil.rmtree(out / "data", ignore_errors=True)
            remove_failed_start(out, ["settings.json", "judge_cache.sqlite"], dir_was_new)
        raise


def _run(out: Path, s: EleganceSettings, rows: list[dict], print_fn) -> dict:
    from ..eval.run_files import read_samples
    from ..eval.sample.sampler import evaluate
    from .pipeline import train_method

    order = list(range(len(rows)))
    random.Random(s.seed).shuffle(order)
    split = {"test": [rows[i] for i in sorted(order[:s.test_size])],
             "train": [rows[i] for i in sorted(order[s.test_size:])]}
    for name, part in split.items():
        if not (out / "data" / f"{name}.jsonl").is_file():
            (out / "data").mkdir(exist_ok=True)
            with atomic_write(out / "data" / f"{name}.jsonl") as f:
                f.writelines(json.dumps({k: r[k] for k in ("problem_id", "problem", "answer")}) + "\n" for r in part)
    judge = _judge(s, out)
    try:
        if not (out / "calibration.json").is_file():
            print_fn(f"elegance: judge calibration on {sum(len(r['paths']) for r in rows)} labelled paths")
            write_json(out / "calibration.json", calibrate(judge, rows))
        trained = {}
        for method in s.methods:
            run = out / "runs" / method
            print_fn(f"elegance: training {method}")
            train_method(s.preset, method, s.senior, s.junior if method_kind(method).uses_junior else None, run,
                         _train_overrides(s, out, method), print_fn=lambda *a, **k: None)
            trained[method] = training_elegance(run)
        answers = {r["problem_id"]: (r["problem"], r["answer"]) for r in split["test"]}
        solo = {}
        for name, model in {"base": s.senior, **{m: str(out / "runs" / m / "final") for m in s.methods}}.items():
            d = out / "eval" / name
            if not (d / "elegance.json").is_file():
                print_fn(f"elegance: solo evaluation of {name}")
                evaluate(_eval_config(s, out, model), d / "solo", progress=False)
                samples = read_samples(d / "solo" / "samples.jsonl")
                write_json(d / "elegance.json", solo_elegance(judge, samples, answers))
            solo[name] = read_json(d / "elegance.json")
    finally:
        judge.close()
    result = {"settings": asdict(s), "calibration": read_json(out / "calibration.json"), "training": trained,
              "solo": solo}
    write_json(out / "elegance.json", result)
    with atomic_write(out / "elegance.md") as f:
        f.write(to_markdown(result))
    print_fn((out / "elegance.md").read_text(encoding="utf-8"))
    return result


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def to_markdown(r: dict) -> str:
    c, s = r["calibration"], r["settings"]
    lines = ["# Elegance study", "",
             f"Judge `{s['judge']}` (template `{s['judge_template']}`, parser `{s['judge_parser']}`); reward "
             f"correct x (1 + {s['coef']:g} x verdict); senior `{s['senior']}`, preset `{s['preset']}`.", "",
             f"Judge calibration on {c['paths']} labelled paths: agreement {_f(c['agreement'])} (elegant "
             f"{_f(c['agreement_elegant'])}, bashy {_f(c['agreement_bashy'])}), {c['failures']} unread.", "",
             "## Training rollouts (pooled over logged steps)", "",
             "| method | steps | accuracy | elegant & correct | elegant share of correct | judged | judge failures |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for m, t in r["training"].items():
        lines.append(f"| {m} | {t['steps']} | {_f(t.get('accuracy'))} | {_f(t.get('elegant_correct_share'))} | "
                     f"{_f(t.get('elegant_share_of_correct'))} | {t.get('judged', 0)} | {t.get('judge_failures', 0)} |")
    lines += ["", f"## Solo evaluation afterwards ({s['n']} samples per test problem)", "",
              "| senior | samples | accuracy | elegant & correct | elegant share of correct | judged "
              "| judge failures |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for m, e in r["solo"].items():
        lines.append(f"| {m} | {e['samples']} | {_f(e['accuracy'])} | {_f(e['elegant_correct_share'])} | "
                     f"{_f(e['elegant_share_of_correct'])} | {e['judged']} | {e['judge_failures']} |")
    return "\n".join(lines) + "\n"


def _check_settings(out: Path, s: EleganceSettings) -> None:
    path, mine = out / "settings.json", asdict(s)
    if path.is_file() and config_diff(read_json(path), mine):
        raise TandemError(f"{out} holds an elegance study with other settings ({path}); use another --out")
    write_json(path, mine)
