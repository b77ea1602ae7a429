"""Tandem completion requests to a running server, with authorship recovered by replay.

The functions behind ``tandem_rlvr.client`` (its public face and recipe) and the
``vllm-server`` engine (``server_client``): build a request's flat ``vllm_xargs``
(``request_args``), send it with an OpenAI client asking for token ids and the sampled
tokens' log-probs, and replay the schedule on the returned ids (``schedule.replay``, the
function the server's logits processor applied step by step) for the senior mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .request_args import TandemArgs, parse


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
    from ..decoding.schedule import make_schedule, replay

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
        from ..errors import TandemError

        raise TandemError("the server serves no model")
    m = models[0]
    extra = m.model_extra or {}
    return m.id, extra.get("root") or m.id, extra.get("max_model_len")
