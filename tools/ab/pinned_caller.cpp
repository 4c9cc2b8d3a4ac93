// The exact NVFP4 GEMV 4096x4096 (M = 1 and 8) called from a host thread
// that makes the library's first call: pinned to one CPU (as actor runtimes
// pin theirs) or not. Until the forty-first session the pool's workers
// inherited that thread's one-CPU mask, and a pinned caller ran the whole
// pool on one core. Prints one JSON object (medians of 200 calls, ms).
//
// The first call must be this program's, so run it once per mode (build:
// g++ -O2 -std=c++17 -Iinclude tools/ab/pinned_caller.cpp -o /tmp/pc
// -Lbuild/release -lNVFP4 -lpthread; then LD_LIBRARY_PATH=build/release
// /tmp/pc 1 for a pinned caller, 0 for one that is not; LD_LIBRARY_PATH
// picks the library build to compare, on an otherwise idle machine).
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "nvfp4/nvfp4.h"

namespace {

DLTensor tensor(void* data, int64_t* shape, DLDataType dt) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const bool pin = argc > 1 && std::atoi(argv[1]) != 0;
  double median_ms[2] = {0, 0};
  int status = Q4_OK;
  std::thread caller([&] {
    if (pin) {
      cpu_set_t mask;
      CPU_ZERO(&mask);
      sched_getaffinity(0, sizeof mask, &mask);
      int first = 0;
      while (!CPU_ISSET(first, &mask)) ++first;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(first, &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    }
    const int64_t n = 4096, k = 4096, max_m = 8;
    const DLDataType f32{kDLFloat, 32, 1}, u8{kDLUInt, 8, 1};
    std::vector<float> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(max_m * k)),
        y(static_cast<size_t>(max_m * n));
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float& v : w) v = normal(rng);
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> q(static_cast<size_t>(n * k / 2)), s(static_cast<size_t>(n * k / 16));
    int64_t ws[2] = {n, k}, qs[2] = {n, k / 2}, ss[2] = {n, k / 16};
    DLTensor W = tensor(w.data(), ws, f32), Q = tensor(q.data(), qs, u8), S = tensor(s.data(), ss, u8);
    float g = 0;
    status = NVFP4_quantize(&W, &Q, &S, Q4_SCALE_LINEAR, 0.0f, &g, nullptr);  // the first call
    int slot = 0;
    for (int64_t m : {int64_t{1}, max_m}) {
      int64_t xs[2] = {m, k}, ys[2] = {m, n};
      DLTensor X = tensor(x.data(), xs, f32), Y = tensor(y.data(), ys, f32);
      std::vector<double> ms;
      for (int i = 0; i < 200 && status == Q4_OK; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        status = NVFP4_linear(&X, &Q, &S, Q4_SCALE_LINEAR, g, nullptr, &Y, nullptr);
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      median_ms[slot++] = ms.empty() ? 0.0 : ms[ms.size() / 2];
    }
  });
  caller.join();
  if (status != Q4_OK) {
    std::fprintf(stderr, "library call failed: %s\n", Q4_last_error());
    return 1;
  }
  std::printf("{\"caller_pinned\": %s, \"exact_gemv_4096_ms\": {\"m1\": %.4f, \"m8\": %.4f}}\n",
              pin ? "true" : "false", median_ms[0], median_ms[1]);
  return 0;
}
