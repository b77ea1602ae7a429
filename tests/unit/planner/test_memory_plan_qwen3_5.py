"""The replication's pair (presets/qwen3.5-9b-2b.yaml): the shipped Qwen3.5 text configs plan
offline, their weights are counted as worked out by hand, and our decoder runs a hybrid
(gated-delta-net + full-attention) Qwen3.5 body token for token as the full-prefix reference.

Weights by hand, 9B (hidden 4,096, 32 layers: 24 linear-attention, 8 full-attention, untied):
    embedding = output layer = 248,320 x 4,096 = 1,017,118,720; final norm 4,096
    MLP 3 x 4,096 x 12,288 = 150,994,944; two norms 8,192
    linear attention: in_proj_qkv 4,096 x (2 x 16 x 128 + 32 x 128) = 33,554,432, in_proj_z and
        out_proj 4,096 x 4,096 each, in_proj_a/b 2 x 4,096 x 32, conv1d 8,192 x 4, dt_bias and
        A_log 2 x 32, gated norm 128: 67,403,968
    full attention (gated: q_proj twice wide): q 4,096 x 16 x 256 x 2 = 33,554,432, k and v
        4,096 x 4 x 256 each, o 4,096 x 4,096, q/k norms 2 x 256: 58,720,768
2B (hidden 2,048, 24 layers: 18 + 6, tied): embedding 248,320 x 2,048, MLP 3 x 2,048 x 6,144,
    linear attention 2,048 x 6,144 + 2 x 2,048 x 2,048 + 2 x 2,048 x 16 + 6,144 x 4 + 32 + 128,
    full attention 2,048 x 8 x 256 x 2 + 2 x 2,048 x 512 + 2,048 x 2,048 + 512.
"""

import pytest
import torch

from tandem_rlvr.config import load_train_config

MLP9, NORMS9 = 3 * 4096 * 12288, 2 * 4096
LIN9 = 4096 * 8192 + 2 * 4096 * 4096 + 2 * 4096 * 32 + 8192 * 4 + 2 * 32 + 128
FULL9 = 4096 * 16 * 256 * 2 + 2 * 4096 * 4 * 256 + 4096 * 4096 + 2 * 256
P9 = 2 * 248320 * 4096 + 4096 + 24 * (MLP9 + NORMS9 + LIN9) + 8 * (MLP9 + NORMS9 + FULL9)
MLP2, NORMS2 = 3 * 2048 * 6144, 2 * 2048
LIN2 = 2048 * 6144 + 2 * 2048 * 2048 + 2 * 2048 * 16 + 6144 * 4 + 32 + 128
FULL2 = 2048 * 8 * 256 * 2 + 2 * 2048 * 512 + 2048 * 2048 + 512
P2 = 248320 * 2048 + 2048 + 18 * (MLP2 + NORMS2 + LIN2) + 6 * (MLP2 + NORMS2 + FULL2)


@pytest.mark.parametrize("spec,params,layer,attention_layers", [
    ("Qwen/Qwen3.5-9B", P9, MLP9 + NORMS9 + LIN9, 8), ("Qwen/Qwen3.5-2B", P2, MLP2 + NORMS2 + LIN2, 6)])
def test_shipped_qwen3_5_configs_count_weights_by_hand(spec, params, layer, attention_layers):
    from tandem_rlvr.models import model_config
    from tandem_rlvr.planner.shapes import Shape

    S = Shape.of(model_config(spec))  # offline: the config ships in presets/models
    assert (S.params, S.layer_params, S.attention_layers) == (params, layer, attention_layers)


def test_preset_pairs_the_9b_senior_with_the_2b_junior_on_the_paper_settings():
    pair = load_train_config("qwen3.5-9b-2b", None, {}).to_dict()
    paper = load_train_config("qwen3-4b-deepscaler", None, {}).to_dict()
    assert (pair["senior"], pair["junior"], pair["template"]) == ("Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-2B", "chat")
    differ = {k for k in paper if paper[k] != pair[k]}
    assert differ == {"senior", "junior", "output_dir"}


def test_kv_cache_counts_only_full_attention_layers_and_states_per_row():
    from tandem_rlvr.models import model_config
    from tandem_rlvr.planner.shapes import Shape

    S = Shape.of(model_config("Qwen/Qwen3.5-9B"))
    assert S.kv_bytes_per_token(torch.bfloat16) == 8 * 2 * 4 * 256 * 2
    # per linear-attention layer: a (32 value heads, 128, 128) fp32 state + a 4-wide window of 8,192 bf16 channels
    assert S.state_bytes_per_row == 24 * (32 * 128 * 128 * 4 + 8192 * 4 * 2)


def test_decoder_runs_a_hybrid_qwen3_5_body_like_the_reference():
    """No lean step for this body (not a Llama-family layout): the decoder takes transformers'
    own forward, with its linear-attention cache layers; tokens and authors equal the reference."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from reference.decoder import reference_generate
    from tandem_rlvr.decoding.sampling import SamplingParams
    from tandem_rlvr.decoding.schedule import make_schedule
    from tandem_rlvr.decoding.tandem import ModelRunner, TandemDecoder

    cfg = AutoConfig.for_model("qwen3_5_text", vocab_size=97, hidden_size=64, intermediate_size=128,
                               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                               linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                               linear_value_head_dim=16, tie_word_embeddings=True, eos_token_id=96, pad_token_id=0)
    torch.manual_seed(0)
    senior = AutoModelForCausalLM.from_config(cfg).eval()
    torch.manual_seed(1)
    junior = AutoModelForCausalLM.from_config(cfg).eval()
    assert ModelRunner(senior).lean is None
    sampling = SamplingParams(temperature=0.0, max_new_tokens=12)
    prompts, seeds = [[5, 6, 7, 8], [9, 10], [11, 12, 13]], [1, 2, 3]  # uneven: left padding
    out = TandemDecoder(senior, junior, make_schedule("token", None, p=0.5, K=4, vocab_size=97), sampling,
                        eos_ids=[96], pad_id=0).generate(prompts, seeds)
    for b, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
        tokens, flags, _ = reference_generate(senior, junior, "token", sampling, prompt, seed, [96], set(), p=0.5,
                                              K=4, surfaces=None)
        assert out.row_tokens(b) == tokens and out.row_mask(b) == [int(f) for f in flags]


def _graph_saved_bytes(config, kinds, rows, tokens):
    from reference.graph_saved import graph_saved_bytes

    return graph_saved_bytes(config, kinds, rows, tokens)


def test_hybrid_activation_profile_counts_each_layer_type_in_a_layer_of_that_type():
    """Per token, a full-attention and a linear-attention layer of the 2B junior save what the
    autograd graph of a one- and two-layer body of that type holds (a graph walk over the saved
    tensors). The walk cannot see what an in-place slice write (CopySlices) saves inside the
    chunked gated delta rule, a few KiB per layer, hence the 0.5% tolerance."""
    from tandem_rlvr.models import model_config
    from tandem_rlvr.planner.shapes import _hybrid_profile

    config = model_config("Qwen/Qwen3.5-2B")
    rows, tokens = 2, 64
    per_type = {}
    for kind in ("linear_attention", "full_attention"):
        one = _graph_saved_bytes(config, [kind], rows, tokens)
        two = _graph_saved_bytes(config, [kind] * 2, rows, tokens)
        per_type[kind] = (two - one) / (rows * tokens)
    assert per_type["full_attention"] != pytest.approx(per_type["linear_attention"], rel=0.01)
    from collections import Counter

    prof = _hybrid_profile(config, Counter(config.layer_types), torch.float32, torch.float32)
    assert prof.max_layer == pytest.approx(max(per_type.values()), rel=0.005)
    mean = (18 * per_type["linear_attention"] + 6 * per_type["full_attention"]) / 24  # 2B: 18 + 6 layers
    assert prof.per_layer == pytest.approx(mean, rel=0.005)
