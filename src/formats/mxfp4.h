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

}  // namespace q4::fmt
