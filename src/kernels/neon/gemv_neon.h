// Exact-mode GEMV on NEON (KernelTable::nvfp4_gemv / nf4_gemv, M <= 8):
// x split into its even and odd elements once per call (fp16 / bf16
// converted on the way), then per row of W and 32 elements one 16-byte
// load, the nibbles split by and / shift, and the weights decoded in
// registers: E2M1 by one tbl to the upper byte of its fp16 value (every
// E2M1 value is an fp16 with a zero lower byte) and fcvtl to fp32; NF4 by
// four tbl (one per byte of the fp32 code values) and zips. Per (x row, W
// row) one fp32 accumulator chain: t = sum of the block's products in 4
// lanes, acc += t * scale (the block's E4M3 scale, or the NF4 absmax), y =
// the lane sum (* g). Included by kernels_neon.cpp only.
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cstdint>

#include "formats/codec.h"
#include "kernels/isa_common.h"
#include "kernels/kernel_table.h"
#include "kernels/neon/decode_neon.h"

namespace q4::kern {
namespace {

// Splits rows of x into xe / xo (deinterleave_rows' layout and stride).
inline void neon_deinterleave(ActRows x, int64_t ldx, int32_t m, int64_t k, float* xe, float* xo) {
  const int64_t h = k / 2, ld = split_stride(k);
  const auto* f32 = static_cast<const float*>(x.data);
  const auto* u16 = static_cast<const uint16_t*>(x.data);
  for (int32_t i = 0; i < m; ++i) {
    int64_t j = 0;
    for (; j + 8 <= h; j += 8) {
      const int64_t e = i * ldx + 2 * j;
      float32x4_t ev[2], od[2];
      if (x.type == FType::F32) {
        for (int p = 0; p < 2; ++p) {
          const float32x4x2_t v = vld2q_f32(f32 + e + int64_t{8} * p);
          ev[p] = v.val[0];
          od[p] = v.val[1];
        }
      } else {
        const uint16x8x2_t v = vld2q_u16(u16 + e);  // 8 even, 8 odd halves
        for (int p = 0; p < 2; ++p) {
          const uint16x8_t a = p == 0 ? v.val[0] : v.val[1];
          float32x4_t lo, hi;
          if (x.type == FType::F16) {
            const float16x8_t f = vreinterpretq_f16_u16(a);
            lo = vcvt_f32_f16(vget_low_f16(f));
            hi = vcvt_high_f32_f16(f);
          } else {
            lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16));
            hi = vreinterpretq_f32_u32(vshll_high_n_u16(a, 16));
          }
          (p == 0 ? ev : od)[0] = lo;
          (p == 0 ? ev : od)[1] = hi;
        }
      }
      vst1q_f32(xe + i * ld + j, ev[0]);
      vst1q_f32(xe + i * ld + j + 4, ev[1]);
      vst1q_f32(xo + i * ld + j, od[0]);
      vst1q_f32(xo + i * ld + j + 4, od[1]);
    }
    for (; j < h; ++j) {
      xe[i * ld + j] = act_elem(x.data, x.type, i * ldx + 2 * j);
      xo[i * ld + j] = act_elem(x.data, x.type, i * ldx + 2 * j + 1);
    }
  }
}

// Rows of W per group: M x R accumulators, and the decoded weights of a
// row used by all M rows of x. A row's chain does not depend on R.
template <int M>
constexpr int neon_gemv_rows() {
  return M <= 2 ? 4 : (M <= 4 ? 2 : 1);
}

// acc[i] += (the 16-element block's products summed in 4 lanes) * scale:
// ev / od the block's even / odd weights (elements 0 2 .. 14, 1 3 .. 15),
// xe / xo x's even / odd elements of the block for row 0 (rows h apart).
template <int M>
inline void neon_gemv_block(const float32x4_t (&ev)[2], const float32x4_t (&od)[2], const float* xe,
                            const float* xo, int64_t h, float scale, float32x4_t (&acc)[M]) {
  for (int i = 0; i < M; ++i) {
    float32x4_t t = vmulq_f32(ev[0], vld1q_f32(xe + i * h));
    t = vfmaq_f32(t, ev[1], vld1q_f32(xe + i * h + 4));
    t = vfmaq_f32(t, od[0], vld1q_f32(xo + i * h));
    t = vfmaq_f32(t, od[1], vld1q_f32(xo + i * h + 4));
    acc[i] = vfmaq_n_f32(acc[i], t, scale);
  }
}

// The fp16 upper byte of each E2M1 code's value (sign in bit 7).
struct NeonE2m1Half {
  uint8_t v[16];
  NeonE2m1Half() {
    for (uint32_t c = 0; c < 16; ++c) v[c] = static_cast<uint8_t>(fmt::f32_to_f16(fmt::e2m1_decode(c)) >> 8);
  }
};

// 16 upper bytes -> two blocks' worth of 8 fp32 each: out[0..1] the first
// 8 values, out[2..3] the next 8.
inline void neon_half_bytes_to_f32(uint8x16_t hb, float32x4_t (&out)[4]) {
  const uint8x16_t zero = vdupq_n_u8(0);
  const float16x8_t a = vreinterpretq_f16_u8(vzip1q_u8(zero, hb));
  const float16x8_t b = vreinterpretq_f16_u8(vzip2q_u8(zero, hb));
  out[0] = vcvt_f32_f16(vget_low_f16(a));
  out[1] = vcvt_high_f32_f16(a);
  out[2] = vcvt_f32_f16(vget_low_f16(b));
  out[3] = vcvt_high_f32_f16(b);
}

template <int M, int R>
void neon_nvfp4_gemv_rows(const float* xe, const float* xo, int64_t h, const NvWeights& w, int64_t j0,
                          float* y, int64_t ldy) {
  static const NeonE2m1Half half;
  const NeonE4m3Tables& t4 = neon_e4m3_tables();
  const uint8x16_t lut = vld1q_u8(half.v), nib = vdupq_n_u8(0x0f);
  const int64_t kb = w.k / 16;
  const uint8_t* q[R];
  const uint8_t* s[R];
  for (int r = 0; r < R; ++r) {
    q[r] = w.q + (j0 + r) * (w.k / 2);
    s[r] = w.s + (j0 + r) * kb;
  }
  float32x4_t acc[R][M];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) acc[r][i] = vdupq_n_f32(0.0f);
  }
  alignas(16) float sc[R][16] = {};
  for (int64_t b0 = 0; b0 < kb; b0 += 16) {  // 16 blocks share one scale decode per row
    const int64_t nb = std::min<int64_t>(16, kb - b0);
    for (int r = 0; r < R; ++r) {
      if (nb == 16) {
        neon_e4m3_decode16(t4, vld1q_u8(s[r] + b0), sc[r]);
      } else {
        for (int64_t b = 0; b < nb; ++b) sc[r][b] = fmt::e4m3_decode(s[r][b0 + b]);
      }
    }
    for (int64_t b = 0; b < nb; b += 2) {  // kb is even (K % 32 == 0)
      const int64_t e = (b0 + b) * 8;      // offset of the block pair in xe / xo
      for (int r = 0; r < R; ++r) {
        const uint8x16_t v = vld1q_u8(q[r] + e);
        float32x4_t ev[4], od[4];
        neon_half_bytes_to_f32(vqtbl1q_u8(lut, vandq_u8(v, nib)), ev);
        neon_half_bytes_to_f32(vqtbl1q_u8(lut, vshrq_n_u8(v, 4)), od);
        neon_gemv_block<M>({ev[0], ev[1]}, {od[0], od[1]}, xe + e, xo + e, h, sc[r][b], acc[r]);
        neon_gemv_block<M>({ev[2], ev[3]}, {od[2], od[3]}, xe + e + 8, xo + e + 8, h, sc[r][b + 1], acc[r]);
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = vaddvq_f32(acc[r][i]) * w.g;
  }
}

// NF4: element 2j in the high nibble of byte j; K % 32 == 0 and blocksize
// >= 16, so each 16-element step lies in one absmax block.
template <int M, int R>
void neon_nf4_gemv_rows(const float* xe, const float* xo, int64_t h, const Nf4Weights& w, int64_t j0,
                        float* y, int64_t ldy) {
  uint8x16_t planes[4];
  neon_nf4_planes(w.lut, planes);
  const uint8x16_t nib = vdupq_n_u8(0x0f);
  float32x4_t acc[R][M];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) acc[r][i] = vdupq_n_f32(0.0f);
  }
  for (int64_t c = 0; c < w.k; c += 32) {
    for (int r = 0; r < R; ++r) {
      const int64_t f = (j0 + r) * w.k + c;
      const uint8x16_t v = vld1q_u8(w.q + f / 2);
      float32x4_t ev[4], od[4];
      neon_nf4_lookup16(planes, vshrq_n_u8(v, 4), ev);
      neon_nf4_lookup16(planes, vandq_u8(v, nib), od);
      neon_gemv_block<M>({ev[0], ev[1]}, {od[0], od[1]}, xe + c / 2, xo + c / 2, h,
                         w.absmax[f >> w.block_shift], acc[r]);
      neon_gemv_block<M>({ev[2], ev[3]}, {od[2], od[3]}, xe + c / 2 + 8, xo + c / 2 + 8, h,
                         w.absmax[(f + 16) >> w.block_shift], acc[r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = vaddvq_f32(acc[r][i]);
  }
}

// Rows [n0, n1) in groups of neon_gemv_rows<M>(), the rest one at a time.
template <class Rows>
void neon_gemv(ActRows x, int64_t ldx, int32_t m, int64_t k, int64_t n0, int64_t n1, float* y, Rows&& rows) {
  gemv_even_odd(x, ldx, m, k, neon_deinterleave, [&](auto mm, const float* xe, const float* xo, int64_t h) {
    constexpr int M = decltype(mm)::value;
    constexpr int R = neon_gemv_rows<M>();
    int64_t j = n0;
    for (; j + R <= n1; j += R) rows(mm, std::integral_constant<int, R>{}, xe, xo, h, j, y + (j - n0));
    for (; j < n1; ++j) rows(mm, std::integral_constant<int, 1>{}, xe, xo, h, j, y + (j - n0));
  });
}

}  // namespace
}  // namespace q4::kern
