"""What a model's memory depends on, read off its own transformers classes (for ``planner/memory.py``).

- the config of a model spec is ``models.model_config`` (hub ids with a config shipped in
  ``presets/models``, the paper's Qwen3-4B and the replication's Qwen3.5-9B and -2B, need no hub).
- ``Shape``: widths, parameter counts (all, nn.Linear, per decoder layer, outside the layers)
  and the decode-time state per token (key/value caches) and per row (the fixed-size
  convolution and recurrent states of linear-attention layers), counted on a meta-device
  instance of the architecture's own class.
- ``activation_profile``: the bytes autograd saves per token and layer, counted on the
  architecture's own layer at small widths and extended linearly (see its docstring). A hybrid
  body (Qwen3.5: three gated-delta-net linear-attention layers to one full-attention layer) is
  counted per layer type at its real widths and weighted by how many layers of each type it has.
  Under LoRA (``LoraSpec``) the layer is counted as it trains: PEFT's adapters injected, the base
  frozen, so a frozen matrix saves nothing for its own gradient and the adapters save their inputs.
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass

import torch

from ..errors import TandemError
from ..rl.lora import peft_targets


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


_SHAPES: dict = {}
_PROFILES: dict = {}


def layer_types(config) -> list[str]:
    return list(getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers)


@dataclass(frozen=True)
class Shape:
    """The widths of a decoder-only model that memory depends on."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    params: int  # all parameters (tied matrices once)
    matrix_params: int  # parameters of the nn.Linear layers (what autocast casts)
    layer_params: int = 0  # the largest decoder layer's parameters (what FSDP gathers per layer)
    root_params: int = 0  # parameters outside the decoder layers (embedding, final norm, output layer)
    attention_layers: int = 0  # layers with a key/value cache (all but linear-attention layers)
    state_bytes_per_row: int = 0  # linear-attention layers' decode state per row (convolution + recurrent)
    lora_per_rank: int = 0  # sum of (in + out) over the decoder layers' nn.Linear: LoRA weights per unit of rank

    @classmethod
    def of(cls, config) -> "Shape":
        key = (type(config).__name__, config.to_json_string())
        if key not in _SHAPES:
            _SHAPES[key] = cls._count(config)
        return _SHAPES[key]

    @classmethod
    def _count(cls, config) -> "Shape":
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        params = sum(p.numel() for p in model.parameters())
        matrix = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
        layers = model.get_decoder().layers
        per_layer = [sum(p.numel() for p in layer.parameters()) for layer in layers]
        lora = sum(m.in_features + m.out_features for m in layers.modules() if isinstance(m, torch.nn.Linear))
        types = layer_types(config)
        linear = types.count("linear_attention")
        state = 0
        if linear:  # gated delta net: a (value heads, key dim, value dim) fp32 state and a causal-conv window
            kh, kd = config.linear_num_key_heads, config.linear_key_head_dim
            vh, vd = config.linear_num_value_heads, config.linear_value_head_dim
            state = linear * (vh * kd * vd * 4 + (2 * kh * kd + vh * vd) * config.linear_conv_kernel_dim * 2)
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.num_attention_heads,
                   _kv_heads(config), _head_dim(config), config.vocab_size,
                   bool(getattr(config, "tie_word_embeddings", False)), params, matrix, max(per_layer),
                   params - sum(per_layer), len(types) - linear, state, lora)

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        return self.attention_layers * 2 * self.kv_heads * self.head_dim * dtype_bytes(dtype)


@dataclass(frozen=True)
class LoraSpec:
    """The adapters a LoRA run trains (``rl/lora.py``): what changes the activations autograd saves."""

    r: int
    targets: tuple[str, ...]
    dropout: float = 0.0
    input_grads: bool = False  # the embedding's output requires grad: transformers' checkpointing under PEFT

    def inject(self, model):
        """PEFT's adapters in ``model`` (in place), its base frozen, as ``rl.lora.peft_config`` makes them;
        with ``input_grads``, the embedding's output made to require grad as transformers does when
        checkpointing is on (``enable_input_require_grads``), so the first layer saves what the others do."""
        try:
            from peft import LoraConfig, inject_adapter_in_model
        except ImportError as e:
            raise TandemError("planning a LoRA run counts PEFT's adapters: pip install 'tandem-rlvr[lora]'") from e
        model.requires_grad_(False)
        model = inject_adapter_in_model(LoraConfig(r=self.r, lora_alpha=2 * self.r, lora_dropout=self.dropout,
                                                   target_modules=peft_targets(self.targets), bias="none"), model)
        if self.input_grads:
            model.enable_input_require_grads()
        return model


def saved_bytes(config, layers: int, master: torch.dtype, compute: torch.dtype, rows: int, tokens: int,
                init: bool = True, lora: LoraSpec | None = None) -> int:
    """Bytes autograd saves in one forward of ``rows`` x ``tokens`` through the model's body
    (parameters themselves excluded: they are counted as weights); with ``lora``, through the body
    with those adapters on a frozen base."""
    from transformers import AutoModelForCausalLM

    cfg = _variant(config, num_hidden_layers=layers, vocab_size=64, attn_implementation="sdpa", bos_token_id=None,
                   eos_token_id=None, pad_token_id=None)
    from transformers.initialization import no_init_weights

    torch.manual_seed(0)
    if init:
        model = AutoModelForCausalLM.from_config(cfg, dtype=master).train()
    else:
        with no_init_weights():
            model = AutoModelForCausalLM.from_config(cfg, dtype=master).train()
    if lora is not None:
        model = lora.inject(model).train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    # autocast's compute-dtype copies of the weights are saved too: the plan counts them as weights
    # (its "autocast copies"), so they are left out here; no activation has a weight's shape (rows = 2)
    shapes = {tuple(p.shape) for p in model.parameters()} | {tuple(p.shape[::-1]) for p in model.parameters()}
    # The graph keeps what ``pack`` returns: a holder per saved tensor, watched by a weak reference.
    # A branch of the graph that the forward drops (an intermediate nobody uses) frees its holders,
    # and its storage may be handed to a later tensor at the same address; so only the holders still
    # alive once the forward is done, with its output held, are counted, each storage once. (Keying
    # every saved storage by its address alone counted by chance: 2 MiB either way between runs of the
    # Qwen3.5 layers' reference gated delta rule.)
    held: list = []

    class _Saved:
        __slots__ = ("t", "__weakref__")

        def __init__(self, t):
            self.t = t

    def pack(t):
        copy = compute != master and t.dtype == compute and tuple(t.shape) in shapes
        h = _Saved(t)
        if t.untyped_storage().data_ptr() not in params and not copy:
            held.append(weakref.ref(h))
        return h

    ids = torch.randint(0, 64, (rows, tokens))
    attn = torch.ones(rows, tokens, dtype=torch.long)
    attn[0, : tokens // 4] = 0  # left padding, as batched prompts have
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda h: h.t):
        with torch.autocast("cpu", dtype=compute, enabled=compute != master):
            out = model.model(input_ids=ids, attention_mask=attn, use_cache=False)
    live = {}
    for ref in held:
        h = ref()
        if h is not None:
            st = h.t.untyped_storage()
            live[st.data_ptr()] = st.nbytes()
    del out
    return sum(live.values())


@dataclass(frozen=True)
class ActivationProfile:
    per_layer: float  # bytes per token and layer (mean over the body's layers)
    model_level: float  # bytes per token outside the layers (embedding output, final norm, ...)
    max_layer: float = 0.0  # bytes per token of the heaviest layer type (one layer's backward works on it)


def activation_profile(config, master: torch.dtype, compute: torch.dtype,
                       lora: LoraSpec | None = None) -> ActivationProfile:
    """``_profile`` once per architecture, precision and LoRA setting (layout searches plan many times)."""
    key = (type(config).__name__, config.to_json_string(), master, compute, lora)
    if key not in _PROFILES:
        _PROFILES[key] = _profile(config, master, compute, lora)
    return _PROFILES[key]


def _profile(config, master: torch.dtype, compute: torch.dtype, lora: LoraSpec | None = None) -> ActivationProfile:
    """Saved activation bytes per token at ``config``'s widths (see module docstring): counted at
    nine small widths of the same architecture and extended linearly to the real ones. Exact at
    held-out widths in tests; one key/value head (multi-query attention) saves about 8% less than
    the extension says, because repeating a single head needs no copy.
    A body with linear-attention layers is counted at its real widths instead (``_hybrid_profile``)."""
    # (hidden, heads, kv heads, head dim, intermediate): each width varies alone at least once, so
    # the seven coefficients are determined (heads and head dim vary apart: q = heads x head dim)
    widths = [(64, 4, 2, 16, 160), (96, 4, 2, 16, 160), (64, 8, 2, 16, 160), (64, 4, 4, 16, 160), (64, 4, 2, 16, 320),
              (64, 4, 2, 32, 160), (64, 8, 4, 32, 224), (128, 8, 4, 16, 224), (96, 6, 2, 24, 192)]
    types = Counter(layer_types(config))
    if len(types) > 1 or "linear_attention" in types:
        return _hybrid_profile(config, types, master, compute, lora)
    rows, tokens = 2, 32
    X, y_layer, y_model = [], [], []
    for h, nh, nkv, hd, i in widths:
        cfg = _variant(config, hidden_size=h, num_attention_heads=nh, num_key_value_heads=nkv, head_dim=hd,
                       intermediate_size=i)
        one = saved_bytes(cfg, 1, master, compute, rows, tokens, lora=lora)
        two = saved_bytes(cfg, 2, master, compute, rows, tokens, lora=lora)
        X.append([h, nh * hd, nkv * hd, i, nh, nkv, 1.0])
        y_layer.append((two - one) / (rows * tokens))
        y_model.append((2 * one - two) / (rows * tokens))
    A = torch.tensor(X, dtype=torch.float64)
    real = torch.tensor([config.hidden_size, config.num_attention_heads * _head_dim(config),
                         _kv_heads(config) * _head_dim(config), config.intermediate_size,
                         config.num_attention_heads, _kv_heads(config), 1.0], dtype=torch.float64)
    coef_layer = torch.linalg.lstsq(A, torch.tensor(y_layer, dtype=torch.float64)[:, None]).solution[:, 0]
    coef_model = torch.linalg.lstsq(A, torch.tensor(y_model, dtype=torch.float64)[:, None]).solution[:, 0]
    per_layer = float(real @ coef_layer)
    return ActivationProfile(per_layer, float(real @ coef_model), per_layer)


def _hybrid_profile(config, types: Counter, master: torch.dtype, compute: torch.dtype,
                    lora: LoraSpec | None = None) -> ActivationProfile:
    """A body with linear-attention layers, counted at its real widths (one and two layers of each
    type, weights left uninitialised: bytes do not depend on values), 2 rows x 64 tokens (one chunk
    of the gated delta rule). The small-width extension does not hold for these layers: their own
    head widths stay fixed while the rest shrinks, and the fit came out 3-5x over the direct count."""
    rows, tokens = 2, 64
    per_type, model_level = {}, []
    for kind in types:
        one = saved_bytes(_variant(config, layer_types=[kind]), 1, master, compute, rows, tokens, init=False, lora=lora)
        two = saved_bytes(_variant(config, layer_types=[kind] * 2), 2, master, compute, rows, tokens, init=False,
                          lora=lora)
        per_type[kind] = (two - one) / (rows * tokens)
        model_level.append((2 * one - two) / (rows * tokens))
    mean = sum(per_type[k] * n for k, n in types.items()) / sum(types.values())
    return ActivationProfile(mean, max(model_level), max(per_type.values()))


def _variant(config, **changes):
    """``config`` with some widths changed. A given ``layer_types`` sets the depth; otherwise the
    config's own layer types stay while they match the depth, and are rebuilt from the config's
    defaults when the depth changes. (Dropping them on every depth change made a one-layer
    full-attention variant of Qwen3.5 a linear-attention layer: its default puts full attention
    at every fourth layer, so the hybrid profile counted the linear layer for both types.)"""
    data = {**config.to_dict(), **changes}
    if "layer_types" in changes:
        data["num_hidden_layers"] = len(changes["layer_types"])
    elif len(data.get("layer_types") or []) != data["num_hidden_layers"]:
        data.pop("layer_types", None)
    data.pop("max_window_layers", None)
    data.pop("model_type", None)
    return config.__class__(**data)


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _kv_heads(config) -> int:
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads
