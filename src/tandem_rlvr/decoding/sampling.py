"""Temperature / top-k / top-p sampling driven by explicit uniforms.

``sample(logits, u)`` is inverse-CDF sampling: one uniform per row picks the token whose
cumulative probability first reaches it. With the uniforms from ``rng.uniform`` the choice
is a pure function of (logits, seed, step), which lets the fast decoder and the slow
reference decoder be compared token for token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ..errors import TandemError


@dataclass(frozen=True)
class SamplingParams:
    """How the active model turns logits into a token.

    temperature: 0 means greedy (argmax); otherwise logits are divided by it.
    top_k: keep the k most likely tokens (0 = off). top_p: keep the smallest set whose
    probability reaches p (1.0 = off). max_new_tokens: per row, EOS included.
    The paper trains at temperature 0.6 and evaluates at 0.7 / top-p 0.8 / top-k 20.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256

    def __post_init__(self):
        if not 0 <= self.temperature < float("inf"):  # nan and inf fail too (inf would sample uniform noise)
            raise TandemError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise TandemError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise TandemError(f"top_k must be >= 0, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise TandemError(f"max_new_tokens (--max-tokens) must be >= 1, got {self.max_new_tokens}")

    def to_dict(self) -> dict:
        return asdict(self)


def scaled_logprobs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """log-softmax of temperature-scaled logits (B, V) in float32: the emitting model's
    log-prob of a token, as TRL recomputes it (logits / temperature, no top-k/top-p)."""
    logits = logits.float()
    if params.temperature > 0:
        logits = logits / params.temperature
    return torch.log_softmax(logits, dim=-1)


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, then top-k, then top-p; removed tokens get -inf. (B, V) -> (B, V) float32."""
    logits = logits.float()
    if params.temperature > 0:
        logits = logits / params.temperature
    V = logits.shape[-1]
    if 0 < params.top_k < V:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        drop_sorted = _top_p_drop(sorted_logits, params.top_p)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _top_p_drop(sorted_logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Given logits sorted descending, True where top-p drops the token: the mass strictly
    before it already reaches ``top_p`` (the most likely token is always kept)."""
    probs = torch.softmax(sorted_logits, dim=-1)
    return (torch.cumsum(probs, dim=-1) - probs) >= top_p


def _sample_full(logits: torch.Tensor, u: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    probs = torch.softmax(filter_logits(logits, params), dim=-1)  # (B, V)
    cdf = torch.cumsum(probs, dim=-1)  # (B, V)
    target = (u.to(cdf.device, cdf.dtype) * cdf[:, -1]).unsqueeze(-1)  # (B, 1)
    tok = torch.searchsorted(cdf, target).squeeze(-1)
    return tok.clamp_(max=logits.shape[-1] - 1)


def _sample_top_k(logits: torch.Tensor, u: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Same distribution and the same inverse-CDF order (ascending token id) as ``_sample_full``,
    computed on the k candidates only: no (B, V) sort, softmax or cumsum. Rows whose k-th logit
    is tied with tokens outside the top k (top-k keeps every tied token) go the full way, so a
    row's token never depends on the other rows of its batch."""
    x = logits.float()
    if params.temperature > 0:
        x = x / params.temperature
    k = params.top_k
    vals, idx = torch.topk(x, k, dim=-1)  # (B, k), descending
    kth = vals[:, -1:]
    ties = (x >= kth).sum(-1) > k  # (B,)
    if params.top_p < 1.0:
        vals = vals.masked_fill(_top_p_drop(vals, params.top_p), float("-inf"))
    # Inverse CDF over the candidates in ascending token-id order, as over the full vocabulary.
    idx_sorted, order = torch.sort(idx, dim=-1)
    probs = torch.softmax(vals.gather(-1, order), dim=-1)  # (B, k)
    cdf = torch.cumsum(probs, dim=-1)
    target = (u.to(cdf.device, cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    pos = torch.searchsorted(cdf, target).clamp_(max=k - 1)
    tok = idx_sorted.gather(-1, pos).squeeze(-1)
    if bool(ties.any()):
        rows = ties.nonzero().squeeze(1)
        tok[rows] = _sample_full(logits.index_select(0, rows), u.to(logits.device).index_select(0, rows), params)
    return tok


def sample(logits: torch.Tensor, u: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Pick one token per row. logits (B, V) raw; u (B,) uniforms in (0, 1). Returns (B,) int64.

    With top-k on, only the k candidates are sorted and normalised (at a 49k-151k vocabulary
    the full-vocabulary sort for top-p dominated a small model's decoding step)."""
    if params.temperature == 0:
        return torch.argmax(logits, dim=-1)
    if 0 < params.top_k < logits.shape[-1]:
        return _sample_top_k(logits, u, params)
    return _sample_full(logits, u, params)
