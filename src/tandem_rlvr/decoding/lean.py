"""A lean one-token decode step for Llama-family bodies (Llama, Mistral, Qwen2, Qwen3, SmolLM).

A transformers forward of a small model is mostly framework work: it builds a causal mask,
dispatches through decorators, an attention-function registry and the cache's update hook,
for every layer, every step. For one new token per row none of that is needed: every row
writes its keys and values at the same cache position (the rows are left-padded and advance
in lockstep), and the attention mask is the running padding mask. ``LeanBody.step`` does just
the arithmetic, with the model's own parameters (read live, so a trained senior is always
current), the model's own rotary module, and the pre-allocated cache buffers of
``kvcache.PreallocatedLayer`` (which transformers' prefill filled).

It reproduces transformers' ops (RMSNorm in float32, the rotary formula, attention with
grouped KV heads: two matmuls on a CPU, ``scaled_dot_product_attention`` elsewhere, SiLU-gated
MLP); tests hold it to
transformers' forward within float tolerance. Bodies it does not recognise, sliding-window
attention, and caches that are not pre-allocated keep the transformers forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .kvcache import PreallocatedLayer

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm/Qwen3RMSNorm, bit for bit: normalise in float32, scale in the input dtype."""
    return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _unsupported(model) -> str | None:
    """Why ``model`` cannot take the lean step, or None."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in FAMILIES:
        return f"model type {getattr(cfg, 'model_type', None)!r}"
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "mlp_bias", False):
        return "activation or MLP bias"
    if int(getattr(cfg, "pretraining_tp", 1) or 1) != 1:
        return "tensor-parallel pretraining split"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return "sliding-window layers"
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return "sliding-window attention"
    body = model.get_decoder()
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(body, name):
            return f"body without {name}"
    linear = lambda m, names: all(type(getattr(m, n, None)) is torch.nn.Linear for n in names)  # noqa: E731
    for layer in body.layers:
        # exactly nn.Linear: a LoRA wrapper or a quantised linear would be skipped by plain F.linear
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or not linear(attn, ("q_proj", "k_proj", "v_proj", "o_proj")):
            return "attention layout"
        if mlp is None or not linear(mlp, ("gate_proj", "up_proj", "down_proj")):
            return "MLP layout"
    return None


class LeanBody:
    """The decode step of one model. ``LeanBody.of(model)`` is None when the model is not supported."""

    def __init__(self, model):
        self.body = model.get_decoder()
        cfg = model.config
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.scaling = self.head_dim ** -0.5
        rot = self.body.rotary_emb
        # two bodies whose rotary modules agree share one cos/sin per step
        self.rope_key = (type(rot).__name__, tuple(rot.inv_freq.tolist()),
                         float(getattr(rot, "attention_scaling", 1.0)), getattr(rot, "rope_type", None),
                         str(rot.inv_freq.device))

    @classmethod
    def of(cls, model) -> "LeanBody | None":
        return None if _unsupported(model) else cls(model)

    def rope(self, hidden_like: torch.Tensor, pos: torch.Tensor):
        """cos, sin (B, 1, 1, D) for positions ``pos`` (B, 1), in the dtype of ``hidden_like``."""
        cos, sin = self.body.rotary_emb(hidden_like, pos)  # (B, 1, D)
        return cos.unsqueeze(1), sin.unsqueeze(1)

    @staticmethod
    def usable(cache) -> bool:
        layers = getattr(cache, "layers", None)
        return bool(layers) and all(type(layer) is PreallocatedLayer and layer._k is not None for layer in layers)

    def bind(self) -> None:
        """Collect the parameters the step reads (once per generation: no module lookups per step;
        the tensors are the model's own, so in-place optimiser updates are always seen)."""
        def norm(m):
            return (m.weight, m.variance_epsilon)

        self.layers = []
        for layer in self.body.layers:
            a, m = layer.self_attn, layer.mlp
            qk = (norm(a.q_norm), norm(a.k_norm)) if hasattr(a, "q_norm") else None
            self.layers.append((norm(layer.input_layernorm), (a.q_proj.weight, a.q_proj.bias),
                                (a.k_proj.weight, a.k_proj.bias), (a.v_proj.weight, a.v_proj.bias),
                                (a.o_proj.weight, a.o_proj.bias), qk, norm(layer.post_attention_layernorm),
                                m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight))
        self.final = norm(self.body.norm)

    def _attend(self, q, keys, values, mask):
        """q (B, heads, 1, D), keys/values (B, kv_heads, n, D), mask (B, 1, 1, n) bool -> (B, 1, heads x D).
        On a CPU, two matmuls over the grouped heads beat the fused kernel for one query token
        (measured: docs/architecture.md, "Measured: decoding speed"); elsewhere the fused kernel."""
        B = q.shape[0]
        if q.device.type != "cpu":
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scaling,
                                               enable_gqa=self.kv_heads != self.heads)
            return o.transpose(1, 2).reshape(B, 1, -1)
        G = self.heads // self.kv_heads
        s = torch.matmul(q.view(B, self.kv_heads, G, self.head_dim), keys.transpose(-1, -2))  # (B, kv, G, n)
        s = s.mul_(self.scaling).masked_fill_(~mask, float("-inf"))
        o = torch.matmul(torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype), values)  # (B, kv, G, D)
        return o.reshape(B, 1, -1)

    def step(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache, rope=None) -> torch.Tensor:
        """ids, pos (B, 1) new tokens and their positions; mask (B, 1, 1, n+1) bool, True = attend
        (n = tokens already cached); ``cache``: the pre-allocated cache (appended in place); rope:
        (cos, sin) from ``self.rope`` when the caller shares it between bodies. Returns (B, H).
        ``bind`` must have run since the model's parameters were last replaced."""
        x = self.body.embed_tokens(ids)  # (B, 1, H)
        B, hd = x.shape[0], self.head_dim
        cos, sin = rope if rope is not None else self.rope(x, pos)
        for (ln1, qw, kw, vw, ow, qk, ln2, gate, up, down), lc in zip(self.layers, cache.layers, strict=True):
            h = _rms(x, *ln1)
            q = F.linear(h, *qw).view(B, 1, self.heads, hd)
            k = F.linear(h, *kw).view(B, 1, self.kv_heads, hd)
            v = F.linear(h, *vw).view(B, 1, self.kv_heads, hd)
            if qk is not None:
                q, k = _rms(q, *qk[0]), _rms(k, *qk[1])
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, 1, D)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            keys, values = lc.update(k, v)  # (B, kv_heads, n+1, D) views of the buffers
            x = x + F.linear(self._attend(q, keys, values, mask), *ow)
            h = _rms(x, *ln2)
            x = x + F.linear(F.silu(F.linear(h, gate)) * F.linear(h, up), down)
        return _rms(x, *self.final)[:, -1]
