// The cuBLASLt workspaces of one device, one per stream, CUDA-free so that
// the tests drive it with a fake backend (tests/test_cuda_seams.cpp).
//
// A cuBLASLt workspace is scratch that a matmul writes while it runs: two
// matmuls that may run at the same time must not share one. Calls on one
// stream are ordered by the stream, so each stream (keyed by its
// process-unique id, cudaStreamGetId: per-thread default streams and reused
// handles are told apart) gets its own workspace. At most `cap` are kept;
// past that, the least recently used workspace that no call holds is handed
// to the new stream, which first waits (on the GPU, cudaStreamWaitEvent) for
// the event recorded after its last use. If every workspace is held, one
// more is allocated.
//
// Backend:
//   using Stream; using Event;        // value types, Event{} is "none"
//   int32_t alloc(size_t, void**); void free(void*);
//   int32_t event_create(Event*); void event_destroy(Event);
//   int32_t record(Event, Stream);  int32_t wait(Stream, Event);
// returning Q4_* statuses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "nvfp4/q4_base.h"

namespace q4::cuda {

template <class Backend>
class WorkspacePool {
 public:
  using Stream = typename Backend::Stream;
  using Event = typename Backend::Event;

  WorkspacePool(size_t bytes, size_t cap) : bytes_(bytes), cap_(cap) {}
  WorkspacePool(const WorkspacePool&) = delete;
  WorkspacePool& operator=(const WorkspacePool&) = delete;

  size_t bytes() const { return bytes_; }

  // Pins the workspace of stream `key` (running on `stream`); *slot and
  // *ptr identify it until release().
  int32_t acquire(Backend& b, uint64_t key, Stream stream, size_t* slot, void** ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    ++tick_;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].key == key) return pin(i, slot, ptr);
    }
    if (slots_.size() >= cap_) {
      size_t lru = slots_.size();
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].pins == 0 && (lru == slots_.size() || slots_[i].last < slots_[lru].last)) lru = i;
      }
      if (lru < slots_.size()) {
        Slot& s = slots_[lru];
        if (s.recorded) {
          const int32_t rc = b.wait(stream, s.event);  // the previous stream's last use comes first
          if (rc != Q4_OK) return rc;
        }
        s.key = key;
        return pin(lru, slot, ptr);
      }
    }
    Slot s;
    s.key = key;
    int32_t rc = b.alloc(bytes_, &s.ptr);
    if (rc != Q4_OK) return rc;
    rc = b.event_create(&s.event);
    if (rc != Q4_OK) {
      b.free(s.ptr);
      return rc;
    }
    slots_.push_back(s);
    return pin(slots_.size() - 1, slot, ptr);
  }

  // After the last enqueue that uses the workspace: records its event on
  // `stream` and unpins it.
  int32_t release(Backend& b, size_t slot, Stream stream) {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = slots_[slot];
    const int32_t rc = b.record(s.event, stream);
    s.recorded = s.recorded || rc == Q4_OK;
    --s.pins;
    return rc;
  }

  // Frees every workspace. The device must be idle and no call may hold one.
  void clear(Backend& b) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Slot& s : slots_) {
      b.free(s.ptr);
      b.event_destroy(s.event);
    }
    slots_.clear();
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return slots_.size();
  }

 private:
  struct Slot {
    uint64_t key = 0;
    void* ptr = nullptr;
    Event event{};
    bool recorded = false;
    int pins = 0;
    uint64_t last = 0;
  };

  int32_t pin(size_t i, size_t* slot, void** ptr) {
    ++slots_[i].pins;
    slots_[i].last = tick_;
    *slot = i;
    *ptr = slots_[i].ptr;
    return Q4_OK;
  }

  const size_t bytes_;
  const size_t cap_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  uint64_t tick_ = 0;
};

}  // namespace q4::cuda
