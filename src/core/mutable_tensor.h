// Mutable tensors: single writer, many readers, version stamps. A writer
// fills a private buffer and commits it atomically; a reader's snapshot
// stays valid and unchanged until released, however many commits follow.
#pragma once

#include <cstdint>

#include "core/session.h"

namespace q4::core {

Q4_mutable* create_mutable(Q4_session* s, int32_t ndim, const int64_t* shape, DLDataType dtype);
void destroy_mutable(Q4_mutable* m);
void begin_write(Q4_mutable* m, int32_t mode, DLTensor* view);
uint64_t commit(Q4_mutable* m);
void abort_write(Q4_mutable* m);
DLManagedTensorVersioned* acquire(Q4_mutable* m, uint64_t* version);
uint64_t version_of(const Q4_mutable* m);

}  // namespace q4::core
