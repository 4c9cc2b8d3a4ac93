// Extensible structs across the C ABI. Every public struct that may grow
// starts with `uint32_t struct_size` = the caller's sizeof(struct), so a
// caller compiled against an older (smaller) or newer (larger) header works
// with this library. One rule for every struct, implemented once here:
//
//  - input structs (options, configs, bundles, NF4 state): fields beyond the
//    caller's size take their zero defaults (the size must end where a field
//    ends, never inside one); a larger caller struct may only
//    carry zeros past the fields this library knows (a non-zero unknown
//    field asks for something this version cannot do);
//  - output structs (capabilities, stats, info, results): the library writes
//    min(caller size, its size) bytes and leaves struct_size as it was;
//  - *_init functions: write the defaults into the caller's struct_size
//    bytes (never more than the library's own size). A struct_size that is
//    not a size (0, below 8, above 64 KiB: a zero-initialized or
//    uninitialized struct, as callers written before this rule pass) means
//    the size the struct had in ABI 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.h"

// The input structs (nvfp4/ops.h, q4_base.h, session.h).
struct NF4_state;
struct Q4_op_options;
struct Q4_session_config;
struct Q4_weight_bundle;

namespace q4 {

// Where the fields of each input struct end (struct_size.cpp): a smaller
// caller struct must end at one of them. One that ends inside a field (a
// pointer cut in half, read back as a wild pointer) is refused.
bool ends_at_field(const ::NF4_state*, uint32_t size);
bool ends_at_field(const ::Q4_op_options*, uint32_t size);
bool ends_at_field(const ::Q4_session_config*, uint32_t size);
bool ends_at_field(const ::Q4_weight_bundle*, uint32_t size);

// Smallest struct_size accepted: the size field plus one 4-byte field.
constexpr uint32_t kMinStructSize = 8;
// Largest accepted: a guard against an uninitialized size field.
constexpr uint32_t kMaxStructSize = 1u << 16;

inline uint32_t checked_struct_size(uint32_t size, const char* name) {
  if (size < kMinStructSize || size > kMaxStructSize) {
    fail(Q4_ERR_INVALID_ARGUMENT, std::string(name) + "->struct_size",
         "expected sizeof(the struct) (between " + std::to_string(kMinStructSize) + " and " +
             std::to_string(kMaxStructSize) + "), got " + std::to_string(size));
  }
  return size;
}

// The caller's input struct as this library's T (see the rules above).
template <class T>
T read_struct(const T* p, const char* name) {
  if (p == nullptr) fail(Q4_ERR_NULL_POINTER, name, "pointer is NULL");
  const uint32_t size = checked_struct_size(p->struct_size, name);
  if (size < sizeof(T) && !ends_at_field(p, size)) {
    fail(Q4_ERR_INVALID_ARGUMENT, std::string(name) + "->struct_size",
         "expected sizeof(the struct) or, for an older and smaller struct, the end of one of its fields; " +
             std::to_string(size) + " ends inside a field");
  }
  T out;
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, p, size < sizeof(T) ? size : sizeof(T));
  if (size > sizeof(T)) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(p);
    for (uint32_t i = sizeof(T); i < size; ++i) {
      if (bytes[i] != 0) {
        fail(Q4_ERR_UNSUPPORTED, std::string(name) + "->struct_size",
             "the caller's struct (" + std::to_string(size) + " bytes) sets a field at byte " +
                 std::to_string(i) + " that this library version (" + std::to_string(sizeof(T)) +
                 " bytes) does not know");
      }
    }
  }
  out.struct_size = static_cast<uint32_t>(sizeof(T));
  return out;
}

// Validates an output struct's size field before anything is computed.
template <class T>
void require_out_struct(const T* p, const char* name) {
  if (p == nullptr) fail(Q4_ERR_NULL_POINTER, name, "pointer is NULL");
  checked_struct_size(p->struct_size, name);
}

// Writes `value` into the caller's output struct (see the rules above).
template <class T>
void write_struct(T* p, const T& value, const char* name) {
  require_out_struct(p, name);
  const uint32_t size = p->struct_size;
  T v = value;
  v.struct_size = size;
  std::memcpy(p, &v, size < sizeof(T) ? size : sizeof(T));
}

// Writes `defaults` into the caller's struct; abi1_size is sizeof(T) as
// shipped in ABI 1 (used when struct_size is 0).
template <class T>
void init_struct(T* p, const T& defaults, size_t abi1_size, const char* name) {
  if (p == nullptr) fail(Q4_ERR_NULL_POINTER, name, "pointer is NULL");
  (void)name;
  const uint32_t given = p->struct_size;
  const uint32_t size =
      given < kMinStructSize || given > kMaxStructSize ? static_cast<uint32_t>(abi1_size) : given;
  T v = defaults;
  v.struct_size = size;
  std::memcpy(p, &v, size < sizeof(T) ? size : sizeof(T));
}

}  // namespace q4
