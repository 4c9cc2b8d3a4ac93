// The library's own worker pool (no OpenMP runtime forced on the host).
//
// parallel_for(n, threads, fn) runs fn(i) for i in [0, n). The calling
// thread always works on its own job, so a call makes progress even when
// every worker is busy with other callers' jobs (many actors calling at
// once share the workers instead of oversubscribing the machine). A call
// made from inside a pool worker runs inline, so a kernel invoked from a
// callback can never deadlock the pool.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace q4 {

constexpr int32_t kMaxThreads = 1024;

// Default thread count, read once per process (and once more in a child
// after fork): Q4_NUM_THREADS if set (1 to kMaxThreads), else
// available_cpus().
int32_t default_num_threads();

// The CPUs this process may run on: the affinity mask of its main thread
// (taskset, numactl, a cpuset cgroup: Slurm, Kubernetes' static CPU
// manager), capped by the CPU quota of its cgroup rounded up (docker
// --cpus, Kubernetes CPU limits, systemd's CPUQuota); the online CPUs where
// no mask can be read.
// (The online CPUs alone would put a 64-core host's 64 threads on a
// container's 2 CPUs, each worker spinning through its watch.)
int32_t available_cpus();

// CPUs a CPU quota allows: quota / period rounded up, 0 when unlimited
// (quota <= 0); and the same from the text of a cgroup v2 cpu.max file
// ("150000 100000", "max 100000").
int32_t cgroup_quota_cpus(int64_t quota, int64_t period);
int32_t cgroup2_cpu_max_cpus(const std::string& text);

// CPUs the CPU quotas allow on the way from the cgroup file systems'
// root (mounted at `root`: v2 there, v1 at root/cpu, root/cpu,cpuacct)
// down to the cgroups `proc_cgroup` (the text of /proc/self/cgroup) names:
// the smallest quota of any level (a systemd slice's CPUQuota, a
// container's limit), levels that do not exist skipped (a container sees
// its own cgroup at the root); 0 when none is set.
int32_t cgroup_cpu_limit(const std::string& root, const std::string& proc_cgroup);

// A reference to a callable that takes an index (parallel_for's body),
// which it does not own: valid while the callable lives, as a temporary
// made for a call to parallel_for does until parallel_for returns. Unlike
// a std::function made from a lambda that captures more than two
// pointers, making one allocates nothing (a product of a small layer paid
// a malloc and a free per parallel_for; docs/performance.md, sixty-third
// session).
class IndexFn {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, IndexFn>>>
  IndexFn(const F& f) noexcept  // (implicit: made from every lambda passed to parallel_for)
      : obj_(&f), call_([](const void* o, int64_t i) { (*static_cast<const F*>(o))(i); }) {}
  void operator()(int64_t i) const { call_(obj_, i); }

 private:
  const void* obj_;
  void (*call_)(const void*, int64_t);
};

// Runs fn(0..n-1) with at most `threads` threads (0 = default), the caller
// included. Exceptions thrown by fn are rethrown in the caller (the first
// one); the remaining iterations are skipped.
void parallel_for(int64_t n, int32_t threads, IndexFn fn);

// How long a worker that finished a job watches for the next one before
// it sleeps, in µs: Q4_SPIN_US (0 to 1000000) when set to such a value,
// else 1000. set_worker_spin_us changes it for the whole process (clamped
// to that range; for measurements, nvfp4-bench --only gaps).
int64_t worker_spin_us();
void set_worker_spin_us(int64_t us);

// Tests: pools made from now on start at most n workers, as if the system
// refused the rest (a pids limit); n < 0 lifts the limit. A pool that gets
// fewer workers than asked for keeps them and logs a warning.
void limit_worker_starts(int32_t n);

// True inside a pool worker (used to run nested calls inline).
bool in_pool_worker();

}  // namespace q4
