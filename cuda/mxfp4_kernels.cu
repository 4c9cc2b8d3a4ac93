// MXFP4 on CUDA: quantize and dequantize through the shared host+device
// codec (formats/mxfp4.h, so the bytes equal the CPU's), the weight-only
// linear as the block GEMV for up to kGemvMaxRows rows of x, else dequantize
// + cuBLASLt fp32 GEMM in column tiles (dequant_then_gemm), and scaled_mm
// routed by q4::cuda::mxfp4_scaled_mm_route
// (src/plugin/lt_mxfp4.h): the block-scaled cuBLASLt GEMM with VEC32_UE8M0
// scales (CUDA_R_4F_E2M1 operands, LtElem::kFp4E2M1Mx) on compute
// capability 10.x-12.x, else (or when cuBLASLt has no algorithm) A
// dequantized + the block GEMV for few rows, both operands dequantized +
// the fp32 GEMM for more, reported as a fallback (KernelOnly:
// Q4_ERR_UNSUPPORTED with the reason).
#include <cstdio>
#include <string>

#include "common.cuh"
#include "formats/mxfp4.h"
#include "lt_gemm.cuh"
#include "ops.cuh"
#include "plugin/lt_mxfp4.h"

namespace q4::cuda_plugin {

namespace {

constexpr int64_t kMx = q4::fmt::kMxBlock;

// One thread per 32-element block: the OCP scale from the block amax, then
// RNE elements with saturation, element 2j in the low nibble.
__global__ void mxfp4_quantize_kernel(const void* x, int32_t type, int64_t rows, int64_t k, uint8_t* q,
                                      uint8_t* s, int32_t layout) {
  const int64_t cols = k / kMx;
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= rows * cols) return;
  float amax = 0.0f;
  for (int j = 0; j < kMx; ++j) amax = fmaxf(amax, fabsf(load_f(x, type, b * kMx + j)));
  const uint32_t byte = q4::fmt::mxfp4_scale_byte(amax);
  const float inv = q4::fmt::mxfp4_inverse_scale(byte);
  s[scale_index(b / cols, b % cols, cols, layout)] = static_cast<uint8_t>(byte);
  for (int j = 0; j < kMx; j += 2) {
    const uint32_t lo = q4::fmt::mxfp4_encode_element(load_f(x, type, b * kMx + j), inv);
    const uint32_t hi = q4::fmt::mxfp4_encode_element(load_f(x, type, b * kMx + j + 1), inv);
    q[b * (kMx / 2) + j / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Rows [row0, row0 + rows) of the matrix into out[0, rows * k).
__global__ void mxfp4_dequantize_kernel(const uint8_t* q, const uint8_t* s, int32_t layout, int64_t row0,
                                        int64_t rows, int64_t k, void* out, int32_t type) {
  const int64_t cols = k / kMx;
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= rows * cols) return;
  const float scale = q4::fmt::e8m0_decode(s[scale_index(row0 + b / cols, b % cols, cols, layout)]);
  for (int j = 0; j < kMx; j += 2) {
    const uint8_t byte = q[(row0 * cols + b) * (kMx / 2) + j / 2];
    store_f(out, type, b * kMx + j, q4::fmt::e2m1_decode(byte & 0xfu) * scale);
    store_f(out, type, b * kMx + j + 1, q4::fmt::e2m1_decode(byte >> 4) * scale);
  }
}

int32_t dequantize(const uint8_t* q, const uint8_t* s, int32_t layout, int64_t row0, int64_t rows, int64_t k,
                   void* out, int32_t type, cudaStream_t stream) {
  const int64_t nblocks = rows * (k / kMx);
  if (nblocks == 0) return Q4_OK;
  const q4::cuda::Launch l = q4::cuda::blocks_launch(nblocks);
  mxfp4_dequantize_kernel<<<l.blocks, l.threads, 0, stream>>>(q, s, layout, row0, rows, k, out, type);
  Q4_CK(cudaGetLastError());
  return Q4_OK;
}

}  // namespace

int32_t mxfp4_quantize(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  DeviceState& ds = lease.state();
  cudaStream_t stream = as_stream(op.stream);
  const int64_t rows = op.m, k = op.k;
  auto* q = static_cast<uint8_t*>(op.q);
  auto* s = static_cast<uint8_t*>(op.s);
  float amax = 0.0f;
  int64_t bad = -1;
  Q4_TRY(finite_scan(op.x, op.x_type, rows * k, ds, stream, &amax, &bad));
  if (bad >= 0) {
    op.bad_index = bad;
    return fail(Q4_ERR_NON_FINITE, "non-finite value (NaN or Inf) at flat index " + std::to_string(bad));
  }
  if (op.scale_layout == Q4_SCALE_SWIZZLED) {  // the padding of the tiles is zero, as on the CPU
    Q4_CK(cudaMemsetAsync(s, 0, static_cast<size_t>(q4::cuda::mxfp4_swizzled_scale_bytes(rows, k)), stream));
  }
  const int64_t nblocks = rows * (k / kMx);
  if (nblocks > 0) {
    const q4::cuda::Launch l = q4::cuda::blocks_launch(nblocks);
    mxfp4_quantize_kernel<<<l.blocks, l.threads, 0, stream>>>(op.x, op.x_type, rows, k, q, s,
                                                              op.scale_layout);
    Q4_CK(cudaGetLastError());
  }
  return Q4_OK;
}

int32_t mxfp4_dequantize(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  return dequantize(static_cast<const uint8_t*>(op.q), static_cast<const uint8_t*>(op.s), op.scale_layout, 0,
                    op.m, op.k, op.out, op.out_type, as_stream(op.stream));
}

// Float activations x MXFP4 weight: the block GEMV for few rows; else W
// dequantized to fp32 a tile of rows at a time, one cuBLASLt fp32 GEMM per
// tile (the plugin's paths for this op, not fallbacks).
int32_t mxfp4_linear(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  DeviceState& ds = lease.state();
  cudaStream_t stream = as_stream(op.stream);
  if (op.m == 0 || op.n == 0) return Q4_OK;
  const auto* wq = static_cast<const uint8_t*>(op.q);
  const auto* ws = static_cast<const uint8_t*>(op.s);
  if (op.m <= kGemvMaxRows && op.compute_path != Q4_PATH_DEQUANT_MATMUL_ONLY && block_gemv_fits(wq)) {
    return block_gemv<Mxfp4Blocks>(op.m, op.x, op.x_type, op.k, wq, ws, op.scale_layout, 1.0f, 1.0f, op.n,
                                   op.bias, op.bias_type, op.out, op.out_type, stream);
  }
  return dequant_then_gemm(ds, op, stream, [&](float* w32, int64_t row0, int64_t rows) {
    return dequantize(wq, ws, op.scale_layout, row0, rows, op.k, w32, NVFP4_CUDA_F32, stream);
  });
}

int32_t mxfp4_scaled_mm(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  DeviceState& ds = lease.state();
  cudaStream_t stream = as_stream(op.stream);
  const int64_t m = op.m, n = op.n, k = op.k;
  if (m == 0 || n == 0) return Q4_OK;
  const int32_t layout = op.scale_layout;
  const auto* aq = static_cast<const uint8_t*>(op.a_q);
  const auto* as = static_cast<const uint8_t*>(op.a_s);
  const auto* bq = static_cast<const uint8_t*>(op.q);
  const auto* bs = static_cast<const uint8_t*>(op.s);
  const bool dequant_only = op.compute_path == Q4_PATH_DEQUANT_MATMUL_ONLY;
  const q4::cuda::Mxfp4GemmRoute route = q4::cuda::mxfp4_scaled_mm_route(ds.cc_major, m, n, k, dequant_only);
  std::string why = route.why;
  DeviceBuffer sa, sb, y32;
  Q4_TRY(alloc(y32, static_cast<size_t>(m * n) * 4, stream));
  bool done = false;
  if (route.use_lt) {
    // The block-scaled GEMM: A = W (b operand of the call), B = X (a), one
    // UE8M0 byte per 32 elements in the 128x4 swizzled tiles (linear scales
    // are swizzled into scratch first; the padding is zero).
    const q4::cuda::LtGemmParams& p = route.params;
    const uint8_t* a_sw = nullptr;
    const uint8_t* b_sw = nullptr;
    Q4_TRY(lt_operand_scales(as, layout, m, k / 32, p.b_scale_bytes, sa, ds.sm_count, stream, &a_sw));
    Q4_TRY(lt_operand_scales(bs, layout, n, k / 32, p.a_scale_bytes, sb, ds.sm_count, stream, &b_sw));
    Q4_TRY(lt_gemm_fp4(ds, p, layout, aq, a_sw, bq, b_sw, op.alpha, y32.as<float>(), stream, &done, &why,
                       q4::cuda::LtElem::kFp4E2M1Mx));
  }
  float epilogue_alpha = 1.0f;  // the block-scaled GEMM applied alpha
  if (!done && !dequant_only && op.compute_path != Q4_PATH_KERNEL_ONLY && m <= kGemvMaxRows &&
      block_gemv_fits(bq)) {
    // Few rows: A dequantized, then the block GEMV on B with alpha in its
    // epilogue; B is never expanded.
    DeviceBuffer a32;
    Q4_TRY(alloc(a32, static_cast<size_t>(m * k) * 4, stream));
    Q4_TRY(dequantize(aq, as, layout, 0, m, k, a32.p, NVFP4_CUDA_F32, stream));
    op.used_fallback = 1;
    std::snprintf(op.fallback_reason, sizeof op.fallback_reason, "%s; ran dequantize(A) + the GEMV kernel",
                  why.c_str());
    return block_gemv<Mxfp4Blocks>(m, a32.p, NVFP4_CUDA_F32, k, bq, bs, layout, 1.0f, op.alpha, n, op.bias,
                                   op.bias_type, op.out, op.out_type, stream);
  }
  if (!done) {
    if (!dequant_only && op.compute_path == Q4_PATH_KERNEL_ONLY) return fail(Q4_ERR_UNSUPPORTED, why);
    DeviceBuffer a32, b32;
    Q4_TRY(alloc(a32, static_cast<size_t>(m * k) * 4, stream));
    Q4_TRY(alloc(b32, static_cast<size_t>(n * k) * 4, stream));
    Q4_TRY(dequantize(aq, as, layout, 0, m, k, a32.p, NVFP4_CUDA_F32, stream));
    Q4_TRY(dequantize(bq, bs, layout, 0, n, k, b32.p, NVFP4_CUDA_F32, stream));
    Q4_TRY(
        lt_gemm_f32(ds, m, n, k, a32.as<const float>(), b32.as<const float>(), y32.as<float>(), n, stream));
    epilogue_alpha = op.alpha;
    if (!dequant_only) {
      op.used_fallback = 1;
      std::snprintf(op.fallback_reason, sizeof op.fallback_reason, "%s; ran dequantize + GEMM", why.c_str());
    }
  }
  return epilogue(y32.as<const float>(), m, n, epilogue_alpha, op.bias, op.bias_type, op.out, op.out_type,
                  ds.sm_count, stream);
}

}  // namespace q4::cuda_plugin
