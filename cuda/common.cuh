// Shared by every translation unit of libNVFP4_cuda.so: error reporting,
// the device guard and per-device state, stream-ordered scratch buffers,
// element load/store, and the small kernels both formats use (finite scan,
// conversions, epilogue, scale swizzle). Kernels share the format math with
// the CPU (src/formats/codec.h): same formula, IEEE division (nvcc's default
// -prec-div=true), no approximate reciprocals.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "nvfp4/q4_base.h"
#include "plugin/device_setup.h"
#include "plugin/lt_objects.h"
#include "plugin/plugin_abi.h"
#include "plugin/seams.h"
#include "plugin/workspace_pool.h"

namespace q4::cuda_plugin {

// ---------------------------------------------------------------------------
// Errors: every entry returns a Q4_* status; the text is per thread.
// ---------------------------------------------------------------------------
int32_t fail(int32_t status, const std::string& msg);
int32_t fail_cuda(cudaError_t e, const char* what);
int32_t fail_lt(cublasStatus_t s, const char* what);
const char* last_error();

#define Q4_CK(expr)                                                              \
  do {                                                                           \
    const cudaError_t q4_e_ = (expr);                                            \
    if (q4_e_ != cudaSuccess) return ::q4::cuda_plugin::fail_cuda(q4_e_, #expr); \
  } while (0)

// Propagates a non-OK status.
#define Q4_TRY(expr)                    \
  do {                                  \
    const int32_t q4_st_ = (expr);      \
    if (q4_st_ != Q4_OK) return q4_st_; \
  } while (0)

inline cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

// ---------------------------------------------------------------------------
// Device guard: makes `device` current for the calling thread and restores
// the caller's current device on scope exit.
// ---------------------------------------------------------------------------
// The CUDA calls behind q4::cuda::CurrentDeviceGuard and setup_device
// (src/plugin/device_setup.h): the current device, and the steps of a
// device's first use.
struct DeviceCuda {
  using Handle = cublasLtHandle_t;
  int32_t get_device(int32_t* device);
  int32_t set_device(int32_t device);
  int32_t create_handle(Handle* h);
  int32_t attributes(int32_t device, int32_t* sm_count, int32_t* cc_major);
  int32_t upload_codebook();
};

// Makes a device current for a scope; restores the caller's on every path.
using DeviceGuard = q4::cuda::CurrentDeviceGuard<DeviceCuda>;

// ---------------------------------------------------------------------------
// Per-device state, created on first use. Caches (workspaces, heuristic
// results) are released by empty_cache(); users hold cache_mutex shared
// for the whole call, empty_cache() holds it exclusively.
// ---------------------------------------------------------------------------

// The CUDA calls behind q4::cuda::WorkspacePool (src/plugin/workspace_pool.h).
struct WorkspaceCuda {
  using Stream = cudaStream_t;
  using Event = cudaEvent_t;
  int32_t alloc(size_t bytes, void** p);
  void free(void* p);
  int32_t event_create(Event* e);
  void event_destroy(Event e);
  int32_t record(Event e, Stream s);
  int32_t wait(Stream s, Event e);
};

// cuBLASLt workspaces kept per device: one per stream, at most this many
// before least recently used ones are handed on (workspace_pool.h).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr size_t kWorkspacesPerDevice = 8;

struct DeviceState {
  std::shared_mutex cache_mutex;
  std::mutex mutex;  // the fields below
  bool initialized = false;
  cublasLtHandle_t lt = nullptr;
  int32_t sm_count = 0;
  int32_t cc_major = 0;
  // Thread-safe on their own:
  WorkspaceCuda ws_api;
  q4::cuda::WorkspacePool<WorkspaceCuda> workspaces{kWorkspaceBytes, kWorkspacesPerDevice};
  q4::cuda::LtAlgoCache<cublasLtMatmulAlgo_t> algos;  // heuristic answers, "none" included
  std::vector<void*> result_slots;                    // free ResultSlot buffers (under `mutex`)
};

// A 16-byte device buffer for the reduction results of a call that
// synchronizes its stream before returning (the finite/amax scan, the scale
// scan), taken from the device's free list and given back on destruction.
// A stream-ordered allocation would do, but the default pool returns its
// memory at every synchronization and maps it again at the next call.
class ResultSlot {
 public:
  static constexpr size_t kBytes = 16;
  ResultSlot() = default;
  ResultSlot(const ResultSlot&) = delete;
  ResultSlot& operator=(const ResultSlot&) = delete;
  ~ResultSlot();
  int32_t acquire(DeviceState& s);  // with the device current and a lease held
  template <class T>
  T* as(size_t offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_) + offset);
  }

 private:
  DeviceState* state_ = nullptr;
  void* ptr_ = nullptr;
};

// A cuBLASLt workspace held for one call on `stream` (call with the device
// current and a lease held); on destruction, after the caller enqueued its
// matmul, the workspace's event is recorded on the stream and it is free
// for the next call.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();
  int32_t acquire(DeviceState& s, cudaStream_t stream);
  void* ptr() const { return ptr_; }
  size_t bytes() const { return state_ != nullptr ? state_->workspaces.bytes() : 0; }

 private:
  DeviceState* state_ = nullptr;
  cudaStream_t stream_ = nullptr;
  size_t slot_ = 0;
  void* ptr_ = nullptr;
};

// One call's hold on a device: current device set (and restored), state
// initialized, workspace allocated, caches pinned until destruction.
class DeviceLease {
 public:
  int32_t acquire(int32_t device);
  DeviceState& state() { return *state_; }

 private:
  DeviceGuard guard_;
  std::shared_lock<std::shared_mutex> hold_;
  DeviceState* state_ = nullptr;
};

// Releases cached workspaces, stream-ordered pool memory and heuristic
// results on every device that has state. No CUDA call when none has.
int32_t release_caches();

// Uploads the NF4 codebook to the current device (cuda/nf4_kernels.cu).
int32_t nf4_upload_codebook();

// Stream-ordered scratch memory, freed on scope exit on its stream.
struct DeviceBuffer {
  void* p = nullptr;
  cudaStream_t stream = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p != nullptr) cudaFreeAsync(p, stream);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

int32_t alloc(DeviceBuffer& b, size_t bytes, cudaStream_t stream);

// ---------------------------------------------------------------------------
// Element access.
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
    case NVFP4_CUDA_F16:  // the CPU codec's bits, NaN patterns included (seams.h)
      static_cast<uint16_t*>(p)[i] = q4::cuda::out_f16_bits(v);
      break;
    case NVFP4_CUDA_BF16:
      static_cast<uint16_t*>(p)[i] = q4::cuda::out_bf16_bits(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

__device__ __forceinline__ int64_t scale_index(int64_t r, int64_t c, int64_t cols, int32_t layout) {
  return layout == Q4_SCALE_SWIZZLED ? q4::fmt::swizzle_offset(r, c, cols) : r * cols + c;
}

// ---------------------------------------------------------------------------
// Shared launches (cuda/common.cu). All enqueue on `stream` and report
// launch errors.
// ---------------------------------------------------------------------------

// The first non-finite flat index of x[0, n) (-1 if none) and, when `amax`
// is not NULL, max |x|. Block reductions, one atomic per block; waits on the
// stream (the host needs both before anything is written).
int32_t finite_scan(const void* x, int32_t type, int64_t n, DeviceState& ds, cudaStream_t stream, float* amax,
                    int64_t* bad_index);

// out[i] = float(x[i]).
int32_t to_f32(const void* x, int32_t type, int64_t n, float* out, int32_t sm_count, cudaStream_t stream);

// out[m,n] = alpha * acc[m,n] + bias[n], converted to out_type.
int32_t epilogue(const float* acc, int64_t m, int64_t n, float alpha, const void* bias, int32_t bias_type,
                 void* out, int32_t out_type, int32_t sm_count, cudaStream_t stream);

// Linear [rows, cols] scale bytes into the swizzled layout (pad bytes not
// written: clear them first).
int32_t swizzle_scales(const uint8_t* linear, int64_t rows, int64_t cols, uint8_t* swizzled, int32_t sm_count,
                       cudaStream_t stream);

// One GEMM operand's scales as cuBLASLt reads them (swizzled): `scales`
// itself when `layout` is swizzled, else its [rows, cols] linear bytes
// swizzled into `scratch` (swizzled_bytes, padding zero). *out points at
// the result.
int32_t lt_operand_scales(const uint8_t* scales, int32_t layout, int64_t rows, int64_t cols,
                          int64_t swizzled_bytes, DeviceBuffer& scratch, int32_t sm_count,
                          cudaStream_t stream, const uint8_t** out);

// Calls launch(std::integral_constant<int, M>{}) with M = min(m, 8), m >= 1:
// the GEMV kernels are instantiated for 1..8 rows.
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
  Q4_CK(cudaGetLastError());
  return Q4_OK;
}

// Weight-only products use the GEMV kernels up to this many rows.
constexpr int64_t kGemvMaxRows = 8;

// ---------------------------------------------------------------------------
// Block GEMV (M <= 8) for the E2M1 formats: one warp per output feature,
// each lane reading one 32-bit word of codes (8 elements, inside one scale
// block) per step, so a warp reads 128 consecutive bytes of its row at a
// time, and x as two float4 per row (fp32 x on a 16-byte boundary; else
// element by element). Weights are decoded in registers exactly as the
// dequantize kernels decode them (NVFP4: (e2m1 * e4m3) * g; MXFP4:
// e2m1 * 2^(e8m0 - 127)); fp32 accumulation, warp-shuffle reduction;
// out = alpha * acc + bias. The rows must start on a 4-byte boundary
// (block_gemv_fits). On an H100 this layout measured 2.2-2.5x the one-byte-
// per-lane kernel at M = 1 and 2x at M = 8 (docs/performance.md).
// ---------------------------------------------------------------------------
struct Nvfp4Blocks {
  static constexpr int kBlock = 16;
  __device__ static float scale(uint32_t byte) { return q4::fmt::e4m3_decode(byte); }
  __device__ static float weight(uint32_t code, float scale, float g) {
    return (q4::fmt::e2m1_decode(code) * scale) * g;  // = fmt::nvfp4_decode_element
  }
};

struct Mxfp4Blocks {
  static constexpr int kBlock = 32;
  __device__ static float scale(uint32_t byte) { return q4::fmt::e8m0_decode(byte); }
  __device__ static float weight(uint32_t code, float scale, float) {
    return q4::fmt::e2m1_decode(code) * scale;
  }
};

// Eight consecutive elements of x from index i: two float4 loads (fp32 x,
// i a multiple of 4 and x on a 16-byte boundary), else element by element.
template <bool kVecX>
__device__ __forceinline__ void load_x8(const void* x, int32_t x_type, int64_t i, float (&xv)[8]) {
  if constexpr (kVecX) {
    const auto* xp = reinterpret_cast<const float4*>(static_cast<const float*>(x) + i);
    const float4 a = xp[0], b = xp[1];
    xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
  } else {
#pragma unroll
    for (int t = 0; t < 8; ++t) xv[t] = load_f(x, x_type, i + t);
  }
}

// acc[i] += x[i, e0 .. e0 + 8) . wt for the M rows of x: one 32-bit word's
// eight decoded weights (the word-per-lane GEMVs).
template <int M, bool kVecX>
__device__ __forceinline__ void accumulate_word(const void* x, int32_t x_type, int64_t k, int64_t e0,
                                                const float (&wt)[8], float (&acc)[M]) {
#pragma unroll
  for (int i = 0; i < M; ++i) {
    float xv[8];
    load_x8<kVecX>(x, x_type, i * k + e0, xv);
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[i] += xv[t] * wt[t];
  }
}

// The warp's sums of acc; lane 0 writes out[i, j] = alpha * sum + bias[j]
// for the M rows (one warp per output feature j).
template <int M>
__device__ __forceinline__ void store_rows(const float (&acc)[M], int lane, int64_t j, int64_t n, float alpha,
                                           const void* bias, int32_t bias_type, void* out, int32_t out_type) {
#pragma unroll
  for (int i = 0; i < M; ++i) {
    float v = acc[i];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) store_f(out, out_type, i * n + j, alpha * v + (bias ? load_f(bias, bias_type, j) : 0.0f));
  }
}

inline bool block_gemv_fits(const void* wq) {
  return reinterpret_cast<uintptr_t>(wq) % 4 == 0;
}

template <class F, int M, bool kVecX>
__global__ void block_gemv_kernel(const void* x, int32_t x_type, int64_t k, const uint8_t* wq,
                                  const uint8_t* ws, int32_t layout, float g, float alpha, int64_t n,
                                  const void* bias, int32_t bias_type, void* out, int32_t out_type) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  const int64_t cols = k / F::kBlock;
  const auto* row = reinterpret_cast<const uint32_t*>(wq + j * (k / 2));
  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  for (int64_t w = lane; w < k / 8; w += 32) {
    const uint32_t v = row[w];
    const int64_t e0 = w * 8;
    const float sf = F::scale(ws[scale_index(j, e0 / F::kBlock, cols, layout)]);
    float wt[8];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const uint32_t byte = (v >> (8 * t)) & 0xffu;
      wt[2 * t] = F::weight(byte & 0xfu, sf, g);
      wt[2 * t + 1] = F::weight(byte >> 4, sf, g);
    }
    accumulate_word<M, kVecX>(x, x_type, k, e0, wt, acc);
  }
  store_rows<M>(acc, lane, j, n, alpha, bias, bias_type, out, out_type);
}

// The block GEMV for m <= kGemvMaxRows rows of x.
template <class F>
int32_t block_gemv(int64_t m, const void* x, int32_t x_type, int64_t k, const uint8_t* wq, const uint8_t* ws,
                   int32_t layout, float g, float alpha, int64_t n, const void* bias, int32_t bias_type,
                   void* out, int32_t out_type, cudaStream_t stream) {
  const q4::cuda::Launch l = q4::cuda::gemv_launch(n);
  const bool vec_x = x_type == NVFP4_CUDA_F32 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  return gemv_dispatch(m, [&](auto mm) {
    if (vec_x) {
      block_gemv_kernel<F, decltype(mm)::value, true><<<l.blocks, l.threads, 0, stream>>>(
          x, x_type, k, wq, ws, layout, g, alpha, n, bias, bias_type, out, out_type);
    } else {
      block_gemv_kernel<F, decltype(mm)::value, false><<<l.blocks, l.threads, 0, stream>>>(
          x, x_type, k, wq, ws, layout, g, alpha, n, bias, bias_type, out, out_type);
    }
  });
}

}  // namespace q4::cuda_plugin
