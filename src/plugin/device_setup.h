// The decisions of the plugin's device handling, CUDA-free so that the
// tests drive them with a fake device API (tests/test_cuda_seams.cpp); the
// plugin instantiates them with its CUDA calls (cuda/common.cuh).
//
// CurrentDeviceGuard: makes a device current for a scope and restores the
// caller's current device on every exit, failures included (a library call
// must not change the thread's current device).
//
// setup_device: the first use of a device creates the cuBLASLt handle, reads
// the attributes and uploads the NF4 codebook. The state is committed
// (`initialized`, sm_count, cc_major) only when every step succeeded: after
// a failure the device is not ready and the next call retries; no call ever
// sees a "ready" device with a missing codebook (NF4 results all zero) or
// handle. A handle created before a later step failed is kept for the retry.
//
// Api (a small value type; the fake holds a pointer to its state):
//   using Handle;                                  // Handle{} is "none"
//   int32_t get_device(int32_t* device);           // cudaGetDevice
//   int32_t set_device(int32_t device);            // cudaSetDevice
//   int32_t create_handle(Handle* h);              // cublasLtCreate
//   int32_t attributes(int32_t device, int32_t* sm_count, int32_t* cc_major);
//   int32_t upload_codebook();                     // to the current device
// returning Q4_* statuses.
// State: fields `bool initialized; Handle lt; int32_t sm_count, cc_major;`,
// guarded by the caller.
#pragma once

#include <cstdint>

#include "nvfp4/q4_base.h"

namespace q4::cuda {

template <class Api>
class CurrentDeviceGuard {
 public:
  explicit CurrentDeviceGuard(Api api = Api{}) : api_(api) {}
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;
  ~CurrentDeviceGuard() {
    if (previous_ >= 0) api_.set_device(previous_);
  }

  // Makes `device` current; the first call remembers the caller's device
  // (none when it cannot be read: then nothing is restored).
  int32_t set(int32_t device) {
    if (!saved_) {
      int32_t prev = -1;
      if (api_.get_device(&prev) != Q4_OK) prev = -1;
      previous_ = prev;
      saved_ = true;
    }
    return api_.set_device(device);
  }

 private:
  Api api_;
  int32_t previous_ = -1;
  bool saved_ = false;
};

template <class Api, class State>
int32_t setup_device(Api& api, State& s, int32_t device) {
  using Handle = typename Api::Handle;
  if (s.initialized) return Q4_OK;
  if (s.lt == Handle{}) {
    Handle h{};
    const int32_t rc = api.create_handle(&h);
    if (rc != Q4_OK) return rc;
    s.lt = h;
  }
  int32_t sm_count = 0, cc_major = 0;
  int32_t rc = api.attributes(device, &sm_count, &cc_major);
  if (rc != Q4_OK) return rc;
  rc = api.upload_codebook();
  if (rc != Q4_OK) return rc;
  s.sm_count = sm_count;
  s.cc_major = cc_major;
  s.initialized = true;  // only once everything above succeeded
  return Q4_OK;
}

}  // namespace q4::cuda
