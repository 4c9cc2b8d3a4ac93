// libNVFP4_cuda.so: the CUDA backend, loaded by the core on first CUDA use.
// Kernels share the format math with the CPU (src/formats/codec.h), so
// quantization is bit-identical to the CPU reference: same formula, IEEE
// division (nvcc's default -prec-div=true), no approximate reciprocals.
// Streams are the caller's; nothing here synchronizes the device except the
// amax/finite reduction of quantize, whose result the host needs.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "cuda/plugin_abi.h"
#include "cuda/seams.h"
#include "formats/codec.h"
#include "nvfp4/q4_base.h"

#ifndef NVFP4_CUDA_ARCHS
#define NVFP4_CUDA_ARCHS ""
#endif

namespace {

thread_local std::string t_error;

int32_t fail(int32_t status, const std::string& msg) {
  t_error = msg;
  return status;
}

int32_t fail_cuda(cudaError_t e, const char* what) {
  return fail(Q4_ERR_CUDA,
              std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

int32_t fail_lt(cublasStatus_t s, const char* what) {
  return fail(Q4_ERR_CUDA, std::string(what) + ": cuBLASLt status " + std::to_string(static_cast<int>(s)));
}

#define CK(expr)                                        \
  do {                                                  \
    const cudaError_t e_ = (expr);                      \
    if (e_ != cudaSuccess) return fail_cuda(e_, #expr); \
  } while (0)

#define LT(expr)                                                \
  do {                                                          \
    const cublasStatus_t s_ = (expr);                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) return fail_lt(s_, #expr); \
  } while (0)

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

// ---------------------------------------------------------------------------
// Element access
// ---------------------------------------------------------------------------
__device__ __forceinline__ float load_f(const void* p, int32_t type, int64_t i) {
  switch (type) {
    case NVFP4_CUDA_F16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case NVFP4_CUDA_BF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store_f(void* p, int32_t type, int64_t i, float v) {
  switch (type) {
    case NVFP4_CUDA_F16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    case NVFP4_CUDA_BF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

__device__ __forceinline__ int64_t scale_index(int64_t r, int64_t c, int64_t cols, int32_t layout) {
  return layout == Q4_SCALE_SWIZZLED ? q4::fmt::swizzle_offset(r, c, cols) : r * cols + c;
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------
__global__ void amax_finite_kernel(const void* x, int32_t type, int64_t n, unsigned int* amax_bits,
                                   unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = load_f(x, type, i);
    if (!isfinite(v)) atomicMin(first_bad, static_cast<unsigned long long>(i));
    atomicMax(amax_bits, __float_as_uint(fabsf(v)));  // non-negative floats order as integers
  }
}

// One thread per 16-element block: the SPEC 1.3 reference, via the shared codec.
__global__ void nvfp4_quantize_kernel(const void* x, int32_t type, int64_t rows, int64_t k, float g,
                                      uint8_t* q, uint8_t* s, int32_t layout) {
  const int64_t cols = k / 16;
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= rows * cols) return;
  const int64_t r = b / cols, c = b % cols;
  float v[16];
  float bmax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    v[j] = load_f(x, type, b * 16 + j);
    bmax = fmaxf(bmax, fabsf(v[j]));
  }
  const uint32_t code = q4::fmt::nvfp4_block_scale_code(bmax, g);
  const float d = q4::fmt::nvfp4_block_divisor(code, g);
  s[scale_index(r, c, cols, layout)] = static_cast<uint8_t>(code);
  for (int j = 0; j < 16; j += 2) {
    const uint32_t lo = q4::fmt::nvfp4_encode_element(v[j], d);
    const uint32_t hi = q4::fmt::nvfp4_encode_element(v[j + 1], d);
    q[b * 8 + j / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

__global__ void nvfp4_dequantize_kernel(const uint8_t* q, const uint8_t* s, int32_t layout, float g,
                                        int64_t rows, int64_t k, void* out, int32_t type) {
  const int64_t cols = k / 16;
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= rows * cols) return;
  const uint32_t sc = s[scale_index(b / cols, b % cols, cols, layout)];
  for (int j = 0; j < 16; j += 2) {
    const uint8_t byte = q[b * 8 + j / 2];
    store_f(out, type, b * 16 + j, q4::fmt::nvfp4_decode_element(byte & 0xfu, sc, g));
    store_f(out, type, b * 16 + j + 1, q4::fmt::nvfp4_decode_element(byte >> 4, sc, g));
  }
}

// Weight-only GEMV (M <= 8): one warp per output feature, weights decoded in
// registers, fp32 accumulation, warp-shuffle reduction.
template <int M>
__global__ void nvfp4_gemv_kernel(const void* x, int32_t x_type, int64_t k, const uint8_t* wq,
                                  const uint8_t* ws, int32_t layout, float g, int64_t n, const void* bias,
                                  int32_t bias_type, void* out, int32_t out_type) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  const int64_t cols = k / 16;
  float acc[M];
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  for (int64_t e = 2 * lane; e < k; e += 64) {
    const uint8_t byte = wq[(j * k + e) / 2];
    const uint32_t sc = ws[scale_index(j, e / 16, cols, layout)];
    const float w0 = q4::fmt::nvfp4_decode_element(byte & 0xfu, sc, g);
    const float w1 = q4::fmt::nvfp4_decode_element(byte >> 4, sc, g);
    for (int i = 0; i < M; ++i)
      acc[i] += load_f(x, x_type, i * k + e) * w0 + load_f(x, x_type, i * k + e + 1) * w1;
  }
  for (int i = 0; i < M; ++i) {
    float v = acc[i];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) store_f(out, out_type, i * n + j, v + (bias ? load_f(bias, bias_type, j) : 0.0f));
  }
}

__global__ void nf4_dequantize_kernel(const uint8_t* q, const float* absmax, const float* lut, int64_t bs,
                                      int64_t n, void* out, int32_t type) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint8_t byte = q[i >> 1];
    const uint32_t code = (i & 1) ? (byte & 0xfu) : (byte >> 4);
    store_f(out, type, i, lut[code] * absmax[i / bs]);
  }
}

template <int M>
__global__ void nf4_gemv_kernel(const void* x, int32_t x_type, int64_t k, const uint8_t* wq,
                                const float* absmax, const float* lut, int64_t bs, int64_t n,
                                const void* bias, int32_t bias_type, void* out, int32_t out_type) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  float acc[M];
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  for (int64_t e = lane; e < k; e += 32) {
    const int64_t f = j * k + e;
    const uint8_t byte = wq[f >> 1];
    const float w = lut[(f & 1) ? (byte & 0xfu) : (byte >> 4)] * absmax[f / bs];
    for (int i = 0; i < M; ++i) acc[i] += load_f(x, x_type, i * k + e) * w;
  }
  for (int i = 0; i < M; ++i) {
    float v = acc[i];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) store_f(out, out_type, i * n + j, v + (bias ? load_f(bias, bias_type, j) : 0.0f));
  }
}

// One thread per NF4 block: absmax, then x * (1/absmax) coded with the
// bitsandbytes thresholds (shared codec). Element 2j is the high nibble.
__global__ void nf4_quantize_kernel(const void* x, int32_t type, int64_t n, int64_t bs, uint8_t* q,
                                    float* absmax) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t nblocks = (n + bs - 1) / bs;
  if (b >= nblocks) return;
  const int64_t lo = b * bs, hi = lo + bs < n ? lo + bs : n;
  float m = 0.0f;
  for (int64_t i = lo; i < hi; ++i) m = fmaxf(m, fabsf(load_f(x, type, i)));
  absmax[b] = m;
  const float inv = m > 0.0f ? 1.0f / m : 0.0f;
  // bs is even (>= 32), so every byte of the block belongs to it.
  for (int64_t i = lo; i < hi; i += 2) {
    uint32_t c0 = 7u, c1 = 7u;
    if (m > 0.0f) {
      c0 = q4::fmt::nf4_encode(fminf(1.0f, fmaxf(-1.0f, load_f(x, type, i) * inv)));
      if (i + 1 < hi) c1 = q4::fmt::nf4_encode(fminf(1.0f, fmaxf(-1.0f, load_f(x, type, i + 1) * inv)));
    }
    if (i + 1 >= hi) c1 = 0u;  // padding nibble of an odd count
    q[i >> 1] = static_cast<uint8_t>((c0 << 4) | c1);
  }
}

// The NF4 codebook in constant memory, filled from the shared codec when a
// device is first used (the values live once, in src/formats/codec.h).
__constant__ float kNf4Lut[16];

const float* default_lut() {
  void* p = nullptr;
  cudaGetSymbolAddress(&p, kNf4Lut);
  return static_cast<const float*>(p);
}

__global__ void to_f32_kernel(const void* x, int32_t type, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = load_f(x, type, i);
  }
}

// y = alpha * acc + bias, converted to the output type.
__global__ void epilogue_kernel(const float* acc, int64_t m, int64_t n, float alpha, const void* bias,
                                int32_t bias_type, void* out, int32_t out_type) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < m * n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float b = bias ? load_f(bias, bias_type, i % n) : 0.0f;
    store_f(out, out_type, i, alpha * acc[i] + b);
  }
}

__global__ void swizzle_kernel(const uint8_t* linear, int64_t rows, int64_t cols, uint8_t* swizzled) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * cols;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    swizzled[q4::fmt::swizzle_offset(i / cols, i % cols, cols)] = linear[i];
  }
}

// ---------------------------------------------------------------------------
// Per-device state: cuBLASLt handle and workspace, created once.
// ---------------------------------------------------------------------------
struct DeviceState {
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 32u << 20;
  int32_t sm_count = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, int32_t>, cublasLtMatmulAlgo_t> fp4_algos;
  bool fp4_algo_missing = false;
};

std::mutex g_mutex;
DeviceState g_devices[NVFP4_CUDA_MAX_DEVICES];

int32_t device_state(int32_t device, DeviceState** out) {
  if (device < 0 || device >= NVFP4_CUDA_MAX_DEVICES)
    return fail(Q4_ERR_INVALID_ARGUMENT, "device ordinal out of range");
  CK(cudaSetDevice(device));
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& s = g_devices[device];
  if (s.lt == nullptr) {
    LT(cublasLtCreate(&s.lt));
    CK(cudaMalloc(&s.workspace, s.workspace_bytes));
    CK(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, device));
    float lut[16];
    for (uint32_t c = 0; c < 16; ++c) lut[c] = q4::fmt::nf4_decode(c);
    CK(cudaMemcpyToSymbol(kNf4Lut, lut, sizeof lut));
  }
  *out = &s;
  return Q4_OK;
}

struct DeviceBuffer {
  void* p = nullptr;
  cudaStream_t stream = nullptr;
  ~DeviceBuffer() {
    if (p != nullptr) cudaFreeAsync(p, stream);
  }
};

int32_t alloc(DeviceBuffer& b, size_t bytes, cudaStream_t stream) {
  b.stream = stream;
  CK(cudaMallocAsync(&b.p, bytes > 0 ? bytes : 1, stream));
  return Q4_OK;
}

// fp32 GEMM, row-major Y[M,N] = X[M,K] . W[N,K]^T, through cuBLASLt (TN).
int32_t lt_gemm_f32(DeviceState& ds, int64_t M, int64_t N, int64_t K, const float* x, const float* w,
                    float* y, cudaStream_t stream) {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  const q4::cuda::LtGemmParams p = q4::cuda::lt_fp4_gemm_params(M, N, K);
  LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, p.a_rows, p.a_cols, p.lda));
  LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, p.b_rows, p.b_cols, p.ldb));
  LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, p.c_rows, p.c_cols, p.ldc));
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(ds.lt, desc, &one, w, la, x, lb, &zero, y, lc, y, lc, nullptr,
                                           ds.workspace, ds.workspace_bytes, stream);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  if (st != CUBLAS_STATUS_SUCCESS) return fail_lt(st, "cublasLtMatmul (fp32)");
  return Q4_OK;
}

// The large-M weight-only product of both formats: `dequantize` writes W as
// fp32 [N, K]; activations are converted to fp32 when needed; cuBLASLt fp32
// GEMM; then bias and the output dtype in the epilogue.
template <class Dequantize>
int32_t dequant_then_gemm(DeviceState& ds, const void* x, int32_t x_type, int64_t m, int64_t k, int64_t n,
                          const void* bias, int32_t bias_type, void* out, int32_t out_type,
                          cudaStream_t stream, Dequantize&& dequantize) {
  DeviceBuffer w32, x32, y32;
  if (int32_t st = alloc(w32, static_cast<size_t>(n * k) * 4, stream); st != Q4_OK) return st;
  if (int32_t st = alloc(y32, static_cast<size_t>(m * n) * 4, stream); st != Q4_OK) return st;
  dequantize(static_cast<float*>(w32.p));
  CK(cudaGetLastError());
  const float* xf = static_cast<const float*>(x);
  if (x_type != NVFP4_CUDA_F32) {
    if (int32_t st = alloc(x32, static_cast<size_t>(m * k) * 4, stream); st != Q4_OK) return st;
    const q4::cuda::Launch le = q4::cuda::elementwise_launch(m * k, ds.sm_count);
    to_f32_kernel<<<le.blocks, le.threads, 0, stream>>>(x, x_type, m * k, static_cast<float*>(x32.p));
    CK(cudaGetLastError());
    xf = static_cast<const float*>(x32.p);
  }
  if (int32_t st =
          lt_gemm_f32(ds, m, n, k, xf, static_cast<const float*>(w32.p), static_cast<float*>(y32.p), stream);
      st != Q4_OK) {
    return st;
  }
  const q4::cuda::Launch le = q4::cuda::elementwise_launch(m * n, ds.sm_count);
  epilogue_kernel<<<le.blocks, le.threads, 0, stream>>>(static_cast<const float*>(y32.p), m, n, 1.0f, bias,
                                                        bias_type, out, out_type);
  CK(cudaGetLastError());
  return Q4_OK;
}

// ---------------------------------------------------------------------------
// Table entries
// ---------------------------------------------------------------------------
const char* plugin_last_error() {
  return t_error.c_str();
}

int32_t plugin_probe(nvfp4_cuda_probe* out) {
  std::memset(out, 0, sizeof *out);
  std::snprintf(out->compiled_archs, sizeof out->compiled_archs, "%s", NVFP4_CUDA_ARCHS);
  cudaRuntimeGetVersion(&out->runtime_version);
  cudaDriverGetVersion(&out->driver_version);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    std::snprintf(out->error, sizeof out->error, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e),
                  cudaGetErrorString(e));
    cudaGetLastError();  // clear the sticky-free error
    return Q4_OK;
  }
  out->device_count = count < NVFP4_CUDA_MAX_DEVICES ? count : NVFP4_CUDA_MAX_DEVICES;
  for (int d = 0; d < out->device_count; ++d) {
    nvfp4_cuda_device_attrs& a = out->devices[d];
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, d);
    a.ordinal = d;
    a.cc_major = prop.major;
    a.cc_minor = prop.minor;
    a.total_memory = static_cast<int64_t>(prop.totalGlobalMem);
    std::snprintf(a.name, sizeof a.name, "%s", prop.name);
    cudaDeviceGetAttribute(&a.managed_memory, cudaDevAttrManagedMemory, d);
    cudaDeviceGetAttribute(&a.concurrent_managed_access, cudaDevAttrConcurrentManagedAccess, d);
    cudaDeviceGetAttribute(&a.pageable_memory_access, cudaDevAttrPageableMemoryAccess, d);
    cudaDeviceGetAttribute(&a.multiprocessors, cudaDevAttrMultiProcessorCount, d);
    cudaDeviceGetAttribute(&a.integrated, cudaDevAttrIntegrated, d);
  }
  return Q4_OK;
}

int32_t plugin_pointer_info(const void* p, int32_t* kind, int32_t* device) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *kind = NVFP4_CUDA_MEM_UNREGISTERED;
    *device = -1;
    return Q4_OK;
  }
  switch (attr.type) {
    case cudaMemoryTypeHost:
      *kind = NVFP4_CUDA_MEM_HOST;
      break;
    case cudaMemoryTypeDevice:
      *kind = NVFP4_CUDA_MEM_DEVICE;
      break;
    case cudaMemoryTypeManaged:
      *kind = NVFP4_CUDA_MEM_MANAGED;
      break;
    default:
      *kind = NVFP4_CUDA_MEM_UNREGISTERED;
  }
  *device = attr.device;
  return Q4_OK;
}

int32_t plugin_alloc_managed(size_t bytes, void** p) {
  CK(cudaMallocManaged(p, bytes > 0 ? bytes : 1, cudaMemAttachGlobal));
  return Q4_OK;
}

int32_t plugin_free_managed(void* p) {
  CK(cudaFree(p));
  return Q4_OK;
}

int32_t plugin_copy(void* dst, const void* src, size_t bytes) {
  CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));  // direct host->managed or device->managed, no hop
  return Q4_OK;
}

cudaMemLocation location_of(int32_t device) {
  cudaMemLocation loc{};
  if (device < 0) {
    loc.type = cudaMemLocationTypeHost;
    loc.id = 0;
  } else {
    loc.type = cudaMemLocationTypeDevice;
    loc.id = device;
  }
  return loc;
}

int32_t plugin_advise_read_mostly(void* p, size_t bytes, int32_t device) {
  CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetReadMostly, location_of(device)));
  return Q4_OK;
}

int32_t plugin_prefetch(const void* p, size_t bytes, int32_t device, void* stream) {
  CK(cudaMemPrefetchAsync(p, bytes, location_of(device), 0, as_stream(stream)));
  return Q4_OK;
}

int32_t plugin_mem_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  CK(cudaSetDevice(device));
  size_t f = 0, t = 0;
  CK(cudaMemGetInfo(&f, &t));
  *free_bytes = f;
  *total_bytes = t;
  return Q4_OK;
}

int32_t plugin_synchronize(int32_t device, void* stream) {
  CK(cudaSetDevice(device));
  CK(cudaStreamSynchronize(as_stream(stream)));
  return Q4_OK;
}

int32_t plugin_nvfp4_quantize(int32_t device, const void* x, int32_t x_type, int64_t rows, int64_t k, float g,
                              uint8_t* q, uint8_t* s, int32_t layout, float* g_used, int64_t* bad_index,
                              void* stream_p) {
  DeviceState* ds = nullptr;
  if (const int32_t st = device_state(device, &ds); st != Q4_OK) return st;
  cudaStream_t stream = as_stream(stream_p);
  const int64_t n = rows * k;
  *bad_index = -1;
  // amax and the first non-finite index in one pass (the host needs both
  // before any output is written).
  DeviceBuffer red;
  if (const int32_t st = alloc(red, 16, stream); st != Q4_OK) return st;
  auto* amax_bits = static_cast<unsigned int*>(red.p);
  auto* first_bad = reinterpret_cast<unsigned long long*>(static_cast<char*>(red.p) + 8);
  const unsigned long long none = ~0ull;
  CK(cudaMemsetAsync(amax_bits, 0, 4, stream));
  CK(cudaMemcpyAsync(first_bad, &none, 8, cudaMemcpyHostToDevice, stream));
  if (n > 0) {
    const q4::cuda::Launch l = q4::cuda::elementwise_launch(n, ds->sm_count);
    amax_finite_kernel<<<l.blocks, l.threads, 0, stream>>>(x, x_type, n, amax_bits, first_bad);
    CK(cudaGetLastError());
  }
  unsigned int host_amax = 0;
  unsigned long long host_bad = 0;
  CK(cudaMemcpyAsync(&host_amax, amax_bits, 4, cudaMemcpyDeviceToHost, stream));
  CK(cudaMemcpyAsync(&host_bad, first_bad, 8, cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  if (host_bad != none) {
    *bad_index = static_cast<int64_t>(host_bad);
    return fail(Q4_ERR_NON_FINITE, "non-finite value (NaN or Inf) at flat index " + std::to_string(host_bad));
  }
  float amax;
  std::memcpy(&amax, &host_amax, 4);
  const float used = g > 0.0f ? g : q4::fmt::nvfp4_global_scale_from_amax(amax);
  *g_used = used;
  if (layout == Q4_SCALE_SWIZZLED) {
    CK(cudaMemsetAsync(
        s, 0, static_cast<size_t>(q4::fmt::swizzled_rows(rows) * q4::fmt::swizzled_cols(k / 16)), stream));
  }
  const int64_t nblocks = rows * (k / 16);
  if (nblocks > 0) {
    const q4::cuda::Launch l = q4::cuda::blocks_launch(nblocks);
    nvfp4_quantize_kernel<<<l.blocks, l.threads, 0, stream>>>(x, x_type, rows, k, used, q, s, layout);
    CK(cudaGetLastError());
  }
  return Q4_OK;
}

int32_t plugin_nvfp4_dequantize(int32_t device, const uint8_t* q, const uint8_t* s, int32_t layout, float g,
                                int64_t rows, int64_t k, void* out, int32_t out_type, void* stream_p) {
  CK(cudaSetDevice(device));
  const int64_t nblocks = rows * (k / 16);
  if (nblocks == 0) return Q4_OK;
  const q4::cuda::Launch l = q4::cuda::blocks_launch(nblocks);
  nvfp4_dequantize_kernel<<<l.blocks, l.threads, 0, as_stream(stream_p)>>>(q, s, layout, g, rows, k, out,
                                                                           out_type);
  CK(cudaGetLastError());
  return Q4_OK;
}

template <class Launcher>
int32_t gemv_dispatch(int64_t m, Launcher&& launch) {
  switch (m) {
    case 1:
      launch(std::integral_constant<int, 1>{});
      break;
    case 2:
      launch(std::integral_constant<int, 2>{});
      break;
    case 3:
      launch(std::integral_constant<int, 3>{});
      break;
    case 4:
      launch(std::integral_constant<int, 4>{});
      break;
    case 5:
      launch(std::integral_constant<int, 5>{});
      break;
    case 6:
      launch(std::integral_constant<int, 6>{});
      break;
    case 7:
      launch(std::integral_constant<int, 7>{});
      break;
    default:
      launch(std::integral_constant<int, 8>{});
      break;
  }
  CK(cudaGetLastError());
  return Q4_OK;
}

int32_t plugin_nvfp4_linear(int32_t device, const void* x, int32_t x_type, int64_t m, int64_t k,
                            const uint8_t* wq, const uint8_t* ws, int32_t layout, float g, int64_t n,
                            const void* bias, int32_t bias_type, void* out, int32_t out_type,
                            void* stream_p) {
  DeviceState* ds = nullptr;
  if (const int32_t st = device_state(device, &ds); st != Q4_OK) return st;
  cudaStream_t stream = as_stream(stream_p);
  if (m == 0 || n == 0) return Q4_OK;
  if (m <= 8) {
    const q4::cuda::Launch l = q4::cuda::gemv_launch(n);
    return gemv_dispatch(m, [&](auto mm) {
      nvfp4_gemv_kernel<decltype(mm)::value><<<l.blocks, l.threads, 0, stream>>>(
          x, x_type, k, wq, ws, layout, g, n, bias, bias_type, out, out_type);
    });
  }
  // Large M: dequantize W once to fp32, then the cuBLASLt fp32 GEMM.
  return dequant_then_gemm(*ds, x, x_type, m, k, n, bias, bias_type, out, out_type, stream, [&](float* w32) {
    const q4::cuda::Launch lb = q4::cuda::blocks_launch(n * (k / 16));
    nvfp4_dequantize_kernel<<<lb.blocks, lb.threads, 0, stream>>>(wq, ws, layout, g, n, k, w32,
                                                                  NVFP4_CUDA_F32);
  });
}

// W4A4 on Blackwell: cuBLASLt block-scaled FP4 (A = W, B = X, TN), global
// scales folded into alpha by the caller, fp32 accumulation, bias in a
// follow-up kernel. Zero heuristic results -> UNSUPPORTED, or with
// allow_fallback the dequantize + fp32 GEMM path (reported in used_fallback).
int32_t plugin_nvfp4_scaled_mm(int32_t device, const uint8_t* aq, const uint8_t* as, const uint8_t* bq,
                               const uint8_t* bs, int32_t layout, int64_t m, int64_t n, int64_t k,
                               float alpha, const void* bias, int32_t bias_type, void* out, int32_t out_type,
                               int32_t allow_fallback, int32_t* used_fallback, void* stream_p) {
  DeviceState* ds = nullptr;
  if (const int32_t st = device_state(device, &ds); st != Q4_OK) return st;
  cudaStream_t stream = as_stream(stream_p);
  *used_fallback = 0;
  if (m == 0 || n == 0) return Q4_OK;
  const q4::cuda::LtGemmParams p = q4::cuda::lt_fp4_gemm_params(m, n, k);
  // Swizzled scales for cuBLASLt.
  DeviceBuffer sa, sb, y32;
  const uint8_t* a_sw = as;
  const uint8_t* b_sw = bs;
  if (layout == Q4_SCALE_LINEAR && p.valid) {
    if (int32_t st = alloc(sa, static_cast<size_t>(p.b_scale_bytes), stream); st != Q4_OK) return st;
    if (int32_t st = alloc(sb, static_cast<size_t>(p.a_scale_bytes), stream); st != Q4_OK) return st;
    CK(cudaMemsetAsync(sa.p, 0, static_cast<size_t>(p.b_scale_bytes), stream));
    CK(cudaMemsetAsync(sb.p, 0, static_cast<size_t>(p.a_scale_bytes), stream));
    const q4::cuda::Launch l1 = q4::cuda::elementwise_launch(m * (k / 16), ds->sm_count);
    swizzle_kernel<<<l1.blocks, l1.threads, 0, stream>>>(as, m, k / 16, static_cast<uint8_t*>(sa.p));
    const q4::cuda::Launch l2 = q4::cuda::elementwise_launch(n * (k / 16), ds->sm_count);
    swizzle_kernel<<<l2.blocks, l2.threads, 0, stream>>>(bs, n, k / 16, static_cast<uint8_t*>(sb.p));
    CK(cudaGetLastError());
    a_sw = static_cast<const uint8_t*>(sa.p);
    b_sw = static_cast<const uint8_t*>(sb.p);
  }
  if (int32_t st = alloc(y32, static_cast<size_t>(m * n) * 4, stream); st != Q4_OK) return st;
  bool done = false;
  std::string why = p.valid ? "" : p.why_invalid;
  if (p.valid) {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_sw,
                                      sizeof b_sw));  // A = W
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_sw,
                                      sizeof a_sw));  // B = X
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_4F_E2M1, p.a_rows, p.a_cols, p.lda));
    LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_4F_E2M1, p.b_rows, p.b_cols, p.ldb));
    LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, p.c_rows, p.c_cols, p.ldc));
    cublasLtMatmulAlgo_t algo{};
    bool have_algo = false;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      const auto key = std::make_tuple(m, n, k, layout);
      const auto it = ds->fp4_algos.find(key);
      if (it != ds->fp4_algos.end()) {
        algo = it->second;
        have_algo = true;
      }
    }
    if (!have_algo) {
      cublasLtMatmulPreference_t pref = nullptr;
      LT(cublasLtMatmulPreferenceCreate(&pref));
      LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &ds->workspace_bytes, sizeof ds->workspace_bytes));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t hs =
          cublasLtMatmulAlgoGetHeuristic(ds->lt, desc, la, lb, lc, lc, pref, 1, &result, &found);
      cublasLtMatmulPreferenceDestroy(pref);
      if (hs == CUBLAS_STATUS_SUCCESS && found > 0) {
        algo = result.algo;
        have_algo = true;
        std::lock_guard<std::mutex> lock(g_mutex);
        ds->fp4_algos[std::make_tuple(m, n, k, layout)] = algo;
      } else {
        why = "cuBLASLt has no block-scaled FP4 algorithm for this device/shape";
      }
    }
    if (have_algo) {
      const float zero = 0.0f;
      const cublasStatus_t st = cublasLtMatmul(ds->lt, desc, &alpha, bq, la, aq, lb, &zero, y32.p, lc, y32.p,
                                               lc, &algo, ds->workspace, ds->workspace_bytes, stream);
      if (st == CUBLAS_STATUS_SUCCESS) {
        done = true;
      } else {
        why = "cublasLtMatmul (FP4) status " + std::to_string(static_cast<int>(st));
      }
    }
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
  }
  float epilogue_alpha = 1.0f;
  if (!done) {
    if (!allow_fallback) return fail(Q4_ERR_UNSUPPORTED, why);
    // Fallback: dequantize both (block scales only) and run the fp32 GEMM.
    DeviceBuffer a32, b32;
    if (int32_t st = alloc(a32, static_cast<size_t>(m * k) * 4, stream); st != Q4_OK) return st;
    if (int32_t st = alloc(b32, static_cast<size_t>(n * k) * 4, stream); st != Q4_OK) return st;
    const q4::cuda::Launch la1 = q4::cuda::blocks_launch(m * (k / 16));
    nvfp4_dequantize_kernel<<<la1.blocks, la1.threads, 0, stream>>>(aq, as, layout, 1.0f, m, k, a32.p,
                                                                    NVFP4_CUDA_F32);
    const q4::cuda::Launch lb1 = q4::cuda::blocks_launch(n * (k / 16));
    nvfp4_dequantize_kernel<<<lb1.blocks, lb1.threads, 0, stream>>>(bq, bs, layout, 1.0f, n, k, b32.p,
                                                                    NVFP4_CUDA_F32);
    CK(cudaGetLastError());
    if (int32_t st = lt_gemm_f32(*ds, m, n, k, static_cast<const float*>(a32.p),
                                 static_cast<const float*>(b32.p), static_cast<float*>(y32.p), stream);
        st != Q4_OK) {
      return st;
    }
    epilogue_alpha = alpha;
    *used_fallback = 1;
    t_error = why;  // the reason, for the caller's fallbackReason
  }
  const q4::cuda::Launch le = q4::cuda::elementwise_launch(m * n, ds->sm_count);
  epilogue_kernel<<<le.blocks, le.threads, 0, stream>>>(static_cast<const float*>(y32.p), m, n,
                                                        epilogue_alpha, bias, bias_type, out, out_type);
  CK(cudaGetLastError());
  return Q4_OK;
}

int32_t plugin_nf4_quantize(int32_t device, const void* x, int32_t x_type, int64_t n, int64_t bs, uint8_t* q,
                            float* absmax, int64_t* bad_index, void* stream_p) {
  DeviceState* ds = nullptr;
  if (const int32_t st = device_state(device, &ds); st != Q4_OK) return st;
  cudaStream_t stream = as_stream(stream_p);
  *bad_index = -1;
  if (n == 0) return Q4_OK;
  DeviceBuffer red;
  if (const int32_t st = alloc(red, 16, stream); st != Q4_OK) return st;
  auto* amax_bits = static_cast<unsigned int*>(red.p);
  auto* first_bad = reinterpret_cast<unsigned long long*>(static_cast<char*>(red.p) + 8);
  const unsigned long long none = ~0ull;
  CK(cudaMemcpyAsync(first_bad, &none, 8, cudaMemcpyHostToDevice, stream));
  const q4::cuda::Launch l = q4::cuda::elementwise_launch(n, ds->sm_count);
  amax_finite_kernel<<<l.blocks, l.threads, 0, stream>>>(x, x_type, n, amax_bits, first_bad);
  CK(cudaGetLastError());
  unsigned long long host_bad = 0;
  CK(cudaMemcpyAsync(&host_bad, first_bad, 8, cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  if (host_bad != none) {
    *bad_index = static_cast<int64_t>(host_bad);
    return fail(Q4_ERR_NON_FINITE, "non-finite value at flat index " + std::to_string(host_bad));
  }
  const q4::cuda::Launch lb = q4::cuda::blocks_launch((n + bs - 1) / bs, 128);
  nf4_quantize_kernel<<<lb.blocks, lb.threads, 0, stream>>>(x, x_type, n, bs, q, absmax);
  CK(cudaGetLastError());
  return Q4_OK;
}

int32_t plugin_nf4_dequantize(int32_t device, const uint8_t* q, const float* absmax, const float* lut,
                              int64_t bs, int64_t n, void* out, int32_t out_type, void* stream_p) {
  DeviceState* ds = nullptr;
  if (const int32_t st = device_state(device, &ds); st != Q4_OK) return st;
  if (lut == nullptr) lut = default_lut();
  if (n == 0) return Q4_OK;
  const q4::cuda::Launch l = q4::cuda::elementwise_launch(n, ds->sm_count);
  nf4_dequantize_kernel<<<l.blocks, l.threads, 0, as_stream(stream_p)>>>(q, absmax, lut, bs, n, out,
                                                                         out_type);
  CK(cudaGetLastError());
  return Q4_OK;
}

int32_t plugin_nf4_linear(int32_t device, const void* x, int32_t x_type, int64_t m, int64_t k,
                          const uint8_t* wq, const float* absmax, const float* lut, int64_t bs, int64_t n,
                          const void* bias, int32_t bias_type, void* out, int32_t out_type, void* stream_p) {
  DeviceState* ds = nullptr;
  if (const int32_t st = device_state(device, &ds); st != Q4_OK) return st;
  cudaStream_t stream = as_stream(stream_p);
  if (lut == nullptr) lut = default_lut();
  if (m == 0 || n == 0) return Q4_OK;
  if (m <= 8) {
    const q4::cuda::Launch l = q4::cuda::gemv_launch(n);
    return gemv_dispatch(m, [&](auto mm) {
      nf4_gemv_kernel<decltype(mm)::value><<<l.blocks, l.threads, 0, stream>>>(
          x, x_type, k, wq, absmax, lut, bs, n, bias, bias_type, out, out_type);
    });
  }
  return dequant_then_gemm(*ds, x, x_type, m, k, n, bias, bias_type, out, out_type, stream, [&](float* w32) {
    const q4::cuda::Launch ld = q4::cuda::elementwise_launch(n * k, ds->sm_count);
    nf4_dequantize_kernel<<<ld.blocks, ld.threads, 0, stream>>>(wq, absmax, lut, bs, n * k, w32,
                                                                NVFP4_CUDA_F32);
  });
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int32_t nvfp4_cuda_plugin_entry(
    uint32_t core_abi, nvfp4_cuda_plugin_v1* table) {
  if (table == nullptr) return Q4_ERR_NULL_POINTER;
  if (core_abi != NVFP4_CUDA_PLUGIN_ABI) {
    t_error = "plugin ABI " + std::to_string(NVFP4_CUDA_PLUGIN_ABI) + " does not match core ABI " +
              std::to_string(core_abi);
    return Q4_ERR_UNSUPPORTED;
  }
  nvfp4_cuda_plugin_v1 t{};
  t.struct_size = sizeof t;
  t.abi = NVFP4_CUDA_PLUGIN_ABI;
  t.last_error = plugin_last_error;
  t.probe = plugin_probe;
  t.pointer_info = plugin_pointer_info;
  t.alloc_managed = plugin_alloc_managed;
  t.free_managed = plugin_free_managed;
  t.copy = plugin_copy;
  t.advise_read_mostly = plugin_advise_read_mostly;
  t.prefetch = plugin_prefetch;
  t.mem_info = plugin_mem_info;
  t.synchronize = plugin_synchronize;
  t.nvfp4_quantize = plugin_nvfp4_quantize;
  t.nvfp4_dequantize = plugin_nvfp4_dequantize;
  t.nvfp4_linear = plugin_nvfp4_linear;
  t.nvfp4_scaled_mm = plugin_nvfp4_scaled_mm;
  t.nf4_dequantize = plugin_nf4_dequantize;
  t.nf4_linear = plugin_nf4_linear;
  t.nf4_quantize = plugin_nf4_quantize;
  *table = t;
  return Q4_OK;
}
