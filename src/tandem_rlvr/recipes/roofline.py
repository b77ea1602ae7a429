"""The roofline bound of tandem over solo decoding: what the machine allows at a given batch.

The FLOP bound (``bench.flop_bound``) prices a matrix product by its FLOPs alone. At the
small row counts of decoding, a product also has to stream its whole weight matrix from
memory once per step, however few rows it multiplies: below some row count the step is
limited by memory bandwidth, not arithmetic. Then the inactive model's output layer is not
free (it is read whenever any row of the step is that model's) and the bound is lower.

Per decode step of R rows, each weight matrix of n parameters (e bytes each) costs at least
``max(2 R n / F, n e / W)`` seconds, with F the machine's matrix-product rate (FLOP/s) and W
its memory bandwidth (bytes/s), both measured on the benchmark's own threads and device
(``machine_rates``). Attention costs ``max(4 L h d c R / F, 2 L k d c e R / W)`` (L layers,
h query and k key-value heads of width d, context c: the keys and values of every row are
read). Solo decodes R rows with one body and one output layer; tandem with both bodies on all
R rows and each output layer on the rows its model wrote, R_s ~ Binomial(R, p) for the
senior (an output layer with no rows costs nothing), averaged exactly over that distribution.
The bound is solo time / tandem time per step. Everything else a step does (norms,
sampling, the schedule) is left out of both sides, so the bound is optimistic for both.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shapes:
    """What a decode step of one model reads: ``linears`` (parameter counts of the body's
    matrices), ``head`` (output layer parameters), bytes per parameter, and attention sizes."""

    linears: tuple[int, ...]
    head: int
    elem: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, model) -> "Shapes":
        cfg = model.config
        body = model.get_decoder()
        lin = tuple(m.weight.numel() for m in body.modules() if isinstance(m, torch.nn.Linear))
        head = model.get_output_embeddings().weight
        heads = cfg.num_attention_heads
        return cls(lin, head.numel(), head.element_size(), cfg.num_hidden_layers, heads,
                   getattr(cfg, "num_key_value_heads", None) or heads,
                   getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)


def _matrix(n: int, rows: float, elem: int, flops: float, bw: float) -> float:
    return 0.0 if rows <= 0 else max(2.0 * rows * n / flops, n * elem / bw)


def body_seconds(s: Shapes, rows: int, context: float, flops: float, bw: float) -> float:
    """Least time of one body step on ``rows`` rows at average context ``context``."""
    attn = max(4.0 * s.layers * s.heads * s.head_dim * context * rows / flops,
               2.0 * s.layers * s.kv_heads * s.head_dim * context * rows * s.elem / bw)
    return sum(_matrix(n, rows, s.elem, flops, bw) for n in s.linears) + attn


def head_seconds(s: Shapes, rows: int, p: float, flops: float, bw: float) -> float:
    """Expected least time of the output layer when each of ``rows`` rows is this model's with
    probability ``p`` (independently): the exact mean over Binomial(rows, p)."""
    return sum(math.comb(rows, k) * p ** k * (1 - p) ** (rows - k) * _matrix(s.head, k, s.elem, flops, bw)
               for k in range(rows + 1))


def roofline_bound(senior: Shapes, junior: Shapes, rows: int, p: float, context: float,
                   flops: float, bw: float) -> float:
    """Tandem/solo throughput bound at ``rows`` rows per step (solo = the senior alone)."""
    solo = body_seconds(senior, rows, context, flops, bw) + head_seconds(senior, rows, 1.0, flops, bw)
    tandem = (body_seconds(senior, rows, context, flops, bw) + body_seconds(junior, rows, context, flops, bw)
              + head_seconds(senior, rows, p, flops, bw) + head_seconds(junior, rows, 1.0 - p, flops, bw))
    return solo / tandem


def best_seconds(fn, repeats: int, device: torch.device | None = None) -> float:
    """Fastest of ``repeats`` calls of ``fn`` in seconds (on CUDA, each call synchronised)."""
    sync = device is not None and device.type == "cuda"
    best = float("inf")
    for _ in range(repeats):
        if sync:
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t)
    return best


@torch.no_grad()
def machine_rates(device: torch.device, dtype: torch.dtype = torch.float32, repeats: int = 5) -> tuple[float, float]:
    """(F, W): the best matrix-product rate in FLOP/s (a 256 x 2048 by 2048 x 2048 product, its
    weight small enough to stay in cache) and the memory bandwidth in bytes/s (one row times a
    weight matrix of 2^26 parameters, 256 MB in float32: far larger than any cache, so the
    product streams it from memory), on the current threads. Best of ``repeats``."""
    g = torch.Generator(device="cpu").manual_seed(0)
    w = torch.randn(2048, 2048, generator=g).to(device, dtype)
    x = torch.randn(256, 2048, generator=g).to(device, dtype)
    big = torch.randn(8192, 8192, generator=g).to(device, dtype)
    one = torch.randn(1, 8192, generator=g).to(device, dtype)
    small_product, streaming = ((lambda: torch.nn.functional.linear(x, w)),
                                (lambda: torch.nn.functional.linear(one, big)))
    small_product(), streaming()  # warm-up
    flops = 2.0 * 256 * 2048 * 2048 / best_seconds(small_product, repeats, device)
    bw = big.numel() * big.element_size() / best_seconds(streaming, repeats, device)
    return flops, bw
