// Safetensors reading (memory-mapped, zero-copy, strictly validated) and
// writing (atomic: temporary file, fsync, rename).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "nvfp4/schema.h"

namespace q4::io {

struct TensorEntry {
  std::string name;
  int32_t dtype = Q4_DTYPE_UNKNOWN;  // Q4_DTYPE_*
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets relative to the data section
};

// Parses and validates a complete safetensors image (header + data) held in
// memory. Throws q4::Error(Q4_ERR_FORMAT, ...) naming the problem.
struct Parsed {
  std::vector<TensorEntry> tensors;  // in order of their data offsets
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;  // 8 + header length
};
Parsed parse(const uint8_t* bytes, int64_t size);

// Element size in bits of a Q4_DTYPE_* (0 for unknown).
int64_t dtype_bits(int32_t dtype);
int32_t dtype_from_string(const std::string& s);  // Q4_DTYPE_UNKNOWN if not known
const char* dtype_to_string(int32_t dtype);

// A memory-mapped file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws Q4_ERR_IO
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

// Writer: collects tensors (copied) and metadata, then writes atomically.
class Writer {
 public:
  void add(const std::string& name, int32_t dtype, std::vector<int64_t> shape, const void* data,
           int64_t nbytes);
  void add_metadata(const std::string& key, const std::string& value);
  void write(const std::string& path) const;  // throws Q4_ERR_IO / Q4_ERR_INVALID_ARGUMENT

 private:
  struct Item {
    std::string name;
    int32_t dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Item> items_;
  std::unordered_set<std::string> names_;  // of items_, for the duplicate check
  std::map<std::string, std::string> metadata_;
};

}  // namespace q4::io
