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
#include <functional>

namespace q4 {

// Default thread count: Q4_NUM_THREADS if set (>= 1), else the online CPUs.
int32_t default_num_threads();

// Runs fn(0..n-1) with at most `threads` threads (0 = default), the caller
// included. Exceptions thrown by fn are rethrown in the caller (the first
// one); the remaining iterations are skipped.
void parallel_for(int64_t n, int32_t threads, const std::function<void(int64_t)>& fn);

// How long a worker that finished a job watches for the next one before
// it sleeps, in µs: Q4_SPIN_US (0 to 1000000) when set to such a value,
// else 1000. set_worker_spin_us changes it for the whole process (clamped
// to that range; for measurements, nvfp4-bench --only gaps).
int64_t worker_spin_us();
void set_worker_spin_us(int64_t us);

// True inside a pool worker (used to run nested calls inline).
bool in_pool_worker();

}  // namespace q4
