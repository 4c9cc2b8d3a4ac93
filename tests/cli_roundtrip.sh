#!/usr/bin/env bash
# Round trip through the nvfp4 tool: a generated bf16 checkpoint quantized to
# every layout, read back, detected as the right family, verified against the
# dequantized reference, with the key names, dtypes and shapes of docs/formats.md;
# MXFP4 also with an expert stack decoded independently.
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
# MXFP4, gpt-oss layouts: the dense model (bias kept as P.bias) ...
"$tool" quantize "$tmp/model.safetensors" "$tmp/mx.safetensors" --format mxfp4 >/dev/null
check "$tmp/mx.safetensors" mxfp4-gpt-oss '{".blocks":["U8",[256,4,16]],".scales":["U8",[256,4]]}'
"$tool" quantize "$tmp/model.safetensors" "$tmp/mxhf.safetensors" --format mxfp4 --layout gpt-oss-hf >/dev/null
check "$tmp/mxhf.safetensors" mxfp4-gpt-oss '{"_blocks":["U8",[256,4,16]],"_scales":["U8",[256,4]]}'
# ... and an MoE expert stack [E, N, K] (+ bias [E, N]) written as
# [E, N, K/32, 16] + [E, N, K/32], read back and decoded here independently
# (e2m1 * 2^(byte-127), element 2j in the low nibble), verified through
# MXFP4_linear_experts.
"$py" - "$tmp/moe.safetensors" <<'PY'
import json, random, struct, sys
random.seed(5)
E, N, K = 4, 48, 96
w = [random.gauss(0, 1) * (2.0 ** random.randint(-6, 6)) for _ in range(E * N * K)]
b = [random.gauss(0, 1) for _ in range(E * N)]
r = [random.gauss(0, 1) for _ in range(E * K)]
tensors = [("model.layers.0.mlp.experts.gate_up_proj.weight", [E, N, K], w),
           ("model.layers.0.mlp.experts.gate_up_proj.bias", [E, N], b),
           ("model.layers.0.mlp.router.weight", [E, K], r)]
header, blobs, off = {}, [], 0
for name, shape, vals in tensors:
    blob = struct.pack("<%df" % len(vals), *vals)
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
    blobs.append(blob)
    off += len(blob)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
for layout in gpt-oss gpt-oss-hf; do
  sep=.; [ $layout = gpt-oss-hf ] && sep=_
  "$tool" quantize "$tmp/moe.safetensors" "$tmp/moe-$layout.safetensors" --format mxfp4 --layout $layout \
    --exclude '*router*' >/dev/null
  "$tool" inspect "$tmp/moe-$layout.safetensors" --json > "$tmp/inspect.json"
  "$py" - "$tmp/inspect.json" "$tmp/moe.safetensors" "$tmp/moe-$layout.safetensors" "$sep" <<'PY'
import json, struct, sys
info = json.load(open(sys.argv[1]))
sep = sys.argv[4]
assert info["totals"]["schema"] == "mxfp4-gpt-oss" and info["totals"]["linears"] == 1, info["totals"]
layer = info["linears"][0]
assert layer["prefix"] == "model.layers.0.mlp.experts.gate_up_proj" and layer["experts"] == 4, layer
assert layer["shape"] == [48, 96], layer
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    return {k: (v["dtype"], v["shape"], raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in hdr.items() if k != "__metadata__"}
src, out = load(sys.argv[2]), load(sys.argv[3])
p = "model.layers.0.mlp.experts.gate_up_proj"
assert out[p + sep + "blocks"][:2] == ("U8", [4, 48, 3, 16]), out[p + sep + "blocks"][:2]
assert out[p + sep + "scales"][:2] == ("U8", [4, 48, 3]), out[p + sep + "scales"][:2]
assert out[p + ".bias"][:2] == ("F32", [4, 48])
assert out["model.layers.0.mlp.router.weight"][0] == "F32"  # excluded: copied
w = struct.unpack("<%df" % (4 * 48 * 96), src[p + ".weight"][2])
q, s = out[p + sep + "blocks"][2], out[p + sep + "scales"][2]
mag = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
for i, x in enumerate(w):
    code = (q[i // 2] >> (4 * (i & 1))) & 0xF
    scale = 2.0 ** (s[i // 32] - 127)
    v = (-1 if code & 8 else 1) * mag[code & 7] * scale
    assert abs(v - x) <= 2 * scale, (i, x, v, scale)  # within the E2M1 step (saturation included)
PY
  "$tool" verify "$tmp/moe-$layout.safetensors" > "$tmp/verify.txt"
  grep -q "4 x \[48, 96\]" "$tmp/verify.txt" && grep -q "ok$" "$tmp/verify.txt"
  echo "  mxfp4 $layout expert stack: keys, shapes, decoded values and experts forward verified"
done
# Usage errors exit 2, runtime errors exit 1 with the file named.
set +e
"$tool" quantize 2>/dev/null; [ $? -eq 2 ] || { echo "usage error must exit 2"; exit 1; }
out=$("$tool" inspect "$tmp/missing.safetensors" 2>&1); rc=$?
set -e
[ $rc -eq 1 ] && grep -q "missing.safetensors" <<<"$out" || { echo "runtime error must exit 1 naming the file"; exit 1; }
echo "cli round trip ok"
