// The operations behind nvfp4_cuda_plugin.run(), one per NVFP4_CUDA_OP_*.
// The descriptor was validated by the core; these read its inputs and write
// its results (global_scale_used, bad_index, used_fallback,
// fallback_reason), which run() has reset.
#pragma once

#include <cstdint>

#include "plugin/plugin_abi.h"

namespace q4::cuda_plugin {

int32_t nvfp4_quantize(nvfp4_cuda_op& op);    // cuda/nvfp4_kernels.cu
int32_t nvfp4_dequantize(nvfp4_cuda_op& op);  // cuda/nvfp4_kernels.cu
int32_t nvfp4_linear(nvfp4_cuda_op& op);      // cuda/nvfp4_kernels.cu
int32_t nvfp4_scaled_mm(nvfp4_cuda_op& op);   // cuda/nvfp4_kernels.cu
int32_t nf4_quantize(nvfp4_cuda_op& op);      // cuda/nf4_kernels.cu
int32_t nf4_dequantize(nvfp4_cuda_op& op);    // cuda/nf4_kernels.cu
int32_t nf4_linear(nvfp4_cuda_op& op);        // cuda/nf4_kernels.cu
int32_t mxfp4_quantize(nvfp4_cuda_op& op);    // cuda/mxfp4_kernels.cu
int32_t mxfp4_dequantize(nvfp4_cuda_op& op);  // cuda/mxfp4_kernels.cu
int32_t mxfp4_linear(nvfp4_cuda_op& op);      // cuda/mxfp4_kernels.cu
int32_t mxfp4_scaled_mm(nvfp4_cuda_op& op);   // cuda/mxfp4_kernels.cu
int32_t scan_bytes(nvfp4_cuda_op& op);        // cuda/common.cu

}  // namespace q4::cuda_plugin
