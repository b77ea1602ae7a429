"""Engine selection and the pieces of the vLLM engine that run without vLLM."""

import importlib.util

import pytest
import torch

from tandem_rlvr.cli import main
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.schedule import make_schedule, replay
from tandem_rlvr.decoding.tandem import TandemDecoder
from tandem_rlvr.errors import TandemError

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.parametrize("name", ["word", "sentence", "token", "paragraph-bernoulli", "paragraph-roundrobin", "junior"])
def test_replay_recovers_the_decoders_senior_mask_from_seed_and_tokens(tok, pair, name):
    """The vLLM engine returns replay(seed, tokens) as the senior mask: it must equal what the
    decoder recorded while sampling, for every replayable schedule."""
    sched = make_schedule(name, tok, p=0.5, K=3, vocab_size=len(tok))
    dec = TandemDecoder(pair[0], pair[1], sched, SamplingParams(temperature=1.0, max_new_tokens=64),
                        eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    prompts = [tok.encode(x) for x in ["Mia has 7 shells.", "Leo has 9 cards.\n\n", "Tom", "The answer is"]] * 8
    seeds = list(range(100, 100 + len(prompts)))
    out = dec.generate(prompts, seeds)
    toks = [out.row_tokens(b) for b in range(len(prompts))]
    masks = replay(make_schedule(name, tok, p=0.5, K=3, vocab_size=len(tok)), torch.tensor(seeds), toks)
    assert [[int(x) for x in m] for m in masks] == [out.row_mask(b) for b in range(len(prompts))]
    if name != "junior":
        assert any(0 < sum(m) < len(m) for m in masks), "no row mixes authors: the case checks nothing"


def test_word_atomic_cannot_be_replayed(tok):
    with pytest.raises(TandemError, match="word-atomic"):
        replay(make_schedule("word-atomic", tok, vocab_size=len(tok)), torch.tensor([1]), [[5, 6]])


def test_vllm_engine_rejects_word_atomic_in_one_line(capsys):
    code = main(["generate", "--engine", "vllm", "--schedule", "word-atomic", "--prompt", "x", "--senior", "nowhere/x"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "word-atomic" in err[0] and err[0].startswith("tandem: error:")


@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is installed here")
def test_engine_vllm_without_vllm_is_a_one_line_error(tmp_path, capsys, tok, pair):
    d = tmp_path / "m"
    pair[0].save_pretrained(d)
    tok.save_pretrained(d)
    code = main(["eval", "solo", "--engine", "vllm", "--senior", str(d), "--benchmarks", "tiny", "--limit", "1",
                 "--n", "1", "--out", str(tmp_path / "ev")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "needs vLLM" in err[0]
    assert not (tmp_path / "ev").exists(), "nothing half-written"


def test_unknown_engine_is_rejected_by_the_parser(capsys):
    assert main(["eval", "solo", "--engine", "jax", "--out", "x"]) == 2
    assert "--engine" in capsys.readouterr().err


def test_an_eval_config_derives_what_opening_its_decoder_needs():
    """open_decoder takes an engine name, an EngineSetup and a RolloutSpec; an evaluation derives both
    from its parts: every model, device and engine setting as given, the junior not loaded when solo."""
    from tandem_rlvr.config import EvalConfig
    from tandem_rlvr.decoding.sampling import SamplingParams

    sp = SamplingParams(0.5, 0.9, 3, 7)
    cfg = EvalConfig.from_keys(senior="s", junior="j", mode="handoff", schedule="word", device="cpu",
                               junior_device="cpu:1", dtype="float32", seed=5, p=0.25, K=4, sampling=sp)
    setup, spec = cfg.engine_setup, cfg.rollout_spec
    assert (setup.senior, setup.junior, setup.device, setup.junior_device, setup.dtype, setup.seed) == \
        ("s", "j", "cpu", "cpu:1", "float32", 5)
    assert (spec.schedule, spec.sampling, spec.p, spec.K) == ("word", sp, 0.25, 4)
    solo = EvalConfig.from_keys(senior="s")
    assert solo.engine_setup.junior is None and solo.rollout_spec.schedule == "senior"
    assert EvalConfig.from_keys(senior="s", mode="handoff", schedule="word").engine_setup.junior == "s"  # self-paired