// cuBLASLt GEMMs. Object creation and configuration go through
// q4::cuda::lt_build_gemm / lt_find_algo (src/plugin/lt_objects.h) instantiated
// with the real cuBLASLt below, so every object is destroyed on every path.
#include "lt_gemm.cuh"
#include "plugin/lt_objects.h"

namespace q4::cuda_plugin {

namespace {

using q4::cuda::LtDescAttr;
using q4::cuda::LtDescValue;
using q4::cuda::LtElem;

// The real cuBLASLt behind the injectable API of src/plugin/lt_objects.h.
struct RealLt {
  using Status = cublasStatus_t;
  using Desc = cublasLtMatmulDesc_t;
  using Layout = cublasLtMatrixLayout_t;
  using Pref = cublasLtMatmulPreference_t;
  using Algo = cublasLtMatmulAlgo_t;
  static constexpr Status kOk = CUBLAS_STATUS_SUCCESS;

  cublasLtHandle_t handle = nullptr;

  Status desc_create(Desc* d) { return cublasLtMatmulDescCreate(d, CUBLAS_COMPUTE_32F, CUDA_R_32F); }

  Status desc_set(Desc d, LtDescAttr attr, const LtDescValue& v) {
    switch (attr) {
      case LtDescAttr::kTransA:
      case LtDescAttr::kTransB: {
        const cublasOperation_t op = v.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
        return cublasLtMatmulDescSetAttribute(
            d, attr == LtDescAttr::kTransA ? CUBLASLT_MATMUL_DESC_TRANSA : CUBLASLT_MATMUL_DESC_TRANSB, &op,
            sizeof op);
      }
      case LtDescAttr::kAScaleModeVec16Ue4m3:
      case LtDescAttr::kBScaleModeVec16Ue4m3:
      case LtDescAttr::kAScaleModeVec32Ue8m0:
      case LtDescAttr::kBScaleModeVec32Ue8m0: {
        const bool vec32 =
            attr == LtDescAttr::kAScaleModeVec32Ue8m0 || attr == LtDescAttr::kBScaleModeVec32Ue8m0;
        const bool a = attr == LtDescAttr::kAScaleModeVec16Ue4m3 || attr == LtDescAttr::kAScaleModeVec32Ue8m0;
        const cublasLtMatmulMatrixScale_t mode =
            vec32 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 : CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
        return cublasLtMatmulDescSetAttribute(
            d, a ? CUBLASLT_MATMUL_DESC_A_SCALE_MODE : CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
      }
      case LtDescAttr::kAScalePointer:
      case LtDescAttr::kBScalePointer: {
        const void* ptr = v.pointer;
        return cublasLtMatmulDescSetAttribute(d,
                                              attr == LtDescAttr::kAScalePointer
                                                  ? CUBLASLT_MATMUL_DESC_A_SCALE_POINTER
                                                  : CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &ptr, sizeof ptr);
      }
    }
    return CUBLAS_STATUS_INVALID_VALUE;
  }

  Status layout_create(Layout* l, LtElem e, int64_t rows, int64_t cols, int64_t ld) {
    return cublasLtMatrixLayoutCreate(l, q4::cuda::lt_is_fp4(e) ? CUDA_R_4F_E2M1 : CUDA_R_32F,
                                      static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld);
  }

  Status pref_create(Pref* p) { return cublasLtMatmulPreferenceCreate(p); }

  Status pref_set_workspace(Pref p, size_t bytes) {
    const uint64_t b = bytes;
    return cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &b, sizeof b);
  }

  Status pref_set_alignment(Pref p, q4::cuda::LtOperand o, uint32_t bytes) {
    cublasLtMatmulPreferenceAttributes_t attr = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
    switch (o) {
      case q4::cuda::LtOperand::kA:
        attr = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
        break;
      case q4::cuda::LtOperand::kB:
        attr = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES;
        break;
      case q4::cuda::LtOperand::kC:
        attr = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES;
        break;
      case q4::cuda::LtOperand::kD:
        attr = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES;
        break;
    }
    return cublasLtMatmulPreferenceSetAttribute(p, attr, &bytes, sizeof bytes);
  }

  Status heuristic(Desc d, Layout a, Layout b, Layout c, Pref p, Algo* algo, int* found) {
    cublasLtMatmulHeuristicResult_t result{};
    const Status s = cublasLtMatmulAlgoGetHeuristic(handle, d, a, b, c, c, p, 1, &result, found);
    if (s == kOk && *found > 0) *algo = result.algo;
    return s;
  }

  void destroy(Desc d) { cublasLtMatmulDescDestroy(d); }
  void destroy(Layout l) { cublasLtMatrixLayoutDestroy(l); }
  void destroy(Pref p) { cublasLtMatmulPreferenceDestroy(p); }
};

using Gemm = q4::cuda::LtGemm<RealLt>;

}  // namespace

namespace {

q4::cuda::LtAlgoKey algo_key(const q4::cuda::LtGemmParams& p, LtElem elem, int32_t layout, const void* a,
                             const void* b, const void* c) {
  q4::cuda::LtAlgoKey key;
  key.m = p.m;
  key.n = p.n;
  key.k = p.k;
  key.ldc = p.ldc;
  key.elem = static_cast<int32_t>(elem);
  key.scale_layout = layout;
  key.align = q4::cuda::lt_alignment(a, b, c);
  return key;
}

}  // namespace

int32_t lt_gemm_f32(DeviceState& ds, int64_t M, int64_t N, int64_t K, const float* x, const float* w,
                    float* y, int64_t ldy, cudaStream_t stream) {
  RealLt api{ds.lt};
  Gemm g;
  q4::cuda::LtGemmParams p = q4::cuda::lt_fp4_gemm_params(M, N, K);
  p.ldc = ldy;  // a column tile of a wider output
  cublasLtMatmulAlgo_t algo{};
  bool have_algo = false;
  const auto r = q4::cuda::lt_plan_gemm(api, ds.algos, algo_key(p, LtElem::kF32, 0, w, x, y), p, LtElem::kF32,
                                        nullptr, nullptr, kWorkspaceBytes, g, &algo, &have_algo);
  if (!r.ok()) return fail_lt(r.status, r.step);
  if (!g.desc) {  // cached "no algorithm": build the GEMM to let cublasLtMatmul choose
    const auto b = q4::cuda::lt_build_gemm(api, p, LtElem::kF32, nullptr, nullptr, g);
    if (!b.ok()) return fail_lt(b.status, b.step);
  }
  Workspace ws;
  Q4_TRY(ws.acquire(ds, stream));
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(ds.lt, g.desc.get(), &one, w, g.a.get(), x, g.b.get(), &zero, y, g.c.get(), y, g.c.get(),
                     have_algo ? &algo : nullptr, ws.ptr(), ws.bytes(), stream);
  if (st != CUBLAS_STATUS_SUCCESS) return fail_lt(st, "cublasLtMatmul (fp32)");
  return Q4_OK;
}

int32_t lt_gemm_fp4(DeviceState& ds, const q4::cuda::LtGemmParams& p, int32_t layout, const void* x_q,
                    const void* x_scale_swizzled, const void* w_q, const void* w_scale_swizzled, float alpha,
                    float* y, cudaStream_t stream, bool* done, std::string* why, LtElem elem) {
  *done = false;
  if (!q4::cuda::lt_fp4_device_possible(ds.cc_major)) {
    *why = "no block-scaled FP4 GEMM before compute capability 10.0 (this device: " +
           std::to_string(ds.cc_major) + ".x)";
    return Q4_OK;
  }
  RealLt api{ds.lt};
  Gemm g;
  cublasLtMatmulAlgo_t algo{};
  bool available = false;
  // A = W, B = X. The cache key carries the operands' alignment.
  const auto r =
      q4::cuda::lt_plan_gemm(api, ds.algos, algo_key(p, elem, layout, w_q, x_q, y), p, elem, w_scale_swizzled,
                             x_scale_swizzled, kWorkspaceBytes, g, &algo, &available);
  if (!r.ok()) return fail_lt(r.status, r.step);
  if (!available) {
    *why = "cuBLASLt has no block-scaled FP4 algorithm for this device/shape/alignment";
    return Q4_OK;
  }
  Workspace ws;
  Q4_TRY(ws.acquire(ds, stream));
  const float zero = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(ds.lt, g.desc.get(), &alpha, w_q, g.a.get(), x_q, g.b.get(), &zero,
                                           y, g.c.get(), y, g.c.get(), &algo, ws.ptr(), ws.bytes(), stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    *why = "cublasLtMatmul (FP4) status " + std::to_string(static_cast<int>(st));
    return Q4_OK;
  }
  *done = true;
  return Q4_OK;
}

int32_t dequant_then_gemm(DeviceState& ds, const nvfp4_cuda_op& op, cudaStream_t stream,
                          const std::function<int32_t(float* w32, int64_t row0, int64_t rows)>& dequantize) {
  const int64_t m = op.m, n = op.n, k = op.k;
  const int64_t tile = q4::cuda::dequant_tile_rows(n, k, q4::cuda::kDequantScratchBytes);
  DeviceBuffer w32, x32, y32;
  Q4_TRY(alloc(w32, static_cast<size_t>(tile * k) * 4, stream));
  Q4_TRY(alloc(y32, static_cast<size_t>(m * n) * 4, stream));
  const float* xf = static_cast<const float*>(op.x);
  if (op.x_type != NVFP4_CUDA_F32) {
    Q4_TRY(alloc(x32, static_cast<size_t>(m * k) * 4, stream));
    Q4_TRY(to_f32(op.x, op.x_type, m * k, x32.as<float>(), ds.sm_count, stream));
    xf = x32.as<const float>();
  }
  // The scratch is reused in stream order: tile t + 1 is dequantized after
  // the GEMM of tile t has read it.
  for (int64_t row0 = 0; row0 < n; row0 += tile) {
    const int64_t rows = n - row0 < tile ? n - row0 : tile;
    Q4_TRY(dequantize(w32.as<float>(), row0, rows));
    Q4_TRY(lt_gemm_f32(ds, m, rows, k, xf, w32.as<const float>(), y32.as<float>() + row0, n, stream));
  }
  return epilogue(y32.as<const float>(), m, n, 1.0f, op.bias, op.bias_type, op.out, op.out_type, ds.sm_count,
                  stream);
}

}  // namespace q4::cuda_plugin
