// cuBLASLt products (cuda/lt_gemm.cu): the fp32 GEMM behind every large-M
// weight-only product, the block-scaled FP4 GEMM of scaled_mm, and the
// dequantize-then-GEMM route. All are row-major Y[M,N] = X[M,K] . W[N,K]^T,
// run as cuBLASLt "TN" with A = W and B = X (q4::cuda::lt_fp4_gemm_params).
// The cuBLASLt objects are owned by the RAII types of src/plugin/lt_objects.h.
#pragma once

#include <functional>
#include <string>

#include "common.cuh"
#include "plugin/lt_objects.h"

namespace q4::cuda_plugin {

// fp32 GEMM; y is [M, N] fp32 with rows ldy apart (ldy = N, or wider for
// a column tile). The heuristic answer is cached per shape and alignment.
int32_t lt_gemm_f32(DeviceState& ds, int64_t M, int64_t N, int64_t K, const float* x, const float* w,
                    float* y, int64_t ldy, cudaStream_t stream);

// Block-scaled FP4 GEMM, y[M,N] fp32 = alpha * X . W^T with swizzled
// VEC16_UE4M3 scales (elem kFp4E2M1, NVFP4) or VEC32_UE8M0 scales (elem
// kFp4E2M1Mx, MXFP4; p from lt_mxfp4_gemm_params). Heuristic answers ("none" included) are cached per
// shape, layout and operand alignment; below compute capability 10 nothing
// is asked.
// Setup errors return a status; "cuBLASLt cannot do this here" (no
// algorithm, or the matmul refused) returns Q4_OK with *done = false and
// the reason in *why, for the caller to fall back or report.
int32_t lt_gemm_fp4(DeviceState& ds, const q4::cuda::LtGemmParams& p, int32_t layout, const void* x_q,
                    const void* x_scale_swizzled, const void* w_q, const void* w_scale_swizzled, float alpha,
                    float* y, cudaStream_t stream, bool* done, std::string* why,
                    q4::cuda::LtElem elem = q4::cuda::LtElem::kFp4E2M1);

// The large-M weight-only product of both formats, in column tiles of the
// output (q4::cuda::dequant_tile_rows: a bounded fp32 scratch, not all of
// W): `dequantize(w32, row0, rows)` writes rows [row0, row0 + rows) of W as
// fp32 [rows, K]; activations are converted to fp32 once when needed; one
// fp32 GEMM per tile into the [M, N] accumulator; then bias and the output
// dtype in the epilogue. Reads op.x, x_type, m, n, k, bias, bias_type, out,
// out_type.
int32_t dequant_then_gemm(DeviceState& ds, const nvfp4_cuda_op& op, cudaStream_t stream,
                          const std::function<int32_t(float* w32, int64_t row0, int64_t rows)>& dequantize);

}  // namespace q4::cuda_plugin
