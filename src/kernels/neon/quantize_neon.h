// NEON NVFP4 quantize (KernelTable::nvfp4_quantize_checked and its 16-bit
// form, nvfp4_quantize, absmax_bits) and MXFP4 quantize (mxfp4_quantize,
// mxfp4_quantize16), bit-exact with the
// codec (formats/codec.h, formats/mxfp4.h) by the same construction as the
// AVX-512 kernels: block maxima as integer maxima of the |x| bit patterns
// (a NaN or Inf shows as >= 0x7f800000), NVFP4 scale codes four blocks at
// a time with the codec's division and E4M3 rounding, quotients |x| / d
// correctly rounded (one reciprocal per four blocks and a Markstein
// correction where its conditions hold, else the IEEE division; MXFP4: the
// codec's product |x| * 2^-e), and the E2M1 rounding of a quotient by one
// 64-byte table lookup. Included by kernels_neon.cpp only.
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/neon/decode_neon.h"
#include "kernels/neon/small_batch_neon.h"
#include "kernels/portable.h"

namespace q4::kern {
namespace {

// The E2M1 magnitude code of q = |x| / d (correctly rounded, d > 0) by
// table: q's bits clamped to [1/8, 32) (outside it the code is 0 or 7
// whatever the rest), bits 21-25 (the exponent's low 3 bits, the kept bit
// and the rounding bit) give the index mod 32, plus 32 when any lower bit
// (sticky) is set: nearest, ties to even, exactly fmt::e2m1_encode.
struct NeonE2m1Table {
  uint8x16x4_t t;
  NeonE2m1Table() {
    alignas(16) uint8_t b[64];
    for (uint32_t sticky = 0; sticky < 2; ++sticky) {
      for (uint32_t v = 0; v < 32; ++v) {
        // (u >> 21) runs over 496 .. 527 in the clamped range; v is it mod 32.
        const uint32_t top = 496u + ((v - 16u) & 31u);
        const uint32_t u = (top << 21) | sticky;
        float q;
        std::memcpy(&q, &u, 4);
        b[sticky * 32 + v] = static_cast<uint8_t>(fmt::e2m1_encode(q) & 7u);
      }
    }
    t = vld1q_u8_x4(b);
  }
};

// The quantizers' input: 4 elements at p as fp32. fp16 and bf16 are read
// in place and widened in registers (exact: bf16 by a shift, fp16 by
// fcvtl, whose subnormals, Inf and NaN stay what they are under the
// default FPCR every call runs with), so the bytes are those of
// quantizing the fp32 values, with no separate conversion pass.
struct NeonInF32 {
  using T = float;
  static float32x4_t load(const float* p) { return vld1q_f32(p); }
};
struct NeonInBf16 {
  using T = uint16_t;
  static constexpr FType kType = FType::BF16;
  static float32x4_t load(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
};
struct NeonInF16 {
  using T = uint16_t;
  static constexpr FType kType = FType::F16;
  static float32x4_t load(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
};

// The n (< 4 x 32) elements at x as fp32: x itself, or its 16-bit values
// widened into buf (the table's act_to_f32).
template <class In>
const float* neon_tail_f32(const typename In::T* x, int64_t n, float* buf) {
  if constexpr (std::is_same_v<In, NeonInF32>) {
    return x;
  } else {
    sb_act_to_f32<SbNeon>(x, In::kType, 0, n, buf);
    return buf;
  }
}

// Byte 0 of each 32-bit lane of four vectors, in order (16 bytes).
inline uint8x16_t neon_low_bytes(uint32x4_t a, uint32x4_t b, uint32x4_t c, uint32x4_t d) {
  const uint8x16_t ab = vuzp1q_u8(vreinterpretq_u8_u32(a), vreinterpretq_u8_u32(b));
  const uint8x16_t cd = vuzp1q_u8(vreinterpretq_u8_u32(c), vreinterpretq_u8_u32(d));
  return vuzp1q_u8(ab, cd);
}

// The 8 code bytes (element 2j in the low nibble of byte j) of the block
// v[0..3] given its quotients q[0..3] = |v| / d.
inline uint8x8_t neon_e2m1_block(const uint8x16x4_t& table, const float32x4_t (&v)[4],
                                 const float32x4_t (&q)[4]) {
  const uint32x4_t lo = vdupq_n_u32(0x3e000000u), hi = vdupq_n_u32(0x41ffffffu);
  const uint32x4_t low_bits = vdupq_n_u32(0x1fffffu);
  uint32x4_t idx[4], sticky[4], sign[4];
  for (int i = 0; i < 4; ++i) {
    const uint32x4_t u = vminq_u32(vmaxq_u32(vreinterpretq_u32_f32(q[i]), lo), hi);
    idx[i] = vshrq_n_u32(u, 21);
    sticky[i] = vtstq_u32(u, low_bits);
    sign[i] = vshrq_n_u32(vreinterpretq_u32_f32(v[i]), 28);  // bit 3: the sign
  }
  const uint8x16_t index =
      vorrq_u8(vandq_u8(neon_low_bytes(idx[0], idx[1], idx[2], idx[3]), vdupq_n_u8(31)),
               vandq_u8(neon_low_bytes(sticky[0], sticky[1], sticky[2], sticky[3]), vdupq_n_u8(32)));
  const uint8x16_t codes = vorrq_u8(
      vqtbl4q_u8(table, index), vandq_u8(neon_low_bytes(sign[0], sign[1], sign[2], sign[3]), vdupq_n_u8(8)));
  // Byte pairs (c[2j], c[2j+1]) as 16-bit lanes: c[2j] + (c[2j+1] << 4) in
  // the low byte, then narrowed.
  const uint16x8_t w = vreinterpretq_u16_u8(codes);
  return vmovn_u16(vsraq_n_u16(w, w, 4));
}

// KernelTable::nvfp4_quantize_checked: groups of 4 blocks; the block maxima
// are the integer maxima of the |x| bits, so a NaN or Inf stops the call
// (false; q and s then partly written). Scales four at a time: the codec's
// division amax / (6 g), the E4M3 encoding by its bit mapping when all four
// are normal (or saturate), else by the codec per block. In: fp32, or
// 16-bit input read in place (nvfp4_quantize_checked16).
template <class In>
bool nvfp4_quantize_checked_neon_t(const typename In::T* x, int64_t rows, int64_t k, float g, uint8_t* q,
                                   uint8_t* s) {
  static const NeonE2m1Table table_init;
  const uint8x16x4_t table = table_init.t;
  const int64_t nblocks = rows * (k / 16);
  const uint32x4_t abs_mask = vdupq_n_u32(0x7fffffffu);
  const float32x4_t six_g = vdupq_n_f32(fmt::kE2M1Max * g);
  const float32x4_t gv = vdupq_n_f32(g);
  int64_t b0 = 0;
  for (; b0 + 4 <= nblocks; b0 += 4) {
    const typename In::T* xg = x + b0 * 16;
    float32x4_t v[4][4];
    uint32x4_t m[4];
    for (int b = 0; b < 4; ++b) {
      for (int i = 0; i < 4; ++i) v[b][i] = In::load(xg + int64_t{b} * 16 + int64_t{i} * 4);
      const uint32x4_t a0 = vandq_u32(vreinterpretq_u32_f32(v[b][0]), abs_mask);
      const uint32x4_t a1 = vandq_u32(vreinterpretq_u32_f32(v[b][1]), abs_mask);
      const uint32x4_t a2 = vandq_u32(vreinterpretq_u32_f32(v[b][2]), abs_mask);
      const uint32x4_t a3 = vandq_u32(vreinterpretq_u32_f32(v[b][3]), abs_mask);
      m[b] = vmaxq_u32(vmaxq_u32(a0, a1), vmaxq_u32(a2, a3));
    }
    // Lane b: max |x| bits of block b.
    const uint32x4_t amax_bits = vpmaxq_u32(vpmaxq_u32(m[0], m[1]), vpmaxq_u32(m[2], m[3]));
    if (vmaxvq_u32(amax_bits) >= 0x7f800000u) return false;
    const float32x4_t av = vreinterpretq_f32_u32(amax_bits);
    const float32x4_t sv = vdivq_f32(av, six_g);
    alignas(16) uint32_t code[4];
    float32x4_t dec;
    if (vminvq_u32(vreinterpretq_u32_f32(sv)) >= (121u << 23)) {
      // All normal or saturating: keep 3 mantissa bits, nearest even, at
      // most 0x7e; decoded by the plain bit mapping.
      const uint32x4_t u = vreinterpretq_u32_f32(sv);
      const uint32x4_t full = vsubq_u32(vshrq_n_u32(u, 20), vdupq_n_u32(120u << 3));
      const uint32x4_t rem = vandq_u32(u, vdupq_n_u32(0xfffffu));
      const uint32x4_t half = vdupq_n_u32(0x80000u);
      const uint32x4_t up =
          vorrq_u32(vcgtq_u32(rem, half), vandq_u32(vceqq_u32(rem, half), vtstq_u32(full, vdupq_n_u32(1))));
      const uint32x4_t c = vminq_u32(vsubq_u32(full, up), vdupq_n_u32(0x7e));  // (up: all ones = -1)
      vst1q_u32(code, c);
      dec = vreinterpretq_f32_u32(vaddq_u32(vshlq_n_u32(c, 20), vdupq_n_u32(120u << 23)));
    } else {
      alignas(16) float bmax[4], dv[4];
      vst1q_f32(bmax, av);
      for (int b = 0; b < 4; ++b) {
        code[b] = fmt::nvfp4_block_scale_code(bmax[b], g);
        dv[b] = fmt::e4m3_decode(code[b]);
      }
      dec = vld1q_f32(dv);
    }
    const float32x4_t d = vmulq_f32(dec, gv);  // fmt::nvfp4_block_divisor
    const float32x4_t y = vdivq_f32(vdupq_n_f32(1.0f), d);
    // The division-free quotient's conditions (see the AVX-512 encoder):
    // d in [2^-90, 2^90] and amax <= d 2^100.
    const uint32x4_t fast =
        vandq_u32(vandq_u32(vcgeq_f32(d, vdupq_n_f32(0x1p-90f)), vcleq_f32(d, vdupq_n_f32(0x1p90f))),
                  vcleq_f32(av, vmulq_f32(d, vdupq_n_f32(0x1p100f))));
    alignas(16) float dl[4], yl[4];
    alignas(16) uint32_t fl[4];
    vst1q_f32(dl, d);
    vst1q_f32(yl, y);
    vst1q_u32(fl, fast);
    for (int b = 0; b < 4; ++b) {
      s[b0 + b] = static_cast<uint8_t>(code[b]);
      uint8_t* dst = q + (b0 + b) * 8;
      if (dl[b] == 0.0f) {
        std::memset(dst, 0, 8);
        continue;
      }
      const float32x4_t db = vdupq_n_f32(dl[b]);
      float32x4_t qt[4];
      if (fl[b] != 0) {
        const float32x4_t yb = vdupq_n_f32(yl[b]);
        for (int i = 0; i < 4; ++i) {
          const float32x4_t ax = vabsq_f32(v[b][i]);
          const float32x4_t q0 = vmulq_f32(ax, yb);
          qt[i] = vfmaq_f32(q0, vfmsq_f32(ax, q0, db), yb);
        }
      } else {
        for (int i = 0; i < 4; ++i) qt[i] = vdivq_f32(vabsq_f32(v[b][i]), db);
      }
      vst1_u8(dst, neon_e2m1_block(table, v[b], qt));
    }
  }
  // The last blocks (fewer than 4): the scalar table's kernels.
  const int64_t rest = (nblocks - b0) * 16;
  if (rest > 0) {
    alignas(16) float buf[4 * 16];
    const float* xt = neon_tail_f32<In>(x + b0 * 16, rest, buf);
    if (portable::absmax_bits(xt, rest) >= 0x7f800000u) return false;
    portable::nvfp4_quantize(xt, 1, rest, g, q + b0 * 8, s + b0);
  }
  return true;
}

// KernelTable::nvfp4_quantize_checked.
bool nvfp4_quantize_checked_neon(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) {
  return nvfp4_quantize_checked_neon_t<NeonInF32>(x, rows, k, g, q, s);
}

// KernelTable::nvfp4_quantize_checked16.
bool nvfp4_quantize_checked16_neon(const uint16_t* x, bool bf16, int64_t rows, int64_t k, float g, uint8_t* q,
                                   uint8_t* s) {
  return bf16 ? nvfp4_quantize_checked_neon_t<NeonInBf16>(x, rows, k, g, q, s)
              : nvfp4_quantize_checked_neon_t<NeonInF16>(x, rows, k, g, q, s);
}

// KernelTable::nvfp4_quantize (finite input).
void nvfp4_quantize_neon(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) {
  nvfp4_quantize_checked_neon(x, rows, k, g, q, s);
}

// KernelTable::mxfp4_quantize, four blocks of 32 at a time: their maxima
// as integer maxima of the |x| bits, the E8M0 bytes max(exponent field -
// 2, 0) (fmt::mxfp4_scale_byte), the reciprocals 2^(127 - byte) by bit
// mapping (always normal), each element's |x| * 2^-e (the codec's product)
// coded by the table above. The last blocks: the scalar table's function.
// In: as nvfp4_quantize_checked_neon_t.
template <class In>
bool mxfp4_quantize_neon_t(const typename In::T* x, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  static const NeonE2m1Table table_init;
  const uint8x16x4_t table = table_init.t;
  const uint32x4_t abs_mask = vdupq_n_u32(0x7fffffffu);
  const int64_t nblocks = rows * (k / fmt::kMxBlock);
  uint32x4_t worst = vdupq_n_u32(0);  // the largest |x| bits seen (>= 0x7f800000: NaN / Inf)
  int64_t b0 = 0;
  for (; b0 + 4 <= nblocks; b0 += 4) {
    const typename In::T* xg = x + b0 * fmt::kMxBlock;
    uint32x4_t m[4];
    for (int b = 0; b < 4; ++b) {
      m[b] = vdupq_n_u32(0);
      for (int i = 0; i < 8; ++i) {
        m[b] = vmaxq_u32(
            m[b],
            vandq_u32(vreinterpretq_u32_f32(In::load(xg + int64_t{b} * 32 + int64_t{i} * 4)), abs_mask));
      }
    }
    const uint32x4_t amax_bits = vpmaxq_u32(vpmaxq_u32(m[0], m[1]), vpmaxq_u32(m[2], m[3]));
    worst = vmaxq_u32(worst, amax_bits);
    const int32x4_t byte = vmaxq_s32(
        vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(amax_bits, 23)), vdupq_n_s32(2)), vdupq_n_s32(0));
    alignas(16) int32_t bytes[4];
    alignas(16) float inv[4];
    vst1q_s32(bytes, byte);
    vst1q_s32(reinterpret_cast<int32_t*>(inv), vshlq_n_s32(vsubq_s32(vdupq_n_s32(254), byte), 23));
    for (int b = 0; b < 4; ++b) {
      s[b0 + b] = static_cast<uint8_t>(bytes[b]);
      const float32x4_t ib = vdupq_n_f32(inv[b]);
      for (int h = 0; h < 2; ++h) {
        const typename In::T* xh = xg + int64_t{b} * 32 + int64_t{h} * 16;
        float32x4_t v[4], qv[4];
        for (int i = 0; i < 4; ++i) {
          v[i] = In::load(xh + int64_t{i} * 4);
          qv[i] = vmulq_f32(vabsq_f32(v[i]), ib);
        }
        vst1_u8(q + (b0 + b) * 16 + int64_t{h} * 8, neon_e2m1_block(table, v, qv));
      }
    }
  }
  bool finite = vmaxvq_u32(worst) < 0x7f800000u;
  if (b0 < nblocks) {
    const int64_t len = (nblocks - b0) * fmt::kMxBlock;  // (fewer than 4 blocks)
    alignas(16) float buf[4 * fmt::kMxBlock];
    const float* xt = neon_tail_f32<In>(x + b0 * fmt::kMxBlock, len, buf);
    finite = portable::mxfp4_quantize(xt, 1, len, q + b0 * (fmt::kMxBlock / 2), s + b0) && finite;
  }
  return finite;
}

// KernelTable::mxfp4_quantize.
bool mxfp4_quantize_neon(const float* x, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  return mxfp4_quantize_neon_t<NeonInF32>(x, rows, k, q, s);
}

// KernelTable::mxfp4_quantize16.
bool mxfp4_quantize16_neon(const uint16_t* x, bool bf16, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  return bf16 ? mxfp4_quantize_neon_t<NeonInBf16>(x, rows, k, q, s)
              : mxfp4_quantize_neon_t<NeonInF16>(x, rows, k, q, s);
}

// KernelTable::absmax_bits.
uint32_t absmax_bits_neon(const float* x, int64_t n) {
  const uint32x4_t abs_mask = vdupq_n_u32(0x7fffffffu);
  uint32x4_t m0 = vdupq_n_u32(0), m1 = vdupq_n_u32(0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    m0 = vmaxq_u32(m0, vandq_u32(vld1q_u32(reinterpret_cast<const uint32_t*>(x + i)), abs_mask));
    m1 = vmaxq_u32(m1, vandq_u32(vld1q_u32(reinterpret_cast<const uint32_t*>(x + i + 4)), abs_mask));
  }
  return std::max(vmaxvq_u32(vmaxq_u32(m0, m1)), portable::absmax_bits(x + i, n - i));
}

}  // namespace
}  // namespace q4::kern
