// Portable integer block-dot-product kernels and the activation operands of
// the integer path (see KernelTable: i8_pack_nvfp4 / i8_micro). The scalar
// table runs these; every ISA's own integer kernels compute the same fp32
// sequence, so all of them are bit-identical to these.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/codec.h"
#include "kernels/portable.h"

namespace q4::kern {

namespace {

// Biased E2M1x2 value of each code.
struct BiasedLut {
  uint8_t v[16];
  BiasedLut() {
    for (uint32_t c = 0; c < 16; ++c) v[c] = static_cast<uint8_t>(fmt::e2m1_decode_x2(c) + kI8WeightBias);
  }
};

}  // namespace

void i8_activations_quantize(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* xq, int64_t ldxq,
                             float* xs, int32_t* xc, int64_t ldxs, int32_t bias) {
  const int64_t nb = k / 16;
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * ldx;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xi + b * 16;
      float amax = 0.0f;
      bool finite = true;
      for (int e = 0; e < 16; ++e) {
        finite = finite && std::isfinite(xb[e]);
        amax = std::max(amax, std::fabs(xb[e]));
      }
      // A NaN/Inf activation makes its block's scale NaN, so the outputs it
      // feeds become NaN as in exact mode (no float->int of a non-finite).
      const float scale = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
      int32_t sum = 0;
      int8_t* qb = xq + i * ldxq + b * 16;
      for (int p = 0; p < 16; ++p) {
        int8_t code = 0;
        if (finite && scale > 0.0f) {
          const float v = std::min(127.0f, std::max(-127.0f, xb[kI8Perm[p]] / scale));
          code = static_cast<int8_t>(static_cast<int32_t>(v + (v < 0.0f ? -0.5f : 0.5f)));
        }
        qb[p] = code;
        sum += code;
      }
      xs[i * ldxs + b] = scale;
      xc[i * ldxs + b] = -bias * sum;
    }
  }
}

void i8_activations_nvfp4(const uint8_t* q, const uint8_t* s, int64_t m, int64_t k, int8_t* xq, int64_t ldxq,
                          float* xs, int32_t* xc, int64_t ldxs) {
  // The E2M1x2 value of each code and the fp32 value of each E4M3 code,
  // built once (16 + 256 entries).
  struct Tables {
    int8_t e2m1x2[16];
    float e4m3[256];
  };
  static const Tables t = [] {
    Tables r{};
    for (uint32_t c = 0; c < 16; ++c) r.e2m1x2[c] = static_cast<int8_t>(fmt::e2m1_decode_x2(c));
    for (uint32_t c = 0; c < 256; ++c) r.e4m3[c] = fmt::e4m3_decode(c);
    return r;
  }();
  const int64_t nb = k / 16;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* qb = q + i * (k / 2) + b * 8;
      int8_t* ob = xq + i * ldxq + b * 16;
      int32_t sum = 0;
      // kI8Perm: the low nibbles of bytes 0-3, their high nibbles, then the
      // same of bytes 4-7.
      for (int h = 0; h < 2; ++h) {
        for (int e = 0; e < 4; ++e) {
          const uint8_t byte = qb[4 * h + e];
          ob[8 * h + e] = t.e2m1x2[byte & 0xfu];
          ob[8 * h + 4 + e] = t.e2m1x2[byte >> 4];
          sum += ob[8 * h + e] + ob[8 * h + 4 + e];
        }
      }
      xs[i * ldxs + b] = t.e4m3[s[i * nb + b]];
      xc[i * ldxs + b] = -kI8WeightBias * sum;
    }
  }
}

I8Nf4Code i8_nf4_codebook(const float* lut) {
  I8Nf4Code r;
  float c = 0.0f;
  for (int j = 0; j < 16; ++j) {
    if (!std::isfinite(lut[j])) return r;
    c = std::max(c, std::fabs(lut[j]));
  }
  if (!(c > 0.0f)) return r;
  const float f = static_cast<float>(kI8Nf4Bias) / c;
  for (int j = 0; j < 16; ++j) {
    const float v = std::min(63.0f, std::max(-63.0f, lut[j] * f));
    const int32_t code = static_cast<int32_t>(v + (v < 0.0f ? -0.5f : 0.5f));
    r.biased[j] = static_cast<uint8_t>(code + kI8Nf4Bias);
  }
  r.post = c / static_cast<float>(kI8Nf4Bias);
  r.ok = true;
  return r;
}

namespace portable {

void i8_pack_nf4(const Nf4Weights& w, const uint8_t* code, int64_t n0, int32_t rows, int64_t b0, int64_t nb,
                 uint8_t* wq, float* ws) {
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t r = 0; r < kI8PanelNr; ++r) {
      uint8_t* dst = wq + b * 256 + r * 4;
      if (r >= rows) {
        for (int p = 0; p < 16; ++p) dst[(p / 4) * 64 + p % 4] = static_cast<uint8_t>(kI8Nf4Bias);
        ws[b * 16 + r] = 0.0f;
        continue;
      }
      const int64_t e0 = (n0 + r) * w.k + (b0 + b) * 16;  // even: element 2j in the high nibble
      const uint8_t* qb = w.q + e0 / 2;
      for (int p = 0; p < 16; ++p) {
        const int e = kI8Perm[p];
        dst[(p / 4) * 64 + p % 4] = code[(e & 1) ? (qb[e / 2] & 0xfu) : (qb[e / 2] >> 4)];
      }
      ws[b * 16 + r] = w.absmax[e0 >> w.block_shift];
    }
  }
}

void i8_pack_nvfp4(const NvWeights& w, int64_t n0, int32_t rows, int64_t b0, int64_t nb, uint8_t* wq,
                   float* ws) {
  static const BiasedLut lut;
  const int64_t kb = w.k / 16;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t r = 0; r < kI8PanelNr; ++r) {
      uint8_t* dst = wq + b * 256 + r * 4;
      if (r >= rows) {
        for (int p = 0; p < 16; ++p) dst[(p / 4) * 64 + p % 4] = static_cast<uint8_t>(kI8WeightBias);
        ws[b * 16 + r] = 0.0f;
        continue;
      }
      const uint8_t* qb = w.q + (n0 + r) * (w.k / 2) + (b0 + b) * 8;
      for (int p = 0; p < 16; ++p) {
        const int e = kI8Perm[p];
        dst[(p / 4) * 64 + p % 4] = lut.v[(e & 1) ? (qb[e / 2] >> 4) : (qb[e / 2] & 0xfu)];
      }
      ws[b * 16 + r] = fmt::e4m3_decode(w.s[(n0 + r) * kb + b0 + b]);
    }
  }
}

void i8_micro(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs, int32_t mr,
              const uint8_t* wq, const float* ws, int64_t nb, float* y, int64_t ldy, int32_t nr,
              bool accumulate) {
  for (int32_t i = 0; i < mr; ++i) {
    for (int64_t r = 0; r < nr; ++r) {
      float acc = accumulate ? y[i * ldy + r] : 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* xb = xq + i * ldxq + b * 16;
        const uint8_t* wb = wq + b * 256 + r * 4;
        int32_t dot = xc[i * ldxs + b];
        for (int p = 0; p < 16; ++p) dot += int32_t{xb[p]} * int32_t{wb[(p / 4) * 64 + p % 4]};
        acc = std::fma(static_cast<float>(dot), xs[i * ldxs + b] * ws[b * 16 + r], acc);
      }
      y[i * ldy + r] = acc;
    }
  }
}

double i8_probe(int64_t iters) {
  int32_t acc[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  volatile int8_t va = 3, vb = 5;
  const int32_t a = int32_t{va}, b = int32_t{vb};  // int8 -> int32 sign extension, intended
  int32_t bb = b;
  for (int64_t it = 0; it < iters; ++it) {
    __asm__ volatile("" : "+r"(bb));  // no hoisting (GCC/Clang)
    for (int j = 0; j < 8; ++j) acc[j] += a * (bb + j);
  }
  volatile int32_t sink = 0;
  for (int32_t v : acc) sink = sink + v;
  return static_cast<double>(iters) * 8 * 2;
}

}  // namespace portable
}  // namespace q4::kern
