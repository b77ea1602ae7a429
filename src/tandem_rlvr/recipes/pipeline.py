"""The pipeline the recipes share: train the three methods, evaluate a senior, run the battery.

- ``train_method``: one senior trained from a preset (``rl.train``; a finished run with the
  same config is not trained again);
- ``evaluate_senior``: a senior's evaluation directory: ``solo/``, per junior a ``handoff[-LABEL]/``
  run (paragraph round-robin), and every registered measure of the solo samples
  (``eval.measure.registry``) whose inputs are given: the junior's ``legibility[-LABEL]/``, with a
  judge ``cot-rating/``;
- ``battery``: drift of seniors' solo samples from a junior's, then the comparison tables
  (``compare``: pass@k, every measure found, drift, paired one-sided t-tests against a baseline).

``QUICK_TRAIN`` is the training of every recipe's ``--quick`` mode (a smoke test of the wiring).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from ..config.methods import PAPER_METHODS as METHODS  # noqa: F401 (the paper's three arms; the recipes' list)
# --quick: a seconds-long training run on the shipped world (two steps: its numbers mean nothing); 96 new
# tokens hold a whole solution of the world's models.
QUICK_TRAIN = dict(max_steps=2, eval_every=1, save_every=1, val_size=8, limit=200, max_new_tokens=96)


def world_paths(world: str):
    """The named built-in world as the package ships it (``world/shipped.py``): the demo and the study,
    ``--quick`` or not, start at once from the models the docs measured, never from a build."""
    from ..world.shipped import shipped_world

    return shipped_world(world)


def eval_settings(limit: int, n: int, max_tokens: int, temperature: float = 1.0, split: str = "test",
                  task: str = "math", benchmark: str = "tiny"):
    """The ``EvalConfig`` of the recipes' evaluations: a tiny world's benchmark (``tiny`` under the math
    task, ``tiny-code`` under the code task), plain prompts (``evaluate_senior`` fills in the models and
    the mode)."""
    from ..config import EvalConfig
    from ..decoding.sampling import SamplingParams

    return EvalConfig.from_keys(benchmarks=[benchmark], split=split, template="plain", limit=limit, n=n, task=task,
                                sampling=SamplingParams(temperature=temperature, max_new_tokens=max_tokens))


def method_config(preset: str, method: str, senior: str, junior: str | None, run_dir: Path, overrides: dict):
    """The ``TrainConfig`` of one senior trained with ``method`` into ``run_dir`` (``overrides`` over the
    preset), once a run already in ``run_dir`` with other settings is refused, naming the recipes' own
    flag (``--out``; ``tandem train``'s check would point the user to ``--output-dir``). No model loads:
    a recipe checks every run this way before it starts the first."""
    from ..config import load_train_config
    from ..outdir import refuse_other_config
    from ..rl.run_identity import FINGERPRINTS, check_models, stored_config

    cfg = load_train_config(preset, overrides=dict(method=method, senior=senior, junior=junior,
                                                   output_dir=str(run_dir), **overrides))
    stored = stored_config(cfg)
    check_models(Path(run_dir) / "config.json", stored)  # a run recorded without fingerprints passes
    refuse_other_config(Path(run_dir) / "config.json", stored, "use another --out", ignore=("output_dir", FINGERPRINTS))
    return cfg


def train_method(preset: str, method: str, senior: str, junior: str | None, run_dir: Path, overrides: dict,
                 print_fn: Callable = print) -> dict:
    """Train one senior with ``method`` into ``run_dir`` (``method_config``'s settings and check)."""
    from ..rl.train import train

    return train(method_config(preset, method, senior, junior, run_dir, overrides), print_fn=print_fn)


def checkpoint(run_dir: Path, prefer: str) -> Path:
    """The run's ``prefer`` checkpoint ("best" or "final"), else its final one."""
    return run_dir / prefer if (run_dir / prefer).is_dir() else run_dir / "final"


def _named(kind: str, label: str) -> str:
    return f"{kind}-{label}" if label else kind


def evaluate_senior(model: str, d: Path, juniors: dict[str, str], ev, skip_done: bool = False,
                    progress: bool = True, judge=None) -> dict[str, dict]:
    """Evaluate ``model`` into ``d``: solo, then per junior (``{label: model}``; label "" = no
    suffix) a handoff run, then every registered measure of the solo samples whose inputs are given
    (``eval.measure.registry``): one needing a junior once per junior (``legibility[-LABEL]/``), one
    needing a judge (``judge``, a ``rewards.judge.JudgeSettings``) only with one (``cot-rating/``).

    ``ev``: ``eval_settings``'s EvalConfig. With ``skip_done`` a finished run is kept once its inputs are
    checked, without loading a model (``sampler.finished_metrics``: the models' and problems' fingerprints;
    a changed input is refused, naming it; the caller guarantees the sampling settings are the same), and
    a finished measure dir is kept when its row says it is current (``Measure.is_current``). Returns
    metrics per run name.
    """
    from ..eval.measure.registry import MeasureInputs, measures
    from ..eval.sample.sampler import evaluate, finished_metrics

    def sample(name: str, junior: str | None) -> dict:
        cfg = ev.with_keys(senior=model, junior=junior, mode="handoff" if junior else "solo",
                           schedule="paragraph-roundrobin")
        done = finished_metrics(cfg, d / name) if skip_done else None
        return done if done is not None else evaluate(cfg, d / name, progress=progress)

    metrics = {"solo": sample("solo", None)}
    for label, junior in juniors.items():
        metrics[_named("handoff", label)] = sample(_named("handoff", label), junior)
    for m in measures():
        for label, junior in (juniors.items() if "junior" in m.needs else [("", None)]):
            inputs = MeasureInputs(d / "solo", d / m.dir_name(label), junior=junior, judge=judge,
                                   benchmarks=tuple(ev.problems.benchmarks), split=ev.problems.split, progress=progress)
            if m.ready(inputs) and not (skip_done and m.is_current(inputs.out, inputs)):
                m.compute(inputs)
    return metrics


def battery(seniors: dict[str, Path], handoffs: Sequence[str], legibility: str, junior_samples: Path,
            drifted: Sequence[str], drift_dir: Path, compare_dir: Path, baseline: str | None,
            skip_done: bool = False) -> None:
    """Drift and comparison tables over evaluated seniors (``{name: evaluate_senior's dir}``).

    Drift: the solo samples of the ``drifted`` seniors against ``junior_samples`` (a solo run of
    the junior), tracking GRPO's over-emitted tokens and Tandem's recovery when they are among
    them. Comparison: each senior's solo run, its ``handoffs`` runs and the result dir of every
    registered measure it has (``Measure.dir_name``; ``legibility``, the legibility dir's name,
    says which junior's: ``legibility-LABEL`` picks LABEL for every measure scored per junior),
    with paired t-tests against ``baseline``. ``skip_done`` keeps results already written.
    """
    from ..eval.measure.compare import run_compare
    from ..eval.measure.drift import run_drift
    from ..eval.measure.registry import measures
    from ..eval.report.tables import write_compare_md, write_drift_md

    if not (skip_done and (drift_dir / "drift.json").is_file()):
        write_drift_md(drift_dir, run_drift(junior_samples, {n: seniors[n] / "solo" for n in drifted}, drift_dir,
                                            reference="grpo" if "grpo" in drifted else None,
                                            candidate="tandem" if "tandem" in drifted else None))
    label = legibility.partition("-")[2]
    found = {m.name: [f"{n}={d / m.dir_name(label)}" for n, d in seniors.items()
                      if (d / m.dir_name(label) / m.result_file).is_file()] for m in measures()}
    if not (skip_done and (compare_dir / "compare.json").is_file()):
        write_compare_md(compare_dir, run_compare(
            [], compare_dir, solo=[f"{n}={d / 'solo'}" for n, d in seniors.items()],
            handoff=[f"{n}:{h}={d / h}" for n, d in seniors.items() for h in handoffs],
            measures={k: v for k, v in found.items() if v}, drift=str(drift_dir), baseline=baseline))
