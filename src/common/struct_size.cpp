#include "common/struct_size.h"

#include <cstddef>
#include <initializer_list>

#include "nvfp4/ops.h"
#include "nvfp4/session.h"

namespace q4 {
namespace {

// Whether `size` is one of `ends` or the end of an element of the trailing
// array of `count` elements of `elem` bytes at `array_at`.
bool at_end(uint32_t size, std::initializer_list<size_t> ends, size_t array_at, size_t elem, size_t count) {
  for (const size_t e : ends)
    if (size == e) return true;
  for (size_t i = 1; i <= count; ++i)
    if (size == array_at + i * elem) return true;
  return false;
}

}  // namespace

// A field ends where the next one starts (these structs have no padding
// between fields: the static_asserts below); the last one before the
// reserved array where the array starts.
#define Q4_AT(T, f) offsetof(T, f)
#define Q4_RESERVED(T) \
  offsetof(T, reserved), sizeof(T::reserved[0]), sizeof(T::reserved) / sizeof(T::reserved[0])

bool ends_at_field(const ::NF4_state*, uint32_t size) {
  using T = ::NF4_state;
  return at_end(
      size,
      {Q4_AT(T, blocksize), Q4_AT(T, absmax), Q4_AT(T, quant_map), Q4_AT(T, nested_absmax),
       Q4_AT(T, nested_quant_map), Q4_AT(T, nested_offset), Q4_AT(T, nested_blocksize), Q4_AT(T, reserved)},
      Q4_RESERVED(T));
}

bool ends_at_field(const ::Q4_op_options*, uint32_t size) {
  using T = ::Q4_op_options;
  return at_end(
      size,
      {Q4_AT(T, compute_path), Q4_AT(T, backend), Q4_AT(T, target), Q4_AT(T, device_id), Q4_AT(T, math_mode),
       Q4_AT(T, num_threads), Q4_AT(T, reserved0), Q4_AT(T, stream), Q4_AT(T, reserved)},
      Q4_RESERVED(T));
}

bool ends_at_field(const ::Q4_session_config*, uint32_t size) {
  using T = ::Q4_session_config;
  return at_end(size,
                {Q4_AT(T, compute_path), Q4_AT(T, backend), Q4_AT(T, target), Q4_AT(T, device_id),
                 Q4_AT(T, unified_memory), Q4_AT(T, num_threads), Q4_AT(T, diagnostics), Q4_AT(T, math_mode),
                 Q4_AT(T, reserved0), Q4_AT(T, reserved)},
                Q4_RESERVED(T));
}

bool ends_at_field(const ::Q4_weight_bundle*, uint32_t size) {
  using T = ::Q4_weight_bundle;
  return at_end(size,
                {Q4_AT(T, format), Q4_AT(T, source), Q4_AT(T, scale_layout), Q4_AT(T, weight),
                 Q4_AT(T, out_features), Q4_AT(T, in_features), Q4_AT(T, scale), Q4_AT(T, global_scale),
                 Q4_AT(T, blocksize), Q4_AT(T, nf4), Q4_AT(T, bias), Q4_AT(T, reserved)},
                Q4_RESERVED(T));
}

// No padding between fields: each struct's fields are 4-byte values up to
// its first pointer, then 8-byte-aligned runs (pinned by the layout test
// as well).
static_assert(offsetof(::NF4_state, absmax) == 8 && offsetof(::NF4_state, reserved) == 48);
static_assert(offsetof(::Q4_op_options, stream) == 32 && offsetof(::Q4_op_options, reserved) == 40);
static_assert(offsetof(::Q4_session_config, reserved) == 40);
static_assert(offsetof(::Q4_weight_bundle, weight) == 16 &&
              offsetof(::Q4_weight_bundle, global_scale) == 48 && offsetof(::Q4_weight_bundle, nf4) == 56 &&
              offsetof(::Q4_weight_bundle, reserved) == 72);

#undef Q4_RESERVED
#undef Q4_AT

}  // namespace q4
