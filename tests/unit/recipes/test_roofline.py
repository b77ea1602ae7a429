"""The roofline bound (recipes/roofline.py) against hand-worked numbers."""

import pytest
import torch

from conftest import make_model
from tandem_rlvr.recipes.roofline import Shapes, body_seconds, head_seconds, machine_rates, roofline_bound

# one 100-parameter body matrix, a 50-parameter output layer, 4-byte parameters, no attention
TOY = Shapes(linears=(100,), head=50, elem=4, layers=1, heads=1, kv_heads=1, head_dim=1)


def test_memory_bound_step_charges_every_read_output_layer():
    # F = 1000 FLOP/s, W = 400 B/s, 2 rows, p = 1/2, context 0.
    # body: max(2*2*100/1000, 400/400) = 1; a head with k rows: max(0.1 k, 200/400 = 0.5), 0 if k = 0.
    # solo = 1 + 0.5 = 1.5; tandem = 2 + 2 * (1/4*0 + 1/2*0.5 + 1/4*0.5) = 2.75
    assert body_seconds(TOY, 2, 0.0, 1000.0, 400.0) == pytest.approx(1.0)
    assert head_seconds(TOY, 2, 0.5, 1000.0, 400.0) == pytest.approx(0.375)
    assert roofline_bound(TOY, TOY, 2, 0.5, 0.0, 1000.0, 400.0) == pytest.approx(1.5 / 2.75)


def test_compute_bound_limit_is_the_flop_bound():
    # memory free (W huge): solo = 0.4 + 0.2, tandem = 0.8 + 0.1 + 0.1; the FLOP bound (b + h) / (2b + h)
    # with b = 200, h = 100 FLOPs per token is 300 / 500
    assert roofline_bound(TOY, TOY, 2, 0.5, 0.0, 1000.0, 1e30) == pytest.approx(0.6)


def test_attention_term_is_the_larger_of_its_flops_and_its_kv_reads():
    s = Shapes(linears=(), head=1, elem=4, layers=2, heads=4, kv_heads=2, head_dim=8)
    # FLOPs 4*2*4*8*10*3 = 7680 -> 7.68 s at 1000 FLOP/s; KV bytes 2*2*2*8*10*3*4 = 7680 -> 15.36 s at 500 B/s
    assert body_seconds(s, 3, 10.0, 1000.0, 500.0) == pytest.approx(15.36)
    assert body_seconds(s, 3, 10.0, 1000.0, 1e9) == pytest.approx(7.68)


def test_shapes_of_a_qwen3_model_counts_its_matrices(tok):
    model = make_model(len(tok), 0)  # hidden 64, 2 layers, 4 heads of 16, 2 KV heads, MLP 128
    s = Shapes.of(model)
    per_layer = 64 * 64 + 2 * (32 * 64) + 64 * 64 + 3 * (64 * 128)  # q, k, v, o, gate, up, down
    assert sum(s.linears) == 2 * per_layer and len(s.linears) == 14
    assert s.head == len(tok) * 64 and s.elem == 4
    assert (s.layers, s.heads, s.kv_heads, s.head_dim) == (2, 4, 2, 16)


def test_machine_rates_are_positive_and_finite():
    flops, bw = machine_rates(torch.device("cpu"), repeats=1)
    assert 1e8 < flops < 1e15 and 1e8 < bw < 1e14
