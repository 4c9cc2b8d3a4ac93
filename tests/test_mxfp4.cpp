// MXFP4 (docs/formats.md, MXFP4) through the public ABI, against an oracle
// written here from the OCP Microscaling v1.0 rules (floor(log2(amax)) - 2,
// E2M1 round-to-nearest-even with saturation, E8M0 = 2^(byte - 127)), in
// double precision and independent of the library's codec code.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cfloat>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "formats/mxfp4.h"
#include "test_util.h"

using t::Tensor;

namespace {

const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

DLDataType e8m0() {
  return DLDataType{kDLFloat8_e8m0fnu, 8, 1};
}

// The OCP shared exponent of a block of 32 values.
int oracle_exponent(const std::vector<double>& block) {
  double amax = 0;
  for (double v : block) amax = std::max(amax, std::fabs(v));
  if (amax == 0) return -127;
  const int e = static_cast<int>(std::floor(std::log2(amax))) - 2;
  return std::min(127, std::max(-127, e));
}

// Nearest E2M1 code of v (double), ties to the even code, saturating at 6,
// the sign bit from v's sign (so -0 and small negatives give 0x8).
uint32_t oracle_e2m1(double v) {
  const double a = std::fabs(v);
  uint32_t best = 7;
  if (a < 6) {
    double bd = 1e300;
    for (uint32_t c = 0; c < 8; ++c) {
      const double d = std::fabs(a - kMag[c]);
      if (d < bd || (d == bd && (c & 1u) == 0)) {
        best = c;
        bd = d;
      }
    }
  }
  return (std::signbit(v) ? 8u : 0u) | best;
}

float oracle_decode(uint32_t code, uint32_t byte) {
  if (byte == 0xff) return NAN;
  const double v =
      (code & 8u ? -kMag[code & 7u] : kMag[code & 7u]) * std::ldexp(1.0, static_cast<int>(byte) - 127);
  if (std::fabs(v) > static_cast<double>(FLT_MAX)) return v < 0 ? -INFINITY : INFINITY;
  return static_cast<float>(v);
}

// Quantizes rows x k values (read as fp32 from x) with the oracle.
void oracle_quantize(const Tensor& x, int64_t rows, int64_t k, std::vector<uint8_t>& q,
                     std::vector<uint8_t>& s) {
  q.assign(static_cast<size_t>(rows * k / 2), 0);
  s.assign(static_cast<size_t>(rows * k / 32), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k / 32; ++b) {
      std::vector<double> block(32);
      for (int j = 0; j < 32; ++j) block[j] = x.get(r * k + b * 32 + j);
      const int e = oracle_exponent(block);
      s[r * (k / 32) + b] = static_cast<uint8_t>(e + 127);
      for (int j = 0; j < 32; ++j) {
        const uint32_t c = oracle_e2m1(std::ldexp(block[j], -e));
        const int64_t f = r * k + b * 32 + j;
        q[f / 2] |= static_cast<uint8_t>((f & 1) ? c << 4 : c);
      }
    }
  }
}

// Blocks of widely different magnitudes: zero blocks, subnormal amax (the
// lower clamp), the top of the fp32 range, E2M1 ties, signed zeros.
Tensor varied_input(int64_t rows, int64_t k, DLDataType dt, uint32_t seed) {
  Tensor x({rows, k}, dt);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 9), ex(-140, 120);
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 7.0f, 0.5f};
  const bool half = dt.bits == 16;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k / 32; ++b) {
      const int kd = kind(rng);
      const int e =
          half ? (dt.code == kDLBfloat ? ex(rng) : std::max(-20, std::min(12, ex(rng) / 8))) : ex(rng);
      for (int j = 0; j < 32; ++j) {
        float v;
        switch (kd) {
          case 0:
            v = (j % 3 == 0) ? -0.0f : 0.0f;
            break;
          case 1:
            v = std::ldexp(ties[j % 10] * (j % 2 ? -1.0f : 1.0f), half ? 0 : e);
            break;
          case 2:
            // (near FLT_MAX and finite: |nd| clamped below 3.4)
            v = half ? nd(rng) * 1000.0f : std::clamp(nd(rng), -3.3f, 3.3f) * 1e38f;
            break;
          default:
            v = std::ldexp(nd(rng), e);
        }
        x.set(r * k + b * 32 + j, v);
      }
    }
  }
  return x;
}

int64_t swizzled_mx_bytes(int64_t rows, int64_t k) {
  return t::swizzled_bytes(rows, k / 2);  // roundup(rows,128) * roundup(K/32,4)
}

double out_tol(DLDataType dt) {
  return dt.bits == 32 ? 1e-5 : (dt.code == kDLBfloat ? 1e-2 : 2e-3);
}

}  // namespace

TEST_CASE("MXFP4_quantize is bit-exact with the OCP oracle", "[ops][mxfp4]") {
  for (DLDataType dt : {t::f32(), t::f16(), t::bf16()}) {
    for (int layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
      const int64_t rows = 37, k = 160;
      Tensor x = varied_input(rows, k, dt, 11 + dt.code);
      Tensor q({rows, k / 2}, t::u8());
      Tensor s(layout == Q4_SCALE_LINEAR ? std::vector<int64_t>{rows, k / 32}
                                         : std::vector<int64_t>{swizzled_mx_bytes(rows, k)},
               t::u8());
      Q4_op_options o{};
      Q4_op_options_init(&o);
      o.num_threads = 2;
      REQUIRE(MXFP4_quantize(x.t(), q.t(), s.t(), layout, &o) == Q4_OK);
      CHECK(q.guard_intact());
      CHECK(s.guard_intact());
      std::vector<uint8_t> oq, os;
      oracle_quantize(x, rows, k, oq, os);
      std::vector<uint8_t> lin(os.size());
      if (layout == Q4_SCALE_LINEAR) {
        std::memcpy(lin.data(), s.data(), lin.size());
      } else {
        Tensor l({rows, k / 32}, t::u8());
        REQUIRE(NVFP4_unswizzle_scales(s.t(), l.t()) == Q4_OK);
        std::memcpy(lin.data(), l.data(), lin.size());
      }
      INFO("dtype code " << int(dt.code) << " bits " << int(dt.bits) << " layout " << layout);
      CHECK(lin == os);
      CHECK(std::vector<uint8_t>(q.data(), q.data() + oq.size()) == oq);
    }
  }
}

TEST_CASE("MXFP4_quantize: the worked example of docs/formats.md", "[ops][mxfp4]") {
  // Block amax 7.5: floor(log2 7.5) = 2, e = 0, byte 127; 7.5 saturates to 6
  // (producers that round the scale up would pick e = 1 instead).
  Tensor x({1, 32}, t::f32());
  for (int j = 0; j < 32; ++j) x.set(j, 0.0f);
  x.set(0, 0.1f);
  x.set(1, 1.0f);
  x.set(2, -3.0f);
  x.set(3, 7.5f);
  x.set(4, -0.0f);
  x.set(5, 2.5f);
  Tensor q({16}, t::u8()), s({1}, e8m0());
  REQUIRE(MXFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  CHECK(s.data()[0] == 127);
  CHECK(q.data()[0] == 0x20);  // 0.1 -> 0 (low), 1 -> code 2 (high)
  CHECK(q.data()[1] == 0x7D);  // -3 -> 0xD (low), 7.5 -> 6 = 0x7 (high)
  CHECK(q.data()[2] == 0x48);  // -0 -> 0x8 (low), 2.5 -> 2 = 0x4 (tie to even, high)
  Tensor back({1, 32}, t::f32());
  REQUIRE(MXFP4_dequantize(q.t(), s.t(), Q4_SCALE_LINEAR, back.t(), nullptr) == Q4_OK);
  CHECK(back.get(3) == 6.0f);
  CHECK(std::signbit(back.get(4)));

  // Amax 0.3: floor(log2 0.3) = -2, e = -4, byte 123; elements x * 16.
  x.set(0, 0.3f);
  for (int j = 1; j < 32; ++j) x.set(j, j == 1 ? -0.05f : 0.0f);
  REQUIRE(MXFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  CHECK(s.data()[0] == 123);
  CHECK(q.data()[0] == 0xA6);  // 4.8 -> 4 (0x6), -0.8 -> -1 (0xA)
  // An all-zero block: byte 0x00 (2^-127).
  for (int j = 0; j < 32; ++j) x.set(j, 0.0f);
  REQUIRE(MXFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  CHECK(s.data()[0] == 0);
}

TEST_CASE("MXFP4_dequantize equals e2m1 * 2^(byte-127) for every code and byte", "[ops][mxfp4]") {
  // Row b holds byte b for both of its blocks; the 64 elements run over the
  // 16 codes four times.
  const int64_t rows = 256, k = 64;
  Tensor q({rows, k / 2}, t::u8()), s({rows, k / 32}, e8m0());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k / 2; ++j)
      q.data()[r * (k / 2) + j] = static_cast<uint8_t>((2 * j) % 16 | (((2 * j + 1) % 16) << 4));
    s.data()[r * 2] = s.data()[r * 2 + 1] = static_cast<uint8_t>(r);
  }
  for (DLDataType dt : {t::f32(), t::f16(), t::bf16()}) {
    for (int layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
      Tensor sw({swizzled_mx_bytes(rows, k)}, t::u8());
      const DLTensor* sc = s.t();
      if (layout == Q4_SCALE_SWIZZLED) {
        DLTensor s_u8 = *s.t();  // the swizzle functions take uint8 (or E4M3) bytes
        s_u8.dtype = t::u8();
        REQUIRE(NVFP4_swizzle_scales(&s_u8, sw.t()) == Q4_OK);
        sc = sw.t();
      }
      Tensor out({rows, k}, dt);
      REQUIRE(MXFP4_dequantize(q.t(), sc, layout, out.t(), nullptr) == Q4_OK);
      CHECK(out.guard_intact());
      int64_t bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < k; ++j) {
          const float want32 = oracle_decode(static_cast<uint32_t>(j % 16), static_cast<uint32_t>(r));
          Tensor one({1}, dt);
          one.set(0, want32);  // the expected value rounded to the output dtype
          const float want = one.get(0), got = out.get(r * k + j);
          uint32_t want_bits = 0, got_bits = 0;  // bit-exact, -0 vs +0 distinguished
          std::memcpy(&want_bits, &want, 4);
          std::memcpy(&got_bits, &got, 4);
          const bool same = std::isnan(want) ? std::isnan(got) : want_bits == got_bits;
          if (!same && bad++ < 5)
            FAIL_CHECK("byte " << r << " code " << j % 16 << ": " << got << " vs " << want);
        }
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("MXFP4 quantize -> dequantize round trip is within half an E2M1 step", "[ops][mxfp4]") {
  const int64_t rows = 8, k = 256;
  Tensor x = t::random_float({rows, k}, t::f32(), 5);
  Tensor q({rows, k / 2}, t::u8()), s({rows, k / 32}, t::u8()), back({rows, k}, t::f32());
  REQUIRE(MXFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  REQUIRE(MXFP4_dequantize(q.t(), s.t(), Q4_SCALE_LINEAR, back.t(), nullptr) == Q4_OK);
  for (int64_t i = 0; i < rows * k; ++i) {
    const double scale = std::ldexp(1.0, s.data()[i / 32] - 127);
    const double a = std::fabs(x.get(i)) / scale;
    const double step = a < 2 ? 0.5 : (a < 4 ? 1.0 : 2.0);  // up to saturation at 6 (a < 8 here)
    const double err = std::fabs(static_cast<double>(back.get(i)) - x.get(i)) / scale;
    CHECK(err <= (a > 6 ? a - 6 : step / 2));
  }
}

TEST_CASE("MXFP4 validation and refusals", "[ops][mxfp4][validation]") {
  Tensor x = t::random_float({4, 64}, t::f32(), 1);
  Tensor q({4, 32}, t::u8()), s({4, 2}, t::u8());
  SECTION("NaN/Inf names the first index, nothing written") {
    x.set(77, NAN);
    x.set(100, INFINITY);
    const auto before = q.snapshot();
    CHECK(MXFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_ERR_NON_FINITE);
    CHECK(std::string(Q4_last_error()).find("flat index 77") != std::string::npos);
    CHECK(q.snapshot() == before);
  }
  SECTION("K must be a multiple of 32") {
    Tensor x48 = t::random_float({4, 48}, t::f32(), 1);
    Tensor q48({4, 24}, t::u8()), s48({4, 3}, t::u8());
    CHECK(MXFP4_quantize(x48.t(), q48.t(), s48.t(), Q4_SCALE_LINEAR, nullptr) == Q4_ERR_SHAPE);
    CHECK(std::string(Q4_last_error()).find("multiple of 32") != std::string::npos);
  }
  SECTION("scale dtypes: uint8 and float8_e8m0fnu, not float8_e4m3fn") {
    Tensor se({4, 2}, e8m0()), s4({4, 2}, t::e4m3());
    CHECK(MXFP4_quantize(x.t(), q.t(), se.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
    CHECK(MXFP4_quantize(x.t(), q.t(), s4.t(), Q4_SCALE_LINEAR, nullptr) == Q4_ERR_DTYPE);
    CHECK(std::string(Q4_last_error()).find("E8M0") != std::string::npos);
  }
  SECTION("wrong scale size, bad layout, aliasing") {
    Tensor s3({4, 3}, t::u8());
    CHECK(MXFP4_quantize(x.t(), q.t(), s3.t(), Q4_SCALE_LINEAR, nullptr) == Q4_ERR_SHAPE);
    CHECK(MXFP4_quantize(x.t(), q.t(), s.t(), 7, nullptr) == Q4_ERR_INVALID_ARGUMENT);
    CHECK(MXFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_SWIZZLED, nullptr) == Q4_ERR_SHAPE);
    DLTensor alias = *s.t();
    alias.data = q.data();
    CHECK(MXFP4_quantize(x.t(), q.t(), &alias, Q4_SCALE_LINEAR, nullptr) == Q4_ERR_ALIASING);
  }
  SECTION(
      "products: the E2M1 kernels (auto, nvfp4-kernel, KernelOnly, fast) and dequant-matmul run; "
      "nf4-kernel and contradictions are refused") {
    REQUIRE(MXFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
    Tensor a = t::random_float({3, 64}, t::f32(), 2), out({3, 4}, t::f32()), out4({4, 4}, t::f32());
    Q4_op_options o{};
    Q4_op_options_init(&o);
    o.compute_path = Q4_PATH_KERNEL_ONLY;
    CHECK(MXFP4_linear(a.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr, out.t(), &o) == Q4_OK);
    CHECK(MXFP4_scaled_mm(q.t(), s.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 1.0f, nullptr, out4.t(), &o) == Q4_OK);
    Q4_op_options_init(&o);
    o.backend = Q4_BACKEND_NVFP4_KERNEL;
    CHECK(MXFP4_linear(a.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr, out.t(), &o) == Q4_OK);
    Q4_op_options_init(&o);
    o.math_mode = Q4_MATH_FAST;
    CHECK(MXFP4_linear(a.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr, out.t(), &o) == Q4_OK);
    Q4_op_options_init(&o);
    o.compute_path = Q4_PATH_DEQUANT_MATMUL_ONLY;
    CHECK(MXFP4_linear(a.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr, out.t(), &o) == Q4_OK);
    o.math_mode = Q4_MATH_FAST;
    CHECK(MXFP4_linear(a.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr, out.t(), &o) == Q4_ERR_UNSUPPORTED);
    Q4_op_options_init(&o);
    o.backend = Q4_BACKEND_NF4_KERNEL;
    CHECK(MXFP4_linear(a.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr, out.t(), &o) == Q4_ERR_UNSUPPORTED);
    CHECK(std::string(Q4_last_error()).find("nf4-kernel") != std::string::npos);
    Q4_op_options_init(&o);
    o.backend = Q4_BACKEND_DEQUANT_MATMUL;
    o.compute_path = Q4_PATH_KERNEL_ONLY;
    CHECK(MXFP4_linear(a.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr, out.t(), &o) ==
          Q4_ERR_INVALID_ARGUMENT);
  }
  SECTION("kDLCUDA tensors go to the CUDA backend (no device here: not available)") {
    // Host memory labelled kDLCUDA: without a CUDA device the call is
    // refused by the backend, not by MXFP4 (test_cuda_emulated.cpp runs
    // MXFP4 on an emulated device).
    Tensor out({4, 64}, t::f32());
    DLTensor cq = *q.t(), cs = *s.t(), co = *out.t();
    cq.device = cs.device = co.device = DLDevice{kDLCUDA, 0};
    const int32_t rc = MXFP4_dequantize(&cq, &cs, Q4_SCALE_LINEAR, &co, nullptr);
    CHECK(rc != Q4_ERR_UNSUPPORTED);
    if (rc != Q4_OK) CHECK(std::string(Q4_last_error()).find("CUDA") != std::string::npos);
  }
  SECTION("empty tensors") {
    Tensor x0({0, 64}, t::f32()), q0({0}, t::u8()), s0({0}, t::u8());
    CHECK(MXFP4_quantize(x0.t(), q0.t(), s0.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
    CHECK(MXFP4_dequantize(q0.t(), s0.t(), Q4_SCALE_LINEAR, x0.t(), nullptr) == Q4_OK);
  }
}

namespace {

// dequant(W) of the oracle: row j, column kk.
double w_value(const uint8_t* q, const uint8_t* s, int64_t k, int64_t j, int64_t kk) {
  const int64_t f = j * k + kk;
  const uint32_t code = (f & 1) ? q[f / 2] >> 4 : q[f / 2] & 0xfu;
  return oracle_decode(code, s[j * (k / 32) + kk / 32]);
}

}  // namespace

TEST_CASE("MXFP4_linear equals x . dequant(W)^T in fp64, any batch dims, bias", "[ops][mxfp4]") {
  const int64_t n = 9, k = 96;
  Tensor w = t::random_float({n, k}, t::f32(), 3);
  Tensor wq({n, k / 2}, t::u8()), ws({n, k / 32}, t::u8()), wsw({swizzled_mx_bytes(n, k)}, t::u8());
  REQUIRE(MXFP4_quantize(w.t(), wq.t(), ws.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  REQUIRE(NVFP4_swizzle_scales(ws.t(), wsw.t()) == Q4_OK);
  Tensor bias = t::random_float({n}, t::f32(), 9);
  for (DLDataType xd : {t::f32(), t::f16(), t::bf16()}) {
    for (DLDataType od : {t::f32(), t::f16(), t::bf16()}) {
      for (int layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
        Tensor x = t::random_float({2, 3, k}, xd, 4);
        Tensor out({2, 3, n}, od);
        REQUIRE(MXFP4_linear(x.t(), wq.t(), layout == Q4_SCALE_LINEAR ? ws.t() : wsw.t(), layout, bias.t(),
                             out.t(), nullptr) == Q4_OK);
        CHECK(out.guard_intact());
        for (int64_t i = 0; i < 6; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double acc = bias.get(j), mag = std::fabs(bias.get(j));
            for (int64_t kk = 0; kk < k; ++kk) {
              const double p = x.get(i * k + kk) * w_value(wq.data(), ws.data(), k, j, kk);
              acc += p;
              mag += std::fabs(p);
            }
            CHECK(std::fabs(out.get(i * n + j) - acc) <= out_tol(od) * (mag + 1e-30));
          }
        }
      }
    }
  }
}

TEST_CASE("MXFP4_linear takes one expert of an [E, N, K/2] stack by byte_offset, no copy",
          "[ops][mxfp4][moe]") {
  const int64_t e_count = 4, n = 24, k = 64, m = 5;
  Tensor w = t::random_float({e_count, n, k}, t::f32(), 21);
  // The gpt-oss layout: blocks [E, N, K/32, 16] and scales [E, N, K/32].
  Tensor blocks({e_count, n, k / 32, 16}, t::u8()), scales({e_count, n, k / 32}, t::u8());
  REQUIRE(MXFP4_quantize(w.t(), blocks.t(), scales.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  Tensor x = t::random_float({m, k}, t::f32(), 22);
  for (int64_t e = 0; e < e_count; ++e) {
    // A 3-D view of expert e: shape [1, N, K/2] / [1, N, K/32].
    int64_t qshape[3] = {1, n, k / 2}, sshape[3] = {1, n, k / 32};
    DLTensor qv = *blocks.t(), sv = *scales.t();
    qv.ndim = sv.ndim = 3;
    qv.shape = qshape;
    sv.shape = sshape;
    qv.byte_offset = static_cast<uint64_t>(e * n * k / 2);
    sv.byte_offset = static_cast<uint64_t>(e * n * k / 32);
    Tensor out({m, n}, t::f32());
    REQUIRE(MXFP4_linear(x.t(), &qv, &sv, Q4_SCALE_LINEAR, nullptr, out.t(), nullptr) == Q4_OK);
    // The same expert copied out into its own 2-D tensors.
    Tensor q1({n, k / 2}, t::u8()), s1({n, k / 32}, t::u8());
    std::memcpy(q1.data(), blocks.data() + e * n * k / 2, static_cast<size_t>(n * k / 2));
    std::memcpy(s1.data(), scales.data() + e * n * k / 32, static_cast<size_t>(n * k / 32));
    Tensor out1({m, n}, t::f32());
    REQUIRE(MXFP4_linear(x.t(), q1.t(), s1.t(), Q4_SCALE_LINEAR, nullptr, out1.t(), nullptr) == Q4_OK);
    CHECK(std::memcmp(out.data(), out1.data(), static_cast<size_t>(m * n * 4)) == 0);
    // The 4-D gpt-oss view [1, N, K/32, 16] of the same bytes works too.
    int64_t bshape[4] = {1, n, k / 32, 16};
    DLTensor bv = *blocks.t();
    bv.shape = bshape;
    bv.byte_offset = qv.byte_offset;
    Tensor out2({m, n}, t::f32());
    REQUIRE(MXFP4_linear(x.t(), &bv, &sv, Q4_SCALE_LINEAR, nullptr, out2.t(), nullptr) == Q4_OK);
    CHECK(std::memcmp(out.data(), out2.data(), static_cast<size_t>(m * n * 4)) == 0);
  }
  // A whole [E, N, K/2] stack is not one [N, K] weight: out's N decides.
  Tensor out({m, n}, t::f32());
  CHECK(MXFP4_linear(x.t(), blocks.t(), scales.t(), Q4_SCALE_LINEAR, nullptr, out.t(), nullptr) ==
        Q4_ERR_SHAPE);
}

TEST_CASE("MXFP4_scaled_mm equals alpha * dequant(A) . dequant(B)^T + bias in fp64", "[ops][mxfp4]") {
  const int64_t m = 7, n = 10, k = 128;
  Tensor a = t::random_float({m, k}, t::f32(), 31), b = t::random_float({n, k}, t::f32(), 32);
  Tensor aq({m, k / 2}, t::u8()), as({m, k / 32}, t::u8()), bq({n, k / 2}, t::u8()), bs({n, k / 32}, t::u8());
  REQUIRE(MXFP4_quantize(a.t(), aq.t(), as.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  REQUIRE(MXFP4_quantize(b.t(), bq.t(), bs.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  Tensor bias = t::random_float({n}, t::f32(), 33);
  for (DLDataType od : {t::f32(), t::bf16()}) {
    Tensor out({m, n}, od);
    const float alpha = 0.75f;
    REQUIRE(MXFP4_scaled_mm(aq.t(), as.t(), bq.t(), bs.t(), Q4_SCALE_LINEAR, alpha, bias.t(), out.t(),
                            nullptr) == Q4_OK);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double p = w_value(aq.data(), as.data(), k, i, kk) * w_value(bq.data(), bs.data(), k, j, kk);
          acc += p;
          mag += std::fabs(p);
        }
        CHECK(std::fabs(out.get(i * n + j) - (alpha * acc + bias.get(j))) <=
              out_tol(od) * (alpha * mag + std::fabs(bias.get(j)) + 1e-30));
      }
    }
  }
}

namespace {

// Expert e of a stacked gpt-oss weight ([E, N, K/32, 16] + [E, N, K/32]) as
// its own 2-D tensors (a copy, the reference operand of MXFP4_linear).
void expert_copy(const Tensor& blocks, const Tensor& scales, int64_t e, int64_t n, int64_t k, Tensor& q1,
                 Tensor& s1) {
  q1 = Tensor({n, k / 2}, t::u8());
  s1 = Tensor({n, k / 32}, t::u8());
  std::memcpy(q1.data(), blocks.data() + e * n * k / 2, static_cast<size_t>(n * k / 2));
  std::memcpy(s1.data(), scales.data() + e * n * k / 32, static_cast<size_t>(n * k / 32));
}

// Rows [r0, r0 + rows) of a 2-D float tensor as a new tensor.
Tensor rows_of(const Tensor& x, int64_t r0, int64_t rows) {
  const int64_t cols = x.shape.back();
  Tensor r({rows, cols}, x.dl.dtype);
  const size_t elem = x.dl.dtype.bits / 8;
  std::memcpy(r.data(), x.data() + r0 * cols * static_cast<int64_t>(elem),
              static_cast<size_t>(rows * cols) * elem);
  return r;
}

}  // namespace

TEST_CASE("MXFP4_linear_experts: every group equals MXFP4_linear on its expert", "[ops][mxfp4][moe]") {
  const int64_t e_count = 5, n = 24, k = 96;
  Tensor w = t::random_float({e_count, n, k}, t::f32(), 41);
  Tensor blocks({e_count, n, k / 32, 16}, t::u8()), scales({e_count, n, k / 32}, t::u8());
  REQUIRE(MXFP4_quantize(w.t(), blocks.t(), scales.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  // Swizzled: E consecutive per-expert swizzled blocks.
  const int64_t per = swizzled_mx_bytes(n, k);
  Tensor swz({e_count, per}, t::u8());
  for (int64_t e = 0; e < e_count; ++e) {
    int64_t ls[2] = {n, k / 32}, ss[1] = {per};
    DLTensor lin = *scales.t(), sw = *swz.t();
    lin.ndim = 2;
    lin.shape = ls;
    lin.byte_offset = static_cast<uint64_t>(e * n * k / 32);
    sw.ndim = 1;
    sw.shape = ss;
    sw.byte_offset = static_cast<uint64_t>(e * per);
    REQUIRE(NVFP4_swizzle_scales(&lin, &sw) == Q4_OK);
  }
  Tensor bias = t::random_float({e_count, n}, t::f32(), 42);
  // Groups: expert 3 twice (not adjacent), an empty group, expert 0, 4.
  const std::vector<int32_t> experts = {3, 0, 1, 3, 4};
  const std::vector<int64_t> rows = {4, 2, 0, 1, 6};
  const int64_t total = 13;
  for (DLDataType xd : {t::f32(), t::bf16()}) {
    for (int layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
      for (bool with_bias : {false, true}) {
        Tensor x = t::random_float({total, k}, xd, 43);
        Tensor out({total, n}, t::f32());
        const auto xs = x.snapshot(), bs = blocks.snapshot(), ss = scales.snapshot();
        REQUIRE(MXFP4_linear_experts(x.t(), blocks.t(), layout == Q4_SCALE_LINEAR ? scales.t() : swz.t(),
                                     layout, experts.data(), rows.data(),
                                     static_cast<int64_t>(experts.size()), with_bias ? bias.t() : nullptr,
                                     out.t(), nullptr) == Q4_OK);
        CHECK(out.guard_intact());
        CHECK(x.snapshot() == xs);  // inputs untouched
        CHECK(blocks.snapshot() == bs);
        CHECK(scales.snapshot() == ss);
        int64_t r0 = 0;
        for (size_t g = 0; g < experts.size(); ++g) {
          if (rows[g] == 0) continue;
          Tensor q1, s1;
          expert_copy(blocks, scales, experts[g], n, k, q1, s1);
          Tensor b1 = rows_of(bias, experts[g], 1);
          Tensor xg = rows_of(x, r0, rows[g]), ref({rows[g], n}, t::f32());
          REQUIRE(MXFP4_linear(xg.t(), q1.t(), s1.t(), Q4_SCALE_LINEAR, with_bias ? b1.t() : nullptr, ref.t(),
                               nullptr) == Q4_OK);
          CHECK(std::memcmp(ref.data(), out.data() + r0 * n * 4, static_cast<size_t>(rows[g] * n * 4)) == 0);
          r0 += rows[g];
        }
      }
    }
  }
  SECTION("one expert's product: one group of all rows, [E, N, K/2] shape") {
    int64_t qshape[3] = {e_count, n, k / 2};
    DLTensor q3 = *blocks.t();
    q3.ndim = 3;
    q3.shape = qshape;
    Tensor x = t::random_float({2, 3, k}, t::f16(), 44), out({2, 3, n}, t::f16());
    const int32_t e = 2;
    const int64_t all = 6;
    REQUIRE(MXFP4_linear_experts(x.t(), &q3, scales.t(), Q4_SCALE_LINEAR, &e, &all, 1, nullptr, out.t(),
                                 nullptr) == Q4_OK);
    Tensor q1, s1, ref({2, 3, n}, t::f16());
    expert_copy(blocks, scales, e, n, k, q1, s1);
    REQUIRE(MXFP4_linear(x.t(), q1.t(), s1.t(), Q4_SCALE_LINEAR, nullptr, ref.t(), nullptr) == Q4_OK);
    CHECK(std::memcmp(ref.data(), out.data(), static_cast<size_t>(6 * n * 2)) == 0);
  }
  SECTION("no rows, no groups") {
    Tensor x({0, k}, t::f32()), out({0, n}, t::f32());
    CHECK(MXFP4_linear_experts(x.t(), blocks.t(), scales.t(), Q4_SCALE_LINEAR, nullptr, nullptr, 0, nullptr,
                               out.t(), nullptr) == Q4_OK);
  }
}

TEST_CASE("MXFP4_linear_experts validation: each bad input a status naming it, nothing written",
          "[ops][mxfp4][moe][validation]") {
  const int64_t e_count = 3, n = 8, k = 64, m = 6;
  Tensor w = t::random_float({e_count, n, k}, t::f32(), 51);
  Tensor q({e_count, n, k / 2}, t::u8()), s({e_count, n, k / 32}, t::u8());
  REQUIRE(MXFP4_quantize(w.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  Tensor x = t::random_float({m, k}, t::f32(), 52), out({m, n}, t::f32());
  const std::vector<int32_t> ex = {0, 2};
  const std::vector<int64_t> rows = {2, 4};
  auto call = [&](const DLTensor* xx, const DLTensor* qq, const DLTensor* sc, int layout, const int32_t* e,
                  const int64_t* r, int64_t ng, const DLTensor* b,
                  DLTensor* o) { return MXFP4_linear_experts(xx, qq, sc, layout, e, r, ng, b, o, nullptr); };
  auto named = [](const char* what) { return std::string(Q4_last_error()).find(what) != std::string::npos; };
  CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, out.t()) == Q4_OK);
  Tensor out2({m, n}, t::f32());
  const auto before2 = out2.snapshot();
  SECTION("expert index out of range") {
    const std::vector<int32_t> bad = {0, 3};
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, bad.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_INVALID_ARGUMENT);
    CHECK(named("expert_of_group[1]"));
    const std::vector<int32_t> neg = {-1, 0};
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, neg.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_INVALID_ARGUMENT);
    CHECK(named("expert_of_group[0]"));
  }
  SECTION("group rows: negative, too many, too few") {
    const std::vector<int64_t> neg = {-1, 7}, many = {4, 4}, few = {2, 3};
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), neg.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_INVALID_ARGUMENT);
    CHECK(named("group_rows[0]"));
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), many.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_SHAPE);
    CHECK(named("group_rows[1]"));
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), few.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_SHAPE);
    CHECK(named("group_rows"));
  }
  SECTION("a NaN scale in an expert: refused naming expert, row and block") {
    s.data()[2 * n * (k / 32) + 3 * (k / 32) + 1] = 0xff;  // expert 2, row 3, block 1
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_INVALID_ARGUMENT);
    CHECK(named("w_scale"));
    CHECK(named("expert 2, row 3, block 1"));
    CHECK(out2.snapshot() == before2);
  }
  SECTION("NULL arrays, negative n_groups") {
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr, rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_NULL_POINTER);
    CHECK(named("expert_of_group"));
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), nullptr, 2, nullptr, out2.t()) ==
          Q4_ERR_NULL_POINTER);
    CHECK(named("group_rows"));
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), -1, nullptr, out2.t()) ==
          Q4_ERR_INVALID_ARGUMENT);
    CHECK(named("n_groups"));
    CHECK(call(nullptr, q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_NULL_POINTER);
  }
  SECTION("shapes: no expert dim, N disagreeing, scales short, K not a multiple of 32, bias") {
    int64_t flat[1] = {e_count * n * k / 2};
    DLTensor q1 = *q.t();
    q1.ndim = 1;
    q1.shape = flat;
    CHECK(call(x.t(), &q1, s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_SHAPE);
    CHECK(named("w_qdata"));
    Tensor out9({m, n + 1}, t::f32());
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, out9.t()) ==
          Q4_ERR_SHAPE);
    CHECK(named("out"));
    Tensor s_short({e_count - 1, n, k / 32}, t::u8());
    CHECK(call(x.t(), q.t(), s_short.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_SHAPE);
    CHECK(named("w_scale"));
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_SWIZZLED, ex.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_SHAPE);
    CHECK(named("w_scale"));
    Tensor x48 = t::random_float({m, 48}, t::f32(), 1);
    CHECK(call(x48.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_SHAPE);
    CHECK(named("multiple of 32"));
    Tensor b_n({n}, t::f32());
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, b_n.t(), out2.t()) ==
          Q4_ERR_SHAPE);
    CHECK(named("bias"));
    Tensor s4({e_count, n, k / 32}, t::e4m3());
    CHECK(call(x.t(), q.t(), s4.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_DTYPE);
    CHECK(call(x.t(), q.t(), s.t(), 9, ex.data(), rows.data(), 2, nullptr, out2.t()) ==
          Q4_ERR_INVALID_ARGUMENT);
  }
  SECTION("aliasing, options, devices") {
    DLTensor alias = *out2.t();
    alias.data = x.data();
    CHECK(call(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, &alias) ==
          Q4_ERR_ALIASING);
    Q4_op_options o{};
    Q4_op_options_init(&o);
    o.backend = Q4_BACKEND_NF4_KERNEL;
    CHECK(MXFP4_linear_experts(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr,
                               out2.t(), &o) == Q4_ERR_UNSUPPORTED);
    DLTensor cx = *x.t(), cq = *q.t(), cs = *s.t(), co = *out2.t();
    cx.device = cq.device = cs.device = co.device = DLDevice{kDLCUDA, 0};
    const int32_t rc = call(&cx, &cq, &cs, Q4_SCALE_LINEAR, ex.data(), rows.data(), 2, nullptr, &co);
    CHECK(rc != Q4_ERR_UNSUPPORTED);  // the CUDA backend's answer (no device here: not available)
    if (rc != Q4_OK) CHECK(std::string(Q4_last_error()).find("CUDA") != std::string::npos);
  }
  CHECK(out2.snapshot() == before2);
}

// ---------------------------------------------------------------------------
// Sessions and linears with MXFP4 weights (fp32 decode + GEMM on the CPU).
// ---------------------------------------------------------------------------
namespace {

struct MxSession {
  Q4_session* s = nullptr;
  explicit MxSession(const Q4_session_config* c = t::cpu_session()) {
    REQUIRE(Q4_session_create(c, &s) == Q4_OK);
  }
  ~MxSession() { Q4_session_destroy(s); }
};

Q4_weight_bundle mx_bundle(const DLTensor* weight, const DLTensor* scale, int64_t n, int64_t k,
                           const DLTensor* bias) {
  Q4_weight_bundle b{};
  Q4_weight_bundle_init(&b);
  b.format = Q4_FORMAT_MXFP4;
  b.source = Q4_WEIGHT_PACKED;
  b.scale_layout = Q4_SCALE_LINEAR;
  b.weight = weight;
  b.scale = scale;
  b.out_features = n;
  b.in_features = k;
  b.bias = bias;
  return b;
}

}  // namespace

TEST_CASE("MXFP4 linears: packed, swizzled and float bundles forward like MXFP4_linear", "[session][mxfp4]") {
  const int64_t n = 20, k = 128, m = 5;
  Tensor w = t::random_float({n, k}, t::f32(), 61);
  Tensor q({n, k / 2}, t::u8()), s({n, k / 32}, t::u8()), sw({swizzled_mx_bytes(n, k)}, t::u8());
  REQUIRE(MXFP4_quantize(w.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  REQUIRE(NVFP4_swizzle_scales(s.t(), sw.t()) == Q4_OK);
  Tensor bias = t::random_float({n}, t::f32(), 62);
  Tensor x = t::random_float({m, k}, t::bf16(), 63);
  Tensor ref({m, n}, t::f32());
  REQUIRE(MXFP4_linear(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, bias.t(), ref.t(), nullptr) == Q4_OK);
  MxSession ses;
  for (int variant = 0; variant < 3; ++variant) {
    Q4_weight_bundle b = mx_bundle(q.t(), s.t(), n, k, bias.t());
    if (variant == 1) {
      b.scale = sw.t();
      b.scale_layout = Q4_SCALE_SWIZZLED;
    } else if (variant == 2) {  // float source: quantized by the library
      b.source = Q4_WEIGHT_FLOAT;
      b.weight = w.t();
      b.scale = nullptr;
      b.out_features = b.in_features = 0;
    }
    Q4_linear* lin = nullptr;
    REQUIRE(Q4_linear_create(ses.s, &b, &lin) == Q4_OK);
    Tensor out({m, n}, t::f32());
    REQUIRE(Q4_linear_forward(lin, x.t(), out.t()) == Q4_OK);
    CHECK(std::memcmp(out.data(), ref.data(), static_cast<size_t>(m * n * 4)) == 0);
    Q4_linear_info info{};
    info.struct_size = sizeof info;
    REQUIRE(Q4_linear_info_get(lin, &info) == Q4_OK);
    CHECK(info.format == Q4_FORMAT_MXFP4);
    CHECK(info.backend == Q4_BACKEND_NVFP4_KERNEL);  // the E2M1 kernels
    CHECK(info.fell_back == 0);
    CHECK(info.out_features == n);
    CHECK(info.in_features == k);
    char buf[4096];
    size_t need = 0;
    REQUIRE(Q4_session_diagnostics(ses.s, buf, sizeof buf, &need) == Q4_OK);
    CHECK(std::string(buf).find("\"mxfp4\"") != std::string::npos);
    // An update keeps the format and shape; another MXFP4 weight is taken.
    Tensor w2 = t::random_float({n, k}, t::f32(), 64);
    Tensor q2({n, k / 2}, t::u8()), s2({n, k / 32}, t::u8());
    REQUIRE(MXFP4_quantize(w2.t(), q2.t(), s2.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
    Q4_weight_bundle b2 = mx_bundle(q2.t(), s2.t(), n, k, nullptr);
    REQUIRE(Q4_linear_update_weight(lin, &b2) == Q4_OK);
    Tensor ref2({m, n}, t::f32());
    REQUIRE(MXFP4_linear(x.t(), q2.t(), s2.t(), Q4_SCALE_LINEAR, nullptr, ref2.t(), nullptr) == Q4_OK);
    REQUIRE(Q4_linear_forward(lin, x.t(), out.t()) == Q4_OK);
    CHECK(std::memcmp(out.data(), ref2.data(), static_cast<size_t>(m * n * 4)) == 0);
    Q4_weight_bundle nv = b2;
    nv.format = Q4_FORMAT_NVFP4;
    CHECK(Q4_linear_update_weight(lin, &nv) == Q4_ERR_INVALID_ARGUMENT);
    REQUIRE(Q4_linear_destroy(lin) == Q4_OK);
  }
}

TEST_CASE("MXFP4 linears: bad bundles and settings MXFP4 cannot run are refused", "[session][mxfp4]") {
  const int64_t n = 8, k = 64;
  Tensor q({n, k / 2}, t::u8()), s({n, k / 32}, t::u8()), s4({n, k / 32}, t::e4m3());
  std::memset(q.data(), 0x21, static_cast<size_t>(n * k / 2));
  std::memset(s.data(), 127, static_cast<size_t>(n * k / 32));
  MxSession ses;
  Q4_linear* lin = nullptr;
  auto named = [](const char* what) { return std::string(Q4_last_error()).find(what) != std::string::npos; };
  Q4_weight_bundle b = mx_bundle(q.t(), s4.t(), n, k, nullptr);
  CHECK(Q4_linear_create(ses.s, &b, &lin) == Q4_ERR_DTYPE);
  CHECK(named("weight->scale"));
  b = mx_bundle(q.t(), s.t(), n, 48, nullptr);
  CHECK(Q4_linear_create(ses.s, &b, &lin) == Q4_ERR_SHAPE);
  CHECK(named("multiple of 32"));
  b = mx_bundle(q.t(), s.t(), n, k, nullptr);
  b.scale_layout = Q4_SCALE_SWIZZLED;
  CHECK(Q4_linear_create(ses.s, &b, &lin) == Q4_ERR_SHAPE);
  CHECK(named("weight->scale"));
  Q4_session_config cfg{};
  Q4_session_config_init(&cfg);
  cfg.target = Q4_TARGET_CPU;
  cfg.compute_path = Q4_PATH_KERNEL_ONLY;
  MxSession kernel_only(&cfg);
  b = mx_bundle(q.t(), s.t(), n, k, nullptr);
  REQUIRE(Q4_linear_create(kernel_only.s, &b, &lin) == Q4_OK);  // in the window: the E2M1 kernels
  Q4_linear_destroy(lin);
  lin = nullptr;
  s.data()[3] = 0xff;  // a NaN scale (row 1, block 1): refused by every session, naming it
  CHECK(Q4_linear_create(kernel_only.s, &b, &lin) == Q4_ERR_INVALID_ARGUMENT);
  CHECK(named("weight->scale"));
  CHECK(named("NaN"));
  CHECK(named("row 1, block 1"));
  CHECK(Q4_linear_create(ses.s, &b, &lin) == Q4_ERR_INVALID_ARGUMENT);
  CHECK(lin == nullptr);
  s.data()[3] = 127;
  Q4_session_config_init(&cfg);
  cfg.target = Q4_TARGET_CPU;
  cfg.backend = Q4_BACKEND_NF4_KERNEL;
  MxSession nf4(&cfg);
  CHECK(Q4_linear_create(nf4.s, &b, &lin) == Q4_ERR_UNSUPPORTED);
  CHECK(lin == nullptr);
  REQUIRE(Q4_linear_create(ses.s, &b, &lin) == Q4_OK);  // the default session takes it
  Q4_linear_destroy(lin);
}

TEST_CASE("Q4_checkpoint_linear_create loads gpt-oss MXFP4 linears (both namings), refuses expert stacks",
          "[checkpoint][mxfp4]") {
  const int64_t n = 16, k = 64, m = 3;
  Tensor w = t::random_float({1, n, k}, t::f32(), 71);
  Tensor blocks({1, n, k / 32, 16}, t::u8()), scales({1, n, k / 32}, t::u8());
  REQUIRE(MXFP4_quantize(w.t(), blocks.t(), scales.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  Tensor bias = t::random_float({1, n}, t::f32(), 72);
  Tensor stack({3, n, k / 2}, t::u8()), stack_s({3, n, k / 32}, t::u8());
  std::memset(stack.data(), 0, static_cast<size_t>(3 * n * k / 2));
  std::memset(stack_s.data(), 127, static_cast<size_t>(3 * n * k / 32));
  const std::string path = "/tmp/nvfp4-test-" + std::to_string(::getpid()) + "-mxfp4.safetensors";
  Q4_checkpoint_writer* wr = nullptr;
  REQUIRE(Q4_checkpoint_writer_create(&wr) == Q4_OK);
  REQUIRE(Q4_checkpoint_writer_add(wr, "block.0.mlp.mlp1_weight.blocks", Q4_DTYPE_U8, blocks.t()) == Q4_OK);
  REQUIRE(Q4_checkpoint_writer_add(wr, "block.0.mlp.mlp1_weight.scales", Q4_DTYPE_U8, scales.t()) == Q4_OK);
  REQUIRE(Q4_checkpoint_writer_add(wr, "block.0.mlp.mlp1_bias", Q4_DTYPE_F32, bias.t()) == Q4_OK);
  REQUIRE(Q4_checkpoint_writer_add(wr, "model.experts.down_proj_blocks", Q4_DTYPE_U8, blocks.t()) == Q4_OK);
  REQUIRE(Q4_checkpoint_writer_add(wr, "model.experts.down_proj_scales", Q4_DTYPE_U8, scales.t()) == Q4_OK);
  REQUIRE(Q4_checkpoint_writer_add(wr, "model.experts.gate_up_proj_blocks", Q4_DTYPE_U8, stack.t()) == Q4_OK);
  REQUIRE(Q4_checkpoint_writer_add(wr, "model.experts.gate_up_proj_scales", Q4_DTYPE_U8, stack_s.t()) ==
          Q4_OK);
  REQUIRE(Q4_checkpoint_writer_commit(wr, path.c_str()) == Q4_OK);
  Q4_checkpoint_writer_destroy(wr);
  Q4_checkpoint* cp = nullptr;
  REQUIRE(Q4_checkpoint_open(path.c_str(), &cp) == Q4_OK);
  MxSession ses;
  Tensor x = t::random_float({m, k}, t::f32(), 73);
  int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 32};
  DLTensor q2 = *blocks.t(), s2 = *scales.t();
  q2.ndim = s2.ndim = 2;
  q2.shape = qs;
  s2.shape = ss;
  int64_t bs[1] = {n};
  DLTensor b1 = *bias.t();
  b1.ndim = 1;
  b1.shape = bs;
  for (const char* prefix : {"block.0.mlp.mlp1_weight", "model.experts.down_proj"}) {
    const bool with_bias = std::string(prefix).find("mlp1") != std::string::npos;
    Q4_linear* lin = nullptr;
    REQUIRE(Q4_checkpoint_linear_create(ses.s, cp, prefix, &lin) == Q4_OK);
    Tensor out({m, n}, t::f32()), ref({m, n}, t::f32());
    REQUIRE(Q4_linear_forward(lin, x.t(), out.t()) == Q4_OK);
    REQUIRE(MXFP4_linear(x.t(), &q2, &s2, Q4_SCALE_LINEAR, with_bias ? &b1 : nullptr, ref.t(), nullptr) ==
            Q4_OK);
    CHECK(std::memcmp(out.data(), ref.data(), static_cast<size_t>(m * n * 4)) == 0);
    Q4_linear_destroy(lin);
  }
  Q4_linear* lin = nullptr;
  CHECK(Q4_checkpoint_linear_create(ses.s, cp, "model.experts.gate_up_proj", &lin) == Q4_ERR_UNSUPPORTED);
  CHECK(std::string(Q4_last_error()).find("MXFP4_linear_experts") != std::string::npos);
  Q4_checkpoint_close(cp);
  std::remove(path.c_str());
}

// ---------------------------------------------------------------------------
// Products on the E2M1 kernels (docs/formats.md, "MXFP4 on the E2M1
// kernels"): an MXFP4 weight whose scales fit 18 binades is the NVFP4
// weight (same codes, E4M3 scales 2^(e-127-t) twice per block, global 2^t,
// t = max(e_max - 135, -126)), so every product equals NVFP4's on the same
// table, bit for bit, and is within NVFP4's bound of the fp64 reference.
// ---------------------------------------------------------------------------
namespace {

// The E4M3 byte whose value is 2^p (searched over the codes, decoded here).
uint8_t e4m3_byte_of_pow2(int p) {
  for (int b = 0; b < 127; ++b) {
    const int ex = (b >> 3) & 15, man = b & 7;
    const double v = ex == 0 ? man * std::ldexp(1.0, -9) : (1 + man / 8.0) * std::ldexp(1.0, ex - 7);
    if (v == std::ldexp(1.0, p)) return static_cast<uint8_t>(b);
  }
  FAIL("2^" << p << " is not an E4M3 value");
  return 0;
}

// An MXFP4 weight [n, k] of random codes with scale bytes in [lo, hi] (lo
// and hi both used), and its NVFP4 twin (s16, g).
struct MxWeight {
  int64_t n, k;
  Tensor q, s, s16;
  float g = 1;
  int t = 0;
  MxWeight(int64_t n_, int64_t k_, int lo, int hi, uint32_t seed)
      : n(n_), k(k_), q({n_, k_ / 2}, t::u8()), s({n_, k_ / 32}, t::u8()), s16({n_, k_ / 16}, t::u8()) {
    std::mt19937 rng(seed);
    for (int64_t i = 0; i < n * k / 2; ++i) q.data()[i] = static_cast<uint8_t>(rng());
    for (int64_t i = 0; i < n * k / 32; ++i) s.data()[i] = static_cast<uint8_t>(lo + rng() % (hi - lo + 1));
    s.data()[0] = static_cast<uint8_t>(lo);
    s.data()[n * k / 32 - 1] = static_cast<uint8_t>(hi);
    twin();
  }
  void twin() {
    int hi = -1;
    for (int64_t i = 0; i < n * k / 32; ++i) {
      bool zero = true;
      for (int j = 0; j < 16; ++j) zero = zero && (q.data()[i * 16 + j] & 0x77) == 0;
      if (!zero) hi = std::max(hi, static_cast<int>(s.data()[i]));
    }
    t = hi < 0 ? 0 : std::max(hi - 135, -126);
    g = static_cast<float>(std::ldexp(1.0, t));
    for (int64_t i = 0; i < n * k / 32; ++i) {
      const int p = s.data()[i] - 127 - t;
      const uint8_t b = p < -9 ? 0 : e4m3_byte_of_pow2(p);  // (below: a zero-code block)
      s16.data()[2 * i] = s16.data()[2 * i + 1] = b;
    }
  }
  double w(int64_t j, int64_t kk) const { return w_value(q.data(), s.data(), k, j, kk); }
};

Q4_op_options opts_with(int32_t path, int32_t math) {
  Q4_op_options o{};
  Q4_op_options_init(&o);
  o.compute_path = path;
  o.math_mode = math;
  return o;
}

size_t bound_violations(const Tensor& x, const Tensor& y, int64_t m, const MxWeight& w) {
  size_t bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < w.n; ++j) {
      double acc = 0, mag = 0;
      for (int64_t kk = 0; kk < w.k; ++kk) {
        const double p = static_cast<double>(x.get(i * w.k + kk)) * w.w(j, kk);
        acc += p;
        mag += std::fabs(p);
      }
      const double bound = (static_cast<double>(w.k) + 16.0) * std::ldexp(1.0, -24) * mag +
                           std::ldexp(1.0, -24) * std::fabs(acc);
      bad += std::fabs(y.get(i * w.n + j) - acc) > bound + 1e-30 ? 1 : 0;
    }
  }
  return bad;
}

}  // namespace

TEST_CASE(
    "MXFP4_linear on the E2M1 kernels: NVFP4's bits on every table, all M classes and activation "
    "types, within the NVFP4 bound",
    "[ops][mxfp4][kernels]") {
  const int64_t n = 40, k = 256;
  MxWeight w(n, k, 110, 127, 71);  // 18 binades
  const Q4_op_options exact = opts_with(Q4_PATH_KERNEL_ONLY, Q4_MATH_EXACT);
  const Q4_op_options fast = opts_with(Q4_PATH_KERNEL_ONLY, Q4_MATH_FAST);
  for (int32_t isa : t::runnable_isas()) {
    t::IsaCap cap(isa);
    for (int64_t m : {1, 4, 9, 33, 65, 300}) {
      for (DLDataType dt : {t::f32(), t::f16(), t::bf16()}) {
        INFO("isa " << isa << " m " << m << " dtype bits " << int(dt.bits) << " code " << int(dt.code));
        Tensor x = t::random_float({m, k}, dt, static_cast<uint32_t>(m + isa));
        for (const Q4_op_options* o : {&exact, &fast}) {
          Tensor y({m, n}, t::f32()), ynv({m, n}, t::f32());
          REQUIRE(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), o) == Q4_OK);
          REQUIRE(NVFP4_linear(x.t(), w.q.t(), w.s16.t(), Q4_SCALE_LINEAR, w.g, nullptr, ynv.t(), o) ==
                  Q4_OK);
          CHECK(std::memcmp(y.data(), ynv.data(), static_cast<size_t>(m * n * 4)) == 0);
          if (o == &exact && (m == 1 || m == 9 || m == 65)) CHECK(bound_violations(x, y, m, w) == 0);
        }
      }
    }
  }
}

TEST_CASE(
    "MXFP4_linear at GEMV sizes reads its E8M0 scales in place: NVFP4's bits on every table and thread "
    "count, linear and swizzled",
    "[ops][mxfp4][kernels]") {
  // The stateless products keep the E8M0 bytes (the AVX-512 GEMVs read them
  // in place, the others get E4M3 codes made per piece of rows: the kernel
  // tests cross those pieces); N not a multiple of 16, subnormal E4M3 codes
  // (18 binades) and all-normal ones, K % 128 == 0 and not, every table.
  struct Shape {
    int64_t n, k;
    int lo, hi;
  };
  for (const Shape& sh : {Shape{300, 4096, 110, 127}, Shape{200, 1152, 120, 125}, Shape{333, 96, 118, 126}}) {
    MxWeight w(sh.n, sh.k, sh.lo, sh.hi, static_cast<uint32_t>(sh.n + sh.k));
    const int64_t sw_bytes = swizzled_mx_bytes(sh.n, sh.k);
    Tensor sw({sw_bytes}, t::u8());
    DLTensor s_u8 = *w.s.t();
    REQUIRE(NVFP4_swizzle_scales(&s_u8, sw.t()) == Q4_OK);
    const auto s_before = w.s.snapshot();
    for (int32_t isa : t::runnable_isas()) {
      t::IsaCap cap(isa);
      for (int64_t m : {1, 5, 16}) {
        Tensor x = t::random_float({m, sh.k}, t::f32(), static_cast<uint32_t>(m * 7 + isa));
        for (int32_t math : {Q4_MATH_EXACT, Q4_MATH_FAST}) {
          for (int32_t threads : {1, 3}) {
            INFO("n " << sh.n << " k " << sh.k << " isa " << isa << " m " << m << " math " << math
                      << " threads " << threads);
            Q4_op_options o = opts_with(Q4_PATH_KERNEL_ONLY, math);
            o.num_threads = threads;
            Tensor y({m, sh.n}, t::f32()), ysw({m, sh.n}, t::f32()), ynv({m, sh.n}, t::f32());
            REQUIRE(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), &o) == Q4_OK);
            REQUIRE(MXFP4_linear(x.t(), w.q.t(), sw.t(), Q4_SCALE_SWIZZLED, nullptr, ysw.t(), &o) == Q4_OK);
            REQUIRE(NVFP4_linear(x.t(), w.q.t(), w.s16.t(), Q4_SCALE_LINEAR, w.g, nullptr, ynv.t(), &o) ==
                    Q4_OK);
            CHECK(std::memcmp(y.data(), ynv.data(), static_cast<size_t>(m * sh.n * 4)) == 0);
            CHECK(std::memcmp(ysw.data(), ynv.data(), static_cast<size_t>(m * sh.n * 4)) == 0);
          }
        }
      }
    }
    CHECK(w.s.snapshot() == s_before);  // the caller's E8M0 bytes untouched
  }
}

TEST_CASE(
    "MXFP4_scaled_mm on the E2M1 kernels: NVFP4_scaled_mm's bits with alpha * 2^(ta+tb), identical "
    "across tables",
    "[ops][mxfp4][kernels]") {
  const int64_t n = 24, k = 128;
  MxWeight b(n, k, 100, 117, 81);
  std::map<int64_t, std::vector<uint8_t>> first_mx, first_nv;
  for (int32_t isa : t::runnable_isas()) {
    t::IsaCap cap(isa);
    for (int64_t m : {1, 9, 65}) {
      MxWeight a(m, k, 120, 130, static_cast<uint32_t>(82 + m));
      Tensor y({m, n}, t::f32()), ynv({m, n}, t::f32());
      const float alpha = 0.75f;
      REQUIRE(MXFP4_scaled_mm(a.q.t(), a.s.t(), b.q.t(), b.s.t(), Q4_SCALE_LINEAR, alpha, nullptr, y.t(),
                              nullptr) == Q4_OK);
      REQUIRE(NVFP4_scaled_mm(a.q.t(), a.s16.t(), b.q.t(), b.s16.t(), Q4_SCALE_LINEAR, alpha * a.g * b.g,
                              nullptr, ynv.t(), nullptr) == Q4_OK);
      CHECK(std::memcmp(y.data(), ynv.data(), static_cast<size_t>(m * n * 4)) == 0);
      // Identical across tables exactly where NVFP4's are (W4A4 on the
      // integer tables: one fixed order).
      const std::vector<uint8_t> mx(y.data(), y.data() + m * n * 4), nv(ynv.data(), ynv.data() + m * n * 4);
      if (first_mx.count(m) == 0) {
        first_mx[m] = mx;
        first_nv[m] = nv;
      }
      CHECK((mx == first_mx[m]) == (nv == first_nv[m]));
    }
  }
}

TEST_CASE("MXFP4_linear_experts and MXFP4 linears run the E2M1 kernels (bits of MXFP4_linear)",
          "[ops][mxfp4][moe][session]") {
  const int64_t e_count = 3, n = 16, k = 64, tokens = 10;
  MxWeight w(e_count * n, k, 118, 130, 91);
  const std::vector<int32_t> ex = {2, 0, 2};
  const std::vector<int64_t> rows = {3, 5, 2};
  Tensor x = t::random_float({tokens, k}, t::bf16(), 92), out({tokens, n}, t::f32());
  const Q4_op_options o = opts_with(Q4_PATH_KERNEL_ONLY, Q4_MATH_EXACT);
  DLTensor q3 = *w.q.t(), s3 = *w.s.t();
  int64_t qshape[3] = {e_count, n, k / 2}, sshape[3] = {e_count, n, k / 32};
  q3.ndim = s3.ndim = 3;
  q3.shape = qshape;
  s3.shape = sshape;
  REQUIRE(MXFP4_linear_experts(x.t(), &q3, &s3, Q4_SCALE_LINEAR, ex.data(), rows.data(), 3, nullptr, out.t(),
                               &o) == Q4_OK);
  int64_t r0 = 0;
  for (size_t g = 0; g < ex.size(); ++g) {
    Tensor xg({rows[g], k}, t::bf16()), yg({rows[g], n}, t::f32());
    std::memcpy(xg.data(), x.data() + r0 * k * 2, static_cast<size_t>(rows[g] * k * 2));
    DLTensor qe = *w.q.t(), se = *w.s.t();
    int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 32};
    qe.shape = qs;
    se.shape = ss;
    qe.byte_offset = static_cast<uint64_t>(ex[g] * n * k / 2);
    se.byte_offset = static_cast<uint64_t>(ex[g] * n * k / 32);
    REQUIRE(MXFP4_linear(xg.t(), &qe, &se, Q4_SCALE_LINEAR, nullptr, yg.t(), &o) == Q4_OK);
    CHECK(std::memcmp(yg.data(), out.data() + r0 * n * 4, static_cast<size_t>(rows[g] * n * 4)) == 0);
    r0 += rows[g];
  }
  // A linear of the whole stack as one [E*N, K] weight, fast math: the bits
  // of MXFP4_linear fast.
  Q4_session_config cfg{};
  Q4_session_config_init(&cfg);
  cfg.target = Q4_TARGET_CPU;
  cfg.math_mode = Q4_MATH_FAST;
  MxSession ses(&cfg);
  Q4_weight_bundle b = mx_bundle(w.q.t(), w.s.t(), e_count * n, k, nullptr);
  Q4_linear* lin = nullptr;
  REQUIRE(Q4_linear_create(ses.s, &b, &lin) == Q4_OK);
  Tensor y({tokens, e_count * n}, t::f32()), ref({tokens, e_count * n}, t::f32());
  REQUIRE(Q4_linear_forward(lin, x.t(), y.t()) == Q4_OK);
  const Q4_op_options fo = opts_with(Q4_PATH_AUTO, Q4_MATH_FAST);
  REQUIRE(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, ref.t(), &fo) == Q4_OK);
  CHECK(std::memcmp(y.data(), ref.data(), static_cast<size_t>(tokens * e_count * n * 4)) == 0);
  Q4_linear_destroy(lin);
}

TEST_CASE("MXFP4 window edges: 18 binades fit, 19 fall back, NaN refused, zero-code blocks",
          "[ops][mxfp4][kernels]") {
  const int64_t n = 8, k = 64, m = 3;
  Tensor x = t::random_float({m, k}, t::f32(), 101);
  const Q4_op_options only = opts_with(Q4_PATH_KERNEL_ONLY, Q4_MATH_EXACT);
  const Q4_op_options dq = opts_with(Q4_PATH_DEQUANT_MATMUL_ONLY, Q4_MATH_EXACT);
  auto named = [](const char* what) { return std::string(Q4_last_error()).find(what) != std::string::npos; };
  SECTION("exactly 18 binades (and tiny scales near 2^-127) run on the kernels") {
    for (auto lohi : {std::pair<int, int>{100, 117}, {0, 17}, {220, 237}, {3, 9}}) {
      MxWeight w(n, k, lohi.first, lohi.second, 102);
      Tensor y({m, n}, t::f32()), ynv({m, n}, t::f32());
      REQUIRE(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), &only) == Q4_OK);
      REQUIRE(NVFP4_linear(x.t(), w.q.t(), w.s16.t(), Q4_SCALE_LINEAR, w.g, nullptr, ynv.t(), &only) ==
              Q4_OK);
      CHECK(std::memcmp(y.data(), ynv.data(), static_cast<size_t>(m * n * 4)) == 0);
    }
  }
  SECTION("19 binades: KernelOnly fails naming the reason, auto falls back to the fp32 decode") {
    MxWeight w(n, k, 100, 118, 103);
    w.q.data()[0] |= 0x01;  // block 0 (scale 2^-27) has a nonzero code
    Tensor y({m, n}, t::f32()), yd({m, n}, t::f32());
    CHECK(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), &only) ==
          Q4_ERR_UNSUPPORTED);
    CHECK(named("KernelOnly"));
    CHECK(named("binades"));
    CHECK(named("row 0, block 0"));
    REQUIRE(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), nullptr) == Q4_OK);
    REQUIRE(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, yd.t(), &dq) == Q4_OK);
    CHECK(std::memcmp(y.data(), yd.data(), static_cast<size_t>(m * n * 4)) == 0);
    // A linear in an auto session records the fallback.
    MxSession ses;
    Q4_weight_bundle b = mx_bundle(w.q.t(), w.s.t(), n, k, nullptr);
    Q4_linear* lin = nullptr;
    REQUIRE(Q4_linear_create(ses.s, &b, &lin) == Q4_OK);
    Q4_linear_info info{};
    info.struct_size = sizeof info;
    REQUIRE(Q4_linear_info_get(lin, &info) == Q4_OK);
    CHECK(info.fell_back == 1);
    CHECK(info.backend == Q4_BACKEND_DEQUANT_MATMUL);
    char buf[4096];
    size_t need = 0;
    REQUIRE(Q4_linear_diagnostics(lin, buf, sizeof buf, &need) == Q4_OK);
    CHECK(std::string(buf).find("binades") != std::string::npos);
    REQUIRE(Q4_linear_forward(lin, x.t(), y.t()) == Q4_OK);
    CHECK(std::memcmp(y.data(), yd.data(), static_cast<size_t>(m * n * 4)) == 0);
    // An update into the window clears it.
    MxWeight w2(n, k, 110, 120, 104);
    Q4_weight_bundle b2 = mx_bundle(w2.q.t(), w2.s.t(), n, k, nullptr);
    REQUIRE(Q4_linear_update_weight(lin, &b2) == Q4_OK);
    REQUIRE(Q4_linear_info_get(lin, &info) == Q4_OK);
    CHECK(info.fell_back == 0);
    CHECK(info.backend == Q4_BACKEND_NVFP4_KERNEL);
    Q4_linear_destroy(lin);
  }
  SECTION("a block outside the window whose codes are all +-0 takes scale 0 and stays on the kernels") {
    MxWeight w(n, k, 100, 130, 105);
    // Every block below 2^(130-127-17) gets zero codes (+0 and -0 mixed).
    for (int64_t i = 0; i < n * k / 32; ++i) {
      if (w.s.data()[i] < 113) {
        for (int j = 0; j < 16; ++j) w.q.data()[i * 16 + j] = static_cast<uint8_t>(j & 1 ? 0x80 : 0x08);
      }
    }
    w.twin();
    Tensor y({m, n}, t::f32()), ynv({m, n}, t::f32());
    REQUIRE(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), &only) == Q4_OK);
    REQUIRE(NVFP4_linear(x.t(), w.q.t(), w.s16.t(), Q4_SCALE_LINEAR, w.g, nullptr, ynv.t(), &only) == Q4_OK);
    CHECK(std::memcmp(y.data(), ynv.data(), static_cast<size_t>(m * n * 4)) == 0);
    CHECK(bound_violations(x, y, m, w) == 0);
    // All-zero weight: every block zero codes, any scales.
    std::memset(w.q.data(), 0, static_cast<size_t>(n * k / 2));
    w.s.data()[1] = 0;
    REQUIRE(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), &only) == Q4_OK);
    for (int64_t i = 0; i < m * n; ++i) CHECK(y.get(i) == 0.0f);
  }
  SECTION("a NaN scale: every product refuses it, naming the block; nothing written") {
    MxWeight w(n, k, 120, 125, 106);
    w.s.data()[5] = 0xff;  // row 2, block 1
    Tensor y({m, n}, t::f32());
    const auto before = y.snapshot();
    const Q4_op_options* const option_sets[2] = {&only, nullptr};
    for (const Q4_op_options* o : option_sets) {
      CHECK(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), o) ==
            Q4_ERR_INVALID_ARGUMENT);
      CHECK(named("w_scale"));
      CHECK(named("NaN"));
      CHECK(named("row 2, block 1"));
      CHECK(y.snapshot() == before);
      Tensor a_out({n, n}, t::f32());
      CHECK(MXFP4_scaled_mm(w.q.t(), w.s.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, 1.0f, nullptr, a_out.t(),
                            o) == Q4_ERR_INVALID_ARGUMENT);
      CHECK(named("a_scale"));
    }
    // Swizzled: the same block found through the layout; 0xFF in the
    // padding (not a scale) is not refused.
    const int64_t cols = k / 32, sw_bytes = swizzled_mx_bytes(n, k);
    Tensor sw({sw_bytes}, t::u8()), mark({sw_bytes}, t::u8()), ones({n, cols}, t::u8());
    DLTensor s_u8 = *w.s.t();
    s_u8.dtype = t::u8();
    REQUIRE(NVFP4_swizzle_scales(&s_u8, sw.t()) == Q4_OK);
    CHECK(MXFP4_linear(x.t(), w.q.t(), sw.t(), Q4_SCALE_SWIZZLED, nullptr, y.t(), nullptr) ==
          Q4_ERR_INVALID_ARGUMENT);
    CHECK(named("row 2, block 1"));
    w.s.data()[5] = 125;
    REQUIRE(NVFP4_swizzle_scales(&s_u8, sw.t()) == Q4_OK);
    std::memset(ones.data(), 1, static_cast<size_t>(n * cols));
    std::memset(mark.data(), 0, static_cast<size_t>(sw_bytes));
    REQUIRE(NVFP4_swizzle_scales(ones.t(), mark.t()) == Q4_OK);  // 1 where a scale lives
    int64_t padding = 0;
    for (int64_t i = 0; i < sw_bytes; ++i) {
      if (mark.data()[i] == 0) {
        sw.data()[i] = 0xff;
        ++padding;
      }
    }
    CHECK(padding == sw_bytes - n * cols);
    CHECK(padding > 0);
    CHECK(MXFP4_linear(x.t(), w.q.t(), sw.t(), Q4_SCALE_SWIZZLED, nullptr, y.t(), nullptr) == Q4_OK);
  }
}

TEST_CASE("MXFP4 scale passes in several tasks: the first NaN, the first block outside the window",
          "[ops][mxfp4][kernels]") {
  // 2048 x 2048: 64 scale bytes a row, 128 KiB in all, so the passes over
  // the scales run in tasks of 1024 rows (64 KiB each) and the findings
  // below lie in the second one.
  const int64_t n = 2048, k = 2048, m = 2, cols = k / 32;
  Tensor x = t::random_float({m, k}, t::f32(), 111);
  const Q4_op_options only = opts_with(Q4_PATH_KERNEL_ONLY, Q4_MATH_EXACT);
  auto named = [](const char* what) { return std::string(Q4_last_error()).find(what) != std::string::npos; };
  SECTION("in the window: the bits of NVFP4 with the E4M3 twin") {
    MxWeight w(n, k, 110, 125, 112);
    Tensor y({m, n}, t::f32()), ynv({m, n}, t::f32());
    REQUIRE(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), &only) == Q4_OK);
    REQUIRE(NVFP4_linear(x.t(), w.q.t(), w.s16.t(), Q4_SCALE_LINEAR, w.g, nullptr, ynv.t(), &only) == Q4_OK);
    CHECK(std::memcmp(y.data(), ynv.data(), static_cast<size_t>(m * n * 4)) == 0);
  }
  SECTION("two NaN scales: the first is named") {
    MxWeight w(n, k, 110, 125, 113);
    w.s.data()[1500 * cols + 7] = 0xff;
    w.s.data()[1700 * cols + 3] = 0xff;
    Tensor y({m, n}, t::f32());
    CHECK(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), &only) ==
          Q4_ERR_INVALID_ARGUMENT);
    CHECK(named("NaN"));
    CHECK(named("row 1500, block 7"));
  }
  SECTION("20 binades: the first nonzero block outside the window is named") {
    MxWeight w(n, k, 110, 125, 114);
    for (int64_t r : {1200, 1900}) {
      w.s.data()[r * cols + 5] = 106;
      w.q.data()[(r * cols + 5) * 16] |= 0x01;  // a nonzero code in the block
    }
    Tensor y({m, n}, t::f32());
    CHECK(MXFP4_linear(x.t(), w.q.t(), w.s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), &only) ==
          Q4_ERR_UNSUPPORTED);
    CHECK(named("binades"));
    CHECK(named("row 1200, block 5"));
  }
}

TEST_CASE("MXFP4 -> NVFP4 scale mapping: the vectorizable form equals the reference for every byte and t",
          "[ops][mxfp4]") {
  size_t bad = 0;
  for (int32_t t = -126; t <= 260; ++t) {
    for (uint32_t e = 0; e < 255; ++e) {  // 0xFF (NaN) is refused before the mapping
      const int32_t want = q4::fmt::mx_nv_scale_byte(e, t);
      const uint8_t got = q4::fmt::mx_nv_scale_byte_u8(static_cast<uint8_t>(e), t);
      if ((want < 0 ? 0xff : want) != got) ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("every ISA variant: MXFP4_quantize is bit-identical to the scalar table and the oracle",
          "[kernels][mxfp4]") {
  // varied_input's blocks (zeros, ties, subnormal and near-FLT_MAX maxima)
  // on every table; 37 x 160 leaves tail blocks after the kernels' groups
  // of 4 or 16, 40 x 4096 runs in several tasks.
  for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{37, 160}, {40, 4096}}) {
    for (DLDataType dt : {t::f32(), t::f16(), t::bf16()}) {
      Tensor x = varied_input(rows, k, dt, static_cast<uint32_t>(k + dt.code));
      std::vector<uint8_t> oq, os;
      oracle_quantize(x, rows, k, oq, os);
      Tensor q0({rows, k / 2}, t::u8()), s0({rows, k / 32}, t::u8());
      {
        t::IsaCap scalar(Q4_ISA_SCALAR);
        REQUIRE(MXFP4_quantize(x.t(), q0.t(), s0.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
      }
      CHECK(std::vector<uint8_t>(q0.data(), q0.data() + oq.size()) == oq);
      CHECK(std::vector<uint8_t>(s0.data(), s0.data() + os.size()) == os);
      for (int32_t isa : t::runnable_isas()) {
        t::IsaCap cap(isa);
        INFO("isa " << Q4_isa_name(isa) << " " << rows << "x" << k << " dtype code " << int(dt.code)
                    << " bits " << int(dt.bits));
        Q4_op_options o{};
        Q4_op_options_init(&o);
        o.num_threads = 2;
        Tensor q({rows, k / 2}, t::u8()), s({rows, k / 32}, t::u8());
        REQUIRE(MXFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, &o) == Q4_OK);
        CHECK(Q4_last_isa_used() == isa);
        CHECK(std::memcmp(q.data(), q0.data(), static_cast<size_t>(rows * k / 2)) == 0);
        CHECK(std::memcmp(s.data(), s0.data(), static_cast<size_t>(rows * k / 32)) == 0);
      }
    }
  }
}

TEST_CASE("every ISA variant: MXFP4_quantize reports the first NaN/Inf and writes nothing",
          "[kernels][mxfp4]") {
  // The finite check rides on the kernels' block maxima: NaN, +Inf and -Inf
  // inside the vector groups and in the tail blocks after them (37 x 160),
  // and an earlier one in a later task than a second one (40 x 4096, 3
  // threads: the smallest failing task is found), fp32, fp16 and bf16, both
  // scale layouts.
  struct Case {
    int64_t rows, k;
    std::vector<std::pair<int64_t, float>> bad;  // (flat index, value)
    int64_t first;
  };
  const int64_t tail = 37 * 160 - 1;
  const std::vector<Case> cases = {{37, 160, {{77, NAN}}, 77},
                                   {37, 160, {{tail, INFINITY}}, tail},
                                   {37, 160, {{tail - 20, -INFINITY}, {tail, NAN}}, tail - 20},
                                   {40, 4096, {{30 * 4096 + 5, NAN}, {39 * 4096, INFINITY}}, 30 * 4096 + 5},
                                   {40, 4096, {{2 * 4096 + 31, -INFINITY}, {35 * 4096, NAN}}, 2 * 4096 + 31}};
  for (const Case& c : cases) {
    for (DLDataType dt : {t::f32(), t::f16(), t::bf16()}) {
      Tensor x = t::random_float({c.rows, c.k}, dt, static_cast<uint32_t>(c.k + dt.code));
      for (const auto& [i, v] : c.bad) x.set(i, v);
      for (int32_t isa : t::runnable_isas()) {
        t::IsaCap cap(isa);
        for (int32_t layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
          INFO("isa " << Q4_isa_name(isa) << " " << c.rows << "x" << c.k << " first " << c.first
                      << " dtype code " << int(dt.code) << " layout " << layout);
          Q4_op_options o{};
          Q4_op_options_init(&o);
          o.num_threads = 3;
          const int64_t sbytes =
              layout == Q4_SCALE_LINEAR ? c.rows * c.k / 32 : swizzled_mx_bytes(c.rows, c.k);
          Tensor q({c.rows, c.k / 2}, t::u8()), s({sbytes}, t::u8());
          std::memset(q.data(), 0xab, static_cast<size_t>(c.rows * c.k / 2));
          std::memset(s.data(), 0xcd, static_cast<size_t>(sbytes));
          const auto q_before = q.snapshot(), s_before = s.snapshot();
          CHECK(MXFP4_quantize(x.t(), q.t(), s.t(), layout, &o) == Q4_ERR_NON_FINITE);
          const std::string err = Q4_last_error(), want = "flat index " + std::to_string(c.first);
          const size_t at = err.find(want);
          CHECK((at != std::string::npos &&
                 (at + want.size() == err.size() || std::isdigit(err[at + want.size()]) == 0)));
          CHECK(q.snapshot() == q_before);
          CHECK(s.snapshot() == s_before);
        }
      }
    }
  }
}

TEST_CASE("every ISA variant: MXFP4_dequantize is bit-identical to the scalar table", "[kernels][mxfp4]") {
  // Every E8M0 byte (0: 2^-127, a subnormal product; 0xFF: NaN) with every
  // code (8: -0) in some block; 9 x 64 and 37 x 1024 (several row chunks
  // over 3 threads); linear and swizzled scales.
  for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{9, 64}, {37, 1024}}) {
    const int64_t cols = k / 32;
    Tensor q({rows, k / 2}, t::u8()), s({rows, cols}, t::u8());
    std::mt19937 gen(static_cast<uint32_t>(rows + k));
    for (int64_t i = 0; i < rows * k / 2; ++i) q.data()[i] = static_cast<uint8_t>(gen());
    for (int64_t b = 0; b < rows * cols; ++b) s.data()[b] = static_cast<uint8_t>(b * 7 + (b >> 8));
    Tensor sw({swizzled_mx_bytes(rows, k)}, t::u8());
    REQUIRE(NVFP4_swizzle_scales(s.t(), sw.t()) == Q4_OK);
    Tensor want({rows, k}, t::f32());
    {
      t::IsaCap scalar(Q4_ISA_SCALAR);
      REQUIRE(MXFP4_dequantize(q.t(), s.t(), Q4_SCALE_LINEAR, want.t(), nullptr) == Q4_OK);
    }
    size_t bad = 0;  // the scalar table against the oracle (any NaN for byte 0xFF)
    for (int64_t i = 0; i < rows * k; ++i) {
      const uint8_t byte = q.data()[i / 2];
      const float v = oracle_decode((i & 1) ? byte >> 4 : byte & 0xfu, s.data()[i / 32]);
      float w;
      std::memcpy(&w, want.data() + i * 4, 4);
      bad += (std::isnan(v) ? !std::isnan(w) : std::memcmp(&v, &w, 4) != 0) ? 1 : 0;
    }
    CHECK(bad == 0);
    for (int32_t isa : t::runnable_isas()) {
      t::IsaCap cap(isa);
      for (int32_t layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
        INFO("isa " << Q4_isa_name(isa) << " " << rows << "x" << k << " layout " << layout);
        Q4_op_options o{};
        Q4_op_options_init(&o);
        o.num_threads = 3;
        Tensor got({rows, k}, t::f32());
        REQUIRE(MXFP4_dequantize(q.t(), layout == Q4_SCALE_LINEAR ? s.t() : sw.t(), layout, got.t(), &o) ==
                Q4_OK);
        CHECK(Q4_last_isa_used() == isa);
        CHECK(std::memcmp(got.data(), want.data(), static_cast<size_t>(rows * k * 4)) == 0);
      }
    }
  }
}
