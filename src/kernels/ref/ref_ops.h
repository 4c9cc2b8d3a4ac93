// Scalar reference implementations (SPEC §1, §2.3). Simple and obviously
// right: every faster kernel is tested against these. Products accumulate in
// double, so the reference is at least as accurate as any fp32 kernel.
#pragma once

#include <cstdint>

#include "kernels/kernel_types.h"

namespace q4::ref {

using kern::FloatOut;
using kern::FloatPtr;
using kern::Nf4Stats;
using kern::ScaleView;

// max |x| over n elements (finite input).
float amax(FloatPtr x, int64_t n);

// NVFP4: x [rows, k] -> q [rows, k/2] bytes, scales written through `scale`
// (a swizzled buffer must already be zeroed by the caller for its padding).
void nvfp4_quantize(FloatPtr x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* scale, int32_t layout);

void nvfp4_dequantize(const uint8_t* q, ScaleView scale, float g, int64_t rows, int64_t k, FloatOut out);

// out[m, n] = alpha * sum_k deqA[m,k] * deqB[n,k] (+ bias[n]).
void nvfp4_scaled_mm(const uint8_t* a_q, ScaleView a_s, const uint8_t* b_q, ScaleView b_s, int64_t m,
                     int64_t n, int64_t k, float alpha, const FloatPtr* bias, FloatOut out);

// out[m, n] = sum_k x[m,k] * deqW[n,k] (+ bias[n]).
void nvfp4_linear(FloatPtr x, int64_t m, int64_t k, const uint8_t* w_q, ScaleView w_s, float g, int64_t n,
                  const FloatPtr* bias, FloatOut out);

// NF4: x (n elements) -> q (ceil(n/2) bytes, element 2j high nibble), absmax.
void nf4_quantize(FloatPtr x, int64_t n, int64_t blocksize, uint8_t* q, float* absmax);

void nf4_dequantize(const uint8_t* q, const Nf4Stats& st, int64_t n, FloatOut out);

void nf4_scaled_mm(FloatPtr x, int64_t m, int64_t k, const uint8_t* w_q, const Nf4Stats& st, int64_t n,
                   const FloatPtr* bias, FloatOut out);

// Double quantization of absmax (nblocks values) into 8-bit codes.
void nf4_double_quantize(const float* absmax, int64_t nblocks, uint8_t* qabsmax, float* nested_absmax,
                         float* nested_map, float* offset);

// The 256-entry signed dynamic map used for double quantization.
void dynamic_map_signed(float* map256);

// out[m, n] = alpha * sum_k a[m,k] * b[n,k] (+ bias[n]) on fp32 operands
// (the GEMM of the dequant-matmul backend).
void matmul_nt_f32(const float* a, int64_t m, int64_t k, const float* b, int64_t n, float alpha,
                   const FloatPtr* bias, FloatOut out);

void swizzle(const uint8_t* linear, int64_t rows, int64_t cols, uint8_t* swizzled);
void unswizzle(const uint8_t* swizzled, int64_t rows, int64_t cols, uint8_t* linear);

}  // namespace q4::ref
