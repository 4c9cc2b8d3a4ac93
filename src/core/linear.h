// Reusable 4-bit linears (PrepareWeight + Forward): a weight validated and
// converted once into the backend's ready form, then multiplied by any
// number of activations. Forwards may run concurrently with each other and
// with update_weight; each sees the old or the new weight, never a mix.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/product.h"
#include "core/session.h"

struct Q4_linear {
  Q4_session* session = nullptr;
  std::shared_ptr<q4::core::SessionCounters> counters;
  q4::core::SessionSettings settings;
  int32_t format = 0;
  int64_t n = 0, k = 0;
  q4::CpuPath path = q4::CpuPath::Kernel;
  mutable std::mutex info_mutex;           // guards backend_used and fallback_reason
  int32_t backend_used = Q4_BACKEND_AUTO;  // changes when a CUDA forward falls back
  std::string fallback_reason;             // set only when the requested path could not run
  mutable std::mutex mutex;                // guards `weight` (copied out by forwards)
  std::shared_ptr<const q4::core::PreparedWeight> weight;
  std::atomic<uint64_t> version{1};

  std::shared_ptr<const q4::core::PreparedWeight> current() const {
    std::lock_guard<std::mutex> lock(mutex);
    return weight;
  }
};

namespace q4::core {

Q4_linear* create_linear(Q4_session* s, const Q4_weight_bundle* w);
void forward(Q4_linear* l, const DLTensor* x, DLTensor* out);
void update_weight(Q4_linear* l, const Q4_weight_bundle* w);
void destroy_linear(Q4_linear* l);
void linear_info(const Q4_linear* l, Q4_linear_info* out);
std::string linear_diagnostics(const Q4_linear& l);

}  // namespace q4::core
