#!/usr/bin/env bash
# GPU readiness check, for a machine with CUDA GPUs and no internet.
#   bash scripts/gpu_check.sh [MODEL]
# 1. the decoder's reference-equality tests on cuda:0 (float32, TF32 off: tokens must be identical),
#    with its speed paths (lean step vs transformers, compaction under uneven lengths)
# 2. a bfloat16 consistency check: tandem-decoded tokens re-scored by a full-prefix forward
#    (tolerance: mean and max |delta log-prob| within twice those of transformers' own cached
#    bf16 generate() on the same batch, measured in the same run, and at least 0.02 / 0.25 nats)
# 3. tandem bench decode on MODEL (default: the largest model directory found under
#    $TANDEM_CACHE / ~/.cache/tandem-rlvr, else the tiny world), junior on cuda:1 when present
# 4. a 2-step tandem training run of the tiny preset on the GPU
# 5-11 (when vLLM is installed: pip install -e ".[vllm]"): the vLLM engine's tests (greedy token
#    and authorship equality with the reference decoder at float32, teacher-forced log-probs,
#    the battery on vLLM runs, weight sync after a training step, resume), `bench decode
#    --engine vllm` on MODEL (self-paired), a small handoff evaluation of MODEL on MATH-500
#    through vLLM, a 2-step training run with vLLM rollouts (peak GPU memory printed), vLLM
#    sleep/wake (scripts/vllm_sleep_check.py: memory freed, same tokens after wake and a weight
#    push), the 2-step run again with --vllm-sleep true (peak memory), and `bench train --engine vllm`
#    and a served tiny pair (`tandem serve --weight-sync`) feeding a 2-step `--engine vllm-server` run
#    (the weight push: vLLM's nccl engine on a GPU, never run yet)
# 12 paper_layout: the qwen3-4b-deepscaler preset's layout (fp32 masters, bf16 compute, micro-batches of
#    one 4,024-token row, checkpointing, decoder rollouts) for 2 updates on randomly initialised Qwen3-4B
#    models built from the shipped config (scripts/paper_layout_check.py): the memory plan's predicted
#    peak per device beside torch.cuda.max_memory_allocated
# 13 fsdp2_memory: sharded training (scripts/memory_check.py --fsdp2 --arch Qwen/Qwen3-0.6B, random weights from
#    the shipped config): FSDP2 over 2 processes when 2 GPUs are present, else on one process as a smoke test;
#    per rank the plan's peak (Layout(N, "fsdp2"), planner/memory.py) beside torch.cuda.max_memory_allocated,
#    and the seconds of one bf16 weight sync (gather in 512 MiB buckets)
# 14 fsdp2_plan_9b: the dry-run plan and layouts table of the qwen3.5-9b-2b preset on this GPU's memory
# 15 zero3_memory (when DeepSpeed is installed: pip install -e ".[sharded]"): step 13 under DeepSpeed ZeRO-3
#    (scripts/memory_check.py --zero3: bf16 partitions over fp32 masters, fp32 gradient reduction), per rank the
#    plan's Layout(N, "zero3") peak beside torch.cuda.max_memory_allocated, and one sync through the trainer's stream
# 16 zero3_lora_2_steps (with DeepSpeed): a 2-step LoRA run (r 8, bf16, --save-merged) of the tiny preset under
#    --sharding zero3 on NPROC processes (torchrun): DeepSpeed's bf16 mode on a GPU (adapters as bf16 partitions
#    over fp32 masters, merged stream layer by layer), peak GPU memory printed; the CPU tests run it in fp32 only
# 17 overlap_step_time (rehearsed with GPU_CHECK_CPU=1; not yet run on a GPU): the tiny
#    preset for 8 updates, synchronous (--max-staleness 0) and overlapped (--max-staleness 1), rollouts by the hf
#    decoder on a device of their own (2 GPUs: senior cuda:0, rollouts and junior cuda:1; 1 GPU: the senior trains
#    on the CPU, rollouts and junior on cuda:0); prints each run's mean step time after the first two, its split
#    (wall/rollout_wait_s, wall/generate_s, wall/weight_sync_s) and the ratio overlapped / synchronous beside its
#    bound max(rollout, train) / (rollout + train) from the synchronous run's own split, and beside the bound with
#    the weight push serial, (push + max(rollout, train)) / step (docs/overlap.md, "Measured")
# and prints one summary table, then the sharded checks that need more GPUs than this machine has
# (for a user to run). Exit status is non-zero if any step fails.
# GPU_CHECK_STEPS="paper_layout train_2_steps" runs only the named steps (default: all).
# On the lent GPU machine (no network, no TRL/datasets/math-verify/gguf in its image): run
# `bash scripts/device_wheels.sh` here first and carry .device-wheels; this script installs them into
# .device-site and runs the package from src/ (no pip install needed there).
# GPU_CHECK_CPU=1 rehearses the same steps on the CPU (small bench sizes), to check the script
# itself on a machine without a GPU; its figures mean nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
command -v python >/dev/null || python() { command python3 "$@"; }
if ! python -c "import trl, datasets, math_verify, gguf" >/dev/null 2>&1 && ls .device-wheels/*.whl >/dev/null 2>&1; then
  python -m pip install -q --no-index --no-deps --target .device-site .device-wheels/*.whl || exit 2
  export PYTHONPATH="$PWD/.device-site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
python -c "import tandem_rlvr" 2>/dev/null || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
command -v tandem >/dev/null || tandem() { python -m tandem_rlvr.cli "$@"; }
python -c "import torch, transformers, trl; print(f'gpu_check: torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}')"
LAYOUT_EXTRA=()
BENCH_EXTRA=()
VLLM_EVAL=(--limit 20 --n 4 --max-tokens 1024)
if [ "${GPU_CHECK_CPU:-0}" = 1 ]; then
  NGPU=0; SDEV=cpu; JDEV=cpu; BENCH_EXTRA=(--batch 4 --new-tokens 16 --repeats 1)
  VLLM_EVAL=(--limit 2 --n 2 --max-tokens 32); LAYOUT_EXTRA=(--small)
  echo "gpu_check: CPU rehearsal (GPU_CHECK_CPU=1): the steps run, the figures mean nothing"
else
  NGPU=$(python -c "import torch; print(torch.cuda.device_count())")
  [ "$NGPU" -ge 1 ] || { echo "gpu_check: no CUDA device (GPU_CHECK_CPU=1 rehearses the script on the CPU)"; exit 2; }
  SDEV=cuda:0; JDEV=cuda:0; [ "$NGPU" -ge 2 ] && JDEV=cuda:1
fi
mkdir -p "$OUT" || { echo "gpu_check: cannot create OUT=$OUT"; exit 2; }
# The largest causal-LM directory with safetensors weights (sharded or not) in our cache or
# the Hugging Face hub cache; the tiny world when there is none.
MODEL=${1:-$(python - <<'PY'
import json
from pathlib import Path
from tandem_rlvr.paths import cache_dir
roots = [cache_dir()]
try:
    from huggingface_hub.constants import HF_HUB_CACHE
    roots.append(Path(HF_HUB_CACHE))
except Exception:
    pass
dirs = set()
for root in roots:
    for cfg in root.glob("**/config.json"):
        d = cfg.parent
        try:
            arch = json.loads(cfg.read_text()).get("architectures") or []
        except Exception:
            continue
        if any(a.endswith("ForCausalLM") for a in arch) and any(d.glob("*.safetensors")):
            dirs.add(d.resolve())
size = lambda d: sum(f.stat().st_size for f in d.glob("*.safetensors"))
print(max(dirs, key=size) if dirs else "tiny")
PY
)}
echo "gpu_check: $NGPU GPU(s), junior on $JDEV, model $MODEL, logs in $OUT"
declare -A STATUS
# peak_mem CMD...: run CMD, then print the most GPU memory in use (MiB, all GPUs, sampled every 0.5 s)
peak_mem() {
  local f; f=$(mktemp); "$@" & local pid=$!
  while kill -0 $pid 2>/dev/null; do
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits \
      | awk '{s += $1} END {print s}' >> "$f"; sleep 0.5; done
  wait $pid; local rc=$?
  echo "peak GPU memory in use: $(sort -n "$f" | tail -1) MiB (empty: no nvidia-smi)"; rm -f "$f"; return $rc
}
run() {
  local name=$1; shift
  if [ -n "${GPU_CHECK_STEPS:-}" ] && [[ " $GPU_CHECK_STEPS " != *" $name "* ]]; then STATUS[$name]="not run"; return; fi
  echo "== $name"; if "$@" > "$OUT/$name.log" 2>&1; then STATUS[$name]=ok; else STATUS[$name]="FAILED (see $OUT/$name.log)"; fi
  tail -3 "$OUT/$name.log"
}

run reference_fp32 env TANDEM_TEST_DEVICE=$SDEV python -m pytest -q -p no:cacheprovider tests/unit/decoding/test_decoding_reference.py \
    tests/unit/decoding/test_decoder_speed_paths.py
run bf16_consistency python scripts/bf16_check.py "$MODEL" "$SDEV" "$JDEV"
run bench_decode tandem bench decode --senior "$MODEL" --device "$SDEV" --junior-device "$JDEV" --dtype bfloat16 \
    "${BENCH_EXTRA[@]}" --json
run train_2_steps tandem train --preset tiny --senior-device "$SDEV" --junior-device "$JDEV" --dtype float32 \
    --max-steps 2 --eval-every 1 --save-every 1 --val-size 16 --output-dir "$OUT/train"
run paper_layout python scripts/paper_layout_check.py "${LAYOUT_EXTRA[@]}" --out "$OUT/paper_layout"
NPROC=1; [ "$NGPU" -ge 2 ] && NPROC=2
SHARD_ARCH=(--arch Qwen/Qwen3-0.6B); [ "${GPU_CHECK_CPU:-0}" = 1 ] && SHARD_ARCH=(--quick)
run fsdp2_memory python scripts/memory_check.py --fsdp2 --nproc "$NPROC" "${SHARD_ARCH[@]}" --out "$OUT/fsdp2_memory.json"
GIB=$(python -c "import torch; print(torch.cuda.get_device_properties(0).total_memory / 2**30 if torch.cuda.is_available() else 80)")
run fsdp2_plan_9b tandem train --preset qwen3.5-9b-2b --dry-run --plan-gpu-gib "$GIB" --plan-processes "$NPROC" \
    --plan-sharding fsdp2
CHECKS=(reference_fp32 bf16_consistency bench_decode train_2_steps paper_layout fsdp2_memory fsdp2_plan_9b)
# 17: overlap (docs/overlap.md): an install whose tandem train has no --max-staleness skips it with a line
OVL_DEV=(--senior-device cpu --rollout-device "$SDEV" --junior-device "$SDEV")
[ "$NGPU" -ge 2 ] && OVL_DEV=(--senior-device cuda:0 --rollout-device cuda:1 --junior-device cuda:1)
[ "${GPU_CHECK_CPU:-0}" = 1 ] && OVL_DEV=(--senior-device cpu --rollout-device cpu:1 --junior-device cpu)
if tandem train --help 2>/dev/null | grep -q -- --max-staleness; then
  for k in 0 1; do
    run "overlap_k$k" tandem train --preset tiny --engine hf "${OVL_DEV[@]}" --dtype float32 --max-staleness "$k" \
        --max-steps 8 --eval-every 0 --save-every 100 --output-dir "$OUT/train_overlap_k$k"
  done
  # the benchmark's own split and bound (tandem bench overlap): mean per update after the first two (start-up,
  # first prefetch); the tiny preset makes one update per rollout step
  run overlap_step_time python -c "import sys; from tandem_rlvr.recipes.bench_overlap import compare, report
from pathlib import Path
print(report(compare(Path(sys.argv[1]), Path(sys.argv[2]), 1, 2)))" "$OUT/train_overlap_k0/log.jsonl" "$OUT/train_overlap_k1/log.jsonl"
  CHECKS+=(overlap_k0 overlap_k1 overlap_step_time)
else
  echo "== tandem train has no --max-staleness yet: the overlap check is skipped (docs/overlap.md)"
fi
if python -c "import deepspeed" >/dev/null 2>&1; then
  run zero3_memory python scripts/memory_check.py --zero3 --nproc "$NPROC" "${SHARD_ARCH[@]}" --out "$OUT/zero3_memory.json"
  CHECKS+=(zero3_memory)
  run zero3_lora_2_steps peak_mem python -m torch.distributed.run --standalone --nproc_per_node "$NPROC" -m tandem_rlvr.cli \
      train --preset tiny --sharding zero3 --lora-r 8 --save-merged true --dtype bfloat16 --max-steps 2 --eval-every 1 \
      --save-every 1 --val-size 16 --output-dir "$OUT/train_zero3_lora"
  CHECKS+=(zero3_lora_2_steps)
else
  echo "== DeepSpeed not installed: the ZeRO-3 check is skipped (pip install -e \".[sharded]\")"
fi
if python -c "import vllm" >/dev/null 2>&1; then
  run vllm_engine_tests python -m pytest -q -p no:cacheprovider -m vllm tests/distributed/test_vllm_engine.py tests/distributed/test_vllm_train.py
  run vllm_bench_decode tandem bench decode --engine vllm --senior "$MODEL" "${BENCH_EXTRA[@]}" --json
  run vllm_eval_handoff tandem eval handoff --engine vllm --senior "$MODEL" --junior "$MODEL" --benchmarks math500 "${VLLM_EVAL[@]}" \
      --out "$OUT/vllm_eval"
  run vllm_train_2_steps peak_mem tandem train --preset tiny --engine vllm --senior-device "$SDEV" --junior-device "$JDEV" \
      --dtype float32 --max-steps 2 --eval-every 1 --save-every 1 --val-size 16 --output-dir "$OUT/train_vllm"
  run vllm_sleep python scripts/vllm_sleep_check.py "$MODEL"
  run vllm_train_sleep peak_mem tandem train --preset tiny --engine vllm --vllm-sleep true --senior-device "$SDEV" \
      --junior-device "$JDEV" --dtype float32 --max-steps 2 --eval-every 1 --save-every 1 --val-size 16 \
      --output-dir "$OUT/train_vllm_sleep"
  run vllm_bench_train tandem bench train --engine vllm --steps 3 --json
  # rollouts from a served pair with weight pushes after each update (nccl on a GPU, tandem_gloo on CPU)
  run vllm_server_train bash -c 'tandem serve tiny --weight-sync --port 8753 --gpu-memory-utilization 0.3 &
    S=$!; for _ in $(seq 600); do curl -sf http://127.0.0.1:8753/health >/dev/null && break; sleep 1; done
    tandem train --preset tiny --engine vllm-server --server http://127.0.0.1:8753 --max-steps 2 --eval-every 1 \
      --save-every 1 --val-size 16 --output-dir "$0"; rc=$?; kill $S; wait $S; exit $rc' "$OUT/train_server"
  CHECKS+=(vllm_engine_tests vllm_bench_decode vllm_eval_handoff vllm_train_2_steps vllm_sleep vllm_train_sleep
           vllm_bench_train vllm_server_train)
else
  echo "== vLLM not installed: the vLLM engine checks are skipped (pip install -e \".[vllm]\")"
fi

echo
printf '%-18s %s\n' check status
for k in "${CHECKS[@]}"; do printf '%-18s %s\n' "$k" "${STATUS[$k]}"; done
grep -h '"tandem_over_solo"' "$OUT/bench_decode.log" >/dev/null 2>&1 && python - "$OUT/bench_decode.log" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"decode: solo {r['solo_tok_s']:.0f} tok/s, tandem {r['tandem_tok_s']:.0f} tok/s, tandem/solo {r['tandem_over_solo']:.3f} "
      f"(FLOP bound {r['bound']:.3f}, roofline bound {r.get('roofline_bound', float('nan')):.3f}), "
      f"solo/generate() {r['solo_over_hf_generate']:.2f}")
PY
grep -h '"engine": "vllm"' "$OUT/vllm_bench_decode.log" >/dev/null 2>&1 && python - "$OUT/vllm_bench_decode.log" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"vLLM decode: solo {r['solo_tok_s']:.0f} tok/s, tandem {r['tandem_tok_s']:.0f} tok/s, tandem/solo "
      f"{r['tandem_over_solo']:.3f} (bound with both output layers {r['bound']:.3f})")
PY
grep -h "predicted" "$OUT/paper_layout.log" 2>/dev/null | grep -v "^ " | sed 's/^/paper layout: /'
grep -h "FSDP2 x" "$OUT/fsdp2_memory.log" 2>/dev/null | sed 's/^/sharded: /'
grep -h "ZeRO-3 x" "$OUT/zero3_memory.log" 2>/dev/null | sed 's/^/sharded: /'
grep -h "^overlapped / synchronous step" "$OUT/overlap_step_time.log" 2>/dev/null | sed "s/^/overlap: /"
echo "needs more GPUs than one machine's check runs (docs/scale.md), for a user to run:"
[ "$NPROC" -ge 2 ] || echo "  python scripts/memory_check.py --fsdp2 --nproc 2 --arch Qwen/Qwen3-0.6B   # 2 GPUs: per-rank peaks, sync"
echo "  python scripts/memory_check.py --fsdp2 --nproc 8 --arch Qwen/Qwen3-4B-Instruct-2507   # 8 GPUs"
echo "  tandem train --preset qwen3.5-9b-2b (with the layout its --dry-run recommends; 2-8 x 80 GB)"
for k in "${!STATUS[@]}"; do [ "${STATUS[$k]}" = ok ] || [ "${STATUS[$k]}" = "not run" ] || exit 1; done
