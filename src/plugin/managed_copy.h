// The steps of NVFP4_to_managed against the plugin table, CUDA-free so that
// tests drive them with a fake table (tests/test_cuda_seams.cpp): allocate
// and copy (unless the source is already managed), advise read-mostly,
// prefetch. Whatever step fails, the allocation made here is freed before
// the status is returned: the caller owns nothing on failure.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nvfp4/q4_base.h"
#include "plugin/plugin_abi.h"

namespace q4::cuda {

struct ManagedCopy {
  int32_t status = Q4_OK;
  void* allocation = nullptr;  // owned managed memory (NULL for a view, and on failure)
  void* data = nullptr;        // what the result points at
};

inline ManagedCopy managed_copy(const nvfp4_cuda_plugin& api, void* src, size_t bytes, bool src_is_managed,
                                int32_t device, bool read_mostly, bool prefetch) {
  ManagedCopy r;
  r.data = src;
  auto failed = [&](int32_t status) {
    if (r.allocation != nullptr) api.free_managed(r.allocation);
    r.allocation = nullptr;
    r.data = nullptr;
    r.status = status;
    return r;
  };
  if (!src_is_managed) {
    const int32_t rc = api.alloc_managed(bytes, &r.allocation);
    if (rc != Q4_OK) {
      r.allocation = nullptr;  // nothing was allocated
      return failed(rc);
    }
    r.data = r.allocation;
    const int32_t cp = api.copy(r.allocation, src, bytes);
    if (cp != Q4_OK) return failed(cp);
  }
  if (read_mostly) {
    const int32_t rc = api.advise_read_mostly(r.data, bytes, device);
    if (rc != Q4_OK) return failed(rc);
  }
  if (prefetch) {
    const int32_t rc = api.prefetch(r.data, bytes, device, nullptr);
    if (rc != Q4_OK) return failed(rc);
  }
  return r;
}

}  // namespace q4::cuda
