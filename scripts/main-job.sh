#!/usr/bin/env bash
# The main job on generated data: a small bf16 checkpoint is generated,
# quantized to NVFP4 (ModelOpt layout) and to NF4 (bitsandbytes layout),
# inspected and verified; then the demo multiplies with both formats.
# Run after building the release preset (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/release
work=${NVFP4_WORK_DIR:-build/main-job}
mkdir -p "$work"
"$bin/tools/nvfp4" info
"$bin/tools/nvfp4" generate "$work/model-bf16.safetensors" --layers 2 --dim 512
"$bin/tools/nvfp4" quantize "$work/model-bf16.safetensors" "$work/model-nvfp4.safetensors" --format nvfp4 --layout modelopt
"$bin/tools/nvfp4" inspect "$work/model-nvfp4.safetensors"
"$bin/tools/nvfp4" verify "$work/model-nvfp4.safetensors"
"$bin/tools/nvfp4" quantize "$work/model-bf16.safetensors" "$work/model-nf4.safetensors" --format nf4 --double-quant
"$bin/tools/nvfp4" verify "$work/model-nf4.safetensors"
"$bin/examples/nvfp4-demo"
