"""A junior pool in training: which junior each rollout draws, the per-junior figures of a step, and
the rollout log that records every draw (docs/pool.md).

The draw (``pool.JuniorPool.draw``) takes the run's seed, the update step, the problem's stable id
(its ``problem_id``, hashed; not its position in a batch) and the rollout's copy index within the
step when each rollout draws its own (0 when a GRPO group shares one junior), so a resumed run,
a replay or a second process redraws the same juniors.

``run_dir/rollouts.jsonl`` (pool runs only; one-junior runs write what they wrote before) has one
row per rollout: ``step`` (the update at which it was generated), ``rollout_step``, ``problem_id``,
``rollout`` (its copy index in the step), ``junior`` (the pool label of its junior), ``reward`` (the
weighted sum of the reward terms, as TRL's ``reward``; null when no term scored it),
``senior_share`` and ``length`` (response tokens). On resume the rows of regenerated steps
(``step`` >= the checkpoint's) are dropped first, as the run log is cut.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections import defaultdict
from pathlib import Path

from .callbacks import read_log


def draw_juniors(pool, seed: int, step: int, keys: list[str], per_rollout: bool) -> tuple[list[int], list[int]]:
    """(junior index, copy index) of each row of a global batch whose problems are ``keys`` (one per row,
    a group's G rows sharing a key); the copy index counts earlier rows of the same key in the batch."""
    seen: dict[str, int] = defaultdict(int)
    juniors, copies = [], []
    for key in keys:
        k = seen[key]
        seen[key] += 1
        copies.append(k)
        juniors.append(pool.draw(seed, step, zlib.crc32(key.encode()), k if per_rollout else 0))
    return juniors, copies


def junior_figures(labels, juniors: list[int], rewards: list[float], shares: list[float],
                   lengths: list[int]) -> dict[str, float]:
    """``junior/<label>/{count,reward,senior_share,length}`` over the rows each junior wrote with. A junior
    drawn by no row has count 0 and no means (no figure of an empty set); unscorable (NaN) rewards leave
    the reward mean."""
    out: dict[str, float] = {}
    for j, label in enumerate(labels):
        rows = [b for b, x in enumerate(juniors) if x == j]
        out[f"junior/{label}/count"] = len(rows)
        if not rows:
            continue
        scored = [rewards[b] for b in rows if not math.isnan(rewards[b])]
        if scored:
            out[f"junior/{label}/reward"] = sum(scored) / len(scored)
        out[f"junior/{label}/senior_share"] = sum(shares[b] for b in rows) / len(rows)
        out[f"junior/{label}/length"] = sum(lengths[b] for b in rows) / len(rows)
    return out


class RolloutLog:
    """``run_dir/rollouts.jsonl`` of a pool run (see module docstring), written by the main process."""

    def __init__(self, run_dir: Path, resume_step: int, is_main: bool):
        self.path = run_dir / "rollouts.jsonl"
        self.is_main = is_main
        if is_main:
            rows = [r for r in read_log(self.path) if r.get("step", 0) < resume_step]
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            os.replace(tmp, self.path)

    def write(self, rows: list[dict]) -> None:
        if self.is_main and rows:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows))
