// Resolution of Q4_op_options (docs/abi.md §8) into what a call does.
#pragma once

#include <cstdint>

#include "nvfp4/q4_base.h"

namespace q4 {

// Which implementation a product runs on the CPU.
enum class CpuPath : uint8_t {
  Kernel,         // fused kernel on packed data
  DequantMatmul,  // dequantize to fp32, then an fp32 GEMM
};

struct ResolvedOptions {
  int32_t compute_path = Q4_PATH_AUTO;
  int32_t backend = Q4_BACKEND_AUTO;
  int32_t target = Q4_TARGET_AUTO;
  int32_t math_mode = Q4_MATH_EXACT;
  int32_t num_threads = 0;
  void* stream = nullptr;
};

// Validates `opts` (NULL = defaults): struct_size, every enum, reserved
// fields zero. A CUDA target is Q4_ERR_NOT_AVAILABLE until the CUDA backend
// is loaded.
ResolvedOptions resolve_options(const Q4_op_options* opts);
// The same for calls on CUDA tensors (a CUDA target is then fine).
ResolvedOptions resolve_options_allow_cuda(const Q4_op_options* opts);

// Picks the CPU path of a product of `format` (Q4_FORMAT_NVFP4/NF4) under the
// options: a forced backend the format cannot run is Q4_ERR_UNSUPPORTED.
CpuPath choose_cpu_path(const ResolvedOptions& o, int32_t format);

}  // namespace q4
