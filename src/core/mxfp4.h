// MXFP4 on the CPU (docs/formats.md, MXFP4): quantize, dequantize and the
// products, which run through the one product path (product.h) with a
// PreparedWeight of format MXFP4 whose ready form is the fp32 weight
// (exact: every MXFP4 value is an fp32) multiplied by the fp32 GEMM.
#pragma once

#include <cstdint>
#include <memory>

#include "core/op_desc.h"
#include "core/product.h"

namespace q4::core {

// Decodes rows [0, op.rows) of a validated MXFP4 operand into fp32
// dst[rows, k] (exact), over `threads` threads.
void mxfp4_decode(const Mxfp4Operand& op, int32_t threads, float* dst);

// The dequant-matmul ready form of an MXFP4 weight [op.rows, op.k]: w owns
// the fp32 weight (counted in `counters` when not null).
void prepare_mxfp4(PreparedWeight& w, const Mxfp4Operand& op, int32_t threads,
                   const std::shared_ptr<SessionCounters>& counters);

// The operations, after validation (host only: a descriptor placed on a
// CUDA device is Q4_ERR_UNSUPPORTED until the plugin has MXFP4 kernels).
void run_mxfp4(const Mxfp4QuantizeDesc& d);
void run_mxfp4(const Mxfp4DequantizeDesc& d);
void run_mxfp4(const Mxfp4ProductDesc& d);
void run_mxfp4(const Mxfp4ExpertsDesc& d);

}  // namespace q4::core
