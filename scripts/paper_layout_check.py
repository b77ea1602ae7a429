"""The paper preset's training layout on whatever GPU is present: predicted vs measured peak memory.

Weights cannot travel to the lent GPU machine, and memory needs none: this builds randomly
initialised senior and junior models from the shipped Qwen3-4B-Instruct-2507 config (or any
config.json given), with a synthetic word-level tokenizer of the config's vocabulary size, and
trains 2 updates of `tandem train --preset qwen3-4b-deepscaler` on them: fp32 master weights,
bf16 compute, micro-batches of one row, gradient checkpointing, the decoder's rollouts. Every
device the preset names is mapped onto the GPUs present (one GPU: all on cuda:0). The rollout
batch is cut to 2 prompts x 8 rollouts so the check ends in minutes; the response length stays
the paper's 3,000 tokens (random weights rarely stop early), so activations and KV caches are
the paper's per row.

Printed: per device, the plan's peak (`planner/memory.py`) and torch.cuda.max_memory_allocated,
and their ratio. `--small` (used by GPU_CHECK_CPU=1 rehearsals) shrinks the model and lengths so
the script itself can be checked on a CPU, where no measurement is taken.

Run: python scripts/paper_layout_check.py [--config CONFIG.json] [--small] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch


def synthetic_tokenizer(vocab: int, out: Path) -> None:
    """A word-level tokenizer with exactly ``vocab`` entries (special tokens first), saved to ``out``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    words = specials + [f"w{i}" for i in range(vocab - len(specials))] + ["[UNK]"]
    words = words[:vocab - 1] + ["[UNK]"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]")
    fast.save_pretrained(out)


def build(config_path: Path, root: Path, small: bool) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM

    data = json.loads(config_path.read_text(encoding="utf-8"))
    if small:
        data.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, vocab_size=4096)
    cfg = AutoConfig.for_model(data.pop("model_type"), **data)
    out = root / "model"
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(out)
    synthetic_tokenizer(cfg.vocab_size, out)
    return out


def main() -> None:
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.planner.memory import GiB, plan, render
    from tandem_rlvr.rl.train import train

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None, help="a model config.json (default: the shipped Qwen3-4B-Instruct-2507)")
    ap.add_argument("--small", action="store_true", help="a tiny model and short lengths (CPU rehearsal)")
    ap.add_argument("--out", default=None, help="write the figures as JSON into this directory")
    a = ap.parse_args()
    from importlib import resources

    cfg_path = Path(a.config) if a.config else Path(str(resources.files("tandem_rlvr").joinpath(
        "presets", "models", "Qwen--Qwen3-4B-Instruct-2507.json")))
    ngpu = torch.cuda.device_count()
    devs = [f"cuda:{i}" for i in range(ngpu)] or ["cpu"]
    d0, d1 = devs[0], devs[min(1, len(devs) - 1)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build(cfg_path, root, a.small)
        from tandem_rlvr.models import load_tokenizer
        from tandem_rlvr.prompting import encode_prompt, format_prompt

        words = 40 if a.small else 1000  # the paper's prompts run up to 1,024 tokens: the plan assumes the longest
        texts = [" ".join(f"w{(i * 7 + j) % 97}" for j in range(words)) for i in range(40)]
        problems = root / "problems.jsonl"
        problems.write_text("".join(json.dumps({"problem": t, "answer": "1"}) + "\n" for t in texts), encoding="utf-8")
        tok = load_tokenizer(str(model))
        prompt_tokens = max(len(encode_prompt(tok, format_prompt(tok, t, "plain", "none"))) for t in texts)
        overrides = dict(senior=str(model), junior=str(model), dataset=str(problems), dataset_split=None, val_size=4,
                         template="plain", instruction="none", senior_device=d0, junior_device=d1,
                         rollout_device=d1, prompts_per_step=2, prompts_per_minibatch=1, rollout_batch_rows=16,
                         max_steps=2, step_unit="update", eval_every=0, save_every=2, kl_every=1,
                         max_prompt_tokens=prompt_tokens, output_dir=str(root / "run"))
        if a.small:
            overrides.update(max_new_tokens=32, dtype="float32" if d0 == "cpu" else "bfloat16")
        cfg = load_train_config("qwen3-4b-deepscaler", None, overrides)
        gib = torch.cuda.get_device_properties(0).total_memory / GiB if ngpu else None
        p = plan(cfg, 1, gib)
        print(render(cfg, p, gib), flush=True)
        t0 = time.perf_counter()
        for d in range(ngpu):
            torch.cuda.reset_peak_memory_stats(d)
        train(cfg)
        wall = time.perf_counter() - t0
        rows = []
        for dev in p.devices():
            predicted = p.peak(dev)[0]
            measured = torch.cuda.max_memory_allocated(torch.device(dev)) if dev.startswith("cuda") else None
            rows.append({"device": dev, "predicted_gib": predicted / GiB,
                         "measured_gib": None if measured is None else measured / GiB,
                         "ratio": None if not measured else predicted / measured})
            shown = "not measured on CPU" if measured is None else f"measured {measured / GiB:.2f} GiB " \
                                                                    f"(predicted/measured {predicted / measured:.2f})"
            print(f"{dev}: predicted {predicted / GiB:.2f} GiB, {shown}")
        print(f"2 updates in {wall:.0f} s")
        if a.out:
            Path(a.out).mkdir(parents=True, exist_ok=True)
            (Path(a.out) / "paper_layout.json").write_text(json.dumps({"rows": rows, "wall_s": wall}, indent=2) + "\n")


if __name__ == "__main__":
    main()
