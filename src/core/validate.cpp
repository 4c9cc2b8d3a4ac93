// The one validator per operation (see op_desc.h). Order of the checks:
// options (ranges), tensors one by one in argument order (descriptor,
// dtype, shape agreement, byte counts), then placement, aliasing and, for
// quantize on the CPU, finiteness. Every failure names the argument.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "core/cuda_backend.h"
#include "core/mxfp4.h"
#include "core/op_desc.h"
#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/cpu_ops.h"

namespace q4::core {
namespace {

// Placement of a call from all of its tensors (NULL entries ignored).
void place_call(OpContext& ctx, std::initializer_list<const TensorRef*> ts) {
  int32_t device = -1;
  for (const TensorRef* t : ts) {
    if (t == nullptr || t->device.device_type != kDLCUDA) continue;
    if (device >= 0 && t->device.device_id != device) {
      fail(Q4_ERR_DEVICE, t->name,
           "all CUDA tensors of a call must be on one device (" + std::to_string(device) + " vs " +
               std::to_string(t->device.device_id) + ")");
    }
    device = t->device.device_id;
  }
  if (device < 0) {
    ctx.place = Place::Host;
    if (ctx.opts.target == Q4_TARGET_CUDA) {
      fail(Q4_ERR_NOT_AVAILABLE, "opts->target",
           "CUDA target requested for host tensors; the CUDA backend runs on kDLCUDA tensors (see "
           "NVFP4_to_managed)");
    }
    return;
  }
  for (const TensorRef* t : ts) {
    if (t != nullptr && t->device.device_type == kDLCPU) {
      fail(Q4_ERR_DEVICE, t->name,
           "is ordinary host memory while other arguments are on a CUDA device; use managed "
           "(kDLCUDAManaged) or pinned (kDLCUDAHost) memory, or copy it");
    }
  }
  // A GPU kernel reading pageable host memory it cannot reach faults, and
  // the fault poisons the CUDA context of the whole process: refuse such a
  // tensor here (one cudaPointerGetAttributes per tensor). Not on devices
  // that read pageable memory (ATS/HMM, as the GB10), not without a device
  // (the route answers NOT_AVAILABLE), and not for a call that moves no
  // data: the first tensor listed is the one whose emptiness makes the call
  // a no-op (its output, or x for quantize), e.g. an M = 0 product.
  const TensorRef* first = *ts.begin();
  if (first != nullptr && first->nbytes > 0 && cuda::cuda_state() == Q4_CUDA_READY &&
      !cuda::reads_host_memory(device)) {
    for (const TensorRef* t : ts) {
      if (t == nullptr || t->data == nullptr || t->nbytes == 0) continue;
      if (cuda::pointer_kind(t->data) == NVFP4_CUDA_MEM_UNREGISTERED) {
        fail(Q4_ERR_DEVICE, t->name,
             "is labelled " + std::string(t->device.device_type == kDLCUDA ? "kDLCUDA" : "as CUDA-visible") +
                 " but its data is ordinary host memory, which CUDA device " + std::to_string(device) +
                 " cannot read (cudaPointerGetAttributes: unregistered); pass device, managed or pinned "
                 "memory");
      }
    }
  }
  ctx.place = Place::Device;
  ctx.device = device;
}

// Whether the block scales of a call are checked (require_nonnegative_scales):
// only where the call runs. A call on a CUDA backend that cannot run is
// refused by the route with its own status, before anything is read.
bool scales_checked(const OpContext& ctx) {
  return ctx.place == Place::Host || cuda::cuda_state() == Q4_CUDA_READY;
}

OpContext options_of(const Q4_op_options* opts) {
  OpContext ctx;
  ctx.opts = resolve_options_allow_cuda(opts);  // the target is checked by place_call
  return ctx;
}

Nvfp4Operand nvfp4_operand(const DLTensor* q_t, const DLTensor* s_t, const char* qname, const char* sname,
                           int32_t layout, int64_t rows, int64_t k, float g) {
  Nvfp4Operand o;
  o.layout = layout;
  o.rows = rows;
  o.k = k;
  o.g = g;
  o.q = check_tensor_any(q_t, qname);
  require_packed_bytes(o.q);
  require_nbytes(o.q, checked_mul(rows, k / 2, qname),
                 [&] { return std::to_string(rows) + " rows x K/2 packed bytes"; });
  o.s = check_tensor_any(s_t, sname);
  require_scale_bytes(o.s);
  require_nbytes(o.s, scale_bytes(rows, k, layout, sname), [&] { return scale_why(rows, k, layout); });
  return o;
}

// The rows of a packed weight, from its bytes and K (so that a wrong `out`
// is reported against out, not against the weight).
int64_t rows_of_packed(const TensorRef& q, int64_t k, bool odd_tail_allowed) {
  if (k <= 0 || (!odd_tail_allowed && k < 2)) return -1;  // (NVFP4: K is a multiple of 16 here)
  const int64_t rows = odd_tail_allowed ? (2 * q.nbytes) / k : q.nbytes / (k / 2);
  const int64_t expect = odd_tail_allowed ? (checked_mul(rows, k, q.name) + 1) / 2 : rows * (k / 2);
  if (expect != q.nbytes) {
    fail(Q4_ERR_SHAPE, q.name,
         std::to_string(q.nbytes) +
             " bytes is not a whole number of weight rows of K = " + std::to_string(k) +
             (odd_tail_allowed ? " elements (ceil(N*K/2) bytes expected)" : " elements (K/2 bytes each)"));
  }
  return rows;
}

void require_out_features(const TensorRef& out, int64_t n, const char* from) {
  if (n >= 0 && out.last_dim() != n) {
    fail(Q4_ERR_SHAPE, out.name,
         "last dimension must be N = " + std::to_string(n) + " (the rows of " + from + "), got " +
             out.shape_text());
  }
}

}  // namespace

namespace {

// The bytes of a scale tensor readable on the host: its own, or (kDLCUDA,
// not host-readable) one copy in `staged` through the plugin.
const uint8_t* host_scale_bytes(const TensorRef& s, std::vector<uint8_t>& staged) {
  if (s.device.device_type != kDLCUDA) return s.data;
  staged.resize(static_cast<size_t>(s.nbytes));
  cuda::copy(staged.data(), s.data, staged.size());
  return staged.data();
}

// Whether a kDLCUDA scale tensor has no byte matching `mode`, scanned
// where it is (one small kernel, no copy). A match, or a plugin that cannot
// scan, sends the caller to the exact scan on the host, which skips the
// padding of the swizzled layout and names the scale.
bool device_bytes_clean(const TensorRef& s, void* stream, int32_t mode) {
  if (s.device.device_type != kDLCUDA) return false;
  return cuda::scan_device_bytes(s.data, s.nbytes, s.device.device_id, stream, mode) == -1;
}

// The first logical scale (row-major over rows x cols) whose byte satisfies
// bad(byte), read through the layout (swizzled padding is never read), as
// r * cols + c; -1 when none does.
template <class Bad>
int64_t first_bad_scale(const uint8_t* bytes, int32_t layout, int64_t rows, int64_t cols, Bad&& bad) {
  const bool swizzled = layout == Q4_SCALE_SWIZZLED;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (bad(bytes[swizzled ? fmt::swizzle_offset(r, c, cols) : r * cols + c])) return r * cols + c;
    }
  }
  return -1;
}

}  // namespace

void require_nonnegative_scales(const Nvfp4Operand& o, int32_t threads, void* stream) {
  const int64_t cols = o.k / 16;
  if (o.rows <= 0 || cols <= 0 || o.s.nbytes <= 0) return;
  if (device_bytes_clean(o.s, stream, NVFP4_CUDA_SCAN_SIGN_BIT)) return;
  std::vector<uint8_t> staged;
  const uint8_t* bytes = host_scale_bytes(o.s, staged);
  // The common case first: one pass of 8-byte ORs over every byte of the
  // tensor (vectorized; a swizzled tensor's padding included, so a set bit
  // there only sends the call to the exact scan below, which skips it).
  // Large tensors are scanned in pieces by the pool's threads (a GEMV reads
  // the same bytes with every core: a single-threaded scan cost ~8 % of a
  // 4096^2 one on two cores).
  constexpr int64_t kPiece = int64_t{1} << 17;
  const int64_t pieces = (o.s.nbytes + kPiece - 1) / kPiece;
  std::atomic<bool> any{false};
  parallel_for(pieces, threads, [&](int64_t p) {  // (one piece runs inline)
    const int64_t b0 = p * kPiece, b1 = std::min(o.s.nbytes, b0 + kPiece);
    if (kern::any_sign_bit(bytes + b0, b1 - b0)) any.store(true, std::memory_order_relaxed);
  });
  if (!any.load()) return;
  const int64_t at =
      first_bad_scale(bytes, o.layout, o.rows, cols, [](uint8_t b) { return (b & 0x80U) != 0; });
  if (at < 0) return;
  const uint8_t b =
      bytes[o.layout == Q4_SCALE_SWIZZLED ? fmt::swizzle_offset(at / cols, at % cols, cols) : at];
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(b));
  fail(Q4_ERR_INVALID_ARGUMENT, o.s.name,
       "E4M3 block scales must be non-negative: scale [" + std::to_string(at / cols) + ", " +
           std::to_string(at % cols) + "] (flat index " + std::to_string(at) + ") is " + hex +
           ", whose sign bit is set (docs/formats.md, E4M3)");
}

void require_finite_e8m0(const Mxfp4Operand& o, void* stream, int64_t experts, int64_t expert_bytes) {
  const int64_t cols = o.k / fmt::kMxBlock;
  if (o.rows <= 0 || cols <= 0 || o.s.nbytes <= 0 || experts <= 0) return;
  if (device_bytes_clean(o.s, stream, NVFP4_CUDA_SCAN_FF)) return;
  std::vector<uint8_t> staged;
  const uint8_t* bytes = host_scale_bytes(o.s, staged);
  if (std::memchr(bytes, static_cast<int>(fmt::kE8M0NaN), static_cast<size_t>(o.s.nbytes)) == nullptr) return;
  const int64_t rows = o.rows / experts;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t at = first_bad_scale(bytes + e * expert_bytes, o.layout, rows, cols,
                                       [](uint8_t b) { return b == fmt::kE8M0NaN; });
    if (at < 0) continue;
    fail(Q4_ERR_INVALID_ARGUMENT, o.s.name,
         "E8M0 scale byte 0xFF (NaN) at " + (experts > 1 ? "expert " + std::to_string(e) + ", " : "") +
             "row " + std::to_string(at / cols) + ", block " + std::to_string(at % cols) +
             ": MXFP4 products refuse NaN scales (MXFP4_dequantize decodes them to NaN; docs/formats.md, "
             "MXFP4)");
  }
}

void require_finite_e8m0_range(Mxfp4Operand& o, int32_t threads, void* stream) {
  const int64_t cols = o.k / fmt::kMxBlock;
  if (o.layout != Q4_SCALE_LINEAR || o.s.device.device_type == kDLCUDA || o.rows <= 0 || cols <= 0 ||
      o.s.nbytes < o.rows * cols) {
    require_finite_e8m0(o, stream);
    return;
  }
  // One pass on the pool's threads (a stateless MXFP4 GEMV of a 4096x4096
  // weight spent 4.6 % of its time in the single-threaded memchr of
  // require_finite_e8m0 and 3.5 % more in the window check's own pass over
  // the same bytes; now 3.5 % in this one, per perf on a Zen 4).
  int32_t l = 0, h = 0;
  e8m0_byte_range(o.s.data, o.rows, cols, threads, &l, &h);
  if (h == static_cast<int32_t>(fmt::kE8M0NaN)) require_finite_e8m0(o, stream);  // fails, naming the first
  o.byte_lo = l;
  o.byte_hi = h;
}

Nvfp4QuantizeDesc validate_nvfp4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* s_t, int32_t layout,
                                          float g, float* g_out, const Q4_op_options* opts) {
  Nvfp4QuantizeDesc d;
  d.ctx = options_of(opts);
  d.x = check_tensor_any(x_t, "x");
  require_float(d.x);
  require_min_ndim(d.x, 1);
  const int64_t k = d.x.last_dim();
  const int64_t rows = d.x.leading();
  require_k_multiple_of_16(k, "x");
  require_layout(layout);
  require_scale_value(g, "global_scale", true);
  d.dst = nvfp4_operand(q_t, s_t, "qdata", "scale", layout, rows, k, g);
  place_call(d.ctx, {&d.x, &d.dst.q, &d.dst.s});
  require_no_overlap(d.dst.q, {&d.x, &d.dst.s});
  require_no_overlap(d.dst.s, {&d.x});
  // The finite check (first NaN/Inf, nothing written) runs with the
  // quantization itself: on the host in cpu::run (fused into its passes over
  // x), on the device in the kernel.
  d.g_out = g_out;
  return d;
}

Nvfp4DequantizeDesc validate_nvfp4_dequantize(const DLTensor* q_t, const DLTensor* s_t, int32_t layout,
                                              float g, DLTensor* out_t, const Q4_op_options* opts) {
  Nvfp4DequantizeDesc d;
  d.ctx = options_of(opts);
  d.out = check_tensor_any(out_t, "out");
  require_float(d.out);
  require_min_ndim(d.out, 1);
  const int64_t k = d.out.last_dim();
  const int64_t rows = d.out.leading();
  require_k_multiple_of_16(k, "out");
  require_layout(layout);
  require_scale_value(g, "global_scale", false);
  d.src = nvfp4_operand(q_t, s_t, "qdata", "scale", layout, rows, k, g);
  place_call(d.ctx, {&d.out, &d.src.q, &d.src.s});
  require_no_overlap(d.out, {&d.src.q, &d.src.s});
  if (scales_checked(d.ctx)) require_nonnegative_scales(d.src, d.ctx.opts.num_threads, d.ctx.opts.stream);
  return d;
}

ProductDesc validate_nvfp4_linear(const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t,
                                  int32_t layout, float g, const DLTensor* bias_t, DLTensor* out_t,
                                  const Q4_op_options* opts) {
  ProductDesc d;
  d.ctx = options_of(opts);
  d.format = Q4_FORMAT_NVFP4;
  d.path = choose_cpu_path(d.ctx.opts, Q4_FORMAT_NVFP4);
  check_math_mode(d.ctx.opts, d.path);
  d.x = check_tensor_any(x_t, "x");
  require_float(d.x);
  require_min_ndim(d.x, 1);
  d.k = d.x.last_dim();
  d.m = d.x.leading();
  require_k_multiple_of_16(d.k, "x");
  d.out = check_tensor_any(out_t, "out");
  require_float(d.out);
  require_same_leading(d.out, d.x);
  require_layout(layout);
  require_scale_value(g, "global_scale", false);
  const TensorRef wq = check_tensor_any(wq_t, "w_qdata");
  require_packed_bytes(wq);
  require_out_features(d.out, rows_of_packed(wq, d.k, false), "w_qdata");
  d.n = d.out.last_dim();
  d.nv = nvfp4_operand(wq_t, ws_t, "w_qdata", "w_scale", layout, d.n, d.k, g);
  d.bias = parse_bias(bias_t, d.n);
  place_call(d.ctx, {&d.x, &d.out, &d.nv.q, &d.nv.s, d.bias.present ? &d.bias.ref : nullptr});
  require_no_overlap(d.out, {&d.x, &d.nv.q, &d.nv.s, d.bias.present ? &d.bias.ref : nullptr});
  if (d.m > 0 && scales_checked(d.ctx)) {  // M = 0 reads no weight
    // The GEMV's M on the host kernels: checked by the product's own tasks
    // (one pass over the weights instead of two; its output is staged, so
    // nothing is written before the check; run_host_product). Larger M:
    // here, where the pass is small next to the product.
    d.signs_on_the_way = d.ctx.place == Place::Host && d.path == CpuPath::Kernel && d.m <= kSignsOnTheWayRows;
    if (!d.signs_on_the_way) require_nonnegative_scales(d.nv, d.ctx.opts.num_threads, d.ctx.opts.stream);
  }
  return d;
}

namespace {

// K of a W4A4 product (both operands packed E2M1, two elements a byte):
// from A's bytes, or from B's when M == 0 (an empty product is valid on every
// device); 0 when both M and N are 0.
int64_t w4a4_k(const TensorRef& aq, const TensorRef& bq, int64_t m, int64_t n) {
  if (m > 0) {
    if (aq.nbytes % m != 0) {
      fail(Q4_ERR_SHAPE, "a_qdata",
           std::to_string(aq.nbytes) + " bytes is not a whole number of rows for M = " + std::to_string(m));
    }
    return 2 * (aq.nbytes / m);
  }
  if (n > 0) {
    if (bq.nbytes % n != 0) {
      fail(Q4_ERR_SHAPE, "b_qdata",
           std::to_string(bq.nbytes) + " bytes is not a whole number of rows for N = " + std::to_string(n));
    }
    return 2 * (bq.nbytes / n);
  }
  return 0;
}

}  // namespace

ProductDesc validate_nvfp4_scaled_mm(const DLTensor* aq_t, const DLTensor* as_t, const DLTensor* bq_t,
                                     const DLTensor* bs_t, int32_t layout, float alpha,
                                     const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts) {
  ProductDesc d;
  d.ctx = options_of(opts);
  d.format = Q4_FORMAT_NVFP4;
  d.w4a4 = true;
  d.path = choose_cpu_path(d.ctx.opts, Q4_FORMAT_NVFP4);
  d.out = check_tensor_any(out_t, "out");
  require_float(d.out);
  require_min_ndim(d.out, 1);
  d.n = d.out.last_dim();
  d.m = d.out.leading();
  require_layout(layout);
  require_scale_value(alpha, "alpha", true);
  d.alpha = alpha;
  const TensorRef aq = check_tensor_any(aq_t, "a_qdata");
  require_packed_bytes(aq);
  const TensorRef bq = check_tensor_any(bq_t, "b_qdata");
  require_packed_bytes(bq);
  d.k = w4a4_k(aq, bq, d.m, d.n);
  require_k_multiple_of_16(d.k, "a_qdata");
  d.a = nvfp4_operand(aq_t, as_t, "a_qdata", "a_scale", layout, d.m, d.k, 1.0f);
  d.nv = nvfp4_operand(bq_t, bs_t, "b_qdata", "b_scale", layout, d.n, d.k, 1.0f);
  d.bias = parse_bias(bias_t, d.n);
  place_call(d.ctx, {&d.out, &d.a.q, &d.a.s, &d.nv.q, &d.nv.s, d.bias.present ? &d.bias.ref : nullptr});
  require_no_overlap(d.out, {&d.a.q, &d.a.s, &d.nv.q, &d.nv.s, d.bias.present ? &d.bias.ref : nullptr});
  if (d.m > 0 && d.n > 0 && scales_checked(d.ctx)) {  // an empty product reads no operand
    require_nonnegative_scales(d.a, d.ctx.opts.num_threads, d.ctx.opts.stream);
    require_nonnegative_scales(d.nv, d.ctx.opts.num_threads, d.ctx.opts.stream);
  }
  return d;
}

Nf4QuantizeDesc validate_nf4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* absmax_t,
                                      int32_t blocksize, const Q4_op_options* opts) {
  Nf4QuantizeDesc d;
  d.ctx = options_of(opts);
  d.blocksize = require_blocksize(blocksize == 0 ? 64 : blocksize, "blocksize");
  d.x = check_tensor_any(x_t, "x");
  require_float(d.x);
  d.numel = d.x.numel;
  d.q = check_tensor_any(q_t, "qdata");
  require_packed_bytes(d.q);
  require_nbytes(d.q, (d.numel + 1) / 2,
                 [&] { return "ceil(n/2) packed bytes for n = " + std::to_string(d.numel); });
  d.absmax = check_tensor_any(absmax_t, "absmax");
  require_type(d.absmax, ElemType::F32);
  require_numel(d.absmax, (d.numel + d.blocksize - 1) / d.blocksize, "ceil(n/blocksize) blocks");
  place_call(d.ctx, {&d.x, &d.q, &d.absmax});
  require_no_overlap(d.q, {&d.x, &d.absmax});
  require_no_overlap(d.absmax, {&d.x});
  // NaN/Inf on the host: checked in the quantizing pass (cpu_backend.cpp).
  return d;
}

namespace {

void place_nf4(OpContext& ctx, const TensorRef& out, const Nf4Operand& o, const TensorRef* x,
               const TensorRef* bias) {
  const Nf4State& s = o.state;
  place_call(ctx, {&out, &o.q, &s.absmax, s.has_quant_map ? &s.quant_map : nullptr,
                   s.nested ? &s.nested_absmax : nullptr, s.nested ? &s.nested_map : nullptr, x, bias});
  require_no_overlap(
      out, {&o.q, &s.absmax, s.has_quant_map ? &s.quant_map : nullptr, s.nested ? &s.nested_absmax : nullptr,
            s.nested ? &s.nested_map : nullptr, x, bias});
  // The plugin takes fp32 absmax only: double-quantized statistics on a
  // CUDA device are refused here, so the CUDA side validates nothing.
  if (ctx.place == Place::Device && s.nested) {
    fail(Q4_ERR_UNSUPPORTED, "state->nested_absmax",
         "double-quantized NF4 statistics on CUDA tensors: resolve them first (Q4_linear_create does)");
  }
}

}  // namespace

Nf4DequantizeDesc validate_nf4_dequantize(const DLTensor* q_t, const NF4_state* state, DLTensor* out_t,
                                          const Q4_op_options* opts) {
  Nf4DequantizeDesc d;
  d.ctx = options_of(opts);
  d.out = check_tensor_any(out_t, "out");
  require_float(d.out);
  d.src.numel = d.out.numel;
  d.src.q = check_tensor_any(q_t, "qdata");
  require_packed_bytes(d.src.q);
  require_nbytes(d.src.q, (d.src.numel + 1) / 2,
                 [&] { return "ceil(n/2) packed bytes for n = " + std::to_string(d.src.numel); });
  d.src.state = parse_nf4_state(state, d.src.numel);
  place_nf4(d.ctx, d.out, d.src, nullptr, nullptr);
  return d;
}

ProductDesc validate_nf4_scaled_mm(const DLTensor* x_t, const DLTensor* wq_t, const NF4_state* w_state,
                                   const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts) {
  ProductDesc d;
  d.ctx = options_of(opts);
  d.format = Q4_FORMAT_NF4;
  d.path = choose_cpu_path(d.ctx.opts, Q4_FORMAT_NF4);
  check_math_mode(d.ctx.opts, d.path);
  d.x = check_tensor_any(x_t, "x");
  require_float(d.x);
  require_min_ndim(d.x, 1);
  d.k = d.x.last_dim();
  d.m = d.x.leading();
  d.out = check_tensor_any(out_t, "out");
  require_float(d.out);
  require_same_leading(d.out, d.x);
  d.nf.q = check_tensor_any(wq_t, "w_qdata");
  require_packed_bytes(d.nf.q);
  require_out_features(d.out, rows_of_packed(d.nf.q, d.k, true), "w_qdata");
  d.n = d.out.last_dim();
  d.nf.numel = checked_mul(d.n, d.k, "w_qdata");
  require_nbytes(d.nf.q, (d.nf.numel + 1) / 2, "ceil(N*K/2) packed bytes");
  d.nf.state = parse_nf4_state(w_state, d.nf.numel);
  d.bias = parse_bias(bias_t, d.n);
  place_nf4(d.ctx, d.out, d.nf, &d.x, d.bias.present ? &d.bias.ref : nullptr);
  return d;
}

SwizzleDesc validate_swizzle(const DLTensor* linear_t, const DLTensor* swizzled_t, bool to_swizzled) {
  SwizzleDesc d;
  d.linear = check_tensor(linear_t, "linear");
  require_scale_bytes(d.linear);
  require_min_ndim(d.linear, 1);
  d.cols = d.linear.last_dim();
  d.rows = d.linear.leading();
  d.swizzled = check_tensor(swizzled_t, "swizzled");
  require_scale_bytes(d.swizzled);
  require_nbytes(d.swizzled, checked_mul(fmt::swizzled_rows(d.rows), fmt::swizzled_cols(d.cols), "swizzled"),
                 "roundup(rows,128) * roundup(cols,4)");
  if (to_swizzled) {
    require_no_overlap(d.swizzled, {&d.linear});
  } else {
    require_no_overlap(d.linear, {&d.swizzled});
  }
  return d;
}

// ---------------------------------------------------------------------------
// MXFP4 (docs/formats.md, MXFP4): blocks of 32, E8M0 scales, no global scale.
// ---------------------------------------------------------------------------
namespace {

void require_k_multiple_of_32(int64_t k, const char* name) {
  if (k % fmt::kMxBlock != 0) {
    fail(Q4_ERR_SHAPE, name, "K = " + std::to_string(k) + " must be a multiple of 32 (MXFP4 block size)");
  }
}

int64_t mx_scale_bytes(int64_t rows, int64_t k, int32_t layout, const char* name) {
  if (layout == Q4_SCALE_SWIZZLED) {
    return checked_mul(fmt::swizzled_rows(rows), fmt::swizzled_cols(k / fmt::kMxBlock), name);
  }
  return checked_mul(rows, k / fmt::kMxBlock, name);
}

std::string mx_scale_why(int64_t rows, int64_t k, int32_t layout) {
  const int64_t cols = k / fmt::kMxBlock;
  if (layout == Q4_SCALE_SWIZZLED) {
    return "swizzled E8M0 scales of " + std::to_string(rows) + " rows x " + std::to_string(cols) +
           " blocks, padded to " + std::to_string(fmt::swizzled_rows(rows)) + " x " +
           std::to_string(fmt::swizzled_cols(cols));
  }
  return "linear E8M0 scales [" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

Mxfp4Operand mxfp4_operand(const DLTensor* q_t, const DLTensor* s_t, const char* qname, const char* sname,
                           int32_t layout, int64_t rows, int64_t k) {
  Mxfp4Operand o;
  o.layout = layout;
  o.rows = rows;
  o.k = k;
  o.q = check_tensor_any(q_t, qname);
  require_packed_bytes(o.q);
  require_nbytes(o.q, checked_mul(rows, k / 2, qname),
                 [&] { return std::to_string(rows) + " rows x K/2 packed bytes"; });
  o.s = check_tensor_any(s_t, sname);
  require_e8m0_bytes(o.s);
  require_nbytes(o.s, mx_scale_bytes(rows, k, layout, sname), [&] { return mx_scale_why(rows, k, layout); });
  return o;
}

// MXFP4 products run on the E2M1 kernels or dequant-matmul (core/mxfp4.h):
// the options are checked here, before any tensor.
void require_mxfp4_product_options(const ResolvedOptions& o) {
  (void)mxfp4_cpu_path(o);
}

}  // namespace

Mxfp4QuantizeDesc validate_mxfp4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* s_t, int32_t layout,
                                          const Q4_op_options* opts) {
  Mxfp4QuantizeDesc d;
  d.ctx = options_of(opts);
  d.x = check_tensor_any(x_t, "x");
  require_float(d.x);
  require_min_ndim(d.x, 1);
  const int64_t k = d.x.last_dim();
  const int64_t rows = d.x.leading();
  require_k_multiple_of_32(k, "x");
  require_layout(layout);
  d.dst = mxfp4_operand(q_t, s_t, "qdata", "scale", layout, rows, k);
  place_call(d.ctx, {&d.x, &d.dst.q, &d.dst.s});
  require_no_overlap(d.dst.q, {&d.x, &d.dst.s});
  require_no_overlap(d.dst.s, {&d.x});
  // (The host's finite check rides on the quantization pass: run_mxfp4.)
  return d;
}

Mxfp4DequantizeDesc validate_mxfp4_dequantize(const DLTensor* q_t, const DLTensor* s_t, int32_t layout,
                                              DLTensor* out_t, const Q4_op_options* opts) {
  Mxfp4DequantizeDesc d;
  d.ctx = options_of(opts);
  d.out = check_tensor_any(out_t, "out");
  require_float(d.out);
  require_min_ndim(d.out, 1);
  const int64_t k = d.out.last_dim();
  const int64_t rows = d.out.leading();
  require_k_multiple_of_32(k, "out");
  require_layout(layout);
  d.src = mxfp4_operand(q_t, s_t, "qdata", "scale", layout, rows, k);
  place_call(d.ctx, {&d.out, &d.src.q, &d.src.s});
  require_no_overlap(d.out, {&d.src.q, &d.src.s});
  return d;
}

Mxfp4ProductDesc validate_mxfp4_linear(const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t,
                                       int32_t layout, const DLTensor* bias_t, DLTensor* out_t,
                                       const Q4_op_options* opts) {
  Mxfp4ProductDesc d;
  d.ctx = options_of(opts);
  require_mxfp4_product_options(d.ctx.opts);
  d.x = check_tensor_any(x_t, "x");
  require_float(d.x);
  require_min_ndim(d.x, 1);
  d.k = d.x.last_dim();
  d.m = d.x.leading();
  require_k_multiple_of_32(d.k, "x");
  d.out = check_tensor_any(out_t, "out");
  require_float(d.out);
  require_same_leading(d.out, d.x);
  require_layout(layout);
  const TensorRef wq = check_tensor_any(wq_t, "w_qdata");
  require_packed_bytes(wq);
  require_out_features(d.out, rows_of_packed(wq, d.k, false), "w_qdata");
  d.n = d.out.last_dim();
  d.w = mxfp4_operand(wq_t, ws_t, "w_qdata", "w_scale", layout, d.n, d.k);
  d.bias = parse_bias(bias_t, d.n);
  place_call(d.ctx, {&d.x, &d.out, &d.w.q, &d.w.s, d.bias.present ? &d.bias.ref : nullptr});
  require_no_overlap(d.out, {&d.x, &d.w.q, &d.w.s, d.bias.present ? &d.bias.ref : nullptr});
  if (d.m > 0 && scales_checked(d.ctx)) {  // M = 0 reads no weight
    require_finite_e8m0_range(d.w, d.ctx.opts.num_threads, d.ctx.opts.stream);
  }
  return d;
}

Mxfp4ProductDesc validate_mxfp4_scaled_mm(const DLTensor* aq_t, const DLTensor* as_t, const DLTensor* bq_t,
                                          const DLTensor* bs_t, int32_t layout, float alpha,
                                          const DLTensor* bias_t, DLTensor* out_t,
                                          const Q4_op_options* opts) {
  Mxfp4ProductDesc d;
  d.ctx = options_of(opts);
  require_mxfp4_product_options(d.ctx.opts);
  d.w4a4 = true;
  d.out = check_tensor_any(out_t, "out");
  require_float(d.out);
  require_min_ndim(d.out, 1);
  d.n = d.out.last_dim();
  d.m = d.out.leading();
  require_layout(layout);
  require_scale_value(alpha, "alpha", true);
  d.alpha = alpha;
  const TensorRef aq = check_tensor_any(aq_t, "a_qdata");
  require_packed_bytes(aq);
  const TensorRef bq = check_tensor_any(bq_t, "b_qdata");
  require_packed_bytes(bq);
  d.k = w4a4_k(aq, bq, d.m, d.n);
  require_k_multiple_of_32(d.k, "a_qdata");
  d.a = mxfp4_operand(aq_t, as_t, "a_qdata", "a_scale", layout, d.m, d.k);
  d.w = mxfp4_operand(bq_t, bs_t, "b_qdata", "b_scale", layout, d.n, d.k);
  d.bias = parse_bias(bias_t, d.n);
  place_call(d.ctx, {&d.out, &d.a.q, &d.a.s, &d.w.q, &d.w.s, d.bias.present ? &d.bias.ref : nullptr});
  require_no_overlap(d.out, {&d.a.q, &d.a.s, &d.w.q, &d.w.s, d.bias.present ? &d.bias.ref : nullptr});
  if (d.m > 0 && d.n > 0 && scales_checked(d.ctx)) {  // an empty product reads no operand
    require_finite_e8m0(d.a, d.ctx.opts.stream);
    require_finite_e8m0_range(d.w, d.ctx.opts.num_threads, d.ctx.opts.stream);
  }
  return d;
}

Mxfp4ExpertsDesc validate_mxfp4_linear_experts(const DLTensor* x_t, const DLTensor* wq_t,
                                               const DLTensor* ws_t, int32_t layout,
                                               const int32_t* expert_of_group, const int64_t* group_rows,
                                               int64_t n_groups, const DLTensor* bias_t, DLTensor* out_t,
                                               const Q4_op_options* opts) {
  Mxfp4ExpertsDesc d;
  d.ctx = options_of(opts);
  require_mxfp4_product_options(d.ctx.opts);
  d.x = check_tensor_any(x_t, "x");
  require_float(d.x);
  require_min_ndim(d.x, 1);
  d.k = d.x.last_dim();
  d.t = d.x.leading();
  require_k_multiple_of_32(d.k, "x");
  d.out = check_tensor_any(out_t, "out");
  require_float(d.out);
  require_same_leading(d.out, d.x);
  require_layout(layout);
  // The stack: E is the first dimension of w_qdata ([E, N, K/2] or the
  // gpt-oss [E, N, K/32, 16]); each expert is N rows of K/2 bytes.
  const TensorRef wq = check_tensor_any(wq_t, "w_qdata");
  require_packed_bytes(wq);
  if (wq.ndim < 2) {
    fail(Q4_ERR_SHAPE, "w_qdata",
         "must have a leading expert dimension ([E, N, K/2] or [E, N, K/32, 16]), got " + wq.shape_text());
  }
  d.experts = wq.dim(0);
  if (d.experts == 0) fail(Q4_ERR_SHAPE, "w_qdata", "has no experts (E = 0)");
  if (wq.nbytes % d.experts != 0) {
    fail(Q4_ERR_SHAPE, "w_qdata",
         std::to_string(wq.nbytes) + " bytes do not split into E = " + std::to_string(d.experts) +
             " equal experts");
  }
  if (d.k > 0) {
    const int64_t per_expert = wq.nbytes / d.experts;
    if (per_expert % (d.k / 2) != 0) {
      fail(Q4_ERR_SHAPE, "w_qdata",
           std::to_string(per_expert) + " bytes per expert is not a whole number of weight rows of K = " +
               std::to_string(d.k) + " elements (K/2 bytes each)");
    }
    require_out_features(d.out, per_expert / (d.k / 2), "each expert of w_qdata");
  }
  d.n = d.out.last_dim();
  require_nbytes(wq, checked_mul(checked_mul(d.experts, d.n, "w_qdata"), d.k / 2, "w_qdata"), [&] {
    return std::to_string(d.experts) + " experts x " + std::to_string(d.n) + " rows x K/2 packed bytes";
  });
  d.w.layout = layout;
  d.w.rows = d.experts * d.n;
  d.w.k = d.k;
  d.w.q = wq;
  d.w.s = check_tensor_any(ws_t, "w_scale");
  require_e8m0_bytes(d.w.s);
  d.expert_scale_bytes = mx_scale_bytes(d.n, d.k, layout, "w_scale");
  require_nbytes(d.w.s, checked_mul(d.experts, d.expert_scale_bytes, "w_scale"),
                 [&] { return std::to_string(d.experts) + " experts x " + mx_scale_why(d.n, d.k, layout); });
  // The groups: consecutive row ranges of x, each with its expert.
  if (n_groups < 0)
    fail(Q4_ERR_INVALID_ARGUMENT, "n_groups", "must be >= 0, got " + std::to_string(n_groups));
  if (n_groups > 0 && expert_of_group == nullptr) {
    fail(Q4_ERR_NULL_POINTER, "expert_of_group", "pointer is NULL with n_groups > 0");
  }
  if (n_groups > 0 && group_rows == nullptr) {
    fail(Q4_ERR_NULL_POINTER, "group_rows", "pointer is NULL with n_groups > 0");
  }
  int64_t total = 0;
  for (int64_t g = 0; g < n_groups; ++g) {
    const std::string at = "[" + std::to_string(g) + "]";
    if (expert_of_group[g] < 0 || expert_of_group[g] >= d.experts) {
      fail(Q4_ERR_INVALID_ARGUMENT, "expert_of_group" + at,
           "expert " + std::to_string(expert_of_group[g]) + " is outside [0, " + std::to_string(d.experts) +
               ") (E from w_qdata)");
    }
    if (group_rows[g] < 0 || group_rows[g] > d.t - total) {
      fail(group_rows[g] < 0 ? Q4_ERR_INVALID_ARGUMENT : Q4_ERR_SHAPE, "group_rows" + at,
           std::to_string(group_rows[g]) + " rows: the groups must be >= 0 rows and together cover x's " +
               std::to_string(d.t) + " rows (" + std::to_string(total) + " covered before this group)");
    }
    total += group_rows[g];
  }
  if (total != d.t) {
    fail(Q4_ERR_SHAPE, "group_rows",
         "the groups cover " + std::to_string(total) + " rows, x has " + std::to_string(d.t) +
             " (every row of x belongs to exactly one group)");
  }
  d.expert_of_group = expert_of_group;
  d.group_rows = group_rows;
  d.n_groups = n_groups;
  if (bias_t != nullptr) {
    d.bias.ref = check_tensor_any(bias_t, "bias");
    require_float(d.bias.ref);
    require_numel(d.bias.ref, checked_mul(d.experts, d.n, "bias"), "[E, N]: one row of N per expert");
    d.bias.ptr = as_input(d.bias.ref);
    d.bias.present = true;
  }
  place_call(d.ctx, {&d.x, &d.out, &d.w.q, &d.w.s, d.bias.present ? &d.bias.ref : nullptr});
  require_no_overlap(d.out, {&d.x, &d.w.q, &d.w.s, d.bias.present ? &d.bias.ref : nullptr});
  if (d.t > 0 && scales_checked(d.ctx))
    require_finite_e8m0(d.w, d.ctx.opts.stream, d.experts, d.expert_scale_bytes);
  return d;
}

}  // namespace q4::core
