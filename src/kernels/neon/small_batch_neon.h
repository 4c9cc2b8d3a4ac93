// NEON traits of the small-batch product kernels (src/kernels/small_batch.h):
// 4 lanes, 4 rows of X x 4 rows of W = 16 q-register accumulators.
// Included by kernels_neon.cpp only.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/neon/decode_neon.h"
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

  // load_act's inverse. fp16: FCVTN rounds to nearest even (the library's
  // calls run with FPCR 0) and keeps a NaN's payload, so NaN lanes are
  // rewritten as the codec writes them (sign | 0x7e00); bf16: the codec's
  // integer rounding, NaN as (bits >> 16) | 0x40.
  template <FType T>
  static void store_act(void* base, int64_t off, float32x4_t v) {
    if constexpr (T == FType::F32) {
      vst1q_f32(static_cast<float*>(base) + off, v);
    } else {
      const uint32x4_t bits = vreinterpretq_u32_f32(v);
      const uint32x4_t num = vceqq_f32(v, v);  // all ones where v is not NaN
      const uint32x4_t hi = vshrq_n_u32(bits, 16);
      uint16x4_t h, canon;
      if constexpr (T == FType::F16) {
        h = vreinterpret_u16_f16(vcvt_f16_f32(v));
        canon = vmovn_u32(vorrq_u32(vandq_u32(hi, vdupq_n_u32(0x8000)), vdupq_n_u32(0x7e00)));
      } else {
        const uint32x4_t lsb = vandq_u32(hi, vdupq_n_u32(1));
        h = vmovn_u32(vshrq_n_u32(vaddq_u32(bits, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16));
        canon = vmovn_u32(vorrq_u32(hi, vdupq_n_u32(0x40)));
      }
      vst1_u16(static_cast<uint16_t*>(base) + off, vbsl_u16(vmovn_u32(num), h, canon));
    }
  }

  // The weights of a tile, decoded by the shared NEON decoders
  // (decode_neon.h): value * the block's scale, one fp32 product.
  static void decode_nvfp4(const uint8_t* q, const uint8_t* s, int64_t nblocks, float* dst) {
    const float* e4m3 = sb_e4m3_table();
    for (int64_t b = 0; b < nblocks; ++b) {
      float32x4_t v[4];
      neon_e2m1_decode16(q + b * 8, v);
      const float32x4_t sc = vdupq_n_f32(e4m3[s[b]]);
      for (int p = 0; p < 4; ++p) vst1q_f32(dst + b * 16 + int64_t{4} * p, vmulq_f32(v[p], sc));
    }
  }

  static void decode_nf4(const Nf4Weights& w, int64_t flat, int64_t len, float* dst) {
    uint8x16_t planes[4];
    neon_nf4_planes(w.lut, planes);
    for (int64_t e = 0; e < len; e += 16) {
      const int64_t f = flat + e;
      float32x4_t v[4];
      neon_nf4_lookup16(planes, neon_nf4_codes16(w.q + f / 2), v);
      const float32x4_t sc = vdupq_n_f32(w.absmax[f >> w.block_shift]);
      for (int p = 0; p < 4; ++p) vst1q_f32(dst + e + int64_t{4} * p, vmulq_f32(v[p], sc));
    }
  }
};

}  // namespace
}  // namespace q4::kern
