// nvfp4-bench: performance of the CPU backend, printed as JSON.
//
// Every figure is a median over repeated runs after a warm-up (a case whose
// warm-up alone takes longer than --max-case-seconds reports that one run),
// and is put next to limits measured in the same run: DRAM read bandwidth
// (a multi-threaded streaming sum, see below), L3 read bandwidth (the same
// over a buffer that fits the L3), the fp32 FMA roof of the active ISA, an
// int8 dot-product roof probed with the best integer instruction the CPU
// has (vpdpbusd with AVX512-VNNI, else vpmaddubsw + vpmaddwd + vpaddd; sdot
// on aarch64 with dotprod), the block-scaled roof of the same instruction
// (with the fp32 work each 16-element block needs; every integer case is
// also given as a fraction of both), and
// OpenBLAS cblas_sgemm (dlopen; OpenBLAS preferred over a reference BLAS).
// GEMV (M <= 8) rotates distinct weight copies over a working set larger
// than the L3 (--working-set MB; default the larger of 96 MiB and twice the
// L3 the OS reports, so a 300 MiB L3 is not mistaken for DRAM), so it reads
// from DRAM; one hot case per format shows the L3 figure. The DRAM probe
// streams the larger of 512 MiB and four times the L3. --only gaps: what
// the worker pool's watch (Q4_SPIN_US) gains on products separated by the
// caller's own work, against the former 100 µs watch in the same process.
// --only updates: Q4_linear_update_weight and Q4_WRITE_KEEP writes of
// mutable tensors (not in cache: several updated in turn, and one alone).
//
//   nvfp4-bench [--quick] [--threads T] [--reps R] [--working-set MB]
//               [--only gemv|gemm|products|quant|f32|l3|gaps|calls|updates] [--max-case-seconds S]
//               [--fast-max-m M] [--ms M,...] [--shapes NxK,...]
//   nvfp4-bench --tune-matmul [--dim N] [--runs R]
#include <dlfcn.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/cpu_features.h"
#include "common/thread_pool.h"
#include "formats/codec.h"
#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"
#include "nvfp4/nvfp4.h"

namespace {

using Clock = std::chrono::steady_clock;

// Calls timed per GEMV case (M <= 8), whatever --reps says (see the cases).
constexpr int kGemvReps = 30;
using nlohmann::json;

struct Options {
  bool quick = false;
  int threads = 0;
  int reps = 5;
  int64_t working_set_mb = 0;  // 0: max(96 MiB, 2 x L3)
  double max_case_seconds = 3.0;
  int64_t fast_max_m = 512;
  std::vector<int64_t> ms;                          // --ms: the M values (default: the full or quick list)
  std::vector<std::pair<int64_t, int64_t>> shapes;  // --shapes NxK,...: the weight shapes
  std::string only;
  bool tune = false;
  std::string device = "cpu";
  int dim = 512;
  int runs = 3;
};

double g_max_case_ms = 1e300;  // see --max-case-seconds
double g_best_ms = 0;          // fastest run of the last median_ms
double g_cpu_ms = 0;           // median process CPU time of the last median_ms
double g_median_ms = 0;        // the last median_ms result
double g_steal_pct = 0;        // steal during the last median_ms (cpu_ticks), % of all CPU time

// All CPUs' time and the part of it the hypervisor gave to other guests
// (steal), in ticks, from /proc/stat's cpu line (zeros where there is
// none). On a shared VM a neighbour's load shows here, not in the load
// average.
struct CpuTicks {
  double total = 0, steal = 0;
};

CpuTicks cpu_ticks() {
  CpuTicks t;
  if (std::FILE* f = std::fopen("/proc/stat", "r")) {
    char buf[256] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr && std::strncmp(buf, "cpu ", 4) == 0) {
      // user nice system idle iowait irq softirq steal (guest time is
      // counted in user already)
      double v[8] = {};
      const int n = std::sscanf(buf + 4, "%lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4],
                                &v[5], &v[6], &v[7]);
      for (int i = 0; i < n; ++i) t.total += v[i];
      if (n == 8) t.steal = v[7];
    }
    std::fclose(f);
  }
  return t;
}

// Steal between two readings, % of all CPU time (0 without ticks).
double steal_percent(const CpuTicks& a, const CpuTicks& b) {
  const double d = b.total - a.total;
  return d > 0 ? 100.0 * (b.steal - a.steal) / d : 0.0;
}

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Median wall time of `reps` runs after a warm-up; also leaves the fastest
// run in g_best_ms and the median CPU time of the process in g_cpu_ms (on a
// machine shared with other work the wall time includes waiting for a core;
// the fastest run and the CPU time show what the code itself needs).
double median_ms(int reps, const std::function<void(int)>& fn) {
  const CpuTicks s0 = cpu_ticks();
  const auto w0 = Clock::now();
  const double c0 = process_cpu_ms();
  fn(0);  // warm-up
  const double warm = std::chrono::duration<double, std::milli>(Clock::now() - w0).count();
  if (warm > g_max_case_ms) {  // too slow to repeat: the one run
    g_best_ms = warm;
    g_median_ms = warm;
    g_cpu_ms = process_cpu_ms() - c0;
    g_steal_pct = steal_percent(s0, cpu_ticks());
    return warm;
  }
  std::vector<double> t, c;
  for (int r = 0; r < reps; ++r) {
    const double cs = process_cpu_ms();
    const auto t0 = Clock::now();
    fn(r + 1);
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    c.push_back(process_cpu_ms() - cs);
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  g_best_ms = t.front();
  g_cpu_ms = c[c.size() / 2];
  g_median_ms = t[t.size() / 2];
  g_steal_pct = steal_percent(s0, cpu_ticks());
  return g_median_ms;
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

// A packed NVFP4 weight bundle (linear scales) for Q4_linear_create.
Q4_weight_bundle nvfp4_bundle(const DLTensor* q, const DLTensor* s, float g, int64_t n, int64_t k) {
  Q4_weight_bundle b{};
  Q4_weight_bundle_init(&b);
  b.format = Q4_FORMAT_NVFP4;
  b.source = Q4_WEIGHT_PACKED;
  b.scale_layout = Q4_SCALE_LINEAR;
  b.weight = q;
  b.scale = s;
  b.global_scale = g;
  b.out_features = n;
  b.in_features = k;
  return b;
}

// The statistics of the benchmark's NF4 weights: blocks of 64, fp32 absmax.
NF4_state nf4_state(const DLTensor* absmax) {
  NF4_state st{};
  st.struct_size = sizeof st;
  st.blocksize = 64;
  st.absmax = absmax;
  return st;
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
    ts.reserve(static_cast<size_t>(threads));
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

// int8 dot-product roof: `iters` rounds of 12 independent chains of the best
// integer multiply-accumulate the CPU has. Returns int8 multiply-adds x 2
// (ops, as flops count a multiply and an add). The 12 accumulators are named
// variables, not an array: an array behind an asm barrier was kept on the
// stack by g++ 12, and the store-to-load latency of those spills, not the
// dot-product units, set the measured "roof" (0.8 vpdpbusd zmm per cycle on
// a Zen 5 that issues two).
#define NVFP4_BENCH_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

// Folds a vector into a volatile so the chains are not dead code.
template <class V>
void keep_vector(const V& v) {
  int32_t lanes[sizeof(V) / 4];
  std::memcpy(lanes, &v, sizeof lanes);
  volatile int32_t sink = lanes[0];
  (void)sink;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double int8_probe_vnni(int64_t iters) {
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i);
#define STEP(i) a##i = _mm512_dpbusd_epi32(a##i, b, c);
#define SUM(i) sum = _mm512_add_epi32(sum, a##i);
  NVFP4_BENCH_12(DECL)
  __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(-5);
  __asm__ volatile("" : "+v"(b), "+v"(c));  // opaque: nothing folds across rounds
  for (int64_t r = 0; r < iters; ++r) {
    NVFP4_BENCH_12(STEP)
  }
  __m512i sum = _mm512_setzero_si512();
  NVFP4_BENCH_12(SUM)
  keep_vector(sum);
  return static_cast<double>(iters) * 12 * 64 * 2;
#undef DECL
#undef STEP
#undef SUM
}
// Without VNNI: vpmaddubsw + vpmaddwd + vpaddd. Each chain has
// its own byte operand, made opaque every round, so the compiler can neither
// share one product between the chains nor hoist it out of the loop (with
// one constant operand it did both, and the probe timed vpaddd alone).
#define NVFP4_BENCH_4(X) X(0) X(1) X(2) X(3)
#define NVFP4_BENCH_6(X) NVFP4_BENCH_4(X) X(4) X(5)
__attribute__((target("avx512f,avx512bw"))) double int8_probe_avx512bw(int64_t iters) {
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i), b##i = _mm512_set1_epi8(static_cast<char>(3 + (i)));
#define STEP(i) a##i = _mm512_add_epi32(a##i, _mm512_madd_epi16(_mm512_maddubs_epi16(b##i, c), ones));
#define SUM(i) sum = _mm512_add_epi32(sum, a##i);
  NVFP4_BENCH_6(DECL)
  const __m512i c = _mm512_set1_epi8(-5), ones = _mm512_set1_epi16(1);
  for (int64_t r = 0; r < iters; ++r) {
    __asm__ volatile("" : "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3), "+v"(b4), "+v"(b5));
    NVFP4_BENCH_6(STEP)
  }
  __m512i sum = _mm512_setzero_si512();
  NVFP4_BENCH_6(SUM)
  keep_vector(sum);
  return static_cast<double>(iters) * 6 * 64 * 2;
#undef DECL
#undef STEP
#undef SUM
}
// Four chains here: with six, the 16 ymm registers spilled accumulators.
__attribute__((target("avx2"))) double int8_probe_avx2(int64_t iters) {
#define DECL(i) __m256i a##i = _mm256_set1_epi32(i), b##i = _mm256_set1_epi8(static_cast<char>(3 + (i)));
#define STEP(i) a##i = _mm256_add_epi32(a##i, _mm256_madd_epi16(_mm256_maddubs_epi16(b##i, c), ones));
#define SUM(i) sum = _mm256_add_epi32(sum, a##i);
  NVFP4_BENCH_4(DECL)
  const __m256i c = _mm256_set1_epi8(-5), ones = _mm256_set1_epi16(1);
  for (int64_t r = 0; r < iters; ++r) {
    __asm__ volatile("" : "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3));
    NVFP4_BENCH_4(STEP)
  }
  __m256i sum = _mm256_setzero_si256();
  NVFP4_BENCH_4(SUM)
  keep_vector(sum);
  return static_cast<double>(iters) * 4 * 32 * 2;
#undef DECL
#undef STEP
#undef SUM
}
// Block-scaled integer roof: the least work a kernel does per 16-element
// block of a 4-bit x int8 product whose result honours the per-block
// scales (the fixed fp32 sequence of the integer kernels): per 16 outputs
// and block, the block's dot products (4 of 4 elements), one int32 -> fp32
// conversion, one product of the two scales and one FMA into the
// accumulator. On CPUs where the FP multiplier shares its ports with the
// dot-product instruction (a Zen 5: 16 vpdpbusd take 8 cycles, 4 vmulps or
// FMAs add 2, vcvtdq2ps and loads add nothing) this is below the int8
// roof at every M; the benchmark reports both fractions. Six (AVX2: four)
// independent rows, all operands made opaque every round.
#define NVFP4_BENCH_6R(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define NVFP4_BENCH_4R(X) X(0) X(1) X(2) X(3)
// (GCC 12 warns that the undefined pass-through operand of the conversion
// intrinsics "may be used uninitialized" in target-attribute functions.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The AVX-512 block-scaled probes share their loop; DOT(acc, w, x) is each
// one's dot-product step (4 elements per lane).
#define NVFP4_BLOCK512_DECL(i)                                                            \
  __m512 a##i = _mm512_set1_ps(static_cast<float>(i)), s##i = _mm512_set1_ps(0.5f + (i)); \
  __m512i x##i = _mm512_set1_epi8(static_cast<char>(-5 - (i)));
#define NVFP4_BLOCK512_STEP(i)                                                       \
  {                                                                                  \
    const __m512i d = DOT(DOT(DOT(DOT(z, w0, x##i), w1, x##i), w2, x##i), w3, x##i); \
    a##i = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(s##i, ws), a##i);    \
  }
#define NVFP4_BLOCK512_SUM(i) sum = _mm512_add_ps(sum, a##i);
#define NVFP4_BLOCK512_BODY                                                             \
  NVFP4_BENCH_6R(NVFP4_BLOCK512_DECL)                                                   \
  __m512i w0 = _mm512_set1_epi8(3), w1 = _mm512_set1_epi8(5), w2 = _mm512_set1_epi8(7), \
          w3 = _mm512_set1_epi8(9);                                                     \
  const __m512i z = _mm512_setzero_si512();                                             \
  __m512 ws = _mm512_set1_ps(0.25f);                                                    \
  for (int64_t r = 0; r < iters; ++r) {                                                 \
    __asm__ volatile("" : "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3), "+v"(ws));            \
    __asm__ volatile("" : "+v"(x0), "+v"(x1), "+v"(x2), "+v"(x3), "+v"(x4), "+v"(x5));  \
    NVFP4_BENCH_6R(NVFP4_BLOCK512_STEP)                                                 \
  }                                                                                     \
  __m512 sum = _mm512_setzero_ps();                                                     \
  NVFP4_BENCH_6R(NVFP4_BLOCK512_SUM)                                                    \
  keep_vector(sum);                                                                     \
  return static_cast<double>(iters) * 6 * 4 * 64 * 2;
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double int8_block_probe_vnni(int64_t iters) {
#define DOT(acc, w, x) _mm512_dpbusd_epi32(acc, w, x)
  NVFP4_BLOCK512_BODY
#undef DOT
}
__attribute__((target("avx512f,avx512bw"))) double int8_block_probe_avx512bw(int64_t iters) {
#define DOT(acc, w, x) \
  _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1)))
  NVFP4_BLOCK512_BODY
#undef DOT
}
#undef NVFP4_BLOCK512_BODY
#undef NVFP4_BLOCK512_SUM
#undef NVFP4_BLOCK512_STEP
#undef NVFP4_BLOCK512_DECL
__attribute__((target("avx2,fma"))) double int8_block_probe_avx2(int64_t iters) {
#define DECL(i)                                        \
  __m256 a##i = _mm256_set1_ps(static_cast<float>(i)); \
  __m256i x##i = _mm256_set1_epi8(static_cast<char>(-5 - (i)));
#define DOT(acc, w, x) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones))
#define STEP(i)                                                                                         \
  {                                                                                                     \
    const __m256i d = DOT(DOT(DOT(DOT(z, w0, x##i), w1, x##i), w2, x##i), w3, x##i);                    \
    a##i = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(_mm256_set1_ps(0.5f + (i)), ws), a##i); \
  }
#define SUM(i) sum = _mm256_add_ps(sum, a##i);
  NVFP4_BENCH_4R(DECL)
  __m256i w0 = _mm256_set1_epi8(3), w1 = _mm256_set1_epi8(5), w2 = _mm256_set1_epi8(7),
          w3 = _mm256_set1_epi8(9);
  const __m256i z = _mm256_setzero_si256(), ones = _mm256_set1_epi16(1);
  __m256 ws = _mm256_set1_ps(0.25f);
  for (int64_t r = 0; r < iters; ++r) {
    __asm__ volatile("" : "+x"(w0), "+x"(w1), "+x"(w2), "+x"(w3), "+x"(ws));
    __asm__ volatile("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3));
    NVFP4_BENCH_4R(STEP)
  }
  __m256 sum = _mm256_setzero_ps();
  NVFP4_BENCH_4R(SUM)
  keep_vector(sum);
  return static_cast<double>(iters) * 4 * 4 * 32 * 2;
#undef DECL
#undef DOT
#undef STEP
#undef SUM
}
#pragma GCC diagnostic pop
#undef NVFP4_BENCH_6
#undef NVFP4_BENCH_4
#elif defined(__aarch64__)
#define NVFP4_BENCH_6R(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define NVFP4_BENCH_4R(X) X(0) X(1) X(2) X(3)
__attribute__((target("arch=armv8.2-a+dotprod"))) double int8_probe_sdot(int64_t iters) {
#define DECL(i) int32x4_t a##i = vdupq_n_s32(i);
#define STEP(i) a##i = vdotq_s32(a##i, b, c);
#define SUM(i) sum = vaddq_s32(sum, a##i);
  NVFP4_BENCH_12(DECL)
  int8x16_t b = vdupq_n_s8(3), c = vdupq_n_s8(-5);
  __asm__ volatile("" : "+w"(b), "+w"(c));
  for (int64_t r = 0; r < iters; ++r) {
    NVFP4_BENCH_12(STEP)
  }
  int32x4_t sum = vdupq_n_s32(0);
  NVFP4_BENCH_12(SUM)
  keep_vector(sum);
  return static_cast<double>(iters) * 12 * 16 * 2;
#undef DECL
#undef STEP
#undef SUM
}
// The block-scaled roof on aarch64 (see int8_block_probe_vnni): 4 sdot, one
// scvtf, one fmul and one fmla per 4 outputs and block.
__attribute__((target("arch=armv8.2-a+dotprod"))) double int8_block_probe_sdot(int64_t iters) {
#define DECL(i)                                                                          \
  float32x4_t a##i = vdupq_n_f32(static_cast<float>(i)), s##i = vdupq_n_f32(0.5f + (i)); \
  int8x16_t x##i = vdupq_n_s8(static_cast<int8_t>(-5 - (i)));
#define STEP(i)                                                                                \
  {                                                                                            \
    const int32x4_t d =                                                                        \
        vdotq_s32(vdotq_s32(vdotq_s32(vdotq_s32(z, w0, x##i), w1, x##i), w2, x##i), w3, x##i); \
    a##i = vfmaq_f32(a##i, vcvtq_f32_s32(d), vmulq_f32(s##i, ws));                             \
  }
#define SUM(i) sum = vaddq_f32(sum, a##i);
  NVFP4_BENCH_6R(DECL)
  int8x16_t w0 = vdupq_n_s8(3), w1 = vdupq_n_s8(5), w2 = vdupq_n_s8(7), w3 = vdupq_n_s8(9);
  const int32x4_t z = vdupq_n_s32(0);
  float32x4_t ws = vdupq_n_f32(0.25f);
  for (int64_t r = 0; r < iters; ++r) {
    __asm__ volatile("" : "+w"(w0), "+w"(w1), "+w"(w2), "+w"(w3), "+w"(ws));
    __asm__ volatile("" : "+w"(x0), "+w"(x1), "+w"(x2), "+w"(x3), "+w"(x4), "+w"(x5));
    NVFP4_BENCH_6R(STEP)
  }
  float32x4_t sum = vdupq_n_f32(0.0f);
  NVFP4_BENCH_6R(SUM)
  keep_vector(sum);
  return static_cast<double>(iters) * 6 * 4 * 16 * 2;
#undef DECL
#undef STEP
#undef SUM
}
#endif
#undef NVFP4_BENCH_12
#undef NVFP4_BENCH_6R
#undef NVFP4_BENCH_4R

// The int8 probe for this CPU and its instruction's name (nullptr: none),
// and in *block the block-scaled probe of the same instruction.
using ProbeFn = double (*)(int64_t);
ProbeFn int8_probe(std::string* name, ProbeFn* block) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw")) {
    *name = "vpdpbusd zmm (AVX512-VNNI)";
    *block = int8_block_probe_vnni;
    return int8_probe_vnni;
  }
  if (__builtin_cpu_supports("avx512bw")) {
    *name = "vpmaddubsw + vpmaddwd + vpaddd zmm (AVX-512BW)";
    *block = int8_block_probe_avx512bw;
    return int8_probe_avx512bw;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    *name = "vpmaddubsw + vpmaddwd + vpaddd ymm (AVX2)";
    *block = int8_block_probe_avx2;
    return int8_probe_avx2;
  }
#elif defined(__aarch64__)
  if ((getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0) {
    *name = "sdot (NEON dotprod)";
    *block = int8_block_probe_sdot;
    return int8_probe_sdot;
  }
#endif
  *name = "none";
  *block = nullptr;
  return nullptr;
}

// Ops per second of `probe` run on `threads` threads at once.
// A roof is what the units can do: the fastest of 5 runs, not the median
// (a probe that a neighbour disturbs only reads low; with the median the
// int8 roof read 1342-1348 GOP/s in some runs on a Zen 5 that gives
// 2042-2143 in the others).
double probe_rate(double (*probe)(int64_t), int64_t iters, int threads) {
  double ops = 0;
  median_ms(5, [&](int) {
    std::vector<std::thread> ts;
    ts.reserve(static_cast<size_t>(threads));
    std::vector<double> f(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { f[static_cast<size_t>(t)] = probe(iters); });
    for (auto& th : ts) th.join();
    ops = 0;
    for (double v : f) ops += v;
  });
  return ops / (g_best_ms * 1e6);
}

// Read bandwidth of a buffer that stays in the L3: each thread sums its
// share of `bytes` `passes` times (GB/s).
double l3_bandwidth(int64_t bytes, int threads, int passes) {
  const int64_t n = bytes / 8;
  std::vector<uint64_t> buf(static_cast<size_t>(n), 1);
  std::vector<uint64_t> sink(static_cast<size_t>(threads));
  const double ms = median_ms(5, [&](int) {
    std::vector<std::thread> ts;
    ts.reserve(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        const int64_t i0 = n * t / threads, i1 = n * (t + 1) / threads;
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int p = 0; p < passes; ++p) {
          for (int64_t i = i0; i + 4 <= i1; i += 4) {
            a0 += buf[static_cast<size_t>(i)];
            a1 += buf[static_cast<size_t>(i + 1)];
            a2 += buf[static_cast<size_t>(i + 2)];
            a3 += buf[static_cast<size_t>(i + 3)];
          }
          __asm__ volatile("" : "+r"(a0), "+r"(a1), "+r"(a2), "+r"(a3));
        }
        sink[static_cast<size_t>(t)] = a0 + a1 + a2 + a3;
      });
    }
    for (auto& th : ts) th.join();
  });
  return static_cast<double>(bytes) * passes / (ms * 1e6);
}

// Median over fastest time of the last bandwidth measurement (>= 1).
double read_bw_median_over_best() {
  return g_best_ms > 0 ? g_median_ms / g_best_ms : 1.0;
}

std::string load_average() {
  std::string s;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) s = buf;
    std::fclose(f);
  }
  while (!s.empty() && (s.back() == '\n')) s.pop_back();
  return s;
}

// v rotated left by `by` elements (a copy).
template <class T>
std::vector<T> rotated(const std::vector<T>& v, int64_t by) {
  std::vector<T> out(v.size());
  if (!v.empty()) {
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(by % static_cast<int64_t>(v.size()));
    std::rotate_copy(v.begin(), mid, v.end(), out.begin());
  }
  return out;
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

// MXFP4 (E8M0 scale per 32): runs on the E2M1 kernels through its exact
// NVFP4 form (scales converted per call, docs/formats.md).
struct Mxfp4Weight {
  std::vector<uint8_t> q, s;
};

Mxfp4Weight make_mxfp4(int64_t n, int64_t k, uint32_t seed) {
  Mxfp4Weight w;
  std::vector<float> f = random_vec(n * k, seed, 0.02f);
  w.q.resize(static_cast<size_t>(n * k / 2));
  w.s.resize(static_cast<size_t>(n * k / 32));
  int64_t fs[2] = {n, k}, qs[2] = {n, k / 2}, ss[2] = {n, k / 32};
  DLTensor tf = tensor(f.data(), fs, 2, kDLFloat, 32), tq = tensor(w.q.data(), qs, 2, kDLUInt, 8),
           ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
  if (MXFP4_quantize(&tf, &tq, &ts, Q4_SCALE_LINEAR, nullptr) != Q4_OK) {
    std::fprintf(stderr, "MXFP4 quantize failed: %s\n", Q4_last_error());
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

sgemm_fn load_blas(std::string* name, int threads) {
  // OpenBLAS's workers spin for 2^28 cycles (~0.1 s) after each call by
  // default, taking the cores from the cases that follow an sgemm (the next
  // shape's first rows measured up to 2x slow on 2 cores): let them sleep
  // at once, unless the user set these.
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  for (const char* lib :
       {"libopenblas.so.0", "libopenblas.so", "libblis.so.4", "libcblas.so.3", "libblas.so.3"}) {
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) continue;
    if (void* f = dlsym(h, "cblas_sgemm")) {
      *name = lib;
      // OpenBLAS: the same thread count as the library under test.
      if (void* set = dlsym(h, "openblas_set_num_threads")) reinterpret_cast<void (*)(int)>(set)(threads);
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
  r["best_ms"] = g_best_ms;
  r["cpu_ms_per_thread"] = g_cpu_ms / std::max(threads, 1);
  r["steal_percent"] = g_steal_pct;
  r["gb_per_s"] = bytes / (ms * 1e6);
  r["gflop_per_s"] = flops / (ms * 1e6);
  if (bw > 0) r["fraction_of_read_bandwidth"] = bytes / (ms * 1e6) / bw;
  return r;
}

// The L3 size in the sysfs cache description of CPU 0 (bytes; 0 when
// there is none, e.g. under qemu-user).
int64_t l3_bytes_sysfs() {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::FILE* lf = std::fopen((dir + "level").c_str(), "r");
    if (lf == nullptr) continue;
    int level = 0;
    const bool ok = std::fscanf(lf, "%d", &level) == 1;
    std::fclose(lf);
    if (!ok || level != 3) continue;
    std::FILE* sf = std::fopen((dir + "size").c_str(), "r");
    if (sf == nullptr) return 0;
    long long size = 0;
    char unit = 0;
    const int got = std::fscanf(sf, "%lld%c", &size, &unit);
    std::fclose(sf);
    if (got < 1) return 0;
    return size * (unit == 'K' ? 1024LL : unit == 'M' ? 1048576LL : 1LL);
  }
  return 0;
}

// The L3 size glibc's sysconf reports (bytes; 0 when none).
int64_t l3_bytes_sysconf() {
#ifdef _SC_LEVEL3_CACHE_SIZE
  const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v > 0) return v;
#endif
  return 0;
}

// The L3 size the working sets are sized from: the larger of the two
// reports (they disagree on some VMs: an AMD EPYC Zen 4 VM's sysfs says 32
// MiB, sysconf 320 MiB; a working set sized from the larger is larger than
// the cache either way).
int64_t l3_bytes() {
  return std::max(l3_bytes_sysconf(), l3_bytes_sysfs());
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
  DLTensor* t() const { return &m->dl_tensor; }
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
  json results = json::array();
  // One call checked first: a failing call is reported, never timed.
  auto add = [&](const std::string& name, const std::string& format, int64_t m, int64_t n, int64_t k,
                 double bytes, double flops, const std::function<int32_t()>& fn) {
    json r;
    const int32_t st = fn();
    if (st != Q4_OK || Q4_cuda_synchronize(0, nullptr) != Q4_OK) {
      r = {{"case", name},
           {"format", format},
           {"mode", "cuda"},
           {"m", m},
           {"n", n},
           {"k", k},
           {"error", std::string(Q4_status_string(st)) + ": " + Q4_last_error()}};
    } else {
      const double ms = median_ms(reps, [&](int) {
        fn();
        Q4_cuda_synchronize(0, nullptr);
      });
      r = result(name, format, "cuda", m, n, k, ms, bytes, flops, 0, 0);
    }
    results.push_back(r);
  };
  std::vector<std::pair<int64_t, int64_t>> shapes = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
  if (!o.shapes.empty()) shapes = o.shapes;
  for (const auto& [n, k] : shapes) {
    Nvfp4Weight w = make_nvfp4(n, k, 1);
    Mxfp4Weight mw = make_mxfp4(n, k, 3);
    Nf4Weight nf = make_nf4(n, k, 2);
    int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 16}, mss[2] = {n, k / 32}, nq[1] = {n * k / 2},
            na[1] = {n * k / 64};
    DeviceCopy dq(w.q.data(), qs, 2, u8), ds(w.s.data(), ss, 2, u8), dmq(mw.q.data(), qs, 2, u8),
        dms(mw.s.data(), mss, 2, u8), dnq(nf.q.data(), nq, 1, u8), dna(nf.absmax.data(), na, 1, f32);
    const double nv_bytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 16;
    const double mx_bytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 32;
    const double nf_bytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 16;
    for (int64_t m : {int64_t{1}, int64_t{8}, int64_t{32}, int64_t{512}}) {
      std::vector<float> x = random_vec(m * k, 3, 1.0f), y(static_cast<size_t>(m * n));
      int64_t xs[2] = {m, k}, ys[2] = {m, n};
      DeviceCopy dx(x.data(), xs, 2, f32), dy(y.data(), ys, 2, f32);
      const double flops = 2.0 * static_cast<double>(m * n * k);
      const std::string kind = m == 1 ? "gemv" : "gemm";
      add(kind, "nvfp4", m, n, k, nv_bytes, flops, [&] {
        return NVFP4_linear(dx.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, w.g, nullptr, dy.t(), nullptr);
      });
      NF4_state st = nf4_state(dna.t());
      add(kind, "nf4", m, n, k, nf_bytes, flops,
          [&] { return NF4_scaled_mm(dx.t(), dnq.t(), &st, nullptr, dy.t(), nullptr); });
      add(kind, "mxfp4", m, n, k, mx_bytes, flops,
          [&] { return MXFP4_linear(dx.t(), dmq.t(), dms.t(), Q4_SCALE_LINEAR, nullptr, dy.t(), nullptr); });
      Nvfp4Weight a = make_nvfp4(m, k, 4);
      Mxfp4Weight ma = make_mxfp4(m, k, 5);
      int64_t aqs[2] = {m, k / 2}, ass[2] = {m, k / 16}, mas[2] = {m, k / 32};
      DeviceCopy daq(a.q.data(), aqs, 2, u8), das(a.s.data(), ass, 2, u8), dmaq(ma.q.data(), aqs, 2, u8),
          dmas(ma.s.data(), mas, 2, u8);
      add("scaled_mm", "nvfp4-w4a4", m, n, k, nv_bytes, flops, [&] {
        return NVFP4_scaled_mm(daq.t(), das.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, a.g * w.g, nullptr, dy.t(),
                               nullptr);
      });
      add("scaled_mm", "mxfp4-w4a4", m, n, k, mx_bytes, flops, [&] {
        return MXFP4_scaled_mm(dmaq.t(), dmas.t(), dmq.t(), dms.t(), Q4_SCALE_LINEAR, 1.0f, nullptr, dy.t(),
                               nullptr);
      });
    }
  }
  {
    const int64_t rows = 16384, k = 4096;
    std::vector<float> f = random_vec(rows * k, 5, 1.0f);
    std::vector<uint8_t> q(static_cast<size_t>(rows * k / 2)), s(static_cast<size_t>(rows * k / 16));
    int64_t fs[2] = {rows, k}, qqs[2] = {rows, k / 2}, sss[2] = {rows, k / 16}, mss[2] = {rows, k / 32};
    DeviceCopy df(f.data(), fs, 2, f32), dqq(q.data(), qqs, 2, u8), dss(s.data(), sss, 2, u8),
        dms(s.data(), mss, 2, u8);
    float g = 0;
    add("quantize", "nvfp4", rows, 0, k, static_cast<double>(rows * k) * (4 + 0.5 + 1.0 / 16), 0,
        [&] { return NVFP4_quantize(df.t(), dqq.t(), dss.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr); });
    add("quantize", "nvfp4-given-scale", rows, 0, k, static_cast<double>(rows * k) * (4 + 0.5 + 1.0 / 16), 0,
        [&] { return NVFP4_quantize(df.t(), dqq.t(), dss.t(), Q4_SCALE_LINEAR, g, nullptr, nullptr); });
    add("quantize", "mxfp4", rows, 0, k, static_cast<double>(rows * k) * (4 + 0.5 + 1.0 / 32), 0,
        [&] { return MXFP4_quantize(df.t(), dqq.t(), dms.t(), Q4_SCALE_LINEAR, nullptr); });
    std::vector<float> am(static_cast<size_t>(rows * k / 64));
    int64_t nq[1] = {rows * k / 2}, na[1] = {rows * k / 64};
    DeviceCopy dnq(q.data(), nq, 1, u8), dam(am.data(), na, 1, f32);
    add("quantize", "nf4", rows, 0, k, static_cast<double>(rows * k) * (4 + 0.5 + 4.0 / 64), 0,
        [&] { return NF4_quantize(df.t(), dnq.t(), dam.t(), 64, nullptr); });
  }
  for (auto& r : results) r["isa"] = "cuda";
  out["results"] = results;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int bench_main(int argc, char** argv) {
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
    else if (a == "--max-case-seconds")
      o.max_case_seconds = std::atof(next("--max-case-seconds").c_str());
    else if (a == "--fast-max-m")
      o.fast_max_m = std::atoll(next("--fast-max-m").c_str());
    else if (a == "--ms") {
      const std::string v = next("--ms");
      for (size_t p = 0; p < v.size();) {
        const size_t e = std::min(v.find(',', p), v.size());
        o.ms.push_back(std::atoll(v.substr(p, e - p).c_str()));
        p = e + 1;
      }
    } else if (a == "--shapes") {
      const std::string v = next("--shapes");
      for (size_t p = 0; p < v.size();) {
        const size_t e = std::min(v.find(',', p), v.size());
        const std::string sh = v.substr(p, e - p);
        const size_t x = sh.find('x');
        if (x == std::string::npos) {
          std::fprintf(stderr, "--shapes takes NxK[,NxK...]\n");
          return 2;
        }
        o.shapes.emplace_back(std::atoll(sh.substr(0, x).c_str()), std::atoll(sh.substr(x + 1).c_str()));
        p = e + 1;
      }
    } else if (a == "--working-set")
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
                   "[--only gemv|gemm|products|quant|f32|l3|gaps|calls|updates] [--max-case-seconds S] "
                   "[--fast-max-m M] "
                   "[--ms M,...] "
                   "[--shapes NxK,...] [--device cpu|cuda]\n       nvfp4-bench --tune-matmul "
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
  g_max_case_ms = o.max_case_seconds * 1000.0;
  Q4_op_options opts{};
  Q4_op_options_init(&opts);
  opts.num_threads = threads;
  Q4_op_options fast = opts;
  fast.math_mode = Q4_MATH_FAST;
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  Q4_get_capabilities(&caps);

  const int64_t l3 = l3_bytes();
  if (o.working_set_mb <= 0) o.working_set_mb = std::max<int64_t>(96, (2 * l3 + 1048575) / 1048576);
  json out;
  out["machine"] = {{"cpu", caps.cpu_brand},
                    {"isa", Q4_isa_name(caps.isa_active)},
                    {"threads", threads},
                    {"cpus", caps.num_cpus},
                    {"l3_mib", l3 / 1048576.0},
                    {"l3_mib_sysfs", static_cast<double>(l3_bytes_sysfs()) / 1048576.0},
                    {"l3_mib_sysconf", static_cast<double>(l3_bytes_sysconf()) / 1048576.0},
                    {"gemv_working_set_mib", o.working_set_mb},
                    {"cpu_vendor", q4::cpu_info().vendor},
                    {"cpu_family", q4::cpu_info().family},
                    {"cpu_model", q4::cpu_info().model}};
  out["load_average_at_start"] = load_average();
  const CpuTicks run_ticks = cpu_ticks();
  // Limits measured in this run.
  const int64_t bw_bytes = std::max<int64_t>(int64_t{512} << 20, 4 * l3);
  const q4::kern::KernelTable& kt = q4::kern::active_table();
  const int64_t probe_iters = o.quick ? 2000000 : 10000000;
  std::string int8_name;
  ProbeFn int8_block_fn = nullptr;
  const ProbeFn int8_fn = int8_probe(&int8_name, &int8_block_fn);
  // DRAM read and the roofs, measured the same way at the start of the run
  // and again at its end (limits_at_end).
  struct Limits {
    double bw = 0, fma = 0, int8 = 0, int8_block = 0;
  };
  auto measure_limits = [&] {
    Limits m;
    m.bw = read_bandwidth(bw_bytes, threads, o.quick ? 3 : 5);
    m.fma = probe_rate(kt.fma_probe, probe_iters, threads);
    if (int8_fn != nullptr) m.int8 = probe_rate(int8_fn, probe_iters, threads);
    if (int8_block_fn != nullptr) m.int8_block = probe_rate(int8_block_fn, probe_iters / 4, threads);
    return m;
  };
  const Limits start = measure_limits();
  const double bw = start.bw, fma_roof = start.fma, int8_roof = start.int8,
               int8_block_roof = start.int8_block;
  const double bw_best = bw * read_bw_median_over_best();
  const double l3bw = l3_bandwidth(int64_t{8} << 20, threads, 20);
  const double l3_best = l3bw * read_bw_median_over_best();
  out["limits"] = {
      {"dram_read_gb_per_s", bw},
      {"dram_read_best_gb_per_s", bw_best},
      {"l3_read_best_gb_per_s", l3_best},
      {"dram_read_note", "streaming sum over " + std::to_string(bw_bytes >> 20) +
                             " MiB (the larger of 512 MiB and 4 x the L3) with the same thread count"},
      {"l3_read_gb_per_s", l3bw},
      {"l3_read_note", "streaming sum over 8 MiB, 20 passes, same thread count"},
      {"fp32_fma_gflop_per_s", fma_roof},
      {"fp32_fma_note", "12 independent FMA chains per thread at the active ISA's width"},
      {"int8_dot_gop_per_s", int8_roof},
      {"int8_dot_note", int8_name + ", independent chains per thread (12 of a dot-product instruction; 4-6 of"
                                    " maddubs+madd with distinct operands); 2 ops per int8 multiply-add"},
      {"int8_block_gop_per_s", int8_block_roof},
      {"int8_block_note",
       "the same instruction with the per-block work of a block-scaled product: per 16-element block and "
       "vector of outputs 4 dot products, one int32->fp32 conversion, one scale product, one FMA (6 "
       "independent rows per thread; AVX2 4)"}};
  std::string blas_name;
  const sgemm_fn sgemm = load_blas(&blas_name, threads);
  out["blas"] = sgemm != nullptr ? blas_name : "none found";

  json results = json::array();
  auto want = [&](const std::string& c) {
    // (--only f32: the products with OpenBLAS sgemm beside them; it is
    // measured inside their loop, on the same x and y.)
    return o.only.empty() || o.only == c ||
           ((o.only == "products" || o.only == "f32") && (c == "gemv" || c == "gemm"));
  };
  const int reps = o.quick ? 3 : o.reps;

  struct Shape {
    int64_t n, k;
  };
  // The three LLaMA-class shapes, and gpt-oss's 2880 x 2880 (K % 128
  // == 64: the kernels' half-chunk paths, which no other shape reaches).
  std::vector<Shape> shapes = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {2880, 2880}};
  if (!o.shapes.empty()) {
    shapes.clear();
    for (const auto& [n, k] : o.shapes) shapes.push_back({n, k});
  }
  const std::vector<int64_t> ms_list = !o.ms.empty() ? o.ms
                                       : o.quick     ? std::vector<int64_t>{1, 8, 64}
                                                     : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 512};
  // A result with its fraction of the limit that applies to it.
  auto add = [&](json r, const char* limit, double value) {
    r["limit"] = limit;
    r["fraction_of_limit"] = value;
    // The same fraction for the fastest run, against the best limit run.
    const double med = r["median_ms"].get<double>(), best = r["best_ms"].get<double>();
    const double lim_ratio = std::string(limit) == "l3_read" ? l3_best / l3bw : 1.0;
    r["fraction_of_limit_best"] = best > 0 ? value * med / best / lim_ratio : 0.0;
    results.push_back(std::move(r));
  };

  // (the shapes' weights only for the cases that read them)
  if (!want("gemv") && !want("gemm") && !want("l3")) shapes.clear();
  for (const Shape& sh : shapes) {
    const int64_t n = sh.n, k = sh.k;
    const double nv_bytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 16;
    const double nf_bytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 64 * 4;
    const double mx_bytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 32;
    // Distinct weight copies rotated by the GEMV runs: more bytes than the L3.
    // One weight per format is quantized from random values; the other
    // copies hold its arrays rotated by c elements (valid codes and scales,
    // every page different from the other copies' pages, so a host that
    // merges identical pages cannot make them one), which takes a memcpy's
    // time instead of drawing n * k normal values per copy (most of the
    // benchmark's run time at 4096x4096 when every copy was drawn).
    const int64_t copies = std::max<int64_t>(
        2, static_cast<int64_t>(std::ceil(static_cast<double>(o.working_set_mb) * 1048576.0 / nv_bytes)));
    std::vector<Nvfp4Weight> nv;
    std::vector<Nf4Weight> nf;
    std::vector<Mxfp4Weight> mx;
    nv.push_back(make_nvfp4(n, k, 1));
    nf.push_back(make_nf4(n, k, 100));
    mx.push_back(make_mxfp4(n, k, 200));
    for (int64_t c = 1; c < copies; ++c) {
      nv.push_back({rotated(nv[0].q, c), rotated(nv[0].s, c), nv[0].g});
      nf.push_back({rotated(nf[0].q, c), rotated(nf[0].absmax, c)});
      mx.push_back({rotated(mx[0].q, c), rotated(mx[0].s, c)});
    }
    int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 16}, nq[1] = {n * k / 2}, na[1] = {n * k / 64};
    int64_t mss[2] = {n, k / 32};
    // Fast-mode session linears on the same copies (packed bundles: each
    // linear copies its weight and, where the table's integer GEMV reads
    // them, adds its codes in the tile order; docs/api.md).
    Q4_session* fast_session = nullptr;
    std::vector<Q4_linear*> nv_lin, nf_lin;
    const bool products = want("gemv") || want("gemm");
    if ((products || want("l3")) && o.fast_max_m > 0) {
      Q4_session_config sc{};
      Q4_session_config_init(&sc);
      sc.target = Q4_TARGET_CPU;
      sc.num_threads = threads;
      sc.math_mode = Q4_MATH_FAST;
      if (Q4_session_create(&sc, &fast_session) != Q4_OK) std::abort();
      for (int64_t c = 0; c < (products ? copies : 1); ++c) {  // (the hot GEMV: copy 0)
        const size_t i = static_cast<size_t>(c);
        DLTensor tq = tensor(nv[i].q.data(), qs, 2, kDLUInt, 8),
                 ts = tensor(nv[i].s.data(), ss, 2, kDLUInt, 8);
        const Q4_weight_bundle b = nvfp4_bundle(&tq, &ts, nv[i].g, n, k);
        Q4_linear* l = nullptr;
        if (Q4_linear_create(fast_session, &b, &l) != Q4_OK) std::abort();
        nv_lin.push_back(l);
        DLTensor fq = tensor(nf[i].q.data(), nq, 1, kDLUInt, 8),
                 fa = tensor(nf[i].absmax.data(), na, 1, kDLFloat, 32);
        NF4_state st = nf4_state(&fa);
        Q4_weight_bundle nb{};
        Q4_weight_bundle_init(&nb);
        nb.format = Q4_FORMAT_NF4;
        nb.source = Q4_WEIGHT_PACKED;
        nb.weight = &fq;
        nb.nf4 = &st;
        nb.out_features = n;
        nb.in_features = k;
        if (Q4_linear_create(fast_session, &nb, &l) != Q4_OK) std::abort();
        nf_lin.push_back(l);
      }
    }
    {
      // One exact GEMV over every copy of every format before any timing:
      // the first cases of a shape otherwise read 25-55 % slow on a Zen 5
      // (first touch of the copies' pages after they were written). Then,
      // before the products, NVFP4 GEMVs over the copies until 0.3 s have
      // passed: after the set-up above (copies, linears) the first case of
      // each shape, NVFP4 exact M = 1, read 20-35 % slow through all of
      // its 30 runs on an Emerald Rapids-class Xeon VM (2880x2880: 0.27
      // ms, the cases after it and a program calling it alone 0.20-0.21
      // ms); with the 0.3 s 0.22-0.24 ms.
      const auto w0 = Clock::now();
      std::vector<float> x = random_vec(k, 7, 1.0f), y(static_cast<size_t>(n));
      int64_t xs[2] = {1, k}, ys[2] = {1, n};
      DLTensor tx = tensor(x.data(), xs, 2, kDLFloat, 32), ty = tensor(y.data(), ys, 2, kDLFloat, 32);
      for (int64_t c = 0; c < copies; ++c) {
        const size_t i = static_cast<size_t>(c);
        DLTensor tq = tensor(nv[i].q.data(), qs, 2, kDLUInt, 8),
                 ts = tensor(nv[i].s.data(), ss, 2, kDLUInt, 8);
        DLTensor mq = tensor(mx[i].q.data(), qs, 2, kDLUInt, 8),
                 ms = tensor(mx[i].s.data(), mss, 2, kDLUInt, 8);
        DLTensor fq = tensor(nf[i].q.data(), nq, 1, kDLUInt, 8),
                 fa = tensor(nf[i].absmax.data(), na, 1, kDLFloat, 32);
        NF4_state st = nf4_state(&fa);
        if (NVFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, nv[i].g, nullptr, &ty, &opts) != Q4_OK ||
            MXFP4_linear(&tx, &mq, &ms, Q4_SCALE_LINEAR, nullptr, &ty, &opts) != Q4_OK ||
            NF4_scaled_mm(&tx, &fq, &st, nullptr, &ty, &opts) != Q4_OK)
          std::abort();
      }
      for (int64_t c = 0; products && std::chrono::duration<double>(Clock::now() - w0).count() < 0.3; ++c) {
        Nvfp4Weight& w = nv[static_cast<size_t>(c % copies)];
        DLTensor tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
        if (NVFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, w.g, nullptr, &ty, &opts) != Q4_OK) std::abort();
      }
    }
    for (int64_t m : ms_list) {
      const bool gemv = m <= 8;
      if (gemv ? !want("gemv") : !want("gemm")) continue;
      std::vector<float> x = random_vec(m * k, 7, 1.0f);
      std::vector<float> y(static_cast<size_t>(m * n));
      int64_t xs[2] = {m, k}, ys[2] = {m, n};
      DLTensor tx = tensor(x.data(), xs, 2, kDLFloat, 32), ty = tensor(y.data(), ys, 2, kDLFloat, 32);
      // GEMV: at least kGemvReps calls (each under 2 ms here): with 5, the
      // first case after the bandwidth probe read 25-35 % slow on a Zen 5
      // (0.29 ms, then 0.21 ms when repeated), a start-up effect, not the
      // kernel.
      const int r = gemv ? std::max(reps, kGemvReps) : m >= 512 ? std::min(reps, 3) : reps;
      const double flops = 2.0 * static_cast<double>(m * n * k);
      const char* cname = gemv ? "gemv" : "gemm";
      // GEMV rotates copies (from DRAM); GEMM reuses copy 0 (compute-bound).
      const int64_t rot = gemv ? copies : 1;
      auto nvfp4 = [&](const Q4_op_options* op) {
        return median_ms(r, [&](int it) {
          Nvfp4Weight& w = nv[static_cast<size_t>(it % rot)];
          DLTensor tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
          if (NVFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, w.g, nullptr, &ty, op) != Q4_OK) std::abort();
        });
      };
      auto mxfp4 = [&](const Q4_op_options* op) {
        return median_ms(r, [&](int it) {
          Mxfp4Weight& w = mx[static_cast<size_t>(it % rot)];
          DLTensor tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), mss, 2, kDLUInt, 8);
          if (MXFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, nullptr, &ty, op) != Q4_OK) std::abort();
        });
      };
      auto nf4 = [&](const Q4_op_options* op) {
        return median_ms(r, [&](int it) {
          Nf4Weight& w = nf[static_cast<size_t>(it % rot)];
          DLTensor tq = tensor(w.q.data(), nq, 1, kDLUInt, 8),
                   ta = tensor(w.absmax.data(), na, 1, kDLFloat, 32);
          NF4_state st = nf4_state(&ta);
          if (NF4_scaled_mm(&tx, &tq, &st, nullptr, &ty, op) != Q4_OK) std::abort();
        });
      };
      auto linear = [&](const std::vector<Q4_linear*>& ls) {
        return median_ms(r, [&](int it) {
          if (Q4_linear_forward(ls[static_cast<size_t>(it % rot)], &tx, &ty) != Q4_OK) std::abort();
        });
      };
      // The limits again, measured right before this case: on a shared
      // machine the load changes within a run. A short probe disturbed by
      // a neighbour reads low (a roof below what the case then achieves),
      // so each limit is the larger of the run-start and the near-case
      // measurement: the fractions err on the low side, never above 100 %.
      // The int8 roofs also for the GEMVs (M <= 8), whose integer cases are
      // read against them as well: with the run-start probe alone, one
      // disturbed probe had put fast M = 8 at 77-115 % of a roof half its
      // usual value.
      const size_t first_of_case = results.size();
      const double bw_here = gemv ? std::max(bw, read_bandwidth(int64_t{128} << 20, threads, 3)) : bw;
      const double fma_here =
          gemv ? fma_roof : std::max(fma_roof, probe_rate(kt.fma_probe, probe_iters / 10, threads));
      const double int8_here =
          int8_roof == 0 ? int8_roof : std::max(int8_roof, probe_rate(int8_fn, probe_iters / 10, threads));
      const double int8_block_here =
          int8_block_roof == 0
              ? int8_block_roof
              : std::max(int8_block_roof, probe_rate(int8_block_fn, probe_iters / 40, threads));
      auto limit_of = [&](double ms, double bytes, bool integer) {
        return gemv ? bytes / (ms * 1e6) / bw_here : flops / (ms * 1e6) / (integer ? int8_here : fma_here);
      };
      const char* lim_f = gemv ? "dram_read" : "fp32_fma";
      const char* lim_i = gemv ? "dram_read" : "int8_dot";
      double ms = nvfp4(&opts);
      const double nv_exact_ms = ms;
      json jr = result(cname, "nvfp4", "exact", m, n, k, ms, nv_bytes, flops, threads, 0);
      jr["working_set_copies"] = rot;
      add(jr, lim_f, limit_of(ms, nv_bytes, false));
      const bool run_fast = m <= o.fast_max_m;
      if (run_fast) {
        ms = nvfp4(&fast);
        add(result(cname, "nvfp4", "fast", m, n, k, ms, nv_bytes, flops, threads, 0), lim_i,
            limit_of(ms, nv_bytes, true));
        ms = linear(nv_lin);
        add(result(cname, "nvfp4", "fast-linear", m, n, k, ms, nv_bytes, flops, threads, 0), lim_i,
            limit_of(ms, nv_bytes, true));
      }
      ms = mxfp4(&opts);
      jr = result(cname, "mxfp4", "exact", m, n, k, ms, mx_bytes, flops, threads, 0);
      jr["speed_vs_nvfp4_exact"] = nv_exact_ms / ms;
      add(jr, lim_f, limit_of(ms, mx_bytes, false));
      if (run_fast) {
        ms = mxfp4(&fast);
        add(result(cname, "mxfp4", "fast", m, n, k, ms, mx_bytes, flops, threads, 0), lim_i,
            limit_of(ms, mx_bytes, true));
      }
      ms = nf4(&opts);
      jr = result(cname, "nf4", "exact", m, n, k, ms, nf_bytes, flops, threads, 0);
      jr["speed_vs_nvfp4_exact"] = nv_exact_ms / ms;
      add(jr, lim_f, limit_of(ms, nf_bytes, false));
      if (run_fast) {
        ms = nf4(&fast);
        add(result(cname, "nf4", "fast", m, n, k, ms, nf_bytes, flops, threads, 0), lim_i,
            limit_of(ms, nf_bytes, true));
        ms = linear(nf_lin);
        add(result(cname, "nf4", "fast-linear", m, n, k, ms, nf_bytes, flops, threads, 0), lim_i,
            limit_of(ms, nf_bytes, true));
      }
      // NVFP4 W4A4 scaled_mm (activations quantized once, outside the timing).
      Nvfp4Weight a = make_nvfp4(m, k, 77);
      int64_t aqs[2] = {m, k / 2}, ass[2] = {m, k / 16};
      DLTensor taq = tensor(a.q.data(), aqs, 2, kDLUInt, 8), tas = tensor(a.s.data(), ass, 2, kDLUInt, 8);
      ms = median_ms(r, [&](int it) {
        Nvfp4Weight& w = nv[static_cast<size_t>(it % rot)];
        DLTensor tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
        if (NVFP4_scaled_mm(&taq, &tas, &tq, &ts, Q4_SCALE_LINEAR, a.g * w.g, nullptr, &ty, &opts) != Q4_OK)
          std::abort();
      });
      add(result("scaled_mm", "nvfp4-w4a4", "exact", m, n, k, ms, nv_bytes, flops, threads, 0), lim_i,
          limit_of(ms, nv_bytes, true));
      // MXFP4 W4A4 scaled_mm (both operands' scales converted per call).
      Mxfp4Weight ma = make_mxfp4(m, k, 78);
      int64_t mas[2] = {m, k / 32};
      DLTensor tmq = tensor(ma.q.data(), aqs, 2, kDLUInt, 8), tms = tensor(ma.s.data(), mas, 2, kDLUInt, 8);
      ms = median_ms(r, [&](int it) {
        Mxfp4Weight& w = mx[static_cast<size_t>(it % rot)];
        DLTensor tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), mss, 2, kDLUInt, 8);
        if (MXFP4_scaled_mm(&tmq, &tms, &tq, &ts, Q4_SCALE_LINEAR, 1.0f, nullptr, &ty, &opts) != Q4_OK)
          std::abort();
      });
      add(result("scaled_mm", "mxfp4-w4a4", "exact", m, n, k, ms, mx_bytes, flops, threads, 0), lim_i,
          limit_of(ms, mx_bytes, true));
      // OpenBLAS sgemm on the fp32 weights of the same shape (compute reference).
      if (sgemm != nullptr && want("f32") && (!o.quick || m == 64)) {
        static std::vector<float> wf;  // (drawn once per shape: the same seed gives the same values)
        if (wf.size() != static_cast<size_t>(n * k)) wf = random_vec(n * k, 9, 0.02f);
        ms = median_ms(r, [&](int) {
          sgemm(101, 111, 112, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, x.data(),
                static_cast<int>(k), wf.data(), static_cast<int>(k), 0.0f, y.data(), static_cast<int>(n));
        });
        json br = result("sgemm", "fp32", blas_name, m, n, k, ms, static_cast<double>(n * k) * 4, flops,
                         threads, 0);
        br["isa"] = "system BLAS";
        add(br, gemv ? "fp32_fma (run start)" : "fp32_fma", flops / (ms * 1e6) / fma_here);
      }
      for (size_t i = first_of_case; i < results.size(); ++i) {
        const std::string lim = results[i]["limit"].get<std::string>();
        results[i]["limit_value"] = lim == "dram_read" ? bw_here : (lim == "int8_dot" ? int8_here : fma_here);
        // Integer cases (fast mode, W4A4), GEMV included: also as fractions
        // of the int8 roof and of the block-scaled roof.
        const std::string mode = results[i]["mode"].get<std::string>();
        const std::string fmt = results[i]["format"].get<std::string>();
        if ((mode.rfind("fast", 0) == 0 || fmt.find("w4a4") != std::string::npos) && int8_here > 0) {
          const double gops = results[i]["gflop_per_s"].get<double>();
          results[i]["fraction_of_int8_dot"] = gops / int8_here;
          if (int8_block_here > 0) results[i]["fraction_of_int8_block"] = gops / int8_block_here;
        }
      }
    }
    // Hot GEMV (weights resident in the L3), M = 1: fraction of L3 bandwidth.
    if (want("l3") && nv_bytes < 24.0 * 1048576.0) {
      std::vector<float> x = random_vec(k, 7, 1.0f), y(static_cast<size_t>(n));
      int64_t xs[2] = {1, k}, ys[2] = {1, n};
      DLTensor tx = tensor(x.data(), xs, 2, kDLFloat, 32), ty = tensor(y.data(), ys, 2, kDLFloat, 32);
      DLTensor tq = tensor(nv[0].q.data(), qs, 2, kDLUInt, 8), ts = tensor(nv[0].s.data(), ss, 2, kDLUInt, 8);
      DLTensor nqt = tensor(nf[0].q.data(), nq, 1, kDLUInt, 8),
               nat = tensor(nf[0].absmax.data(), na, 1, kDLFloat, 32);
      NF4_state st = nf4_state(&nat);
      // Exact and fast (the target: fast >= 2.5x exact here), each
      // with its speed relative to exact.
      double nv_exact = 0, nf_exact = 0;
      for (const Q4_op_options* op : {&opts, &fast}) {
        const bool is_fast = op == &fast;
        const char* mode = is_fast ? "fast" : "exact";
        double ms = median_ms(reps * 3, [&](int) {
          if (NVFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, nv[0].g, nullptr, &ty, op) != Q4_OK) std::abort();
        });
        json jr = result("gemv-l3", "nvfp4", mode, 1, n, k, ms, nv_bytes, 2.0 * n * k, threads, 0);
        if (is_fast) jr["speed_vs_exact"] = nv_exact / ms;
        nv_exact = is_fast ? nv_exact : ms;
        add(jr, "l3_read", nv_bytes / (ms * 1e6) / l3bw);
        ms = median_ms(reps * 3, [&](int) {
          if (NF4_scaled_mm(&tx, &nqt, &st, nullptr, &ty, op) != Q4_OK) std::abort();
        });
        jr = result("gemv-l3", "nf4", mode, 1, n, k, ms, nf_bytes, 2.0 * n * k, threads, 0);
        if (is_fast) jr["speed_vs_exact"] = nf_exact / ms;
        nf_exact = is_fast ? nf_exact : ms;
        add(jr, "l3_read", nf_bytes / (ms * 1e6) / l3bw);
      }
      // Fast-mode session linears on the same weights (tiled codes where
      // the table reads them).
      for (bool is_nf4 : {false, true}) {
        if (nv_lin.empty()) break;
        Q4_linear* l = is_nf4 ? nf_lin[0] : nv_lin[0];
        const double ms = median_ms(reps * 3, [&](int) {
          if (Q4_linear_forward(l, &tx, &ty) != Q4_OK) std::abort();
        });
        const double bytes = is_nf4 ? nf_bytes : nv_bytes;
        json jr = result("gemv-l3", is_nf4 ? "nf4" : "nvfp4", "fast-linear", 1, n, k, ms, bytes, 2.0 * n * k,
                         threads, 0);
        jr["speed_vs_exact"] = (is_nf4 ? nf_exact : nv_exact) / ms;
        add(jr, "l3_read", bytes / (ms * 1e6) / l3bw);
      }
    }
    for (Q4_linear* l : nv_lin) Q4_linear_destroy(l);
    for (Q4_linear* l : nf_lin) Q4_linear_destroy(l);
    if (fast_session != nullptr) Q4_session_destroy(fast_session);
  }

  // Quantize / dequantize throughput on a DRAM-sized fp32 input: when the
  // L3 could hold a good part of it (a 260 MiB L3 holds all of 11008 x
  // 4096 fp32), quantize rotates copies of it through more than twice the
  // L3, so that every run reads its input from DRAM (dequantize reads one
  // 4-bit copy, a ninth of its bytes; its fp32 writes dominate).
  if (want("quant")) {
    const int64_t rows = o.quick ? 4096 : 11008, k = 4096;
    const int copies = static_cast<int>(std::clamp<int64_t>(2 * l3 / (rows * k * 4) + 1, 1, 16));
    std::vector<std::vector<float>> f(static_cast<size_t>(copies));
    f[0] = random_vec(rows * k, 3, 1.0f);
    for (int c = 1; c < copies; ++c) f[static_cast<size_t>(c)] = f[0];
    std::vector<float> back(static_cast<size_t>(rows * k));
    std::vector<uint16_t> back16(static_cast<size_t>(rows * k));
    std::vector<uint8_t> q(static_cast<size_t>(rows * k / 2)), s(static_cast<size_t>(rows * k / 16));
    int64_t fs[2] = {rows, k}, qs[2] = {rows, k / 2}, ss[2] = {rows, k / 16};
    std::vector<DLTensor> tfc;
    tfc.reserve(f.size());
    for (auto& fc : f) tfc.push_back(tensor(fc.data(), fs, 2, kDLFloat, 32));
    DLTensor tq = tensor(q.data(), qs, 2, kDLUInt, 8), ts = tensor(s.data(), ss, 2, kDLUInt, 8),
             tb = tensor(back.data(), fs, 2, kDLFloat, 32);
    // Run r reads copy r % copies of the fp32 input.
    auto fin = [&](int r) { return &tfc[static_cast<size_t>(r % copies)]; };
    out["limits"]["quantize_input_copies"] = copies;
    float g = 0;
    const double bytes =
        static_cast<double>(rows * k) * 4.0 + static_cast<double>(rows * k) * (0.5 + 1.0 / 16);
    const double bw = read_bandwidth(std::max<int64_t>(int64_t{128} << 20, 4 * l3), threads,
                                     3);  // under the current load
    out["limits"]["dram_read_before_quantize_gb_per_s"] = bw;
    // 16-bit outputs of every dequantize (the fp16 and bf16 weights a
    // runtime hands to its own kernels): bytes = 4-bit input + 2-byte output.
    const DLTensor th = tensor(back16.data(), fs, 2, kDLFloat, 16),
                   tbh = tensor(back16.data(), fs, 2, kDLBfloat, 16);
    auto dequant16 = [&](const char* format, const char* suffix, double in_bytes_per_elem,
                         const std::function<int32_t(DLTensor*)>& call) {
      for (const DLTensor* t16 : {&th, &tbh}) {
        DLTensor t = *t16;
        const double ms16 = median_ms(reps, [&](int) {
          if (call(&t) != Q4_OK) std::abort();
        });
        const double b16 = static_cast<double>(rows * k) * (2.0 + in_bytes_per_elem);
        add(result("dequantize", format,
                   std::string(format) + (t.dtype.code == kDLBfloat ? "->bf16" : "->fp16") + suffix, rows, 0,
                   k, ms16, b16, 0, threads, 0),
            "dram_read", b16 / (ms16 * 1e6) / bw);
      }
    };
    double ms = median_ms(reps, [&](int r) {
      if (NVFP4_quantize(fin(r), &tq, &ts, Q4_SCALE_LINEAR, 0.0f, &g, &opts) != Q4_OK) std::abort();
    });
    add(result("quantize", "nvfp4", "fp32->nvfp4, global scale computed", rows, 0, k, ms, bytes, 0, threads,
               0),
        "dram_read", bytes / (ms * 1e6) / bw);
    const float given = g;
    ms = median_ms(reps, [&](int r) {
      if (NVFP4_quantize(fin(r), &tq, &ts, Q4_SCALE_LINEAR, given, nullptr, &opts) != Q4_OK) std::abort();
    });
    add(result("quantize", "nvfp4", "fp32->nvfp4, global scale given", rows, 0, k, ms, bytes, 0, threads, 0),
        "dram_read", bytes / (ms * 1e6) / bw);
    ms = median_ms(reps, [&](int) {
      if (NVFP4_dequantize(&tq, &ts, Q4_SCALE_LINEAR, g, &tb, &opts) != Q4_OK) std::abort();
    });
    add(result("dequantize", "nvfp4", "nvfp4->fp32", rows, 0, k, ms, bytes, 0, threads, 0), "dram_read",
        bytes / (ms * 1e6) / bw);
    dequant16("nvfp4", "", 0.5 + 1.0 / 16,
              [&](DLTensor* t) { return NVFP4_dequantize(&tq, &ts, Q4_SCALE_LINEAR, g, t, &opts); });
    // NF4 (blocksize 64) of the same fp32 tensor, flat.
    std::vector<uint8_t> nq(static_cast<size_t>(rows * k / 2));
    std::vector<float> na(static_cast<size_t>(rows * k / 64));
    int64_t ff[1] = {rows * k}, nqs[1] = {rows * k / 2}, nas[1] = {rows * k / 64};
    std::vector<DLTensor> tffc;
    tffc.reserve(f.size());
    for (auto& fc : f) tffc.push_back(tensor(fc.data(), ff, 1, kDLFloat, 32));
    auto fin_flat = [&](int r) { return &tffc[static_cast<size_t>(r % copies)]; };
    DLTensor tnq = tensor(nq.data(), nqs, 1, kDLUInt, 8), tna = tensor(na.data(), nas, 1, kDLFloat, 32);
    const double nf_bytes = static_cast<double>(rows * k) * (4.0 + 0.5 + 4.0 / 64);
    ms = median_ms(reps, [&](int r) {
      if (NF4_quantize(fin_flat(r), &tnq, &tna, 64, &opts) != Q4_OK) std::abort();
    });
    add(result("quantize", "nf4", "fp32->nf4, blocksize 64", rows, 0, k, ms, nf_bytes, 0, threads, 0),
        "dram_read", nf_bytes / (ms * 1e6) / bw);
    NF4_state nst{};
    nst.struct_size = sizeof nst;
    nst.blocksize = 64;
    nst.absmax = &tna;
    ms = median_ms(reps, [&](int) {
      if (NF4_dequantize(&tnq, &nst, &tb, &opts) != Q4_OK) std::abort();
    });
    add(result("dequantize", "nf4", "nf4->fp32, blocksize 64", rows, 0, k, ms, nf_bytes, 0, threads, 0),
        "dram_read", nf_bytes / (ms * 1e6) / bw);
    dequant16("nf4", ", blocksize 64", 0.5 + 4.0 / 64,
              [&](DLTensor* t) { return NF4_dequantize(&tnq, &nst, t, &opts); });
    // MXFP4 (E8M0 scale per 32) of the same tensor, linear scales.
    int64_t ms_shape[2] = {rows, k / 32};
    DLTensor tms = tensor(s.data(), ms_shape, 2, kDLUInt, 8);
    const double mx_bytes = static_cast<double>(rows * k) * (4.0 + 0.5 + 1.0 / 32);
    ms = median_ms(reps, [&](int r) {
      if (MXFP4_quantize(fin(r), &tq, &tms, Q4_SCALE_LINEAR, &opts) != Q4_OK) std::abort();
    });
    add(result("quantize", "mxfp4", "fp32->mxfp4", rows, 0, k, ms, mx_bytes, 0, threads, 0), "dram_read",
        mx_bytes / (ms * 1e6) / bw);
    ms = median_ms(reps, [&](int) {
      if (MXFP4_dequantize(&tq, &tms, Q4_SCALE_LINEAR, &tb, &opts) != Q4_OK) std::abort();
    });
    add(result("dequantize", "mxfp4", "mxfp4->fp32", rows, 0, k, ms, mx_bytes, 0, threads, 0), "dram_read",
        mx_bytes / (ms * 1e6) / bw);
    dequant16("mxfp4", "", 0.5 + 1.0 / 32,
              [&](DLTensor* t) { return MXFP4_dequantize(&tq, &tms, Q4_SCALE_LINEAR, t, &opts); });
    // bf16 input (what checkpoints hold), the same values rounded, rotated
    // through copies as the fp32 input: NVFP4 with the scale given, MXFP4,
    // NF4.
    const int copies16 = static_cast<int>(std::clamp<int64_t>(2 * l3 / (rows * k * 2) + 1, 1, 16));
    std::vector<std::vector<uint16_t>> f16(static_cast<size_t>(copies16));
    f16[0].resize(static_cast<size_t>(rows * k));
    for (size_t i = 0; i < f16[0].size(); ++i) f16[0][i] = q4::fmt::f32_to_bf16(f[0][i]);
    for (int c = 1; c < copies16; ++c) f16[static_cast<size_t>(c)] = f16[0];
    std::vector<DLTensor> tf16;
    tf16.reserve(f16.size());
    for (auto& fc : f16) tf16.push_back(tensor(fc.data(), fs, 2, kDLBfloat, 16));
    auto fin16 = [&](int r) { return &tf16[static_cast<size_t>(r % copies16)]; };
    const double b16_nv = static_cast<double>(rows * k) * (2.0 + 0.5 + 1.0 / 16);
    ms = median_ms(reps, [&](int r) {
      if (NVFP4_quantize(fin16(r), &tq, &ts, Q4_SCALE_LINEAR, given, nullptr, &opts) != Q4_OK) std::abort();
    });
    add(result("quantize", "nvfp4", "bf16->nvfp4, global scale given", rows, 0, k, ms, b16_nv, 0, threads, 0),
        "dram_read", b16_nv / (ms * 1e6) / bw);
    const double b16_mx = static_cast<double>(rows * k) * (2.0 + 0.5 + 1.0 / 32);
    ms = median_ms(reps, [&](int r) {
      if (MXFP4_quantize(fin16(r), &tq, &tms, Q4_SCALE_LINEAR, &opts) != Q4_OK) std::abort();
    });
    add(result("quantize", "mxfp4", "bf16->mxfp4", rows, 0, k, ms, b16_mx, 0, threads, 0), "dram_read",
        b16_mx / (ms * 1e6) / bw);
    // NF4 (blocksize 64) of the bf16 copies, flat.
    std::vector<DLTensor> tf16_flat;
    tf16_flat.reserve(f16.size());
    for (auto& fc : f16) tf16_flat.push_back(tensor(fc.data(), ff, 1, kDLBfloat, 16));
    const double b16_nf = static_cast<double>(rows * k) * (2.0 + 0.5 + 4.0 / 64);
    ms = median_ms(reps, [&](int r) {
      if (NF4_quantize(&tf16_flat[static_cast<size_t>(r % copies16)], &tnq, &tna, 64, &opts) != Q4_OK)
        std::abort();
    });
    add(result("quantize", "nf4", "bf16->nf4, blocksize 64", rows, 0, k, ms, b16_nf, 0, threads, 0),
        "dram_read", b16_nf / (ms * 1e6) / bw);
  }
  // The worker pool's watch between products (--only gaps): an exact GEMV
  // (NVFP4, M = 1, 2880 x 2880, hot: about 0.2 ms) called with a gap
  // before each call in which the caller works on its own (busy: a loop
  // on the clock) or waits (idle: sleeps). Calls alternate in pairs
  // between the pool's watch of this process (Q4_SPIN_US, default 1000
  // µs) and the former default of 100 µs, the reference, so host drift
  // moves both alike; the second call of each pair is timed (the watch
  // set before the first covers the gap before the second).
  if (want("gaps") && threads > 1) {
    const int64_t n = 2880, k = 2880;
    Nvfp4Weight w = make_nvfp4(n, k, 5);
    std::vector<float> x = random_vec(k, 9, 1.0f), y(static_cast<size_t>(n));
    int64_t xs[2] = {1, k}, ys[2] = {1, n}, qs[2] = {n, k / 2}, ss[2] = {n, k / 16};
    DLTensor tx = tensor(x.data(), xs, 2, kDLFloat, 32), ty = tensor(y.data(), ys, 2, kDLFloat, 32),
             tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
    const int64_t spin[2] = {q4::worker_spin_us(), 100};
    const double seconds = o.quick ? 0.05 : 0.4;
    for (const bool busy : {true, false}) {
      for (const int gap_us : {0, 200, 500, 1000, 2000}) {
        if (gap_us == 0 && !busy) continue;
        std::vector<double> t[2];
        const auto start = Clock::now();
        for (int64_t call = 0;
             std::chrono::duration<double>(Clock::now() - start).count() < seconds || t[1].size() < 5;
             ++call) {
          const int side = static_cast<int>(call / 2 % 2);
          q4::set_worker_spin_us(spin[side]);
          if (busy) {
            const auto g0 = Clock::now();
            while (std::chrono::duration<double, std::micro>(Clock::now() - g0).count() < gap_us) {
            }
          } else {
            std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
          }
          const auto c0 = Clock::now();
          if (NVFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, w.g, nullptr, &ty, &opts) != Q4_OK) std::abort();
          if (call % 2 == 1)
            t[side].push_back(std::chrono::duration<double, std::milli>(Clock::now() - c0).count());
        }
        double med[2];
        for (int i = 0; i < 2; ++i) {
          std::sort(t[i].begin(), t[i].end());
          med[i] = t[i][t[i].size() / 2];
        }
        json r;
        r["case"] = "pool_gap";
        r["format"] = "nvfp4";
        r["mode"] = "exact";
        r["m"] = 1;
        r["n"] = n;
        r["k"] = k;
        r["threads"] = threads;
        r["gap"] = busy ? "busy" : "idle";
        r["gap_us"] = gap_us;
        r["spin_us"] = spin[0];
        r["median_ms"] = med[0];
        r["reference_spin_us"] = spin[1];
        r["reference_median_ms"] = med[1];
        r["speed_vs_reference"] = med[1] / med[0];
        r["calls_timed"] = t[0].size();
        results.push_back(r);
      }
    }
    q4::set_worker_spin_us(spin[0]);
  }
  // Small products call by call (an actor's layers: the same small weight
  // every call, so it is in cache): the time of one call through a
  // session's linear and through the stateless NVFP4_linear, exact and
  // fast, M = 1 and 8, with this run's threads and, as the reference, one
  // thread. fraction_of_limit: the product's own work at the FMA roof
  // (exact) or the int8 roof (fast) over the call's time, i.e. how much of
  // a call is the product itself (16 x 16 is almost all call).
  if (want("calls")) {
    struct Small {
      int64_t n, k;
    };
    Q4_session* sessions[2][2] = {};  // [one thread?][fast?]
    for (int one = 0; one < 2; ++one) {
      for (int f = 0; f < 2; ++f) {
        Q4_session_config sc{};
        Q4_session_config_init(&sc);
        sc.target = Q4_TARGET_CPU;
        sc.num_threads = one ? 1 : threads;
        sc.math_mode = f ? Q4_MATH_FAST : Q4_MATH_EXACT;
        if (Q4_session_create(&sc, &sessions[one][f]) != Q4_OK) std::abort();
      }
    }
    const double batch_ms = o.quick ? 1.0 : 3.0;
    for (const Small sh :
         {Small{16, 16}, Small{16, 128}, Small{64, 128}, Small{256, 256}, Small{1024, 1024}}) {
      const int64_t n = sh.n, k = sh.k;
      Nvfp4Weight w = make_nvfp4(n, k, 11);
      int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 16};
      DLTensor tq = tensor(w.q.data(), qs, 2, kDLUInt, 8), ts = tensor(w.s.data(), ss, 2, kDLUInt, 8);
      Q4_linear* lin[2][2] = {};
      for (int one = 0; one < 2; ++one) {
        for (int f = 0; f < 2; ++f) {
          const Q4_weight_bundle b = nvfp4_bundle(&tq, &ts, w.g, n, k);
          if (Q4_linear_create(sessions[one][f], &b, &lin[one][f]) != Q4_OK) std::abort();
        }
      }
      for (const int64_t m : {int64_t{1}, int64_t{8}}) {
        std::vector<float> x = random_vec(m * k, 13, 1.0f), y(static_cast<size_t>(m * n));
        int64_t xs[2] = {m, k}, ys[2] = {m, n};
        DLTensor tx = tensor(x.data(), xs, 2, kDLFloat, 32), ty = tensor(y.data(), ys, 2, kDLFloat, 32);
        for (int f = 0; f < 2; ++f) {
          for (const bool stateless : {false, true}) {
            // The two sides alternate batch by batch (host drift moves both).
            auto call = [&](int one) {
              Q4_op_options op = f ? fast : opts;
              if (one) op.num_threads = 1;
              const int32_t rc = stateless
                                     ? NVFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, w.g, nullptr, &ty, &op)
                                     : Q4_linear_forward(lin[one][f], &tx, &ty);
              if (rc != Q4_OK) std::abort();
            };
            int64_t calls = 1;
            {
              for (int i = 0; i < 200; ++i) call(0), call(1);
              const auto c0 = Clock::now();
              for (int i = 0; i < 200; ++i) call(0);
              const double per = std::chrono::duration<double, std::milli>(Clock::now() - c0).count() / 200;
              calls = std::max<int64_t>(1, static_cast<int64_t>(batch_ms / std::max(per, 1e-6)));
            }
            std::vector<double> t[2];
            for (int rep = 0; rep < (o.quick ? 5 : 11); ++rep) {
              for (int one = 0; one < 2; ++one) {
                const auto c0 = Clock::now();
                for (int64_t i = 0; i < calls; ++i) call(one);
                t[one].push_back(std::chrono::duration<double, std::milli>(Clock::now() - c0).count() /
                                 static_cast<double>(calls));
              }
            }
            for (auto& v : t) std::sort(v.begin(), v.end());
            const double us[2] = {1000.0 * t[0][t[0].size() / 2], 1000.0 * t[1][t[1].size() / 2]};
            json r0;
            r0["case"] = "small_call";
            r0["api"] = stateless ? "NVFP4_linear" : "Q4_linear_forward";
            r0["format"] = "nvfp4";
            r0["mode"] = f ? "fast" : "exact";
            r0["m"] = m;
            r0["n"] = n;
            r0["k"] = k;
            r0["threads"] = threads;
            r0["calls_per_batch"] = calls;
            r0["median_ms"] = t[0][t[0].size() / 2];
            r0["best_ms"] = t[0].front();
            results.push_back(r0);
            json& r = results.back();
            r["us_per_call"] = us[0];
            r["reference"] = "the same calls with num_threads 1";
            r["reference_us_per_call"] = us[1];
            r["speed_vs_reference"] = us[1] / us[0];
            const double roof = f ? int8_roof : fma_roof;  // G(FL)OP/s
            r["limit"] = f ? "int8_dot" : "fp32_fma";
            r["fraction_of_limit"] =
                roof > 0 ? 2.0 * static_cast<double>(m * n * k) / (roof * 1e3) / us[0] : 0.0;
          }
        }
      }
      for (auto& row : lin) {
        for (Q4_linear* l : row) Q4_linear_destroy(l);
      }
    }
    for (auto& row : sessions) {
      for (Q4_session* s : row) Q4_session_destroy(s);
    }
  }
  // Weight updates and mutable-tensor writes (--only updates): the median
  // time of Q4_linear_update_weight from packed NVFP4 bytes (exact and fast
  // sessions; one linear updated again and again, and eight updated in
  // turn, as a model's layers are, whose memory the L3 cannot hold), and of
  // Q4_mutable_begin_write(Q4_WRITE_KEEP) + commit (one tensor, and two in
  // turn). figure: the bytes an update must at least move (the packed
  // weight read and written; fast mode writes its tiles too) per second,
  // as a fraction of the DRAM read probe.
  if (want("updates")) {
    const int32_t rounds = o.quick ? 8 : 40;
    auto cpu_session = [&](int32_t math_mode) {
      Q4_session_config sc{};
      Q4_session_config_init(&sc);
      sc.target = Q4_TARGET_CPU;
      sc.num_threads = threads;
      sc.math_mode = math_mode;
      Q4_session* session = nullptr;
      if (Q4_session_create(&sc, &session) != Q4_OK) std::abort();
      return session;
    };
    // A case's row from its times (ms, sorted) and the bytes it moves.
    auto moved_row = [&](const char* name, const std::vector<double>& t, double moved) {
      const double med = t[t.size() / 2];
      json r;
      r["case"] = name;
      r["m"] = 0;
      r["threads"] = threads;
      r["median_ms"] = med;
      r["best_ms"] = t.front();
      r["gb_per_s"] = moved / (med * 1e6);
      r["limit"] = "dram_read";
      r["fraction_of_limit"] = start.bw > 0 ? moved / (med * 1e6) / start.bw : 0.0;
      return r;
    };
    struct Upd {
      int64_t n, k;
      int linears;
    };
    const int64_t shrink = o.quick ? 4 : 1;  // (--quick: a sixteenth of the bytes, the same cases)
    for (const Upd u : {Upd{4096, 4096, 1}, Upd{4096, 4096, 8}, Upd{11008, 4096, 1}}) {
      const int64_t n = u.n / shrink, k = u.k / shrink;
      Nvfp4Weight base = make_nvfp4(n, k, 21);
      std::vector<Nvfp4Weight> ws(static_cast<size_t>(u.linears));
      for (size_t j = 0; j < ws.size(); ++j) {  // (distinct bytes: the first weight's rotated)
        ws[j].g = base.g;
        ws[j].q.resize(base.q.size());
        ws[j].s.resize(base.s.size());
        std::rotate_copy(base.q.begin(), base.q.begin() + static_cast<int64_t>(j * 4099), base.q.end(),
                         ws[j].q.begin());
        std::rotate_copy(base.s.begin(), base.s.begin() + static_cast<int64_t>(j * 257), base.s.end(),
                         ws[j].s.begin());
      }
      int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 16};
      for (int f = 0; f < 2; ++f) {
        Q4_session* session = cpu_session(f ? Q4_MATH_FAST : Q4_MATH_EXACT);
        std::vector<DLTensor> tq, ts;
        for (Nvfp4Weight& w : ws) {
          tq.push_back(tensor(w.q.data(), qs, 2, kDLUInt, 8));
          ts.push_back(tensor(w.s.data(), ss, 2, kDLUInt, 8));
        }
        std::vector<Q4_weight_bundle> b;
        std::vector<Q4_linear*> lin(ws.size());
        for (size_t j = 0; j < ws.size(); ++j) {
          b.push_back(nvfp4_bundle(&tq[j], &ts[j], ws[j].g, n, k));
          if (Q4_linear_create(session, &b[j], &lin[j]) != Q4_OK) std::abort();
        }
        std::vector<double> t;
        for (int32_t r = 0; r < rounds + 2; ++r) {
          for (size_t j = 0; j < lin.size(); ++j) {
            const auto c0 = Clock::now();
            if (Q4_linear_update_weight(lin[j], &b[j]) != Q4_OK) std::abort();
            if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - c0).count());
          }
        }
        std::sort(t.begin(), t.end());
        const int64_t packed = n * k / 2 + n * k / 16;  // (codes and scales)
        json r = moved_row("linear_update", t, (f ? 3.0 : 2.0) * static_cast<double>(packed));
        r["format"] = "nvfp4";
        r["mode"] = f ? "fast" : "exact";
        r["n"] = n;
        r["k"] = k;
        r["linears"] = u.linears;
        results.push_back(r);
        for (Q4_linear* l : lin) Q4_linear_destroy(l);
        Q4_session_destroy(session);
      }
    }
    Q4_session* session = cpu_session(Q4_MATH_EXACT);
    struct Mut {
      int64_t mib;
      int tensors;
    };
    for (const Mut mu : {Mut{4, 1}, Mut{16, 1}, Mut{16, 2}, Mut{64, 1}}) {
      const int64_t bytes = (mu.mib << 20) / shrink / shrink, shape[1] = {bytes};
      std::vector<Q4_mutable*> m(static_cast<size_t>(mu.tensors));
      for (Q4_mutable*& x : m) {
        if (Q4_mutable_create(session, 1, shape, DLDataType{kDLUInt, 8, 1}, &x) != Q4_OK) std::abort();
      }
      std::vector<double> t;
      for (int32_t r = 0; r < rounds + 2; ++r) {
        for (Q4_mutable* x : m) {
          DLTensor view{};
          uint64_t version = 0;
          const auto c0 = Clock::now();
          if (Q4_mutable_begin_write(x, Q4_WRITE_KEEP, &view) != Q4_OK) std::abort();
          static_cast<uint8_t*>(view.data)[r] ^= 1;
          if (Q4_mutable_commit(x, &version) != Q4_OK) std::abort();
          if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - c0).count());
        }
      }
      std::sort(t.begin(), t.end());
      json r = moved_row("mutable_keep", t, 2.0 * static_cast<double>(bytes));
      r["format"] = "u8";
      r["n"] = 0;
      r["k"] = bytes;
      r["tensors"] = mu.tensors;
      results.push_back(r);
      for (Q4_mutable* x : m) Q4_mutable_destroy(x);
    }
    Q4_session_destroy(session);
  }
  out["results"] = results;
  out["load_average_at_end"] = load_average();
  // The run's steal, and the roofs and DRAM read once more: a report can
  // tell a run whose start probes a neighbour disturbed (they read low).
  out["steal_percent"] = steal_percent(run_ticks, cpu_ticks());
  const Limits end = measure_limits();
  out["limits_at_end"] = {{"dram_read_gb_per_s", end.bw},
                          {"fp32_fma_gflop_per_s", end.fma},
                          {"int8_dot_gop_per_s", end.int8},
                          {"int8_block_gop_per_s", end.int8_block}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace

// No exception leaves main: anything the program did not handle itself is
// reported and ends it with a failure status.
int main(int argc, char** argv) {
  try {
    return bench_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvfp4-bench: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "nvfp4-bench: unknown exception\n");
  }
  return 1;
}
