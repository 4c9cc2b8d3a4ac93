// Checkpoint schema detection by tensor keys (docs/formats.md, checkpoint families).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nvfp4/schema.h"

namespace q4::schema {

struct Linear {
  int32_t format = Q4_FORMAT_NONE;
  int32_t family = Q4_SCHEMA_NONE;
  std::string prefix;
  int32_t prefix_tensor = -1;
  int32_t roles[Q4_MAX_ROLES];
  bool global_scale_inverted = false;
  Linear() {
    for (int32_t& r : roles) r = -1;
  }
};

struct Detection {
  std::vector<Linear> linears;        // complete linears, first-appearance order
  std::vector<std::string> problems;  // one message per incomplete/ambiguous prefix
};

// Throws Q4_ERR_NULL_POINTER for NULL arrays/names; everything about the
// schema itself is reported in Detection::problems.
Detection detect(const Q4_tensor_desc* tensors, size_t count);

void fill_summary(const Detection& d, Q4_schema_summary* out);
void fill_linear(const Linear& l, Q4_linear_schema* dst);

}  // namespace q4::schema
