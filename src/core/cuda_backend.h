// The core's side of the CUDA plugin: loading (once, explicit search order,
// ABI handshake), the recorded nativeLoadState, capabilities, and the
// operations on CUDA tensors. Nothing here includes CUDA headers.
#pragma once

#include <cstdint>
#include <string>

#include "core/op_desc.h"
#include "nvfp4/nvfp4.h"
#include "plugin/plugin_abi.h"

namespace q4::cuda {

struct PluginState {
  bool built = false;      // this build compiled the plugin
  bool loaded = false;     // dlopen + handshake succeeded
  std::string path;        // the file that was loaded
  std::string load_state;  // human-readable nativeLoadState
  nvfp4_cuda_plugin api{};
  nvfp4_cuda_probe probe{};
};

// Loads and probes once per process (thread-safe); never throws.
const PluginState& plugin();

// Q4_CUDA_* for the capabilities.
int32_t cuda_state();

// The validated operations on a CUDA device: each marshals its descriptor
// into one plugin call (the plugin validates nothing of its own).
void run(const core::Nvfp4QuantizeDesc& d);
void run(const core::Nvfp4DequantizeDesc& d);
void run(const core::Nf4QuantizeDesc& d);
void run(const core::Nf4DequantizeDesc& d);
// MXFP4 (plugin ops NVFP4_CUDA_OP_MXFP4_*); experts run one plugin linear
// per group on the expert's bytes in place. A product reports a route other
// than the requested one as the ProductDesc overload does.
void run(const core::Mxfp4QuantizeDesc& d);
void run(const core::Mxfp4DequantizeDesc& d);
void run(const core::Mxfp4ProductDesc& d, std::string* fallback_reason = nullptr);
void run(const core::Mxfp4ExpertsDesc& d);
// A product; when the plugin took another route than the requested one
// (KernelOrFallback), *fallback_reason (when given) receives why.
void run(const core::ProductDesc& d, std::string* fallback_reason = nullptr);

// Releases the plugin's cached workspaces and heuristics (Q4_OK without a
// plugin).
int32_t empty_cache();

// Unified-memory helpers behind the public NVFP4_* functions.
int32_t can_use_managed(int32_t device);
int32_t is_managed(const DLTensor* t);
DLManagedTensorVersioned* to_managed(const DLTensor* src, int32_t device, uint32_t flags);
void managed_prefetch(const DLTensor* t, int32_t device, void* stream);
void memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);
void synchronize(int32_t device, void* stream);

// ---------------------------------------------------------------------------
// What sessions, linears and mutable tensors need (plugin ABI 3).
// ---------------------------------------------------------------------------
// A device `device` of a loaded plugin (else Q4_ERR_NOT_AVAILABLE naming
// `arg` and saying why, nativeLoadState included).
const nvfp4_cuda_device_attrs& require_device(int32_t device, const char* arg);
// Why managed memory cannot be shared by the CPU and `device` (empty when
// it can, i.e. when can_use_managed(device) is 1).
std::string managed_unusable_reason(int32_t device);
// The device reads ordinary host memory in place (an integrated device
// with pageable memory access, like GB10).
bool reads_host_memory(int32_t device);
// Device or managed memory through the plugin; throws on failure.
void* allocate(size_t bytes, bool managed, int32_t device);
// Never throws (a failure is logged).
void deallocate(void* p, bool managed, int32_t device) noexcept;
void copy(void* dst, const void* src, size_t bytes);
// Read-mostly advice and, where the device allows it, a prefetch to it.
void advise_weight(void* p, size_t bytes, int32_t device, void* stream);
// NVFP4_CUDA_MEM_* of p (UNREGISTERED without a plugin).
int32_t pointer_kind(const void* p);
// The lowest offset in `bytes` bytes of device memory at p whose byte
// matches NVFP4_CUDA_SCAN_* `mode`, scanned on `device` in `stream` (which
// it synchronizes); -1 when none does; kScanUnsupported when the plugin
// cannot scan (the caller then reads the bytes on the host). Throws on a
// CUDA error.
constexpr int64_t kScanUnsupported = -2;
int64_t scan_device_bytes(const void* p, int64_t bytes, int32_t device, void* stream, int32_t mode);

}  // namespace q4::cuda
