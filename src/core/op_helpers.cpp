#include "core/op_helpers.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "common/error.h"
#include "common/struct_size.h"
#include "common/thread_pool.h"
#include "formats/codec.h"
#include "kernels/dispatch.h"
#include "kernels/portable.h"

namespace q4::core {

using kern::FloatOut;
using kern::FloatPtr;
using kern::FType;

FType ftype_of(const TensorRef& t) {
  switch (t.type) {
    case ElemType::F16:
      return FType::F16;
    case ElemType::BF16:
      return FType::BF16;
    default:
      return FType::F32;
  }
}

FloatPtr as_input(const TensorRef& t) {
  return FloatPtr{t.data, ftype_of(t)};
}
FloatOut as_output(const TensorRef& t) {
  return FloatOut{t.data, ftype_of(t)};
}

// An fp32 view of a float tensor: the tensor itself when it is fp32,
// otherwise a converted copy.

F32View f32_view(const TensorRef& t, int32_t threads) {
  F32View v;
  if (t.type == ElemType::F32) {
    v.p = reinterpret_cast<const float*>(t.data);
    return v;
  }
  v.storage.resize(static_cast<size_t>(t.numel));
  const FloatPtr src = as_input(t);
  const kern::KernelTable& kt = kern::active_table();  // (its act_to_f32 is vectorized)
  constexpr int64_t kChunk = 1 << 16;
  parallel_for((t.numel + kChunk - 1) / kChunk, threads, [&](int64_t c) {
    const int64_t i0 = c * kChunk;
    kt.act_to_f32(src.data, src.type, i0, std::min(kChunk, t.numel - i0), v.storage.data() + i0);
  });
  v.p = v.storage.data();
  return v;
}

// fp32 results for `out`: written in place when out is fp32, else into a
// buffer that finish() converts (adding the bias on the way).

F32Result f32_result(const TensorRef& out, bool staged) {
  F32Result r;
  r.out = &out;
  if (out.type == ElemType::F32 && !staged) {
    r.p = reinterpret_cast<float*>(out.data);
  } else {
    r.storage.resize(static_cast<size_t>(out.numel));
    r.p = r.storage.data();
  }
  return r;
}

namespace {

// y = scale * y + bias[j] for rows [0, rows) of y, then (store: y is not
// out's memory) the copy or conversion into out's rows [row0, row0 +
// rows).
void finish_impl(float* y, int64_t rows, int64_t n, int64_t row0, const TensorRef& out, bool store,
                 float scale, const FloatPtr* bias, int32_t threads) {
  if (rows == 0 || n == 0 || (!store && scale == 1.0f && bias == nullptr)) return;  // (nothing to do)
  std::vector<float> b;
  if (bias != nullptr) {
    b.resize(static_cast<size_t>(n));
    kern::load_row(bias->data, bias->type, 0, n, b.data());
  }
  const FloatOut dst = as_output(out);
  // (active_table() notes its level as the one used; the call reports the
  // level of its product, e.g. fast mode's exact fallback, not this pass's)
  const int32_t isa_used = kern::last_isa_used();
  const kern::KernelTable& kt = kern::active_table();
  kern::note_isa_used(isa_used);
  const int64_t rows_per = std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1));
  parallel_for((rows + rows_per - 1) / rows_per, threads, [&](int64_t t) {
    const int64_t r0 = t * rows_per, r1 = std::min(rows, r0 + rows_per);
    for (int64_t i = r0; i < r1; ++i) {
      float* yi = y + i * n;
      if (scale != 1.0f) {
        for (int64_t j = 0; j < n; ++j) yi[j] *= scale;
      }
      if (!b.empty()) {
        for (int64_t j = 0; j < n; ++j) yi[j] += b[static_cast<size_t>(j)];
      }
      if (store) kt.f32_to_act(dst.data, dst.type, (row0 + i) * n, n, yi);
    }
  });
}

}  // namespace

void finish(F32Result& r, int64_t n, float scale, const FloatPtr* bias, int32_t threads) {
  const int64_t total = r.out->numel;
  if (total == 0) return;
  finish_impl(r.p, n > 0 ? total / n : 0, n, 0, *r.out, !r.storage.empty(), scale, bias, threads);
}

void finish_rows(float* y, int64_t rows, int64_t n, int64_t row0, const TensorRef& out, float scale,
                 const FloatPtr* bias, int32_t threads) {
  finish_impl(y, rows, n, row0, out, true, scale, bias, threads);
}

// Linear-layout scales: the tensor's bytes, or an unswizzled copy.

LinearScales linear_scales(const TensorRef& s, int32_t layout, int64_t rows, int64_t k) {
  LinearScales l;
  if (layout == Q4_SCALE_LINEAR) {
    l.p = s.data;
    return l;
  }
  l.storage.resize(static_cast<size_t>(rows * (k / 16)));
  kern::unswizzle_scales(s.data, rows, k / 16, l.storage.data());
  l.p = l.storage.data();
  return l;
}

Bias parse_bias(const DLTensor* bias, int64_t n) {
  Bias b;
  if (bias == nullptr) return b;
  b.ref = check_tensor_any(bias, "bias");
  require_float(b.ref);
  require_numel(b.ref, n, "one per output feature N");
  b.ptr = as_input(b.ref);
  b.present = true;
  return b;
}

// NF4 statistics: parsed tensors plus the resolved pointer view.

int64_t require_blocksize(int64_t bs, const char* name) {
  switch (bs) {
    case 32:
    case 64:
    case 128:
    case 256:
    case 512:
    case 1024:
    case 2048:
    case 4096:
      return bs;
    default:
      fail(Q4_ERR_INVALID_ARGUMENT, name,
           "expected one of 32, 64, 128, 256, 512, 1024, 2048, 4096, got " + std::to_string(bs));
  }
}

Nf4State parse_nf4_state(const NF4_state* state_in, int64_t n) {
  const NF4_state st = read_struct(state_in, "state");
  const NF4_state* state = &st;
  Nf4State s;
  s.stats.blocksize = require_blocksize(state->blocksize, "state->blocksize");
  const int64_t nblocks = (n + s.stats.blocksize - 1) / s.stats.blocksize;
  s.absmax = check_tensor_any(state->absmax, "state->absmax");
  s.nested = state->nested_absmax != nullptr;
  if (!s.nested) {
    require_type(s.absmax, ElemType::F32);
    require_numel(s.absmax, nblocks, "one absmax per block of the weight");
    s.stats.absmax = reinterpret_cast<const float*>(s.absmax.data);
  } else {
    require_type(s.absmax, ElemType::U8);
    require_numel(s.absmax, nblocks, "one absmax code per block of the weight");
    const int64_t nbs = state->nested_blocksize == 0 ? 256 : state->nested_blocksize;
    if (nbs <= 0) {
      fail(Q4_ERR_INVALID_ARGUMENT, "state->nested_blocksize",
           "expected > 0 (0 = 256), got " + std::to_string(state->nested_blocksize));
    }
    if (!std::isfinite(state->nested_offset)) {
      fail(Q4_ERR_INVALID_ARGUMENT, "state->nested_offset", "must be finite");
    }
    s.nested_absmax = check_tensor_any(state->nested_absmax, "state->nested_absmax");
    require_type(s.nested_absmax, ElemType::F32);
    require_numel(s.nested_absmax, (nblocks + nbs - 1) / nbs, "one per nested block of absmax");
    if (state->nested_quant_map == nullptr) {
      fail(Q4_ERR_NULL_POINTER, "state->nested_quant_map", "required when nested_absmax is set");
    }
    s.nested_map = check_tensor_any(state->nested_quant_map, "state->nested_quant_map");
    require_type(s.nested_map, ElemType::F32);
    require_numel(s.nested_map, 256, "256-entry nested quantization map");
    s.stats.qabsmax = s.absmax.data;
    s.stats.nested_absmax = reinterpret_cast<const float*>(s.nested_absmax.data);
    s.stats.nested_map = reinterpret_cast<const float*>(s.nested_map.data);
    s.stats.nested_offset = state->nested_offset;
    s.stats.nested_blocksize = nbs;
  }
  if (state->quant_map != nullptr) {
    s.quant_map = check_tensor_any(state->quant_map, "state->quant_map");
    require_type(s.quant_map, ElemType::F32);
    require_numel(s.quant_map, 16, "16-entry codebook");
    s.has_quant_map = true;
    s.stats.quant_map = reinterpret_cast<const float*>(s.quant_map.data);
  }
  return s;
}

void require_layout(int32_t layout) {
  if (layout != Q4_SCALE_LINEAR && layout != Q4_SCALE_SWIZZLED) {
    fail(Q4_ERR_INVALID_ARGUMENT, "scale_layout",
         "expected Q4_SCALE_LINEAR (0) or Q4_SCALE_SWIZZLED (1), got " + std::to_string(layout));
  }
}

// Quantize accepts 0 (= compute); everything else must be finite and > 0.
void require_scale_value(float v, const char* name, bool zero_allowed) {
  if (!std::isfinite(v) || v < 0.0f || (!zero_allowed && v == 0.0f)) {
    fail(Q4_ERR_INVALID_ARGUMENT, name,
         std::string("expected a finite value ") + (zero_allowed ? ">= 0" : "> 0") + ", got " +
             std::to_string(v));
  }
}

void require_k_multiple_of_16(int64_t k, const char* name) {
  if (k % 16 != 0) {
    fail(Q4_ERR_SHAPE, name, "K = " + std::to_string(k) + " must be a multiple of 16 (NVFP4 block size)");
  }
}

int64_t scale_bytes(int64_t rows, int64_t k, int32_t layout, const char* name) {
  if (layout == Q4_SCALE_SWIZZLED) {
    return checked_mul(fmt::swizzled_rows(rows), fmt::swizzled_cols(k / 16), name);
  }
  return checked_mul(rows, k / 16, name);
}

std::string scale_why(int64_t rows, int64_t k, int32_t layout) {
  if (layout == Q4_SCALE_SWIZZLED) {
    return "swizzled scales of " + std::to_string(rows) + " rows x " + std::to_string(k / 16) +
           " blocks, padded to " + std::to_string(fmt::swizzled_rows(rows)) + " x " +
           std::to_string(fmt::swizzled_cols(k / 16));
  }
  return "linear scales [" + std::to_string(rows) + ", " + std::to_string(k / 16) + "]";
}

void require_same_leading(const TensorRef& out, const TensorRef& x) {
  bool same = out.ndim == x.ndim;
  for (int32_t i = 0; same && i + 1 < x.ndim; ++i) same = out.shape[i] == x.shape[i];
  if (!same) {
    fail(Q4_ERR_SHAPE, out.name,
         "leading dimensions must match x " + x.shape_text() + ", got " + out.shape_text());
  }
}

// Fast math runs the fused int8-activation kernels; the dequant-matmul
// backend computes in fp32 only.
void check_math_mode(const ResolvedOptions& o, CpuPath path) {
  if (o.math_mode == Q4_MATH_FAST && path == CpuPath::DequantMatmul) {
    fail(Q4_ERR_UNSUPPORTED, "opts->math_mode",
         "fast (int8-activation) math needs a kernel backend, not dequant-matmul");
  }
}

}  // namespace q4::core
