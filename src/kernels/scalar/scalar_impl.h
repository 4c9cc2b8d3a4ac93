// Portable kernel pieces that SIMD tables reuse for shapes their fast paths
// do not cover (compiled once, in kernels_scalar.cpp, with baseline flags).
#pragma once

#include "kernels/kernel_table.h"

namespace q4::kern::scalar {

void nvfp4_gemv(const float* x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float* y,
                int64_t ldy);
void nf4_gemv(const float* x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, float* y,
              int64_t ldy);
void nvfp4_panel_nr(const NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                    int32_t nr);
void nf4_panel_nr(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                  int32_t nr);
void f32_panel_nr(const float* w, int64_t ldw, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                  int32_t nr);
void nvfp4_quantize(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s);
void nvfp4_dequantize(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k, float* out);
float amax(const float* x, int64_t n);

}  // namespace q4::kern::scalar
