"""A slow, obviously-correct tandem decoder: one row at a time, full prefix every step.

No KV cache, no padding, no batching, both output layers computed, and the schedules
re-implemented as plain Python loops straight from the paper's Algorithm 1. It shares only
the sampling function and the counter-based uniforms with the fast decoder, so agreement
token for token checks the caches, padding, position ids, row selection of output layers
and the vectorised schedules. Used by the tests and by ``scripts/gpu_check.sh``.
"""

from __future__ import annotations

import torch

from . import rng
from .sampling import SamplingParams, sample, scaled_logprobs


def _coin(seed: int, step: int, p: float) -> bool:
    return bool(rng.uniform(torch.tensor([seed]), step, rng.COIN)[0] < p)


def _u(seed: int, step: int, stream: int) -> torch.Tensor:
    return rng.uniform(torch.tensor([seed]), step, stream)


def _ends_paragraph(before: str, surface: str) -> bool:
    """Does appending ``surface`` to the response text ``before`` write the second newline of a
    run of newlines (a blank line)? Checked character by character on the text itself."""
    text = before + surface
    return any(text[j] == "\n" and text[j - 1] == "\n" and (j < 2 or text[j - 2] != "\n")
               for j in range(max(len(before), 1), len(text)))


@torch.no_grad()
def reference_generate(senior, junior, schedule: str, sampling: SamplingParams, prompt: list[int], seed: int,
                       eos_ids, boundary: set[int] = frozenset(), p: float = 0.5, K: int | None = 32,
                       surfaces: list[str] | None = None):
    """Generate one response. ``boundary``: ids that trigger a redraw / alternation (word and
    sentence schedules). Paragraph schedules detect blank lines on the decoded response text
    instead and need ``surfaces`` (the text of every id, see ``schedule.token_surfaces``).

    Returns (tokens, senior_flags, logprobs) as Python lists.
    """
    eos_ids = set(int(e) for e in eos_ids)
    paragraph = schedule.startswith("paragraph")
    if paragraph and surfaces is None:
        raise ValueError(f"schedule {schedule!r} needs the token surfaces")
    text = ""
    if schedule in ("senior", "junior"):
        author = schedule == "senior"
    elif schedule == "paragraph-roundrobin":
        author = True
    else:
        author = _coin(seed, 0, p)
    redraw_every = schedule == "token"
    use_K = schedule in ("word", "word-atomic")
    since = 0
    ids = list(prompt)
    toks, flags, lps = [], [], []

    def logits_of(senior_turn: bool):
        model = senior if senior_turn else junior
        dev = next(model.parameters()).device
        return model(torch.tensor([ids], device=dev)).logits[:, -1].float().cpu()  # (1, V)

    for t in range(sampling.max_new_tokens):
        logits = logits_of(author)
        tok = int(sample(logits, _u(seed, t, rng.SAMPLE), sampling)[0])
        if schedule == "word-atomic":
            if t == 0:
                since += 1
            elif tok in boundary or since >= K:
                new_author = _coin(seed, t, p)
                since = 1
                if new_author != author:
                    author = new_author
                    logits = logits_of(author)
                    allowed = torch.zeros(logits.shape[1], dtype=torch.bool)
                    allowed[[i for i in boundary | eos_ids if i < logits.shape[1]]] = True
                    logits = logits.masked_fill(~allowed, float("-inf"))
                    tok = int(sample(logits, _u(seed, t, rng.RESAMPLE), sampling)[0])
            else:
                since += 1
        toks.append(tok)
        flags.append(author)
        lps.append(float(scaled_logprobs(logits, sampling)[0, tok]))
        if tok in eos_ids:
            break
        ids.append(tok)
        if paragraph:
            surface = surfaces[tok] if tok < len(surfaces) else ""
            hit = _ends_paragraph(text, surface)
            text += surface
        else:
            hit = tok in boundary
        if schedule in ("senior", "junior", "word-atomic"):
            pass
        elif schedule == "paragraph-roundrobin":
            if hit:
                author = not author
        else:
            since += 1  # the paper's c: tokens written since the last redraw, this one included
            if redraw_every or hit or (use_K and since >= K):
                author = _coin(seed, t + 1, p)
                since = 0
    return toks, flags, lps
