// MXFP4 operations on the CPU (mxfp4.h): portable code, multi-threaded over
// rows with the library's pool. The format math is formats/mxfp4.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "core/mxfp4.h"
#include "core/op_helpers.h"
#include "core/ops.h"
#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/portable.h"

namespace q4::core {
namespace {

constexpr int64_t kRowsPerTask = 16;

void require_host(const OpContext& ctx, const char* op) {
  if (ctx.place == Place::Device) {
    fail(Q4_ERR_UNSUPPORTED, "x",
         std::string(op) +
             " on kDLCUDA tensors is not implemented yet (the CUDA plugin has no MXFP4 kernels); use host, "
             "pinned or managed memory");
  }
}

void for_row_chunks(int64_t rows, int32_t threads, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, threads, [&](int64_t t) {
    const int64_t r0 = t * kRowsPerTask;
    fn(r0, std::min(rows, r0 + kRowsPerTask));
  });
}

}  // namespace

void mxfp4_decode(const Mxfp4Operand& op, int32_t threads, float* dst) {
  const int64_t rows = op.rows, k = op.k, cols = k / fmt::kMxBlock;
  if (rows == 0 || k == 0) return;
  std::vector<uint8_t> lin;
  const uint8_t* s = op.s.data;
  if (op.layout == Q4_SCALE_SWIZZLED) {
    lin.resize(static_cast<size_t>(rows * cols));
    kern::unswizzle_scales(op.s.data, rows, cols, lin.data());
    s = lin.data();
  }
  const uint8_t* q = op.q.data;
  for_row_chunks(rows, threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* qr = q + r * (k / 2);
      const uint8_t* sr = s + r * cols;
      float* d = dst + r * k;
      for (int64_t b = 0; b < cols; ++b) {
        const float scale = fmt::e8m0_decode(sr[b]);
        for (int64_t j = b * fmt::kMxBlock; j < (b + 1) * fmt::kMxBlock; j += 2) {
          const uint8_t byte = qr[j >> 1];
          d[j] = fmt::e2m1_decode(byte & 0xfu) * scale;
          d[j + 1] = fmt::e2m1_decode(byte >> 4) * scale;
        }
      }
    }
  });
}

void prepare_mxfp4(PreparedWeight& w, const Mxfp4Operand& op, int32_t threads,
                   const std::shared_ptr<SessionCounters>& counters) {
  w.format = Q4_FORMAT_MXFP4;
  w.n = op.rows;
  w.k = op.k;
  w.storage.clear();
  auto* d = reinterpret_cast<float*>(allocate(w, counters, checked_mul(op.rows * op.k, 4, "w_qdata")));
  mxfp4_decode(op, threads, d);
  w.path = CpuPath::DequantMatmul;
  w.dequant = d;
  w.q = nullptr;
  w.s = nullptr;
}

void run_mxfp4(const Mxfp4QuantizeDesc& d) {
  require_host(d.ctx, "MXFP4_quantize");
  if (d.x.numel == 0) return;
  const int32_t threads = d.ctx.opts.num_threads;
  const F32View xv = f32_view(d.x, threads);
  const int64_t rows = d.dst.rows, k = d.dst.k, cols = k / fmt::kMxBlock;
  std::vector<uint8_t> lin;
  uint8_t* s = d.dst.s.data;
  if (d.dst.layout == Q4_SCALE_SWIZZLED) {
    lin.resize(static_cast<size_t>(rows * cols));
    s = lin.data();
  }
  uint8_t* q = d.dst.q.data;
  for_row_chunks(rows, threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = xv.p + r * k;
      uint8_t* qr = q + r * (k / 2);
      for (int64_t b = 0; b < cols; ++b) {
        const float* xb = xr + b * fmt::kMxBlock;
        float amax = 0.0f;
        for (int32_t j = 0; j < fmt::kMxBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const uint32_t byte = fmt::mxfp4_scale_byte(amax);
        const float inv = fmt::mxfp4_inverse_scale(byte);
        s[r * cols + b] = static_cast<uint8_t>(byte);
        uint8_t* qb = qr + b * (fmt::kMxBlock / 2);
        for (int32_t j = 0; j < fmt::kMxBlock; j += 2) {
          const uint32_t lo = fmt::mxfp4_encode_element(xb[j], inv);
          const uint32_t hi = fmt::mxfp4_encode_element(xb[j + 1], inv);
          qb[j / 2] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
    }
  });
  if (d.dst.layout == Q4_SCALE_SWIZZLED) kern::swizzle_scales(lin.data(), rows, cols, d.dst.s.data);
}

void run_mxfp4(const Mxfp4DequantizeDesc& d) {
  require_host(d.ctx, "MXFP4_dequantize");
  if (d.out.numel == 0) return;
  const int32_t threads = d.ctx.opts.num_threads;
  F32Result r = f32_result(d.out);
  mxfp4_decode(d.src, threads, r.p);
  finish(r, d.src.k, 1.0f, nullptr, threads);
}

void run_mxfp4(const Mxfp4ProductDesc& d) {
  require_host(d.ctx, d.w4a4 ? "MXFP4_scaled_mm" : "MXFP4_linear");
  if (d.out.numel == 0) return;
  const int32_t threads = d.ctx.opts.num_threads;
  // The product path's descriptor: float activations (scaled_mm: A decoded
  // exactly into fp32), the MXFP4 weight in its dequant-matmul ready form.
  ProductDesc p;
  p.ctx = d.ctx;
  p.format = Q4_FORMAT_MXFP4;
  p.m = d.m;
  p.n = d.n;
  p.k = d.k;
  p.bias = d.bias;
  p.out = d.out;
  p.alpha = d.alpha;
  p.path = CpuPath::DequantMatmul;
  std::vector<float> act;
  int64_t act_shape[2] = {d.m, d.k};
  if (d.w4a4) {
    act.resize(static_cast<size_t>(d.m * d.k));
    mxfp4_decode(d.a, threads, act.data());
    p.x.name = "a_qdata";
    p.x.data = reinterpret_cast<uint8_t*>(act.data());
    p.x.type = ElemType::F32;
    p.x.ndim = 2;
    p.x.shape = act_shape;
    p.x.numel = d.m * d.k;
    p.x.nbytes = d.m * d.k * 4;
    p.x.device = DLDevice{kDLCPU, 0};
  } else {
    p.x = d.x;
  }
  PreparedWeight w;
  if (d.k > 0) {
    prepare_mxfp4(w, d.w, threads, nullptr);
  } else {
    w.format = Q4_FORMAT_MXFP4;
    w.n = d.n;
    w.path = CpuPath::DequantMatmul;
  }
  run_host_product(w, p);
}

namespace {

// Rows [r0, r0 + rows) of a validated compact float tensor [T, C], as a
// [rows, C] view (shape kept in `shape`).
TensorRef row_slice(const TensorRef& t, int64_t cols, int64_t r0, int64_t rows, int64_t* shape) {
  const int64_t elem = t.type == ElemType::F32 ? 4 : 2;
  TensorRef v = t;
  shape[0] = rows;
  shape[1] = cols;
  v.data = t.data + r0 * cols * elem;
  v.ndim = 2;
  v.shape = shape;
  v.numel = rows * cols;
  v.nbytes = rows * cols * elem;
  return v;
}

}  // namespace

void run_mxfp4(const Mxfp4ExpertsDesc& d) {
  require_host(d.ctx, "MXFP4_linear_experts");
  if (d.out.numel == 0) return;
  const int32_t threads = d.ctx.opts.num_threads;
  const int64_t q_bytes = d.n * (d.k / 2);
  PreparedWeight w;  // the fp32 form of the last expert decoded
  int32_t decoded = -1;
  int64_t r0 = 0;
  for (int64_t g = 0; g < d.n_groups; ++g) {
    const int64_t rows = d.group_rows[g];
    const int32_t e = d.expert_of_group[g];
    if (rows == 0) continue;
    if (e != decoded) {
      // Expert e's bytes in place: a view into the stack, no copy of the
      // packed weight (the ready form is its fp32 decode, scratch).
      Mxfp4Operand op;
      op.layout = d.w.layout;
      op.rows = d.n;
      op.k = d.k;
      op.q = d.w.q;
      op.q.data = d.w.q.data + e * q_bytes;
      op.q.nbytes = q_bytes;
      op.s = d.w.s;
      op.s.data = d.w.s.data + e * d.expert_scale_bytes;
      op.s.nbytes = d.expert_scale_bytes;
      w = PreparedWeight{};
      if (d.k > 0) {
        prepare_mxfp4(w, op, threads, nullptr);
      } else {
        w.format = Q4_FORMAT_MXFP4;
        w.n = d.n;
        w.path = CpuPath::DequantMatmul;
      }
      decoded = e;
    }
    ProductDesc p;
    p.ctx = d.ctx;
    p.format = Q4_FORMAT_MXFP4;
    p.m = rows;
    p.n = d.n;
    p.k = d.k;
    p.path = CpuPath::DequantMatmul;
    int64_t x_shape[2], out_shape[2];
    p.x = row_slice(d.x, d.k, r0, rows, x_shape);
    p.out = row_slice(d.out, d.n, r0, rows, out_shape);
    if (d.bias.present) {
      p.bias = d.bias;
      const int64_t elem = d.bias.ref.type == ElemType::F32 ? 4 : 2;
      p.bias.ptr.data = d.bias.ref.data + static_cast<int64_t>(e) * d.n * elem;
    }
    run_host_product(w, p);
    r0 += rows;
  }
}

// The stateless entry points (core/ops.h): validate once, then run.
void mxfp4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* scale, int32_t layout,
                    const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_quantize(x, qdata, scale, layout, opts));
}

void mxfp4_dequantize(const DLTensor* qdata, const DLTensor* scale, int32_t layout, DLTensor* out,
                      const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_dequantize(qdata, scale, layout, out, opts));
}

void mxfp4_linear(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale, int32_t layout,
                  const DLTensor* bias, DLTensor* out, const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_linear(x, w_qdata, w_scale, layout, bias, out, opts));
}

void mxfp4_scaled_mm(const DLTensor* a_qdata, const DLTensor* a_scale, const DLTensor* b_qdata,
                     const DLTensor* b_scale, int32_t layout, float alpha, const DLTensor* bias,
                     DLTensor* out, const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_scaled_mm(a_qdata, a_scale, b_qdata, b_scale, layout, alpha, bias, out, opts));
}

void mxfp4_linear_experts(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale, int32_t layout,
                          const int32_t* expert_of_group, const int64_t* group_rows, int64_t n_groups,
                          const DLTensor* bias, DLTensor* out, const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_linear_experts(x, w_qdata, w_scale, layout, expert_of_group, group_rows, n_groups,
                                          bias, out, opts));
}

}  // namespace q4::core
