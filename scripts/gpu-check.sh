#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one go, for a machine that has one
# (CI machines have none: there these programs report SKIPPED). Run from the
# repository root after a release build:
#
#   cmake --preset release && cmake --build --preset release
#   scripts/gpu-check.sh [OUTDIR]
#
# It also runs from a copy of the tree that carries only the built files the
# checks use (build/release/libNVFP4.so*, libNVFP4_cuda.so,
# tests/nvfp4_tests, tests/nvfp4_gpu_tests, tools/nvfp4-bench): the binaries'
# RUNPATH names the build tree they were linked in, so LD_LIBRARY_PATH points
# at this tree's build/release instead.
#
# Writes into OUTDIR (default build/gpu-check): environment.txt, gpu_tests.txt
# (C ABI vs the CPU reference on managed memory), pytest_cuda.txt (the Python
# binding with PyTorch CUDA tensors), unit_tests.txt (the whole unit suite
# with a real GPU present) and bench_cuda.json (GPU timings). The exit
# status is the number of failed checks. NVFP4_GPU_CPU_BENCH=1 adds
# bench_cpu.json: the CPU products on that machine's CPU (2 threads).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NVFP4_BUILD_DIR:-$root/build/release}
out=${1:-$build/gpu-check}
mkdir -p "$out"
failed=0

# cuBLASLt / cudart of CUDA 13: the toolkit's, else a pip wheel's.
cudalib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13.0/lib64 /usr/local/lib; do
  [ -e "$d/libcublasLt.so.13" ] && cudalib="$cudalib:$d"
done
if [ -z "$cudalib" ]; then
  lt=$(find / -name 'libcublasLt.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
  [ -n "$lt" ] && cudalib=":$(dirname "$lt")"
fi
export LD_LIBRARY_PATH="$build${cudalib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NVFP4_CUDA_PLUGIN="$build/libNVFP4_cuda.so"

{
  date -u
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version,clocks.max.sm --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)|L3'
  grep -o -w -E 'avx512(f|bw|vl|vnni|_bf16|vbmi|_fp16)|avx_vnni|amx_(tile|int8|bf16)' /proc/cpuinfo | sort -u | tr '\n' ' '
  echo
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$NVFP4_CUDA_PLUGIN"
  "$build/tests/nvfp4_tests" "[isa-skipped]" | grep -i skipped
} >"$out/environment.txt" 2>&1

step() {  # step NAME LOGFILE COMMAND...: runs, logs, counts a failure
  local name=$1 log=$2
  shift 2
  "$@" >"$log" 2>&1
  local rc=$?
  echo "$name: exit $rc" | tee -a "$out/summary.txt"
  [ "$rc" -ne 0 ] && failed=$((failed + 1))
}

step "GPU ops vs CPU reference" "$out/gpu_tests.txt" "$build/tests/nvfp4_gpu_tests"
if python3 -c 'import torch, numpy, pytest; assert torch.cuda.is_available()' 2>/dev/null; then
  step "Python binding with torch CUDA tensors" "$out/pytest_cuda.txt" env NVFP4_LIBRARY="$build/libNVFP4.so.1" \
    PYTHONPATH="$root/bindings/python" python3 -m pytest -q -rs -p no:cacheprovider "$root/tests/python/test_cuda_torch.py"
else
  echo "Python binding with torch CUDA tensors: SKIPPED (python3 lacks torch with CUDA, numpy or pytest)" |
    tee -a "$out/summary.txt"
fi
step "CUDA bench" "$out/bench_cuda.json" "$build/tools/nvfp4-bench" --device cuda --reps "${NVFP4_GPU_BENCH_REPS:-20}"
step "unit suite with a GPU present" "$out/unit_tests.txt" timeout "${NVFP4_GPU_UNIT_TIMEOUT:-240}" \
  "$build/tests/nvfp4_tests" --reporter compact
if [ -n "${NVFP4_GPU_CPU_BENCH:-}" ]; then  # that machine's CPU too: 2 threads, the products only
  step "CPU bench (2 threads, products)" "$out/bench_cpu.json" timeout 200 "$build/tools/nvfp4-bench" --threads 2 \
    --only products --max-case-seconds 0.4 --ms 1,8,32,512
fi
exit "$failed"
