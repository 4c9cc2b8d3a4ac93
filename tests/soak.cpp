// Soak test (label `soak`, not in the default run): 1,000,000 mixed calls
// across 8 threads — quantize, linear forward, weight updates, snapshots and
// commits, session create/destroy — with RSS sampled. Passes when RSS is
// flat after warm-up and every session ends with zero live objects.
//
//   ctest --test-dir build/release -L soak --output-on-failure
//   build/release/tests/nvfp4_soak [total_calls]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "nvfp4/nvfp4.h"

namespace {

long rss_kb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * 4;
}

DLTensor tensor(void* data, int64_t* shape, int32_t ndim, DLDataType dt) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t total = argc > 1 ? std::atoll(argv[1]) : 1000000;
  const int threads = 8;
  const int64_t n = 16, k = 64;
  const DLDataType f32{kDLFloat, 32, 1}, u8{kDLUInt, 8, 1};
  std::vector<float> w1(n * k), w2(n * k);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : w1) v = nd(rng);
  for (auto& v : w2) v = nd(rng);
  int64_t ws[2] = {n, k};
  DLTensor tw1 = tensor(w1.data(), ws, 2, f32), tw2 = tensor(w2.data(), ws, 2, f32);
  Q4_weight_bundle b1{}, b2{};
  Q4_weight_bundle_init(&b1);
  b1.source = Q4_WEIGHT_FLOAT;
  b1.weight = &tw1;
  b2 = b1;
  b2.weight = &tw2;

  Q4_session* shared = nullptr;
  if (Q4_session_create(nullptr, &shared) != Q4_OK) return 1;
  Q4_linear* lin = nullptr;
  if (Q4_linear_create(shared, &b1, &lin) != Q4_OK) return 1;
  int64_t ms[1] = {1024};
  Q4_mutable* mut = nullptr;
  if (Q4_mutable_create(shared, 1, ms, f32, &mut) != Q4_OK) return 1;

  std::atomic<int64_t> next{0}, failures{0};
  std::atomic<long> rss_warm{0};
  std::vector<long> samples;
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling.load()) {
      samples.push_back(rss_kb());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<float> x(4 * k, 0.5f), y(4 * n);
      std::vector<uint8_t> q(4 * k / 2), s(4 * k / 16);
      int64_t xs[2] = {4, k}, ys[2] = {4, n}, qs[2] = {4, k / 2}, ss[2] = {4, k / 16};
      DLTensor tx = tensor(x.data(), xs, 2, f32), ty = tensor(y.data(), ys, 2, f32);
      DLTensor tq = tensor(q.data(), qs, 2, u8), tss = tensor(s.data(), ss, 2, u8);
      Q4_op_options one{};
      Q4_op_options_init(&one);
      one.num_threads = 1 + t % 2;
      for (;;) {
        const int64_t i = next.fetch_add(1);
        if (i >= total) break;
        if (i == total / 10) rss_warm = rss_kb();
        int32_t st = Q4_OK;
        switch (i % 8) {
          case 0:
          case 1:
            st = NVFP4_quantize(&tx, &tq, &tss, Q4_SCALE_LINEAR, 0.0f, nullptr, &one);
            break;
          case 2:
          case 3:
            st = Q4_linear_forward(lin, &tx, &ty);
            break;
          case 4:
            st = Q4_linear_update_weight(lin, (i / 8) % 2 ? &b1 : &b2);
            break;
          case 5: {
            DLManagedTensorVersioned* snap = nullptr;
            st = Q4_mutable_acquire(mut, &snap, nullptr);
            if (st == Q4_OK) snap->deleter(snap);
            break;
          }
          case 6: {
            DLTensor view{};
            st = Q4_mutable_begin_write(mut, Q4_WRITE_DISCARD, &view);
            if (st == Q4_OK) {
              std::memset(view.data, 0, 4096);
              st = Q4_mutable_commit(mut, nullptr);
            } else if (st == Q4_ERR_BUSY) {
              st = Q4_OK;  // another writer: expected under contention
            }
            break;
          }
          default: {
            Q4_session* s = nullptr;
            st = Q4_session_create(nullptr, &s);
            Q4_linear* l = nullptr;
            if (st == Q4_OK) st = Q4_linear_create(s, &b1, &l);
            if (st == Q4_OK) st = Q4_linear_forward(l, &tx, &ty);
            Q4_linear_destroy(l);
            if (Q4_session_destroy(s) != Q4_OK) st = Q4_ERR_STATE;
            break;
          }
        }
        if (st != Q4_OK) failures++;
      }
    });
  }
  for (auto& th : ts) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sampling = false;
  sampler.join();
  const long rss_end = rss_kb();
  Q4_mutable_destroy(mut);
  Q4_linear_destroy(lin);
  Q4_session_stats st{};
  st.struct_size = sizeof st;
  Q4_session_get_stats(shared, &st);
  const int32_t destroy = Q4_session_destroy(shared);
  long rss_max = 0;
  for (long v : samples) rss_max = v > rss_max ? v : rss_max;
  std::printf(
      "{\"calls\": %lld, \"threads\": %d, \"seconds\": %.2f, \"failures\": %lld, \"rss_after_warmup_kb\": "
      "%ld, "
      "\"rss_end_kb\": %ld, \"rss_max_kb\": %ld, \"live_linears\": %d, \"live_mutables\": %d, "
      "\"live_snapshots\": %d, \"live_bytes\": %lld, \"session_destroy\": \"%s\"}\n",
      static_cast<long long>(total), threads, secs, static_cast<long long>(failures.load()), rss_warm.load(),
      rss_end, rss_max, st.live_linears, st.live_mutables, st.live_snapshots,
      static_cast<long long>(st.live_bytes), Q4_status_string(destroy));
  const bool flat = rss_end - rss_warm.load() < 8192;
  const bool clean =
      st.live_linears == 0 && st.live_mutables == 0 && st.live_snapshots == 0 && st.live_bytes == 0;
  return failures.load() == 0 && flat && clean && destroy == Q4_OK ? 0 : 1;
}
