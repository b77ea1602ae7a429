"""The junior pool's spec and its seeded draw (tandem_rlvr/pool.py)."""

import hashlib
from collections import Counter

import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.pool import JuniorPool


def test_names_without_weights_are_drawn_equally_often_named_weights_are_normalised():
    assert JuniorPool.parse("a,b,c").weights == pytest.approx((1 / 3,) * 3)
    p = JuniorPool.parse("a:2, b:1,c:1")
    assert p.names == ("a", "b", "c") and p.weights == pytest.approx((0.5, 0.25, 0.25))


def test_a_colon_that_is_not_a_weight_stays_in_the_name_and_the_spec_reads_back():
    # "org/m:v2" has no numeric tail, so it is a bare name; "org/m:v2:1" is that name with weight 1
    assert JuniorPool.parse("org/m:v2:1,x:3").names == ("org/m:v2", "x")
    with pytest.raises(TandemError, match="every junior or to none"):
        JuniorPool.parse("org/m:v2:1,/runs/x")
    assert JuniorPool.parse("org/m:v2,other").names == ("org/m:v2", "other")
    q = JuniorPool.parse("a:0.7,b:0.3")
    assert JuniorPool.parse(q.spec()) == q and JuniorPool.parse("solo").spec() == "solo"


@pytest.mark.parametrize("spec,match", [("", "empty name"), ("a,,b", "empty name"), ("a,a", "named twice"),
                                        ("a:0,b:1", "> 0"), ("a:-1,b:2", "> 0"), ("a:nan,b:1", "> 0"),
                                        ("a:1,b", "every junior or to none")])
def test_a_bad_pool_is_one_error_naming_it(spec, match):
    with pytest.raises(TandemError, match=match):
        JuniorPool.parse(spec)


def test_a_yaml_list_of_names_and_mappings_is_a_pool(tmp_path):
    f = tmp_path / "pool.yaml"
    f.write_text("- {name: weak, weight: 3}\n- {name: base, weight: 1}\n")
    assert JuniorPool.parse(str(f)) == JuniorPool(("weak", "base"), (0.75, 0.25))
    f.write_text("juniors: [a, b]\n")
    assert JuniorPool.parse(str(f)).names == ("a", "b")
    f.write_text("a: 1\n")
    with pytest.raises(TandemError, match="expected a list"):
        JuniorPool.parse(str(f))
    with pytest.raises(TandemError, match="no such file"):
        JuniorPool.parse(str(tmp_path / "none.yaml"))
    assert JuniorPool.parse([{"name": "x"}, "y"]).names == ("x", "y")


def test_the_draw_is_the_inverse_cdf_of_a_sha256_uniform():
    p = JuniorPool.parse("a:0.5,b:0.3,c:0.2")
    for step, prompt, rollout in [(1, 0, 0), (7, 3, 2), (40, 11, 5)]:
        h = hashlib.sha256(f"tandem-junior-pool|3|{step}|{prompt}|{rollout}".encode()).digest()
        u = int.from_bytes(h[:8], "big") / 2**64
        expected = 0 if u < 0.5 else 1 if u < 0.8 else 2  # by hand from the weights
        assert p.draw(3, step, prompt, rollout) == expected


def test_draw_frequencies_follow_the_weights_and_a_one_junior_pool_always_draws_it():
    p = JuniorPool.parse("a:0.6,b:0.3,c:0.1")
    n = 30000
    counts = Counter(p.draw(0, s, i) for s in range(300) for i in range(100))
    for k, w in enumerate(p.weights):  # within 4 binomial standard deviations
        assert abs(counts[k] / n - w) < 4 * (w * (1 - w) / n) ** 0.5
    assert {JuniorPool.parse("only").draw(0, s, 0) for s in range(50)} == {0}


def test_the_draw_is_the_same_on_a_rerun_and_differs_with_the_seed():
    p = JuniorPool.parse("a,b")
    first = [p.draw(1, s, i, r) for s in range(5) for i in range(4) for r in range(3)]
    assert first == [p.draw(1, s, i, r) for s in range(5) for i in range(4) for r in range(3)]
    assert first != [p.draw(2, s, i, r) for s in range(5) for i in range(4) for r in range(3)]
