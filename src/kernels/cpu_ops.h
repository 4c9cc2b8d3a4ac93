// Multi-threaded drivers around the kernel table: split the work, block it
// for the caches, call the table's kernels.
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"

namespace q4::kern {

// Cache blocking of the panel GEMM (the tuner's parameters).
struct GemmBlocking {
  int64_t kc = 256;  // K per packed panel
  int64_t mc = 96;   // rows of X per pass over a panel column
};

// The blocking in force: tuned for this CPU when a tuning result is loaded,
// else the defaults.
GemmBlocking gemm_blocking();
void set_gemm_blocking(const GemmBlocking& b);

// y[m, n] = x[m, k] . W^T (fp32 accumulation). m <= kGemvMaxRows uses the
// fused GEMV kernels, larger m the packed-panel GEMM.
void linear_nvfp4(const KernelTable& kt, const float* x, int64_t m, const NvWeights& w, int64_t n, float* y,
                  int32_t threads);
void linear_nf4(const KernelTable& kt, const float* x, int64_t m, const Nf4Weights& w, int64_t n, float* y,
                int32_t threads);
// y[m, n] = x[m, k] . w[n, k]^T for fp32 w (the dequant-matmul backend).
void gemm_f32(const KernelTable& kt, const float* x, int64_t m, int64_t k, const float* w, int64_t n,
              float* y, int32_t threads, const GemmBlocking& blocking);

// Fast math mode: activations quantized on the fly to int8 per block of 16
// (scale amax/127, round half away from zero), then integer dot products
// with the E2M1 weights (NVFP4) or int8 x fp32-codebook products (NF4).
// Error: |y - y_exact| <= sum_b (xs_b / 2) * sum_{k in b} |w_k| (+ fp32
// rounding), xs_b = amax_b(x) / 127.
void linear_nvfp4_fast(const float* x, int64_t m, const NvWeights& w, int64_t n, float* y, int32_t threads);
void linear_nf4_fast(const float* x, int64_t m, const Nf4Weights& w, int64_t n, float* y, int32_t threads);

void quantize_nvfp4(const KernelTable& kt, const float* x, int64_t rows, int64_t k, float g, uint8_t* q,
                    uint8_t* s, int32_t threads);
void dequantize_nvfp4(const KernelTable& kt, const uint8_t* q, const uint8_t* s, float g, int64_t rows,
                      int64_t k, float* out, int32_t threads);
float amax(const KernelTable& kt, const float* x, int64_t n, int32_t threads);

}  // namespace q4::kern
