// Exactness of the format codecs against the tables of docs/formats.md and brute-force
// oracles written here (nearest representable value, ties to the even code).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "formats/codec.h"
#include "test_util.h"

using namespace q4::fmt;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Fp32 patterns: a strided sweep over all 2^32 plus the given extras.
template <class F>
void sweep(uint32_t stride, F&& check) {
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += stride) check(from_bits(static_cast<uint32_t>(u)));
}

const double kE2M1Mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

// Oracle: nearest E2M1 magnitude, ties to the even code, saturating.
uint32_t e2m1_oracle(float x) {
  if (std::isnan(x)) return 0x7;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 6.0) return (std::signbit(x) ? 8u : 0u) | 7u;  // saturation
  uint32_t best = 0;
  for (uint32_t c = 1; c < 8; ++c) {
    const double dc = std::fabs(a - kE2M1Mag[c]);
    const double db = std::fabs(a - kE2M1Mag[best]);
    if (dc < db || (dc == db && (c & 1u) == 0)) best = c;
  }
  return (std::signbit(x) ? 8u : 0u) | best;
}

double e4m3_value_oracle(uint32_t code) {
  const int e = (code >> 3) & 0xf;
  const int m = code & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (code & 0x80) ? -v : v;
}

// Oracle: nearest finite E4M3 value (codes 0..0x7E), ties to the even code.
uint32_t e4m3_oracle(float x) {
  if (std::isnan(x)) return 0x7f;  // cuda_fp8.h: NaN -> 0x7F whatever its sign
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return (std::signbit(x) ? 0x80u : 0u) | 0x7e;  // saturation
  uint32_t best = 0;
  double bd = a;
  for (uint32_t c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(a - e4m3_value_oracle(c));
    if (d < bd || (d == bd && (c & 1u) == 0)) {
      best = c;
      bd = d;
    }
  }
  return (std::signbit(x) ? 0x80u : 0u) | best;
}

// The NF4 codebook of docs/formats.md as fp32 (exact: the decimals are fp32 values).
float nf4_spec(uint32_t c) {
  return static_cast<float>(t::kNf4Spec[c]);
}

}  // namespace

TEST_CASE("E2M1 decode matches the table of docs/formats.md", "[codec][e2m1]") {
  const float expected[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (uint32_t c = 0; c < 16; ++c) {
    CHECK(e2m1_decode(c) == expected[c]);
    CHECK(std::signbit(e2m1_decode(c)) == (c >= 8));
    CHECK(e2m1_decode_x2(c) == static_cast<int32_t>(2 * expected[c]));
  }
}

TEST_CASE("E2M1 encode: the documented boundaries and ties", "[codec][e2m1]") {
  struct Case {
    float x;
    uint32_t code;
  };
  const Case cases[] = {
      {0.0f, 0x0},       {-0.0f, 0x8},      {0.25f, 0x0},      {-0.25f, 0x8}, {0.2500001f, 0x1},
      {0.5f, 0x1},       {0.7499999f, 0x1}, {0.75f, 0x2},      {1.0f, 0x2},   {1.25f, 0x2},
      {1.2500001f, 0x3}, {1.5f, 0x3},       {1.7499999f, 0x3}, {1.75f, 0x4},  {2.5f, 0x4},
      {2.5000002f, 0x5}, {3.0f, 0x5},       {3.4999998f, 0x5}, {3.5f, 0x6},   {5.0f, 0x6},
      {5.0000005f, 0x7}, {6.0f, 0x7},       {1e30f, 0x7},      {-1e30f, 0xF}, {INFINITY, 0x7},
      {-INFINITY, 0xF},  {-3.5f, 0xE},      {-0.75f, 0xA},     {1e-40f, 0x0}, {-1e-40f, 0x8},
  };
  for (const Case& c : cases) {
    INFO("x = " << c.x);
    CHECK(e2m1_encode(c.x) == c.code);
  }
  CHECK(e2m1_encode(std::numeric_limits<float>::quiet_NaN()) == 0x7);
  CHECK(e2m1_encode(-std::numeric_limits<float>::quiet_NaN()) == 0x7);
}

TEST_CASE("E2M1 encode equals the nearest-even oracle on a fp32 sweep", "[codec][e2m1]") {
  size_t n = 0, bad = 0;
  sweep(4099, [&](float x) {
    ++n;
    if (e2m1_encode(x) != e2m1_oracle(x)) ++bad;
  });
  // Every representable value, every midpoint, and their fp32 neighbours.
  for (int c = 0; c < 8; ++c) {
    for (double v : {kE2M1Mag[c], c < 7 ? (kE2M1Mag[c] + kE2M1Mag[c + 1]) / 2 : 7.0}) {
      for (float s : {1.0f, -1.0f}) {
        const float f = s * static_cast<float>(v);
        for (float y : {f, std::nextafter(f, 100.0f), std::nextafter(f, -100.0f)}) {
          ++n;
          if (e2m1_encode(y) != e2m1_oracle(y)) ++bad;
        }
      }
    }
  }
  INFO(n << " patterns");
  CHECK(bad == 0);
}

TEST_CASE("E4M3 decode covers every code", "[codec][e4m3]") {
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) {
      CHECK(std::isnan(e4m3_decode(c)));
      continue;
    }
    CHECK(static_cast<double>(e4m3_decode(c)) == e4m3_value_oracle(c));
  }
  CHECK(e4m3_decode(0x7e) == 448.0f);
  CHECK(e4m3_decode(0x01) == std::ldexp(1.0f, -9));
  CHECK(e4m3_decode(0x08) == std::ldexp(1.0f, -6));
}

TEST_CASE("E4M3 encode equals the nearest-even saturating oracle", "[codec][e4m3]") {
  size_t n = 0, bad = 0;
  auto check = [&](float x) {
    ++n;
    if (e4m3_encode(x) != e4m3_oracle(x)) {
      if (bad++ < 5) {
        UNSCOPED_INFO("x = " << x << " got " << e4m3_encode(x) << " want " << e4m3_oracle(x));
      }
    }
  };
  sweep(65537, check);
  for (uint32_t c = 0; c < 0x7e; ++c) {
    const double lo = e4m3_value_oracle(c), hi = e4m3_value_oracle(c + 1);
    for (double v : {lo, (lo + hi) / 2}) {
      for (float s : {1.0f, -1.0f}) {
        const float f = s * static_cast<float>(v);
        for (float y : {f, std::nextafter(f, 1e9f), std::nextafter(f, -1e9f)}) check(y);
      }
    }
  }
  for (float x : {448.0f, 449.0f, 464.0f, 465.0f, 480.0f, 1e9f, -1e9f, INFINITY, -INFINITY,
                  std::ldexp(1.0f, -10), std::nextafter(std::ldexp(1.0f, -10), 1.0f), 1e-45f}) {
    check(x);
  }
  INFO(n << " patterns");
  CHECK(bad == 0);
  CHECK(e4m3_encode(INFINITY) == 0x7e);
  CHECK(e4m3_encode(-INFINITY) == 0xfe);
  CHECK(e4m3_encode(std::ldexp(1.0f, -10)) == 0x00);  // tie to even (zero)
  CHECK(e4m3_encode(std::ldexp(3.0f, -10)) == 0x02);  // 1.5 units -> 2
}

TEST_CASE("NF4 encode: codebook values, midpoints go to the lower code", "[codec][nf4]") {
  for (uint32_t c = 0; c < 16; ++c) {
    CHECK(nf4_decode(c) == nf4_spec(c));
    CHECK(nf4_encode(nf4_spec(c)) == c);
  }
  for (uint32_t c = 0; c + 1 < 16; ++c) {
    const float mid = t::kBnbNf4Thresholds[c];
    // Each threshold lies within one fp32 ulp of the exact midpoint.
    const double exact = (t::kNf4Spec[c] + t::kNf4Spec[c + 1]) / 2.0;
    CHECK(std::fabs(mid - exact) <= std::fabs(std::nextafter(mid, 2.0f) - mid));
    CHECK(nf4_encode(mid) == c);
    CHECK(nf4_encode(std::nextafter(mid, 2.0f)) == c + 1);
  }
  // Against a brute-force nearest search on a dense grid in [-1, 1].
  size_t bad = 0;
  for (int i = -100000; i <= 100000; ++i) {
    const float y = static_cast<float>(i) / 100000.0f;
    uint32_t best = 0;
    for (uint32_t c = 1; c < 16; ++c) {
      if (std::fabs(static_cast<double>(y) - nf4_spec(c)) <
          std::fabs(static_cast<double>(y) - nf4_spec(best)))
        best = c;
    }
    if (nf4_encode(y) != best) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("fp16 and bf16 conversions", "[codec][half]") {
  // Decode every fp16 pattern against ldexp.
  for (uint32_t h = 0; h < 65536; ++h) {
    const int e = (h >> 10) & 0x1f;
    const int m = h & 0x3ff;
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    if (e == 31) {
      CHECK((m ? std::isnan(got) : std::isinf(got)));
      continue;
    }
    const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    CHECK(static_cast<double>(got) == ((h & 0x8000) ? -v : v));
    // Every finite fp16 round-trips.
    CHECK(f32_to_f16(got) == h);
  }
#if defined(__FLT16_MAX__) && defined(__x86_64__) && !defined(__clang__)
  size_t bad = 0;
  sweep(7919, [&](float x) {
    if (std::isnan(x)) return;
    const _Float16 ref = static_cast<_Float16>(x);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    if (f32_to_f16(x) != rb) ++bad;
  });
  CHECK(bad == 0);
#endif
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(65519.0f) == 0x7bff);
  CHECK(f32_to_f16(65520.0f) == 0x7c00);
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(f32_to_bf16(from_bits(0x3f808000u)) == 0x3f80);  // tie to even
  CHECK(f32_to_bf16(from_bits(0x3f818000u)) == 0x3f82);  // tie to even (up)
  CHECK(f32_to_bf16(from_bits(0x3f808001u)) == 0x3f81);
  CHECK(bf16_to_f32(0x3f81) == from_bits(0x3f810000u));
}

TEST_CASE("swizzle offsets follow the cuBLASLt VEC16_UE4M3 formula", "[codec][swizzle]") {
  // Spot values computed by hand from the swizzle formula of docs/formats.md.
  CHECK(swizzle_offset(0, 0, 4) == 0);
  CHECK(swizzle_offset(0, 1, 4) == 1);
  CHECK(swizzle_offset(0, 3, 4) == 3);
  CHECK(swizzle_offset(1, 0, 4) == 16);
  CHECK(swizzle_offset(31, 0, 4) == 496);
  CHECK(swizzle_offset(32, 0, 4) == 4);
  CHECK(swizzle_offset(64, 2, 4) == 10);
  CHECK(swizzle_offset(127, 3, 4) == 511);
  CHECK(swizzle_offset(0, 4, 8) == 512);
  CHECK(swizzle_offset(128, 0, 8) == 1024);
  CHECK(swizzle_offset(130, 5, 8) == 1024 + 512 + 2 * 16 + 1);
  CHECK(swizzle_offset(5, 2, 3) == 5 * 16 + 2);  // cols padded to 4
  // A bijection onto [0, R' * C') for several shapes.
  for (int64_t rows : {1, 31, 128, 130, 300}) {
    for (int64_t cols : {1, 3, 4, 9}) {
      const int64_t total = swizzled_rows(rows) * swizzled_cols(cols);
      std::set<int64_t> seen;
      for (int64_t r = 0; r < swizzled_rows(rows); ++r) {
        for (int64_t c = 0; c < swizzled_cols(cols); ++c) {
          const int64_t o = swizzle_offset(r, c, cols);
          CHECK((o >= 0 && o < total));
          seen.insert(o);
        }
      }
      CHECK(static_cast<int64_t>(seen.size()) == total);
    }
  }
}

TEST_CASE("NVFP4 quantization steps follow the reference algorithm", "[codec][nvfp4]") {
  CHECK(nvfp4_global_scale_from_amax(0.0f) == 1.0f);
  CHECK(nvfp4_global_scale_from_amax(2688.0f) == 1.0f);
  CHECK(nvfp4_global_scale_from_amax(1.0f) == 1.0f / 2688.0f);
  // Block amax 6*448*g saturates at 448; a tiny positive amax gets 2^-9.
  CHECK(nvfp4_block_scale_code(2688.0f, 1.0f) == 0x7e);
  CHECK(nvfp4_block_scale_code(1e-30f, 1.0f) == 0x01);
  CHECK(nvfp4_block_scale_code(0.0f, 1.0f) == 0x00);
  CHECK(nvfp4_encode_element(1.0f, 0.0f) == 0u);
  // Decode is (e2m1 * s) * g with one rounding.
  CHECK(nvfp4_decode_element(0x7, 0x7e, 0.5f) == 6.0f * 448.0f * 0.5f);
}
