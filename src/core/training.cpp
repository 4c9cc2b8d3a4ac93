#include "core/training.h"

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "common/tensor.h"
#include "core/op_helpers.h"
#include "core/ops.h"
#include "core/options.h"
#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"

namespace q4::core {

void fake_quantize(const DLTensor* x_t, DLTensor* out_t, float g, float* g_out, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
  const TensorRef x = check_tensor(x_t, "x");
  require_float(x);
  require_min_ndim(x, 1);
  require_k_multiple_of_16(x.last_dim(), "x");
  const TensorRef out = check_tensor(out_t, "out");
  require_float(out);
  if (out.ndim != x.ndim || !std::equal(x.shape, x.shape + x.ndim, out.shape)) {
    fail(Q4_ERR_SHAPE, "out", "must have the shape of x " + x.shape_text() + ", got " + out.shape_text());
  }
  require_no_overlap(out, {&x});
  const int64_t rows = x.leading(), k = x.last_dim();
  std::vector<uint8_t> q(static_cast<size_t>(rows * k / 2)), s(static_cast<size_t>(rows * k / 16));
  int64_t qs[2] = {rows, k / 2}, ss[2] = {rows, k / 16};
  DLTensor tq{q.data(), DLDevice{kDLCPU, 0}, 2, DLDataType{kDLUInt, 8, 1}, qs, nullptr, 0};
  DLTensor ts{s.data(), DLDevice{kDLCPU, 0}, 2, DLDataType{kDLUInt, 8, 1}, ss, nullptr, 0};
  float used = 0.0f;
  nvfp4_quantize(x_t, &tq, &ts, Q4_SCALE_LINEAR, g, &used, opts);
  kern::dequantize_nvfp4(kern::active_table(), q.data(), s.data(), used, rows, k, as_output(out),
                         o.num_threads);
  if (g_out != nullptr) *g_out = used;
}

namespace {

std::vector<float> transpose(const float* a, int64_t rows, int64_t cols) {
  std::vector<float> t(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t[static_cast<size_t>(j * rows + i)] = a[i * cols + j];
  }
  return t;
}

}  // namespace

void linear_backward(const DLTensor* gy_t, const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t,
                     int32_t layout, float g, DLTensor* gx_t, DLTensor* gw_t, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
  const int32_t threads = o.num_threads;
  const TensorRef gy = check_tensor(gy_t, "grad_y");
  require_float(gy);
  require_min_ndim(gy, 1);
  const int64_t m = gy.leading(), n = gy.last_dim();
  if (gx_t == nullptr && gw_t == nullptr)
    fail(Q4_ERR_NULL_POINTER, "grad_x", "grad_x and grad_w are both NULL");
  require_layout(layout);
  require_scale_value(g, "global_scale", false);
  const TensorRef wq = check_tensor(wq_t, "w_qdata");
  require_packed_bytes(wq);
  if (n == 0 || wq.nbytes % n != 0) {
    fail(Q4_ERR_SHAPE, "w_qdata",
         std::to_string(wq.nbytes) + " bytes are not N = " + std::to_string(n) + " rows");
  }
  const int64_t k = 2 * (wq.nbytes / n);
  require_k_multiple_of_16(k, "w_qdata");
  const TensorRef ws = check_tensor(ws_t, "w_scale");
  require_scale_bytes(ws);
  require_nbytes(ws, scale_bytes(n, k, layout, "w_scale"), [&] { return scale_why(n, k, layout); });
  TensorRef gx, gw, x;
  if (gx_t != nullptr) {
    gx = check_tensor(gx_t, "grad_x");
    require_float(gx);
    require_same_leading(gx, gy);
    if (gx.last_dim() != k) fail(Q4_ERR_SHAPE, "grad_x", "last dimension must be K = " + std::to_string(k));
    require_no_overlap(gx, {&gy, &wq, &ws});
  }
  if (gw_t != nullptr) {
    x = check_tensor(x_t, "x");
    require_float(x);
    require_same_leading(x, gy);
    if (x.last_dim() != k) fail(Q4_ERR_SHAPE, "x", "last dimension must be K = " + std::to_string(k));
    gw = check_tensor(gw_t, "grad_w");
    require_float(gw);
    require_numel(gw, n * k, "grad_w is [N, K]");
    require_no_overlap(gw, {&gy, &x, &wq, &ws});
    if (gx_t != nullptr) require_no_overlap(gw, {&gx});
  }
  const kern::KernelTable& kt = kern::active_table();
  const F32View gyv = f32_view(gy, threads);
  if (gx_t != nullptr) {
    // grad_x[M,K] = grad_y[M,N] . W[N,K]  ->  gemm_nt with B = W^T [K, N].
    const LinearScales ls = linear_scales(ws, layout, n, k);
    std::vector<float> w(static_cast<size_t>(n * k));
    kern::dequantize_nvfp4(kt, wq.data, ls.p, g, n, k, w.data(), threads);
    const std::vector<float> wt = transpose(w.data(), n, k);
    F32Result r = f32_result(gx);
    kern::gemm_f32(kt, gyv.p, m, n, wt.data(), k, r.p, threads, kern::gemm_blocking());
    finish(r, k, 1.0f, nullptr, threads);
  }
  if (gw_t != nullptr) {
    // grad_w[N,K] = grad_y^T[N,M] . x[M,K]  ->  gemm_nt(gy^T, x^T).
    const F32View xv = f32_view(x, threads);
    const std::vector<float> gyt = transpose(gyv.p, m, n);
    const std::vector<float> xt = transpose(xv.p, m, k);
    F32Result r = f32_result(gw);
    if (m == 0) {
      std::fill(r.p, r.p + n * k, 0.0f);
    } else {
      kern::gemm_f32(kt, gyt.data(), n, m, xt.data(), k, r.p, threads, kern::gemm_blocking());
    }
    finish(r, k, 1.0f, nullptr, threads);
  }
}

}  // namespace q4::core
