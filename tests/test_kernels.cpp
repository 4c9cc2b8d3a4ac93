// Every CPU kernel variant available on this machine (forced through the ISA
// cap) against fp64 oracles and against the scalar table: odd shapes, every
// activation dtype, thread-count invariance. Exact mode's documented bound:
//   |y - y_ref| <= (K + 16) * 2^-24 * sum_k |x_k * w_k|   (+ output rounding)
// where y_ref is the fp64 product of the same (dequantized) operands.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "formats/codec.h"
#include "test_util.h"

using t::Tensor;

namespace {

std::vector<int32_t> available_isas() {
  std::vector<int32_t> out;
  for (int32_t isa :
       {Q4_ISA_SCALAR, Q4_ISA_AVX2, Q4_ISA_AVX512, Q4_ISA_AVX512_VNNI, Q4_ISA_NEON, Q4_ISA_NEON_DOTPROD}) {
    if (Q4_set_max_isa(isa) != Q4_OK) continue;
    Q4_capabilities c{};
    c.struct_size = sizeof c;
    Q4_get_capabilities(&c);
    // A level not compiled in resolves to a lower one; test each table once.
    if (c.isa_active == isa) out.push_back(isa);
  }
  Q4_set_max_isa(Q4_ISA_BEST);
  return out;
}

struct IsaGuard {
  explicit IsaGuard(int32_t isa) { REQUIRE(Q4_set_max_isa(isa) == Q4_OK); }
  ~IsaGuard() { Q4_set_max_isa(Q4_ISA_BEST); }
};

DLDataType dt(int which) {
  return which == 0 ? t::f32() : (which == 1 ? t::f16() : t::bf16());
}
double out_eps(int which) {
  return which == 0 ? 0.0 : (which == 1 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8));
}

double nvfp4_w(const Tensor& q, const Tensor& s, int64_t k, int64_t j, int64_t kk, float g) {
  const int64_t i = j * k + kk;
  const uint8_t byte = q.data()[i / 2];
  const uint32_t code = (i & 1) ? byte >> 4 : byte & 0xf;
  return (q4::fmt::e2m1_decode(code) * q4::fmt::e4m3_decode(s.data()[j * (k / 16) + kk / 16])) * g;
}

double nf4_w(const Tensor& q, const Tensor& am, int64_t flat, int64_t bs) {
  const uint8_t byte = q.data()[flat / 2];
  const uint32_t code = (flat & 1) ? byte & 0xf : byte >> 4;
  return q4::fmt::nf4_decode(code) * am.f()[flat / bs];
}

// Checks y against sum_k x*w in fp64 with the exact-mode bound.
template <class W>
size_t count_bound_violations(const Tensor& x, const Tensor& y, int64_t m, int64_t n, int64_t k, W&& w,
                              int out_which, double alpha = 1.0) {
  size_t bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(x.get(i * k + kk)) * w(j, kk);
        acc += p;
        mag += std::fabs(p);
      }
      acc *= alpha;
      mag *= alpha;
      const double bound = (static_cast<double>(k) + 16.0) * std::ldexp(1.0, -24) * mag +
                           out_eps(out_which) * std::fabs(acc) + 1e-30;
      if (std::fabs(y.get(i * n + j) - acc) > bound) ++bad;
    }
  }
  return bad;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.bytes == b.bytes && std::equal(a.data(), a.data() + a.bytes, b.data());
}

}  // namespace

TEST_CASE("every ISA variant: NVFP4_linear within the exact-mode bound, odd shapes", "[kernels]") {
  const auto isas = available_isas();
  REQUIRE(!isas.empty());
  for (int32_t isa : isas) {
    IsaGuard guard(isa);
    for (int64_t k : {16, 32, 48, 272, 528}) {
      for (int64_t n : {1, 17, 40}) {
        Tensor w = t::random_float({n, k}, t::f32(), static_cast<uint32_t>(n * 1000 + k));
        Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
        float g = 0;
        REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr) == Q4_OK);
        for (int64_t m : {1, 2, 3, 7, 8, 9, 33}) {
          for (int xw = 0; xw < 3; ++xw) {
            const int ow = (m + xw) % 3;
            INFO("isa " << Q4_isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " x " << xw
                        << " out " << ow);
            Tensor x = t::random_float({m, k}, dt(xw), static_cast<uint32_t>(m + 7 * k));
            Tensor y({m, n}, dt(ow));
            REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), Q4_SCALE_LINEAR, g, nullptr, y.t(), nullptr) ==
                    Q4_OK);
            CHECK(Q4_last_isa_used() == isa);
            CHECK(y.guard_intact());
            CHECK(count_bound_violations(
                      x, y, m, n, k, [&](int64_t j, int64_t kk) { return nvfp4_w(wq, ws, k, j, kk, g); },
                      ow) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("every ISA variant: NF4_scaled_mm within the exact-mode bound", "[kernels]") {
  for (int32_t isa : available_isas()) {
    IsaGuard guard(isa);
    for (int64_t k : {32, 40, 64, 96, 544}) {
      for (int32_t bs : {32, 64, 256}) {
        const int64_t n = 19;
        Tensor w = t::random_float({n, k}, t::f32(), static_cast<uint32_t>(k + bs));
        Tensor q({(n * k + 1) / 2}, t::u8()), am({(n * k + bs - 1) / bs}, t::f32());
        REQUIRE(NF4_quantize(w.t(), q.t(), am.t(), bs, nullptr) == Q4_OK);
        NF4_state st{};
        st.struct_size = sizeof st;
        st.blocksize = bs;
        st.absmax = am.t();
        for (int64_t m : {1, 3, 8, 13}) {
          INFO("isa " << Q4_isa_name(isa) << " m=" << m << " k=" << k << " bs=" << bs);
          Tensor x = t::random_float({m, k}, dt(static_cast<int>(m % 3)), static_cast<uint32_t>(m));
          Tensor y({m, n}, t::f32());
          REQUIRE(NF4_scaled_mm(x.t(), q.t(), &st, nullptr, y.t(), nullptr) == Q4_OK);
          CHECK(Q4_last_isa_used() == isa);
          CHECK(count_bound_violations(
                    x, y, m, n, k, [&](int64_t j, int64_t kk) { return nf4_w(q, am, j * k + kk, bs); }, 0) ==
                0);
        }
      }
    }
  }
}

TEST_CASE("every ISA variant: NVFP4_scaled_mm (W4A4) and the dequant-matmul GEMM", "[kernels]") {
  for (int32_t isa : available_isas()) {
    IsaGuard guard(isa);
    for (int64_t m : {1, 5, 8, 30}) {
      for (int64_t n : {3, 33}) {
        const int64_t k = 80;
        Tensor a = t::random_float({m, k}, t::f32(), 21), b = t::random_float({n, k}, t::f32(), 22);
        Tensor aq({m, k / 2}, t::u8()), as({m, k / 16}, t::u8()), bq({n, k / 2}, t::u8()),
            bs({n, k / 16}, t::u8());
        REQUIRE(NVFP4_quantize(a.t(), aq.t(), as.t(), 0, 0.5f, nullptr, nullptr) == Q4_OK);
        REQUIRE(NVFP4_quantize(b.t(), bq.t(), bs.t(), 0, 0.25f, nullptr, nullptr) == Q4_OK);
        // x = dequant(A) with block scales only, as the product defines it.
        Tensor ad({m, k}, t::f32());
        REQUIRE(NVFP4_dequantize(aq.t(), as.t(), 0, 1.0f, ad.t(), nullptr) == Q4_OK);
        for (int path : {Q4_PATH_AUTO, Q4_PATH_DEQUANT_MATMUL_ONLY}) {
          INFO("isa " << Q4_isa_name(isa) << " m=" << m << " n=" << n << " path " << path);
          Q4_op_options o{};
          Q4_op_options_init(&o);
          o.compute_path = path;
          Tensor y({m, n}, t::f32());
          REQUIRE(NVFP4_scaled_mm(aq.t(), as.t(), bq.t(), bs.t(), 0, 0.125f, nullptr, y.t(), &o) == Q4_OK);
          CHECK(count_bound_violations(
                    ad, y, m, n, k, [&](int64_t j, int64_t kk) { return nvfp4_w(bq, bs, k, j, kk, 1.0f); }, 0,
                    0.125) == 0);
        }
      }
    }
  }
}

TEST_CASE("every ISA variant: quantize and dequantize are bit-identical to the scalar table", "[kernels]") {
  const int64_t rows = 37, k = 272;
  for (int which = 0; which < 3; ++which) {
    Tensor x = t::random_float({rows, k}, dt(which), 99, 5.0f);
    for (int64_t i = 0; i < 16; ++i) x.set(i, 0.0f);  // zero block
    x.set(20, 1e-30f);                                // underflowing scale
    x.set(40, 0.25f);                                 // ties
    x.set(41, -0.75f);
    Tensor q_ref({rows, k / 2}, t::u8()), s_ref({rows, k / 16}, t::u8()), d_ref({rows, k}, t::f32());
    float g_ref = 0;
    {
      IsaGuard guard(Q4_ISA_SCALAR);
      REQUIRE(NVFP4_quantize(x.t(), q_ref.t(), s_ref.t(), 0, 0.0f, &g_ref, nullptr) == Q4_OK);
      REQUIRE(NVFP4_dequantize(q_ref.t(), s_ref.t(), 0, g_ref, d_ref.t(), nullptr) == Q4_OK);
    }
    for (int32_t isa : available_isas()) {
      IsaGuard guard(isa);
      INFO("isa " << Q4_isa_name(isa) << " dtype " << which);
      for (float given : {0.0f, 3e-3f}) {
        Tensor q({rows, k / 2}, t::u8()), s({rows, k / 16}, t::u8()), d({rows, k}, t::f32());
        Tensor q0({rows, k / 2}, t::u8()), s0({rows, k / 16}, t::u8());
        float g = 0, g0 = 0;
        REQUIRE(NVFP4_quantize(x.t(), q.t(), s.t(), 0, given, &g, nullptr) == Q4_OK);
        CHECK(Q4_last_isa_used() == isa);
        {
          IsaGuard scalar(Q4_ISA_SCALAR);
          REQUIRE(NVFP4_quantize(x.t(), q0.t(), s0.t(), 0, given, &g0, nullptr) == Q4_OK);
        }
        REQUIRE(Q4_set_max_isa(isa) == Q4_OK);
        CHECK(g == g0);
        CHECK(same_bytes(q, q0));
        CHECK(same_bytes(s, s0));
        REQUIRE(NVFP4_dequantize(q.t(), s.t(), 0, g, d.t(), nullptr) == Q4_OK);
        if (given == 0.0f) CHECK(same_bytes(d, d_ref));
      }
    }
  }
}

TEST_CASE("thread count does not change results in exact mode", "[kernels]") {
  const int64_t n = 70, k = 320;
  Tensor w = t::random_float({n, k}, t::f32(), 5);
  Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
  float g = 0;
  REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
  for (int64_t m : {1, 4, 50}) {
    Tensor x = t::random_float({m, k}, t::f32(), 6);
    Tensor first({m, n}, t::f32());
    for (int32_t threads : {1, 2, 3, 8}) {
      Q4_op_options o{};
      Q4_op_options_init(&o);
      o.num_threads = threads;
      Tensor y({m, n}, t::f32());
      REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), 0, g, nullptr, y.t(), &o) == Q4_OK);
      if (threads == 1) {
        first = y;
      } else {
        INFO("m=" << m << " threads=" << threads);
        CHECK(same_bytes(y, first));
      }
    }
  }
}

TEST_CASE("forcing an ISA through the cap selects that table", "[kernels]") {
  for (int32_t isa : available_isas()) {
    IsaGuard guard(isa);
    Tensor x({1, 16}, t::f32()), q({8}, t::u8()), s({1}, t::u8());
    REQUIRE(NVFP4_quantize(x.t(), q.t(), s.t(), 0, 0.0f, nullptr, nullptr) == Q4_OK);
    CHECK(Q4_last_isa_used() == isa);
  }
}

TEST_CASE("fast math mode stays within its documented int8-activation bound", "[kernels][fast]") {
  // |y_fast - y| <= sum_b (amax_b(x)/127/2) * sum_{k in b} |w_k| + fp32 rounding.
  const int64_t n = 23, k = 96;
  Tensor w = t::random_float({n, k}, t::f32(), 31);
  Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
  float g = 0;
  REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
  Tensor nq({n * k / 2}, t::u8()), am({n * k / 32}, t::f32());
  REQUIRE(NF4_quantize(w.t(), nq.t(), am.t(), 32, nullptr) == Q4_OK);
  NF4_state st{};
  st.struct_size = sizeof st;
  st.blocksize = 32;
  st.absmax = am.t();
  Q4_op_options fast{};
  Q4_op_options_init(&fast);
  fast.math_mode = Q4_MATH_FAST;
  for (int64_t m : {1, 5, 12}) {
    Tensor x = t::random_float({m, k}, t::f32(), static_cast<uint32_t>(40 + m));
    for (int fmt_i = 0; fmt_i < 2; ++fmt_i) {
      auto wv = [&](int64_t j, int64_t kk) {
        return fmt_i == 0 ? nvfp4_w(wq, ws, k, j, kk, g) : nf4_w(nq, am, j * k + kk, 32);
      };
      Tensor y({m, n}, t::f32());
      if (fmt_i == 0) {
        REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), 0, g, nullptr, y.t(), &fast) == Q4_OK);
      } else {
        REQUIRE(NF4_scaled_mm(x.t(), nq.t(), &st, nullptr, y.t(), &fast) == Q4_OK);
      }
      size_t bad = 0;
      double worst_rel = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double exact = 0, mag = 0, bound = 0;
          for (int64_t b = 0; b < k / 16; ++b) {
            double amax = 0, wsum = 0;
            for (int64_t kk = b * 16; kk < b * 16 + 16; ++kk) {
              amax = std::max(amax, std::fabs(static_cast<double>(x.get(i * k + kk))));
              wsum += std::fabs(wv(j, kk));
              exact += x.get(i * k + kk) * wv(j, kk);
              mag += std::fabs(x.get(i * k + kk) * wv(j, kk));
            }
            bound += amax / 127.0 / 2.0 * wsum * (1 + 1e-6);
          }
          bound += (static_cast<double>(k) + 16) * std::ldexp(1.0, -24) * (mag + bound);
          const double err = std::fabs(y.get(i * n + j) - exact);
          if (err > bound) ++bad;
          worst_rel = std::max(worst_rel, err / (mag + 1e-30));
        }
      }
      INFO("format " << fmt_i << " m=" << m << " worst |err|/sum|xw| = " << worst_rel);
      CHECK(bad == 0);
      CHECK(worst_rel < 0.02);
    }
  }
  // Fast math needs a kernel path.
  fast.compute_path = Q4_PATH_DEQUANT_MATMUL_ONLY;
  Tensor x({1, k}, t::f32()), y({1, n}, t::f32());
  CHECK(NVFP4_linear(x.t(), wq.t(), ws.t(), 0, g, nullptr, y.t(), &fast) == Q4_ERR_UNSUPPORTED);
}

TEST_CASE("fast mode: a NaN activation gives NaN outputs, never undefined behaviour", "[kernels][fast]") {
  // Found by fuzz_api: the int8 activation quantizer converted NaN to int.
  const int64_t n = 4, k = 32;
  Tensor w = t::random_float({n, k}, t::f32(), 3);
  Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
  float g = 0;
  REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
  Tensor x = t::random_float({2, k}, t::f32(), 4);
  x.set(5, std::nanf(""));
  x.set(k + 7, INFINITY);
  Q4_op_options fast{};
  Q4_op_options_init(&fast);
  fast.math_mode = Q4_MATH_FAST;
  Tensor y({2, n}, t::f32());
  REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), 0, g, nullptr, y.t(), &fast) == Q4_OK);
  for (int64_t i = 0; i < 2 * n; ++i) CHECK(std::isnan(y.get(i)));
}
