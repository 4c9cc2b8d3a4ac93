#include "kernels/ref/ref_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace q4::kern {

float load_one(const void* base, FType t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(base);
  switch (t) {
    case FType::F32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case FType::F16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return fmt::f16_to_f32(h);
    }
    case FType::BF16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return fmt::bf16_to_f32(b);
    }
  }
  return 0.0f;
}

void load_row(const void* base, FType t, int64_t first, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_one(base, t, first + i);
}

void store_row(void* base, FType t, int64_t first, int64_t n, const float* src) {
  auto* p = static_cast<uint8_t*>(base);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = first + i;
    switch (t) {
      case FType::F32:
        std::memcpy(p + 4 * j, &src[i], 4);
        break;
      case FType::F16: {
        const uint16_t h = fmt::f32_to_f16(src[i]);
        std::memcpy(p + 2 * j, &h, 2);
        break;
      }
      case FType::BF16: {
        const uint16_t b = fmt::f32_to_bf16(src[i]);
        std::memcpy(p + 2 * j, &b, 2);
        break;
      }
    }
  }
}

}  // namespace q4::kern

namespace q4::ref {
namespace {

using kern::load_one;
using kern::load_row;
using kern::store_row;

uint32_t nibble_nvfp4(const uint8_t* q, int64_t flat) {
  const uint8_t byte = q[flat >> 1];
  return (flat & 1) ? (byte >> 4) : (byte & 0xfu);  // element 2j low nibble
}

uint32_t nibble_nf4(const uint8_t* q, int64_t flat) {
  const uint8_t byte = q[flat >> 1];
  return (flat & 1) ? (byte & 0xfu) : (byte >> 4);  // element 2j high nibble
}

float bias_at(const FloatPtr* bias, int64_t j) {
  return bias != nullptr ? load_one(bias->data, bias->type, j) : 0.0f;
}

void store_one(FloatOut out, int64_t i, double v) {
  const float f = static_cast<float>(v);
  store_row(out.data, out.type, i, 1, &f);
}

}  // namespace

float amax(FloatPtr x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(load_one(x.data, x.type, i)));
  return m;
}

void nvfp4_quantize(FloatPtr x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* scale,
                    int32_t layout) {
  const int64_t cols = k / 16;
  float block[16];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      load_row(x.data, x.type, r * k + c * 16, 16, block);
      float bmax = 0.0f;
      for (float v : block) bmax = std::max(bmax, std::fabs(v));
      const uint32_t s = fmt::nvfp4_block_scale_code(bmax, g);
      const float d = fmt::nvfp4_block_divisor(s, g);
      const int64_t so = layout == Q4_SCALE_SWIZZLED ? fmt::swizzle_offset(r, c, cols) : r * cols + c;
      scale[so] = static_cast<uint8_t>(s);
      uint8_t* dst = q + (r * k + c * 16) / 2;
      for (int j = 0; j < 16; j += 2) {
        const uint32_t lo = fmt::nvfp4_encode_element(block[j], d);
        const uint32_t hi = fmt::nvfp4_encode_element(block[j + 1], d);
        dst[j / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

void nvfp4_dequantize(const uint8_t* q, ScaleView scale, float g, int64_t rows, int64_t k, FloatOut out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const uint32_t s = scale.at(r, i / 16);
      const float v = fmt::nvfp4_decode_element(nibble_nvfp4(q, r * k + i), s, g);
      store_row(out.data, out.type, r * k + i, 1, &v);
    }
  }
}

void nvfp4_scaled_mm(const uint8_t* a_q, ScaleView a_s, const uint8_t* b_q, ScaleView b_s, int64_t m,
                     int64_t n, int64_t k, float alpha, const FloatPtr* bias, FloatOut out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double a = static_cast<double>(fmt::e2m1_decode(nibble_nvfp4(a_q, i * k + kk))) *
                         fmt::e4m3_decode(a_s.at(i, kk / 16));
        const double b = static_cast<double>(fmt::e2m1_decode(nibble_nvfp4(b_q, j * k + kk))) *
                         fmt::e4m3_decode(b_s.at(j, kk / 16));
        acc += a * b;
      }
      store_one(out, i * n + j, static_cast<double>(alpha) * acc + bias_at(bias, j));
    }
  }
}

void nvfp4_linear(FloatPtr x, int64_t m, int64_t k, const uint8_t* w_q, ScaleView w_s, float g, int64_t n,
                  const FloatPtr* bias, FloatOut out) {
  std::vector<float> w(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) {
      w[kk] = fmt::nvfp4_decode_element(nibble_nvfp4(w_q, j * k + kk), w_s.at(j, kk / 16), g);
    }
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        acc += static_cast<double>(load_one(x.data, x.type, i * k + kk)) * w[kk];
      }
      store_one(out, i * n + j, acc + bias_at(bias, j));
    }
  }
}

void nf4_quantize(FloatPtr x, int64_t n, int64_t blocksize, uint8_t* q, float* absmax) {
  const int64_t nblocks = (n + blocksize - 1) / blocksize;
  if (n > 0) std::memset(q, 0, static_cast<size_t>((n + 1) / 2));  // (q may be NULL when n == 0)
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t lo = b * blocksize;
    const int64_t hi = std::min(n, lo + blocksize);
    float m = 0.0f;
    for (int64_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(load_one(x.data, x.type, i)));
    absmax[b] = m;
    const float inv = m > 0.0f ? 1.0f / m : 0.0f;
    for (int64_t i = lo; i < hi; ++i) {
      uint32_t code = 7;  // exact zero; also the code for an all-zero block
      if (m > 0.0f) {
        const float y = std::min(1.0f, std::max(-1.0f, load_one(x.data, x.type, i) * inv));
        code = fmt::nf4_encode(y);
      }
      q[i >> 1] = static_cast<uint8_t>(q[i >> 1] | ((i & 1) ? code : (code << 4)));
    }
  }
}

void nf4_dequantize(const uint8_t* q, const Nf4Stats& st, int64_t n, FloatOut out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = st.code_value(nibble_nf4(q, i)) * st.absmax_of_block(i / st.blocksize);
    store_row(out.data, out.type, i, 1, &v);
  }
}

void nf4_scaled_mm(FloatPtr x, int64_t m, int64_t k, const uint8_t* w_q, const Nf4Stats& st, int64_t n,
                   const FloatPtr* bias, FloatOut out) {
  std::vector<float> w(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t flat = j * k + kk;
      w[kk] = st.code_value(nibble_nf4(w_q, flat)) * st.absmax_of_block(flat / st.blocksize);
    }
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        acc += static_cast<double>(load_one(x.data, x.type, i * k + kk)) * w[kk];
      }
      store_one(out, i * n + j, acc + bias_at(bias, j));
    }
  }
}

void dynamic_map_signed(float* map256) {
  // The signed dynamic map of bitsandbytes' double quantization: for each
  // decade 10^(i-6), i = 0..6, the midpoints of 2^i + 1 evenly spaced points
  // in [0.1, 1], both signs; plus 0 and 1. 254 + 2 = 256 sorted entries.
  std::vector<double> data;
  for (int i = 0; i < 7; ++i) {
    const int items = (1 << i) + 1;
    const double scale = std::pow(10.0, i - 6);
    for (int j = 0; j + 1 < items; ++j) {
      const double b0 = 0.1 + 0.9 * j / (items - 1);
      const double b1 = 0.1 + 0.9 * (j + 1) / (items - 1);
      const double mean = (b0 + b1) / 2.0;
      data.push_back(scale * mean);
      data.push_back(-scale * mean);
    }
  }
  data.push_back(0.0);
  data.push_back(1.0);
  std::sort(data.begin(), data.end());
  for (size_t i = 0; i < 256; ++i) map256[i] = static_cast<float>(data[i]);
}

void nf4_double_quantize(const float* absmax, int64_t nblocks, uint8_t* qabsmax, float* nested_absmax,
                         float* nested_map, float* offset) {
  dynamic_map_signed(nested_map);
  double sum = 0.0;
  for (int64_t i = 0; i < nblocks; ++i) sum += absmax[i];
  const float off = nblocks > 0 ? static_cast<float>(sum / static_cast<double>(nblocks)) : 0.0f;
  *offset = off;
  const int64_t groups = (nblocks + 255) / 256;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t lo = g * 256;
    const int64_t hi = std::min(nblocks, lo + 256);
    float m = 0.0f;
    for (int64_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(absmax[i] - off));
    nested_absmax[g] = m;
    for (int64_t i = lo; i < hi; ++i) {
      const float y = m > 0.0f ? (absmax[i] - off) / m : 0.0f;
      // Nearest map entry; on an exact tie the lower one.
      int best = 0;
      float best_d = std::fabs(nested_map[0] - y);
      for (int c = 1; c < 256; ++c) {
        const float d = std::fabs(nested_map[c] - y);
        if (d < best_d) {
          best = c;
          best_d = d;
        }
      }
      qabsmax[i] = static_cast<uint8_t>(best);
    }
  }
}

void matmul_nt_f32(const float* a, int64_t m, int64_t k, const float* b, int64_t n, float alpha,
                   const FloatPtr* bias, FloatOut out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) acc += static_cast<double>(a[i * k + kk]) * b[j * k + kk];
      store_one(out, i * n + j, static_cast<double>(alpha) * acc + bias_at(bias, j));
    }
  }
}

void swizzle(const uint8_t* linear, int64_t rows, int64_t cols, uint8_t* swizzled) {
  const int64_t total = fmt::swizzled_rows(rows) * fmt::swizzled_cols(cols);
  if (total > 0) std::memset(swizzled, 0, static_cast<size_t>(total));  // (NULL allowed when empty)
  if (cols == 0) return;  // no scales: never walk the (possibly huge) empty rows
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) swizzled[fmt::swizzle_offset(r, c, cols)] = linear[r * cols + c];
  }
}

void unswizzle(const uint8_t* swizzled, int64_t rows, int64_t cols, uint8_t* linear) {
  if (cols == 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) linear[r * cols + c] = swizzled[fmt::swizzle_offset(r, c, cols)];
  }
}

}  // namespace q4::ref
