// Differential tests of every stateless operation against small oracles
// written here from docs/formats.md (independent of the library's codec code).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "test_util.h"

using t::Tensor;

namespace {

const double kE2M1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

double e4m3_value(uint32_t c) {
  const int e = (c >> 3) & 0xf, m = c & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}

uint32_t e4m3_nearest(float x) {  // non-negative, saturating, ties to even
  if (x >= 448.0f) return 0x7e;
  uint32_t best = 0;
  double bd = std::fabs(static_cast<double>(x));
  for (uint32_t c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(static_cast<double>(x) - e4m3_value(c));
    if (d < bd || (d == bd && (c & 1u) == 0)) {
      best = c;
      bd = d;
    }
  }
  return best;
}

uint32_t e2m1_nearest(float x) {
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 6.0) return (std::signbit(x) ? 8u : 0u) | 7u;  // saturation
  uint32_t best = 0;
  for (uint32_t c = 1; c < 8; ++c) {
    const double dc = std::fabs(a - kE2M1[c]), db = std::fabs(a - kE2M1[best]);
    if (dc < db || (dc == db && (c & 1u) == 0)) best = c;
  }
  return (std::signbit(x) ? 8u : 0u) | best;
}

// The reference quantization of docs/formats.md written out with the oracles above.
struct Nvfp4Oracle {
  std::vector<uint8_t> q, s;  // s linear [rows, k/16]
  float g = 0;
};

Nvfp4Oracle nvfp4_oracle(const Tensor& x, int64_t rows, int64_t k, float given_g) {
  Nvfp4Oracle o;
  float amax = 0;
  for (int64_t i = 0; i < rows * k; ++i) amax = std::max(amax, std::fabs(x.get(i)));
  o.g = given_g > 0 ? given_g : (amax > 0 ? amax / (6.0f * 448.0f) : 1.0f);
  o.q.assign(static_cast<size_t>(rows * k / 2), 0);
  o.s.assign(static_cast<size_t>(rows * k / 16), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k / 16; ++b) {
      float bmax = 0;
      for (int j = 0; j < 16; ++j) bmax = std::max(bmax, std::fabs(x.get(r * k + b * 16 + j)));
      uint32_t s = e4m3_nearest(bmax / (6.0f * o.g));
      if (bmax > 0 && s == 0) s = 1;
      o.s[static_cast<size_t>(r * (k / 16) + b)] = static_cast<uint8_t>(s);
      const float d = static_cast<float>(e4m3_value(s)) * o.g;
      for (int j = 0; j < 16; ++j) {
        const int64_t i = r * k + b * 16 + j;
        const uint32_t code = d == 0 ? 0u : e2m1_nearest(x.get(i) / d);
        o.q[static_cast<size_t>(i / 2)] |= static_cast<uint8_t>((i & 1) ? code << 4 : code);
      }
    }
  }
  return o;
}

double nvfp4_value(const uint8_t* q, const uint8_t* s_linear, int64_t k, int64_t r, int64_t c, double g) {
  const int64_t i = r * k + c;
  const uint32_t code = (i & 1) ? (q[i / 2] >> 4) : (q[i / 2] & 0xf);
  return kE2M1[code] * e4m3_value(s_linear[r * (k / 16) + c / 16]) * g;
}

DLDataType dtype_for(int which) {
  return which == 0 ? t::f32() : (which == 1 ? t::f16() : t::bf16());
}
const char* dtype_label(int which) {
  return which == 0 ? "f32" : (which == 1 ? "f16" : "bf16");
}
double out_tol(int which) {
  return which == 0 ? 1e-6 : (which == 1 ? 1e-3 : 8e-3);
}

}  // namespace

TEST_CASE("NVFP4_quantize is bit-exact with the reference oracle", "[ops][nvfp4]") {
  for (int which = 0; which < 3; ++which) {
    for (int64_t rows : {1, 3, 130}) {
      for (int64_t k : {16, 48, 256}) {
        for (float given : {0.0f, 0.01f}) {
          INFO(dtype_label(which) << " rows=" << rows << " k=" << k << " g=" << given);
          Tensor x = t::random_float({rows, k}, dtype_for(which), static_cast<uint32_t>(rows * k), 2.0f);
          // Plant exact ties and zeros.
          x.set(0, 0.0f);
          if (rows * k > 40) {
            for (int j = 16; j < 32; ++j) x.set(j, 0.0f);  // an all-zero block
          }
          const auto x_before = x.snapshot();
          Tensor q({rows, k / 2}, t::u8());
          Tensor s({rows, k / 16}, t::e4m3());
          float used = -1;
          REQUIRE(NVFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, given, &used, nullptr) == Q4_OK);
          const Nvfp4Oracle o = nvfp4_oracle(x, rows, k, given);
          CHECK(used == o.g);
          CHECK(std::equal(o.q.begin(), o.q.end(), q.data()));
          CHECK(std::equal(o.s.begin(), o.s.end(), s.data()));
          CHECK(x.snapshot() == x_before);
          CHECK(q.guard_intact());
          CHECK(s.guard_intact());

          // Swizzled output holds the same scales at the swizzled offsets, zero padding.
          Tensor sw({t::swizzled_bytes(rows, k)}, t::u8());
          Tensor q2({rows * k / 2}, t::u8());
          REQUIRE(NVFP4_quantize(x.t(), q2.t(), sw.t(), Q4_SCALE_SWIZZLED, given, nullptr, nullptr) == Q4_OK);
          CHECK(std::equal(o.q.begin(), o.q.end(), q2.data()));
          std::vector<uint8_t> expect(static_cast<size_t>(sw.bytes), 0);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < k / 16; ++c) {
              expect[static_cast<size_t>(q4::fmt::swizzle_offset(r, c, k / 16))] =
                  o.s[static_cast<size_t>(r * (k / 16) + c)];
            }
          }
          CHECK(std::equal(expect.begin(), expect.end(), sw.data()));
        }
      }
    }
  }
}

TEST_CASE("NVFP4_quantize: hand-made block", "[ops][nvfp4]") {
  // One block with amax 6 and g = 1/448: s = e4m3(6 / (6/448)) = 448 -> 0x7e,
  // d = 448 * (1/448) = 1 (in fp32), codes are e2m1(x).
  Tensor x({1, 16}, t::f32());
  const float v[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.25f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i) x.set(i, v[i]);
  Tensor q({8}, t::u8());
  Tensor s({1}, t::u8());
  REQUIRE(NVFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 1.0f / 448.0f, nullptr, nullptr) == Q4_OK);
  CHECK(s.data()[0] == 0x7e);
  const uint8_t expect[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE};
  CHECK(std::equal(expect, expect + 8, q.data()));
}

TEST_CASE("NVFP4_dequantize equals e2m1 * e4m3 * g", "[ops][nvfp4]") {
  for (int which = 0; which < 3; ++which) {
    for (int layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
      const int64_t rows = 37, k = 96;
      Tensor q({rows, k / 2}, t::u8());
      Tensor s({rows, k / 16}, t::u8());
      for (size_t i = 0; i < q.bytes; ++i) q.data()[i] = static_cast<uint8_t>(i * 37 + 11);
      for (size_t i = 0; i < s.bytes; ++i) s.data()[i] = static_cast<uint8_t>((i * 13) % 0x7e);
      Tensor s_arg = s;
      if (layout == Q4_SCALE_SWIZZLED) {
        s_arg = Tensor({t::swizzled_bytes(rows, k)}, t::u8());
        REQUIRE(NVFP4_swizzle_scales(s.t(), s_arg.t()) == Q4_OK);
      }
      Tensor out({rows, k}, dtype_for(which));
      const float g = 0.37f;
      REQUIRE(NVFP4_dequantize(q.t(), s_arg.t(), layout, g, out.t(), nullptr) == Q4_OK);
      size_t bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          // (e2m1 * s) is exact; times g rounds once in fp32.
          const float ref = static_cast<float>(nvfp4_value(q.data(), s.data(), k, r, c, 1.0)) * g;
          Tensor one({1}, dtype_for(which));
          one.set(0, ref);
          if (out.get(r * k + c) != one.get(0)) ++bad;
        }
      }
      INFO(dtype_label(which) << " layout " << layout);
      CHECK(bad == 0);
      CHECK(out.guard_intact());
    }
  }
}

TEST_CASE("16-bit dequantize outputs equal the fp32 output rounded once, every ISA, many tasks",
          "[ops][nvfp4][mxfp4]") {
  // 67 x 2080: two whole tasks of 16-bit output (64 Ki elements), a short
  // last one, pieces of 2048 elements and a short last piece in each; 3
  // threads. Scales include E4M3 NaN (0x7f) and E8M0 NaN (0xff) and values
  // that round to fp16 subnormals, zero and Inf.
  const int64_t rows = 67, k = 2080, n = rows * k;
  Tensor q({rows, k / 2}, t::u8()), s({rows, k / 16}, t::u8()), mx({rows, k / 32}, t::u8());
  std::mt19937 gen(2080);
  for (size_t i = 0; i < q.bytes; ++i) q.data()[i] = static_cast<uint8_t>(gen());
  for (size_t i = 0; i < s.bytes; ++i) s.data()[i] = static_cast<uint8_t>(i % 997 == 5 ? 0x7f : gen() % 0x7f);
  for (size_t i = 0; i < mx.bytes; ++i)
    mx.data()[i] = static_cast<uint8_t>(i % 501 == 7 ? 0xff : 100 + gen() % 50);
  const float g = 0.37f;
  for (int fmt_i = 0; fmt_i < 2; ++fmt_i) {  // NVFP4, MXFP4
    const auto dequant = [&](Tensor& out, const Q4_op_options* o) {
      return fmt_i == 0 ? NVFP4_dequantize(q.t(), s.t(), Q4_SCALE_LINEAR, g, out.t(), o)
                        : MXFP4_dequantize(q.t(), mx.t(), Q4_SCALE_LINEAR, out.t(), o);
    };
    Tensor f32({rows, k}, t::f32());
    {
      t::IsaCap scalar(Q4_ISA_SCALAR);
      REQUIRE(dequant(f32, nullptr) == Q4_OK);
    }
    for (int which = 1; which < 3; ++which) {
      Tensor want({rows, k}, dtype_for(which));
      for (int64_t i = 0; i < n; ++i) want.set(i, f32.get(i));
      for (int32_t isa : t::runnable_isas()) {
        t::IsaCap cap(isa);
        INFO((fmt_i == 0 ? "NVFP4" : "MXFP4") << " to " << dtype_label(which) << " isa " << Q4_isa_name(isa));
        Q4_op_options o{};
        Q4_op_options_init(&o);
        o.num_threads = 3;
        Tensor got({rows, k}, dtype_for(which));
        REQUIRE(dequant(got, &o) == Q4_OK);
        CHECK(std::memcmp(got.data(), want.data(), static_cast<size_t>(n * 2)) == 0);
        CHECK(got.guard_intact());
      }
    }
  }
}

TEST_CASE("NVFP4 quantize -> dequantize error is bounded by half a grid step", "[ops][nvfp4]") {
  const int64_t rows = 64, k = 512;
  Tensor x = t::random_float({rows, k}, t::f32(), 7, 3.0f);
  Tensor q({rows, k / 2}, t::u8());
  Tensor s({rows, k / 16}, t::u8());
  float g = 0;
  REQUIRE(NVFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr) == Q4_OK);
  Tensor y({rows, k}, t::f32());
  REQUIRE(NVFP4_dequantize(q.t(), s.t(), Q4_SCALE_LINEAR, g, y.t(), nullptr) == Q4_OK);
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k / 16; ++b) {
      const double d = e4m3_value(s.data()[r * (k / 16) + b]) * g;
      for (int j = 0; j < 16; ++j) {
        const int64_t i = r * k + b * 16 + j;
        const double e = std::fabs(static_cast<double>(x.get(i)) - y.get(i));
        const double a = std::fabs(static_cast<double>(x.get(i))) / d;
        // Half of the local E2M1 spacing (0.25 below 2, 0.5 below 4, 1 above),
        // or the clipped distance above 6.
        const double half = a <= 2 ? 0.25 : (a <= 4 ? 0.5 : std::max(1.0, a - 6.0));
        CHECK(e <= half * d * (1 + 1e-6) + 1e-30);
        err2 += e * e;
        ref2 += static_cast<double>(x.get(i)) * x.get(i);
      }
    }
  }
  CHECK(std::sqrt(err2 / ref2) < 0.12);  // typical NVFP4 relative RMS error ~0.09
}

TEST_CASE("NVFP4_scaled_mm equals the fp64 product of the dequantized operands", "[ops][nvfp4]") {
  for (int which = 0; which < 3; ++which) {
    for (int layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
      for (int path : {Q4_PATH_AUTO, Q4_PATH_DEQUANT_MATMUL_ONLY}) {
        const int64_t m = 5, n = 7, k = 64;
        Tensor a = t::random_float({m, k}, t::f32(), 1);
        Tensor b = t::random_float({n, k}, t::f32(), 2);
        Tensor aq({m, k / 2}, t::u8()), bq({n, k / 2}, t::u8());
        Tensor as_lin({m, k / 16}, t::u8()), bs_lin({n, k / 16}, t::u8());
        REQUIRE(NVFP4_quantize(a.t(), aq.t(), as_lin.t(), Q4_SCALE_LINEAR, 0.01f, nullptr, nullptr) == Q4_OK);
        REQUIRE(NVFP4_quantize(b.t(), bq.t(), bs_lin.t(), Q4_SCALE_LINEAR, 0.02f, nullptr, nullptr) == Q4_OK);
        Tensor as = as_lin, bs = bs_lin;
        if (layout == Q4_SCALE_SWIZZLED) {
          as = Tensor({t::swizzled_bytes(m, k)}, t::u8());
          bs = Tensor({t::swizzled_bytes(n, k)}, t::u8());
          REQUIRE(NVFP4_swizzle_scales(as_lin.t(), as.t()) == Q4_OK);
          REQUIRE(NVFP4_swizzle_scales(bs_lin.t(), bs.t()) == Q4_OK);
        }
        Tensor bias({n}, t::f32());
        for (int64_t j = 0; j < n; ++j) bias.set(j, 0.25f * static_cast<float>(j));
        Tensor out({m, n}, dtype_for(which));
        Q4_op_options o{};
        Q4_op_options_init(&o);
        o.compute_path = path;
        const float alpha = 0.01f * 0.02f;
        REQUIRE(NVFP4_scaled_mm(aq.t(), as.t(), bq.t(), bs.t(), layout, alpha, bias.t(), out.t(), &o) ==
                Q4_OK);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0, mag = 0;
            for (int64_t kk = 0; kk < k; ++kk) {
              const double p = nvfp4_value(aq.data(), as_lin.data(), k, i, kk, 1) *
                               nvfp4_value(bq.data(), bs_lin.data(), k, j, kk, 1);
              acc += p;
              mag += std::fabs(p);
            }
            const double ref = alpha * acc + 0.25 * static_cast<double>(j);
            INFO(dtype_label(which) << " layout " << layout << " path " << path << " (" << i << "," << j
                                    << ")");
            CHECK(std::fabs(out.get(i * n + j) - ref) <=
                  out_tol(which) * (alpha * mag + std::fabs(ref)) + 1e-12);
          }
        }
      }
    }
  }
}

TEST_CASE("NVFP4_linear equals x . dequant(W)^T in fp64, any batch dims", "[ops][nvfp4]") {
  for (int xw = 0; xw < 3; ++xw) {
    for (int ow = 0; ow < 3; ++ow) {
      for (int path : {Q4_PATH_AUTO, Q4_PATH_DEQUANT_MATMUL_ONLY}) {
        const int64_t n = 9, k = 48;
        Tensor w = t::random_float({n, k}, t::f32(), 3);
        Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
        float g = 0;
        REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr) == Q4_OK);
        Tensor x = t::random_float({2, 3, k}, dtype_for(xw), 4);
        Tensor out({2, 3, n}, dtype_for(ow));
        Q4_op_options o{};
        Q4_op_options_init(&o);
        o.compute_path = path;
        REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), Q4_SCALE_LINEAR, g, nullptr, out.t(), &o) == Q4_OK);
        for (int64_t i = 0; i < 6; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0, mag = 0;
            for (int64_t kk = 0; kk < k; ++kk) {
              const double wv = static_cast<float>(nvfp4_value(wq.data(), ws.data(), k, j, kk, 1)) * g;
              acc += x.get(i * k + kk) * wv;
              mag += std::fabs(x.get(i * k + kk) * wv);
            }
            INFO(dtype_label(xw) << "->" << dtype_label(ow) << " path " << path);
            CHECK(std::fabs(out.get(i * n + j) - acc) <= out_tol(ow) * (mag + 1e-30));
          }
        }
      }
    }
  }
}

namespace {

// The NF4 codebook of docs/formats.md as fp32 (exact: the decimals are fp32 values).
float nf4_spec(uint32_t c) {
  return static_cast<float>(t::kNf4Spec[c]);
}

// The double-quantization read-back of docs/formats.md §5.5: two fp32
// roundings, the product then the sum, whatever the compiler would contract
// (the volatile keeps them two even without -ffp-contract=off).
float nested_absmax_spec(float map_value, float nested_absmax, float offset) {
  const volatile float product = map_value * nested_absmax;
  return product + offset;
}

uint32_t nf4_nearest_lower(float y) {
  uint32_t code = 0;
  for (float th : t::kBnbNf4Thresholds) code += y > th ? 1u : 0u;
  return code;
}

NF4_state nf4_state(Tensor& absmax, int32_t blocksize) {
  NF4_state st{};
  st.struct_size = sizeof(NF4_state);
  st.blocksize = blocksize;
  st.absmax = absmax.t();
  return st;
}

}  // namespace

TEST_CASE("NF4_quantize matches the bitsandbytes algorithm", "[ops][nf4]") {
  for (int which = 0; which < 3; ++which) {
    for (int32_t bs : {32, 64, 256}) {
      for (int64_t n : {1, 31, 64, 1001}) {
        INFO(dtype_label(which) << " bs=" << bs << " n=" << n);
        Tensor x = t::random_float({n}, dtype_for(which), static_cast<uint32_t>(n + bs));
        if (n > 64) {
          for (int64_t i = 0; i < 32; ++i) x.set(i, 0.0f);  // an all-zero block (bs=32)
        }
        Tensor q({(n + 1) / 2, 1}, t::u8());
        Tensor am({(n + bs - 1) / bs}, t::f32());
        REQUIRE(NF4_quantize(x.t(), q.t(), am.t(), bs, nullptr) == Q4_OK);
        for (int64_t b = 0; b * bs < n; ++b) {
          float m = 0;
          for (int64_t i = b * bs; i < std::min(n, (b + 1) * bs); ++i) m = std::max(m, std::fabs(x.get(i)));
          CHECK(am.f()[b] == m);
        }
        size_t bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          const float m = am.f()[i / bs];
          const uint32_t want =
              m == 0 ? 7u : nf4_nearest_lower(std::clamp(x.get(i) * (1.0f / m), -1.0f, 1.0f));
          const uint8_t byte = q.data()[i / 2];
          const uint32_t got = (i & 1) ? (byte & 0xf) : (byte >> 4);
          if (got != want) ++bad;
        }
        CHECK(bad == 0);
        if (n % 2 == 1) CHECK((q.data()[n / 2] & 0xf) == 7);  // padding nibble: 0.0, as bitsandbytes
      }
    }
  }
}

TEST_CASE("NF4_dequantize: nibble order and absmax indexing on hand-made bytes", "[ops][nf4]") {
  // 64 elements, blocksize 32: byte j holds element 2j (high) and 2j+1 (low).
  Tensor q({32}, t::u8());
  for (int j = 0; j < 32; ++j) q.data()[j] = static_cast<uint8_t>(((j % 16) << 4) | (15 - j % 16));
  Tensor am({2}, t::f32());
  am.f()[0] = 2.0f;
  am.f()[1] = 0.5f;
  NF4_state st = nf4_state(am, 32);
  Tensor out({64}, t::f32());
  REQUIRE(NF4_dequantize(q.t(), &st, out.t(), nullptr) == Q4_OK);
  for (int i = 0; i < 64; ++i) {
    const int j = i / 2;
    const int code = (i % 2 == 0) ? j % 16 : 15 - j % 16;
    CHECK(out.f()[i] == nf4_spec(code) * (i < 32 ? 2.0f : 0.5f));
  }

  // A custom quant_map replaces the codebook.
  Tensor qm({16}, t::f32());
  for (int c = 0; c < 16; ++c) qm.f()[c] = static_cast<float>(c) - 8.0f;
  st.quant_map = qm.t();
  REQUIRE(NF4_dequantize(q.t(), &st, out.t(), nullptr) == Q4_OK);
  CHECK(out.f()[0] == (0 - 8.0f) * 2.0f);
  CHECK(out.f()[1] == (15 - 8.0f) * 2.0f);
  CHECK(out.f()[33] == (15 - 8.0f) * 0.5f);  // j = 16: low nibble 15, block 1
}

TEST_CASE("NF4 double quantization reads back through NF4_state", "[ops][nf4]") {
  const int64_t n = 64 * 700;  // 700 blocks -> 3 nested blocks
  Tensor x = t::random_float({n}, t::f32(), 11);
  Tensor q({n / 2}, t::u8());
  Tensor am({700}, t::f32());
  REQUIRE(NF4_quantize(x.t(), q.t(), am.t(), 64, nullptr) == Q4_OK);
  Tensor qam({700}, t::u8()), nam({3}, t::f32()), map({256}, t::f32());
  float offset = 0;
  REQUIRE(NF4_double_quantize(am.t(), qam.t(), nam.t(), map.t(), &offset, nullptr) == Q4_OK);
  // The map is sorted, holds 0 and 1, and is symmetric except for its ends.
  CHECK(std::is_sorted(map.f(), map.f() + 256));
  CHECK(std::find(map.f(), map.f() + 256, 0.0f) != map.f() + 256);
  CHECK(map.f()[255] == 1.0f);

  NF4_state st{};
  st.struct_size = sizeof st;
  st.blocksize = 64;
  st.absmax = qam.t();
  st.nested_absmax = nam.t();
  st.nested_quant_map = map.t();
  st.nested_offset = offset;
  Tensor out({n}, t::f32());
  REQUIRE(NF4_dequantize(q.t(), &st, out.t(), nullptr) == Q4_OK);
  for (int64_t i = 0; i < n; i += 97) {
    const int64_t b = i / 64;
    const float absmax = nested_absmax_spec(map.f()[qam.data()[b]], nam.f()[b / 256], offset);
    const uint32_t code = (i & 1) ? (q.data()[i / 2] & 0xf) : (q.data()[i / 2] >> 4);
    CHECK(out.f()[i] == nf4_spec(code) * absmax);
    CHECK(std::fabs(absmax - am.f()[b]) <= 0.02f * am.f()[b]);  // 8-bit dynamic map precision
  }
}

TEST_CASE("every ISA variant: NF4_dequantize is bit-identical to the scalar table", "[ops][nf4][kernels]") {
  // Odd n with a partial last block, blocksizes 32 / 64 / 4096, plain and
  // double-quantized absmax, a custom quant_map, fp32 / fp16 / bf16 out, 3
  // threads (several tasks of whole blocks).
  for (const auto& [n, bs] : {std::pair<int64_t, int32_t>{44807, 64}, {4130, 32}, {70001, 4096}}) {
    const int64_t nb = (n + bs - 1) / bs;
    Tensor x = t::random_float({n}, t::f32(), static_cast<uint32_t>(n));
    Tensor q({(n + 1) / 2}, t::u8()), am({nb}, t::f32());
    REQUIRE(NF4_quantize(x.t(), q.t(), am.t(), bs, nullptr) == Q4_OK);
    Tensor qam({nb}, t::u8()), nam({(nb + 255) / 256}, t::f32()), map({256}, t::f32()), qm({16}, t::f32());
    float offset = 0;
    REQUIRE(NF4_double_quantize(am.t(), qam.t(), nam.t(), map.t(), &offset, nullptr) == Q4_OK);
    for (int c = 0; c < 16; ++c) qm.f()[c] = 0.3f * static_cast<float>(c) - 2.1f;
    for (int variant = 0; variant < 3; ++variant) {  // plain, nested, custom quant_map
      NF4_state st = nf4_state(am, bs);
      if (variant == 1) {
        st.absmax = qam.t();
        st.nested_absmax = nam.t();
        st.nested_quant_map = map.t();
        st.nested_offset = offset;
      }
      if (variant == 2) st.quant_map = qm.t();
      Tensor want32({n}, t::f32());
      for (DLDataType dt : {t::f32(), t::f16(), t::bf16()}) {
        Tensor want({n}, dt);
        {
          t::IsaCap scalar(Q4_ISA_SCALAR);
          REQUIRE(NF4_dequantize(q.t(), &st, want.t(), nullptr) == Q4_OK);
        }
        if (dt.bits == 32) {
          std::memcpy(want32.data(), want.data(), static_cast<size_t>(n * 4));
        } else {  // 16-bit: the fp32 output rounded once
          Tensor rounded({n}, dt);
          for (int64_t i = 0; i < n; ++i) rounded.set(i, want32.get(i));
          CHECK(std::memcmp(rounded.data(), want.data(), static_cast<size_t>(n * 2)) == 0);
        }
        if (dt.bits == 32) {  // the scalar table against the element rule
          size_t bad = 0;
          for (int64_t i = 0; i < n; ++i) {
            const int64_t b = i / bs;
            const float a = variant == 1
                                ? nested_absmax_spec(map.f()[qam.data()[b]], nam.f()[b / 256], offset)
                                : am.f()[b];
            const uint32_t code = (i & 1) ? (q.data()[i / 2] & 0xf) : (q.data()[i / 2] >> 4);
            const float v = (variant == 2 ? qm.f()[code] : nf4_spec(code)) * a;
            bad += std::memcmp(&v, want.data() + i * 4, 4) != 0 ? 1 : 0;
          }
          CHECK(bad == 0);
        }
        for (int32_t isa : t::runnable_isas()) {
          t::IsaCap cap(isa);
          INFO("isa " << Q4_isa_name(isa) << " n " << n << " blocksize " << bs << " variant " << variant
                      << " out bits " << int(dt.bits) << " code " << int(dt.code));
          Q4_op_options o{};
          Q4_op_options_init(&o);
          o.num_threads = 3;
          Tensor got({n}, dt);
          REQUIRE(NF4_dequantize(q.t(), &st, got.t(), &o) == Q4_OK);
          CHECK(std::memcmp(got.data(), want.data(), static_cast<size_t>(n * dt.bits / 8)) == 0);
        }
      }
    }
  }
}

TEST_CASE("NF4_scaled_mm equals x . dequant(W)^T in fp64", "[ops][nf4]") {
  for (int path : {Q4_PATH_AUTO, Q4_PATH_DEQUANT_MATMUL_ONLY}) {
    for (int ow = 0; ow < 3; ++ow) {
      const int64_t n = 11, k = 40;  // blocks span rows: 440 elements, blocksize 64
      Tensor w = t::random_float({n, k}, t::f32(), 5);
      Tensor q({(n * k + 1) / 2}, t::u8());
      Tensor am({(n * k + 63) / 64}, t::f32());
      REQUIRE(NF4_quantize(w.t(), q.t(), am.t(), 64, nullptr) == Q4_OK);
      NF4_state st = nf4_state(am, 64);
      Tensor x = t::random_float({3, k}, t::bf16(), 6);
      Tensor bias({n}, t::f16());
      for (int64_t j = 0; j < n; ++j) bias.set(j, -0.5f * static_cast<float>(j));
      Tensor out({3, n}, dtype_for(ow));
      Q4_op_options o{};
      Q4_op_options_init(&o);
      o.compute_path = path;
      REQUIRE(NF4_scaled_mm(x.t(), q.t(), &st, bias.t(), out.t(), &o) == Q4_OK);
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0, mag = 0;
          for (int64_t kk = 0; kk < k; ++kk) {
            const int64_t f = j * k + kk;
            const uint32_t code = (f & 1) ? (q.data()[f / 2] & 0xf) : (q.data()[f / 2] >> 4);
            const double wv = nf4_spec(code) * am.f()[f / 64];
            acc += x.get(i * k + kk) * wv;
            mag += std::fabs(x.get(i * k + kk) * wv);
          }
          acc += -0.5 * static_cast<double>(j);
          CHECK(std::fabs(out.get(i * n + j) - acc) <= out_tol(ow) * (mag + std::fabs(acc)) + 1e-9);
        }
      }
    }
  }
}

TEST_CASE("swizzle and unswizzle are inverse and zero the padding", "[ops][swizzle]") {
  for (int64_t rows : {1, 127, 128, 200}) {
    for (int64_t cols : {1, 4, 7}) {
      Tensor lin({rows, cols}, t::u8());
      for (size_t i = 0; i < lin.bytes; ++i) lin.data()[i] = static_cast<uint8_t>(1 + i % 250);
      Tensor sw({q4::fmt::swizzled_rows(rows) * q4::fmt::swizzled_cols(cols)}, t::u8());
      REQUIRE(NVFP4_swizzle_scales(lin.t(), sw.t()) == Q4_OK);
      size_t nonzero = 0;
      for (size_t i = 0; i < sw.bytes; ++i) nonzero += sw.data()[i] != 0;
      CHECK(nonzero == lin.bytes);
      CHECK(sw.data()[q4::fmt::swizzle_offset(rows - 1, cols - 1, cols)] == lin.data()[lin.bytes - 1]);
      Tensor back({rows, cols}, t::e4m3());
      REQUIRE(NVFP4_unswizzle_scales(sw.t(), back.t()) == Q4_OK);
      CHECK(std::equal(lin.data(), lin.data() + lin.bytes, back.data()));
    }
  }
}

TEST_CASE("swizzle and unswizzle of many bands (threaded): every byte at swizzle_offset, padding zeroed",
          "[ops][swizzle]") {
  // 1000 x 261: bands of 33 KiB, one per task of the default thread count,
  // a partial last band (rows 896-999) and 3 padding columns; 300 x 1030:
  // bands of 129 KiB and 2 padding columns.
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1000, 261}, {300, 1030}}) {
    Tensor lin({rows, cols}, t::u8());
    for (size_t i = 0; i < lin.bytes; ++i) lin.data()[i] = static_cast<uint8_t>(1 + (i * 7) % 251);
    Tensor sw({q4::fmt::swizzled_rows(rows) * q4::fmt::swizzled_cols(cols)}, t::u8());
    sw.fill(0xAB);  // what was there before: the padding must come out 0
    REQUIRE(NVFP4_swizzle_scales(lin.t(), sw.t()) == Q4_OK);
    std::vector<uint8_t> expect(sw.bytes, 0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c)
        expect[static_cast<size_t>(q4::fmt::swizzle_offset(r, c, cols))] = lin.data()[r * cols + c];
    }
    CHECK(std::equal(expect.begin(), expect.end(), sw.data()));
    Tensor back({rows, cols}, t::u8());
    back.fill(0xCD);
    REQUIRE(NVFP4_unswizzle_scales(sw.t(), back.t()) == Q4_OK);
    CHECK(std::equal(lin.data(), lin.data() + lin.bytes, back.data()));
    CHECK(back.guard_intact());
    CHECK(sw.guard_intact());
  }
}

TEST_CASE("packed data accepted as uint8, fp4 lanes 1 and fp4 lanes 2", "[ops][dlpack]") {
  const int64_t rows = 4, k = 32;
  Tensor x = t::random_float({rows, k}, t::f32(), 9);
  Tensor q_u8({rows, k / 2}, t::u8());
  Tensor q_fp4({rows, k}, DLDataType{kDLFloat4_e2m1fn, 4, 1});
  Tensor q_fp4x2({rows, k / 2}, DLDataType{kDLFloat4_e2m1fn, 4, 2});
  Tensor s({rows, k / 16}, t::e4m3());
  REQUIRE(NVFP4_quantize(x.t(), q_u8.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, nullptr) == Q4_OK);
  REQUIRE(NVFP4_quantize(x.t(), q_fp4.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, nullptr) == Q4_OK);
  REQUIRE(NVFP4_quantize(x.t(), q_fp4x2.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, nullptr) == Q4_OK);
  CHECK(q_fp4.bytes == q_u8.bytes);
  CHECK(std::equal(q_u8.data(), q_u8.data() + q_u8.bytes, q_fp4.data()));
  CHECK(std::equal(q_u8.data(), q_u8.data() + q_u8.bytes, q_fp4x2.data()));
  // Explicit compact strides and managed/pinned devices are accepted.
  q_u8.set_strides({k / 2, 1});
  q_u8.dl.device.device_type = kDLCUDAManaged;
  s.dl.device.device_type = kDLCUDAHost;
  Tensor y({rows, k}, t::f32());
  CHECK(NVFP4_dequantize(q_u8.t(), s.t(), Q4_SCALE_LINEAR, 1.0f, y.t(), nullptr) == Q4_OK);
}

TEST_CASE("NVFP4_linear and NF4_scaled_mm: every batch size across GEMV, small-batch and GEMM, odd N",
          "[ops][small-batch]") {
  // K = 4352 exceeds the default split_k (4096): the small-batch sizes run
  // over two K parts. Exact-mode bound: (K + 16) * 2^-24 * sum |x w|.
  for (int64_t k : {48, 4352}) {
    const int64_t n = k > 1000 ? 7 : 13;
    Tensor w = t::random_float({n, k}, t::f32(), static_cast<uint32_t>(k));
    Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
    float g = 0;
    REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr) == Q4_OK);
    Tensor nq({(n * k + 1) / 2}, t::u8()), na({(n * k + 63) / 64}, t::f32());
    REQUIRE(NF4_quantize(w.t(), nq.t(), na.t(), 64, nullptr) == Q4_OK);
    NF4_state st = nf4_state(na, 64);
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 16, 17, 31, 32, 33, 64, 65}) {
      const int xw = static_cast<int>(m % 3);
      Tensor x = t::random_float({m, k}, dtype_for(xw), static_cast<uint32_t>(m * 13 + k));
      Tensor y({m, n}, t::f32()), yn({m, n}, t::f32());
      REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), Q4_SCALE_LINEAR, g, nullptr, y.t(), nullptr) == Q4_OK);
      REQUIRE(NF4_scaled_mm(x.t(), nq.t(), &st, nullptr, yn.t(), nullptr) == Q4_OK);
      size_t bad = 0, bad_nf4 = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0, mag = 0, acc4 = 0, mag4 = 0;
          for (int64_t kk = 0; kk < k; ++kk) {
            const double xv = x.get(i * k + kk);
            const double wv = static_cast<float>(nvfp4_value(wq.data(), ws.data(), k, j, kk, 1)) * g;
            acc += xv * wv;
            mag += std::fabs(xv * wv);
            const int64_t f = j * k + kk;
            const uint32_t code = (f & 1) ? (nq.data()[f / 2] & 0xf) : (nq.data()[f / 2] >> 4);
            const double w4 = static_cast<double>(nf4_spec(code) * na.f()[f / 64]);
            acc4 += xv * w4;
            mag4 += std::fabs(xv * w4);
          }
          const double unit = (static_cast<double>(k) + 16.0) * std::ldexp(1.0, -24);
          bad += std::fabs(y.get(i * n + j) - acc) > unit * mag + 1e-30;
          bad_nf4 += std::fabs(yn.get(i * n + j) - acc4) > unit * mag4 + 1e-30;
        }
      }
      INFO("m=" << m << " n=" << n << " k=" << k << " x " << dtype_label(xw));
      CHECK(bad == 0);
      CHECK(bad_nf4 == 0);
    }
  }
}
