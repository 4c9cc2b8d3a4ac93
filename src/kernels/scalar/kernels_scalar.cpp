// Portable kernels: the table used where no SIMD variant applies, and the
// fallback pieces the SIMD tables share. Straightforward loops that the
// compiler may auto-vectorize for the baseline ISA.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/codec.h"
#include "kernels/kernel_table.h"
#include "kernels/scalar/scalar_impl.h"

namespace q4::kern {

namespace scalar {

void nvfp4_gemv(const float* x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float* y,
                int64_t ldy) {
  const int64_t k = w.k;
  float wrow[32];
  for (int64_t j = n0; j < n1; ++j) {
    float acc[kGemvMaxRows] = {};
    const uint8_t* q = w.q + j * (k / 2);
    const uint8_t* s = w.s + j * (k / 16);
    for (int64_t b = 0; b < k / 16; ++b) {
      const float sc = fmt::e4m3_decode(s[b]);
      for (int e = 0; e < 16; e += 2) {
        const uint8_t byte = q[b * 8 + e / 2];
        wrow[e] = (fmt::e2m1_decode(byte & 0xfu) * sc) * w.g;
        wrow[e + 1] = (fmt::e2m1_decode(byte >> 4) * sc) * w.g;
      }
      for (int32_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx + b * 16;
        float a = acc[i];
        for (int e = 0; e < 16; ++e) a += xi[e] * wrow[e];
        acc[i] = a;
      }
    }
    for (int32_t i = 0; i < m; ++i) y[i * ldy + (j - n0)] = acc[i];
  }
}

void nf4_gemv(const float* x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, float* y,
              int64_t ldy) {
  const int64_t k = w.k;
  for (int64_t j = n0; j < n1; ++j) {
    float acc[kGemvMaxRows] = {};
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t f = j * k + kk;
      const uint8_t byte = w.q[f >> 1];
      const uint32_t code = (f & 1) ? (byte & 0xfu) : (byte >> 4);
      const float wv = w.lut[code] * w.absmax[f >> w.block_shift];
      for (int32_t i = 0; i < m; ++i) acc[i] += x[i * ldx + kk] * wv;
    }
    for (int32_t i = 0; i < m; ++i) y[i * ldy + (j - n0)] = acc[i];
  }
}

void nvfp4_panel_nr(const NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                    int32_t nr) {
  const int64_t k = w.k;
  for (int32_t r = 0; r < nr; ++r) {
    if (r >= rows) {
      for (int64_t kk = 0; kk < kc; ++kk) panel[kk * nr + r] = 0.0f;
      continue;
    }
    const uint8_t* q = w.q + (n0 + r) * (k / 2);
    const uint8_t* s = w.s + (n0 + r) * (k / 16);
    for (int64_t kk = 0; kk < kc; ++kk) {
      const int64_t c = k0 + kk;
      const uint8_t byte = q[c >> 1];
      const uint32_t code = (c & 1) ? (byte >> 4) : (byte & 0xfu);
      panel[kk * nr + r] = (fmt::e2m1_decode(code) * fmt::e4m3_decode(s[c / 16])) * w.g;
    }
  }
}

void nf4_panel_nr(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                  int32_t nr) {
  const int64_t k = w.k;
  for (int32_t r = 0; r < nr; ++r) {
    for (int64_t kk = 0; kk < kc; ++kk) {
      float v = 0.0f;
      if (r < rows) {
        const int64_t f = (n0 + r) * k + k0 + kk;
        const uint8_t byte = w.q[f >> 1];
        const uint32_t code = (f & 1) ? (byte & 0xfu) : (byte >> 4);
        v = w.lut[code] * w.absmax[f >> w.block_shift];
      }
      panel[kk * nr + r] = v;
    }
  }
}

void f32_panel_nr(const float* w, int64_t ldw, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                  int32_t nr) {
  for (int32_t r = 0; r < nr; ++r) {
    const float* src = w + (n0 + r) * ldw + k0;
    for (int64_t kk = 0; kk < kc; ++kk) panel[kk * nr + r] = r < rows ? src[kk] : 0.0f;
  }
}

void nvfp4_quantize(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) {
  const int64_t cols = k / 16;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float* blk = x + r * k + c * 16;
      float bmax = 0.0f;
      for (int j = 0; j < 16; ++j) bmax = std::max(bmax, std::fabs(blk[j]));
      const uint32_t sc = fmt::nvfp4_block_scale_code(bmax, g);
      const float d = fmt::nvfp4_block_divisor(sc, g);
      s[r * cols + c] = static_cast<uint8_t>(sc);
      uint8_t* dst = q + (r * k + c * 16) / 2;
      for (int j = 0; j < 16; j += 2) {
        const uint32_t lo = fmt::nvfp4_encode_element(blk[j], d);
        const uint32_t hi = fmt::nvfp4_encode_element(blk[j + 1], d);
        dst[j / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

void nvfp4_dequantize(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k, float* out) {
  for (int64_t i = 0; i < rows * k; i += 2) {
    const float sc = fmt::e4m3_decode(s[i / 16]);
    out[i] = (fmt::e2m1_decode(q[i / 2] & 0xfu) * sc) * g;
    out[i + 1] = (fmt::e2m1_decode(q[i / 2] >> 4) * sc) * g;
  }
}

float amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace scalar

namespace {

constexpr int32_t kScalarNR = 8;
constexpr int32_t kScalarMR = 4;

void nvfp4_panel(const NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  scalar::nvfp4_panel_nr(w, n0, rows, k0, kc, panel, kScalarNR);
}
void nf4_panel(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  scalar::nf4_panel_nr(w, n0, rows, k0, kc, panel, kScalarNR);
}
void f32_panel(const float* w, int64_t ldw, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  scalar::f32_panel_nr(w, ldw, n0, rows, k0, kc, panel, kScalarNR);
}

void gemm_micro(const float* x, int64_t ldx, int32_t mr, const float* panel, int64_t kc, float* y,
                int64_t ldy, int32_t nr, bool accumulate) {
  float acc[kScalarMR][kScalarNR] = {};
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float* p = panel + kk * kScalarNR;
    for (int32_t i = 0; i < mr; ++i) {
      const float xv = x[i * ldx + kk];
      for (int32_t r = 0; r < kScalarNR; ++r) acc[i][r] += xv * p[r];
    }
  }
  for (int32_t i = 0; i < mr; ++i) {
    for (int32_t r = 0; r < nr; ++r) y[i * ldy + r] = accumulate ? y[i * ldy + r] + acc[i][r] : acc[i][r];
  }
}

double fma_probe(int64_t iters) {
  float a[12];
  for (int i = 0; i < 12; ++i) a[i] = 0.1f * static_cast<float>(i);
  for (int64_t r = 0; r < iters; ++r) {
    for (float& v : a) v = v * 0.999f + 0.001f;
  }
  volatile float sink = a[0] + a[11];
  (void)sink;
  return static_cast<double>(iters) * 12 * 2;
}

KernelTable make_scalar() {
  KernelTable t;
  t.isa = 0;  // Q4_ISA_SCALAR
  t.panel_nr = kScalarNR;
  t.micro_mr = kScalarMR;
  t.nvfp4_gemv = scalar::nvfp4_gemv;
  t.nf4_gemv = scalar::nf4_gemv;
  t.nvfp4_panel = nvfp4_panel;
  t.nf4_panel = nf4_panel;
  t.f32_panel = f32_panel;
  t.gemm_micro = gemm_micro;
  t.nvfp4_quantize = scalar::nvfp4_quantize;
  t.nvfp4_dequantize = scalar::nvfp4_dequantize;
  t.amax = scalar::amax;
  t.fma_probe = fma_probe;
  return t;
}

}  // namespace

const KernelTable& scalar_table() {
  static const KernelTable t = make_scalar();
  return t;
}

}  // namespace q4::kern
