#include "core/ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "core/cuda_backend.h"
#include "core/op_helpers.h"
#include "core/options.h"
#include "core/tuner.h"
#include "formats/codec.h"
#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref_ops.h"

namespace q4::core {
namespace {

using kern::FloatOut;
using kern::FloatPtr;
using kern::FType;
using kern::Nf4Stats;

void require_out_clear_of_nf4(const TensorRef& out, const TensorRef& q, const Nf4State& s) {
  require_no_overlap(out, {&q, &s.absmax, s.has_quant_map ? &s.quant_map : nullptr,
                           s.nested ? &s.nested_absmax : nullptr, s.nested ? &s.nested_map : nullptr});
}

}  // namespace

void nvfp4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* s_t, int32_t layout, float g, float* g_out,
                    const Q4_op_options* opts) {
  if (cuda::any_on_device({x_t, q_t, s_t}))
    return cuda::nvfp4_quantize(x_t, q_t, s_t, layout, g, g_out, opts);
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

  if (x.numel == 0) {  // nothing to quantize (the swizzled buffer is then empty too)
    if (g_out != nullptr) *g_out = g > 0.0f ? g : 1.0f;
    return;
  }
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

void nvfp4_dequantize(const DLTensor* q_t, const DLTensor* s_t, int32_t layout, float g, DLTensor* out_t,
                      const Q4_op_options* opts) {
  if (cuda::any_on_device({q_t, s_t, out_t})) return cuda::nvfp4_dequantize(q_t, s_t, layout, g, out_t, opts);
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
  if (out.numel == 0) return;  // validated; nothing to compute
  const LinearScales ls = linear_scales(s, layout, rows, k);
  F32Result r = f32_result(out);
  kern::dequantize_nvfp4(kern::active_table(), q.data, ls.p, g, rows, k, r.p, o.num_threads);
  finish(r, k, 1.0f, nullptr, o.num_threads);
}

void nvfp4_scaled_mm(const DLTensor* aq_t, const DLTensor* as_t, const DLTensor* bq_t, const DLTensor* bs_t,
                     int32_t layout, float alpha, const DLTensor* bias_t, DLTensor* out_t,
                     const Q4_op_options* opts) {
  if (cuda::any_on_device({aq_t, as_t, bq_t, bs_t, bias_t, out_t})) {
    return cuda::nvfp4_scaled_mm(aq_t, as_t, bq_t, bs_t, layout, alpha, bias_t, out_t, opts);
  }
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
  if (out.numel == 0) return;  // validated; nothing to compute

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

void nvfp4_linear(const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t, int32_t layout, float g,
                  const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts) {
  if (cuda::any_on_device({x_t, wq_t, ws_t, bias_t, out_t})) {
    return cuda::nvfp4_linear(x_t, wq_t, ws_t, layout, g, bias_t, out_t, opts);
  }
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
  if (out.numel == 0) return;  // validated; nothing to compute

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
  if (cuda::any_on_device({x_t, q_t, absmax_t}))
    return cuda::nf4_quantize(x_t, q_t, absmax_t, blocksize, opts);
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

void nf4_double_quantize(const DLTensor* absmax_t, DLTensor* qabsmax_t, DLTensor* nested_t, DLTensor* map_t,
                         float* offset, const Q4_op_options* opts) {
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
                           reinterpret_cast<float*>(na.data), reinterpret_cast<float*>(map.data), offset);
}

void nf4_dequantize(const DLTensor* q_t, const NF4_state* state, DLTensor* out_t, const Q4_op_options* opts) {
  if (cuda::any_on_device({q_t, out_t}) || cuda::state_on_device(state)) {
    return cuda::nf4_dequantize(q_t, state, out_t, opts);
  }
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
  if (cuda::any_on_device({x_t, wq_t, bias_t, out_t}) || cuda::state_on_device(w_state)) {
    return cuda::nf4_scaled_mm(x_t, wq_t, w_state, bias_t, out_t, opts);
  }
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
  if (out.numel == 0) return;  // validated; nothing to compute

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
