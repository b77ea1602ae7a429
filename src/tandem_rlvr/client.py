"""Tandem completions from a running server (``tandem serve``), for any OpenAI-compatible client.

A tandem request is an ordinary completion request plus four flat vLLM request arguments
in ``vllm_xargs`` (``tandem_xargs``). The response carries no authorship: the server's
logits processor decides each token's author with counter-based coins of the request's seed,
so the senior mask is a pure function of (schedule, p, K, seed, token ids) and a client
recovers it by replaying the schedule on the returned token ids (``senior_mask``), with the
tokenizer's boundary sets. Recipe with the OpenAI client (``pip install openai``)::

    from openai import OpenAI
    from transformers import AutoTokenizer
    from tandem_rlvr.client import complete

    client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="EMPTY")
    tok = AutoTokenizer.from_pretrained(SENIOR)
    c = complete(client, SENIOR, tok.encode("Mia has 7 shells."), tok, schedule="word", seed=3)
    c.token_ids, c.senior_mask  # (T,) ids and (T,) bools, True = the senior wrote the token

``complete`` asks for token ids (``return_token_ids``) and the sampled tokens' log-probs,
which the server returns as the emitting model's (``processed_logprobs``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .engines.request_args import TandemArgs, parse


def tandem_xargs(schedule: str, p: float = 0.5, K: int = 32, seed: int | None = None) -> dict:
    """The ``vllm_xargs`` of a tandem request (validated here as the server validates them)."""
    raw = {"tandem_schedule": schedule, "tandem_p": p, "tandem_K": K}
    if seed is not None:
        raw["tandem_seed"] = seed
    args = parse(raw)
    return args.xargs()


def senior_mask(tokenizer, token_ids: list[int], schedule: str, p: float = 0.5, K: int = 32,
                seed: int = 0) -> list[bool]:
    """(T,) authorship of a returned completion (True = senior), by replaying the schedule on
    its token ids; the server's processor made the same decisions step by step."""
    from .decoding.schedule import make_schedule, replay

    args = parse({"tandem_schedule": schedule, "tandem_p": p, "tandem_K": K, "tandem_seed": seed})
    V = max(len(tokenizer), max(token_ids, default=-1) + 1)
    sched = make_schedule(args.schedule, tokenizer, p=args.p, K=args.K, vocab_size=V)
    return replay(sched, torch.tensor([args.seed], dtype=torch.int64), [list(token_ids)])[0]


@dataclass
class Completion:
    """One tandem completion: ids, authorship, the sampled tokens' log-probs, why it ended."""

    token_ids: list[int]
    senior_mask: list[bool]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    text: str = ""


def request(client, model: str, prompt: list[int] | str, args: TandemArgs, *, max_tokens: int = 256,
            temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, stop_token_ids: list[int] | None = None,
            ignore_eos: bool = False, timeout: float | None = None) -> Completion:
    """One completion request; the returned ``senior_mask`` is empty (``complete`` fills it).
    ``args.seed`` seeds both the authorship coins and the server's sampler."""
    body = {"vllm_xargs": args.xargs(), "return_token_ids": True, "top_k": top_k if top_k > 0 else -1,
            "ignore_eos": ignore_eos}
    if stop_token_ids:
        body["stop_token_ids"] = list(stop_token_ids)
    kw = {"timeout": timeout} if timeout is not None else {}
    r = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=temperature,
                                  top_p=top_p, seed=args.seed, logprobs=0, extra_body=body, **kw)
    choice = r.choices[0]
    ids = list(getattr(choice, "token_ids", None) or (choice.model_extra or {}).get("token_ids") or [])
    lps = list(choice.logprobs.token_logprobs) if choice.logprobs is not None else []
    return Completion(ids, [], lps, choice.finish_reason, choice.text or "")


def complete(client, model: str, prompt: list[int] | str, tokenizer, *, schedule: str = "word", p: float = 0.5,
             K: int = 32, seed: int = 0, **sampling) -> Completion:
    """One completion of ``prompt`` (token ids, or text the server tokenizes) from ``client``
    (an ``openai.OpenAI`` pointed at the server's ``/v1``), with its senior mask.
    ``sampling``: ``request``'s keywords (max_tokens, temperature, top_p, top_k, ...).

    ``seed`` seeds both the authorship coins and the server's sampler, so a request re-sent
    with the same seed returns the same tokens and authors.
    """
    args = parse({"tandem_schedule": schedule, "tandem_p": p, "tandem_K": K, "tandem_seed": seed})
    c = request(client, model, prompt, args, **sampling)
    c.senior_mask = senior_mask(tokenizer, c.token_ids, schedule, p, K, seed)
    return c


def served_model(client) -> tuple[str, str, int | None]:
    """(id, root, max_model_len) of the first model a server serves; ``root`` is the checkpoint
    it loaded, ``max_model_len`` its context in tokens (None if the server does not say)."""
    models = client.models.list().data
    if not models:
        from .errors import TandemError

        raise TandemError("the server serves no model")
    m = models[0]
    extra = m.model_extra or {}
    return m.id, extra.get("root") or m.id, extra.get("max_model_len")


__all__ = ["Completion", "TandemArgs", "complete", "request", "senior_mask", "served_model", "tandem_xargs"]
