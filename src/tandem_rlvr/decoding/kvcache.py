"""A KV cache that is written in place instead of grown by concatenation.

transformers' ``DynamicLayer`` appends every step's keys and values with ``torch.cat``,
which copies the whole cache of the layer each step. ``PreallocatedLayer`` allocates the
capacity the decoder will need once (prompt + new tokens), writes each step's slice into it
and hands attention a view of the filled part, so a step touches only the new entries.
Everything else about the cache (mask sizes, sequence length, sliding-window layers) is
transformers' own: only plain full-attention ``DynamicLayer`` s are swapped.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A full-attention layer cache with a fixed capacity; grows (by doubling) only if exceeded."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = int(capacity)
        self._k = self._v = None
        self._n = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        B, H, S, _ = key_states.shape
        end = self._n + S
        if self._k is None or end > self._k.shape[2]:
            cap = max(self.capacity, end) if self._k is None else max(2 * self._k.shape[2], end)
            k = key_states.new_empty((B, H, cap, key_states.shape[3]))
            v = value_states.new_empty((B, H, cap, value_states.shape[3]))
            if self._n:
                k[:, :, : self._n] = self._k[:, :, : self._n]
                v[:, :, : self._n] = self._v[:, :, : self._n]
            self._k, self._v = k, v
        self._k[:, :, self._n:end] = key_states
        self._v[:, :, self._n:end] = value_states
        self._n = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def reset(self) -> None:
        self._k = self._v = None
        self._n = 0
        super().reset()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (ascending), compacted in place into the first rows of the
        buffers: only the filled positions are copied, and nothing is re-allocated."""
        if self._k is None:
            return
        R, n = indices.shape[0], self._n
        self._k[:R, :, :n] = self._k[indices, :, :n]  # the right side is gathered into a copy first
        self._v[:R, :, :n] = self._v[indices, :, :n]
        self._k, self._v = self._k[:R], self._v[:R]
        self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]

    def _unsupported(self, *args, **kwargs):
        raise NotImplementedError("PreallocatedLayer is written for the tandem decoder's append-only use")

    crop = batch_repeat_interleave = reorder_cache = _unsupported


def preallocated_cache(config, capacity: int) -> DynamicCache:
    """transformers' cache for ``config``, its plain full-attention layers pre-allocated to ``capacity``."""
    cache = DynamicCache(config=config)
    layers = getattr(cache, "layers", None)
    if not layers:  # a config transformers could not lay out: keep its lazily built cache
        return cache
    cache.layers = [PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in layers]
    return cache
