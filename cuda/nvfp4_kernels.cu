// NVFP4 on CUDA: quantize, dequantize, weight-only linear (GEMV for small M,
// dequantize + cuBLASLt fp32 GEMM otherwise) and W4A4 scaled_mm (cuBLASLt
// block-scaled FP4; where it cannot run, A dequantized + the block GEMV for
// few rows, both operands dequantized + the fp32 GEMM for more).
#include <cstdio>

#include "common.cuh"
#include "lt_gemm.cuh"
#include "ops.cuh"

namespace q4::cuda_plugin {

namespace {

// One thread per 16-element block, through the shared codec.
__global__ void nvfp4_quantize_kernel(const void* x, int32_t type, int64_t rows, int64_t k, float g,
                                      uint8_t* q, uint8_t* s, int32_t layout) {
  const int64_t cols = k / 16;
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= rows * cols) return;
  const int64_t r = b / cols, c = b % cols;
  float v[16];
  float bmax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    v[j] = load_f(x, type, b * 16 + j);
    bmax = fmaxf(bmax, fabsf(v[j]));
  }
  const uint32_t code = q4::fmt::nvfp4_block_scale_code(bmax, g);
  const float d = q4::fmt::nvfp4_block_divisor(code, g);
  s[scale_index(r, c, cols, layout)] = static_cast<uint8_t>(code);
  for (int j = 0; j < 16; j += 2) {
    const uint32_t lo = q4::fmt::nvfp4_encode_element(v[j], d);
    const uint32_t hi = q4::fmt::nvfp4_encode_element(v[j + 1], d);
    q[b * 8 + j / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Rows [row0, row0 + rows) of the matrix into out[0, rows * k).
__global__ void nvfp4_dequantize_kernel(const uint8_t* q, const uint8_t* s, int32_t layout, float g,
                                        int64_t row0, int64_t rows, int64_t k, void* out, int32_t type) {
  const int64_t cols = k / 16;
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= rows * cols) return;
  const uint32_t sc = s[scale_index(row0 + b / cols, b % cols, cols, layout)];
  for (int j = 0; j < 16; j += 2) {
    const uint8_t byte = q[(row0 * cols + b) * 8 + j / 2];
    store_f(out, type, b * 16 + j, q4::fmt::nvfp4_decode_element(byte & 0xfu, sc, g));
    store_f(out, type, b * 16 + j + 1, q4::fmt::nvfp4_decode_element(byte >> 4, sc, g));
  }
}

// Weight-only GEMV (M <= 8): one warp per output feature, weights decoded in
// registers, fp32 accumulation, warp-shuffle reduction.
template <int M>
__global__ void nvfp4_gemv_kernel(const void* x, int32_t x_type, int64_t k, const uint8_t* wq,
                                  const uint8_t* ws, int32_t layout, float g, int64_t n, const void* bias,
                                  int32_t bias_type, void* out, int32_t out_type) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  const int64_t cols = k / 16;
  float acc[M];
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  for (int64_t e = 2 * lane; e < k; e += 64) {
    const uint8_t byte = wq[(j * k + e) / 2];
    const uint32_t sc = ws[scale_index(j, e / 16, cols, layout)];
    const float w0 = q4::fmt::nvfp4_decode_element(byte & 0xfu, sc, g);
    const float w1 = q4::fmt::nvfp4_decode_element(byte >> 4, sc, g);
    for (int i = 0; i < M; ++i)
      acc[i] += load_f(x, x_type, i * k + e) * w0 + load_f(x, x_type, i * k + e + 1) * w1;
  }
  for (int i = 0; i < M; ++i) {
    float v = acc[i];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) store_f(out, out_type, i * n + j, v + (bias ? load_f(bias, bias_type, j) : 0.0f));
  }
}

// Rows [row0, row0 + rows) of an NVFP4 matrix with rows of k (scales in
// `layout`, global scale g) to `type`.
int32_t dequantize(const uint8_t* q, const uint8_t* s, int32_t layout, float g, int64_t row0, int64_t rows,
                   int64_t k, void* out, int32_t type, cudaStream_t stream) {
  const int64_t nblocks = rows * (k / 16);
  if (nblocks == 0) return Q4_OK;
  const q4::cuda::Launch l = q4::cuda::blocks_launch(nblocks);
  nvfp4_dequantize_kernel<<<l.blocks, l.threads, 0, stream>>>(q, s, layout, g, row0, rows, k, out, type);
  Q4_CK(cudaGetLastError());
  return Q4_OK;
}

}  // namespace

int32_t nvfp4_quantize(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  DeviceState& ds = lease.state();
  cudaStream_t stream = as_stream(op.stream);
  const int64_t rows = op.m, k = op.k;
  auto* q = static_cast<uint8_t*>(op.q);
  auto* s = static_cast<uint8_t*>(op.s);
  // amax and the first non-finite index in one pass (the host needs both
  // before any output is written).
  float amax = 0.0f;
  int64_t bad = -1;
  Q4_TRY(finite_scan(op.x, op.x_type, rows * k, ds, stream, &amax, &bad));
  if (bad >= 0) {
    op.bad_index = bad;
    return fail(Q4_ERR_NON_FINITE, "non-finite value (NaN or Inf) at flat index " + std::to_string(bad));
  }
  const float used = op.global_scale > 0.0f ? op.global_scale : q4::fmt::nvfp4_global_scale_from_amax(amax);
  op.global_scale_used = used;
  if (op.scale_layout == Q4_SCALE_SWIZZLED) {
    Q4_CK(cudaMemsetAsync(
        s, 0, static_cast<size_t>(q4::fmt::swizzled_rows(rows) * q4::fmt::swizzled_cols(k / 16)), stream));
  }
  const int64_t nblocks = rows * (k / 16);
  if (nblocks > 0) {
    const q4::cuda::Launch l = q4::cuda::blocks_launch(nblocks);
    nvfp4_quantize_kernel<<<l.blocks, l.threads, 0, stream>>>(op.x, op.x_type, rows, k, used, q, s,
                                                              op.scale_layout);
    Q4_CK(cudaGetLastError());
  }
  return Q4_OK;
}

int32_t nvfp4_dequantize(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  return dequantize(static_cast<const uint8_t*>(op.q), static_cast<const uint8_t*>(op.s), op.scale_layout,
                    op.global_scale, 0, op.m, op.k, op.out, op.out_type, as_stream(op.stream));
}

int32_t nvfp4_linear(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  DeviceState& ds = lease.state();
  cudaStream_t stream = as_stream(op.stream);
  const int64_t m = op.m, n = op.n, k = op.k;
  const auto* wq = static_cast<const uint8_t*>(op.q);
  const auto* ws = static_cast<const uint8_t*>(op.s);
  if (m == 0 || n == 0) return Q4_OK;
  if (m <= kGemvMaxRows && op.compute_path != Q4_PATH_DEQUANT_MATMUL_ONLY) {
    if (block_gemv_fits(wq)) {  // a 32-bit word of codes per lane and step
      return block_gemv<Nvfp4Blocks>(m, op.x, op.x_type, k, wq, ws, op.scale_layout, op.global_scale, 1.0f, n,
                                     op.bias, op.bias_type, op.out, op.out_type, stream);
    }
    const q4::cuda::Launch l = q4::cuda::gemv_launch(n);  // a weight view not 4-byte aligned
    return gemv_dispatch(m, [&](auto mm) {
      nvfp4_gemv_kernel<decltype(mm)::value>
          <<<l.blocks, l.threads, 0, stream>>>(op.x, op.x_type, k, wq, ws, op.scale_layout, op.global_scale,
                                               n, op.bias, op.bias_type, op.out, op.out_type);
    });
  }
  // Large M: W dequantized to fp32 a tile of rows at a time, cuBLASLt fp32 GEMM per tile.
  return dequant_then_gemm(ds, op, stream, [&](float* w32, int64_t row0, int64_t rows) {
    return dequantize(wq, ws, op.scale_layout, op.global_scale, row0, rows, k, w32, NVFP4_CUDA_F32, stream);
  });
}

// W4A4: cuBLASLt block-scaled FP4 (A = W, B = X, TN), global scales folded
// into alpha by the caller, fp32 accumulation, bias in the epilogue. When
// cuBLASLt cannot run it: Q4_ERR_UNSUPPORTED under Q4_PATH_KERNEL_ONLY,
// otherwise dequantize both operands (block scales only) + fp32 GEMM,
// reported in used_fallback / fallback_reason.
int32_t nvfp4_scaled_mm(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  DeviceState& ds = lease.state();
  cudaStream_t stream = as_stream(op.stream);
  const int64_t m = op.m, n = op.n, k = op.k;
  const int32_t layout = op.scale_layout;
  const auto* aq = static_cast<const uint8_t*>(op.a_q);
  const auto* as = static_cast<const uint8_t*>(op.a_s);
  const auto* bq = static_cast<const uint8_t*>(op.q);
  const auto* bs = static_cast<const uint8_t*>(op.s);
  if (m == 0 || n == 0) return Q4_OK;
  const q4::cuda::LtGemmParams p = q4::cuda::lt_fp4_gemm_params(m, n, k);
  DeviceBuffer sa, sb, y32;
  const uint8_t* a_sw = as;
  const uint8_t* b_sw = bs;
  if (p.valid) {  // cuBLASLt reads swizzled scales only
    Q4_TRY(lt_operand_scales(as, layout, m, k / 16, p.b_scale_bytes, sa, ds.sm_count, stream, &a_sw));
    Q4_TRY(lt_operand_scales(bs, layout, n, k / 16, p.a_scale_bytes, sb, ds.sm_count, stream, &b_sw));
  }
  Q4_TRY(alloc(y32, static_cast<size_t>(m * n) * 4, stream));
  // DequantMatmulOnly is a choice: straight to dequantize + GEMM, no fallback.
  const bool dequant_only = op.compute_path == Q4_PATH_DEQUANT_MATMUL_ONLY;
  bool done = false;
  std::string why = p.valid ? "" : p.why_invalid;
  if (p.valid && !dequant_only)
    Q4_TRY(lt_gemm_fp4(ds, p, layout, aq, a_sw, bq, b_sw, op.alpha, y32.as<float>(), stream, &done, &why));
  float epilogue_alpha = 1.0f;
  if (!done && op.compute_path != Q4_PATH_KERNEL_ONLY && !dequant_only && m <= kGemvMaxRows &&
      block_gemv_fits(bq)) {
    // Few rows: A dequantized (block scales only), then the block GEMV on B
    // with alpha in its epilogue; B is never expanded.
    DeviceBuffer a32;
    Q4_TRY(alloc(a32, static_cast<size_t>(m * k) * 4, stream));
    Q4_TRY(dequantize(aq, as, layout, 1.0f, 0, m, k, a32.p, NVFP4_CUDA_F32, stream));
    op.used_fallback = 1;
    std::snprintf(op.fallback_reason, sizeof op.fallback_reason, "%s; ran dequantize(A) + the GEMV kernel",
                  why.c_str());
    return block_gemv<Nvfp4Blocks>(m, a32.p, NVFP4_CUDA_F32, k, bq, bs, layout, 1.0f, op.alpha, n, op.bias,
                                   op.bias_type, op.out, op.out_type, stream);
  }
  if (!done) {
    if (op.compute_path == Q4_PATH_KERNEL_ONLY) return fail(Q4_ERR_UNSUPPORTED, why);
    DeviceBuffer a32, b32;
    Q4_TRY(alloc(a32, static_cast<size_t>(m * k) * 4, stream));
    Q4_TRY(alloc(b32, static_cast<size_t>(n * k) * 4, stream));
    Q4_TRY(dequantize(aq, as, layout, 1.0f, 0, m, k, a32.p, NVFP4_CUDA_F32, stream));
    Q4_TRY(dequantize(bq, bs, layout, 1.0f, 0, n, k, b32.p, NVFP4_CUDA_F32, stream));
    Q4_TRY(
        lt_gemm_f32(ds, m, n, k, a32.as<const float>(), b32.as<const float>(), y32.as<float>(), n, stream));
    epilogue_alpha = op.alpha;
    if (!dequant_only) {
      op.used_fallback = 1;
      std::snprintf(op.fallback_reason, sizeof op.fallback_reason, "%s", why.c_str());
    }
  }
  return epilogue(y32.as<const float>(), m, n, epilogue_alpha, op.bias, op.bias_type, op.out, op.out_type,
                  ds.sm_count, stream);
}

}  // namespace q4::cuda_plugin
