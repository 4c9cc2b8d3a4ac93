// The AVX2 small-batch product kernels (KernelTable::nvfp4_small /
// nf4_small) with the rows of X across the vector lanes. Included by
// kernels_avx2.cpp only.
//
// The generic small-batch kernel (small_batch.h) holds a dot product per
// accumulator: kR rows of W and kMI rows of X are all read as vectors along
// K, 6 vector loads per 9 FMAs with AVX2's 16 registers, and every row of X
// comes from L2 again for each group of 3 rows of W. On an AVX2-only Zen 3
// that ran at 30-40 % of the FMA roof. Here an accumulator holds one row of
// W against 8 rows of X (lane i: row i): per column k, 2 vectors of X
// (16 rows, transposed once per K chunk into xt) and 6 weights broadcast
// from the decoded rows serve 12 FMAs, the layout of an fp32 GEMM's
// micro-kernel, and the decode of W stays row-major (no transpose of W).
//
// One call computes rows [n0, n1) of W over columns [k0, k1):
//   for each chunk of kc columns:
//     X's m rows over the chunk -> xt, blocks of 16 rows, column-major
//     (xt[(b * kc + kk) * 16 + lane] = x[16b + lane][kb + kk], zero past m);
//     for each group of kRows rows of W: decode them (row-major, fp32) into
//     wbuf, then for each block of 16 rows of X the micro-kernels: 2 x 6
//     (two vectors of X, 6 rows of W) twice, or 1 x 12 where the block has
//     at most 8 rows; their accumulators are carried between chunks in acc
//     (acc[r * ldacc + i] for row n0 + r of W and row i of X);
//   y = acc * post.
// The fp32 sequence of one output (i, j): acc = x[i][k] * w[j][k] + acc
// for k = k0, k0 + 1, ..., k1 - 1 in order, from +0 (one lane of one
// accumulator), times post: it depends neither on m, on n0/n1 nor on kc.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "formats/codec.h"
#include "kernels/avx2/small_batch_avx2.h"
#include "kernels/isa_common.h"

namespace q4::kern {
namespace {

constexpr int kSblBlock = 16;  // rows of X per block of xt
constexpr int kSblRows = 12;   // rows of W decoded per group

// I vectors of X (I = 1, 2) x J rows of W over len columns: xt points at
// the block's first column (stride kSblBlock floats per column), w at the
// group's first row (stride ldw), acc at the first row's accumulators
// (stride ldacc, I * 8 lanes from there).
template <int I, int J>
__attribute__((noinline)) void sbl_micro(const float* xt, const float* w, int64_t ldw, int64_t len,
                                         float* acc, int64_t ldacc) {
  __m256 a[J][I];
#pragma GCC unroll 12
  for (int r = 0; r < J; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < I; ++v) a[r][v] = _mm256_loadu_ps(acc + r * ldacc + int64_t{8} * v);
  }
  const float* wr[J];
#pragma GCC unroll 12
  for (int r = 0; r < J; ++r) wr[r] = w + r * ldw;
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < len; ++kk) {
    __m256 xv[I];
#pragma GCC unroll 2
    for (int v = 0; v < I; ++v) xv[v] = _mm256_load_ps(xt + kk * kSblBlock + int64_t{8} * v);
#pragma GCC unroll 12
    for (int r = 0; r < J; ++r) {
      const __m256 wv = _mm256_broadcast_ss(wr[r] + kk);
#pragma GCC unroll 2
      for (int v = 0; v < I; ++v) a[r][v] = _mm256_fmadd_ps(xv[v], wv, a[r][v]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < J; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < I; ++v) _mm256_storeu_ps(acc + r * ldacc + int64_t{8} * v, a[r][v]);
  }
}

// Columns [kb, kb + len) (len % 8 == 0) of the m rows of x into xt's
// blocks of 16 rows (zeros past m), converted to fp32.
template <FType T>
void sbl_transpose(const void* x, int64_t ldx, int32_t m, int64_t kb, int64_t len, int64_t blocks,
                   float* xt) {
  alignas(32) float tmp[8];
  for (int64_t b = 0; b < blocks; ++b) {
    float* dst = xt + b * len * kSblBlock;
    for (int32_t lane = 0; lane < kSblBlock; ++lane) {
      const int64_t i = b * kSblBlock + lane;
      if (i >= m) {
        for (int64_t kk = 0; kk < len; ++kk) dst[kk * kSblBlock + lane] = 0.0f;
        continue;
      }
      for (int64_t kk = 0; kk < len; kk += 8) {
        _mm256_store_ps(tmp, SbAvx2::load_act<T>(x, i * ldx + kb + kk));
#pragma GCC unroll 8
        for (int e = 0; e < 8; ++e) dst[(kk + e) * kSblBlock + lane] = tmp[e];
      }
    }
  }
}

// The driver of one call; decode(j, kb, len, dst) writes len (a multiple of
// 16) fp32 weights of row j from column kb.
template <FType T, class Decode>
void sbl_product(const void* x, int64_t ldx, int32_t m, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                 float post, float* y, int64_t ldy, int64_t kc_pref, Decode&& decode) {
  if (m <= 0 || n1 <= n0) return;
  const int64_t span = k1 - k0;
  const int64_t kc = std::min(std::max<int64_t>(16, kc_pref / 16 * 16), std::max<int64_t>(16, span));
  const int64_t blocks = (m + kSblBlock - 1) / kSblBlock;
  const int64_t ldacc = blocks * kSblBlock;
  const int64_t groups = (n1 - n0 + kSblRows - 1) / kSblRows;
  AlignedFloats xt = aligned_floats(blocks * kSblBlock * kc);
  // (rows a cache line further apart than kc: rows kc floats apart, often
  // 2 KiB, would share two L1 sets)
  const int64_t ldw = kc + 16;
  AlignedFloats wbuf = aligned_floats(kSblRows * ldw);
  AlignedFloats acc = aligned_floats(groups * kSblRows * ldacc);
  std::fill(acc.get(), acc.get() + groups * kSblRows * ldacc, 0.0f);
  for (int64_t kb = k0; kb < k1; kb += kc) {
    const int64_t len = std::min(kc, k1 - kb);
    sbl_transpose<T>(x, ldx, m, kb, len, blocks, xt.get());
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t j0 = n0 + g * kSblRows;
      for (int r = 0; r < kSblRows; ++r) {
        float* dst = wbuf.get() + r * ldw;
        if (j0 + r < n1) {
          decode(j0 + r, kb, len, dst);
        } else {
          std::fill(dst, dst + len, 0.0f);
        }
      }
      float* ag = acc.get() + g * kSblRows * ldacc;
      for (int64_t b = 0; b < blocks; ++b) {
        const float* xb = xt.get() + b * len * kSblBlock;
        float* ab = ag + b * kSblBlock;
        if (m - b * kSblBlock > 8) {
          sbl_micro<2, 6>(xb, wbuf.get(), ldw, len, ab, ldacc);
          sbl_micro<2, 6>(xb, wbuf.get() + 6 * ldw, ldw, len, ab + 6 * ldacc, ldacc);
        } else {
          sbl_micro<1, 12>(xb, wbuf.get(), ldw, len, ab, ldacc);
        }
      }
    }
  }
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t j = n0; j < n1; ++j) y[i * ldy + (j - n0)] = acc[(j - n0) * ldacc + i] * post;
  }
}

template <class Decode>
void sbl_dispatch(ActRows x, int64_t ldx, int32_t m, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                  float post, float* y, int64_t ldy, int64_t kc, Decode&& decode) {
  switch (x.type) {
    case FType::F16:
      return sbl_product<FType::F16>(x.data, ldx, m, n0, n1, k0, k1, post, y, ldy, kc, decode);
    case FType::BF16:
      return sbl_product<FType::BF16>(x.data, ldx, m, n0, n1, k0, k1, post, y, ldy, kc, decode);
    case FType::F32:
      break;
  }
  sbl_product<FType::F32>(x.data, ldx, m, n0, n1, k0, k1, post, y, ldy, kc, decode);
}

// The high and low bytes of the bf16 of each of the 16 E2M1 values (code
// c at byte c, in both 128-bit halves), the vpshufb tables of the
// byte-table decodes (this file's and the byte-table GEMV's).
inline __m256i e2m1_bf16_high_bytes() {
  return _mm256_setr_epi8(0x00, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40, -0x80, -0x41, -0x41, -0x41, -0x40,
                          -0x40, -0x40, -0x40, 0x00, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40, -0x80, -0x41,
                          -0x41, -0x41, -0x40, -0x40, -0x40, -0x40);
}
inline __m256i e2m1_bf16_low_bytes() {
  return _mm256_setr_epi8(0x00, 0x00, -0x80, -0x40, 0x00, 0x40, -0x80, -0x40, 0x00, 0x00, -0x80, -0x40, 0x00,
                          0x40, -0x80, -0x40, 0x00, 0x00, -0x80, -0x40, 0x00, 0x40, -0x80, -0x40, 0x00, 0x00,
                          -0x80, -0x40, 0x00, 0x40, -0x80, -0x40);
}

// The byte order both byte-table decodes below need: one vpshufb of 16
// bytes (in both halves) puts bytes 0,1,4,5,8,9,12,13 into the low half
// and 2,3,6,7,10,11,14,15 into the high half; their nibbles interleaved,
// the 32 codes of those bytes' elements then sit as lane 0: elements 0-3,
// 8-11, 16-19, 24-27, lane 1: 4-7, 12-15, 20-23, 28-31, so that the
// in-lane unpacks of looked-up bytes give 4 vectors of 8 consecutive
// elements. first_hi: element 2j is byte j's high nibble (NF4), else its
// low nibble (NVFP4).
template <bool first_hi>
inline __m256i sbl_codes32(const uint8_t* q16) {
  const __m256i sel = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7,
                                       10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i nib = _mm256_set1_epi8(0x0f);
  const __m256i b = _mm256_shuffle_epi8(
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q16))), sel);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib), lo = _mm256_and_si256(b, nib);
  return first_hi ? _mm256_unpacklo_epi8(hi, lo) : _mm256_unpacklo_epi8(lo, hi);
}

// 32 E2M1 codes (16 bytes, element 2j in the low nibble) -> their values
// in element order, v[0] .. v[3] (8 each): sbl_codes32's order, two
// vpshufb (th, tl: the values' bf16 bytes) and four unpacks that leave
// each bf16 in the high half of an fp32. 13 instructions where the
// per-dword permute decode takes 28, 4 vpermps among them. Code 8 gives
// -0, as fmt::e2m1_decode. (sbl_decode_nvfp4, and the AVX2 table's
// dequantize loops and NVFP4 panels.)
inline void e2m1_decode32_ordered(const uint8_t* q16, __m256i th, __m256i tl, __m256 (&v)[4]) {
  const __m256i codes = sbl_codes32<false>(q16);
  const __m256i hb = _mm256_shuffle_epi8(th, codes), lb = _mm256_shuffle_epi8(tl, codes);
  const __m256i wl = _mm256_unpacklo_epi8(lb, hb), wh = _mm256_unpackhi_epi8(lb, hb);  // bf16 words
  const __m256i zero = _mm256_setzero_si256();
  v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, wl));
  v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, wl));
  v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, wh));
  v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, wh));
}

// nblocks NVFP4 blocks (codes q, E4M3 scales s) -> 16 * nblocks fp32
// e2m1 * scale, in element order. Every E2M1 value is a bf16, so two
// vpshufb give its high and low bytes and two unpacks place them in the
// high half of an fp32; 32 elements take 19 instructions where
// SbAvx2::decode_nvfp4 takes 32. (Code 8, -0, gives -0 here and +0 there:
// no sum of products tells them apart, the accumulators start at +0.)
inline void sbl_decode_nvfp4(const uint8_t* q, const uint8_t* s, int64_t nblocks, float* dst) {
  const __m256i th = e2m1_bf16_high_bytes(), tl = e2m1_bf16_low_bytes();
  const float* e4m3 = sb_e4m3_table();
  int64_t b = 0;
  for (; b + 2 <= nblocks; b += 2) {
    __m256 d[4];
    e2m1_decode32_ordered(q + b * 8, th, tl, d);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m256 sc = _mm256_broadcast_ss(e4m3 + s[b + t / 2]);
      _mm256_storeu_ps(dst + b * 16 + int64_t{8} * t, _mm256_mul_ps(d[t], sc));
    }
  }
  if (b < nblocks) SbAvx2::decode_nvfp4(q + b * 8, s + b, nblocks - b, dst + b * 16);
}

// NF4's 16 code values as 4 byte planes (plane b: byte b of each value's
// bits, the same 16 bytes in both 128-bit halves), the tables of the NF4
// byte-plane decodes (sbl_decode_nf4 and the byte-plane GEMV).
struct Nf4Planes {
  __m256i p[4];
  explicit Nf4Planes(const float* lut) : p() {
    alignas(16) uint8_t b[4][16];
    for (int c = 0; c < 16; ++c) {
      const uint32_t bits = fmt::f32_bits(lut[c]);
      for (int plane = 0; plane < 4; ++plane) b[plane][c] = static_cast<uint8_t>(bits >> (8 * plane));
    }
    for (int plane = 0; plane < 4; ++plane)
      p[plane] = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(b[plane])));
  }
};

// The code values of the 32 codes in idx (one per byte, 0-15) by 4
// vpshufb (one per byte of the fp32) and 8 unpacks: v[q] holds, in each
// 128-bit half, the values of that half's bytes 4q .. 4q + 3.
inline void nf4_lookup32(const Nf4Planes& pl, __m256i idx, __m256 (&v)[4]) {
  const __m256i b0 = _mm256_shuffle_epi8(pl.p[0], idx), b1 = _mm256_shuffle_epi8(pl.p[1], idx);
  const __m256i b2 = _mm256_shuffle_epi8(pl.p[2], idx), b3 = _mm256_shuffle_epi8(pl.p[3], idx);
  const __m256i lo_l = _mm256_unpacklo_epi8(b0, b1), hi_l = _mm256_unpacklo_epi8(b2, b3);
  const __m256i lo_h = _mm256_unpackhi_epi8(b0, b1), hi_h = _mm256_unpackhi_epi8(b2, b3);
  v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(lo_l, hi_l));
  v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(lo_l, hi_l));
  v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(lo_h, hi_h));
  v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(lo_h, hi_h));
}

// len (a multiple of 16) NF4 weights from flat element `flat` (a multiple
// of 16): code value times its block's absmax, the bits of
// SbAvx2::decode_nf4. Per 32 elements: the codes in sbl_codes32's order,
// then nf4_lookup32 gives 4 vectors of 8 fp32 values in element order: 22
// instructions
// where the permute decode took 48.
inline void sbl_decode_nf4(const Nf4Planes& pl, const Nf4Weights& w, int64_t flat, int64_t len, float* dst) {
  int64_t e = 0;
  for (; e + 32 <= len; e += 32) {
    const int64_t f = flat + e;
    __m256 d[4];
    nf4_lookup32(pl, sbl_codes32<true>(w.q + f / 2), d);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m256 am = _mm256_broadcast_ss(w.absmax + ((f + int64_t{8} * t) >> w.block_shift));
      _mm256_storeu_ps(dst + e + int64_t{8} * t, _mm256_mul_ps(d[t], am));
    }
  }
  if (e < len) SbAvx2::decode_nf4(w, flat + e, len - e, dst + e);
}

// The table entries (contracts: KernelTable::nvfp4_small / nf4_small).
void sbl_nvfp4_small(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1,
                     int64_t k0, int64_t k1, float* y, int64_t ldy, int64_t kc) {
  const int64_t row_bytes = w.k / 2, row_scales = w.k / 16;
  sbl_dispatch(
      x, ldx, m, n0, n1, k0, k1, w.g, y, ldy, kc, [&](int64_t j, int64_t kb, int64_t len, float* dst) {
        sbl_decode_nvfp4(w.q + j * row_bytes + kb / 2, w.s + j * row_scales + kb / 16, len / 16, dst);
      });
}

void sbl_nf4_small(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, int64_t k0,
                   int64_t k1, float* y, int64_t ldy, int64_t kc) {
  const Nf4Planes planes(w.lut);
  sbl_dispatch(x, ldx, m, n0, n1, k0, k1, 1.0f, y, ldy, kc,
               [&](int64_t j, int64_t kb, int64_t len, float* dst) {
                 sbl_decode_nf4(planes, w, j * w.k + kb, len, dst);
               });
}

}  // namespace
}  // namespace q4::kern
