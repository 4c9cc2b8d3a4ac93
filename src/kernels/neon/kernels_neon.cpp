// aarch64 Advanced SIMD kernels (4 fp32 lanes). NEON is mandatory on
// aarch64, so this table needs no runtime feature check beyond HWCAP.
// Entries without a NEON-specific speed-up come from the portable kernels
// (complete_table), bit-exact by construction.
#include <arm_neon.h>

#include <algorithm>
#include <vector>

#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/dequantize_entries.h"
#include "kernels/isa_common.h"
#include "kernels/neon/decode_neon.h"
#include "kernels/neon/gemv_neon.h"
#include "kernels/neon/quantize_neon.h"
#include "kernels/neon/small_batch_neon.h"
#include "kernels/portable.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {
namespace {

constexpr int32_t kNR = 8;  // two q-registers of W rows per panel
constexpr int32_t kMR = 8;  // 16 accumulators

void nvfp4_gemv(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float* y,
                int64_t ldy) {
  if (w.k % 32 != 0) return portable::nvfp4_gemv(x, ldx, m, w, n0, n1, y, ldy);
  neon_gemv(x, ldx, m, w.k, n0, n1, y,
            [&](auto mm, auto rr, const float* xe, const float* xo, int64_t h, int64_t j, float* yj) {
              neon_nvfp4_gemv_rows<decltype(mm)::value, decltype(rr)::value>(xe, xo, h, w, j, yj, ldy);
            });
  report_scale_signs(w, n0, n1);
}

void nf4_gemv(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, float* y,
              int64_t ldy) {
  if (w.k % 32 != 0 || w.blocksize < 16) return portable::nf4_gemv(x, ldx, m, w, n0, n1, y, ldy);
  neon_gemv(x, ldx, m, w.k, n0, n1, y,
            [&](auto mm, auto rr, const float* xe, const float* xo, int64_t h, int64_t j, float* yj) {
              neon_nf4_gemv_rows<decltype(mm)::value, decltype(rr)::value>(xe, xo, h, w, j, yj, ldy);
            });
}

// Where the dequantizers put 16 values (v[p]: elements off + 4p .. off +
// 4p + 3): fp32 as they are (the fp32 entries), or fp16/bf16 with
// f32_to_act's bits (the 16-bit entries: decoded, converted and stored in
// registers, so that the stores to the output are spread over the work).
struct DqOutF32 {
  float* out;
  void sixteen(int64_t off, const float32x4_t (&v)[4]) const {
    for (int p = 0; p < 4; ++p) vst1q_f32(out + off + int64_t{4} * p, v[p]);
  }
};
template <FType T>
struct DqOut16 {
  uint16_t* out;
  void sixteen(int64_t off, const float32x4_t (&v)[4]) const {
    for (int p = 0; p < 4; ++p) SbNeon::store_act<T>(out, off + int64_t{4} * p, v[p]);
  }
};

// The dequantize loops, each taking an output policy (DqOutF32 for the
// fp32 entries, DqOut16 for the 16-bit ones: set_dequantize_entries).
struct DqLoops {
  // NVFP4: (e2m1 * scale) * g per element, the first product exact, as
  // fmt::nvfp4_decode_element.
  template <class Out>
  static void nvfp4(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k, const Out& out) {
    const float32x4_t gv = vdupq_n_f32(g);
    const int64_t nblocks = rows * (k / 16);
    for (int64_t b = 0; b < nblocks; ++b) {
      float32x4_t e[4];
      neon_e2m1_decode16(q + b * 8, e);
      const float32x4_t sc = vdupq_n_f32(fmt::e4m3_decode(s[b]));
      for (float32x4_t& v : e) v = vmulq_f32(vmulq_f32(v, sc), gv);
      out.sixteen(b * 16, e);
    }
  }

  // NF4: 16 codes (8 bytes, element 2j in the high nibble) per four
  // byte-plane tbl of the code values, times the block's absmax (n % 16 ==
  // 0).
  template <class Out>
  static void nf4(const uint8_t* q, const float* lut, const float* absmax, int64_t blocksize, int64_t n,
                  const Out& out) {
    uint8x16_t planes[4];
    neon_nf4_planes(lut, planes);
    for (int64_t i = 0; i < n; i += 16) {
      float32x4_t v[4];
      neon_nf4_lookup16(planes, neon_nf4_codes16(q + i / 2), v);
      const float32x4_t am = vdupq_n_f32(absmax[i / blocksize]);
      for (float32x4_t& x : v) x = vmulq_f32(x, am);
      out.sixteen(i, v);
    }
  }

  // MXFP4: e2m1 * 2^(byte - 127) per element, as fmt::mxfp4_decode_element.
  template <class Out>
  static void mxfp4(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t k, const Out& out) {
    const int64_t nblocks = rows * (k / fmt::kMxBlock);
    for (int64_t b = 0; b < nblocks; ++b) {
      const float32x4_t sc = vdupq_n_f32(fmt::e8m0_decode(s[b]));
      for (int h = 0; h < 2; ++h) {
        float32x4_t e[4];
        neon_e2m1_decode16(q + b * 16 + int64_t{h} * 8, e);
        for (float32x4_t& v : e) v = vmulq_f32(v, sc);
        out.sixteen(b * 32 + int64_t{h} * 16, e);
      }
    }
  }
};

// The table's dequantize entries, fp32 and 16-bit: the loops above with
// DqOutF32 and DqOut16. (Not timed on aarch64: no
// hardware here; on the x86 tables the 16-bit forms measured 1.1-1.6x.)
void set_dequantize(KernelTable& f) {
  set_dequantize_entries<DqLoops, DqOutF32, DqOut16<FType::BF16>, DqOut16<FType::F16>>(f);
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
    f.nf4_gemv = nf4_gemv;
    f.nvfp4_small = sb_nvfp4_small<SbNeon>;
    f.nf4_small = sb_nf4_small<SbNeon>;
    f.act_to_f32 = sb_act_to_f32<SbNeon>;
    f.f32_to_act = sb_f32_to_act<SbNeon>;
    f.gemm_micro = gemm_micro;
    f.amax = amax;
    f.absmax_bits = absmax_bits_neon;
    f.nvfp4_quantize = nvfp4_quantize_neon;
    f.nvfp4_quantize_checked = nvfp4_quantize_checked_neon;
    f.nvfp4_quantize_checked16 = nvfp4_quantize_checked16_neon;
    f.mxfp4_quantize = mxfp4_quantize_neon;
    f.mxfp4_quantize16 = mxfp4_quantize16_neon;
    set_dequantize(f);
    f.fma_probe = fma_probe<Vec>;
    return f;
  }());
  return t;
}

}  // namespace q4::kern
