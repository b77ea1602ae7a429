"""Solo accuracy of a tiny-world model: batched ``generate`` plus the project's verifier.

The build uses it to record how good the base model and the junior are (``world.json``),
so a user sees at once whether RL has room. Sampling here is plain: temperature ``t`` over
the full vocabulary (no top-k/top-p), or greedy for ``t == 0``; the project's evaluation
commands use their own shared sampling definition.
"""

from __future__ import annotations

import torch

from ..prompting import plain_prompt
from ..rewards.math import score
from .tasks import WorldProblem


@torch.no_grad()
def solo_accuracy(model, tok, problems: list[WorldProblem], temperature: float = 1.0, seed: int = 0,
                  batch_size: int = 256, max_new_tokens: int | None = None, grade=None) -> float:
    """Fraction of ``problems`` whose generated solution boxes the right answer.

    ``max_new_tokens`` defaults to 1.5x the longest reference solution, in tokens. ``grade(texts,
    problems) -> scores`` replaces the math verifier (the code world passes ``code.grade_code``).
    """
    if not problems:
        return float("nan")
    if max_new_tokens is None:
        max_new_tokens = int(1.5 * max(len(ids) for ids in tok([p.solution for p in problems])["input_ids"])) + 8
    model.eval()
    torch.manual_seed(seed)
    sampling = (dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0
                else dict(do_sample=False))
    correct = 0.0
    for i in range(0, len(problems), batch_size):
        chunk = problems[i: i + batch_size]
        enc = tok([plain_prompt(p.problem) for p in chunk], return_tensors="pt", padding=True,
                  padding_side="left")  # (B, T0)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id, **sampling)  # (B, T0 + new)
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        correct += sum(grade(texts, chunk) if grade
                       else [score(t, p.answer) for t, p in zip(texts, chunk, strict=True)])
    return correct / len(problems)


@torch.no_grad()
def style_measure(model, tok, problems: list[WorldProblem], seed: int = 0, batch_size: int = 256) -> dict:
    """Temperature-1 samples of ``model``: their style mix and accuracy per style (``style.style_summary``)."""
    from .style import style_summary

    max_new = int(1.5 * max(len(ids) for ids in tok([p.solution for p in problems])["input_ids"])) + 8
    model.eval()
    torch.manual_seed(seed)
    texts, correct = [], []
    for i in range(0, len(problems), batch_size):
        chunk = problems[i: i + batch_size]
        enc = tok([plain_prompt(p.problem) for p in chunk], return_tensors="pt", padding=True, padding_side="left")
        out = model.generate(**enc, max_new_tokens=max_new, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
        batch_texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        texts += batch_texts
        correct += [score(t, p.answer) for t, p in zip(batch_texts, chunk, strict=True)]
    return style_summary(texts, correct)
