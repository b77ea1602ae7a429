"""Model loading: local directories, GGUF files (converted once), the tokenizer check, devices,
prompt templates, and the one-line errors for bad input (through the CLI where it matters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import make_model, make_tokenizer

from tandem_rlvr.errors import TandemError
from tandem_rlvr.models import check_same_tokenizer, load_pair, resolve_device, resolve_model_path
from tandem_rlvr.prompting import format_prompt, resolve_template

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))


def _save_dir(path, tok, model, chat_template=None):
    path.mkdir(parents=True, exist_ok=True)
    if chat_template is not None:
        tok.chat_template = chat_template
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _cli(*args, timeout=120):
    env = dict(os.environ, TANDEM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "tandem_rlvr.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _assert_one_line_error(res, *needles):
    assert res.returncode != 0, res.stdout + res.stderr
    lines = [line for line in res.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


# --------------------------------------------------------------------------- local directories
def test_local_dir_loads_pair_with_the_same_weights(tmp_path, tok):
    model = make_model(len(tok), 0)
    d = _save_dir(tmp_path / "m", make_tokenizer(), model)
    pair = load_pair(d, d, "cpu", "cpu", "float32")
    assert pair.junior is not pair.senior and not any(p.requires_grad for p in pair.junior.parameters())
    ids = torch.tensor([tok.encode("Mia has 7 shells.")])
    with torch.no_grad():
        torch.testing.assert_close(pair.senior(ids).logits, model(ids).logits)
        torch.testing.assert_close(pair.junior(ids).logits, model(ids).logits)
    assert pair.tokenizer.get_vocab() == tok.get_vocab()


def test_directory_without_config_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(TandemError, match="empty.*config.json"):
        resolve_model_path(str(tmp_path / "empty"))


def test_tokenizer_mismatch_names_both_vocabularies(tmp_path):
    a = _save_dir(tmp_path / "a", make_tokenizer(300), make_model(300, 0))
    b = _save_dir(tmp_path / "b", make_tokenizer(280), make_model(280, 1))
    with pytest.raises(TandemError) as e:
        load_pair(a, b, "cpu")
    msg = str(e.value)
    assert a in msg and b in msg and "300 tokens" in msg and "280 tokens" in msg
    check_same_tokenizer(make_tokenizer(300), make_tokenizer(300))  # identical: no error


# --------------------------------------------------------------------------- devices
@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="cuda:1 exists here")
def test_missing_device_is_named():
    with pytest.raises(TandemError, match="cuda:1"):
        resolve_device("cuda:1")
    with pytest.raises(TandemError, match="nonsense"):
        resolve_device("nonsense")


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="cuda:1 exists here")
def test_cli_missing_device_one_line_error(tmp_path, tok):
    d = _save_dir(tmp_path / "m", make_tokenizer(), make_model(len(tok), 0))
    out = tmp_path / "ev"
    res = _cli("eval", "solo", "--senior", d, "--benchmarks", "gsm8k", "--limit", "1", "--n", "1",
               "--device", "cuda:1", "--out", str(out))
    _assert_one_line_error(res, "cuda:1")
    assert not out.exists()


# --------------------------------------------------------------------------- templates
def test_chat_template_missing_is_named_and_auto_falls_back(tmp_path, tok):
    plain = make_tokenizer()
    plain.name_or_path = "my-base-model"
    with pytest.raises(TandemError, match="my-base-model.*no chat template"):
        resolve_template(plain, "chat")
    assert resolve_template(plain, "auto") == "plain"
    chat = make_tokenizer()
    chat.chat_template = CHAT_TEMPLATE
    text = format_prompt(chat, "What is 2+2?", "chat")
    assert text.startswith("<|im_start|>user\nWhat is 2+2? Solve the following") and \
        text.endswith("<|im_start|>assistant\n")
    assert format_prompt(chat, "What is 2+2?", "chat", "reason-step").startswith(
        "<|im_start|>user\nWhat is 2+2?\n\nPlease reason step by step")  # the earlier wording, by name


# The paper's released code: the problem, one space, then this sentence (typed here, not imported).
PAPER_USER_TURN = ("What is 2+2? Solve the following math problem step by step. Put your final answer inside "
                   "\\boxed{}, like \\boxed{42} or \\boxed{\\frac{1}{2}}.")


def test_default_chat_prompt_is_the_papers_exact_text():
    chat = make_tokenizer()
    chat.chat_template = CHAT_TEMPLATE
    assert format_prompt(chat, "What is 2+2?", "chat") == \
        f"<|im_start|>user\n{PAPER_USER_TURN}<|im_end|>\n<|im_start|>assistant\n"


def test_paper_preset_prompts_with_the_papers_exact_text():
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.prompting import user_message

    cfg = load_train_config("qwen3-4b-deepscaler")
    assert cfg.data.template == "chat" and user_message("What is 2+2?", cfg.data.instruction) == PAPER_USER_TURN


def test_default_evaluation_prompts_with_the_papers_exact_text(tmp_path, tok, monkeypatch):
    """``tandem eval solo`` with default flags: the prompt it encodes and the instruction it records."""
    from tandem_rlvr.cli import main
    from tandem_rlvr.eval.sample import sampler

    d = _save_dir(tmp_path / "m", make_tokenizer(), make_model(len(tok), 0), chat_template=CHAT_TEMPLATE)
    bench = tmp_path / "one.jsonl"
    bench.write_text(json.dumps({"problem": "What is 2+2?", "answer": "4"}) + "\n")
    seen = []
    encode = sampler.encode_prompt
    monkeypatch.setattr(sampler, "encode_prompt", lambda t, text: seen.append(text) or encode(t, text))
    res = main(["eval", "solo", "--senior", d, "--benchmarks", str(bench), "--n", "1", "--max-tokens", "2",
                          "--device", "cpu", "--out", str(tmp_path / "ev")])
    assert res == 0
    assert seen == [f"<|im_start|>user\n{PAPER_USER_TURN}<|im_end|>\n<|im_start|>assistant\n"]
    config = json.loads((tmp_path / "ev" / "config.json").read_text())
    assert config["instruction"] == "paper" and config["answer_mode"] == "last-box" and config["template"] == "chat"


def test_cli_chat_template_missing_one_line_error(tmp_path, tok):
    d = _save_dir(tmp_path / "m", make_tokenizer(), make_model(len(tok), 0))
    out = tmp_path / "ev"
    res = _cli("eval", "solo", "--senior", d, "--benchmarks", "gsm8k", "--limit", "1", "--n", "1",
               "--template", "chat", "--device", "cpu", "--out", str(out))
    _assert_one_line_error(res, "no chat template")
    assert not (out / "samples.jsonl").exists() and not (out / "metrics.json").exists()


# --------------------------------------------------------------------------- GGUF
def write_tiny_gguf(path, tok, model=None, with_tokenizer=True, chat_template=None, seed=0):
    """A small llama-architecture GGUF (float32 tensors) with ``tok``'s byte-level BPE vocabulary."""
    gguf = pytest.importorskip("gguf")
    V, H, F, L, heads, kv_heads = len(tok), 64, 128, 2, 4, 2
    rng = np.random.default_rng(seed)

    def t(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(L)
    w.add_context_length(256)
    w.add_embedding_length(H)
    w.add_feed_forward_length(F)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(H // heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_file_type(0)
    if with_tokenizer:
        spec = json.loads(tok.backend_tokenizer.to_str())["model"]
        vocab = tok.get_vocab()
        tokens = [None] * V
        for s, i in vocab.items():
            tokens[i] = s
        merges = [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]
        special = set(tok.all_special_ids)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types([3 if i in special else 1 for i in range(V)])
        w.add_token_merges(merges)
        w.add_eos_token_id(tok.eos_token_id)
        w.add_bos_token_id(tok.eos_token_id)
        w.add_pad_token_id(tok.pad_token_id)
        if chat_template:
            w.add_chat_template(chat_template)
    w.add_tensor("token_embd.weight", t(V, H))
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    w.add_tensor("output.weight", t(V, H) * 8)
    for i in range(L):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(H, np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", t(H, H))
        w.add_tensor(f"blk.{i}.attn_k.weight", t(kv_heads * H // heads, H))
        w.add_tensor(f"blk.{i}.attn_v.weight", t(kv_heads * H // heads, H))
        w.add_tensor(f"blk.{i}.attn_output.weight", t(H, H))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(H, np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", t(F, H))
        w.add_tensor(f"blk.{i}.ffn_up.weight", t(F, H))
        w.add_tensor(f"blk.{i}.ffn_down.weight", t(H, F))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_gguf_converts_once_to_an_equivalent_safetensors_dir(tmp_path, tok):
    from transformers import AutoModelForCausalLM

    g = write_tiny_gguf(tmp_path / "tiny.gguf", tok, chat_template=CHAT_TEMPLATE)
    d = resolve_model_path(g)
    assert os.path.exists(os.path.join(d, "config.json")) and str(tmp_path / "cache") in d
    assert any(f.endswith(".safetensors") for f in os.listdir(d))
    mtime = os.stat(os.path.join(d, "config.json")).st_mtime_ns
    assert resolve_model_path(g) == d and os.stat(os.path.join(d, "config.json")).st_mtime_ns == mtime  # cached

    pair = load_pair(g, g, "cpu", dtype="float32")
    assert pair.tokenizer.get_vocab() == tok.get_vocab()
    assert pair.tokenizer.chat_template == CHAT_TEMPLATE
    text = "Mia has 7 shells. She finds 5 more."  # (GGUF names its pre-tokenizer; newline rules may differ)
    assert pair.tokenizer.encode(text, add_special_tokens=False) == tok.encode(text)
    direct = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="tiny.gguf", dtype=torch.float32).eval()
    ids = torch.tensor([tok.encode(text)])
    with torch.no_grad():
        torch.testing.assert_close(pair.senior(ids).logits, direct(ids).logits)
    assert "quantization_config" not in json.load(open(os.path.join(d, "config.json")))


def test_gguf_without_tokenizer_is_named(tmp_path, tok):
    g = write_tiny_gguf(tmp_path / "notok.gguf", tok, with_tokenizer=False)
    with pytest.raises(TandemError, match="notok.gguf.*tokenizer"):
        resolve_model_path(g)
    assert not any((tmp_path / "cache").rglob("config.json"))  # nothing half-written


def test_cli_gguf_without_tokenizer_one_line_error(tmp_path, tok):
    g = write_tiny_gguf(tmp_path / "notok.gguf", tok, with_tokenizer=False)
    res = _cli("generate", "--prompt", "hi", "--senior", g, "--schedule", "senior", "--max-tokens", "2")
    _assert_one_line_error(res, "notok.gguf", "tokenizer")


def test_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(TandemError, match="nope.gguf"):
        resolve_model_path(str(tmp_path / "nope.gguf"))


# --------------------------------------------------------------------------- the real model (cached fetch)
@pytest.mark.slow
def test_smol_loads_with_chat_template_and_boundary_marker(monkeypatch):
    from tandem_rlvr.fetch import fetched_dir

    monkeypatch.delenv("TANDEM_CACHE", raising=False)  # the user's cache, where a fetch lands
    if not (fetched_dir("smol") / "model" / "config.json").exists():
        pytest.skip("smol not fetched (tandem models fetch smol)")
    pair = load_pair("smol", None, "cpu")
    tok = pair.tokenizer
    assert tok.chat_template and len(tok) == 49152
    assert sum(1 for s in tok.get_vocab() if s.startswith("Ġ")) > 10000
    assert "<|im_start|>assistant" in format_prompt(tok, "What is 2+2?", "chat")


@pytest.mark.slow
def test_smol_blank_line_of_two_newline_tokens_is_a_paragraph_break(monkeypatch):
    import torch

    from tandem_rlvr.decoding.schedule import make_schedule
    from tandem_rlvr.fetch import fetched_dir
    from tandem_rlvr.models import load_tokenizer

    monkeypatch.delenv("TANDEM_CACHE", raising=False)  # the user's cache, where a fetch lands
    if not (fetched_dir("smol") / "model" / "config.json").exists():
        pytest.skip("smol not fetched (tandem models fetch smol)")
    tok = load_tokenizer("smol")
    ids = tok.encode("Step 1: add.\n\nStep 2: multiply.\n\n\nStep 3.\nDone.")
    assert tok.convert_ids_to_tokens(ids).count("Ċ") >= 2  # SmolLM2 writes the first blank line as Ċ, Ċ
    sched = make_schedule("paragraph-roundrobin", tok, vocab_size=len(tok))
    st = sched.start(torch.tensor([1]))
    authors = []
    for t, i in enumerate(ids):
        authors.append(bool(st.author))
        sched.advance(st, torch.tensor([i]), t)
    flips = sum(a != b for a, b in zip(authors, authors[1:], strict=False))
    assert flips == 2  # two blank lines (the second one three newlines long), one line break that is not


def test_model_name_is_short_and_never_a_full_path(tmp_path):
    from tandem_rlvr.models import model_name
    from tandem_rlvr.world.build import WorldConfig

    assert model_name("tiny-drift-junior") == "tiny-drift-junior"
    assert model_name("Qwen/Qwen3-4B-Instruct-2507") == "Qwen/Qwen3-4B-Instruct-2507"
    assert model_name(None) == "-"
    for sub, name in (("runs/grpo/final", "grpo/final"), ("runs/grpo/checkpoint-60", "grpo/checkpoint-60"),
                      ("models/my-senior", "my-senior")):
        (tmp_path / sub).mkdir(parents=True)
        assert model_name(str(tmp_path / sub)) == name
    for key, world in ((WorldConfig.drift().key(), "tiny-drift"), ("abc123", "world-abc123")):
        root = tmp_path / "worlds" / key
        for part in ("senior", "junior"):
            (root / part).mkdir(parents=True)
        (root / "world.json").write_text(json.dumps({"key": key}))
        assert model_name(str(root / "junior")) == f"{world}-junior"
        assert model_name(str(root / "senior")) == world


def test_auto_device_is_this_process_gpu_under_a_launcher(monkeypatch):
    """'auto' under torchrun / accelerate launch (LOCAL_RANK set) is cuda:LOCAL_RANK, so the
    processes of a data-parallel run do not all load onto cuda:0."""
    import torch

    from tandem_rlvr.models import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device("auto") == torch.device("cuda:3")
    monkeypatch.delenv("LOCAL_RANK")
    assert resolve_device("auto") == torch.device("cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == torch.device("cpu")
