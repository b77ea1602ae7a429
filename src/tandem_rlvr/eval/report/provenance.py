"""The report's "Provenance" section: full model paths, sampling settings and command lines.

Tables and legends name models briefly (``models.model_name``); this section, at the end of
the report, says exactly what each result came from:

- the sampling settings shared by the sampling runs (once, when every run agrees; per run
  otherwise): temperature, top-p, top-k, max new tokens, n, seed, template, benchmarks;
- per senior, each run directory with its full senior and junior specs, the fingerprints of
  their files and of the benchmark problem sets (``fingerprint``; "not recorded" for runs
  made before that), and the command that made it (``argv`` and ``cwd``, recorded by ``runtime.invocation`` in
  sources.json,
  each measure's result file (legibility.json, cot_rating.json, ...), drift.json and a training run's
  summary.json; "not recorded" for runs made before that); a measure's result says what made it
  through its registry row's ``about`` (the junior; the judge);
- the drift directory and the training runs, the same way.

Lists and code spans, not tables: the report's tables hold short names only.
"""

from __future__ import annotations

import html
import json
import shlex
from pathlib import Path

from ..measure.registry import measures, sections


def _read(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _code(x) -> str:
    return f"<code>{html.escape(str(x))}</code>"


def _command(rec: dict) -> str:
    """'command <code>tandem ...</code> in <code>cwd</code>' from a record with argv/cwd."""
    argv = rec.get("argv")
    if not argv:
        return "command not recorded"
    argv = [Path(argv[0]).name, *argv[1:]]
    return f"command {_code(shlex.join(argv))} in {_code(rec.get('cwd', '?'))}"


def _models(models: dict) -> str:
    return ", ".join(f"{role} {_code(spec)}" for role, spec in (models or {}).items() if spec)


def _fingerprints(cfg: dict) -> str:
    """'fingerprints: senior <code>..</code>, benchmark b (30 problems) <code>..</code>' of a run's config."""
    inputs = cfg.get("inputs")
    if not inputs:
        return "fingerprints not recorded"
    parts = [f"{role} {_code(fp)}" for role, fp in (inputs.get("models") or {}).items() if fp]
    parts += [f"{html.escape(b)} ({s['problems']} problems) {_code(s['sha256'])}"
              for b, s in (inputs.get("benchmarks") or {}).items()]
    return "fingerprints: " + ", ".join(parts)


def _sampling(cfg: dict) -> str:
    s = cfg.get("sampling") or {}
    keys = ", ".join(f"{k} {v}" for k, v in s.items())
    return (f"{keys}; n {cfg.get('n')}, seed {cfg.get('seed')}, template {cfg.get('template')}, "
            f"benchmarks {', '.join(map(str, cfg.get('benchmarks') or []))}")


def drift_provenance(comp: dict) -> list[str]:
    """The drift section's provenance: its directory, the junior samples it read and its command."""
    if not comp.get("drift"):
        return []
    cfg = comp["drift"].get("config", {})
    return [f"<h3>drift</h3><ul><li>{_code(comp.get('drift_dir'))}: junior samples "
            f"{_code(cfg.get('junior_samples'))}; {_command(cfg)}</li></ul>"]


def provenance_html(comp: dict, train_dirs: dict[str, Path]) -> str:
    """The section's HTML (without its heading) for a comparison and its training runs."""
    runs = []  # (senior, kind, path, config, sources)
    for name, dirs in comp["runs"].items():
        for kind, path in [("solo", dirs["solo"]), *dirs["handoff"].items()]:
            if path:
                runs.append((name, kind, Path(path), _read(Path(path) / "config.json"),
                             _read(Path(path) / "sources.json")))
    settings = {_sampling(cfg) for *_, cfg, _ in runs}
    same = len(settings) == 1
    out = ["<div>"]
    if same:
        out.append(f"<p>Sampling, every run: {html.escape(next(iter(settings)))}.</p>")
    for name, dirs in comp["runs"].items():
        items = []
        for senior, kind, path, cfg, src in runs:
            if senior == name:
                extra = "" if same else f"; sampling {html.escape(_sampling(cfg))}"
                split = f", split {src['split']}" if src.get("split") else ""
                items.append(f"<li>{html.escape(kind)}: {_code(path)}: {_models(cfg.get('models'))}{split}{extra}; "
                             f"{_fingerprints(cfg)}; {_command(src)}</li>")
        for m in measures():  # each registered measure's result: what made it (its row's ``about``) and how
            if dirs.get(m.name):
                cfg = _read(Path(dirs[m.name]) / m.result_file).get("config", {})
                fps = ", ".join(f"{role} {_code(fp)}" for role, fp in (cfg.get("inputs") or {}).items() if fp)
                made = "; ".join(f"{k} {_code(v)}" for k, v in m.about(cfg).items())
                items.append(f"<li>{html.escape(m.name)}: {_code(dirs[m.name])}: {made}; "
                             f"{'fingerprints: ' + fps if fps else 'fingerprints not recorded'}; {_command(cfg)}</li>")
        out.append(f"<h3>{html.escape(name)}</h3><ul>{''.join(items)}</ul>")
    for section in sections():  # drift's inputs, a plug-in section's (registry.Section.provenance)
        out += section.show("provenance")(comp)
    if train_dirs:
        items = []
        for name, d in train_dirs.items():
            cfg, summary = _read(d / "config.json"), _read(d / "summary.json")
            models = {"senior": cfg.get("senior"), "junior": cfg.get("junior")}
            items.append(f"<li>{html.escape(name)}: {_code(d)}: method {html.escape(str(cfg.get('method', '?')))}, "
                         f"{_models(models)}; {_command(summary)}</li>")
        out.append(f"<h3>training</h3><ul>{''.join(items)}</ul>")
    out.append("</div>")
    return "\n".join(out)
