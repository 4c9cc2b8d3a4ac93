#include "core/schema.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string_view>
#include <unordered_map>

#include "common/enum_tables.h"
#include "common/error.h"
#include "common/struct_size.h"

namespace q4::schema {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

struct Anchor {
  std::string_view suffix;
  int32_t family;
};

// Keys that reveal a family, longest suffixes first so that ".weight.qdata"
// wins over ".qdata". `.weight_scale` alone is resolved afterwards (ModelOpt
// and compressed-tensors share it).
constexpr Anchor kAnchors[] = {
    {".weight.quant_state.bitsandbytes__nf4", Q4_SCHEMA_BNB_NF4},
    {".weight.nested_quant_map", Q4_SCHEMA_BNB_NF4},
    {".weight.nested_absmax", Q4_SCHEMA_BNB_NF4},
    {".weight.quant_map", Q4_SCHEMA_BNB_NF4},
    {".weight.absmax", Q4_SCHEMA_BNB_NF4},
    {".weight.qdata", Q4_SCHEMA_NVFP4_LEGACY},
    {".weight.scale", Q4_SCHEMA_NVFP4_LEGACY},
    {".qdata", Q4_SCHEMA_NVFP4_LEGACY},
    {".weight_scale_2", Q4_SCHEMA_NVFP4_MODELOPT},
    {".weight_global_scale", Q4_SCHEMA_NVFP4_COMPRESSED},
    {".weight_packed", Q4_SCHEMA_NVFP4_COMPRESSED},
    {".weight_scale", Q4_SCHEMA_NONE},     // ModelOpt or compressed-tensors
    {".blocks", Q4_SCHEMA_MXFP4_GPT_OSS},  // gpt-oss original: P.blocks + P.scales
    {"_blocks", Q4_SCHEMA_MXFP4_GPT_OSS},  // Hugging Face conversion: P_blocks + P_scales
};

struct Candidate {
  std::string prefix;
  int32_t first_index = 0;
  std::vector<int32_t> families;
};

class Checker {
 public:
  Checker(const Q4_tensor_desc* tensors, const std::unordered_map<std::string_view, int32_t>& index)
      : tensors_(tensors), index_(index) {}

  int32_t find(const std::string& key) const {
    const auto it = index_.find(key);
    return it == index_.end() ? -1 : it->second;
  }

  const Q4_tensor_desc& at(int32_t i) const { return tensors_[i]; }

  // A required key: records the problem and returns -1 when missing.
  int32_t require(const std::string& key) {
    const int32_t i = find(key);
    if (i < 0 && problem_.empty()) problem_ = "missing key '" + key + "'";
    return i;
  }

  void check_dtype(int32_t i, std::initializer_list<int32_t> allowed) {
    if (i < 0 || !problem_.empty()) return;
    const Q4_tensor_desc& t = tensors_[i];
    if (t.dtype == Q4_DTYPE_UNKNOWN) return;
    if (std::find(allowed.begin(), allowed.end(), t.dtype) != allowed.end()) return;
    std::string expected;
    for (int32_t d : allowed)
      expected += std::string(expected.empty() ? "" : " or ") + q4::names::dtype_name(d);
    problem_ = std::string("key '") + t.name + "' has dtype " + q4::names::dtype_name(t.dtype) +
               ", expected " + expected;
  }

  void check_scalar(int32_t i) {
    if (i < 0 || !problem_.empty()) return;
    const Q4_tensor_desc& t = tensors_[i];
    if (t.ndim < 0) return;
    int64_t numel = 1;
    for (int32_t d = 0; d < t.ndim && d < Q4_MAX_NDIM; ++d) numel *= t.shape[d];
    if (numel != 1) problem_ = std::string("key '") + t.name + "' must hold one value";
  }

  // NVFP4 weight [out, in/2] and linear scales [out, in/16] must agree.
  void check_nvfp4_shapes(int32_t w, int32_t s) {
    if (w < 0 || s < 0 || !problem_.empty()) return;
    const Q4_tensor_desc& wt = tensors_[w];
    const Q4_tensor_desc& st = tensors_[s];
    if (wt.ndim != 2 || st.ndim != 2) return;
    if (wt.shape[0] != st.shape[0] || wt.shape[1] != st.shape[1] * 8) {
      problem_ = std::string("shapes disagree: '") + wt.name + "' [" + std::to_string(wt.shape[0]) + ", " +
                 std::to_string(wt.shape[1]) + "] needs scales [" + std::to_string(wt.shape[0]) + ", " +
                 std::to_string(wt.shape[1] / 8) + "], '" + st.name + "' is [" + std::to_string(st.shape[0]) +
                 ", " + std::to_string(st.shape[1]) + "]";
    }
  }

  void set_problem(const std::string& p) {
    if (problem_.empty()) problem_ = p;
  }
  const std::string& problem() const { return problem_; }

 private:
  const Q4_tensor_desc* tensors_;
  const std::unordered_map<std::string_view, int32_t>& index_;
  std::string problem_;
};

void resolve_bnb(Checker& c, const std::string& p, Linear& l) {
  l.format = Q4_FORMAT_NF4;
  if (c.find(p + ".weight.quant_state.bitsandbytes__fp4") >= 0) {
    c.set_problem("bitsandbytes FP4 quantization is not NF4 and not supported");
  }
  l.roles[Q4_ROLE_WEIGHT] = c.require(p + ".weight");
  l.roles[Q4_ROLE_SCALE] = c.require(p + ".weight.absmax");
  l.roles[Q4_ROLE_QUANT_MAP] = c.require(p + ".weight.quant_map");
  l.roles[Q4_ROLE_NESTED_ABSMAX] = c.find(p + ".weight.nested_absmax");
  l.roles[Q4_ROLE_NESTED_QUANT_MAP] = c.find(p + ".weight.nested_quant_map");
  if (l.roles[Q4_ROLE_NESTED_ABSMAX] >= 0)
    l.roles[Q4_ROLE_NESTED_QUANT_MAP] = c.require(p + ".weight.nested_quant_map");
  if (l.roles[Q4_ROLE_NESTED_QUANT_MAP] >= 0)
    l.roles[Q4_ROLE_NESTED_ABSMAX] = c.require(p + ".weight.nested_absmax");
  l.roles[Q4_ROLE_QUANT_STATE] = c.find(p + ".weight.quant_state.bitsandbytes__nf4");
  const bool nested = l.roles[Q4_ROLE_NESTED_ABSMAX] >= 0;
  c.check_dtype(l.roles[Q4_ROLE_WEIGHT], {Q4_DTYPE_U8});
  if (nested) {
    c.check_dtype(l.roles[Q4_ROLE_SCALE], {Q4_DTYPE_U8});
  } else {
    c.check_dtype(l.roles[Q4_ROLE_SCALE], {Q4_DTYPE_F32});
  }
  c.check_dtype(l.roles[Q4_ROLE_QUANT_MAP], {Q4_DTYPE_F32});
  c.check_dtype(l.roles[Q4_ROLE_NESTED_ABSMAX], {Q4_DTYPE_F32});
  c.check_dtype(l.roles[Q4_ROLE_NESTED_QUANT_MAP], {Q4_DTYPE_F32});
  c.check_dtype(l.roles[Q4_ROLE_QUANT_STATE], {Q4_DTYPE_U8});
}

void resolve_legacy(Checker& c, const std::string& p, Linear& l) {
  l.format = Q4_FORMAT_NVFP4;
  const bool short_form = c.find(p + ".weight.qdata") < 0 && c.find(p + ".qdata") >= 0;
  l.roles[Q4_ROLE_WEIGHT] = c.require(short_form ? p + ".qdata" : p + ".weight.qdata");
  const int32_t long_scale = c.find(p + ".weight.scale");
  const int32_t short_scale = c.find(p + ".scale");
  l.roles[Q4_ROLE_SCALE] =
      long_scale >= 0 ? long_scale : (short_scale >= 0 ? short_scale : c.require(p + ".weight.scale"));
  c.check_dtype(l.roles[Q4_ROLE_WEIGHT], {Q4_DTYPE_U8, Q4_DTYPE_F4});
  c.check_dtype(l.roles[Q4_ROLE_SCALE], {Q4_DTYPE_F8_E4M3, Q4_DTYPE_U8});
  c.check_nvfp4_shapes(l.roles[Q4_ROLE_WEIGHT], l.roles[Q4_ROLE_SCALE]);
}

void resolve_modelopt(Checker& c, const std::string& p, Linear& l) {
  l.format = Q4_FORMAT_NVFP4;
  l.roles[Q4_ROLE_WEIGHT] = c.require(p + ".weight");
  l.roles[Q4_ROLE_SCALE] = c.require(p + ".weight_scale");
  l.roles[Q4_ROLE_GLOBAL_SCALE] = c.require(p + ".weight_scale_2");
  l.roles[Q4_ROLE_INPUT_SCALE] = c.find(p + ".input_scale");
  c.check_dtype(l.roles[Q4_ROLE_WEIGHT], {Q4_DTYPE_U8, Q4_DTYPE_F4});
  c.check_dtype(l.roles[Q4_ROLE_SCALE], {Q4_DTYPE_F8_E4M3, Q4_DTYPE_U8});
  c.check_dtype(l.roles[Q4_ROLE_GLOBAL_SCALE], {Q4_DTYPE_F32});
  c.check_dtype(l.roles[Q4_ROLE_INPUT_SCALE], {Q4_DTYPE_F32});
  c.check_scalar(l.roles[Q4_ROLE_GLOBAL_SCALE]);
  c.check_nvfp4_shapes(l.roles[Q4_ROLE_WEIGHT], l.roles[Q4_ROLE_SCALE]);
}

void resolve_compressed(Checker& c, const std::string& p, Linear& l) {
  l.format = Q4_FORMAT_NVFP4;
  l.global_scale_inverted = true;
  l.roles[Q4_ROLE_WEIGHT] = c.require(p + ".weight_packed");
  l.roles[Q4_ROLE_SCALE] = c.require(p + ".weight_scale");
  l.roles[Q4_ROLE_GLOBAL_SCALE] = c.require(p + ".weight_global_scale");
  l.roles[Q4_ROLE_INPUT_SCALE] = c.find(p + ".input_global_scale");
  c.check_dtype(l.roles[Q4_ROLE_WEIGHT], {Q4_DTYPE_U8, Q4_DTYPE_F4});
  c.check_dtype(l.roles[Q4_ROLE_SCALE], {Q4_DTYPE_F8_E4M3, Q4_DTYPE_U8});
  c.check_dtype(l.roles[Q4_ROLE_GLOBAL_SCALE], {Q4_DTYPE_F32});
  c.check_dtype(l.roles[Q4_ROLE_INPUT_SCALE], {Q4_DTYPE_F32});
  c.check_scalar(l.roles[Q4_ROLE_GLOBAL_SCALE]);
  c.check_nvfp4_shapes(l.roles[Q4_ROLE_WEIGHT], l.roles[Q4_ROLE_SCALE]);
}

// gpt-oss MXFP4 (docs/formats.md): uint8 blocks [..., N, K/32, 16] (or
// [..., N, K/2]) and uint8 E8M0 scales [..., N, K/32], experts leading. The
// bias is P_bias (Hugging Face) or, for the original P = "..._weight",
// "..._bias".
void resolve_gpt_oss(Checker& c, const std::string& p, Linear& l) {
  l.format = Q4_FORMAT_MXFP4;
  const std::string sep = c.find(p + ".blocks") >= 0 ? "." : "_";
  l.roles[Q4_ROLE_WEIGHT] = c.require(p + sep + "blocks");
  l.roles[Q4_ROLE_SCALE] = c.require(p + sep + "scales");
  c.check_dtype(l.roles[Q4_ROLE_WEIGHT], {Q4_DTYPE_U8});
  c.check_dtype(l.roles[Q4_ROLE_SCALE], {Q4_DTYPE_U8});
  if (sep == "_") {
    l.roles[Q4_ROLE_BIAS] = c.find(p + "_bias");
  } else if (p.size() > 7 && p.compare(p.size() - 7, 7, "_weight") == 0) {
    l.roles[Q4_ROLE_BIAS] = c.find(p.substr(0, p.size() - 7) + "_bias");
  }
  // A dense model quantized by `nvfp4 quantize --format mxfp4` keeps its
  // bias under the original name P.bias.
  if (l.roles[Q4_ROLE_BIAS] < 0) l.roles[Q4_ROLE_BIAS] = c.find(p + ".bias");
  const int32_t w = l.roles[Q4_ROLE_WEIGHT], s = l.roles[Q4_ROLE_SCALE];
  if (w < 0 || s < 0 || !c.problem().empty()) return;
  const Q4_tensor_desc& wt = c.at(w);
  const Q4_tensor_desc& st = c.at(s);
  if (wt.ndim < 0 || st.ndim < 0) return;
  bool ok = st.ndim >= 2 && st.ndim <= Q4_MAX_NDIM;
  if (ok && wt.ndim == st.ndim + 1) {  // [..., N, K/32, 16]
    for (int32_t d = 0; d < st.ndim; ++d) ok = ok && wt.shape[d] == st.shape[d];
    ok = ok && wt.shape[st.ndim] == 16;
  } else if (ok && wt.ndim == st.ndim) {  // [..., N, K/2]
    for (int32_t d = 0; d + 1 < st.ndim; ++d) ok = ok && wt.shape[d] == st.shape[d];
    ok = ok && wt.shape[st.ndim - 1] == 16 * st.shape[st.ndim - 1];
  } else {
    ok = false;
  }
  if (!ok) {
    c.set_problem(std::string("shapes disagree: MXFP4 blocks '") + wt.name +
                  "' must be [..., N, K/32, 16] or [..., N, K/2] for scales '" + st.name +
                  "' [..., N, K/32]");
  }
}

}  // namespace

Detection detect(const Q4_tensor_desc* tensors, size_t count) {
  Detection out;
  if (count == 0) return out;
  if (tensors == nullptr) fail(Q4_ERR_NULL_POINTER, "tensors", "array is NULL with count > 0");
  if (count > static_cast<size_t>(INT32_MAX)) {
    fail(Q4_ERR_INVALID_ARGUMENT, "count", "more than 2^31-1 tensors");
  }
  std::unordered_map<std::string_view, int32_t> index;
  index.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (tensors[i].name == nullptr) {
      fail(Q4_ERR_NULL_POINTER, "tensors[" + std::to_string(i) + "].name", "name is NULL");
    }
    index.emplace(tensors[i].name, static_cast<int32_t>(i));  // first wins on duplicates
  }

  std::vector<Candidate> candidates;
  std::unordered_map<std::string, size_t> by_prefix;
  for (size_t i = 0; i < count; ++i) {
    const std::string_view name(tensors[i].name);
    for (const Anchor& a : kAnchors) {
      if (!ends_with(name, a.suffix)) continue;
      int32_t family = a.family;
      const std::string prefix(name.substr(0, name.size() - a.suffix.size()));
      // gpt-oss blocks are uint8; a `.blocks` tensor of another dtype is no
      // MXFP4 weight.
      if (family == Q4_SCHEMA_MXFP4_GPT_OSS && tensors[i].dtype != Q4_DTYPE_UNKNOWN &&
          tensors[i].dtype != Q4_DTYPE_U8) {
        break;
      }
      if (family == Q4_SCHEMA_NONE) {
        // `.weight_scale`: an F32 value means an FP8 (not 4-bit) checkpoint.
        if (tensors[i].dtype == Q4_DTYPE_F32) break;
        const bool compressed =
            index.count(prefix + ".weight_packed") || index.count(prefix + ".weight_global_scale");
        family = compressed ? Q4_SCHEMA_NVFP4_COMPRESSED : Q4_SCHEMA_NVFP4_MODELOPT;
      }
      auto [it, inserted] = by_prefix.emplace(prefix, candidates.size());
      if (inserted) candidates.push_back(Candidate{prefix, static_cast<int32_t>(i), {}});
      std::vector<int32_t>& fams = candidates[it->second].families;
      if (std::find(fams.begin(), fams.end(), family) == fams.end()) fams.push_back(family);
      break;
    }
  }

  Checker base(tensors, index);
  for (const Candidate& cand : candidates) {
    if (cand.families.size() > 1) {
      std::string names;
      for (int32_t f : cand.families)
        names += std::string(names.empty() ? "" : ", ") + q4::names::family_name(f);
      out.problems.push_back("linear '" + cand.prefix + "': ambiguous, keys of several schemas (" + names +
                             ")");
      continue;
    }
    Checker c = base;
    Linear l;
    l.family = cand.families[0];
    l.prefix = cand.prefix;
    switch (l.family) {
      case Q4_SCHEMA_BNB_NF4:
        resolve_bnb(c, cand.prefix, l);
        break;
      case Q4_SCHEMA_NVFP4_LEGACY:
        resolve_legacy(c, cand.prefix, l);
        break;
      case Q4_SCHEMA_NVFP4_MODELOPT:
        resolve_modelopt(c, cand.prefix, l);
        break;
      case Q4_SCHEMA_MXFP4_GPT_OSS:
        resolve_gpt_oss(c, cand.prefix, l);
        break;
      default:
        resolve_compressed(c, cand.prefix, l);
        break;
    }
    if (l.roles[Q4_ROLE_BIAS] < 0) l.roles[Q4_ROLE_BIAS] = c.find(cand.prefix + ".bias");
    if (!c.problem().empty()) {
      out.problems.push_back("linear '" + cand.prefix + "' (" + q4::names::family_name(l.family) +
                             "): " + c.problem());
      continue;
    }
    l.prefix_tensor = l.roles[Q4_ROLE_WEIGHT];
    out.linears.push_back(std::move(l));
  }
  return out;
}

void fill_summary(const Detection& d, Q4_schema_summary* out) {
  Q4_schema_summary summary;
  std::memset(&summary, 0, sizeof summary);
  Q4_schema_summary* s = &summary;
  bool nvfp4 = false, nf4 = false, mxfp4 = false;
  int32_t family = Q4_SCHEMA_NONE;
  bool one_family = true;
  for (const Linear& l : d.linears) {
    (l.format == Q4_FORMAT_NF4 ? nf4 : (l.format == Q4_FORMAT_MXFP4 ? mxfp4 : nvfp4)) = true;
    if (l.family >= 0 && l.family < 8) s->family_counts[l.family]++;
    if (family == Q4_SCHEMA_NONE)
      family = l.family;
    else if (family != l.family)
      one_family = false;
  }
  const int formats = (nvfp4 ? 1 : 0) + (nf4 ? 1 : 0) + (mxfp4 ? 1 : 0);
  s->format = formats > 1 ? Q4_FORMAT_MIXED
                          : (nvfp4 ? Q4_FORMAT_NVFP4
                                   : (nf4 ? Q4_FORMAT_NF4 : (mxfp4 ? Q4_FORMAT_MXFP4 : Q4_FORMAT_NONE)));
  s->family = one_family ? family : Q4_SCHEMA_NONE;
  s->num_linears = static_cast<int32_t>(d.linears.size());
  s->num_incomplete = static_cast<int32_t>(d.problems.size());
  write_struct(out, summary, "summary");
}

void fill_linear(const Linear& l, Q4_linear_schema* dst) {
  Q4_linear_schema entry;
  std::memset(&entry, 0, sizeof entry);
  Q4_linear_schema* out = &entry;
  out->format = l.format;
  out->family = l.family;
  out->prefix_len = static_cast<int32_t>(l.prefix.size());
  out->prefix_tensor = l.prefix_tensor;
  for (int i = 0; i < Q4_MAX_ROLES; ++i) out->roles[i] = l.roles[i];
  out->global_scale_inverted = l.global_scale_inverted ? 1 : 0;
  write_struct(dst, entry, "out[i]");
}

}  // namespace q4::schema
