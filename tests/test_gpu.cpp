// GPU tests (label `gpu`): every CUDA operation against the CPU reference —
// bit-exact for quantize/dequantize, error-bounded for the products — plus
// managed-memory round trips and concurrent callers. Without a usable device
// the program prints SKIPPED with the reason and exits 77 (CTest: skipped).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nvfp4/nvfp4.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAILED: %s (%s)\n", what.c_str(), Q4_last_error());
  }
}

DLTensor host(void* data, int64_t* shape, int32_t ndim, DLDataType dt) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

// A managed copy of a host tensor, viewed as a kDLCUDA tensor.
struct Managed {
  DLManagedTensorVersioned* m = nullptr;
  explicit Managed(const DLTensor& src) {
    check(NVFP4_to_managed(&src, 0, Q4_MANAGED_PREFETCH, &m) == Q4_OK, "NVFP4_to_managed");
  }
  ~Managed() {
    if (m) m->deleter(m);
  }
  DLTensor* t() { return &m->dl_tensor; }
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(m->dl_tensor.data); }
};

}  // namespace

int main() {
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  Q4_get_capabilities(&caps);
  if (caps.cuda_state != Q4_CUDA_READY) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n", caps.native_load_state);
    return 77;
  }
  std::printf("CUDA: %s\n", caps.native_load_state);
  int32_t can = 0;
  NVFP4_can_use_managed(0, &can);
  if (!can) {
    std::printf("SKIPPED: device 0 has no concurrent managed memory (tests read results on the CPU)\n");
    return 77;
  }
  const DLDataType f32{kDLFloat, 32, 1}, u8{kDLUInt, 8, 1};
  const int64_t rows = 256, k = 512, m = 4, n = 256;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(rows * k);
  for (float& v : x) v = nd(rng);
  int64_t xs[2] = {rows, k}, qs[2] = {rows, k / 2}, ss[2] = {rows, k / 16};
  DLTensor hx = host(x.data(), xs, 2, f32);

  // CPU reference.
  std::vector<uint8_t> q_cpu(rows * k / 2), s_cpu(rows * k / 16);
  DLTensor hq = host(q_cpu.data(), qs, 2, u8), hs = host(s_cpu.data(), ss, 2, u8);
  float g_cpu = 0;
  check(NVFP4_quantize(&hx, &hq, &hs, Q4_SCALE_LINEAR, 0.0f, &g_cpu, nullptr) == Q4_OK, "CPU quantize");

  // GPU quantize: bit-identical bytes and global scale.
  Managed dx(hx), dq(hq), ds(hs);
  std::memset(dq.m->dl_tensor.data, 0xAA, q_cpu.size());
  float g_gpu = 0;
  check(NVFP4_quantize(dx.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, 0.0f, &g_gpu, nullptr) == Q4_OK,
        "GPU quantize");
  check(Q4_cuda_synchronize(0, nullptr) == Q4_OK, "synchronize");
  check(g_gpu == g_cpu, "global scale identical");
  check(std::memcmp(dq.bytes(), q_cpu.data(), q_cpu.size()) == 0, "quantize bytes bit-identical to the CPU");
  check(std::memcmp(ds.bytes(), s_cpu.data(), s_cpu.size()) == 0, "scale bytes bit-identical to the CPU");

  // GPU dequantize: bit-identical fp32.
  std::vector<float> d_cpu(rows * k), zeros(rows * k, 0.0f);
  DLTensor hd = host(d_cpu.data(), xs, 2, f32);
  check(NVFP4_dequantize(&hq, &hs, Q4_SCALE_LINEAR, g_cpu, &hd, nullptr) == Q4_OK, "CPU dequantize");
  DLTensor hz = host(zeros.data(), xs, 2, f32);
  Managed dd(hz);
  check(NVFP4_dequantize(dq.t(), ds.t(), Q4_SCALE_LINEAR, g_cpu, dd.t(), nullptr) == Q4_OK, "GPU dequantize");
  Q4_cuda_synchronize(0, nullptr);
  check(std::memcmp(dd.bytes(), d_cpu.data(), d_cpu.size() * 4) == 0, "dequantize bit-identical to the CPU");

  // Weight-only linear (GEMV path m = 4 and GEMM path m = 64).
  for (int64_t mm : {m, int64_t{64}}) {
    std::vector<float> a(mm * k), y_cpu(mm * n), y0(mm * n, 0.0f);
    for (float& v : a) v = nd(rng);
    int64_t as[2] = {mm, k}, ys[2] = {mm, n}, wqs[2] = {n, k / 2}, wss[2] = {n, k / 16};
    DLTensor ha = host(a.data(), as, 2, f32), hy = host(y_cpu.data(), ys, 2, f32),
             hy0 = host(y0.data(), ys, 2, f32);
    DLTensor hwq = host(q_cpu.data(), wqs, 2, u8), hws = host(s_cpu.data(), wss, 2, u8);
    check(NVFP4_linear(&ha, &hwq, &hws, Q4_SCALE_LINEAR, g_cpu, nullptr, &hy, nullptr) == Q4_OK,
          "CPU linear");
    Managed da(ha), dy(hy0), dwq(hwq), dws(hws);
    check(NVFP4_linear(da.t(), dwq.t(), dws.t(), Q4_SCALE_LINEAR, g_cpu, nullptr, dy.t(), nullptr) == Q4_OK,
          "GPU linear");
    Q4_cuda_synchronize(0, nullptr);
    const float* yg = reinterpret_cast<const float*>(dy.bytes());
    double worst = 0;
    for (int64_t i = 0; i < mm * n; ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(yg[i]) - y_cpu[i]) / (1 + std::fabs(y_cpu[i])));
    check(worst < 1e-4, "GPU linear within 1e-4 of the CPU (m=" + std::to_string(mm) + ", worst " +
                            std::to_string(worst) + ")");
  }

  // W4A4 scaled_mm (cuBLASLt FP4 on Blackwell, fallback elsewhere).
  {
    const int64_t mm = 32;
    std::vector<float> a(mm * k);
    for (float& v : a) v = nd(rng);
    std::vector<uint8_t> aq(mm * k / 2), as(mm * k / 16);
    int64_t ash[2] = {mm, k}, aqs[2] = {mm, k / 2}, ass[2] = {mm, k / 16}, ys[2] = {mm, n},
            wqs[2] = {n, k / 2}, wss[2] = {n, k / 16};
    DLTensor ha = host(a.data(), ash, 2, f32), haq = host(aq.data(), aqs, 2, u8),
             has = host(as.data(), ass, 2, u8);
    float ga = 0;
    check(NVFP4_quantize(&ha, &haq, &has, Q4_SCALE_LINEAR, 0.0f, &ga, nullptr) == Q4_OK, "CPU quantize A");
    std::vector<float> y_cpu(mm * n), y0(mm * n, 0.0f);
    DLTensor hy = host(y_cpu.data(), ys, 2, f32), hy0 = host(y0.data(), ys, 2, f32);
    DLTensor hwq = host(q_cpu.data(), wqs, 2, u8), hws = host(s_cpu.data(), wss, 2, u8);
    const float alpha = ga * g_cpu;
    check(NVFP4_scaled_mm(&haq, &has, &hwq, &hws, Q4_SCALE_LINEAR, alpha, nullptr, &hy, nullptr) == Q4_OK,
          "CPU mm");
    Managed daq(haq), das(has), dwq(hwq), dws(hws), dy(hy0);
    check(NVFP4_scaled_mm(daq.t(), das.t(), dwq.t(), dws.t(), Q4_SCALE_LINEAR, alpha, nullptr, dy.t(),
                          nullptr) == Q4_OK,
          "GPU scaled_mm");
    Q4_cuda_synchronize(0, nullptr);
    const float* yg = reinterpret_cast<const float*>(dy.bytes());
    double worst = 0;
    for (int64_t i = 0; i < mm * n; ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(yg[i]) - y_cpu[i]) / (1 + std::fabs(y_cpu[i])));
    check(worst < 1e-3, "GPU scaled_mm within 1e-3 of the CPU (worst " + std::to_string(worst) + ")");

    // Concurrent scaled_mm on two streams (each thread's per-thread default
    // stream, the same handle value cudaStreamPerThread = 0x2 for both):
    // each stream gets its own cuBLASLt workspace, so the results match a
    // single call exactly.
    std::vector<float> y_ref(yg, yg + mm * n);
    auto same = [&](const float* y) {  // a shared workspace would corrupt whole tiles
      for (size_t i = 0; i < y_ref.size(); ++i)
        if (std::fabs(y[i] - y_ref[i]) > 1e-5f * (1 + std::fabs(y_ref[i]))) return false;
      return true;
    };
    int bad = 0;
    std::mutex mu;
    std::vector<std::thread> ts;
    for (int i = 0; i < 2; ++i) {
      ts.emplace_back([&] {
        Q4_op_options o{};
        o.struct_size = sizeof o;
        Q4_op_options_init(&o);
        o.stream = reinterpret_cast<void*>(uintptr_t{2});  // cudaStreamPerThread
        Managed out(hy0);
        for (int it = 0; it < 8; ++it) {
          const bool ok = NVFP4_scaled_mm(daq.t(), das.t(), dwq.t(), dws.t(), Q4_SCALE_LINEAR, alpha, nullptr,
                                          out.t(), &o) == Q4_OK &&
                          Q4_cuda_synchronize(0, o.stream) == Q4_OK &&
                          same(reinterpret_cast<const float*>(out.bytes()));
          if (!ok) {
            std::lock_guard<std::mutex> lock(mu);
            ++bad;
          }
        }
      });
    }
    for (auto& th : ts) th.join();
    check(bad == 0, "concurrent scaled_mm on two streams matches the single call");
    check(NVFP4_empty_cache() == Q4_OK, "empty_cache after use");
  }

  // NF4 on the GPU: quantize bit-identical, dequantize and linear vs the CPU.
  {
    const int64_t nn = n * k;
    std::vector<uint8_t> nq_cpu(nn / 2), nq0(nn / 2, 0);
    std::vector<float> am_cpu(nn / 64), am0(nn / 64, 0.0f);
    int64_t qsh[1] = {nn / 2}, ash[1] = {nn / 64}, wsh[2] = {n, k};
    std::vector<float> w(x.begin(), x.begin() + nn);
    DLTensor hw = host(w.data(), wsh, 2, f32), hq2 = host(nq_cpu.data(), qsh, 1, u8),
             ha = host(am_cpu.data(), ash, 1, f32);
    check(NF4_quantize(&hw, &hq2, &ha, 64, nullptr) == Q4_OK, "CPU NF4 quantize");
    DLTensor hq0 = host(nq0.data(), qsh, 1, u8), ha0 = host(am0.data(), ash, 1, f32);
    Managed dw(hw), dq2(hq0), da(ha0);
    check(NF4_quantize(dw.t(), dq2.t(), da.t(), 64, nullptr) == Q4_OK, "GPU NF4 quantize");
    Q4_cuda_synchronize(0, nullptr);
    check(std::memcmp(dq2.bytes(), nq_cpu.data(), nq_cpu.size()) == 0, "NF4 codes bit-identical to the CPU");
    check(std::memcmp(da.bytes(), am_cpu.data(), am_cpu.size() * 4) == 0, "NF4 absmax identical to the CPU");
    NF4_state st{};
    st.struct_size = sizeof st;
    st.blocksize = 64;
    st.absmax = da.t();
    std::vector<float> a(m * k), y_cpu(m * n), y0(m * n, 0.0f);
    for (float& v : a) v = nd(rng);
    int64_t as[2] = {m, k}, ys[2] = {m, n};
    DLTensor hx2 = host(a.data(), as, 2, f32), hy = host(y_cpu.data(), ys, 2, f32),
             hy0 = host(y0.data(), ys, 2, f32);
    NF4_state cst = st;
    cst.absmax = &ha;
    check(NF4_scaled_mm(&hx2, &hq2, &cst, nullptr, &hy, nullptr) == Q4_OK, "CPU NF4 linear");
    Managed dx2(hx2), dy(hy0);
    check(NF4_scaled_mm(dx2.t(), dq2.t(), &st, nullptr, dy.t(), nullptr) == Q4_OK, "GPU NF4 linear");
    Q4_cuda_synchronize(0, nullptr);
    const float* yg = reinterpret_cast<const float*>(dy.bytes());
    double worst = 0;
    for (int64_t i = 0; i < m * n; ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(yg[i]) - y_cpu[i]) / (1 + std::fabs(y_cpu[i])));
    check(worst < 1e-4, "GPU NF4 linear within 1e-4 of the CPU");
  }

  // NF4, odd element count: the spare low nibble codes 0.0 (7), as bitsandbytes.
  {
    float v[3] = {0.75f, -0.3f, 0.2f};
    uint8_t q0[2] = {0, 0};
    float a0[1] = {0.0f};
    int64_t vs[1] = {3}, q2s[1] = {2}, a1s[1] = {1};
    Managed dv(host(v, vs, 1, f32)), dq(host(q0, q2s, 1, u8)), da(host(a0, a1s, 1, f32));
    check(NF4_quantize(dv.t(), dq.t(), da.t(), 64, nullptr) == Q4_OK, "GPU NF4 quantize, odd count");
    Q4_cuda_synchronize(0, nullptr);
    check(dq.bytes()[0] == 0xf3 && dq.bytes()[1] == 0xa7, "NF4 [0.75, -0.3, 0.2] -> f3 a7");
  }

  // Non-finite inputs: the first bad flat index is reported (block reductions).
  {
    std::vector<float> bad_x(rows * k, 1.0f);
    bad_x[rows * k - 5] = NAN;
    bad_x[77777] = INFINITY;
    bad_x[123457] = NAN;
    DLTensor hb = host(bad_x.data(), xs, 2, f32);
    std::vector<uint8_t> bq(rows * k / 2), bsc(rows * k / 16), bq4(rows * k / 2);
    std::vector<float> bam(rows * k / 64);
    int64_t b4s[1] = {rows * k / 2}, bas[1] = {rows * k / 64};
    Managed db(hb), dbq(host(bq.data(), qs, 2, u8)), dbs(host(bsc.data(), ss, 2, u8)),
        dbq4(host(bq4.data(), b4s, 1, u8)), dba(host(bam.data(), bas, 1, f32));
    check(NVFP4_quantize(db.t(), dbq.t(), dbs.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, nullptr) ==
                  Q4_ERR_NON_FINITE &&
              std::string(Q4_last_error()).find("77777") != std::string::npos,
          "GPU NVFP4 quantize reports the first non-finite index");
    check(NF4_quantize(db.t(), dbq4.t(), dba.t(), 64, nullptr) == Q4_ERR_NON_FINITE &&
              std::string(Q4_last_error()).find("77777") != std::string::npos,
          "GPU NF4 quantize reports the first non-finite index");
  }

  // Managed memory: an already-managed input comes back as a view.
  {
    Managed once(hx);
    DLManagedTensorVersioned* again = nullptr;
    check(NVFP4_to_managed(once.t(), 0, 0, &again) == Q4_OK, "to_managed of managed");
    if (again) {
      check((again->flags & DLPACK_FLAG_BITMASK_IS_COPIED) == 0, "view, not a copy");
      check(again->dl_tensor.data == once.m->dl_tensor.data, "same memory");
      again->deleter(again);
    }
    int32_t is_managed = 0;
    check(NVFP4_is_managed_tensor(once.t(), &is_managed) == Q4_OK && is_managed == 1, "is_managed_tensor");
    check(NVFP4_managed_prefetch(once.t(), -1, nullptr) == Q4_OK, "prefetch to the CPU");
    uint64_t f = 0, t = 0;
    check(NVFP4_memory_info(0, &f, &t) == Q4_OK && t > 0 && f <= t, "memory_info");
  }

  // Concurrent callers (default stream each), results still exact.
  {
    std::vector<std::thread> ts;
    int bad = 0;
    std::mutex mu;
    for (int i = 0; i < 4; ++i) {
      ts.emplace_back([&] {
        Managed lx(hx), lq(hq), ls(hs);
        float g = 0;
        const bool ok = NVFP4_quantize(lx.t(), lq.t(), ls.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr) == Q4_OK &&
                        Q4_cuda_synchronize(0, nullptr) == Q4_OK &&
                        std::memcmp(lq.bytes(), q_cpu.data(), q_cpu.size()) == 0;
        if (!ok) {
          std::lock_guard<std::mutex> lock(mu);
          ++bad;
        }
      });
    }
    for (auto& th : ts) th.join();
    check(bad == 0, "concurrent quantize calls bit-identical");
  }
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "ok", failures);
  return failures ? 1 : 0;
}
