"""A junior pool that mixes tokenizers (issue 36): the tiny senior with ``tiny-junior`` (its own tokenizer)
and ``tiny-xjunior`` (another). The hf engine decodes the other-tokenizer junior's sub-batch with the
text-level decoder and the other's token by token; each row equals what that junior alone decodes for
its seed, and the senior's ids of an xjunior row decode to exactly the co-written text; a pool of two
copies of the xjunior trains bit for bit as the single xjunior; each tokenizer loads once; what one
vocabulary needs is refused for a mixed pool before any model loads."""

import json
import shutil
from collections import Counter

import pytest
import torch
from safetensors.torch import load_file

from tandem_rlvr.config import load_train_config
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.engines.base import RolloutSpec
from tandem_rlvr.engines.hf import HFRollouts
from tandem_rlvr.errors import TandemError
from tandem_rlvr.models import load_pair
from tandem_rlvr.prompting import encode_prompt, plain_prompt
from tandem_rlvr.rl.train import build_run, train
from tandem_rlvr.world.tasks import make_problems


@pytest.fixture(scope="module")
def pairs():
    """(same-tokenizer pair, cross-tokenizer pair): one senior's weights, two juniors."""
    same = load_pair("tiny", "tiny-junior", "cpu", other_tokenizer=True)
    cross = load_pair("tiny", "tiny-xjunior", "cpu", other_tokenizer=True)
    assert same.xjunior is None and cross.xjunior is not None
    return same, cross


def test_a_mixed_pool_gives_each_row_what_its_junior_alone_decodes(pairs):
    same, cross = pairs
    tok = same.tokenizer
    prompts = [encode_prompt(tok, plain_prompt(p.problem)) for p in make_problems(6, seed=3, split="test")]
    seeds, juniors = [11, 12, 13, 14, 15, 16], [1, 0, 1, 1, 0, 1]
    spec = RolloutSpec("word", SamplingParams(1.0, max_new_tokens=16))
    pooled = HFRollouts(same.senior, same.junior, tok, same.eos_ids, juniors=(same.junior, cross.junior),
                        xjuniors=(None, cross.xjunior))
    got = pooled.generate(prompts, seeds, spec, juniors=juniors)
    alone_same = HFRollouts(same.senior, same.junior, tok, same.eos_ids).generate(prompts, seeds, spec)
    alone_x = HFRollouts(same.senior, cross.junior, tok, same.eos_ids, xjunior=cross.xjunior)
    dec = alone_x.decoder(spec)
    ref_x = dec.generate(prompts, seeds)  # a CrossRollout: the co-written text of every row
    for b, j in enumerate(juniors):
        ref = ref_x if j == 1 else alone_same
        assert got.row_tokens(b) == ref.row_tokens(b) and got.row_mask(b) == ref.row_mask(b), b
        n = int(got.lengths[b])
        assert n == int(ref.lengths[b]) and bool(got.finished[b]) == bool(ref.finished[b])
        assert torch.allclose(got.logprobs[b, :n], ref.logprobs[b, :n], atol=1e-5)  # padding: float rounding
        if j == 1:  # the senior's ids hold the junior's text too, and decode to exactly the co-written text
            assert tok.decode(got.row_tokens(b), skip_special_tokens=False) == ref_x.texts[b]
    x_rows = [b for b, j in enumerate(juniors) if j == 1]
    share = got.senior_share[x_rows]
    assert bool(((share > 0) & (share < 1)).any())  # the xjunior really wrote some of its rows
    assert any(alone_same.row_tokens(b) != ref_x.row_tokens(b) for b in x_rows)  # the two juniors write differently


def _cfg(tmp_path, out, **kw):
    base = dict(val_size=4, group_size=4, prompts_per_step=2, prompts_per_minibatch=2, max_new_tokens=16,
                max_steps=1, eval_every=0, save_every=1, lr=1e-2, output_dir=str(tmp_path / out))
    base.update(kw)
    return load_train_config("tiny", None, base)


@pytest.mark.slow  # two one-step runs (about a minute on 2 loaded cores)
def test_a_pool_of_two_xjunior_copies_trains_bit_for_bit_as_the_single_xjunior(tmp_path):
    from tandem_rlvr.world.shipped import shipped_model

    copy = tmp_path / "xcopy"
    shutil.copytree(shipped_model("tiny-xjunior"), copy)
    plain = _cfg(tmp_path, "plain", junior="tiny-xjunior")
    pooled = _cfg(tmp_path, "pool", junior=f"tiny-xjunior,{copy}", junior_draw="rollout")
    train(plain, print_fn=lambda *_: None)
    train(pooled, print_fn=lambda *_: None)
    wa, wb = load_file(tmp_path / "plain/final/model.safetensors"), load_file(tmp_path / "pool/final/model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    rows = [json.loads(x) for x in (tmp_path / "pool/rollouts.jsonl").read_text().splitlines()]
    assert {r["junior"] for r in rows} == {"tiny-xjunior", "xcopy"}  # the batch really was split in two
    keep = ("senior/token_share", "response/mean_length", "reward/mean", "loss")

    def figures(out):
        rec = json.loads((tmp_path / out / "log.jsonl").read_text().splitlines()[0])
        return {k: rec.get(k) for k in keep}

    assert figures("plain") == figures("pool")


@pytest.mark.slow  # a one-step run plus the reference decodes (about a minute on 2 loaded cores)
def test_a_mixed_pool_trains_each_row_with_its_drawn_junior(tmp_path, monkeypatch):
    """A step of ``--junior tiny-junior,tiny-xjunior``: each tokenizer loaded once; every row's completion
    is what its drawn junior alone decodes for the row's seed; per-junior figures logged."""
    import tandem_rlvr.models as models
    from tandem_rlvr.rl.rollout import occurrence_seeds

    loads, real = Counter(), models.load_tokenizer
    monkeypatch.setattr(models, "load_tokenizer", lambda spec: loads.update([spec]) or real(spec))
    cfg = _cfg(tmp_path, "mixed", junior="tiny-junior,tiny-xjunior", junior_draw="rollout", kl_every=1)
    run = build_run(cfg, print_fn=lambda *_: None)
    assert loads == Counter({"tiny": 1, "tiny-junior": 1, "tiny-xjunior": 1})
    trainer, pair = run.trainer, run.prep.pair
    assert pair.xjuniors[0] is None and pair.xjuniors[1] is not None
    seen, inner = [], trainer.rollout_func

    class Spy:  # records each call; the trainer hands TRL's rewards on to ``scored``
        scored = inner.scored

        def __call__(self, prompts, tr):
            seen.append((prompts, inner(prompts, tr)))
            return seen[-1][1]

    trainer.rollout_func = Spy()
    try:
        trainer.train()
    finally:
        run.close()
    prompts, out = seen[0]
    rows = [json.loads(x) for x in (tmp_path / "mixed/rollouts.jsonl").read_text().splitlines()]
    drawn = [0 if r["junior"] == "tiny-junior" else 1 for r in rows]
    assert set(drawn) == {0, 1}
    seeds = occurrence_seeds(prompts, cfg.loop.seed, 0)
    spec = RolloutSpec(cfg.rollout_schedule, cfg.rollout.sampling, cfg.rollout.p, cfg.rollout.K)
    same = load_pair("tiny", "tiny-junior", "cpu")
    cross = load_pair("tiny", "tiny-xjunior", "cpu", other_tokenizer=True)
    ids = [encode_prompt(same.tokenizer, p) for p in prompts]
    ref = [HFRollouts(same.senior, same.junior, same.tokenizer, same.eos_ids).generate(ids, seeds, spec),
           HFRollouts(same.senior, cross.junior, same.tokenizer, same.eos_ids, xjunior=cross.xjunior)
           .generate(ids, seeds, spec)]
    for b, j in enumerate(drawn):
        assert out["completion_ids"][b] == ref[j].row_tokens(b) and out["env_mask"][b] == ref[j].row_mask(b), b
    rec = json.loads((tmp_path / "mixed/log.jsonl").read_text().splitlines()[0])
    assert rec["junior/tiny-junior/count"] + rec["junior/tiny-xjunior/count"] == len(rows)
    assert "kl/junior" in rec  # scored on the tiny-junior rows only (the xjunior cannot read the senior's ids)


@pytest.mark.parametrize("kw, match", [({"engine": "vllm"}, "engine hf only"), ({"method": "klreg"}, "KL-Reg|pool"),
                                       ({"schedule": "word-atomic"}, "cannot hand off between tokenizers")])
def test_a_mixed_pool_is_refused_what_one_vocabulary_needs_before_any_model_loads(tmp_path, monkeypatch, kw, match):
    import tandem_rlvr.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(TandemError, match=match):
        build_run(_cfg(tmp_path, "run", junior="tiny-junior,tiny-xjunior", **kw), print_fn=lambda *_: None)
    assert not (tmp_path / "run").exists()


def test_a_mixed_pool_loads_each_tokenizer_once(tmp_path, monkeypatch):
    """The cross-tokenizer checks, the pair and the pool's juniors read the same tokenizer objects (one load
    each), and each other-tokenizer junior gets its own XJunior."""
    import tandem_rlvr.models as models
    from tandem_rlvr.rl.prepare import prepare

    loads, real = Counter(), models.load_tokenizer
    monkeypatch.setattr(models, "load_tokenizer", lambda spec: loads.update([spec]) or real(spec))
    prep = prepare(_cfg(tmp_path, "run", junior="tiny-junior,tiny-xjunior,tiny-drift-junior", template="plain"))
    assert loads == Counter({"tiny": 1, "tiny-junior": 1, "tiny-xjunior": 1, "tiny-drift-junior": 1})
    x = prep.pair.xjuniors  # tiny-drift's tokenizer is not tiny's either: two other-tokenizer juniors, each its own
    assert len(prep.pair.juniors) == 3 and x[0] is None and x[1] is not None and x[2] is not None
    vocab = prep.pair.tokenizer.get_vocab()
    assert x[1].tokenizer.get_vocab() != vocab and x[2].tokenizer.get_vocab() not in (vocab, x[1].tokenizer.get_vocab())
