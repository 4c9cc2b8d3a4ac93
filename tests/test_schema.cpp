// Q4_detect_schema / Q4_detect_linears over the four families of docs/formats.md.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "nvfp4/nvfp4.h"

namespace {

struct Keys {
  std::vector<std::string> names;
  std::vector<Q4_tensor_desc> descs;

  Keys& add(const std::string& name, int32_t dtype = Q4_DTYPE_UNKNOWN, std::vector<int64_t> shape = {}) {
    names.push_back(name);
    Q4_tensor_desc d{};
    d.dtype = dtype;
    d.ndim = shape.empty() && dtype == Q4_DTYPE_UNKNOWN ? -1 : static_cast<int32_t>(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) d.shape[i] = shape[i];
    descs.push_back(d);
    return *this;
  }
  const Q4_tensor_desc* data() {
    for (size_t i = 0; i < names.size(); ++i) descs[i].name = names[i].c_str();
    return descs.data();
  }
  size_t size() const { return names.size(); }
};

Q4_schema_summary summary_of(Keys& k, int32_t* status) {
  Q4_schema_summary s{};
  s.struct_size = sizeof s;
  *status = Q4_detect_schema(k.data(), k.size(), &s);
  return s;
}

std::vector<Q4_linear_schema> linears_of(Keys& k, int32_t* status) {
  size_t n = 0;
  Q4_detect_linears(k.data(), k.size(), nullptr, 0, &n);
  std::vector<Q4_linear_schema> out(n);
  for (auto& l : out) l.struct_size = sizeof l;
  *status = Q4_detect_linears(k.data(), k.size(), out.data(), out.size(), &n);
  return out;
}

std::string prefix_of(Keys& k, const Q4_linear_schema& l) {
  return std::string(k.data()[l.prefix_tensor].name, static_cast<size_t>(l.prefix_len));
}

}  // namespace

TEST_CASE("bitsandbytes NF4 is detected with roles, nested keys and quant_state", "[schema]") {
  Keys k;
  k.add("model.embed.weight", Q4_DTYPE_BF16, {100, 64})
      .add("layers.0.q.weight", Q4_DTYPE_U8, {2048, 1})
      .add("layers.0.q.weight.absmax", Q4_DTYPE_U8, {64})
      .add("layers.0.q.weight.quant_map", Q4_DTYPE_F32, {16})
      .add("layers.0.q.weight.nested_absmax", Q4_DTYPE_F32, {1})
      .add("layers.0.q.weight.nested_quant_map", Q4_DTYPE_F32, {256})
      .add("layers.0.q.weight.quant_state.bitsandbytes__nf4", Q4_DTYPE_U8, {120})
      .add("layers.0.q.bias", Q4_DTYPE_BF16, {64});
  int32_t st = -1;
  const Q4_schema_summary s = summary_of(k, &st);
  CHECK(st == Q4_OK);
  CHECK(s.format == Q4_FORMAT_NF4);
  CHECK(s.family == Q4_SCHEMA_BNB_NF4);
  CHECK(s.num_linears == 1);
  const auto ls = linears_of(k, &st);
  REQUIRE(st == Q4_OK);
  REQUIRE(ls.size() == 1);
  CHECK(prefix_of(k, ls[0]) == "layers.0.q");
  CHECK(ls[0].roles[Q4_ROLE_WEIGHT] == 1);
  CHECK(ls[0].roles[Q4_ROLE_SCALE] == 2);
  CHECK(ls[0].roles[Q4_ROLE_QUANT_MAP] == 3);
  CHECK(ls[0].roles[Q4_ROLE_NESTED_ABSMAX] == 4);
  CHECK(ls[0].roles[Q4_ROLE_NESTED_QUANT_MAP] == 5);
  CHECK(ls[0].roles[Q4_ROLE_QUANT_STATE] == 6);
  CHECK(ls[0].roles[Q4_ROLE_BIAS] == 7);
  CHECK(ls[0].roles[Q4_ROLE_GLOBAL_SCALE] == -1);
}

TEST_CASE("the three NVFP4 families are told apart", "[schema]") {
  Keys k;
  k.add("a.weight.qdata", Q4_DTYPE_U8, {64, 32}).add("a.weight.scale", Q4_DTYPE_F8_E4M3, {64, 4});
  k.add("b.weight", Q4_DTYPE_U8, {64, 32})
      .add("b.weight_scale", Q4_DTYPE_F8_E4M3, {64, 4})
      .add("b.weight_scale_2", Q4_DTYPE_F32, {})
      .add("b.input_scale", Q4_DTYPE_F32, {});
  k.add("c.weight_packed", Q4_DTYPE_U8, {64, 32})
      .add("c.weight_scale", Q4_DTYPE_F8_E4M3, {64, 4})
      .add("c.weight_global_scale", Q4_DTYPE_F32, {1})
      .add("c.input_global_scale", Q4_DTYPE_F32, {1});
  k.add("d.qdata").add("d.scale");  // short legacy form, dtypes unknown
  int32_t st = -1;
  const Q4_schema_summary s = summary_of(k, &st);
  CHECK(st == Q4_OK);
  CHECK(s.format == Q4_FORMAT_NVFP4);
  CHECK(s.family == Q4_SCHEMA_NONE);  // several families
  CHECK(s.num_linears == 4);
  CHECK(s.family_counts[Q4_SCHEMA_NVFP4_LEGACY] == 2);
  CHECK(s.family_counts[Q4_SCHEMA_NVFP4_MODELOPT] == 1);
  CHECK(s.family_counts[Q4_SCHEMA_NVFP4_COMPRESSED] == 1);
  const auto ls = linears_of(k, &st);
  REQUIRE(ls.size() == 4);
  CHECK(prefix_of(k, ls[0]) == "a");
  CHECK(ls[0].family == Q4_SCHEMA_NVFP4_LEGACY);
  CHECK(ls[1].family == Q4_SCHEMA_NVFP4_MODELOPT);
  CHECK(ls[1].roles[Q4_ROLE_GLOBAL_SCALE] == 4);
  CHECK(ls[1].roles[Q4_ROLE_INPUT_SCALE] == 5);
  CHECK(ls[1].global_scale_inverted == 0);
  CHECK(ls[2].family == Q4_SCHEMA_NVFP4_COMPRESSED);
  CHECK(ls[2].global_scale_inverted == 1);
  CHECK(ls[2].roles[Q4_ROLE_WEIGHT] == 6);
  CHECK(prefix_of(k, ls[3]) == "d");
  CHECK(ls[3].roles[Q4_ROLE_WEIGHT] == 10);
  CHECK(ls[3].roles[Q4_ROLE_SCALE] == 11);
}

TEST_CASE("missing companion keys name the prefix and the key", "[schema]") {
  struct Case {
    std::vector<std::string> keys;
    std::string missing;
  };
  const Case cases[] = {
      {{"m.weight", "m.weight_scale"}, "m.weight_scale_2"},
      {{"m.weight_scale", "m.weight_scale_2"}, "m.weight'"},
      {{"c.weight_packed", "c.weight_scale"}, "c.weight_global_scale"},
      {{"c.weight_packed", "c.weight_global_scale"}, "c.weight_scale"},
      {{"l.weight.qdata"}, "l.weight.scale"},
      {{"n.weight", "n.weight.absmax"}, "n.weight.quant_map"},
      {{"n.weight.absmax", "n.weight.quant_map"}, "n.weight'"},
      {{"n.weight", "n.weight.absmax", "n.weight.quant_map", "n.weight.nested_absmax"},
       "n.weight.nested_quant_map"},
  };
  for (const Case& c : cases) {
    Keys k;
    for (const auto& key : c.keys) k.add(key);
    int32_t st = -1;
    const Q4_schema_summary s = summary_of(k, &st);
    const std::string msg = Q4_last_error();
    INFO(msg);
    CHECK(st == Q4_ERR_SCHEMA);
    CHECK(s.num_incomplete == 1);
    CHECK(s.num_linears == 0);
    CHECK(msg.find("missing key '" + c.missing) != std::string::npos);
    CHECK(msg.find("linear '" + c.keys[0].substr(0, 1) + "'") != std::string::npos);
  }
}

TEST_CASE("both formats present, ambiguous prefixes, wrong dtypes", "[schema]") {
  Keys mixed;
  mixed.add("a.weight").add("a.weight.absmax").add("a.weight.quant_map");
  mixed.add("b.weight").add("b.weight_scale").add("b.weight_scale_2");
  int32_t st = -1;
  Q4_schema_summary s = summary_of(mixed, &st);
  CHECK(st == Q4_OK);
  CHECK(s.format == Q4_FORMAT_MIXED);
  CHECK(s.num_linears == 2);

  Keys amb;
  amb.add("x.weight")
      .add("x.weight.absmax")
      .add("x.weight.quant_map")
      .add("x.weight_scale")
      .add("x.weight_scale_2");
  s = summary_of(amb, &st);
  CHECK(st == Q4_ERR_SCHEMA);
  CHECK(std::string(Q4_last_error()).find("ambiguous") != std::string::npos);

  Keys bad;
  bad.add("y.weight", Q4_DTYPE_U8)
      .add("y.weight_scale", Q4_DTYPE_F8_E4M3)
      .add("y.weight_scale_2", Q4_DTYPE_BF16);
  s = summary_of(bad, &st);
  CHECK(st == Q4_ERR_SCHEMA);
  CHECK(std::string(Q4_last_error()).find("dtype BF16") != std::string::npos);

  Keys shape;
  shape.add("z.weight", Q4_DTYPE_U8, {64, 32})
      .add("z.weight_scale", Q4_DTYPE_F8_E4M3, {64, 3})
      .add("z.weight_scale_2", Q4_DTYPE_F32, {});
  s = summary_of(shape, &st);
  CHECK(st == Q4_ERR_SCHEMA);
  CHECK(std::string(Q4_last_error()).find("shapes disagree") != std::string::npos);

  // FP8 (not 4-bit) checkpoints: an F32 weight_scale alone is no NVFP4 linear.
  Keys fp8;
  fp8.add("f.weight", Q4_DTYPE_F8_E4M3, {8, 8})
      .add("f.weight_scale", Q4_DTYPE_F32, {})
      .add("f.input_scale", Q4_DTYPE_F32, {});
  s = summary_of(fp8, &st);
  CHECK(st == Q4_OK);
  CHECK(s.format == Q4_FORMAT_NONE);

  Keys none;
  none.add("w.weight", Q4_DTYPE_BF16, {4, 4});
  s = summary_of(none, &st);
  CHECK(st == Q4_OK);
  CHECK(s.format == Q4_FORMAT_NONE);
  CHECK(s.num_linears == 0);
}

TEST_CASE("schema entry points validate their arguments", "[schema]") {
  Q4_schema_summary s{};
  s.struct_size = sizeof s;
  CHECK(Q4_detect_schema(nullptr, 3, &s) == Q4_ERR_NULL_POINTER);
  CHECK(Q4_detect_schema(nullptr, 0, &s) == Q4_OK);
  Q4_tensor_desc d{};
  CHECK(Q4_detect_schema(&d, 1, &s) == Q4_ERR_NULL_POINTER);
  CHECK(std::string(Q4_last_error()).find("tensors[0].name") != std::string::npos);
  CHECK(Q4_detect_schema(&d, 0, nullptr) == Q4_ERR_NULL_POINTER);
  Keys k;
  k.add("a.weight.qdata").add("a.weight.scale").add("b.weight.qdata").add("b.weight.scale");
  size_t n = 0;
  Q4_linear_schema one{};
  one.struct_size = sizeof one;
  CHECK(Q4_detect_linears(k.data(), k.size(), &one, 1, &n) == Q4_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 2);
  CHECK(one.family == Q4_SCHEMA_NVFP4_LEGACY);
  CHECK(Q4_detect_linears(k.data(), k.size(), nullptr, 0, nullptr) == Q4_ERR_NULL_POINTER);
  CHECK(std::string(Q4_schema_name(Q4_SCHEMA_NVFP4_MODELOPT)) == "nvfp4-modelopt");
  CHECK(std::string(Q4_format_name(Q4_FORMAT_NF4)) == "nf4");
  CHECK(std::string(Q4_dtype_name(Q4_DTYPE_F8_E4M3)) == "F8_E4M3");
}

TEST_CASE("gpt-oss MXFP4 experts: original and Hugging Face key families", "[schema][mxfp4]") {
  // Original checkpoint: P.blocks [E, N, K/32, 16] + P.scales [E, N, K/32].
  Keys orig;
  orig.add("block.0.mlp.mlp1_weight.blocks", Q4_DTYPE_U8, {32, 5760, 90, 16})
      .add("block.0.mlp.mlp1_weight.scales", Q4_DTYPE_U8, {32, 5760, 90})
      .add("block.0.mlp.mlp1_bias", Q4_DTYPE_BF16, {32, 5760})
      .add("block.0.mlp.mlp2_weight.blocks", Q4_DTYPE_U8, {32, 2880, 90, 16})
      .add("block.0.mlp.mlp2_weight.scales", Q4_DTYPE_U8, {32, 2880, 90})
      .add("block.0.attn.qkv.weight", Q4_DTYPE_BF16, {5120, 2880});
  int32_t st = -1;
  Q4_schema_summary s = summary_of(orig, &st);
  CHECK(st == Q4_OK);
  CHECK(s.format == Q4_FORMAT_MXFP4);
  CHECK(s.family == Q4_SCHEMA_MXFP4_GPT_OSS);
  CHECK(s.num_linears == 2);
  CHECK(s.family_counts[Q4_SCHEMA_MXFP4_GPT_OSS] == 2);
  std::vector<Q4_linear_schema> ls = linears_of(orig, &st);
  REQUIRE(st == Q4_OK);
  REQUIRE(ls.size() == 2);
  CHECK(prefix_of(orig, ls[0]) == "block.0.mlp.mlp1_weight");
  CHECK(ls[0].format == Q4_FORMAT_MXFP4);
  CHECK(ls[0].roles[Q4_ROLE_WEIGHT] == 0);
  CHECK(ls[0].roles[Q4_ROLE_SCALE] == 1);
  CHECK(ls[0].roles[Q4_ROLE_BIAS] == 2);
  CHECK(ls[1].roles[Q4_ROLE_BIAS] == -1);

  // Hugging Face conversion: P_blocks + P_scales (+ P_bias).
  Keys hf;
  hf.add("model.layers.0.mlp.experts.gate_up_proj_blocks", Q4_DTYPE_U8, {32, 5760, 90, 16})
      .add("model.layers.0.mlp.experts.gate_up_proj_scales", Q4_DTYPE_U8, {32, 5760, 90})
      .add("model.layers.0.mlp.experts.gate_up_proj_bias", Q4_DTYPE_BF16, {32, 5760})
      .add("model.layers.0.mlp.experts.down_proj_blocks", Q4_DTYPE_U8, {32, 2880, 1440})
      .add("model.layers.0.mlp.experts.down_proj_scales", Q4_DTYPE_U8, {32, 2880, 90});
  s = summary_of(hf, &st);
  CHECK(st == Q4_OK);
  CHECK(s.format == Q4_FORMAT_MXFP4);
  CHECK(s.num_linears == 2);
  ls = linears_of(hf, &st);
  REQUIRE(ls.size() == 2);
  CHECK(prefix_of(hf, ls[0]) == "model.layers.0.mlp.experts.gate_up_proj");
  CHECK(ls[0].roles[Q4_ROLE_BIAS] == 2);
  CHECK(prefix_of(hf, ls[1]) == "model.layers.0.mlp.experts.down_proj");
  CHECK(std::string(Q4_schema_name(Q4_SCHEMA_MXFP4_GPT_OSS)) == "mxfp4-gpt-oss");
  CHECK(std::string(Q4_format_name(Q4_FORMAT_MXFP4)) == "mxfp4");

  // Missing scales, wrong dtype, disagreeing shapes.
  Keys missing;
  missing.add("e.blocks", Q4_DTYPE_U8, {2, 4, 1, 16});
  s = summary_of(missing, &st);
  CHECK(st == Q4_ERR_SCHEMA);
  CHECK(std::string(Q4_last_error()).find("e.scales") != std::string::npos);
  Keys dtype;
  dtype.add("d_blocks", Q4_DTYPE_U8, {2, 4, 1, 16}).add("d_scales", Q4_DTYPE_F32, {2, 4, 1});
  s = summary_of(dtype, &st);
  CHECK(st == Q4_ERR_SCHEMA);
  CHECK(std::string(Q4_last_error()).find("dtype F32") != std::string::npos);
  Keys shape;
  shape.add("h_blocks", Q4_DTYPE_U8, {2, 4, 2, 16}).add("h_scales", Q4_DTYPE_U8, {2, 4, 1});
  s = summary_of(shape, &st);
  CHECK(st == Q4_ERR_SCHEMA);
  CHECK(std::string(Q4_last_error()).find("shapes disagree") != std::string::npos);
  // A non-uint8 tensor that merely ends in ".blocks" is not a 4-bit linear.
  Keys other;
  other.add("vision.blocks", Q4_DTYPE_F32, {4, 4});
  s = summary_of(other, &st);
  CHECK(st == Q4_OK);
  CHECK(s.format == Q4_FORMAT_NONE);

  // With NVFP4 linears as well the checkpoint is mixed.
  Keys mixed = orig;
  mixed.add("lm.weight").add("lm.weight_scale").add("lm.weight_scale_2");
  s = summary_of(mixed, &st);
  CHECK(st == Q4_OK);
  CHECK(s.format == Q4_FORMAT_MIXED);
  CHECK(s.family == Q4_SCHEMA_NONE);
}
