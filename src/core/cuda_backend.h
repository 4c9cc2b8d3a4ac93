// The core's side of the CUDA plugin: loading (once, explicit search order,
// ABI handshake), the recorded nativeLoadState, capabilities, and the
// operations on CUDA tensors. Nothing here includes CUDA headers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "cuda/plugin_abi.h"
#include "nvfp4/nvfp4.h"

namespace q4::cuda {

struct PluginState {
  bool built = false;      // this build compiled the plugin
  bool loaded = false;     // dlopen + handshake succeeded
  std::string path;        // the file that was loaded
  std::string load_state;  // human-readable nativeLoadState
  nvfp4_cuda_plugin_v1 api{};
  nvfp4_cuda_probe probe{};
};

// Loads and probes once per process (thread-safe); never throws.
const PluginState& plugin();

// Q4_CUDA_* for the capabilities.
int32_t cuda_state();

// True when any of the tensors lives in CUDA device memory (kDLCUDA).
bool any_on_device(std::initializer_list<const DLTensor*> tensors);

// Stateless operations on CUDA tensors (validated like the CPU ones).
void nvfp4_quantize(const DLTensor* x, DLTensor* q, DLTensor* s, int32_t layout, float g, float* g_out,
                    const Q4_op_options* opts);
void nvfp4_dequantize(const DLTensor* q, const DLTensor* s, int32_t layout, float g, DLTensor* out,
                      const Q4_op_options* opts);
void nvfp4_linear(const DLTensor* x, const DLTensor* wq, const DLTensor* ws, int32_t layout, float g,
                  const DLTensor* bias, DLTensor* out, const Q4_op_options* opts);
void nvfp4_scaled_mm(const DLTensor* aq, const DLTensor* as, const DLTensor* bq, const DLTensor* bs,
                     int32_t layout, float alpha, const DLTensor* bias, DLTensor* out,
                     const Q4_op_options* opts);

void nf4_quantize(const DLTensor* x, DLTensor* q, DLTensor* absmax, int32_t blocksize,
                  const Q4_op_options* opts);
void nf4_dequantize(const DLTensor* q, const NF4_state* state, DLTensor* out, const Q4_op_options* opts);
void nf4_scaled_mm(const DLTensor* x, const DLTensor* wq, const NF4_state* state, const DLTensor* bias,
                   DLTensor* out, const Q4_op_options* opts);
// True when an NF4 state references CUDA device memory.
bool state_on_device(const NF4_state* state);

// Unified-memory helpers behind the public NVFP4_* functions.
int32_t can_use_managed(int32_t device);
int32_t is_managed(const DLTensor* t);
DLManagedTensorVersioned* to_managed(const DLTensor* src, int32_t device, uint32_t flags);
void managed_prefetch(const DLTensor* t, int32_t device, void* stream);
void memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);
void synchronize(int32_t device, void* stream);

}  // namespace q4::cuda
