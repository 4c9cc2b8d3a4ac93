// Validated views of borrowed DLPack tensors (docs/abi.md §7, §10). Every entry
// point turns its DLTensor arguments into TensorRefs first; a TensorRef is
// proof that the descriptor is well formed, compact, CPU-accessible and
// that its byte range does not overflow.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "nvfp4/dlpack.h"

namespace q4 {

enum class ElemType : uint8_t {
  F32,
  F16,
  BF16,
  U8,
  E4M3,   // kDLFloat8_e4m3fn
  FP4,    // kDLFloat4_e2m1fn bits 4 lanes 1: two logical elements per byte
  FP4x2,  // kDLFloat4_e2m1fn bits 4 lanes 2: one byte per element
  E8M0,   // kDLFloat8_e8m0fnu (MXFP4 scales)
  Other,
};

const char* elem_type_name(ElemType t);
std::string dtype_text(const DLDataType& dt);
bool is_float_activation(ElemType t);

struct TensorRef {
  const char* name = "";
  uint8_t* data = nullptr;  // data + byte_offset
  ElemType type = ElemType::Other;
  int32_t ndim = 0;
  const int64_t* shape = nullptr;
  int64_t numel = 0;   // logical elements
  int64_t nbytes = 0;  // bytes covered
  DLDevice device{};

  int64_t dim(int32_t i) const { return shape[i]; }
  int64_t last_dim() const { return ndim > 0 ? shape[ndim - 1] : 1; }
  // Product of all dims but the last (1 for 1-D).
  int64_t leading() const;
  std::string shape_text() const;
};

// Parses and validates a DLTensor: NULLs, ndim, shape, dtype, device (CPU,
// CUDAHost, CUDAManaged), compact strides, size overflow, alignment to the
// element size. Throws q4::Error naming `name`.
TensorRef check_tensor(const DLTensor* t, const char* name);
// The same checks, also accepting kDLCUDA: for the validators, which decide
// the placement of a call after parsing all its tensors (kDLCUDA data is
// then never dereferenced on the host).
TensorRef check_tensor_any(const DLTensor* t, const char* name);

// Requirements on a parsed tensor, each throwing a specific status.
void require_float(const TensorRef& t);                // F32/F16/BF16
void require_packed_bytes(const TensorRef& t);         // U8/FP4/FP4x2
void require_scale_bytes(const TensorRef& t);          // U8/E4M3
void require_e8m0_bytes(const TensorRef& t);           // U8/E8M0
void require_type(const TensorRef& t, ElemType type);  // exact type
void require_min_ndim(const TensorRef& t, int32_t ndim);
// Byte count / element count. `why` (what the count is made of) is a
// string, or a callable returning one, called only on failure: the
// messages are not built on every successful call.
[[noreturn]] void fail_nbytes(const TensorRef& t, int64_t expected, const std::string& why);
[[noreturn]] void fail_numel(const TensorRef& t, int64_t expected, const std::string& why);
template <class Why>
std::string why_text(const Why& why) {
  if constexpr (std::is_invocable_v<const Why&>) {
    return why();
  } else {
    return std::string(why);
  }
}
template <class Why>
void require_nbytes(const TensorRef& t, int64_t expected, const Why& why) {
  if (t.nbytes != expected) fail_nbytes(t, expected, why_text(why));
}
template <class Why>
void require_numel(const TensorRef& t, int64_t expected, const Why& why) {
  if (t.numel != expected) fail_numel(t, expected, why_text(why));
}

// Q4_ERR_ALIASING when `out`'s bytes overlap any of `others`.
void require_no_overlap(const TensorRef& out, std::initializer_list<const TensorRef*> others);

// Q4_ERR_NON_FINITE naming the first NaN/Inf flat index of a float tensor.
void require_finite(const TensorRef& t);

}  // namespace q4
