// NEON traits of the small-batch product kernels (src/kernels/small_batch.h):
// 4 lanes, 4 rows of X x 4 rows of W = 16 q-register accumulators.
// Included by kernels_neon.cpp only.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/small_batch.h"

namespace q4::kern {
namespace {

struct SbNeon {
  using Reg = float32x4_t;
  static constexpr int kLanes = 4;
  static constexpr int kMI = 4;
  static constexpr int kR = 4;
  static float32x4_t zero() { return vdupq_n_f32(0.0f); }
  static float32x4_t load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, float32x4_t v) { vst1q_f32(p, v); }
  static float32x4_t fma(float32x4_t a, float32x4_t b, float32x4_t c) { return vfmaq_f32(c, a, b); }
  static float sum(float32x4_t a) { return vaddvq_f32(a); }

  template <FType T>
  static float32x4_t load_act(const void* base, int64_t off) {
    if constexpr (T == FType::F32) {
      return vld1q_f32(static_cast<const float*>(base) + off);
    } else {
      const uint16x4_t h = vld1_u16(static_cast<const uint16_t*>(base) + off);
      if constexpr (T == FType::F16) {
        return vcvt_f32_f16(vreinterpret_f16_u16(h));
      } else {
        return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
      }
    }
  }

  // 8 bytes -> 16 codes in element order (lo_first: element 2j in the low nibble).
  static uint8x16_t codes16(const uint8_t* q8, bool lo_first) {
    const uint8x8_t b = vld1_u8(q8);
    const uint8x8_t lo = vand_u8(b, vdup_n_u8(0x0f)), hi = vshr_n_u8(b, 4);
    return lo_first ? vcombine_u8(vzip1_u8(lo, hi), vzip2_u8(lo, hi))
                    : vcombine_u8(vzip1_u8(hi, lo), vzip2_u8(hi, lo));
  }

  // 16 codes -> 16 fp32 values of a 16-entry table (as 64 table bytes).
  static void lookup16(uint8x16_t codes, const uint8x16x4_t& tbl, float scale, float* dst) {
    const float32x4_t sc = vdupq_n_f32(scale);
    for (int part = 0; part < 4; ++part) {
      // Byte indices 4*code + b of the 4 codes of this part.
      uint8x16_t c4 = vshlq_n_u8(codes, 2);
      static const uint8_t kSpread[4][16] = {
          {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
          {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
          {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
          {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}};
      static const uint8_t kByte[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
      c4 = vaddq_u8(vqtbl1q_u8(c4, vld1q_u8(kSpread[part])), vld1q_u8(kByte));
      const float32x4_t v = vreinterpretq_f32_u8(vqtbl4q_u8(tbl, c4));
      vst1q_f32(dst + part * 4, vmulq_f32(v, sc));
    }
  }

  static uint8x16x4_t table_of(const float* lut) {
    uint8x16x4_t t;
    t.val[0] = vreinterpretq_u8_f32(vld1q_f32(lut));
    t.val[1] = vreinterpretq_u8_f32(vld1q_f32(lut + 4));
    t.val[2] = vreinterpretq_u8_f32(vld1q_f32(lut + 8));
    t.val[3] = vreinterpretq_u8_f32(vld1q_f32(lut + 12));
    return t;
  }

  static void decode_nvfp4(const uint8_t* q, const uint8_t* s, int64_t nblocks, float* dst) {
    static const float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const uint8x16x4_t tbl = table_of(kE2M1);
    const float* e4m3 = sb_e4m3_table();
    for (int64_t b = 0; b < nblocks; ++b) lookup16(codes16(q + b * 8, true), tbl, e4m3[s[b]], dst + b * 16);
  }

  static void decode_nf4(const Nf4Weights& w, int64_t flat, int64_t len, float* dst) {
    const uint8x16x4_t tbl = table_of(w.lut);
    for (int64_t e = 0; e < len; e += 16) {
      const int64_t f = flat + e;
      lookup16(codes16(w.q + f / 2, false), tbl, w.absmax[f >> w.block_shift], dst + e);
    }
  }
};

}  // namespace
}  // namespace q4::kern
