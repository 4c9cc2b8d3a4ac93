// Integer block-dot-product kernels for AVX-512 (KernelTable::i8_pack_nvfp4
// and i8_micro), shared by the AVX-512BW table (vpmaddubsw + vpmaddwd) and
// the AVX-512 VNNI table (vpdpbusd): included by each ISA translation unit,
// compiled with its flags, internal linkage. Both compute the fixed fp32
// sequence of KernelTable::i8_micro, so they are bit-identical to the
// portable kernels.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/isa_common.h"
#include "kernels/kernel_table.h"

namespace q4::kern {
namespace {

// Rows of X per micro-kernel call. Without VNNI 4: at 8, GCC spilled
// accumulators and row pointers, and 4 measured 1.03-1.13x at M = 65-512
// (and 6 the same as 4 on a Zen 5). VNNI 6: on a Zen 5, W4A4 and fast
// mode 1.02-1.09x the 4 at M = 128-512 (8: 0.99x).
template <bool kVnni>
constexpr int32_t kI8MR = kVnni ? 6 : 4;

template <bool kVnni>
inline __m512i i8_dot4(__m512i acc, __m512i u8, __m512i s8) {
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(acc, u8, s8);
  } else {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u8, s8), _mm512_set1_epi16(1)));
  }
}

// i8_dot4 with the signed operand a broadcast of the 4 bytes at p. VNNI:
// one vpdpbusd with an embedded broadcast (GCC 12 does not fold the
// broadcast into vpdpbusd by itself; a separate vpbroadcastd costs an issue
// slot per dot product, and the integer GEMV is issue-bound).
template <bool kVnni>
inline __m512i i8_dot4_bcst(__m512i acc, __m512i u8, const int8_t* p) {
#if !defined(__clang__)
  if constexpr (kVnni) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u8), "m"(*reinterpret_cast<const int32_t*>(p)));
    return acc;
  }
#endif
  int32_t x4;
  std::memcpy(&x4, p, 4);
  return i8_dot4<kVnni>(acc, u8, _mm512_set1_epi32(x4));
}

// i8_dot4(i8_dot4(0, e, xe), o, xo), or without VNNI and with weights at
// most kMaxBiased where two pair sums fit int16 (i8_int16_sums), the two
// vpmaddubsw added in int16 before one vpmaddwd: the same integers.
template <bool kVnni, int32_t kMaxBiased>
inline __m512i i8_dot8(__m512i e, __m512i xe, __m512i o, __m512i xo) {
  if constexpr (!kVnni && i8_int16_sums(kMaxBiased, 2)) {
    return _mm512_madd_epi16(_mm512_add_epi16(_mm512_maddubs_epi16(e, xe), _mm512_maddubs_epi16(o, xo)),
                             _mm512_set1_epi16(1));
  } else {
    return i8_dot4<kVnni>(i8_dot4<kVnni>(_mm512_setzero_si512(), e, xe), o, xo);
  }
}

// acc + the 16-element dot products of w[0..3] with the broadcasts of the
// 4-byte groups at x (i8_dot4_bcst each); without VNNI and with weights
// where four pair sums fit int16, one vpmaddwd for the four vpmaddubsw (9
// instructions instead of 12; the same integers).
template <bool kVnni, int32_t kMaxBiased>
inline __m512i i8_dot16_bcst(__m512i acc, const __m512i (&w)[4], const int8_t* x) {
  if constexpr (!kVnni && i8_int16_sums(kMaxBiased, 4)) {
    // (each 4-byte group broadcast from memory: a 16-byte load and lane
    // extracts cost shuffles)
    const auto bcst = [x](int t) {
      int32_t x4;
      std::memcpy(&x4, x + int64_t{4} * t, 4);
      return _mm512_set1_epi32(x4);
    };
    __m512i s16 = _mm512_maddubs_epi16(w[0], bcst(0));
    for (int t = 1; t < 4; ++t) s16 = _mm512_add_epi16(s16, _mm512_maddubs_epi16(w[t], bcst(t)));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(s16, _mm512_set1_epi16(1)));
  } else {
#pragma GCC unroll 4
    for (int64_t t = 0; t < 4; ++t) acc = i8_dot4_bcst<kVnni>(acc, w[t], x + 4 * t);
    return acc;
  }
}

// VNNI: c + the 16-element dot products of w[0..3] with the broadcasts of
// the 4-byte groups at x as two chains of two vpdpbusd (steps 0, 1 from c
// and 2, 3 from zero) and one add: the same int32 sums as i8_dot16_bcst
// (integer addition), with half its chain of dependent vpdpbusd. In the
// integer GEMV's group loop (8 rows of x, 4 dot products each per block)
// the chains of four kept too few independent dot products in flight:
// measured on an Emerald Rapids-class Xeon, 2 threads, one-process A/B,
// weights in the row form: M = 8 1.12-1.16x (NF4 1.14-1.18x), M = 16
// 1.03-1.07x, M = 64 1.15x, M = 2 1.00x; on tiles 1.00-1.05x. Groups of
// kI8StepMajorRows rows or more now run step-major instead, so with VNNI
// this serves groups of one row (M = 1 on tiles, and at K % 128 == 64),
// where it still pays: one chain of four there measured 0.95-0.98x in
// cache (2880x2880, tiles 2048x4096) and 0.98-0.99x from DRAM.
// Without VNNI: i8_dot16_bcst (its int16 sums are one chain already).
template <bool kVnni, int32_t kMaxBiased>
inline __m512i i8_dot16_bcst_split(int32_t c, const __m512i (&w)[4], const int8_t* x) {
  if constexpr (!kVnni) {
    return i8_dot16_bcst<kVnni, kMaxBiased>(_mm512_set1_epi32(c), w, x);
  } else {
    __m512i d0 = _mm512_set1_epi32(c), d1 = _mm512_setzero_si512();
    d0 = i8_dot4_bcst<kVnni>(d0, w[0], x);
    d1 = i8_dot4_bcst<kVnni>(d1, w[2], x + 8);
    d0 = i8_dot4_bcst<kVnni>(d0, w[1], x + 4);
    d1 = i8_dot4_bcst<kVnni>(d1, w[3], x + 12);
    return _mm512_add_epi32(d0, d1);
  }
}

// The 4x4 dword transpose inside the 128-bit lanes: dword p of lane L of
// T[d] = dword d of lane L of z[p]. With row g + 4L in lane L of z[g], T[d]
// holds dword d of the 16 rows in order (the panel packer and the GEMV
// both decode rows this way).
inline void i8_transpose_dwords(const __m512i (&z)[4], __m512i (&T)[4]) {
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]);
  const __m512i t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]);
  const __m512i t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  T[0] = _mm512_unpacklo_epi64(t0, t2);
  T[1] = _mm512_unpackhi_epi64(t0, t2);
  T[2] = _mm512_unpacklo_epi64(t1, t3);
  T[3] = _mm512_unpackhi_epi64(t1, t3);
}

// 16 x 16 dwords: out[j] lane r = lane j of z[r] (unpacks inside the
// 128-bit lanes, then two 128-bit lane shuffles).
inline void i8_transpose16x16_ps(const __m512 (&z)[16], __m512 (&out)[16]) {
  __m512 a[16], b[16];
  for (int i = 0; i < 16; i += 2) {  // a[i], a[i+1]: rows i, i+1 interleaved (dwords 0,1 / 2,3 of each lane)
    a[i] = _mm512_unpacklo_ps(z[i], z[i + 1]);
    a[i + 1] = _mm512_unpackhi_ps(z[i], z[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // b[i + d]: dword d of each lane of rows i..i+3
    for (int h = 0; h < 2; ++h) {
      b[i + 2 * h] =
          _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a[i + h]), _mm512_castps_pd(a[i + 2 + h])));
      b[i + 2 * h + 1] =
          _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a[i + h]), _mm512_castps_pd(a[i + 2 + h])));
    }
  }
  // b[4g + d] lane L = column 4L + d of rows 4g..4g+3, so out[4L + d] =
  // lane L of b[d], b[4 + d], b[8 + d] and b[12 + d].
  for (int d = 0; d < 4; ++d) {
    const __m512 lo01 = _mm512_shuffle_f32x4(b[d], b[4 + d], 0x44);  // lanes 0,1 of b[d], 0,1 of b[4+d]
    const __m512 hi01 = _mm512_shuffle_f32x4(b[d], b[4 + d], 0xee);  // lanes 2,3 of each
    const __m512 lo23 = _mm512_shuffle_f32x4(b[8 + d], b[12 + d], 0x44);
    const __m512 hi23 = _mm512_shuffle_f32x4(b[8 + d], b[12 + d], 0xee);
    out[d] = _mm512_shuffle_f32x4(lo01, lo23, 0x88);       // lane 0 of each of the four
    out[4 + d] = _mm512_shuffle_f32x4(lo01, lo23, 0xdd);   // lane 1
    out[8 + d] = _mm512_shuffle_f32x4(hi01, hi23, 0x88);   // lane 2
    out[12 + d] = _mm512_shuffle_f32x4(hi01, hi23, 0xdd);  // lane 3
  }
}

// The biased E2M1x2 value of each code, in every 128-bit lane.
inline __m512i i8_biased_lut512() {
  alignas(16) int8_t v[16];
  for (uint32_t c = 0; c < 16; ++c) v[c] = static_cast<int8_t>(fmt::e2m1_decode_x2(c) + kI8WeightBias);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(v)));
}

// The table values of the low and high nibbles of every byte of t (lut:
// the 16 values in each 128-bit lane, as i8_biased_lut512). kVbmi (CPUs
// with AVX-512 VBMI): vpermb, whose 6-bit byte index picks one of the
// lut's four copies by bits 4-5 and the value by bits 0-3, so neither
// nibble needs the mask that vpshufb's index does (bit 7 zeroes its
// byte): 3 operations instead of 5, the same bytes (Emerald Rapids-class
// Xeon, 2 threads, one-process A/B, weights 2048x4096 in L2: M = 1
// 1.06-1.11x, M = 8 on tiles 1.03-1.05x (rows 1.00x), M = 32 1.02-1.03x;
// from DRAM 0.98-1.05x, M = 8 on tiles 1.02-1.05x). Inline assembly: the
// table's translation units are not compiled for VBMI; only CPUs with it
// are given these kernels (cpu_has_vbmi).
template <bool kVbmi>
__attribute__((always_inline)) inline void i8_nibble_values(__m512i t, __m512i lut, __m512i& lo,
                                                            __m512i& hi) {
  const __m512i t_hi = _mm512_srli_epi16(t, 4);
  if constexpr (kVbmi) {
    __asm__("vpermb %1, %2, %0" : "=v"(lo) : "v"(lut), "v"(t));
    __asm__("vpermb %1, %2, %0" : "=v"(hi) : "v"(lut), "v"(t_hi));
  } else {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(t, nib));
    hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(t_hi, nib));
  }
}

// Whether the CPU has AVX-512 VBMI (vpermb: i8_nibble_values).
inline bool cpu_has_vbmi() {
  return (cpu_info().features & Q4_CPU_AVX512VBMI) != 0;
}

// Two blocks (or one: `two` false) of the 16 panel rows: each row's 16 (8)
// bytes go to lane r/4 of z[r%4]; a 4x4 dword transpose inside the lanes
// gives T_d = dword d of rows 0..15 in order; the nibbles holding the even
// elements (low: NVFP4, kEvenLow; high: NF4) are step 2(d%2) of block d/2,
// the others step 2(d%2)+1.
template <bool kEvenLow>
inline void i8_pack_two_blocks(const uint8_t* const* src, bool two, __m512i lut, uint8_t* out) {
  __m512i z[4];
  for (int g = 0; g < 4; ++g) {
    __m128i l[4];
    for (int L = 0; L < 4; ++L) {
      const uint8_t* p = src[g + 4 * L];
      l[L] = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                 : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    }
    __m512i v = _mm512_castsi128_si512(l[0]);
    v = _mm512_inserti32x4(v, l[1], 1);
    v = _mm512_inserti32x4(v, l[2], 2);
    z[g] = _mm512_inserti32x4(v, l[3], 3);
  }
  __m512i T[4];
  i8_transpose_dwords(z, T);
  const __m512i nib = _mm512_set1_epi8(0x0f);
  for (int64_t d = 0; d < (two ? 4 : 2); ++d) {
    const __m512i lo = _mm512_and_si512(T[d], nib);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(T[d], 4), nib);
    uint8_t* dst = out + (d / 2) * 256 + (d % 2) * 128;
    _mm512_storeu_si512(dst, _mm512_shuffle_epi8(lut, kEvenLow ? lo : hi));
    _mm512_storeu_si512(dst + 64, _mm512_shuffle_epi8(lut, kEvenLow ? hi : lo));
  }
}

// The codes of a 16-row panel (rows >= `rows` read `pad`), two blocks at a
// time; `lut` maps nibbles to the biased int8 values.
template <bool kEvenLow>
inline void i8_pack_codes_avx512(const uint8_t* q, int64_t k, int64_t n0, int32_t rows, int64_t b0,
                                 int64_t nb, __m512i lut, const uint8_t* pad, uint8_t* wq) {
  const int64_t rb = k / 2;
  const uint8_t* src[16];
  for (int64_t b = 0; b < nb; b += 2) {
    for (int r = 0; r < 16; ++r) src[r] = r < rows ? q + (n0 + r) * rb + (b0 + b) * 8 : pad;
    i8_pack_two_blocks<kEvenLow>(src, b + 2 <= nb, lut, wq + b * 256);
  }
}

// NF4 panel (KernelTable::i8_pack_nf4): the same transpose with the NF4
// nibble order and `code` (the biased int8 code values) as the table.
inline void i8_pack_nf4_avx512(const Nf4Weights& w, const uint8_t* code, int64_t n0, int32_t rows, int64_t b0,
                               int64_t nb, uint8_t* wq, float* ws) {
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(code)));
  i8_pack_codes_avx512<false>(w.q, w.k, n0, rows, b0, nb, lut, kI8Nf4PadRow, wq);
  i8_nf4_panel_scales(w, n0, rows, b0, nb, ws);
}

// MR rows of x over P adjacent panels (P = 1: KernelTable::i8_micro; P =
// 2: i8_micro2, each broadcast of x feeding the dot products of both panels,
// half the loads per dot product). Panel h at wq + h * wq_stride and ws + h
// * ws_stride, its outputs at y + 16 h; every panel but the last is full,
// the last has nr rows. The per-output sequence does not depend on P.
template <int MR, int P, bool kVnni, int32_t kMaxBiased = kI8MaxBiasedNf4>
inline void i8_micro_rows(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                          const uint8_t* wq, int64_t wq_stride, const float* ws, int64_t ws_stride,
                          int64_t nb, float* y, int64_t ldy, int32_t nr, bool accumulate) {
  const __mmask16 full = static_cast<__mmask16>(0xffff);
  const __mmask16 last = nr >= 16 ? full : static_cast<__mmask16>((1u << nr) - 1u);
  __m512 acc[MR][P];
  for (int i = 0; i < MR; ++i) {
    for (int h = 0; h < P; ++h) {
      acc[i][h] = accumulate ? _mm512_maskz_loadu_ps(h == P - 1 ? last : full, y + i * ldy + int64_t{16} * h)
                             : _mm512_setzero_ps();
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (kVnni) {
      // Step-major (as the GEMV's groups, kI8StepMajorRows): step t of
      // every row's P dot products, then step t + 1; each weight vector
      // loaded at its step, so the MR x P chains fit the registers.
      __m512i d[MR][P];
      for (int i = 0; i < MR; ++i) {
        for (int h = 0; h < P; ++h) d[i][h] = _mm512_set1_epi32(xc[i * ldxs + b]);
      }
      for (int64_t t = 0; t < 4; ++t) {
        __m512i w[P];
        for (int h = 0; h < P; ++h) w[h] = _mm512_loadu_si512(wq + h * wq_stride + b * 256 + t * 64);
        for (int i = 0; i < MR; ++i) {
          const int8_t* xb = xq + i * ldxq + b * 16 + 4 * t;
          if constexpr (P > 1) {  // one broadcast register for the P dot products
            int32_t x4;
            std::memcpy(&x4, xb, 4);
            const __m512i xv = _mm512_set1_epi32(x4);
            for (int h = 0; h < P; ++h) d[i][h] = i8_dot4<kVnni>(d[i][h], w[h], xv);
          } else {
            d[i][0] = i8_dot4_bcst<kVnni>(d[i][0], w[0], xb);
          }
        }
      }
      __m512 wsv[P];
      for (int h = 0; h < P; ++h) wsv[h] = _mm512_loadu_ps(ws + h * ws_stride + b * 16);
      for (int i = 0; i < MR; ++i) {
        const __m512 xsv = _mm512_set1_ps(xs[i * ldxs + b]);
        for (int h = 0; h < P; ++h)
          acc[i][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[i][h]), _mm512_mul_ps(xsv, wsv[h]), acc[i][h]);
      }
      continue;
    }
    __m512i wv[P][4];
    __m512 wsv[P];
    for (int h = 0; h < P; ++h) {
      const uint8_t* wb = wq + h * wq_stride + b * 256;
      for (int64_t t = 0; t < 4; ++t) wv[h][t] = _mm512_loadu_si512(wb + t * 64);
      wsv[h] = _mm512_loadu_ps(ws + h * ws_stride + b * 16);
    }
    for (int i = 0; i < MR; ++i) {
      const int8_t* xb = xq + i * ldxq + b * 16;
      __m512i d[P];
      for (int h = 0; h < P; ++h) d[h] = _mm512_set1_epi32(xc[i * ldxs + b]);
      // u8 (<= 126) x s8 (|x| <= 127) pairs: no int16 saturation without VNNI.
      if constexpr (!kVnni && i8_int16_sums(kMaxBiased, 4)) {
        // (small weights: the block's four pair sums in int16, one vpmaddwd)
        __m512i s16[P];
        for (int64_t t = 0; t < 4; ++t) {
          int32_t x4;
          std::memcpy(&x4, xb + 4 * t, 4);
          const __m512i xv = _mm512_set1_epi32(x4);
          for (int h = 0; h < P; ++h) {
            const __m512i pr2 = _mm512_maddubs_epi16(wv[h][t], xv);
            s16[h] = t == 0 ? pr2 : _mm512_add_epi16(s16[h], pr2);
          }
        }
        for (int h = 0; h < P; ++h)
          d[h] = _mm512_add_epi32(d[h], _mm512_madd_epi16(s16[h], _mm512_set1_epi16(1)));
      } else {
        for (int64_t t = 0; t < 4; ++t) {
          for (int h = 0; h < P; ++h) d[h] = i8_dot4_bcst<kVnni>(d[h], wv[h][t], xb + 4 * t);
        }
      }
      const __m512 xsv = _mm512_set1_ps(xs[i * ldxs + b]);
      for (int h = 0; h < P; ++h)
        acc[i][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[h]), _mm512_mul_ps(xsv, wsv[h]), acc[i][h]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int h = 0; h < P; ++h)
      _mm512_mask_storeu_ps(y + i * ldy + int64_t{16} * h, h == P - 1 ? last : full, acc[i][h]);
  }
}

// kMaxBiased: the largest biased weight of the panels (the NVFP4 packer's
// for KernelTable::i8_micro_small / i8_micro2_small).
template <bool kVnni, int32_t kMaxBiased = kI8MaxBiasedNf4>
void i8_micro2_avx512(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                      int32_t mr, const uint8_t* wq, int64_t wq_stride, const float* ws, int64_t ws_stride,
                      int64_t nb, float* y, int64_t ldy, int32_t nr2, bool accumulate) {
  with_rows<kI8MR<kVnni>>(mr, [&](auto rows) {
    i8_micro_rows<decltype(rows)::value, 2, kVnni, kMaxBiased>(xq, ldxq, xs, xc, ldxs, wq, wq_stride, ws,
                                                               ws_stride, nb, y, ldy, nr2, accumulate);
  });
}

template <bool kVnni, int32_t kMaxBiased = kI8MaxBiasedNf4>
void i8_micro_avx512(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                     int32_t mr, const uint8_t* wq, const float* ws, int64_t nb, float* y, int64_t ldy,
                     int32_t nr, bool accumulate) {
  with_rows<kI8MR<kVnni>>(mr, [&](auto rows) {
    i8_micro_rows<decltype(rows)::value, 1, kVnni, kMaxBiased>(xq, ldxq, xs, xc, ldxs, wq, 0, ws, 0, nb, y,
                                                               ldy, nr, accumulate);
  });
}

}  // namespace
}  // namespace q4::kern

namespace q4::kern {
namespace {

// 16 E4M3 codes (one per dword, low byte) -> fp32, exactly as e4m3_decode.
inline __m512 i8_e4m3_decode16(__m512i c) {
  const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7f));
  const __m512i normal_bits = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(c, _mm512_set1_epi32(7))),
                                   _mm512_set1_ps(1.0f / 512.0f));
  const __mmask16 is_sub = _mm512_testn_epi32_mask(c, _mm512_set1_epi32(0x78));
  const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
  __m512 v = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(normal_bits), sub);
  v = _mm512_mask_blend_ps(is_nan, v, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

// 16 E4M3 codes known to be normal and positive (0x08 .. 0x7e; one per
// dword, low byte) -> fp32: the plain bit mapping, exponent + 120 and the
// mantissa in place (i8_e4m3_decode16 handles every code).
inline __m512 i8_e4m3_normal16(__m512i c) {
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(c, 20), _mm512_set1_epi32(120 << 23)));
}

// 16 rows x 64 bytes -> 16 vectors: out + 64 j, 128-bit lane L = byte
// 16 L + j of rows 0..15 (a byte transpose inside the lanes: four unpack
// stages, rows interleaved in order, columns 8 h1 + 4 h2 + 2 h3 + h4 from
// the lo/hi choices).
inline void i8_transpose16x64(const __m512i (&z)[16], uint8_t* out) {
  __m512i a[16], b[16];
  for (int64_t i = 0; i < 8; ++i) {
    a[i] = _mm512_unpacklo_epi8(z[2 * i], z[2 * i + 1]);
    a[8 + i] = _mm512_unpackhi_epi8(z[2 * i], z[2 * i + 1]);
  }
  for (int64_t g = 0; g < 16; g += 8) {
    for (int64_t i = 0; i < 4; ++i) {
      b[g + i] = _mm512_unpacklo_epi16(a[g + 2 * i], a[g + 2 * i + 1]);
      b[g + 4 + i] = _mm512_unpackhi_epi16(a[g + 2 * i], a[g + 2 * i + 1]);
    }
  }
  for (int64_t g = 0; g < 16; g += 4) {
    for (int64_t i = 0; i < 2; ++i) {
      a[g + i] = _mm512_unpacklo_epi32(b[g + 2 * i], b[g + 2 * i + 1]);
      a[g + 2 + i] = _mm512_unpackhi_epi32(b[g + 2 * i], b[g + 2 * i + 1]);
    }
  }
  for (int64_t g = 0; g < 16; g += 2) {
    _mm512_storeu_si512(out + g * 64, _mm512_unpacklo_epi64(a[g], a[g + 1]));
    _mm512_storeu_si512(out + (g + 1) * 64, _mm512_unpackhi_epi64(a[g], a[g + 1]));
  }
}

// Block scales of the panel (rows >= `rows`: 0): the codes of 16 rows and
// 64 blocks transposed in registers (i8_transpose16x64), then 16 lanes
// decoded per block.
inline void i8_pack_scales(const NvWeights& w, int64_t n0, int32_t rows, int64_t b0, int64_t nb, float* ws) {
  const int64_t kb = w.k / 16;
  alignas(64) uint8_t t[1024];
  for (int64_t s0 = 0; s0 < nb; s0 += 64) {
    const int64_t ns = std::min<int64_t>(64, nb - s0);
    const __mmask64 lm = ns >= 64 ? ~__mmask64{0} : (__mmask64{1} << ns) - 1;
    __m512i z[16];
    for (int r = 0; r < 16; ++r) {
      z[r] = r < rows ? _mm512_maskz_loadu_epi8(lm, w.s + (n0 + r) * kb + b0 + s0) : _mm512_setzero_si512();
    }
    i8_transpose16x64(z, t);
    for (int64_t b = 0; b < ns; ++b) {
      const uint8_t* p = t + (b % 16) * 64 + (b / 16) * 16;
      const __m512i codes = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
      _mm512_storeu_ps(ws + (s0 + b) * 16, i8_e4m3_decode16(codes));
    }
  }
}

inline void i8_pack_nvfp4_avx512(const NvWeights& w, int64_t n0, int32_t rows, int64_t b0, int64_t nb,
                                 uint8_t* wq, float* ws) {
  alignas(16) static const uint8_t zeros[16] = {};
  i8_pack_codes_avx512<true>(w.q, w.k, n0, rows, b0, nb, i8_biased_lut512(), zeros, wq);
  i8_pack_scales(w, n0, rows, b0, nb, ws);
}

// The E4M3 codes of rows row[0..15] (kb per row, at s + row[r] * kb)
// transposed into `out` in spans of 64 blocks (i8_transpose16x64's order,
// zeros past the last block; i8_tile_scale_group_bytes in all). True when
// every code is a normal positive E4M3 (in [0x08, 0x7e]); *signs is
// nonzero when a code has its top bit set (NvWeights::signs). The codes'
// bytewise smallest and largest are kept in vectors and tested once. (Two
// compares into mask registers per row and span, and the mask arithmetic
// that gathered them, took 14 % of a stateless fast-mode GEMV at M = 1
// with the weight in L2 on a Zen 4; without them, one-process A/B both
// orders: 1 thread 1.06-1.08x, 2 threads 4096x4096 and 11008x4096 in L3
// 1.05x; M = 4-8 within the noise.)
inline bool i8_transpose_scales(const uint8_t* s, const int64_t* row, int64_t kb, uint8_t* out,
                                __mmask64* signs) {
  __m512i lo = _mm512_set1_epi8(-1), hi = _mm512_setzero_si512();
  for (int64_t s0 = 0; s0 < kb; s0 += 64) {
    const __mmask64 lm = kb - s0 >= 64 ? ~__mmask64{0} : (__mmask64{1} << (kb - s0)) - 1;
    __m512i z[16];
    for (int r = 0; r < 16; ++r) {
      z[r] = _mm512_maskz_loadu_epi8(lm, s + row[r] * kb + s0);
      lo = _mm512_mask_min_epu8(lo, lm, lo, z[r]);  // (masked-off bytes are zero: kept out)
      hi = _mm512_max_epu8(hi, z[r]);
    }
    i8_transpose16x64(z, out + s0 / 64 * 1024);
  }
  *signs |= _mm512_movepi8_mask(hi);
  // Outside [0x08, 0x7e]: zero, subnormal, NaN or negative.
  return (_mm512_cmplt_epu8_mask(lo, _mm512_set1_epi8(0x08)) |
          _mm512_cmpgt_epu8_mask(hi, _mm512_set1_epi8(0x7e))) == 0;
}

// i8_transpose_scales from MXFP4's E8M0 scales in place (NvWeights::e8m0,
// cols = K/32 bytes per row, every byte inside the window under 2^t): each
// row's 32 bytes per span made into the E4M3 codes they stand for, each
// twice, in registers, then the same transpose. With d = e - 120 - t (the
// exponent field; -2 .. 15 inside the window), the code is d << 3 for d >=
// 1 and 1 << (d + 2) (subnormal) for d = -2 .. 0: one word permute on d + 2
// from a table of the 18 words (the code in both bytes). Returns whether
// every code is a normal E4M3 (the smallest d + 2, kept in a vector, is at
// least 3). Against the same arithmetic in registers with a compare into
// a mask and mask arithmetic per row (one-process A/B both orders, Zen 4,
// MXFP4 fast mode M = 1): 1 thread 1.08-1.09x, 2 threads 4096x4096 in L3
// 1.05-1.07x.
struct I8E8m0CodeWords {
  // Word i: the codec's E4M3 code of an E8M0 byte with d = i - 2 (the byte
  // 118 + i under t = 0), in both bytes; words 18-31 unused (zero).
  alignas(64) uint16_t w[32] = {};
  I8E8m0CodeWords() {
    for (int i = 0; i < 18; ++i) {
      const uint16_t code = fmt::mx_nv_scale_byte_u8(static_cast<uint8_t>(118 + i), 0);
      w[i] = static_cast<uint16_t>(code | code << 8);
    }
  }
};

inline bool i8_transpose_e8m0(const uint8_t* e, const int64_t* row, int64_t cols, int32_t t, uint8_t* out) {
  const int64_t kb = 2 * cols;
  static const I8E8m0CodeWords words;  // (made once)
  const __m512i table = _mm512_load_si512(words.w);
  const __m512i c = _mm512_set1_epi16(static_cast<int16_t>(118 + t));
  __m512i least = _mm512_set1_epi16(-1);
  for (int64_t s0 = 0; s0 < kb; s0 += 64) {
    const int64_t left = (kb - s0) / 2;  // E8M0 bytes of this span
    const __mmask32 lm = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
    __m512i z[16];
    for (int r = 0; r < 16; ++r) {
      const __m512i i2 =
          _mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(lm, e + row[r] * cols + s0 / 2)), c);
      least = _mm512_mask_min_epu16(least, lm, least, i2);
      // Words past the row's end zero.
      z[r] = _mm512_maskz_permutexvar_epi16(lm, i2, table);
    }
    i8_transpose16x64(z, out + s0 / 64 * 1024);
  }
  return _mm512_cmplt_epu16_mask(least, _mm512_set1_epi16(3)) == 0;
}

// KernelTable::i8_tile_scale_group: i8_tile_scales for the 16 rows at s.
inline uint8_t i8_tile_scale_group_avx512(const uint8_t* s, int64_t kb, uint8_t* out) {
  const int64_t row[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  __mmask64 signs = 0;
  return i8_transpose_scales(s, row, kb, out, &signs) ? 1 : 0;
}

// The two weight formats of the integer GEMV: nibble order, the biased
// int8 table and its bias, and the fp32 scale of each (row, block) for 16
// rows and the 8 blocks of a 128-element chunk (sc[q] lane r = block q of
// row r), set up once per group of 16 rows (begin).
struct I8zNvfp4 {
  static constexpr bool kEvenLow = true;                    // element 2j in the low nibble
  static constexpr int32_t kMaxBiased = kI8MaxBiasedNvfp4;  // the largest biased weight
  const NvWeights& w;
  // The group's E4M3 codes, transposed once per group: per span of 64
  // blocks, i8_transpose16x64's 16 vectors (block 16 L + j of the 16 rows at
  // span * 1024 + 64 j + 16 L); sp: st, or the group's part of the weight's
  // tile_scales (same order).
  std::vector<uint8_t> st;
  const uint8_t* sp = nullptr;
  bool normal = true;            // every code of the group is a normal positive E4M3
  __mmask64 signs = 0;           // the top bits of every code loaded (NvWeights::signs)
  I8zNvfp4(const NvWeights& wt)  // NOLINT(google-explicit-constructor)
      : w(wt), st(static_cast<size_t>(i8_tile_scale_group_bytes(wt.k))) {}
  __m512i lut() const { return i8_biased_lut512(); }
  // row[r]: the weight row of lane r (rows past the end repeat the last).
  void begin(const int64_t* row) {
    if (w.tile_scales != nullptr && w.signs == nullptr && row[0] % 16 == 0 && row[15] == row[0] + 15) {
      sp = w.tile_scales + row[0] / 16 * i8_tile_scale_group_bytes(w.k);
      normal = (w.tile_flags[row[0] / 16] & 1) != 0;
      return;
    }
    sp = st.data();
    if (w.s == nullptr && w.e8m0 != nullptr) {  // MXFP4's E8M0 scales in place
      normal = i8_transpose_e8m0(w.e8m0, row, w.k / 32, w.e8m0_t, st.data());
      return;
    }
    normal = i8_transpose_scales(w.s, row, w.k / 16, st.data(), &signs);
  }
  const char* scale_span(int64_t r0, int64_t n, int64_t* bytes) const {
    if (w.tile_scales != nullptr && w.signs == nullptr && r0 % 16 == 0 && n == 16) {  // (as begin reads)
      *bytes = i8_tile_scale_group_bytes(w.k);
      return reinterpret_cast<const char*>(w.tile_scales + r0 / 16 * *bytes);
    }
    return nvfp4_scale_span(w, r0, n, bytes);
  }
  // fn(scale) with scale(c, q) = scale(c, q) below, the test of `normal`
  // taken once for the group (i8_gemv_rows).
  template <class Fn>
  __m512 with_scales(Fn&& fn) const {
    if (normal) return fn([this](int64_t c, int q) { return i8_e4m3_normal16(codes(c, q)); });
    return fn([this](int64_t c, int q) { return i8_e4m3_decode16(codes(c, q)); });
  }
  // The scales of block q of chunk c for the 16 rows.
  __m512 scale(int64_t c, int q) const {
    return normal ? i8_e4m3_normal16(codes(c, q)) : i8_e4m3_decode16(codes(c, q));
  }
  // Their E4M3 codes, one per dword.
  __m512i codes(int64_t c, int q) const {
    const uint8_t* p = sp + c / 8 * 1024 + (c % 8) / 2 * 16 + ((c % 2) * 8 + q) * 64;
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

struct I8zNf4 {
  static constexpr bool kEvenLow = false;                 // element 2j in the high nibble
  static constexpr int32_t kMaxBiased = kI8MaxBiasedNf4;  // the largest biased weight
  const Nf4Weights& w;
  const uint8_t* code;
  const float* base = nullptr;  // absmax of the block holding element a (below)
  __m512i off{};                // element offset of each lane's row from a
  // Blocks q sharing one absmax gather, less one (1, 2, 4 or 8 blocks: the
  // block size is a power of two): a mask, not a divisor (q % qstep was an
  // integer division per block of the kernels' loops).
  int32_t qmask = 0;
  I8zNf4(const Nf4Weights& wt, const uint8_t* c) : w(wt), code(c) {
    // Rows start on an absmax block when K % blocksize == 0: then a
    // blocksize of 16 << j covers 2^j blocks of 16 (the whole chunk from 128).
    qmask = w.k % w.blocksize == 0 ? static_cast<int32_t>(std::min<int64_t>(8, w.blocksize / 16)) - 1 : 0;
  }
  __m512i lut() const {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(code)));
  }
  // The group's absmax block-major (16 rows of a block adjacent): the
  // linear's tiles (Nf4Weights::tile_absmax), or (own_absmax, K %
  // blocksize == 0) the copy `own`, filled 16 blocks at a time by a 16x16
  // transpose as scale() reaches them; null: one 16-lane gather per block.
  const float* tiled = nullptr;
  bool own_absmax = false;
  std::vector<float> own;
  int64_t own_end = 0;  // blocks of the group in `own` so far (no `own`: the largest int64_t)
  int64_t rows[16] = {};
  void begin(const int64_t* row) {
    const int64_t nb = w.k >> w.block_shift;  // blocks per row when K % blocksize == 0
    tiled = w.tile_absmax != nullptr && row[0] % 16 == 0 && row[15] == row[0] + 15
                ? w.tile_absmax + row[0] * nb
                : nullptr;
    own_end = std::numeric_limits<int64_t>::max();
    if (tiled == nullptr && own_absmax && w.k % w.blocksize == 0 && nb > 0) {
      own.resize(static_cast<size_t>((nb + 15) / 16 * 16 * 16));
      std::copy(row, row + 16, rows);
      tiled = own.data();
      own_end = 0;
    }
    // Offsets relative to a = row[0] K rounded down to a block keep the
    // indices in int32 (they are < 16 K + blocksize).
    const int64_t a = (row[0] * w.k) >> w.block_shift << w.block_shift;
    alignas(64) int32_t e[16];
    for (int r = 0; r < 16; ++r) e[r] = static_cast<int32_t>(row[r] * w.k - a);
    off = _mm512_load_si512(e);
    base = w.absmax + (a >> w.block_shift);
  }
  const char* scale_span(int64_t r0, int64_t n, int64_t* bytes) const {
    if (w.tile_absmax != nullptr && r0 % 16 == 0 && n == 16) {
      const int64_t per_row = w.k >> w.block_shift;
      *bytes = 16 * per_row * static_cast<int64_t>(sizeof(float));
      return reinterpret_cast<const char*>(w.tile_absmax + r0 * per_row);
    }
    return nf4_scale_span(w, r0, n, bytes);
  }
  // Blocks [own_end, own_end + 16) of the group's rows into `own` (once per
  // 16 blocks: out of line, scale() stays small in the kernels' loops).
  __attribute__((noinline)) void fill_own() {
    const int64_t nb = w.k >> w.block_shift, j0 = own_end;
    const int64_t nj = std::min<int64_t>(16, nb - j0);
    const __mmask16 lm = static_cast<__mmask16>(nj >= 16 ? 0xffffu : (1u << nj) - 1u);
    __m512 z[16], t[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) z[r] = _mm512_maskz_loadu_ps(lm, w.absmax + rows[r] * nb + j0);
    i8_transpose16x16_ps(z, t);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) _mm512_storeu_ps(own.data() + (j0 + j) * 16, t[j]);
    own_end = j0 + 16;
  }
  // fn(scale) with scale(c, q) = scale(c, q) below (i8_gemv_rows): with
  // the absmax tiled, the group's blocks are all made up front and each
  // block's loaded without the tests of scale().
  template <class Fn>
  __m512 with_scales(Fn&& fn) {
    if (tiled != nullptr) {
      const int64_t nb = w.k >> w.block_shift;
      while (own_end < nb) fill_own();
      return fn([this](int64_t c, int q) { return _mm512_loadu_ps(tiled + block(c, q) * 16); });
    }
    return fn([this](int64_t c, int q) { return scale(c, q); });
  }
  // The absmax of block q of chunk c for the 16 rows (one gather, or one
  // load from the tiled absmax, per qmask + 1 blocks: the last one is kept).
  __m512 last{};
  // The absmax block holding block q of chunk c (rows starting on a block).
  int64_t block(int64_t c, int q) const {
    return (c * 128 + int64_t{16} * q) >> w.block_shift;
  }
  __m512 scale(int64_t c, int q) {
    if (tiled != nullptr) {
      if ((q & qmask) == 0) {
        const int64_t j = block(c, q);
        if (j >= own_end) fill_own();  // (blocks are reached in order)
        last = _mm512_loadu_ps(tiled + j * 16);
      }
      return last;
    }
    if ((q & qmask) == 0) {
      const __m512i idx = _mm512_srl_epi32(
          _mm512_add_epi32(off, _mm512_set1_epi32(static_cast<int32_t>(c * 128 + int64_t{16} * q))),
          _mm_cvtsi32_si128(w.block_shift));
      last = _mm512_i32gather_ps(idx, base, 4);
    }
    return last;
  }
};

// How the integer GEMVs prefetch each weight row as they read it (the
// table's entries are chosen once per process, rows_to_l2; p: the 64
// bytes being read, rb: bytes per row): into L1, kRowPrefetchBytes ahead
// in the row, or (kL2) into L2 (prefetcht2) at the same place of the row
// 16 rows on, which the next group of 16 rows reads (a group's time
// ahead; an integer address: past the last group it lies past the
// weight). On a Zen 4, 2 threads, weights rotated through 226 MB, A/B
// both orders, against no prefetch at M = 1 and L1 at 256 bytes at M >=
// 2: from DRAM M = 1 4096x4096 1.6x (NF4 1.5x), 11008x4096 1.5x,
// 4096x11008 1.3x, 2880x2880 (the direct GEMV) 1.4x, M = 4 1.1x, M = 8
// 1.04x; hot 1.0-1.05x. Tried there, not kept: into L1 at 256 bytes
// (M = 1 from DRAM as none, hot 0.92x), into L2 512 bytes ahead in the
// row (1.15x from DRAM, hot 0.92x; 384 bytes to 1 KiB within 3 %,
// prefetcht1 0.97x). The exact GEMV does the same besides its L1 prefetch.
template <bool kL2>
__attribute__((always_inline)) inline void i8_prefetch_row(const uint8_t* p, int64_t rb) {
  if constexpr (kL2) {
    const uintptr_t next = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(16 * rb);
    _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T2);
  } else {
    _mm_prefetch(reinterpret_cast<const char*>(p + kRowPrefetchBytes), _MM_HINT_T0);
  }
}

// GEMV of one row of x (M = 1 on row-major codes; the table's entries run
// i8_gemv_direct for m >= 2, where M rows would each repeat the transposes
// below, and for tiled codes, which need no transpose) straight from the
// 4-bit rows, 16 rows of W at a time (rows p + r * rb), 128 elements (8
// blocks) per step: one 64-byte load per row, nibbles -> biased values
// (vpshufb), two 4-byte dot products per lane give half-block sums, pairs
// of rows are folded into (row, block) sums and an 8x8 qword transpose puts
// the 16 rows of one block in the lanes of one vector; then the bias
// correction and the fixed fp32 sequence per lane (row), blocks ascending.
// xp: x's bytes of each chunk as the two vectors of its even and odd
// dwords (steps 0, 2 and 1, 3 of each block); scale(c, q): the fp32 scales
// of block q of chunk c for the 16 rows. The rows are addressed from four
// base pointers and rb, 3 rb (GCC 12 kept an array of 16 row pointers
// partly in vector registers and on the stack). kL2: i8_prefetch_row.
template <bool kVnni, bool kEvenLow, int32_t kMaxBiased, bool kL2, bool kVbmi, class Scale>
inline __m512 i8_row_group(const uint8_t* p, int64_t rb, int64_t chunks, const int8_t* xp, const float* xs,
                           const int32_t* xc, const int32_t* xcv, __m512i lut, NextGroupPrefetch& next,
                           Scale&& scale) {
  const int64_t rb3 = 3 * rb;
  const uint8_t* pq[4] = {p, p + 4 * rb, p + 8 * rb, p + 12 * rb};
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    next.step();
    const __m512i xlo = _mm512_load_si512(xp + c * 128), xhi = _mm512_load_si512(xp + c * 128 + 64);
    // VNNI: every row's dot products start from the chunk's corrections
    // (xcv: block b's in lane 2b, 0 in lane 2b + 1), so that the folded
    // (row, block) sums carry them once, instead of an add per block
    // (Zen 4, 2 threads, one-process A/B both orders, weights in L3:
    // 4096x4096 1.02-1.07x, 11008x4096 1.03-1.07x, 4096x11008 1.06x).
    const __m512i c0 = kVnni ? _mm512_load_si512(xcv + c * 16) : _mm512_setzero_si512();
    // Pair (a, b) = rows (4h + 2s, 4h + 2s + 1): qword b of its sums C is
    // (block b of row a, of row b). T[e][h] (pairs 2h, 2h+1): 128-bit lane
    // L = block 2L+e of rows 4h..4h+3; U[e][g] / V[e][g] (g: rows
    // 8g..8g+7): lanes = blocks (e, 4+e) / (2+e, 6+e) of rows 8g..8g+3,
    // then of 8g+4..8g+7; D[b] = block b of rows 0..15.
    __m512i T[2][2], U[2][2], V[2][2];
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      __m512i C[2];
#pragma GCC unroll 2
      for (int s = 0; s < 2; ++s) {
        const uint8_t* ra = pq[h] + (s == 0 ? 0 : 2 * rb);
        const uint8_t* rbp = pq[h] + (s == 0 ? rb : rb3);
        // One load per row and chunk, kept in a register: GCC had folded
        // the load into the shift of the high nibbles (vpsrlw from memory)
        // and loaded the row again for the low ones, and when the 16 rows
        // share few L1 sets (rows a multiple of 4 KiB apart: K % 8192 ==
        // 0) the line was gone by the second load. Zen 4, one-process A/B
        // (ab_kernels, 1 thread, weight in L2/L3): 256x8192 1.12x (rows
        // 64-byte aligned) to 1.18x (16 mod 64, as malloc places them),
        // 512x4096 1.02-1.08x, 256x8320 1.00x; the library, 2 threads, in
        // L3: 4096x8192 and 8192x8192 1.08-1.14x, 4096x4096 and
        // 11008x4096 1.02-1.03x; from DRAM unchanged.
        __m512i va = _mm512_loadu_si512(ra + c * 64), vb = _mm512_loadu_si512(rbp + c * 64);
        __asm__("" : "+v"(va), "+v"(vb));
        i8_prefetch_row<kL2>(ra + c * 64, rb);
        i8_prefetch_row<kL2>(rbp + c * 64, rb);
        __m512i la, ha, lb, hb;
        i8_nibble_values<kVbmi>(va, lut, la, ha);
        i8_nibble_values<kVbmi>(vb, lut, lb, hb);
        const __m512i ea = kEvenLow ? la : ha, oa = kEvenLow ? ha : la;
        const __m512i eb = kEvenLow ? lb : hb, ob = kEvenLow ? hb : lb;
        __m512i A, B;
        if constexpr (kVnni) {
          A = i8_dot4<true>(i8_dot4<true>(c0, ea, xlo), oa, xhi);
          B = i8_dot4<true>(i8_dot4<true>(c0, eb, xlo), ob, xhi);
        } else {
          A = i8_dot8<kVnni, kMaxBiased>(ea, xlo, oa, xhi);
          B = i8_dot8<kVnni, kMaxBiased>(eb, xlo, ob, xhi);
        }
        C[s] = _mm512_add_epi32(_mm512_mask_blend_epi32(0xaaaa, A, B),
                                _mm512_shuffle_epi32(_mm512_mask_blend_epi32(0x5555, A, B), _MM_PERM_CDAB));
      }
      T[0][h % 2] = _mm512_unpacklo_epi64(C[0], C[1]);
      T[1][h % 2] = _mm512_unpackhi_epi64(C[0], C[1]);
      if (h % 2 == 1) {
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {
          U[e][h / 2] = _mm512_shuffle_i64x2(T[e][0], T[e][1], 0x88);
          V[e][h / 2] = _mm512_shuffle_i64x2(T[e][0], T[e][1], 0xdd);
        }
      }
    }
    __m512i D[8];
#pragma GCC unroll 2
    for (int e = 0; e < 2; ++e) {
      D[e] = _mm512_shuffle_i64x2(U[e][0], U[e][1], 0x88);
      D[4 + e] = _mm512_shuffle_i64x2(U[e][0], U[e][1], 0xdd);
      D[2 + e] = _mm512_shuffle_i64x2(V[e][0], V[e][1], 0x88);
      D[6 + e] = _mm512_shuffle_i64x2(V[e][0], V[e][1], 0xdd);
    }
#pragma GCC unroll 8
    for (int qb = 0; qb < 8; ++qb) {
      const __m512i d = kVnni ? D[qb] : _mm512_add_epi32(D[qb], _mm512_set1_epi32(xc[c * 8 + qb]));
      const __m512 pr = _mm512_mul_ps(_mm512_set1_ps(xs[c * 8 + qb]), scale(c, qb));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), pr, acc);
    }
  }
  return acc;
}

// The group of 16 weight rows at j0 with `rows` of them real: row[] (the
// rows past the end repeat the last; their outputs are not stored) and the
// first of 16 rows rb bytes apart: the weight's own, or for a last group of
// fewer rows a copy in `tail` with the last row repeated.
inline const uint8_t* i8_group_rows(const uint8_t* q, int64_t rb, int64_t j0, int32_t rows,
                                    int64_t (&row)[16], std::vector<uint8_t>& tail) {
  for (int r = 0; r < 16; ++r) row[r] = j0 + std::min(r, rows - 1);
  if (rows >= 16) return q + j0 * rb;
  tail.resize(static_cast<size_t>(16 * rb));
  for (int r = 0; r < 16; ++r) std::memcpy(tail.data() + r * rb, q + row[r] * rb, static_cast<size_t>(rb));
  return tail.data();
}

// i8_row_group over rows [n0, n1) (k % 128 == 0); a last group of < 16
// rows is copied to a buffer with its last row repeated (not stored).
template <bool kVnni, bool kL2, bool kVbmi, class Fmt>
void i8_gemv_rows(const int8_t* xq, const float* xs, const int32_t* xc, Fmt& f, int64_t k, int64_t n0,
                  int64_t n1, float post, float* y) {
  const int64_t rb = k / 2, chunks = k / 128;
  // k bytes: x's even and odd dwords per chunk; with VNNI then 16 int32
  // per chunk, the corrections spread for i8_row_group.
  AlignedFloats xbuf = aligned_floats(k / 4 + (kVnni ? chunks * 16 : 0));
  int8_t* xp = reinterpret_cast<int8_t*>(xbuf.get());
  const __m512i even_dw = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_dw = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t c = 0; c < chunks; ++c) {
    const __m512i x0 = _mm512_loadu_si512(xq + c * 128), x1 = _mm512_loadu_si512(xq + c * 128 + 64);
    _mm512_store_si512(xp + c * 128, _mm512_permutex2var_epi32(x0, even_dw, x1));
    _mm512_store_si512(xp + c * 128 + 64, _mm512_permutex2var_epi32(x0, odd_dw, x1));
  }
  // VNNI: the corrections of each chunk's 8 blocks in lanes 0, 2, .., 14
  // (i8_row_group).
  int32_t* xcv = reinterpret_cast<int32_t*>(xbuf.get() + k / 4);
  if constexpr (kVnni) {
    const __m512i spread = _mm512_setr_epi32(0, 16, 1, 16, 2, 16, 3, 16, 4, 16, 5, 16, 6, 16, 7, 16);
    for (int64_t c = 0; c < chunks; ++c) {
      const __m512i v =
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + c * 8)));
      _mm512_store_si512(xcv + c * 16, _mm512_permutex2var_epi32(v, spread, _mm512_setzero_si512()));
    }
  }
  const __m512i lut = f.lut();
  std::vector<uint8_t> tail;
  for (int64_t j0 = n0; j0 < n1; j0 += 16) {
    const int32_t rows = static_cast<int32_t>(std::min<int64_t>(16, n1 - j0));
    int64_t row[16];
    const uint8_t* base = i8_group_rows(f.w.q, rb, j0, rows, row, tail);
    f.begin(row);
    NextGroupPrefetch next([&](int64_t r0, int64_t n, int64_t* bytes) { return f.scale_span(r0, n, bytes); },
                           f.w.q, rb, j0 + 16, std::min<int64_t>(16, n1 - j0 - 16), chunks);
    const __m512 acc = f.with_scales([&](auto&& scale) {
      return i8_row_group<kVnni, Fmt::kEvenLow, Fmt::kMaxBiased, kL2, kVbmi>(base, rb, chunks, xp, xs, xc,
                                                                             xcv, lut, next, scale);
    });
    const __mmask16 km =
        rows >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << rows) - 1u);
    _mm512_mask_storeu_ps(y + (j0 - n0), km, _mm512_mul_ps(acc, _mm512_set1_ps(post)));
  }
}

// Integer GEMV for 2 <= m <= kI8DirectMaxRows rows of x (fast mode and
// W4A4 at decoding batch sizes): the weights are decoded once into the
// panel operand order in registers and used by every row of x, so the work
// per x row is the micro-kernel's (four dot products on a broadcast of x,
// one cvt, one mul, one fma per block), not the GEMV's per-row transpose of
// its sums. Per 16 rows of W and 32 elements: one 16-byte load per row,
// four rows per vector (128-bit lanes) and a 4x4 dword transpose inside the
// lanes give dword d of the 16 rows in one vector; its low and high nibbles
// are steps 2(d%2) and 2(d%2)+1 of block d/2 (kI8Perm). x is staged per call
// block-major (I8Staged): the bytes, scales and corrections of every row
// of a block are adjacent, so one pointer walks them. Same fixed fp32
// sequence as i8_micro.
constexpr int32_t kI8DirectGroup = 8;     // rows of x per register group (8 fp32 accumulators)
constexpr int32_t kI8DirectMaxRows = 64;  // up to eight groups over each 16 rows of W (from L1)

// Rows of x in a group from which its dot products run step-major (VNNI;
// i8_direct_group): per block, step t of the four vpdpbusd of every row of
// x, then step t + 1, each row one chain from its correction, instead of
// row after row as two chains of two and an add (i8_dot16_bcst_split): the
// M dot products of a step are independent, so the chains' latency is
// hidden without the add (7 vector operations per block and row on the
// two 512-bit pipes instead of 8), and the int32 sums are the same. Such
// groups run out of line (i8_direct_group_step_major): inlined in
// i8_gemv_direct they measured 0.94-1.0x on NF4 and on tiles 1.02x, out of
// line 1.06x and 1.10x. Measured on an Emerald Rapids-class Xeon, 2
// threads, one-process A/B, weights 2048x4096 in L3 unless said: row form
// M = 8 1.05x (NF4 1.06x), M = 16-64 1.11-1.13x, tiles M = 8 1.10x, M = 32
// 1.12-1.14x; M = 8 from DRAM 1.05-1.09x (rows) and 1.10-1.15x (tiles);
// M = 3-4 rows 1.00-1.07x, tiles 1.05x; M = 2 rows 1.00x, tiles 1.04x.
constexpr int32_t kI8StepMajorRows = 2;

// Bytes ahead of the one being read that the GEMV prefetches in a tile
// stream (NvWeights::tiles: one contiguous stream per group of 16 rows,
// the next group's after it). Measured on a Zen 5 at M = 8, 4096x4096:
// 4-8 KiB 1.15-1.27x the row form, 1 KiB 0.91-1.07x, none 0.70-0.94x.
constexpr int64_t kTilePrefetchBytes = 8192;

// The 16 bytes of rows r = 0..15 of a quarter of a chunk with dword d of
// the 16 rows in T[d]: four rows per vector (lane L of z[g] = row g + 4L,
// three inserts each), then a 4x4 dword transpose inside the lanes. The
// rows come from four row pointers: qp[L] at row 4L (the quarter's first
// byte), rows 4L + g at qp[L] + g * rb (rb3 = 3 rb), so that every load is
// one addressing mode off a pointer the caller advances by 16 bytes per
// quarter (I8QuarterRows). (From rows + c * 64 + h * 16 GCC 12 kept the
// 16 row addresses' parts in vector registers and on the stack, a dozen
// moves per quarter; on a Zen 4, one-process A/B both orders, stateless
// fast mode: M = 2-8 1.08-1.14x, 11008x4096 M = 8 from DRAM 1.10-1.12x,
// M = 16 1.02x.)
__attribute__((always_inline)) inline void i8_load_quarters_at(const uint8_t* const (&qp)[4], int64_t rb,
                                                               int64_t rb3, __m512i (&T)[4]) {
  __m512i z[4];
#pragma GCC unroll 4
  for (int64_t g = 0; g < 4; ++g) {
    const int64_t off = g == 0 ? 0 : g == 1 ? rb : g == 2 ? 2 * rb : rb3;
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qp[0] + off)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qp[1] + off)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qp[2] + off)), 2);
    z[g] = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qp[3] + off)), 3);
  }
  i8_transpose_dwords(z, T);
}

// The four row pointers of i8_load_quarters_at for the 16 rows at rows +
// r * rb, and their step to the next quarter.
struct I8QuarterRows {
  const uint8_t* qp[4];
  I8QuarterRows(const uint8_t* rows, int64_t rb) : qp{rows, rows + 4 * rb, rows + 8 * rb, rows + 12 * rb} {}
  void next() {
    for (const uint8_t*& r : qp) r += 16;
  }
};

// Whether the 16 rows of a GEMV group, rb bytes apart, all map to one L1
// set (4 KiB per way on the CPUs these kernels run on: rb a multiple of
// 4096, K % 8192 == 0).
inline bool i8_rows_share_a_set(int64_t rb) {
  return rb % 4096 == 0;
}

// The per-chunk copy of i8_direct_group for rows that share an L1 set
// (kStage): the 16 rows' 64-byte lines are read once per chunk with
// aligned loads, each stored at its row's place in two buffers (as the
// second line of this chunk's and the first of the next one's), so that
// buffer c % 2 holds lines c and c + 1 of every row, 128 bytes apart, and
// the chunk's 64 bytes start `mis` bytes into its row (mis 0: one line per
// row and chunk). Reads outside the rows (the part of the first line
// before a row that starts past a line, the part of the last line after
// it) are masked off. Without it the four quarter loads of a chunk each
// missed L1 (16 lines in 8 ways). Zen 4, in-process A/B (ab_kernels,
// avx512_vnni table), 256x8192 hot, one thread: M = 2 1.32x, M = 4 1.35x,
// M = 8 1.23x, M = 16 1.13x (rows 16 bytes past a line; aligned rows
// 1.23-1.25x, 8 past 1.48-1.70x), NF4 and MXFP4 M = 4 1.33-1.34x;
// 4096x8192 from DRAM, 2 threads: M = 2 1.22x, M = 4 1.28x, M = 8 1.21x,
// M = 16 1.14x, M = 32 1.05x. A template parameter: the same copy chosen
// at run time in the loop made the other K 0.95-0.98x at M = 2-4.
struct I8RowStage {
  static constexpr int64_t kRowBytes = 128;
  int64_t mis = 0;
  const uint8_t* al = nullptr;  // the rows' first line
  int64_t rb = 0;
  alignas(64) uint8_t buf[2][16 * kRowBytes];
  I8RowStage(const uint8_t* rows, int64_t row_bytes) {
    mis = static_cast<int64_t>(reinterpret_cast<uintptr_t>(rows) % 64);
    // (an integer address: the line may start before the weight)
    al = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(rows) - static_cast<uintptr_t>(mis));
    rb = row_bytes;
    if (mis == 0) return;  // (chunk() loads each chunk's line itself)
    const __mmask64 head = ~__mmask64{0} << mis;
    for (int r = 0; r < 16; ++r) {
      _mm512_store_si512(buf[0] + r * kRowBytes, _mm512_maskz_loadu_epi8(head, al + r * rb));
    }
  }
  // The 16 rows of chunk c (of `chunks`) at the returned pointer + r * kRowBytes.
  const uint8_t* chunk(int64_t c, int64_t chunks) {
    uint8_t* cx = buf[c & 1];
    if (mis == 0) {
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r)
        _mm512_store_si512(cx + r * kRowBytes, _mm512_load_si512(al + r * rb + c * 64));
      return cx;
    }
    uint8_t* cy = buf[(c & 1) ^ 1];
    const __mmask64 keep = c + 1 < chunks ? ~__mmask64{0} : (__mmask64{1} << mis) - 1;
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      const __m512i v = _mm512_maskz_loadu_epi8(keep, al + r * rb + (c + 1) * 64);
      _mm512_store_si512(cx + r * kRowBytes + 64, v);
      _mm512_store_si512(cy + r * kRowBytes, v);
    }
    return cx + mis;
  }
};
// The plain groups' stand-in (no buffer in their frames).
struct I8NoRowStage {
  I8NoRowStage(const uint8_t*, int64_t) {}
};

// One group of M rows of x over the 16 rows of W at rows + r * rb (chunks
// of 128 elements), or (tile not null) the same rows in the tile order of
// i8_tile_codes at `tile` (a weight's tiles, or the copy a first group
// stored); `next` is stepped once per chunk when not null. With several
// groups the first one stores the block scales of the 16 rows in `sbuf`
// (fill) and the others read them back (an NF4 absmax gather or an E4M3
// decode per block done once, not per group); sbuf null: each block's
// scales are worked out in place. kStore (tile null): the transposed codes
// are also stored at tile_out in the tile order, for the groups that
// follow. K % 128 == 64 (rb % 64 == 32): the last of the `chunks` chunks
// is half a chunk, its first two quarters.
template <int M, bool kVnni, bool kStore, bool kL2, bool kVbmi, bool kStage, class Fmt>
inline void i8_direct_group(const I8Staged& x, Fmt& f, const uint8_t* rows, int64_t rb, int64_t chunks,
                            NextGroupPrefetch* next, float* sbuf, bool fill, float post, float* y,
                            int64_t ldy, __mmask16 km, const uint8_t* tile, uint8_t* tile_out) {
  const __m512i lut = f.lut();
  __m512 acc[M];
#pragma GCC unroll 8
  for (int64_t i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  const int8_t* xq = x.q.data();
  const float* xs = x.s.data();
  const int32_t* xc = x.c.data();
  const int64_t last_quarters = rb % 64 == 0 ? 4 : 2;
  I8QuarterRows qr(rows, rb);
  // kStage (rows a multiple of 4 KiB apart, K % 8192 == 0, and no tiles):
  // each chunk's 16 lines copied once into a stack buffer (I8RowStage),
  // the quarters read from there.
  std::conditional_t<kStage, I8RowStage, I8NoRowStage> stage(rows, rb);
  const int64_t qrb = kStage ? I8RowStage::kRowBytes : rb, qrb3 = 3 * qrb;
  for (int64_t c = 0; c < chunks; ++c) {
    if (next != nullptr) {
      next->step();
      if (tile == nullptr) {
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) i8_prefetch_row<kL2>(rows + r * rb + c * 64, rb);
      }
    }
    if constexpr (kStage) qr = I8QuarterRows(stage.chunk(c, chunks), I8RowStage::kRowBytes);
    const int64_t quarters = c + 1 < chunks ? 4 : last_quarters;
#pragma GCC unroll 1
    for (int64_t h = 0; h < quarters; ++h) {
      __m512i T[4];
      if (tile != nullptr) {
        const uint8_t* p = tile + (c * 4 + h) * 256;
#pragma GCC unroll 4
        for (int64_t d = 0; d < 4; ++d) {
          T[d] = _mm512_loadu_si512(p + 64 * d);
          // (past the end of the tiles: a prefetch does not fault)
          _mm_prefetch(reinterpret_cast<const char*>(p + 64 * d + kTilePrefetchBytes), _MM_HINT_T0);
        }
      } else {
        i8_load_quarters_at(qr.qp, qrb, qrb3, T);
        qr.next();
        if constexpr (kStore) {
          uint8_t* o = tile_out + (c * 4 + h) * 256;
#pragma GCC unroll 4
          for (int64_t d = 0; d < 4; ++d) _mm512_store_si512(o + 64 * d, T[d]);
        }
      }
#pragma GCC unroll 2
      for (int64_t e = 0; e < 2; ++e) {
        const int64_t b = c * 8 + h * 2 + e;
        __m512i wv[4];
#pragma GCC unroll 2
        for (int64_t d = 0; d < 2; ++d) {
          __m512i lo, hi;
          i8_nibble_values<kVbmi>(T[2 * e + d], lut, lo, hi);
          wv[2 * d] = Fmt::kEvenLow ? lo : hi;
          wv[2 * d + 1] = Fmt::kEvenLow ? hi : lo;
        }
        __m512 wsc;
        if (sbuf == nullptr || fill) {
          wsc = f.scale(c, static_cast<int>(h * 2 + e));
          if (sbuf != nullptr) _mm512_store_ps(sbuf + b * 16, wsc);
        } else {
          wsc = _mm512_load_ps(sbuf + b * 16);
        }
        const int8_t* xb = xq + b * M * 16;
        if constexpr (kVnni && M >= kI8StepMajorRows) {
          // Step-major: step t of the dot products of all M rows, then
          // step t + 1 (one chain of four per row, from its correction).
          __m512i dd[M];
#pragma GCC unroll 8
          for (int64_t i = 0; i < M; ++i) dd[i] = _mm512_set1_epi32(xc[b * M + i]);
#pragma GCC unroll 4
          for (int64_t t = 0; t < 4; ++t) {
#pragma GCC unroll 8
            for (int64_t i = 0; i < M; ++i) dd[i] = i8_dot4_bcst<kVnni>(dd[i], wv[t], xb + i * 16 + 4 * t);
          }
#pragma GCC unroll 8
          for (int64_t i = 0; i < M; ++i) {
            const __m512 pr = _mm512_mul_ps(_mm512_set1_ps(xs[b * M + i]), wsc);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dd[i]), pr, acc[i]);
          }
          continue;
        }
#pragma GCC unroll 8
        for (int64_t i = 0; i < M; ++i) {
          const __m512i d = i8_dot16_bcst_split<kVnni, Fmt::kMaxBiased>(xc[b * M + i], wv, xb + i * 16);
          const __m512 pr = _mm512_mul_ps(_mm512_set1_ps(xs[b * M + i]), wsc);
          acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), pr, acc[i]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int64_t i = 0; i < M; ++i)
    _mm512_mask_storeu_ps(y + i * ldy, km, _mm512_mul_ps(acc[i], _mm512_set1_ps(post)));
}

// KernelTable::i8_tile_group: i8_load_quarters_at of every chunk and
// quarter, stored (16 rows, `chunks` chunks of 128 elements, rows rb bytes
// apart; out 64-byte aligned).
inline void i8_tile_group_avx512(const uint8_t* rows, int64_t rb, int64_t chunks, uint8_t* out) {
  I8QuarterRows qr(rows, rb);
  for (int64_t c = 0; c < chunks; ++c) {
#pragma GCC unroll 4
    for (int64_t h = 0; h < 4; ++h) {
      __m512i T[4];
      i8_load_quarters_at(qr.qp, rb, 3 * rb, T);
      qr.next();
      uint8_t* o = out + (c * 4 + h) * 256;
#pragma GCC unroll 4
      for (int64_t d = 0; d < 4; ++d) _mm512_store_si512(o + 64 * d, T[d]);
    }
  }
}

// The first of several groups over codes without tiles, which also stores
// them. Out of line: inlined beside the plain group in i8_gemv_direct, it
// made the plain group 1-4 % slower on tiles at M = 1-8 (Zen 5).
template <int M, bool kVnni, bool kL2, bool kVbmi, bool kStage, class Fmt>
__attribute__((noinline)) void i8_direct_group_store(const I8Staged& x, Fmt& f, const uint8_t* rows,
                                                     int64_t rb, int64_t chunks, NextGroupPrefetch* next,
                                                     float* sbuf, float post, float* y, int64_t ldy,
                                                     __mmask16 km, uint8_t* tile_out) {
  i8_direct_group<M, kVnni, true, kL2, kVbmi, kStage>(x, f, rows, rb, chunks, next, sbuf, true, post, y, ldy,
                                                      km, nullptr, tile_out);
}

// A plain group whose dot products run step-major, out of line (see
// kI8StepMajorRows).
template <int M, bool kVnni, bool kL2, bool kVbmi, bool kStage, class Fmt>
__attribute__((noinline)) void i8_direct_group_step_major(const I8Staged& x, Fmt& f, const uint8_t* rows,
                                                          int64_t rb, int64_t chunks, NextGroupPrefetch* next,
                                                          float* sbuf, bool fill, float post, float* y,
                                                          int64_t ldy, __mmask16 km, const uint8_t* tile) {
  i8_direct_group<M, kVnni, false, kL2, kVbmi, kStage>(x, f, rows, rb, chunks, next, sbuf, fill, post, y, ldy,
                                                       km, tile, nullptr);
}

template <bool kVnni, bool kL2, bool kVbmi, class Fmt>
void i8_gemv_direct(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                    int32_t m, Fmt& f, int64_t k, int64_t n0, int64_t n1, float post, float* y, int64_t ldy) {
  if (m > kI8DirectMaxRows) {  // the drivers pass at most i8_gemv_max_m rows; any more run in passes
    for (int32_t i0 = 0; i0 < m; i0 += kI8DirectMaxRows) {
      i8_gemv_direct<kVnni, kL2, kVbmi>(xq + i0 * ldxq, ldxq, xs + i0 * ldxs, xc + i0 * ldxs, ldxs,
                                        std::min(kI8DirectMaxRows, m - i0), f, k, n0, n1, post, y + i0 * ldy,
                                        ldy);
    }
    return;
  }
  const int64_t rb = k / 2, chunks = (k + 127) / 128;  // (K % 128 == 64: a last half chunk)
  const int32_t groups = (m + kI8DirectGroup - 1) / kI8DirectGroup;
  I8Staged st[kI8DirectMaxRows / kI8DirectGroup];
  for (int32_t g = 0; g < groups; ++g) {
    const int32_t g0 = g * kI8DirectGroup;
    st[g].stage(xq, ldxq, xs, xc, ldxs, g0, std::min(kI8DirectGroup, m - g0), k / 16);
  }
  std::vector<uint8_t> tail;  // a last group of < 16 rows, padded by repeating its last row
  AlignedFloats sbuf = aligned_floats(groups > 1 ? k : 16);  // 16 rows x k/16 block scales
  // Codes without tiles and several groups: the first group stores the 16
  // rows in the tile order as it transposes them (16 * k/2 bytes, in L1 or
  // L2 when the next group reads them), the others read that copy instead
  // of loading and transposing the rows again (Zen 5, 4096x4096, stateless
  // fast mode: M = 16 1.06-1.10x, M = 32 1.16-1.20x, M = 64 1.10-1.23x).
  AlignedFloats tbuf;                                // allocated at the first such group
  const bool share_a_set = i8_rows_share_a_set(rb);  // (I8RowStage)
  for (int64_t j0 = n0; j0 < n1; j0 += 16) {
    const int32_t rows = static_cast<int32_t>(std::min<int64_t>(16, n1 - j0));
    const __mmask16 km =
        rows >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << rows) - 1u);
    int64_t row[16];
    const uint8_t* base = i8_group_rows(f.w.q, rb, j0, rows, row, tail);
    f.begin(row);
    // A full group of a tiled weight reads its tiles (prefetched in the
    // stream, the next group's codes with them): the next group's scales
    // only are prefetched here.
    const uint8_t* tile = f.w.tiles != nullptr && rows == 16 && j0 % 16 == 0 ? f.w.tiles + j0 * rb : nullptr;
    NextGroupPrefetch next([&](int64_t r0, int64_t n, int64_t* bytes) { return f.scale_span(r0, n, bytes); },
                           f.w.q, rb, j0 + 16, std::min<int64_t>(16, n1 - j0 - 16), chunks, tile == nullptr);
    if (tile == nullptr && groups > 1 && tbuf == nullptr) tbuf = aligned_floats(2 * k);
    uint8_t* scratch = tile == nullptr ? reinterpret_cast<uint8_t*>(tbuf.get()) : nullptr;
    for (int32_t g = 0; g < groups; ++g) {
      float* yg = y + static_cast<int64_t>(g) * kI8DirectGroup * ldy + (j0 - n0);
      if (g == 0 && scratch != nullptr) {  // (groups > 1: a full first group)
        with_flag(share_a_set, [&](auto stage) {
          i8_direct_group_store<kI8DirectGroup, kVnni, kL2, kVbmi, decltype(stage)::value>(
              st[g], f, base, rb, chunks, &next, sbuf.get(), post, yg, ldy, km, scratch);
        });
        continue;
      }
      const uint8_t* tg = tile != nullptr ? tile : g > 0 ? scratch : nullptr;
      // The rows themselves are read (no tiles, no copy of a first group).
      // M = 1 on such rows runs the row GEMV (no tiles, K % 128 == 0): no
      // staged copy of the plain group at M = 1.
      with_rows<kI8DirectGroup>(st[g].gm, [&](auto r) {
        constexpr int kM = decltype(r)::value;
        NextGroupPrefetch* ng = g == 0 ? &next : nullptr;
        float* sb = groups > 1 ? sbuf.get() : nullptr;
        with_flag(share_a_set && tg == nullptr && kM >= 2, [&](auto stage) {
          constexpr bool kStage = decltype(stage)::value && kM >= 2;
          if constexpr (kVnni && kM >= kI8StepMajorRows) {
            i8_direct_group_step_major<kM, kVnni, kL2, kVbmi, kStage>(st[g], f, base, rb, chunks, ng, sb,
                                                                      g == 0, post, yg, ldy, km, tg);
          } else {
            i8_direct_group<kM, kVnni, false, kL2, kVbmi, kStage>(st[g], f, base, rb, chunks, ng, sb, g == 0,
                                                                  post, yg, ldy, km, tg, nullptr);
          }
        });
      });
    }
  }
}

// The 16 lane reductions of 16 vectors at once (lane j of the result: the
// reduction of v[j]'s lanes) by an exact, associative and commutative
// integer op (max, add): halves of two vectors per step, 15 ops and 30
// shuffles instead of 16 x 8 dependent steps.
template <class Op>
inline __m512i reduce16_epi32(const __m512i (&v)[16], Op op) {
  __m512i h[8], q[4], p[2];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {  // lanes 0-7: v[2j]'s 8 partials, 8-15: v[2j + 1]'s
    const int e = j + j;
    h[j] = op(_mm512_shuffle_i32x4(v[e], v[e + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_i32x4(v[e], v[e + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {  // 128-bit lane l: 4 partials of v[4j + l]
    const int e = j + j;
    q[j] = op(_mm512_shuffle_i32x4(h[e], h[e + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_i32x4(h[e], h[e + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j) {  // lane l: 2 partials of v[8j + l] and of v[8j + 4 + l]
    const int e = j + j;
    const __m512 a = _mm512_castsi512_ps(q[e]), b = _mm512_castsi512_ps(q[e + 1]);
    p[j] = op(_mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0))),
              _mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2))));
  }
  const __m512 a = _mm512_castsi512_ps(p[0]), b = _mm512_castsi512_ps(p[1]);
  // 128-bit lane l: v[l], v[4 + l], v[8 + l], v[12 + l]
  const __m512i r = op(_mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
                       _mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

// KernelTable::i8_quantize_act: every byte, scale and correction of
// i8_activations_quantize (portable_int8.cpp), 16 blocks at a time: the
// blocks' maxima and code sums by reduce16_epi32, their scales amax / 127
// by one IEEE division (a vector division is exact per lane, as the
// scalar one). A block's quotients x / scale are taken as x * (127 /
// amax) where that cannot change a code: the product is within 2^-15 of
// the rounded quotient (|x / scale| <= 127 (1 + 2^-23); three roundings of
// at most 2^-24 relative, and the quotient's own half ulp, 2^-18), and the
// code, trunc(v +- 0.5) of the clamped quotient v, changes only where v
// crosses a k + 1/2 (within half an ulp of it); so the product decides
// when every lane lies more than 2^-12 from every k + 1/2. Otherwise (a
// block in ~128 of random data), and for blocks with amax below 2^-119
// (zero, or a scale near or below the subnormals) or non-finite, the
// block is divided lane by lane as before. Measured on an Emerald
// Rapids-class Xeon, one thread, M = 128, K = 256, against one block per
// vector with a 16-lane division each: see docs/performance.md.
inline void i8_quantize_act_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* xq,
                                   int64_t ldxq, float* xs, int32_t* xc, int64_t ldxs, int32_t bias) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf_bits = _mm512_set1_epi32(0x7f800000);
  const __m512i sign_mask = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f), half = _mm512_set1_ps(0.5f);
  const __m512i min_direct = _mm512_set1_epi32(0x04000000);  // 2^-119
  // Four blocks' codes (natural order, int32) packed to bytes: lane L of
  // the packs holds elements 4L..4L+3 of each block; vpermd gathers each
  // block's into its 16 bytes, vpshufb puts them in the kI8Perm order.
  const __m512i gather = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i order =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15));
  const int64_t nb = k / 16;
  // The codes of quotients q (x / scale or its stand-in): the clamped
  // quotient plus 0.5 with its sign (-0.0 takes -0.5: code 0 all the
  // same), truncated.
  auto codes = [&](__m512 q) {
    q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
    const __m512 h = _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(_mm512_castps_si512(q), sign_mask, _mm512_castps_si512(half), 0xea));
    return _mm512_cvttps_epi32(_mm512_add_ps(q, h));
  };
  // q - RNE(q), in [-1/2, 1/2] and exact (vreduceps): q lies within
  // 2^-12 of a k + 1/2 exactly when its magnitude is >= 1/2 - 2^-12 (both
  // sides exact).
  auto off_int = [&](__m512 q) { return _mm512_reduce_ps(q, _MM_FROUND_TO_NEAREST_INT); };
  // max(|a|, |b|) in one vrangeps (absolute maximum, sign cleared)
  auto abs_max = [&](__m512 a, __m512 b) { return _mm512_range_ps(a, b, 0x0b); };
  const __m512 near_half = _mm512_set1_ps(0.5f - 0x1p-12f);
  alignas(64) float scale_of[16], recip_of[16];
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * ldx;
    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
      const int g = static_cast<int>(std::min<int64_t>(16, nb - b0));
      const __mmask16 gm = static_cast<__mmask16>((1u << g) - 1u);
      __m512 v[16];
      __m512i t[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        v[j] = j < g ? _mm512_loadu_ps(xi + (b0 + j) * 16) : _mm512_setzero_ps();
        t[j] = _mm512_and_si512(_mm512_castps_si512(v[j]), abs_mask);
      }
      // amax of each block (as bits: the order of non-negative floats;
      // a non-finite lane makes it >= inf_bits)
      const __m512i amax = reduce16_epi32(t, [](__m512i a, __m512i b) { return _mm512_max_epu32(a, b); });
      const __mmask16 finite = _mm512_cmplt_epu32_mask(amax, inf_bits);
      // blocks the product may take: finite, amax >= 2^-119 (scale normal,
      // 127 / amax finite and within the error above)
      const __mmask16 direct = finite & _mm512_cmpge_epu32_mask(amax, min_direct);
      // (masked divisions: no lane of a non-finite block is divided, and
      // no 127 / 0 is, so no exception flag is raised that the old code
      // did not raise)
      const __m512 scale = _mm512_maskz_div_ps(finite, _mm512_castsi512_ps(amax), hi);
      _mm512_store_ps(scale_of, scale);
      _mm512_store_ps(recip_of, _mm512_maskz_div_ps(direct, hi, _mm512_castsi512_ps(amax)));
      // Block j by itself: the product where it decides, else the division
      // (zero codes for a zero scale or a non-finite block).
      auto one = [&](int j) {
        if ((direct >> j) & 1u) {
          const __m512 q = _mm512_mul_ps(v[j], _mm512_set1_ps(recip_of[j]));
          if (_mm512_cmp_ps_mask(abs_max(off_int(q), off_int(q)), near_half, _CMP_GE_OQ) == 0)
            return codes(q);
        }
        if (((finite >> j) & 1u) && scale_of[j] > 0.0f)
          return codes(_mm512_div_ps(v[j], _mm512_set1_ps(scale_of[j])));
        return _mm512_setzero_si512();
      };
#pragma GCC unroll 4
      for (int j0 = 0; j0 < 16; j0 += 4) {
        if (j0 >= g) {
          t[j0] = t[j0 + 1] = t[j0 + 2] = t[j0 + 3] = _mm512_setzero_si512();
          continue;
        }
        bool done = false;
        if (((direct >> j0) & 0xfu) == 0xfu) {  // four blocks, one test
          __m512 q[4];
#pragma GCC unroll 4
          for (int u = 0; u < 4; ++u) q[u] = _mm512_mul_ps(v[j0 + u], _mm512_set1_ps(recip_of[j0 + u]));
          const __m512 far =
              abs_max(abs_max(off_int(q[0]), off_int(q[1])), abs_max(off_int(q[2]), off_int(q[3])));
          if (_mm512_cmp_ps_mask(far, near_half, _CMP_GE_OQ) == 0) {
#pragma GCC unroll 4
            for (int u = 0; u < 4; ++u) t[j0 + u] = codes(q[u]);
            done = true;
          }
        }
        if (!done) {
#pragma GCC unroll 4
          for (int u = 0; u < 4; ++u) t[j0 + u] = j0 + u < g ? one(j0 + u) : _mm512_setzero_si512();
        }
        const __m512i bytes = _mm512_shuffle_epi8(
            _mm512_permutexvar_epi32(gather, _mm512_packs_epi16(_mm512_packs_epi32(t[j0], t[j0 + 1]),
                                                                _mm512_packs_epi32(t[j0 + 2], t[j0 + 3]))),
            order);
        const int nq = std::min(4, g - j0);
        _mm512_mask_storeu_epi8(xq + i * ldxq + (b0 + j0) * 16,
                                nq == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * nq)) - 1u, bytes);
      }
      const __m512i sum = reduce16_epi32(t, [](__m512i a, __m512i b) { return _mm512_add_epi32(a, b); });
      // A NaN/Inf activation: a NaN scale and zero codes (sum 0).
      _mm512_mask_storeu_ps(
          xs + i * ldxs + b0, gm,
          _mm512_mask_blend_ps(finite, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()), scale));
      _mm512_mask_storeu_epi32(xc + i * ldxs + b0, gm, _mm512_mullo_epi32(_mm512_set1_epi32(-bias), sum));
    }
  }
}

// Integer roof probe: 12 independent accumulator chains, 64 int8 MACs per
// dot-product step.
template <bool kVnni>
double i8_probe_avx512(int64_t iters) {
  __m512i acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_epi32(j);
  __m512i b = _mm512_set1_epi8(5);
  for (int64_t it = 0; it < iters; ++it) {
    __asm__ volatile("" : "+v"(b));  // no hoisting
    // The unsigned operand is the chain's own accumulator: no product is
    // shared between chains (values wrap; only the instruction rate counts).
    for (__m512i& a : acc) a = i8_dot4<kVnni>(a, a, b);
  }
  __m512i s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_epi32(s, acc[j]);
  volatile int32_t sink = _mm512_reduce_add_epi32(s);
  (void)sink;
  return static_cast<double>(iters) * 12 * 64 * 2;
}

template <bool kVnni, bool kL2, bool kVbmi>
void i8_gemv_avx512(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                    int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float post, float* y,
                    int64_t ldy) {
  I8zNvfp4 f(w);
  // M = 1 from tiles too: no per-row transpose of sums, and the tile
  // stream (hot 1.3-1.4x the row GEMV on a Zen 5, from DRAM 1.0-1.1x);
  // and K % 128 == 64, which only the direct GEMV takes.
  if (m > 1 || w.tiles != nullptr || w.k % 128 != 0) {
    i8_gemv_direct<kVnni, kL2, kVbmi>(xq, ldxq, xs, xc, ldxs, m, f, w.k, n0, n1, post, y, ldy);
  } else {
    i8_gemv_rows<kVnni, kL2, kVbmi>(xq, xs, xc, f, w.k, n0, n1, post, y);
  }
  // The sign rule fused: begin() loaded every code of rows [n0, n1).
  if (w.signs != nullptr && f.signs != 0) w.signs->negative.store(true, std::memory_order_relaxed);
}

template <bool kVnni, bool kL2, bool kVbmi>
void i8_gemv_nf4_avx512(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                        int32_t m, const Nf4Weights& w, const uint8_t* code, int64_t n0, int64_t n1,
                        float post, float* y, int64_t ldy) {
  I8zNf4 f(w, code);
  // The transposed absmax instead of gathers from 4 rows of x (Zen 5,
  // 4096x4096, stateless: M = 4 hot 1.07-1.11x, from DRAM 1.01-1.04x;
  // M = 8 1.03-1.06x / 1.05-1.06x; at M = 1-2 hot 1.02-1.16x but from
  // DRAM 0.87-0.98x, 4096x11008 the least). The row GEMV (M = 1) reads
  // it too: hot 1.16x, from DRAM within the noise.
  const bool direct = m > 1 || w.tiles != nullptr || w.k % 128 != 0;  // (as i8_gemv_avx512)
  f.own_absmax = m >= 4 || !direct;
  if (direct)
    return i8_gemv_direct<kVnni, kL2, kVbmi>(xq, ldxq, xs, xc, ldxs, m, f, w.k, n0, n1, post, y, ldy);
  i8_gemv_rows<kVnni, kL2, kVbmi>(xq, xs, xc, f, w.k, n0, n1, post, y);
}

}  // namespace
}  // namespace q4::kern
