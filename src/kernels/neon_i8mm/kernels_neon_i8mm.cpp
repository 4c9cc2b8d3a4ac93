// aarch64 NEON + dotprod + i8mm level: the dotprod table with the integer
// block dot products on smmla (vmmlaq_s32: a 2x8 by 8x2 int8 matrix product
// into a 2x2 int32 tile, 32 multiply-adds per instruction). Compiled with
// +i8mm; only called after HWCAP2 confirmed I8MM. The packed operands are
// the ones every table shares (KernelTable's integer section): the micro
// kernel regroups them in registers. Integer sums are exact, and the fp32
// sequence is the fixed one of KernelTable::i8_micro, so the results are
// bit-identical to every other table.
#include <arm_neon.h>

#include <cstdint>

#include "kernels/isa_common.h"
#include "kernels/kernel_table.h"
#include "kernels/neon_dotprod/i8_micro_neon.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {
namespace {

// Rows of X per call: two smmla row pairs.
constexpr int32_t kI8MR = 4;

// One 16-element block dot product of activation rows (i, i+1) with the
// panel's 16 weight rows: d[c] holds rows 4c..4c+3 for row i (lane order of
// the sdot kernels), e[c] the same for row i+1.
inline void block_dot_pair(const int8_t* x0, const int8_t* x1, const int8_t* wb, int32x4_t d[4],
                           int32x4_t e[4]) {
  // Activation bytes 0-7 (steps t = 0, 1) and 8-15 (t = 2, 3) of both rows.
  const int8x16_t xa = vcombine_s8(vld1_s8(x0), vld1_s8(x1));
  const int8x16_t xb = vcombine_s8(vld1_s8(x0 + 8), vld1_s8(x1 + 8));
  for (int c = 0; c < 4; ++c) {
    // Step t holds 4 bytes per weight row: rows 4c..4c+3 are 16 bytes at
    // wb + t*64 + 16c. Zipping steps (0, 1) by 32-bit lanes gives each row's
    // 8 bytes in element order 0..7 of the activation bytes above.
    const int32x4_t t0 = vreinterpretq_s32_s8(vld1q_s8(wb + int64_t{c} * 16));
    const int32x4_t t1 = vreinterpretq_s32_s8(vld1q_s8(wb + 64 + int64_t{c} * 16));
    const int32x4_t t2 = vreinterpretq_s32_s8(vld1q_s8(wb + 128 + int64_t{c} * 16));
    const int32x4_t t3 = vreinterpretq_s32_s8(vld1q_s8(wb + 192 + int64_t{c} * 16));
    const int8x16_t w01a = vreinterpretq_s8_s32(vzip1q_s32(t0, t1));  // rows 4c, 4c+1: bytes 0-7
    const int8x16_t w23a = vreinterpretq_s8_s32(vzip2q_s32(t0, t1));  // rows 4c+2, 4c+3
    const int8x16_t w01b = vreinterpretq_s8_s32(vzip1q_s32(t2, t3));  // the same for bytes 8-15
    const int8x16_t w23b = vreinterpretq_s8_s32(vzip2q_s32(t2, t3));
    // Tiles [x_i.w_a, x_i.w_b, x_i1.w_a, x_i1.w_b] for the row pairs.
    int32x4_t p01 = vmmlaq_s32(vdupq_n_s32(0), xa, w01a);
    p01 = vmmlaq_s32(p01, xb, w01b);
    int32x4_t p23 = vmmlaq_s32(vdupq_n_s32(0), xa, w23a);
    p23 = vmmlaq_s32(p23, xb, w23b);
    const int64x2_t q01 = vreinterpretq_s64_s32(p01), q23 = vreinterpretq_s64_s32(p23);
    d[c] = vaddq_s32(d[c], vreinterpretq_s32_s64(vzip1q_s64(q01, q23)));
    e[c] = vaddq_s32(e[c], vreinterpretq_s32_s64(vzip2q_s64(q01, q23)));
  }
}

template <int MR>
void i8_micro_rows(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                   const uint8_t* wq, const float* ws, int64_t nb, float* y, int64_t ldy, int32_t nr,
                   bool accumulate) {
  i8_micro_neon<MR>(xs, xc, ldxs, ws, nb, y, ldy, nr, accumulate, [&](int64_t b, int32x4_t(&d)[MR][4]) {
    const int8_t* wb = reinterpret_cast<const int8_t*>(wq + b * 256);
    for (int64_t i = 0; i + 1 < MR; i += 2) {
      const int8_t* x0 = xq + i * ldxq + b * 16;
      block_dot_pair(x0, x0 + ldxq, wb, d[i], d[i + 1]);
    }
    if constexpr (MR % 2 == 1) {  // the last row pairs with itself; the partner's sums are dropped
      const int8_t* x0 = xq + (MR - 1) * ldxq + b * 16;
      int32x4_t spare[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
      block_dot_pair(x0, x0, wb, d[MR - 1], spare);
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

// Integer roof probe: 8 independent smmla chains, 32 int8 MACs per step.
double i8_probe(int64_t iters) {
  return i8_probe_neon(iters, 32,
                       [](int32x4_t acc, int8x16_t a, int8x16_t b) { return vmmlaq_s32(acc, a, b); });
}

}  // namespace

const KernelTable& neon_i8mm_table() {
  static const KernelTable t = complete_table([] {
    // Everything of the dotprod level (packing, GEMV, fp32 kernels); this
    // level replaces the integer micro-kernel and its probe.
    KernelTable f = neon_dotprod_table();
    f.isa = Q4_ISA_NEON_I8MM;
    f.i8_micro = i8_micro;
    f.i8_micro_mr = kI8MR;
    f.i8_probe = i8_probe;
    return f;
  }());
  return t;
}

}  // namespace q4::kern
