// Library-owned tensors for consumers that only know the legacy,
// unversioned DLPack struct (frameworks before DLPack 1.0).
#pragma once

#include "nvfp4/dlpack.h"

namespace q4::core {

// Wraps `tensor` (ownership taken on success) into a legacy DLManagedTensor
// whose deleter releases it. Throws q4::Error on bad input.
DLManagedTensor* to_unversioned(DLManagedTensorVersioned* tensor);

}  // namespace q4::core
