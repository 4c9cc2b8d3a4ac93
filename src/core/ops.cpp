#include "core/ops.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/tensor.h"
#include "core/options.h"
#include "formats/codec.h"
#include "kernels/ref/ref_ops.h"

namespace q4::core {
namespace {

using kern::FloatOut;
using kern::FloatPtr;
using kern::FType;
using kern::Nf4Stats;
using kern::ScaleView;

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

FloatPtr as_input(const TensorRef& t) { return FloatPtr{t.data, ftype_of(t)}; }
FloatOut as_output(const TensorRef& t) { return FloatOut{t.data, ftype_of(t)}; }

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

void require_exact_math(const ResolvedOptions& o) {
  if (o.math_mode == Q4_MATH_FAST) {
    fail(Q4_ERR_UNSUPPORTED, "opts->math_mode",
         "fast (int8-activation) math is not available in this build; use Q4_MATH_EXACT");
  }
}

struct Bias {
  TensorRef ref;
  FloatPtr ptr;
  bool present = false;
  const FloatPtr* get() const { return present ? &ptr : nullptr; }
};

Bias parse_bias(const DLTensor* bias, int64_t n) {
  Bias b;
  if (bias == nullptr) return b;
  b.ref = check_tensor(bias, "bias");
  require_float(b.ref);
  require_numel(b.ref, n, "one per output feature N");
  b.ptr = as_input(b.ref);
  b.present = true;
  return b;
}

std::vector<float> dequantize_nvfp4_f32(const uint8_t* q, ScaleView s, float g, int64_t rows,
                                        int64_t k) {
  std::vector<float> w(static_cast<size_t>(rows * k));
  ref::nvfp4_dequantize(q, s, g, rows, k, FloatOut{w.data(), FType::F32});
  return w;
}

std::vector<float> load_f32(FloatPtr x, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  kern::load_row(x.data, x.type, 0, n, v.data());
  return v;
}

// NF4 statistics: parsed tensors plus the resolved pointer view.
struct Nf4State {
  TensorRef absmax, quant_map, nested_absmax, nested_map;
  bool has_quant_map = false, nested = false;
  Nf4Stats stats;
};

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

Nf4State parse_nf4_state(const NF4_state* state, int64_t n) {
  if (state == nullptr) fail(Q4_ERR_NULL_POINTER, "state", "NF4_state pointer is NULL");
  constexpr uint32_t kMinSize = offsetof(NF4_state, reserved);
  if (state->struct_size < kMinSize) {
    fail(Q4_ERR_INVALID_ARGUMENT, "state->struct_size",
         "expected >= " + std::to_string(kMinSize) + " (sizeof(NF4_state)), got " +
             std::to_string(state->struct_size));
  }
  Nf4State s;
  s.stats.blocksize = require_blocksize(state->blocksize, "state->blocksize");
  const int64_t nblocks = (n + s.stats.blocksize - 1) / s.stats.blocksize;
  s.absmax = check_tensor(state->absmax, "state->absmax");
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
    s.nested_absmax = check_tensor(state->nested_absmax, "state->nested_absmax");
    require_type(s.nested_absmax, ElemType::F32);
    require_numel(s.nested_absmax, (nblocks + nbs - 1) / nbs, "one per nested block of absmax");
    if (state->nested_quant_map == nullptr) {
      fail(Q4_ERR_NULL_POINTER, "state->nested_quant_map", "required when nested_absmax is set");
    }
    s.nested_map = check_tensor(state->nested_quant_map, "state->nested_quant_map");
    require_type(s.nested_map, ElemType::F32);
    require_numel(s.nested_map, 256, "256-entry nested quantization map");
    s.stats.qabsmax = s.absmax.data;
    s.stats.nested_absmax = reinterpret_cast<const float*>(s.nested_absmax.data);
    s.stats.nested_map = reinterpret_cast<const float*>(s.nested_map.data);
    s.stats.nested_offset = state->nested_offset;
    s.stats.nested_blocksize = nbs;
  }
  if (state->quant_map != nullptr) {
    s.quant_map = check_tensor(state->quant_map, "state->quant_map");
    require_type(s.quant_map, ElemType::F32);
    require_numel(s.quant_map, 16, "16-entry codebook");
    s.has_quant_map = true;
    s.stats.quant_map = reinterpret_cast<const float*>(s.quant_map.data);
  }
  return s;
}

void require_out_clear_of_nf4(const TensorRef& out, const TensorRef& q, const Nf4State& s) {
  require_no_overlap(out, {&q, &s.absmax, s.has_quant_map ? &s.quant_map : nullptr,
                           s.nested ? &s.nested_absmax : nullptr, s.nested ? &s.nested_map : nullptr});
}

}  // namespace

void nvfp4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* s_t, int32_t layout, float g,
                    float* g_out, const Q4_op_options* opts) {
  resolve_options(opts);
  const TensorRef x = check_tensor(x_t, "x");
  require_float(x);
  require_min_ndim(x, 1);
  const int64_t k = x.last_dim();
  const int64_t rows = x.leading();
  require_k_multiple_of_16(k, "x");
  require_layout(layout);
  require_scale_value(g, "global_scale", true);
  const TensorRef q = check_tensor(q_t, "qdata");
  require_packed_bytes(q);
  require_nbytes(q, checked_mul(rows, k / 2, "qdata"), "rows*K/2 packed bytes");
  const TensorRef s = check_tensor(s_t, "scale");
  require_scale_bytes(s);
  require_nbytes(s, scale_bytes(rows, k, layout, "scale"), scale_why(rows, k, layout));
  require_no_overlap(q, {&x, &s});
  require_no_overlap(s, {&x});
  require_finite(x);

  const FloatPtr xp = as_input(x);
  const float used_g = g > 0.0f ? g : fmt::nvfp4_global_scale_from_amax(ref::amax(xp, x.numel));
  if (layout == Q4_SCALE_SWIZZLED) std::memset(s.data, 0, static_cast<size_t>(s.nbytes));
  ref::nvfp4_quantize(xp, rows, k, used_g, q.data, s.data, layout);
  if (g_out != nullptr) *g_out = used_g;
}

void nvfp4_dequantize(const DLTensor* q_t, const DLTensor* s_t, int32_t layout, float g,
                      DLTensor* out_t, const Q4_op_options* opts) {
  resolve_options(opts);
  const TensorRef out = check_tensor(out_t, "out");
  require_float(out);
  require_min_ndim(out, 1);
  const int64_t k = out.last_dim();
  const int64_t rows = out.leading();
  require_k_multiple_of_16(k, "out");
  require_layout(layout);
  require_scale_value(g, "global_scale", false);
  const TensorRef q = check_tensor(q_t, "qdata");
  require_packed_bytes(q);
  require_nbytes(q, checked_mul(rows, k / 2, "qdata"), "rows*K/2 packed bytes");
  const TensorRef s = check_tensor(s_t, "scale");
  require_scale_bytes(s);
  require_nbytes(s, scale_bytes(rows, k, layout, "scale"), scale_why(rows, k, layout));
  require_no_overlap(out, {&q, &s});
  ref::nvfp4_dequantize(q.data, ScaleView{s.data, layout, k / 16}, g, rows, k, as_output(out));
}

void nvfp4_scaled_mm(const DLTensor* aq_t, const DLTensor* as_t, const DLTensor* bq_t,
                     const DLTensor* bs_t, int32_t layout, float alpha, const DLTensor* bias_t,
                     DLTensor* out_t, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
  const CpuPath path = choose_cpu_path(o, Q4_FORMAT_NVFP4);
  const TensorRef out = check_tensor(out_t, "out");
  require_float(out);
  require_min_ndim(out, 1);
  const int64_t n = out.last_dim();
  const int64_t m = out.leading();
  require_layout(layout);
  require_scale_value(alpha, "alpha", true);
  const TensorRef aq = check_tensor(aq_t, "a_qdata");
  require_packed_bytes(aq);
  const TensorRef bq = check_tensor(bq_t, "b_qdata");
  require_packed_bytes(bq);
  // K comes from the packed bytes of A (or of B when M == 0).
  int64_t k = 0;
  if (m > 0) {
    if (aq.nbytes % m != 0) {
      fail(Q4_ERR_SHAPE, "a_qdata",
           std::to_string(aq.nbytes) + " bytes is not a whole number of rows for M = " + std::to_string(m));
    }
    k = 2 * (aq.nbytes / m);
  } else if (n > 0) {
    if (bq.nbytes % n != 0) {
      fail(Q4_ERR_SHAPE, "b_qdata",
           std::to_string(bq.nbytes) + " bytes is not a whole number of rows for N = " + std::to_string(n));
    }
    k = 2 * (bq.nbytes / n);
  }
  require_k_multiple_of_16(k, "a_qdata");
  require_nbytes(aq, checked_mul(m, k / 2, "a_qdata"), "M*K/2 packed bytes");
  require_nbytes(bq, checked_mul(n, k / 2, "b_qdata"), "N*K/2 packed bytes, K taken from a_qdata");
  const TensorRef as = check_tensor(as_t, "a_scale");
  require_scale_bytes(as);
  require_nbytes(as, scale_bytes(m, k, layout, "a_scale"), scale_why(m, k, layout));
  const TensorRef bs = check_tensor(bs_t, "b_scale");
  require_scale_bytes(bs);
  require_nbytes(bs, scale_bytes(n, k, layout, "b_scale"), scale_why(n, k, layout));
  const Bias bias = parse_bias(bias_t, n);
  require_no_overlap(out, {&aq, &as, &bq, &bs, bias.present ? &bias.ref : nullptr});

  const ScaleView a_sv{as.data, layout, k / 16};
  const ScaleView b_sv{bs.data, layout, k / 16};
  if (path == CpuPath::DequantMatmul) {
    // Block scales only (global scales are folded into alpha).
    const std::vector<float> a = dequantize_nvfp4_f32(aq.data, a_sv, 1.0f, m, k);
    const std::vector<float> b = dequantize_nvfp4_f32(bq.data, b_sv, 1.0f, n, k);
    ref::matmul_nt_f32(a.data(), m, k, b.data(), n, alpha, bias.get(), as_output(out));
    return;
  }
  ref::nvfp4_scaled_mm(aq.data, a_sv, bq.data, b_sv, m, n, k, alpha, bias.get(), as_output(out));
}

void nvfp4_linear(const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t, int32_t layout,
                  float g, const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
  const CpuPath path = choose_cpu_path(o, Q4_FORMAT_NVFP4);
  require_exact_math(o);
  const TensorRef x = check_tensor(x_t, "x");
  require_float(x);
  require_min_ndim(x, 1);
  const int64_t k = x.last_dim();
  const int64_t m = x.leading();
  require_k_multiple_of_16(k, "x");
  const TensorRef out = check_tensor(out_t, "out");
  require_float(out);
  require_same_leading(out, x);
  const int64_t n = out.last_dim();
  require_layout(layout);
  require_scale_value(g, "global_scale", false);
  const TensorRef wq = check_tensor(wq_t, "w_qdata");
  require_packed_bytes(wq);
  require_nbytes(wq, checked_mul(n, k / 2, "w_qdata"), "N*K/2 packed bytes");
  const TensorRef ws = check_tensor(ws_t, "w_scale");
  require_scale_bytes(ws);
  require_nbytes(ws, scale_bytes(n, k, layout, "w_scale"), scale_why(n, k, layout));
  const Bias bias = parse_bias(bias_t, n);
  require_no_overlap(out, {&x, &wq, &ws, bias.present ? &bias.ref : nullptr});

  const ScaleView w_sv{ws.data, layout, k / 16};
  if (path == CpuPath::DequantMatmul) {
    const std::vector<float> w = dequantize_nvfp4_f32(wq.data, w_sv, g, n, k);
    const std::vector<float> a = load_f32(as_input(x), m * k);
    ref::matmul_nt_f32(a.data(), m, k, w.data(), n, 1.0f, bias.get(), as_output(out));
    return;
  }
  ref::nvfp4_linear(as_input(x), m, k, wq.data, w_sv, g, n, bias.get(), as_output(out));
}

void nf4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* absmax_t, int32_t blocksize,
                  const Q4_op_options* opts) {
  resolve_options(opts);
  const int64_t bs = require_blocksize(blocksize == 0 ? 64 : blocksize, "blocksize");
  const TensorRef x = check_tensor(x_t, "x");
  require_float(x);
  const int64_t n = x.numel;
  const TensorRef q = check_tensor(q_t, "qdata");
  require_packed_bytes(q);
  require_nbytes(q, (n + 1) / 2, "ceil(n/2) packed bytes for n = " + std::to_string(n));
  const TensorRef a = check_tensor(absmax_t, "absmax");
  require_type(a, ElemType::F32);
  require_numel(a, (n + bs - 1) / bs, "ceil(n/blocksize) blocks");
  require_no_overlap(q, {&x, &a});
  require_no_overlap(a, {&x});
  require_finite(x);
  ref::nf4_quantize(as_input(x), n, bs, q.data, reinterpret_cast<float*>(a.data));
}

void nf4_double_quantize(const DLTensor* absmax_t, DLTensor* qabsmax_t, DLTensor* nested_t,
                         DLTensor* map_t, float* offset, const Q4_op_options* opts) {
  resolve_options(opts);
  const TensorRef a = check_tensor(absmax_t, "absmax");
  require_type(a, ElemType::F32);
  const int64_t nb = a.numel;
  const TensorRef qa = check_tensor(qabsmax_t, "qabsmax");
  require_type(qa, ElemType::U8);
  require_numel(qa, nb, "one code per absmax");
  const TensorRef na = check_tensor(nested_t, "nested_absmax");
  require_type(na, ElemType::F32);
  require_numel(na, (nb + 255) / 256, "one per 256 absmax values");
  const TensorRef map = check_tensor(map_t, "nested_quant_map");
  require_type(map, ElemType::F32);
  require_numel(map, 256, "256-entry map");
  if (offset == nullptr) fail(Q4_ERR_NULL_POINTER, "offset", "output pointer is NULL");
  require_no_overlap(qa, {&a, &na, &map});
  require_no_overlap(na, {&a, &map});
  require_no_overlap(map, {&a});
  require_finite(a);
  ref::nf4_double_quantize(reinterpret_cast<const float*>(a.data), nb, qa.data,
                           reinterpret_cast<float*>(na.data), reinterpret_cast<float*>(map.data),
                           offset);
}

void nf4_dequantize(const DLTensor* q_t, const NF4_state* state, DLTensor* out_t,
                    const Q4_op_options* opts) {
  resolve_options(opts);
  const TensorRef out = check_tensor(out_t, "out");
  require_float(out);
  const int64_t n = out.numel;
  const TensorRef q = check_tensor(q_t, "qdata");
  require_packed_bytes(q);
  require_nbytes(q, (n + 1) / 2, "ceil(n/2) packed bytes for n = " + std::to_string(n));
  const Nf4State st = parse_nf4_state(state, n);
  require_out_clear_of_nf4(out, q, st);
  ref::nf4_dequantize(q.data, st.stats, n, as_output(out));
}

void nf4_scaled_mm(const DLTensor* x_t, const DLTensor* wq_t, const NF4_state* w_state,
                   const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
  const CpuPath path = choose_cpu_path(o, Q4_FORMAT_NF4);
  require_exact_math(o);
  const TensorRef x = check_tensor(x_t, "x");
  require_float(x);
  require_min_ndim(x, 1);
  const int64_t k = x.last_dim();
  const int64_t m = x.leading();
  const TensorRef out = check_tensor(out_t, "out");
  require_float(out);
  require_same_leading(out, x);
  const int64_t n = out.last_dim();
  const int64_t wn = checked_mul(n, k, "w_qdata");
  const TensorRef wq = check_tensor(wq_t, "w_qdata");
  require_packed_bytes(wq);
  require_nbytes(wq, (wn + 1) / 2, "ceil(N*K/2) packed bytes");
  const Nf4State st = parse_nf4_state(w_state, wn);
  const Bias bias = parse_bias(bias_t, n);
  require_out_clear_of_nf4(out, wq, st);
  require_no_overlap(out, {&x, bias.present ? &bias.ref : nullptr});

  if (path == CpuPath::DequantMatmul) {
    std::vector<float> w(static_cast<size_t>(wn));
    ref::nf4_dequantize(wq.data, st.stats, wn, FloatOut{w.data(), FType::F32});
    const std::vector<float> a = load_f32(as_input(x), m * k);
    ref::matmul_nt_f32(a.data(), m, k, w.data(), n, 1.0f, bias.get(), as_output(out));
    return;
  }
  ref::nf4_scaled_mm(as_input(x), m, k, wq.data, st.stats, n, bias.get(), as_output(out));
}

void swizzle_scales(const DLTensor* linear_t, DLTensor* swizzled_t) {
  const TensorRef lin = check_tensor(linear_t, "linear");
  require_scale_bytes(lin);
  require_min_ndim(lin, 1);
  const int64_t cols = lin.last_dim();
  const int64_t rows = lin.leading();
  const TensorRef sw = check_tensor(swizzled_t, "swizzled");
  require_scale_bytes(sw);
  require_nbytes(sw, checked_mul(fmt::swizzled_rows(rows), fmt::swizzled_cols(cols), "swizzled"),
                 "roundup(rows,128) * roundup(cols,4)");
  require_no_overlap(sw, {&lin});
  ref::swizzle(lin.data, rows, cols, sw.data);
}

void unswizzle_scales(const DLTensor* swizzled_t, DLTensor* linear_t) {
  const TensorRef lin = check_tensor(linear_t, "linear");
  require_scale_bytes(lin);
  require_min_ndim(lin, 1);
  const int64_t cols = lin.last_dim();
  const int64_t rows = lin.leading();
  const TensorRef sw = check_tensor(swizzled_t, "swizzled");
  require_scale_bytes(sw);
  require_nbytes(sw, checked_mul(fmt::swizzled_rows(rows), fmt::swizzled_cols(cols), "swizzled"),
                 "roundup(rows,128) * roundup(cols,4)");
  require_no_overlap(lin, {&sw});
  ref::unswizzle(sw.data, rows, cols, lin.data);
}

int64_t swizzled_scale_size(int64_t rows, int64_t k) {
  if (rows < 0) fail(Q4_ERR_INVALID_ARGUMENT, "rows", "must be >= 0, got " + std::to_string(rows));
  if (k < 0) fail(Q4_ERR_INVALID_ARGUMENT, "k", "must be >= 0, got " + std::to_string(k));
  require_k_multiple_of_16(k, "k");
  if (rows > (int64_t{1} << 40) || k > (int64_t{1} << 40)) {
    fail(Q4_ERR_OVERFLOW, "rows", "size too large");
  }
  return checked_mul(fmt::swizzled_rows(rows), fmt::swizzled_cols(k / 16), "rows");
}

}  // namespace q4::core
