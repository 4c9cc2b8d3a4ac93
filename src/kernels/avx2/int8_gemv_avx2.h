// Integer GEMV for 256-bit x86 (KernelTable::i8_gemv_nvfp4 / i8_gemv_nf4):
// the AVX2 table (vpmaddubsw + vpmaddwd) and the AVX-VNNI table (VEX
// vpdpbusd on ymm) include it, each compiled with its own flags (internal
// linkage). Also the AVX-VNNI micro-kernel and probe.
//
// Per 8 rows of W and 64 elements (4 blocks): one 32-byte load per row,
// nibbles -> biased int8 values by vpshufb, dword lane d of a row = half d%2
// of block d/2; two 4-byte dot products per lane with the activation dwords
// of the same steps give half-block sums; rows 2p, 2p+1 are folded into
// (row, block) qwords and a 4x4 qword transpose puts the 8 rows of one
// block in the lanes of one vector. Then the fixed fp32 sequence of
// KernelTable::i8_micro per lane (row), blocks ascending: bit-identical to
// every other table.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/codec.h"
#include "kernels/isa_common.h"
#include "kernels/kernel_table.h"

// The VNNI ymm instruction: VEX (AVX-VNNI) in the AVX-VNNI unit, EVEX
// (AVX-512 VNNI + VL) in the AVX-512 VNNI unit; absent elsewhere.
#if defined(__AVXVNNI__)
#define NVFP4_I8Y_DPBUSD(acc, u8, s8) _mm256_dpbusd_avx_epi32(acc, u8, s8)
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define NVFP4_I8Y_DPBUSD(acc, u8, s8) _mm256_dpbusd_epi32(acc, u8, s8)
#endif

namespace q4::kern {
namespace {

// 4-byte dot products of u8 x s8 per dword lane, added to acc. Without
// VNNI the int16 pair sums of vpmaddubsw cannot saturate: biased weights
// are <= 126 and |x| <= 127, so |pair| <= 32004.
template <bool kVnni>
inline __m256i i8y_dot4(__m256i acc, __m256i u8, __m256i s8) {
  if constexpr (kVnni) {
#if defined(NVFP4_I8Y_DPBUSD)
    return NVFP4_I8Y_DPBUSD(acc, u8, s8);
#else
    static_assert(!kVnni, "VNNI instantiated in a unit without VNNI");
    return acc;
#endif
  } else {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1)));
  }
}

// i8y_dot4(i8y_dot4(0, e, xe), o, xo), or without VNNI and with weights at
// most kMaxBiased where two pair sums fit int16 (i8_int16_sums), the two
// vpmaddubsw added in int16 before one vpmaddwd: the same integers.
template <bool kVnni, int32_t kMaxBiased>
inline __m256i i8y_dot8(__m256i e, __m256i xe, __m256i o, __m256i xo) {
  if constexpr (!kVnni && i8_int16_sums(kMaxBiased, 2)) {
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(e, xe), _mm256_maddubs_epi16(o, xo)),
                             _mm256_set1_epi16(1));
  } else {
    return i8y_dot4<kVnni>(i8y_dot4<kVnni>(_mm256_setzero_si256(), e, xe), o, xo);
  }
}

// acc + the 16-element dot products of w[0..3] (4 bytes each per lane)
// with the broadcasts of the 4-byte groups at x; without VNNI and with
// weights where four pair sums fit int16, one vpmaddwd for the four
// vpmaddubsw (9 instructions instead of 12; the same integers).
template <bool kVnni, int32_t kMaxBiased>
inline __m256i i8y_dot16_bcst(__m256i acc, const __m256i (&w)[4], const int8_t* x) {
  // (each 4-byte group broadcast from memory: a 16-byte load and lane
  // extracts cost shuffles)
  const auto bcst = [x](int t) {
    int32_t x4;
    std::memcpy(&x4, x + int64_t{4} * t, 4);
    return _mm256_set1_epi32(x4);
  };
  if constexpr (!kVnni && i8_int16_sums(kMaxBiased, 4)) {
    __m256i s16 = _mm256_maddubs_epi16(w[0], bcst(0));
    for (int t = 1; t < 4; ++t) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[t], bcst(t)));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
  } else {
    for (int t = 0; t < 4; ++t) acc = i8y_dot4<kVnni>(acc, w[t], bcst(t));
    return acc;
  }
}

// The 4x4 dword transpose inside the 128-bit lanes: dword p of lane L of
// T[d] = dword d of lane L of z[p]. With rows g and g + 4 in the two lanes
// of z[g], T[d] holds dword d of the 8 rows in order (the panel packer and
// the GEMV both decode rows this way).
inline void i8y_transpose_dwords(const __m256i (&z)[4], __m256i (&T)[4]) {
  const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]);
  const __m256i t1 = _mm256_unpackhi_epi32(z[0], z[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]);
  const __m256i t3 = _mm256_unpackhi_epi32(z[2], z[3]);
  T[0] = _mm256_unpacklo_epi64(t0, t2);
  T[1] = _mm256_unpackhi_epi64(t0, t2);
  T[2] = _mm256_unpacklo_epi64(t1, t3);
  T[3] = _mm256_unpackhi_epi64(t1, t3);
}

// KernelTable::i8_tile_group (kernel_table.h's tile order; 16 rows rb
// bytes apart, `chunks` chunks of 128 elements, out 64-byte aligned): per
// chunk and quarter, rows r and r + 4 of each half of the group in the two
// lanes of one vector, so that one in-lane 4x4 dword transpose
// (i8y_transpose_dwords) puts dword d of 8 rows in order and two aligned
// 32-byte stores write the 64 bytes of d. (Linear creation and weight
// updates in fast mode tile every weight: against the scalar loop, one
// thread, 4096 x 4096 on a Zen 4 whose VM hides AVX-512: see
// docs/performance.md's sixty-second session.)
inline void i8_tile_group_avx2(const uint8_t* rows, int64_t rb, int64_t chunks, uint8_t* out) {
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t h = 0; h < 4; ++h) {
      const uint8_t* src = rows + c * 64 + h * 16;
      uint8_t* tile = out + (c * 4 + h) * 256;
      for (int64_t half = 0; half < 2; ++half) {
        __m256i z[4], t[4];
        for (int64_t p = 0; p < 4; ++p) {
          const uint8_t* a = src + (8 * half + p) * rb;
          z[p] = _mm256_inserti128_si256(
              _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 4 * rb)), 1);
        }
        i8y_transpose_dwords(z, t);
        for (int64_t d = 0; d < 4; ++d)
          _mm256_store_si256(reinterpret_cast<__m256i*>(tile + 64 * d + 32 * half), t[d]);
      }
    }
  }
}

// The 16 x 16 byte transpose inside each 128-bit lane: byte r of lane L of
// col[j] = byte j of lane L of v[r]. Four rounds of unpacks (bytes, words,
// dwords, qwords), each pairing rows: a[8x + i] holds rows 2i, 2i + 1 of
// columns 8x .. 8x + 7, b[4y + q] rows 4q .. 4q + 3 of columns 4y .. 4y +
// 3, c[2z + o] rows 8o .. 8o + 7 of columns 2z, 2z + 1.
inline void i8y_transpose16x16_bytes(const __m256i (&v)[16], __m256i (&col)[16]) {
  __m256i a[16], b[16], c[16];
  for (int64_t i = 0; i < 8; ++i) {
    a[i] = _mm256_unpacklo_epi8(v[2 * i], v[2 * i + 1]);
    a[8 + i] = _mm256_unpackhi_epi8(v[2 * i], v[2 * i + 1]);
  }
  for (int64_t x = 0; x < 2; ++x) {
    for (int64_t q = 0; q < 4; ++q) {
      b[4 * (2 * x) + q] = _mm256_unpacklo_epi16(a[8 * x + 2 * q], a[8 * x + 2 * q + 1]);
      b[4 * (2 * x + 1) + q] = _mm256_unpackhi_epi16(a[8 * x + 2 * q], a[8 * x + 2 * q + 1]);
    }
  }
  for (int64_t y = 0; y < 4; ++y) {
    for (int64_t o = 0; o < 2; ++o) {
      c[2 * (2 * y) + o] = _mm256_unpacklo_epi32(b[4 * y + 2 * o], b[4 * y + 2 * o + 1]);
      c[2 * (2 * y + 1) + o] = _mm256_unpackhi_epi32(b[4 * y + 2 * o], b[4 * y + 2 * o + 1]);
    }
  }
  for (int64_t z = 0; z < 8; ++z) {
    col[2 * z] = _mm256_unpacklo_epi64(c[2 * z], c[2 * z + 1]);
    col[2 * z + 1] = _mm256_unpackhi_epi64(c[2 * z], c[2 * z + 1]);
  }
}

// 8 E4M3 codes (the low 8 bytes of c) that are all normal and positive ->
// fp32, by the plain bit mapping (code << 20) + (120 << 23).
inline __m256 i8y_e4m3_normal8(__m128i c) {
  return _mm256_castsi256_ps(
      _mm256_add_epi32(_mm256_slli_epi32(_mm256_cvtepu8_epi32(c), 20), _mm256_set1_epi32(120 << 23)));
}

// 8 E4M3 codes (one per dword, low byte) -> fp32, exactly as e4m3_decode.
inline __m256 i8y_e4m3_decode8(__m256i c) {
  const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, _mm256_set1_epi32(7))),
                                   _mm256_set1_ps(1.0f / 512.0f));
  const __m256i is_sub =
      _mm256_cmpeq_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x78)), _mm256_setzero_si256());
  const __m256i is_nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
  __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(is_sub));
  v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), _mm256_castsi256_ps(is_nan));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign));
}

// Normal and positive E4M3 codes are 0x08 .. 0x7e: (code - 8) <= 0x76 as
// unsigned bytes. i8y_code_excess: code - 8 per byte; i8y_excess_normal:
// whether every byte of such differences (or of their maxima) is <= 0x76.
inline __m256i i8y_code_excess(__m256i codes) {
  return _mm256_sub_epi8(codes, _mm256_set1_epi8(8));
}
inline bool i8y_excess_normal(__m256i t) {
  const __m256i lim = _mm256_set1_epi8(0x76);
  return _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(t, lim), lim)) == -1;
}
// The same on 16 bytes: code - 8 per byte, and the mask of the bytes of t
// that are <= 0x76 (bit i: byte i).
inline __m128i i8y_code_excess(__m128i codes) {
  return _mm_sub_epi8(codes, _mm_set1_epi8(8));
}
inline int i8y_excess_normal_mask(__m128i t) {
  const __m128i lim = _mm_set1_epi8(0x76);
  return _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(t, lim), lim));
}
// Whether all of s[0, n) are normal and positive (the GEMVs' scale decodes
// then take the plain bit mapping, (code << 20) + (120 << 23), unchecked).
// From 32 codes on, the last 32 cover the rest, overlapping (the exact
// GEMV's K chunks at M = 5, 7 and 8 scan 72 or 48 codes a row: against a
// byte loop for the rest, on an AVX2 Zen 3, 2 threads, A/B in one process,
// M = 8 1.08-1.12x, M = 5 and 7 1.00-1.01x).
// Below 32 codes, two overlapping 16- or 8-byte loads (the exact GEMV at
// M = 1-2 scans 8 codes a row at K = 128, 16 at K = 256; see
// nvfp4_gemv64_rows for what that gained over a byte loop).
inline bool i8y_codes_normal(const uint8_t* s, int64_t n) {
  const auto excess = [s](int64_t i) {
    return i8y_code_excess(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
  };
  if (n >= 32) {
    __m256i hi = excess(n - 32);
    for (int64_t i = 0; i + 32 < n; i += 32) hi = _mm256_max_epu8(hi, excess(i));
    return i8y_excess_normal(hi);
  }
  if (n >= 8) {
    __m128i a, b;
    if (n >= 16) {
      a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + n - 16));
    } else {
      a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
      b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + n - 8));
    }
    // (8-byte loads zero the high bytes: 0 - 8 = 0xf8, so only the low 8 count)
    const int ok = i8y_excess_normal_mask(_mm_max_epu8(i8y_code_excess(a), i8y_code_excess(b)));
    return n >= 16 ? ok == 0xffff : (ok & 0xff) == 0xff;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (static_cast<uint8_t>(s[i] - 8) > 0x76) return false;
  }
  return true;
}

// KernelTable::i8_tile_scale_group (kernel_table.h: 16 rows of kb E4M3
// codes, kb % 8 == 0, into spans of 64 blocks, byte 64j + 16L + r of span
// p = block 64p + 16L + j of row r, zeros past kb; returns 1 when every
// code is normal and positive): per span, blocks 32h .. 32h + 31 of the 16
// rows as 16 vectors (blocks 16L .. 16L + 15, L = 2h and 2h + 1, in the
// two lanes), one 16 x 16 byte transpose per lane, and column j's two
// lanes are the 32 bytes at 64j + 32h. A last piece shorter than 32 codes
// is loaded by dwords (kb % 8 == 0), the rest zero; the normal check then
// ignores those zeros.
inline uint8_t i8_tile_scale_group_avx2(const uint8_t* s, int64_t kb, uint8_t* out) {
  const int64_t spans = (kb + 63) / 64;
  __m256i excess = _mm256_set1_epi8(0x76);  // (the largest excess of a normal code)
  for (int64_t p = 0; p < spans; ++p) {
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t b0 = 64 * p + 32 * h, n = std::min<int64_t>(32, kb - b0);
      __m256i v[16], col[16];
      if (n <= 0) {
        for (auto& x : v) x = _mm256_setzero_si256();
      } else if (n == 32) {
        for (int64_t r = 0; r < 16; ++r) {
          v[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + r * kb + b0));
          excess = _mm256_max_epu8(excess, i8y_code_excess(v[r]));
        }
      } else {
        const __m256i dwords = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n / 4)),
                                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int64_t r = 0; r < 16; ++r) {
          v[r] = _mm256_maskload_epi32(reinterpret_cast<const int*>(s + r * kb + b0), dwords);
          excess = _mm256_max_epu8(excess, _mm256_and_si256(i8y_code_excess(v[r]), dwords));
        }
      }
      i8y_transpose16x16_bytes(v, col);
      uint8_t* o = out + p * 1024 + 32 * h;
      for (int64_t j = 0; j < 16; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 64 * j), col[j]);
    }
  }
  return i8y_excess_normal(excess) ? 1 : 0;
}

// The vector whose lane r is lane r of at(r) (r = 0..7; at(r) a broadcast
// load): seven blends, no gather (microcoded on AMD) and no shuffle.
template <class At>
inline __m256 i8y_blend_lanes8(At&& at) {
  __m256 v = at(0);
  v = _mm256_blend_ps(v, at(1), 0x02);
  v = _mm256_blend_ps(v, at(2), 0x04);
  v = _mm256_blend_ps(v, at(3), 0x08);
  v = _mm256_blend_ps(v, at(4), 0x10);
  v = _mm256_blend_ps(v, at(5), 0x20);
  v = _mm256_blend_ps(v, at(6), 0x40);
  return _mm256_blend_ps(v, at(7), 0x80);
}

// The 8x8 dword transpose: dword r of T[d] = dword d of z[r]. (The high
// halves by vpermq + vpblendd rather than vperm2i128, which a Zen 1 splits
// into 8 uops; see the row GEMV's transpose.)
inline void i8y_transpose8x8_dwords(const __m256i (&z)[8], __m256i (&T)[8]) {
  __m256i a[8], b[8];
  for (int64_t p = 0; p < 4; ++p) {
    a[2 * p] = _mm256_unpacklo_epi32(z[2 * p], z[2 * p + 1]);
    a[2 * p + 1] = _mm256_unpackhi_epi32(z[2 * p], z[2 * p + 1]);
  }
  for (int64_t p = 0; p < 2; ++p) {  // b[4p + d], 128-bit lane L: dword 4L + d of rows 4p .. 4p+3
    b[4 * p] = _mm256_unpacklo_epi64(a[4 * p], a[4 * p + 2]);
    b[4 * p + 1] = _mm256_unpackhi_epi64(a[4 * p], a[4 * p + 2]);
    b[4 * p + 2] = _mm256_unpacklo_epi64(a[4 * p + 1], a[4 * p + 3]);
    b[4 * p + 3] = _mm256_unpackhi_epi64(a[4 * p + 1], a[4 * p + 3]);
  }
  for (int64_t d = 0; d < 4; ++d) {
    T[d] = _mm256_inserti128_si256(b[d], _mm256_castsi256_si128(b[4 + d]), 1);
    T[4 + d] = _mm256_blend_epi32(_mm256_permute4x64_epi64(b[d], 0xee), b[4 + d], 0xf0);
  }
}

// The 32 bytes at row(r) for the 8 rows, transposed: dword r of T[d] =
// dword d of row r's bytes (the stages below).
template <class Row>
inline void i8y_rows_transposed(Row&& row, __m256i (&T)[8]) {
  __m256i z[8];
  for (int r = 0; r < 8; ++r) z[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row(r)));
  i8y_transpose8x8_dwords(z, T);
}

// Per group of 8 rows of W, the GEMVs first stage the rows' scales of
// every chunk (64 elements, 4 blocks) in a buffer, kI8yStagedPerChunk
// vectors a chunk (Fmt::stage), and each chunk then reads them there
// (Fmt::staged) instead of gathering them from 8 rows: the stage takes
// NVFP4's codes of 8 chunks by one 32-byte load per row and an 8x8
// transpose where the gather took 8 loads and 7 blends per chunk, and the
// chunk loop keeps no row offsets live. On an AVX2 Zen 3, 2 threads, A/B
// in one process: M = 1 in cache NVFP4 1.09-1.11x, NF4 1.03-1.05x, MXFP4
// 1.22x; 11008x4096 from DRAM NVFP4 1.05x, NF4 1.04x, MXFP4 1.21x, M = 4
// 1.05x (NF4 1.12x).
constexpr int64_t kI8yStagedPerChunk = 4;

// The two weight formats of the GEMV: row bytes, nibble order and the
// per-16-block scale of 8 rows.
struct I8yNvfp4 {
  const NvWeights& w;
  int64_t kb;
  // Set when a code read has its sign bit set (the sign rule on the way,
  // NvWeights::signs); null: not asked.
  bool* negative = nullptr;
  I8yNvfp4(const NvWeights& wt, bool* neg = nullptr)  // NOLINT(google-explicit-constructor)
      : w(wt), kb(wt.k / 16), negative(neg) {}
  static constexpr bool kEvenLow = true;                    // element 2j in the low nibble
  static constexpr int32_t kMaxBiased = kI8MaxBiasedNvfp4;  // the largest biased weight
  static constexpr bool kTileScales = true;                 // tile_group() may give them
  const uint8_t* row(int64_t r) const { return w.q + r * (w.k / 2); }
  const uint8_t* tiles() const { return w.tiles; }
  // The tiled group of 16 rows at j0's scale codes (NvWeights::tile_scales,
  // i8_tile_scales' order), or null: none, or the sign rule asked (stage()
  // checks it).
  const void* tile_group(int64_t j0) const {
    return w.tile_scales != nullptr && w.signs == nullptr
               ? w.tile_scales + j0 / 16 * i8_tile_scale_group_bytes(w.k)
               : nullptr;
  }
  bool tile_group_normal(int64_t j0) const { return (w.tile_flags[j0 / 16] & 1) != 0; }
  const char* scale_span(int64_t r0, int64_t n, int64_t* bytes) const {
    if (n == 16 && r0 % 16 == 0 && tile_group(r0) != nullptr) {  // (a tiled group, as the GEMV reads it)
      *bytes = i8_tile_scale_group_bytes(w.k);
      return static_cast<const char*>(tile_group(r0));
    }
    return nvfp4_scale_span(w, r0, n, bytes);
  }
  // Stages the scale codes of rows j0 + rr[0..7]: st[c * kI8yStagedPerChunk]
  // dword r = the 4 codes of chunk c (blocks 4c .. 4c+3) of row rr[r].
  // Returns whether every code is normal and positive (staged() may then
  // skip its check); when not, and *negative is asked for, the rows' codes
  // are searched for a set sign bit (normal codes are positive; every code
  // of the rows passes here, so the GEMV needs no pass of its own over the
  // scales for the sign rule, and the loops above none of its work).
  bool stage(int64_t j0, const int32_t* rr, int64_t chunks, __m256i* st) const {
    const uint8_t* s0 = w.s + j0 * kb;
    __m256i hi = _mm256_setzero_si256();
    int64_t c = 0;
    for (; c + 8 <= chunks; c += 8) {
      __m256i T[8];
      i8y_rows_transposed([&](int r) { return s0 + rr[r] * kb + c * 4; }, T);
      for (int d = 0; d < 8; ++d) {
        st[(c + d) * kI8yStagedPerChunk] = T[d];
        hi = _mm256_max_epu8(hi, i8y_code_excess(T[d]));
      }
    }
    for (; c < chunks; ++c) {  // the last chunks: a broadcast load per row and blends
      const __m256i g = _mm256_castps_si256(i8y_blend_lanes8([&](int r) {
        int32_t v;
        std::memcpy(&v, s0 + rr[r] * kb + c * 4, 4);
        return _mm256_castsi256_ps(_mm256_set1_epi32(v));
      }));
      st[c * kI8yStagedPerChunk] = g;
      hi = _mm256_max_epu8(hi, i8y_code_excess(g));
    }
    if (i8y_excess_normal(hi)) return true;
    if (negative != nullptr && !*negative) {
      for (int r = 0; r < 8 && !*negative; ++r) *negative = any_sign_bit(s0 + rr[r] * kb, kb);
    }
    return false;
  }
  // Scales of blocks 4c .. 4c+3 of the staged rows (lane r: row rr[r]);
  // normal: stage() found every code normal and positive. Inlined by force
  // (the three formats): the direct GEMV's loop over two tile halves had
  // made g++ call it once per half and chunk (on an AVX2 Zen 3, tiled
  // NVFP4 at M = 1: 1.09x in cache and from DRAM; the rest 1.00x).
  __attribute__((always_inline)) void staged(const __m256i* st, int64_t c, bool normal,
                                             __m256 (&sc)[4]) const {
    const __m256i g = _mm256_load_si256(st + c * kI8yStagedPerChunk);
    // Every code a normal positive E4M3, the usual case: the fp32 bits are
    // (code << 20) + (120 << 23), the value i8y_e4m3_decode8 gives, by a
    // shift, a mask and an add per block instead of 12 instructions. When
    // the rows were not all normal, the group's 32 codes are checked here.
    if (!normal) normal = i8y_excess_normal(i8y_code_excess(g));
    if (normal) {
      const __m256i mask = _mm256_set1_epi32(0xff << 20), base = _mm256_set1_epi32(120 << 23);
      sc[0] = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_and_si256(_mm256_slli_epi32(g, 20), mask), base));
      sc[1] = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_and_si256(_mm256_slli_epi32(g, 12), mask), base));
      sc[2] = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_and_si256(_mm256_slli_epi32(g, 4), mask), base));
      sc[3] = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(g, 4), mask), base));
      return;
    }
    for (int q = 0; q < 4; ++q)
      sc[q] = i8y_e4m3_decode8(_mm256_and_si256(_mm256_srli_epi32(g, 8 * q), _mm256_set1_epi32(0xff)));
  }
  // The 8 codes of block 4c + q of half hh of a tiled group in its tile
  // scales ts (tile_group), in the low 8 bytes: the block's 16 rows are 16
  // bytes at 1024 (c / 16) + 256 (c % 4) + 64 q + 16 ((c % 16) / 4), the
  // half's 8 at + 8 hh.
  static __m128i tile_codes8(const void* ts, int64_t c, int hh, int64_t q) {
    return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(ts) + c / 16 * 1024 +
                                                            (c % 4) * 256 + (c % 16) / 4 * 16 +
                                                            int64_t{8} * hh + 64 * q));
  }
  // Block 4c + q's scales of the half, every code normal and positive.
  __attribute__((always_inline)) static __m256 tile_scale_normal(const void* ts, int64_t c, int hh,
                                                                 int64_t q) {
    return i8y_e4m3_normal8(tile_codes8(ts, c, hh, q));
  }
  // staged()'s scales of half hh from the tile scales (normal as staged()).
  __attribute__((always_inline)) void tile_staged(const void* ts, int64_t c, int hh, bool normal,
                                                  __m256 (&sc)[4]) const {
    for (int64_t q = 0; q < 4; ++q) {
      const __m128i g = tile_codes8(ts, c, hh, q);
      sc[q] = normal ? i8y_e4m3_normal8(g) : i8y_e4m3_decode8(_mm256_cvtepu8_epi32(g));
    }
  }
};

// MXFP4's E8M0 scales in place (NvWeights::e8m0 with s null, every byte
// inside E4M3's window under 2^t): bytes 2c (blocks 4c, 4c + 1) and 2c + 1
// of each row, 2^(e - 127 - t) = (e - t) << 23, the fp32 of the E4M3 codes
// the drivers would make. A format of its own, so that I8yNvfp4's kernels
// keep no branch for it (one there cost NVFP4 M = 1-4 7-10 %).
struct I8yMx : I8yNvfp4 {
  using I8yNvfp4::I8yNvfp4;
  // (A stateless product's E8M0 scales: never tiled. Linears run MXFP4 in
  // its NVFP4 form, on I8yNvfp4.)
  static constexpr bool kTileScales = false;
  static const void* tile_group(int64_t /*j0*/) { return nullptr; }
  // st[c * kI8yStagedPerChunk] dword r: the E8M0 bytes of chunk c of row
  // rr[r] in its low 16 bits. A 32-byte load per row holds 16 chunks: after
  // the transpose, dword d of row r holds chunks 2d and 2d + 1.
  bool stage(int64_t j0, const int32_t* rr, int64_t chunks, __m256i* st) const {
    const int64_t kx = w.k / 32;
    const uint8_t* e0 = w.e8m0 + j0 * kx;
    int64_t c = 0;
    for (; c + 16 <= chunks; c += 16) {
      __m256i T[8];
      i8y_rows_transposed([&](int r) { return e0 + rr[r] * kx + c * 2; }, T);
      for (int64_t d = 0; d < 8; ++d) {
        st[(c + 2 * d) * kI8yStagedPerChunk] = T[d];
        st[(c + 2 * d + 1) * kI8yStagedPerChunk] = _mm256_srli_epi32(T[d], 16);
      }
    }
    for (; c < chunks; ++c) {
      st[c * kI8yStagedPerChunk] = _mm256_castps_si256(i8y_blend_lanes8([&](int r) {
        uint16_t v;
        std::memcpy(&v, e0 + rr[r] * kx + c * 2, 2);
        return _mm256_castsi256_ps(_mm256_set1_epi32(v));
      }));
    }
    return true;
  }
  __attribute__((always_inline)) void staged(const __m256i* st, int64_t c, bool /*normal*/,
                                             __m256 (&sc)[4]) const {
    const __m256i g = _mm256_load_si256(st + c * kI8yStagedPerChunk);
    const __m256i t = _mm256_set1_epi32(w.e8m0_t), byte = _mm256_set1_epi32(0xff);
    sc[0] = sc[1] =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_and_si256(g, byte), t), 23));
    sc[2] = sc[3] = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(g, 8), byte), t), 23));
  }
};

struct I8yNf4 {
  const Nf4Weights& w;
  // Blocks of a chunk per distinct absmax: from blocksize 64 on the 4
  // blocks of a chunk (K % 64 == 0) share one per row, at 32 two.
  int64_t per;
  I8yNf4(const Nf4Weights& wt)  // NOLINT(google-explicit-constructor)
      : w(wt), per(wt.block_shift >= 6 ? 4 : (wt.block_shift == 5 ? 2 : 1)) {}
  static constexpr bool kEvenLow = false;                 // element 2j in the high nibble
  static constexpr int32_t kMaxBiased = kI8MaxBiasedNf4;  // the largest biased weight
  static constexpr bool kTileScales = false;
  const uint8_t* row(int64_t r) const { return w.q + r * (w.k / 2); }
  const uint8_t* tiles() const { return w.tiles; }
  // (The staged absmax serve tiled groups too: read from the linear's
  // Nf4Weights::tile_absmax per chunk instead, on a Zen 4, one-process A/B,
  // same bits, 0.98-1.01x at M = 1 and 8, in cache and from DRAM.)
  static const void* tile_group(int64_t /*j0*/) { return nullptr; }
  static bool tile_group_normal(int64_t /*j0*/) { return true; }
  const char* scale_span(int64_t r0, int64_t n, int64_t* bytes) const {
    return nf4_scale_span(w, r0, n, bytes);
  }
  // st[c * kI8yStagedPerChunk + q], lane r: the absmax of block 4c + q of
  // row rr[r] (only q = 0 from blocksize 64 on, where the 4 blocks of a
  // chunk share one absmax per row; q = 0 and 2 at 32).
  bool stage(int64_t j0, const int32_t* rr, int64_t chunks, __m256i* st) const {
    // Element offsets of the rows relative to A = (j0 K) rounded down to a
    // block: absmax index = (offset + 64c + 16q) >> shift from absmax + A/bs.
    const int64_t a = (j0 * w.k) >> w.block_shift << w.block_shift;
    alignas(32) int32_t e[8];
    for (int r = 0; r < 8; ++r) e[r] = static_cast<int32_t>((j0 + rr[r]) * w.k - a);
    const float* base = w.absmax + (a >> w.block_shift);
    int64_t c = 0;
    if (w.block_shift == 6) {  // a row's absmax of chunks c .. c+7 are 8 consecutive floats
      for (; c + 8 <= chunks; c += 8) {
        __m256i T[8];
        i8y_rows_transposed([&](int r) { return base + (e[r] >> 6) + c; }, T);
        for (int d = 0; d < 8; ++d) st[(c + d) * kI8yStagedPerChunk] = T[d];
      }
    }
    // Otherwise (and the last chunks) each distinct vector by broadcast
    // loads and blends (on an AVX2 Zen 1, 2 threads, 4096x4096 from DRAM,
    // blocksize 64, against a vpgatherdps per block: M = 1 1.25-1.41x, M =
    // 2 1.11x).
    for (; c < chunks; ++c) {
      for (int64_t q = 0; q < 4; q += per) {
        const int64_t off = c * 64 + 16 * q;
        st[c * kI8yStagedPerChunk + q] = _mm256_castps_si256(i8y_blend_lanes8(
            [&](int r) { return _mm256_broadcast_ss(base + ((e[r] + off) >> w.block_shift)); }));
      }
    }
    return true;
  }
  __attribute__((always_inline)) void staged(const __m256i* st, int64_t c, bool /*normal*/,
                                             __m256 (&sc)[4]) const {
    for (int64_t q = 0; q < 4; ++q)
      sc[q] = _mm256_castsi256_ps(_mm256_load_si256(st + c * kI8yStagedPerChunk + q / per * per));
  }
};

// Activation dwords in lane order: for chunk c (64 elements, 4 blocks) of
// row i, xlo lane d = dword 4(d/2) + 2(d%2) (steps 0, 2 of each block), xhi
// the next dword (steps 1, 3).
inline void i8y_split_x(const int8_t* xq, int64_t ldxq, int32_t m, int64_t k, int8_t* out) {
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < k / 64; ++c) {
      const int8_t* src = xq + i * ldxq + c * 64;
      const __m256i x0 =
          _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)),
                                      even);  // dwords 0 2 4 6 | 1 3 5 7
      const __m256i x1 = _mm256_permutevar8x32_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32)), even);  // 8 10 12 14 | 9 ...
      int8_t* dst = out + (i * (k / 64) + c) * 64;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permute2x128_si256(x0, x1, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), _mm256_permute2x128_si256(x0, x1, 0x31));
    }
  }
}

// A group of 8 rows of W from row j0 (rows <= 8 of them left): rr[r] =
// the row read for lane r (rows past the end repeat the last; their
// results are not stored) and the group's first row, row r at + r * rb
// (a group of fewer than 8 copied to `tail` in that order).
template <class Fmt>
const uint8_t* i8y_group_rows(const Fmt& f, int64_t j0, int32_t rows, int64_t rb, int32_t* rr,
                              std::vector<uint8_t>& tail) {
  for (int r = 0; r < 8; ++r) rr[r] = std::min(r, rows - 1);
  if (rows == 8) return f.row(j0);
  tail.resize(static_cast<size_t>(8 * rb));
  for (int r = 0; r < 8; ++r) std::memcpy(tail.data() + r * rb, f.row(j0 + rr[r]), static_cast<size_t>(rb));
  return tail.data();
}

// The row GEMV prefetches the next group of 8 rows whole while the current
// one runs when a row is at most this long (K <= 4096), only their first
// kRowPrefetchBytes otherwise. Eight short rows read side by side give the
// hardware prefetchers eight streams of 32 lines each, restarted every
// group; the next group's 8 rows are contiguous, one run of 8 rb bytes, so
// each chunk prefetches the next 256 bytes of it (the 256 bytes the chunk
// reads of the current group: the run ends with the group), 4 lines by a
// cursor without branches, and rows the previous group prefetched whole
// skip their own prefetch. On an AVX2 Zen 3, 2 threads, A/B in one
// process, against the start of each row only: from DRAM (weights rotated
// through 150 MB) NVFP4 M = 1 4096^2 1.39x, 11008x4096 1.19x, 2880^2
// 1.31x, NF4 4096^2 1.19x, MXFP4 11008x4096 1.17x; in cache 1.04x. (The
// same lines by NextGroupPrefetch's row runs, 32 lines a row, had read
// 1.31-1.50x from DRAM but 0.82-0.87x in cache: its cursor's branches
// cost more than the lines.) With 5.5 KB rows (4096x11008) whole rows
// into L1 read 0.93x from DRAM there: those keep the short prefetch, except
// on the CPUs that prefetch into L2 (below, i8y_whole_rows). The next group's
// scales are one span too (scale_span), and a second run takes them, a
// line a chunk from the span's start, where NextGroupPrefetch's cursor
// had run for them every chunk (a loop, its counters on the stack): same
// bits, on the Zen 3, 2 threads, A/B in one process, against the cursor:
// NVFP4, NF4 and MXFP4 M = 1 in cache 1.03-1.10x (4096^2, 11008x4096,
// 2880^2), from DRAM 1.02-1.08x on 4096^2, 0.98-1.06x on 11008x4096 (with
// the span spread evenly over the chunks; a line a chunk, which ends the
// span within the first half of the group for NVFP4 and NF4 and runs on
// into the scales of the group after, read 1.00-1.07x that from DRAM,
// 0.99-1.01x in cache).
// Where the runs of the next group's rows go: into L1 (prefetcht0) as
// measured on the Zen 3, or into L2 (prefetcht2) on the rows_to_l2() CPUs
// (kNextL2), where the L1 hardware prefetcher then brings each row's lines
// in as it reads them: the next group's 16 KiB (K = 4096) beside the
// current group's in a 32 KiB L1 had evicted lines before their use. On an
// AVX2-only Zen 4 (AVX-512 hidden by its VM), 2 threads, A/B in one
// process, same bits, weights rotated through 150 MB: NVFP4 M = 1 4096^2
// 1.41x, 11008x4096 1.34-1.45x (from 23 to 32-34 GB/s against a 31-36 GB/s
// probe), 2880^2 1.26x, NF4 4096^2 1.38x, MXFP4 11008x4096 1.51x; in cache
// 1.02-1.05x. (Into L2 with each row's own prefetch into L1 as well, or two
// groups ahead, read the same; two groups ahead into L1 0.98-1.00x.) The
// Zen 3, also AMD family 0x19, takes the L2 prefetch too, though it was
// only ever timed with the L1 one; other CPUs keep the L1 prefetch.
constexpr int64_t kI8yWholeRowPrefetchBytes = 2048;

// Whether the row GEMV prefetches whole rows (above): rows of at most
// kI8yWholeRowPrefetchBytes, or of any length on the rows_to_l2() CPUs
// (into L2 there, where 8 long rows fit: on an AVX2-only Zen 4, 2
// threads, A/B in one process, same bits, against the short prefetch:
// 4096x11008 from DRAM NVFP4 1.17x, NF4 1.17x, MXFP4 1.15x, hot
// 1.05-1.15x; 4096x8192 1.12x; 1024x28672 1.10x from DRAM, 1.07x hot),
// whose 8 rows' scales take at most a line a chunk (all but NF4 with
// blocksize 16), so that the run of the next group's scales, a line a
// chunk, covers them.
template <class Fmt>
bool i8y_whole_rows(const Fmt& f, int64_t k) {
  int64_t bytes = 0;
  f.scale_span(0, 8, &bytes);
  return (k / 2 <= kI8yWholeRowPrefetchBytes || rows_to_l2()) && bytes <= 64 * (k / 64);
}

template <int M, bool kVnni, bool kWholeRows, bool kNextL2, class Fmt>
void i8y_gemv_rows(const int8_t* xs_split, const float* xs, const int32_t* xc, int64_t ldxs, const Fmt& f,
                   __m256i lut, int64_t k, int64_t n0, int64_t n1, float post, float* y, int64_t ldy,
                   __m256i* st) {
  const int64_t chunks = k / 64;
  const __m256i nib = _mm256_set1_epi8(0x0f);
  // The 8 rows at base + r * rb (a last group of < 8 rows copied to
  // `tail`, padded by repeating its last row, as the direct GEMV does): one
  // pointer and a stride where 8 row pointers had spilled to the stack, and
  // the chunk loop instantiated per value of the stage's flag (below), so
  // that the loop that runs has no branch to the checked scale decode and
  // keeps its accumulator in a register. Together, on an AVX2 Zen 3, 2
  // threads, A/B in one process, same bits: 1.20x in cache (4096^2; 2880^2
  // 1.28x, 4096x11008 1.10x), 1.01-1.03x from DRAM; the pointer alone 1.13x
  // in cache. (Scales staged as fp32, 4 vectors a chunk, read 0.85-1.03x.)
  const int64_t rb = k / 2;
  std::vector<uint8_t> tail;
  for (int64_t j0 = n0; j0 < n1; j0 += 8) {
    const int32_t rows = static_cast<int32_t>(std::min<int64_t>(8, n1 - j0));
    alignas(32) int32_t rr[8];
    const uint8_t* base = i8y_group_rows(f, j0, rows, rb, rr, tail);
    // The next group's scales and row starts (NextGroupPrefetch), and each
    // row kRowPrefetchBytes ahead once per 64 bytes (every other chunk).
    // Measured on a Cascade Lake with this table forced, from DRAM, two
    // threads, alternating call by call: NVFP4 and NF4 M = 1 1.04-1.14x,
    // M = 4 1.15-1.18x. Rows of at most kI8yWholeRowPrefetchBytes: the
    // next group's rows whole instead, by the run at next_rows, and its
    // scales by a run of their own (above the function; no
    // NextGroupPrefetch then).
    const int64_t next_n = std::min<int64_t>(8, n1 - j0 - 8);
    NextGroupPrefetch next([&](int64_t r0, int64_t n, int64_t* bytes) { return f.scale_span(r0, n, bytes); },
                           f.row(0), rb, j0 + 8, kWholeRows ? 0 : next_n, chunks);
    uintptr_t next_rows = 0, next_scales = 0;
    if (kWholeRows) {
      // (a thread's last group runs its own lines again, hits in L1, so
      // that the chunk loop needs no branch around the runs: on an AVX2
      // Zen 3, 2 threads, A/B in one process, same bits, in cache
      // 0.99-1.08x, 1.04x the median; from DRAM 0.98-1.04x)
      const int64_t g0 = next_n > 0 ? j0 + 8 : j0, gn = next_n > 0 ? next_n : rows;
      int64_t bytes = 0;
      next_rows = reinterpret_cast<uintptr_t>(f.row(g0));
      next_scales = reinterpret_cast<uintptr_t>(f.scale_span(g0, gn, &bytes));
      // (the run misses the span's last line where the span takes a whole
      // line a chunk and does not start on a line boundary)
      __builtin_prefetch(reinterpret_cast<const void*>(next_scales + static_cast<uintptr_t>(bytes - 1)), 0,
                         3);
    }
    __m256 acc[M];
    for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
    // The rows' next lines first: the stage's time would otherwise pass
    // without a prefetch of W (from DRAM, 2 threads, on an AVX2 Zen 3: M = 1
    // 1.03-1.06x against the stage alone).
    for (int r = 0; r < 8; ++r) __builtin_prefetch(base + r * rb + kRowPrefetchBytes, 0, 3);
    // (all_normal: the stage found every code normal and positive; first:
    // the thread's first group with whole rows, the one that prefetches its
    // rows itself, instantiated apart, where a check per chunk had read a
    // flag from the stack: on an AVX2 Zen 3, 2 threads, A/B in one process,
    // same bits, in cache NVFP4 1.03x, NF4 1.11-1.20x, MXFP4 1.04-1.06x,
    // from DRAM 0.97-1.04x)
    const auto chunk_loop = [&](auto all_normal, auto first) {
      for (int64_t c = 0; c < chunks; ++c) {
        if constexpr (!kWholeRows) next.step();
        const uint8_t* p0 = base + c * 32;
        // (rows the previous group prefetched whole need none of their own)
        if (c % 2 == 0 && (!kWholeRows || decltype(first)::value)) {
          for (int r = 0; r < 8; ++r) __builtin_prefetch(p0 + r * rb + kRowPrefetchBytes, 0, 3);
        }
        if constexpr (kWholeRows) {  // (the next group's runs: 256 bytes of rows a chunk)
          for (int64_t l = 0; l < 4; ++l)
            __builtin_prefetch(
                reinterpret_cast<const void*>(next_rows + static_cast<uintptr_t>(c * 256 + 64 * l)), 0,
                kNextL2 ? 1 : 3);
          __builtin_prefetch(reinterpret_cast<const void*>(next_scales + static_cast<uintptr_t>(c * 64)), 0,
                             3);
        }
        __m256i C[M][4];
        for (int64_t p = 0; p < 4; ++p) {
          const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + 2 * p * rb));
          const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + (2 * p + 1) * rb));
          const __m256i la = _mm256_shuffle_epi8(lut, _mm256_and_si256(va, nib));
          const __m256i ha = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(va, 4), nib));
          const __m256i lb = _mm256_shuffle_epi8(lut, _mm256_and_si256(vb, nib));
          const __m256i hb = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(vb, 4), nib));
          const __m256i ea = Fmt::kEvenLow ? la : ha, oa = Fmt::kEvenLow ? ha : la;
          const __m256i eb = Fmt::kEvenLow ? lb : hb, ob = Fmt::kEvenLow ? hb : lb;
          for (int i = 0; i < M; ++i) {
            const int8_t* xp = xs_split + (i * chunks + c) * 64;
            const __m256i xlo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp));
            const __m256i xhi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + 32));
            if constexpr (!kVnni && i8_int16_sums(Fmt::kMaxBiased, 4)) {
              // The same fold on the int16 sums, before one vpmaddwd for both
              // rows (a block's four int16 sums fit int16: 4 vpmaddubsw terms;
              // the same integers). On an AVX2 Zen 3, A/B, 2 threads: NVFP4
              // 1.02-1.03x in cache, 0.99-1.03x from DRAM, MXFP4 1.16-1.18x
              // from DRAM.
              const __m256i A =
                  _mm256_add_epi16(_mm256_maddubs_epi16(ea, xlo), _mm256_maddubs_epi16(oa, xhi));
              const __m256i B =
                  _mm256_add_epi16(_mm256_maddubs_epi16(eb, xlo), _mm256_maddubs_epi16(ob, xhi));
              C[i][p] = _mm256_madd_epi16(
                  _mm256_add_epi16(_mm256_blend_epi32(A, B, 0xaa),
                                   _mm256_shuffle_epi32(_mm256_blend_epi32(A, B, 0x55), 0xb1)),
                  _mm256_set1_epi16(1));
            } else {
              const __m256i A = i8y_dot8<kVnni, Fmt::kMaxBiased>(ea, xlo, oa, xhi);
              const __m256i B = i8y_dot8<kVnni, Fmt::kMaxBiased>(eb, xlo, ob, xhi);
              // qword q = (block q of row 2p, block q of row 2p+1)
              C[i][p] = _mm256_add_epi32(_mm256_blend_epi32(A, B, 0xaa),
                                         _mm256_shuffle_epi32(_mm256_blend_epi32(A, B, 0x55), 0xb1));
            }
          }
        }
        __m256 sc[4];
        f.staged(st, c, decltype(all_normal)::value, sc);
        for (int i = 0; i < M; ++i) {
          const __m256i e0 = _mm256_unpacklo_epi64(C[i][0], C[i][1]);  // q0: rows 0-3 | q2
          const __m256i e1 = _mm256_unpackhi_epi64(C[i][0], C[i][1]);  // q1 | q3
          const __m256i e2 = _mm256_unpacklo_epi64(C[i][2], C[i][3]);  // q0: rows 4-7 | q2
          const __m256i e3 = _mm256_unpackhi_epi64(C[i][2], C[i][3]);
          // (vinserti128, and vpermq + vpblendd for the high halves: the same
          // one shuffle-port uop each on Intel as vperm2i128, which a Zen 1
          // splits into 8: there M = 1 1.04-1.10x, NF4 1.06x)
          const __m256i D[4] = {_mm256_inserti128_si256(e0, _mm256_castsi256_si128(e2), 1),
                                _mm256_inserti128_si256(e1, _mm256_castsi256_si128(e3), 1),
                                _mm256_blend_epi32(_mm256_permute4x64_epi64(e0, 0xee), e2, 0xf0),
                                _mm256_blend_epi32(_mm256_permute4x64_epi64(e1, 0xee), e3, 0xf0)};
          const float* xsb = xs + i * ldxs + c * 4;
          const int32_t* xcb = xc + i * ldxs + c * 4;
          for (int q = 0; q < 4; ++q) {
            const __m256i d = _mm256_add_epi32(D[q], _mm256_set1_epi32(xcb[q]));
            const __m256 p = _mm256_mul_ps(_mm256_set1_ps(xsb[q]), sc[q]);
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), p, acc[i]);
          }
        }
      }
    };
    const bool normal = f.stage(j0, rr, chunks, st);
    if (kWholeRows && j0 == n0) {
      if (normal) {
        chunk_loop(std::true_type{}, std::true_type{});
      } else {
        chunk_loop(std::false_type{}, std::true_type{});
      }
    } else if (normal) {
      chunk_loop(std::true_type{}, std::false_type{});
    } else {
      chunk_loop(std::false_type{}, std::false_type{});
    }
    for (int i = 0; i < M; ++i) {
      const __m256 v = _mm256_mul_ps(acc[i], _mm256_set1_ps(post));
      float* dst = y + i * ldy + (j0 - n0);
      if (rows == 8) {
        _mm256_storeu_ps(dst, v);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, v);
        std::memcpy(dst, tmp, static_cast<size_t>(rows) * sizeof(float));
      }
    }
  }
}

inline __m256i i8y_lut(const uint8_t* v16) {
  const __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v16));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(l), l, 1);
}

// m <= kI8yDirectMaxRows rows of x (more: passes of that many; m = 1, and
// m = 2 without VNNI, only with tiles, i8y_gemv): the weights are decoded once per
// 8 rows of W and 32 elements into the panel operand order (lanes = rows)
// in registers and used by every row of x, which then costs the
// micro-kernel's work per block (four 4-byte dot products on a broadcast of
// x, one cvt, one mul, one fma) instead of the per-row sums and transposes
// of i8y_gemv_rows. Per 8 rows and 2 blocks: one 16-byte load per row, rows
// g and g+4 in the two lanes of one vector, a 4x4 dword transpose inside
// the lanes: dword d of the 8 rows in one vector, its low and high nibbles
// steps 2(d%2) and 2(d%2)+1 of block d/2 (kI8Perm). x staged block-major
// (I8Staged). Same fixed fp32 sequence as i8_micro. Measured with the avx2
// table forced on a Cascade Lake-class Xeon (A/B in one process, 4096^2, 2
// threads, medians of 40-80 calls): M = 2 1.02-1.06x, M = 3-4 1.03-1.07x
// the row GEMV, and at M = 8-64, in passes of 4 rows of x, 0.66-0.94x the
// packed panels. On an AVX2-only Zen 3 (A/B in one process, 2 threads) one
// pass of up to 8 rows beats the panels: M = 5-8 1.29-1.55x (NF4
// 1.10-1.55x), M = 9-16 (a pass of 8 and one of the rest) 1.03-1.22x, M =
// 24-32 0.86-0.94x, so the avx2 table's i8_gemv_max_m is 16. The AVX-VNNI
// table runs the same code with vpdpbusd (not measured: no such CPU here;
// it keeps kI8GemvMaxRows).
constexpr int32_t kI8yDirectGroup = 8;
constexpr int32_t kI8yDirectMaxRows = 8;
// Bytes ahead in a tile stream (NvWeights::tiles) that the direct GEMV
// prefetches into L1 (as the AVX-512 GEMV's kTilePrefetchBytes), or on the
// rows_to_l2() CPUs kI8yTileL2PrefetchBytes ahead into L2 (prefetcht2). On
// an AVX2-only Zen 4, 2 threads, A/B in one process, same bits, weights
// rotated through 150 MB: tiled M = 1 4096^2 1.09-1.15x, 11008x4096
// 1.04-1.19x, M = 2-8 0.98-1.04x, in cache 1.02x (into L2 8 KiB ahead
// 1.13-1.14x, 24-32 KiB ahead 1.10-1.14x; into L1 16 KiB ahead 0.89x, 4
// KiB ahead 1.02x; 16 KiB into L2 with 2 KiB into L1 1.06-1.09x). At M = 3-8,
// where the kernel reads far below DRAM speed, into L2 read 0.95-1.00x: those
// keep the L1 prefetch.
constexpr int64_t kI8yTilePrefetchBytes = 8192;
constexpr int64_t kI8yTileL2PrefetchBytes = 16384;

// One group of M rows of x over H groups of 8 rows of W: rows + r * rb
// (row r of half hh at + 8 hh rb), or (tile not null) the halves of a
// tiled group of 16 rows (tile: the group's tile stream, half hh at
// + 32 hh). st: each half's staged scales, staged vectors apart; normal:
// each half's flag. On a session linear's tiles (AVX2 Zen 3, 2 threads,
// A/B in one process against the row form, same bits, with the unrolling
// below): M = 1-2 (H = 2) 4096^2 1.24-1.31x in cache and from DRAM, M = 8
// (H = 1, one half after the other) 1.10-1.14x; the long K (4096x11008)
// gains least, 1.02-1.08x at M = 1. H = 2 at M = 4 read 0.86x (16
// accumulators and the decoded weights spill). kNormal: every scale of
// both halves normal and positive (their stages said so), the staged
// decode without its check: on an AVX2 Zen 3, 2 threads, A/B in one
// process, same bits, tiled M = 1-2 in cache NVFP4 and NF4 1.03-1.09x
// (4096^2, 11008x4096), MXFP4 1.00-1.03x, from DRAM 1.00x.
//
// kTileSc: the scales from the group's tile scales ts (Fmt::tile_group;
// half0: the first half taken) instead of the staged st.
template <int M, int H, bool kVnni, class Fmt, bool kNormal = false, bool kTileSc = false>
void i8y_direct_group(const I8Staged& x, const Fmt& f, const uint8_t* rows, int64_t rb, const __m256i* st,
                      const bool* normal, __m256i lut, int64_t chunks, NextGroupPrefetch* next, float post,
                      float* y, int64_t ldy, int32_t nrows, const uint8_t* tile, const void* ts = nullptr,
                      int half0 = 0) {
  static_assert(H == 1 || H == 2, "one or both halves of a group of 16 rows");
  const __m256i nib = _mm256_set1_epi8(0x0f);
  // The loops over rows of x (i), halves (hh) and blocks (e) unrolled by
  // pragma, so that acc stays in registers: g++ had kept acc[M][H] on the
  // stack at some M (AVX2 Zen 3, 2 threads, A/B: M = 4-8 1.05-1.11x in
  // cache, M = 8 1.07-1.11x from DRAM, M = 16 1.04x, M = 1-2 1.00x). The
  // quarter loop (h) stays rolled: unrolled it gave tiled M = 1 1.04-1.10x
  // in cache but 0.90-0.96x from DRAM.
  __m256 acc[M][H];
#pragma GCC unroll 8
  for (int64_t i = 0; i < M; ++i) {
#pragma GCC unroll 2
    for (int hh = 0; hh < H; ++hh) acc[i][hh] = _mm256_setzero_ps();
  }
  const int8_t* xq = x.q.data();
  const float* xs = x.s.data();
  const int32_t* xc = x.c.data();
  const bool tile_l2 = tile != nullptr && M <= 2 && rows_to_l2();
  for (int64_t c = 0; c < chunks; ++c) {  // 64 elements: 4 blocks
    if (next != nullptr) {
      next->step();
      if (tile_l2) {  // (every line of the tile stream, ahead as above)
        const uint8_t* tp = tile + c * 512 + kI8yTileL2PrefetchBytes;
        for (int64_t l = 0; l < 8; ++l) __builtin_prefetch(tp + 64 * l, 0, 1);
      } else if (tile != nullptr) {
        const uint8_t* tp = tile + c * 512 + kI8yTilePrefetchBytes;
        for (int64_t l = 0; l < 8; ++l) __builtin_prefetch(tp + 64 * l, 0, 3);
      } else if (c % 2 == 0) {
        for (int r = 0; r < 8 * H; ++r) __builtin_prefetch(rows + r * rb + c * 32 + kRowPrefetchBytes, 0, 3);
      }
    }
    // Every scale of the group normal with tile scales: each block's scales
    // decoded where they are used (below; on a Zen 4, kernel A/B, same bits,
    // tiled NVFP4 M = 1 1.00-1.01x, M = 2 1.04x in cache and 1.09x from
    // DRAM), else a chunk's staged first.
    constexpr bool kInline = kTileSc && kNormal;
    alignas(32) float sc[H][4][8];
#pragma GCC unroll 2
    for (int hh = 0; hh < H && !kInline; ++hh) {
      __m256 s4[4];
      if constexpr (kTileSc) {
        f.tile_staged(ts, c, half0 + hh, kNormal || normal[hh], s4);
      } else {
        f.staged(st + hh * chunks * kI8yStagedPerChunk, c, kNormal || normal[hh], s4);
      }
      for (int64_t q = 0; q < 4; ++q) _mm256_store_ps(sc[hh][q], s4[q]);
    }
    for (int64_t h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int hh = 0; hh < H; ++hh) {
        __m256i T[4];
        if (tile != nullptr) {  // quarter 2(c % 2) + h of tile chunk c / 2: 64 bytes per dword
          const uint8_t* p = tile + (c * 2 + h) * 256 + int64_t{32} * hh;
          for (int64_t d = 0; d < 4; ++d)
            T[d] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * d));
        } else {
          const uint8_t* p = rows + int64_t{8} * hh * rb + c * 32 + h * 16;
          __m256i z[4];
          for (int64_t g = 0; g < 4; ++g) {
            const uint8_t* pg = p + g * rb;
            z[g] = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pg))),
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(pg + 4 * rb)), 1);
          }
          i8y_transpose_dwords(z, T);
        }
#pragma GCC unroll 2
        for (int64_t e = 0; e < 2; ++e) {
          const int64_t b = c * 4 + h * 2 + e;
          __m256i wv[4];
          for (int64_t d = 0; d < 2; ++d) {
            const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(T[2 * e + d], nib));
            const __m256i hi =
                _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(T[2 * e + d], 4), nib));
            wv[2 * d] = Fmt::kEvenLow ? lo : hi;
            wv[2 * d + 1] = Fmt::kEvenLow ? hi : lo;
          }
          __m256 wsc;
          if constexpr (kInline) {
            wsc = Fmt::tile_scale_normal(ts, c, half0 + hh, h * 2 + e);
          } else {
            wsc = _mm256_load_ps(sc[hh][h * 2 + e]);
          }
          const int8_t* xb = xq + b * M * 16;
#pragma GCC unroll 8
          for (int64_t i = 0; i < M; ++i) {
            const __m256i d =
                i8y_dot16_bcst<kVnni, Fmt::kMaxBiased>(_mm256_set1_epi32(xc[b * M + i]), wv, xb + i * 16);
            const __m256 pr = _mm256_mul_ps(_mm256_set1_ps(xs[b * M + i]), wsc);
            acc[i][hh] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), pr, acc[i][hh]);
          }
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int64_t i = 0; i < M; ++i) {
#pragma GCC unroll 2
    for (int hh = 0; hh < H; ++hh) {
      const __m256 v = _mm256_mul_ps(acc[i][hh], _mm256_set1_ps(post));
      const int32_t rows_hh = std::min(8, nrows - 8 * hh);  // (rows past nrows are not stored)
      if (rows_hh == 8) {
        _mm256_storeu_ps(y + i * ldy + int64_t{8} * hh, v);
      } else if (rows_hh > 0) {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, v);
        std::memcpy(y + i * ldy + int64_t{8} * hh, tmp, static_cast<size_t>(rows_hh) * sizeof(float));
      }
    }
  }
}

// Rows of x per pass that take both halves of a tiled group of 16 rows of
// W at once (H = 2: 2M accumulators); more take them one after the other.
constexpr int32_t kI8yTileBothMaxRows = 2;

template <bool kVnni, class Fmt>
void i8y_gemv_direct(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                     int32_t m, const Fmt& f, __m256i lut, int64_t k, int64_t n0, int64_t n1, float post,
                     float* y, int64_t ldy) {
  if (m > kI8yDirectMaxRows) {  // the drivers pass at most i8_gemv_max_m rows; any more run in passes
    for (int32_t i0 = 0; i0 < m; i0 += kI8yDirectMaxRows) {
      i8y_gemv_direct<kVnni>(xq + i0 * ldxq, ldxq, xs + i0 * ldxs, xc + i0 * ldxs, ldxs,
                             std::min(kI8yDirectMaxRows, m - i0), f, lut, k, n0, n1, post, y + i0 * ldy, ldy);
    }
    return;
  }
  const int64_t rb = k / 2, chunks = k / 64;
  const int32_t groups = (m + kI8yDirectGroup - 1) / kI8yDirectGroup;
  I8Staged xg[kI8yDirectMaxRows / kI8yDirectGroup];
  for (int32_t g = 0; g < groups; ++g) {
    const int32_t g0 = g * kI8yDirectGroup;
    xg[g].stage(xq, ldxq, xs, xc, ldxs, g0, std::min(kI8yDirectGroup, m - g0), k / 16);
  }
  std::vector<uint8_t> tail;  // a last group of < 8 rows, padded by repeating its last row
  const int64_t staged = chunks * kI8yStagedPerChunk;  // vectors per 8 rows
  const AlignedFloats stb = aligned_floats(2 * staged * 8);
  auto* st = reinterpret_cast<__m256i*>(stb.get());
  alignas(32) const int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t j0 = n0; j0 < n1;) {
    // A tiled weight (NvWeights::tiles, Nf4Weights::tiles: a session
    // linear's copy in the order of i8_tile_codes, K % 128 == 0): a group of
    // 16 rows inside [n0, n1) (one past n1 may be short) reads its tile,
    // where dword d of rows 8hh .. 8hh+7 is the 32 bytes at 64d + 32hh of
    // each 256-byte quarter, the order the transpose below makes, from one
    // contiguous stream. Both halves in one pass up to
    // kI8yTileBothMaxRows rows of x (each line of the stream read once).
    if (f.tiles() != nullptr && j0 % 16 == 0 && j0 + 16 <= n1) {
      const uint8_t* tile = f.tiles() + j0 * rb;
      // The group's scales from the weight's tile scales where it keeps
      // them (a session linear, Fmt::tile_group), else staged from its rows.
      const void* ts = f.tile_group(j0);
      bool normal[2];
      if (ts != nullptr) {
        normal[0] = normal[1] = f.tile_group_normal(j0);
      } else {
        normal[0] = f.stage(j0, all, chunks, st);
        normal[1] = f.stage(j0 + 8, all, chunks, st + staged);
      }
      NextGroupPrefetch next(
          [&](int64_t r0, int64_t n, int64_t* bytes) { return f.scale_span(r0, n, bytes); }, f.row(0), rb,
          j0 + 16, std::min<int64_t>(16, n1 - j0 - 16), chunks, false);
      // Both halves' kernels, with the scales from the tiles (kTileSc) or
      // staged.
      auto run = [&](auto tile_sc) {
        constexpr bool kTileSc = decltype(tile_sc)::value;
        for (int32_t g = 0; g < groups; ++g) {
          float* yg = y + static_cast<int64_t>(g) * kI8yDirectGroup * ldy + (j0 - n0);
          NextGroupPrefetch* ng = g == 0 ? &next : nullptr;
          with_rows<kI8yDirectGroup>(xg[g].gm, [&](auto r) {
            constexpr int M = decltype(r)::value;
            // Both halves at once up to kI8yTileBothMaxRows rows of x, else
            // one after the other; all-normal groups (kN) decode without the
            // check, where tile scales each block's scales inline (one half
            // at a time as well: tiled NVFP4 M = 3-8 1.01-1.04x, kernel A/B
            // on a Zen 4 whose VM hides AVX-512, in cache and from DRAM).
            const auto halves = [&](auto normal_c) {
              constexpr bool kN = decltype(normal_c)::value;
              if constexpr (M <= kI8yTileBothMaxRows) {
                i8y_direct_group<M, 2, kVnni, Fmt, kN, kTileSc>(xg[g], f, nullptr, rb, st, normal, lut,
                                                                chunks, ng, post, yg, ldy, 16, tile, ts);
              } else {
                i8y_direct_group<M, 1, kVnni, Fmt, kN, kTileSc>(xg[g], f, nullptr, rb, st, normal, lut,
                                                                chunks, ng, post, yg, ldy, 8, tile, ts, 0);
                i8y_direct_group<M, 1, kVnni, Fmt, kN, kTileSc>(xg[g], f, nullptr, rb, st + staged,
                                                                normal + 1, lut, chunks, nullptr, post,
                                                                yg + 8, ldy, 8, tile + 32, ts, 1);
              }
            };
            if (normal[0] && normal[1]) {
              halves(std::true_type{});
            } else {
              halves(std::false_type{});
            }
          });
        }
      };
      if (Fmt::kTileScales && ts != nullptr) {
        if constexpr (Fmt::kTileScales) run(std::true_type{});
      } else {
        run(std::false_type{});
      }
      j0 += 16;
      continue;
    }
    const int32_t nrows = static_cast<int32_t>(std::min<int64_t>(8, n1 - j0));
    alignas(32) int32_t rr[8];
    const uint8_t* base = i8y_group_rows(f, j0, nrows, rb, rr, tail);
    for (int r = 0; r < 8; ++r) __builtin_prefetch(base + r * rb + kRowPrefetchBytes, 0, 3);  // (as above)
    const bool normal = f.stage(j0, rr, chunks, st);
    NextGroupPrefetch next([&](int64_t r0, int64_t n, int64_t* bytes) { return f.scale_span(r0, n, bytes); },
                           f.row(0), rb, j0 + 8, std::min<int64_t>(8, n1 - j0 - 8), chunks);
    for (int32_t g = 0; g < groups; ++g) {
      float* yg = y + static_cast<int64_t>(g) * kI8yDirectGroup * ldy + (j0 - n0);
      with_rows<kI8yDirectGroup>(xg[g].gm, [&](auto r) {
        i8y_direct_group<decltype(r)::value, 1, kVnni>(xg[g], f, base, rb, st, &normal, lut, chunks,
                                                       g == 0 ? &next : nullptr, post, yg, ldy, nrows,
                                                       nullptr);
      });
    }
    j0 += 8;
  }
}

template <bool kVnni, class Fmt>
void i8y_gemv(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs, int32_t m,
              const Fmt& f, const uint8_t* lut16, int64_t k, int64_t n0, int64_t n1, float post, float* y,
              int64_t ldy) {
  // k % 64 == 0 (i8_runs_gemv: the table has i8_gemv_k64). M = 1 without
  // tiles on the row GEMV, everything else on the direct one. (On an AVX2
  // Zen 3, 2 threads, A/B in one process: the direct GEMV had read 0.96x
  // the row GEMV for NVFP4 in cache but 1.05-1.07x for NF4 and 1.02-1.05x
  // for MXFP4, which took it; since the row GEMV keeps its accumulator in a
  // register, it reads NF4 1.04-1.10x in cache, 1.02x from DRAM, and MXFP4
  // 1.12-1.15x, 1.05x, against the direct one, and all three take it.)
  // Without VNNI M = 2 takes the row GEMV too (its two rows of x share
  // each decoded row of W and the scale stage): on a Zen 4 whose VM hides
  // AVX-512 (the avx2 table), 2 threads, A/B in one process, same bits,
  // weights rotated through 150 MB: NVFP4 4096^2 1.11x, 11008x4096 1.21x,
  // 4096x11008 1.04x, 2880^2 1.15x, NF4 1.14x, MXFP4 1.22x; in cache
  // 1.03x (one thread, 256 rows in L2: 1.07x); through the library
  // (stateless fast products, M = 2) 1.04-1.11x on those shapes, 1.12-1.21x
  // on 64x128 to 1024x1024. At M = 3-4 it read 0.93-1.06x. (The direct
  // GEMV, above, had read 1.02-1.06x the row GEMV at M = 2 on a Cascade
  // Lake-class Xeon with this table forced, before the row GEMV's later
  // changes.) The AVX-VNNI table, not measured, keeps M = 1.
  constexpr int32_t kRowMaxM = kVnni ? 1 : 2;
  if (m <= kRowMaxM && f.tiles() == nullptr) {
    std::vector<int8_t> split(static_cast<size_t>(m * k));
    i8y_split_x(xq, ldxq, m, k, split.data());
    const AlignedFloats stb = aligned_floats(k / 64 * kI8yStagedPerChunk * 8);
    // (kWholeRows a template argument: a run-time line count in the
    // prefetch cursor read 0.94x from DRAM with the long rows)
    const auto rows = [&](auto whole, auto next_l2) {
      with_rows<kRowMaxM>(m, [&](auto mm) {
        i8y_gemv_rows<decltype(mm)::value, kVnni, decltype(whole)::value, decltype(next_l2)::value>(
            split.data(), xs, xc, ldxs, f, i8y_lut(lut16), k, n0, n1, post, y, ldy,
            reinterpret_cast<__m256i*>(stb.get()));
      });
    };
    if (!i8y_whole_rows(f, k)) {
      rows(std::false_type{}, std::false_type{});
    } else if (rows_to_l2()) {
      rows(std::true_type{}, std::true_type{});
    } else {
      rows(std::true_type{}, std::false_type{});
    }
    return;
  }
  i8y_gemv_direct<kVnni>(xq, ldxq, xs, xc, ldxs, m, f, i8y_lut(lut16), k, n0, n1, post, y, ldy);
}

struct I8yNvLut {
  uint8_t v[16];
  I8yNvLut() {
    for (uint32_t c = 0; c < 16; ++c) v[c] = static_cast<uint8_t>(fmt::e2m1_decode_x2(c) + kI8WeightBias);
  }
};

// (out of line: the NVFP4 GEMV's code stays as it was without this path)
template <bool kVnni>
__attribute__((noinline)) void i8y_gemv_mx(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc,
                                           int64_t ldxs, int32_t m, const NvWeights& w, const uint8_t* lut16,
                                           int64_t n0, int64_t n1, float post, float* y, int64_t ldy) {
  i8y_gemv<kVnni>(xq, ldxq, xs, xc, ldxs, m, I8yMx(w), lut16, w.k, n0, n1, post, y, ldy);
}

template <bool kVnni>
__attribute__((noinline)) void i8_gemv_nvfp4_avx2(const int8_t* xq, int64_t ldxq, const float* xs,
                                                  const int32_t* xc, int64_t ldxs, int32_t m,
                                                  const NvWeights& w, int64_t n0, int64_t n1, float post,
                                                  float* y, int64_t ldy) {
  static const I8yNvLut lut;
  bool negative = false;
  i8y_gemv<kVnni>(xq, ldxq, xs, xc, ldxs, m, I8yNvfp4(w, w.signs != nullptr ? &negative : nullptr), lut.v,
                  w.k, n0, n1, post, y, ldy);
  // The sign rule from the stages' flag, where a pass over the rows'
  // scales after the GEMV (report_scale_signs) read them again. On an AVX2
  // Zen 3, 2 threads, A/B in one process, with the rule asked for (the
  // stateless products): M = 1 4096x4096 in cache 1.04-1.08x, 11008x4096
  // from DRAM 1.07-1.09x, M = 4 1.06x; without it (linears) 1.00x (a
  // sign-bit OR in the stages' loops had cost 2-3 % there).
  if (negative) w.signs->negative.store(true, std::memory_order_relaxed);
}

// KernelTable::i8_gemv_nvfp4: MXFP4's E8M0 scales in place (I8yMx) or
// E4M3 codes (I8yNvfp4), each its own out-of-line kernel.
template <bool kVnni>
void i8_gemv_nvfp4_or_mx(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                         int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float post, float* y,
                         int64_t ldy) {
  if (w.s == nullptr && w.e8m0 != nullptr) {
    static const I8yNvLut lut;
    i8y_gemv_mx<kVnni>(xq, ldxq, xs, xc, ldxs, m, w, lut.v, n0, n1, post, y, ldy);
  } else {
    i8_gemv_nvfp4_avx2<kVnni>(xq, ldxq, xs, xc, ldxs, m, w, n0, n1, post, y, ldy);
  }
}

template <bool kVnni>
void i8_gemv_nf4_avx2(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                      int32_t m, const Nf4Weights& w, const uint8_t* code, int64_t n0, int64_t n1, float post,
                      float* y, int64_t ldy) {
  i8y_gemv<kVnni>(xq, ldxq, xs, xc, ldxs, m, I8yNf4(w), code, w.k, n0, n1, post, y, ldy);
}

#if defined(NVFP4_I8Y_DPBUSD)
// AVX-VNNI micro-kernel: the panel layout of KernelTable::i8_micro, 4 rows
// of X x 16 panel rows (two ymm of int32 and fp32 accumulators per row).
template <int MR>
inline void i8_micro_avxvnni_rows(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc,
                                  int64_t ldxs, const uint8_t* wq, const float* ws, int64_t nb, float* y,
                                  int64_t ldy, int32_t nr, bool accumulate) {
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      alignas(32) float tmp[8] = {};
      if (accumulate) {
        for (int r = 0; r < 8 && 8 * h + r < nr; ++r) tmp[r] = y[i * ldy + 8 * h + r];
      }
      acc[i][h] = _mm256_load_ps(tmp);
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wq + b * 256;
    __m256i d[MR][2];
    for (int i = 0; i < MR; ++i) d[i][0] = d[i][1] = _mm256_set1_epi32(xc[i * ldxs + b]);
    for (int64_t t = 0; t < 4; ++t) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + t * 64));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + t * 64 + 32));
      for (int i = 0; i < MR; ++i) {
        int32_t x4;
        std::memcpy(&x4, xq + i * ldxq + b * 16 + 4 * t, 4);
        const __m256i xv = _mm256_set1_epi32(x4);
        d[i][0] = NVFP4_I8Y_DPBUSD(d[i][0], w0, xv);
        d[i][1] = NVFP4_I8Y_DPBUSD(d[i][1], w1, xv);
      }
    }
    const __m256 ws0 = _mm256_loadu_ps(ws + b * 16), ws1 = _mm256_loadu_ps(ws + b * 16 + 8);
    for (int i = 0; i < MR; ++i) {
      const __m256 xsv = _mm256_set1_ps(xs[i * ldxs + b]);
      acc[i][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[i][0]), _mm256_mul_ps(xsv, ws0), acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[i][1]), _mm256_mul_ps(xsv, ws1), acc[i][1]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, acc[i][0]);
    _mm256_store_ps(tmp + 8, acc[i][1]);
    std::memcpy(y + i * ldy, tmp, static_cast<size_t>(nr) * sizeof(float));
  }
}

constexpr int32_t kI8MRVnni256 = 4;

inline void i8_micro_avxvnni(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                             int32_t mr, const uint8_t* wq, const float* ws, int64_t nb, float* y,
                             int64_t ldy, int32_t nr, bool accumulate) {
  with_rows<kI8MRVnni256>(mr, [&](auto rows) {
    i8_micro_avxvnni_rows<decltype(rows)::value>(xq, ldxq, xs, xc, ldxs, wq, ws, nb, y, ldy, nr, accumulate);
  });
}

// Integer roof probe: 8 independent VEX vpdpbusd chains, 32 int8 MACs each.
inline double i8_probe_avxvnni(int64_t iters) {
  __m256i acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_set1_epi32(j);
  __m256i b = _mm256_set1_epi8(5);
  for (int64_t it = 0; it < iters; ++it) {
    __asm__ volatile("" : "+x"(b));  // no hoisting
    for (__m256i& a : acc) a = NVFP4_I8Y_DPBUSD(a, a, b);
  }
  __m256i s = acc[0];
  for (int j = 1; j < 8; ++j) s = _mm256_add_epi32(s, acc[j]);
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
  volatile int32_t sink = out[0];
  (void)sink;
  return static_cast<double>(iters) * 8 * 32 * 2;
}
#endif  // NVFP4_I8Y_DPBUSD

}  // namespace
}  // namespace q4::kern
