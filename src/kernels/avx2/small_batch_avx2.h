// AVX2 + FMA + F16C traits of the generic small-batch code
// (src/kernels/small_batch.h): act_to_f32 and the NF4 quantizer's
// conversions run on them, and the small-batch products of the AVX2 table
// (small_batch_lanes_avx2.h, which replaced sb_product's 3 x 3 dot-product
// tiles there) on their load_act and, for the last 16 elements of an odd
// stretch, their decodes. Included by kernels_avx2.cpp only.
#pragma once

#include <immintrin.h>

#include <climits>
#include <cstdint>

#include "kernels/small_batch.h"

namespace q4::kern {
namespace {

struct SbAvx2 {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  static __m256 zero() { return _mm256_setzero_ps(); }
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
  static __m256 fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  template <FType T>
  static __m256 load_act(const void* base, int64_t off) {
    if constexpr (T == FType::F32) {
      return _mm256_loadu_ps(static_cast<const float*>(base) + off);
    } else {
      const __m128i h =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + off));
      if constexpr (T == FType::F16) {
        return _mm256_cvtph_ps(h);
      } else {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      }
    }
  }

  // The bf16 of each lane of v in the low half of its dword: the codec's
  // integer rounding to nearest even, a NaN as (bits >> 16) | 0x40.
  static __m256i bf16_dwords(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    return _mm256_blendv_epi8(bf16_dwords_no_nan(v),
                              _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40)),
                              _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  }
  // The same for v without NaN lanes (the caller checked).
  static __m256i bf16_dwords_no_nan(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  }

  // load_act's inverse, as SbAvx512::store_act (fp16 by vcvtps2ph with
  // NaN lanes rewritten as the codec writes them; bf16 the codec's integer
  // rounding).
  template <FType T>
  static void store_act(void* base, int64_t off, __m256 v) {
    if constexpr (T == FType::F32) {
      _mm256_storeu_ps(static_cast<float*>(base) + off, v);
    } else {
      const __m256i bits = _mm256_castps_si256(v);
      const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
      __m256i r;  // 8 dwords, each a 16-bit result
      if constexpr (T == FType::F16) {
        const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (_mm256_movemask_ps(nan) == 0) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(base) + off), h);
          return;
        }
        const __m256i canon =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x8000)),
                            _mm256_set1_epi32(0x7e00));
        r = _mm256_blendv_epi8(_mm256_cvtepu16_epi32(h), canon, _mm256_castps_si256(nan));
      } else {
        r = bf16_dwords(v);
      }
      // Every dword is below 2^16: the unsigned saturating pack keeps it.
      const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(base) + off), h);
    }
  }

  // 4 bytes -> 8 dwords whose low 4 bits are the nibbles of elements in order.
  static __m256i nibbles8(const uint8_t* q4, __m256i shifts) {
    int32_t v;
    __builtin_memcpy(&v, q4, 4);
    const __m128i b = _mm_cvtsi32_si128(v);
    return _mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)), shifts);
  }

  // A block's 16 codes in element order (the low and high nibbles of its
  // 8 bytes interleaved) become 2 * E2M1 as int8 by one vpshufb, then fp32
  // (exact), times scale / 2: the same values e2m1 * scale (both products
  // exact), except that code 8 (-0) gives +0, which no product's sum can
  // tell apart from -0 (the accumulators start at +0). 16 instructions a
  // block where the per-dword permute decode took 22.
  static void decode_nvfp4(const uint8_t* q, const uint8_t* s, int64_t nblocks, float* dst) {
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i nib = _mm_set1_epi8(0x0f);
    const float* e4m3 = sb_e4m3_table();
    for (int64_t b = 0; b < nblocks; ++b) {
      const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + b * 8));
      const __m128i codes =
          _mm_unpacklo_epi8(_mm_and_si128(v, nib), _mm_and_si128(_mm_srli_epi16(v, 4), nib));
      const __m128i x2 = _mm_shuffle_epi8(lut, codes);
      const __m256 sc = _mm256_set1_ps(e4m3[s[b]] * 0.5f);
      _mm256_storeu_ps(dst + b * 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x2)), sc));
      _mm256_storeu_ps(dst + b * 16 + 8,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(x2, 8))), sc));
    }
  }

  // NF4: 16 arbitrary code values (two 8-entry halves, blended on bit 3).
  static void decode_nf4(const Nf4Weights& w, int64_t flat, int64_t len, float* dst) {
    const __m256 lo = _mm256_loadu_ps(w.lut), hi = _mm256_loadu_ps(w.lut + 8);
    const __m256i shifts = _mm256_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0);
    for (int64_t e = 0; e < len; e += 8) {
      const int64_t f = flat + e;
      const __m256i c = nibbles8(w.q + f / 2, shifts);
      const __m256 upper = _mm256_castsi256_ps(_mm256_slli_epi32(c, 28));  // bit 3 -> sign bit
      const __m256 v =
          _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, c), _mm256_permutevar8x32_ps(hi, c), upper);
      _mm256_storeu_ps(dst + e, _mm256_mul_ps(v, _mm256_set1_ps(w.absmax[f >> w.block_shift])));
    }
  }
};

}  // namespace
}  // namespace q4::kern
