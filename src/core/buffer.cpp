#include "core/buffer.h"

#include <algorithm>
#include <new>

namespace q4::core {

Buffer::Buffer(std::shared_ptr<SessionCounters> counters, int64_t bytes)
    : counters_(std::move(counters)), size_(bytes) {
  const size_t alloc = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  data_ = static_cast<uint8_t*>(::operator new[](alloc, std::align_val_t(64)));
  if (counters_) {
    counters_->buffers.fetch_add(1, std::memory_order_relaxed);
    counters_->bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
}

Buffer::~Buffer() {
  ::operator delete[](data_, std::align_val_t(64));
  if (counters_) {
    counters_->buffers.fetch_sub(1, std::memory_order_relaxed);
    counters_->bytes.fetch_sub(size_, std::memory_order_relaxed);
  }
}

}  // namespace q4::core
