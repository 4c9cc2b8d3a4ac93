// The CPU kernel table (STYLE rule 10): one table per ISA, each built in its
// own translation unit with its own compile flags, picked once from CPUID /
// HWCAP and the ISA cap. Every entry has the same contract in every table;
// tests force each table and compare it with the scalar reference.
//
// Conventions: activations are fp32 (callers convert fp16/bf16 first), NVFP4
// block scales are linear [rows, K/16] (callers unswizzle first), NF4 absmax
// are resolved to fp32 per block.
#pragma once

#include <cstdint>

namespace q4::kern {

// NVFP4 weight [N, K]: row r is q + r*K/2 (element 2j low nibble) and
// s + r*K/16 (E4M3 codes); g is the global scale (a multiplier).
struct NvWeights {
  const uint8_t* q = nullptr;
  const uint8_t* s = nullptr;
  float g = 1.0f;
  int64_t k = 0;
};

// NF4 weight of N*K elements (flat blocks of `blocksize`, element 2j in the
// high nibble), absmax resolved to fp32, lut = 16 code values.
struct Nf4Weights {
  const uint8_t* q = nullptr;
  const float* absmax = nullptr;
  const float* lut = nullptr;
  int64_t k = 0;
  int64_t blocksize = 64;
  int32_t block_shift = 6;  // log2(blocksize): blocksize is a power of two
};

// Largest M the fused GEMV kernels take in one call.
constexpr int kGemvMaxRows = 8;

struct KernelTable {
  int32_t isa = 0;
  int32_t panel_nr = 8;  // rows of W per packed panel (lanes of the micro-kernel)
  int32_t micro_mr = 4;  // rows of X per micro-kernel call (max)

  // y[i*ldy + (j - n0)] = sum_k x[i*ldx + k] * w(j, k) for i < m <= 8,
  // j in [n0, n1). Weight values are (e2m1 * s) * g; fp32 accumulation.
  void (*nvfp4_gemv)(const float* x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1,
                     float* y, int64_t ldy) = nullptr;
  // Same for NF4 (requires K % 32 == 0; the driver falls back otherwise).
  void (*nf4_gemv)(const float* x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1,
                   float* y, int64_t ldy) = nullptr;

  // Packs W rows [n0, n0+rows) x columns [k0, k0+kc) as fp32 into
  // panel[kk * panel_nr + r]; rows >= `rows` are zero.
  void (*nvfp4_panel)(const NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc,
                      float* panel) = nullptr;
  void (*nf4_panel)(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc,
                    float* panel) = nullptr;
  void (*f32_panel)(const float* w, int64_t ldw, int64_t n0, int32_t rows, int64_t k0, int64_t kc,
                    float* panel) = nullptr;

  // y[i*ldy + r] (+)= sum_{kk<kc} x[i*ldx + kk] * panel[kk*panel_nr + r],
  // i < mr <= micro_mr, r < nr <= panel_nr; accumulate=false overwrites.
  void (*gemm_micro)(const float* x, int64_t ldx, int32_t mr, const float* panel, int64_t kc, float* y,
                     int64_t ldy, int32_t nr, bool accumulate) = nullptr;

  // Bit-exact NVFP4 quantization of rows x [rows, K] (SPEC 1.3) with linear
  // scales; and dequantization to fp32 rows.
  void (*nvfp4_quantize)(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) = nullptr;
  void (*nvfp4_dequantize)(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k,
                           float* out) = nullptr;
  // max |x_i| (finite input).
  float (*amax)(const float* x, int64_t n) = nullptr;

  // Benchmark probe: `iters` rounds of independent fp32 FMAs at this ISA's
  // vector width; returns the flops executed (the caller times it).
  double (*fma_probe)(int64_t iters) = nullptr;
};

const KernelTable& scalar_table();
#if defined(__x86_64__)
const KernelTable& avx2_table();
const KernelTable& avx512_table();
#endif
#if defined(__aarch64__)
const KernelTable& neon_table();
#endif

// The table for the active ISA (cap + CPU), looked up per call (cheap).
const KernelTable& active_table();

}  // namespace q4::kern
