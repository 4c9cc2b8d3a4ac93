// AVX-512 traits of the small-batch product kernels (src/kernels/small_batch.h):
// 16 lanes, 4 rows of X x 6 rows of W = 24 zmm accumulators. Included by
// kernels_avx512.cpp only (compiled with its flags). Rows of X stream from
// L2 once per group of W rows (the decoded W rows stay in L1), so more W
// rows per group means less L2 traffic per FMA: 4 x 6 measured 1.01-1.15x
// the former 6 x 4 at M = 17-40 on a Cascade Lake-class Xeon (3 x 8:
// 0.93-0.99x).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/small_batch.h"

namespace q4::kern {
namespace {

struct SbAvx512 {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kMI = 4;
  static constexpr int kR = 6;
  static __m512 zero() { return _mm512_setzero_ps(); }
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
  static __m512 fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(__m512 a) { return _mm512_reduce_add_ps(a); }

  template <FType T>
  static __m512 load_act(const void* base, int64_t off) {
    if constexpr (T == FType::F32) {
      return _mm512_loadu_ps(static_cast<const float*>(base) + off);
    } else {
      const __m256i h =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + off));
      if constexpr (T == FType::F16) {
        return _mm512_cvtph_ps(h);
      } else {  // bf16: the upper half of an fp32
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      }
    }
  }

  // load_act's inverse. fp16: vcvtps2ph rounds to nearest even (the
  // library's calls run with the default MXCSR) and keeps a NaN's payload,
  // so NaN lanes are rewritten as the codec writes them (sign | 0x7e00).
  // bf16: the codec's integer rounding, NaN as (bits >> 16) | 0x40.
  template <FType T>
  static void store_act(void* base, int64_t off, __m512 v) {
    if constexpr (T == FType::F32) {
      _mm512_storeu_ps(static_cast<float*>(base) + off, v);
    } else {
      const __m512i bits = _mm512_castps_si512(v);
      const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      __m256i h;
      if constexpr (T == FType::F16) {
        h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (nan != 0) {
          const __m512i canon =
              _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x8000)),
                              _mm512_set1_epi32(0x7e00));
          h = _mm256_mask_mov_epi16(h, nan, _mm512_cvtepi32_epi16(canon));
        }
      } else {
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
        __m512i r =
            _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
        r = _mm512_mask_mov_epi32(r, nan,
                                  _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40)));
        h = _mm512_cvtepi32_epi16(r);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(base) + off), h);
    }
  }

  // 8 bytes -> 16 dwords, byte j twice, shifted so that the low 4 bits of
  // lane e hold the nibble of element e (lo_first: element 2j is the low
  // nibble, NVFP4; otherwise the high nibble, NF4).
  static __m512i nibbles16(const uint8_t* q8, bool lo_first) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q8));
    const __m512i d = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
    const __m512i shifts = lo_first ? _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4)
                                    : _mm512_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    return _mm512_srlv_epi32(d, shifts);
  }

  static void decode_nvfp4(const uint8_t* q, const uint8_t* s, int64_t nblocks, float* dst) {
    const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                                      -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const float* e4m3 = sb_e4m3_table();
    for (int64_t b = 0; b < nblocks; ++b) {
      const __m512 v = _mm512_permutexvar_ps(nibbles16(q + b * 8, true), lut);
      _mm512_storeu_ps(dst + b * 16, _mm512_mul_ps(v, _mm512_set1_ps(e4m3[s[b]])));
    }
  }

  static void decode_nf4(const Nf4Weights& w, int64_t flat, int64_t len, float* dst) {
    const __m512 lut = _mm512_loadu_ps(w.lut);
    for (int64_t e = 0; e < len; e += 16) {
      const int64_t f = flat + e;
      const __m512 v = _mm512_permutexvar_ps(nibbles16(w.q + f / 2, false), lut);
      _mm512_storeu_ps(dst + e, _mm512_mul_ps(v, _mm512_set1_ps(w.absmax[f >> w.block_shift])));
    }
  }
};

}  // namespace
}  // namespace q4::kern
