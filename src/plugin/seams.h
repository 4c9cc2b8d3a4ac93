// Everything about the CUDA backend that can be computed without a GPU, as
// plain functions with CPU unit tests (tests/test_cuda_seams.cpp): cuBLASLt
// descriptor parameters, scale-buffer sizes, launch geometry, capability
// interpretation, architecture lists. The plugin calls these same functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/codec.h"

namespace q4::cuda {

// ---------------------------------------------------------------------------
// cuBLASLt block-scaled FP4 GEMM, row-major Y[M,N] = X[M,K] . W[N,K]^T.
// cuBLASLt is column-major: Y^T[N,M] = op(A)[N,K] . op(B)[K,M] with A = W
// (stored [N,K] row-major = [K,N] column-major, transposed: TRANSA = T) and
// B = X (stored [M,K] row-major = [K,M] column-major: TRANSB = N). "TN".
// ---------------------------------------------------------------------------
struct LtGemmParams {
  bool trans_a = true;          // CUBLAS_OP_T
  bool trans_b = false;         // CUBLAS_OP_N
  int64_t m = 0, n = 0, k = 0;  // cuBLAS dims: m = N (out features), n = M (rows of X)
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t a_rows = 0, a_cols = 0;                // layout of A as stored (column-major): K x N
  int64_t b_rows = 0, b_cols = 0;                // K x M
  int64_t c_rows = 0, c_cols = 0;                // N x M
  int64_t a_scale_bytes = 0, b_scale_bytes = 0;  // swizzled VEC16_UE4M3 buffers
  bool valid = false;
  std::string why_invalid;
};

inline LtGemmParams lt_fp4_gemm_params(int64_t M, int64_t N, int64_t K) {
  LtGemmParams p;
  p.m = N;
  p.n = M;
  p.k = K;
  p.lda = K;  // elements (4-bit) between columns of A as stored
  p.ldb = K;
  p.ldc = N;
  p.a_rows = K;
  p.a_cols = N;
  p.b_rows = K;
  p.b_cols = M;
  p.c_rows = N;
  p.c_cols = M;
  p.a_scale_bytes = fmt::swizzled_rows(N) * fmt::swizzled_cols(K / 16);
  p.b_scale_bytes = fmt::swizzled_rows(M) * fmt::swizzled_cols(K / 16);
  // cuBLASLt FP4 requires K a multiple of 32 (packed pairs, 16-element
  // scale blocks, 16-byte aligned rows) and 16-byte aligned leading dims.
  if (M <= 0 || N <= 0 || K <= 0) {
    p.why_invalid = "empty problem";
  } else if (K % 32 != 0) {
    p.why_invalid = "K must be a multiple of 32 for cuBLASLt FP4 (rows of 16-byte multiples)";
  } else if (N % 16 != 0) {
    p.why_invalid = "N must be a multiple of 16 for cuBLASLt FP4 output alignment";
  } else {
    p.valid = true;
  }
  return p;
}

// Output conversion of every CUDA kernel (store_f in cuda/common.cuh): the
// CPU codec itself, so results are bit-identical to the CPU's, NaN
// included (fp16: sign | 0x7e00; bf16: the input's top half, quieted). The
// intrinsics __float2half_rn / __float2bfloat16_rn write one canonical NaN
// (0x7fff) instead; for finite values and infinities both round to nearest
// even and agree (tests/test_codec_cuda.cpp).
Q4_HD uint16_t out_f16_bits(float v) {
  return fmt::f32_to_f16(v);
}
Q4_HD uint16_t out_bf16_bits(float v) {
  return fmt::f32_to_bf16(v);
}

// cuBLASLt's block-scaled FP4 GEMM needs Blackwell-class tensor cores
// (compute capability 10.0 and later); on older devices (sm_80, sm_90) the
// plugin does not even build the FP4 descriptors.
inline bool lt_fp4_device_possible(int cc_major) {
  return cc_major >= 10;
}

// Global scales are folded into alpha (as cuBLASLt does): y = alpha * sum.
inline float folded_alpha(float alpha, float g_a, float g_b) {
  return alpha * g_a * g_b;
}

// ---------------------------------------------------------------------------
// Dequantize-then-GEMM in column tiles: rows of W (output features) per
// tile so that the fp32 scratch of one tile stays within `budget_bytes`
// (at least one row; a multiple of 16 rows when more than 16 fit, keeping
// each tile's output columns 64-byte aligned). For a 28672 x 8192 layer
// and 64 MiB: 2048 rows, 14 tiles, instead of 940 MB for all of W.
// ---------------------------------------------------------------------------
constexpr int64_t kDequantScratchBytes = int64_t{64} << 20;

inline int64_t dequant_tile_rows(int64_t n, int64_t k, int64_t budget_bytes) {
  if (n <= 0) return 1;
  const int64_t row_bytes = (k > 0 ? k : 1) * 4;
  int64_t rows = budget_bytes / row_bytes;
  if (rows >= 16) rows -= rows % 16;
  if (rows < 1) rows = 1;
  return rows < n ? rows : n;
}

// ---------------------------------------------------------------------------
// Launch geometry.
// ---------------------------------------------------------------------------
struct Launch {
  int64_t blocks = 0;
  int32_t threads = 0;
};

// One thread per 16-element NVFP4 block (quantize / dequantize).
inline Launch blocks_launch(int64_t nblocks, int32_t threads = 256) {
  Launch l;
  l.threads = threads;
  l.blocks = (nblocks + threads - 1) / threads;
  if (l.blocks < 1) l.blocks = 1;
  return l;
}

// GEMV: one warp per output feature, `warps` per CTA.
inline Launch gemv_launch(int64_t n, int32_t warps = 8) {
  Launch l;
  l.threads = 32 * warps;
  l.blocks = (n + warps - 1) / warps;
  if (l.blocks < 1) l.blocks = 1;
  return l;
}

// Grid-stride elementwise kernels, capped to keep the grid modest.
inline Launch elementwise_launch(int64_t n, int32_t sm_count, int32_t threads = 256) {
  Launch l;
  l.threads = threads;
  const int64_t want = (n + threads - 1) / threads;
  const int64_t cap = sm_count > 0 ? int64_t{32} * sm_count : 4096;
  l.blocks = want < 1 ? 1 : (want < cap ? want : cap);
  return l;
}

// ---------------------------------------------------------------------------
// Capability interpretation.
// ---------------------------------------------------------------------------
struct DeviceCaps {
  bool managed = false;           // managed memory usable
  bool zero_copy = false;         // CPU and GPU access managed memory concurrently
  bool prefetch = false;          // cudaMemPrefetchAsync to this device is allowed (concurrentManagedAccess)
  bool fp4_tensor_cores = false;  // block-scaled FP4 GEMM hardware
  bool arch_compiled = false;     // a compiled target runs on this device
  std::string fp4_arch;           // the family-specific target that has FP4 ("100a", "120a", ...)
};

// Compiled architectures like {"80", "90", "100a", "120a"}.
inline std::vector<std::string> split_archs(const std::string& list) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : list) {
    if (c == ';' || c == ',' || c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// SASS for sm_XY runs on devices of the same major with minor >= Y (for the
// plain targets); a family-specific "a" target runs only on exactly XY.
inline bool arch_runs_on(const std::string& arch, int cc_major, int cc_minor) {
  if (arch.empty()) return false;
  const bool specific = arch.back() == 'a' || arch.back() == 'f';
  const std::string digits = specific ? arch.substr(0, arch.size() - 1) : arch;
  if (digits.size() < 2) return false;
  const int value = std::stoi(digits);
  const int major = value / 10, minor = value % 10;
  if (arch.back() == 'a') return major == cc_major && minor == cc_minor;
  return major == cc_major && minor <= cc_minor;
}

inline DeviceCaps interpret_caps(int cc_major, int cc_minor, int managed_attr, int concurrent_attr,
                                 int pageable_attr, const std::string& compiled_archs) {
  DeviceCaps c;
  c.managed = managed_attr != 0;
  c.zero_copy = managed_attr != 0 && (concurrent_attr != 0 || pageable_attr != 0);
  // CUDA refuses a prefetch to a device without concurrent managed access
  // (pageable access alone is not enough).
  c.prefetch = managed_attr != 0 && concurrent_attr != 0;
  const std::vector<std::string> archs = split_archs(compiled_archs);
  for (const std::string& a : archs) {
    if (arch_runs_on(a, cc_major, cc_minor)) c.arch_compiled = true;
  }
  // Block-scaled FP4 MMA: Blackwell datacenter (10.x) and consumer/GB10
  // (12.x), through a family-specific target compiled for this exact CC.
  if (cc_major == 10 || cc_major == 12) {
    const std::string want = std::to_string(cc_major * 10 + cc_minor) + "a";
    for (const std::string& a : archs) {
      if (a == want) {
        c.fp4_tensor_cores = true;
        c.fp4_arch = want;
      }
    }
  }
  return c;
}

// ---------------------------------------------------------------------------
// Plugin search order. NVFP4_CUDA_PLUGIN, when set, overrides the search:
// only that file is tried. Otherwise: next to the core library as it was
// loaded (core_dirs[0], e.g. a directory holding a symlink to it), next to
// the file the core really is (core_dirs[1], the symlink resolved), then the
// loader's search path.
// ---------------------------------------------------------------------------
inline std::vector<std::string> plugin_search_order(const std::vector<std::string>& core_dirs,
                                                    const char* env_override) {
  std::vector<std::string> order;
  if (env_override != nullptr && *env_override != '\0') {
    order.emplace_back(env_override);
    return order;
  }
  const std::string name = "libNVFP4_cuda.so";
  for (const std::string& dir : core_dirs) {
    if (dir.empty()) continue;
    std::string path = dir;
    path += '/';
    path += name;
    bool seen = false;
    for (const std::string& p : order) seen = seen || p == path;
    if (!seen) order.push_back(path);
  }
  order.push_back(name);  // bare name: dlopen searches LD_LIBRARY_PATH, rpath, ld.so.cache
  return order;
}

}  // namespace q4::cuda
