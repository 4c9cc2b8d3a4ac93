// One descriptor per operation. Each public operation is validated exactly
// once, by its validate_* function, whatever device its tensors live on;
// the result is a descriptor (validated tensor views, M/N/K, layout,
// scales, resolved options, placement) that the router hands to the CPU or
// the CUDA implementation. Neither implementation validates anything of its
// own: the CPU one computes, the CUDA one marshals the descriptor into the
// plugin's call struct.
//
// Placement rule (the same for every operation): if any tensor is kDLCUDA,
// the call runs on that CUDA device (all kDLCUDA tensors must share it, and
// no argument may be ordinary kDLCPU memory, which a GPU cannot read);
// otherwise it runs on the CPU, which reads kDLCPU, kDLCUDAHost and
// kDLCUDAManaged memory in place.
#pragma once

#include <cstdint>

#include "common/tensor.h"
#include "core/op_helpers.h"
#include "core/options.h"
#include "nvfp4/ops.h"

namespace q4::core {

enum class Place : uint8_t { Host, Device };

struct OpContext {
  ResolvedOptions opts;
  Place place = Place::Host;
  int32_t device = 0;  // CUDA ordinal when place == Device
};

// An NVFP4 matrix [rows, k]: packed codes, E4M3 block scales in `layout`,
// global scale g (1 for the operands of scaled_mm, whose scales fold into
// alpha).
struct Nvfp4Operand {
  TensorRef q, s;
  int32_t layout = Q4_SCALE_LINEAR;
  int64_t rows = 0, k = 0;
  float g = 1.0f;
};

// An NF4 tensor of `numel` elements in flat blocks.
struct Nf4Operand {
  TensorRef q;
  Nf4State state;
  int64_t numel = 0;
};

// An MXFP4 matrix [rows, k]: packed codes and E8M0 block scales (one per
// 32 elements) in `layout`.
struct Mxfp4Operand {
  TensorRef q, s;
  int32_t layout = Q4_SCALE_LINEAR;
  int64_t rows = 0, k = 0;
  // The smallest and largest scale byte, where validation measured them
  // (require_finite_e8m0_range: host-readable linear scales; -1 where it
  // did not): the CPU products' window check (prepare_mxfp4) then makes
  // no pass over the scales of its own.
  int32_t byte_lo = -1, byte_hi = -1;
};

struct Nvfp4QuantizeDesc {
  OpContext ctx;
  TensorRef x;
  Nvfp4Operand dst;  // q, s written; g = the caller's value (0 = from amax)
  float* g_out = nullptr;
};

struct Nvfp4DequantizeDesc {
  OpContext ctx;
  Nvfp4Operand src;
  TensorRef out;
};

struct Nf4QuantizeDesc {
  OpContext ctx;
  TensorRef x, q, absmax;
  int64_t numel = 0, blocksize = 64;
};

struct Nf4DequantizeDesc {
  OpContext ctx;
  Nf4Operand src;
  TensorRef out;
};

// Every product: out[M, N] = alpha * act[M, K] . W[N, K]^T (+ bias[N]).
// act is the float tensor x, or (W4A4) the NVFP4 operand a.
// Largest M whose NVFP4 sign rule is checked on the way (ProductDesc).
constexpr int64_t kSignsOnTheWayRows = 16;

struct ProductDesc {
  OpContext ctx;
  int32_t format = Q4_FORMAT_NVFP4;  // of the weight
  bool w4a4 = false;
  int64_t m = 0, n = 0, k = 0;
  TensorRef x;      // float activations [..., K] (not W4A4)
  Nvfp4Operand a;   // W4A4 activations
  Nvfp4Operand nv;  // NVFP4 weight
  Nf4Operand nf;    // NF4 weight
  Bias bias;
  TensorRef out;
  float alpha = 1.0f;
  CpuPath path = CpuPath::Kernel;
  // NVFP4 weight on the host kernels at small M: the sign rule on its
  // scales is checked while the product reads them (kern::ScaleSigns), not
  // by validation; run_host_product computes into a buffer of its own and
  // fails, output untouched, when a sign bit was seen.
  bool signs_on_the_way = false;
};

struct Mxfp4QuantizeDesc {
  OpContext ctx;
  TensorRef x;
  Mxfp4Operand dst;  // q, s written
};

struct Mxfp4DequantizeDesc {
  OpContext ctx;
  Mxfp4Operand src;
  TensorRef out;
};

// MXFP4 products: out[M, N] = alpha * act[M, K] . W[N, K]^T (+ bias[N]);
// act is the float tensor x (linear) or the MXFP4 operand a (scaled_mm).
// On the CPU they run on the E2M1 kernels through the weight's exact NVFP4
// form (or dequantize-then-fp32-GEMM); placed on a CUDA device, through the
// plugin's MXFP4 ops.
struct Mxfp4ProductDesc {
  OpContext ctx;
  bool w4a4 = false;
  int64_t m = 0, n = 0, k = 0;
  TensorRef x;
  Mxfp4Operand a, w;
  Bias bias;
  TensorRef out;
  float alpha = 1.0f;
};

// Batched experts (MXFP4_linear_experts): the stacked weight [E, N, K]
// (codes w.q of E * N * K/2 bytes, scales w.s of E * expert_scale_bytes),
// x [T, K] split into consecutive row groups, group g running expert
// experts[g] on group_rows[g] rows; bias [E, N] when present.
struct Mxfp4ExpertsDesc {
  OpContext ctx;
  int64_t experts = 0, t = 0, n = 0, k = 0;
  TensorRef x;
  Mxfp4Operand w;  // rows = E * N (the whole stack), layout per expert
  int64_t expert_scale_bytes = 0;
  const int32_t* expert_of_group = nullptr;
  const int64_t* group_rows = nullptr;
  int64_t n_groups = 0;
  Bias bias;  // numel E * N
  TensorRef out;
};

struct SwizzleDesc {
  TensorRef linear, swizzled;
  int64_t rows = 0, cols = 0;
};

Nvfp4QuantizeDesc validate_nvfp4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* s_t, int32_t layout,
                                          float g, float* g_out, const Q4_op_options* opts);
Nvfp4DequantizeDesc validate_nvfp4_dequantize(const DLTensor* q_t, const DLTensor* s_t, int32_t layout,
                                              float g, DLTensor* out_t, const Q4_op_options* opts);
ProductDesc validate_nvfp4_linear(const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t,
                                  int32_t layout, float g, const DLTensor* bias_t, DLTensor* out_t,
                                  const Q4_op_options* opts);
ProductDesc validate_nvfp4_scaled_mm(const DLTensor* aq_t, const DLTensor* as_t, const DLTensor* bq_t,
                                     const DLTensor* bs_t, int32_t layout, float alpha,
                                     const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts);
Nf4QuantizeDesc validate_nf4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* absmax_t,
                                      int32_t blocksize, const Q4_op_options* opts);
Nf4DequantizeDesc validate_nf4_dequantize(const DLTensor* q_t, const NF4_state* state, DLTensor* out_t,
                                          const Q4_op_options* opts);
ProductDesc validate_nf4_scaled_mm(const DLTensor* x_t, const DLTensor* wq_t, const NF4_state* w_state,
                                   const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts);
Mxfp4QuantizeDesc validate_mxfp4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* s_t, int32_t layout,
                                          const Q4_op_options* opts);
Mxfp4DequantizeDesc validate_mxfp4_dequantize(const DLTensor* q_t, const DLTensor* s_t, int32_t layout,
                                              DLTensor* out_t, const Q4_op_options* opts);
Mxfp4ProductDesc validate_mxfp4_linear(const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t,
                                       int32_t layout, const DLTensor* bias_t, DLTensor* out_t,
                                       const Q4_op_options* opts);
Mxfp4ProductDesc validate_mxfp4_scaled_mm(const DLTensor* aq_t, const DLTensor* as_t, const DLTensor* bq_t,
                                          const DLTensor* bs_t, int32_t layout, float alpha,
                                          const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts);
Mxfp4ExpertsDesc validate_mxfp4_linear_experts(const DLTensor* x_t, const DLTensor* wq_t,
                                               const DLTensor* ws_t, int32_t layout,
                                               const int32_t* expert_of_group, const int64_t* group_rows,
                                               int64_t n_groups, const DLTensor* bias_t, DLTensor* out_t,
                                               const Q4_op_options* opts);
SwizzleDesc validate_swizzle(const DLTensor* linear_t, const DLTensor* swizzled_t, bool to_swizzled);

// The sign rule of NVFP4 block scales (docs/formats.md, E4M3): a scale byte
// with the sign bit set (>= 0x80) is invalid input; Q4_ERR_INVALID_ARGUMENT
// names o.s and the first offending (row, block). Scans the o.rows x K/16
// logical scales (swizzled padding is not read). kDLCUDA scales are first
// scanned on their device in `stream` (one kernel and a stream
// synchronization, no copy); only a hit there (or a plugin without the
// scan) copies them to the host for the exact scan. Large host tensors are
// scanned by up to `threads` pool threads (0: the default count).
void require_nonnegative_scales(const Nvfp4Operand& o, int32_t threads = 0, void* stream = nullptr);

// The NaN rule of MXFP4 products: E8M0 byte 0xFF is NaN (OCP MX v1.0) and a
// product refuses it with Q4_ERR_INVALID_ARGUMENT naming o.s and the first
// (expert, row, block) holding it; MXFP4_dequantize decodes it to NaN
// instead. o.s holds `experts` consecutive scale tensors of
// `expert_bytes` bytes each for o.rows / experts rows of K/32 blocks
// (experts = 1: the whole tensor). One memchr over the bytes when none is
// NaN (swizzled padding included: a hit there sends the call to the exact
// logical scan, which skips it); kDLCUDA scales are scanned on their device
// first, as above.
void require_finite_e8m0(const Mxfp4Operand& o, void* stream = nullptr, int64_t experts = 1,
                         int64_t expert_bytes = 0);
// The same check for one weight, which on host-readable linear scales also
// records their byte range in o (Mxfp4Operand::byte_lo/byte_hi): one pass
// on `threads` threads (0 = default) finds the smallest and largest byte,
// and a largest byte of 0xFF fails as require_finite_e8m0 does.
void require_finite_e8m0_range(Mxfp4Operand& o, int32_t threads, void* stream);

}  // namespace q4::core
