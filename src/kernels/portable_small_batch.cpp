// The portable small-batch product kernels (KernelTable::nvfp4_small /
// nf4_small): src/kernels/small_batch.h over scalar "vectors" of 4 lanes
// (plain arrays the compiler may vectorize with the baseline flags).
#include <cmath>
#include <cstdint>

#include "formats/codec.h"
#include "kernels/kernel_table.h"
#include "kernels/portable.h"
#include "kernels/small_batch.h"

namespace q4::kern {
namespace {

struct SbScalar {
  struct Reg {
    float v[4];
  };
  static constexpr int kLanes = 4;
  static constexpr int kMI = 4;
  static constexpr int kR = 4;
  static Reg zero() { return Reg{{0.0f, 0.0f, 0.0f, 0.0f}}; }
  static Reg load(const float* p) { return Reg{{p[0], p[1], p[2], p[3]}}; }
  static void store(float* p, const Reg& r) {
    for (int l = 0; l < 4; ++l) p[l] = r.v[l];
  }
  static Reg fma(const Reg& a, const Reg& b, const Reg& c) {
    Reg r;
    for (int l = 0; l < 4; ++l) r.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return r;
  }
  static float sum(const Reg& r) { return (r.v[0] + r.v[1]) + (r.v[2] + r.v[3]); }
  template <FType T>
  static Reg load_act(const void* base, int64_t off) {
    Reg r;
    for (int l = 0; l < 4; ++l) r.v[l] = act_elem(base, T, off + l);
    return r;
  }
  static void decode_nvfp4(const uint8_t* q, const uint8_t* s, int64_t nblocks, float* dst) {
    sb_decode_nvfp4_scalar(q, s, nblocks, dst);
  }
  static void decode_nf4(const Nf4Weights& w, int64_t flat, int64_t len, float* dst) {
    sb_decode_nf4_scalar(w, flat, len, dst);
  }
};

}  // namespace

namespace portable {

void nvfp4_small(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, int64_t k0,
                 int64_t k1, float* y, int64_t ldy, int64_t kc) {
  sb_nvfp4_small<SbScalar>(x, ldx, m, w, n0, n1, k0, k1, y, ldy, kc);
}

void nf4_small(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, int64_t k0,
               int64_t k1, float* y, int64_t ldy, int64_t kc) {
  sb_nf4_small<SbScalar>(x, ldx, m, w, n0, n1, k0, k1, y, ldy, kc);
}

}  // namespace portable
}  // namespace q4::kern
