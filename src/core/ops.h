// The stateless operations behind the C ABI: validate every argument once
// (op_desc.h, docs/abi.md §10), then run where the tensors live. They throw
// q4::Error; the API layer catches.
#pragma once

#include "nvfp4/ops.h"

namespace q4::core {

void nvfp4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* scale, int32_t layout, float g,
                    float* g_out, const Q4_op_options* opts);
void nvfp4_dequantize(const DLTensor* qdata, const DLTensor* scale, int32_t scale_layout, float global_scale,
                      DLTensor* out, const Q4_op_options* opts);
void nvfp4_scaled_mm(const DLTensor* a_qdata, const DLTensor* a_scale, const DLTensor* b_qdata,
                     const DLTensor* b_scale, int32_t scale_layout, float alpha, const DLTensor* bias,
                     DLTensor* out, const Q4_op_options* opts);
void nvfp4_linear(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale, int32_t scale_layout,
                  float global_scale, const DLTensor* bias, DLTensor* out, const Q4_op_options* opts);
void nf4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* absmax, int32_t blocksize,
                  const Q4_op_options* opts);
void nf4_double_quantize(const DLTensor* absmax_t, DLTensor* qabsmax_t, DLTensor* nested_t, DLTensor* map_t,
                         float* offset, const Q4_op_options* opts);
void nf4_dequantize(const DLTensor* qdata, const NF4_state* state, DLTensor* out, const Q4_op_options* opts);
void nf4_scaled_mm(const DLTensor* x, const DLTensor* w_qdata, const NF4_state* w_state, const DLTensor* bias,
                   DLTensor* out, const Q4_op_options* opts);
void mxfp4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* scale, int32_t scale_layout,
                    const Q4_op_options* opts);
void mxfp4_dequantize(const DLTensor* qdata, const DLTensor* scale, int32_t scale_layout, DLTensor* out,
                      const Q4_op_options* opts);
void mxfp4_linear(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale, int32_t scale_layout,
                  const DLTensor* bias, DLTensor* out, const Q4_op_options* opts);
void mxfp4_scaled_mm(const DLTensor* a_qdata, const DLTensor* a_scale, const DLTensor* b_qdata,
                     const DLTensor* b_scale, int32_t scale_layout, float alpha, const DLTensor* bias,
                     DLTensor* out, const Q4_op_options* opts);
void mxfp4_linear_experts(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale,
                          int32_t scale_layout, const int32_t* expert_of_group, const int64_t* group_rows,
                          int64_t n_groups, const DLTensor* bias, DLTensor* out, const Q4_op_options* opts);
void swizzle_scales(const DLTensor* linear, DLTensor* swizzled);
void unswizzle_scales(const DLTensor* swizzled, DLTensor* linear);
int64_t swizzled_scale_size(int64_t rows, int64_t k);

}  // namespace q4::core
