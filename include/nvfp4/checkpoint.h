/* libNVFP4 — safetensors checkpoints: read (memory-mapped, zero-copy,
 * strictly validated), write (atomic), detect the 4-bit schema of each
 * linear and create linears from it (docs/formats.md).
 *
 * Thread-safety: a reader may be used from several threads at once (it is
 * immutable after open); a writer is not thread-safe.
 */
#ifndef NVFP4_CHECKPOINT_H_
#define NVFP4_CHECKPOINT_H_

#include "nvfp4/schema.h"
#include "nvfp4/session.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Q4_checkpoint Q4_checkpoint;
typedef struct Q4_checkpoint_writer Q4_checkpoint_writer;

/* Opens and validates a .safetensors file: header length (<= 100 MB), UTF-8
 * JSON, dtypes, shapes, data_offsets covering the data section exactly,
 * byte sizes, string metadata. A malformed file is Q4_ERR_FORMAT naming the
 * problem; an unreadable one Q4_ERR_IO. */
Q4_API int32_t Q4_checkpoint_open(const char* path, Q4_checkpoint** checkpoint);
Q4_API int32_t Q4_checkpoint_close(Q4_checkpoint* checkpoint); /* NULL is fine */
Q4_API int32_t Q4_checkpoint_count(const Q4_checkpoint* checkpoint, size_t* count);
/* Tensor `index` (file order of data offsets): name (valid while open),
 * dtype, shape, and its byte size. */
Q4_API int32_t Q4_checkpoint_tensor_info(const Q4_checkpoint* checkpoint, size_t index, Q4_tensor_desc* desc,
                                         int64_t* nbytes);
Q4_API int32_t Q4_checkpoint_find(const Q4_checkpoint* checkpoint, const char* name, size_t* index);
/* A borrowed, read-only DLTensor view into the mapped file (valid while the
 * checkpoint is open). F4 appears as kDLFloat4_e2m1fn/4 lanes 1, F8_E4M3 as
 * kDLFloat8_e4m3fn. */
Q4_API int32_t Q4_checkpoint_tensor(const Q4_checkpoint* checkpoint, size_t index, DLTensor* view);
/* A __metadata__ value (size query like the diagnostics; Q4_ERR_NOT_FOUND). */
Q4_API int32_t Q4_checkpoint_metadata(const Q4_checkpoint* checkpoint, const char* key, char* buf, size_t cap,
                                      size_t* needed);
/* Schema detection over the file's tensors (see Q4_detect_schema). */
Q4_API int32_t Q4_checkpoint_detect(const Q4_checkpoint* checkpoint, Q4_schema_summary* summary);
/* Creates the linear stored under `prefix` (e.g. "model.layers.0.mlp.up_proj"):
 * resolves the family's keys and global-scale convention (compressed-tensors
 * stores 1/g), decodes the bitsandbytes quant_state JSON, adds the bias. */
Q4_API int32_t Q4_checkpoint_linear_create(Q4_session* session, const Q4_checkpoint* checkpoint,
                                           const char* prefix, Q4_linear** linear);

/* Writer: tensors are copied when added; commit writes to a temporary file
 * in the destination's directory, fsyncs and renames, so a reader never
 * sees a half-written file. */
Q4_API int32_t Q4_checkpoint_writer_create(Q4_checkpoint_writer** writer);
Q4_API int32_t Q4_checkpoint_writer_destroy(Q4_checkpoint_writer* writer); /* NULL is fine */
/* Adds a tensor: `dtype` is the file's Q4_DTYPE_*; `data` must be a compact
 * CPU tensor whose byte size matches dtype and shape. */
Q4_API int32_t Q4_checkpoint_writer_add(Q4_checkpoint_writer* writer, const char* name, int32_t dtype,
                                        const DLTensor* data);
Q4_API int32_t Q4_checkpoint_writer_metadata(Q4_checkpoint_writer* writer, const char* key,
                                             const char* value);
Q4_API int32_t Q4_checkpoint_writer_commit(Q4_checkpoint_writer* writer, const char* path);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_CHECKPOINT_H_ */
