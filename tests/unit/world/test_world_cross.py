"""The second-tokenizer junior of the tiny world: another vocabulary, cached, and a pair
that the text-level handoff runs end to end (slow: it trains two small models)."""

import json

import pytest

from tandem_rlvr.world.build import WorldConfig, world_root
from tandem_rlvr.world.cross import CrossJuniorConfig, build_cross_junior


@pytest.mark.slow
def test_cross_junior_has_its_own_vocabulary_and_is_cached(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    world, cfg = WorldConfig.for_tests(), CrossJuniorConfig.for_tests()
    path = build_cross_junior(world, cfg, cache=tmp_path, progress=False)
    senior = world_root(world, tmp_path) / "senior"
    tj, ts = AutoTokenizer.from_pretrained(path), AutoTokenizer.from_pretrained(senior)
    assert len(tj) == 290 and len(ts) == 300 and tj.get_vocab() != ts.get_vocab()
    text = "Lily starts with 13 socks.\n\nShe picks up 10 more"
    assert tj.decode(tj.encode(text)) == text and tj.encode(text) != ts.encode(text)
    assert AutoModelForCausalLM.from_pretrained(path).config.vocab_size == 290
    meta = json.loads((path.parent / "cross.json").read_text())
    assert meta["world"] == world.key() and meta["tokenizer"]["vocab"] == 290
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert build_cross_junior(world, cfg, cache=tmp_path, progress=False) == path  # reused, not rebuilt
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
