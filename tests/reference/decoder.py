"""A slow, obviously-correct tandem decoder: one row at a time, full prefix every step.

No KV cache, no padding, no batching, both output layers computed, and the schedules
re-implemented as one plain Python loop that reads a registered schedule's ``Rule`` (who writes
first, what fires, what a firing does; ``decoding.schedule``), never its name, so every schedule
written as a rule is checked here. Sampling (temperature, top-k, top-p, inverse CDF) and the
boundary sets are re-implemented too, plainly and in float64, so the reference shares nothing with
the fast decoder but the rule's few words, the counter-based uniforms of ``rng`` and the
``SamplingParams`` container; agreement token for
token then checks the fast sampler, the boundary tables, the caches, padding, position ids,
row selection of output layers and the vectorised schedules. Used by the tests only (``scripts/gpu_check.sh``
runs some of them); it lives under ``tests/reference/`` as ``reference.decoder``.

Sampling convention shared with the fast decoder (``sampling.py``): temperature, then top-k
(every token tied with the k-th logit is kept), then top-p (a token is dropped when the mass of
the more likely kept tokens before it already reaches p; the most likely is always kept), then
inverse-CDF sampling with one uniform over the kept tokens in ascending token-id order.
"""

from __future__ import annotations

import torch

from tandem_rlvr.decoding import rng
from tandem_rlvr.decoding.sampling import SamplingParams


def reference_sample(logits: torch.Tensor, u: float, sampling: SamplingParams) -> int:
    """One token from (V,) raw logits and a uniform ``u`` in (0, 1) (see the module docstring)."""
    if sampling.temperature == 0:
        return int(torch.argmax(logits))
    x = (logits.float() / sampling.temperature).double()  # divide in float32, as models' logits are
    keep = torch.isfinite(x)
    if 0 < sampling.top_k < x.numel():
        kth = sorted(x.tolist(), reverse=True)[sampling.top_k - 1]
        keep &= x >= kth
    if sampling.top_p < 1.0:
        probs = torch.softmax(x.masked_fill(~keep, float("-inf")), -1).tolist()
        before = 0.0
        for i in sorted(keep.nonzero().flatten().tolist(), key=lambda i: -probs[i]):
            if before >= sampling.top_p:
                keep[i] = False
            before += probs[i]
    probs = torch.softmax(x.masked_fill(~keep, float("-inf")), -1).tolist()
    target, cum = u * sum(probs), 0.0
    for i, q in enumerate(probs):  # ascending token id
        cum += q
        if q > 0 and cum >= target:
            return i
    return max(i for i, q in enumerate(probs) if q > 0)


def reference_logprob(logits: torch.Tensor, tok: int, sampling: SamplingParams) -> float:
    """log-softmax of the temperature-scaled (V,) logits at ``tok`` (no top-k/top-p), as TRL recomputes it."""
    x = (logits.float() / sampling.temperature if sampling.temperature > 0 else logits.float()).double()
    return float(x[tok] - torch.logsumexp(x, -1))


def reference_surfaces(tokenizer) -> list[str]:
    """The text of every id, decoded one id at a time by the tokenizer itself (special ids -> '')."""
    return [tokenizer.decode([i], skip_special_tokens=True, clean_up_tokenization_spaces=False)
            for i in range(len(tokenizer))]


def reference_boundary_ids(tokenizer, kind: str) -> set[int]:
    """Boundary ids from the tokenizer's own pieces: ``word``, a non-special piece that begins with
    'Ġ' (byte-level BPE) or '▁' (SentencePiece); ``sentence``, a piece whose text has '.', '!', '?'
    or a newline; ``blank-line-end``, a piece whose text ends with a blank line. (Paragraph breaks are
    found on the response text, see ``_ends_paragraph``.)"""
    special = set(tokenizer.all_special_ids)
    if kind == "word":
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        return {i for i, t in enumerate(pieces) if i not in special and t and t[0] in "Ġ▁"}
    if kind == "sentence":
        return {i for i, s in enumerate(reference_surfaces(tokenizer)) if any(c in s for c in ".!?\n")}
    if kind == "blank-line-end":
        return {i for i, s in enumerate(reference_surfaces(tokenizer)) if s.endswith("\n\n")}
    raise ValueError(f"no reference boundary set {kind!r}")


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


def reference_rule(schedule: str):
    """The ``Rule`` of registered schedule ``schedule``: the plain terms this decoder re-implements."""
    from tandem_rlvr.decoding.schedule import schedule_kind

    rule = schedule_kind(schedule).rule
    if rule is None:
        raise ValueError(f"schedule {schedule!r} brings its own Schedule class and no rule: the reference cannot "
                         "decode it")
    return rule


@torch.no_grad()
def reference_generate(senior, junior, schedule: str, sampling: SamplingParams, prompt: list[int], seed: int,
                       eos_ids, boundary: set[int] = frozenset(), p: float = 0.5, K: int | None = 32,
                       surfaces: list[str] | None = None):
    """Generate one response under the rule of ``schedule`` (``reference_rule``). ``boundary``: the
    ids that fire for rules firing at ``word``, ``sentence`` or ``blank-line-end`` (the reference's own
    sets: ``reference_boundary_ids``). Rules firing at paragraph breaks detect blank lines on the
    decoded response text instead and need ``surfaces`` (the text of every id, ``reference_surfaces``).

    Returns (tokens, senior_flags, logprobs) as Python lists.
    """
    rule = reference_rule(schedule)
    eos_ids = set(int(e) for e in eos_ids)
    paragraph = rule.fires == "paragraph"
    if paragraph and surfaces is None:
        raise ValueError(f"schedule {schedule!r} needs the token surfaces")
    K = rule.K or K
    text = ""
    author = _coin(seed, 0, p) if rule.first == "coin" else rule.first == "senior"
    since = 0  # redraw: the paper's c, tokens written since the last redraw; count: firings in this chunk
    ids = list(prompt)
    toks, flags, lps = [], [], []

    def logits_of(senior_turn: bool):
        model = senior if senior_turn else junior
        dev = next(model.parameters()).device
        return model(torch.tensor([ids], device=dev)).logits[:, -1].float().cpu()  # (1, V)

    for t in range(sampling.max_new_tokens):
        logits = logits_of(author)[0]  # (V,)
        tok = reference_sample(logits, float(_u(seed, t, rng.SAMPLE)[0]), sampling)
        if rule.atomic:  # the redraw comes before the token: a word-initial token, or K tokens written
            if t == 0:
                since += 1
            elif tok in boundary or since >= K:
                new_author = _coin(seed, t, p)
                since = 1
                if new_author != author:
                    author = new_author
                    logits = logits_of(author)[0]
                    allowed = torch.zeros(logits.shape[0], dtype=torch.bool)
                    allowed[[i for i in boundary | eos_ids if i < logits.shape[0]]] = True
                    logits = logits.masked_fill(~allowed, float("-inf"))
                    tok = reference_sample(logits, float(_u(seed, t, rng.RESAMPLE)[0]), sampling)
            else:
                since += 1
        toks.append(tok)
        flags.append(author)
        lps.append(reference_logprob(logits, tok, sampling))
        if tok in eos_ids:
            break
        ids.append(tok)
        if rule.fires is None or rule.atomic:
            continue
        if paragraph:
            surface = surfaces[tok] if tok < len(surfaces) else ""
            hit = _ends_paragraph(text, surface)
            text += surface
        else:
            hit = rule.fires == "token" or tok in boundary
        if rule.then == "flip":
            author = author if not hit else not author
        elif rule.then == "count":
            since += hit
            if since >= K:
                author, since = not author, 0
        else:
            since += 1  # the paper's c: tokens written since the last redraw, this one included
            if hit or (rule.backstop and since >= K):
                author = _coin(seed, t + 1, p)
                since = 0
    return toks, flags, lps
