// Checkpoint objects behind include/nvfp4/checkpoint.h: a validated,
// memory-mapped safetensors file, schema detection over its keys, linear
// creation from the detected schema, and the atomic writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/schema.h"
#include "io/safetensors.h"
#include "nvfp4/nvfp4.h"

struct Q4_checkpoint {
  std::unique_ptr<q4::io::MappedFile> file;
  q4::io::Parsed parsed;
  std::vector<Q4_tensor_desc> descs;  // names point into parsed.tensors
  std::unordered_map<std::string, size_t> index;
};

struct Q4_checkpoint_writer {
  q4::io::Writer writer;
};

namespace q4::core {

Q4_checkpoint* open_checkpoint(const char* path);
size_t tensor_count(const Q4_checkpoint* cp);
void tensor_info(const Q4_checkpoint* cp, size_t i, Q4_tensor_desc* desc, int64_t* nbytes);
size_t find_tensor(const Q4_checkpoint* cp, const char* name);
DLTensor tensor_view(const Q4_checkpoint* cp, size_t i);
std::string metadata(const Q4_checkpoint* cp, const char* key);
schema::Detection detect_checkpoint(const Q4_checkpoint* cp);
Q4_linear* checkpoint_linear(Q4_session* session, const Q4_checkpoint* cp, const char* prefix);
Q4_checkpoint_writer* new_writer();
void writer_add(Q4_checkpoint_writer* w, const char* name, int32_t dtype, const DLTensor* data);
void writer_metadata(Q4_checkpoint_writer* w, const char* key, const char* value);
void writer_commit(Q4_checkpoint_writer* w, const char* path);

}  // namespace q4::core
