// Numerical robustness: signed zeros, subnormals, every rounding boundary,
// all-zero blocks, one huge value, extreme global scales, NaN/Inf, and
// products that overflow fp16 outputs — each with an expected result.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "formats/codec.h"
#include "test_util.h"

using t::Tensor;

namespace {

struct Quantized {
  Tensor q, s;
  float g = 0;
};

Quantized quantize(Tensor& x, float given) {
  const int64_t rows = x.shape[0], k = x.shape[1];
  Quantized r{Tensor({rows, k / 2}, t::u8()), Tensor({rows, k / 16}, t::u8()), 0};
  REQUIRE(NVFP4_quantize(x.t(), r.q.t(), r.s.t(), Q4_SCALE_LINEAR, given, &r.g, nullptr) == Q4_OK);
  return r;
}

uint32_t code_at(const Tensor& q, int64_t i) {
  return (i & 1) ? q.data()[i / 2] >> 4 : q.data()[i / 2] & 0xf;
}

}  // namespace

TEST_CASE("signed zeros and all-zero blocks", "[robustness]") {
  Tensor x({1, 32}, t::f32());
  for (int i = 0; i < 16; ++i) x.set(i, i % 2 ? -0.0f : 0.0f);
  for (int i = 16; i < 32; ++i) x.set(i, i == 20 ? -0.0f : 1.0f);
  Quantized r = quantize(x, 0.0f);
  CHECK(r.s.data()[0] == 0);  // all-zero block: scale 0, codes 0 (sign of -0 dropped: d == 0)
  for (int i = 0; i < 16; ++i) CHECK(code_at(r.q, i) == 0);
  CHECK(code_at(r.q, 20) == 0x8);  // -0 in a non-zero block keeps its sign bit
  Tensor y({1, 32}, t::f32());
  REQUIRE(NVFP4_dequantize(r.q.t(), r.s.t(), 0, r.g, y.t(), nullptr) == Q4_OK);
  CHECK(std::signbit(y.get(20)));
  CHECK(y.get(0) == 0.0f);
  // An all-zero tensor: g = 1 by definition.
  Tensor z({2, 16}, t::f32());
  z.fill(0);
  CHECK(quantize(z, 0.0f).g == 1.0f);
}

TEST_CASE("subnormal inputs and the smallest block scale", "[robustness]") {
  Tensor x({1, 16}, t::f32());
  for (int i = 0; i < 16; ++i)
    x.set(i, std::ldexp(1.0f, -140) * static_cast<float>(i + 1));  // fp32 subnormals
  // g = 1: amax/6 underflows E4M3, so the scale is bumped to 2^-9 (code 1).
  Quantized r = quantize(x, 1.0f);
  CHECK(r.s.data()[0] == 0x01);
  for (int i = 0; i < 16; ++i) CHECK(code_at(r.q, i) == 0);  // all round to 0 at that scale
  // With the computed g the block is representable.
  Quantized c = quantize(x, 0.0f);
  CHECK(c.g > 0.0f);
  CHECK(code_at(c.q, 15) == 0x7);  // the block maximum maps to 6
}

TEST_CASE("every E2M1 rounding boundary inside a block", "[robustness]") {
  // Block amax 6 with g = 1/448 gives d = 1 exactly, so codes are e2m1(x).
  const float values[16] = {6.0f,   0.25f,  0.75f,  1.25f,  1.75f, 2.5f,  3.5f,  5.0f,
                            -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5.0f, 0.2500001f};
  const uint32_t expect[16] = {0x7, 0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6,
                               0x8, 0xA, 0xA, 0xC, 0xC, 0xE, 0xE, 0x1};
  Tensor x({1, 16}, t::f32());
  for (int i = 0; i < 16; ++i) x.set(i, values[i]);
  Quantized r = quantize(x, 1.0f / 448.0f);
  CHECK(r.s.data()[0] == 0x7e);
  for (int i = 0; i < 16; ++i) {
    INFO("x = " << values[i]);
    CHECK(code_at(r.q, i) == expect[i]);
  }
}

TEST_CASE("E4M3 scale boundaries: ties to even and saturation", "[robustness]") {
  // s = e4m3(amax / (6 g)); pick amax so that amax/(6g) hits exact ties.
  struct Case {
    float ratio;  // amax / (6 g)
    uint32_t code;
  };
  const Case cases[] = {{448.0f, 0x7e},
                        {1000.0f, 0x7e},
                        {17.0f, 0x58},
                        {18.0f, 0x59},
                        {1.0625f, 0x38},
                        {1.1875f, 0x3a},
                        {std::ldexp(1.0f, -10), 0x01}};
  for (const Case& c : cases) {
    Tensor x({1, 16}, t::f32());
    x.fill(0);
    x.set(3, c.ratio * 6.0f);  // g = 1
    Quantized r = quantize(x, 1.0f);
    INFO("ratio " << c.ratio);
    CHECK(r.s.data()[0] == c.code);
  }
}

TEST_CASE("one huge value and extreme global scales", "[robustness]") {
  Tensor x({1, 32}, t::f32());
  for (int i = 0; i < 32; ++i) x.set(i, 1.0f);
  x.set(7, 3.0e38f);  // near FLT_MAX
  Quantized r = quantize(x, 0.0f);
  CHECK(std::isfinite(r.g));
  CHECK(code_at(r.q, 7) == 0x7);
  CHECK(code_at(r.q, 6) == 0x0);  // dwarfed within its block
  // E4M3 spans 2^-9..448 (about 2^18): with g set by the huge value, the
  // other block's scale is bumped to 2^-9 and its values still round to 0.
  CHECK(r.s.data()[1] == 0x01);
  CHECK(code_at(r.q, 20) == 0x0);
  Tensor y({1, 32}, t::f32());
  REQUIRE(NVFP4_dequantize(r.q.t(), r.s.t(), 0, r.g, y.t(), nullptr) == Q4_OK);
  CHECK(std::isfinite(y.get(7)));
  CHECK(std::fabs(y.get(7) - 3.0e38f) / 3.0e38f < 0.2);
  // A very large given g: 6*g overflows to Inf, every scale is bumped to
  // 2^-9, the ones round to 0 and the huge value saturates at 6.
  Quantized big = quantize(x, 1.0e38f);
  for (int i = 0; i < 32; ++i) CHECK(code_at(big.q, i) == (i == 7 ? 0x7u : 0x0u));
  CHECK(big.s.data()[0] == 0x01);
  // A very small given g: scales saturate at 448 and codes at +-6.
  Quantized small = quantize(x, 1.0e-30f);
  CHECK(small.s.data()[0] == 0x7e);
  CHECK(code_at(small.q, 0) == 0x7);
}

TEST_CASE("NaN and Inf are rejected with their index, in every float dtype", "[robustness]") {
  for (DLDataType dt : {t::f32(), t::f16(), t::bf16()}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY}) {
      Tensor x({2, 16}, dt);
      for (int i = 0; i < 32; ++i) x.set(i, 0.5f);
      x.set(19, bad);
      Tensor q({2, 8}, t::u8()), s({2, 1}, t::u8());
      const auto q0 = q.snapshot();
      CHECK(NVFP4_quantize(x.t(), q.t(), s.t(), 0, 0.0f, nullptr, nullptr) == Q4_ERR_NON_FINITE);
      CHECK(std::string(Q4_last_error()).find("flat index 19") != std::string::npos);
      CHECK(q.snapshot() == q0);
      Tensor a2({1}, t::f32());
      Tensor qn({16}, t::u8());
      CHECK(NF4_quantize(x.t(), qn.t(), a2.t(), 32, nullptr) == Q4_ERR_NON_FINITE);
    }
  }
}

TEST_CASE("products that overflow fp16 outputs saturate to Inf (documented)", "[robustness]") {
  // 6 * 448 * 64 = 172032 > 65504: the fp32 result is finite, the fp16
  // output is +Inf (IEEE conversion; not an error).
  const int64_t n = 1, k = 64;
  Tensor w({n, k}, t::f32());
  for (int i = 0; i < k; ++i) w.set(i, 6.0f * 448.0f);
  Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
  REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, nullptr) == Q4_OK);
  Tensor x({1, k}, t::f32());
  for (int i = 0; i < k; ++i) x.set(i, 1.0f);
  Tensor y16({1, n}, t::f16()), y32({1, n}, t::f32());
  REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, y16.t(), nullptr) == Q4_OK);
  REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, y32.t(), nullptr) == Q4_OK);
  CHECK(y32.get(0) == 172032.0f);
  CHECK(std::isinf(y16.get(0)));
  CHECK(y16.get(0) > 0);
  // bf16 holds it (rounded).
  Tensor yb({1, n}, t::bf16());
  REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, yb.t(), nullptr) == Q4_OK);
  CHECK(yb.get(0) == q4::fmt::bf16_to_f32(q4::fmt::f32_to_bf16(172032.0f)));
}

#if defined(__x86_64__) || defined(__aarch64__)
namespace {

// The calling thread's floating-point controls: x86 MXCSR, aarch64 FPCR.
uint64_t fp_controls() {
#if defined(__x86_64__)
  uint32_t csr = 0;
  __asm__ volatile("stmxcsr %0" : "=m"(csr));
  return csr & ~0x3fu;  // (without the sticky status flags)
#else
  uint64_t fpcr = 0;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
#endif
}

void set_fp_controls(uint64_t v) {
#if defined(__x86_64__)
  const auto csr = static_cast<uint32_t>(v);
  __asm__ volatile("ldmxcsr %0" : : "m"(csr));
#else
  __asm__ volatile("msr fpcr, %0" : : "r"(v));
#endif
}

// Flush to zero, subnormal inputs as zero (x86) and rounding toward zero.
uint64_t hostile_controls(uint64_t v) {
#if defined(__x86_64__)
  return v | 0x8040u | 0x6000u;  // FTZ, DAZ, RZ
#else
  return v | (uint64_t{1} << 24) | (uint64_t{3} << 22);  // FZ, RZ
#endif
}

}  // namespace

TEST_CASE("the caller's flush-to-zero and rounding controls change no result and come back as they were",
          "[robustness]") {
  const int64_t n = 32, k = 256;
  // Subnormal weights and activations beside normal ones: flush-to-zero
  // or denormals-are-zero in the library's arithmetic would change codes,
  // scales and products.
  Tensor w({n, k}, t::f32()), x({8, k}, t::f32());
  for (int64_t i = 0; i < n * k; ++i)
    w.set(i, i % 16 == 0 ? 1.0f : static_cast<float>(i % 7 - 3) * 1e-39f * static_cast<float>(1 + i % 5));
  for (int64_t i = 0; i < 8 * k; ++i) x.set(i, i % 3 == 0 ? 1e-39f : 0.5f);
  std::vector<std::vector<uint8_t>> given;  // codes and scales under a subnormal global scale, per run
  auto run = [&](int32_t math, Tensor& q, Tensor& s, Tensor& y, Tensor& back) {
    // A subnormal global scale first (codes and scales kept in `given`).
    float g = 0;
    REQUIRE(NVFP4_quantize(w.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 1e-40f, nullptr, nullptr) == Q4_OK);
    given.push_back(q.snapshot());
    given.push_back(s.snapshot());
    REQUIRE(NVFP4_quantize(w.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr) == Q4_OK);
    REQUIRE(NVFP4_dequantize(q.t(), s.t(), Q4_SCALE_LINEAR, g, back.t(), nullptr) == Q4_OK);
    Q4_op_options o{};
    Q4_op_options_init(&o);
    o.math_mode = math;
    REQUIRE(NVFP4_linear(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, g, nullptr, y.t(), &o) == Q4_OK);
  };
  for (int32_t math : {Q4_MATH_EXACT, Q4_MATH_FAST}) {
    Tensor q0({n, k / 2}, t::u8()), s0({n, k / 16}, t::u8()), y0({8, n}, t::f32()), b0({n, k}, t::f32());
    Tensor q1({n, k / 2}, t::u8()), s1({n, k / 16}, t::u8()), y1({8, n}, t::f32()), b1({n, k}, t::f32());
    run(math, q0, s0, y0, b0);
    const uint64_t before = fp_controls();
    set_fp_controls(hostile_controls(before));
    const uint64_t hostile = fp_controls();
    run(math, q1, s1, y1, b1);
    const uint64_t after = fp_controls();
    set_fp_controls(before);
    CHECK(hostile != before);
    CHECK(after == hostile);  // the caller's controls, restored
    CHECK(q0.snapshot() == q1.snapshot());
    CHECK(s0.snapshot() == s1.snapshot());
    CHECK(b0.snapshot() == b1.snapshot());
    CHECK(y0.snapshot() == y1.snapshot());
  }
  REQUIRE(given.size() == 8);
  for (size_t i = 0; i < 8; i += 4) {
    CHECK(given[i] == given[i + 2]);
    CHECK(given[i + 1] == given[i + 3]);
  }
}
#endif

namespace {

// A weight buffer too large for the guard-filled test tensors: pattern
// bytes, written once (2 GiB+).
struct BigBytes {
  std::unique_ptr<uint8_t[]> p;
  explicit BigBytes(size_t n, uint32_t mul, uint32_t shift, uint8_t base, uint8_t mod) : p(new uint8_t[n]) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(base + ((i * mul) >> shift) % mod);
  }
};

DLTensor view(void* data, int32_t ndim, int64_t* shape, DLDataType dt) {
  DLTensor v{};
  v.data = data;
  v.device = DLDevice{kDLCPU, 0};
  v.ndim = ndim;
  v.shape = shape;
  v.dtype = dt;
  return v;
}

}  // namespace

// A weight of more than 2^32 elements (2 GiB + of codes: element and byte
// offsets past every 32-bit range), as a large vocabulary's output layer
// has. Rows near the start, past 2^31 and 2^32 elements and at the end
// equal, bit for bit, the same product on a copy of those rows alone (one
// thread: the copy's product then takes no K split). Hidden: 2.6 GB of
// memory; run by its own ctest entry in the optimized build without
// sanitizers or an emulator.
TEST_CASE("products over weights of more than 2^32 elements", "[.][big]") {
  const int64_t n = (int64_t{1} << 18) + 16, k = 16384;  // n * k = 2^32 + 2^18
  const BigBytes q(static_cast<size_t>(n * k / 2), 2654435761u, 13, 0, 255);
  const BigBytes s(static_cast<size_t>(n * k / 16), 40503u, 7, 0x30, 15);  // E4M3 2^-3 .. 2^0
  std::vector<float> absmax(static_cast<size_t>(n * k / 64));
  for (size_t i = 0; i < absmax.size(); ++i) absmax[i] = 0.5f + static_cast<float>(i % 97) / 64.0f;
  const int64_t picks[] = {
      0, 1, (int64_t{1} << 31) / k, (int64_t{1} << 32) / k - 1, (int64_t{1} << 32) / k, n - 1};
  // The picked rows alone, then copies of the first up to 320 rows: the
  // product of the picks alone must take the same kernels as the big one,
  // and the choice looks at the weight's rows (fast mode runs its integer
  // kernels only from 64 rows; the AVX2 tables give exact products of
  // weights of at most 256 rows at M = 17-64 to the panel GEMM).
  const int64_t picked = 6, np = 320;
  std::vector<uint8_t> qp(static_cast<size_t>(np * k / 2)), sp(static_cast<size_t>(np * k / 16));
  std::vector<float> ap(static_cast<size_t>(np * k / 64));
  for (int64_t i = 0; i < np; ++i) {
    const int64_t row = picks[i < picked ? i : 0];
    std::memcpy(&qp[static_cast<size_t>(i * k / 2)], q.p.get() + row * (k / 2), static_cast<size_t>(k / 2));
    std::memcpy(&sp[static_cast<size_t>(i * k / 16)], s.p.get() + row * (k / 16),
                static_cast<size_t>(k / 16));
    std::memcpy(&ap[static_cast<size_t>(i * k / 64)], &absmax[static_cast<size_t>(row * (k / 64))],
                static_cast<size_t>(k / 64) * 4);
  }
  int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 16}, as[1] = {n * k / 64}, nq[1] = {n * k / 2};
  int64_t pqs[2] = {np, k / 2}, pss[2] = {np, k / 16}, pas[1] = {np * k / 64}, pnq[1] = {np * k / 2};
  DLTensor tq = view(q.p.get(), 2, qs, t::u8()), ts = view(s.p.get(), 2, ss, t::e4m3());
  DLTensor tqf = view(q.p.get(), 1, nq, t::u8()), ta = view(absmax.data(), 1, as, t::f32());
  DLTensor pq = view(qp.data(), 2, pqs, t::u8()), ps = view(sp.data(), 2, pss, t::e4m3());
  DLTensor pqf = view(qp.data(), 1, pnq, t::u8()), pa = view(ap.data(), 1, pas, t::f32());
  // Every table this CPU runs but the scalar one: a kernel choice that
  // looks at the weight's rows differs between tables (the AVX2 tables'
  // above), and a table that is not this CPU's default would otherwise
  // hide such a difference until a CPU picks it by default. The default
  // table at M = 1, 8 and 24, the others at M = 24 (where exact products
  // pick by rows) to keep the time down.
  std::vector<int32_t> isas = t::runnable_isas();
  isas.erase(std::remove(isas.begin(), isas.end(), Q4_ISA_SCALAR), isas.end());
  for (const int32_t isa : isas) {
    t::IsaCap cap(isa);
    const bool best = isa == isas.back();
    for (const int32_t math : {Q4_MATH_EXACT, Q4_MATH_FAST}) {
      for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{24}}) {
        if (!best && m != 24) continue;
        INFO("table " << Q4_isa_name(isa) << ", math mode " << math << ", M = " << m);
        Tensor x = t::random_float({m, k}, t::f32(), static_cast<uint32_t>(m));
        std::vector<float> y(static_cast<size_t>(m * n)), yp(static_cast<size_t>(m * np));
        int64_t ys[2] = {m, n}, yps[2] = {m, np};
        DLTensor ty = view(y.data(), 2, ys, t::f32()), typ = view(yp.data(), 2, yps, t::f32());
        Q4_op_options o{};
        Q4_op_options_init(&o);
        o.math_mode = math;
        Q4_op_options one = o;
        one.num_threads = 1;
        for (const int fmt : {0, 1}) {
          INFO((fmt == 0 ? "NVFP4" : "NF4"));
          NF4_state st{}, pst{};
          st.struct_size = pst.struct_size = sizeof st;
          st.blocksize = pst.blocksize = 64;
          st.absmax = &ta;
          pst.absmax = &pa;
          if (fmt == 0) {
            REQUIRE(NVFP4_linear(x.t(), &tq, &ts, Q4_SCALE_LINEAR, 0.5f, nullptr, &ty, &o) == Q4_OK);
            REQUIRE(NVFP4_linear(x.t(), &pq, &ps, Q4_SCALE_LINEAR, 0.5f, nullptr, &typ, &one) == Q4_OK);
          } else {
            REQUIRE(NF4_scaled_mm(x.t(), &tqf, &st, nullptr, &ty, &o) == Q4_OK);
            REQUIRE(NF4_scaled_mm(x.t(), &pqf, &pst, nullptr, &typ, &one) == Q4_OK);
          }
          int64_t differ = 0;
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < picked; ++j) {
              const float big = y[static_cast<size_t>(i * n + picks[j])],
                          alone = yp[static_cast<size_t>(i * np + j)];
              if (std::memcmp(&big, &alone, 4) != 0 || !std::isfinite(big)) ++differ;
            }
          }
          CHECK(differ == 0);
        }
      }
    }
  }
}
