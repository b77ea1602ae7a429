"""Counter-based random numbers: one uniform per (row seed, step, stream), no hidden state.

Every random choice in decoding (the authorship coin, the sampled token) is a pure function
of the row's seed, the step and a stream id. A rollout is therefore reproducible from its
seed alone, independent of which other rows share its batch, of the batch order, of the
device, and of a resumed training run (training derives the row seed from (seed, step, prompt,
sample)). The mixer is a 32-bit avalanche hash evaluated in int64 arithmetic with
multipliers below 2**31, so no product overflows on any backend.
"""

from __future__ import annotations

import torch

# Stream ids: independent uniforms for the same (seed, step).
COIN = 1
SAMPLE = 2
RESAMPLE = 3

_M32 = 0xFFFFFFFF
_C1 = 0x7FEB352D
_C2 = 0x2C1B3C6D
_C3 = 0x297A2D39


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """Avalanche a tensor of int64 values in [0, 2**32) to another such tensor."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = ((x & 0xFFFF) * _C1 + (((x >> 16) * _C1) & 0xFFFF) * 65536) & _M32
    x = x ^ (x >> 15)
    x = ((x & 0xFFFF) * _C2 + (((x >> 16) * _C2) & 0xFFFF) * 65536) & _M32
    x = x ^ (x >> 16)
    return x


def uniform(seeds: torch.Tensor, step: int | torch.Tensor, stream: int) -> torch.Tensor:
    """Uniforms in the open interval (0, 1), one per seed.

    seeds: (B,) int64, any values (reduced to 32 bits per half); step: int or (B,) int64.
    Returns (B,) float32 on the seeds' device.
    """
    s = seeds.to(torch.int64)
    h = _mix32(s & _M32)
    h = _mix32(h ^ ((s >> 32) & _M32) ^ (stream * _C3))
    h = _mix32(h + step)
    h = _mix32(h ^ (stream * 0x3C6EF372 & _M32))
    # 24 high bits -> (0, 1), never exactly 0 or 1.
    return ((h >> 8).to(torch.float32) + 0.5) / float(1 << 24)


def uniform_table(seeds: torch.Tensor, steps: int, stream: int) -> torch.Tensor:
    """(B, steps) uniforms: column t equals ``uniform(seeds, t, stream)``. One vectorised pass,
    so a decoding loop indexes a column per step instead of hashing per step."""
    B = seeds.shape[0]
    t = torch.arange(steps, dtype=torch.int64, device=seeds.device)
    return uniform(seeds.to(torch.int64)[:, None].expand(B, steps), t[None, :].expand(B, steps), stream)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def row_seed(base_seed: int, *keys: int) -> int:
    """Derive a 63-bit row seed from a base seed and integer keys, e.g. (step, prompt, sample)."""
    acc = _splitmix64(int(base_seed))
    for k in keys:
        acc = _splitmix64(acc ^ (int(k) & 0xFFFFFFFFFFFFFFFF))
    return acc & 0x7FFFFFFFFFFFFFFF
