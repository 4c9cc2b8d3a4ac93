// NF4 on CUDA: quantize (bitsandbytes-compatible), dequantize and the
// weight-only linear (GEMV for small M, dequantize + cuBLASLt fp32 GEMM
// otherwise). Codebook: the caller's quant_map, or the NF4 codebook in
// constant memory.
#include "common.cuh"
#include "formats/nf4_block.h"
#include "lt_gemm.cuh"
#include "ops.cuh"

namespace q4::cuda_plugin {

namespace {

// The NF4 codebook in constant memory, filled from the shared codec when a
// device is first used (the values live once, in src/formats/codec.h).
__constant__ float kNf4Lut[16];

const float* default_lut() {
  void* p = nullptr;
  cudaGetSymbolAddress(&p, kNf4Lut);
  return static_cast<const float*>(p);
}

struct ElementLoader {
  const void* x;
  int32_t type;
  __device__ float operator()(int64_t i) const { return load_f(x, type, i); }
};

// One thread per NF4 block (formats/nf4_block.h).
__global__ void nf4_quantize_kernel(const void* x, int32_t type, int64_t n, int64_t bs, uint8_t* q,
                                    float* absmax) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t nblocks = (n + bs - 1) / bs;
  if (b >= nblocks) return;
  const int64_t lo = b * bs, hi = lo + bs < n ? lo + bs : n;
  q4::fmt::nf4_quantize_block(ElementLoader{x, type}, lo, hi, q, absmax + b);
}

// Elements [e0, e0 + n) of the flat tensor into out[0, n).
__global__ void nf4_dequantize_kernel(const uint8_t* q, const float* absmax, const float* lut, int64_t bs,
                                      int64_t e0, int64_t n, void* out, int32_t type) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = e0 + i;
    const uint8_t byte = q[e >> 1];
    const uint32_t code = (e & 1) ? (byte & 0xfu) : (byte >> 4);
    store_f(out, type, i, lut[code] * absmax[e / bs]);
  }
}

template <int M>
__global__ void nf4_gemv_kernel(const void* x, int32_t x_type, int64_t k, const uint8_t* wq,
                                const float* absmax, const float* lut, int64_t bs, int64_t n,
                                const void* bias, int32_t bias_type, void* out, int32_t out_type) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  float acc[M];
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  for (int64_t e = lane; e < k; e += 32) {
    const int64_t f = j * k + e;
    const uint8_t byte = wq[f >> 1];
    const float w = lut[(f & 1) ? (byte & 0xfu) : (byte >> 4)] * absmax[f / bs];
    for (int i = 0; i < M; ++i) acc[i] += load_f(x, x_type, i * k + e) * w;
  }
  for (int i = 0; i < M; ++i) {
    float v = acc[i];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) store_f(out, out_type, i * n + j, v + (bias ? load_f(bias, bias_type, j) : 0.0f));
  }
}

// The word-per-lane GEMV (the layout of block_gemv_kernel in common.cuh):
// each lane reads 8 codes (one 32-bit word, inside one absmax block when
// the block size is a multiple of 8) per step; the codebook in shared
// memory; element 2j in the high nibble (bitsandbytes).
template <int M, bool kVecX>
__global__ void nf4_gemv_word_kernel(const void* x, int32_t x_type, int64_t k, const uint8_t* wq,
                                     const float* absmax, const float* lut, int64_t bs, int64_t n,
                                     const void* bias, int32_t bias_type, void* out, int32_t out_type) {
  __shared__ float s_lut[16];
  if (threadIdx.x < 16) s_lut[threadIdx.x] = lut[threadIdx.x];
  __syncthreads();
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  const auto* row = reinterpret_cast<const uint32_t*>(wq + j * (k / 2));
  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  for (int64_t w = lane; w < k / 8; w += 32) {
    const uint32_t v = row[w];
    const int64_t e0 = w * 8;
    const float am = absmax[(j * k + e0) / bs];
    float wt[8];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const uint32_t byte = (v >> (8 * t)) & 0xffu;
      wt[2 * t] = s_lut[byte >> 4] * am;
      wt[2 * t + 1] = s_lut[byte & 0xfu] * am;
    }
    accumulate_word<M, kVecX>(x, x_type, k, e0, wt, acc);
  }
  store_rows<M>(acc, lane, j, n, 1.0f, bias, bias_type, out, out_type);
}

int32_t dequantize(const uint8_t* q, const float* absmax, const float* lut, int64_t bs, int64_t e0, int64_t n,
                   void* out, int32_t type, int32_t sm_count, cudaStream_t stream) {
  if (n == 0) return Q4_OK;
  const q4::cuda::Launch l = q4::cuda::elementwise_launch(n, sm_count);
  nf4_dequantize_kernel<<<l.blocks, l.threads, 0, stream>>>(q, absmax, lut, bs, e0, n, out, type);
  Q4_CK(cudaGetLastError());
  return Q4_OK;
}

}  // namespace

int32_t nf4_upload_codebook() {
  float lut[16];
  for (uint32_t c = 0; c < 16; ++c) lut[c] = q4::fmt::nf4_decode(c);
  Q4_CK(cudaMemcpyToSymbol(kNf4Lut, lut, sizeof lut));
  return Q4_OK;
}

int32_t nf4_quantize(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  DeviceState& ds = lease.state();
  cudaStream_t stream = as_stream(op.stream);
  const int64_t n = op.n, bs = op.blocksize;
  if (n == 0) return Q4_OK;
  // Only the finite check first: the per-block absmax comes from the kernel.
  int64_t bad = -1;
  Q4_TRY(finite_scan(op.x, op.x_type, n, ds, stream, nullptr, &bad));
  if (bad >= 0) {
    op.bad_index = bad;
    return fail(Q4_ERR_NON_FINITE, "non-finite value at flat index " + std::to_string(bad));
  }
  const q4::cuda::Launch l = q4::cuda::blocks_launch((n + bs - 1) / bs, 128);
  nf4_quantize_kernel<<<l.blocks, l.threads, 0, stream>>>(op.x, op.x_type, n, bs, static_cast<uint8_t*>(op.q),
                                                          op.absmax);
  Q4_CK(cudaGetLastError());
  return Q4_OK;
}

int32_t nf4_dequantize(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  const float* lut = op.quant_map != nullptr ? op.quant_map : default_lut();
  return dequantize(static_cast<const uint8_t*>(op.q), op.absmax, lut, op.blocksize, 0, op.n, op.out,
                    op.out_type, lease.state().sm_count, as_stream(op.stream));
}

int32_t nf4_linear(nvfp4_cuda_op& op) {
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  DeviceState& ds = lease.state();
  cudaStream_t stream = as_stream(op.stream);
  const int64_t m = op.m, n = op.n, k = op.k, bs = op.blocksize;
  const auto* wq = static_cast<const uint8_t*>(op.q);
  const float* absmax = op.absmax;
  const float* lut = op.quant_map != nullptr ? op.quant_map : default_lut();
  if (m == 0 || n == 0) return Q4_OK;
  if (m <= kGemvMaxRows && op.compute_path != Q4_PATH_DEQUANT_MATMUL_ONLY) {
    const q4::cuda::Launch l = q4::cuda::gemv_launch(n);
    if (k % 8 == 0 && bs % 8 == 0 && block_gemv_fits(wq)) {  // a word of codes per lane and step
      const bool vec_x = op.x_type == NVFP4_CUDA_F32 && reinterpret_cast<uintptr_t>(op.x) % 16 == 0;
      return gemv_dispatch(m, [&](auto mm) {
        if (vec_x) {
          nf4_gemv_word_kernel<decltype(mm)::value, true><<<l.blocks, l.threads, 0, stream>>>(
              op.x, op.x_type, k, wq, absmax, lut, bs, n, op.bias, op.bias_type, op.out, op.out_type);
        } else {
          nf4_gemv_word_kernel<decltype(mm)::value, false><<<l.blocks, l.threads, 0, stream>>>(
              op.x, op.x_type, k, wq, absmax, lut, bs, n, op.bias, op.bias_type, op.out, op.out_type);
        }
      });
    }
    return gemv_dispatch(m, [&](auto mm) {  // odd K or block size, or an unaligned weight view
      nf4_gemv_kernel<decltype(mm)::value><<<l.blocks, l.threads, 0, stream>>>(
          op.x, op.x_type, k, wq, absmax, lut, bs, n, op.bias, op.bias_type, op.out, op.out_type);
    });
  }
  // Rows [row0, row0 + rows) of W are elements [row0 * k, (row0 + rows) * k).
  return dequant_then_gemm(ds, op, stream, [&](float* w32, int64_t row0, int64_t rows) {
    return dequantize(wq, absmax, lut, bs, row0 * k, rows * k, w32, NVFP4_CUDA_F32, ds.sm_count, stream);
  });
}

}  // namespace q4::cuda_plugin
