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

from .engines.completions import Completion, complete, request, senior_mask, served_model, tandem_xargs
from .engines.request_args import TandemArgs

__all__ = ["Completion", "TandemArgs", "complete", "request", "senior_mask", "served_model", "tandem_xargs"]
