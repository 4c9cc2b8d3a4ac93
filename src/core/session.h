// Sessions: the objects an actor runtime or an LLM stack holds for hours.
// A session owns and counts everything created from it (linears in
// linear.h, mutable tensors in mutable_tensor.h) so that leaks are visible.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/buffer.h"
#include "core/options.h"
#include "nvfp4/session.h"

namespace q4::core {

struct SessionSettings {
  ResolvedOptions ops;  // compute path, backend, math mode, threads
  int32_t unified_memory = Q4_UM_DISABLED;
  bool diagnostics = false;
  std::string unified_memory_reason;  // why managed memory is not used
  // Where the session's linears run: Q4_TARGET_CPU or Q4_TARGET_CUDA (AUTO
  // resolved), on CUDA ordinal `device`.
  int32_t target = Q4_TARGET_CPU;
  int32_t device = 0;
  std::string device_name;  // "cpu" or the CUDA device's name
  // Prepared weights (CUDA target) and mutable tensors live in managed
  // memory (the UM policy resolved against the device).
  bool managed = false;
  // The device reads ordinary host memory in place (integrated, with
  // pageable memory access).
  bool reads_host = false;

  bool on_cuda() const { return target == Q4_TARGET_CUDA; }
};

}  // namespace q4::core

struct Q4_session {
  q4::core::SessionSettings settings;
  std::shared_ptr<q4::core::SessionCounters> counters = std::make_shared<q4::core::SessionCounters>();
  std::atomic<int32_t> nvfp4_linears{0}, nf4_linears{0}, mxfp4_linears{0};  // live linears per format
  // The CUDA stream of its linears' forwards (Q4_session_set_stream; NULL =
  // default stream). Outside `settings`, which each linear copies at
  // creation: a new stream applies to the linears already created. Each
  // forward reads it once, when it starts.
  std::atomic<void*> stream{nullptr};
  mutable std::mutex mutex;  // guards last_fallback_reason
  std::string last_fallback_reason;

  void record_fallback(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex);
    last_fallback_reason = reason;
  }
};

namespace q4::core {

SessionSettings resolve_session_config(const Q4_session_config* config);
void fill_stats(const Q4_session& s, Q4_session_stats* out);
void destroy_session(Q4_session* s);
std::string session_diagnostics(const Q4_session& s);

// Writes `text` + NUL into buf when it fits; *needed = size + 1. A NULL buf
// is the size query: Q4_ERR_BUFFER_TOO_SMALL returned, no error recorded.
int32_t copy_out(const std::string& text, char* buf, size_t cap, size_t* needed);

}  // namespace q4::core
