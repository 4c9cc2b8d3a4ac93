#include "core/ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/tensor.h"
#include "core/options.h"
#include "core/tuner.h"
#include "formats/codec.h"
#include "common/thread_pool.h"
#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref_ops.h"

namespace q4::core {
namespace {

using kern::FloatOut;
using kern::FloatPtr;
using kern::FType;
using kern::Nf4Stats;

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

// Fast math runs the fused int8-activation kernels; the dequant-matmul
// backend computes in fp32 only.
void check_math_mode(const ResolvedOptions& o, CpuPath path) {
  if (o.math_mode == Q4_MATH_FAST && path == CpuPath::DequantMatmul) {
    fail(Q4_ERR_UNSUPPORTED, "opts->math_mode",
         "fast (int8-activation) math needs a kernel backend, not dequant-matmul");
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

// An fp32 view of a float tensor: the tensor itself when it is fp32,
// otherwise a converted copy.
struct F32View {
  const float* p = nullptr;
  std::vector<float> storage;
};

F32View f32_view(const TensorRef& t, int32_t threads) {
  F32View v;
  if (t.type == ElemType::F32) {
    v.p = reinterpret_cast<const float*>(t.data);
    return v;
  }
  v.storage.resize(static_cast<size_t>(t.numel));
  const FloatPtr src = as_input(t);
  constexpr int64_t kChunk = 1 << 16;
  parallel_for((t.numel + kChunk - 1) / kChunk, threads, [&](int64_t c) {
    const int64_t i0 = c * kChunk;
    kern::load_row(src.data, src.type, i0, std::min(kChunk, t.numel - i0), v.storage.data() + i0);
  });
  v.p = v.storage.data();
  return v;
}

// fp32 results for `out`: written in place when out is fp32, else into a
// buffer that finish() converts (adding the bias on the way).
struct F32Result {
  const TensorRef* out = nullptr;
  float* p = nullptr;
  std::vector<float> storage;
};

F32Result f32_result(const TensorRef& out) {
  F32Result r;
  r.out = &out;
  if (out.type == ElemType::F32) {
    r.p = reinterpret_cast<float*>(out.data);
  } else {
    r.storage.resize(static_cast<size_t>(out.numel));
    r.p = r.storage.data();
  }
  return r;
}

// y = scale * y + bias[j], then conversion to the output dtype.
void finish(F32Result& r, int64_t n, float scale, const FloatPtr* bias, int32_t threads) {
  const int64_t total = r.out->numel;
  if (total == 0) return;
  std::vector<float> b;
  if (bias != nullptr) {
    b.resize(static_cast<size_t>(n));
    kern::load_row(bias->data, bias->type, 0, n, b.data());
  }
  const int64_t rows = n > 0 ? total / n : 0;
  const FloatOut dst = as_output(*r.out);
  const int64_t rows_per = std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1));
  parallel_for((rows + rows_per - 1) / rows_per, threads, [&](int64_t t) {
    const int64_t r0 = t * rows_per, r1 = std::min(rows, r0 + rows_per);
    for (int64_t i = r0; i < r1; ++i) {
      float* yi = r.p + i * n;
      if (scale != 1.0f) {
        for (int64_t j = 0; j < n; ++j) yi[j] *= scale;
      }
      if (!b.empty()) {
        for (int64_t j = 0; j < n; ++j) yi[j] += b[static_cast<size_t>(j)];
      }
      if (r.out->type != ElemType::F32) kern::store_row(dst.data, dst.type, i * n, n, yi);
    }
  });
}

// Linear-layout scales: the tensor's bytes, or an unswizzled copy.
struct LinearScales {
  const uint8_t* p = nullptr;
  std::vector<uint8_t> storage;
};

LinearScales linear_scales(const TensorRef& s, int32_t layout, int64_t rows, int64_t k) {
  LinearScales l;
  if (layout == Q4_SCALE_LINEAR) {
    l.p = s.data;
    return l;
  }
  l.storage.resize(static_cast<size_t>(rows * (k / 16)));
  ref::unswizzle(s.data, rows, k / 16, l.storage.data());
  l.p = l.storage.data();
  return l;
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
  const ResolvedOptions o = resolve_options(opts);
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

  const int32_t threads = o.num_threads;
  const kern::KernelTable& kt = kern::active_table();
  const F32View xv = f32_view(x, threads);
  const float used_g =
      g > 0.0f ? g : fmt::nvfp4_global_scale_from_amax(kern::amax(kt, xv.p, x.numel, threads));
  if (layout == Q4_SCALE_LINEAR) {
    kern::quantize_nvfp4(kt, xv.p, rows, k, used_g, q.data, s.data, threads);
  } else {
    std::vector<uint8_t> lin(static_cast<size_t>(rows * (k / 16)));
    kern::quantize_nvfp4(kt, xv.p, rows, k, used_g, q.data, lin.data(), threads);
    ref::swizzle(lin.data(), rows, k / 16, s.data);
  }
  if (g_out != nullptr) *g_out = used_g;
}

void nvfp4_dequantize(const DLTensor* q_t, const DLTensor* s_t, int32_t layout, float g,
                      DLTensor* out_t, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
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
  const LinearScales ls = linear_scales(s, layout, rows, k);
  F32Result r = f32_result(out);
  kern::dequantize_nvfp4(kern::active_table(), q.data, ls.p, g, rows, k, r.p, o.num_threads);
  finish(r, k, 1.0f, nullptr, o.num_threads);
}

void nvfp4_scaled_mm(const DLTensor* aq_t, const DLTensor* as_t, const DLTensor* bq_t,
                     const DLTensor* bs_t, int32_t layout, float alpha, const DLTensor* bias_t,
                     DLTensor* out_t, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
  tuner::ensure_loaded();
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

  // Block scales only (global scales are folded into alpha). A is decoded
  // once to fp32 (its values e2m1*s are exact), B stays packed.
  const int32_t threads = o.num_threads;
  const kern::KernelTable& kt = kern::active_table();
  const LinearScales a_ls = linear_scales(as, layout, m, k);
  const LinearScales b_ls = linear_scales(bs, layout, n, k);
  std::vector<float> a(static_cast<size_t>(m * k));
  kern::dequantize_nvfp4(kt, aq.data, a_ls.p, 1.0f, m, k, a.data(), threads);
  F32Result r = f32_result(out);
  if (k == 0) {
    std::fill(r.p, r.p + m * n, 0.0f);
  } else if (path == CpuPath::DequantMatmul) {
    std::vector<float> b(static_cast<size_t>(n * k));
    kern::dequantize_nvfp4(kt, bq.data, b_ls.p, 1.0f, n, k, b.data(), threads);
    kern::gemm_f32(kt, a.data(), m, k, b.data(), n, r.p, threads, kern::gemm_blocking());
  } else {
    kern::linear_nvfp4(kt, a.data(), m, kern::NvWeights{bq.data, b_ls.p, 1.0f, k}, n, r.p, threads);
  }
  finish(r, n, alpha, bias.get(), threads);
}

void nvfp4_linear(const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t, int32_t layout,
                  float g, const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
  tuner::ensure_loaded();
  const CpuPath path = choose_cpu_path(o, Q4_FORMAT_NVFP4);
  check_math_mode(o, path);
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

  const int32_t threads = o.num_threads;
  const kern::KernelTable& kt = kern::active_table();
  const LinearScales w_ls = linear_scales(ws, layout, n, k);
  const F32View xv = f32_view(x, threads);
  F32Result r = f32_result(out);
  if (k == 0) {
    std::fill(r.p, r.p + m * n, 0.0f);
  } else if (path == CpuPath::DequantMatmul) {
    std::vector<float> w(static_cast<size_t>(n * k));
    kern::dequantize_nvfp4(kt, wq.data, w_ls.p, g, n, k, w.data(), threads);
    kern::gemm_f32(kt, xv.p, m, k, w.data(), n, r.p, threads, kern::gemm_blocking());
  } else if (o.math_mode == Q4_MATH_FAST) {
    kern::linear_nvfp4_fast(xv.p, m, kern::NvWeights{wq.data, w_ls.p, g, k}, n, r.p, threads);
  } else {
    kern::linear_nvfp4(kt, xv.p, m, kern::NvWeights{wq.data, w_ls.p, g, k}, n, r.p, threads);
  }
  finish(r, n, 1.0f, bias.get(), threads);
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
  tuner::ensure_loaded();
  const CpuPath path = choose_cpu_path(o, Q4_FORMAT_NF4);
  check_math_mode(o, path);
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

  const int32_t threads = o.num_threads;
  const kern::KernelTable& kt = kern::active_table();
  const F32View xv = f32_view(x, threads);
  F32Result r = f32_result(out);
  if (k == 0) {
    std::fill(r.p, r.p + m * n, 0.0f);
  } else if (path == CpuPath::DequantMatmul) {
    std::vector<float> w(static_cast<size_t>(wn));
    ref::nf4_dequantize(wq.data, st.stats, wn, FloatOut{w.data(), FType::F32});
    kern::gemm_f32(kt, xv.p, m, k, w.data(), n, r.p, threads, kern::gemm_blocking());
  } else {
    // Resolve the (possibly double-quantized) absmax and the codebook once.
    const int64_t nblocks = (wn + st.stats.blocksize - 1) / st.stats.blocksize;
    std::vector<float> absmax(static_cast<size_t>(nblocks));
    for (int64_t b = 0; b < nblocks; ++b) absmax[static_cast<size_t>(b)] = st.stats.absmax_of_block(b);
    float lut[16];
    for (uint32_t c = 0; c < 16; ++c) lut[c] = st.stats.code_value(c);
    int32_t shift = 0;
    while ((int64_t{1} << shift) < st.stats.blocksize) ++shift;
    const kern::Nf4Weights w{wq.data, absmax.data(), lut, k, st.stats.blocksize, shift};
    if (o.math_mode == Q4_MATH_FAST) {
      kern::linear_nf4_fast(xv.p, m, w, n, r.p, threads);
    } else {
      kern::linear_nf4(kt, xv.p, m, w, n, r.p, threads);
    }
  }
  finish(r, n, 1.0f, bias.get(), threads);
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
