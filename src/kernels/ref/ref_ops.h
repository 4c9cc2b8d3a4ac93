// The scalar reference of the CPU kernel table, for the tests only (compiled
// into the test binary, not the library). One obviously correct loop per
// table entry, on the entry's own operands: decoding and quantization go
// element by element through the codec (src/formats/codec.h), products are
// accumulated in double. The tests force every kernel table this CPU runs
// and compare each entry with these: bit-exact where the entry is exact
// (quantize, dequantize, panels, amax), within the exact-mode bound for
// products.
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"

namespace q4::ref {

// One weight of an NVFP4 [N, K] matrix: (e2m1 * e4m3) * g, element 2j in the
// low nibble.
float nvfp4_weight(const kern::NvWeights& w, int64_t row, int64_t col);
// One weight of an NF4 matrix: lut[code] * absmax[block], element 2j in the
// high nibble.
float nf4_weight(const kern::Nf4Weights& w, int64_t row, int64_t col);

// An fp64 product and the sum of |terms| (the scale of its error bound).
struct Dot {
  double value = 0;
  double magnitude = 0;
};

// sum_k x[i*ldx + k] * w(j, k) for the GEMV entries.
Dot nvfp4_dot(const float* x, const kern::NvWeights& w, int64_t j);
Dot nf4_dot(const float* x, const kern::Nf4Weights& w, int64_t j);
// sum_{kk<kc} x[kk] * panel[kk*nr + r] for gemm_micro.
Dot panel_dot(const float* x, const float* panel, int64_t kc, int32_t nr, int32_t r);

// The exact-mode bound of an fp32 product of length k: (k + 16) 2^-24 sum|x w|.
double product_bound(int64_t k, double magnitude);

// Panels: W rows [n0, n0+rows) x columns [k0, k0+kc) at panel[kk*nr + r],
// rows >= `rows` zero.
void nvfp4_panel(const kern::NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                 int32_t nr);
void nf4_panel(const kern::Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
               int32_t nr);
void f32_panel(const float* w, int64_t ldw, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
               int32_t nr);

// NVFP4 quantization with linear scales, element by element through the codec.
void nvfp4_quantize(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s);
void nvfp4_dequantize(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k, float* out);

float amax(const float* x, int64_t n);

// The integer path (W4A4 and fast mode), in plain element order: int8
// activations per block of 16 (xq [m, k], xs [m, k/16]) times the E2M1x2
// weights, int32 block sums, then per output the one fixed fp32 sequence
// acc = fma(float(dot_b), xs_b * ws_b, acc) over b ascending, y = acc * post.
// Every ISA's integer kernels must match this bit for bit.
void i8_product(const int8_t* xq, const float* xs, int64_t m, const kern::NvWeights& w, int64_t n, float post,
                float* y);
// Fast-mode activation quantization (scale amax/127, round half away from
// zero; non-finite block: NaN scale, zero codes).
void i8_quantize(const float* x, int64_t m, int64_t k, int8_t* xq, float* xs);
// W4A4 activations: E2M1x2 values and E4M3 scales of an NVFP4 [m, k].
void i8_from_nvfp4(const uint8_t* q, const uint8_t* s, int64_t m, int64_t k, int8_t* xq, float* xs);

}  // namespace q4::ref
