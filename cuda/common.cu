// Errors, device guard, per-device state and caches, scratch buffers, and
// the kernels shared by both formats.
#include <cmath>
#include <cstring>

#include "common.cuh"

namespace q4::cuda_plugin {

namespace {

thread_local std::string t_error;

DeviceState g_devices[NVFP4_CUDA_MAX_DEVICES];

}  // namespace

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------
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

const char* last_error() {
  return t_error.c_str();
}

// ---------------------------------------------------------------------------
// Device guard and state
// ---------------------------------------------------------------------------
int32_t DeviceCuda::get_device(int32_t* device) {
  int d = -1;
  const cudaError_t e = cudaGetDevice(&d);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return fail_cuda(e, "cudaGetDevice");
  }
  *device = d;
  return Q4_OK;
}

int32_t DeviceCuda::set_device(int32_t device) {
  Q4_CK(cudaSetDevice(device));
  return Q4_OK;
}

int32_t DeviceCuda::create_handle(Handle* h) {
  const cublasStatus_t st = cublasLtCreate(h);
  if (st != CUBLAS_STATUS_SUCCESS) {
    *h = nullptr;
    return fail_lt(st, "cublasLtCreate");
  }
  return Q4_OK;
}

int32_t DeviceCuda::attributes(int32_t device, int32_t* sm_count, int32_t* cc_major) {
  int sm = 0, cc = 0;
  Q4_CK(cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, device));
  Q4_CK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, device));
  *sm_count = sm;
  *cc_major = cc;
  return Q4_OK;
}

int32_t DeviceCuda::upload_codebook() {
  return nf4_upload_codebook();
}

int32_t DeviceLease::acquire(int32_t device) {
  if (device < 0 || device >= NVFP4_CUDA_MAX_DEVICES)
    return fail(Q4_ERR_INVALID_ARGUMENT, "device ordinal out of range");
  Q4_TRY(guard_.set(device));
  DeviceState& s = g_devices[device];
  hold_ = std::shared_lock<std::shared_mutex>(s.cache_mutex);
  std::lock_guard<std::mutex> lock(s.mutex);
  DeviceCuda api;
  Q4_TRY(q4::cuda::setup_device(api, s, device));  // commits only when complete
  state_ = &s;
  return Q4_OK;
}

int32_t WorkspaceCuda::alloc(size_t bytes, void** p) {
  Q4_CK(cudaMalloc(p, bytes));
  return Q4_OK;
}

void WorkspaceCuda::free(void* p) {
  cudaFree(p);
}

int32_t WorkspaceCuda::event_create(Event* e) {
  Q4_CK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  return Q4_OK;
}

void WorkspaceCuda::event_destroy(Event e) {
  cudaEventDestroy(e);
}

int32_t WorkspaceCuda::record(Event e, Stream s) {
  Q4_CK(cudaEventRecord(e, s));
  return Q4_OK;
}

int32_t WorkspaceCuda::wait(Stream s, Event e) {
  Q4_CK(cudaStreamWaitEvent(s, e, 0));
  return Q4_OK;
}

int32_t Workspace::acquire(DeviceState& s, cudaStream_t stream) {
  // The stream's process-unique id: the per-thread default stream of each
  // thread, and a new stream that reuses a destroyed one's handle, differ.
  unsigned long long id = 0;
  Q4_CK(cudaStreamGetId(stream, &id));
  Q4_TRY(s.workspaces.acquire(s.ws_api, id, stream, &slot_, &ptr_));
  state_ = &s;
  stream_ = stream;
  return Q4_OK;
}

Workspace::~Workspace() {
  if (state_ != nullptr) state_->workspaces.release(state_->ws_api, slot_, stream_);
}

namespace {

// The plugin's own stream-ordered pool per device, created on first use.
// Unlike the default pool (release threshold 0: its memory is unmapped at
// every synchronization and mapped again by the next allocation, which cost
// ~0.1 ms per call on an H100), it keeps up to kPoolKeepBytes mapped
// between calls; NVFP4_empty_cache trims it to zero.
constexpr uint64_t kPoolKeepBytes = uint64_t{256} << 20;
std::mutex g_pool_mutex;
cudaMemPool_t g_pools[NVFP4_CUDA_MAX_DEVICES] = {};

int32_t plugin_pool(cudaMemPool_t* out) {
  int d = 0;
  Q4_CK(cudaGetDevice(&d));
  if (d < 0 || d >= NVFP4_CUDA_MAX_DEVICES)
    return fail(Q4_ERR_INVALID_ARGUMENT, "device ordinal out of range");
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (g_pools[d] == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = d;
    cudaMemPool_t pool = nullptr;
    Q4_CK(cudaMemPoolCreate(&pool, &props));
    uint64_t keep = kPoolKeepBytes;
    const cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    if (e != cudaSuccess) {
      cudaMemPoolDestroy(pool);
      return fail_cuda(e, "cudaMemPoolSetAttribute");
    }
    g_pools[d] = pool;
  }
  *out = g_pools[d];
  return Q4_OK;
}

}  // namespace

int32_t ResultSlot::acquire(DeviceState& s) {
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.result_slots.empty()) {
      ptr_ = s.result_slots.back();
      s.result_slots.pop_back();
    }
  }
  if (ptr_ == nullptr) Q4_CK(cudaMalloc(&ptr_, kBytes));
  state_ = &s;
  return Q4_OK;
}

ResultSlot::~ResultSlot() {
  if (state_ == nullptr) return;
  try {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->result_slots.push_back(ptr_);
  } catch (...) {  // no memory for the list: give the buffer back instead
    cudaFree(ptr_);
  }
}

int32_t release_caches() {
  DeviceGuard guard;
  for (int32_t d = 0; d < NVFP4_CUDA_MAX_DEVICES; ++d) {
    DeviceState& s = g_devices[d];
    std::unique_lock<std::shared_mutex> hold(s.cache_mutex);  // no call of this process is using d now
    if (!s.initialized) continue;                             // never used: nothing cached
    s.algos.clear();
    Q4_TRY(guard.set(d));
    // Work already enqueued (on any stream) may still read the workspace
    // or pool blocks freed in stream order.
    Q4_CK(cudaDeviceSynchronize());
    s.workspaces.clear(s.ws_api);
    for (void* p : s.result_slots) cudaFree(p);
    s.result_slots.clear();
    cudaMemPool_t pool = nullptr;
    Q4_CK(cudaDeviceGetDefaultMemPool(&pool, d));
    Q4_CK(cudaMemPoolTrimTo(pool, 0));
    cudaMemPool_t own = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_pool_mutex);
      own = g_pools[d];
    }
    if (own != nullptr) Q4_CK(cudaMemPoolTrimTo(own, 0));
  }
  return Q4_OK;
}

int32_t alloc(DeviceBuffer& b, size_t bytes, cudaStream_t stream) {
  b.stream = stream;
  cudaMemPool_t pool = nullptr;
  Q4_TRY(plugin_pool(&pool));
  Q4_CK(cudaMallocFromPoolAsync(&b.p, bytes > 0 ? bytes : 1, pool, stream));
  return Q4_OK;
}

// ---------------------------------------------------------------------------
// Shared kernels
// ---------------------------------------------------------------------------
namespace {

constexpr unsigned long long kNoBadIndex = ~0ull;

// Grid-stride scan; per-thread max|x| and first non-finite index, reduced in
// the warp, then across the block's warps in shared memory, then one atomic
// per block. |x| is non-negative, so its bits order like the floats.
template <bool kAmax>
__global__ void finite_scan_kernel(const void* x, int32_t type, int64_t n, unsigned int* amax_bits,
                                   unsigned long long* first_bad) {
  float m = 0.0f;
  unsigned long long bad = kNoBadIndex;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = load_f(x, type, i);
    if (!isfinite(v) && bad == kNoBadIndex) bad = static_cast<unsigned long long>(i);  // i only grows
    if (kAmax) m = fmaxf(m, fabsf(v));
  }
  for (int off = 16; off > 0; off /= 2) {
    if (kAmax) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
    const unsigned long long other = __shfl_down_sync(0xffffffffu, bad, off);
    bad = other < bad ? other : bad;
  }
  __shared__ float warp_max[32];
  __shared__ unsigned long long warp_bad[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_max[warp] = m;
    warp_bad[warp] = bad;
  }
  __syncthreads();
  if (warp != 0) return;
  const int warps = (blockDim.x + 31) / 32;
  m = lane < warps ? warp_max[lane] : 0.0f;
  bad = lane < warps ? warp_bad[lane] : kNoBadIndex;
  for (int off = 16; off > 0; off /= 2) {
    if (kAmax) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
    const unsigned long long other = __shfl_down_sync(0xffffffffu, bad, off);
    bad = other < bad ? other : bad;
  }
  if (lane == 0) {
    if (kAmax) atomicMax(amax_bits, __float_as_uint(m));
    if (bad != kNoBadIndex) atomicMin(first_bad, bad);
  }
}

// The lowest byte offset matching the scan's predicate: 16 bytes a load
// where the pointer allows (cudaMalloc'ed tensors: always), reduced per
// warp, one atomic per warp that found one.
template <int kMode>
__device__ __forceinline__ bool byte_matches(unsigned b) {
  return kMode == NVFP4_CUDA_SCAN_SIGN_BIT ? (b & 0x80u) != 0 : b == 0xFFu;
}

template <int kMode>
__global__ void scan_bytes_kernel(const uint8_t* p, int64_t n, unsigned long long* first) {
  unsigned long long found = kNoBadIndex;
  const int64_t head = (16 - (reinterpret_cast<uintptr_t>(p) & 15)) & 15;  // bytes before a 16-byte boundary
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = tid; i < head && i < n; i += stride) {
    if (byte_matches<kMode>(p[i]) && found == kNoBadIndex) found = static_cast<unsigned long long>(i);
  }
  const int64_t body = n > head ? (n - head) / 16 : 0;
  const auto* v16 = reinterpret_cast<const uint4*>(p + head);
  for (int64_t j = tid; j < body && found == kNoBadIndex; j += stride) {
    const uint4 v = v16[j];
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    bool any = false;
    for (unsigned x : w) {
      any |= kMode == NVFP4_CUDA_SCAN_SIGN_BIT ? (x & 0x80808080u) != 0 : __vcmpeq4(x, 0xFFFFFFFFu) != 0;
    }
    if (!any) continue;
    for (int b = 0; b < 16; ++b) {
      if (byte_matches<kMode>((w[b / 4] >> (8 * (b % 4))) & 0xFFu)) {
        found = static_cast<unsigned long long>(head + j * 16 + b);
        break;
      }
    }
  }
  for (int64_t i = head + body * 16 + tid; i < n; i += stride) {
    if (byte_matches<kMode>(p[i]) && found == kNoBadIndex) found = static_cast<unsigned long long>(i);
  }
  for (int off = 16; off > 0; off /= 2) {
    const unsigned long long other = __shfl_down_sync(0xffffffffu, found, off);
    found = other < found ? other : found;
  }
  if ((threadIdx.x % 32) == 0 && found != kNoBadIndex) atomicMin(first, found);
}

__global__ void to_f32_kernel(const void* x, int32_t type, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = load_f(x, type, i);
  }
}

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

}  // namespace

int32_t finite_scan(const void* x, int32_t type, int64_t n, DeviceState& ds, cudaStream_t stream, float* amax,
                    int64_t* bad_index) {
  *bad_index = -1;
  if (amax != nullptr) *amax = 0.0f;
  if (n <= 0) return Q4_OK;
  ResultSlot red;
  Q4_TRY(red.acquire(ds));
  auto* amax_bits = red.as<unsigned int>();
  auto* first_bad = red.as<unsigned long long>(8);
  Q4_CK(cudaMemsetAsync(amax_bits, 0, 4, stream));
  Q4_CK(cudaMemsetAsync(first_bad, 0xff, 8, stream));  // all ones: kNoBadIndex
  const q4::cuda::Launch l = q4::cuda::elementwise_launch(n, ds.sm_count);
  if (amax != nullptr) {
    finite_scan_kernel<true><<<l.blocks, l.threads, 0, stream>>>(x, type, n, amax_bits, first_bad);
  } else {
    finite_scan_kernel<false><<<l.blocks, l.threads, 0, stream>>>(x, type, n, amax_bits, first_bad);
  }
  Q4_CK(cudaGetLastError());
  unsigned int host_amax = 0;
  unsigned long long host_bad = 0;
  if (amax != nullptr) Q4_CK(cudaMemcpyAsync(&host_amax, amax_bits, 4, cudaMemcpyDeviceToHost, stream));
  Q4_CK(cudaMemcpyAsync(&host_bad, first_bad, 8, cudaMemcpyDeviceToHost, stream));
  Q4_CK(cudaStreamSynchronize(stream));
  if (host_bad != kNoBadIndex) *bad_index = static_cast<int64_t>(host_bad);
  if (amax != nullptr) std::memcpy(amax, &host_amax, 4);
  return Q4_OK;
}

int32_t scan_bytes(nvfp4_cuda_op& op) {
  if (op.blocksize != NVFP4_CUDA_SCAN_SIGN_BIT && op.blocksize != NVFP4_CUDA_SCAN_FF) {
    return fail(Q4_ERR_INVALID_ARGUMENT, "scan_bytes: unknown predicate " + std::to_string(op.blocksize));
  }
  if (op.n <= 0) return Q4_OK;
  DeviceLease lease;
  Q4_TRY(lease.acquire(op.device));
  cudaStream_t stream = as_stream(op.stream);
  ResultSlot red;
  Q4_TRY(red.acquire(lease.state()));
  auto* first = red.as<unsigned long long>();
  Q4_CK(cudaMemsetAsync(first, 0xff, 8, stream));  // all ones: none found
  const q4::cuda::Launch l = q4::cuda::elementwise_launch((op.n + 15) / 16, lease.state().sm_count);
  const auto* p = static_cast<const uint8_t*>(op.q);
  if (op.blocksize == NVFP4_CUDA_SCAN_SIGN_BIT) {
    scan_bytes_kernel<NVFP4_CUDA_SCAN_SIGN_BIT><<<l.blocks, l.threads, 0, stream>>>(p, op.n, first);
  } else {
    scan_bytes_kernel<NVFP4_CUDA_SCAN_FF><<<l.blocks, l.threads, 0, stream>>>(p, op.n, first);
  }
  Q4_CK(cudaGetLastError());
  unsigned long long host_first = 0;
  Q4_CK(cudaMemcpyAsync(&host_first, first, 8, cudaMemcpyDeviceToHost, stream));
  Q4_CK(cudaStreamSynchronize(stream));
  op.bad_index = host_first == kNoBadIndex ? -1 : static_cast<int64_t>(host_first);
  return Q4_OK;
}

int32_t to_f32(const void* x, int32_t type, int64_t n, float* out, int32_t sm_count, cudaStream_t stream) {
  const q4::cuda::Launch l = q4::cuda::elementwise_launch(n, sm_count);
  to_f32_kernel<<<l.blocks, l.threads, 0, stream>>>(x, type, n, out);
  Q4_CK(cudaGetLastError());
  return Q4_OK;
}

int32_t epilogue(const float* acc, int64_t m, int64_t n, float alpha, const void* bias, int32_t bias_type,
                 void* out, int32_t out_type, int32_t sm_count, cudaStream_t stream) {
  const q4::cuda::Launch l = q4::cuda::elementwise_launch(m * n, sm_count);
  epilogue_kernel<<<l.blocks, l.threads, 0, stream>>>(acc, m, n, alpha, bias, bias_type, out, out_type);
  Q4_CK(cudaGetLastError());
  return Q4_OK;
}

int32_t swizzle_scales(const uint8_t* linear, int64_t rows, int64_t cols, uint8_t* swizzled, int32_t sm_count,
                       cudaStream_t stream) {
  const q4::cuda::Launch l = q4::cuda::elementwise_launch(rows * cols, sm_count);
  swizzle_kernel<<<l.blocks, l.threads, 0, stream>>>(linear, rows, cols, swizzled);
  Q4_CK(cudaGetLastError());
  return Q4_OK;
}

int32_t lt_operand_scales(const uint8_t* scales, int32_t layout, int64_t rows, int64_t cols,
                          int64_t swizzled_bytes, DeviceBuffer& scratch, int32_t sm_count,
                          cudaStream_t stream, const uint8_t** out) {
  *out = scales;
  if (layout != Q4_SCALE_LINEAR) return Q4_OK;
  Q4_TRY(alloc(scratch, static_cast<size_t>(swizzled_bytes), stream));
  Q4_CK(cudaMemsetAsync(scratch.p, 0, static_cast<size_t>(swizzled_bytes), stream));
  Q4_TRY(swizzle_scales(scales, rows, cols, scratch.as<uint8_t>(), sm_count, stream));
  *out = scratch.as<const uint8_t>();
  return Q4_OK;
}

}  // namespace q4::cuda_plugin
