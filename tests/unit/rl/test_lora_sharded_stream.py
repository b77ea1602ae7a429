"""``rl.lora``: the merged weight stream of an FSDP2-sharded LoRA senior is W + (alpha / r) B A under
the base model's names (docs/sharding.md, "LoRA"; docs of ``rl/lora.py``), with alpha != r so a
scaling of alpha, r / alpha or 1 cannot pass.

One process: a gloo group of one rank and FSDP2 over a one-device CPU mesh, so every weight is a
DTensor and the stream goes through the sharded merge the multi-process runs use (their own checks
are the slow 2-process runs of ``tests/distributed/test_sharded_training.py``). Expected values: the weights read
before sharding and combined in plain torch, with the scale worked out by hand (alpha 12, r 4: 3).
"""

import pytest
import torch

from conftest import make_model

R, ALPHA = 4, 12.0
SCALE = 3.0  # ALPHA / R by hand
TARGETS = ("q_proj", "down_proj")


@pytest.fixture
def one_rank_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _sharded_lora_senior(tok):
    """A tiny Qwen3 with the run's LoRA config applied (B made non-zero: PEFT starts it at 0), then
    FSDP2 over each decoder layer and the root as accelerate wraps it; (model, weights before)."""
    from peft import get_peft_model
    from torch.distributed.fsdp import fully_shard

    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.rl.lora import peft_config

    cfg = load_train_config(overrides={"lora_r": R, "lora_alpha": ALPHA, "lora_targets": list(TARGETS)})
    model = get_peft_model(make_model(len(tok), 0, hidden=32, layers=2), peft_config(cfg))
    torch.manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for layer in model.get_base_model().model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model, before


def test_the_sharded_lora_stream_is_base_plus_alpha_over_r_times_BA(tok, one_rank_group):
    from tandem_rlvr.rl.lora import stream_source
    from tandem_rlvr.rl.weight_stream import is_sharded, push

    model, before = _sharded_lora_senior(tok)
    assert is_sharded(model)
    streamed = {}
    base, named = stream_source(model)
    push(base, lambda ws: streamed.update((n, t.clone()) for n, t in ws), torch.float32, 1 << 16, named=named)

    prefix = "base_model.model."
    plain = {n.removeprefix(prefix).replace(".base_layer.", "."): t for n, t in before.items() if "lora_" not in n}
    assert set(streamed) == set(plain)  # base names only: no lora_A / lora_B / base_layer entries
    merged = 0
    for name, want in plain.items():
        owner = name.removesuffix(".weight")
        if name.endswith(".weight") and owner.rsplit(".", 1)[-1] in TARGETS:
            a = before[f"{prefix}{owner}.lora_A.default.weight"]  # (r, in)
            b = before[f"{prefix}{owner}.lora_B.default.weight"]  # (out, r)
            want = want + SCALE * (b @ a)  # (out, in)
            merged += 1
        torch.testing.assert_close(streamed[name], want, rtol=1e-6, atol=1e-6, msg=name)
    assert merged == 2 * len(TARGETS)  # both layers' targets were merged
    for name, p in model.named_parameters():  # the base itself stays bit-identical (the merge is out of place)
        if "lora_" not in name:
            assert torch.equal(p.full_tensor(), before[name.replace("_checkpoint_wrapped_module.", "")]), name
