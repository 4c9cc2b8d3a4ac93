// aarch64 NEON + dot product (sdot) level: the NEON table with the integer
// block dot products on vdotq_laneq_s32. Compiled with +dotprod; only
// called after HWCAP confirmed ASIMDDP. The biased weights (<= 24) are
// valid signed bytes, so sdot computes the same int32 sums as the x86
// u8 x s8 instructions; the fp32 sequence is the fixed one of
// KernelTable::i8_micro (bit-identical to every other table).
#include <arm_neon.h>

#include <cstdint>

#include "formats/codec.h"
#include "kernels/isa_common.h"
#include "kernels/kernel_table.h"
#include "kernels/neon_dotprod/i8_gemv_neon.h"
#include "kernels/neon_dotprod/i8_micro_neon.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {
namespace {

constexpr int32_t kI8MR = 2;  // 2 rows x 4 q-registers of fp32 and int32 accumulators

struct Tables {
  int8_t biased[16];
  float e4m3[256];
  Tables() {
    for (uint32_t c = 0; c < 16; ++c) biased[c] = static_cast<int8_t>(fmt::e2m1_decode_x2(c) + kI8WeightBias);
    for (uint32_t c = 0; c < 256; ++c) e4m3[c] = fmt::e4m3_decode(c);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// The codes of rows [n0, n0+rows) x blocks [b0, b0+nb) of a 4-bit weight
// (row r at q + r*k/2) as biased int8 values in the panel order of
// KernelTable::i8_micro; rows past `rows` hold `pad`. kEvenLow: element 2j
// in the low nibble (NVFP4), else the high one (NF4).
template <bool kEvenLow>
void i8_pack_codes(const uint8_t* q, int64_t k, int64_t n0, int32_t rows, int64_t b0, int64_t nb,
                   const uint8_t* code, uint8_t pad, uint8_t* wq) {
  const uint8x16_t lut = vld1q_u8(code);
  for (int32_t r = 0; r < kI8PanelNr; ++r) {
    const uint8_t* src = r < rows ? q + (n0 + r) * (k / 2) + b0 * 8 : nullptr;
    for (int64_t b = 0; b < nb; ++b) {
      uint8x8_t even, odd;
      if (src != nullptr) {
        const uint8x8_t v = vld1_u8(src + b * 8);
        const uint8x8_t lo = vqtbl1_u8(lut, vand_u8(v, vdup_n_u8(0x0f)));
        const uint8x8_t hi = vqtbl1_u8(lut, vshr_n_u8(v, 4));
        even = kEvenLow ? lo : hi;  // elements 0 2 4 6 | 8 10 12 14
        odd = kEvenLow ? hi : lo;   // elements 1 3 5 7 | 9 11 13 15
      } else {
        even = odd = vdup_n_u8(pad);
      }
      uint8_t* dst = wq + b * 256 + int64_t{r} * 4;
      vst1_lane_u32(reinterpret_cast<uint32_t*>(dst), vreinterpret_u32_u8(even), 0);
      vst1_lane_u32(reinterpret_cast<uint32_t*>(dst + 64), vreinterpret_u32_u8(odd), 0);
      vst1_lane_u32(reinterpret_cast<uint32_t*>(dst + 128), vreinterpret_u32_u8(even), 1);
      vst1_lane_u32(reinterpret_cast<uint32_t*>(dst + 192), vreinterpret_u32_u8(odd), 1);
    }
  }
}

void i8_pack_nvfp4(const NvWeights& w, int64_t n0, int32_t rows, int64_t b0, int64_t nb, uint8_t* wq,
                   float* ws) {
  const Tables& tb = tables();
  i8_pack_codes<true>(w.q, w.k, n0, rows, b0, nb, reinterpret_cast<const uint8_t*>(tb.biased),
                      static_cast<uint8_t>(kI8WeightBias), wq);
  const int64_t kb = w.k / 16;
  for (int64_t b = 0; b < nb; ++b) {
    for (int32_t r = 0; r < kI8PanelNr; ++r)
      ws[b * 16 + r] = r < rows ? tb.e4m3[w.s[(n0 + r) * kb + b0 + b]] : 0.0f;
  }
}

void i8_pack_nf4(const Nf4Weights& w, const uint8_t* code, int64_t n0, int32_t rows, int64_t b0, int64_t nb,
                 uint8_t* wq, float* ws) {
  i8_pack_codes<false>(w.q, w.k, n0, rows, b0, nb, code, static_cast<uint8_t>(kI8Nf4Bias), wq);
  i8_nf4_panel_scales(w, n0, rows, b0, nb, ws);
}

void i8_gemv_nvfp4(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                   int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float post, float* y, int64_t ldy) {
  neon_i8_gemv(xq, ldxq, xs, xc, ldxs, m, NeonI8Nvfp4{w}, reinterpret_cast<const uint8_t*>(tables().biased),
               w.k, n0, n1, post, y, ldy);
  report_scale_signs(w, n0, n1);
}

void i8_gemv_nf4(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs, int32_t m,
                 const Nf4Weights& w, const uint8_t* code, int64_t n0, int64_t n1, float post, float* y,
                 int64_t ldy) {
  neon_i8_gemv(xq, ldxq, xs, xc, ldxs, m, NeonI8Nf4{w}, code, w.k, n0, n1, post, y, ldy);
}

template <int MR>
void i8_micro_rows(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                   const uint8_t* wq, const float* ws, int64_t nb, float* y, int64_t ldy, int32_t nr,
                   bool accumulate) {
  i8_micro_neon<MR>(xs, xc, ldxs, ws, nb, y, ldy, nr, accumulate, [&](int64_t b, int32x4_t(&d)[MR][4]) {
    const int8_t* wb = reinterpret_cast<const int8_t*>(wq + b * 256);
    int8x16_t xv[MR];
    for (int64_t i = 0; i < MR; ++i) xv[i] = vld1q_s8(xq + i * ldxq + b * 16);
    for (int64_t c = 0; c < 4; ++c) {
      const int8x16_t w0 = vld1q_s8(wb + c * 16), w1 = vld1q_s8(wb + 64 + c * 16);
      const int8x16_t w2 = vld1q_s8(wb + 128 + c * 16), w3 = vld1q_s8(wb + 192 + c * 16);
      for (int64_t i = 0; i < MR; ++i) {
        d[i][c] = vdotq_laneq_s32(d[i][c], w0, xv[i], 0);
        d[i][c] = vdotq_laneq_s32(d[i][c], w1, xv[i], 1);
        d[i][c] = vdotq_laneq_s32(d[i][c], w2, xv[i], 2);
        d[i][c] = vdotq_laneq_s32(d[i][c], w3, xv[i], 3);
      }
    }
  });
}

void i8_micro(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs, int32_t mr,
              const uint8_t* wq, const float* ws, int64_t nb, float* y, int64_t ldy, int32_t nr,
              bool accumulate) {
  with_rows<kI8MR>(mr, [&](auto rows) {
    i8_micro_rows<decltype(rows)::value>(xq, ldxq, xs, xc, ldxs, wq, ws, nb, y, ldy, nr, accumulate);
  });
}

// Integer roof probe: 8 independent sdot chains, 16 int8 MACs per step.
double i8_probe(int64_t iters) {
  return i8_probe_neon(iters, 16,
                       [](int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); });
}

}  // namespace

const KernelTable& neon_dotprod_table() {
  static const KernelTable t = complete_table([] {
    // Every fp32 kernel is the NEON table's; this level adds the integer ones.
    KernelTable f = neon_table();
    f.isa = Q4_ISA_NEON_DOTPROD;
    f.i8_pack_nvfp4 = i8_pack_nvfp4;
    f.i8_micro = i8_micro;
    f.i8_micro_mr = kI8MR;
    f.i8_probe = i8_probe;
    f.i8_gemv_nvfp4 = i8_gemv_nvfp4;
    f.i8_gemv_nf4 = i8_gemv_nf4;
    f.i8_pack_nf4 = i8_pack_nf4;
    f.i8_gemv_k64 = true;  // the GEMV steps 64 elements at a time
    f.i8_quantize_act = i8_quantize_act_neon;
    return f;
  }());
  return t;
}

}  // namespace q4::kern
