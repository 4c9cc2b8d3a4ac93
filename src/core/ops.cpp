// The stateless operations behind the C ABI: validate once into a
// descriptor (op_desc.h), then run it where its tensors live.
#include "core/ops.h"

#include <string>

#include "common/error.h"
#include "common/tensor.h"
#include "core/cpu_backend.h"
#include "core/cuda_backend.h"
#include "core/op_desc.h"
#include "core/op_helpers.h"
#include "core/options.h"
#include "formats/codec.h"
#include "kernels/cpu_ops.h"
#include "kernels/portable.h"

namespace q4::core {
namespace {

template <class Desc>
void route(const Desc& d) {
  if (d.ctx.place == Place::Device) {
    cuda::run(d);
  } else {
    cpu::run(d);
  }
}

}  // namespace

void nvfp4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* scale, int32_t layout, float g,
                    float* g_out, const Q4_op_options* opts) {
  route(validate_nvfp4_quantize(x, qdata, scale, layout, g, g_out, opts));
}

void nvfp4_dequantize(const DLTensor* qdata, const DLTensor* scale, int32_t layout, float g, DLTensor* out,
                      const Q4_op_options* opts) {
  route(validate_nvfp4_dequantize(qdata, scale, layout, g, out, opts));
}

void nvfp4_scaled_mm(const DLTensor* a_qdata, const DLTensor* a_scale, const DLTensor* b_qdata,
                     const DLTensor* b_scale, int32_t layout, float alpha, const DLTensor* bias,
                     DLTensor* out, const Q4_op_options* opts) {
  route(validate_nvfp4_scaled_mm(a_qdata, a_scale, b_qdata, b_scale, layout, alpha, bias, out, opts));
}

void nvfp4_linear(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale, int32_t layout,
                  float g, const DLTensor* bias, DLTensor* out, const Q4_op_options* opts) {
  route(validate_nvfp4_linear(x, w_qdata, w_scale, layout, g, bias, out, opts));
}

void nf4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* absmax, int32_t blocksize,
                  const Q4_op_options* opts) {
  route(validate_nf4_quantize(x, qdata, absmax, blocksize, opts));
}

void nf4_dequantize(const DLTensor* qdata, const NF4_state* state, DLTensor* out, const Q4_op_options* opts) {
  route(validate_nf4_dequantize(qdata, state, out, opts));
}

void nf4_scaled_mm(const DLTensor* x, const DLTensor* w_qdata, const NF4_state* w_state, const DLTensor* bias,
                   DLTensor* out, const Q4_op_options* opts) {
  route(validate_nf4_scaled_mm(x, w_qdata, w_state, bias, out, opts));
}

void nf4_double_quantize(const DLTensor* absmax_t, DLTensor* qabsmax_t, DLTensor* nested_t, DLTensor* map_t,
                         float* offset, const Q4_op_options* opts) {
  resolve_options(opts);
  const TensorRef a = check_tensor(absmax_t, "absmax");
  require_type(a, ElemType::F32);
  const int64_t nb = a.numel;
  const TensorRef qa = check_tensor(qabsmax_t, "qabsmax");
  require_type(qa, ElemType::U8);
  require_numel(qa, nb, "one code per absmax");
  const TensorRef na = check_tensor(nested_t, "nested_absmax");
  require_type(na, ElemType::F32);
  require_numel(na, (nb + 255) / 256, "one per 256 absmax values");
  const TensorRef map = check_tensor(map_t, "nested_quant_map");
  require_type(map, ElemType::F32);
  require_numel(map, 256, "256-entry map");
  if (offset == nullptr) fail(Q4_ERR_NULL_POINTER, "offset", "output pointer is NULL");
  require_no_overlap(qa, {&a, &na, &map});
  require_no_overlap(na, {&a, &map});
  require_no_overlap(map, {&a});
  require_finite(a);
  kern::nf4_double_quantize(reinterpret_cast<const float*>(a.data), nb, qa.data,
                            reinterpret_cast<float*>(na.data), reinterpret_cast<float*>(map.data), offset);
}

// (No options: the default thread count, in tasks of whole 128-row bands
// of at least 64 KiB, so a small matrix stays on the calling thread.)
void swizzle_scales(const DLTensor* linear, DLTensor* swizzled) {
  const SwizzleDesc d = validate_swizzle(linear, swizzled, true);
  kern::swizzle_scales_parallel(d.linear.data, d.rows, d.cols, d.swizzled.data, 0);
}

void unswizzle_scales(const DLTensor* swizzled, DLTensor* linear) {
  const SwizzleDesc d = validate_swizzle(linear, swizzled, false);
  kern::unswizzle_scales_parallel(d.swizzled.data, d.rows, d.cols, d.linear.data, 0);
}

int64_t swizzled_scale_size(int64_t rows, int64_t k) {
  if (rows < 0) fail(Q4_ERR_INVALID_ARGUMENT, "rows", "must be >= 0, got " + std::to_string(rows));
  if (k < 0) fail(Q4_ERR_INVALID_ARGUMENT, "k", "must be >= 0, got " + std::to_string(k));
  require_k_multiple_of_16(k, "k");
  if (rows > (int64_t{1} << 40) || k > (int64_t{1} << 40)) {
    fail(Q4_ERR_OVERFLOW, "rows", "size too large");
  }
  return checked_mul(fmt::swizzled_rows(rows), fmt::swizzled_cols(k / 16), "rows");
}

}  // namespace q4::core
