"""A slow reference for the memory plan's saved-tensor count (planner/shapes.saved_bytes): the bytes
the autograd graph of a model's body holds after one forward, found by walking the graph from the body's
output and reading each node's saved tensors (parameters left out; each storage once)."""

from __future__ import annotations

import torch


def graph_saved_bytes(config, kinds, rows: int, tokens: int, init: bool = False, lora: dict | None = None,
                      input_grads: bool = False) -> int:
    """Saved bytes of one forward of ``rows`` x ``tokens`` through a body of ``len(kinds)`` layers
    (``kinds``: the layer types written out, or None entries for a config without layer types). The
    model is built here from the config's dict; ``lora``: ``peft.LoraConfig`` keywords, the adapters
    put on with ``peft.get_peft_model`` (which freezes the base); ``input_grads``: the embedding's output
    made to require grad (``enable_input_require_grads``, as transformers does for checkpointing)."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    data = {**config.to_dict(), "num_hidden_layers": len(kinds), "vocab_size": 64,
            "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    if all(k is not None for k in kinds):
        data["layer_types"] = list(kinds)
    else:
        data.pop("layer_types", None)
    data.pop("model_type", None)
    cfg = config.__class__(**data)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    if init:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).train()
    else:
        with no_init_weights():
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).train()
    if "layer_types" in data:
        assert list(model.config.layer_types) == list(kinds)  # built as asked
    body = model.model
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        get_peft_model(model, LoraConfig(**lora)).train()  # injects into model (body included) in place
        assert not any(p.requires_grad for n, p in body.named_parameters() if "lora_" not in n)
    if input_grads:
        model.enable_input_require_grads()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    ids = torch.randint(0, 64, (rows, tokens))
    attn = torch.ones(rows, tokens, dtype=torch.long)
    attn[0, : tokens // 4] = 0
    out = body(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
    seen, todo, storages = set(), [out.grad_fn], {}
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if name.startswith("_saved_"):
                value = getattr(node, name)
                for t in value if isinstance(value, (tuple, list)) else [value]:
                    if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in params:
                        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        todo += [f for f, _ in node.next_functions]
    return sum(storages.values())
