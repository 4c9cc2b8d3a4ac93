// Checkpoint objects behind include/nvfp4/checkpoint.h: a validated,
// memory-mapped safetensors file, schema detection over its keys, and
// linear creation from the detected schema.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "common/enum_tables.h"
#include "common/error.h"
#include "core/checkpoint.h"
#include "core/linear.h"
#include "core/schema.h"
#include "core/session.h"
#include "io/safetensors.h"
#include "nvfp4/nvfp4.h"

namespace q4::core {
namespace {

DLDataType dl_dtype(int32_t dtype) {
  const names::DtypeInfo* d = names::dtype_info(dtype);
  return d != nullptr ? d->dl : DLDataType{kDLUInt, 8, 1};
}

const Q4_checkpoint& require_ckpt(const Q4_checkpoint* c) {
  if (c == nullptr) fail(Q4_ERR_NULL_POINTER, "checkpoint", "pointer is NULL");
  return *c;
}

const io::TensorEntry& entry(const Q4_checkpoint& c, size_t i) {
  if (i >= c.parsed.tensors.size()) {
    fail(Q4_ERR_NOT_FOUND, "index",
         std::to_string(i) + " >= " + std::to_string(c.parsed.tensors.size()) + " tensors");
  }
  return c.parsed.tensors[i];
}

DLTensor raw_view(const Q4_checkpoint& c, size_t i) {
  const io::TensorEntry& t = entry(c, i);
  DLTensor v{};
  v.data = const_cast<uint8_t*>(c.file->data() + c.parsed.data_start + t.begin);
  v.device = DLDevice{kDLCPU, 0};
  v.ndim = static_cast<int32_t>(t.shape.size());
  v.dtype = dl_dtype(t.dtype);
  v.shape = const_cast<int64_t*>(t.shape.data());
  return v;
}

// A view usable by the kernels: the mapped bytes when their alignment fits
// the element size, else an aligned copy kept in `keep`.
DLTensor aligned_view(const Q4_checkpoint& c, size_t i, std::vector<std::vector<uint8_t>>& keep) {
  DLTensor v = raw_view(c, i);
  const int64_t bytes = c.parsed.tensors[i].end - c.parsed.tensors[i].begin;
  const uintptr_t align = v.dtype.bits >= 8 ? v.dtype.bits / 8 : 1;
  if (reinterpret_cast<uintptr_t>(v.data) % align != 0) {
    keep.emplace_back(static_cast<size_t>(bytes) + 16);
    uint8_t* p = keep.back().data();
    while (reinterpret_cast<uintptr_t>(p) % 16 != 0) ++p;
    std::memcpy(p, v.data, static_cast<size_t>(bytes));
    v.data = p;
  }
  return v;
}

// A quant_state field, type-checked (a wrong type is a schema error).
template <class T>
T json_field(const nlohmann::json& j, const char* key, T fallback, const std::string& prefix) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_number())
    fail(Q4_ERR_SCHEMA, "prefix", "quant_state of '" + prefix + "': \"" + key + "\" is not a number");
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer())
      fail(Q4_ERR_SCHEMA, "prefix", "quant_state of '" + prefix + "': \"" + key + "\" is not an integer");
    const int64_t v = it->get<int64_t>();
    if (v < -(int64_t{1} << 30) || v > (int64_t{1} << 30))
      fail(Q4_ERR_SCHEMA, "prefix", "quant_state of '" + prefix + "': \"" + key + "\" out of range");
    return static_cast<T>(v);
  } else {
    return it->get<T>();
  }
}

float read_scalar_f32(const Q4_checkpoint& c, size_t i, const char* what) {
  const io::TensorEntry& t = entry(c, i);
  if (t.dtype != Q4_DTYPE_F32 || t.end - t.begin != 4) {
    fail(Q4_ERR_SCHEMA, what, "'" + t.name + "' must be one F32 value");
  }
  float v;
  std::memcpy(&v, c.file->data() + c.parsed.data_start + t.begin, 4);
  return v;
}

}  // namespace

Q4_checkpoint* open_checkpoint(const char* path) {
  if (path == nullptr) fail(Q4_ERR_NULL_POINTER, "path", "pointer is NULL");
  auto c = std::make_unique<Q4_checkpoint>();
  c->file = std::make_unique<io::MappedFile>(path);
  c->parsed = io::parse(c->file->data(), c->file->size());
  for (size_t i = 0; i < c->parsed.tensors.size(); ++i) {
    const io::TensorEntry& t = c->parsed.tensors[i];
    Q4_tensor_desc d{};
    d.name = t.name.c_str();
    d.dtype = t.dtype;
    d.ndim = static_cast<int32_t>(t.shape.size());
    for (size_t k = 0; k < t.shape.size() && k < Q4_MAX_NDIM; ++k) d.shape[k] = t.shape[k];
    c->descs.push_back(d);
    c->index.emplace(t.name, i);
  }
  return c.release();
}

size_t tensor_count(const Q4_checkpoint* cp) {
  return require_ckpt(cp).parsed.tensors.size();
}

void tensor_info(const Q4_checkpoint* cp, size_t i, Q4_tensor_desc* desc, int64_t* nbytes) {
  const Q4_checkpoint& c = require_ckpt(cp);
  const io::TensorEntry& t = entry(c, i);
  if (desc != nullptr) *desc = c.descs[i];
  if (nbytes != nullptr) *nbytes = t.end - t.begin;
}

size_t find_tensor(const Q4_checkpoint* cp, const char* name) {
  const Q4_checkpoint& c = require_ckpt(cp);
  if (name == nullptr) fail(Q4_ERR_NULL_POINTER, "name", "pointer is NULL");
  const auto it = c.index.find(name);
  if (it == c.index.end()) fail(Q4_ERR_NOT_FOUND, "name", std::string("no tensor '") + name + "'");
  return it->second;
}

DLTensor tensor_view(const Q4_checkpoint* cp, size_t i) {
  return raw_view(require_ckpt(cp), i);
}

std::string metadata(const Q4_checkpoint* cp, const char* key) {
  const Q4_checkpoint& c = require_ckpt(cp);
  if (key == nullptr) fail(Q4_ERR_NULL_POINTER, "key", "pointer is NULL");
  const auto it = c.parsed.metadata.find(key);
  if (it == c.parsed.metadata.end()) fail(Q4_ERR_NOT_FOUND, "key", std::string("no metadata '") + key + "'");
  return it->second;
}

schema::Detection detect_checkpoint(const Q4_checkpoint* cp) {
  const Q4_checkpoint& c = require_ckpt(cp);
  return schema::detect(c.descs.data(), c.descs.size());
}

Q4_linear* checkpoint_linear(Q4_session* session, const Q4_checkpoint* cp, const char* prefix) {
  const Q4_checkpoint& c = require_ckpt(cp);
  if (prefix == nullptr) fail(Q4_ERR_NULL_POINTER, "prefix", "pointer is NULL");
  const schema::Detection d = schema::detect(c.descs.data(), c.descs.size());
  const schema::Linear* found = nullptr;
  for (const schema::Linear& l : d.linears) {
    if (l.prefix == prefix) found = &l;
  }
  if (found == nullptr) {
    for (const std::string& p : d.problems) {
      if (p.find("'" + std::string(prefix) + "'") != std::string::npos) fail(Q4_ERR_SCHEMA, "prefix", p);
    }
    fail(Q4_ERR_NOT_FOUND, "prefix", std::string("no 4-bit linear '") + prefix + "' in the checkpoint");
  }
  const schema::Linear& l = *found;
  std::vector<std::vector<uint8_t>> keep;
  Q4_weight_bundle b{};
  std::memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  b.format = l.format;
  b.source = Q4_WEIGHT_PACKED;
  DLTensor weight = aligned_view(c, static_cast<size_t>(l.roles[Q4_ROLE_WEIGHT]), keep);
  DLTensor scale{}, bias{}, absmax{}, quant_map{}, nested_absmax{}, nested_map{};
  NF4_state st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  const io::TensorEntry& wt = entry(c, static_cast<size_t>(l.roles[Q4_ROLE_WEIGHT]));
  if (l.format == Q4_FORMAT_MXFP4) {
    // gpt-oss: scales [..., N, K/32], leading dims = experts. A linear is
    // one [N, K] matrix: a stack of E > 1 experts runs through
    // MXFP4_linear_experts on the checkpoint's views instead.
    scale = aligned_view(c, static_cast<size_t>(l.roles[Q4_ROLE_SCALE]), keep);
    const io::TensorEntry& sc = entry(c, static_cast<size_t>(l.roles[Q4_ROLE_SCALE]));
    const size_t nd = sc.shape.size();  // >= 2 (schema)
    int64_t experts = 1;
    for (size_t i = 0; i + 2 < nd; ++i) experts *= sc.shape[i];
    if (experts != 1) {
      fail(
          Q4_ERR_UNSUPPORTED, "prefix",
          "'" + l.prefix + "' stacks " + std::to_string(experts) +
              " MXFP4 experts; a linear is one [N, K] weight: run the stack with MXFP4_linear_experts on the "
              "tensors' views (Q4_checkpoint_tensor), or one expert with MXFP4_linear");
    }
    b.out_features = sc.shape[nd - 2];
    b.in_features = sc.shape[nd - 1] * 32;
    b.scale = &scale;
    b.scale_layout = Q4_SCALE_LINEAR;
  } else if (l.format == Q4_FORMAT_NVFP4) {
    if (wt.shape.size() != 2) fail(Q4_ERR_SCHEMA, "prefix", "'" + wt.name + "' must be 2-D [out, in/2]");
    b.out_features = wt.shape[0];
    b.in_features = wt.dtype == Q4_DTYPE_F4 ? wt.shape[1] : 2 * wt.shape[1];
    scale = aligned_view(c, static_cast<size_t>(l.roles[Q4_ROLE_SCALE]), keep);
    b.scale = &scale;
    b.scale_layout = Q4_SCALE_LINEAR;  // checkpoints store linear scales
    float g = 1.0f;                    // legacy form: no global scale
    if (l.roles[Q4_ROLE_GLOBAL_SCALE] >= 0) {
      const float stored = read_scalar_f32(c, static_cast<size_t>(l.roles[Q4_ROLE_GLOBAL_SCALE]), "prefix");
      g = l.global_scale_inverted ? 1.0f / stored : stored;  // compressed-tensors stores 1/g
    }
    if (!std::isfinite(g) || g <= 0.0f)
      fail(Q4_ERR_SCHEMA, "prefix", "global scale of '" + l.prefix + "' is not finite and > 0");
    b.global_scale = g;
  } else {
    if (l.roles[Q4_ROLE_QUANT_STATE] < 0) {
      fail(Q4_ERR_SCHEMA, "prefix",
           "NF4 linear '" + l.prefix + "' has no quant_state JSON (needed for its shape)");
    }
    const io::TensorEntry& qs = entry(c, static_cast<size_t>(l.roles[Q4_ROLE_QUANT_STATE]));
    const char* text = reinterpret_cast<const char*>(c.file->data() + c.parsed.data_start + qs.begin);
    nlohmann::json j = nlohmann::json::parse(text, text + (qs.end - qs.begin), nullptr, false);
    if (!j.is_object() || !j.contains("shape") || !j["shape"].is_array() || j["shape"].size() != 2 ||
        !j["shape"][0].is_number_unsigned() || !j["shape"][1].is_number_unsigned()) {
      fail(Q4_ERR_SCHEMA, "prefix", "quant_state of '" + l.prefix + "' is not JSON with a 2-D \"shape\"");
    }
    if (j.contains("quant_type") && j["quant_type"] != "nf4") {
      fail(Q4_ERR_SCHEMA, "prefix", "quant_state of '" + l.prefix + "' is not NF4");
    }
    b.out_features =
        static_cast<int64_t>(std::min<uint64_t>(j["shape"][0].get<uint64_t>(), uint64_t{1} << 40));
    b.in_features =
        static_cast<int64_t>(std::min<uint64_t>(j["shape"][1].get<uint64_t>(), uint64_t{1} << 40));
    st.blocksize = json_field<int32_t>(j, "blocksize", 64, l.prefix);
    absmax = aligned_view(c, static_cast<size_t>(l.roles[Q4_ROLE_SCALE]), keep);
    st.absmax = &absmax;
    quant_map = aligned_view(c, static_cast<size_t>(l.roles[Q4_ROLE_QUANT_MAP]), keep);
    st.quant_map = &quant_map;
    if (l.roles[Q4_ROLE_NESTED_ABSMAX] >= 0) {
      nested_absmax = aligned_view(c, static_cast<size_t>(l.roles[Q4_ROLE_NESTED_ABSMAX]), keep);
      nested_map = aligned_view(c, static_cast<size_t>(l.roles[Q4_ROLE_NESTED_QUANT_MAP]), keep);
      st.nested_absmax = &nested_absmax;
      st.nested_quant_map = &nested_map;
      st.nested_offset = json_field<float>(j, "nested_offset", 0.0f, l.prefix);
      st.nested_blocksize = json_field<int32_t>(j, "nested_blocksize", 256, l.prefix);
    }
    b.nf4 = &st;
  }
  b.weight = &weight;
  if (l.roles[Q4_ROLE_BIAS] >= 0) {
    bias = aligned_view(c, static_cast<size_t>(l.roles[Q4_ROLE_BIAS]), keep);
    b.bias = &bias;
  }
  return create_linear(session, &b);
}

Q4_checkpoint_writer* new_writer() {
  return new Q4_checkpoint_writer();
}

void writer_add(Q4_checkpoint_writer* w, const char* name, int32_t dtype, const DLTensor* data) {
  if (w == nullptr) fail(Q4_ERR_NULL_POINTER, "writer", "pointer is NULL");
  if (name == nullptr) fail(Q4_ERR_NULL_POINTER, "name", "pointer is NULL");
  if (data == nullptr) fail(Q4_ERR_NULL_POINTER, "data", "tensor pointer is NULL");
  if (data->ndim < 0 || data->ndim > 16 || (data->ndim > 0 && data->shape == nullptr)) {
    fail(Q4_ERR_SHAPE, "data", "invalid ndim/shape");
  }
  if (data->device.device_type != kDLCPU && data->device.device_type != kDLCUDAHost &&
      data->device.device_type != kDLCUDAManaged) {
    fail(Q4_ERR_DEVICE, "data", "must be CPU-accessible");
  }
  if (data->strides != nullptr) {
    int64_t expect = 1;
    for (int32_t i = data->ndim - 1; i >= 0; --i) {
      if (data->shape[i] != 1 && data->strides[i] != expect)
        fail(Q4_ERR_STRIDES, "data", "must be compact row-major");
      expect *= data->shape[i];
    }
  }
  std::vector<int64_t> shape(data->shape, data->shape + data->ndim);
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) fail(Q4_ERR_SHAPE, "data", "negative dimension");
    numel = checked_mul(numel, d, "data");
  }
  const int64_t file_bits = io::dtype_bits(dtype);
  if (file_bits == 0) fail(Q4_ERR_DTYPE, "dtype", "unknown Q4_DTYPE value " + std::to_string(dtype));
  const int64_t nbytes = checked_mul(numel, file_bits, "data") / 8;
  const int64_t have_bits = static_cast<int64_t>(data->dtype.bits) * data->dtype.lanes;
  if (checked_mul(numel, have_bits, "data") != checked_mul(nbytes, 8, "data")) {
    fail(Q4_ERR_DTYPE, "data",
         "element size does not match the file dtype " + std::string(io::dtype_to_string(dtype)));
  }
  if (nbytes > 0 && data->data == nullptr) fail(Q4_ERR_NULL_POINTER, "data", "data is NULL");
  w->writer.add(name, dtype, std::move(shape), static_cast<const uint8_t*>(data->data) + data->byte_offset,
                nbytes);
}

void writer_metadata(Q4_checkpoint_writer* w, const char* key, const char* value) {
  if (w == nullptr) fail(Q4_ERR_NULL_POINTER, "writer", "pointer is NULL");
  if (key == nullptr || value == nullptr)
    fail(Q4_ERR_NULL_POINTER, key == nullptr ? "key" : "value", "pointer is NULL");
  w->writer.add_metadata(key, value);
}

void writer_commit(Q4_checkpoint_writer* w, const char* path) {
  if (w == nullptr) fail(Q4_ERR_NULL_POINTER, "writer", "pointer is NULL");
  if (path == nullptr) fail(Q4_ERR_NULL_POINTER, "path", "pointer is NULL");
  w->writer.write(path);
}

}  // namespace q4::core
