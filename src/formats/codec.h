// Format math, once (docs/formats.md): E2M1, E4M3, NF4 codecs, fp16/bf16
// conversions and the swizzle index. Header-only and free of the standard
// library beyond <cstdint>/<cstring> so that CUDA device code includes it too.
// Every function is exact integer/compare logic: no dependence on the
// floating-point rounding mode, no approximate reciprocals.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define Q4_HD __host__ __device__ __forceinline__
#else
#define Q4_HD inline
#endif

namespace q4::fmt {

Q4_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

Q4_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// ---------------------------------------------------------------------------
// E2M1 (FP4). Value of each code, sign in bit 3.
// ---------------------------------------------------------------------------
Q4_HD float e2m1_decode(uint32_t code) {
  // Magnitudes ×2 are the integers 0,1,2,3,4,6,8,12.
  const uint32_t mag = code & 7u;
  const uint32_t twice = mag < 4u ? mag : (mag < 6u ? 2u * mag - 4u : 4u * mag - 16u);
  const float v = 0.5f * static_cast<float>(twice);
  return (code & 8u) ? -v : v;
}

// The E2M1 value times 2 as a small integer in [-12, 12] (exact operand of
// integer dot products).
Q4_HD int32_t e2m1_decode_x2(uint32_t code) {
  const int32_t mag = static_cast<int32_t>(code & 7u);
  const int32_t twice = mag < 4 ? mag : (mag < 6 ? 2 * mag - 4 : 4 * mag - 16);
  return (code & 8u) ? -twice : twice;
}

// fp32 -> E2M1, round-to-nearest-even with saturation (cvt.rn.satfinite).
// Ties: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4 (values).
// NaN maps to +6 (code 0x7), as the hardware and cuda_fp4.h do.
Q4_HD uint32_t e2m1_encode(float x) {
  const uint32_t bits = f32_bits(x);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return 0x7u;  // NaN
  const uint32_t sign = (bits >> 31) << 3;
  const float a = bits_f32(abs_bits);
  uint32_t mag;
  if (a <= 0.25f)
    mag = 0;
  else if (a < 0.75f)
    mag = 1;
  else if (a <= 1.25f)
    mag = 2;
  else if (a < 1.75f)
    mag = 3;
  else if (a <= 2.5f)
    mag = 4;
  else if (a < 3.5f)
    mag = 5;
  else if (a <= 5.0f)
    mag = 6;
  else
    mag = 7;
  return sign | mag;
}

// ---------------------------------------------------------------------------
// E4M3 FN (FP8): bias 7, max 448, no Inf, 0x7F/0xFF NaN.
// ---------------------------------------------------------------------------
Q4_HD float e4m3_decode(uint32_t code) {
  const uint32_t exp = (code >> 3) & 0xfu;
  const uint32_t man = code & 7u;
  float v;
  if (exp == 0xfu && man == 7u) {
    v = bits_f32(0x7fc00000u);  // NaN
  } else if (exp == 0) {
    v = static_cast<float>(man) * (1.0f / 512.0f);  // man * 2^-9, exact
  } else {
    // (8 + man) * 2^(exp - 10): build the fp32 directly, exact.
    v = bits_f32(((exp + 120u) << 23) | (man << 20));
  }
  return (code & 0x80u) ? -v : v;
}

// Shift a positive integer right by `shift` bits, rounding to nearest even.
Q4_HD uint32_t shift_right_rne(uint32_t value, uint32_t shift) {
  if (shift == 0) return value;
  if (shift > 31) return 0;  // value < 2^24 here, so below half of one unit
  const uint32_t kept = value >> shift;
  const uint32_t rem = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return (rem > half || (rem == half && (kept & 1u))) ? kept + 1u : kept;
}

// fp32 -> E4M3 FN, round-to-nearest-even, saturating to ±448 (SATFINITE);
// ±Inf -> ±448, NaN -> 0x7F whatever its sign (as cuda_fp8.h).
Q4_HD uint32_t e4m3_encode(float x) {
  const uint32_t bits = f32_bits(x);
  const uint32_t sign = (bits >> 31) << 7;
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return 0x7fu;
  if (abs_bits == 0x7f800000u) return sign | 0x7eu;
  const uint32_t exp = abs_bits >> 23;
  const uint32_t man = abs_bits & 0x7fffffu;
  uint32_t code;
  if (exp >= 121u) {
    // Normal in E4M3 (unbiased exponent >= -6): keep 3 mantissa bits. A carry
    // out of the mantissa correctly increments the exponent field.
    const uint32_t full = ((exp - 120u) << 3) | (man >> 20);
    const uint32_t rem = man & 0xfffffu;
    code = (rem > 0x80000u || (rem == 0x80000u && (full & 1u))) ? full + 1u : full;
    if (code > 0x7eu) code = 0x7eu;
  } else {
    // Subnormal range: count units of 2^-9. value = sig * 2^(e - 150).
    const uint32_t sig = exp ? (man | 0x800000u) : man;
    const uint32_t e = exp ? exp : 1u;
    code = shift_right_rne(sig, 141u - e);  // 141 - e >= 21; result <= 8
  }
  return sign | code;
}

// ---------------------------------------------------------------------------
// NVFP4 quantization steps (docs/formats.md, NVFP4 quantization), shared by every implementation.
// ---------------------------------------------------------------------------
constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;

// Global scale (a multiplier) from the tensor amax: amax / (6*448), 1 if 0.
Q4_HD float nvfp4_global_scale_from_amax(float amax) {
  return amax > 0.0f ? amax / (kE2M1Max * kE4M3Max) : 1.0f;
}

// E4M3 block-scale code from the block amax and the global scale g.
Q4_HD uint32_t nvfp4_block_scale_code(float block_amax, float g) {
  const float denom = kE2M1Max * g;
  uint32_t s = e4m3_encode(block_amax / denom);
  if (block_amax > 0.0f && s == 0u) s = 1u;  // smallest subnormal 2^-9
  return s;
}

// Per-element divisor d = fp32(s_b) * g (0 means: the block's codes are 0).
Q4_HD float nvfp4_block_divisor(uint32_t scale_code, float g) {
  return e4m3_decode(scale_code) * g;
}

Q4_HD uint32_t nvfp4_encode_element(float x, float divisor) {
  return divisor == 0.0f ? 0u : e2m1_encode(x / divisor);
}

// x' = (e2m1(q) * fp32(s)) * g, left to right (first product exact).
Q4_HD float nvfp4_decode_element(uint32_t code, uint32_t scale_code, float g) {
  return (e2m1_decode(code) * e4m3_decode(scale_code)) * g;
}

// ---------------------------------------------------------------------------
// NF4 (bitsandbytes).
// ---------------------------------------------------------------------------
constexpr int kNF4Codes = 16;

Q4_HD float nf4_decode(uint32_t code) {
  constexpr float table[16] = {-1.0f,
                               -0.6961928009986877f,
                               -0.5250730514526367f,
                               -0.39491748809814453f,
                               -0.28444138169288635f,
                               -0.18477343022823334f,
                               -0.09105003625154495f,
                               0.0f,
                               0.07958029955625534f,
                               0.16093020141124725f,
                               0.24611230194568634f,
                               0.33791524171829224f,
                               0.44070982933044434f,
                               0.5626170039176941f,
                               0.7229568362236023f,
                               1.0f};
  return table[code & 15u];
}

// Encode a normalized value y (x * (1/absmax)) to the nearest NF4 code. The
// thresholds are the midpoints of neighbouring codebook values computed in
// double and rounded to fp32 (bitsandbytes' constants); a value exactly on a
// threshold goes to the lower code. NaN maps to code 0 like bitsandbytes'
// comparison tree.
Q4_HD float nf4_threshold(int32_t k) {  // k = 0..14: between codes k and k + 1
  constexpr float thresholds[15] = {-0.8480964004993439f,   -0.6106329262256622f,  -0.4599952697753906f,
                                    -0.33967943489551544f,  -0.23460740596055984f, -0.13791173323988914f,
                                    -0.045525018125772476f, 0.03979014977812767f,  0.1202552504837513f,
                                    0.2035212516784668f,    0.2920137718319893f,   0.3893125355243683f,
                                    0.5016634166240692f,    0.6427869200706482f,   0.8614784181118011f};
  return thresholds[k];
}
Q4_HD uint32_t nf4_encode(float y) {
  uint32_t code = 0;
  for (int32_t k = 0; k < 15; ++k) code += (y > nf4_threshold(k)) ? 1u : 0u;
  return code;
}

// ---------------------------------------------------------------------------
// fp16 / bf16 <-> fp32 (round-to-nearest-even, Inf/NaN preserved).
// ---------------------------------------------------------------------------
Q4_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    // Subnormal: man * 2^-24, exactly representable in fp32.
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    bits = sign | f32_bits(v);
  }
  return bits_f32(bits);
}

Q4_HD uint16_t f32_to_f16(float x) {
  const uint32_t bits = f32_bits(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // qNaN
  if (abs_bits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to Inf
  const uint32_t exp = abs_bits >> 23;
  const uint32_t man = abs_bits & 0x7fffffu;
  uint32_t h;
  if (exp >= 113u) {
    // Normal fp16: drop 13 mantissa bits with RNE; carry may bump exponent.
    h = shift_right_rne(((exp - 112u) << 23) | man, 13u);
  } else {
    // Subnormal fp16: units of 2^-24. value = sig * 2^(e - 150).
    const uint32_t sig = exp ? (man | 0x800000u) : man;
    const uint32_t e = exp ? exp : 1u;
    const uint32_t shift = 126u - e;  // >= 14
    h = shift_right_rne(sig, shift);
  }
  return static_cast<uint16_t>(sign | h);
}

Q4_HD float bf16_to_f32(uint16_t b) {
  return bits_f32(static_cast<uint32_t>(b) << 16);
}

Q4_HD uint16_t f32_to_bf16(float x) {
  const uint32_t bits = f32_bits(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// ---------------------------------------------------------------------------
// Swizzled scale layout (cuBLASLt VEC16_UE4M3) (docs/formats.md, scale layouts).
// ---------------------------------------------------------------------------
Q4_HD int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

Q4_HD int64_t swizzled_rows(int64_t rows) {
  return round_up(rows, 128);
}
Q4_HD int64_t swizzled_cols(int64_t cols) {
  return round_up(cols, 4);
}

// Byte offset of scale (r, c) in the swizzled buffer of a matrix whose
// scale matrix has `cols` columns (cols = K/16 before padding).
Q4_HD int64_t swizzle_offset(int64_t r, int64_t c, int64_t cols) {
  const int64_t padded_cols = swizzled_cols(cols);
  return ((r / 128) * (padded_cols / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

}  // namespace q4::fmt
