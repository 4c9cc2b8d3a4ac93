#!/usr/bin/env bash
# The TinyLM table of docs/examples.md: generates the ~100 M-parameter Llama
# model (once), runs `tinylm --bench-infer` for fp32 / NVFP4 / NF4 (exact and
# fast) at batch 1 and 8, keeps each run's JSON and CSV, and prints the
# Markdown table with the CPU it ran on. Run after building the release
# preset. Takes a few minutes; not part of the test suite.
# Usage: scripts/bench-tinylm.sh [WORK_DIR] (default build/bench-tinylm)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/release
work=${1:-build/bench-tinylm}
threads=${THREADS:-2}
mkdir -p "$work"
model="$work/llama-100m"
if [ ! -f "$model/model.safetensors" ]; then
  "$bin/tools/nvfp4" generate "$model" --llama --layers 12 --dim 768 --heads 12 --kv-heads 4 \
    --intermediate 2560 --vocab 8192 --seed 1 >&2
fi
runs=()
for batch in 1 8; do
  for fm in "fp32 exact" "nvfp4 exact" "nvfp4 fast" "nf4 exact" "nf4 fast"; do
    set -- $fm
    name="$1-$2-b$batch"
    "$bin/examples/tinylm/tinylm" --model "$model" --format "$1" --math "$2" --bench-infer --runs 3 --warmup 1 \
      --tokens 16 --prompt-len 16 --batch "$batch" --threads "$threads" --recompute-steps 4 \
      --json "$work/$name.json" --csv "$work/$name.csv" >"$work/$name.txt" 2>&1
    runs+=("$work/$name.json")
  done
done
python3 - "${runs[@]}" <<'PY'
import json, os, platform, sys
cpu = "unknown CPU"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
print(f"CPU: {cpu}, {os.cpu_count()} logical CPUs, {platform.machine()}")
print()
print("| format / math | batch | prefill tok/s | decode step median ms | p90 ms | decode tok/s "
      "| KV speedup | weights MiB | KV cache MiB | ops / measured |")
print("|---|---|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    j = json.load(open(path))
    fmt, math, b = os.path.basename(path)[:-5].split("-")
    print(f"| {fmt} {math} | {b[1:]} | {j['prefill_tokens_per_s']:.1f} | {j['decode_step_ms_median']:.2f} "
          f"| {j['decode_step_ms_p90']:.2f} | {j['decode_tokens_per_s']:.1f} | {j['kv_cache_speedup']:.1f}x "
          f"| {j['weight_bytes'] / 2**20:.1f} | {j['kv_cache_bytes'] / 2**20:.2f} "
          f"| {100 * j['op_coverage']:.1f} % |")
PY
