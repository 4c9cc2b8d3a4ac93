// extern "C" layer of sessions, linears, mutable tensors, diagnostics and
// training helpers: exception firewalls around the core.
#include <cstring>
#include <memory>

#include "common/error.h"
#include "common/struct_size.h"
#include "core/linear.h"
#include "core/mutable_tensor.h"
#include "core/session.h"
#include "core/training.h"
#include "nvfp4/nvfp4.h"

using q4::api_call;

extern "C" {

Q4_API int32_t Q4_session_config_init(Q4_session_config* config) {
  return api_call("Q4_session_config_init", [&] {
    static_assert(sizeof(Q4_session_config) == 88, "Q4_session_config of ABI 1 is 88 bytes");
    Q4_session_config defaults;
    std::memset(&defaults, 0, sizeof defaults);
    q4::init_struct(config, defaults, 88, "config");
    return Q4_OK;
  });
}

Q4_API int32_t Q4_session_create(const Q4_session_config* config, Q4_session** session) {
  return api_call("Q4_session_create", [&] {
    if (session == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "session", "output pointer is NULL");
    *session = nullptr;
    auto s = std::make_unique<Q4_session>();
    s->settings = q4::core::resolve_session_config(config);
    *session = s.release();
    return Q4_OK;
  });
}

Q4_API int32_t Q4_session_destroy(Q4_session* session) {
  return api_call("Q4_session_destroy", [&] {
    if (session != nullptr) q4::core::destroy_session(session);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_session_get_stats(const Q4_session* session, Q4_session_stats* stats) {
  return api_call("Q4_session_get_stats", [&] {
    if (session == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "session", "pointer is NULL");
    if (stats == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "stats", "pointer is NULL");
    q4::core::fill_stats(*session, stats);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_session_set_stream(Q4_session* session, void* stream) {
  return api_call("Q4_session_set_stream", [&] {
    if (session == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "session", "pointer is NULL");
    if (!session->settings.on_cuda()) {
      q4::fail(Q4_ERR_UNSUPPORTED, "session", "runs on the CPU; only CUDA sessions have a stream");
    }
    session->stream.store(stream, std::memory_order_release);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_session_diagnostics(const Q4_session* session, char* buf, size_t cap, size_t* needed) {
  return api_call("Q4_session_diagnostics", [&] {
    if (session == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "session", "pointer is NULL");
    return q4::core::copy_out(q4::core::session_diagnostics(*session), buf, cap, needed);
  });
}

Q4_API int32_t Q4_weight_bundle_init(Q4_weight_bundle* bundle) {
  return api_call("Q4_weight_bundle_init", [&] {
    static_assert(sizeof(Q4_weight_bundle) == 120, "Q4_weight_bundle of ABI 1 is 120 bytes");
    Q4_weight_bundle defaults;
    std::memset(&defaults, 0, sizeof defaults);
    defaults.format = Q4_FORMAT_NVFP4;
    q4::init_struct(bundle, defaults, 120, "bundle");
    return Q4_OK;
  });
}

Q4_API int32_t Q4_linear_create(Q4_session* session, const Q4_weight_bundle* weight, Q4_linear** linear) {
  return api_call("Q4_linear_create", [&] {
    if (linear == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "linear", "output pointer is NULL");
    *linear = nullptr;
    *linear = q4::core::create_linear(session, weight);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_linear_forward(Q4_linear* linear, const DLTensor* x, DLTensor* out) {
  return api_call("Q4_linear_forward", [&] {
    q4::core::forward(linear, x, out);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_linear_update_weight(Q4_linear* linear, const Q4_weight_bundle* weight) {
  return api_call("Q4_linear_update_weight", [&] {
    q4::core::update_weight(linear, weight);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_linear_destroy(Q4_linear* linear) {
  return api_call("Q4_linear_destroy", [&] {
    if (linear != nullptr) q4::core::destroy_linear(linear);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_linear_info_get(const Q4_linear* linear, Q4_linear_info* info) {
  return api_call("Q4_linear_info_get", [&] {
    q4::core::linear_info(linear, info);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_linear_diagnostics(const Q4_linear* linear, char* buf, size_t cap, size_t* needed) {
  return api_call("Q4_linear_diagnostics", [&] {
    if (linear == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "linear", "pointer is NULL");
    return q4::core::copy_out(q4::core::linear_diagnostics(*linear), buf, cap, needed);
  });
}

Q4_API int32_t Q4_mutable_create(Q4_session* session, int32_t ndim, const int64_t* shape, DLDataType dtype,
                                 Q4_mutable** tensor) {
  return api_call("Q4_mutable_create", [&] {
    if (tensor == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "tensor", "output pointer is NULL");
    *tensor = nullptr;
    *tensor = q4::core::create_mutable(session, ndim, shape, dtype);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_mutable_destroy(Q4_mutable* tensor) {
  return api_call("Q4_mutable_destroy", [&] {
    if (tensor != nullptr) q4::core::destroy_mutable(tensor);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_mutable_begin_write(Q4_mutable* tensor, int32_t mode, DLTensor* view) {
  return api_call("Q4_mutable_begin_write", [&] {
    q4::core::begin_write(tensor, mode, view);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_mutable_commit(Q4_mutable* tensor, uint64_t* version) {
  return api_call("Q4_mutable_commit", [&] {
    const uint64_t v = q4::core::commit(tensor);
    if (version != nullptr) *version = v;
    return Q4_OK;
  });
}

Q4_API int32_t Q4_mutable_abort(Q4_mutable* tensor) {
  return api_call("Q4_mutable_abort", [&] {
    q4::core::abort_write(tensor);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_mutable_acquire(Q4_mutable* tensor, DLManagedTensorVersioned** snapshot,
                                  uint64_t* version) {
  return api_call("Q4_mutable_acquire", [&] {
    if (snapshot == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "snapshot", "output pointer is NULL");
    *snapshot = nullptr;
    *snapshot = q4::core::acquire(tensor, version);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_mutable_version(const Q4_mutable* tensor, uint64_t* version) {
  return api_call("Q4_mutable_version", [&] {
    if (version == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "version", "output pointer is NULL");
    *version = q4::core::version_of(tensor);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_fake_quantize(const DLTensor* x, DLTensor* out, float global_scale,
                                   float* global_scale_out, const Q4_op_options* opts) {
  return api_call("NVFP4_fake_quantize", [&] {
    q4::core::fake_quantize(x, out, global_scale, global_scale_out, opts);
    return Q4_OK;
  });
}

Q4_API int32_t NVFP4_linear_backward(const DLTensor* grad_y, const DLTensor* x, const DLTensor* w_qdata,
                                     const DLTensor* w_scale, int32_t scale_layout, float global_scale,
                                     DLTensor* grad_x, DLTensor* grad_w, const Q4_op_options* opts) {
  return api_call("NVFP4_linear_backward", [&] {
    q4::core::linear_backward(grad_y, x, w_qdata, w_scale, scale_layout, global_scale, grad_x, grad_w, opts);
    return Q4_OK;
  });
}

}  // extern "C"
