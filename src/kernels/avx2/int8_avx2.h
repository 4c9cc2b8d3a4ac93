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

// The 8 lane reductions of 8 vectors at once (lane j of the result: the
// reduction of v[j]'s lanes) by an exact, associative and commutative
// integer op (max, add): 7 ops and 10 shuffles instead of 8 x 3 dependent
// steps and their extracts.
template <class Op>
inline __m256i reduce8_epi32(const __m256i (&v)[8], Op op) {
  __m256i h[4], q[2];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {  // lanes 0-3: v[2j]'s 4 partials, 4-7: v[2j + 1]'s
    const int e = j + j;
    h[j] =
        op(_mm256_permute2x128_si256(v[e], v[e + 1], 0x20), _mm256_permute2x128_si256(v[e], v[e + 1], 0x31));
  }
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j) {  // 128-bit lane l: 2 partials of v[4j + l], 2 of v[4j + 2 + l]
    const int e = j + j;
    const __m256 a = _mm256_castsi256_ps(h[e]), b = _mm256_castsi256_ps(h[e + 1]);
    q[j] = op(_mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0))),
              _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2))));
  }
  const __m256 a = _mm256_castsi256_ps(q[0]), b = _mm256_castsi256_ps(q[1]);
  // 128-bit lane l: v[l], v[2 + l], v[4 + l], v[6 + l]
  const __m256i r = op(_mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
                       _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))));
  return _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// KernelTable::i8_quantize_act: the operations of i8_activations_quantize
// (portable_int8.cpp) on 8 blocks at a time: the blocks' maxima by one
// reduce8_epi32 (as integer maxima of the |x| bits, which also finds NaN
// and Inf), their scales amax / 127 by one vector division (IEEE, as the
// scalar one), then per block the IEEE division by its scale, the same
// clamps, the add of +-0.5 (the sign of q copied onto 0.5: -0.0 gives -0.5,
// code 0 as the reference's +0.5) and truncation, so every byte, scale and
// correction is the same. The codes are packed to bytes two blocks at a
// time and put in the kI8Perm order by one vpshufb; a block's code sum is
// taken from its bytes by vpsadbw (codes + 128 as unsigned bytes). No
// division of a non-finite block or by a zero scale (no exception flag the
// reference does not raise). Measured against one block at a time (two
// in-lane permutes, scalar maxima and sums, a 16-byte memset per block):
// see docs/performance.md.
inline void i8_quantize_act_avx2(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* xq, int64_t ldxq,
                                 float* xs, int32_t* xc, int64_t ldxs, int32_t bias) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf_bits = _mm256_set1_epi32(0x7f800000);
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f), half = _mm256_set1_ps(0.5f);
  // Within each 128-bit lane after the packs and the qword permute: a
  // block's elements 0-3, 8-11, 4-7, 12-15; to the kI8Perm order.
  const __m256i order = _mm256_setr_epi8(0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15, 0, 2, 8, 10, 1,
                                         3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const int64_t nb = k / 16;
  // The codes of quotients q: clamped, plus 0.5 with q's sign, truncated.
  auto codes = [&](__m256 q) {
    q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);
    return _mm256_cvttps_epi32(_mm256_add_ps(q, _mm256_or_ps(_mm256_and_ps(q, sign_mask), half)));
  };
  alignas(32) float scale_of[8];
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * ldx;
    int8_t* qi = xq + i * ldxq;
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
      const int g = static_cast<int>(std::min<int64_t>(8, nb - b0));
      __m256 v[8][2];
      __m256i t[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        v[j][0] = j < g ? _mm256_loadu_ps(xi + (b0 + j) * 16) : _mm256_setzero_ps();
        v[j][1] = j < g ? _mm256_loadu_ps(xi + (b0 + j) * 16 + 8) : _mm256_setzero_ps();
        t[j] = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(v[j][0]), abs_mask),
                                _mm256_and_si256(_mm256_castps_si256(v[j][1]), abs_mask));
      }
      // amax of each block as bits (non-negative ints order as the floats;
      // a NaN or Inf lane makes it >= inf_bits)
      const __m256i amax = reduce8_epi32(t, [](__m256i a, __m256i b) { return _mm256_max_epi32(a, b); });
      const __m256i finite = _mm256_cmpgt_epi32(inf_bits, amax);
      // non-finite blocks divide 0 (no flag), their scale is NaN below
      const __m256 scale = _mm256_div_ps(_mm256_castsi256_ps(_mm256_and_si256(amax, finite)), hi);
      _mm256_store_ps(scale_of, scale);
      const int ok = _mm256_movemask_ps(
          _mm256_and_ps(_mm256_castsi256_ps(finite), _mm256_cmp_ps(scale, _mm256_setzero_ps(), _CMP_GT_OQ)));
      __m256i sad[4];
#pragma GCC unroll 4
      for (int j = 0; j < 8; j += 2) {
        __m256i c[2][2];
#pragma GCC unroll 2
        for (int u = 0; u < 2; ++u) {
          if (((ok >> (j + u)) & 1) != 0) {
            const __m256 sv = _mm256_broadcast_ss(scale_of + j + u);
            c[u][0] = codes(_mm256_div_ps(v[j + u][0], sv));
            c[u][1] = codes(_mm256_div_ps(v[j + u][1], sv));
          } else {
            c[u][0] = c[u][1] = _mm256_setzero_si256();
          }
        }
        // lane l of the packs: elements 4l..4l+3 and 8+4l..8+4l+3 of block
        // j (qword 0 of the lane) and of block j + 1 (qword 1)
        const __m256i packed =
            _mm256_packs_epi16(_mm256_packs_epi32(c[0][0], c[0][1]), _mm256_packs_epi32(c[1][0], c[1][1]));
        const __m256i bytes = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(packed, 0xd8), order);
        if (j + 1 < g) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(qi + (b0 + j) * 16), bytes);
        } else if (j < g) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(qi + (b0 + j) * 16), _mm256_castsi256_si128(bytes));
        }
        // qwords: the byte sums (+ 8 x 128) of each half of blocks j, j + 1
        sad[j / 2] = _mm256_sad_epu8(_mm256_xor_si256(bytes, flip), _mm256_setzero_si256());
      }
      // Each block's sum in dword 0 of its 128-bit lane, then blocks j, j + 2
      // in dwords 0, 1 of the lane of j % 2 ... and in order.
      __m256i s2[4];
#pragma GCC unroll 4
      for (int h = 0; h < 4; ++h) s2[h] = _mm256_add_epi64(sad[h], _mm256_shuffle_epi32(sad[h], 0x4e));
      const __m256i u01 = _mm256_or_si256(s2[0], _mm256_slli_epi64(s2[1], 32));
      const __m256i u23 = _mm256_or_si256(s2[2], _mm256_slli_epi64(s2[3], 32));
      const __m256i sums =
          _mm256_sub_epi32(_mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(u01, u23),
                                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)),
                           _mm256_set1_epi32(16 * 128));
      const __m256i keep =
          _mm256_cmpgt_epi32(_mm256_set1_epi32(g), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      // A NaN/Inf activation: a NaN scale and zero codes (sum 0).
      _mm256_maskstore_ps(xs + i * ldxs + b0, keep,
                          _mm256_blendv_ps(_mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), scale,
                                           _mm256_castsi256_ps(finite)));
      _mm256_maskstore_epi32(xc + i * ldxs + b0, keep, _mm256_mullo_epi32(_mm256_set1_epi32(-bias), sums));
    }
  }
}

}  // namespace
}  // namespace q4::kern
