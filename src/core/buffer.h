// Counted memory: every byte a session's objects hold is visible in its
// statistics, so a leak is a test failure, not a mystery.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

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

// Where a buffer lives: host memory (64-byte aligned), ordinary CUDA device
// memory, or CUDA managed memory (both through the plugin).
enum class Memory : uint8_t { Host, Device, Managed };

// A byte buffer, counted in `counters` when given (the stateless
// operations use uncounted scratch buffers); managed bytes also count in
// managed_bytes. Device and managed allocations throw a q4::Error when the
// plugin refuses them; the destructor frees them through the plugin.
class Buffer {
 public:
  Buffer(std::shared_ptr<SessionCounters> counters, int64_t bytes, Memory memory = Memory::Host,
         int32_t device = 0);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  Memory memory() const { return memory_; }
  int32_t device() const { return device_; }
  // Host-accessible memory (host or managed): the CPU may read and write it.
  bool host_accessible() const { return memory_ != Memory::Device; }

 private:
  std::shared_ptr<SessionCounters> counters_;
  Memory memory_ = Memory::Host;
  int32_t device_ = 0;
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace q4::core
