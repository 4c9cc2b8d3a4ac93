// Portable production kernels, compiled once with the baseline flags of the
// target. Two groups:
//  - operations the library always runs on this code (no SIMD variant):
//    NF4 quantize / dequantize / double quantization, scale swizzling, the
//    fp16/bf16/fp32 row conversions;
//  - q4::kern::portable: the table entries every ISA table starts from. The
//    table builder (complete_table, table_builder.cpp) puts them wherever an
//    ISA file provides no kernel of its own; the scalar table is made of
//    nothing else.
// The scalar *reference* the tests compare every table with is not here: it
// lives in src/kernels/ref/ and is compiled into the tests only.
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"
#include "kernels/kernel_types.h"

namespace q4::kern {

// NF4: x (n elements) -> q (ceil(n/2) bytes, element 2j in the high nibble)
// and one fp32 absmax per block. For an odd n the spare low nibble of the
// last byte holds code 7 (the code of 0.0), as bitsandbytes writes it.
// NaN/Inf are coded as the reference codes them; false when there was one.
bool nf4_quantize(FloatPtr x, int64_t n, int64_t blocksize, uint8_t* q, float* absmax);
// Blocks [b0, b1) of it (each block's bytes and absmax depend on that block
// only: the drivers split the blocks over threads).
bool nf4_quantize_blocks(FloatPtr x, int64_t n, int64_t blocksize, int64_t b0, int64_t b1, uint8_t* q,
                         float* absmax);

// Double quantization of absmax (nblocks values) into 8-bit codes of the
// signed dynamic map (written to nested_map, 256 entries), one nested absmax
// per 256 blocks, and the mean offset.
void nf4_double_quantize(const float* absmax, int64_t nblocks, uint8_t* qabsmax, float* nested_absmax,
                         float* nested_map, float* offset);

// NVFP4 block scales [rows, cols] between the linear layout and the swizzled
// (128x4-tiled) one; swizzle_scales zeroes the padding of `sw`.
void swizzle_scales(const uint8_t* lin, int64_t rows, int64_t cols, uint8_t* sw);
void unswizzle_scales(const uint8_t* sw, int64_t rows, int64_t cols, uint8_t* lin);
// The same bytes, the rows written in order: for a destination that is in
// cache already (a task's scratch block), where it is faster; into fresh
// memory unswizzle_scales is (see copy_swizzle_groups).
void unswizzle_scales_cached(const uint8_t* sw, int64_t rows, int64_t cols, uint8_t* lin);

// Activation operands of the integer path (KernelTable::i8_micro), k % 16
// == 0: rows of fp32 x quantized per block of 16 (the fast-mode rule:
// scale amax/127, round half away from zero; a non-finite block gets a NaN
// scale and zero codes), or rows of NVFP4 codes/linear scales (W4A4: E2M1x2
// values and the E4M3 scales, exact).
// `bias` is the weight bias of the operands (kI8WeightBias, kI8Nf4Bias).
void i8_activations_quantize(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* xq, int64_t ldxq,
                             float* xs, int32_t* xc, int64_t ldxs, int32_t bias = kI8WeightBias);

// The NF4 codebook of the integer path: c = max |lut|, code_j = round half
// away from zero(lut_j * 63 / c) in [-63, 63], stored biased (+kI8Nf4Bias);
// post = c / 63 (the factor the integer sums are multiplied by). ok is false
// when lut has a non-finite value or is all zero (fast mode then runs
// exact). Per element |lut_j - code_j * post| <= c / 126.
struct I8Nf4Code {
  uint8_t biased[16] = {};
  float post = 0.0f;
  bool ok = false;
};
I8Nf4Code i8_nf4_codebook(const float* lut);
void i8_activations_nvfp4(const uint8_t* q, const uint8_t* s, int64_t m, int64_t k, int8_t* xq, int64_t ldxq,
                          float* xs, int32_t* xc, int64_t ldxs);

namespace portable {

// Entry contracts: see KernelTable. The *_panel_nr functions take the panel
// width explicitly; the builder binds it to the table's panel_nr.
void nvfp4_gemv(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float* y,
                int64_t ldy);
void nf4_gemv(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, float* y,
              int64_t ldy);
void nvfp4_small(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, int64_t k0,
                 int64_t k1, float* y, int64_t ldy, int64_t kc);
void nf4_small(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, int64_t k0,
               int64_t k1, float* y, int64_t ldy, int64_t kc);
void nvfp4_panel_nr(const NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                    int32_t nr);
void nf4_panel_nr(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                  int32_t nr);
void f32_panel_nr(const float* w, int64_t ldw, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                  int32_t nr);
void nvfp4_quantize(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s);
void nvfp4_dequantize(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k, float* out);
void mxfp4_dequantize(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t k, float* out);
void nf4_dequantize(const uint8_t* q, const float* lut, const float* absmax, int64_t blocksize, int64_t n,
                    float* out);
bool mxfp4_quantize(const float* x, int64_t rows, int64_t k, uint8_t* q, uint8_t* s);
float amax(const float* x, int64_t n);
void i8_pack_nvfp4(const NvWeights& w, int64_t n0, int32_t rows, int64_t b0, int64_t nb, uint8_t* wq,
                   float* ws);
void i8_pack_nf4(const Nf4Weights& w, const uint8_t* code, int64_t n0, int32_t rows, int64_t b0, int64_t nb,
                 uint8_t* wq, float* ws);
double i8_probe(int64_t iters);
void i8_micro(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs, int32_t mr,
              const uint8_t* wq, const float* ws, int64_t nb, float* y, int64_t ldy, int32_t nr,
              bool accumulate);
uint32_t absmax_bits(const float* x, int64_t n);

}  // namespace portable
}  // namespace q4::kern
