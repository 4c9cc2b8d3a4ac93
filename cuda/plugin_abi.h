/* The private C interface between libNVFP4 (the core) and its CUDA plugin
 * libNVFP4_cuda.so. The core dlopens the plugin and calls
 * nvfp4_cuda_plugin_entry(NVFP4_CUDA_PLUGIN_ABI, &table); the plugin fills
 * the table only when the ABI numbers agree (the handshake). Device
 * pointers and streams are plain void*; nothing here needs CUDA headers.
 * Every function returns a Q4_* status; on failure plugin_last_error() has
 * the text (CUDA error names included). */
#ifndef NVFP4_CUDA_PLUGIN_ABI_H_
#define NVFP4_CUDA_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NVFP4_CUDA_PLUGIN_ABI 1
#define NVFP4_CUDA_MAX_DEVICES 16

/* Element types of activations/outputs across the boundary. */
#define NVFP4_CUDA_F32 0
#define NVFP4_CUDA_F16 1
#define NVFP4_CUDA_BF16 2

/* Memory kinds reported by pointer_info. */
#define NVFP4_CUDA_MEM_UNREGISTERED 0
#define NVFP4_CUDA_MEM_HOST 1
#define NVFP4_CUDA_MEM_DEVICE 2
#define NVFP4_CUDA_MEM_MANAGED 3

typedef struct nvfp4_cuda_device_attrs {
  int32_t ordinal;
  int32_t cc_major, cc_minor;
  int32_t managed_memory;            /* cudaDevAttrManagedMemory            */
  int32_t concurrent_managed_access; /* cudaDevAttrConcurrentManagedAccess  */
  int32_t pageable_memory_access;    /* cudaDevAttrPageableMemoryAccess     */
  int32_t multiprocessors;
  int32_t integrated; /* unified-memory SoC (GB10)           */
  int64_t total_memory;
  char name[96];
} nvfp4_cuda_device_attrs;

typedef struct nvfp4_cuda_probe {
  int32_t runtime_version;
  int32_t driver_version;
  int32_t device_count;
  int32_t reserved0;
  nvfp4_cuda_device_attrs devices[NVFP4_CUDA_MAX_DEVICES];
  char compiled_archs[128]; /* e.g. "80;90;100a;120a"                     */
  char error[256];          /* why no device is usable, when count is 0   */
} nvfp4_cuda_probe;

typedef struct nvfp4_cuda_plugin_v1 {
  uint32_t struct_size;
  uint32_t abi;
  const char* (*last_error)(void);
  int32_t (*probe)(nvfp4_cuda_probe* out);
  /* Unified memory. */
  int32_t (*pointer_info)(const void* p, int32_t* kind, int32_t* device);
  int32_t (*alloc_managed)(size_t bytes, void** p);
  int32_t (*free_managed)(void* p);
  int32_t (*copy)(void* dst, const void* src, size_t bytes);
  int32_t (*advise_read_mostly)(void* p, size_t bytes, int32_t device);
  int32_t (*prefetch)(const void* p, size_t bytes, int32_t device /* -1: CPU */, void* stream);
  int32_t (*mem_info)(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);
  int32_t (*synchronize)(int32_t device, void* stream);
  /* NVFP4 (scales linear or swizzled per `layout`). */
  int32_t (*nvfp4_quantize)(int32_t device, const void* x, int32_t x_type, int64_t rows, int64_t k, float g,
                            uint8_t* q, uint8_t* s, int32_t layout, float* g_used, int64_t* bad_index,
                            void* stream);
  int32_t (*nvfp4_dequantize)(int32_t device, const uint8_t* q, const uint8_t* s, int32_t layout, float g,
                              int64_t rows, int64_t k, void* out, int32_t out_type, void* stream);
  int32_t (*nvfp4_linear)(int32_t device, const void* x, int32_t x_type, int64_t m, int64_t k,
                          const uint8_t* wq, const uint8_t* ws, int32_t layout, float g, int64_t n,
                          const void* bias, int32_t bias_type, void* out, int32_t out_type, void* stream);
  int32_t (*nvfp4_scaled_mm)(int32_t device, const uint8_t* aq, const uint8_t* as, const uint8_t* bq,
                             const uint8_t* bs, int32_t layout, int64_t m, int64_t n, int64_t k, float alpha,
                             const void* bias, int32_t bias_type, void* out, int32_t out_type,
                             int32_t allow_fallback, int32_t* used_fallback, void* stream);
  /* NF4 (absmax already resolved to fp32 per block; lut = 16 device values,
   or NULL for the NF4 codebook). */
  int32_t (*nf4_dequantize)(int32_t device, const uint8_t* q, const float* absmax, const float* lut,
                            int64_t blocksize, int64_t n, void* out, int32_t out_type, void* stream);
  int32_t (*nf4_linear)(int32_t device, const void* x, int32_t x_type, int64_t m, int64_t k,
                        const uint8_t* wq, const float* absmax, const float* lut, int64_t blocksize,
                        int64_t n, const void* bias, int32_t bias_type, void* out, int32_t out_type,
                        void* stream);
  /* NF4 quantize (bitsandbytes semantics); *bad_index = first NaN/Inf. */
  int32_t (*nf4_quantize)(int32_t device, const void* x, int32_t x_type, int64_t n, int64_t blocksize,
                          uint8_t* q, float* absmax, int64_t* bad_index, void* stream);
} nvfp4_cuda_plugin_v1;

typedef int32_t (*nvfp4_cuda_plugin_entry_fn)(uint32_t core_abi, nvfp4_cuda_plugin_v1* table);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_CUDA_PLUGIN_ABI_H_ */
