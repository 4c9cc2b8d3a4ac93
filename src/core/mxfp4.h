// MXFP4 on the CPU (docs/formats.md, MXFP4): quantize, dequantize and the
// products, which run through the one product path (product.h). The
// products run on the E2M1 (NVFP4) kernels: an MXFP4 weight whose E8M0
// scales fit one 18-binade window is, exactly, an NVFP4 weight with E4M3
// scales 2^(e-127-t) (each MXFP4 block of 32 = two NVFP4 blocks of 16) and
// the global scale 2^t (formats/mxfp4.h, "MXFP4 as NVFP4"). A weight
// outside the window (or with a NaN scale) falls back to its fp32 decode
// and the fp32 GEMM (exact: every MXFP4 value is an fp32).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/op_desc.h"
#include "core/product.h"

namespace q4::core {

// Decodes rows [0, op.rows) of a validated MXFP4 operand into fp32
// dst[rows, k] (exact), over `threads` threads.
void mxfp4_decode(const Mxfp4Operand& op, int32_t threads, float* dst);
// The same into an output of any float type (fp16/bf16 without a fp32 copy).
void mxfp4_decode(const Mxfp4Operand& op, int32_t threads, kern::FloatOut dst);

// The NVFP4 form of a validated MXFP4 operand's scales: s16[rows, k/16]
// (linear E4M3 bytes, each E8M0 byte twice) and *t (global scale 2^t).
// Returns "" when the operand maps exactly, else why not (a NaN scale byte,
// or a block with nonzero codes outside the window; s16 is then garbage).
std::string mxfp4_to_nvfp4_scales(const Mxfp4Operand& op, int32_t threads, uint8_t* s16, int32_t* t);

// The smallest and largest byte of linear E8M0 scales [rows, cols], in
// tasks of whole rows on `threads` threads (0 = default).
void e8m0_byte_range(const uint8_t* s, int64_t rows, int64_t cols, int32_t threads, int32_t* lo, int32_t* hi);

// The CPU path of an MXFP4 product under resolved options: the E2M1
// kernels (backend auto or nvfp4-kernel) or dequant-matmul; nf4-kernel is
// Q4_ERR_UNSUPPORTED, contradictory options as for NVFP4, fast math needs
// the kernel path.
CpuPath mxfp4_cpu_path(const ResolvedOptions& o);

// The ready form of an MXFP4 weight [op.rows, op.k] for `path`: Kernel =
// the NVFP4 form (format stays MXFP4; codes copied when `copy`, else
// borrowed; the E4M3 scales owned, or, borrowed and every scale inside the
// window, not made here at all: w.e8m0 keeps the E8M0 bytes for the
// kernels), DequantMatmul = the owned fp32 weight.
// Buffers are counted in `counters` when not null. When the Kernel form is
// impossible, the fp32 form is built instead and the reason returned (""
// otherwise); under compute_path KernelOnly that is Q4_ERR_UNSUPPORTED
// naming `name` and the reason.
std::string prepare_mxfp4(PreparedWeight& w, const Mxfp4Operand& op, int32_t threads,
                          const std::shared_ptr<SessionCounters>& counters, CpuPath path, bool copy,
                          int32_t compute_path, const char* name);

// The operations, after validation: on the CPU, or (a descriptor placed on
// a CUDA device) through the plugin's MXFP4 ops (cuda_backend.h).
void run_mxfp4(const Mxfp4QuantizeDesc& d);
void run_mxfp4(const Mxfp4DequantizeDesc& d);
void run_mxfp4(const Mxfp4ProductDesc& d);
void run_mxfp4(const Mxfp4ExpertsDesc& d);

}  // namespace q4::core
