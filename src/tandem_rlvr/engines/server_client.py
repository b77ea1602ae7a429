"""``--server URL``: generation from a running ``tandem serve`` (engine ``vllm-server``).

``ServerDecoder`` has the engines' decoder interface (``schedule``, ``generate(prompts,
seeds) -> Rollout``), so ``tandem eval``, ``tandem generate`` and everything downstream of
``samples.jsonl`` do not know the samples came over HTTP. Each row is one completion request
(its row seed seeds the coins and the server's sampler, so a row's sample does not depend on
its batch, as on the other engines); ``concurrency`` requests are in flight at once, and the
server batches them itself. Timeouts and retries (connection errors, 408/429/5xx, with
backoff) are the OpenAI client's. The senior mask is recovered by replaying the schedule on
the returned ids (``completions.senior_mask``, batched here); log-probs are the emitting model's
(the server runs ``processed_logprobs``).

Needs the ``openai`` client (``pip install openai``) and the served model's tokenizer on this
machine (the server's checkpoint path, or ``--server-tokenizer``).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

import torch

from ..decoding.sampling import SamplingParams
from ..decoding.schedule import make_schedule, replay
from ..decoding.tandem import Rollout
from ..errors import TandemError
from .request_args import TandemArgs

log = logging.getLogger("tandem_rlvr")


@dataclass(frozen=True)
class ServerSettings:
    """Where the server is and how to talk to it (flags ``--server*``, ``--api-key``).

    url: base URL (``http://127.0.0.1:8000``; a trailing ``/v1`` is accepted).
    timeout: seconds one request may take. retries: attempts after the first on connection
    errors and 408/429/5xx answers. concurrency: requests in flight at once.
    tokenizer: where to load the served model's tokenizer (default: the server's checkpoint).
    """

    url: str
    api_key: str | None = None
    timeout: float = 600.0
    retries: int = 3
    concurrency: int = 32
    tokenizer: str | None = None

    def __post_init__(self):
        if not self.url.startswith(("http://", "https://")):
            raise TandemError(f"--server must be an http(s) URL, got {self.url!r}")
        if self.timeout <= 0 or self.retries < 0 or self.concurrency < 1:
            raise TandemError("--server-timeout must be > 0, --server-retries >= 0 and --server-concurrency >= 1")

    @property
    def base_url(self) -> str:
        u = self.url.rstrip("/")
        return u if u.endswith("/v1") else f"{u}/v1"


def connect(settings: ServerSettings):
    """(openai client, served model id, checkpoint root, context length), or a one-line error."""
    try:
        import openai
    except ImportError:
        raise TandemError("--server needs the OpenAI client: pip install openai") from None
    client = openai.OpenAI(base_url=settings.base_url, api_key=settings.api_key or "EMPTY",
                           timeout=settings.timeout, max_retries=settings.retries)
    from .completions import served_model

    try:
        model, root, ctx = served_model(client)
    except openai.AuthenticationError:
        raise TandemError(f"{settings.url}: the server refused the API key (pass --api-key)") from None
    except openai.APIError as e:
        raise TandemError(f"{settings.url}: no server answered ({type(e).__name__}: {e})") from None
    return client, model, root, ctx


class ServerDecoder:
    """One schedule and sampling setting on a server; the TandemDecoder interface."""

    def __init__(self, settings: ServerSettings, client, model: str, context: int | None, tokenizer, eos_ids,
                 schedule: str, sampling: SamplingParams, p: float = 0.5, K: int = 32, ignore_eos: bool = False):
        from .base import check_vllm_schedule

        check_vllm_schedule(schedule)
        self.settings, self.client, self.model, self.context = settings, client, model, context
        self.tokenizer, self.eos_ids = tokenizer, sorted(set(int(e) for e in eos_ids))
        self.sampling, self.p, self.K, self.ignore_eos = sampling, p, K, ignore_eos
        self.schedule = make_schedule(schedule, tokenizer, p=p, K=K, vocab_size=len(tokenizer))

    def _one(self, prompt: list[int], seed: int, junior: int = 0):
        import openai

        from .completions import request

        s = self.sampling
        max_tokens = s.max_new_tokens if self.context is None else min(s.max_new_tokens, self.context - len(prompt))
        if max_tokens < 1:
            raise TandemError(f"prompt of {len(prompt)} tokens does not fit the served model's context of "
                              f"{self.context} tokens")
        args = TandemArgs(self.schedule.name, self.p, self.K, seed, junior)
        t0 = time.thread_time()
        try:
            comp = request(self.client, self.model, prompt, args, max_tokens=max_tokens, temperature=s.temperature,
                           top_p=s.top_p, top_k=s.top_k, stop_token_ids=None if self.ignore_eos else self.eos_ids,
                           ignore_eos=self.ignore_eos)
            return comp, time.thread_time() - t0
        except openai.APIStatusError as e:
            raise TandemError(f"{self.settings.url}: HTTP {e.status_code}: {_message(e)}") from None
        except openai.APIError as e:  # connection errors and timeouts, after the retries
            raise TandemError(f"{self.settings.url}: request failed after {self.settings.retries} retries "
                              f"({type(e).__name__}: {e})") from None

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int] | torch.Tensor,
                 juniors: Sequence[int] | None = None) -> Rollout:
        """prompts: B token lists; seeds: B row seeds (the coins' and the server sampler's seed); juniors: a
        served pool's junior index per row (None: the first; the server refuses one it does not hold)."""
        from ..decoding.tandem import engine_batch_seeds, rollout_from_rows

        t0 = time.thread_time()
        seeds = engine_batch_seeds(prompts, seeds)
        juniors = [0] * len(prompts) if juniors is None or self.schedule.name == "senior" else [int(j) for j in juniors]
        with ThreadPoolExecutor(max_workers=min(self.settings.concurrency, len(prompts))) as pool:
            answered = list(pool.map(self._one, [list(p) for p in prompts], seeds.tolist(), juniors))
        comps = [c for c, _ in answered]
        toks = [c.token_ids for c in comps]
        masks = replay(self.schedule, seeds, toks)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        roll = rollout_from_rows(toks, masks, [c.logprobs for c in comps], [c.finish_reason == "stop" for c in comps],
                                 pad)
        # the client's CPU: each request's thread, and this one's (seeds, the replay, the tensors)
        roll.client_cpu_s = sum(cpu for _, cpu in answered) + time.thread_time() - t0
        return roll


def _message(e) -> str:
    body = e.body if isinstance(getattr(e, "body", None), dict) else {}
    msg = body.get("message") or (body.get("error") or {}).get("message") if body else None
    return str(msg or e.message).splitlines()[0]
