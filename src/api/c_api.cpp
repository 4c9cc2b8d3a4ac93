// The extern "C" layer: every function is an exception firewall around the
// core. Nothing here computes; it converts and reports.
#include <cstring>
#include <string>

#include "common/cpu_features.h"
#include "common/enum_tables.h"
#include "common/error.h"
#include "common/struct_size.h"
#include "core/capabilities.h"
#include "core/cuda_backend.h"
#include "core/dlpack_export.h"
#include "core/ops.h"
#include "core/schema.h"
#include "core/tuner.h"
#include "nvfp4/nvfp4.h"

namespace {

using q4::api_call;

using q4::require_out_struct;

}  // namespace

extern "C" {

Q4_API const char* Q4_status_string(int32_t status) {
  switch (status) {
    case Q4_OK:
      return "ok";
    case Q4_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case Q4_ERR_NULL_POINTER:
      return "null pointer";
    case Q4_ERR_DTYPE:
      return "unsupported dtype";
    case Q4_ERR_SHAPE:
      return "invalid shape";
    case Q4_ERR_DEVICE:
      return "unsupported device";
    case Q4_ERR_STRIDES:
      return "unsupported strides";
    case Q4_ERR_ALIGNMENT:
      return "misaligned data";
    case Q4_ERR_OVERFLOW:
      return "size overflow";
    case Q4_ERR_ALIASING:
      return "output aliases an input";
    case Q4_ERR_NON_FINITE:
      return "non-finite input";
    case Q4_ERR_UNSUPPORTED:
      return "unsupported";
    case Q4_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case Q4_ERR_BUFFER_TOO_SMALL:
      return "buffer too small";
    case Q4_ERR_BUSY:
      return "busy";
    case Q4_ERR_SCHEMA:
      return "schema error";
    case Q4_ERR_NOT_FOUND:
      return "not found";
    case Q4_ERR_CUDA:
      return "CUDA error";
    case Q4_ERR_NOT_AVAILABLE:
      return "not available";
    case Q4_ERR_IO:
      return "I/O error";
    case Q4_ERR_FORMAT:
      return "malformed data";
    case Q4_ERR_STATE:
      return "invalid state";
    case Q4_ERR_INTERNAL:
      return "internal error";
    default:
      return "unknown status";
  }
}

Q4_API const char* Q4_last_error(void) {
  return q4::last_error();
}
Q4_API void Q4_clear_error(void) {
  q4::clear_last_error();
}

Q4_API int32_t Q4_version(void) {
  return NVFP4_VERSION_NUMBER;
}
Q4_API const char* Q4_version_string(void) {
  return NVFP4_VERSION_STRING;
}
Q4_API int32_t Q4_abi_version(void) {
  return NVFP4_ABI_VERSION;
}

Q4_API int32_t Q4_op_options_init(Q4_op_options* opts) {
  return api_call("Q4_op_options_init", [&] {
    static_assert(sizeof(Q4_op_options) == 88, "Q4_op_options of ABI 1 is 88 bytes");
    Q4_op_options defaults;
    std::memset(&defaults, 0, sizeof defaults);
    q4::init_struct(opts, defaults, 88, "opts");
    return Q4_OK;
  });
}

Q4_API int32_t Q4_get_capabilities(Q4_capabilities* caps) {
  return api_call("Q4_get_capabilities", [&] {
    require_out_struct(caps, "caps");
    const Q4_capabilities c = q4::core::capabilities();
    q4::write_struct(caps, c, "caps");
    return Q4_OK;
  });
}

Q4_API const char* Q4_isa_name(int32_t isa) {
  const char* name = q4::isa_name(isa);
  return name != nullptr ? name : "unknown";
}

Q4_API int32_t Q4_set_max_isa(int32_t isa) {
  return api_call("Q4_set_max_isa", [&] {
    q4::set_max_isa(isa);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_tune_matmul(int32_t dim, int32_t runs, int32_t persist, Q4_tune_result* result) {
  return api_call("Q4_tune_matmul", [&] {
    require_out_struct(result, "result");
    q4::tuner::tune(dim, runs, persist != 0, result);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_dlpack_to_unversioned(DLManagedTensorVersioned* tensor, DLManagedTensor** out) {
  return api_call("Q4_dlpack_to_unversioned", [&] {
    if (out == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "out", "output pointer is NULL");
    *out = q4::core::to_unversioned(tensor);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_last_isa_used(void) {
  return q4::core::last_isa_used();
}

Q4_API int32_t Q4_set_log_callback(Q4_log_callback callback, void* user) {
  return api_call("Q4_set_log_callback", [&] {
    q4::set_log_callback(callback, user);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_set_log_level(int32_t level) {
  return api_call("Q4_set_log_level", [&] {
    if (level < Q4_LOG_OFF || level > Q4_LOG_DEBUG) {
      q4::fail(Q4_ERR_INVALID_ARGUMENT, "level", "expected 0..4, got " + std::to_string(level));
    }
    q4::set_log_level(level);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_get_log_level(void) {
  return q4::get_log_level();
}

Q4_API int32_t NVFP4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* scale, int32_t scale_layout,
                              float global_scale, float* global_scale_out, const Q4_op_options* opts) {
  return api_call("NVFP4_quantize", [&] {
    q4::core::nvfp4_quantize(x, qdata, scale, scale_layout, global_scale, global_scale_out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_dequantize(const DLTensor* qdata, const DLTensor* scale, int32_t scale_layout,
                                float global_scale, DLTensor* out, const Q4_op_options* opts) {
  return api_call("NVFP4_dequantize", [&] {
    q4::core::nvfp4_dequantize(qdata, scale, scale_layout, global_scale, out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_scaled_mm(const DLTensor* a_qdata, const DLTensor* a_scale, const DLTensor* b_qdata,
                               const DLTensor* b_scale, int32_t scale_layout, float alpha,
                               const DLTensor* bias, DLTensor* out, const Q4_op_options* opts) {
  return api_call("NVFP4_scaled_mm", [&] {
    q4::core::nvfp4_scaled_mm(a_qdata, a_scale, b_qdata, b_scale, scale_layout, alpha, bias, out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_linear(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale,
                            int32_t scale_layout, float global_scale, const DLTensor* bias, DLTensor* out,
                            const Q4_op_options* opts) {
  return api_call("NVFP4_linear", [&] {
    q4::core::nvfp4_linear(x, w_qdata, w_scale, scale_layout, global_scale, bias, out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t MXFP4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* scale, int32_t scale_layout,
                              const Q4_op_options* opts) {
  return api_call("MXFP4_quantize", [&] {
    q4::core::mxfp4_quantize(x, qdata, scale, scale_layout, opts);
    return Q4_OK;
  });
}

Q4_API int32_t MXFP4_dequantize(const DLTensor* qdata, const DLTensor* scale, int32_t scale_layout,
                                DLTensor* out, const Q4_op_options* opts) {
  return api_call("MXFP4_dequantize", [&] {
    q4::core::mxfp4_dequantize(qdata, scale, scale_layout, out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t MXFP4_linear(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale,
                            int32_t scale_layout, const DLTensor* bias, DLTensor* out,
                            const Q4_op_options* opts) {
  return api_call("MXFP4_linear", [&] {
    q4::core::mxfp4_linear(x, w_qdata, w_scale, scale_layout, bias, out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t MXFP4_scaled_mm(const DLTensor* a_qdata, const DLTensor* a_scale, const DLTensor* b_qdata,
                               const DLTensor* b_scale, int32_t scale_layout, float alpha,
                               const DLTensor* bias, DLTensor* out, const Q4_op_options* opts) {
  return api_call("MXFP4_scaled_mm", [&] {
    q4::core::mxfp4_scaled_mm(a_qdata, a_scale, b_qdata, b_scale, scale_layout, alpha, bias, out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t MXFP4_linear_experts(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale,
                                    int32_t scale_layout, const int32_t* expert_of_group,
                                    const int64_t* group_rows, int64_t n_groups, const DLTensor* bias,
                                    DLTensor* out, const Q4_op_options* opts) {
  return api_call("MXFP4_linear_experts", [&] {
    q4::core::mxfp4_linear_experts(x, w_qdata, w_scale, scale_layout, expert_of_group, group_rows, n_groups,
                                   bias, out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t NF4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* absmax, int32_t blocksize,
                            const Q4_op_options* opts) {
  return api_call("NF4_quantize", [&] {
    q4::core::nf4_quantize(x, qdata, absmax, blocksize, opts);
    return Q4_OK;
  });
}

Q4_API int32_t NF4_double_quantize(const DLTensor* absmax, DLTensor* qabsmax, DLTensor* nested_absmax,
                                   DLTensor* nested_quant_map, float* offset, const Q4_op_options* opts) {
  return api_call("NF4_double_quantize", [&] {
    q4::core::nf4_double_quantize(absmax, qabsmax, nested_absmax, nested_quant_map, offset, opts);
    return Q4_OK;
  });
}

Q4_API int32_t NF4_dequantize(const DLTensor* qdata, const NF4_state* state, DLTensor* out,
                              const Q4_op_options* opts) {
  return api_call("NF4_dequantize", [&] {
    q4::core::nf4_dequantize(qdata, state, out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t NF4_scaled_mm(const DLTensor* x, const DLTensor* w_qdata, const NF4_state* w_state,
                             const DLTensor* bias, DLTensor* out, const Q4_op_options* opts) {
  return api_call("NF4_scaled_mm", [&] {
    q4::core::nf4_scaled_mm(x, w_qdata, w_state, bias, out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_swizzle_scales(const DLTensor* linear, DLTensor* swizzled) {
  return api_call("NVFP4_swizzle_scales", [&] {
    q4::core::swizzle_scales(linear, swizzled);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_unswizzle_scales(const DLTensor* swizzled, DLTensor* linear) {
  return api_call("NVFP4_unswizzle_scales", [&] {
    q4::core::unswizzle_scales(swizzled, linear);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_swizzled_scale_size(int64_t rows, int64_t k, int64_t* bytes) {
  return api_call("NVFP4_swizzled_scale_size", [&] {
    if (bytes == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "bytes", "output pointer is NULL");
    *bytes = q4::core::swizzled_scale_size(rows, k);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_detect_schema(const Q4_tensor_desc* tensors, size_t count, Q4_schema_summary* summary) {
  return api_call("Q4_detect_schema", [&] {
    require_out_struct(summary, "summary");
    const q4::schema::Detection d = q4::schema::detect(tensors, count);
    q4::schema::fill_summary(d, summary);
    if (!d.problems.empty()) q4::fail(Q4_ERR_SCHEMA, "", d.problems.front());
    return Q4_OK;
  });
}

Q4_API int32_t Q4_detect_linears(const Q4_tensor_desc* tensors, size_t count, Q4_linear_schema* out,
                                 size_t capacity, size_t* num_found) {
  return api_call("Q4_detect_linears", [&] {
    if (num_found == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "num_found", "output pointer is NULL");
    if (capacity > 0 && out == nullptr) {
      q4::fail(Q4_ERR_NULL_POINTER, "out", "array is NULL with capacity > 0");
    }
    // The array's stride is the caller's sizeof(Q4_linear_schema), given by
    // out[0].struct_size (an older or newer header may differ from ours).
    const size_t stride = capacity > 0 ? q4::checked_struct_size(out[0].struct_size, "out[0]") : 0;
    auto entry = [&](size_t i) {
      return reinterpret_cast<Q4_linear_schema*>(reinterpret_cast<char*>(out) + i * stride);
    };
    for (size_t i = 1; i < capacity; ++i) {
      if (entry(i)->struct_size != stride) {
        q4::fail(Q4_ERR_INVALID_ARGUMENT, "out[" + std::to_string(i) + "].struct_size",
                 "every entry must carry the same struct_size as out[0] (" + std::to_string(stride) +
                     "), got " + std::to_string(entry(i)->struct_size));
      }
    }
    const q4::schema::Detection d = q4::schema::detect(tensors, count);
    *num_found = d.linears.size();
    for (size_t i = 0; i < d.linears.size() && i < capacity; ++i) {
      q4::schema::fill_linear(d.linears[i], entry(i));
    }
    if (!d.problems.empty()) q4::fail(Q4_ERR_SCHEMA, "", d.problems.front());
    if (capacity < d.linears.size()) {
      q4::fail(Q4_ERR_BUFFER_TOO_SMALL, "capacity",
               "holds " + std::to_string(capacity) + " entries, " + std::to_string(d.linears.size()) +
                   " linears found");
    }
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_can_use_managed(int32_t device, int32_t* can_use) {
  return api_call("NVFP4_can_use_managed", [&] {
    if (can_use == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "can_use", "output pointer is NULL");
    *can_use = q4::cuda::can_use_managed(device);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_is_managed_tensor(const DLTensor* t, int32_t* is_managed) {
  return api_call("NVFP4_is_managed_tensor", [&] {
    if (is_managed == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "is_managed", "output pointer is NULL");
    *is_managed = 0;
    *is_managed = q4::cuda::is_managed(t);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_to_managed(const DLTensor* src, int32_t device, uint32_t flags,
                                DLManagedTensorVersioned** out) {
  return api_call("NVFP4_to_managed", [&] {
    if (out == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "out", "output pointer is NULL");
    *out = nullptr;
    *out = q4::cuda::to_managed(src, device, flags);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_managed_prefetch(const DLTensor* t, int32_t device, void* stream) {
  return api_call("NVFP4_managed_prefetch", [&] {
    q4::cuda::managed_prefetch(t, device, stream);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  return api_call("NVFP4_memory_info", [&] {
    q4::cuda::memory_info(device, free_bytes, total_bytes);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_cuda_synchronize(int32_t device, void* stream) {
  return api_call("Q4_cuda_synchronize", [&] {
    q4::cuda::synchronize(device, stream);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_empty_cache(void) {
  return api_call("NVFP4_empty_cache", [&] { return q4::cuda::empty_cache(); });
}

Q4_API const char* Q4_schema_name(int32_t family) {
  return q4::names::family_name(family);
}
Q4_API const char* Q4_format_name(int32_t format) {
  return q4::names::format_name(format);
}
Q4_API const char* Q4_dtype_name(int32_t dtype) {
  return q4::names::dtype_name(dtype);
}

}  // extern "C"
