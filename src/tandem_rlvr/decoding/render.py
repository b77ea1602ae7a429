"""Authorship runs of one response: (tokens, senior mask) into text segments by author, for
terminals and HTML, and the count of author switches (a rollout diagnostic of training and
evaluation alike)."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def author_segments(tokenizer, tokens: list[int], senior_mask: list[int]) -> list[tuple[str, bool]]:
    """Split a response into maximal runs of one author: [(text, is_senior), ...].

    Text is decoded incrementally from the whole prefix, so multi-byte characters split
    across tokens land in the run of the token that completes them.
    """
    segments: list[tuple[str, bool]] = []
    prev = ""
    for i, flag in enumerate(senior_mask):
        text = tokenizer.decode(tokens[: i + 1], skip_special_tokens=True)
        piece, prev = text[len(prev):] if text.startswith(prev) else text, text
        if not piece:
            continue
        if segments and segments[-1][1] == bool(flag):
            segments[-1] = (segments[-1][0] + piece, bool(flag))
        else:
            segments.append((piece, bool(flag)))
    return segments


def author_switches(senior_mask: Sequence[int]) -> int:
    """Author changes in one sequence: positions t >= 1 whose author differs from t - 1's."""
    m = np.asarray(senior_mask, dtype=np.int64)
    return int((m[1:] != m[:-1]).sum()) if m.size > 1 else 0
