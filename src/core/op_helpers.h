// Shared plumbing of the operations and the linears: fp32 views of float
// tensors, fp32 results with bias and output conversion, linear-layout
// scales, NF4 statistics, bias parsing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "core/options.h"
#include "kernels/kernel_types.h"
#include "nvfp4/ops.h"

namespace q4::core {

kern::FType ftype_of(const TensorRef& t);
kern::FloatPtr as_input(const TensorRef& t);
kern::FloatOut as_output(const TensorRef& t);

struct F32View {
  const float* p = nullptr;
  std::vector<float> storage;
  bool copied() const { return !storage.empty(); }
};
F32View f32_view(const TensorRef& t, int32_t threads);

struct F32Result {
  const TensorRef* out = nullptr;
  float* p = nullptr;
  std::vector<float> storage;
};
// staged: a buffer of its own even for fp32 out (finish copies it there).
F32Result f32_result(const TensorRef& out, bool staged = false);
// y = scale * y + bias[j], then conversion to the output dtype.
void finish(F32Result& r, int64_t n, float scale, const kern::FloatPtr* bias, int32_t threads);
// The same for `rows` rows of y [rows, n] (a buffer of the caller's, changed
// in place) that belong at rows [row0, row0 + rows) of out; copied or
// converted into out (any float dtype).
void finish_rows(float* y, int64_t rows, int64_t n, int64_t row0, const TensorRef& out, float scale,
                 const kern::FloatPtr* bias, int32_t threads);

struct LinearScales {
  const uint8_t* p = nullptr;
  std::vector<uint8_t> storage;
};
LinearScales linear_scales(const TensorRef& s, int32_t layout, int64_t rows, int64_t k);

struct Bias {
  TensorRef ref;
  kern::FloatPtr ptr;
  bool present = false;
  const kern::FloatPtr* get() const { return present ? &ptr : nullptr; }
};
Bias parse_bias(const DLTensor* bias, int64_t n);

int64_t require_blocksize(int64_t bs, const char* name);

struct Nf4State {
  TensorRef absmax, quant_map, nested_absmax, nested_map;
  bool has_quant_map = false, nested = false;
  kern::Nf4Stats stats;
};
Nf4State parse_nf4_state(const NF4_state* state, int64_t n);

void require_layout(int32_t layout);
// Quantize accepts 0 (= compute); everything else must be finite and > 0.
void require_scale_value(float v, const char* name, bool zero_allowed);
void require_k_multiple_of_16(int64_t k, const char* name);
int64_t scale_bytes(int64_t rows, int64_t k, int32_t layout, const char* name);
std::string scale_why(int64_t rows, int64_t k, int32_t layout);
void require_same_leading(const TensorRef& out, const TensorRef& x);
// Fast math runs the fused int8-activation kernels only.
void check_math_mode(const ResolvedOptions& o, CpuPath path);

}  // namespace q4::core
