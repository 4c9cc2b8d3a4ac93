// extern "C" layer of the checkpoint functions: exception firewalls around
// core/checkpoint.h.
#include "common/error.h"
#include "common/struct_size.h"
#include "core/checkpoint.h"
#include "core/session.h"
#include "nvfp4/nvfp4.h"

extern "C" {

using q4::api_call;

Q4_API int32_t Q4_checkpoint_open(const char* path, Q4_checkpoint** checkpoint) {
  return api_call("Q4_checkpoint_open", [&] {
    if (checkpoint == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "checkpoint", "output pointer is NULL");
    *checkpoint = nullptr;
    *checkpoint = q4::core::open_checkpoint(path);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_close(Q4_checkpoint* checkpoint) {
  return api_call("Q4_checkpoint_close", [&] {
    delete checkpoint;
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_count(const Q4_checkpoint* checkpoint, size_t* count) {
  return api_call("Q4_checkpoint_count", [&] {
    if (count == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "count", "output pointer is NULL");
    *count = q4::core::tensor_count(checkpoint);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_tensor_info(const Q4_checkpoint* checkpoint, size_t index, Q4_tensor_desc* desc,
                                         int64_t* nbytes) {
  return api_call("Q4_checkpoint_tensor_info", [&] {
    q4::core::tensor_info(checkpoint, index, desc, nbytes);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_find(const Q4_checkpoint* checkpoint, const char* name, size_t* index) {
  return api_call("Q4_checkpoint_find", [&] {
    if (index == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "index", "output pointer is NULL");
    *index = q4::core::find_tensor(checkpoint, name);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_tensor(const Q4_checkpoint* checkpoint, size_t index, DLTensor* view) {
  return api_call("Q4_checkpoint_tensor", [&] {
    if (view == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "view", "output pointer is NULL");
    *view = q4::core::tensor_view(checkpoint, index);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_metadata(const Q4_checkpoint* checkpoint, const char* key, char* buf, size_t cap,
                                      size_t* needed) {
  return api_call("Q4_checkpoint_metadata",
                  [&] { return q4::core::copy_out(q4::core::metadata(checkpoint, key), buf, cap, needed); });
}

Q4_API int32_t Q4_checkpoint_detect(const Q4_checkpoint* checkpoint, Q4_schema_summary* summary) {
  return api_call("Q4_checkpoint_detect", [&] {
    q4::require_out_struct(summary, "summary");
    const q4::schema::Detection d = q4::core::detect_checkpoint(checkpoint);
    q4::schema::fill_summary(d, summary);
    if (!d.problems.empty()) q4::fail(Q4_ERR_SCHEMA, "", d.problems.front());
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_linear_create(Q4_session* session, const Q4_checkpoint* checkpoint,
                                           const char* prefix, Q4_linear** linear) {
  return api_call("Q4_checkpoint_linear_create", [&] {
    if (linear == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "linear", "output pointer is NULL");
    *linear = nullptr;
    *linear = q4::core::checkpoint_linear(session, checkpoint, prefix);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_writer_create(Q4_checkpoint_writer** writer) {
  return api_call("Q4_checkpoint_writer_create", [&] {
    if (writer == nullptr) q4::fail(Q4_ERR_NULL_POINTER, "writer", "output pointer is NULL");
    *writer = q4::core::new_writer();
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_writer_destroy(Q4_checkpoint_writer* writer) {
  return api_call("Q4_checkpoint_writer_destroy", [&] {
    delete writer;
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_writer_add(Q4_checkpoint_writer* writer, const char* name, int32_t dtype,
                                        const DLTensor* data) {
  return api_call("Q4_checkpoint_writer_add", [&] {
    q4::core::writer_add(writer, name, dtype, data);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_writer_metadata(Q4_checkpoint_writer* writer, const char* key,
                                             const char* value) {
  return api_call("Q4_checkpoint_writer_metadata", [&] {
    q4::core::writer_metadata(writer, key, value);
    return Q4_OK;
  });
}

Q4_API int32_t Q4_checkpoint_writer_commit(Q4_checkpoint_writer* writer, const char* path) {
  return api_call("Q4_checkpoint_writer_commit", [&] {
    q4::core::writer_commit(writer, path);
    return Q4_OK;
  });
}

}  // extern "C"
