"""Which style a tiny-world response is written in: legible words or the compact shorthand.

The drift world (``docs/drift_world.md``) pretrains its base model on a mix of two solution
styles (``tasks.render_solution`` / ``tasks.render_shorthand``). This module classifies each
``\\n\\n`` paragraph of a response:

- **word**: the paragraph contains an English word (two or more letters) other than the
  ``boxed`` of ``\\boxed{}``: "Mia starts with 7 shells.", "She finds 5 more, so 7 plus 5 is
  12.", "The answer is \\boxed{12}.";
- **shorthand**: a bare number ("7"), an equation "7 + 5 = 12" / "12 - 3 = 9", or a bare
  "\\boxed{9}";
- **other**: anything else (garbage, an empty paragraph).

A response's shorthand share is n_shorthand / (n_shorthand + n_word) (None when neither
occurs); its label is "shorthand" or "word" when all its classified paragraphs agree,
"mixed" when both occur, "other" when none is classified. ``style_summary`` aggregates
over many responses (the study reports it per method). Pure string functions, no torch.
"""

from __future__ import annotations

import re
from typing import Iterable

_SHORTHAND = re.compile(r"^(?:-?\d+|-?\d+ [+-] -?\d+ = -?\d+|\\boxed\{[^{}]*\})$")
_WORD = re.compile(r"[A-Za-z]{2,}")
LABELS = ("word", "shorthand", "mixed", "other")


def paragraph_style(par: str) -> str:
    """'word', 'shorthand' or 'other' for one paragraph (surrounding whitespace ignored)."""
    par = par.strip()
    if _SHORTHAND.match(par):
        return "shorthand"
    if any(w != "boxed" for w in _WORD.findall(par)):
        return "word"
    return "other"


def response_style(text: str) -> dict:
    """Counts of paragraph styles, the shorthand share (None if unclassifiable) and a label."""
    counts = {"word": 0, "shorthand": 0, "other": 0}
    for par in text.split("\n\n"):
        if par.strip():
            counts[paragraph_style(par)] += 1
    n = counts["word"] + counts["shorthand"]
    share = counts["shorthand"] / n if n else None
    label = "other" if not n else "shorthand" if share == 1.0 else "word" if share == 0.0 else "mixed"
    return {**counts, "shorthand_share": share, "label": label}


def style_summary(texts: Iterable[str], correct: Iterable[float] | None = None) -> dict:
    """Over responses: mean shorthand share, share of each label, and accuracy per label.

    ``correct`` (optional, aligned with ``texts``) adds ``acc_<label>`` (None when a label
    never occurs): how often each style is rewarded, the quantity that decides which way
    GRPO moves.
    """
    rows = [response_style(t) for t in texts]
    corr = list(correct) if correct is not None else None
    n = len(rows)
    shares = [r["shorthand_share"] for r in rows if r["shorthand_share"] is not None]
    out: dict = {"n": n, "shorthand_share": sum(shares) / len(shares) if shares else None}
    for lab in LABELS:
        idx = [i for i, r in enumerate(rows) if r["label"] == lab]
        out[f"frac_{lab}"] = len(idx) / n if n else None
        if corr is not None:
            out[f"acc_{lab}"] = sum(corr[i] for i in idx) / len(idx) if idx else None
    return out
