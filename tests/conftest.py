"""Shared fixtures: a small byte-level BPE tokenizer and a pair of random tiny Qwen3 models.

Everything is built in memory in about a second; no downloads, no cache.
"""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

TEXT = [
    "Mia has 7 shells.\n\nShe finds 5 more, so 7 plus 5 is 12.\n\nThe answer is \\boxed{12}.",
    "Leo has 9 cards. He gives away 4! Then? He has 5 cards left.\n\nThe answer is \\boxed{5}.",
    "Tom buys 3 apples and eats 1 apple.\nSo 3 minus 1 is 2.\n\nThe answer is \\boxed{2}.",
] * 20

SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
         r"""|\s+(?!\S)|\s+""")


def make_tokenizer(vocab_size: int = 300) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(SPLIT), "isolated"),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TEXT, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def make_model(vocab_size: int, seed: int, hidden: int = 64, layers: int = 2) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=512,
                      tie_word_embeddings=False)
    model = Qwen3ForCausalLM(cfg).eval()
    # Sharpen the random output layer so sampled texts are not uniform noise.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


def save_training_inputs(root, tok, layers: int = 1, hidden: int = 32, tied: bool = False):
    """A training run's inputs under ``root``: ``senior/`` (seed 0) and ``junior/`` (seed 1) random
    models of ``layers`` layers and width ``hidden`` (vLLM on CPU needs 128: head_dim 32) with ``tok`` (``tied``:
    the output layer is the embedding), and ``data.jsonl``, 40 shell problems with their answers."""
    for name, seed in (("senior", 0), ("junior", 1)):
        model = make_model(len(tok), seed, hidden=hidden, layers=layers)
        if tied:
            model.config.tie_word_embeddings = True
            model.lm_head.weight = model.model.embed_tokens.weight
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    with open(root / "data.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"problem": f"Mia has {i} shells. She finds 5 more.", "answer": str(i + 5)}) + "\n")
    return root


@pytest.fixture(scope="session")
def tok():
    return make_tokenizer()


def test_device() -> str:
    """Where decoder tests run: $TANDEM_TEST_DEVICE (scripts/gpu_check.sh sets cuda), else cpu."""
    import os

    return os.environ.get("TANDEM_TEST_DEVICE", "cpu")


test_device.__test__ = False  # a helper, not a test


@pytest.fixture(scope="module")
def train_root(tmp_path_factory, tok):
    """A folder of ``save_training_inputs`` with the default one-layer models: senior/, junior/, data.jsonl."""
    return save_training_inputs(tmp_path_factory.mktemp("train"), tok)


@pytest.fixture(scope="module")
def train_inputs(train_root):
    """(root, senior dir, junior dir, data.jsonl) of ``train_root``: the inputs of ``helpers.train.train_cfg``."""
    return train_root, train_root / "senior", train_root / "junior", train_root / "data.jsonl"


@pytest.fixture(scope="module")
def chat_models(tmp_path_factory, tok):
    """Two saved one-layer random models with ``tok`` and a minimal chat template: {"a": dir, "b": dir}."""
    import copy

    root = tmp_path_factory.mktemp("models")
    chat_tok = copy.deepcopy(tok)
    chat_tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    out = {}
    for i, name in enumerate(("a", "b")):
        make_model(len(tok), i, hidden=32, layers=1).save_pretrained(root / name)
        chat_tok.save_pretrained(root / name)
        out[name] = root / name
    return out


@pytest.fixture(scope="session")
def pair(tok):
    """(senior, junior): two different random tiny Qwen3 models sharing ``tok`` (float32)."""
    if test_device().startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False  # exact float32 on GPU for token equality
        torch.backends.cudnn.allow_tf32 = False
    return make_model(len(tok), 0).to(test_device()), make_model(len(tok), 1).to(test_device())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tok):
    """A saved one-layer random model with ``tok``: the senior of CLI tests."""
    d = tmp_path_factory.mktemp("m") / "model"
    make_model(len(tok), 0, hidden=32, layers=1).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def save_vllm_pair(tok, root) -> list[str]:
    """Senior (seed 0) and junior (seed 1) test models with head_dim 32 (vLLM-CPU attention has no
    16), saved with the tokenizer under ``root``; their directories."""
    dirs = []
    for name, seed in (("senior", 0), ("junior", 1)):
        model = make_model(len(tok), seed, hidden=128)
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        dirs.append(str(root / name))
    return dirs


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory, tok):
    """The session's one single-junior ``tandem serve`` (``helpers.serve.SharedServer``), started on first use."""
    from helpers.serve import SharedServer

    server = SharedServer(save_training_inputs(tmp_path_factory.mktemp("shared_server"), tok, layers=2, hidden=128))
    yield server
    server.close()


def pytest_configure(config):
    """The test process computes on one torch thread. torch's default (a thread per core) oversubscribes a
    machine the tests share: two xdist workers, CI's three sessions side by side, anything else running; and
    OpenMP threads spin while they wait for a core, so a loaded machine ran the same tests up to thirty times
    slower (``tests/unit/decoding`` under ``-n 2``: 13 s on one thread, 121-391 s on the default at load 2-4;
    docs/contributing.md, "CI"). On an idle machine one thread costs these tiny models little (12.6 s
    against 11.5 s serially). A process a test starts picks its own count, as it would anyway."""
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Tests that kill the shared server run after every other test, so it starts once a session."""
    items.sort(key=lambda item: item.get_closest_marker("kills_shared_server") is not None)


@pytest.fixture(scope="module")
def legibility_world(tmp_path_factory, tok, pair):
    """({"senior": dir, "junior": dir} of ``pair`` saved with ``tok``, a 6-problem benchmark file)."""
    root = tmp_path_factory.mktemp("world")
    dirs = {}
    for name, model in zip(("senior", "junior"), pair, strict=True):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        dirs[name] = str(root / name)
    bench = root / "bench.jsonl"
    bench.write_text("".join(json.dumps({"id": str(p), "problem": f"Mia has {p} shells.", "answer": str(p)}) + "\n"
                             for p in range(6)))
    return dirs, bench


@pytest.fixture(scope="module")
def cross_pair():
    """(senior, its tokenizer, junior, another tokenizer): 300 vs 280 ids, other merges; each model fitted a few
    steps on ``TEXT`` (``helpers.handoff.fit``)."""
    from helpers.handoff import fit

    tok_s, tok_j = make_tokenizer(300), make_tokenizer(280)
    return (fit(make_model(len(tok_s), 0, hidden=32, layers=1), tok_s, 30), tok_s,
            fit(make_model(len(tok_j), 2, hidden=32, layers=1), tok_j, 15), tok_j)


@pytest.fixture(scope="module")
def vllm_train_inputs(tmp_path_factory, tok):
    """({(role, tied): model dir}, data.jsonl): senior and junior of width 128 (vLLM-CPU attention needs head_dim
    32), with an untied and a tied output layer; the inputs of ``helpers.vllm_train.vllm_cfg``."""
    root = tmp_path_factory.mktemp("vtrain")
    dirs = {}
    for tied in (False, True):  # width 128: head_dim 32 (vLLM-CPU attention)
        d = save_training_inputs(root / ("tied" if tied else "untied"), tok, hidden=128, tied=tied)
        dirs.update({("senior", tied): d / "senior", ("junior", tied): d / "junior"})
    return dirs, root / "untied" / "data.jsonl"
