// E4M3 decode on NEON, shared by the NEON kernel levels: 16 codes at a
// time by two 128-entry byte tables (every E4M3 value, NaN included, has
// zero low 16 bits in fp32, so bytes 2 and 3 and the sign make the value).
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
      b2[h] = vld1q_u8_x4(t2 + 64 * h);
      b3[h] = vld1q_u8_x4(t3 + 64 * h);
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
    vst1q_f32(out + 8 * p, vreinterpretq_f32_u16(vzip1q_u16(zero, hp)));
    vst1q_f32(out + 8 * p + 4, vreinterpretq_f32_u16(vzip2q_u16(zero, hp)));
  }
}

}  // namespace
}  // namespace q4::kern
