// Integer block-dot-product kernels for AVX2 (KernelTable::i8_pack_nvfp4
// and i8_micro): vpmaddubsw (u8 biased E2M1x2 weights <= 24 times s8
// activations, |pair sum| <= 6096: no int16 saturation) + vpmaddwd with
// ones. Included by the AVX2 translation unit only (its flags, internal
// linkage); the fixed fp32 sequence of KernelTable::i8_micro makes it
// bit-identical to every other table.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "formats/codec.h"
#include "kernels/avx2/int8_gemv_avx2.h"
#include "kernels/isa_common.h"
#include "kernels/kernel_table.h"

namespace q4::kern {
namespace {

constexpr int32_t kI8MR2 = 2;  // rows of X per micro-kernel call: 2 x (2 fp32 + 2 int32) ymm accumulators

struct E4m3Table2 {
  float v[256];
  E4m3Table2() {
    for (uint32_t c = 0; c < 256; ++c) v[c] = fmt::e4m3_decode(c);
  }
};

// Two blocks (or one) of 8 panel rows (`src`): row g + 4L in lane L of
// z[g]; a 4x4 dword transpose inside the lanes gives T_d = dword d of the 8
// rows in order, whose low / high nibbles are the steps 2(d%2), 2(d%2)+1
// of block d/2 (32 bytes: half of a step's 64).
// kEvenLow: the even elements are the low nibbles (NVFP4), else the high
// ones (NF4).
template <bool kEvenLow>
inline void i8_pack_avx2_half(const uint8_t* const* src, bool two, __m256i lut, uint8_t* out) {
  __m256i z[4];
  for (int g = 0; g < 4; ++g) {
    const uint8_t* p0 = src[g];
    const uint8_t* p1 = src[g + 4];
    const __m128i l0 = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0))
                           : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0));
    const __m128i l1 = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1))
                           : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1));
    z[g] = _mm256_inserti128_si256(_mm256_castsi128_si256(l0), l1, 1);
  }
  __m256i T[4];
  i8y_transpose_dwords(z, T);
  const __m256i nib = _mm256_set1_epi8(0x0f);
  for (int64_t d = 0; d < (two ? 4 : 2); ++d) {
    const __m256i lo = _mm256_and_si256(T[d], nib);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(T[d], 4), nib);
    uint8_t* dst = out + (d / 2) * 256 + (d % 2) * 128;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_shuffle_epi8(lut, kEvenLow ? lo : hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64), _mm256_shuffle_epi8(lut, kEvenLow ? hi : lo));
  }
}

// The codes of a 16-row panel as two 8-row halves (rows >= `rows` read
// `pad`), two blocks at a time; `lut` maps nibbles to biased int8 values.
template <bool kEvenLow>
void i8_pack_codes_avx2(const uint8_t* q, int64_t k, int64_t n0, int32_t rows, int64_t b0, int64_t nb,
                        const uint8_t* lut16, const uint8_t* pad, uint8_t* wq) {
  const __m128i l128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lut16));
  const __m256i lut = _mm256_inserti128_si256(_mm256_castsi128_si256(l128), l128, 1);
  const int64_t rb = k / 2;
  const uint8_t* src[16];
  for (int64_t b = 0; b < nb; b += 2) {
    const bool two = b + 2 <= nb;
    for (int r = 0; r < 16; ++r) src[r] = r < rows ? q + (n0 + r) * rb + (b0 + b) * 8 : pad;
    i8_pack_avx2_half<kEvenLow>(src, two, lut, wq + b * 256);
    i8_pack_avx2_half<kEvenLow>(src + 8, two, lut, wq + b * 256 + 32);
  }
}

void i8_pack_nvfp4_avx2(const NvWeights& w, int64_t n0, int32_t rows, int64_t b0, int64_t nb, uint8_t* wq,
                        float* ws) {
  alignas(16) static const uint8_t zeros[16] = {};
  static const E4m3Table2 dec;
  alignas(16) uint8_t lv[16];
  for (uint32_t c = 0; c < 16; ++c) lv[c] = static_cast<uint8_t>(fmt::e2m1_decode_x2(c) + kI8WeightBias);
  i8_pack_codes_avx2<true>(w.q, w.k, n0, rows, b0, nb, lv, zeros, wq);
  const int64_t kb = w.k / 16;
  for (int64_t b = 0; b < nb; ++b) {
    for (int32_t r = 0; r < kI8PanelNr; ++r)
      ws[b * 16 + r] = r < rows ? dec.v[w.s[(n0 + r) * kb + b0 + b]] : 0.0f;
  }
}

// NF4 panel (KernelTable::i8_pack_nf4): the NF4 nibble order, `code` as
// the table.
void i8_pack_nf4_avx2(const Nf4Weights& w, const uint8_t* code, int64_t n0, int32_t rows, int64_t b0,
                      int64_t nb, uint8_t* wq, float* ws) {
  i8_pack_codes_avx2<false>(w.q, w.k, n0, rows, b0, nb, code, kI8Nf4PadRow, wq);
  i8_nf4_panel_scales(w, n0, rows, b0, nb, ws);
}

template <int MR, int32_t kMaxBiased>
inline void i8_micro_avx2_rows(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc,
                               int64_t ldxs, const uint8_t* wq, const float* ws, int64_t nb, float* y,
                               int64_t ldy, int32_t nr, bool accumulate) {
  __m256 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int64_t h = 0; h < 2; ++h) {
      if (accumulate) {
        alignas(32) float tmp[8] = {};
        for (int r = 0; r < 8 && 8 * h + r < nr; ++r) tmp[r] = y[i * ldy + 8 * h + r];
        acc[i][h] = _mm256_load_ps(tmp);
      } else {
        acc[i][h] = _mm256_setzero_ps();
      }
    }
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wq + b * 256;
    __m256i d[MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) d[i][0] = d[i][1] = _mm256_set1_epi32(xc[i * ldxs + b]);
    // Small weights (i8_int16_sums): the block's four pair sums added in
    // int16, one vpmaddwd after the last; otherwise one per pair sum.
    constexpr bool kInt16 = i8_int16_sums(kMaxBiased, 4);
    __m256i s16[MR][2];
#pragma GCC unroll 4
    for (int64_t t = 0; t < 4; ++t) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + t * 64));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + t * 64 + 32));
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        int32_t x4;
        std::memcpy(&x4, xq + i * ldxq + b * 16 + 4 * t, 4);
        const __m256i xv = _mm256_set1_epi32(x4);
        const __m256i p0 = _mm256_maddubs_epi16(w0, xv), p1 = _mm256_maddubs_epi16(w1, xv);
        if constexpr (kInt16) {
          s16[i][0] = t == 0 ? p0 : _mm256_add_epi16(s16[i][0], p0);
          s16[i][1] = t == 0 ? p1 : _mm256_add_epi16(s16[i][1], p1);
        } else {
          d[i][0] = _mm256_add_epi32(d[i][0], _mm256_madd_epi16(p0, ones));
          d[i][1] = _mm256_add_epi32(d[i][1], _mm256_madd_epi16(p1, ones));
        }
      }
    }
    if constexpr (kInt16) {
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        d[i][0] = _mm256_add_epi32(d[i][0], _mm256_madd_epi16(s16[i][0], ones));
        d[i][1] = _mm256_add_epi32(d[i][1], _mm256_madd_epi16(s16[i][1], ones));
      }
    }
    const __m256 ws0 = _mm256_loadu_ps(ws + b * 16), ws1 = _mm256_loadu_ps(ws + b * 16 + 8);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m256 xsv = _mm256_set1_ps(xs[i * ldxs + b]);
      acc[i][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[i][0]), _mm256_mul_ps(xsv, ws0), acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[i][1]), _mm256_mul_ps(xsv, ws1), acc[i][1]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (nr == 16) {
      _mm256_storeu_ps(y + i * ldy, acc[i][0]);
      _mm256_storeu_ps(y + i * ldy + 8, acc[i][1]);
    } else {
      alignas(32) float tmp[16];
      _mm256_store_ps(tmp, acc[i][0]);
      _mm256_store_ps(tmp + 8, acc[i][1]);
      for (int r = 0; r < nr; ++r) y[i * ldy + r] = tmp[r];
    }
  }
}

// Integer roof probe: 8 independent chains of vpmaddubsw + vpmaddwd +
// vpaddd, 32 int8 MACs per step.
double i8_probe_avx2(int64_t iters) {
  __m256i acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_set1_epi32(j);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i b = _mm256_set1_epi8(5);
  for (int64_t it = 0; it < iters; ++it) {
    __asm__ volatile("" : "+x"(b));  // no hoisting
    // The unsigned operand is the chain's own accumulator: no shared product.
    for (__m256i& a : acc) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
  }
  __m256i s = acc[0];
  for (int j = 1; j < 8; ++j) s = _mm256_add_epi32(s, acc[j]);
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
  volatile int32_t sink = out[0];
  (void)sink;
  return static_cast<double>(iters) * 8 * 32 * 2;
}

// kMaxBiased: the largest biased weight of the panels (the NVFP4 packer's
// for KernelTable::i8_micro_small).
template <int32_t kMaxBiased = kI8MaxBiasedNf4>
void i8_micro_avx2(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                   int32_t mr, const uint8_t* wq, const float* ws, int64_t nb, float* y, int64_t ldy,
                   int32_t nr, bool accumulate) {
  with_rows<kI8MR2>(mr, [&](auto rows) {
    i8_micro_avx2_rows<decltype(rows)::value, kMaxBiased>(xq, ldxq, xs, xc, ldxs, wq, ws, nb, y, ldy, nr,
                                                          accumulate);
  });
}

// KernelTable::i8_quantize_act: the operations of i8_activations_quantize
// (portable_int8.cpp) on 8 lanes, two vectors a block in the kI8Perm order
// (its first 8 entries permute elements 0..7, the last 8 elements 8..15):
// IEEE division by the block scale, the same clamps, float add of +-0.5
// and truncation, so every byte, scale and correction is the same.
inline void i8_quantize_act_avx2(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* xq, int64_t ldxq,
                                 float* xs, int32_t* xc, int64_t ldxs, int32_t bias) {
  const __m256i perm = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf_bits = _mm256_set1_epi32(0x7f800000);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256 half = _mm256_set1_ps(0.5f), neg_half = _mm256_set1_ps(-0.5f);
  const int64_t nb = k / 16;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + i * ldx + b * 16;
      const __m256 v0 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(xb), perm);
      const __m256 v1 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(xb + 8), perm);
      const __m256i m0 = _mm256_and_si256(_mm256_castps_si256(v0), abs_mask);
      const __m256i m1 = _mm256_and_si256(_mm256_castps_si256(v1), abs_mask);
      int8_t* qb = xq + i * ldxq + b * 16;
      float scale = std::numeric_limits<float>::quiet_NaN();
      int32_t sum = 0;
      // Finite: every magnitude below the Inf bits (signed compare of
      // non-negative ints).
      const __m256i nonfinite =
          _mm256_or_si256(_mm256_cmpgt_epi32(m0, _mm256_sub_epi32(inf_bits, _mm256_set1_epi32(1))),
                          _mm256_cmpgt_epi32(m1, _mm256_sub_epi32(inf_bits, _mm256_set1_epi32(1))));
      std::memset(qb, 0, 16);
      if (_mm256_testz_si256(nonfinite, nonfinite) != 0) {
        // max |x| of the 16 (finite, so the integer max of the bits is the
        // float max).
        __m256i mx = _mm256_max_epi32(m0, m1);
        __m128i h = _mm_max_epi32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
        h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        scale = _mm_cvtss_f32(_mm_castsi128_ps(h)) / 127.0f;
        if (scale > 0.0f) {
          const __m256 sv = _mm256_set1_ps(scale);
          __m256i code[2];
          const __m256 vv[2] = {v0, v1};
          for (int g = 0; g < 2; ++g) {
            const __m256 q = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(vv[g], sv), lo), hi);
            const __m256 r = _mm256_add_ps(
                q, _mm256_blendv_ps(half, neg_half, _mm256_cmp_ps(q, _mm256_setzero_ps(), _CMP_LT_OQ)));
            code[g] = _mm256_cvttps_epi32(r);
          }
          // int32 in [-127, 127] -> int8, in order.
          const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(code[0], code[1]), 0xd8);
          const __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), bytes);
          __m256i s8 = _mm256_add_epi32(code[0], code[1]);
          __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
          s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
          s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
          sum = _mm_cvtsi128_si32(s4);
        }
      }
      xs[i * ldxs + b] = scale;
      xc[i * ldxs + b] = -bias * sum;
    }
  }
}

}  // namespace
}  // namespace q4::kern
