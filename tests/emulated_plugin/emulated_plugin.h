/* Test controls of the emulated CUDA plugin (libNVFP4_cuda_emulated.so).
 * Tests reach them with dlopen(path, RTLD_NOW | RTLD_NOLOAD) + dlsym on the
 * plugin the core loaded (NVFP4_CUDA_PLUGIN=<path>).
 *
 * Configuration, read once when the core loads the plugin:
 *   NVFP4_EMU_DEVICES     1 (default) or 0: no usable device
 *   NVFP4_EMU_CC          compute capability as major*10+minor (default 121)
 *   NVFP4_EMU_INTEGRATED  1 (default): unified-memory SoC like GB10
 *   NVFP4_EMU_MANAGED     1 (default): cudaDevAttrManagedMemory
 *   NVFP4_EMU_CONCURRENT  1 (default): cudaDevAttrConcurrentManagedAccess
 *   NVFP4_EMU_PAGEABLE    default INTEGRATED && CONCURRENT: the device reads
 *                         ordinary (pageable) host memory
 *   NVFP4_EMU_FAIL        a call that fails: alloc_device, alloc_managed,
 *                         copy, advise, prefetch, synchronize, run, or
 *                         kernel (the kernel path is unavailable: a product
 *                         falls back to dequantize + GEMM unless the call
 *                         says KernelOnly, which fails). */
#ifndef NVFP4_EMULATED_PLUGIN_H_
#define NVFP4_EMULATED_PLUGIN_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nvfp4_emu_counters {
  int64_t live_device_allocs, live_managed_allocs, live_bytes;
  int64_t device_allocs, managed_allocs; /* totals                        */
  int64_t copies, advices, prefetches, synchronizations;
  int64_t runs, fallbacks;
  int64_t refused_pointers; /* host pointers caught where device memory was required */
  /* The stream (as an integer) of the last run and of the last synchronize. */
  uint64_t last_run_stream, last_sync_stream;
  int64_t scans; /* NVFP4_CUDA_OP_SCAN_BYTES runs (not counted in runs) */
} nvfp4_emu_counters;

typedef void (*nvfp4_emu_counters_fn)(nvfp4_emu_counters* out);
/* NULL or "" clears; otherwise one of the NVFP4_EMU_FAIL names. */
typedef void (*nvfp4_emu_set_fail_fn)(const char* call);

#ifdef __cplusplus
}
#endif

#endif
