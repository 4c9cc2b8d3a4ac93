#include "core/options.h"

#include <cstddef>
#include <string>

#include "common/error.h"
#include "common/struct_size.h"

namespace q4 {
namespace {

void require_range(int32_t v, int32_t lo, int32_t hi, const char* field) {
  if (v < lo || v > hi) {
    fail(Q4_ERR_INVALID_ARGUMENT, std::string("opts->") + field,
         "expected a value in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
             std::to_string(v));
  }
}

}  // namespace

namespace {
ResolvedOptions resolve(const Q4_op_options* opts, bool allow_cuda);
}  // namespace

ResolvedOptions resolve_options(const Q4_op_options* opts) {
  return resolve(opts, false);
}
ResolvedOptions resolve_options_allow_cuda(const Q4_op_options* opts) {
  return resolve(opts, true);
}

namespace {
ResolvedOptions resolve(const Q4_op_options* opts_in, bool allow_cuda) {
  ResolvedOptions r;
  if (opts_in == nullptr) return r;
  const Q4_op_options o = read_struct(opts_in, "opts");
  const Q4_op_options* opts = &o;
  require_range(opts->compute_path, Q4_PATH_AUTO, Q4_PATH_DEQUANT_MATMUL_ONLY, "compute_path");
  require_range(opts->backend, Q4_BACKEND_AUTO, Q4_BACKEND_DEQUANT_MATMUL, "backend");
  require_range(opts->target, Q4_TARGET_AUTO, Q4_TARGET_CUDA, "target");
  require_range(opts->math_mode, Q4_MATH_EXACT, Q4_MATH_FAST, "math_mode");
  if (opts->num_threads < 0) {
    fail(Q4_ERR_INVALID_ARGUMENT, "opts->num_threads",
         "expected >= 0 (0 = default), got " + std::to_string(opts->num_threads));
  }
  if (opts->reserved0 != 0) fail(Q4_ERR_INVALID_ARGUMENT, "opts->reserved0", "must be 0");
  for (uint64_t v : opts->reserved) {
    if (v != 0) fail(Q4_ERR_INVALID_ARGUMENT, "opts->reserved", "reserved fields must be 0");
  }
  if (opts->target == Q4_TARGET_CUDA && !allow_cuda) {
    fail(Q4_ERR_NOT_AVAILABLE, "opts->target",
         "CUDA target requested for host tensors; the CUDA backend runs on kDLCUDA tensors (see "
         "NVFP4_to_managed)");
  }
  r.compute_path = opts->compute_path;
  r.backend = opts->backend;
  r.target = opts->target;
  r.math_mode = opts->math_mode;
  r.num_threads = opts->num_threads;
  r.stream = opts->stream;
  return r;
}
}  // namespace

CpuPath choose_cpu_path(const ResolvedOptions& o, int32_t format) {
  const int32_t own_kernel = format == Q4_FORMAT_NF4 ? Q4_BACKEND_NF4_KERNEL : Q4_BACKEND_NVFP4_KERNEL;
  const int32_t other_kernel = format == Q4_FORMAT_NF4 ? Q4_BACKEND_NVFP4_KERNEL : Q4_BACKEND_NF4_KERNEL;
  if (o.backend == other_kernel) {
    fail(Q4_ERR_UNSUPPORTED, "opts->backend",
         std::string("backend ") + (other_kernel == Q4_BACKEND_NF4_KERNEL ? "nf4-kernel" : "nvfp4-kernel") +
             " cannot run " + (format == Q4_FORMAT_NF4 ? "NF4" : "NVFP4") + " data");
  }
  if (o.compute_path == Q4_PATH_DEQUANT_MATMUL_ONLY) {
    if (o.backend == own_kernel) {
      fail(Q4_ERR_INVALID_ARGUMENT, "opts->backend",
           "a kernel backend was forced together with compute_path DequantMatmulOnly");
    }
    return CpuPath::DequantMatmul;
  }
  if (o.backend == Q4_BACKEND_DEQUANT_MATMUL) {
    if (o.compute_path == Q4_PATH_KERNEL_ONLY) {
      fail(Q4_ERR_INVALID_ARGUMENT, "opts->backend",
           "backend dequant-matmul was forced together with compute_path KernelOnly");
    }
    return CpuPath::DequantMatmul;
  }
  return CpuPath::Kernel;
}

}  // namespace q4
