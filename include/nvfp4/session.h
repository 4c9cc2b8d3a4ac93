/* libNVFP4 — sessions, reusable 4-bit linears, mutable tensors shared by
 * actors, diagnostics, and training helpers (docs/abi.md §5, §9).
 *
 * Ownership:
 *  - A session owns and counts everything created from it
 *    (Q4_session_get_stats). Q4_session_destroy refuses (Q4_ERR_STATE) while
 *    linears, mutable tensors or snapshots are still alive, so a leak shows
 *    as a status, not as a dangling handle.
 *  - A linear copies what it prepares; the caller's tensors in a
 *    Q4_weight_bundle are borrowed only for the duration of the create /
 *    update call.
 *  - Snapshots are DLManagedTensorVersioned (READ_ONLY flag set): release one
 *    by calling its deleter, from any thread.
 *
 * Thread-safety:
 *  - Q4_linear_forward may run concurrently with other forwards and with
 *    Q4_linear_update_weight on the same linear; each forward uses entirely
 *    the old or entirely the new weight. Q4_linear_destroy must not race
 *    with other calls on the same linear.
 *  - Mutable tensors: one writer at a time (a second gets Q4_ERR_BUSY), any
 *    number of concurrent readers; all functions are thread-safe except
 *    Q4_mutable_destroy, which must not race with other calls on it.
 *  - Session create/destroy are not to race with calls on that session;
 *    everything else on a session is thread-safe.
 */
#ifndef NVFP4_SESSION_H_
#define NVFP4_SESSION_H_

#include "nvfp4/ops.h"
#include "nvfp4/q4_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Q4_session Q4_session;
typedef struct Q4_linear Q4_linear;
typedef struct Q4_mutable Q4_mutable;

/* Unified-memory policy (docs/abi.md §9). */
#define Q4_UM_DISABLED 0
#define Q4_UM_PREFER 1  /* use managed memory where it works, else record why */
#define Q4_UM_REQUIRE 2 /* fail when managed memory is unavailable            */

typedef struct Q4_session_config {
  uint32_t struct_size;
  int32_t compute_path;   /* Q4_PATH_*                                     */
  int32_t backend;        /* Q4_BACKEND_*                                  */
  int32_t target;         /* Q4_TARGET_AUTO / CPU / CUDA                   */
  int32_t device_id;      /* CUDA ordinal for Q4_TARGET_CUDA               */
  int32_t unified_memory; /* Q4_UM_*                                       */
  int32_t num_threads;    /* 0 = library default                           */
  int32_t diagnostics;    /* 1: keep per-call counters for diagnostics     */
  int32_t math_mode;      /* Q4_MATH_*                                     */
  int32_t reserved0;
  uint64_t reserved[6];
} Q4_session_config;

typedef struct Q4_session_stats {
  uint32_t struct_size;
  int32_t live_linears;
  int32_t live_mutables;
  int32_t live_snapshots;
  int64_t live_buffers;    /* buffers owned (weights, tensor versions)    */
  int64_t live_bytes;      /* bytes owned                                 */
  int64_t managed_bytes;   /* of which in CUDA managed memory             */
  int64_t forwards;        /* Q4_linear_forward calls that succeeded      */
  int64_t implicit_copies; /* activations converted/copied by a forward   */
  uint64_t reserved[4];
} Q4_session_stats;

/* Fills defaults (what a NULL config means). */
Q4_API int32_t Q4_session_config_init(Q4_session_config* config);
/* Errors where they become known: an unknown enum value is
 * Q4_ERR_INVALID_ARGUMENT; a CUDA target or Q4_UM_REQUIRE without a usable
 * CUDA backend is Q4_ERR_NOT_AVAILABLE. */
Q4_API int32_t Q4_session_create(const Q4_session_config* config, Q4_session** session);
/* NULL is fine. Q4_ERR_STATE while objects created from it are alive. */
Q4_API int32_t Q4_session_destroy(Q4_session* session);
Q4_API int32_t Q4_session_get_stats(const Q4_session* session, Q4_session_stats* stats);
/* The CUDA stream (cudaStream_t as void*; NULL = the default stream) on
 * which the forwards of this session's linears run, those already created
 * included. Thread-safe: may be called while forwards run on other threads;
 * each forward uses the stream set when it starts. The caller keeps the
 * stream alive while forwards may use it. Forwards that write device memory
 * return with the work queued on the stream (synchronize it before reading
 * the output); outputs in host or managed memory are complete on return.
 * A session that runs on the CPU has no stream: Q4_ERR_UNSUPPORTED. */
Q4_API int32_t Q4_session_set_stream(Q4_session* session, void* stream);

/* ------------------------------------------------------------------------ */
/* Linears: PrepareWeight + Forward + Dispose.                               */
/* ------------------------------------------------------------------------ */
#define Q4_WEIGHT_PACKED 0 /* weight holds packed 4-bit data + statistics */
#define Q4_WEIGHT_FLOAT 1  /* weight is a float [N, K] matrix to quantize  */

typedef struct Q4_weight_bundle {
  uint32_t struct_size;
  int32_t format;         /* Q4_FORMAT_NVFP4, Q4_FORMAT_NF4, or
                             Q4_FORMAT_MXFP4 (CPU: the E2M1 kernels;
                             CUDA: the plugin's MXFP4 linear; see
                             docs/api.md)                              */
  int32_t source;         /* Q4_WEIGHT_PACKED or Q4_WEIGHT_FLOAT        */
  int32_t scale_layout;   /* NVFP4/MXFP4 packed: layout of `scale`      */
  const DLTensor* weight; /* packed bytes, or float [N, K]              */
  int64_t out_features;   /* N (packed: required; float: from weight)   */
  int64_t in_features;    /* K                                          */
  const DLTensor* scale;  /* packed: NVFP4 E4M3 / MXFP4 E8M0 scales     */
  float global_scale;     /* NVFP4: g (packed: > 0; float: 0 = amax)    */
  int32_t blocksize;      /* NF4 float source: 0 = 64                   */
  const NF4_state* nf4;   /* NF4 packed: statistics                     */
  const DLTensor* bias;   /* optional [N]                               */
  uint64_t reserved[6];
} Q4_weight_bundle;

Q4_API int32_t Q4_weight_bundle_init(Q4_weight_bundle* bundle);

/* Validates, converts to the backend's ready form and copies. */
Q4_API int32_t Q4_linear_create(Q4_session* session, const Q4_weight_bundle* weight, Q4_linear** linear);
/* out[..., N] = x[..., K] . W^T (+ bias); any leading dims, float dtypes. */
Q4_API int32_t Q4_linear_forward(Q4_linear* linear, const DLTensor* x, DLTensor* out);
/* Replaces the weight atomically (same format, N and K). */
Q4_API int32_t Q4_linear_update_weight(Q4_linear* linear, const Q4_weight_bundle* weight);
/* NULL is fine. */
Q4_API int32_t Q4_linear_destroy(Q4_linear* linear);

/* The fields a program branches on (the JSON diagnostics hold more). */
typedef struct Q4_linear_info {
  uint32_t struct_size;
  int32_t format;         /* Q4_FORMAT_*                                  */
  int32_t backend;        /* Q4_BACKEND_* actually used                   */
  int32_t compute_path;   /* Q4_PATH_* requested                          */
  int32_t fell_back;      /* 1 if the kernel path was not taken           */
  int32_t isa;            /* Q4_ISA_* of the CPU kernels                  */
  int32_t target;         /* Q4_TARGET_CPU / Q4_TARGET_CUDA               */
  int32_t unified_memory; /* 1 if the weight lives in managed memory      */
  int32_t scale_layout;   /* layout of the prepared scales                */
  int32_t math_mode;
  int64_t out_features;
  int64_t in_features;
  int64_t weight_bytes;    /* bytes the prepared weight occupies           */
  uint64_t weight_version; /* 1 at create, +1 per update                   */
  uint64_t reserved[4];
} Q4_linear_info;

Q4_API int32_t Q4_linear_info_get(const Q4_linear* linear, Q4_linear_info* info);

/* JSON diagnostics into buf (cap bytes incl. the terminating NUL). *needed
 * receives the size required; when cap is too small (or buf is NULL) the
 * call returns Q4_ERR_BUFFER_TOO_SMALL and writes nothing but *needed.
 * buf == NULL is the size query: it does not touch Q4_last_error(); a
 * non-NULL buffer that is too small is a failure and records a message.
 * Fields: format, backend, computePath, fallbackReason, nativeLoadState,
 * isa, device, unifiedMemory, scaleLayout, mathMode, mathModeUsed (the math
 * a forward runs now: "exact" when fast mode falls back) and
 * mathFallbackReason (empty unless it does), weightBytes, ... */
Q4_API int32_t Q4_linear_diagnostics(const Q4_linear* linear, char* buf, size_t cap, size_t* needed);
Q4_API int32_t Q4_session_diagnostics(const Q4_session* session, char* buf, size_t cap, size_t* needed);

/* ------------------------------------------------------------------------ */
/* Mutable tensors: single writer, many readers, version stamps.             */
/* ------------------------------------------------------------------------ */
#define Q4_WRITE_KEEP 0    /* the private buffer starts as a copy of the current data */
#define Q4_WRITE_DISCARD 1 /* the private buffer's contents are unspecified          */

/* A zero-filled tensor (version 0) in memory per the session's policy. */
Q4_API int32_t Q4_mutable_create(Q4_session* session, int32_t ndim, const int64_t* shape, DLDataType dtype,
                                 Q4_mutable** tensor);
/* Q4_ERR_STATE while a writer is active; snapshots may outlive it. */
Q4_API int32_t Q4_mutable_destroy(Q4_mutable* tensor);
/* Starts a write: *view describes a private buffer the caller fills (its
 * shape pointer stays valid until commit/abort). Q4_ERR_BUSY if another
 * writer is active. */
Q4_API int32_t Q4_mutable_begin_write(Q4_mutable* tensor, int32_t mode, DLTensor* view);
/* Publishes the private buffer atomically; *version gets the new version. */
Q4_API int32_t Q4_mutable_commit(Q4_mutable* tensor, uint64_t* version);
Q4_API int32_t Q4_mutable_abort(Q4_mutable* tensor);
/* A read-only snapshot of the current version that stays valid and
 * unchanged until its deleter is called, whatever is committed meanwhile. */
Q4_API int32_t Q4_mutable_acquire(Q4_mutable* tensor, struct DLManagedTensorVersioned** snapshot,
                                  uint64_t* version);
Q4_API int32_t Q4_mutable_version(const Q4_mutable* tensor, uint64_t* version);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* The training helpers lived here before they got their own header. */
#include "nvfp4/training.h"

#endif /* NVFP4_SESSION_H_ */
