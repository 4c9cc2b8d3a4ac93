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

#include "formats/codec.h"
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

// A managed copy of a host tensor, viewed as a kDLCUDA tensor. Built with
// -DNVFP4_GPU_TEST_HOST_DRYRUN it is a plain host copy instead and the
// program runs every "GPU" call on the CPU: a check of this test's own logic
// (shapes, references, tolerances) on a machine without a GPU; never a GPU
// result, and not built by CMake.
struct Managed {
  DLManagedTensorVersioned* m = nullptr;
#ifdef NVFP4_GPU_TEST_HOST_DRYRUN
  std::vector<uint8_t> copy;
  DLTensor view{};
  explicit Managed(const DLTensor& src) : view(src) {
    int64_t count = 1;
    for (int32_t i = 0; i < src.ndim; ++i) count *= src.shape[i];
    const auto* p = static_cast<const uint8_t*>(src.data);
    copy.assign(p, p + count * src.dtype.bits / 8);
    view.data = copy.data();
  }
  DLTensor* t() {
    return &view;
  }
  const uint8_t* bytes() const {
    return copy.data();
  }
#else
  explicit Managed(const DLTensor& src) {
    check(NVFP4_to_managed(&src, 0, Q4_MANAGED_PREFETCH, &m) == Q4_OK, "NVFP4_to_managed");
  }
  ~Managed() {
    if (m) m->deleter(m);
  }
  Managed(const Managed&) = delete;
  Managed& operator=(const Managed&) = delete;
  DLTensor* t() {
    return &m->dl_tensor;
  }
  const uint8_t* bytes() const {
    return static_cast<const uint8_t*>(m->dl_tensor.data);
  }
#endif
};

// max |got - expect| / (1 + |expect|) over `count` values.
double max_rel_err(const float* got, const float* expect, int64_t count) {
  double worst = 0;
  for (int64_t i = 0; i < count; ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - expect[i]) / (1 + std::fabs(expect[i])));
  return worst;
}

// A packed NVFP4 or MXFP4 weight bundle (linear scales) of an [n, k] weight.
Q4_weight_bundle packed_bundle(int32_t format, const DLTensor* q, const DLTensor* s, float g, int64_t n,
                               int64_t k) {
  Q4_weight_bundle b{};
  b.struct_size = sizeof b;
  Q4_weight_bundle_init(&b);
  b.format = format;
  b.source = Q4_WEIGHT_PACKED;
  b.scale_layout = Q4_SCALE_LINEAR;
  b.weight = q;
  b.scale = s;
  b.global_scale = g;
  b.out_features = n;
  b.in_features = k;
  return b;
}

// Waits for the work queued on `stream` (the dry run has none).
int32_t gpu_sync(void* stream) {
#ifdef NVFP4_GPU_TEST_HOST_DRYRUN
  (void)stream;
  return Q4_OK;
#else
  return Q4_cuda_synchronize(0, stream);
#endif
}

}  // namespace

int main() {
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  Q4_get_capabilities(&caps);
#ifdef NVFP4_GPU_TEST_HOST_DRYRUN
  std::printf("HOST DRY RUN: every \"GPU\" call below runs on the CPU (checks this test, not CUDA)\n");
  if (false) {
#else
  if (caps.cuda_state != Q4_CUDA_READY) {
#endif
    std::printf("SKIPPED: no usable CUDA device (%s)\n", caps.native_load_state);
    return 77;
  }
  std::printf("CUDA: %s\n", caps.native_load_state);
  int32_t can = 0;
  NVFP4_can_use_managed(0, &can);
#ifdef NVFP4_GPU_TEST_HOST_DRYRUN
  can = 1;
#endif
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
  std::memset(dq.t()->data, 0xAA, q_cpu.size());
  float g_gpu = 0;
  check(NVFP4_quantize(dx.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, 0.0f, &g_gpu, nullptr) == Q4_OK,
        "GPU quantize");
  check(gpu_sync(nullptr) == Q4_OK, "synchronize");
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
  gpu_sync(nullptr);
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
    gpu_sync(nullptr);
    const float* yg = reinterpret_cast<const float*>(dy.bytes());
    const double worst = max_rel_err(yg, y_cpu.data(), mm * n);
    check(worst < 1e-4, "GPU linear within 1e-4 of the CPU (m=" + std::to_string(mm) + ", worst " +
                            std::to_string(worst) + ")");
  }

  // The GEMV's other loads: a weight view 2 bytes past a 4-byte boundary
  // (byte-wise kernel) and x 4 bytes past a 16-byte boundary (x element by
  // element), both against the CPU.
  {
    const int64_t mm = 3;
    std::vector<float> a(mm * k + 1), y_cpu(mm * n), y0(mm * n, 0.0f);
    for (float& v : a) v = nd(rng);
    std::vector<uint8_t> wq2(q_cpu.size() + 2);
    std::memcpy(wq2.data() + 2, q_cpu.data(), q_cpu.size());
    int64_t as[2] = {mm, k}, ys[2] = {mm, n}, wqs[2] = {n, k / 2}, wss[2] = {n, k / 16},
            a1s[1] = {mm * k + 1}, w1s[1] = {static_cast<int64_t>(wq2.size())};
    DLTensor ha = host(a.data() + 1, as, 2, f32), hy = host(y_cpu.data(), ys, 2, f32);
    DLTensor hwq = host(q_cpu.data(), wqs, 2, u8), hws = host(s_cpu.data(), wss, 2, u8);
    check(NVFP4_linear(&ha, &hwq, &hws, Q4_SCALE_LINEAR, g_cpu, nullptr, &hy, nullptr) == Q4_OK,
          "CPU linear");
    Managed dabuf(host(a.data(), a1s, 1, f32)), dwbuf(host(wq2.data(), w1s, 1, u8)), dws(hws),
        dy(host(y0.data(), ys, 2, f32));
    DLTensor da = *dabuf.t(), dw = *dwbuf.t();
    da.ndim = 2;
    da.shape = as;
    da.byte_offset = 4;
    dw.ndim = 2;
    dw.shape = wqs;
    dw.byte_offset = 2;
    check(NVFP4_linear(&da, &dw, dws.t(), Q4_SCALE_LINEAR, g_cpu, nullptr, dy.t(), nullptr) == Q4_OK,
          "GPU linear, unaligned views");
    gpu_sync(nullptr);
    const float* yg = reinterpret_cast<const float*>(dy.bytes());
    const double worst = max_rel_err(yg, y_cpu.data(), mm * n);
    check(worst < 1e-4,
          "GPU linear on unaligned views within 1e-4 of the CPU (worst " + std::to_string(worst) + ")");
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
    gpu_sync(nullptr);
    const float* yg = reinterpret_cast<const float*>(dy.bytes());
    const double worst = max_rel_err(yg, y_cpu.data(), mm * n);
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
                          gpu_sync(o.stream) == Q4_OK && same(reinterpret_cast<const float*>(out.bytes()));
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
    gpu_sync(nullptr);
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
    gpu_sync(nullptr);
    const float* yg = reinterpret_cast<const float*>(dy.bytes());
    const double worst = max_rel_err(yg, y_cpu.data(), m * n);
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
    gpu_sync(nullptr);
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
#ifndef NVFP4_GPU_TEST_HOST_DRYRUN
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
#endif

  // MXFP4 on the GPU: quantize bit-identical in both scale layouts,
  // dequantize bit-identical, linear / scaled_mm / experts vs the CPU.
  {
    const int64_t mk = k, mr = rows;  // K = 512: 16 scale bytes per row
    std::vector<uint8_t> mq_cpu(mr * mk / 2), ms_cpu(mr * mk / 32);
    int64_t mqs[2] = {mr, mk / 2}, mss[2] = {mr, mk / 32};
    DLTensor hmq = host(mq_cpu.data(), mqs, 2, u8), hms = host(ms_cpu.data(), mss, 2, u8);
    check(MXFP4_quantize(&hx, &hmq, &hms, Q4_SCALE_LINEAR, nullptr) == Q4_OK, "CPU MXFP4 quantize");
    {
      std::vector<uint8_t> q0(mq_cpu.size(), 0), s0(ms_cpu.size(), 0);
      Managed dx(hx), dq(host(q0.data(), mqs, 2, u8)), ds(host(s0.data(), mss, 2, u8));
      check(MXFP4_quantize(dx.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK, "GPU MXFP4 quantize");
      gpu_sync(nullptr);
      check(std::memcmp(dq.bytes(), mq_cpu.data(), mq_cpu.size()) == 0, "MXFP4 elements bit-identical");
      check(std::memcmp(ds.bytes(), ms_cpu.data(), ms_cpu.size()) == 0, "MXFP4 E8M0 scales bit-identical");
    }
    {  // swizzled (cuBLASLt VEC32_UE8M0): roundup(rows,128) x roundup(K/32,4)
      const int64_t sw = ((mr + 127) / 128 * 128) * ((mk / 32 + 3) / 4 * 4);
      std::vector<uint8_t> qc(mq_cpu.size()), sc(sw, 0xAA), q0(mq_cpu.size(), 0), s0(sw, 0);
      int64_t sws[1] = {sw};
      DLTensor hqc = host(qc.data(), mqs, 2, u8), hsc = host(sc.data(), sws, 1, u8);
      check(MXFP4_quantize(&hx, &hqc, &hsc, Q4_SCALE_SWIZZLED, nullptr) == Q4_OK,
            "CPU MXFP4 quantize, swizzled");
      Managed dx(hx), dq(host(q0.data(), mqs, 2, u8)), ds(host(s0.data(), sws, 1, u8));
      check(MXFP4_quantize(dx.t(), dq.t(), ds.t(), Q4_SCALE_SWIZZLED, nullptr) == Q4_OK,
            "GPU MXFP4 quantize, swizzled");
      gpu_sync(nullptr);
      check(std::memcmp(dq.bytes(), qc.data(), qc.size()) == 0 &&
                std::memcmp(ds.bytes(), sc.data(), sc.size()) == 0,
            "MXFP4 swizzled quantize bit-identical");
      std::vector<float> d_cpu(mr * mk), d0(mr * mk, 0.0f);
      DLTensor hd = host(d_cpu.data(), xs, 2, f32);
      check(MXFP4_dequantize(&hqc, &hsc, Q4_SCALE_SWIZZLED, &hd, nullptr) == Q4_OK, "CPU MXFP4 dequantize");
      Managed dd(host(d0.data(), xs, 2, f32));
      check(MXFP4_dequantize(dq.t(), ds.t(), Q4_SCALE_SWIZZLED, dd.t(), nullptr) == Q4_OK,
            "GPU MXFP4 dequantize, swizzled");
      gpu_sync(nullptr);
      check(std::memcmp(dd.bytes(), d_cpu.data(), d_cpu.size() * 4) == 0, "MXFP4 dequantize bit-identical");
    }
    // Weight: the first n rows of the quantized x (n x K).
    int64_t wqs[2] = {n, mk / 2}, wss[2] = {n, mk / 32};
    DLTensor hwq = host(mq_cpu.data(), wqs, 2, u8), hws = host(ms_cpu.data(), wss, 2, u8);
    Managed dwq(hwq), dws(hws);
    for (int64_t mm : {int64_t{1}, int64_t{64}}) {
      std::vector<float> a(mm * mk), y_cpu(mm * n), y0(mm * n, 0.0f);
      for (float& v : a) v = nd(rng);
      int64_t as[2] = {mm, mk}, ys[2] = {mm, n};
      DLTensor ha = host(a.data(), as, 2, f32), hy = host(y_cpu.data(), ys, 2, f32);
      check(MXFP4_linear(&ha, &hwq, &hws, Q4_SCALE_LINEAR, nullptr, &hy, nullptr) == Q4_OK,
            "CPU MXFP4 linear");
      Managed da(ha), dy(host(y0.data(), ys, 2, f32));
      check(MXFP4_linear(da.t(), dwq.t(), dws.t(), Q4_SCALE_LINEAR, nullptr, dy.t(), nullptr) == Q4_OK,
            "GPU MXFP4 linear");
      gpu_sync(nullptr);
      const double worst = max_rel_err(reinterpret_cast<const float*>(dy.bytes()), y_cpu.data(), mm * n);
      check(worst < 1e-4, "GPU MXFP4 linear within 1e-4 of the CPU (m=" + std::to_string(mm) + ", worst " +
                              std::to_string(worst) + ")");
    }
    {  // W4A4: A = rows 64.. of the quantized x.
      const int64_t mm = 32;
      int64_t aqs[2] = {mm, mk / 2}, ass[2] = {mm, mk / 32}, ys[2] = {mm, n};
      DLTensor haq = host(mq_cpu.data() + 64 * mk / 2, aqs, 2, u8),
               has = host(ms_cpu.data() + 64 * mk / 32, ass, 2, u8);
      std::vector<float> y_cpu(mm * n), y0(mm * n, 0.0f);
      DLTensor hy = host(y_cpu.data(), ys, 2, f32);
      check(MXFP4_scaled_mm(&haq, &has, &hwq, &hws, Q4_SCALE_LINEAR, 0.5f, nullptr, &hy, nullptr) == Q4_OK,
            "CPU MXFP4 scaled_mm");
      Managed daq(haq), das(has), dy(host(y0.data(), ys, 2, f32));
      check(MXFP4_scaled_mm(daq.t(), das.t(), dwq.t(), dws.t(), Q4_SCALE_LINEAR, 0.5f, nullptr, dy.t(),
                            nullptr) == Q4_OK,
            "GPU MXFP4 scaled_mm");
      gpu_sync(nullptr);
      const double worst = max_rel_err(reinterpret_cast<const float*>(dy.bytes()), y_cpu.data(), mm * n);
      check(worst < 1e-3, "GPU MXFP4 scaled_mm within 1e-3 of the CPU (worst " + std::to_string(worst) + ")");
    }
    {  // Experts: a [3, 64, K/2] stack (rows of x), groups {2: 3 rows, 0: 0 rows, 2: 5 rows, 1: 2 rows}.
      const int64_t e = 3, en = 64, t = 10;
      int64_t eqs[3] = {e, en, mk / 2}, ess[3] = {e, en, mk / 32}, xs2[2] = {t, mk}, ys[2] = {t, en};
      DLTensor heq = host(mq_cpu.data(), eqs, 3, u8), hes = host(ms_cpu.data(), ess, 3, u8);
      std::vector<float> a(t * mk), y_cpu(t * en), y0(t * en, 0.0f);
      for (float& v : a) v = nd(rng);
      const int32_t experts[4] = {2, 0, 2, 1};
      const int64_t group_rows[4] = {3, 0, 5, 2};
      DLTensor ha = host(a.data(), xs2, 2, f32), hy = host(y_cpu.data(), ys, 2, f32);
      check(MXFP4_linear_experts(&ha, &heq, &hes, Q4_SCALE_LINEAR, experts, group_rows, 4, nullptr, &hy,
                                 nullptr) == Q4_OK,
            "CPU MXFP4 experts");
      Managed da(ha), deq(heq), des(hes), dy(host(y0.data(), ys, 2, f32));
      check(MXFP4_linear_experts(da.t(), deq.t(), des.t(), Q4_SCALE_LINEAR, experts, group_rows, 4, nullptr,
                                 dy.t(), nullptr) == Q4_OK,
            "GPU MXFP4 experts");
      gpu_sync(nullptr);
      const double worst = max_rel_err(reinterpret_cast<const float*>(dy.bytes()), y_cpu.data(), t * en);
      check(worst < 1e-4, "GPU MXFP4 experts within 1e-4 of the CPU (worst " + std::to_string(worst) + ")");
    }
    {  // Bad input on the device: NaN E8M0 scale is fine to dequantize (NaN out); non-finite x refused.
      std::vector<float> bad_x(mr * mk, 1.0f);
      bad_x[4321] = NAN;
      std::vector<uint8_t> q0(mq_cpu.size()), s0(ms_cpu.size());
      Managed db(host(bad_x.data(), xs, 2, f32)), dq(host(q0.data(), mqs, 2, u8)),
          ds(host(s0.data(), mss, 2, u8));
      check(MXFP4_quantize(db.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, nullptr) == Q4_ERR_NON_FINITE &&
                std::string(Q4_last_error()).find("4321") != std::string::npos,
            "GPU MXFP4 quantize reports the first non-finite index");
    }
  }

  // Scale rules on device tensors (scanned on the device; after a hit, the
  // exact scan on the host): a negative E4M3 scale and a NaN E8M0 scale are
  // refused naming the scale; set bits in swizzled padding are not scales.
  {
    const int64_t mm = 4, wn = 200;  // 200 rows: swizzled rows 200..255 are padding
    std::vector<float> a(mm * k, 0.5f), y0(mm * wn, 0.0f), y1(mm * wn, 0.0f);
    int64_t as[2] = {mm, k}, ys[2] = {mm, wn}, wqs[2] = {wn, k / 2}, wss[2] = {wn, k / 16},
            mss[2] = {wn, k / 32};
    const int64_t cols = k / 16;
    std::vector<uint8_t> bad_s(s_cpu.begin(), s_cpu.begin() + wn * cols);
    bad_s[3 * cols + 5] |= 0x80;
    Managed da(host(a.data(), as, 2, f32)), dy(host(y0.data(), ys, 2, f32)), dy1(host(y1.data(), ys, 2, f32)),
        dwq(host(q_cpu.data(), wqs, 2, u8)), dbs(host(bad_s.data(), wss, 2, u8));
    check(NVFP4_linear(da.t(), dwq.t(), dbs.t(), Q4_SCALE_LINEAR, g_cpu, nullptr, dy.t(), nullptr) ==
                  Q4_ERR_INVALID_ARGUMENT &&
              std::string(Q4_last_error()).find("scale [3, 5]") != std::string::npos,
          "GPU linear refuses a negative E4M3 scale, naming it");
    const int64_t sw = ((wn + 127) / 128 * 128) * ((cols + 3) / 4 * 4);
    std::vector<uint8_t> sws(sw, 0);
    int64_t swl[1] = {sw};
    DLTensor lin = host(s_cpu.data(), wss, 2, u8), swz = host(sws.data(), swl, 1, u8);
    check(NVFP4_swizzle_scales(&lin, &swz) == Q4_OK, "swizzle");
    Managed dsw(swz);
    check(NVFP4_linear(da.t(), dwq.t(), dsw.t(), Q4_SCALE_SWIZZLED, g_cpu, nullptr, dy.t(), nullptr) == Q4_OK,
          "GPU linear, swizzled scales");
    for (int64_t r = wn; r < (wn + 127) / 128 * 128; ++r)
      for (int64_t c = 0; c < cols; ++c) sws[q4::fmt::swizzle_offset(r, c, cols)] = 0xFF;
    Managed dpad(swz);
    check(
        NVFP4_linear(da.t(), dwq.t(), dpad.t(), Q4_SCALE_SWIZZLED, g_cpu, nullptr, dy1.t(), nullptr) == Q4_OK,
        "GPU linear, 0xFF in the swizzled padding");
    gpu_sync(nullptr);
    check(std::memcmp(dy.bytes(), dy1.bytes(), y0.size() * 4) == 0, "padding bytes do not change the result");
    // MXFP4: a NaN E8M0 scale.
    std::vector<float> w(x.begin(), x.begin() + wn * k);
    std::vector<uint8_t> mq(wn * k / 2), ms(wn * k / 32);
    int64_t wsh[2] = {wn, k};
    DLTensor hw = host(w.data(), wsh, 2, f32), hmq = host(mq.data(), wqs, 2, u8),
             hms = host(ms.data(), mss, 2, u8);
    check(MXFP4_quantize(&hw, &hmq, &hms, Q4_SCALE_LINEAR, nullptr) == Q4_OK, "CPU MXFP4 weight");
    ms[2 * (k / 32) + 7] = 0xFF;
    Managed dmq(hmq), dms(hms);
    check(MXFP4_linear(da.t(), dmq.t(), dms.t(), Q4_SCALE_LINEAR, nullptr, dy.t(), nullptr) ==
                  Q4_ERR_INVALID_ARGUMENT &&
              std::string(Q4_last_error()).find("row 2, block 7") != std::string::npos,
          "GPU MXFP4 linear refuses a NaN E8M0 scale, naming it");
  }

  // Sessions on the GPU: a reusable linear per format, forward vs the CPU's
  // stateless product.
  {
    Q4_session_config cfg{};
    cfg.struct_size = sizeof cfg;
    Q4_session_config_init(&cfg);
#ifdef NVFP4_GPU_TEST_HOST_DRYRUN
    cfg.target = Q4_TARGET_CPU;
#else
    cfg.target = Q4_TARGET_CUDA;
#endif
    cfg.diagnostics = 1;
    Q4_session* session = nullptr;
    check(Q4_session_create(&cfg, &session) == Q4_OK, "CUDA session");
    if (session) {
      const int64_t mm = 8;
      std::vector<float> a(mm * k);
      for (float& v : a) v = nd(rng);
      int64_t as[2] = {mm, k}, ys[2] = {mm, n}, wqs[2] = {n, k / 2}, wss[2] = {n, k / 16},
              mss[2] = {n, k / 32};
      DLTensor ha = host(a.data(), as, 2, f32);
      Managed da(ha);
      auto run = [&](const Q4_weight_bundle& b, const std::vector<float>& y_cpu, const char* what) {
        Q4_linear* lin = nullptr;
        check(Q4_linear_create(session, &b, &lin) == Q4_OK, std::string("linear_create ") + what);
        if (!lin) return;
        std::vector<float> y0(mm * n, 0.0f);
        Managed dy(host(y0.data(), ys, 2, f32));
        check(Q4_linear_forward(lin, da.t(), dy.t()) == Q4_OK, std::string("forward ") + what);
        gpu_sync(nullptr);
        const float* yg = reinterpret_cast<const float*>(dy.bytes());
        const double worst = max_rel_err(yg, y_cpu.data(), mm * n);
        check(worst < 1e-4, std::string("session forward within 1e-4 of the CPU: ") + what + " (worst " +
                                std::to_string(worst) + ")");
        Q4_linear_info info{};
        info.struct_size = sizeof info;
        check(Q4_linear_info_get(lin, &info) == Q4_OK, std::string("linear_info ") + what);
        std::vector<char> diag(1 << 16);
        char* buf = diag.data();
        size_t need = 0;
        check(Q4_linear_diagnostics(lin, buf, diag.size(), &need) == Q4_OK,
              std::string("diagnostics ") + what);
        std::printf("session %s: %.300s\n", what, buf);
        check(Q4_linear_destroy(lin) == Q4_OK, std::string("linear_destroy ") + what);
      };
      {  // NVFP4 packed (the first n rows of the quantized x)
        DLTensor hwq = host(q_cpu.data(), wqs, 2, u8), hws = host(s_cpu.data(), wss, 2, u8);
        std::vector<float> y_cpu(mm * n);
        DLTensor hy = host(y_cpu.data(), ys, 2, f32);
        check(NVFP4_linear(&ha, &hwq, &hws, Q4_SCALE_LINEAR, g_cpu, nullptr, &hy, nullptr) == Q4_OK,
              "CPU linear (session reference)");
        run(packed_bundle(Q4_FORMAT_NVFP4, &hwq, &hws, g_cpu, n, k), y_cpu, "nvfp4");
      }
      {  // MXFP4 packed
        std::vector<uint8_t> wq(n * k / 2), ws(n * k / 32);
        std::vector<float> w(x.begin(), x.begin() + n * k);
        int64_t wsh[2] = {n, k};
        DLTensor hw = host(w.data(), wsh, 2, f32), hwq = host(wq.data(), wqs, 2, u8),
                 hws = host(ws.data(), mss, 2, u8);
        check(MXFP4_quantize(&hw, &hwq, &hws, Q4_SCALE_LINEAR, nullptr) == Q4_OK, "CPU MXFP4 weight");
        std::vector<float> y_cpu(mm * n);
        DLTensor hy = host(y_cpu.data(), ys, 2, f32);
        check(MXFP4_linear(&ha, &hwq, &hws, Q4_SCALE_LINEAR, nullptr, &hy, nullptr) == Q4_OK,
              "CPU MXFP4 linear (session reference)");
        run(packed_bundle(Q4_FORMAT_MXFP4, &hwq, &hws, 0.0f, n, k), y_cpu, "mxfp4");
      }
      {  // NF4 from a float weight (quantized by the session)
        std::vector<float> w(x.begin(), x.begin() + n * k);
        int64_t wsh[2] = {n, k}, nqs[1] = {n * k / 2}, nas[1] = {n * k / 64};
        std::vector<uint8_t> nq(n * k / 2);
        std::vector<float> am(n * k / 64);
        DLTensor hw = host(w.data(), wsh, 2, f32), hq4 = host(nq.data(), nqs, 1, u8),
                 ham = host(am.data(), nas, 1, f32);
        check(NF4_quantize(&hw, &hq4, &ham, 64, nullptr) == Q4_OK, "CPU NF4 weight");
        NF4_state st{};
        st.struct_size = sizeof st;
        st.blocksize = 64;
        st.absmax = &ham;
        std::vector<float> y_cpu(mm * n);
        DLTensor hy = host(y_cpu.data(), ys, 2, f32);
        check(NF4_scaled_mm(&ha, &hq4, &st, nullptr, &hy, nullptr) == Q4_OK,
              "CPU NF4 linear (session reference)");
        Q4_weight_bundle b{};
        b.struct_size = sizeof b;
        Q4_weight_bundle_init(&b);
        b.format = Q4_FORMAT_NF4;
        b.source = Q4_WEIGHT_FLOAT;
        b.weight = &hw;
        b.blocksize = 64;
        run(b, y_cpu, "nf4 (float source)");
      }
      Q4_session_stats stats{};
      stats.struct_size = sizeof stats;
      check(Q4_session_get_stats(session, &stats) == Q4_OK && stats.forwards == 3 && stats.live_linears == 0,
            "session stats: 3 forwards, no live linears");
      check(Q4_session_destroy(session) == Q4_OK, "session destroy");
    }
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
                        gpu_sync(nullptr) == Q4_OK &&
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
