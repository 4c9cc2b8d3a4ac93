#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cpu_features.h"
#include "common/error.h"

namespace q4 {
namespace {

thread_local bool t_in_worker = false;

// Bounded spinning before a blocking wait. A worker that finished a job
// watches for the next one for worker_spin_us() before it sleeps on the
// condition variable, and a caller whose own share is done watches for the
// helpers' last iteration for kCallerSpin: products come back to back (a
// model's linears, an actor's steps), and a futex wake-up costs tens of
// microseconds on a virtual machine, a tenth of a GEMV from memory. The
// condition variables stay the source of truth; spinning only delays the
// moment of blocking, and a spinning thread offers its core to the
// scheduler every 64 checks (so an oversubscribed machine runs the thread
// it waits for).
//
// The workers' watch, Q4_SPIN_US (0 to 1000000 µs), is 1000 µs by
// default (it was 100): a caller does its own work between products
// (attention, norms, an interpreter's overhead) or waits, and a worker
// that slept through that gap joins the next product late. Measured with
// nvfp4-bench --only gaps on an Emerald Rapids-class Xeon VM (2 vCPUs):
// exact GEMV 2880x2880 (0.2 ms back to back), calls alternating in one
// process between watches of 1000 and 100 µs (two runs): gaps of 200
// and 500 µs 1.17-1.22x (the caller busy or asleep), 1000 µs 1.01-1.05x,
// back to back 1.00x; a gap longer than the watch gains nothing (2000 µs
// 0.98-1.00x).
constexpr std::chrono::microseconds kCallerSpin{200};
constexpr int64_t kDefaultWorkerSpinUs = 1000;

std::atomic<int64_t>& worker_spin_ref() {
  static std::atomic<int64_t> us{[] {
    if (const char* env = std::getenv("Q4_SPIN_US")) {
      char* end = nullptr;
      const long long v = std::strtoll(env, &end, 10);
      if (end != env && *end == '\0' && v >= 0 && v <= 1000000) return static_cast<int64_t>(v);
    }
    return kDefaultWorkerSpinUs;
  }()};
  return us;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or `limit` passes; true when done() became true.
template <class Done>
bool spin_until(Done&& done, std::chrono::microseconds limit) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() - start >= limit) return done();
    std::this_thread::yield();
  }
}

#if defined(__linux__)
// The affinity mask of the process's main thread (thread id = process id):
// the CPUs the process may use, whichever thread asks (a host may pin its
// own threads to one core each). Empty (count 0) when it cannot be read.
struct CpuMask {
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> set{nullptr, [](cpu_set_t* s) { CPU_FREE(s); }};
  size_t size = 0;
  int count() const { return set ? CPU_COUNT_S(size, set.get()) : 0; }
};

CpuMask main_thread_affinity() {
  for (int cpus = CPU_SETSIZE; cpus <= (1 << 16); cpus *= 2) {
    CpuMask m;
    m.set.reset(CPU_ALLOC(cpus));
    if (!m.set) break;
    m.size = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(m.size, m.set.get());
    if (sched_getaffinity(::getpid(), m.size, m.set.get()) == 0) return m;
    if (errno != EINVAL) break;  // (EINVAL: the kernel's mask is larger)
  }
  return CpuMask{};
}

// The scheduling policy, its priority and the nice value of the process's
// main thread, for the workers to take (policy -1: not read).
struct SchedState {
  int policy = -1;
  sched_param param{};
  bool has_nice = false;
  int nice = 0;
};

SchedState main_thread_sched() {
  SchedState s;
  const pid_t main = ::getpid();
  const int policy = sched_getscheduler(main);
  if (policy >= 0 && sched_getparam(main, &s.param) == 0) s.policy = policy & ~SCHED_RESET_ON_FORK;
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(main));  // Linux: that thread's
  if (nice != -1 || errno == 0) {
    s.has_nice = true;
    s.nice = nice;
  }
  return s;
}

// This thread to `s` where the system allows it: leaving a real-time or
// batch policy always is; a lower nice value or leaving SCHED_IDLE needs
// CAP_SYS_NICE or RLIMIT_NICE, without which the creator's stays.
void take_sched(const SchedState& s) {
  if (s.policy >= 0) sched_setscheduler(0, s.policy, &s.param);  // (0: this thread)
  if (s.has_nice) setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), s.nice);
}
#endif

// Tests: at most this many workers start in the next pools made (-1: as
// many as asked for); see limit_worker_starts.
std::atomic<int32_t> g_worker_start_limit{-1};

// Every signal blocked in this thread while it lives (and in threads it
// creates meanwhile, which inherit the mask).
class AllSignalsBlocked {
 public:
  AllSignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~AllSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  AllSignalsBlocked(const AllSignalsBlocked&) = delete;
  AllSignalsBlocked& operator=(const AllSignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

struct Job {
  const IndexFn* fn = nullptr;
  int64_t n = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  int32_t max_helpers = 0;          // workers allowed besides the caller
  std::atomic<int32_t> helpers{0};  // workers that joined
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // guarded by error_mutex
  std::mutex error_mutex;
  std::mutex done_mutex;
  std::condition_variable done_cv;

  // Claims and runs iterations until none are left; returns with the
  // vector state clean (the iterations' kernels may leave it dirty).
  void work() {
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) {
        clean_vector_state();
        return;
      }
      if (!failed.load(std::memory_order_relaxed)) {
        try {
          (*fn)(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
          failed.store(true, std::memory_order_relaxed);
        }
      }
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
        std::lock_guard<std::mutex> lock(done_mutex);
        done_cv.notify_all();
      }
    }
  }
};

class Pool {
 public:
  // The workers are the library's, not the host thread's whose call made
  // the pool: they start with every signal blocked (the host's signals go
  // to its own threads: a sigwait thread, Python's main thread), on the
  // process's CPUs (a thread pinned to one core made the pool, as an actor
  // runtime's are, and every worker inherited that one core), with the
  // main thread's scheduling policy and nice value where the system allows
  // (a real-time creator made real-time workers, which starve the host's
  // other threads on their cores while they watch for the next job), and
  // named "nvfp4-worker" (top, gdb, py-spy).
  explicit Pool(int32_t workers) {
#if defined(__linux__)
    affinity_ = main_thread_affinity();
    sched_ = main_thread_sched();
#endif
    const AllSignalsBlocked blocked;
    threads_.reserve(static_cast<size_t>(workers));
    // The system may refuse threads (a container's pids limit, ulimit -u,
    // memory): the pool then has the workers it got, and calls use fewer
    // threads. (An exception here destroyed the joinable threads already
    // started: std::terminate.)
    const int32_t allowed = g_worker_start_limit.load(std::memory_order_relaxed);
    for (int32_t i = 0; i < workers; ++i) {
      try {
        if (allowed >= 0 && i >= allowed) throw std::system_error(EAGAIN, std::generic_category());
        threads_.emplace_back([this] { loop(); });
      } catch (const std::exception& e) {  // (std::system_error; std::bad_alloc)
        start_warning_ = "worker pool: started " + std::to_string(i) + " of " + std::to_string(workers) +
                         " worker threads (" + e.what() + "); calls use fewer threads";
        break;
      }
    }
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true);
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  int32_t workers() const {
    return static_cast<int32_t>(threads_.size());
  }
  // Why fewer workers started than asked for ("" when all did).
  const std::string& start_warning() const {
    return start_warning_;
  }

  void run(const std::shared_ptr<Job>& job) {
    if (job->max_helpers > 0) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(job);
      }
      posted_.fetch_add(1, std::memory_order_release);
      if (job->max_helpers == 1) {
        cv_.notify_one();
      } else {
        cv_.notify_all();
      }
    }
    job->work();
    if (job->max_helpers > 0 &&
        !spin_until([&] { return job->done.load(std::memory_order_acquire) >= job->n; }, kCallerSpin)) {
      std::unique_lock<std::mutex> lock(job->done_mutex);
      job->done_cv.wait(lock, [&] { return job->done.load(std::memory_order_acquire) >= job->n; });
    }
    if (job->max_helpers > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        if (*it == job) {
          queue_.erase(it);
          break;
        }
      }
    }
  }

 private:
  void loop() {
    t_in_worker = true;
    set_default_fp_controls();  // (a thread starts with its creator's, a host thread's)
#if defined(__linux__)
    if (affinity_.count() > 0) sched_setaffinity(0, affinity_.size, affinity_.set.get());
    take_sched(sched_);
    pthread_setname_np(pthread_self(), "nvfp4-worker");
#endif
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_.load() || has_open_job(); });
      if (stop_.load()) return;
      std::shared_ptr<Job> job = take_open_job();
      if (!job) continue;
      lock.unlock();
      job->work();
      job.reset();
      const uint64_t seen = posted_.load(std::memory_order_acquire);
      spin_until([&] { return posted_.load(std::memory_order_acquire) != seen || stop_.load(); },
                 std::chrono::microseconds(worker_spin_us()));
      lock.lock();
    }
  }

  // A job with iterations left and room for one more helper.
  bool has_open_job() const {
    for (const auto& j : queue_) {
      if (j->next.load(std::memory_order_relaxed) < j->n &&
          j->helpers.load(std::memory_order_relaxed) < j->max_helpers) {
        return true;
      }
    }
    return false;
  }

  std::shared_ptr<Job> take_open_job() {
    for (std::shared_ptr<Job>& j : queue_) {
      if (j->next.load(std::memory_order_relaxed) >= j->n) continue;
      if (j->helpers.fetch_add(1, std::memory_order_relaxed) < j->max_helpers) return j;
    }
    return nullptr;
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};    // set under mutex_ (the wait's predicate), read while spinning too
  std::atomic<uint64_t> posted_{0};  // jobs posted so far
#if defined(__linux__)
  CpuMask affinity_;  // written before the workers start
  SchedState sched_;  // (the same)
#endif
  std::string start_warning_;
};

// The pool, made at the first parallel call. Workers = default threads - 1
// (the caller is the other one). Never destroyed: joining threads during
// static destruction can deadlock when the library is unloaded from an
// exiting host.
//
// fork() without exec (Python's multiprocessing and data loaders, prefork
// servers): the child inherits the pool's memory but none of its workers,
// and the pool's lock stays held if another thread of the parent held it
// at the fork. So the child leaves that pool alone (leaked, a few hundred
// bytes) and makes a new one at its first parallel call, its size read
// anew (a child given CPUs of its own by sched_setaffinity, as process
// pools partition a machine, gets as many threads); without this a
// child ran every product on its calling thread, and one forked while
// another thread was posting a job hung (tests/test_host_process.cpp: 2
// hangs in 40 forks).
std::mutex g_pool_mutex;                    // serializes the pool's creation; held across fork()
std::atomic<int32_t> g_default_threads{0};  // default_num_threads(), 0 until read
std::atomic<Pool*> g_pool{nullptr};

Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p != nullptr) return *p;
  std::string warning;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    p = g_pool.load(std::memory_order_relaxed);
    if (p == nullptr) {
      p = new Pool(default_num_threads() - 1);
      g_pool.store(p, std::memory_order_release);
      warning = p->start_warning();
    }
  }
  // (Outside the lock: the host's log callback may call the library.)
  if (!warning.empty()) log_message(Q4_LOG_WARN, warning);
  return *p;
}

void pool_before_fork() {
  g_pool_mutex.lock();
}
void pool_after_fork_in_parent() {
  g_pool_mutex.unlock();
}
void pool_after_fork_in_child() {
  g_pool.store(nullptr, std::memory_order_relaxed);
  g_default_threads.store(0, std::memory_order_relaxed);  // (a child often gets CPUs of its own)
  g_pool_mutex.unlock();
}
// Registered at load (no other thread can be in the library then); glibc
// drops a shared object's handlers when it is unloaded.
[[maybe_unused]] const int g_pool_fork_handlers =
    pthread_atfork(pool_before_fork, pool_after_fork_in_parent, pool_after_fork_in_child);

}  // namespace

int32_t cgroup_quota_cpus(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int32_t>(std::min<int64_t>(kMaxThreads, (quota + period - 1) / period));
}

int32_t cgroup2_cpu_max_cpus(const std::string& text) {
  // "<quota> <period>" in µs, quota "max" when unlimited.
  const char* p = text.c_str();
  char* end = nullptr;
  const long long quota = std::strtoll(p, &end, 10);
  if (end == p) return 0;  // "max" or unreadable
  p = end;
  const long long period = std::strtoll(p, &end, 10);
  return cgroup_quota_cpus(quota, end == p ? 100000 : period);
}

namespace {

// The text of a small file, up to 64 KiB ("" when it cannot be read).
std::string read_small_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return "";
  std::string text(size_t{64} << 10, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  return text;
}

// best = the smaller of the positive ones of best and q (0: none yet).
void keep_smallest(int32_t& best, int32_t q) {
  if (q > 0 && (best == 0 || q < best)) best = q;
}

// The smallest positive quota(dir) over `dir` = base + each prefix of
// `path` (base itself included); 0 when none is.
template <class Quota>
int32_t min_quota_up_the_tree(const std::string& base, const std::string& path, Quota&& quota) {
  int32_t best = 0;
  std::string dir = base;
  size_t pos = 0;
  for (;;) {
    keep_smallest(best, quota(dir));
    while (pos < path.size() && path[pos] == '/') ++pos;
    if (pos >= path.size()) return best;
    const size_t next = std::min(path.find('/', pos), path.size());
    dir += "/" + path.substr(pos, next - pos);
    pos = next;
  }
}

}  // namespace

int32_t cgroup_cpu_limit(const std::string& root, const std::string& proc_cgroup) {
  auto v2_quota = [](const std::string& dir) {
    return cgroup2_cpu_max_cpus(read_small_file(dir + "/cpu.max"));
  };
  auto v1_quota = [](const std::string& dir) {
    const std::string quota = read_small_file(dir + "/cpu.cfs_quota_us");
    const std::string period = read_small_file(dir + "/cpu.cfs_period_us");
    if (quota.empty() || period.empty()) return 0;
    return cgroup_quota_cpus(std::strtoll(quota.c_str(), nullptr, 10),
                             std::strtoll(period.c_str(), nullptr, 10));
  };
  int32_t best = 0;
  size_t line_start = 0;
  while (line_start < proc_cgroup.size()) {
    const size_t line_end = std::min(proc_cgroup.find('\n', line_start), proc_cgroup.size());
    const std::string line = proc_cgroup.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    // "<id>:<controllers>:<path>"
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string::npos ? std::string::npos : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    const std::string id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path = line.substr(c2 + 1);
    if (id == "0" && controllers.empty()) {  // cgroup v2
      keep_smallest(best, min_quota_up_the_tree(root, path, v2_quota));
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {  // v1's cpu controller
      for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
        keep_smallest(best, min_quota_up_the_tree(root + mount, path, v1_quota));
      }
    }
  }
  return best;
}

int32_t available_cpus() {
#if defined(__linux__)
  int32_t n = main_thread_affinity().count();
#else
  int32_t n = 0;
#endif
  if (n <= 0) {
    const unsigned hc = std::thread::hardware_concurrency();
    n = hc > 0 ? static_cast<int32_t>(std::min<unsigned>(hc, kMaxThreads)) : 1;
  }
  const int32_t limit = cgroup_cpu_limit("/sys/fs/cgroup", read_small_file("/proc/self/cgroup"));
  if (limit > 0) n = std::min(n, limit);
  return std::clamp<int32_t>(n, 1, kMaxThreads);
}

int32_t default_num_threads() {
  int32_t n = g_default_threads.load(std::memory_order_relaxed);
  if (n == 0) {  // (threads racing here compute the same value)
    if (const char* env = std::getenv("Q4_NUM_THREADS")) {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && v >= 1 && v <= kMaxThreads) n = static_cast<int32_t>(v);
    }
    if (n == 0) n = available_cpus();
    g_default_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

int64_t worker_spin_us() {
  return worker_spin_ref().load(std::memory_order_relaxed);
}

void set_worker_spin_us(int64_t us) {
  worker_spin_ref().store(std::clamp<int64_t>(us, 0, 1000000), std::memory_order_relaxed);
}

void limit_worker_starts(int32_t n) {
  g_worker_start_limit.store(n < 0 ? -1 : n, std::memory_order_relaxed);
}

bool in_pool_worker() {
  return t_in_worker;
}

void parallel_for(int64_t n, int32_t threads, IndexFn fn) {
  if (n <= 0) return;
  const int32_t want = threads > 0 ? threads : default_num_threads();
  if (n == 1 || want <= 1 || t_in_worker) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    clean_vector_state();
    return;
  }
  Pool& p = pool();
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  int64_t helpers = std::min<int64_t>(want - 1, n - 1);
  if (helpers > p.workers()) helpers = p.workers();
  job->max_helpers = static_cast<int32_t>(helpers);
  p.run(job);
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace q4
