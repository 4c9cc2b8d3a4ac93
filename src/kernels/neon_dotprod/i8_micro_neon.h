// The fp32 side of KernelTable::i8_micro on aarch64, shared by the dotprod
// and i8mm levels (which differ only in how they compute a block's int32
// dot products): accumulators loaded or zeroed, then per block, ascending,
// acc = fma(float(dot), xs * ws, acc) — the one fixed sequence that keeps
// every table bit-identical — and the stores. Included only by translation
// units compiled with +dotprod (or more).
#pragma once

#include <arm_neon.h>

#include <cstdint>

namespace q4::kern {
namespace {

// block_dot(b, d) adds block b's dot products of the MR activation rows with
// the panel's 16 weight rows to d[i][c] (rows 4c..4c+3, one lane each);
// d[i][c] arrives holding the block's bias correction xc.
template <int MR, class BlockDot>
inline void i8_micro_neon(const float* xs, const int32_t* xc, int64_t ldxs, const float* ws, int64_t nb,
                          float* y, int64_t ldy, int32_t nr, bool accumulate, BlockDot&& block_dot) {
  float32x4_t acc[MR][4];
  for (int64_t i = 0; i < MR; ++i) {
    for (int64_t c = 0; c < 4; ++c) {
      float tmp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (accumulate) {
        for (int64_t r = 0; r < 4 && 4 * c + r < nr; ++r) tmp[r] = y[i * ldy + 4 * c + r];
      }
      acc[i][c] = vld1q_f32(tmp);
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    int32x4_t d[MR][4];
    for (int64_t i = 0; i < MR; ++i) {
      for (int64_t c = 0; c < 4; ++c) d[i][c] = vdupq_n_s32(xc[i * ldxs + b]);
    }
    block_dot(b, d);
    for (int64_t c = 0; c < 4; ++c) {
      const float32x4_t wsv = vld1q_f32(ws + b * 16 + 4 * c);
      for (int64_t i = 0; i < MR; ++i) {
        const float32x4_t p = vmulq_f32(vdupq_n_f32(xs[i * ldxs + b]), wsv);
        acc[i][c] = vfmaq_f32(acc[i][c], vcvtq_f32_s32(d[i][c]), p);
      }
    }
  }
  for (int64_t i = 0; i < MR; ++i) {
    for (int64_t c = 0; c < 4; ++c) {
      if (4 * c + 4 <= nr) {
        vst1q_f32(y + i * ldy + 4 * c, acc[i][c]);
      } else {
        float tmp[4];
        vst1q_f32(tmp, acc[i][c]);
        for (int64_t r = 0; 4 * c + r < nr; ++r) y[i * ldy + 4 * c + r] = tmp[r];
      }
    }
  }
}

// Integer roof probe: 8 independent chains of `step` (one dot-product
// instruction on a 4 x int32 accumulator), `macs` int8 multiply-adds each.
template <class Step>
inline double i8_probe_neon(int64_t iters, int64_t macs, Step&& step) {
  int32x4_t acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = vdupq_n_s32(j);
  const int8x16_t a = vdupq_n_s8(3);
  int8x16_t b = vdupq_n_s8(5);
  for (int64_t it = 0; it < iters; ++it) {
    __asm__ volatile("" : "+w"(b));  // no hoisting
    for (int32x4_t& v : acc) v = step(v, a, b);
  }
  int32x4_t s = acc[0];
  for (int j = 1; j < 8; ++j) s = vaddq_s32(s, acc[j]);
  volatile int32_t sink = vaddvq_s32(s);
  (void)sink;
  return static_cast<double>(iters) * 8 * static_cast<double>(macs) * 2;
}

}  // namespace
}  // namespace q4::kern
