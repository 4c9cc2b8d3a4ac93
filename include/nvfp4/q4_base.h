/* libNVFP4 — format-neutral base of the C ABI: export macro, status codes,
 * errors, version, enums, options, capabilities, logging.
 *
 * Conventions (docs/abi.md):
 *  - every fallible function returns an int32_t status (Q4_OK == 0) and writes
 *    results through out-parameters;
 *  - status and enum values are pinned forever; new values are only appended;
 *  - structs that may grow start with `uint32_t struct_size` (set it to
 *    sizeof(the struct) before the call) and end with reserved fields. A
 *    smaller (older) struct is accepted: input fields past its size take
 *    their zero defaults (an input size must end where a field ends, not
 *    inside one), output fields past it are not written; a larger
 *    (newer) input struct may only carry zeros past what this library
 *    knows. The *_init functions write at most struct_size bytes; a
 *    struct_size of 0 (or any value that is not a size) means the ABI 1
 *    size, so zero-initialized structs work;
 *  - nothing in this header depends on CUDA or the C++ standard library.
 *
 * Thread-safety: every function in this header is callable concurrently from
 * any number of threads unless its comment says otherwise.
 */
#ifndef NVFP4_Q4_BASE_H_
#define NVFP4_Q4_BASE_H_

#include <stddef.h>
#include <stdint.h>

#include "nvfp4/dlpack.h"
#include "nvfp4/version.h"

#if defined(_WIN32)
#if defined(NVFP4_BUILDING_LIBRARY)
#define Q4_API __declspec(dllexport)
#else
#define Q4_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define Q4_API __attribute__((visibility("default")))
#else
#define Q4_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status codes (pinned).                                                    */
/* ------------------------------------------------------------------------ */
#define Q4_OK 0
#define Q4_ERR_INVALID_ARGUMENT 1  /* a value is out of its documented range   */
#define Q4_ERR_NULL_POINTER 2      /* a required pointer is NULL               */
#define Q4_ERR_DTYPE 3             /* tensor dtype not accepted here           */
#define Q4_ERR_SHAPE 4             /* ndim, shape or shape agreement           */
#define Q4_ERR_DEVICE 5            /* tensor device not usable by the backend  */
#define Q4_ERR_STRIDES 6           /* non-contiguous strides not supported     */
#define Q4_ERR_ALIGNMENT 7         /* data pointer / byte_offset misaligned    */
#define Q4_ERR_OVERFLOW 8          /* size arithmetic overflows                */
#define Q4_ERR_ALIASING 9          /* an output overlaps an input or output    */
#define Q4_ERR_NON_FINITE 10       /* NaN/Inf in an input that must be finite  */
#define Q4_ERR_UNSUPPORTED 11      /* valid request the backend cannot run     */
#define Q4_ERR_OUT_OF_MEMORY 12    /* allocation failed                        */
#define Q4_ERR_BUFFER_TOO_SMALL 13 /* caller buffer too small (size returned) */
#define Q4_ERR_BUSY 14             /* resource held by another writer          */
#define Q4_ERR_SCHEMA 15           /* checkpoint schema incomplete/ambiguous   */
#define Q4_ERR_NOT_FOUND 16        /* named item does not exist                */
#define Q4_ERR_CUDA 17             /* CUDA runtime/driver/cuBLASLt error       */
#define Q4_ERR_NOT_AVAILABLE 18    /* component (CUDA plugin, device) absent   */
#define Q4_ERR_IO 19               /* file-system error                        */
#define Q4_ERR_FORMAT 20           /* malformed file or serialized data        */
#define Q4_ERR_STATE 21            /* object in the wrong state for the call   */
#define Q4_ERR_INTERNAL 99         /* a bug in libNVFP4; please report it      */

/* Static, never-NULL text for a status code ("unknown status" for others). */
Q4_API const char* Q4_status_string(int32_t status);

/* This thread's message for the last failed call into the library (naming
 * the function, the argument, expected and actual values), or "" if none.
 * The pointer stays valid until this thread's next failing library call. */
Q4_API const char* Q4_last_error(void);

/* Clears this thread's last error. */
Q4_API void Q4_clear_error(void);

/* ------------------------------------------------------------------------ */
/* Version.                                                                  */
/* ------------------------------------------------------------------------ */
/* Runtime version as NVFP4_VERSION_NUMBER, and as static text "0.1.0". */
Q4_API int32_t Q4_version(void);
Q4_API const char* Q4_version_string(void);
/* Runtime ABI major version; bindings compare it with NVFP4_ABI_VERSION. */
Q4_API int32_t Q4_abi_version(void);

/* ------------------------------------------------------------------------ */
/* Enumerations (pinned values).                                             */
/* ------------------------------------------------------------------------ */
/* Layout of a block-scale argument; always stated by the caller. */
#define Q4_SCALE_LINEAR 0   /* [rows, K/16] row-major bytes (MXFP4: K/32)   */
#define Q4_SCALE_SWIZZLED 1 /* cuBLASLt VEC16_UE4M3 (MXFP4: VEC32_UE8M0) tiled layout (docs/formats.md) */

/* Compute path (docs/abi.md §8). */
#define Q4_PATH_AUTO 0 /* == KERNEL_OR_FALLBACK */
#define Q4_PATH_KERNEL_ONLY 1
#define Q4_PATH_KERNEL_OR_FALLBACK 2
#define Q4_PATH_DEQUANT_MATMUL_ONLY 3

/* Backend override (docs/abi.md §8). */
#define Q4_BACKEND_AUTO 0
#define Q4_BACKEND_NVFP4_KERNEL 1
#define Q4_BACKEND_NF4_KERNEL 2
#define Q4_BACKEND_DEQUANT_MATMUL 3

/* Target device kind for an operation (the tensors' device must agree). */
#define Q4_TARGET_AUTO 0
#define Q4_TARGET_CPU 1
#define Q4_TARGET_CUDA 2

/* Math mode of CPU products with float activations. */
#define Q4_MATH_EXACT 0 /* fp32 activations (default)                      */
#define Q4_MATH_FAST 1  /* activations quantized to int8 per block          */

/* 4-bit formats. */
#define Q4_FORMAT_NONE 0
#define Q4_FORMAT_NVFP4 1
#define Q4_FORMAT_NF4 2
#define Q4_FORMAT_MIXED 3 /* a checkpoint holding linears of more than one format */
#define Q4_FORMAT_MXFP4 4 /* OCP MXFP4: E2M1, blocks of 32, E8M0 scales     */

/* CPU instruction-set levels of the kernel table. */
#define Q4_ISA_SCALAR 0
#define Q4_ISA_AVX2 1        /* AVX2 + FMA + F16C                           */
#define Q4_ISA_AVX512 2      /* AVX-512 F/BW/VL/DQ                          */
#define Q4_ISA_AVX512_VNNI 3 /* + VNNI (vpdpbusd on zmm)                   */
#define Q4_ISA_AVX_VNNI 4    /* AVX2 level + VEX AVX-VNNI (vpdpbusd on ymm)  */
#define Q4_ISA_NEON 16       /* aarch64 Advanced SIMD                        */
#define Q4_ISA_NEON_DOTPROD 17
#define Q4_ISA_NEON_I8MM 18 /* + dotprod + i8mm (smmla)                      */
#define Q4_ISA_BEST 255     /* Q4_set_max_isa: no cap                           */

/* CPU feature bits (Q4_capabilities.cpu_features). */
#define Q4_CPU_SSE42 (1ULL << 0)
#define Q4_CPU_AVX (1ULL << 1)
#define Q4_CPU_AVX2 (1ULL << 2)
#define Q4_CPU_FMA (1ULL << 3)
#define Q4_CPU_F16C (1ULL << 4)
#define Q4_CPU_AVX512F (1ULL << 5)
#define Q4_CPU_AVX512BW (1ULL << 6)
#define Q4_CPU_AVX512VL (1ULL << 7)
#define Q4_CPU_AVX512DQ (1ULL << 8)
#define Q4_CPU_AVX512VNNI (1ULL << 9)
#define Q4_CPU_AVX512VBMI (1ULL << 10)
#define Q4_CPU_AVX512BF16 (1ULL << 11)
#define Q4_CPU_AVXVNNI (1ULL << 12)
#define Q4_CPU_OS_AVX (1ULL << 13)    /* XGETBV: OS saves YMM state          */
#define Q4_CPU_OS_AVX512 (1ULL << 14) /* XGETBV: OS saves ZMM/opmask state   */
#define Q4_CPU_NEON (1ULL << 32)
#define Q4_CPU_DOTPROD (1ULL << 33)
#define Q4_CPU_SVE (1ULL << 34)
#define Q4_CPU_I8MM (1ULL << 35)
#define Q4_CPU_BF16 (1ULL << 36)

/* State of the CUDA plugin (Q4_capabilities.cuda_state). */
#define Q4_CUDA_NOT_BUILT 0  /* this build has no CUDA plugin               */
#define Q4_CUDA_NOT_LOADED 1 /* plugin not loaded (not found / load failed) */
#define Q4_CUDA_NO_DEVICE 2  /* plugin loaded, no usable device/driver       */
#define Q4_CUDA_READY 3      /* plugin loaded, at least one device           */

/* ------------------------------------------------------------------------ */
/* Per-call options.                                                         */
/* ------------------------------------------------------------------------ */
typedef struct Q4_op_options {
  uint32_t struct_size; /* sizeof(Q4_op_options)                         */
  int32_t compute_path; /* Q4_PATH_*                                     */
  int32_t backend;      /* Q4_BACKEND_*                                  */
  int32_t target;       /* Q4_TARGET_*                                   */
  int32_t device_id;    /* CUDA device ordinal when target is CUDA       */
  int32_t math_mode;    /* Q4_MATH_*                                     */
  int32_t num_threads;  /* 0: library default (Q4_NUM_THREADS / cores)   */
  int32_t reserved0;    /* must be 0                                     */
  void* stream;         /* cudaStream_t of the caller, NULL = default    */
  uint64_t reserved[6]; /* must be 0                                     */
} Q4_op_options;

/* Fills *opts with the defaults (what a NULL opts means). */
/* (Writes at most opts->struct_size bytes; see the struct_size rule above.) */
Q4_API int32_t Q4_op_options_init(Q4_op_options* opts);

/* ------------------------------------------------------------------------ */
/* Capabilities.                                                             */
/* ------------------------------------------------------------------------ */
typedef struct Q4_capabilities {
  uint32_t struct_size;
  int32_t abi_version;
  uint64_t cpu_features;        /* Q4_CPU_* detected (CPUID+XGETBV / HWCAP)   */
  int32_t isa_best;             /* best Q4_ISA_* this CPU and build support   */
  int32_t isa_active;           /* Q4_ISA_* the kernels use (after any cap)   */
  int32_t num_cpus;             /* online logical CPUs                        */
  int32_t cuda_state;           /* Q4_CUDA_*                                  */
  int32_t cuda_runtime_version; /* e.g. 13000, 0 when unknown             */
  int32_t cuda_driver_version;  /* 0 when unknown                          */
  int32_t cuda_device_count;
  int32_t managed_memory;   /* 1 if any device supports managed memory    */
  int32_t fp4_tensor_cores; /* 1 if any device runs block-scaled FP4 GEMM */
  int32_t reserved0;
  char cpu_vendor[16]; /* "GenuineIntel", "AuthenticAMD", "arm", ... */
  char cpu_brand[64];
  char cuda_archs[64];         /* compiled CUDA architectures, e.g. "80;90;100a" */
  char native_load_state[256]; /* plugin path tried / error text          */
  uint64_t reserved[8];
} Q4_capabilities;

/* Fills *caps (caps->struct_size must be set; smaller older structs are
 * filled up to their size). Probes once per process; later calls reuse it. */
Q4_API int32_t Q4_get_capabilities(Q4_capabilities* caps);

/* Static name of a Q4_ISA_* value ("scalar", "avx2", ...). */
Q4_API const char* Q4_isa_name(int32_t isa);

/* Caps the ISA the CPU kernels may use (Q4_ISA_BEST removes the cap). The
 * environment variable Q4_FORCE_ISA (scalar|avx2|avx_vnni|avx512|avx512_vnni|
 * neon|neon_dotprod|neon_i8mm) sets the initial cap. Asking for an ISA this CPU lacks is
 * Q4_ERR_UNSUPPORTED. Takes effect for calls that start afterwards. */
Q4_API int32_t Q4_set_max_isa(int32_t isa);

/* The Q4_ISA_* of the CPU kernels used by this thread's last operation
 * (-1 before the first one): lets tests and diagnostics prove which variant
 * ran. */
Q4_API int32_t Q4_last_isa_used(void);

/* ------------------------------------------------------------------------ */
/* Matmul tuner (CPU fp32 GEMM of the dequant-matmul backend and the panel
 * GEMM of the 4-bit kernels).                                               */
/* ------------------------------------------------------------------------ */
typedef struct Q4_tune_result {
  uint32_t struct_size;
  int32_t dim;        /* M = N = K of the tuning GEMM                */
  int32_t runs;       /* timed runs per candidate (after a warm-up)  */
  int32_t candidates; /* blockings tried                             */
  int32_t kc_default, mc_default;
  int32_t kc_best, mc_best;
  double default_ms; /* cost with the defaults (see below)          */
  double best_ms;    /* cost with the best candidate                */
  int32_t adopted;   /* 1: best beat the defaults by >= 3 %, in use */
  int32_t persisted; /* 1: written to cache_path                    */
  char cache_path[256];
  char cpu_signature[192];
  uint64_t reserved[4];
} Q4_tune_result;

/* Grid search over K block {64..1024} x M block {32..128} with a warm-up
 * and `runs` timed runs each. A candidate's cost is the median of a dim^3
 * fp32 GEMM plus the median of an exact NVFP4 product on the panel GEMM
 * (max(dim, 256) rows of x, a dim x dim weight); a candidate slower than
 * the defaults at either by more than 3 % is not taken. The defaults are
 * timed before and after the grid (the faster kept); the best is adopted
 * when its cost beats the defaults' by a measured 3 % margin; then the
 * small-batch settings are tuned. With persist=1 the result is stored as
 * JSON per CPU signature in $XDG_CACHE_HOME/nvfp4/ (or ~/.cache/nvfp4/),
 * where the library finds it at its first GEMM (Q4_TUNING=off disables
 * that). Not meant to run concurrently with other work (it times). */
Q4_API int32_t Q4_tune_matmul(int32_t dim, int32_t runs, int32_t persist, Q4_tune_result* result);

/* ------------------------------------------------------------------------ */
/* Logging. The library never prints; it reports through this callback.     */
/* ------------------------------------------------------------------------ */
#define Q4_LOG_OFF 0
#define Q4_LOG_ERROR 1
#define Q4_LOG_WARN 2
#define Q4_LOG_INFO 3
#define Q4_LOG_DEBUG 4

typedef void (*Q4_log_callback)(int32_t level, const char* message, void* user);

/* Installs (or with NULL removes) the process-wide log callback. The
 * callback may be called from any thread; it must not call back into the
 * library's logging setters. The initial level comes from Q4_LOG_LEVEL
 * (off|error|warn|info|debug or 0-4), default warn. */
Q4_API int32_t Q4_set_log_callback(Q4_log_callback callback, void* user);
Q4_API int32_t Q4_set_log_level(int32_t level);
Q4_API int32_t Q4_get_log_level(void);

/* ------------------------------------------------------------------------ */
/* Library-owned tensors for older DLPack consumers.                         */
/* ------------------------------------------------------------------------ */
/* Wraps a versioned tensor the library handed out (a Q4_mutable_acquire
 * snapshot, an NVFP4_to_managed result; any DLManagedTensorVersioned of
 * major version 1 works) into a legacy, unversioned DLManagedTensor, the
 * only form frameworks before DLPack 1.0 accept (NumPy < 2.1's
 * from_dlpack, PyTorch < 2.3). On success the library takes ownership of
 * `tensor`: calling (*out)->deleter(*out) releases both; on failure
 * `tensor` stays the caller's. The legacy struct has no flags: a READ_ONLY
 * snapshot stays read-only by contract (writing through it is undefined
 * behaviour) and IS_COPIED is not reported; keep those facts with it.
 * Thread-safe. */
Q4_API int32_t Q4_dlpack_to_unversioned(struct DLManagedTensorVersioned* tensor, DLManagedTensor** out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_Q4_BASE_H_ */
