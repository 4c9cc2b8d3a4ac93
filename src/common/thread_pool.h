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

// True inside a pool worker (used to run nested calls inline).
bool in_pool_worker();

}  // namespace q4
