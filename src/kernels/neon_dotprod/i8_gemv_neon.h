// Integer GEMV straight from the 4-bit weights on aarch64 (neon_i8_gemv:
// the body of KernelTable::i8_gemv_nvfp4 / i8_gemv_nf4, whose entries
// kernels_neon_dotprod.cpp binds with its code tables) and the fast-mode
// activation quantizer (KernelTable::i8_quantize_act), on sdot. Included by
// the dotprod level's translation unit (compiled with +dotprod); the i8mm
// level inherits them (smmla pairs rows of x, which a GEMV of M <= 4 rows
// does not fill).
//
// Per 4 rows of W and 64 elements (4 blocks): two 16-byte loads per row,
// nibbles -> biased int8 values by one tbl each (lo: the low nibbles of a
// pair of blocks, hi: the high ones), and the activation blocks split to
// match (uzp of the 32-bit words of two kI8Perm-ordered blocks: words 0, 2
// are the even elements, 1, 3 the odd ones). Two sdot per row and pair of
// blocks give lanes [b, b, b+1, b+1]; pairwise adds and one uzp put the 4
// rows of one block in the lanes of one vector. Then the fixed fp32
// sequence of KernelTable::i8_micro per lane (row), blocks ascending:
// bit-identical to every other table. The 4 rows' scales are decoded into
// a block-major buffer before the group's dot products (neon_e4m3_decode16).
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/codec.h"
#include "kernels/isa_common.h"
#include "kernels/kernel_table.h"
#include "kernels/neon/decode_neon.h"

namespace q4::kern {
namespace {

constexpr int32_t kNeonGemvRows = 4;  // rows of W per group (lanes of the fp32 accumulators)

// The weight formats: row bytes, nibble order, and the fp32 scales of the
// 4 rows rows[0..3] for every block, block-major (out[4b + r]).
struct NeonI8Nvfp4 {
  const NvWeights& w;
  static constexpr bool kEvenLow = true;  // element 2j in the low nibble
  const uint8_t* row(int64_t r) const { return w.q + r * (w.k / 2); }
  void scales(const int64_t (&rows)[kNeonGemvRows], float* out) const {
    const NeonE4m3Tables& t = neon_e4m3_tables();
    const int64_t kb = w.k / 16;
    const uint8_t* s[kNeonGemvRows];
    for (int r = 0; r < kNeonGemvRows; ++r) s[r] = w.s + rows[r] * kb;
    int64_t b = 0;
    for (; b + 16 <= kb; b += 16) {
      // Transpose 4 rows x 16 blocks to block-major: zip rows (0, 1) and
      // (2, 3) by bytes, then the pairs by 16-bit lanes.
      const uint8x16x2_t a = vzipq_u8(vld1q_u8(s[0] + b), vld1q_u8(s[1] + b));
      const uint8x16x2_t c = vzipq_u8(vld1q_u8(s[2] + b), vld1q_u8(s[3] + b));
      for (int p = 0; p < 2; ++p) {
        const uint16x8x2_t z = vzipq_u16(vreinterpretq_u16_u8(a.val[p]), vreinterpretq_u16_u8(c.val[p]));
        neon_e4m3_decode16(t, vreinterpretq_u8_u16(z.val[0]), out + 4 * (b + int64_t{8} * p));
        neon_e4m3_decode16(t, vreinterpretq_u8_u16(z.val[1]), out + 4 * (b + int64_t{8} * p + 4));
      }
    }
    for (; b < kb; ++b) {
      for (int r = 0; r < kNeonGemvRows; ++r) out[4 * b + r] = fmt::e4m3_decode(s[r][b]);
    }
  }
};

struct NeonI8Nf4 {
  const Nf4Weights& w;
  static constexpr bool kEvenLow = false;  // element 2j in the high nibble
  const uint8_t* row(int64_t r) const { return w.q + r * (w.k / 2); }
  void scales(const int64_t (&rows)[kNeonGemvRows], float* out) const {
    const int64_t kb = w.k / 16;
    for (int r = 0; r < kNeonGemvRows; ++r) {
      const int64_t e0 = rows[r] * w.k;
      for (int64_t b = 0; b < kb; ++b) out[4 * b + r] = w.absmax[(e0 + 16 * b) >> w.block_shift];
    }
  }
};

// Rows j0 .. j0+3 of W (rows[] repeats the last row past n1: computed, not
// stored) times M <= 4 rows of x, all k / 64 chunks; y = acc * post.
template <int M, class Fmt>
void neon_i8_gemv_group(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                        const Fmt& f, const int64_t (&rows)[kNeonGemvRows], const float* ws, int8x16_t lut,
                        int64_t k, float post, float* y, int64_t ldy, int32_t nrows) {
  const uint8_t* rp[kNeonGemvRows];
  for (int r = 0; r < kNeonGemvRows; ++r) rp[r] = f.row(rows[r]);
  const uint8x16_t nib = vdupq_n_u8(0x0f);
  float32x4_t acc[M];
  for (int i = 0; i < M; ++i) acc[i] = vdupq_n_f32(0.0f);
  for (int64_t c = 0; c < k / 64; ++c) {
    // ev[r][h] / od[r][h]: the even / odd elements of blocks 4c + 2h and
    // 4c + 2h + 1 of row r (8 bytes each), as biased int8 values.
    int8x16_t ev[kNeonGemvRows][2], od[kNeonGemvRows][2];
    for (int r = 0; r < kNeonGemvRows; ++r) {
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t v = vld1q_u8(rp[r] + c * 32 + int64_t{h} * 16);
        const int8x16_t lo = vqtbl1q_s8(lut, vandq_u8(v, nib));
        const int8x16_t hi = vqtbl1q_s8(lut, vshrq_n_u8(v, 4));
        ev[r][h] = Fmt::kEvenLow ? lo : hi;
        od[r][h] = Fmt::kEvenLow ? hi : lo;
      }
    }
    for (int h = 0; h < 2; ++h) {
      const int64_t b = c * 4 + int64_t{h} * 2;  // blocks b, b+1
      const float32x4_t w0 = vld1q_f32(ws + 4 * b), w1 = vld1q_f32(ws + 4 * b + 4);
      for (int i = 0; i < M; ++i) {
        const int8_t* xb = xq + i * ldxq + b * 16;
        const uint32x4_t x0 = vreinterpretq_u32_s8(vld1q_s8(xb));
        const uint32x4_t x1 = vreinterpretq_u32_s8(vld1q_s8(xb + 16));
        // kI8Perm: words 0 and 2 of a block are its even elements, 1 and 3
        // its odd ones, in the byte order of lo / hi above.
        const int8x16_t xe = vreinterpretq_s8_u32(vuzp1q_u32(x0, x1));
        const int8x16_t xo = vreinterpretq_s8_u32(vuzp2q_u32(x0, x1));
        int32x4_t s[kNeonGemvRows];
        for (int r = 0; r < kNeonGemvRows; ++r) {
          s[r] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), ev[r][h], xe), od[r][h], xo);  // [b, b, b+1, b+1]
        }
        const int32x4_t p01 = vpaddq_s32(s[0], s[1]);  // r0 b, r0 b+1, r1 b, r1 b+1
        const int32x4_t p23 = vpaddq_s32(s[2], s[3]);
        const int32x4_t d[2] = {vuzp1q_s32(p01, p23), vuzp2q_s32(p01, p23)};  // rows 0-3 of b, of b+1
        const float32x4_t wv[2] = {w0, w1};
        for (int e = 0; e < 2; ++e) {
          const int32x4_t de = vaddq_s32(d[e], vdupq_n_s32(xc[i * ldxs + b + e]));
          const float32x4_t p = vmulq_f32(vdupq_n_f32(xs[i * ldxs + b + e]), wv[e]);
          acc[i] = vfmaq_f32(acc[i], vcvtq_f32_s32(de), p);
        }
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    const float32x4_t v = vmulq_f32(acc[i], vdupq_n_f32(post));
    if (nrows == kNeonGemvRows) {
      vst1q_f32(y + i * ldy, v);
    } else {
      float tmp[kNeonGemvRows];
      vst1q_f32(tmp, v);
      std::memcpy(y + i * ldy, tmp, static_cast<size_t>(nrows) * sizeof(float));
    }
  }
}

// k % 64 == 0; any m (passes of kI8GemvMaxRows rows of x, each row's bits
// the same whatever the pass).
template <class Fmt>
void neon_i8_gemv(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs, int32_t m,
                  const Fmt& f, const uint8_t* lut16, int64_t k, int64_t n0, int64_t n1, float post, float* y,
                  int64_t ldy) {
  const int8x16_t lut = vreinterpretq_s8_u8(vld1q_u8(lut16));
  std::vector<float> ws(static_cast<size_t>(k / 16 * kNeonGemvRows));
  for (int64_t j0 = n0; j0 < n1; j0 += kNeonGemvRows) {
    const int32_t nrows = static_cast<int32_t>(std::min<int64_t>(kNeonGemvRows, n1 - j0));
    int64_t rows[kNeonGemvRows];
    for (int r = 0; r < kNeonGemvRows; ++r) rows[r] = j0 + std::min(r, nrows - 1);
    f.scales(rows, ws.data());
    for (int32_t i0 = 0; i0 < m; i0 += kI8GemvMaxRows) {
      with_rows<kI8GemvMaxRows>(std::min(kI8GemvMaxRows, m - i0), [&](auto mm) {
        neon_i8_gemv_group<decltype(mm)::value>(xq + i0 * ldxq, ldxq, xs + i0 * ldxs, xc + i0 * ldxs, ldxs, f,
                                                rows, ws.data(), lut, k, post, y + i0 * ldy + (j0 - n0), ldy,
                                                nrows);
      });
    }
  }
}

// KernelTable::i8_quantize_act: i8_activations_quantize's IEEE operations
// per element (amax, amax / 127, x / scale, clamp, +-0.5, truncation), four
// lanes at a time, the codes permuted to kI8Perm by one tbl.
void i8_quantize_act_neon(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* xq, int64_t ldxq,
                          float* xs, int32_t* xc, int64_t ldxs, int32_t bias) {
  alignas(16) static constexpr uint8_t kPerm[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
  static_assert(kPerm[4] == kI8Perm[4] && kPerm[12] == kI8Perm[12], "kI8Perm");
  const uint8x16_t perm = vld1q_u8(kPerm);
  const int64_t nb = k / 16;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + i * ldx + b * 16;
      float32x4_t v[4];
      uint32x4_t mx = vdupq_n_u32(0);
      for (int e = 0; e < 4; ++e) {
        v[e] = vld1q_f32(xb + int64_t{4} * e);
        mx = vmaxq_u32(mx, vandq_u32(vreinterpretq_u32_f32(v[e]), vdupq_n_u32(0x7fffffff)));
      }
      const uint32_t bits = vmaxvq_u32(mx);  // the largest |x| (or NaN / Inf: >= 0x7f800000)
      const bool finite = bits < 0x7f800000u;
      float amax;
      std::memcpy(&amax, &bits, 4);
      const float scale = finite ? amax / 127.0f : fmt::bits_f32(0x7fc00000u);
      int8x16_t codes = vdupq_n_s8(0);
      if (finite && scale > 0.0f) {
        int32x4_t c[4];
        for (int e = 0; e < 4; ++e) {
          const float32x4_t t = vminq_f32(
              vdupq_n_f32(127.0f), vmaxq_f32(vdupq_n_f32(-127.0f), vdivq_f32(v[e], vdupq_n_f32(scale))));
          const float32x4_t half =
              vbslq_f32(vcltq_f32(t, vdupq_n_f32(0.0f)), vdupq_n_f32(-0.5f), vdupq_n_f32(0.5f));
          c[e] = vcvtq_s32_f32(vaddq_f32(t, half));  // truncation
        }
        const int16x8_t lo = vcombine_s16(vmovn_s32(c[0]), vmovn_s32(c[1]));
        const int16x8_t hi = vcombine_s16(vmovn_s32(c[2]), vmovn_s32(c[3]));
        codes = vqtbl1q_s8(vcombine_s8(vmovn_s16(lo), vmovn_s16(hi)), perm);
      }
      vst1q_s8(xq + i * ldxq + b * 16, codes);
      xs[i * ldxs + b] = scale;
      xc[i * ldxs + b] = -bias * static_cast<int32_t>(vaddlvq_s8(codes));
    }
  }
}

}  // namespace
}  // namespace q4::kern
