// Code decoders on NEON, shared by the NEON kernels of every level: E4M3
// 16 codes at a time by two 128-entry byte tables (every E4M3 value, NaN
// included, has zero low 16 bits in fp32, so bytes 2 and 3 and the sign
// make the value); E2M1 16 codes in element order; NF4 (any 16-entry fp32
// table) by four byte-plane tbl.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "formats/codec.h"

namespace q4::kern {
namespace {

// Bytes 2 and 3 of the fp32 bits of E4M3 magnitude codes 0..127, as the
// two halves tbl4 reads.
struct NeonE4m3Tables {
  uint8x16x4_t b2[2], b3[2];
  NeonE4m3Tables() {
    alignas(16) uint8_t t2[128], t3[128];
    for (uint32_t c = 0; c < 128; ++c) {
      const uint32_t bits = fmt::f32_bits(fmt::e4m3_decode(c));
      t2[c] = static_cast<uint8_t>(bits >> 16);
      t3[c] = static_cast<uint8_t>(bits >> 24);
    }
    for (int h = 0; h < 2; ++h) {
      b2[h] = vld1q_u8_x4(t2 + int64_t{64} * h);
      b3[h] = vld1q_u8_x4(t3 + int64_t{64} * h);
    }
  }
};

inline const NeonE4m3Tables& neon_e4m3_tables() {
  static const NeonE4m3Tables t;
  return t;
}

// 16 E4M3 codes -> 16 fp32 at out, exactly as e4m3_decode (the sign is bit
// 7 of the code and bit 31 of the value; the low 16 bits are zero).
inline void neon_e4m3_decode16(const NeonE4m3Tables& t, uint8x16_t c, float* out) {
  const uint8x16_t mag = vandq_u8(c, vdupq_n_u8(0x7f));
  const uint8x16_t upper = vsubq_u8(mag, vdupq_n_u8(64));  // < 64 for codes 64..127, else out of range
  const uint8x16_t b2 = vqtbx4q_u8(vqtbl4q_u8(t.b2[0], mag), t.b2[1], upper);
  const uint8x16_t b3 =
      vorrq_u8(vqtbx4q_u8(vqtbl4q_u8(t.b3[0], mag), t.b3[1], upper), vandq_u8(c, vdupq_n_u8(0x80)));
  const uint8x16x2_t h = vzipq_u8(b2, b3);  // 16-bit lanes: the upper halves of the values
  const uint16x8_t zero = vdupq_n_u16(0);
  for (int p = 0; p < 2; ++p) {
    const uint16x8_t hp = vreinterpretq_u16_u8(h.val[p]);
    vst1q_f32(out + int64_t{8} * p, vreinterpretq_f32_u16(vzip1q_u16(zero, hp)));
    vst1q_f32(out + int64_t{8} * p + 4, vreinterpretq_f32_u16(vzip2q_u16(zero, hp)));
  }
}

// 16 packed E2M1 codes (8 bytes, element 2j in the low nibble) -> their
// values in element order, e[0..3]; the value is made with its sign bit
// (code 8 is -0), the magnitude as (2 |e2m1|) * 0.5, exact.
inline void neon_e2m1_decode16(const uint8_t* q8, float32x4_t (&e)[4]) {
  static const uint8_t kMagX2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12};  // 2 |e2m1|
  const uint8x8_t bytes = vld1_u8(q8);
  const uint8x8x2_t z = vzip_u8(vand_u8(bytes, vdup_n_u8(0x0f)), vshr_n_u8(bytes, 4));
  const uint8x16_t codes = vcombine_u8(z.val[0], z.val[1]);  // element order
  const uint8x16_t mag = vqtbl1q_u8(vld1q_u8(kMagX2), codes);
  const uint8x16_t sign = vandq_u8(codes, vdupq_n_u8(8));
  const uint16x8_t m16[2] = {vmovl_u8(vget_low_u8(mag)), vmovl_u8(vget_high_u8(mag))};
  const uint16x8_t s16[2] = {vmovl_u8(vget_low_u8(sign)), vmovl_u8(vget_high_u8(sign))};
  for (int i = 0; i < 4; ++i) {
    const uint16x4_t mh = i % 2 == 0 ? vget_low_u16(m16[i / 2]) : vget_high_u16(m16[i / 2]);
    const uint16x4_t sh = i % 2 == 0 ? vget_low_u16(s16[i / 2]) : vget_high_u16(s16[i / 2]);
    const float32x4_t mf = vmulq_f32(vcvtq_f32_u32(vmovl_u16(mh)), vdupq_n_f32(0.5f));  // exact
    e[i] = vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(mf), vshlq_n_u32(vmovl_u16(sh), 28)));
  }
}

// The 16 NF4 code values (fp32, at lut) as four byte planes for tbl:
// plane p holds byte p of each value (tbl4 over the 64 bytes of lut).
inline void neon_nf4_planes(const float* lut, uint8x16_t (&planes)[4]) {
  alignas(16) static constexpr uint8_t kPlane[16] = {0,  4,  8,  12, 16, 20, 24, 28,
                                                     32, 36, 40, 44, 48, 52, 56, 60};
  const uint8x16x4_t t = vld1q_u8_x4(reinterpret_cast<const uint8_t*>(lut));
  for (int p = 0; p < 4; ++p) {
    planes[p] = vqtbl4q_u8(t, vaddq_u8(vld1q_u8(kPlane), vdupq_n_u8(static_cast<uint8_t>(p))));
  }
}

// 16 codes -> their 16 fp32 values, out[0..3] in order.
inline void neon_nf4_lookup16(const uint8x16_t (&planes)[4], uint8x16_t codes, float32x4_t (&out)[4]) {
  const uint8x16x2_t lo = vzipq_u8(vqtbl1q_u8(planes[0], codes), vqtbl1q_u8(planes[1], codes));
  const uint8x16x2_t hi = vzipq_u8(vqtbl1q_u8(planes[2], codes), vqtbl1q_u8(planes[3], codes));
  for (int p = 0; p < 2; ++p) {
    const uint16x8_t l = vreinterpretq_u16_u8(lo.val[p]), u = vreinterpretq_u16_u8(hi.val[p]);
    out[int64_t{2} * p] = vreinterpretq_f32_u16(vzip1q_u16(l, u));
    out[2 * p + 1] = vreinterpretq_f32_u16(vzip2q_u16(l, u));
  }
}

// 16 packed NF4 codes (8 bytes, element 2j in the HIGH nibble) in element
// order.
inline uint8x16_t neon_nf4_codes16(const uint8_t* q8) {
  const uint8x8_t b = vld1_u8(q8);
  const uint8x8x2_t z = vzip_u8(vshr_n_u8(b, 4), vand_u8(b, vdup_n_u8(0x0f)));
  return vcombine_u8(z.val[0], z.val[1]);
}

}  // namespace
}  // namespace q4::kern
