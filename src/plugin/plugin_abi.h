/* The private C interface between libNVFP4 (the core) and its CUDA plugin
 * libNVFP4_cuda.so (and the emulated test plugin). Both sides include this
 * one file. The core dlopens the plugin and calls
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

#define NVFP4_CUDA_PLUGIN_ABI 3
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

/* Operations the plugin runs (nvfp4_cuda_op.op). */
#define NVFP4_CUDA_OP_NVFP4_QUANTIZE 1   /* x[m,k] -> q, s (+ global_scale_used, bad_index) */
#define NVFP4_CUDA_OP_NVFP4_DEQUANTIZE 2 /* q, s, global_scale -> out[m,k]                   */
#define NVFP4_CUDA_OP_NVFP4_LINEAR 3     /* out[m,n] = x[m,k] . dequant(q,s,g)[n,k]^T + bias */
#define NVFP4_CUDA_OP_NVFP4_SCALED_MM 4  /* out[m,n] = alpha * A(a_q,a_s) . B(q,s)^T + bias  */
#define NVFP4_CUDA_OP_NF4_QUANTIZE 5     /* x[n] -> q, absmax (+ bad_index)                  */
#define NVFP4_CUDA_OP_NF4_DEQUANTIZE 6   /* q, absmax, quant_map -> out[n]                   */
#define NVFP4_CUDA_OP_NF4_LINEAR 7       /* out[m,n] = x[m,k] . dequant(q,absmax)[n,k]^T     */
/* MXFP4 (E2M1 codes, one E8M0 scale byte per 32 elements in q/s, a_q/a_s;
 * scale_layout linear [rows, k/32] or the 128x4 swizzled tiles; no global
 * scale). Same fields as the NVFP4 ops; the descriptor layout is unchanged. */
#define NVFP4_CUDA_OP_MXFP4_QUANTIZE 8   /* x[m,k] -> q, s (+ bad_index)                     */
#define NVFP4_CUDA_OP_MXFP4_DEQUANTIZE 9 /* q, s -> out[m,k]                                 */
#define NVFP4_CUDA_OP_MXFP4_LINEAR 10    /* out[m,n] = x[m,k] . dequant(q,s)[n,k]^T + bias   */
#define NVFP4_CUDA_OP_MXFP4_SCALED_MM 11 /* out[m,n] = alpha * A(a_q,a_s) . B(q,s)^T + bias  */
/* Scale bytes checked where they are: q = n bytes of device memory;
 * blocksize = NVFP4_CUDA_SCAN_*; bad_index = the lowest byte offset that
 * matches, or -1. Synchronizes the stream. (Added in ABI 3 without a bump:
 * an older plugin answers Q4_ERR_UNSUPPORTED and the core reads the bytes
 * on the host instead.) */
#define NVFP4_CUDA_OP_SCAN_BYTES 12
#define NVFP4_CUDA_SCAN_SIGN_BIT 0 /* byte & 0x80: a negative E4M3 scale (or NaN 0xFF) */
#define NVFP4_CUDA_SCAN_FF 1       /* byte == 0xFF: an E8M0 NaN scale                  */

/* One call of the plugin: everything an operation needs, validated by the
 * core before it gets here (shapes agree, sizes fit, no aliasing, all
 * device pointers on `device`). The plugin validates nothing of its own;
 * it only reports what the device cannot do. Starts with its size so that
 * either side can grow it; the plugin reads only the fields it knows.
 *
 * Shapes: products use m (rows of x / A / out), n (out features, rows of
 * the weight / B) and k (reduction length). NVFP4 quantize/dequantize use
 * m = rows, k = row length. NF4 quantize/dequantize use n = element count
 * (m = k = 0). NF4 weights of linears are n*k elements in flat blocks. */
typedef struct nvfp4_cuda_op {
  uint32_t struct_size; /* sizeof(nvfp4_cuda_op) of the caller            */
  int32_t op;           /* NVFP4_CUDA_OP_*                                */
  int32_t device;       /* CUDA ordinal all pointers belong to            */
  int32_t compute_path; /* Q4_PATH_*: KERNEL_ONLY forbids any fallback    */
  void* stream;         /* cudaStream_t, NULL = legacy default stream     */
  int64_t m, n, k;
  /* Float tensors (NVFP4_CUDA_F32/F16/BF16). bias == NULL: no bias. */
  const void* x;
  void* out;
  const void* bias;
  int32_t x_type, out_type, bias_type;
  int32_t scale_layout; /* Q4_SCALE_* of s and a_s                        */
  /* Packed 4-bit data and E4M3 block scales: the quantize outputs, the
   * dequantize inputs, the weight of a linear, B of scaled_mm. */
  void* q;
  void* s;
  /* A of scaled_mm (packed NVFP4 and its scales). */
  const void* a_q;
  const void* a_s;
  float global_scale; /* NVFP4 g; quantize: 0 = compute from amax        */
  float alpha;        /* scaled_mm                                        */
  /* NF4: fp32 absmax per block (quantize: output), optional 16-entry
   * codebook (NULL = the NF4 codebook), block size. */
  float* absmax;
  const float* quant_map;
  int64_t blocksize;
  /* Results written by the plugin. */
  float global_scale_used;   /* quantize                                  */
  int32_t used_fallback;     /* 1 when the plugin took another route      */
  int64_t bad_index;         /* quantize: first NaN/Inf flat index, or -1 */
  char fallback_reason[160]; /* why, when used_fallback                   */
  uint64_t reserved[8];
} nvfp4_cuda_op;

typedef struct nvfp4_cuda_plugin {
  uint32_t struct_size;
  uint32_t abi;
  const char* (*last_error)(void);
  int32_t (*probe)(nvfp4_cuda_probe* out);
  /* Every operation: one descriptor. */
  int32_t (*run)(nvfp4_cuda_op* op);
  /* Releases cached workspaces and cuBLASLt heuristics (all devices). */
  int32_t (*empty_cache)(void);
  /* Unified memory. */
  int32_t (*pointer_info)(const void* p, int32_t* kind, int32_t* device);
  int32_t (*alloc_managed)(size_t bytes, void** p);
  int32_t (*free_managed)(void* p);
  int32_t (*copy)(void* dst, const void* src, size_t bytes);
  int32_t (*advise_read_mostly)(void* p, size_t bytes, int32_t device);
  int32_t (*prefetch)(const void* p, size_t bytes, int32_t device /* -1: CPU */, void* stream);
  int32_t (*mem_info)(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);
  int32_t (*synchronize)(int32_t device, void* stream);
  /* ABI 3: ordinary device memory (cudaMalloc/cudaFree on `device`; the
   * caller's current device is left as it was). Prepared weights of
   * sessions that do not use managed memory live here. */
  int32_t (*alloc_device)(int32_t device, size_t bytes, void** p);
  int32_t (*free_device)(int32_t device, void* p);
} nvfp4_cuda_plugin;

typedef int32_t (*nvfp4_cuda_plugin_entry_fn)(uint32_t core_abi, nvfp4_cuda_plugin* table);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_CUDA_PLUGIN_ABI_H_ */
