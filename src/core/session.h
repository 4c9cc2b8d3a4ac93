// Sessions, linears and mutable tensors (SPEC §4): the objects an actor
// runtime or an LLM stack holds for hours. Every allocation is counted in
// the owning session so that leaks are visible.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/options.h"
#include "nvfp4/session.h"

namespace q4::core {

// Counters shared by a session and everything it created (objects may
// release memory after the session handle's last use, e.g. a snapshot).
struct SessionCounters {
  std::atomic<int32_t> linears{0};
  std::atomic<int32_t> mutables{0};
  std::atomic<int32_t> snapshots{0};
  std::atomic<int64_t> buffers{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> managed_bytes{0};
  std::atomic<int64_t> forwards{0};
  std::atomic<int64_t> implicit_copies{0};
};

// A counted byte buffer (64-byte aligned).
class Buffer {
 public:
  Buffer(std::shared_ptr<SessionCounters> counters, int64_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  std::shared_ptr<SessionCounters> counters_;
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

struct SessionSettings {
  ResolvedOptions ops;  // compute path, backend, math mode, threads
  int32_t unified_memory = Q4_UM_DISABLED;
  bool diagnostics = false;
  std::string unified_memory_reason;  // why managed memory is not used
};

}  // namespace q4::core

struct Q4_session {
  q4::core::SessionSettings settings;
  std::shared_ptr<q4::core::SessionCounters> counters = std::make_shared<q4::core::SessionCounters>();
};

namespace q4::core {

SessionSettings resolve_session_config(const Q4_session_config* config);
void fill_stats(const Q4_session& s, Q4_session_stats* out);
void destroy_session(Q4_session* s);
std::string session_diagnostics(const Q4_session& s);

Q4_linear* create_linear(Q4_session* s, const Q4_weight_bundle* w);
void forward(Q4_linear* l, const DLTensor* x, DLTensor* out);
void update_weight(Q4_linear* l, const Q4_weight_bundle* w);
void destroy_linear(Q4_linear* l);
void linear_info(const Q4_linear* l, Q4_linear_info* out);
std::string linear_diagnostics(const Q4_linear& l);

Q4_mutable* create_mutable(Q4_session* s, int32_t ndim, const int64_t* shape, DLDataType dtype);
void destroy_mutable(Q4_mutable* m);
void begin_write(Q4_mutable* m, int32_t mode, DLTensor* view);
uint64_t commit(Q4_mutable* m);
void abort_write(Q4_mutable* m);
DLManagedTensorVersioned* acquire(Q4_mutable* m, uint64_t* version);
uint64_t version_of(const Q4_mutable* m);

// Training helpers.
void fake_quantize(const DLTensor* x, DLTensor* out, float g, float* g_out, const Q4_op_options* opts);
void linear_backward(const DLTensor* grad_y, const DLTensor* x, const DLTensor* wq, const DLTensor* ws,
                     int32_t layout, float g, DLTensor* grad_x, DLTensor* grad_w, const Q4_op_options* opts);

// Writes `text` + NUL into buf when it fits; *needed = size + 1. A NULL buf
// is the size query: Q4_ERR_BUFFER_TOO_SMALL returned, no error recorded.
int32_t copy_out(const std::string& text, char* buf, size_t cap, size_t* needed);

}  // namespace q4::core
