// The plugin's entry table: the handshake, probe, run() (one descriptor per
// operation, dispatched to cuda/nvfp4_kernels.cu and cuda/nf4_kernels.cu),
// empty_cache(), and the unified-memory functions.
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>

#include "common.cuh"
#include "ops.cuh"

#ifndef NVFP4_CUDA_ARCHS
#define NVFP4_CUDA_ARCHS ""
#endif

namespace q4::cuda_plugin {
namespace {

const char* plugin_last_error() {
  return last_error();
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
  Q4_CK(cudaMallocManaged(p, bytes > 0 ? bytes : 1, cudaMemAttachGlobal));
  return Q4_OK;
}

int32_t plugin_free_managed(void* p) {
  Q4_CK(cudaFree(p));
  return Q4_OK;
}

int32_t plugin_alloc_device(int32_t device, size_t bytes, void** p) {
  DeviceGuard guard;
  Q4_TRY(guard.set(device));
  Q4_CK(cudaMalloc(p, bytes > 0 ? bytes : 1));
  return Q4_OK;
}

int32_t plugin_free_device(int32_t device, void* p) {
  DeviceGuard guard;
  Q4_TRY(guard.set(device));
  Q4_CK(cudaFree(p));
  return Q4_OK;
}

int32_t plugin_copy(void* dst, const void* src, size_t bytes) {
  Q4_CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));  // direct host->managed or device->managed, no hop
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
  Q4_CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetReadMostly, location_of(device)));
  return Q4_OK;
}

int32_t plugin_prefetch(const void* p, size_t bytes, int32_t device, void* stream) {
  Q4_CK(cudaMemPrefetchAsync(p, bytes, location_of(device), 0, as_stream(stream)));
  return Q4_OK;
}

int32_t plugin_mem_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  DeviceGuard guard;
  Q4_TRY(guard.set(device));
  size_t f = 0, t = 0;
  Q4_CK(cudaMemGetInfo(&f, &t));
  *free_bytes = f;
  *total_bytes = t;
  return Q4_OK;
}

int32_t plugin_synchronize(int32_t device, void* stream) {
  DeviceGuard guard;
  Q4_TRY(guard.set(device));
  Q4_CK(cudaStreamSynchronize(as_stream(stream)));
  return Q4_OK;
}

// Inputs were validated by the core; only the descriptor itself is checked
// (its size, the operation code), and results are reset before dispatch.
int32_t run_op(nvfp4_cuda_op& op) {
  op.global_scale_used = 0.0f;
  op.used_fallback = 0;
  op.bad_index = -1;
  op.fallback_reason[0] = '\0';
  switch (op.op) {
    case NVFP4_CUDA_OP_NVFP4_QUANTIZE:
      return nvfp4_quantize(op);
    case NVFP4_CUDA_OP_NVFP4_DEQUANTIZE:
      return nvfp4_dequantize(op);
    case NVFP4_CUDA_OP_NVFP4_LINEAR:
      return nvfp4_linear(op);
    case NVFP4_CUDA_OP_NVFP4_SCALED_MM:
      return nvfp4_scaled_mm(op);
    case NVFP4_CUDA_OP_NF4_QUANTIZE:
      return nf4_quantize(op);
    case NVFP4_CUDA_OP_NF4_DEQUANTIZE:
      return nf4_dequantize(op);
    case NVFP4_CUDA_OP_NF4_LINEAR:
      return nf4_linear(op);
    case NVFP4_CUDA_OP_MXFP4_QUANTIZE:
      return mxfp4_quantize(op);
    case NVFP4_CUDA_OP_MXFP4_DEQUANTIZE:
      return mxfp4_dequantize(op);
    case NVFP4_CUDA_OP_MXFP4_LINEAR:
      return mxfp4_linear(op);
    case NVFP4_CUDA_OP_MXFP4_SCALED_MM:
      return mxfp4_scaled_mm(op);
    case NVFP4_CUDA_OP_SCAN_BYTES:
      return scan_bytes(op);
    default:
      return fail(Q4_ERR_UNSUPPORTED, "unknown plugin operation " + std::to_string(op.op));
  }
}

int32_t plugin_run(nvfp4_cuda_op* op) {
  if (op == nullptr) return fail(Q4_ERR_NULL_POINTER, "operation descriptor is NULL");
  if (op->struct_size < offsetof(nvfp4_cuda_op, reserved)) {
    return fail(Q4_ERR_INVALID_ARGUMENT, "operation descriptor of " + std::to_string(op->struct_size) +
                                             " bytes is smaller than this plugin's (" +
                                             std::to_string(offsetof(nvfp4_cuda_op, reserved)) + ")");
  }
  try {
    return run_op(*op);
  } catch (const std::bad_alloc&) {
    return fail(Q4_ERR_OUT_OF_MEMORY, "host allocation failed in the CUDA plugin");
  } catch (...) {
    return fail(Q4_ERR_INTERNAL, "unexpected exception in the CUDA plugin");
  }
}

int32_t plugin_empty_cache() {
  try {
    return release_caches();
  } catch (...) {
    return fail(Q4_ERR_INTERNAL, "unexpected exception in the CUDA plugin");
  }
}

}  // namespace
}  // namespace q4::cuda_plugin

extern "C" __attribute__((visibility("default"))) int32_t nvfp4_cuda_plugin_entry(uint32_t core_abi,
                                                                                  nvfp4_cuda_plugin* table) {
  using namespace q4::cuda_plugin;
  if (table == nullptr) return Q4_ERR_NULL_POINTER;
  if (core_abi != NVFP4_CUDA_PLUGIN_ABI) {
    return fail(Q4_ERR_UNSUPPORTED, "plugin ABI " + std::to_string(NVFP4_CUDA_PLUGIN_ABI) +
                                        " does not match core ABI " + std::to_string(core_abi));
  }
  nvfp4_cuda_plugin t{};
  t.struct_size = sizeof t;
  t.abi = NVFP4_CUDA_PLUGIN_ABI;
  t.last_error = plugin_last_error;
  t.probe = plugin_probe;
  t.run = plugin_run;
  t.empty_cache = plugin_empty_cache;
  t.pointer_info = plugin_pointer_info;
  t.alloc_managed = plugin_alloc_managed;
  t.free_managed = plugin_free_managed;
  t.copy = plugin_copy;
  t.advise_read_mostly = plugin_advise_read_mostly;
  t.prefetch = plugin_prefetch;
  t.mem_info = plugin_mem_info;
  t.synchronize = plugin_synchronize;
  t.alloc_device = plugin_alloc_device;
  t.free_device = plugin_free_device;
  *table = t;
  return Q4_OK;
}
