// nvfp4-bench: performance of the CPU backend, printed as JSON.
//
// Every figure is a median over repeated runs after a warm-up, and is put
// next to references measured in the same run: the machine's read bandwidth
// (a multi-threaded streaming sum over a buffer larger than the last-level
// cache), the library's own fp32 GEMM and the system BLAS (dlopen) when
// one is installed.
//
//   nvfp4-bench [--quick] [--threads T] [--reps R] [--working-set MB]
//               [--only gemv|gemm|quant|f32|dram]
//   nvfp4-bench --tune-matmul [--dim N] [--runs R]
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"
#include "nvfp4/nvfp4.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Options {
  bool quick = false;
  int threads = 0;
  int reps = 5;
  int64_t working_set_mb = 0;
  std::string only;
  bool tune = false;
  std::string device = "cpu";
  int dim = 512;
  int runs = 3;
};

double median_ms(int reps, const std::function<void(int)>& fn) {
  fn(0);  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn(r + 1);
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

DLTensor tensor(void* data, int64_t* shape, int32_t ndim, uint8_t code, uint8_t bits) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = DLDataType{code, bits, 1};
  t.shape = shape;
  return t;
}

std::vector<float> random_vec(int64_t n, uint32_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  for (float& x : v) x = nd(rng);
  return v;
}

// Streaming read bandwidth over `bytes` with `threads` threads (GB/s).
double read_bandwidth(int64_t bytes, int threads, int reps) {
  const int64_t n = bytes / 8;
  std::vector<uint64_t> buf(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  std::vector<uint64_t> sink(static_cast<size_t>(threads));
  const double ms = median_ms(reps, [&](int) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        const int64_t i0 = n * t / threads, i1 = n * (t + 1) / threads;
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int64_t i = i0; i + 4 <= i1; i += 4) {
          a0 += buf[static_cast<size_t>(i)];
          a1 += buf[static_cast<size_t>(i + 1)];
          a2 += buf[static_cast<size_t>(i + 2)];
          a3 += buf[static_cast<size_t>(i + 3)];
        }
        sink[static_cast<size_t>(t)] = a0 + a1 + a2 + a3;
      });
    }
    for (auto& th : ts) th.join();
  });
  return static_cast<double>(bytes) / (ms * 1e6);
}

struct Nvfp4Weight {
  std::vector<uint8_t> q, s;
  float g = 0;
};

Nvfp4Weight make_nvfp4(int64_t n, int64_t k, uint32_t seed) {
  Nvfp4Weight w;
  std::vector<float> f = random_vec(n * k, seed, 0.02f);
  w.q.resize(static_cast<size_t>(n * k / 2));
  w.s.resize(static_cast<size_t>(n * k / 16));
  int64_t fs[2] = {n, k}, qs[2] = {n, k / 2}, ss[2] = {n, k / 16};
  DLTensor tf = tensor(f.data(), fs, 2, kDLFloat, 32), tq = tensor(w.q.data(), qs, 2, kDLUInt, 8),
           ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
  if (NVFP4_quantize(&tf, &tq, &ts, Q4_SCALE_LINEAR, 0.0f, &w.g, nullptr) != Q4_OK) {
    std::fprintf(stderr, "quantize failed: %s\n", Q4_last_error());
    std::exit(1);
  }
  return w;
}

struct Nf4Weight {
  std::vector<uint8_t> q;
  std::vector<float> absmax;
};

Nf4Weight make_nf4(int64_t n, int64_t k, uint32_t seed) {
  Nf4Weight w;
  std::vector<float> f = random_vec(n * k, seed, 0.02f);
  w.q.resize(static_cast<size_t>(n * k / 2));
  w.absmax.resize(static_cast<size_t>(n * k / 64));
  int64_t fs[1] = {n * k}, qs[1] = {n * k / 2}, as[1] = {n * k / 64};
  DLTensor tf = tensor(f.data(), fs, 1, kDLFloat, 32), tq = tensor(w.q.data(), qs, 1, kDLUInt, 8),
           ta = tensor(w.absmax.data(), as, 1, kDLFloat, 32);
  if (NF4_quantize(&tf, &tq, &ta, 64, nullptr) != Q4_OK) {
    std::fprintf(stderr, "NF4 quantize failed: %s\n", Q4_last_error());
    std::exit(1);
  }
  return w;
}

using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                          float*, int);

sgemm_fn load_blas(std::string* name) {
  for (const char* lib :
       {"libopenblas.so.0", "libopenblas.so", "libblis.so.4", "libcblas.so.3", "libblas.so.3"}) {
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) continue;
    if (void* f = dlsym(h, "cblas_sgemm")) {
      *name = lib;
      return reinterpret_cast<sgemm_fn>(f);
    }
  }
  return nullptr;
}

json result(const std::string& name, const std::string& format, const std::string& mode, int64_t m, int64_t n,
            int64_t k, double ms, double bytes, double flops, int threads, double bw) {
  json r;
  r["case"] = name;
  r["format"] = format;
  r["mode"] = mode;
  r["m"] = m;
  r["n"] = n;
  r["k"] = k;
  r["isa"] = Q4_isa_name(Q4_last_isa_used());
  r["threads"] = threads;
  r["median_ms"] = ms;
  r["gb_per_s"] = bytes / (ms * 1e6);
  r["gflop_per_s"] = flops / (ms * 1e6);
  if (bw > 0) r["fraction_of_read_bandwidth"] = bytes / (ms * 1e6) / bw;
  return r;
}

int run_tuner(const Options& o) {
  Q4_tune_result r{};
  r.struct_size = sizeof r;
  if (Q4_tune_matmul(o.dim, o.runs, 1, &r) != Q4_OK) {
    std::fprintf(stderr, "tuning failed: %s\n", Q4_last_error());
    return 1;
  }
  json j;
  j["dim"] = r.dim;
  j["runs"] = r.runs;
  j["candidates"] = r.candidates;
  j["default"] = {{"kc", r.kc_default}, {"mc", r.mc_default}, {"median_ms", r.default_ms}};
  j["best"] = {{"kc", r.kc_best}, {"mc", r.mc_best}, {"median_ms", r.best_ms}};
  j["adopted"] = r.adopted != 0;
  j["persisted"] = r.persisted != 0;
  j["cache_path"] = r.cache_path;
  j["cpu_signature"] = r.cpu_signature;
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

// A managed (GPU-visible) copy of a host buffer, viewed as a CUDA tensor.
struct DeviceCopy {
  DLManagedTensorVersioned* m = nullptr;
  DeviceCopy(void* data, int64_t* shape, int32_t ndim, DLDataType dt) {
    DLTensor t = tensor(data, shape, ndim, dt.code, dt.bits);
    if (NVFP4_to_managed(&t, 0, Q4_MANAGED_PREFETCH, &m) != Q4_OK) {
      std::fprintf(stderr, "NVFP4_to_managed: %s\n", Q4_last_error());
      std::exit(1);
    }
  }
  ~DeviceCopy() { m->deleter(m); }
  DLTensor* t() { return &m->dl_tensor; }
};

// GPU figures: GEMV/GEMM (NVFP4 weight-only, W4A4 scaled_mm, NF4) and
// quantize throughput, timed with Q4_cuda_synchronize around each run.
int run_cuda(const Options& o) {
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  Q4_get_capabilities(&caps);
  json out;
  out["device"] = "cuda";
  if (caps.cuda_state != Q4_CUDA_READY) {
    out["skipped"] = std::string("no usable CUDA device: ") + caps.native_load_state;
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  out["native_load_state"] = caps.native_load_state;
  const int reps = o.quick ? 3 : o.reps;
  const DLDataType f32{kDLFloat, 32, 1}, u8{kDLUInt, 8, 1};
  auto timed = [&](const std::function<void()>& fn) {
    return median_ms(reps, [&](int) {
      fn();
      Q4_cuda_synchronize(0, nullptr);
    });
  };
  json results = json::array();
  const int64_t n = 4096, k = 4096;
  Nvfp4Weight w = make_nvfp4(n, k, 1);
  Nf4Weight nf = make_nf4(n, k, 2);
  int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 16}, nq[1] = {n * k / 2}, na[1] = {n * k / 64};
  DeviceCopy dq(w.q.data(), qs, 2, u8), ds(w.s.data(), ss, 2, u8), dnq(nf.q.data(), nq, 1, u8),
      dna(nf.absmax.data(), na, 1, f32);
  for (int64_t m : {int64_t{1}, int64_t{8}, int64_t{32}, int64_t{512}}) {
    std::vector<float> x = random_vec(m * k, 3, 1.0f), y(static_cast<size_t>(m * n));
    int64_t xs[2] = {m, k}, ys[2] = {m, n};
    DeviceCopy dx(x.data(), xs, 2, f32), dy(y.data(), ys, 2, f32);
    const double flops = 2.0 * static_cast<double>(m * n * k);
    const double wbytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 16;
    double ms =
        timed([&] { NVFP4_linear(dx.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, w.g, nullptr, dy.t(), nullptr); });
    results.push_back(result(m == 1 ? "gemv" : "gemm", "nvfp4", "cuda", m, n, k, ms, wbytes, flops, 0, 0));
    NF4_state st{};
    st.struct_size = sizeof st;
    st.blocksize = 64;
    st.absmax = dna.t();
    ms = timed([&] { NF4_scaled_mm(dx.t(), dnq.t(), &st, nullptr, dy.t(), nullptr); });
    results.push_back(result(m == 1 ? "gemv" : "gemm", "nf4", "cuda", m, n, k, ms, wbytes, flops, 0, 0));
    Nvfp4Weight a = make_nvfp4(m, k, 4);
    int64_t aqs[2] = {m, k / 2}, ass[2] = {m, k / 16};
    DeviceCopy daq(a.q.data(), aqs, 2, u8), das(a.s.data(), ass, 2, u8);
    ms = timed([&] {
      NVFP4_scaled_mm(daq.t(), das.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, a.g * w.g, nullptr, dy.t(), nullptr);
    });
    results.push_back(result("scaled_mm", "nvfp4-w4a4", "cuda", m, n, k, ms, wbytes, flops, 0, 0));
  }
  {
    const int64_t rows = 16384;
    std::vector<float> f = random_vec(rows * k, 5, 1.0f);
    std::vector<uint8_t> q(static_cast<size_t>(rows * k / 2)), s(static_cast<size_t>(rows * k / 16));
    int64_t fs[2] = {rows, k}, qqs[2] = {rows, k / 2}, sss[2] = {rows, k / 16};
    DeviceCopy df(f.data(), fs, 2, f32), dqq(q.data(), qqs, 2, u8), dss(s.data(), sss, 2, u8);
    float g = 0;
    const double ms =
        timed([&] { NVFP4_quantize(df.t(), dqq.t(), dss.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr); });
    results.push_back(result("quantize", "nvfp4", "cuda", rows, 0, k, ms,
                             static_cast<double>(rows * k) * (4 + 0.5 + 1.0 / 16), 0, 0, 0));
  }
  for (auto& r : results) r["isa"] = "cuda";
  out["results"] = results;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The benchmark links the core objects itself, so the plugin is not next
  // to "the core library": point the loader at the build or install tree.
  if (std::getenv("NVFP4_CUDA_PLUGIN") == nullptr) {
    const std::string self = argv[0];
    const std::string dir = self.find('/') == std::string::npos ? "." : self.substr(0, self.rfind('/'));
    for (const std::string& cand : {dir + "/../libNVFP4_cuda.so", dir + "/../lib/libNVFP4_cuda.so"}) {
      if (FILE* f = std::fopen(cand.c_str(), "rb")) {
        std::fclose(f);
        setenv("NVFP4_CUDA_PLUGIN", cand.c_str(), 0);
        break;
      }
    }
  }
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](const char* what) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", what);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick")
      o.quick = true;
    else if (a == "--threads")
      o.threads = std::atoi(next("--threads").c_str());
    else if (a == "--reps")
      o.reps = std::max(1, std::atoi(next("--reps").c_str()));
    else if (a == "--working-set")
      o.working_set_mb = std::atoll(next("--working-set").c_str());
    else if (a == "--only")
      o.only = next("--only");
    else if (a == "--tune-matmul")
      o.tune = true;
    else if (a == "--device")
      o.device = next("--device");
    else if (a == "--dim")
      o.dim = std::atoi(next("--dim").c_str());
    else if (a == "--runs")
      o.runs = std::atoi(next("--runs").c_str());
    else {
      std::fprintf(stderr,
                   "usage: nvfp4-bench [--quick] [--threads T] [--reps R] [--working-set MB] "
                   "[--only gemv|gemm|quant|f32|dram] [--device cpu|cuda]\n       nvfp4-bench --tune-matmul "
                   "[--dim N] [--runs R]\n");
      return 2;
    }
  }
  if (o.tune) return run_tuner(o);
  if (o.device == "cuda") return run_cuda(o);
  if (o.device != "cpu") {
    std::fprintf(stderr, "--device must be cpu or cuda\n");
    return 2;
  }

  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  Q4_op_options opts{};
  Q4_op_options_init(&opts);
  opts.num_threads = threads;
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  Q4_get_capabilities(&caps);

  json out;
  out["machine"] = {{"cpu", caps.cpu_brand},
                    {"isa", Q4_isa_name(caps.isa_active)},
                    {"threads", threads},
                    {"cpus", caps.num_cpus}};
  const double bw = read_bandwidth(int64_t{512} << 20, threads, o.quick ? 2 : 5);
  out["read_bandwidth_gb_per_s"] = bw;
  {
    // fp32 FMA roof of the active ISA with the same thread count.
    const q4::kern::KernelTable& kt = q4::kern::active_table();
    const int64_t iters = o.quick ? 2000000 : 10000000;
    double flops = 0;
    const double ms = median_ms(3, [&](int) {
      std::vector<std::thread> ts;
      std::vector<double> f(static_cast<size_t>(threads));
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] { f[static_cast<size_t>(t)] = kt.fma_probe(iters); });
      for (auto& th : ts) th.join();
      flops = 0;
      for (double v : f) flops += v;
    });
    out["fp32_fma_roof_gflop_per_s"] = flops / (ms * 1e6);
    out["fp32_fma_roof_note"] = "12 independent FMA chains per thread at the active ISA's width";
  }
  out["read_bandwidth_note"] = "streaming sum over 512 MiB with the same thread count";
  json results = json::array();
  auto want = [&](const char* c) { return o.only.empty() || o.only == c; };
  const int reps = o.quick ? 2 : o.reps;

  struct Shape {
    int64_t n, k;
  };
  std::vector<Shape> shapes = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
  if (o.quick) shapes.resize(1);
  std::vector<int64_t> ms_list = {1, 8, 32, 512};

  for (const Shape& sh : shapes) {
    const int64_t n = sh.n, k = sh.k;
    // Rotate enough distinct weights to exceed the working set, if asked.
    const double wbytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 16;
    const int64_t copies =
        o.working_set_mb > 0
            ? std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.working_set_mb * 1048576.0 / wbytes)))
            : 1;
    std::vector<Nvfp4Weight> nv;
    std::vector<Nf4Weight> nf;
    for (int64_t c = 0; c < copies; ++c) {
      nv.push_back(make_nvfp4(n, k, static_cast<uint32_t>(c + 1)));
      nf.push_back(make_nf4(n, k, static_cast<uint32_t>(c + 100)));
    }
    for (int64_t m : ms_list) {
      if (m == 1 ? !want("gemv") : !want("gemm")) continue;
      if (o.quick && m == 512) continue;
      std::vector<float> x = random_vec(m * k, 7, 1.0f);
      std::vector<float> y(static_cast<size_t>(m * n));
      int64_t xs[2] = {m, k}, ys[2] = {m, n}, qs[2] = {n, k / 2}, ss[2] = {n, k / 16};
      DLTensor tx = tensor(x.data(), xs, 2, kDLFloat, 32), ty = tensor(y.data(), ys, 2, kDLFloat, 32);
      const int r = m >= 512 ? std::min(reps, 3) : reps;
      const double flops = 2.0 * static_cast<double>(m * n * k);
      // NVFP4 weight-only linear, exact mode.
      double ms = median_ms(r, [&](int it) {
        Nvfp4Weight& w = nv[static_cast<size_t>(it % copies)];
        DLTensor tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
        if (NVFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, w.g, nullptr, &ty, &opts) != Q4_OK) std::abort();
      });
      results.push_back(result(m == 1 ? "gemv" : "gemm", "nvfp4", "exact", m, n, k, ms, wbytes, flops,
                               threads, copies > 1 || m == 1 ? bw : 0));
      results.back()["working_set_copies"] = copies;
      // NF4 weight-only linear.
      int64_t nq[1] = {n * k / 2}, na[1] = {n * k / 64};
      ms = median_ms(r, [&](int it) {
        Nf4Weight& w = nf[static_cast<size_t>(it % copies)];
        DLTensor tq = tensor(w.q.data(), nq, 1, kDLUInt, 8),
                 ta = tensor(w.absmax.data(), na, 1, kDLFloat, 32);
        NF4_state st{};
        st.struct_size = sizeof st;
        st.blocksize = 64;
        st.absmax = &ta;
        if (NF4_scaled_mm(&tx, &tq, &st, nullptr, &ty, &opts) != Q4_OK) std::abort();
      });
      const double nf4_bytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 64 * 4;
      results.push_back(result(m == 1 ? "gemv" : "gemm", "nf4", "exact", m, n, k, ms, nf4_bytes, flops,
                               threads, copies > 1 || m == 1 ? bw : 0));
      // NVFP4 W4A4 scaled_mm (activations quantized once, outside the timing).
      Nvfp4Weight a = make_nvfp4(m, k, 77);
      int64_t aqs[2] = {m, k / 2}, ass[2] = {m, k / 16};
      DLTensor taq = tensor(a.q.data(), aqs, 2, kDLUInt, 8), tas = tensor(a.s.data(), ass, 2, kDLUInt, 8);
      ms = median_ms(r, [&](int it) {
        Nvfp4Weight& w = nv[static_cast<size_t>(it % copies)];
        DLTensor tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
        if (NVFP4_scaled_mm(&taq, &tas, &tq, &ts, Q4_SCALE_LINEAR, a.g * w.g, nullptr, &ty, &opts) != Q4_OK)
          std::abort();
      });
      results.push_back(result("scaled_mm", "nvfp4-w4a4", "exact", m, n, k, ms, wbytes, flops, threads, 0));
    }
    // fp32 GEMM references at M = 512 (own panel GEMM and system BLAS).
    if (want("f32") && !o.quick) {
      const int64_t m = 512;
      std::vector<float> x = random_vec(m * k, 8, 1.0f), w = random_vec(n * k, 9, 0.02f);
      std::vector<float> y(static_cast<size_t>(m * n));
      const double flops = 2.0 * static_cast<double>(m * n * k);
      const q4::kern::KernelTable& kt = q4::kern::active_table();
      double ms = median_ms(std::min(reps, 3), [&](int) {
        q4::kern::gemm_f32(kt, x.data(), m, k, w.data(), n, y.data(), threads, q4::kern::gemm_blocking());
      });
      results.push_back(
          result("sgemm", "fp32", "own", m, n, k, ms, static_cast<double>(n * k) * 4, flops, threads, 0));
      std::string blas_name;
      if (sgemm_fn sgemm = load_blas(&blas_name)) {
        ms = median_ms(std::min(reps, 3), [&](int) {
          // Row-major C[m,n] = X[m,k] * W[n,k]^T
          sgemm(101, 111, 112, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, x.data(),
                static_cast<int>(k), w.data(), static_cast<int>(k), 0.0f, y.data(), static_cast<int>(n));
        });
        json r = result("sgemm", "fp32", blas_name, m, n, k, ms, static_cast<double>(n * k) * 4, flops,
                        threads, 0);
        r["isa"] = "system BLAS";
        results.push_back(r);
      }
    }
  }

  // GEMV over a weight larger than the last-level cache (DRAM-bound).
  if (want("dram")) {
    const int64_t n = o.quick ? 8192 : 32768, k = 4096;
    Nvfp4Weight w = make_nvfp4(n, k, 5);
    std::vector<float> x = random_vec(k, 7, 1.0f), y(static_cast<size_t>(n));
    int64_t xs[2] = {1, k}, ys[2] = {1, n}, qs[2] = {n, k / 2}, ss[2] = {n, k / 16};
    DLTensor tx = tensor(x.data(), xs, 2, kDLFloat, 32), ty = tensor(y.data(), ys, 2, kDLFloat, 32);
    DLTensor tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
    const double ms = median_ms(reps, [&](int) {
      if (NVFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, w.g, nullptr, &ty, &opts) != Q4_OK) std::abort();
    });
    const double bytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 16;
    results.push_back(result("gemv-dram", "nvfp4", "exact", 1, n, k, ms, bytes, 2.0 * n * k, threads, bw));
  }

  // Quantize / dequantize throughput on a DRAM-sized fp32 input.
  if (want("quant")) {
    const int64_t rows = o.quick ? 2048 : 11008, k = 4096;
    std::vector<float> f = random_vec(rows * k, 3, 1.0f), back(static_cast<size_t>(rows * k));
    std::vector<uint8_t> q(static_cast<size_t>(rows * k / 2)), s(static_cast<size_t>(rows * k / 16));
    int64_t fs[2] = {rows, k}, qs[2] = {rows, k / 2}, ss[2] = {rows, k / 16};
    DLTensor tf = tensor(f.data(), fs, 2, kDLFloat, 32), tq = tensor(q.data(), qs, 2, kDLUInt, 8),
             ts = tensor(s.data(), ss, 2, kDLUInt, 8), tb = tensor(back.data(), fs, 2, kDLFloat, 32);
    float g = 0;
    const double bytes =
        static_cast<double>(rows * k) * 4.0 + static_cast<double>(rows * k) * (0.5 + 1.0 / 16);
    double ms = median_ms(reps, [&](int) {
      if (NVFP4_quantize(&tf, &tq, &ts, Q4_SCALE_LINEAR, 0.0f, &g, &opts) != Q4_OK) std::abort();
    });
    results.push_back(result("quantize", "nvfp4", "fp32->nvfp4", rows, 0, k, ms, bytes, 0, threads, bw));
    ms = median_ms(reps, [&](int) {
      if (NVFP4_dequantize(&tq, &ts, Q4_SCALE_LINEAR, g, &tb, &opts) != Q4_OK) std::abort();
    });
    results.push_back(result("dequantize", "nvfp4", "nvfp4->fp32", rows, 0, k, ms, bytes, 0, threads, bw));
  }
  out["results"] = results;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
