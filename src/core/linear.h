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
#include <vector>

#include "core/product.h"
#include "core/session.h"

namespace q4::core {

// The host buffers of a linear's retired weight, for its next update to
// write into (update_weight says when they are kept). A weight's shared_ptr
// hands its storage here when its last holder lets go (its deleter:
// retire), in whatever thread that is, after every holder's reads; the
// next update takes the buffers (take), both under `mutex`. Counted in the
// session's bytes while kept.
struct SpareStorage {
  std::mutex mutex;
  bool keep = false;                             // guarded by mutex
  std::vector<std::unique_ptr<Buffer>> buffers;  // guarded by mutex
  // Keeps p's host buffers when `keep` (p: the weight's deleter's own
  // pointer, its only holder by then), in place of those kept before;
  // frees the rest outside the lock. Never throws.
  void retire(std::shared_ptr<const PreparedWeight> p) noexcept;
  std::vector<std::unique_ptr<Buffer>> take();
};

}  // namespace q4::core

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
  // Where the host storage of a retired weight waits for the next update
  // (q4::core::update_weight); shared with the weights' deleters.
  std::shared_ptr<q4::core::SpareStorage> spare = std::make_shared<q4::core::SpareStorage>();

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
