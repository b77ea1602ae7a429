"""Who wrote which words, per rollout batch: TRL's ``log_completions`` with authorship.

With ``log_completions`` (a ``GRPOConfig`` field: ``TandemGRPOConfig(log_completions=True)``, or
``tandem train --trl log_completions=true``) the first ``num_completions_to_print`` rows (default 4) of each
rollout batch of the main process are written

- to ``completions.md`` in the run directory, junior-written words between ``[[`` and ``]]``;
- to the trackers: trackio as an HTML table (senior words in teal, junior words in magenta), TensorBoard as a
  markdown table (junior words in italics) under the text tab ``completions/authored``.

TRL's own completions table (prompts, completions, rewards) still comes with the same field; this one adds
the authorship that only a tandem rollout has. Rewards are scored after the rollout, so they are TRL's table's.
"""

from __future__ import annotations

import html
from pathlib import Path

from ..decoding.render import author_segments

SENIOR_COLOUR, JUNIOR_COLOUR = "#0b7285", "#c2255c"


def as_text(segments: list[tuple[str, bool]]) -> str:
    """A response with its junior-written runs between ``[[`` and ``]]``."""
    return "".join(t if senior else f"[[{t}]]" for t, senior in segments)


def as_html(segments: list[tuple[str, bool]]) -> str:
    """A response as coloured HTML spans, one per authorship run."""
    return "".join(f'<span style="color:{SENIOR_COLOUR if senior else JUNIOR_COLOUR}">{html.escape(t)}</span>'
                   for t, senior in segments)


def as_markdown(segments: list[tuple[str, bool]]) -> str:
    """A response for a markdown table cell: junior-written runs in italics, pipes and newlines escaped."""
    def cell(t: str) -> str:
        return t.replace("|", "\\|").replace("\n", " ")

    def italic(t: str) -> str:  # the run's own spaces stay outside the asterisks, as markdown needs
        core = t.strip()
        return t[: len(t) - len(t.lstrip())] + f"*{core}*" + t[len(t.rstrip()):] if core else t

    return "".join(cell(t) if senior else italic(cell(t)) for t, senior in segments)


class CompletionsLog:
    """Writes each rollout batch's first rows with their authorship (module docstring)."""

    def __init__(self, run_dir: str, tokenizer, rows: int | None):
        self.path = Path(run_dir) / "completions.md"
        self.tok, self.rows = tokenizer, rows or 4

    def write(self, trainer, prompts: list[str], completion_ids: list[list[int]], senior_mask: list[list[int]]) -> None:
        step = int(trainer.state.global_step)
        picked = range(min(self.rows, len(prompts)))
        segments = [author_segments(self.tok, completion_ids[b], senior_mask[b]) for b in picked]
        shares = [sum(senior_mask[b]) / max(len(senior_mask[b]), 1) for b in picked]
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"## update {step + 1}\n\n")
            for b, seg, share in zip(picked, segments, shares, strict=True):
                f.write(f"### row {b} (senior share {share:.2f})\n\nprompt: {prompts[b].strip()}\n\n{as_text(seg)}\n\n")
        self._to_trackers(trainer, step, [prompts[b] for b in picked], segments, shares)

    @staticmethod
    def _to_trackers(trainer, step: int, prompts, segments, shares) -> None:
        from transformers.integrations import TensorBoardCallback, TrackioCallback

        for cb in trainer.callback_handler.callbacks:
            if isinstance(cb, TensorBoardCallback) and getattr(cb, "tb_writer", None) is not None:
                lines = ["senior words plain, *junior words in italics*", "", "| prompt | completion | senior share |",
                         "|---|---|---|"]
                lines += [f"| {p.strip().replace('|', '/')} | {as_markdown(s)} | {x:.2f} |"
                          for p, s, x in zip(prompts, segments, shares, strict=True)]
                cb.tb_writer.add_text("completions/authored", "\n".join(lines), step)
                cb.tb_writer.flush()
            elif isinstance(cb, TrackioCallback) and getattr(cb, "_initialized", False):
                rows = "".join(f"<tr><td>{html.escape(p.strip())}</td><td>{as_html(s)}</td><td>{x:.2f}</td></tr>"
                               for p, s, x in zip(prompts, segments, shares, strict=True))
                table = (f'<p><span style="color:{SENIOR_COLOUR}">senior</span> / <span style="color:{JUNIOR_COLOUR}">'
                         f"junior</span></p><table><tr><th>prompt</th><th>completion</th><th>senior share</th></tr>"
                         f"{rows}</table>")
                # as transformers' trackio callback logs: trackio's own step, the update as train/global_step
                cb._trackio.log({"completions/authored": cb._trackio.Html(table, data_is_not_path=True),
                                 "train/global_step": step})
