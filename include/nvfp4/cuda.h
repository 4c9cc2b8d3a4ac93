/* libNVFP4 — unified (managed) memory helpers and CUDA queries (docs/cuda.md,
 * docs/abi.md §9). The CUDA code lives in a plugin (libNVFP4_cuda.so) that the
 * core loads on first use; without a driver, device or plugin every
 * function here returns a clear status (Q4_ERR_NOT_AVAILABLE) and the
 * capabilities' native_load_state says why. Thread-safe.
 */
#ifndef NVFP4_CUDA_H_
#define NVFP4_CUDA_H_

#include "nvfp4/q4_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of NVFP4_to_managed. */
#define Q4_MANAGED_READ_MOSTLY 1u    /* cudaMemAdviseSetReadMostly (weights)        */
#define Q4_MANAGED_PREFETCH 2u       /* prefetch to `device` after the copy         */
#define Q4_MANAGED_REPORT_MANAGED 4u /* report kDLCUDAManaged instead of kDLCUDA   */

/* *can_use = 1 when `device` supports managed memory that the CPU and GPU
 * can access concurrently (the zero-copy path), else 0 (always Q4_OK,
 * *can_use = 0 without CUDA). */
Q4_API int32_t NVFP4_can_use_managed(int32_t device, int32_t* can_use);

/* *is_managed = 1 when t's data is CUDA managed memory (cudaPointerGetAttributes);
 * 0 for ordinary memory or without CUDA. */
Q4_API int32_t NVFP4_is_managed_tensor(const DLTensor* t, int32_t* is_managed);

/* Copies `src` (host or device memory) into newly allocated managed memory
 * without an intermediate hop, optionally advising read-mostly and
 * prefetching to `device`. An already-managed input comes back as a
 * non-owning view (flag IS_COPIED clear); a copy has IS_COPIED set and its
 * deleter frees the managed allocation. The result reports kDLCUDA (what
 * PyTorch accepts) unless Q4_MANAGED_REPORT_MANAGED is given. */
Q4_API int32_t NVFP4_to_managed(const DLTensor* src, int32_t device, uint32_t flags,
                                struct DLManagedTensorVersioned** out);

/* Prefetches a managed tensor to `device` (-1: to the CPU) on the caller's
 * stream (cudaStream_t as void*, NULL = default stream). */
Q4_API int32_t NVFP4_managed_prefetch(const DLTensor* t, int32_t device, void* stream);

/* Free and total device memory (cudaMemGetInfo). On integrated GB10 systems
 * these are the numbers nvidia-smi cannot report. */
Q4_API int32_t NVFP4_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);

/* Waits for the work the library queued on `stream` (NULL: the default
 * stream) of `device`; needed before the CPU reads managed outputs. */
Q4_API int32_t Q4_cuda_synchronize(int32_t device, void* stream);

/* Releases what the CUDA backend caches between calls on every device: the
 * cuBLASLt workspaces, stream-ordered pool memory and cuBLASLt heuristic
 * results (waits for each device that has any first). Later calls rebuild
 * them on demand. Q4_OK and nothing done without CUDA (no plugin, no
 * device, or no CUDA call made yet). */
Q4_API int32_t NVFP4_empty_cache(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_CUDA_H_ */
