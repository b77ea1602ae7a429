"""The report's "Sample solutions": the same problems for every senior, side by side.

What: for a few problems, a grid with one column per senior (in the comparison's order: base,
GRPO, Tandem, KL-Reg, ...) and one row per run kind (solo, then each handoff label). Each cell
shows that run's sample 0 of the problem with every word coloured by the model that wrote it
(``decoding.render.author_segments``), marked correct or wrong, with the share of the
problem's samples that are correct.

Which problems: those where the methods differ. Over the problems every run has, the ranking
is by the number of rows (run kinds) in which the seniors' sample-0 verdicts disagree, then
whether any two cells disagree at all, then the spread (population standard deviation) of the
per-problem fraction correct across the cells; ties keep the benchmark order. From that ranking, one problem per
distinct pattern of sample-0 verdicts is taken first (so the page shows different ways the methods split, e.g. GRPO
right alone, then Tandem right on handoff), then the next ranked. ``choose_problems`` is a pure function of
those numbers.
"""

from __future__ import annotations

import html
import logging

import numpy as np

from ..measure.regrade import apply_regrade
from ..run_files import EvalRun, read_run, run_problems

log = logging.getLogger("tandem_rlvr")

Cell = tuple[str, str]  # (run kind: "solo" or a handoff label, senior name)


def choose_problems(cells: dict[Cell, EvalRun], n: int) -> list[tuple[str, str]]:
    """Up to ``n`` (benchmark, problem_id) keys every run has, where the runs differ most."""
    runs = list(cells.values())
    order = list(dict.fromkeys((r["benchmark"], str(r["problem_id"])) for r in runs[0].rows))
    frac = [run.per_problem_correct() for run in runs]
    first = [{(r["benchmark"], str(r["problem_id"])): bool(r["correct"]) for r in run.rows if r["sample_idx"] == 0}
             for run in runs]
    keys = [k for k in order if all(k in f for f in frac) and all(k in s for s in first)]

    kinds = [kind for kind, _ in cells]

    def rank(i_key: tuple[int, tuple[str, str]]) -> tuple:
        i, key = i_key
        split_rows = sum(len({s[key] for s, k in zip(first, kinds, strict=True) if k == kind}) > 1
                         for kind in set(kinds))
        return (-split_rows, -(len({s[key] for s in first}) > 1), -float(np.std([f[key] for f in frac])), i)

    ranked = [k for _, k in sorted(enumerate(keys), key=rank)]
    chosen, patterns = [], set()
    for key in ranked:  # first pass: one problem per pattern of verdicts (who is right, who is wrong)
        pattern = tuple(s[key] for s in first)
        if len(chosen) < n and len(set(pattern)) > 1 and pattern not in patterns:
            chosen.append(key)
            patterns.add(pattern)
    chosen += [k for k in ranked if k not in chosen][:n - len(chosen)]
    return sorted(chosen, key=ranked.index)


def samples_html(comp: dict, n_problems: int) -> str:
    """The section's HTML (without its heading) for a comparison (compare.json's content)."""
    cells: dict[Cell, EvalRun] = {}
    for name, dirs in comp["runs"].items():
        for kind, path in [("solo", dirs["solo"]), *dirs["handoff"].items()]:
            if path:
                cells[(kind, name)] = run = read_run(path)
                apply_regrade(run)  # the verdicts the tables use: regraded ones where `eval regrade` left them
    if not cells:
        return "<p>No sampling runs.</p>"
    seniors = list(dict.fromkeys(name for _, name in cells))
    kinds = list(dict.fromkeys(kind for kind, _ in cells))
    problems = _problem_texts(next(iter(cells.values())))
    tokenizers: dict[str, object] = {}
    parts = ['<p>Words written by the <span class="sen">senior</span> and by the <span class="jun">junior</span>; '
             'each cell is sample 0 of that run, marked <span class="ok-mark">&#10003; correct</span> or '
             '<span class="bad-mark">&#10007; wrong</span>. Problems where the methods differ most are shown.</p>']
    for key in choose_problems(cells, n_problems):
        p = problems.get(key)
        head = f"{html.escape(key[0])} / {html.escape(key[1])}"
        text = (f'<p class="problem">{html.escape(p.problem)} <b>Answer: {html.escape(str(p.answer))}</b></p>'
                if p is not None else "")
        grid = ['<div class="corner"></div>', *[f'<div class="colhead">{html.escape(s)}</div>' for s in seniors]]
        for kind in kinds:
            grid.append(f'<div class="rowhead">{html.escape(kind)}</div>')
            for s in seniors:
                run = cells.get((kind, s))
                grid.append(_cell(run, key, kind, s, tokenizers) if run else '<div class="cell empty">-</div>')
        style = f"grid-template-columns:5.5em repeat({len(seniors)},minmax(0,1fr))"
        parts.append(f'<div class="problem-block" data-problem="{html.escape(key[0])}/{html.escape(key[1])}">'
                     f'<h3>{head}</h3>{text}<div class="grid" style="{style}">{"".join(grid)}</div></div>')
    return "\n".join(parts)


def _cell(run: EvalRun, key: tuple[str, str], kind: str, senior: str, tokenizers: dict) -> str:
    from ...decoding.render import author_segments

    rows = [r for r in run.rows if (r["benchmark"], str(r["problem_id"])) == key]
    r = min(rows, key=lambda r: r["sample_idx"])
    tok = _tokenizer(run, tokenizers)
    segs = (author_segments(tok, r["token_ids"].tolist(), r["senior_mask"].tolist()) if tok is not None
            else [(r.get("response", ""), True)])
    body = "".join(f'<span class="{"sen" if s else "jun"}">{html.escape(t)}</span>' for t, s in segs)
    ok = bool(r["correct"])
    n_ok = sum(bool(x["correct"]) for x in rows)
    mark = "&#10003; correct" if ok else "&#10007; wrong"
    return (f'<div class="cell {"ok" if ok else "bad"}" data-senior="{html.escape(senior)}" '
            f'data-kind="{html.escape(kind)}" data-correct="{str(ok).lower()}"><div class="mark">{mark} '
            f'<small>(sample {r["sample_idx"]}; {n_ok}/{len(rows)} correct, '
            f'senior share {r.get("senior_share", 1.0):.2f})</small></div><div class="sample">{body}</div></div>')


def _tokenizer(run: EvalRun, cache: dict):
    """The run's tokenizer (cached by model spec); None, with a warning, if it cannot be loaded."""
    from ...models import load_tokenizer

    spec = str((run.config.get("models") or {}).get("senior"))
    if spec not in cache:
        try:
            cache[spec] = load_tokenizer(spec)
        except Exception as e:  # noqa: BLE001 - without a tokenizer the text is shown uncoloured
            log.warning("cannot load the tokenizer of %s (%s); samples shown uncoloured", run.path,
                        str(e).splitlines()[0][:200])
            cache[spec] = None
    return cache[spec]


def _problem_texts(run: EvalRun) -> dict:
    """{(benchmark, problem_id): Problem} of a run's benchmarks; empty (problem text left out) if they cannot be
    loaded."""
    from ...errors import TandemError

    try:
        return run_problems(run.path, run.config)[1]
    except (TandemError, OSError, ValueError) as e:
        log.warning("cannot load the problems of %s (%s); sample problems shown without their text", run.path, e)
        return {}
