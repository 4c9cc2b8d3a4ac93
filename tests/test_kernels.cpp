// Every CPU kernel variant available on this machine: through the public
// entry points (forced by the ISA cap) against fp64 oracles and the scalar
// table, and table by table, entry by entry, against the scalar reference
// of src/kernels/ref/ (second half of this file). Exact mode's documented bound:
//   |y - y_ref| <= (K + 16) * 2^-24 * sum_k |x_k * w_k|   (+ output rounding)
// where y_ref is the fp64 product of the same (dequantized) operands.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/cpu_features.h"
#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "formats/nf4_block.h"
#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_table.h"
#include "kernels/portable.h"
#include "kernels/ref/ref_ops.h"
#include "nvfp4/session.h"
#include "test_util.h"

using t::Tensor;

namespace {

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

// The per-core cache sizes that pick CPU-specific tunings
// (intel_golden_cove_server) agree with glibc's, which reads the same
// CPUID leaves; both may be 0 (a VM hiding them, another architecture).
TEST_CASE("the L1d and L2 sizes read from CPUID agree with the C library's", "[kernels]") {
  const q4::CpuInfo& c = q4::cpu_info();
  CHECK(c.l1d_bytes >= 0);
  CHECK(c.l2_bytes >= 0);
#if defined(__x86_64__) && defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
  const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  INFO("CPUID: L1d " << c.l1d_bytes << " L2 " << c.l2_bytes << "; sysconf: L1d " << l1 << " L2 " << l2);
  if (l1 > 0 && c.l1d_bytes > 0) CHECK(c.l1d_bytes == l1);
  if (l2 > 0 && c.l2_bytes > 0) CHECK(c.l2_bytes == l2);
  if ((c.vendor == "GenuineIntel" || c.vendor == "AuthenticAMD") && l1 > 0 && l2 > 0) {
    CHECK(c.l1d_bytes > 0);
    CHECK(c.l2_bytes > 0);
  }
#endif
}

TEST_CASE("every ISA variant: NVFP4_linear within the exact-mode bound, odd shapes", "[kernels]") {
  const auto isas = t::runnable_isas();
  REQUIRE(!isas.empty());
  for (int32_t isa : isas) {
    t::IsaCap guard(isa);
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
  for (int32_t isa : t::runnable_isas()) {
    t::IsaCap guard(isa);
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
  for (int32_t isa : t::runnable_isas()) {
    t::IsaCap guard(isa);
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
      t::IsaCap guard(Q4_ISA_SCALAR);
      REQUIRE(NVFP4_quantize(x.t(), q_ref.t(), s_ref.t(), 0, 0.0f, &g_ref, nullptr) == Q4_OK);
      REQUIRE(NVFP4_dequantize(q_ref.t(), s_ref.t(), 0, g_ref, d_ref.t(), nullptr) == Q4_OK);
    }
    for (int32_t isa : t::runnable_isas()) {
      t::IsaCap guard(isa);
      INFO("isa " << Q4_isa_name(isa) << " dtype " << which);
      for (float given : {0.0f, 3e-3f}) {
        Tensor q({rows, k / 2}, t::u8()), s({rows, k / 16}, t::u8()), d({rows, k}, t::f32());
        Tensor q0({rows, k / 2}, t::u8()), s0({rows, k / 16}, t::u8());
        float g = 0, g0 = 0;
        REQUIRE(NVFP4_quantize(x.t(), q.t(), s.t(), 0, given, &g, nullptr) == Q4_OK);
        CHECK(Q4_last_isa_used() == isa);
        {
          t::IsaCap scalar(Q4_ISA_SCALAR);
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

TEST_CASE("every ISA variant: quantize at the E2M1 rounding boundaries equals the scalar table",
          "[kernels]") {
  // Elements at t * d and a few ulps around it for every E2M1 threshold t
  // (the ties 0.25, 0.75, ..., 5), both signs, zeros and tiny values, under
  // global scales that take the division-free path of the AVX-512 encoder
  // and scales outside its window (d < 2^-90, d > 2^90: IEEE division),
  // and at g = 1 quotients just under and over the AVX2 encoder's
  // clamp-free bound (|x| / d < 7: blocks whose subnormal scale rounded
  // down, below). fp32 input, and bf16 input (the same
  // thresholds, bf16 ulps around them; every such value a bf16) against
  // the scalar table's bytes for its fp32 values.
  const float thresholds[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
  const int64_t k = 256;
  for (const bool bf16 : {false, true}) {
    // One ulp of fp32, or of bf16 (2^16 fp32 ulps), up or down from v > 0.
    const auto step = [bf16](float v, bool up) {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint32_t by = bf16 ? 0x10000u : 1u;
      u = up ? u + by : u - by;
      std::memcpy(&v, &u, 4);
      return v;
    };
    std::vector<float> xs;
    for (uint32_t lead = 0x38; lead < 0x7f; lead += 5) {  // E4M3 scale codes of the blocks
      for (float t : thresholds) {
        std::vector<float> blk(16, 0.0f);
        blk[0] = 6.0f * q4::fmt::e4m3_decode(lead);  // block amax: scale code `lead` at g = 1
        const float d = q4::fmt::e4m3_decode(lead);
        const float c = t * d;
        int j = 1;
        for (int ulps = -3; ulps <= 3 && j < 16; ++ulps, ++j) {
          float v = c;
          for (int u = 0; u < std::abs(ulps); ++u) v = step(v, ulps > 0);
          blk[static_cast<size_t>(j)] = (ulps % 2 == 0) ? v : -v;
        }
        blk[14] = -0.0f;
        blk[15] = bf16 ? std::ldexp(1.0f, -133) : 1e-42f;  // (a subnormal bf16 too)
        xs.insert(xs.end(), blk.begin(), blk.end());
      }
    }
    // Blocks whose scale at g = 1 is a subnormal E4M3 code j (d = j 2^-9)
    // rounded down from amax / 6 = (j + f) 2^-9: quotients up to 6 (1 +
    // f / j), 6.5 to 9 for f near 1/2, so that a group of 8 blocks holds
    // elements at and around 5, 6, 6.5, 7 and 8 d both inside and outside
    // the clamp-free bound.
    for (int j = 1; j <= 7; ++j) {
      for (float f : {0.25f, 0.375f, 0.5f}) {
        std::vector<float> blk(16, 0.0f);
        const float d = std::ldexp(static_cast<float>(j), -9);
        const float amax = step(std::ldexp(6.0f * (static_cast<float>(j) + f), -9), false);
        blk[0] = amax;
        int e = 1;
        for (float t : {5.0f, 6.0f, 6.5f, 7.0f, 8.0f}) {
          for (const float v : {t * d, step(t * d, false), step(t * d, true)}) {
            if (v <= amax && e < 16) {
              blk[static_cast<size_t>(e)] = e % 2 == 0 ? v : -v;
              ++e;
            }
          }
        }
        xs.insert(xs.end(), blk.begin(), blk.end());
      }
    }
    while (xs.size() % k != 0) xs.push_back(0.5f);
    const int64_t rows = static_cast<int64_t>(xs.size()) / k;
    Tensor x({rows, k}, t::f32()), xb({rows, k}, t::bf16());
    for (size_t i = 0; i < xs.size(); ++i) {
      x.set(static_cast<int64_t>(i), xs[i]);
      xb.set(static_cast<int64_t>(i), xs[i]);
      if (bf16) REQUIRE(xb.get(static_cast<int64_t>(i)) == xs[i]);  // (exact: a bf16 value)
    }
    for (float g : {1.0f, 0.7f, 1.3f / 1024.0f, 3e-30f, 1e33f}) {
      Tensor q0({rows, k / 2}, t::u8()), s0({rows, k / 16}, t::u8());
      {
        t::IsaCap scalar(Q4_ISA_SCALAR);
        REQUIRE(NVFP4_quantize(x.t(), q0.t(), s0.t(), 0, g, nullptr, nullptr) == Q4_OK);
      }
      for (int32_t isa : t::runnable_isas()) {
        t::IsaCap guard(isa);
        INFO("isa " << Q4_isa_name(isa) << " g " << g << " bf16 input " << bf16);
        Tensor q({rows, k / 2}, t::u8()), s({rows, k / 16}, t::u8());
        REQUIRE(NVFP4_quantize((bf16 ? xb : x).t(), q.t(), s.t(), 0, g, nullptr, nullptr) == Q4_OK);
        CHECK(same_bytes(q, q0));
        CHECK(same_bytes(s, s0));
      }
    }
  }
}

TEST_CASE("fp16/bf16 activations in the GEMV path: same result as their fp32 values", "[kernels]") {
  // The GEMV kernels convert fp16/bf16 in registers; the products must be
  // bit-identical to those of the fp32 values of the same activations, on
  // every ISA table (and the panel GEMM, M > 8, as well).
  for (int64_t k : {64, 272, 4096}) {
    const int64_t n = 37;
    Tensor w = t::random_float({n, k}, t::f32(), 11);
    Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
    float g = 0;
    REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
    Tensor nq({n * k / 2}, t::u8()), na({(n * k + 63) / 64}, t::f32());
    Tensor wflat = t::random_float({n * k}, t::f32(), 12);
    REQUIRE(NF4_quantize(wflat.t(), nq.t(), na.t(), 64, nullptr) == Q4_OK);
    for (DLDataType dt : {t::f16(), t::bf16()}) {
      for (int64_t m : {1, 3, 8, 9}) {
        Tensor xh = t::random_float({m, k}, dt, static_cast<uint32_t>(m + k));
        Tensor xf({m, k}, t::f32());
        for (int64_t i = 0; i < m * k; ++i) xf.set(i, xh.get(i));
        for (int32_t isa : t::runnable_isas()) {
          t::IsaCap guard(isa);
          Q4_op_options o{};
          Q4_op_options_init(&o);
          INFO("k=" << k << " m=" << m << " bf16=" << (dt.code == kDLBfloat) << " isa=" << isa);
          Tensor y1({m, n}, t::f32()), y2({m, n}, t::f32());
          REQUIRE(NVFP4_linear(xh.t(), wq.t(), ws.t(), 0, g, nullptr, y1.t(), &o) == Q4_OK);
          REQUIRE(NVFP4_linear(xf.t(), wq.t(), ws.t(), 0, g, nullptr, y2.t(), &o) == Q4_OK);
          CHECK(same_bytes(y1, y2));
          NF4_state st{};
          st.struct_size = sizeof st;
          st.blocksize = 64;
          st.absmax = na.t();
          REQUIRE(NF4_scaled_mm(xh.t(), nq.t(), &st, nullptr, y1.t(), &o) == Q4_OK);
          REQUIRE(NF4_scaled_mm(xf.t(), nq.t(), &st, nullptr, y2.t(), &o) == Q4_OK);
          CHECK(same_bytes(y1, y2));
        }
      }
    }
  }
}

TEST_CASE("fp16/bf16 activations on every product path: bit-identical to their fp32 values", "[kernels]") {
  // Exact mode (GEMV, small batch, panel GEMM), fast mode (the int8
  // activation quantizer) and the dequant-matmul GEMM read fp16/bf16 rows
  // themselves; the conversion is exact, so the bits equal those of the
  // fp32 values of the same activations, on every table, at every M.
  // M 1 (GEMV), 9 (small batch), 65 and 130 (above the small-batch range,
  // tuned or not: the panel GEMM); the long K where the GEMV has its
  // K % 128 paths, a shorter one for the large M (the time under TSan and
  // qemu).
  const int64_t n = 37;
  for (int64_t k : {80, 1024, 4096}) {
    const std::vector<int64_t> ms = k == 80     ? std::vector<int64_t>{1, 9, 65, 130}
                                    : k == 1024 ? std::vector<int64_t>{65, 130}
                                                : std::vector<int64_t>{1, 9};
    Tensor w = t::random_float({n, k}, t::f32(), 61);
    Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
    float g = 0;
    REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
    Tensor nq({n * k / 2}, t::u8()), na({(n * k + 63) / 64}, t::f32());
    Tensor wflat = t::random_float({n * k}, t::f32(), 62);
    REQUIRE(NF4_quantize(wflat.t(), nq.t(), na.t(), 64, nullptr) == Q4_OK);
    NF4_state st{};
    st.struct_size = sizeof st;
    st.blocksize = 64;
    st.absmax = na.t();
    for (int64_t m : ms) {
      for (DLDataType dt : {t::f16(), t::bf16()}) {
        Tensor xh = t::random_float({m, k}, dt, static_cast<uint32_t>(3 * m + k));
        Tensor xf({m, k}, t::f32());
        for (int64_t i = 0; i < m * k; ++i) xf.set(i, xh.get(i));
        for (int32_t isa : t::runnable_isas()) {
          t::IsaCap guard(isa);
          for (int mode = 0; mode < 3; ++mode) {  // exact, fast, dequant-matmul
            Q4_op_options o{};
            Q4_op_options_init(&o);
            o.num_threads = 2;
            if (mode == 1) o.math_mode = Q4_MATH_FAST;
            if (mode == 2) o.compute_path = Q4_PATH_DEQUANT_MATMUL_ONLY;
            INFO("k=" << k << " m=" << m << " bf16=" << (dt.code == kDLBfloat) << " isa=" << Q4_isa_name(isa)
                      << " mode=" << mode);
            Tensor y1({m, n}, t::f32()), y2({m, n}, t::f32());
            REQUIRE(NVFP4_linear(xh.t(), wq.t(), ws.t(), 0, g, nullptr, y1.t(), &o) == Q4_OK);
            REQUIRE(NVFP4_linear(xf.t(), wq.t(), ws.t(), 0, g, nullptr, y2.t(), &o) == Q4_OK);
            CHECK(same_bytes(y1, y2));
            REQUIRE(NF4_scaled_mm(xh.t(), nq.t(), &st, nullptr, y1.t(), &o) == Q4_OK);
            REQUIRE(NF4_scaled_mm(xf.t(), nq.t(), &st, nullptr, y2.t(), &o) == Q4_OK);
            CHECK(same_bytes(y1, y2));
          }
        }
      }
    }
  }
}

TEST_CASE("fp16/bf16 activations in the integer fast path itself: bit-identical on every table",
          "[kernels][fast]") {
  // linear_nvfp4_int8 / linear_nf4_int8 on every table (whatever M its fast
  // mode routes to exact): 16-bit rows give the bits of their fp32 values.
  const int64_t n = 37, k = 256;
  std::vector<float> wf(static_cast<size_t>(n * k));
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : wf) v = nd(rng);
  std::vector<uint8_t> wq(static_cast<size_t>(n * k / 2)), ws(static_cast<size_t>(n * k / 16));
  const q4::kern::KernelTable& scalar = q4::kern::scalar_table();
  scalar.nvfp4_quantize(wf.data(), n, k, 0.5f, wq.data(), ws.data());
  const q4::kern::NvWeights w{wq.data(), ws.data(), 0.5f, k};
  std::vector<uint8_t> nq(static_cast<size_t>(n * k / 2));
  std::vector<float> na(static_cast<size_t>(n * k / 64));
  q4::kern::nf4_quantize(q4::kern::FloatPtr{wf.data(), q4::kern::FType::F32}, n * k, 64, nq.data(),
                         na.data());
  float lut[16];
  for (uint32_t c = 0; c < 16; ++c) lut[c] = q4::fmt::nf4_decode(c);
  const q4::kern::Nf4Weights nw{nq.data(), na.data(), lut, k, 64, 6};
  for (int64_t m : {1, 9, 65, 300}) {
    std::vector<uint16_t> xh(static_cast<size_t>(m * k));
    std::vector<float> xf(xh.size());
    for (int which = 1; which < 3; ++which) {
      for (size_t i = 0; i < xh.size(); ++i) {
        const float v = nd(rng) * 3.0f;
        xh[i] = which == 1 ? q4::fmt::f32_to_f16(v) : q4::fmt::f32_to_bf16(v);
        xf[i] = which == 1 ? q4::fmt::f16_to_f32(xh[i]) : q4::fmt::bf16_to_f32(xh[i]);
      }
      const q4::kern::ActRows x16(xh.data(), which == 1 ? q4::kern::FType::F16 : q4::kern::FType::BF16);
      for (int32_t isa : t::runnable_isas()) {
        const q4::kern::KernelTable& kt = q4::kern::table_for(isa);
        INFO("m=" << m << " type " << which << " table " << Q4_isa_name(isa));
        std::vector<float> y1(static_cast<size_t>(m * n), -1.0f), y2(y1.size(), -2.0f);
        q4::kern::linear_nvfp4_int8(kt, x16, m, w, n, y1.data(), 2);
        q4::kern::linear_nvfp4_int8(kt, xf.data(), m, w, n, y2.data(), 2);
        CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0);
        q4::kern::linear_nf4_int8(kt, x16, m, nw, n, y1.data(), 2);
        q4::kern::linear_nf4_int8(kt, xf.data(), m, nw, n, y2.data(), 2);
        CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0);
        q4::kern::gemm_f32(kt, x16, m, k, wf.data(), n, y1.data(), 2, q4::kern::gemm_blocking());
        q4::kern::gemm_f32(kt, xf.data(), m, k, wf.data(), n, y2.data(), 2, q4::kern::gemm_blocking());
        CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0);
      }
    }
  }
}

TEST_CASE("quantize of fp16/bf16 input: the bits of quantizing its fp32 values, NaN/Inf at its first index",
          "[kernels]") {
  // The 16-bit input is converted inside the quantizer's passes; several
  // tasks (rows * k > 16384) with both a given and a derived global scale;
  // k = 48 leaves tail blocks after the kernels' groups of 4 or 16 blocks.
  for (int64_t k : {48, 64, 4096}) {
    const int64_t rows = int64_t{4096} * 9 / k + 3;
    for (int which = 1; which < 3; ++which) {
      Tensor xh = t::random_float({rows, k}, dt(which), static_cast<uint32_t>(k + which), 7.0f);
      xh.set(17, 0.0f);
      Tensor xf({rows, k}, t::f32());
      for (int64_t i = 0; i < rows * k; ++i) xf.set(i, xh.get(i));
      for (int32_t isa : t::runnable_isas()) {
        t::IsaCap guard(isa);
        for (float given : {0.0f, 2e-3f}) {
          INFO("k=" << k << " type " << which << " isa " << Q4_isa_name(isa) << " given " << given);
          Q4_op_options o{};
          Q4_op_options_init(&o);
          o.num_threads = 2;
          Tensor q1({rows, k / 2}, t::u8()), s1({rows, k / 16}, t::u8()), q2({rows, k / 2}, t::u8()),
              s2({rows, k / 16}, t::u8());
          float g1 = 0, g2 = 0;
          for (int32_t layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
            const int64_t sb = layout == Q4_SCALE_LINEAR ? rows * (k / 16) : t::swizzled_bytes(rows, k);
            Tensor ss1({sb}, t::u8()), ss2({sb}, t::u8());
            Tensor& sa = layout == Q4_SCALE_LINEAR ? s1 : ss1;
            Tensor& sbt = layout == Q4_SCALE_LINEAR ? s2 : ss2;
            REQUIRE(NVFP4_quantize(xh.t(), q1.t(), sa.t(), layout, given, &g1, &o) == Q4_OK);
            REQUIRE(NVFP4_quantize(xf.t(), q2.t(), sbt.t(), layout, given, &g2, &o) == Q4_OK);
            CHECK(g1 == g2);
            CHECK(same_bytes(q1, q2));
            CHECK(same_bytes(sa, sbt));
          }
          for (int64_t bad : {int64_t{3}, rows * k - 1}) {
            Tensor xb({rows, k}, dt(which));  // (a Tensor copy shares its buffer)
            std::memcpy(xb.data(), xh.data(), xh.bytes);
            xb.set(bad, which == 1 ? std::numeric_limits<float>::infinity()
                                   : std::numeric_limits<float>::quiet_NaN());
            xb.set(rows * k - 1, std::numeric_limits<float>::quiet_NaN());
            q1.fill(0x3c);
            const std::vector<uint8_t> q0 = q1.snapshot();
            CHECK(NVFP4_quantize(xb.t(), q1.t(), s1.t(), Q4_SCALE_LINEAR, given, nullptr, &o) ==
                  Q4_ERR_NON_FINITE);
            CHECK(std::string(Q4_last_error()).find("flat index " + std::to_string(bad)) !=
                  std::string::npos);
            CHECK(q1.snapshot() == q0);
          }
        }
      }
    }
  }
}

// The outputs of an NVFP4 quantize of rows x k, filled with a pattern, and
// their first bytes (guards included), to show that nothing was written.
struct PrefilledQuantOut {
  Tensor q, s;
  std::vector<uint8_t> q0, s0;
  PrefilledQuantOut(int64_t rows, int64_t k) : q({rows, k / 2}, t::u8()), s({rows, k / 16}, t::u8()) {
    q.fill(0x3c);
    s.fill(0x5a);
    q0 = q.snapshot();
    s0 = s.snapshot();
  }
  bool untouched() const { return q.snapshot() == q0 && s.snapshot() == s0; }
};

Q4_op_options two_threads() {
  Q4_op_options o{};
  Q4_op_options_init(&o);
  o.num_threads = 2;
  return o;
}

TEST_CASE("quantize: a NaN/Inf anywhere is reported at its first flat index and nothing is written",
          "[kernels]") {
  // Every table; 7 x 48 has 21 blocks, so the vector kernels' groups (4 or
  // 16 blocks) leave tail blocks, and the last element lies in one.
  for (int32_t isa : t::runnable_isas()) {
    t::IsaCap guard(isa);
    for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{64, 512}, {7, 48}}) {
      for (float given : {0.0f, 1e-3f}) {
        for (int64_t bad : {int64_t{0}, std::min<int64_t>(5000, rows * k / 2), rows * k - 1}) {
          Tensor x = t::random_float({rows, k}, t::f32(), 21);
          x.set(bad, std::numeric_limits<float>::quiet_NaN());
          x.set(std::min(rows * k - 1, bad + 20000), std::numeric_limits<float>::infinity());
          PrefilledQuantOut out(rows, k);
          const Q4_op_options o = two_threads();
          INFO("isa " << Q4_isa_name(isa) << " " << rows << "x" << k << " given=" << given << " bad=" << bad);
          CHECK(NVFP4_quantize(x.t(), out.q.t(), out.s.t(), 0, given, nullptr, &o) == Q4_ERR_NON_FINITE);
          CHECK(std::string(Q4_last_error()).find("flat index " + std::to_string(bad)) != std::string::npos);
          CHECK(out.untouched());
        }
      }
    }
  }
}

TEST_CASE("quantize with a given scale: the staging buffer kept between calls never shows through",
          "[kernels]") {
  // Given-scale quantize codes into a staging buffer (nothing is written on
  // NaN/Inf) that the library keeps for the next call: larger, smaller and
  // failing calls in turn must each give the reference bytes or nothing.
  struct Case {
    int64_t rows, k;
    bool bad;
  };
  const Case cases[] = {{2048, 2048, false}, {64, 512, true},     {96, 1024, false},
                        {2048, 2048, true},  {1536, 2048, false}, {2048, 2048, false}};
  uint32_t seed = 40;
  for (const Case& c : cases) {
    Tensor x = t::random_float({c.rows, c.k}, t::f32(), ++seed);
    if (c.bad) x.set(c.rows * c.k - 7, std::numeric_limits<float>::quiet_NaN());
    PrefilledQuantOut out(c.rows, c.k);
    Tensor &q = out.q, &s = out.s;
    const Q4_op_options o = two_threads();
    INFO("rows=" << c.rows << " k=" << c.k << " bad=" << c.bad);
    const float g = 2e-3f;
    if (c.bad) {
      CHECK(NVFP4_quantize(x.t(), q.t(), s.t(), 0, g, nullptr, &o) == Q4_ERR_NON_FINITE);
      CHECK(out.untouched());
      continue;
    }
    REQUIRE(NVFP4_quantize(x.t(), q.t(), s.t(), 0, g, nullptr, &o) == Q4_OK);
    std::vector<uint8_t> q_ref(static_cast<size_t>(c.rows * c.k / 2)),
        s_ref(static_cast<size_t>(c.rows * c.k / 16));
    q4::ref::nvfp4_quantize(x.f(), c.rows, c.k, g, q_ref.data(), s_ref.data());
    CHECK(std::memcmp(q.data(), q_ref.data(), q_ref.size()) == 0);
    CHECK(std::memcmp(s.data(), s_ref.data(), s_ref.size()) == 0);
    CHECK(q.guard_intact());
    CHECK(s.guard_intact());
  }
}

TEST_CASE("stream_copy copies every length to every destination alignment, nothing past it", "[kernels]") {
  // The non-temporal copy has a head up to dst's 16-byte boundary, 64-byte
  // steps and a tail: lengths around those sizes at each offset.
  std::vector<uint8_t> src(1024);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 37 + 11);
  for (int64_t off = 0; off < 16; ++off) {
    for (int64_t len : {0, 1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 200, 511, 700}) {
      std::vector<uint8_t> dst(1024 + 64, 0xEE);
      const int64_t so = (off * 5) % 64;  // the source at other offsets too
      q4::kern::stream_copy(dst.data() + 32 + off, src.data() + so, len);
      INFO("dst offset " << off << " src offset " << so << " length " << len);
      CHECK(std::memcmp(dst.data() + 32 + off, src.data() + so, static_cast<size_t>(len)) == 0);
      bool outside = true;
      for (int64_t i = 0; i < static_cast<int64_t>(dst.size()); ++i) {
        if ((i < 32 + off || i >= 32 + off + len) && dst[static_cast<size_t>(i)] != 0xEE) outside = false;
      }
      CHECK(outside);
    }
  }
}

TEST_CASE("quantize of an input whose staged result streams out: the oracle's bytes, or nothing on NaN/Inf",
          "[kernels]") {
  // 2048 x 4096 fp32 stages 4.5 MiB of codes and scales (NVFP4 and NF4;
  // MXFP4 4.25): at least kStreamCopyMin, so the result is copied out with
  // non-temporal stores, after tasks of up to 1 MiB of input. Every row
  // is checked against the scalar codec, row by row; a NaN in one of the
  // last tasks is reported at its own index and nothing is written.
  const int64_t rows = 2048, k = 4096, n = rows * k;
  Tensor x = t::random_float({rows, k}, t::f32(), 77);
  const Q4_op_options o = two_threads();
  const float g = 1e-3f;
  {
    PrefilledQuantOut out(rows, k);
    REQUIRE(NVFP4_quantize(x.t(), out.q.t(), out.s.t(), 0, g, nullptr, &o) == Q4_OK);
    std::vector<uint8_t> qr(static_cast<size_t>(k / 2)), sr(static_cast<size_t>(k / 16));
    bool same = true;
    for (int64_t r = 0; r < rows; ++r) {
      q4::ref::nvfp4_quantize(x.f() + r * k, 1, k, g, qr.data(), sr.data());
      same = same && std::memcmp(out.q.data() + r * (k / 2), qr.data(), qr.size()) == 0 &&
             std::memcmp(out.s.data() + r * (k / 16), sr.data(), sr.size()) == 0;
    }
    CHECK(same);
    CHECK(out.q.guard_intact());
    CHECK(out.s.guard_intact());
  }
  {
    Tensor q({rows, k / 2}, t::u8()), e({rows, k / 32}, t::u8());
    REQUIRE(MXFP4_quantize(x.t(), q.t(), e.t(), 0, &o) == Q4_OK);
    std::vector<uint8_t> qr(static_cast<size_t>(k / 2)), er(static_cast<size_t>(k / 32));
    bool same = true;
    for (int64_t r = 0; r < rows; ++r) {
      q4::kern::portable::mxfp4_quantize(x.f() + r * k, 1, k, qr.data(), er.data());
      same = same && std::memcmp(q.data() + r * (k / 2), qr.data(), qr.size()) == 0 &&
             std::memcmp(e.data() + r * (k / 32), er.data(), er.size()) == 0;
    }
    CHECK(same);
    CHECK(q.guard_intact());
    CHECK(e.guard_intact());
  }
  {
    Tensor q({n / 2}, t::u8()), am({n / 64}, t::f32());
    Tensor flat = x;
    flat.shape = {n};
    flat.dl.ndim = 1;
    flat.dl.shape = flat.shape.data();
    REQUIRE(NF4_quantize(flat.t(), q.t(), am.t(), 64, &o) == Q4_OK);
    std::vector<uint8_t> qk(static_cast<size_t>(n / 2));
    std::vector<float> ak(static_cast<size_t>(n / 64));
    q4::kern::nf4_quantize(q4::kern::FloatPtr{x.f(), q4::kern::FType::F32}, n, 64, qk.data(), ak.data());
    CHECK(std::memcmp(q.data(), qk.data(), qk.size()) == 0);
    CHECK(std::memcmp(am.data(), ak.data(), ak.size() * sizeof(float)) == 0);
    CHECK(q.guard_intact());
    CHECK(am.guard_intact());
  }
  const int64_t bad = n - 3 * k - 5;  // in the last tasks
  x.set(bad, std::numeric_limits<float>::quiet_NaN());
  PrefilledQuantOut out(rows, k);
  CHECK(NVFP4_quantize(x.t(), out.q.t(), out.s.t(), 0, g, nullptr, &o) == Q4_ERR_NON_FINITE);
  CHECK(std::string(Q4_last_error()).find("flat index " + std::to_string(bad)) != std::string::npos);
  CHECK(out.untouched());
}

TEST_CASE("thread count does not change results in exact mode", "[kernels]") {
  // (n = 601: the panel GEMM's tasks take groups of panels, the last partial)
  for (const int64_t n : {70, 601}) {
    const int64_t k = 320;
    Tensor w = t::random_float({n, k}, t::f32(), 5);
    Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
    float g = 0;
    REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
    for (int64_t m : {1, 4, 50, 70}) {
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
          INFO("n=" << n << " m=" << m << " threads=" << threads);
          CHECK(same_bytes(y, first));
        }
      }
    }
  }
}

TEST_CASE("forcing an ISA through the cap selects that table", "[kernels]") {
  for (int32_t isa : t::runnable_isas()) {
    t::IsaCap guard(isa);
    Tensor x({1, 16}, t::f32()), q({8}, t::u8()), s({1}, t::u8());
    REQUIRE(NVFP4_quantize(x.t(), q.t(), s.t(), 0, 0.0f, nullptr, nullptr) == Q4_OK);
    CHECK(Q4_last_isa_used() == isa);
  }
}

namespace {

// A float weight [n, k] quantized to NVFP4 (global scale from its amax) and
// to NF4 (blocks of bs), with fast-mode options: the operands of the
// stateless fast products. (Not copyable: st points at am.)
struct FastOperands {
  Tensor wq, ws, nq, am;
  float g = 0;
  NF4_state st{};
  Q4_op_options fast{};
  FastOperands(Tensor& w, int64_t n, int64_t k, int32_t bs)
      : wq({n, k / 2}, t::u8()),
        ws({n, k / 16}, t::u8()),
        nq({n * k / 2}, t::u8()),
        am({n * k / bs}, t::f32()) {
    REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
    REQUIRE(NF4_quantize(w.t(), nq.t(), am.t(), bs, nullptr) == Q4_OK);
    st.struct_size = sizeof st;
    st.blocksize = bs;
    st.absmax = am.t();
    Q4_op_options_init(&fast);
    fast.math_mode = Q4_MATH_FAST;
  }
  FastOperands(const FastOperands&) = delete;
  FastOperands& operator=(const FastOperands&) = delete;
};

}  // namespace

TEST_CASE("the task split (rows per task from the work per row) does not change results", "[kernels][fast]") {
  // GEMV and small-batch tasks take at least 64 Ki multiply-adds (the
  // integer kernels 512 Ki) and 16 rows, their count a multiple of the
  // thread count where the size limits it: (600, 128) is one task at M =
  // 1 and 3-8 at M = 4 and 12 depending on the threads, (70, 320) one
  // task, (300, 2048) the thread count's split (integer: 1-2 tasks at M =
  // 1); (40, 256) at M = 200 runs fast mode's integer panels, three
  // panels in two groups, with the rows of X split into 1-3 ranges by the
  // thread count. Every thread
  // count, exact and fast, NVFP4 and NF4, gives the bits of one thread, and
  // the GEMV rows of M = 1 are those of the same rows computed alone.
  struct Shape {
    int64_t n, k;
  };
  for (const Shape sh : {Shape{600, 128}, Shape{70, 320}, Shape{300, 2048}, Shape{40, 256}}) {
    const int64_t n = sh.n, k = sh.k;
    Tensor w = t::random_float({n, k}, t::f32(), static_cast<uint32_t>(n + k));
    FastOperands op(w, n, k, 64);
    for (int64_t m : {1, 4, 12, 50, 200}) {
      if (m == 200 && n != 40) continue;
      Tensor x = t::random_float({m, k}, t::f32(), static_cast<uint32_t>(7 * m + k));
      for (int mode = 0; mode < 2; ++mode) {
        for (int fmt_i = 0; fmt_i < 2; ++fmt_i) {
          Tensor first({m, n}, t::f32());
          for (int32_t threads : {1, 2, 3, 8}) {
            Q4_op_options o = op.fast;
            o.math_mode = mode == 1 ? Q4_MATH_FAST : Q4_MATH_EXACT;
            o.num_threads = threads;
            Tensor y({m, n}, t::f32());
            if (fmt_i == 0) {
              REQUIRE(NVFP4_linear(x.t(), op.wq.t(), op.ws.t(), 0, op.g, nullptr, y.t(), &o) == Q4_OK);
            } else {
              REQUIRE(NF4_scaled_mm(x.t(), op.nq.t(), &op.st, nullptr, y.t(), &o) == Q4_OK);
            }
            INFO("n=" << n << " k=" << k << " m=" << m << " fast=" << mode << " nf4=" << fmt_i
                      << " threads=" << threads);
            if (threads == 1) {
              first = y;
            } else {
              CHECK(same_bytes(y, first));
            }
          }
          if (m != 1 || fmt_i != 0) continue;
          // Rows 16..47 (16..39 of 40) alone (a weight of their own): the same bits
          // (where fast mode takes the same math for both: its shape rule).
          const int64_t r0 = 16, rn = std::min<int64_t>(32, n - r0);
          const q4::kern::KernelTable& kt = q4::kern::table_for(q4::active_isa());
          if (mode == 1 && (q4::kern::fast_math_fallback_shape(kt, n, k) == nullptr) !=
                               (q4::kern::fast_math_fallback_shape(kt, rn, k) == nullptr))
            continue;
          Tensor wq2({rn, k / 2}, t::u8()), ws2({rn, k / 16}, t::u8()), y2({1, rn}, t::f32());
          std::memcpy(wq2.data(), op.wq.data() + r0 * (k / 2), static_cast<size_t>(rn * (k / 2)));
          std::memcpy(ws2.data(), op.ws.data() + r0 * (k / 16), static_cast<size_t>(rn * (k / 16)));
          Q4_op_options o = op.fast;
          o.math_mode = mode == 1 ? Q4_MATH_FAST : Q4_MATH_EXACT;
          REQUIRE(NVFP4_linear(x.t(), wq2.t(), ws2.t(), 0, op.g, nullptr, y2.t(), &o) == Q4_OK);
          INFO("n=" << n << " k=" << k << " fast=" << mode << ": rows alone");
          CHECK(std::memcmp(y2.data(), first.f() + r0, static_cast<size_t>(rn) * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("16-bit outputs of many rows are made in bands of rows with the bits of one pass",
          "[kernels][fast]") {
  // y of 2048 x 16384 in fp32 is 128 MiB, over the 64 MiB the library
  // stages for a 16-bit out: it runs in two bands of 1024 rows. The fp32
  // out of the same call (no bands: written in place), converted by the
  // codec, is what one pass over a fp32 copy of y gave.
  const int64_t n = 16384, k = 16, m = 2048;
  Tensor w = t::random_float({n, k}, t::f32(), 91);
  FastOperands op(w, n, k, 64);
  Tensor bias = t::random_float({n}, t::f32(), 92);
  Tensor a = t::random_float({m, k}, t::f32(), 93);
  Tensor aq({m, k / 2}, t::u8()), as({m, k / 16}, t::u8());
  REQUIRE(NVFP4_quantize(a.t(), aq.t(), as.t(), 0, 0.0f, nullptr, nullptr) == Q4_OK);
  Tensor y32({m, n}, t::f32());
  struct Case {
    DLDataType x, out;
    int call;  // exact, fast, NF4, W4A4
  };
  for (const Case c : {Case{t::f32(), t::f16(), 0}, Case{t::f32(), t::bf16(), 1}, Case{t::f32(), t::f16(), 2},
                       Case{t::f32(), t::bf16(), 3}, Case{t::f16(), t::bf16(), 0}}) {
    Tensor x = t::random_float({m, k}, c.x, 94);
    Q4_op_options o = op.fast;
    o.math_mode = c.call == 1 ? Q4_MATH_FAST : Q4_MATH_EXACT;
    o.num_threads = 2;
    auto run = [&](Tensor& y) {
      if (c.call <= 1) return NVFP4_linear(x.t(), op.wq.t(), op.ws.t(), 0, op.g, bias.t(), y.t(), &o);
      if (c.call == 2) return NF4_scaled_mm(x.t(), op.nq.t(), &op.st, bias.t(), y.t(), &o);
      return NVFP4_scaled_mm(aq.t(), as.t(), op.wq.t(), op.ws.t(), 0, 0.75f, bias.t(), y.t(), &o);
    };
    INFO("call " << c.call << " x bits " << int(c.x.bits) << " out code " << int(c.out.code));
    REQUIRE(run(y32) == Q4_OK);
    Tensor y({m, n}, c.out), one({1}, c.out);
    REQUIRE(run(y) == Q4_OK);
    // Whole rows around the band boundary and the ends, every 61st element
    // elsewhere.
    size_t bad = 0;
    auto check_at = [&](int64_t e) {
      one.set(0, y32.f()[e]);
      bad += std::memcmp(y.data() + 2 * e, one.data(), 2) != 0;
    };
    for (const int64_t r : {int64_t{0}, int64_t{1023}, int64_t{1024}, int64_t{1025}, m - 1}) {
      for (int64_t j = 0; j < n; ++j) check_at(r * n + j);
    }
    for (int64_t e = 0; e < m * n; e += 61) check_at(e);
    CHECK(bad == 0);
    CHECK(y.guard_intact());
  }
}

TEST_CASE("fast math mode stays within its documented int8-activation bound", "[kernels][fast]") {
  // |y_fast - y| <= sum_b (amax_b(x)/127/2) * sum_{k in b} |w_k| + fp32 rounding.
  const int64_t n = 23, k = 96;
  Tensor w = t::random_float({n, k}, t::f32(), 31);
  FastOperands op(w, n, k, 32);
  Tensor &wq = op.wq, &ws = op.ws, &nq = op.nq, &am = op.am;
  const float g = op.g;
  const NF4_state& st = op.st;
  Q4_op_options& fast = op.fast;
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
  // (64 x 64: a shape fast mode runs on the integer kernels, not the exact
  // ones, where Inf x w is Inf.)
  const int64_t n = 64, k = 64;
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

// ---------------------------------------------------------------------------
// Every entry of every kernel table this CPU runs, called directly (forced
// through kern::table_for) and compared with the scalar reference of
// src/kernels/ref/: bit-exact for quantize, dequantize, panels and amax;
// within the exact-mode bound for the products.
// ---------------------------------------------------------------------------
namespace {

namespace kern = q4::kern;
namespace ref = q4::ref;

enum Kind : int {
  kNvfp4Gemv,
  kNf4Gemv,
  kNvfp4Panel,
  kNf4Panel,
  kF32Panel,
  kGemmMicro,
  kQuantize,
  kDequantize,
  kAmax,
  kNvfp4Small,
  kNf4Small,
  kActToF32,
  kI8QuantizeAct,
  kF32ToAct,
  kKinds
};
const char* const kKindName[kKinds] = {
    "nvfp4_gemv", "nf4_gemv",       "nvfp4_panel",      "nf4_panel", "f32_panel",
    "gemm_micro", "nvfp4_quantize", "nvfp4_dequantize", "amax",      "nvfp4_small",
    "nf4_small",  "act_to_f32",     "i8_quantize_act",  "f32_to_act"};

// (isa, kind) pairs whose comparison ran.
using Coverage = std::set<std::pair<int32_t, int>>;

// Kernel tables compiled into this build, split by whether this CPU runs them.
// x as fp16 or bf16 (h, round to nearest even) and those values back in
// fp32 (back): the inputs a 16-bit path must treat as exactly `back`.
void to_16bit(kern::FType ft, const std::vector<float>& x, std::vector<uint16_t>& h,
              std::vector<float>& back) {
  h.resize(x.size());
  back.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    h[i] = ft == kern::FType::F16 ? q4::fmt::f32_to_f16(x[i]) : q4::fmt::f32_to_bf16(x[i]);
    back[i] = ft == kern::FType::F16 ? q4::fmt::f16_to_f32(h[i]) : q4::fmt::bf16_to_f32(h[i]);
  }
}

std::vector<int32_t> compiled_tables(bool runnable) {
  std::vector<int32_t> out;
  for (int32_t isa : q4::kIsaPreference) {
    if (q4::isa_compiled(isa) && q4::cpu_has_isa(q4::cpu_info(), isa) == runnable) out.push_back(isa);
  }
  return out;
}

std::vector<float> randoms(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& f : v) f = u(gen);
  return v;
}

struct AlignedFree {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
// 64-byte aligned floats (panels are read with aligned vector loads).
std::unique_ptr<float[], AlignedFree> aligned_floats(size_t n, float fill) {
  std::unique_ptr<float[], AlignedFree> p(
      static_cast<float*>(::operator new[](n * sizeof(float), std::align_val_t(64))));
  std::fill(p.get(), p.get() + n, fill);
  return p;
}

bool same_floats(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// An NVFP4 weight [n, k] quantized by the reference.
struct NvMatrix {
  std::vector<uint8_t> q, s;
  kern::NvWeights w;
  NvMatrix(int64_t n, int64_t k, uint32_t seed)
      : q(static_cast<size_t>(n * k / 2)), s(static_cast<size_t>(n * k / 16)) {
    const std::vector<float> x = randoms(static_cast<size_t>(n * k), seed, 3.0f);
    const float g = ref::amax(x.data(), n * k) / (6.0f * 448.0f);
    ref::nvfp4_quantize(x.data(), n, k, g, q.data(), s.data());
    w = kern::NvWeights{q.data(), s.data(), g, k};
  }
};

// An NF4 weight of n*k elements with random codes and absmax.
struct Nf4Matrix {
  std::vector<uint8_t> q;
  std::vector<float> absmax, lut;
  kern::Nf4Weights w;
  Nf4Matrix(int64_t n, int64_t k, int32_t shift, uint32_t seed)
      : q(static_cast<size_t>((n * k + 1) / 2)), lut(16) {
    const int64_t bs = int64_t{1} << shift;
    std::mt19937 gen(seed);
    for (uint8_t& b : q) b = static_cast<uint8_t>(gen());
    absmax = randoms(static_cast<size_t>((n * k + bs - 1) / bs), seed + 1, 2.0f);
    for (float& a : absmax) a = std::fabs(a) + 0.01f;
    for (uint32_t c = 0; c < 16; ++c) lut[c] = q4::fmt::nf4_decode(c);
    w = kern::Nf4Weights{q.data(), absmax.data(), lut.data(), k, bs, shift};
  }
};

// Checks y[i*ldy + (j - n0)] of a GEMV entry against the reference product
// (NaN exactly where the reference is NaN).
template <class Dot>
size_t gemv_violations(const float* x, int64_t ldx, int32_t m, int64_t k, int64_t n0, int64_t n1,
                       const float* y, int64_t ldy, Dot&& dot) {
  size_t bad = 0;
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t j = n0; j < n1; ++j) {
      const ref::Dot d = dot(x + i * ldx, j);
      const float v = y[i * ldy + (j - n0)];
      if (std::isnan(v) != std::isnan(d.value) || std::fabs(v - d.value) > ref::product_bound(k, d.magnitude))
        ++bad;
    }
  }
  return bad;
}

// NvWeights::signs: the sign rule on the way. A set sign bit among the
// scales of rows [n0, n1) is reported, one outside them is not, the codes
// that take the decoders' slow paths (zero, subnormal, NaN) are not signs,
// and y does not depend on whether the check runs.
void check_nvfp4_gemv_signs(const kern::KernelTable& t) {
  // (the chunk GEMV with a half chunk last, the even/odd one; 2048: M = 8
  // in three K chunks on the AVX2 tables)
  for (int64_t k : {128, 272, 640, 192, 2048}) {
    const int64_t n = 13, n0 = 2, n1 = 11, kb = k / 16;
    NvMatrix mat(n, k, static_cast<uint32_t>(3 * k));
    mat.s[static_cast<size_t>(n0 * kb + 1)] = 0x00;             // zero
    mat.s[static_cast<size_t>((n0 + 1) * kb + 2)] = 0x05;       // subnormal
    mat.s[static_cast<size_t>((n1 - 2) * kb + kb - 1)] = 0x7f;  // NaN
    // (code 40: K = 2048 at M = 8 scans 48 codes a row per K chunk on the
    // AVX2 tables, 32 and the last 32)
    mat.s[static_cast<size_t>((n0 + 2) * kb + std::min<int64_t>(kb - 1, 40))] = 0x00;
    mat.s[static_cast<size_t>((n0 - 1) * kb + 3)] |= 0x80;  // outside [n0, n1)
    mat.s[static_cast<size_t>(n1 * kb)] |= 0x80;            // outside [n0, n1)
    for (int32_t m : {1, 3, kern::kGemvMaxRows}) {
      INFO("signs k=" << k << " m=" << m);
      const std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(m + 5 * k));
      std::vector<float> y0(static_cast<size_t>(m * (n1 - n0))), y1(y0.size());
      kern::NvWeights w = mat.w;
      t.nvfp4_gemv(x.data(), k, m, w, n0, n1, y0.data(), n1 - n0);
      // (the slow-path codes decoded as the reference does them)
      CHECK(gemv_violations(x.data(), k, m, k, n0, n1, y0.data(), n1 - n0,
                            [&](const float* xi, int64_t j) { return ref::nvfp4_dot(xi, mat.w, j); }) == 0);
      kern::ScaleSigns signs;
      w.signs = &signs;
      t.nvfp4_gemv(x.data(), k, m, w, n0, n1, y1.data(), n1 - n0);
      CHECK_FALSE(signs.negative.load());
      CHECK(std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)) == 0);
      for (int64_t at : {n0 * kb, (n0 + 4) * kb + kb / 2, n1 * kb - 1}) {
        std::vector<uint8_t> s = mat.s;
        s[static_cast<size_t>(at)] |= 0x80;
        kern::ScaleSigns found;
        kern::NvWeights wb = mat.w;
        wb.s = s.data();
        wb.signs = &found;
        t.nvfp4_gemv(x.data(), k, m, wb, n0, n1, y1.data(), n1 - n0);
        CHECK(found.negative.load());
      }
    }
  }
}

void check_nvfp4_gemv(const kern::KernelTable& t, Coverage& cov) {
  // (K % 128 == 0: the tables' whole-chunk GEMV paths; K % 128 == 64: the
  // AVX-512 chunk GEMV's last half chunk; K % 64 == 32: the AVX2 byte-table
  // GEMV's last half group.)
  for (int64_t k : {16, 32, 48, 128, 272, 528, 640, 64, 192, 704, 96, 224}) {
    const int64_t n = 19, n0 = 3, n1 = n;
    NvMatrix mat(n, k, static_cast<uint32_t>(k));
    for (int32_t m = 1; m <= kern::kGemvMaxRows; ++m) {
      INFO(kKindName[kNvfp4Gemv] << " k=" << k << " m=" << m);
      const int64_t ldx = k + 5, ldy = n1 - n0 + 2;
      const std::vector<float> x = randoms(static_cast<size_t>(m * ldx), static_cast<uint32_t>(m + k));
      std::vector<float> y(static_cast<size_t>(m * ldy), -7.0f);
      t.nvfp4_gemv(x.data(), ldx, m, mat.w, n0, n1, y.data(), ldy);
      CHECK(gemv_violations(x.data(), ldx, m, k, n0, n1, y.data(), ldy,
                            [&](const float* xi, int64_t j) { return ref::nvfp4_dot(xi, mat.w, j); }) == 0);
      CHECK(y[static_cast<size_t>(ldy - 1)] == -7.0f);  // columns past n1 - n0 untouched
    }
  }
  check_nvfp4_gemv_signs(t);
  cov.insert({t.isa, kNvfp4Gemv});
}

void check_nf4_gemv(const kern::KernelTable& t, Coverage& cov) {
  // (K % 128 == 64 too: the AVX-512 chunk GEMV's half chunk at M <= 2 with
  // blocksize <= 64; blocks of 128 and 256 straddle its chunks there.
  // Blocksize 16: two absmax per 32 elements in the NEON GEMV.)
  for (int64_t k : {32, 40, 64, 96, 128, 384, 544, 192, 320}) {
    for (int32_t shift : {4, 5, 6, 7, 8}) {
      const int64_t n = 13, n0 = 2, n1 = 11;
      Nf4Matrix mat(n, k, shift, static_cast<uint32_t>(k + shift));
      for (int32_t m : {1, 2, 3, 5, 8}) {
        INFO(kKindName[kNf4Gemv] << " k=" << k << " blocksize=" << (1 << shift) << " m=" << m);
        const int64_t ldx = k + 3, ldy = n1 - n0;
        const std::vector<float> x = randoms(static_cast<size_t>(m * ldx), static_cast<uint32_t>(m * 7 + k));
        std::vector<float> y(static_cast<size_t>(m * ldy));
        t.nf4_gemv(x.data(), ldx, m, mat.w, n0, n1, y.data(), ldy);
        CHECK(gemv_violations(x.data(), ldx, m, k, n0, n1, y.data(), ldy,
                              [&](const float* xi, int64_t j) { return ref::nf4_dot(xi, mat.w, j); }) == 0);
      }
    }
  }
  cov.insert({t.isa, kNf4Gemv});
}

// (k0, kc) pairs: aligned to the 16-element blocks and not; the last is
// longer than the row buffers the ISA panel packers decode through.
const std::pair<int64_t, int64_t> kPanelSpans[] = {{0, 256}, {16, 80}, {48, 35},
                                                   {3, 17},  {0, 528}, {16, 2080}};

void check_panels(const kern::KernelTable& t, Coverage& cov) {
  const int32_t nr = t.panel_nr;
  const int64_t k = 2112, n0 = 5, n = n0 + nr;
  NvMatrix nv(n, k, 11);
  // NF4 blocks of 16 (one absmax per 16-element block), 64 and 128 (2112
  // columns: blocks straddle rows, so a row's blocks start mid-block).
  Nf4Matrix nfs[] = {Nf4Matrix(n, k, 6, 12), Nf4Matrix(n, k, 4, 14), Nf4Matrix(n, k, 7, 15)};
  const int64_t ldw = k + 3;
  const std::vector<float> wf = randoms(static_cast<size_t>(n * ldw), 13);
  for (const auto& [k0, kc] : kPanelSpans) {
    for (int32_t rows : {nr, nr - 3, nr / 2, nr / 2 + 1, 1}) {
      INFO("panels k0=" << k0 << " kc=" << kc << " rows=" << rows << " nr=" << nr);
      const size_t size = static_cast<size_t>(kc * nr);
      auto want = aligned_floats(size, 0.0f), got = aligned_floats(size, std::nanf(""));
      ref::nvfp4_panel(nv.w, n0, rows, k0, kc, want.get(), nr);
      t.nvfp4_panel(nv.w, n0, rows, k0, kc, got.get());
      CHECK(same_floats(want.get(), got.get(), size));
      for (const Nf4Matrix& nf : nfs) {
        INFO("NF4 blocksize " << nf.w.blocksize);
        got = aligned_floats(size, std::nanf(""));
        ref::nf4_panel(nf.w, n0, rows, k0, kc, want.get(), nr);
        t.nf4_panel(nf.w, n0, rows, k0, kc, got.get());
        CHECK(same_floats(want.get(), got.get(), size));
      }
      got = aligned_floats(size, std::nanf(""));
      ref::f32_panel(wf.data(), ldw, n0, rows, k0, kc, want.get(), nr);
      t.f32_panel(wf.data(), ldw, n0, rows, k0, kc, got.get());
      CHECK(same_floats(want.get(), got.get(), size));
    }
  }
  cov.insert({t.isa, kNvfp4Panel});
  cov.insert({t.isa, kNf4Panel});
  cov.insert({t.isa, kF32Panel});
}

void check_gemm_micro(const kern::KernelTable& t, Coverage& cov) {
  const int32_t nr = t.panel_nr;
  for (int64_t kc : {1, 17, 256}) {
    auto panel = aligned_floats(static_cast<size_t>(kc * nr), 0.0f);
    const std::vector<float> pv = randoms(static_cast<size_t>(kc * nr), static_cast<uint32_t>(kc));
    std::copy(pv.begin(), pv.end(), panel.get());
    for (int32_t mr = 1; mr <= t.micro_mr; ++mr) {
      for (int32_t nused : {nr, nr - 1, 1}) {
        for (bool accumulate : {false, true}) {
          INFO(kKindName[kGemmMicro] << " kc=" << kc << " mr=" << mr << " nr=" << nused
                                     << " acc=" << accumulate);
          const int64_t ldx = kc + 3, ldy = nr + 4;
          const std::vector<float> x =
              randoms(static_cast<size_t>((mr + 1) * ldx), static_cast<uint32_t>(mr));
          const std::vector<float> y0 = randoms(static_cast<size_t>((mr + 1) * ldy), 77);
          std::vector<float> y = y0;
          t.gemm_micro(x.data(), ldx, mr, panel.get(), kc, y.data(), ldy, nused, accumulate);
          size_t bad = 0, touched = 0;
          for (int32_t i = 0; i <= mr; ++i) {
            for (int64_t r = 0; r < ldy; ++r) {
              const size_t at = static_cast<size_t>(i * ldy + r);
              if (i == mr || r >= nused) {
                touched += y[at] != y0[at];
                continue;
              }
              ref::Dot d = ref::panel_dot(x.data() + i * ldx, panel.get(), kc, nr, static_cast<int32_t>(r));
              double bound = ref::product_bound(kc, d.magnitude);
              if (accumulate) {
                d.value += y0[at];
                bound += std::ldexp(1.0, -24) * (std::fabs(d.value) + std::fabs(y0[at]));
              }
              bad += std::fabs(y[at] - d.value) > bound;
            }
          }
          CHECK(bad == 0);
          CHECK(touched == 0);
        }
      }
    }
  }
  cov.insert({t.isa, kGemmMicro});
}

// (rows, k): several groups of 16 blocks plus a tail, a tail only, a whole group.
const std::pair<int64_t, int64_t> kQuantShapes[] = {{37, 272}, {3, 16}, {1, 512}};

void check_quantize_dequantize(const kern::KernelTable& t, Coverage& cov) {
  for (const auto& [rows, k] : kQuantShapes) {
    std::vector<float> x = randoms(static_cast<size_t>(rows * k), static_cast<uint32_t>(rows * k), 5.0f);
    for (int64_t i = 0; i < 16 && i < rows * k; ++i) x[static_cast<size_t>(i)] = 0.0f;  // zero block
    if (rows * k > 48) {
      x[20] = 1e-30f;  // underflowing scale
      x[40] = 0.25f;   // ties
      x[41] = -0.75f;
    }
    for (float g : {ref::amax(x.data(), rows * k) / (6.0f * 448.0f), 3e-3f, 1e-12f}) {
      INFO("quantize rows=" << rows << " k=" << k << " g=" << g);
      const size_t nq = static_cast<size_t>(rows * k / 2), ns = static_cast<size_t>(rows * k / 16);
      std::vector<uint8_t> q_ref(nq), s_ref(ns), q(nq, 0xee), s(ns, 0xee);
      ref::nvfp4_quantize(x.data(), rows, k, g, q_ref.data(), s_ref.data());
      t.nvfp4_quantize(x.data(), rows, k, g, q.data(), s.data());
      CHECK(q == q_ref);
      CHECK(s == s_ref);
      // Dequantize the reference codes, plus subnormal and zero scales.
      s_ref[0] = 0;
      if (ns > 1) s_ref[1] = 1;
      std::vector<float> d_ref(static_cast<size_t>(rows * k)), d(static_cast<size_t>(rows * k), -1.0f);
      ref::nvfp4_dequantize(q_ref.data(), s_ref.data(), g, rows, k, d_ref.data());
      t.nvfp4_dequantize(q_ref.data(), s_ref.data(), g, rows, k, d.data());
      CHECK(same_floats(d.data(), d_ref.data(), d.size()));
    }
  }
  cov.insert({t.isa, kQuantize});
  cov.insert({t.isa, kDequantize});
}

void check_amax(const kern::KernelTable& t, Coverage& cov) {
  for (int64_t n : {0, 1, 7, 8, 15, 16, 31, 32, 33, 1000}) {
    std::vector<float> x = randoms(static_cast<size_t>(n) + 1, static_cast<uint32_t>(n), 4.0f);
    if (n > 2) x[static_cast<size_t>(n / 2)] = -9.5f;
    x[static_cast<size_t>(n)] = 100.0f;  // past the end: never read
    INFO("amax n=" << n);
    CHECK(t.amax(x.data(), n) == ref::amax(x.data(), n));
    // absmax_bits: the bits of the same amax on finite input, and
    // >= 0x7f800000 as soon as one element is NaN or Inf.
    const float a = ref::amax(x.data(), n);
    uint32_t abits;
    std::memcpy(&abits, &a, 4);
    CHECK(t.absmax_bits(x.data(), n) == abits);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        if (n == 0) continue;
        std::vector<float> xb = x;
        xb[static_cast<size_t>(at)] = bad;
        CHECK(t.absmax_bits(xb.data(), n) >= 0x7f800000u);
      }
    }
  }
  // absmax_bits16 (where the table has it): the bits absmax_bits gives on
  // the widened values, for random 16-bit patterns (NaN, Inf, subnormals,
  // both zeros among them) and finite ones, at lengths around 16 and 32.
  if (t.absmax_bits16 != nullptr) {
    std::mt19937 gen(16);
    for (int64_t n : {0, 1, 15, 16, 17, 31, 32, 33, 47, 1000}) {
      for (bool bf16 : {false, true}) {
        for (bool finite : {false, true}) {
          INFO("absmax_bits16 n=" << n << (bf16 ? " bf16" : " fp16") << (finite ? " finite" : " any"));
          std::vector<uint16_t> h(static_cast<size_t>(n) + 1);
          std::vector<float> wide(static_cast<size_t>(n));
          for (size_t i = 0; i < h.size(); ++i) {
            h[i] = static_cast<uint16_t>(gen());
            const uint16_t exp_mask = bf16 ? 0x7f80 : 0x7c00;
            if (finite && (h[i] & exp_mask) == exp_mask) h[i] = static_cast<uint16_t>(h[i] & ~0x4000u);
          }
          h[static_cast<size_t>(n)] = 0x7fff;  // past the end: never read
          for (size_t i = 0; i < wide.size(); ++i)
            wide[i] = bf16 ? q4::fmt::bf16_to_f32(h[i]) : q4::fmt::f16_to_f32(h[i]);
          CHECK(t.absmax_bits16(h.data(), n, bf16) == t.absmax_bits(wide.data(), n));
        }
      }
    }
  }
  cov.insert({t.isa, kAmax});
}

// act_to_f32: every fp16 and bf16 bit pattern (NaN: a NaN) and fp32 values,
// at offsets and lengths around the vector width, equal to the codec's
// conversion; nothing written past n.
void check_act_to_f32(const kern::KernelTable& t, Coverage& cov) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (kern::FType ft : {kern::FType::F16, kern::FType::BF16}) {
    std::vector<float> got(all.size() + 1, 7.0f);
    t.act_to_f32(all.data(), ft, 0, static_cast<int64_t>(all.size()), got.data());
    size_t bad = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const float want = ft == kern::FType::F16 ? q4::fmt::f16_to_f32(all[i]) : q4::fmt::bf16_to_f32(all[i]);
      uint32_t wb = 0, gb = 0;
      std::memcpy(&wb, &want, 4);
      std::memcpy(&gb, &got[i], 4);
      const bool same = std::isnan(want) ? std::isnan(got[i]) : wb == gb;
      if (!same) ++bad;
    }
    INFO("act_to_f32 16-bit type " << static_cast<int>(ft));
    CHECK(bad == 0);
    CHECK(got[all.size()] == 7.0f);
  }
  const std::vector<float> xf = randoms(100, 5, 3.0f);
  for (int64_t first : {0, 1, 5}) {
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 33, 64, 90}) {
      std::vector<float> got(static_cast<size_t>(n) + 1, 7.0f);
      t.act_to_f32(xf.data(), kern::FType::F32, first, n, got.data());
      INFO("act_to_f32 fp32 first=" << first << " n=" << n);
      CHECK(std::memcmp(got.data(), xf.data() + first, static_cast<size_t>(n) * 4) == 0);
      CHECK(got[static_cast<size_t>(n)] == 7.0f);
      t.act_to_f32(all.data() + 1000, kern::FType::BF16, first, n, got.data());
      for (int64_t i = 0; i < n; ++i)
        CHECK(got[static_cast<size_t>(i)] ==
              q4::fmt::bf16_to_f32(all[static_cast<size_t>(1000 + first + i)]));
      CHECK(got[static_cast<size_t>(n)] == 7.0f);
    }
  }
  cov.insert({t.isa, kActToF32});
}

// The small-batch entries: for several m, row ranges, K ranges and K
// chunks, every output within the exact-mode bound of the reference over
// its K range (x zero outside it, never read there: NaN is stored there in
// the kernel's copy); the same bits whatever m, n0/n1 and kc are (the
// fixed per-output sequence), and fp16/bf16 activations give the bits of
// their fp32 values.
template <class Weights, class Small, class Dot>
void check_small_entry(Small small, const Weights& w, int64_t n, int kind, Dot&& dot) {
  const int64_t k = w.k;
  const int64_t n0 = 2, n1 = n - 1;
  const std::pair<int64_t, int64_t> ranges[] = {{0, k}, {16, k}, {0, k - 16}, {k / 32 * 16, k}};
  for (const auto& [k0, k1] : ranges) {
    if (k1 <= k0) continue;
    for (int32_t m : {1, 2, 3, 5, 7, 8, 13, 17}) {
      const int64_t ldx = k + 5, ldy = n1 - n0 + 2;
      std::vector<float> x = randoms(static_cast<size_t>(m * ldx), static_cast<uint32_t>(m * 31 + k + k0));
      std::vector<float> xz = x, xnan = x;  // xz: zero outside [k0, k1); xnan: NaN there
      for (int32_t i = 0; i < m; ++i) {
        for (int64_t c = 0; c < ldx; ++c) {
          if (c >= k0 && c < k1) continue;
          xz[static_cast<size_t>(i * ldx + c)] = 0.0f;
          xnan[static_cast<size_t>(i * ldx + c)] = std::nanf("");
        }
      }
      std::vector<float> first;
      for (int64_t kc : {16, 64, 512}) {
        INFO(kKindName[kind] << " k=" << k << " [" << k0 << ", " << k1 << ") m=" << m << " kc=" << kc);
        std::vector<float> y(static_cast<size_t>(m * ldy), -7.0f);
        small(xnan.data(), ldx, m, w, n0, n1, k0, k1, y.data(), ldy, kc);
        CHECK(gemv_violations(xz.data(), ldx, m, k, n0, n1, y.data(), ldy,
                              [&](const float* xi, int64_t j) { return dot(xi, j); }) == 0);
        CHECK(y[static_cast<size_t>(ldy - 1)] == -7.0f);  // columns past n1 - n0 untouched
        if (first.empty()) {
          first = y;
        } else {
          CHECK(same_floats(first.data(), y.data(), y.size()));  // kc is a speed knob only
        }
      }
      // Row by row and over other row ranges: the same bits.
      for (int32_t i = 0; i < m; i += 4) {
        std::vector<float> yi(static_cast<size_t>(ldy), -7.0f);
        small(xnan.data() + i * ldx, ldx, 1, w, n0, n0 + 1, k0, k1, yi.data(), ldy, 64);
        small(xnan.data() + i * ldx, ldx, 1, w, n0 + 1, n1, k0, k1, yi.data() + 1, ldy, 64);
        CHECK(same_floats(yi.data(), first.data() + i * ldy, static_cast<size_t>(n1 - n0)));
      }
      // fp16 / bf16 activations: the bits of the fp32 result on their values.
      for (kern::FType ft : {kern::FType::F16, kern::FType::BF16}) {
        std::vector<uint16_t> h;
        std::vector<float> hv;
        to_16bit(ft, xnan, h, hv);
        std::vector<float> yh(static_cast<size_t>(m * ldy), -7.0f), yf(static_cast<size_t>(m * ldy), -7.0f);
        small(kern::ActRows(h.data(), ft), ldx, m, w, n0, n1, k0, k1, yh.data(), ldy, 64);
        small(hv.data(), ldx, m, w, n0, n1, k0, k1, yf.data(), ldy, 64);
        INFO(kKindName[kind] << " 16-bit activations k=" << k << " m=" << m);
        CHECK(same_floats(yh.data(), yf.data(), yh.size()));
      }
    }
  }
}

void check_small(const kern::KernelTable& t, Coverage& cov) {
  for (int64_t k : {16, 48, 272, 528}) {
    const int64_t n = 23;
    NvMatrix mat(n, k, static_cast<uint32_t>(k + 5));
    check_small_entry(t.nvfp4_small, mat.w, n, kNvfp4Small,
                      [&](const float* xi, int64_t j) { return ref::nvfp4_dot(xi, mat.w, j); });
  }
  cov.insert({t.isa, kNvfp4Small});
  for (int64_t k : {32, 64, 544}) {
    for (int32_t shift : {4, 6, 8}) {
      const int64_t n = 14;
      Nf4Matrix mat(n, k, shift, static_cast<uint32_t>(k * 3 + shift));
      check_small_entry(t.nf4_small, mat.w, n, kNf4Small,
                        [&](const float* xi, int64_t j) { return ref::nf4_dot(xi, mat.w, j); });
    }
  }
  cov.insert({t.isa, kNf4Small});
}

// Fast-mode activation quantization: every byte, scale and correction
// equal to the portable function's, on blocks that exercise each branch
// (zero, NaN/Inf, subnormal, huge, exact .5 quotients, clamps), blocks of
// every magnitude, and quotients at and a few ulps around every k + 1/2
// (the AVX-512 quantizer multiplies by 1 / scale where that cannot change
// a code and divides near those points).
void check_i8_quantize_act(const kern::KernelTable& t, Coverage& cov) {
  const int64_t m = 64, k = 16 * 41, ldx = k + 7, ldxq = k + 5, ldxs = k / 16 + 3;
  std::vector<float> x = randoms(static_cast<size_t>(m * ldx), 77, 5.0f);
  auto block = [&](int64_t i, int64_t b) { return x.data() + i * ldx + b * 16; };
  std::mt19937 gen(78);
  for (int64_t i = 3; i < m; ++i) {
    for (int64_t b = 0; b < k / 16; ++b) {
      float* xb = block(i, b);
      if (i < 20) {  // every magnitude: amax 2^-140 .. 2^120
        const float e = std::ldexp(1.0f, static_cast<int>(gen() % 261) - 140);
        for (int j = 0; j < 16; ++j) xb[j] *= e;
        continue;
      }
      // amax A in element 0; the others at (k' + 1/2) scale and up to 3
      // ulps either side, scale = A / 127 as the quantizer computes it
      const float a =
          std::ldexp(1.0f + static_cast<float>(gen() % 1000000) / 1e6f, static_cast<int>(gen() % 40) - 20);
      const float scale = a / 127.0f;
      xb[0] = gen() % 2 ? a : -a;
      for (int j = 1; j < 16; ++j) {
        float v = (static_cast<float>(gen() % 127) + 0.5f) * scale;
        for (int step = static_cast<int>(gen() % 7) - 3; step != 0; step += step > 0 ? -1 : 1)
          v = std::nextafter(v, step > 0 ? 1e30f : 0.0f);
        xb[j] = gen() % 2 ? v : -v;
      }
    }
  }
  std::fill(block(0, 1), block(0, 1) + 16, 0.0f);  // all zero
  std::fill(block(1, 1), block(1, 1) + 16, -0.0f);
  block(0, 2)[3] = std::numeric_limits<float>::quiet_NaN();
  block(0, 3)[15] = std::numeric_limits<float>::infinity();
  block(1, 3)[0] = -std::numeric_limits<float>::infinity();
  for (int e = 0; e < 16; ++e) block(0, 4)[e] = static_cast<float>(e - 8) * 1e-40f;  // subnormal
  for (int e = 0; e < 16; ++e) block(0, 5)[e] = static_cast<float>(e - 7) * 3e37f;   // huge
  for (int e = 0; e < 16; ++e)
    block(0, 6)[e] = static_cast<float>(2 * e - 15) * 0.5f * (127.0f / 7.5f) / 127.0f;
  for (int e = 0; e < 16; ++e)
    block(1, 6)[e] = (e % 2 ? 1.0f : -1.0f) * (static_cast<float>(e) + 0.5f);  // .5 quotients
  block(2, 7)[9] = 1e-45f;                                                     // the smallest subnormal alone
  for (int32_t bias : {kern::kI8WeightBias, kern::kI8Nf4Bias}) {
    std::vector<int8_t> q0(static_cast<size_t>(m * ldxq), 5), q1 = q0;
    std::vector<float> s0(static_cast<size_t>(m * ldxs), 9.0f), s1 = s0;
    std::vector<int32_t> c0(static_cast<size_t>(m * ldxs), 11), c1 = c0;
    kern::i8_activations_quantize(x.data(), ldx, m, k, q0.data(), ldxq, s0.data(), c0.data(), ldxs, bias);
    t.i8_quantize_act(x.data(), ldx, m, k, q1.data(), ldxq, s1.data(), c1.data(), ldxs, bias);
    INFO("i8_quantize_act bias " << bias);
    CHECK(q0 == q1);
    CHECK(std::memcmp(s0.data(), s1.data(), s0.size() * 4) == 0);
    CHECK(c0 == c1);
  }
  cov.insert({t.isa, kI8QuantizeAct});
}

// fp32 values whose fp16 and bf16 roundings are hard: every sign, exponent
// and top-7 mantissa bits (all 65536 upper halves) with low halves at and
// around every rounding position (ties, one below, one above), Inf, NaNs
// with payloads, then random bit patterns.
std::vector<float> rounding_cases() {
  std::vector<uint32_t> bits;
  const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000,
                           0x7fff, 0x8000, 0x8001, 0xbfff, 0xc000, 0xe000, 0xf000, 0xffff};
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : lows) bits.push_back(hi << 16 | lo);
  }
  std::mt19937 gen(11);
  for (int i = 0; i < (1 << 20); ++i) bits.push_back(static_cast<uint32_t>(gen()));
  std::vector<float> v(bits.size());
  std::memcpy(v.data(), bits.data(), bits.size() * 4);
  return v;
}

// f32_to_act: the codec's fp16 / bf16 rounding bit for bit (NaN included:
// the codec's canonical NaN), fp32 copied, at offsets and lengths around
// the vector width; nothing written outside [first, first + n).
void check_f32_to_act(const kern::KernelTable& t, Coverage& cov) {
  static const std::vector<float> cases = rounding_cases();
  for (kern::FType ft : {kern::FType::F16, kern::FType::BF16}) {
    std::vector<uint16_t> got(cases.size() + 1, 0x5555);
    t.f32_to_act(got.data(), ft, 0, static_cast<int64_t>(cases.size()), cases.data());
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const uint16_t want =
          ft == kern::FType::F16 ? q4::fmt::f32_to_f16(cases[i]) : q4::fmt::f32_to_bf16(cases[i]);
      if (got[i] != want && bad++ == 0) first_bad = i;
    }
    uint32_t fb = 0;
    std::memcpy(&fb, &cases[first_bad], 4);
    INFO("f32_to_act 16-bit type " << static_cast<int>(ft) << ", first bad input bits 0x" << std::hex << fb);
    CHECK(bad == 0);
    CHECK(got[cases.size()] == 0x5555);
  }
  const std::vector<float> xf = randoms(100, 6, 3.0f);
  for (int64_t first : {0, 1, 5}) {
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 33, 64, 90}) {
      INFO("f32_to_act first=" << first << " n=" << n);
      std::vector<float> gf(static_cast<size_t>(first + n) + 1, 7.0f);
      t.f32_to_act(gf.data(), kern::FType::F32, first, n, xf.data());
      CHECK(std::memcmp(gf.data() + first, xf.data(), static_cast<size_t>(n) * 4) == 0);
      for (int64_t i = 0; i < first; ++i) CHECK(gf[static_cast<size_t>(i)] == 7.0f);
      CHECK(gf[static_cast<size_t>(first + n)] == 7.0f);
      std::vector<uint16_t> gh(static_cast<size_t>(first + n) + 1, 0x5555);
      t.f32_to_act(gh.data(), kern::FType::BF16, first, n, xf.data());
      for (int64_t i = 0; i < n; ++i)
        CHECK(gh[static_cast<size_t>(first + i)] == q4::fmt::f32_to_bf16(xf[static_cast<size_t>(i)]));
      for (int64_t i = 0; i < first; ++i) CHECK(gh[static_cast<size_t>(i)] == 0x5555);
      CHECK(gh[static_cast<size_t>(first + n)] == 0x5555);
    }
  }
  cov.insert({t.isa, kF32ToAct});
}

void check_table(const kern::KernelTable& t, Coverage& cov) {
  check_small(t, cov);
  check_nvfp4_gemv(t, cov);
  check_nf4_gemv(t, cov);
  check_panels(t, cov);
  check_gemm_micro(t, cov);
  check_quantize_dequantize(t, cov);
  check_amax(t, cov);
  check_act_to_f32(t, cov);
  check_i8_quantize_act(t, cov);
  check_f32_to_act(t, cov);
}

void warn_skipped_tables() {
  const std::vector<int32_t> skipped = compiled_tables(false);
  for (int32_t isa : skipped)
    WARN("SKIPPED kernel table " << q4::isa_name(isa) << ": this CPU cannot run it");
  if (!skipped.empty()) WARN("SKIPPED: " << skipped.size() << " kernel table(s) not compared on this CPU");
}

}  // namespace

// The fused GEMV of each table: output (i, j) has one fp32 sequence, so
// row i of x gives the same bits alone (m = 1) as among m rows (AVX2:
// among the M of its kernel), and row j
// of W the same bits in any row range (the kernels group rows of W, and
// the AVX-512 ones split K into L1-sized blocks once x of m rows is large,
// keeping the accumulators between blocks). Two K of each format: one
// with K % 128 != 0 (the even/odd GEMV on AVX-512; K > 16384 makes every
// m >= 2 blocked there) and one with K % 128 == 0 (AVX-512's chunk GEMV at
// every m up to 16, blocked from m = 2 at this K); 17 rows are two row
// blocks.
namespace {
// The body of the test below for one table (isa: its level, for the AVX2
// tables' two kernels and the messages).
void check_gemv_same_bits(const kern::KernelTable& t, int32_t isa) {
  // NVFP4: 1027 blocks of 16, a tail after the 256-element groups; NF4:
  // K % 32 == 0 (its vector kernels' condition).
  // K % 128 == 48 (NF4 32), == 64 (AVX-512: the chunk GEMV with a last
  // half chunk), == 0.
  for (const int64_t kmul : {int64_t{0}, int64_t{2}, int64_t{1}}) {
    const int64_t kn = kmul == 1 ? 4224 : kmul == 2 ? 4160 : 16432, kf = kmul == 0 ? 16416 : kn, n = 17;
    NvMatrix nv(n, kn, 5);
    Nf4Matrix nf(n, kf, 6, 6);
    // Row groups of 4 and 2, odd, the most; with K % 128 == 0 also the
    // wider M the table's GEMV takes there (AVX-512: two groups of x rows).
    // (M = 1: the AVX-512 GEMVs reduce the lanes of a row alone by
    // _mm512_reduce_add_ps and those of a group four at a time by
    // reduce_add4, which must pair them the same way.)
    for (int32_t m : {1, 2, 3, 4, 5, kern::kGemvMaxRows, 9, 16}) {
      // (K % 128 == 64: M <= gemv_chunk_max_m_k64 run the AVX-512 chunk
      // GEMV, the rest the even/odd one; each keeps its own bits.)
      if (m > (kmul == 1                                                              ? t.gemv_max_m_k128
               : kmul == 2 && (t.isa == Q4_ISA_AVX512 || t.isa == Q4_ISA_AVX512_VNNI) ? t.gemv_chunk_max_m_k64
                                                                                      : kern::kGemvMaxRows))
        continue;
      INFO(Q4_isa_name(isa) << " m=" << m << " K % 128 = " << kn % 128);
      for (int fmt = 0; fmt < 2; ++fmt) {
        INFO((fmt == 0 ? "nvfp4" : "nf4"));
        const int64_t k = fmt == 0 ? kn : kf;
        const std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(40 + m));
        auto gemv = [&](const float* xr, int32_t mm, int64_t n0, int64_t n1, float* y, int64_t ldy) {
          if (fmt == 0) {
            t.nvfp4_gemv(xr, k, mm, nv.w, n0, n1, y, ldy);
          } else {
            t.nf4_gemv(xr, k, mm, nf.w, n0, n1, y, ldy);
          }
        };
        std::vector<float> all(static_cast<size_t>(m * n));
        gemv(x.data(), m, 0, n, all.data(), n);
        CHECK(gemv_violations(x.data(), k, m, k, 0, n, all.data(), n, [&](const float* xi, int64_t j) {
                return fmt == 0 ? ref::nvfp4_dot(xi, nv.w, j) : ref::nf4_dot(xi, nf.w, j);
              }) == 0);
        // (The AVX2 tables' GEMVs with K % 32 == 0 have two kernels, M <=
        // 2 and M = 3-8, each with its own bits: a row of M >= 3 is
        // compared with the same row alone in a call of 3 rows.)
        const bool avx2 = t.isa == Q4_ISA_AVX2 || t.isa == Q4_ISA_AVX_VNNI;
        const int32_t alone = avx2 && k % 32 == 0 && m > 2 ? 3 : 1;
        size_t differ = 0;
        for (int32_t i = 0; i < m; ++i) {
          std::vector<float> xi, one(static_cast<size_t>(alone * n));
          for (int32_t a = 0; a < alone; ++a) xi.insert(xi.end(), x.begin() + i * k, x.begin() + (i + 1) * k);
          gemv(xi.data(), alone, 0, n, one.data(), n);
          differ += same_floats(one.data(), all.data() + i * n, static_cast<size_t>(n)) ? 0 : 1;
        }
        for (int64_t j : {0, 3, 15, 16}) {  // W rows one at a time: no row groups
          std::vector<float> col(static_cast<size_t>(m));
          gemv(x.data(), m, j, j + 1, col.data(), 1);
          for (int32_t i = 0; i < m; ++i)
            differ +=
                same_floats(&col[static_cast<size_t>(i)], &all[static_cast<size_t>(i * n + j)], 1) ? 0 : 1;
        }
        CHECK(differ == 0);
      }
    }
  }
}
}  // namespace

TEST_CASE("kernel tables: the GEMV of x row i and W row j has the same bits for every m and row range",
          "[kernels]") {
  for (int32_t isa : compiled_tables(true)) check_gemv_same_bits(kern::table_for(isa), isa);
}

TEST_CASE("exact products: weights of few rows take the panel GEMM above the table's short-weight M",
          "[kernels]") {
  // KernelTable::small_batch_short_n (AVX2: 256 rows): at M in
  // (small_batch_short_max_m, small_batch_max_m] such weights get the
  // panel GEMM's bits (those of a product whose small-batch range ends at
  // that M), one row group more gets the small-batch entry's; the two
  // kernels' bits differ, so each check tells which one ran.
  int tested = 0;
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& t = kern::table_for(isa);
    const kern::SmallBatchConfig saved = kern::small_batch_config();
    const int32_t top = kern::small_batch_max_m(t, saved);  // (a tuning file may set it)
    if (t.small_batch_short_n <= 0 || top <= t.small_batch_short_max_m) continue;
    ++tested;
    const int64_t k = 1024;  // (at K = 256 and 512 NF4's panels and small-batch kernels gave the same bits)
    for (const int64_t n : {t.small_batch_short_n, t.small_batch_short_n + 16}) {
      const bool short_w = n <= t.small_batch_short_n;
      NvMatrix nv(n, k, 91);
      Nf4Matrix nf(n, k, 6, 92);
      for (int32_t m : {t.small_batch_short_max_m + 1, std::min(40, top), top}) {
        const std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(93 + m));
        for (int fmt = 0; fmt < 2; ++fmt) {
          INFO(Q4_isa_name(isa) << (fmt == 0 ? " nvfp4" : " nf4") << " n=" << n << " m=" << m);
          auto product = [&](float* y) {
            if (fmt == 0) {
              kern::linear_nvfp4(t, x.data(), m, nv.w, n, y, 2);
            } else {
              kern::linear_nf4(t, x.data(), m, nf.w, n, y, 2);
            }
          };
          const size_t size = static_cast<size_t>(m * n);
          std::vector<float> y(size), panel(size), small(size);
          product(y.data());
          kern::SmallBatchConfig c = saved;
          c.max_m = m - 1;  // the panel GEMM at this M
          kern::set_small_batch_config(c);
          product(panel.data());
          kern::set_small_batch_config(saved);
          if (fmt == 0) {
            t.nvfp4_small(x.data(), k, m, nv.w, 0, n, 0, k, small.data(), n, 512);
          } else {
            t.nf4_small(x.data(), k, m, nf.w, 0, n, 0, k, small.data(), n, 512);
          }
          REQUIRE_FALSE(same_floats(panel.data(), small.data(), size));
          CHECK(same_floats(y.data(), (short_w ? panel : small).data(), size));
        }
      }
    }
  }
  if (tested == 0) std::printf("SKIPPED: no table this CPU runs has a short-weight small-batch range\n");
}

TEST_CASE(
    "fast mode's fallback by M follows the weight's exact path (short weights leave the small batch sooner)",
    "[kernels][int8]") {
  // KernelTable::i8_fast_max_m (no table sets it today): above it fast
  // mode runs the exact kernels, but only where they are the small-batch
  // family, whose range ends sooner for weights of at most
  // small_batch_short_n rows. A copy of each table with the field set.
  int tested = 0;
  for (int32_t isa : compiled_tables(true)) {
    kern::KernelTable t = kern::table_for(isa);
    t.i8_fast_max_m = 4;
    const kern::SmallBatchConfig c = kern::small_batch_config();
    const int64_t long_n = std::max<int64_t>(4096, t.small_batch_short_n + 16);
    const int32_t top = kern::small_batch_max_m(t, c, long_n);
    INFO(Q4_isa_name(isa) << " top " << top);
    CHECK(kern::fast_math_fallback_rows(t, 4, long_n) == nullptr);
    if (top > 4) CHECK(kern::fast_math_fallback_rows(t, top, long_n) != nullptr);
    CHECK(kern::fast_math_fallback_rows(t, top + 1, long_n) == nullptr);
    if (t.small_batch_short_n <= 0 || top <= t.small_batch_short_max_m) continue;
    ++tested;
    const int64_t m = t.small_batch_short_max_m + 1;  // the panel GEMM for short weights
    CHECK(kern::fast_math_fallback_rows(t, m, t.small_batch_short_n) == nullptr);
    CHECK(kern::fast_math_fallback_rows(t, m, t.small_batch_short_n + 1) != nullptr);
  }
  if (tested == 0) std::printf("SKIPPED: no table this CPU runs has a short-weight small-batch range\n");
}

TEST_CASE("the tuner times the small-batch range on a weight above the table's short weights", "[kernels]") {
  // Short weights keep a fixed small-batch range: timed on one, the
  // tuner would compare the panel GEMM with itself and let noise set max_m.
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& t = kern::table_for(isa);
    INFO(Q4_isa_name(isa));
    for (int64_t d : {int64_t{256}, int64_t{272}, int64_t{512}, int64_t{4096}}) {
      const int64_t rows = kern::small_batch_tuning_rows(t, d);
      CHECK(rows > t.small_batch_short_n);
      CHECK(rows >= d);
      CHECK(rows % 16 == 0);
    }
    CHECK(kern::small_batch_tuning_rows(t, 4096) == 4096);
  }
}

TEST_CASE("kernel tables: every entry of every table this CPU runs matches the scalar reference",
          "[kernels][tables]") {
  warn_skipped_tables();
  Coverage cov;
  const std::vector<int32_t> runnable = compiled_tables(true);
  for (int32_t isa : runnable) {
    const kern::KernelTable& t = kern::table_for(isa);
    INFO("table " << q4::isa_name(isa));
    REQUIRE(t.isa == isa);
    check_table(t, cov);
  }
  // Every (table, entry) pair runnable here was compared (once: this was a
  // second test case that ran all the comparisons again).
  Coverage expected;
  for (int32_t isa : runnable) {
    for (int kind = 0; kind < kKinds; ++kind) expected.insert({isa, kind});
  }
  CHECK(cov == expected);
  // The SIMD tables are compiled in, so a SIMD table is among them whenever
  // the CPU runs it; report which entries are the ISA's own kernels (not the
  // portable fill-in the scalar table also uses).
#if defined(__x86_64__)
  // (NVFP4_ISA_TABLES=HOST compiles only the tables this CPU runs.)
  for (int32_t isa : {Q4_ISA_AVX2, Q4_ISA_AVX512}) {
    if (NVFP4_ALL_ISA_TABLES || q4::cpu_has_isa(q4::cpu_info(), isa)) CHECK(q4::isa_compiled(isa));
  }
#elif defined(__aarch64__)
  CHECK(q4::isa_compiled(Q4_ISA_NEON));
#endif
  size_t simd_tables = 0;
  const kern::KernelTable& s = kern::scalar_table();
  for (int32_t isa : runnable) {
    if (isa == Q4_ISA_SCALAR) continue;
    ++simd_tables;
    const kern::KernelTable& t = kern::table_for(isa);
    std::string own;
    const bool distinct[kKinds] = {t.nvfp4_gemv != s.nvfp4_gemv,
                                   t.nf4_gemv != s.nf4_gemv,
                                   t.nvfp4_panel != s.nvfp4_panel,
                                   t.nf4_panel != s.nf4_panel,
                                   t.f32_panel != s.f32_panel,
                                   t.gemm_micro != s.gemm_micro,
                                   t.nvfp4_quantize != s.nvfp4_quantize,
                                   t.nvfp4_dequantize != s.nvfp4_dequantize,
                                   t.amax != s.amax,
                                   t.nvfp4_small != s.nvfp4_small,
                                   t.nf4_small != s.nf4_small,
                                   t.act_to_f32 != s.act_to_f32,
                                   t.i8_quantize_act != s.i8_quantize_act,
                                   t.f32_to_act != s.f32_to_act};
    for (int kind = 0; kind < kKinds; ++kind) {
      if (distinct[kind]) own += std::string(own.empty() ? "" : ", ") + kKindName[kind];
    }
    WARN("table " << q4::isa_name(isa) << " compared; entries other than the scalar table's: " << own);
    CHECK(!own.empty());
  }
  if (simd_tables == 0) WARN("no SIMD kernel table runnable here: only the scalar table was compared");
}

TEST_CASE("kernel tables compiled in that this CPU cannot run", "[.][isa-skipped]") {
  const std::vector<int32_t> skipped = compiled_tables(false);
  for (int32_t isa : skipped) std::cout << "SKIPPED kernel table " << q4::isa_name(isa) << "\n";
  std::cout << "SKIPPED: " << skipped.size() << " kernel table(s) this CPU cannot run\n";
  SUCCEED();
}

TEST_CASE("NF4 double-quantized absmax resolved by ranges has absmax_of_block's bits", "[kernels]") {
  // nf4_absmax_range walks nested blocks without a division per block;
  // ranges start and end inside nested blocks of several sizes, and the
  // threaded form covers every block once.
  std::mt19937 rng(77);
  const int64_t nblocks = 70000;
  std::vector<uint8_t> codes(static_cast<size_t>(nblocks));
  for (auto& c : codes) c = static_cast<uint8_t>(rng() & 0xff);
  std::vector<float> map(256), nested(static_cast<size_t>(nblocks));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : map) v = u(rng);
  for (auto& v : nested) v = 0.01f + std::fabs(u(rng));
  for (const int64_t nbs : {int64_t{1}, int64_t{3}, int64_t{256}, int64_t{1000}}) {
    kern::Nf4Stats st;
    st.blocksize = 64;
    st.qabsmax = codes.data();
    st.nested_absmax = nested.data();
    st.nested_map = map.data();
    st.nested_offset = 0.0371f;
    st.nested_blocksize = nbs;
    std::vector<float> expect(static_cast<size_t>(nblocks));
    for (int64_t b = 0; b < nblocks; ++b) expect[static_cast<size_t>(b)] = st.absmax_of_block(b);
    for (const auto& [b0, b1] : std::vector<std::pair<int64_t, int64_t>>{
             {0, nblocks}, {1, 2}, {255, 257}, {999, 2001}, {12345, 54321}, {nblocks - 5, nblocks}, {7, 7}}) {
      std::vector<float> got(static_cast<size_t>(b1 - b0) + 1, -1.0f);
      kern::nf4_absmax_range(st, b0, b1, got.data());
      INFO("nested blocksize " << nbs << " blocks [" << b0 << ", " << b1 << ")");
      CHECK(std::memcmp(got.data(), expect.data() + b0, static_cast<size_t>(b1 - b0) * 4) == 0);
      CHECK(got.back() == -1.0f);  // nothing written past b1 - b0
    }
    for (int32_t threads : {1, 3}) {
      std::vector<float> all(static_cast<size_t>(nblocks));
      kern::nf4_absmax_all(st, nblocks, all.data(), threads);
      CHECK(std::memcmp(all.data(), expect.data(), static_cast<size_t>(nblocks) * 4) == 0);
    }
  }
  // Plain fp32 absmax: a copy.
  kern::Nf4Stats plain;
  plain.absmax = nested.data();
  std::vector<float> got(100);
  kern::nf4_absmax_range(plain, 500, 600, got.data());
  CHECK(std::memcmp(got.data(), nested.data() + 500, 400) == 0);
}

TEST_CASE("NF4 quantize: every table's vectorized, threaded blocks give the reference's bytes and absmax",
          "[kernels][nf4]") {
  // fmt::nf4_quantize_block (the CUDA kernel's coding) is the reference.
  auto reference = [](const std::vector<float>& x, int64_t bs, std::vector<uint8_t>& q,
                      std::vector<float>& am) {
    const int64_t n = static_cast<int64_t>(x.size()), nb = (n + bs - 1) / bs;
    q.assign(static_cast<size_t>((n + 1) / 2), 0);
    am.assign(static_cast<size_t>(nb), 0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      q4::fmt::nf4_quantize_block([&](int64_t i) { return x[static_cast<size_t>(i)]; }, b * bs,
                                  std::min(n, (b + 1) * bs), q.data(), am.data() + b);
    }
  };
  warn_skipped_tables();
  const std::vector<int32_t> runnable = compiled_tables(true);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t bs : {32, 64, 256, 4096}) {
    for (int64_t n : {int64_t{1}, int64_t{31}, bs - 2, bs + 1, 3 * bs, 40 * bs + 7}) {
      if (n <= 0) continue;
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = nd(rng) * 0.02f;
      // Special blocks: all zero (code 7); the values on the thresholds
      // with absmax 1 (y == t goes to the lower code) and just above them;
      // subnormals; -0.
      if (n >= bs) std::fill(x.begin(), x.begin() + bs, 0.0f);
      if (n >= 3 * bs) {
        float* b1 = x.data() + bs;
        b1[0] = 1.0f;
        for (int i = 0; i < 15 && i + 1 < bs; ++i) b1[i + 1] = q4::fmt::nf4_threshold(i);
        // ... and the float just above each (the upper code).
        for (int i = 0; i < 15 && i + 16 < bs; ++i)
          b1[i + 16] = std::nextafter(q4::fmt::nf4_threshold(i), 2.0f);
        float* b2 = x.data() + 2 * bs;
        for (int64_t i = 0; i < bs; ++i)
          b2[i] = (i % 3 == 0 ? -1.0f : 1.0f) * 1e-42f * static_cast<float>(i + 1);
        b2[1] = -0.0f;
      }
      std::vector<uint8_t> qr, qk(static_cast<size_t>((n + 1) / 2)), qt(qk.size());
      std::vector<float> ar, ak(static_cast<size_t>((n + bs - 1) / bs)), at(ak.size());
      reference(x, bs, qr, ar);
      kern::nf4_quantize(kern::FloatPtr{x.data(), kern::FType::F32}, n, bs, qk.data(), ak.data());
      CHECK(qk == qr);
      CHECK(std::memcmp(ak.data(), ar.data(), ar.size() * 4) == 0);
      // Every table this CPU runs (its nf4_quantize_blocks), threaded.
      for (int32_t isa : runnable) {
        INFO("table " << q4::isa_name(isa));
        const kern::KernelTable& kt = kern::table_for(isa);
        kern::nf4_quantize(kt, kern::FloatPtr{x.data(), kern::FType::F32}, n, bs, qt.data(), at.data(), 3);
        CHECK(qt == qr);
        CHECK(std::memcmp(at.data(), ar.data(), ar.size() * 4) == 0);
      }
      // fp16 and bf16 inputs: the reference on their fp32 values.
      for (kern::FType ft : {kern::FType::F16, kern::FType::BF16}) {
        std::vector<uint16_t> h;
        std::vector<float> xf;
        to_16bit(ft, x, h, xf);
        std::vector<uint8_t> qh;
        std::vector<float> ah;
        reference(xf, bs, qh, ah);
        for (int32_t isa : runnable) {
          INFO("table " << q4::isa_name(isa) << ", 16-bit input");
          kern::nf4_quantize(kern::table_for(isa), kern::FloatPtr{h.data(), ft}, n, bs, qt.data(), at.data(),
                             2);
          CHECK(qt == qh);
          CHECK(std::memcmp(at.data(), ah.data(), ah.size() * 4) == 0);
        }
      }
    }
  }
  // NaN and Inf (the entry point rejects them; the kernel codes them as the
  // reference does: a NaN skipped by the absmax and coded 0, an Inf absmax
  // coding its finite neighbours 7 and itself 0; an all-NaN block 7).
  // 64 blocks: the tables reduce whole blocks 16 at a time (a group with
  // a NaN or Inf, blocks 0-15 and 32-47, goes to the per-block rule; 16-31
  // and 48-63 do not).
  std::vector<float> x(64 * 64);
  for (auto& v : x) v = nd(rng);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[70] = std::numeric_limits<float>::infinity();
  x[71] = -std::numeric_limits<float>::infinity();
  std::fill(x.begin() + 128, x.begin() + 192, std::numeric_limits<float>::quiet_NaN());
  x[40 * 64 + 5] = -std::numeric_limits<float>::infinity();
  std::vector<uint8_t> qr, qk(x.size() / 2);
  std::vector<float> ar, ak(64);
  reference(x, 64, qr, ar);
  for (int32_t isa : runnable) {
    INFO("table " << q4::isa_name(isa) << ", NaN and Inf");
    // The table's blocks code them as the reference and say so ...
    const kern::KernelTable& kt = kern::table_for(isa);
    CHECK_FALSE(kt.nf4_quantize_blocks(kern::FloatPtr{x.data(), kern::FType::F32}, 64 * 64, 64, 0, 64,
                                       qk.data(), ak.data()));
    CHECK(qk == qr);
    CHECK(std::memcmp(ak.data(), ar.data(), ar.size() * 4) == 0);
    CHECK(kt.nf4_quantize_blocks(kern::FloatPtr{x.data(), kern::FType::F32}, 256, 64, 0, 1, qk.data(),
                                 ak.data()) == false);  // (x[3] is in block 0)
    CHECK(kt.nf4_quantize_blocks(kern::FloatPtr{x.data(), kern::FType::F32}, 256, 64, 3, 4, qk.data(),
                                 ak.data()));
    for (const int64_t b0 : {int64_t{16}, int64_t{32}, int64_t{48}}) {  // (only 32-47 holds one)
      CHECK(kt.nf4_quantize_blocks(kern::FloatPtr{x.data(), kern::FType::F32}, 64 * 64, 64, b0, b0 + 16,
                                   qk.data(), ak.data()) == (b0 != 32));
    }
    // The same as bf16 input (which a table may read in place, 16 whole
    // blocks at a time, as the AVX2 one does), against the reference on
    // its fp32 values.
    {
      std::vector<uint16_t> h;
      std::vector<float> xf;
      to_16bit(kern::FType::BF16, x, h, xf);
      std::vector<uint8_t> qh, qb(x.size() / 2);
      std::vector<float> ah, ab(64);
      reference(xf, 64, qh, ah);
      CHECK_FALSE(kt.nf4_quantize_blocks(kern::FloatPtr{h.data(), kern::FType::BF16}, 64 * 64, 64, 0, 64,
                                         qb.data(), ab.data()));
      CHECK(qb == qh);
      CHECK(std::memcmp(ab.data(), ah.data(), ah.size() * 4) == 0);
      for (const int64_t b0 : {int64_t{16}, int64_t{32}, int64_t{48}}) {
        CHECK(kt.nf4_quantize_blocks(kern::FloatPtr{h.data(), kern::FType::BF16}, 64 * 64, 64, b0, b0 + 16,
                                     qb.data(), ab.data()) == (b0 != 32));
      }
    }
    // ... and the threaded driver names the first one, writing nothing.
    std::vector<uint8_t> q0(128, 0x5a);
    std::vector<float> a0(4, -1.0f);
    for (const int64_t at : {int64_t{3}, int64_t{70}, int64_t{200}}) {
      std::vector<float> y = x;
      for (int64_t i = 0; i < at; ++i) {
        if (!std::isfinite(y[static_cast<size_t>(i)])) y[static_cast<size_t>(i)] = 0.5f;
      }
      y[static_cast<size_t>(at)] = std::numeric_limits<float>::infinity();
      CHECK(kern::nf4_quantize(kt, kern::FloatPtr{y.data(), kern::FType::F32}, 256, 64, q0.data(), a0.data(),
                               2) == at);
      CHECK(std::all_of(q0.begin(), q0.end(), [](uint8_t b) { return b == 0x5a; }));
      CHECK(std::all_of(a0.begin(), a0.end(), [](float v) { return v == -1.0f; }));
    }
  }
  // Through the entry point, several threads.
  Tensor xt({4096 + 9}, t::f32()), qt({(4096 + 10) / 2}, t::u8()), amt({(4096 + 9 + 63) / 64}, t::f32());
  std::vector<float> xs(4096 + 9);
  for (size_t i = 0; i < xs.size(); ++i) {
    xs[i] = nd(rng);
    xt.set(static_cast<int64_t>(i), xs[i]);
  }
  reference(xs, 64, qr, ar);
  Q4_op_options o{};
  REQUIRE(Q4_op_options_init(&o) == Q4_OK);
  o.num_threads = 3;
  REQUIRE(NF4_quantize(xt.t(), qt.t(), amt.t(), 64, &o) == Q4_OK);
  CHECK(std::memcmp(qt.data(), qr.data(), qr.size()) == 0);
  CHECK(std::memcmp(amt.data(), ar.data(), ar.size() * 4) == 0);
  // Several tasks (64 Ki elements each), two of them failing: the first
  // bad index is named, in whichever order the tasks ran, and nothing is
  // written.
  const int64_t big = 3 * 65536 + 100;
  Tensor bx({big}, t::bf16()), bq({(big + 1) / 2}, t::u8()), ba({(big + 63) / 64}, t::f32());
  for (int64_t i = 0; i < big; ++i) bx.set(i, 0.25f * static_cast<float>(i % 7) - 0.5f);
  bx.set(3 * 65536 + 7, std::numeric_limits<float>::quiet_NaN());
  bx.set(65536 + 5, -std::numeric_limits<float>::infinity());
  std::fill(bq.data(), bq.data() + (big + 1) / 2, uint8_t{0x5a});
  CHECK(NF4_quantize(bx.t(), bq.t(), ba.t(), 64, &o) == Q4_ERR_NON_FINITE);
  CHECK(std::string(Q4_last_error()).find("flat index 65541") != std::string::npos);
  CHECK(std::all_of(bq.data(), bq.data() + (big + 1) / 2, [](uint8_t b) { return b == 0x5a; }));
}

TEST_CASE("NF4 quantize of an odd count writes code 7 in the spare nibble, as bitsandbytes does",
          "[kernels][nf4]") {
  const float x[3] = {0.75f, -0.3f, 0.2f};
  uint8_t q[2] = {0xff, 0xff};
  float absmax = 0;
  kern::nf4_quantize(kern::FloatPtr{x, kern::FType::F32}, 3, 64, q, &absmax);
  CHECK(q[0] == 0xf3);
  CHECK(q[1] == 0xa7);
  CHECK(absmax == 0.75f);
  // The same through the public entry point.
  Tensor xt({3}, t::f32()), qt({2}, t::u8()), at({1}, t::f32());
  for (int i = 0; i < 3; ++i) xt.set(i, x[i]);
  REQUIRE(NF4_quantize(xt.t(), qt.t(), at.t(), 64, nullptr) == Q4_OK);
  CHECK(qt.data()[0] == 0xf3);
  CHECK(qt.data()[1] == 0xa7);
}

// ---------------------------------------------------------------------------
// Integer paths (W4A4 NVFP4_scaled_mm, fast math mode): every table this CPU
// runs gives results BIT-IDENTICAL to the scalar reference's fixed fp32
// order (q4::ref::i8_product), for every thread count.
// ---------------------------------------------------------------------------

namespace {

// Random NVFP4 [rows, k]: random codes, finite E4M3 scales within +-[2^-9, 448].
// normal_only: no zero / subnormal scale codes (the kernels' fast decode path).
void random_nvfp4(int64_t rows, int64_t k, uint32_t seed, std::vector<uint8_t>& q, std::vector<uint8_t>& s,
                  bool normal_only = false) {
  std::mt19937 gen(seed);
  q.resize(static_cast<size_t>(rows * k / 2));
  s.resize(static_cast<size_t>(rows * k / 16));
  for (auto& b : q) b = static_cast<uint8_t>(gen() & 0xffu);
  for (auto& b : s) {
    uint8_t c = static_cast<uint8_t>(gen() & 0xffu);
    if ((c & 0x7f) == 0x7f) c = 0x38;  // no NaN codes
    if (normal_only && (c & 0x78) == 0) c = static_cast<uint8_t>(c | 0x40);
    b = c;
  }
}

}  // namespace

TEST_CASE("integer kernels: W4A4 and fast mode are bit-identical to the reference on every table",
          "[kernels][int8]") {
  const std::vector<int32_t> runnable = compiled_tables(true);
  for (int32_t isa : compiled_tables(false))
    WARN("SKIPPED integer kernels of " << q4::isa_name(isa) << ": this CPU cannot run them");
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 16},
                          {1, 37, 48},
                          {3, 16, 272},
                          {8, 33, 1040},
                          {9, 17, 2064},
                          {5, 64, 4096},
                          {130, 21, 160},
                          {17, 50, 1024},
                          {70, 601, 272},  // panels in several groups of a task, the last partial
                          // panels two at a time (i8_micro2) and one left over: 3 panels, the
                          // last partial; one panel alone
                          {77, 40, 528},
                          {66, 16, 256},
                          // m <= 4, k % 128 == 0: the direct GEMV entries where a table has them
                          {1, 37, 1024},
                          {2, 16, 128},
                          {3, 100, 2048},
                          {4, 50, 384},
                          {1, 1, 256},
                          // 4 < m <= 16, k % 128 == 0: the GEMV in one call (AVX-512: two groups of
                          // x rows from m = 9) or in passes of <= 4 rows over 64-row blocks
                          {8, 70, 1024},
                          {6, 130, 256},
                          {12, 45, 512},
                          {16, 33, 256},
                          {10, 17, 128},
                          // 16 < m <= 64, k % 128 == 0 (AVX-512: the first group of x rows
                          // tiles each 16 weight rows, the others read that copy; the last
                          // weight rows a padded tail)
                          {40, 35, 384},
                          {64, 48, 1024},
                          {27, 16, 128},
                          // k % 128 == 64: the GEMV on tables with i8_gemv_k64 (a last half
                          // chunk; M = 1 too), the panels elsewhere
                          {1, 37, 64},
                          {1, 50, 2880},
                          {2, 33, 192},
                          {5, 16, 320},
                          {9, 40, 576},
                          {33, 21, 192}};
  int native = 0;
  for (int32_t isa : runnable) {
    const kern::KernelTable& kt = kern::table_for(isa);
    if (!kt.i8_native) {
      WARN("table " << q4::isa_name(isa)
                    << " has no integer kernels of its own (fast mode falls back to exact)");
    } else {
      ++native;
    }
    for (const Shape& sh : shapes) {
      for (bool normal_only : {false, true}) {
        const int64_t m = sh.m, n = sh.n, k = sh.k;
        INFO("isa " << q4::isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " normal scales only "
                    << normal_only);
        std::vector<uint8_t> wq, ws, aq, as;
        random_nvfp4(n, k, static_cast<uint32_t>(7 * n + k), wq, ws, normal_only);
        random_nvfp4(m, k, static_cast<uint32_t>(11 * m + k), aq, as);
        const float g = 0.375f;
        const kern::NvWeights w{wq.data(), ws.data(), g, k};
        std::vector<int8_t> xq(static_cast<size_t>(m * k));
        std::vector<float> xs(static_cast<size_t>(m * k / 16));
        std::vector<float> want(static_cast<size_t>(m * n)), got(want.size());

        // W4A4.
        ref::i8_from_nvfp4(aq.data(), as.data(), m, k, xq.data(), xs.data());
        ref::i8_product(xq.data(), xs.data(), m, w, n, 0.25f * g, want.data());
        for (int32_t threads : {1, 2, 3}) {
          std::fill(got.begin(), got.end(), -1.0f);
          kern::scaled_mm_w4a4_int8(kt, aq.data(), as.data(), m, w, n, got.data(), threads);
          INFO("W4A4, threads " << threads);
          CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
        }
        // Fast mode (int8 activations), with wide-range activations.
        std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(m + 3 * k), 4.0f);
        for (size_t i = 0; i < x.size(); i += 7) x[i] *= 1e-3f;
        if (k >= 32) std::fill(x.begin() + 16, x.begin() + 32, 0.0f);  // an all-zero block
        ref::i8_quantize(x.data(), m, k, xq.data(), xs.data());
        ref::i8_product(xq.data(), xs.data(), m, w, n, 0.5f * g, want.data());
        for (int32_t threads : {1, 2, 3}) {
          std::fill(got.begin(), got.end(), -1.0f);
          kern::linear_nvfp4_int8(kt, x.data(), m, w, n, got.data(), threads);
          INFO("fast, threads " << threads);
          CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
        }
      }
    }
  }
  CHECK(native >= 1);  // the scalar table at least
}

TEST_CASE(
    "integer kernels: scales all normal and positive but one (zero, subnormal, edge, negative) give the "
    "reference's bits on every table",
    "[kernels][int8]") {
  // The GEMVs decode a group's E4M3 codes by a plain bit mapping when every
  // code of the group is a normal positive one (0x08 .. 0x7e), the general
  // decode otherwise: random codes (the other tests) almost never take the
  // first, so here every code is normal and positive but one, placed in
  // each row group and block position in turn.
  const uint8_t specials[] = {0x00, 0x01, 0x07, 0x08, 0x7e, 0x7f, 0x80, 0x88, 0xb8, 0xff};
  // (NaN codes give NaN outputs: compared as NaN, whatever their payload)
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
      bad += !both_nan && std::memcmp(&a[i], &b[i], 4) != 0 ? 1 : 0;
    }
    return bad;
  };
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& kt = kern::table_for(isa);
    for (int64_t m : {1, 2, 4}) {
      const int64_t n = 24, k = 256, kb = k / 16;
      std::vector<uint8_t> wq, ws;
      random_nvfp4(n, k, static_cast<uint32_t>(5 * m + 1), wq, ws, true);
      for (auto& b : ws) b = static_cast<uint8_t>(0x08 + (b & 0x7f) % 0x77);  // normal, positive
      std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(m + 17), 2.0f);
      std::vector<int8_t> xq(static_cast<size_t>(m * k));
      std::vector<float> xs(static_cast<size_t>(m * kb));
      ref::i8_quantize(x.data(), m, k, xq.data(), xs.data());
      std::vector<float> want(static_cast<size_t>(m * n)), got(want.size());
      const kern::NvWeights plain{wq.data(), ws.data(), 0.75f, k};
      ref::i8_product(xq.data(), xs.data(), m, plain, n, 0.5f * plain.g, want.data());
      kern::linear_nvfp4_int8(kt, x.data(), m, plain, n, got.data(), 1);
      INFO("isa " << q4::isa_name(isa) << " m=" << m << " all normal");
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      for (uint8_t sp : specials) {
        for (int64_t at : {int64_t{0}, 9 * kb + 5, 17 * kb + kb - 1}) {
          std::vector<uint8_t> s2 = ws;
          s2[static_cast<size_t>(at)] = sp;
          const kern::NvWeights w{wq.data(), s2.data(), 0.75f, k};
          ref::i8_product(xq.data(), xs.data(), m, w, n, 0.5f * w.g, want.data());
          std::fill(got.begin(), got.end(), -1.0f);
          kern::linear_nvfp4_int8(kt, x.data(), m, w, n, got.data(), 1);
          INFO("isa " << q4::isa_name(isa) << " m=" << m << " code " << int{sp} << " at " << at);
          CHECK(same(got, want) == 0);
        }
      }
    }
  }
}

TEST_CASE("e8m0_to_e4m3: every byte's code under every t, 0xFF outside the window, both loops",
          "[kernels][mxfp4]") {
  // All 255 finite bytes at once (the select loop), and each window of 15
  // bytes that are all normal E4M3 codes under t (the plain byte loop),
  // against fmt::mx_nv_scale_byte.
  size_t bad = 0;
  std::vector<uint8_t> in, out;
  auto check = [&](int32_t t) {
    out.assign(2 * in.size(), 0x55);
    kern::e8m0_to_e4m3(in.data(), static_cast<int64_t>(in.size()), t, out.data());
    for (size_t i = 0; i < in.size(); ++i) {
      const int32_t want = q4::fmt::mx_nv_scale_byte(in[i], t);
      const uint8_t w8 = static_cast<uint8_t>(want < 0 ? 0xff : want);
      bad += out[2 * i] != w8 || out[2 * i + 1] != w8 ? 1 : 0;
    }
  };
  for (int32_t t = -126; t <= 260; ++t) {
    in.clear();
    for (uint32_t e = 0; e < 255; ++e) in.push_back(static_cast<uint8_t>(e));
    check(t);
    const int32_t lo = 121 + t;  // 2^-6: the smallest normal code
    if (lo < 0 || lo + 14 > 254) continue;
    in.clear();
    for (int32_t e = lo; e <= lo + 14; ++e) in.push_back(static_cast<uint8_t>(e));
    check(t);
  }
  CHECK(bad == 0);
}

namespace {

// The exact, fast and W4A4 products of weight `got_w` [n, k] at M = m have
// the bits of those of `want_w` (the same weight with linear E4M3 scales)
// with GEMV pieces of the default size and of 1 KiB, on 1 and 3 threads.
void check_same_e2m1_products(const kern::KernelTable& kt, const kern::NvWeights& want_w,
                              const kern::NvWeights& got_w, int64_t n, int64_t k, int64_t m) {
  const int64_t default_piece = kern::e8m0_piece_bytes();
  const std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(m + k), 3.0f);
  std::vector<uint8_t> aq, as;
  random_nvfp4(m, k, static_cast<uint32_t>(5 * m + k), aq, as);
  std::vector<float> want(static_cast<size_t>(m * n)), got(want.size());
  for (int64_t piece : {default_piece, int64_t{1024}}) {
    kern::set_e8m0_piece_bytes(piece);
    for (int32_t threads : {1, 3}) {
      INFO("m=" << m << " piece " << piece << " threads " << threads);
      kern::linear_nvfp4(kt, x.data(), m, want_w, n, want.data(), threads);
      std::fill(got.begin(), got.end(), -1.0f);
      kern::linear_nvfp4(kt, x.data(), m, got_w, n, got.data(), threads);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      if (k % 16 != 0) continue;
      kern::linear_nvfp4_int8(kt, x.data(), m, want_w, n, want.data(), threads);
      std::fill(got.begin(), got.end(), -1.0f);
      kern::linear_nvfp4_int8(kt, x.data(), m, got_w, n, got.data(), threads);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      kern::scaled_mm_w4a4_int8(kt, aq.data(), as.data(), m, want_w, n, want.data(), threads);
      std::fill(got.begin(), got.end(), -1.0f);
      kern::scaled_mm_w4a4_int8(kt, aq.data(), as.data(), m, got_w, n, got.data(), threads);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
    }
  }
  kern::set_e8m0_piece_bytes(default_piece);
}

// A random MXFP4 weight [n, k] (E8M0 bytes in [lo, hi], the first two
// bytes hi and lo) as NvWeights twice: its E8M0 scales in place (e8m0, t =
// max(hi - 135, -126)) and the E4M3 codes they stand for (linear, s16).
struct E8m0Weight {
  std::vector<uint8_t> q, e, s16;
  kern::NvWeights e8m0, e4m3;
  E8m0Weight(int64_t n, int64_t k, int lo, int hi, uint32_t seed)
      : q(static_cast<size_t>(n * k / 2)),
        e(static_cast<size_t>(n * k / 32)),
        s16(static_cast<size_t>(n * k / 16)),
        e8m0{q.data(), nullptr, 1.0f, k},
        e4m3{q.data(), s16.data(), 1.0f, k} {
    std::mt19937 rng(seed);
    for (auto& b : q) b = static_cast<uint8_t>(rng());
    for (auto& b : e) b = static_cast<uint8_t>(lo + static_cast<int>(rng() % (hi - lo + 1)));
    e[0] = static_cast<uint8_t>(hi);
    e[1] = static_cast<uint8_t>(lo);
    const int32_t t = std::max(hi - 135, -126);
    for (size_t i = 0; i < e.size(); ++i) {
      const int32_t b = q4::fmt::mx_nv_scale_byte(e[i], t);
      REQUIRE(b >= 0);
      s16[2 * i] = s16[2 * i + 1] = static_cast<uint8_t>(b);
    }
    const float g = std::ldexp(1.0f, t);
    e8m0.g = e4m3.g = g;
    e8m0.e8m0 = e.data();
    e8m0.e8m0_t = t;
  }
};

}  // namespace

TEST_CASE(
    "kernel tables: MXFP4's E8M0 scales in place (NvWeights::e8m0) give the bits of their E4M3 codes, "
    "exact, fast and W4A4, GEMV pieces included",
    "[kernels][int8][mxfp4]") {
  // Tables whose GEMVs read E8M0 (reads_e8m0, K % 128 == 0) decode it in
  // registers; the others get E4M3 codes made per piece of rows (here
  // pieces of 1 KiB: a few groups of 16 rows, several per task) or all at
  // once (larger M). Each must give the bits of the same weight with the E4M3
  // codes of fmt::mx_nv_scale_byte.
  struct Shape {
    int64_t n, k;
    int lo, hi;  // E8M0 bytes: 18 binades (E4M3 subnormals), all normal, or
                 // normal and the largest subnormal (d = 0: {64, 1024, 112, 127})
  };
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& kt = kern::table_for(isa);
    for (const Shape& sh : {Shape{200, 1024, 110, 127}, Shape{77, 96, 120, 126}, Shape{50, 1152, 3, 9},
                            Shape{60, 2880, 112, 129}, Shape{64, 1024, 112, 127}}) {
      const int64_t n = sh.n, k = sh.k;
      const E8m0Weight w(n, k, sh.lo, sh.hi, static_cast<uint32_t>(n * k + isa));
      for (int64_t m : {1, 3, 8, 16, 40}) {
        INFO("isa " << q4::isa_name(isa) << " n=" << n << " k=" << k);
        check_same_e2m1_products(kt, w.e4m3, w.e8m0, n, k, m);
      }
    }
  }
}

// The AVX-512 exact GEMVs at K % 128 == 64 run the chunk kernel (a last
// half chunk) up to gemv_chunk_max_m_k64 rows of x, which the CPU decides
// (2, or every M on intel_golden_cove_server): both choices, whichever
// this CPU makes, against the reference, with the same bits for a row at
// every M the chunk kernel takes, and MXFP4's E8M0 scales read in place
// through the drivers giving the bits of their E4M3 codes.
TEST_CASE("AVX-512 exact GEMV at K % 128 == 64: both splits between the chunk and even/odd kernels",
          "[kernels]") {
  if (!q4::cpu_has_isa(q4::cpu_info(), Q4_ISA_AVX512)) {
    WARN("SKIPPED: this CPU does not run the AVX-512 table");
    return;
  }
  for (const int32_t max_m : {2, kern::kGemvMaxRows}) {
    kern::KernelTable t;
    if (!kern::avx512_chunk_k64_variant(max_m, &t)) {
      WARN("SKIPPED: the AVX-512 table is not compiled in");
      return;
    }
    INFO("chunk kernel up to m=" << max_m);
    REQUIRE(t.gemv_chunk_max_m_k64 == max_m);
    Coverage cov;
    check_nvfp4_gemv(t, cov);
    check_nf4_gemv(t, cov);
    check_gemv_same_bits(t, Q4_ISA_AVX512);
    const int64_t n = 60, k = 2880;
    const E8m0Weight w(n, k, 112, 129, 77);
    for (int64_t m : {1, 2, 3, 4, 8}) check_same_e2m1_products(t, w.e4m3, w.e8m0, n, k, m);
  }
}

TEST_CASE(
    "kernel tables: swizzled NVFP4 scales (NvWeights::swizzled) give the bits of the linear ones, exact, "
    "fast and W4A4, in pieces of whole bands",
    "[kernels][int8][swizzle]") {
  // The drivers unswizzle a GEMV task's scales in pieces of 128-row bands
  // (here also pieces of one band, which tasks of 3 threads split) and all
  // at once for the small-batch and panel paths; N not a multiple of 128
  // leaves a partial last band.
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& kt = kern::table_for(isa);
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{300, 1024}, {77, 96}, {260, 2880}, {129, 64}}) {
      std::mt19937 rng(static_cast<uint32_t>(n * k + isa));
      std::vector<uint8_t> q(static_cast<size_t>(n * k / 2)), s(static_cast<size_t>(n * k / 16));
      for (auto& b : q) b = static_cast<uint8_t>(rng());
      for (auto& b : s) b = static_cast<uint8_t>(0x20 + rng() % 0x50);
      std::vector<uint8_t> sw(
          static_cast<size_t>(q4::fmt::swizzled_rows(n) * q4::fmt::swizzled_cols(k / 16)));
      kern::swizzle_scales(s.data(), n, k / 16, sw.data());
      const float g = 0.75f;
      const kern::NvWeights wl{q.data(), s.data(), g, k};
      kern::NvWeights ws{q.data(), nullptr, g, k};
      ws.swizzled = sw.data();
      for (int64_t m : {1, 3, 8, 16, 40}) {
        INFO("isa " << q4::isa_name(isa) << " n=" << n << " k=" << k);
        check_same_e2m1_products(kt, wl, ws, n, k, m);
      }
    }
  }
}

TEST_CASE("integer GEMV entries: more rows of x than i8_gemv_max_m run in passes with the same bits",
          "[kernels][int8]") {
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& kt = kern::table_for(isa);
    if (kt.i8_gemv_nvfp4 == nullptr) continue;
    const int64_t k = 256, n = 37;
    const int64_t m = std::max(kern::kI8GemvMaxRows, kt.i8_gemv_max_m) + 3;
    INFO("isa " << q4::isa_name(isa) << " m=" << m);
    std::vector<uint8_t> wq, ws;
    random_nvfp4(n, k, 41, wq, ws, false);
    const float g = 0.75f;
    const kern::NvWeights w{wq.data(), ws.data(), g, k};
    const std::vector<float> x = randoms(static_cast<size_t>(m * k), 43, 2.0f);
    std::vector<int8_t> xq(static_cast<size_t>(m * k)), rq(xq.size());
    std::vector<float> xs(static_cast<size_t>(m * k / 16)), rs(xs.size());
    std::vector<int32_t> xc(xs.size());
    kt.i8_quantize_act(x.data(), k, m, k, xq.data(), k, xs.data(), xc.data(), k / 16, kern::kI8WeightBias);
    std::vector<float> want(static_cast<size_t>(m * n)), got(want.size(), -1.0f);
    ref::i8_quantize(x.data(), m, k, rq.data(), rs.data());
    ref::i8_product(rq.data(), rs.data(), m, w, n, 0.5f * g, want.data());
    kt.i8_gemv_nvfp4(xq.data(), k, xs.data(), xc.data(), k / 16, static_cast<int32_t>(m), w, 0, n, 0.5f * g,
                     got.data(), n);
    CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
  }
}

TEST_CASE("integer GEMV entries: the sign rule on the way (NvWeights::signs)", "[kernels][int8]") {
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& kt = kern::table_for(isa);
    if (kt.i8_gemv_nvfp4 == nullptr) continue;
    // (K = 1088: the AVX2 stages' 8-chunk transposes, then a last chunk)
    for (const int64_t k : {int64_t{384}, int64_t{1088}}) {
      const int64_t n = 37, n0 = 3, n1 = 30, kb = k / 16;
      std::vector<uint8_t> wq, ws;
      random_nvfp4(n, k, 47, wq, ws, false);               // (zero and subnormal codes too)
      for (auto& b : ws) b &= 0x7f;                        // (random_nvfp4 gives signed codes)
      ws[static_cast<size_t>((n0 - 1) * kb + 5)] |= 0x80;  // outside [n0, n1)
      ws[static_cast<size_t>(n1 * kb + 2)] |= 0x80;        // outside [n0, n1)
      for (int32_t m : {1, 2, 5}) {
        INFO("isa " << q4::isa_name(isa) << " m=" << m);
        const std::vector<float> x = randoms(static_cast<size_t>(m * k), 49, 2.0f);
        std::vector<int8_t> xq(static_cast<size_t>(m * k));
        std::vector<float> xs(static_cast<size_t>(m * kb));
        std::vector<int32_t> xc(xs.size());
        kt.i8_quantize_act(x.data(), k, m, k, xq.data(), k, xs.data(), xc.data(), kb, kern::kI8WeightBias);
        std::vector<float> y0(static_cast<size_t>(m * (n1 - n0))), y1(y0.size());
        kern::NvWeights w{wq.data(), ws.data(), 1.0f, k};
        kt.i8_gemv_nvfp4(xq.data(), k, xs.data(), xc.data(), kb, m, w, n0, n1, 0.5f, y0.data(), n1 - n0);
        kern::ScaleSigns none;
        w.signs = &none;
        kt.i8_gemv_nvfp4(xq.data(), k, xs.data(), xc.data(), kb, m, w, n0, n1, 0.5f, y1.data(), n1 - n0);
        CHECK_FALSE(none.negative.load());
        CHECK(std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)) == 0);
        for (int64_t at : {n0 * kb, (n0 + 17) * kb + 9, n1 * kb - 1}) {
          std::vector<uint8_t> s = ws;
          s[static_cast<size_t>(at)] |= 0x80;
          kern::ScaleSigns found;
          kern::NvWeights wb{wq.data(), s.data(), 1.0f, k};
          wb.signs = &found;
          kt.i8_gemv_nvfp4(xq.data(), k, xs.data(), xc.data(), kb, m, wb, n0, n1, 0.5f, y1.data(), n1 - n0);
          CHECK(found.negative.load());
        }
      }
    }
  }
}

TEST_CASE("integer kernels: the W4A4 integer result equals the exact fp32 path within its bound",
          "[kernels][int8]") {
  // The integer block sums are exact; only the fp32 accumulation over K/16
  // blocks rounds: |y - y_exact| <= (K/16 + 2) 2^-24 sum|a w|.
  const int64_t m = 6, n = 40, k = 528;
  std::vector<uint8_t> wq, ws, aq, as;
  random_nvfp4(n, k, 5, wq, ws);
  random_nvfp4(m, k, 6, aq, as);
  const kern::NvWeights w{wq.data(), ws.data(), 1.0f, k};
  std::vector<float> y(static_cast<size_t>(m * n));
  kern::scaled_mm_w4a4_int8(kern::table_for(Q4_ISA_SCALAR), aq.data(), as.data(), m, w, n, y.data(), 1);
  const kern::NvWeights a{aq.data(), as.data(), 1.0f, k};
  size_t bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(ref::nvfp4_weight(a, i, kk)) * ref::nvfp4_weight(w, j, kk);
        exact += p;
        mag += std::fabs(p);
      }
      if (std::fabs(y[static_cast<size_t>(i * n + j)] - exact) >
          (k / 16 + 2) * std::ldexp(1.0, -24) * mag + 1e-30)
        ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("public API: W4A4 and fast mode report the integer ISA that ran, bit-identical across ISAs",
          "[kernels][int8]") {
  // (N = 64: enough weight rows for fast mode's integer kernels at M = 12,
  // fast_math_fallback_shape)
  const int64_t m = 12, n = 64, k = 160;
  Tensor a = t::random_float({m, k}, t::f32(), 61), b = t::random_float({n, k}, t::f32(), 62);
  Tensor aq({m, k / 2}, t::u8()), as({m, k / 16}, t::u8()), bq({n, k / 2}, t::u8()), bs({n, k / 16}, t::u8());
  REQUIRE(NVFP4_quantize(a.t(), aq.t(), as.t(), 0, 0.5f, nullptr, nullptr) == Q4_OK);
  REQUIRE(NVFP4_quantize(b.t(), bq.t(), bs.t(), 0, 0.25f, nullptr, nullptr) == Q4_OK);
  Q4_op_options fast{};
  Q4_op_options_init(&fast);
  fast.math_mode = Q4_MATH_FAST;
  Tensor first_mm({m, n}, t::f32()), first_fast({m, n}, t::f32());
  bool have_first = false;
  for (int32_t isa : t::runnable_isas()) {
    t::IsaCap guard(isa);
    INFO("isa " << Q4_isa_name(isa));
    const bool native = kern::table_for(isa).i8_native;
    Tensor y({m, n}, t::f32()), yf({m, n}, t::f32());
    REQUIRE(NVFP4_scaled_mm(aq.t(), as.t(), bq.t(), bs.t(), 0, 0.125f, nullptr, y.t(), nullptr) == Q4_OK);
    CHECK(Q4_last_isa_used() == isa);
    REQUIRE(NVFP4_linear(a.t(), bq.t(), bs.t(), 0, 0.5f, nullptr, yf.t(), &fast) == Q4_OK);
    // Fast mode reports the integer level that ran, or the table's exact
    // level where it fell back (no integer kernels, M above i8_fast_max_m,
    // or a shape too small).
    const kern::KernelTable& kt = kern::table_for(isa);
    const bool fast_int = native && kern::fast_math_fallback_rows(kt, m, n) == nullptr &&
                          kern::fast_math_fallback_shape(kt, n, k) == nullptr;
    CHECK(Q4_last_isa_used() == (fast_int ? isa : kt.exact_isa));
    if (!native) continue;
    if (!fast_int) {
      CHECK(same_bytes(y, first_mm) == have_first);
      continue;
    }
    if (!have_first) {
      first_mm = y;
      first_fast = yf;
      have_first = true;
    } else {
      CHECK(same_bytes(y, first_mm));
      CHECK(same_bytes(yf, first_fast));
    }
  }
}

TEST_CASE("linear diagnostics tell which math ran (mathModeUsed, mathFallbackReason)", "[kernels][int8]") {
  Q4_session_config c{};
  Q4_session_config_init(&c);
  c.target = Q4_TARGET_CPU;  // the CPU's integer kernels (a CUDA session computes exact only)
  c.math_mode = Q4_MATH_FAST;
  Q4_session* s = nullptr;
  REQUIRE(Q4_session_create(&c, &s) == Q4_OK);
  // 64 x 64: fast mode runs its integer kernels; 24 x 64: too few weight
  // rows (fast_math_fallback_shape), exact at every M, and the reason says so.
  for (int64_t rows : {64, 24}) {
    for (int32_t format : {Q4_FORMAT_NVFP4, Q4_FORMAT_NF4}) {
      Tensor w = t::random_float({rows, 64}, t::f32(), 71);
      Q4_weight_bundle bnd{};
      Q4_weight_bundle_init(&bnd);
      bnd.format = format;
      bnd.source = Q4_WEIGHT_FLOAT;
      bnd.weight = w.t();
      Q4_linear* l = nullptr;
      REQUIRE(Q4_linear_create(s, &bnd, &l) == Q4_OK);
      Q4_linear_info info{};
      info.struct_size = sizeof info;
      REQUIRE(Q4_linear_info_get(l, &info) == Q4_OK);
      size_t needed = 0;
      Q4_linear_diagnostics(l, nullptr, 0, &needed);
      std::string j(needed, '\0');
      REQUIRE(Q4_linear_diagnostics(l, j.data(), j.size(), &needed) == Q4_OK);
      INFO(j);
      CHECK(info.math_mode == Q4_MATH_FAST);
      const bool native = kern::table_for(q4::active_isa()).i8_native;
      const kern::KernelTable& kt = kern::table_for(q4::active_isa());
      const bool partial = kt.i8_fast_max_m > 0 || (format == Q4_FORMAT_NF4 && kt.isa != Q4_ISA_SCALAR &&
                                                    (kt.i8_gemv_nf4 == nullptr || !kt.i8_nf4_panel_native));
      if (native && rows < 64) {
        CHECK(kern::fast_math_fallback_shape(kt, rows, 64) != nullptr);
        CHECK(j.find("\"mathModeUsed\":\"exact\"") != std::string::npos);
        CHECK(j.find("fewer than 64 weight rows") != std::string::npos);
      } else if (native) {
        // Fast runs; where this ISA runs the exact kernels for some M the
        // reason says so.
        CHECK(j.find("\"mathModeUsed\":\"fast\"") != std::string::npos);
        CHECK((j.find("\"mathFallbackReason\":\"\"") != std::string::npos) == !partial);
      } else {
        CHECK(j.find("\"mathModeUsed\":\"exact\"") != std::string::npos);
        CHECK(j.find("\"mathFallbackReason\":\"\"") == std::string::npos);
      }
      Q4_linear_destroy(l);
    }
  }
  Q4_session_destroy(s);
}

TEST_CASE("integer roof probe of every runnable table counts its int8 ops", "[kernels][int8]") {
  for (int32_t isa : compiled_tables(true)) {
    const double ops = kern::table_for(isa).i8_probe(1000);
    INFO("isa " << q4::isa_name(isa));
    CHECK(ops > 0.0);
    CHECK(std::fmod(ops, 1000.0) == 0.0);
  }
}

TEST_CASE("integer roof of each runnable table (prints GOP/s)", "[.][i8-roof]") {
  for (int32_t isa : compiled_tables(true)) {
    const auto& kt = kern::table_for(isa);
    kt.i8_probe(100000);  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    const double ops = kt.i8_probe(20000000);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << q4::isa_name(isa) << ": " << ops / s / 1e9 << " int8 GOP/s (one thread)\n";
  }
}

// ---------------------------------------------------------------------------
// NF4 fast mode on the integer kernels: the NF4 codebook mapped to int8
// (i8_nf4_codebook), the fixed fp32 order: every table that runs the NF4
// integer path is bit-identical to the scalar table's, and the result is
// within the stated bound of the exact product.
// ---------------------------------------------------------------------------

namespace {

struct Nf4Data {
  std::vector<uint8_t> q;
  std::vector<float> absmax;
  float lut[16] = {};
  kern::Nf4Weights w() const {
    kern::Nf4Weights r;
    r.q = q.data();
    r.absmax = absmax.data();
    r.lut = lut;
    return r;
  }
};

Nf4Data random_nf4(int64_t n, int64_t k, int64_t bs, uint32_t seed) {
  Nf4Data d;
  std::vector<float> x = randoms(static_cast<size_t>(n * k), seed, 2.0f);
  d.q.resize(static_cast<size_t>((n * k + 1) / 2));
  d.absmax.resize(static_cast<size_t>((n * k + bs - 1) / bs));
  kern::nf4_quantize(kern::FloatPtr{x.data(), kern::FType::F32}, n * k, bs, d.q.data(), d.absmax.data());
  for (int c = 0; c < 16; ++c) d.lut[c] = q4::fmt::nf4_decode(static_cast<uint32_t>(c));
  return d;
}

}  // namespace

TEST_CASE("integer kernels: NF4 fast mode is bit-identical on every table and within its bound",
          "[kernels][int8][nf4]") {
  for (int32_t isa : compiled_tables(false))
    WARN("SKIPPED NF4 integer kernels of " << q4::isa_name(isa) << ": this CPU cannot run them");
  struct Shape {
    int64_t m, n, k, bs;
  };
  const Shape shapes[] = {{1, 37, 1024, 64},
                          {2, 16, 128, 64},
                          {3, 100, 2048, 128},
                          {4, 50, 384, 64},
                          {1, 9, 256, 16},
                          {4, 23, 640, 32},
                          {5, 33, 272, 64},
                          {17, 40, 1040, 16},
                          {1, 7, 48, 16},
                          {2, 11, 1024, 256},
                          // blocks straddling rows (K % blocksize != 0) in the GEMV and the panels
                          {2, 13, 896, 256},
                          {3, 21, 384, 256},
                          {9, 35, 640, 256},
                          {24, 40, 512, 64},
                          // 4 < m <= 16, k % 128 == 0: the GEMV in one call or in passes
                          {8, 70, 1024, 64},
                          {7, 130, 384, 128},
                          {13, 37, 640, 256},
                          {16, 20, 256, 16},
                          // m >= 4 on AVX-512: the absmax transposed 16 blocks at a time (three
                          // spans, the last partial)
                          {5, 19, 768, 16},
                          {4, 23, 1408, 32},
                          // m > 16: several groups of x rows over one tiled copy of 16 weight rows
                          {33, 45, 512, 64},
                          // k % 128 == 64 (the GEMV's last half chunk where a table has
                          // i8_gemv_k64): blocks inside rows, straddling rows, transposed absmax
                          {1, 40, 2880, 64},
                          {2, 19, 192, 128},
                          {6, 33, 320, 32},
                          {12, 17, 448, 64}};
  const kern::KernelTable& scalar = kern::table_for(Q4_ISA_SCALAR);
  for (const Shape& sh : shapes) {
    const int64_t m = sh.m, n = sh.n, k = sh.k;
    INFO("m=" << m << " n=" << n << " k=" << k << " blocksize " << sh.bs);
    Nf4Data d = random_nf4(n, k, sh.bs, static_cast<uint32_t>(n + 5 * k));
    kern::Nf4Weights w = d.w();
    w.k = k;
    w.blocksize = sh.bs;
    w.block_shift = 0;
    while ((int64_t{1} << w.block_shift) < sh.bs) ++w.block_shift;
    std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(m + 3 * k), 3.0f);
    for (size_t i = 0; i < x.size(); i += 5) x[i] *= 1e-2f;
    REQUIRE(kern::fast_math_fallback_nf4_weights(w) == nullptr);
    std::vector<float> want(static_cast<size_t>(m * n)), got(want.size());
    kern::linear_nf4_int8(scalar, x.data(), m, w, n, want.data(), 1);
    // The bound of linear_nf4_int8 against the exact product (in double).
    const kern::I8Nf4Code code = kern::i8_nf4_codebook(d.lut);
    REQUIRE(code.ok);
    size_t bad = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, bound = 0, mag = 0;
        for (int64_t b = 0; b < k / 16; ++b) {
          float amax = 0;
          for (int e = 0; e < 16; ++e)
            amax = std::max(amax, std::fabs(x[static_cast<size_t>(i * k + 16 * b + e)]));
          const double xs = amax / 127.0;
          for (int e = 0; e < 16; ++e) {
            const int64_t f = j * k + 16 * b + e;
            const uint8_t byte = d.q[static_cast<size_t>(f / 2)];
            const double am = d.absmax[static_cast<size_t>(f / sh.bs)];
            const double wv = static_cast<double>(d.lut[(f & 1) ? (byte & 0xfu) : (byte >> 4)]) * am;
            const double xv = x[static_cast<size_t>(i * k + 16 * b + e)];
            exact += xv * wv;
            bound += xs / 2 * std::fabs(wv) + (std::fabs(xv) + xs / 2) * am * code.post * 63.0 / 126.0;
            mag += (std::fabs(xv) + xs) * (std::fabs(wv) + am);
          }
        }
        bound += (k / 16.0 + 4) * std::ldexp(1.0, -23) * mag;
        if (std::fabs(want[static_cast<size_t>(i * n + j)] - exact) > bound) ++bad;
      }
    }
    CHECK(bad == 0);
    for (int32_t isa : compiled_tables(true)) {
      const kern::KernelTable& kt = kern::table_for(isa);
      for (int32_t threads : {1, 2, 3}) {
        INFO("isa " << q4::isa_name(isa) << " threads " << threads);
        std::fill(got.begin(), got.end(), -1.0f);
        kern::linear_nf4_int8(kt, x.data(), m, w, n, got.data(), threads);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      }
    }
  }
}

// The weight codes as callers hand them over: at any byte offset from a
// 64-byte line (glibc's large blocks start 16 bytes past one, safetensors
// tensors 8), and with K % 8192 == 0 the 16 rows that a GEMV group reads
// together are 4 KiB apart, in one L1 set. Neither may change a bit: each
// offset's outputs equal those of the 64-byte aligned copy (exact mode) and
// the reference (fast mode), on every table this CPU runs.
struct Aligned64Free {
  void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
};

TEST_CASE("GEMVs give the same bits at every byte alignment of the weight codes, rows 4 KiB apart too",
          "[kernels][int8]") {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 33, 8192}, {2, 20, 8192}, {8, 17, 8192}, {20, 16, 8192},
                          {1, 40, 4096}, {3, 33, 1024}, {1, 21, 2880}};
  const int64_t offsets[] = {0, 1, 8, 16, 32, 48};
  const kern::KernelTable& scalar = kern::table_for(Q4_ISA_SCALAR);
  for (const Shape& sh : shapes) {
    const int64_t m = sh.m, n = sh.n, k = sh.k;
    std::vector<uint8_t> wq, ws;
    random_nvfp4(n, k, static_cast<uint32_t>(3 * n + k), wq, ws, true);
    std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(m + k), 2.0f);
    const size_t bytes = wq.size();
    std::vector<int8_t> xq(static_cast<size_t>(m * k));
    std::vector<float> xs(static_cast<size_t>(m * k / 16));
    ref::i8_quantize(x.data(), m, k, xq.data(), xs.data());
    std::vector<float> want_fast(static_cast<size_t>(m * n)), got(want_fast.size());
    const float g = 0.5f;
    ref::i8_product(xq.data(), xs.data(), m, kern::NvWeights{wq.data(), ws.data(), g, k}, n, 0.5f * g,
                    want_fast.data());
    // NF4 from the same codes (blocksize 64), its fast-mode reference from the scalar table.
    Nf4Data nd = random_nf4(n, k, 64, static_cast<uint32_t>(n + 7 * k));
    std::vector<float> want_nf4(want_fast.size());
    {
      kern::Nf4Weights nw = nd.w();
      nw.k = k;
      kern::linear_nf4_int8(scalar, x.data(), m, nw, n, want_nf4.data(), 1);
    }
    for (int32_t isa : compiled_tables(true)) {
      const kern::KernelTable& kt = kern::table_for(isa);
      std::vector<float> want_exact(want_fast.size());
      for (int64_t off : offsets) {
        INFO("isa " << q4::isa_name(isa) << " m=" << m << " n=" << n << " k=" << k
                    << " codes at 64-byte line + " << off);
        // Exactly off + bytes from a 64-byte line: the sanitizer builds see
        // any unmasked read past the codes' end.
        const std::unique_ptr<uint8_t[], Aligned64Free> buf(
            static_cast<uint8_t*>(::operator new[](static_cast<size_t>(off) + bytes, std::align_val_t(64))));
        uint8_t* q = buf.get() + off;
        std::memcpy(q, wq.data(), bytes);
        const kern::NvWeights w{q, ws.data(), g, k};
        std::fill(got.begin(), got.end(), -1.0f);
        kern::linear_nvfp4(kt, x.data(), m, w, n, got.data(), 2);
        if (off == 0) want_exact = got;
        CHECK(std::memcmp(got.data(), want_exact.data(), got.size() * 4) == 0);
        if (kt.i8_native) {
          std::fill(got.begin(), got.end(), -1.0f);
          kern::linear_nvfp4_int8(kt, x.data(), m, w, n, got.data(), 2);
          CHECK(std::memcmp(got.data(), want_fast.data(), got.size() * 4) == 0);
          std::memcpy(q, nd.q.data(), nd.q.size());
          kern::Nf4Weights nw = nd.w();
          nw.q = q;
          nw.k = k;
          std::fill(got.begin(), got.end(), -1.0f);
          kern::linear_nf4_int8(kt, x.data(), m, nw, n, got.data(), 2);
          CHECK(std::memcmp(got.data(), want_nf4.data(), got.size() * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("fast mode reports the level that ran: the integer table, or its exact level on fallback",
          "[kernels][int8]") {
  // 32 rows: the exact kernels at every M (fast_math_fallback_shape); 64:
  // the integer ones but where the table's M range says otherwise. With a
  // bias, and a 16-bit output (both passes after the product, which must
  // not change the report), and without.
  const int64_t k = 256;
  Q4_op_options fast{};
  Q4_op_options_init(&fast);
  fast.math_mode = Q4_MATH_FAST;
  for (int64_t n : {32, 64}) {
    Tensor w = t::random_float({n, k}, t::f32(), 81);
    Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
    REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.5f, nullptr, nullptr) == Q4_OK);
    Tensor bias = t::random_float({n}, t::f32(), 83);
    for (int32_t isa : t::runnable_isas()) {
      t::IsaCap guard(isa);
      const kern::KernelTable& kt = kern::table_for(isa);
      for (int64_t m : {1, 4, 9, 40}) {
        for (const bool extras : {false, true}) {
          INFO("isa " << Q4_isa_name(isa) << " n " << n << " m " << m << " bias and fp16 out " << extras);
          Tensor x = t::random_float({m, k}, t::f32(), 82), y({m, n}, extras ? t::f16() : t::f32());
          REQUIRE(NVFP4_linear(x.t(), wq.t(), ws.t(), 0, 0.5f, extras ? bias.t() : nullptr, y.t(), &fast) ==
                  Q4_OK);
          const bool int8 = kern::fast_math_fallback_nvfp4(kt) == nullptr &&
                            kern::fast_math_fallback_rows(kt, m, n) == nullptr &&
                            kern::fast_math_fallback_shape(kt, n, k) == nullptr;
          CHECK(Q4_last_isa_used() == (int8 ? kt.isa : kt.exact_isa));
        }
      }
    }
  }
#if defined(__x86_64__)
  if (q4::cpu_has_isa(q4::cpu_info(), Q4_ISA_AVX_VNNI)) {
    CHECK(kern::table_for(Q4_ISA_AVX_VNNI).exact_isa == Q4_ISA_AVX2);
    CHECK(kern::table_for(Q4_ISA_AVX_VNNI).i8_gemv_nvfp4 != nullptr);
  }
#endif
}

TEST_CASE("the table's tiler (i8_tile_group, threads) writes the bytes of the scalar i8_tile_codes",
          "[kernels][int8]") {
  int32_t with_entry = 0;
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& kt = kern::table_for(isa);
    with_entry += kt.i8_tile_group != nullptr ? 1 : 0;
    // (k = 8192 with n = 1029: 4 MiB of tiles, written through a buffer by
    // non-temporal stores when asked; k = 64: nothing tiled, the copy made)
    for (int64_t k : {64, 128, 1024, 4224, 8192}) {
      for (int64_t n : {15, 16, 53, 700, 1029}) {
        if ((k == 8192) != (n == 1029)) continue;
        INFO("isa " << q4::isa_name(isa) << " n=" << n << " k=" << k);
        std::vector<uint8_t> q(static_cast<size_t>(n * k / 2));
        uint32_t h = static_cast<uint32_t>(n * 131 + k);
        for (auto& b : q) b = static_cast<uint8_t>((h = h * 1664525u + 1013904223u) >> 24);
        const size_t bytes = static_cast<size_t>(kern::i8_tile_bytes(n, k));
        std::vector<uint8_t> want(bytes + 1, 0xee);
        kern::i8_tile_codes(q.data(), n, k, want.data());
        for (int32_t threads : {1, 2, 3}) {
          // 64-byte aligned (the entry) and not (the scalar loop), with a guard byte after.
          q4::kern::AlignedFloats buf = q4::kern::aligned_floats(static_cast<int64_t>(bytes / 4 + 32));
          for (size_t off : {size_t{0}, size_t{4}}) {
            uint8_t* got = reinterpret_cast<uint8_t*>(buf.get()) + off;
            std::memset(got, 0xee, bytes + 1);
            kern::i8_tile_codes(kt, q.data(), n, k, got, threads);
            INFO("threads " << threads << " offset " << off);
            CHECK(std::memcmp(got, want.data(), bytes + 1) == 0);
            // With a copy of q made in the same pass (guard byte after it
            // too), by ordinary or non-temporal stores, and the tiles so.
            for (bool stream : {false, true}) {
              INFO("stream " << stream);
              std::vector<uint8_t> copy(q.size() + 1, 0xdd);
              std::memset(got, 0xee, bytes + 1);
              kern::i8_tile_codes(kt, q.data(), n, k, got, threads, copy.data(), stream);
              CHECK(std::memcmp(got, want.data(), bytes + 1) == 0);
              CHECK(std::memcmp(copy.data(), q.data(), q.size()) == 0);
              CHECK(copy.back() == 0xdd);
              std::memset(got, 0xee, bytes + 1);
              kern::i8_tile_codes(kt, q.data(), n, k, got, threads, nullptr, stream);
              CHECK(std::memcmp(got, want.data(), bytes + 1) == 0);
            }
          }
        }
      }
    }
  }
#if defined(__x86_64__)
  if (q4::cpu_has_isa(q4::cpu_info(), Q4_ISA_AVX512)) CHECK(with_entry >= 1);
#endif
}

TEST_CASE(
    "the table's scale tiler (i8_tile_scale_group, threads) writes the bytes and flags of the scalar one",
    "[kernels][int8]") {
  int32_t with_entry = 0;
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& kt = kern::table_for(isa);
    with_entry += kt.i8_tile_scale_group != nullptr ? 1 : 0;
    // K / 16 blocks a row: spans of 64 whole, and ending 8, 16, 24, 40 or
    // 56 blocks into a span (the last piece of 32 partly loaded).
    for (int64_t k : {128, 256, 384, 640, 896, 1024, 1152, 2048, 4480, 5120}) {
      const int64_t n = 53, kb = k / 16, groups = n / 16;  // (5 rows past the last group)
      std::vector<uint8_t> s(static_cast<size_t>(n * kb));
      uint32_t h = static_cast<uint32_t>(k * 7 + 1);
      for (auto& b : s) b = static_cast<uint8_t>(0x08 + ((h = h * 1664525u + 1013904223u) >> 24) % 0x77);
      // Group 0 all normal; in groups 1 and 2 one code at each edge of the
      // normal range, at a place that moves with k (the last block of the
      // group's last row among them).
      const uint8_t edges[] = {0x07, 0x7f, 0x00, 0x80, 0xfe};
      for (int64_t g = 1; g < groups; ++g) {
        const uint8_t e = edges[static_cast<size_t>((g + k / 128) % 5)];
        const int64_t row = g == 1 ? 3 : 15, blk = g == 1 ? (k / 128 * 5) % kb : kb - 1;
        s[static_cast<size_t>((16 * g + row) * kb + blk)] = e;
      }
      // Normal codes at both edges elsewhere (flag still 1 in group 0).
      s[0] = 0x08;
      s[static_cast<size_t>(kb - 1)] = 0x7e;
      const int64_t gb = kern::i8_tile_scale_group_bytes(k);
      std::vector<uint8_t> want(static_cast<size_t>(groups * gb + 1), 0xee),
          wflags(static_cast<size_t>(groups + 1), 0xee);
      kern::i8_tile_scales(s.data(), n, k, want.data(), wflags.data());
      CHECK(wflags[0] == 1);
      CHECK(wflags[1] == 0);
      CHECK(wflags[2] == 0);
      for (int32_t threads : {1, 2, 3}) {
        INFO("isa " << q4::isa_name(isa) << " k=" << k << " threads " << threads);
        std::vector<uint8_t> got(want.size(), 0xee), flags(wflags.size(), 0xee);
        kern::i8_tile_scales(kt, s.data(), n, k, got.data(), flags.data(), threads);
        CHECK(got == want);  // (the guard byte after the groups included)
        CHECK(flags == wflags);
        // With a copy of s made in the same pass (the 5 rows past the last
        // group too), and a guard byte after it.
        std::vector<uint8_t> copy(s.size() + 1, 0xdd);
        std::fill(got.begin(), got.end(), 0xee);
        std::fill(flags.begin(), flags.end(), 0xee);
        kern::i8_tile_scales(kt, s.data(), n, k, got.data(), flags.data(), threads, copy.data());
        CHECK(got == want);
        CHECK(flags == wflags);
        CHECK(std::equal(s.begin(), s.end(), copy.begin()));
        CHECK(copy.back() == 0xdd);
      }
    }
  }
#if defined(__x86_64__)
  if (q4::cpu_has_isa(q4::cpu_info(), Q4_ISA_AVX2)) CHECK(with_entry >= 1);
#endif
}

TEST_CASE("the CPU's family is read on x86 (the AVX-512 GEMVs' row prefetch is chosen by it)", "[kernels]") {
#if defined(__x86_64__)
  const q4::CpuInfo& c = q4::cpu_info();
  // Every x86-64 CPU reports display family 6 (Intel) or 0xf and above (AMD: 0xf + extended family).
  CHECK((c.family == 6 || c.family >= 0xf));
#else
  WARN("SKIPPED: not x86-64, no CPUID family to read");
#endif
}

TEST_CASE("integer GEMV entries: tiled codes (NvWeights::tiles) give the bits of the row form",
          "[kernels][int8]") {
  int32_t reading = 0;
  for (int32_t isa : compiled_tables(true)) {
    const kern::KernelTable& kt = kern::table_for(isa);
    if (kt.i8_gemv_nvfp4 == nullptr || kt.i8_gemv_nf4 == nullptr) continue;
    reading += kt.i8_reads_tiles ? 1 : 0;
    for (int64_t k : {256, 384, 1152}) {
      const int64_t n = 53, kb = k / 16;  // three groups of 16 rows and 5 rows not tiled
      std::vector<uint8_t> wq, ws;
      random_nvfp4(n, k, static_cast<uint32_t>(51 + k), wq, ws, false);
      for (auto& b : ws) b &= 0x7f;
      // Group 1 (rows 16..31) only normal codes, the others some zero or
      // subnormal ones: both flags.
      for (int64_t i = 16 * kb; i < 32 * kb; ++i)
        ws[static_cast<size_t>(i)] = static_cast<uint8_t>(0x08 + ws[static_cast<size_t>(i)] % 0x77);
      ws[static_cast<size_t>(2 * kb + 1)] = 0x00;
      ws[static_cast<size_t>(40 * kb + 3)] = 0x03;
      std::vector<uint8_t> tiles(static_cast<size_t>(kern::i8_tile_bytes(n, k)), 0xee);
      REQUIRE(tiles.size() == static_cast<size_t>(48 * k / 2));
      kern::i8_tile_codes(wq.data(), n, k, tiles.data());
      // The documented order: byte 64d + 4r + e of tile (c, h) of group t.
      CHECK(tiles[static_cast<size_t>(16 * (k / 2) + (1 * 4 + 2) * 256 + 64 * 3 + 4 * 5 + 1)] ==
            wq[static_cast<size_t>((16 + 5) * (k / 2) + 1 * 64 + 2 * 16 + 4 * 3 + 1)]);
      kern::NvWeights rows{wq.data(), ws.data(), 0.75f, k};
      kern::NvWeights tiled = rows;
      tiled.tiles = tiles.data();
      const int64_t gb = kern::i8_tile_scale_group_bytes(k);
      std::vector<uint8_t> tscales(static_cast<size_t>(3 * gb), 0xee), tflags(3, 0xee);
      kern::i8_tile_scales(ws.data(), n, k, tscales.data(), tflags.data());
      {  // the table's entry (where it has one), over threads: the same bytes
        std::vector<uint8_t> t2(tscales.size(), 0x55), f2(3, 0x55);
        kern::i8_tile_scales(kt, ws.data(), n, k, t2.data(), f2.data(), 2);
        CHECK(t2 == tscales);
        CHECK(f2 == tflags);
      }
      // The documented order: byte 64j + 16L + r of span p = block 64p + 16L + j of row r.
      const int64_t blk = kb - 1;
      CHECK(tscales[static_cast<size_t>(gb + blk / 64 * 1024 + 64 * (blk % 16) + 16 * (blk % 64 / 16) + 9)] ==
            ws[static_cast<size_t>(25 * kb + blk)]);
      CHECK(tflags[0] == 0);
      CHECK(tflags[1] == 1);
      CHECK(tflags[2] == 0);
      kern::NvWeights tiled_s = tiled;  // codes and scales tiled
      tiled_s.tile_scales = tscales.data();
      tiled_s.tile_flags = tflags.data();
      Nf4Data d = random_nf4(n, k, 64, static_cast<uint32_t>(53 + k));
      std::vector<uint8_t> ntiles(tiles.size());
      kern::i8_tile_codes(d.q.data(), n, k, ntiles.data());
      kern::Nf4Weights nrows = d.w();
      nrows.k = k;
      kern::Nf4Weights ntiled = nrows;
      ntiled.tiles = ntiles.data();
      std::vector<float> tabs(static_cast<size_t>(kern::i8_tile_absmax_floats(n, k, 64)), -1.0f);
      REQUIRE(tabs.size() == static_cast<size_t>(48 * k / 64));
      kern::i8_tile_absmax(d.absmax.data(), n, k, 64, tabs.data());
      // Block j of row 16 + r at 16 K/64 (the group) + 16 j + r.
      CHECK(tabs[static_cast<size_t>(16 * (k / 64) + 16 * 2 + 7)] ==
            d.absmax[static_cast<size_t>(23 * (k / 64) + 2)]);
      kern::Nf4Weights ntiled_abs = ntiled;  // codes and absmax tiled
      ntiled_abs.tile_absmax = tabs.data();
      for (int64_t m : {1, 2, 5, 8, 13, 64}) {
        INFO("isa " << q4::isa_name(isa) << " k=" << k << " m=" << m);
        std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(m + k), 3.0f);
        std::vector<float> y0(static_cast<size_t>(m * n)), y1(y0.size(), -1.0f);
        for (int32_t threads : {1, 2, 3}) {
          kern::linear_nvfp4_int8(kt, x.data(), m, rows, n, y0.data(), threads);
          kern::linear_nvfp4_int8(kt, x.data(), m, tiled, n, y1.data(), threads);
          CHECK(std::memcmp(y0.data(), y1.data(), y0.size() * 4) == 0);
          std::fill(y1.begin(), y1.end(), -1.0f);
          kern::linear_nvfp4_int8(kt, x.data(), m, tiled_s, n, y1.data(), threads);
          CHECK(std::memcmp(y0.data(), y1.data(), y0.size() * 4) == 0);
          kern::linear_nf4_int8(kt, x.data(), m, nrows, n, y0.data(), threads);
          kern::linear_nf4_int8(kt, x.data(), m, ntiled, n, y1.data(), threads);
          CHECK(std::memcmp(y0.data(), y1.data(), y0.size() * 4) == 0);
          std::fill(y1.begin(), y1.end(), -1.0f);
          kern::linear_nf4_int8(kt, x.data(), m, ntiled_abs, n, y1.data(), threads);
          CHECK(std::memcmp(y0.data(), y1.data(), y0.size() * 4) == 0);
        }
        // Row ranges that do not start on a group (the row form runs
        // there) and ones that do.
        std::vector<int8_t> xq(static_cast<size_t>(m * k));
        std::vector<float> xs(static_cast<size_t>(m * kb));
        std::vector<int32_t> xc(xs.size());
        kt.i8_quantize_act(x.data(), k, m, k, xq.data(), k, xs.data(), xc.data(), kb, kern::kI8WeightBias);
        for (auto [n0, n1] : {std::pair<int64_t, int64_t>{3, 40}, {16, 48}, {32, 53}}) {
          INFO("rows " << n0 << ".." << n1);
          std::vector<float> r0(static_cast<size_t>(m * (n1 - n0))), r1(r0.size(), -1.0f);
          kt.i8_gemv_nvfp4(xq.data(), k, xs.data(), xc.data(), kb, static_cast<int32_t>(m), rows, n0, n1,
                           0.5f, r0.data(), n1 - n0);
          kt.i8_gemv_nvfp4(xq.data(), k, xs.data(), xc.data(), kb, static_cast<int32_t>(m), tiled, n0, n1,
                           0.5f, r1.data(), n1 - n0);
          CHECK(std::memcmp(r0.data(), r1.data(), r0.size() * 4) == 0);
          std::fill(r1.begin(), r1.end(), -1.0f);
          kt.i8_gemv_nvfp4(xq.data(), k, xs.data(), xc.data(), kb, static_cast<int32_t>(m), tiled_s, n0, n1,
                           0.5f, r1.data(), n1 - n0);
          CHECK(std::memcmp(r0.data(), r1.data(), r0.size() * 4) == 0);
        }
      }
    }
  }
  if (reading == 0)
    WARN("SKIPPED tiled codes: no table this CPU runs reads them (AVX-512, AVX2 and AVX-VNNI do)");
}

TEST_CASE("AVX-512 VNNI integer GEMVs: the vpermb and the vpshufb nibble decode give the scalar table's bits",
          "[kernels][int8]") {
  // The table picks one decode by the CPU's VBMI flag; both are checked
  // here where the CPU runs them (vpshufb on every VNNI CPU, vpermb with
  // VBMI), against the scalar table's integer path.
  kern::KernelTable variant[2];
  const bool runs = q4::cpu_has_isa(q4::cpu_info(), Q4_ISA_AVX512_VNNI);
  if (!runs || !kern::avx512_vnni_decode_variant(false, &variant[0])) {
    WARN("SKIPPED the AVX-512 VNNI decode variants: " << (runs ? "table not compiled in" : "CPU lacks it"));
    return;
  }
  const bool vbmi = (q4::cpu_info().features & Q4_CPU_AVX512VBMI) != 0;
  if (vbmi)
    REQUIRE(kern::avx512_vnni_decode_variant(true, &variant[1]));
  else
    WARN("SKIPPED the vpermb decode: this CPU has no AVX-512 VBMI");
  const kern::KernelTable& ref = kern::table_for(Q4_ISA_SCALAR);
  for (int64_t k : {256, 320, 1152}) {  // (320: K % 128 == 64, the direct GEMV at every M)
    const int64_t n = 53;
    std::vector<uint8_t> wq, ws;
    random_nvfp4(n, k, static_cast<uint32_t>(71 + k), wq, ws, false);
    for (auto& b : ws) b &= 0x7f;
    const kern::NvWeights w{wq.data(), ws.data(), 0.75f, k};
    Nf4Data d = random_nf4(n, k, 64, static_cast<uint32_t>(73 + k));
    kern::Nf4Weights nw = d.w();
    nw.k = k;
    for (int64_t m : {1, 2, 5, 8, 13, 64}) {
      std::vector<float> x = randoms(static_cast<size_t>(m * k), static_cast<uint32_t>(3 * m + k), 3.0f);
      std::vector<float> y0(static_cast<size_t>(m * n)), n0(y0.size()), y1(y0.size()), n1(y0.size());
      kern::linear_nvfp4_int8(ref, x.data(), m, w, n, y0.data(), 1);
      kern::linear_nf4_int8(ref, x.data(), m, nw, n, n0.data(), 1);
      for (int v = 0; v < (vbmi ? 2 : 1); ++v) {
        INFO("k=" << k << " m=" << m << (v == 1 ? " vpermb" : " vpshufb"));
        std::fill(y1.begin(), y1.end(), -1.0f);
        std::fill(n1.begin(), n1.end(), -1.0f);
        kern::linear_nvfp4_int8(variant[v], x.data(), m, w, n, y1.data(), 2);
        kern::linear_nf4_int8(variant[v], x.data(), m, nw, n, n1.data(), 2);
        CHECK(std::memcmp(y0.data(), y1.data(), y0.size() * 4) == 0);
        CHECK(std::memcmp(n0.data(), n1.data(), n0.size() * 4) == 0);
      }
    }
  }
}

namespace {

// The tables this CPU runs that have 16-bit dequantize entries (AVX-512,
// AVX2, AVX-VNNI), by name.
std::vector<std::pair<std::string, kern::KernelTable>> dequantize16_tables() {
  std::vector<std::pair<std::string, kern::KernelTable>> tables;
  for (int32_t isa : t::runnable_isas()) {
    const kern::KernelTable& kt = kern::table_for(isa);
    if (kt.nvfp4_dequantize16 != nullptr) tables.emplace_back(Q4_isa_name(isa), kt);
  }
  return tables;
}

// fp32 values rounded to fp16 or bf16 by the codec.
std::vector<uint16_t> codec_rounded(const std::vector<float>& v, bool bf16) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16 ? q4::fmt::f32_to_bf16(v[i]) : q4::fmt::f32_to_f16(v[i]);
  return r;
}

}  // namespace

TEST_CASE("16-bit dequantize entries: the fp32 values rounded once, every table and bf16 conversion",
          "[kernels][dequantize]") {
  // Every table this CPU runs that has the entries (AVX-512, AVX2,
  // AVX-VNNI), and the AVX-512 table's other bf16 conversion: it converts
  // bf16 by vcvtne2ps2bf16 on CPUs with AVX512_BF16 and by integer rounding
  // elsewhere, both checked where the CPU runs them. fp16 and bf16 against
  // the scalar fp32 entries and the codec's rounding; global scales and
  // E8M0 / absmax values that make denormal, overflowing (Inf) and halfway
  // (ties) fp32 values; E4M3 0x7f and E8M0 0xff (NaN), a NaN with a
  // payload in the NF4 codebook; an odd block count (a last block alone).
  std::vector<std::pair<std::string, kern::KernelTable>> tables = dequantize16_tables();
  if (q4::cpu_has_isa(q4::cpu_info(), Q4_ISA_AVX512)) {
    const bool bf16_cpu = (q4::cpu_info().features & Q4_CPU_AVX512BF16) != 0;
    kern::KernelTable other;
    REQUIRE(kern::avx512_dequant16_variant(!bf16_cpu, &other));
    if (bf16_cpu) {
      tables.emplace_back("avx512, integer bf16 rounding", other);
    } else {
      WARN("SKIPPED the vcvtne2ps2bf16 conversion: this CPU has no AVX512_BF16");
    }
  }
  if (tables.empty()) {
    WARN("SKIPPED: no table this CPU runs has 16-bit dequantize entries (AVX-512 and AVX2 do)");
    return;
  }
  const kern::KernelTable& ref = kern::table_for(Q4_ISA_SCALAR);
  const int64_t rows = 7, k = 464;  // NVFP4: 203 blocks; MXFP4: rows of 448 (98 blocks)
  // (with_nan false: no factor makes a NaN, so the tables run their
  // unchecked conversions on the ties, denormals and infinities)
  const bool with_nan = GENERATE(true, false);
  INFO((with_nan ? "NaN scales and codebook entry" : "no NaN"));
  std::mt19937 gen(464);
  std::vector<uint8_t> q(static_cast<size_t>(rows * k / 2)), s(static_cast<size_t>(rows * k / 16)),
      e8(static_cast<size_t>(rows * 448 / 32));
  for (auto& b : q) b = static_cast<uint8_t>(gen());
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = static_cast<uint8_t>(with_nan && i % 61 == 3 ? 0x7f : gen() % 0x7f);
  for (size_t i = 0; i < e8.size(); ++i)
    e8[i] = static_cast<uint8_t>(with_nan && i % 23 == 5 ? 0xff : gen() % 255);
  float lut[16];
  for (uint32_t c = 0; c < 16; ++c) lut[c] = q4::fmt::nf4_decode(c);
  const uint32_t payload_nan = 0xffa12345u;  // (a custom codebook's NaN with a payload)
  if (with_nan) std::memcpy(&lut[13], &payload_nan, 4);
  const int64_t nbs = 64, nn = rows * k;  // NF4: 3248 elements, 51 blocks of 64 (the last short)
  std::vector<float> absmax(static_cast<size_t>((nn + nbs - 1) / nbs));
  for (size_t i = 0; i < absmax.size(); ++i)
    absmax[i] = std::ldexp(1.0f + static_cast<float>(i % 7) / 64, static_cast<int>(i % 9) * 33 - 140);
  for (float g : {0.37f, 1.0f + 0x1p-8f, 1.5f + 0x1p-8f, 0x1p-135f, 0x1p120f}) {
    std::vector<float> nv(static_cast<size_t>(nn)), mx(static_cast<size_t>(rows * 448)), nf(nv.size());
    ref.nvfp4_dequantize(q.data(), s.data(), g, rows, k, nv.data());
    ref.mxfp4_dequantize(q.data(), e8.data(), rows, 448, mx.data());
    ref.nf4_dequantize(q.data(), lut, absmax.data(), nbs, nn - nn % 16, nf.data());
    nf.resize(static_cast<size_t>(nn - nn % 16));
    for (const auto& [name, table] : tables) {
      for (bool bf16 : {false, true}) {
        INFO("g " << g << " table " << name << (bf16 ? " bf16" : " fp16"));
        std::vector<uint16_t> got(nv.size(), 0xdead);
        table.nvfp4_dequantize16(q.data(), s.data(), g, rows, k, got.data(), bf16);
        CHECK(got == codec_rounded(nv, bf16));
        got.assign(mx.size(), 0xdead);
        table.mxfp4_dequantize16(q.data(), e8.data(), rows, 448, got.data(), bf16);
        CHECK(got == codec_rounded(mx, bf16));
        got.assign(nf.size(), 0xdead);
        table.nf4_dequantize16(q.data(), lut, absmax.data(), nbs, static_cast<int64_t>(nf.size()), got.data(),
                               bf16);
        CHECK(got == codec_rounded(nf, bf16));
      }
    }
  }
}

TEST_CASE("16-bit dequantize entries: a NaN factor in one stretch of a long tensor, NaN global scales",
          "[kernels][dequantize]") {
  // The tables convert without a NaN check per 16 values where no factor
  // of a stretch (1024 blocks or elements) can make a NaN. A NaN whose
  // payload fills its low bits (0x7fbfffff, quieted to 0x7fffffff by the
  // product) shows a missing check: bf16 rounding without it carries into
  // the sign (-0.0), where the codec writes 0x7fff. So: an NF4 absmax of
  // that NaN in the third of 32 stretches (an Inf, which times the code
  // 0.0 makes a NaN, in the fifth), and NVFP4 with that NaN or +Inf as the
  // global scale; every other stretch converts unchecked.
  std::vector<std::pair<std::string, kern::KernelTable>> tables = dequantize16_tables();
  if (tables.empty()) {
    WARN("SKIPPED: no table this CPU runs has 16-bit dequantize entries (AVX-512 and AVX2 do)");
    return;
  }
  const kern::KernelTable& ref = kern::table_for(Q4_ISA_SCALAR);
  float payload_nan;
  const uint32_t payload_bits = 0x7fbfffffu;
  std::memcpy(&payload_nan, &payload_bits, 4);
  const int64_t rows = 16, k = 2048, n = rows * k, nbs = 64;  // NVFP4: 2048 blocks, two stretches
  std::mt19937 gen(2048);
  std::vector<uint8_t> q(static_cast<size_t>(n / 2)), s(static_cast<size_t>(n / 16));
  for (auto& b : q) b = static_cast<uint8_t>(gen());
  for (auto& b : s) b = static_cast<uint8_t>(gen() % 0x7f);
  float lut[16];
  for (uint32_t c = 0; c < 16; ++c) lut[c] = q4::fmt::nf4_decode(c);
  std::vector<float> absmax(static_cast<size_t>(n / nbs));
  for (auto& a : absmax)
    a = std::ldexp(1.0f + static_cast<float>(gen() % 64) / 64, static_cast<int>(gen() % 20) - 10);
  absmax[2 * 1024 / nbs + 5] = payload_nan;
  absmax[4 * 1024 / nbs + 3] = std::numeric_limits<float>::infinity();
  std::vector<float> nf(static_cast<size_t>(n));
  ref.nf4_dequantize(q.data(), lut, absmax.data(), nbs, n, nf.data());
  for (const auto& [name, table] : tables) {
    for (bool bf16 : {false, true}) {
      INFO("table " << name << (bf16 ? " bf16" : " fp16"));
      std::vector<uint16_t> got(nf.size(), 0xdead);
      table.nf4_dequantize16(q.data(), lut, absmax.data(), nbs, n, got.data(), bf16);
      CHECK(got == codec_rounded(nf, bf16));
      for (float g : {payload_nan, std::numeric_limits<float>::infinity()}) {
        INFO("g " << g);
        std::vector<float> nv(static_cast<size_t>(n));
        ref.nvfp4_dequantize(q.data(), s.data(), g, rows, k, nv.data());
        got.assign(nv.size(), 0xdead);
        table.nvfp4_dequantize16(q.data(), s.data(), g, rows, k, got.data(), bf16);
        CHECK(got == codec_rounded(nv, bf16));
      }
    }
  }
}

TEST_CASE("fast-mode session linears keep tiled codes where the table reads them: same bits, counted bytes",
          "[kernels][int8][session]") {
  // (72 rows: four full groups of 16 and a last of 8; at least the 64 rows
  // for which fast mode runs its integer kernels, fast_math_fallback_shape)
  const int64_t n = 72, k = 256;
  Tensor w = t::random_float({n, k}, t::f32(), 91);
  FastOperands op(w, n, k, 64);
  Tensor mq({n, k / 2}, t::u8()), msc({n, k / 32}, t::u8());
  REQUIRE(MXFP4_quantize(w.t(), mq.t(), msc.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  for (int32_t isa : t::runnable_isas()) {
    t::IsaCap guard(isa);
    const kern::KernelTable& kt = kern::table_for(isa);
    for (int32_t format : {Q4_FORMAT_NVFP4, Q4_FORMAT_NF4, Q4_FORMAT_MXFP4}) {
      INFO("isa " << Q4_isa_name(isa) << " format " << format);
      int64_t bytes[2] = {0, 0};
      for (int32_t mode : {Q4_MATH_EXACT, Q4_MATH_FAST}) {
        Q4_session_config c = t::cpu_session_config();
        c.math_mode = mode;
        Q4_session* s = nullptr;
        REQUIRE(Q4_session_create(&c, &s) == Q4_OK);
        Q4_weight_bundle b = t::float_bundle(w, format);
        Q4_linear* l = nullptr;
        REQUIRE(Q4_linear_create(s, &b, &l) == Q4_OK);
        Q4_linear_info info{};
        info.struct_size = sizeof info;
        REQUIRE(Q4_linear_info_get(l, &info) == Q4_OK);
        bytes[mode == Q4_MATH_FAST ? 1 : 0] = info.weight_bytes;
        if (mode == Q4_MATH_FAST) {
          for (int64_t m : {1, 2, 8, 72}) {
            INFO("m " << m);
            Tensor x = t::random_float({m, k}, t::f32(), 92), y({m, n}, t::f32()), ref({m, n}, t::f32());
            REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
            if (format == Q4_FORMAT_NVFP4) {
              REQUIRE(NVFP4_linear(x.t(), op.wq.t(), op.ws.t(), 0, op.g, nullptr, ref.t(), &op.fast) ==
                      Q4_OK);
            } else if (format == Q4_FORMAT_NF4) {
              REQUIRE(NF4_scaled_mm(x.t(), op.nq.t(), &op.st, nullptr, ref.t(), &op.fast) == Q4_OK);
            } else {
              REQUIRE(MXFP4_linear(x.t(), mq.t(), msc.t(), Q4_SCALE_LINEAR, nullptr, ref.t(), &op.fast) ==
                      Q4_OK);
            }
            CHECK(std::memcmp(y.data(), ref.data(), static_cast<size_t>(y.bytes)) == 0);
          }
        }
        Q4_linear_destroy(l);
        Q4_session_destroy(s);
      }
      // The tiles: the 64 rows of the four full groups of 16, K/2 bytes each
      // (where the table reads them, i8_reads_tile_absmax: NF4's K/64 fp32
      // absmax; i8_reads_tile_scales: NVFP4's and MXFP4's E4M3 scales in
      // spans of 64 blocks, and a flag byte per group).
      const int64_t tiles =
          64 * k / 2 + (format == Q4_FORMAT_NF4
                            ? (kt.i8_reads_tile_absmax ? 64 * (k / 64) * 4 : 0)
                            : (kt.i8_reads_tile_scales ? 4 * kern::i8_tile_scale_group_bytes(k) + 4 : 0));
      CHECK(bytes[1] - bytes[0] == (kt.i8_reads_tiles ? tiles : 0));
    }
  }
  // K = 0 with a huge N (found by fuzz_api: the tiling looped over N / 16
  // empty groups): no tiles, created at once.
  Q4_session_config c = t::cpu_session_config();
  c.math_mode = Q4_MATH_FAST;
  Q4_session* s = nullptr;
  REQUIRE(Q4_session_create(&c, &s) == Q4_OK);
  Tensor empty({int64_t{1} << 50, 0}, t::f32());
  Q4_weight_bundle b = t::float_bundle(empty, Q4_FORMAT_NVFP4);
  Q4_linear* l = nullptr;
  const int32_t rc = Q4_linear_create(s, &b, &l);
  INFO(Q4_last_error());
  if (rc == Q4_OK) {
    Q4_linear_info info{};
    info.struct_size = sizeof info;
    REQUIRE(Q4_linear_info_get(l, &info) == Q4_OK);
    CHECK(info.in_features == 0);
    Q4_linear_destroy(l);
  } else {
    CHECK(rc == Q4_ERR_SHAPE);
  }
  Q4_session_destroy(s);
}

// The scale layouts' converters against fmt::swizzle_offset byte by byte:
// rows around the 32- and 128-row tiles, columns around the 4-column
// groups and the 16-column blocks (NVFP4's K/16 and MXFP4's K/32),
// padding zeroed, round trip.
TEST_CASE("swizzle_scales and unswizzle_scales move every byte to its swizzle_offset", "[kernels][swizzle]") {
  std::mt19937 gen(3);
  for (const int64_t rows : {int64_t{1}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{127}, int64_t{128},
                             int64_t{129}, int64_t{300}}) {
    // (16 or more: whole bands also move four tiles at a time.)
    for (const int64_t cols : {0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 15, 16, 17, 19, 20, 31, 33, 64}) {
      INFO("rows " << rows << ", cols " << cols);
      std::vector<uint8_t> lin(static_cast<size_t>(rows * cols));
      for (uint8_t& b : lin) b = static_cast<uint8_t>(1 + gen() % 255);  // nonzero: padding tells apart
      const size_t total = static_cast<size_t>(q4::fmt::swizzled_rows(rows) * q4::fmt::swizzled_cols(cols));
      std::vector<uint8_t> want(total, 0), sw(total + 1, 0xEE);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c)
          want[static_cast<size_t>(q4::fmt::swizzle_offset(r, c, cols))] =
              lin[static_cast<size_t>(r * cols + c)];
      }
      kern::swizzle_scales(lin.data(), rows, cols, sw.data());
      CHECK(std::equal(want.begin(), want.end(), sw.begin()));
      CHECK(sw[total] == 0xEE);
      std::vector<uint8_t> back(lin.size() + 1, 0xEE);
      kern::unswizzle_scales(sw.data(), rows, cols, back.data());
      CHECK(std::equal(lin.begin(), lin.end(), back.begin()));
      CHECK(back[lin.size()] == 0xEE);
    }
  }
  // The threaded form, in tasks of whole bands (600 columns: a band of
  // 75 KiB, one a task; 300 rows: three tasks, the last partial).
  for (const int64_t cols : {int64_t{8}, int64_t{600}}) {
    const int64_t rows = 300;
    std::vector<uint8_t> lin(static_cast<size_t>(rows * cols));
    for (uint8_t& b : lin) b = static_cast<uint8_t>(gen());
    std::vector<uint8_t> sw(static_cast<size_t>(q4::fmt::swizzled_rows(rows) * q4::fmt::swizzled_cols(cols)));
    kern::swizzle_scales(lin.data(), rows, cols, sw.data());
    for (const int32_t threads : {1, 3}) {
      std::vector<uint8_t> back(lin.size() + 1, 0xEE);
      kern::unswizzle_scales_parallel(sw.data(), rows, cols, back.data(), threads);
      CHECK(std::equal(lin.begin(), lin.end(), back.begin()));
      CHECK(back[lin.size()] == 0xEE);
      std::vector<uint8_t> sw2(sw.size() + 1, 0xEE);  // (padding written as 0 by the tasks)
      kern::swizzle_scales_parallel(lin.data(), rows, cols, sw2.data(), threads);
      CHECK(std::equal(sw.begin(), sw.end(), sw2.begin()));
      CHECK(sw2[sw.size()] == 0xEE);
    }
  }
}

// kern::aligned_floats keeps freed blocks of 16 KiB and more in a cache of
// the freeing thread (at most 8 blocks and 64 MiB) and hands them out
// again on that thread: a product's scratch is the same from call to
// call, and a block malloc returned to the system is faulted in again on
// every call.
// The checks run on a thread of their own, whose cache starts empty
// (the tests before this one in the same process leave blocks in the
// main thread's cache, which would answer its first requests).
static void scratch_block_checks() {
  using q4::kern::AlignedFloats;
  auto aligned64 = [](const AlignedFloats& p) { return reinterpret_cast<uintptr_t>(p.get()) % 64 == 0; };
  AlignedFloats a = q4::kern::aligned_floats(int64_t{1} << 16);  // 256 KiB
  CHECK(aligned64(a));  // (CHECK: a REQUIRE would throw on this thread)
  float* const first = a.get();
  a.reset();
  // A smaller request takes the kept block (the smallest that holds it);
  // all of the request is usable.
  AlignedFloats b = q4::kern::aligned_floats(int64_t{1} << 15);
  CHECK(b.get() == first);
  std::fill(b.get(), b.get() + (int64_t{1} << 15), 1.0f);
  // A larger one cannot: a new block, the kept one untouched.
  b.reset();
  AlignedFloats c = q4::kern::aligned_floats(int64_t{1} << 17);
  CHECK(aligned64(c));
  CHECK(c.get() != first);
  std::fill(c.get(), c.get() + (int64_t{1} << 17), 2.0f);
  AlignedFloats d = q4::kern::aligned_floats(int64_t{1} << 16);
  CHECK(d.get() == first);
  d.reset();
  c.reset();
  // Both kept now: each request gets the smallest block that holds it.
  AlignedFloats e = q4::kern::aligned_floats(int64_t{1} << 14);
  CHECK(e.get() == first);
  e.reset();

  // A block freed on another thread goes to that thread's cache: while
  // that thread lives, this thread's requests do not get it.
  float* other = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  bool freed = false, done = false;
  std::thread t([&] {
    AlignedFloats mine = q4::kern::aligned_floats(int64_t{1} << 18);  // 1 MiB, larger than any kept here
    std::unique_lock<std::mutex> lock(mu);
    other = mine.get();
    mine.reset();
    freed = true;
    cv.notify_all();
    cv.wait(lock, [&] { return done; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return freed; });
  }
  AlignedFloats f = q4::kern::aligned_floats(int64_t{1} << 18);
  CHECK(f.get() != other);
  CHECK(f.get() != first);
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  t.join();
  f.reset();

  // Nine blocks freed: the cache holds eight; nine requests get eight of
  // them back and one new block, all distinct and writable.
  std::vector<AlignedFloats> many;
  std::set<float*> kept;
  for (int i = 0; i < 9; ++i) many.push_back(q4::kern::aligned_floats(int64_t{1} << 13));
  for (AlignedFloats& p : many) kept.insert(p.get());
  many.clear();
  std::set<float*> again;
  int reused = 0;
  for (int i = 0; i < 9; ++i) {
    many.push_back(q4::kern::aligned_floats(int64_t{1} << 13));
    std::fill(many.back().get(), many.back().get() + (int64_t{1} << 13), 3.0f);
    again.insert(many.back().get());
    reused += kept.count(many.back().get()) > 0 ? 1 : 0;
  }
  CHECK(again.size() == 9);
  CHECK(reused >= 8);
}

TEST_CASE("scratch blocks: a freed block is handed out again on its thread, never on another", "[kernels]") {
  std::thread(scratch_block_checks).join();
}

// The far quantize entries (an input read from memory, kQuantizeFarMinBytes
// and up: prefetched further ahead, into L2) give the bytes of the scalar
// table, for fp32, fp16 and bf16 input, and refuse a NaN or Inf as the
// checked entries do. Whatever CPU picks them for its table, the AVX-512
// variant with them set runs on every CPU with AVX-512.
TEST_CASE("NVFP4 quantize for inputs read from memory (far entries) gives the scalar table's bytes",
          "[kernels][quantize]") {
  kern::KernelTable far;
  if (!q4::cpu_has_isa(q4::cpu_info(), Q4_ISA_AVX512) || !kern::avx512_quantize_far_variant(&far)) {
    WARN("SKIPPED: the AVX-512 table is not compiled in or this CPU does not run it");
    return;
  }
  REQUIRE(far.nvfp4_quantize_checked_far != nullptr);
  REQUIRE(far.nvfp4_quantize_checked16_far != nullptr);
  const kern::KernelTable& scalar = kern::scalar_table();
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // 37 rows of 1040 (65 blocks a row: groups of 16 blocks cross rows, 19
  // batches of 8 groups and a tail of 5 blocks), one row of 16 (a tail
  // only); blocks of very different magnitudes, zero blocks among them.
  for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{37, 1040}, {1, 16}, {64, 4096}}) {
    const int64_t n = rows * k;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t b = 0; b < n / 16; ++b) {
      const float mag = b % 11 == 3 ? 0.0f : std::ldexp(1.0f, static_cast<int>(b % 23) - 11);
      for (int64_t i = 0; i < 16; ++i) x[static_cast<size_t>(b * 16 + i)] = mag * normal(rng);
    }
    for (const float g : {1.0f, 0.0137f, 3.0e4f}) {
      INFO("rows=" << rows << " k=" << k << " g=" << g);
      std::vector<uint8_t> q0(static_cast<size_t>(n / 2)), s0(static_cast<size_t>(n / 16));
      std::vector<uint8_t> q1(q0.size(), 0xEE), s1(s0.size(), 0xEE);
      scalar.nvfp4_quantize(x.data(), rows, k, g, q0.data(), s0.data());
      CHECK(far.nvfp4_quantize_checked_far(x.data(), rows, k, g, q1.data(), s1.data()));
      CHECK(q0 == q1);
      CHECK(s0 == s1);
      for (const bool bf16 : {false, true}) {
        // 16-bit input: the bytes of quantizing its fp32 values.
        std::vector<uint16_t> h(x.size());
        std::vector<float> hx(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          h[i] = bf16 ? q4::fmt::f32_to_bf16(x[i]) : q4::fmt::f32_to_f16(x[i]);
          hx[i] = bf16 ? q4::fmt::bf16_to_f32(h[i]) : q4::fmt::f16_to_f32(h[i]);
        }
        scalar.nvfp4_quantize(hx.data(), rows, k, g, q0.data(), s0.data());
        std::fill(q1.begin(), q1.end(), 0xEE);
        std::fill(s1.begin(), s1.end(), 0xEE);
        CHECK(far.nvfp4_quantize_checked16_far(h.data(), bf16, rows, k, g, q1.data(), s1.data()));
        CHECK(q0 == q1);
        CHECK(s0 == s1);
      }
    }
    // A NaN, an Inf: refused (the first and the last block).
    for (const float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      for (const int64_t at : {int64_t{5}, n - 1}) {
        std::vector<float> xb = x;
        xb[static_cast<size_t>(at)] = bad;
        std::vector<uint8_t> q1(static_cast<size_t>(n / 2)), s1(static_cast<size_t>(n / 16));
        CHECK_FALSE(far.nvfp4_quantize_checked_far(xb.data(), rows, k, 1.0f, q1.data(), s1.data()));
      }
    }
  }
}
