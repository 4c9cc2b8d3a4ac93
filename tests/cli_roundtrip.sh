#!/usr/bin/env bash
# Round trip through the nvfp4 tool: a generated bf16 checkpoint quantized to
# every layout, read back, detected as the right family, verified against the
# dequantized reference, with the key names, dtypes and shapes of docs/formats.md.
# Usage: cli_roundtrip.sh NVFP4_TOOL PYTHON3
set -euo pipefail
tool=$1 py=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tool" generate "$tmp/model.safetensors" --layers 2 --dim 128 >/dev/null
check() {  # layout, family, expected keys/dtypes/shapes for model.layers.0.mlp.up_proj ([256, 128])
  local file=$1 family=$2 spec=$3
  "$tool" inspect "$file" --json > "$tmp/inspect.json"
  "$py" - "$tmp/inspect.json" "$family" "$spec" <<'PY'
import json, sys
info = json.load(open(sys.argv[1]))
family, spec = sys.argv[2], json.loads(sys.argv[3])
assert info["totals"]["schema"] == family, (info["totals"], family)
assert info["totals"]["linears"] == 6, info["totals"]
tensors = {t["name"]: t for t in info["tensors"]}
for key, (dtype, shape) in spec.items():
    name = "model.layers.0.mlp.up_proj" + key
    assert name in tensors, f"missing {name}"
    assert tensors[name]["dtype"] == dtype, (name, tensors[name]["dtype"], dtype)
    if shape is not None:
        assert tensors[name]["shape"] == shape, (name, tensors[name]["shape"], shape)
# non-linear weights are copied unchanged
assert tensors["model.embed_tokens.weight"]["dtype"] == "BF16"
assert tensors["model.layers.0.input_layernorm.weight"]["dtype"] == "BF16"
assert tensors["model.layers.0.self_attn.q_proj.bias"]["dtype"] == "BF16"
PY
  "$tool" verify "$file" > "$tmp/verify.txt"
  grep -q "ok$" "$tmp/verify.txt"
  echo "  $family: keys, dtypes, shapes and forward verified"
}
"$tool" quantize "$tmp/model.safetensors" "$tmp/mo.safetensors" --format nvfp4 --layout modelopt >/dev/null
check "$tmp/mo.safetensors" nvfp4-modelopt '{".weight":["U8",[256,64]],".weight_scale":["F8_E4M3",[256,8]],".weight_scale_2":["F32",[]]}'
"$tool" quantize "$tmp/model.safetensors" "$tmp/ct.safetensors" --format nvfp4 --layout compressed-tensors >/dev/null
check "$tmp/ct.safetensors" nvfp4-compressed-tensors '{".weight_packed":["U8",[256,64]],".weight_scale":["F8_E4M3",[256,8]],".weight_global_scale":["F32",[1]]}'
"$tool" quantize "$tmp/model.safetensors" "$tmp/lg.safetensors" --format nvfp4 --layout legacy >/dev/null
check "$tmp/lg.safetensors" nvfp4-legacy '{".weight.qdata":["U8",[256,64]],".weight.scale":["F8_E4M3",[256,8]]}'
"$tool" quantize "$tmp/model.safetensors" "$tmp/bnb.safetensors" --format nf4 >/dev/null
check "$tmp/bnb.safetensors" bitsandbytes-nf4 '{".weight":["U8",[16384,1]],".weight.absmax":["F32",[512]],".weight.quant_map":["F32",[16]],".weight.quant_state.bitsandbytes__nf4":["U8",null]}'
"$tool" quantize "$tmp/model.safetensors" "$tmp/bnb2.safetensors" --format nf4 --double-quant --blocksize 128 >/dev/null
check "$tmp/bnb2.safetensors" bitsandbytes-nf4 '{".weight":["U8",[16384,1]],".weight.absmax":["U8",[256]],".weight.nested_absmax":["F32",[1]],".weight.nested_quant_map":["F32",[256]],".weight.quant_map":["F32",[16]]}'
# Usage errors exit 2, runtime errors exit 1 with the file named.
set +e
"$tool" quantize 2>/dev/null; [ $? -eq 2 ] || { echo "usage error must exit 2"; exit 1; }
out=$("$tool" inspect "$tmp/missing.safetensors" 2>&1); rc=$?
set -e
[ $rc -eq 1 ] && echo "$out" | grep -q "missing.safetensors" || { echo "runtime error must exit 1 naming the file"; exit 1; }
echo "cli round trip ok"
