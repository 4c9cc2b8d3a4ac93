// MXFP4 products on CUDA (cuda/mxfp4_kernels.cu), the parameter choice that
// needs no GPU (tests/test_cuda_seams.cpp): the block-scaled cuBLASLt GEMM
// with 32-element UE8M0 scales (CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0,
// CUDA_R_4F_E2M1 operands) where the device has it, else dequantize + the
// fp32 cuBLASLt GEMM. Scales: the NVFP4 128x4 swizzled tiles, one byte per
// 32 elements (formats/codec.h).
#pragma once

#include <cstdint>
#include <string>

#include "plugin/seams.h"

namespace q4::cuda {

enum class LtScaleMode : uint8_t { kVec16Ue4m3, kVec32Ue8m0 };

// Bytes of one operand's swizzled E8M0 scales, rows x k elements.
inline int64_t mxfp4_swizzled_scale_bytes(int64_t rows, int64_t k) {
  return fmt::swizzled_rows(rows) * fmt::swizzled_cols(k / 32);
}

// The "TN" GEMM of lt_fp4_gemm_params with MXFP4's scale buffers (VEC32).
inline LtGemmParams lt_mxfp4_gemm_params(int64_t M, int64_t N, int64_t K) {
  LtGemmParams p = lt_fp4_gemm_params(M, N, K);
  p.a_scale_bytes = mxfp4_swizzled_scale_bytes(N, K);
  p.b_scale_bytes = mxfp4_swizzled_scale_bytes(M, K);
  return p;
}

// Block-scaled FP4 matmuls exist on the sm_100 and sm_120 families
// (compute capability 10.x, 11.x, 12.x).
inline bool lt_block_scaled_fp4_supported(int32_t cc_major) {
  return cc_major >= 10 && cc_major <= 12;
}

// How MXFP4_scaled_mm runs: the block-scaled GEMM (use_lt), or dequantize
// both operands + fp32 GEMM with `why` (a fallback unless the caller chose
// dequant-matmul).
struct Mxfp4GemmRoute {
  bool use_lt = false;
  LtScaleMode scale_mode = LtScaleMode::kVec32Ue8m0;
  LtGemmParams params;
  std::string why;
};

inline Mxfp4GemmRoute mxfp4_scaled_mm_route(int32_t cc_major, int64_t M, int64_t N, int64_t K,
                                            bool dequant_only) {
  Mxfp4GemmRoute r;
  r.params = lt_mxfp4_gemm_params(M, N, K);
  if (dequant_only) {
    r.why = "dequant-matmul requested";
  } else if (!lt_block_scaled_fp4_supported(cc_major)) {
    r.why = "block-scaled FP4 cuBLASLt (VEC32_UE8M0) needs compute capability 10.x-12.x, this device is " +
            std::to_string(cc_major) + ".x";
  } else if (!r.params.valid) {
    r.why = r.params.why_invalid;
  } else {
    r.use_lt = true;
  }
  return r;
}

}  // namespace q4::cuda
