// Training helpers (straight-through estimator): stateless operations.
#pragma once

#include "nvfp4/training.h"

namespace q4::core {

void fake_quantize(const DLTensor* x, DLTensor* out, float g, float* g_out, const Q4_op_options* opts);
void linear_backward(const DLTensor* gy_t, const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t,
                     int32_t layout, float g, DLTensor* gx_t, DLTensor* gw_t, const Q4_op_options* opts);

}  // namespace q4::core
