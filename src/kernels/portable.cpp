// Portable production kernels (see portable.h). Straightforward loops that
// the compiler may auto-vectorize for the baseline ISA.
#include "kernels/portable.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/isa_common.h"
#include "kernels/nf4_quantize_impl.h"

namespace q4::kern {

// ---------------------------------------------------------------------------
// fp32 / fp16 / bf16 rows
// ---------------------------------------------------------------------------
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
  for (int64_t i = 0; i < n; ++i) store_elem(base, t, first + i, src[i]);
}

// ---------------------------------------------------------------------------
// NF4
// ---------------------------------------------------------------------------
bool nf4_quantize(FloatPtr x, int64_t n, int64_t blocksize, uint8_t* q, float* absmax) {
  return nf4_quantize_blocks(x, n, blocksize, 0, (n + blocksize - 1) / blocksize, q, absmax);
}

bool nf4_quantize_blocks(FloatPtr x, int64_t n, int64_t blocksize, int64_t b0, int64_t b1, uint8_t* q,
                         float* absmax) {
  return nf4_quantize_blocks_impl(x, n, blocksize, b0, b1, q, absmax, load_row);
}

namespace {

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

}  // namespace

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

// ---------------------------------------------------------------------------
// Scale layouts
// ---------------------------------------------------------------------------
// Row r's scales lie in groups of 4 bytes, group g at
// tile(r / 128, g) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4
// (fmt::swizzle_offset): moved a group (4 bytes) at a time, and in whole
// 128-row bands four tiles at a time as 4 x 4 blocks of groups (line i of
// four tiles = groups 4t..4t+3 of rows i, i+32, i+64, i+96: 16-byte loads
// and stores). The per-byte offset computation cost 1 ms for a 4096 x 4096
// weight's 1 MiB of scales, in every stateless product with swizzled scales.
namespace {
// Four dwords in a vector (GCC / Clang vector extensions: SSE2 or NEON
// shuffles, no ISA-specific code).
using Dwords4 = uint32_t __attribute__((vector_size(16)));

// Lanes A, B, C, D of the eight of a and b (0-3: a, 4-7: b).
template <uint32_t A, uint32_t B, uint32_t C, uint32_t D>
inline Dwords4 shuffle_dwords(Dwords4 a, Dwords4 b) {
#if defined(__clang__)
  return __builtin_shufflevector(a, b, A, B, C, D);
#else
  return __builtin_shuffle(a, b, Dwords4{A, B, C, D});  // (GCC's, any version)
#endif
}

// A 4 x 4 matrix of dwords, one row per vector, transposed in place.
inline void transpose_dwords4(Dwords4 (&v)[4]) {
  const Dwords4 t0 = shuffle_dwords<0, 4, 1, 5>(v[0], v[1]);
  const Dwords4 t1 = shuffle_dwords<2, 6, 3, 7>(v[0], v[1]);
  const Dwords4 t2 = shuffle_dwords<0, 4, 1, 5>(v[2], v[3]);
  const Dwords4 t3 = shuffle_dwords<2, 6, 3, 7>(v[2], v[3]);
  v[0] = shuffle_dwords<0, 1, 4, 5>(t0, t2);
  v[1] = shuffle_dwords<2, 3, 6, 7>(t0, t2);
  v[2] = shuffle_dwords<0, 1, 4, 5>(t1, t3);
  v[3] = shuffle_dwords<2, 3, 6, 7>(t1, t3);
}

template <bool ToSwizzled, bool kRowsOuter = false>
void copy_swizzle_groups(const uint8_t* from, int64_t rows, int64_t cols, uint8_t* to) {
  const int64_t tiles_per_band = fmt::swizzled_cols(cols) / 4, full = cols / 4, rest = cols % 4;
  const int64_t quads = full / 4;
  for (int64_t r0 = 0; r0 < rows; r0 += 128) {
    const int64_t band_rows = std::min<int64_t>(128, rows - r0);
    const int64_t band = (r0 / 128) * tiles_per_band * 512;
    int64_t g0 = 0;
    if (band_rows == 128) {
      // Line i of tiles 4t..4t+3 <-> 16 bytes of rows i, i + 32, i + 64,
      // i + 96: the 4 x 4 dwords transposed by vector shuffles. Dword moves
      // one at a time took 114 us to unswizzle a 4096 x 4096 weight's 1 MiB
      // of scales and 407 us to swizzle them (zero fill included), now 62
      // and 52 us (Zen 4, one thread); a stateless GEMV with swizzled
      // scales, 2 threads, two builds alternating: fast 1.07-1.13x, exact
      // 1.03-1.06x. (Rows outer, so that an unswizzle writes its rows in
      // order, ran 40 us into a destination in cache, but 0.82-0.90x in
      // those GEMVs, whose fresh destination is not: fewer lines written
      // at a time, fewer misses in flight.) kRowsOuter: that order, four
      // lines (one cache line of each tile) at a time, for a destination
      // in cache (unswizzle_scales_cached).
      auto quad_line = [&](int64_t t, int64_t i) {
        Dwords4 v[4];
        const int64_t tile_line = band + 4 * t * 512 + i * 16, row = (r0 + i) * cols + 16 * t;
        for (int64_t j = 0; j < 4; ++j) {
          std::memcpy(&v[j], ToSwizzled ? from + row + 32 * j * cols : from + tile_line + 512 * j, 16);
        }
        transpose_dwords4(v);
        for (int64_t j = 0; j < 4; ++j) {
          std::memcpy(ToSwizzled ? to + tile_line + 512 * j : to + row + 32 * j * cols, &v[j], 16);
        }
      };
      if constexpr (kRowsOuter) {
        // The next band's tiles on their way (the scales of a stateless
        // GEMV come from DRAM: see gemv_rows).
        if (r0 + 256 <= rows) {
          const uint8_t* nb = from + band + tiles_per_band * 512;
          for (int64_t o = 0; o < tiles_per_band * 512; o += 64) __builtin_prefetch(nb + o);
        }
        for (int64_t i0 = 0; i0 < 32; i0 += 4) {
          for (int64_t t = 0; t < quads; ++t) {
            for (int64_t i = i0; i < i0 + 4; ++i) quad_line(t, i);
          }
        }
      } else {
        for (int64_t t = 0; t < quads; ++t) {
          for (int64_t i = 0; i < 32; ++i) quad_line(t, i);
        }
      }
      g0 = 4 * quads;
    }
    for (int64_t r = r0; r < r0 + band_rows; ++r) {
      const int64_t tile0 = band + (r % 32) * 16 + ((r % 128) / 32) * 4;
      for (int64_t g = g0; g <= full; ++g) {
        const int64_t n = g < full ? 4 : rest;
        if (n == 0) break;
        if constexpr (ToSwizzled) {
          std::memcpy(to + tile0 + g * 512, from + r * cols + 4 * g, static_cast<size_t>(n));
        } else {
          std::memcpy(to + r * cols + 4 * g, from + tile0 + g * 512, static_cast<size_t>(n));
        }
      }
    }
  }
}
}  // namespace

void swizzle_scales(const uint8_t* lin, int64_t rows, int64_t cols, uint8_t* sw) {
  const int64_t total = fmt::swizzled_rows(rows) * fmt::swizzled_cols(cols);
  if (total > 0) std::memset(sw, 0, static_cast<size_t>(total));  // (NULL allowed when empty)
  if (cols == 0) return;  // no scales: never walk the (possibly huge) empty rows
  copy_swizzle_groups<true>(lin, rows, cols, sw);
}

void unswizzle_scales(const uint8_t* sw, int64_t rows, int64_t cols, uint8_t* lin) {
  if (cols == 0) return;
  copy_swizzle_groups<false>(sw, rows, cols, lin);
}

void unswizzle_scales_cached(const uint8_t* sw, int64_t rows, int64_t cols, uint8_t* lin) {
  if (cols == 0) return;
  copy_swizzle_groups<false, true>(sw, rows, cols, lin);
}

// ---------------------------------------------------------------------------
// Table entries (the builder's fill-ins, the scalar table)
// ---------------------------------------------------------------------------
namespace portable {

void nvfp4_gemv(ActRows xr, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float* y,
                int64_t ldy) {
  const int64_t k = w.k;
  std::vector<float> conv;
  const float* x = f32_rows(xr, &ldx, m, k, conv);
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
  report_scale_signs(w, n0, n1);
}

void nf4_gemv(ActRows xr, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, float* y,
              int64_t ldy) {
  const int64_t k = w.k;
  std::vector<float> conv;
  const float* x = f32_rows(xr, &ldx, m, k, conv);
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

void nf4_dequantize(const uint8_t* q, const float* lut, const float* absmax, int64_t blocksize, int64_t n,
                    float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t code = (i & 1) ? (q[i >> 1] & 0xfu) : (q[i >> 1] >> 4u);  // element 2j high nibble
    out[i] = lut[code] * absmax[i / blocksize];
  }
}

void mxfp4_dequantize(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t k, float* out) {
  const int64_t nblocks = rows * (k / fmt::kMxBlock);
  for (int64_t b = 0; b < nblocks; ++b) {
    const float scale = fmt::e8m0_decode(s[b]);
    const uint8_t* qb = q + b * (fmt::kMxBlock / 2);
    float* d = out + b * fmt::kMxBlock;
    for (int32_t j = 0; j < fmt::kMxBlock; j += 2) {
      d[j] = fmt::e2m1_decode(qb[j / 2] & 0xfu) * scale;
      d[j + 1] = fmt::e2m1_decode(qb[j / 2] >> 4) * scale;
    }
  }
}

bool mxfp4_quantize(const float* x, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  const int64_t cols = k / fmt::kMxBlock;
  bool finite = true;
  for (int64_t b = 0; b < rows * cols; ++b) {
    const float* xb = x + b * fmt::kMxBlock;
    float amax = 0.0f;
    for (int32_t j = 0; j < fmt::kMxBlock; ++j) {
      finite = finite && std::isfinite(xb[j]);
      amax = std::max(amax, std::fabs(xb[j]));
    }
    const uint32_t byte = fmt::mxfp4_scale_byte(amax);
    const float inv = fmt::mxfp4_inverse_scale(byte);
    s[b] = static_cast<uint8_t>(byte);
    uint8_t* qb = q + b * (fmt::kMxBlock / 2);
    for (int32_t j = 0; j < fmt::kMxBlock; j += 2) {
      const uint32_t lo = fmt::mxfp4_encode_element(xb[j], inv);
      const uint32_t hi = fmt::mxfp4_encode_element(xb[j + 1], inv);
      qb[j / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
  return finite;
}

float amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

uint32_t absmax_bits(const float* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  return m;
}

}  // namespace portable

}  // namespace q4::kern
