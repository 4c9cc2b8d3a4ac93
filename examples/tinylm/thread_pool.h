// A minimal persistent thread pool for TinyLM's own work (fp32 GEMM,
// attention): parallel_for(n, fn) runs fn(0..n-1) on the caller and the
// workers, returning when all are done. Each index's work is independent of
// how indices are distributed, so results never depend on the thread count.
#ifndef TINYLM_THREAD_POOL_H_
#define TINYLM_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tinylm {

class ThreadPool {
 public:
  explicit ThreadPool(int32_t threads = 1) { resize(threads); }
  ~ThreadPool() { stop(); }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void resize(int32_t threads) {
    stop();
    quit_ = false;
    for (int32_t i = 1; i < threads; ++i) workers_.emplace_back([this] { loop(); });
  }
  int32_t size() const { return static_cast<int32_t>(workers_.size()) + 1; }

  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
    if (n <= 0) return;
    if (workers_.empty() || n == 1) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      busy_ = static_cast<int32_t>(workers_.size());
      ++generation_;
    }
    cv_.notify_all();
    drain(fn, n);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return busy_ == 0; });
    fn_ = nullptr;
  }

 private:
  void drain(const std::function<void(int64_t)>& fn, int64_t n) {
    for (int64_t i = next_.fetch_add(1); i < n; i = next_.fetch_add(1)) fn(i);
  }
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int64_t)>* fn = nullptr;
      int64_t n = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
        fn = fn_;
        n = n_;
      }
      drain(*fn, n);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (--busy_ == 0) done_cv_.notify_one();
      }
    }
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  int32_t busy_ = 0;
  uint64_t generation_ = 0;
  bool quit_ = false;
};

}  // namespace tinylm

#endif  // TINYLM_THREAD_POOL_H_
