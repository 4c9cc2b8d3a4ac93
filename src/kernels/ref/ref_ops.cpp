#include "kernels/ref/ref_ops.h"

#include <algorithm>
#include <cmath>

#include "formats/codec.h"

namespace q4::ref {

float nvfp4_weight(const kern::NvWeights& w, int64_t row, int64_t col) {
  const int64_t flat = row * w.k + col;
  const uint8_t byte = w.q[flat / 2];
  const uint32_t code = (flat % 2 == 1) ? byte >> 4 : byte & 0xfu;
  return fmt::nvfp4_decode_element(code, w.s[row * (w.k / 16) + col / 16], w.g);
}

float nf4_weight(const kern::Nf4Weights& w, int64_t row, int64_t col) {
  const int64_t flat = row * w.k + col;
  const uint8_t byte = w.q[flat / 2];
  const uint32_t code = (flat % 2 == 1) ? byte & 0xfu : byte >> 4;
  return w.lut[code] * w.absmax[flat / w.blocksize];
}

Dot nvfp4_dot(const float* x, const kern::NvWeights& w, int64_t j) {
  Dot d;
  for (int64_t kk = 0; kk < w.k; ++kk) {
    const double p = static_cast<double>(x[kk]) * nvfp4_weight(w, j, kk);
    d.value += p;
    d.magnitude += std::fabs(p);
  }
  return d;
}

Dot nf4_dot(const float* x, const kern::Nf4Weights& w, int64_t j) {
  Dot d;
  for (int64_t kk = 0; kk < w.k; ++kk) {
    const double p = static_cast<double>(x[kk]) * nf4_weight(w, j, kk);
    d.value += p;
    d.magnitude += std::fabs(p);
  }
  return d;
}

Dot panel_dot(const float* x, const float* panel, int64_t kc, int32_t nr, int32_t r) {
  Dot d;
  for (int64_t kk = 0; kk < kc; ++kk) {
    const double p = static_cast<double>(x[kk]) * panel[kk * nr + r];
    d.value += p;
    d.magnitude += std::fabs(p);
  }
  return d;
}

double product_bound(int64_t k, double magnitude) {
  return (static_cast<double>(k) + 16.0) * std::ldexp(1.0, -24) * magnitude + 1e-30;
}

void nvfp4_panel(const kern::NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
                 int32_t nr) {
  for (int64_t kk = 0; kk < kc; ++kk) {
    for (int32_t r = 0; r < nr; ++r) panel[kk * nr + r] = r < rows ? nvfp4_weight(w, n0 + r, k0 + kk) : 0.0f;
  }
}

void nf4_panel(const kern::Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
               int32_t nr) {
  for (int64_t kk = 0; kk < kc; ++kk) {
    for (int32_t r = 0; r < nr; ++r) panel[kk * nr + r] = r < rows ? nf4_weight(w, n0 + r, k0 + kk) : 0.0f;
  }
}

void f32_panel(const float* w, int64_t ldw, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel,
               int32_t nr) {
  for (int64_t kk = 0; kk < kc; ++kk) {
    for (int32_t r = 0; r < nr; ++r) panel[kk * nr + r] = r < rows ? w[(n0 + r) * ldw + k0 + kk] : 0.0f;
  }
}

void nvfp4_quantize(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) {
  const int64_t cols = k / 16;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float* block = x + r * k + c * 16;
      const uint32_t code = fmt::nvfp4_block_scale_code(amax(block, 16), g);
      const float d = fmt::nvfp4_block_divisor(code, g);
      s[r * cols + c] = static_cast<uint8_t>(code);
      for (int e = 0; e < 16; e += 2) {
        const uint32_t lo = fmt::nvfp4_encode_element(block[e], d);
        const uint32_t hi = fmt::nvfp4_encode_element(block[e + 1], d);
        q[(r * k + c * 16 + e) / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

void nvfp4_dequantize(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k, float* out) {
  const kern::NvWeights w{q, s, g, k};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) out[r * k + c] = nvfp4_weight(w, r, c);
  }
}

float amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

namespace {
uint32_t nibble(const uint8_t* q, int64_t idx) {  // element 2j low nibble
  return (idx & 1) ? (q[idx / 2] >> 4) : (q[idx / 2] & 0xfu);
}
}  // namespace

void i8_product(const int8_t* xq, const float* xs, int64_t m, const kern::NvWeights& w, int64_t n, float post,
                float* y) {
  const int64_t nb = w.k / 16;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t dot = 0;
        for (int64_t e = b * 16; e < b * 16 + 16; ++e) {
          dot += int32_t{xq[i * w.k + e]} * fmt::e2m1_decode_x2(nibble(w.q, j * w.k + e));
        }
        const float ws = fmt::e4m3_decode(w.s[j * nb + b]);
        acc = std::fma(static_cast<float>(dot), xs[i * nb + b] * ws, acc);
      }
      y[i * n + j] = acc * post;
    }
  }
}

void i8_quantize(const float* x, int64_t m, int64_t k, int8_t* xq, float* xs) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < k / 16; ++b) {
      const float* xb = x + i * k + b * 16;
      float a = 0.0f;
      bool finite = true;
      for (int e = 0; e < 16; ++e) {
        finite = finite && std::isfinite(xb[e]);
        a = std::max(a, std::fabs(xb[e]));
      }
      const float scale = finite ? a / 127.0f : std::nanf("");
      xs[i * (k / 16) + b] = scale;
      for (int e = 0; e < 16; ++e) {
        int32_t code = 0;  // the library's rule, as written: v + sign(v)/2 in fp32, truncated
        if (finite && scale > 0.0f) {
          const float v = std::min(127.0f, std::max(-127.0f, xb[e] / scale));
          code = static_cast<int32_t>(v + (v < 0.0f ? -0.5f : 0.5f));
        }
        xq[i * k + b * 16 + e] = static_cast<int8_t>(code);
      }
    }
  }
}

void i8_from_nvfp4(const uint8_t* q, const uint8_t* s, int64_t m, int64_t k, int8_t* xq, float* xs) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t e = 0; e < k; ++e)
      xq[i * k + e] = static_cast<int8_t>(fmt::e2m1_decode_x2(nibble(q, i * k + e)));
    for (int64_t b = 0; b < k / 16; ++b) xs[i * (k / 16) + b] = fmt::e4m3_decode(s[i * (k / 16) + b]);
  }
}

}  // namespace q4::ref
