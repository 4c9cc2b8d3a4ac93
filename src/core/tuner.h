// The matmul tuner: grid search over the panel GEMM's cache blocking and
// the small-batch settings (largest M, K chunk), persisted per CPU
// signature, loaded on first use.
#pragma once

#include <string>

#include "kernels/cpu_ops.h"
#include "nvfp4/q4_base.h"

namespace q4::tuner {

// "vendor|brand|features|cpus" — what a tuning result is valid for.
std::string cpu_signature();

// $XDG_CACHE_HOME/nvfp4/matmul_tuning.json or ~/.cache/nvfp4/... ("" if
// neither variable is set). NVFP4_TUNING_FILE overrides.
std::string cache_path();

// Loads the persisted blocking for this CPU once per process (thread-safe);
// Q4_TUNING=off skips it. Never throws: a broken file is ignored (logged).
void ensure_loaded();

// Runs the grid search on a dim^3 fp32 GEMM plus an exact NVFP4 panel
// product (Q4_tune_matmul); adopts the best blocking if it beats the
// defaults by the margin and slows neither; optionally persists it.
void tune(int32_t dim, int32_t runs, bool persist, Q4_tune_result* out);

}  // namespace q4::tuner
