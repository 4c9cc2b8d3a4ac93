// MXFP4 format math (OCP Microscaling Formats v1.0; docs/formats.md, MXFP4):
// E2M1 elements in blocks of 32 sharing one E8M0 scale (a power of two,
// bias 127, 0xFF = NaN), no global scale. Header-only, host and device, the
// same exact integer/compare style as codec.h (whose E2M1 encoder it uses).
#pragma once

#include <cstdint>

#include "formats/codec.h"

namespace q4::fmt {

constexpr int32_t kMxBlock = 32;  // elements per E8M0 scale
constexpr int32_t kE8M0Bias = 127;
constexpr uint32_t kE8M0NaN = 0xffu;
constexpr int32_t kE2M1MaxExponent = 2;  // 6 = 1.5 * 2^2

// 2^e as an fp32, exact for e in [-149, 127] (subnormal below -126).
Q4_HD float pow2_f32(int32_t e) {
  if (e >= -126) return bits_f32(static_cast<uint32_t>(e + 127) << 23);
  return bits_f32(1u << static_cast<uint32_t>(e + 149));
}

// E8M0 byte -> 2^(byte - 127); 0xFF -> NaN. Exact (2^-127 is an fp32
// subnormal).
Q4_HD float e8m0_decode(uint32_t byte) {
  byte &= 0xffu;
  if (byte == kE8M0NaN) return bits_f32(0x7fc00000u);
  return pow2_f32(static_cast<int32_t>(byte) - kE8M0Bias);
}

// The shared exponent of a block from its amax (finite, >= 0), the OCP rule:
// e = floor(log2(amax)) - 2, clamped to [-127, 127]; amax == 0 gives -127.
// floor(log2) of a normal fp32 is its unbiased exponent field; a zero or
// subnormal amax (< 2^-126) always lands on the lower clamp.
Q4_HD int32_t mxfp4_scale_exponent(float amax) {
  const uint32_t exp_field = (f32_bits(amax) >> 23) & 0xffu;
  if (exp_field == 0u) return -kE8M0Bias;
  int32_t e = static_cast<int32_t>(exp_field) - 127 - kE2M1MaxExponent;
  if (e < -kE8M0Bias) e = -kE8M0Bias;
  if (e > kE8M0Bias) e = kE8M0Bias;
  return e;
}

// The E8M0 byte of a block amax.
Q4_HD uint32_t mxfp4_scale_byte(float amax) {
  return static_cast<uint32_t>(mxfp4_scale_exponent(amax) + kE8M0Bias);
}

// The reciprocal multiplier 2^-e of a scale byte produced by
// mxfp4_scale_byte (byte <= 252, so -e is in [-125, 127]: a normal fp32, and
// x * 2^-e equals x / 2^e exactly unless the result underflows far below the
// smallest E2M1 step, where both round to a signed zero).
Q4_HD float mxfp4_inverse_scale(uint32_t byte) {
  return pow2_f32(kE8M0Bias - static_cast<int32_t>(byte));
}

// One element: x / 2^e rounded to E2M1 (RNE, saturating at +-6, -0 keeps its
// sign).
Q4_HD uint32_t mxfp4_encode_element(float x, float inverse_scale) {
  return e2m1_encode(x * inverse_scale);
}

// e2m1(code) * 2^(byte - 127): exact whenever the result is a finite fp32
// (values past the fp32 range, possible only with bytes >= 253, are +-Inf);
// byte 0xFF gives NaN.
Q4_HD float mxfp4_decode_element(uint32_t code, uint32_t byte) {
  return e2m1_decode(code) * e8m0_decode(byte);
}

// MXFP4 as NVFP4 (docs/formats.md, "MXFP4 on the E2M1 kernels"). An MXFP4
// block of 32 with scale 2^(e-127) equals two NVFP4 blocks of 16 with the
// E4M3 scale 2^(e-127-t) and the global scale 2^t, exactly, whenever
// 2^(e-127-t) is an E4M3 value: a power of two in [2^-9, 2^8] (the
// subnormals 2^-9..2^-7 and the normals 2^-6..2^8), a window of 18 binades.
constexpr int32_t kNvPow2Low = -9;
constexpr int32_t kNvPow2High = 8;
constexpr int32_t kNvWindowBinades = kNvPow2High - kNvPow2Low + 1;  // 18

// The E4M3 byte of 2^p, p in [kNvPow2Low, kNvPow2High].
Q4_HD uint32_t e4m3_pow2_byte(int32_t p) {
  if (p >= -6) return static_cast<uint32_t>(p + 7) << 3;  // normal: exponent field p + 7, mantissa 0
  return 1u << static_cast<uint32_t>(p + 9);              // subnormal: mantissa 2^(p+9) * 2^-9
}

// The global exponent t for a weight whose largest E8M0 byte (over the
// blocks that take part) is e_max: the window's top at e_max, kept a
// normal fp32 (t >= -126; then every byte <= e_max still lands at p <= 8).
Q4_HD int32_t mx_nv_global_exponent(uint32_t e_max) {
  const int32_t t = static_cast<int32_t>(e_max) - kE8M0Bias - kNvPow2High;
  return t < -126 ? -126 : t;
}

// The E4M3 byte standing for E8M0 byte e under global exponent t, or -1
// when 2^(e-127-t) is outside the window (or e is the NaN byte).
Q4_HD int32_t mx_nv_scale_byte(uint32_t e, int32_t t) {
  if (e == kE8M0NaN) return -1;
  const int32_t p = static_cast<int32_t>(e) - kE8M0Bias - t;
  if (p < kNvPow2Low || p > kNvPow2High) return -1;
  return static_cast<int32_t>(e4m3_pow2_byte(p));
}

// mx_nv_scale_byte for the finite bytes (e != 0xFF) as plain selects, for
// loops the compiler vectorizes: the E4M3 byte, or 0xFF outside the window.
Q4_HD uint8_t mx_nv_scale_byte_u8(uint8_t e, int32_t t) {
  const int32_t p = static_cast<int32_t>(e) - kE8M0Bias - t;
  const auto normal = static_cast<uint8_t>((p + 7) << 3);  // 2^-6 .. 2^8: exponent field p + 7
  return p >= -6 && p <= kNvPow2High ? normal
         : p == -7                   ? uint8_t{0x04}
         : p == -8                   ? uint8_t{0x02}
         : p == kNvPow2Low           ? uint8_t{0x01}
                                     : uint8_t{0xff};
}

}  // namespace q4::fmt
