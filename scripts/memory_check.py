"""Predicted vs measured peak memory of `tandem train` on CPU: a check of the memory plan (`planner/memory.py`).

Each configuration trains 2 updates of a randomly initialised model of a real architecture
(the tiny world's, SmolLM2-135M's) in a fresh process and reads the process's peak resident
memory (/proc/self/status VmHWM) minus its resident memory once the run is built (models
loaded, trainer made), against the plan's peak minus the model weights loaded by then: the
framework's own objects (about 100 MB: datasets, TRL, the tokenizer) are no part of the plan,
which is about tensors. glibc is told to
hand every allocation of 64 KiB or more straight back to the system (MALLOC_MMAP_THRESHOLD_), so
resident memory follows live tensors. Random weights rarely emit EOS, so every rollout runs to
max_new_tokens, the length the plan assumes; prompts are all max_prompt_tokens long.

`--fsdp2` checks the sharded plan instead: each configuration runs `scripts/sharded_memory.py`
under `torchrun --nproc_per_node N` (gloo on CPU, nccl on GPUs), a short FSDP2 + AdamW training
loop of our own rather than `tandem train` (so each rank's peak is the update's alone), and
compares each rank's peak with the plan's `Layout(N, "fsdp2")`; it also times one weight sync.
`--arch` names the model (default: tiny and smol on CPU); `scripts/gpu_check.sh` runs it on GPUs.
`--zero3` does the same under DeepSpeed ZeRO-3 against `Layout(N, "zero3")`.
`--lora R` trains LoRA adapters of rank R (`lora_r`, rl/lora.py) in the `tandem train` configurations
and checks the plan's LoRA layout (its default: the plan of the run's own `lora_r`); with `--fsdp2` or
`--zero3`, the sharded loop trains adapters of rank R against the plan's sharded LoRA layout.

Run: python scripts/memory_check.py [--quick] [--lora R] [--fsdp2 | --zero3 [--nproc N] [--arch MODEL]]
     [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys
def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
import torch
torch.set_num_threads(2)
from tandem_rlvr.config import load_train_config
from tandem_rlvr.rl import train as T
from tandem_rlvr.planner.memory import plan
overrides = json.loads(sys.argv[1])
cfg = load_train_config(None, None, overrides)
p = plan(cfg)
predicted, phase = p.peak("cpu")
loaded = sum(i.nbytes for i in p.items if i.phase == "resident" and "weights" in i.name)
run = T.build_run(cfg, print_fn=lambda *_: None)  # the models are loaded: the baseline
for model in (run.prep.pair.senior, run.prep.pair.junior):  # fault in weights still mapped from their files
    for t in model.parameters():
        float(t.detach().sum())
base = rss("VmRSS:")
run.trainer.train()
print(json.dumps({"measured": rss("VmHWM:") - base, "predicted": predicted - loaded, "phase": phase}))
"""


def make_model(arch: str, root: Path) -> Path:
    """A randomly initialised model of ``arch`` with its tokenizer, saved under ``root``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tandem_rlvr.models import load_tokenizer, resolve_model_path

    src = resolve_model_path(arch)
    out = root / arch
    if not out.exists():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
        model.save_pretrained(out)
        load_tokenizer(src).save_pretrained(out)
    return out


def make_data(root: Path, tokenizer_dir: Path, prompt_tokens: int) -> tuple[Path, int]:
    """40 problems whose plain prompts are exactly as long (the longest sets max_prompt_tokens)."""
    from tandem_rlvr.models import load_tokenizer
    from tandem_rlvr.prompting import encode_prompt, format_prompt

    tok = load_tokenizer(str(tokenizer_dir))
    rows, n = [], 0
    for i in range(40):
        words = " ".join(["one"] * prompt_tokens)
        text = f"{i} {words}"
        ids = encode_prompt(tok, format_prompt(tok, text, "plain", "none"))
        ids = ids[:prompt_tokens]
        text = tok.decode(ids[:-1] if len(ids) > 1 else ids, skip_special_tokens=True)
        n = max(n, len(encode_prompt(tok, format_prompt(tok, text, "plain", "none"))))
        rows.append({"problem": text, "answer": "2"})
    path = root / f"data-{tokenizer_dir.name}-{prompt_tokens}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, n


CONFIGS = [  # (architecture, prompt tokens, response tokens, micro_batch_rows, gradient checkpointing)
    ("tiny", 64, 192, 0, True),
    ("tiny", 64, 192, 0, False),
    ("tiny", 64, 448, 8, False),
    ("tiny", 64, 448, 4, True),
    ("smol", 32, 96, 4, True),
    ("smol", 32, 96, 4, False),
]


FSDP_CONFIGS = [  # (architecture, prompt tokens, response tokens, micro_batch_rows, gradient checkpointing)
    ("tiny", 64, 192, 0, True),
    ("tiny", 64, 192, 0, False),
    ("smol", 32, 96, 4, True),
    ("smol", 32, 96, 4, False),
]


def fsdp2_row(arch: str, root: Path, prompt: int, new: int, micro: int, ckpt: bool, env: dict,
              nproc: int = 2, sharding: str = "fsdp2", lora_r: int = 0) -> list[dict]:
    """One FSDP2 (or ZeRO-3) configuration under torchrun (``scripts/sharded_memory.py``); one result per rank.
    The ranks build the model from its config alone (random weights; a shipped config needs no files)."""
    from importlib import resources

    from tandem_rlvr.models import resolve_model_path

    shipped = resources.files("tandem_rlvr").joinpath("presets", "models", arch.replace("/", "--") + ".json")
    model = arch if shipped.is_file() else resolve_model_path(arch)  # models.model_config reads either
    overrides = dict(method="grpo", senior=str(model), dataset="unused.jsonl", dataset_split=None, template="plain",
                     group_size=8, prompts_per_step=2, prompts_per_minibatch=2, max_prompt_tokens=prompt,
                     max_new_tokens=new, micro_batch_rows=micro, gradient_checkpointing=ckpt, dtype="float32",
                     eval_every=0, kl_every=0, output_dir=str(root / "unused"), lora_r=lora_r)
    script = Path(__file__).with_name("sharded_memory.py")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                          str(nproc), str(script), json.dumps(overrides), "512", sharding], env=env,
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"memory_check: {sharding} configuration {arch} failed:\n{out.stderr[-3000:]}")
    rows, dec = [], json.JSONDecoder()
    for x in out.stdout.splitlines():  # the ranks' lines can land on one line: decode object after object
        while x.startswith("{"):
            r, end = dec.raw_decode(x)
            rows.append(r)
            x = x[end:].lstrip()
    for r in rows:
        r.update(arch=arch, prompt=prompt, response=new, micro=micro or 16 // nproc, checkpointing=ckpt,
                 layout=f"{sharding} x {nproc}" + (f", LoRA r={lora_r}" if lora_r else ""), lora_r=lora_r,
                 ratio=r["predicted"] / r["measured"])
    return sorted(rows, key=lambda r: r["rank"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the first configuration of each architecture only")
    ap.add_argument("--fsdp2", action="store_true", help="FSDP2 runs under torchrun against the sharded plan")
    ap.add_argument("--zero3", action="store_true",
                    help="DeepSpeed ZeRO-3 runs under torchrun against the sharded plan")
    ap.add_argument("--nproc", type=int, default=2, help="--fsdp2: processes (GPUs when present; default 2)")
    ap.add_argument("--arch", default=None, help="--fsdp2: this model (a config shipped in presets/models, a "
                    "directory, a built-in name) at 256 prompt + 1,024 response tokens, instead of tiny and smol")
    ap.add_argument("--lora", type=int, default=0,
                    help="train LoRA adapters of this rank (tandem train configurations)")
    ap.add_argument("--out", default=None, help="write the table as JSON here")
    a = ap.parse_args()
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_ARENA_MAX": "2",
           "TANDEM_THREADS": "2"}
    results = []
    configs = [c for i, c in enumerate(CONFIGS) if not a.quick or i in (0, 4)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sharded = [(a.arch, 256, 1024, 4, True), (a.arch, 256, 1024, 4, False)] if a.arch else FSDP_CONFIGS
        sharded = sharded[:1] if a.quick else sharded
        sharding = "zero3" if a.zero3 else "fsdp2"
        for arch, prompt, new, micro, ckpt in sharded if a.fsdp2 or a.zero3 else []:
            for r in fsdp2_row(arch, root, prompt, new, micro, ckpt, env, a.nproc, sharding, a.lora):
                results.append(r)
                lora = f" LoRA r={a.lora}" if a.lora else ""
                print(f"{arch:5s} {'ZeRO-3' if a.zero3 else 'FSDP2'} x {a.nproc}{lora} rank {r['rank']} "
                      f"({r['device']}) prompt {prompt} response {new} micro {r['micro']} ckpt {str(ckpt):5s} | "
                      f"predicted {r['predicted'] / 2**20:8.1f} MiB ({r['phase']}) | measured "
                      f"{r['measured'] / 2**20:8.1f} MiB | predicted/measured {r['ratio']:.2f} | sync "
                      f"{r['sync_s']:.2f} s for {r['synced'] / 1e6:.1f}M weights", flush=True)
        if a.fsdp2 or a.zero3:
            configs = []
        for arch, prompt, new, micro, ckpt in configs:
            model = make_model(arch, root)
            data, prompt_len = make_data(root, model, prompt)
            run = root / f"run-{len(results)}"
            overrides = dict(method="tandem", senior=str(model), dataset=str(data), dataset_split=None, val_size=4,
                             template="plain", instruction="none", lr=1e-5, group_size=8, prompts_per_step=2,
                             prompts_per_minibatch=2, max_prompt_tokens=prompt_len, max_new_tokens=new,
                             micro_batch_rows=micro, gradient_checkpointing=ckpt, max_steps=2, eval_every=0,
                             save_every=100, kl_every=0, dtype="float32", output_dir=str(run), lora_r=a.lora)
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(overrides)], env=env, capture_output=True,
                                 text=True)
            if out.returncode:
                sys.exit(f"memory_check: configuration {arch} failed:\n{out.stderr[-2000:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r.update(arch=arch, prompt=prompt_len, response=new, micro=micro or 16, checkpointing=ckpt, lora_r=a.lora,
                     ratio=r["predicted"] / r["measured"])
            results.append(r)
            print(f"{arch:5s} {f'LoRA r={a.lora} ' if a.lora else ''}prompt {prompt_len:4d} response {new:4d} "
                  f"micro {r['micro']:3d} ckpt {str(ckpt):5s} | predicted {r['predicted'] / 2**20:8.1f} MiB "
                  f"({r['phase']}) | measured {r['measured'] / 2**20:8.1f} MiB | predicted/measured "
                  f"{r['ratio']:.2f}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    worst = max(abs(r["ratio"] - 1) for r in results)
    print(f"worst |predicted/measured - 1| = {worst:.2f} over {len(results)} configurations")


if __name__ == "__main__":
    main()
