#include "core/buffer.h"

#include <algorithm>
#include <new>
#include <string>

#include "common/error.h"
#include "core/cuda_backend.h"

namespace q4::core {

Buffer::Buffer(std::shared_ptr<SessionCounters> counters, int64_t bytes, Memory memory, int32_t device)
    : counters_(std::move(counters)), memory_(memory), device_(device), size_(bytes) {
  const size_t alloc = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  if (memory == Memory::Host) {
    data_ = static_cast<uint8_t*>(::operator new[](alloc, std::align_val_t(64)));
  } else {
    data_ = static_cast<uint8_t*>(cuda::allocate(alloc, memory == Memory::Managed, device));
  }
  if (counters_) {
    counters_->buffers.fetch_add(1, std::memory_order_relaxed);
    counters_->bytes.fetch_add(bytes, std::memory_order_relaxed);
    if (memory == Memory::Managed) counters_->managed_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
}

Buffer::~Buffer() {
  if (memory_ == Memory::Host) {
    ::operator delete[](data_, std::align_val_t(64));
  } else {
    cuda::deallocate(data_, memory_ == Memory::Managed, device_);  // never throws
  }
  if (counters_) {
    counters_->buffers.fetch_sub(1, std::memory_order_relaxed);
    counters_->bytes.fetch_sub(size_, std::memory_order_relaxed);
    if (memory_ == Memory::Managed) counters_->managed_bytes.fetch_sub(size_, std::memory_order_relaxed);
  }
}

}  // namespace q4::core
