/* libNVFP4 — training helpers for a straight-through estimator (STE): a
 * host autograd keeps an fp32 master weight, uses NVFP4_fake_quantize as the
 * forward of its quantized linear and NVFP4_linear_backward for the
 * gradients. Stateless; callable concurrently from any number of threads. */
#ifndef NVFP4_TRAINING_H_
#define NVFP4_TRAINING_H_

#include "nvfp4/q4_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = dequantize(quantize(x)) in one call (any float dtypes, K % 16 == 0). */
Q4_API int32_t NVFP4_fake_quantize(const DLTensor* x, DLTensor* out, float global_scale,
                                   float* global_scale_out, const Q4_op_options* opts);
/* Linear backward with the NVFP4 weight: grad_x[M,K] = grad_y[M,N] .
 * dequant(W)[N,K]; grad_w[N,K] = grad_y^T . x[M,K] (fp32 accumulation).
 * grad_x or grad_w may be NULL to skip it; x is needed only for grad_w. */
Q4_API int32_t NVFP4_linear_backward(const DLTensor* grad_y, const DLTensor* x, const DLTensor* w_qdata,
                                     const DLTensor* w_scale, int32_t scale_layout, float global_scale,
                                     DLTensor* grad_x, DLTensor* grad_w, const Q4_op_options* opts);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_TRAINING_H_ */
