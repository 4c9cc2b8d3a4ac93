// aarch64 Advanced SIMD kernels (4 fp32 lanes). NEON is mandatory on
// aarch64, so this table needs no runtime feature check beyond HWCAP.
// Entries without a NEON-specific speed-up come from the portable kernels
// (complete_table), bit-exact by construction.
#include <arm_neon.h>

#include <algorithm>
#include <vector>

#include "formats/codec.h"
#include "kernels/isa_common.h"
#include "kernels/neon/quantize_neon.h"
#include "kernels/neon/small_batch_neon.h"
#include "kernels/portable.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {
namespace {

constexpr int32_t kNR = 8;  // two q-registers of W rows per panel
constexpr int32_t kMR = 8;  // 16 accumulators

// E2M1 value x2 as int8 for each code 0..15.
const int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 16 packed bytes (32 elements, element 2j low nibble) -> 32 fp32 values
// e2m1 (exact: small integers times 0.5) in natural order.
inline void decode32(const uint8_t* q, float* out) {
  const int8x16_t table = vld1q_s8(kE2M1x2);
  const uint8x16_t bytes = vld1q_u8(q);
  const int8x16_t lo = vqtbl1q_s8(table, vandq_u8(bytes, vdupq_n_u8(0x0f)));
  const int8x16_t hi = vqtbl1q_s8(table, vshrq_n_u8(bytes, 4));
  const int8x16x2_t z = vzipq_s8(lo, hi);  // natural order: e0 e1 e2 ...
  for (int part = 0; part < 2; ++part) {
    const int16x8_t w0 = vmovl_s8(vget_low_s8(z.val[part]));
    const int16x8_t w1 = vmovl_s8(vget_high_s8(z.val[part]));
    const float32x4_t half = vdupq_n_f32(0.5f);
    vst1q_f32(out + part * 16 + 0, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w0))), half));
    vst1q_f32(out + part * 16 + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(w0))), half));
    vst1q_f32(out + part * 16 + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w1))), half));
    vst1q_f32(out + part * 16 + 12, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(w1))), half));
  }
}

void nvfp4_gemv(ActRows xr, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float* y,
                int64_t ldy) {
  const int64_t k = w.k;
  if (k % 32 != 0) return portable::nvfp4_gemv(xr, ldx, m, w, n0, n1, y, ldy);
  std::vector<float> conv;
  const float* x = f32_rows(xr, &ldx, m, k, conv);
  alignas(16) float v[32];
  for (int64_t j = n0; j < n1; ++j) {
    const uint8_t* q = w.q + j * (k / 2);
    const uint8_t* s = w.s + j * (k / 16);
    float32x4_t acc[kGemvMaxRows];
    for (int i = 0; i < m; ++i) acc[i] = vdupq_n_f32(0.0f);
    for (int64_t c = 0; c < k; c += 32) {
      decode32(q + c / 2, v);
      for (int half = 0; half < 2; ++half) {
        const float32x4_t sc = vdupq_n_f32(fmt::e4m3_decode(s[c / 16 + half]));
        for (int i = 0; i < m; ++i) {
          const float* xi = x + i * ldx + c + half * 16;
          float32x4_t t = vmulq_f32(vld1q_f32(v + half * 16), vld1q_f32(xi));
          t = vfmaq_f32(t, vld1q_f32(v + half * 16 + 4), vld1q_f32(xi + 4));
          t = vfmaq_f32(t, vld1q_f32(v + half * 16 + 8), vld1q_f32(xi + 8));
          t = vfmaq_f32(t, vld1q_f32(v + half * 16 + 12), vld1q_f32(xi + 12));
          acc[i] = vfmaq_f32(acc[i], t, sc);
        }
      }
    }
    for (int i = 0; i < m; ++i) y[i * ldy + (j - n0)] = vaddvq_f32(acc[i]) * w.g;
  }
  report_scale_signs(w, n0, n1);
}

void gemm_micro(const float* x, int64_t ldx, int32_t mr, const float* panel, int64_t kc, float* y,
                int64_t ldy, int32_t nr, bool accumulate) {
  float32x4_t c0[kMR], c1[kMR];
  for (int i = 0; i < kMR; ++i) {
    c0[i] = vdupq_n_f32(0.0f);
    c1[i] = vdupq_n_f32(0.0f);
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float32x4_t b0 = vld1q_f32(panel + kk * kNR);
    const float32x4_t b1 = vld1q_f32(panel + kk * kNR + 4);
    for (int i = 0; i < mr; ++i) {
      const float32x4_t a = vdupq_n_f32(x[i * ldx + kk]);
      c0[i] = vfmaq_f32(c0[i], a, b0);
      c1[i] = vfmaq_f32(c1[i], a, b1);
    }
  }
  for (int i = 0; i < mr; ++i) {
    alignas(16) float tmp[8];
    vst1q_f32(tmp, c0[i]);
    vst1q_f32(tmp + 4, c1[i]);
    float* yi = y + i * ldy;
    for (int r = 0; r < nr; ++r) yi[r] = accumulate ? yi[r] + tmp[r] : tmp[r];
  }
}

float amax(const float* x, int64_t n) {
  float32x4_t m = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + i)));
  float r = vmaxvq_f32(m);
  for (; i < n; ++i) r = std::max(r, x[i] < 0 ? -x[i] : x[i]);
  return r;
}

struct Vec {
  using Reg = float32x4_t;
  static constexpr int kLanes = 4;
  static float32x4_t set1(float v) { return vdupq_n_f32(v); }
  static float32x4_t fma(float32x4_t a, float32x4_t b, float32x4_t c) { return vfmaq_f32(c, a, b); }
  static float32x4_t add(float32x4_t a, float32x4_t b) { return vaddq_f32(a, b); }
  static float sum(float32x4_t a) { return vaddvq_f32(a); }
};

}  // namespace

const KernelTable& neon_table() {
  static const KernelTable t = complete_table([] {
    KernelTable f;
    f.isa = Q4_ISA_NEON;
    f.panel_nr = kNR;
    f.micro_mr = kMR;
    f.nvfp4_gemv = nvfp4_gemv;
    f.nvfp4_small = sb_nvfp4_small<SbNeon>;
    f.nf4_small = sb_nf4_small<SbNeon>;
    f.act_to_f32 = sb_act_to_f32<SbNeon>;
    f.gemm_micro = gemm_micro;
    f.amax = amax;
    f.absmax_bits = absmax_bits_neon;
    f.nvfp4_quantize = nvfp4_quantize_neon;
    f.nvfp4_quantize_checked = nvfp4_quantize_checked_neon;
    f.nvfp4_dequantize = nvfp4_dequantize_neon;
    f.mxfp4_quantize = mxfp4_quantize_neon;
    f.fma_probe = fma_probe<Vec>;
    return f;
  }());
  return t;
}

}  // namespace q4::kern
