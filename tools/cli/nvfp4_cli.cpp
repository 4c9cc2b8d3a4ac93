// nvfp4 — command-line tool over the public C API: inspect, quantize and
// verify 4-bit safetensors checkpoints; generate a test checkpoint; forward
// to the benchmark; self-test; capabilities.
//
// Exit codes: 0 ok, 1 error, 2 usage. Messages go to stderr and name the
// file and tensor.
#include <sys/stat.h>
#include <unistd.h>

#include <fnmatch.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "nvfp4/nvfp4.h"

namespace {

using nlohmann::json;

struct CliError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(int32_t status, const std::string& context) {
  if (status != Q4_OK) throw CliError(context + ": " + Q4_status_string(status) + ": " + Q4_last_error());
}

// The same with the context "where: what", put together only on failure
// (the calls in the per-tensor loops then build no strings).
void check(int32_t status, const std::string& where, const std::string& what) {
  if (status != Q4_OK) check(status, where + ": " + what);
}

DLTensor host(const void* data, int64_t* shape, int32_t ndim, DLDataType dt) {
  DLTensor t{};
  t.data = const_cast<void*>(data);
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

const DLDataType kF32{kDLFloat, 32, 1}, kU8{kDLUInt, 8, 1};

float bf16_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float f16_to_f32(uint16_t h) {
  const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                   : (e == 31 ? (m ? NAN : INFINITY)
                              : std::ldexp(static_cast<float>(m + 1024), static_cast<int>(e) - 25));
  return (h & 0x8000) ? -v : v;
}

// Any float tensor of the checkpoint as fp32 values.
std::vector<float> to_f32(const DLTensor& t, int64_t numel) {
  std::vector<float> out(static_cast<size_t>(numel));
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < numel; ++i) {
    if (t.dtype.code == kDLFloat && t.dtype.bits == 32) {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = t.dtype.code == kDLBfloat ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return out;
}

double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    r += static_cast<double>(a[i]) * a[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

struct Checkpoint {
  Q4_checkpoint* c = nullptr;
  std::string path;
  explicit Checkpoint(const std::string& p) : path(p) { check(Q4_checkpoint_open(p.c_str(), &c), p); }
  ~Checkpoint() { Q4_checkpoint_close(c); }
  size_t count() const {
    size_t n = 0;
    check(Q4_checkpoint_count(c, &n), path);
    return n;
  }
  Q4_tensor_desc desc(size_t i, int64_t* nbytes = nullptr) const {
    Q4_tensor_desc d{};
    check(Q4_checkpoint_tensor_info(c, i, &d, nbytes), path);
    return d;
  }
  DLTensor view(size_t i) const {
    DLTensor v{};
    check(Q4_checkpoint_tensor(c, i, &v), path);
    return v;
  }
  std::vector<Q4_tensor_desc> descs() const {
    std::vector<Q4_tensor_desc> d;
    for (size_t i = 0; i < count(); ++i) d.push_back(desc(i));
    return d;
  }
};

class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(isatty(STDERR_FILENO) != 0) {}
  void step(size_t done, const std::string& what) const {
    if (!tty_) return;
    const int width = 30, filled = static_cast<int>(width * done / std::max<size_t>(total_, 1));
    std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu %-40.40s", filled, "##############################",
                 width - filled, "", done, total_, what.c_str());
    if (done == total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  size_t total_;
  bool tty_;
};

// ---------------------------------------------------------------------------
int cmd_info() {
  Q4_capabilities c{};
  c.struct_size = sizeof c;
  check(Q4_get_capabilities(&c), "capabilities");
  json j;
  j["version"] = Q4_version_string();
  j["abi"] = Q4_abi_version();
  j["cpu"] = {{"vendor", c.cpu_vendor},
              {"brand", c.cpu_brand},
              {"cpus", c.num_cpus},
              {"isa_active", Q4_isa_name(c.isa_active)},
              {"isa_best", Q4_isa_name(c.isa_best)}};
  j["cuda"] = {{"state", c.cuda_state},
               {"devices", c.cuda_device_count},
               {"runtime", c.cuda_runtime_version},
               {"driver", c.cuda_driver_version},
               {"managed_memory", c.managed_memory != 0},
               {"fp4_tensor_cores", c.fp4_tensor_cores != 0},
               {"archs", c.cuda_archs},
               {"native_load_state", c.native_load_state}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

int cmd_generate(const std::string& out, int layers, int64_t dim, uint32_t seed) {
  if (layers < 1 || dim < 16 || dim % 64 != 0)
    throw CliError("generate: need --layers >= 1 and --dim a multiple of 64");
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  Q4_checkpoint_writer* w = nullptr;
  check(Q4_checkpoint_writer_create(&w), "writer");
  const DLDataType bf16{kDLBfloat, 16, 1};
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint16_t> data(static_cast<size_t>(n));
    for (auto& v : data) v = f32_to_bf16(nd(rng));
    DLTensor t = host(data.data(), shape.data(), static_cast<int32_t>(shape.size()), bf16);
    check(Q4_checkpoint_writer_add(w, name.c_str(), Q4_DTYPE_BF16, &t), out, name);
  };
  const int64_t vocab = 512;
  add("model.embed_tokens.weight", {vocab, dim});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    add(p + ".input_layernorm.weight", {dim});
    add(p + ".self_attn.q_proj.weight", {dim, dim});
    add(p + ".self_attn.q_proj.bias", {dim});
    add(p + ".mlp.up_proj.weight", {2 * dim, dim});
    add(p + ".mlp.down_proj.weight", {dim, 2 * dim});
  }
  add("lm_head.weight", {vocab, dim});
  check(Q4_checkpoint_writer_metadata(w, "format", "pt"), out);
  check(Q4_checkpoint_writer_commit(w, out.c_str()), out);
  Q4_checkpoint_writer_destroy(w);
  std::printf("wrote %s: %d layers, dim %lld, bf16\n", out.c_str(), layers, static_cast<long long>(dim));
  return 0;
}

// Options of `generate --llama`: a random Hugging Face Llama directory.
struct LlamaGenOptions {
  bool llama = false;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t intermediate = 0;  // 0: about 8/3 * hidden rounded to 64
  int64_t vocab = 256;
  int64_t max_positions = 2048;
  double rope_theta = 10000.0;
  std::string dtype = "bf16";
  bool tied = false;
};

// Deterministic normal samples, independent of the standard library
// (splitmix64 + Box-Muller), so the same seed gives the same model anywhere.
class NormalGen {
 public:
  explicit NormalGen(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  float next() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(bits() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(bits() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
    spare_ = static_cast<float>(r * std::sin(t));
    have_ = true;
    return static_cast<float>(r * std::cos(t));
  }

 private:
  uint64_t bits() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t s_;
  float spare_ = 0.0f;
  bool have_ = false;
};

uint16_t f32_to_f16(float f) {
  // Round to nearest even through the hardware-independent bit recipe.
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (!(a < 65520.0f)) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 0x1.0p-14f)
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 0x1.0p24f)));
  int e = 0;
  const float m = std::frexp(a, &e);                                   // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint(m * 2048.0f));  // 11 bits incl. hidden
  if (mant == 2048u) {
    mant = 1024u;
    ++e;
  }
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(e + 14) << 10) | (mant - 1024u));
}

// `nvfp4 generate DIR --llama`: config.json + model.safetensors with the Hugging
// Face Llama keys; weights N(0, 1/in_features) for the projections, N(0, 1)
// for the embedding, 1 + N(0, 0.1) for the norms.
int cmd_generate_llama(const std::string& dir, int layers, int64_t hidden, uint32_t seed,
                       const LlamaGenOptions& o) {
  if (layers < 1) throw CliError("generate --llama: need --layers >= 1");
  if (hidden < 16 || hidden % 16 != 0)
    throw CliError("generate --llama: --dim must be a positive multiple of 16");
  if (o.heads < 1 || hidden % o.heads != 0 || (hidden / o.heads) % 2 != 0)
    throw CliError("generate --llama: --heads must divide --dim into even head sizes");
  if (o.kv_heads < 1 || o.kv_heads > o.heads || o.heads % o.kv_heads != 0)
    throw CliError("generate --llama: --kv-heads must divide --heads");
  const int64_t head_dim = hidden / o.heads;
  if ((o.kv_heads * head_dim) % 16 != 0)
    throw CliError("generate --llama: kv-heads * head size must be a multiple of 16");
  const int64_t inter = o.intermediate > 0 ? o.intermediate : (hidden * 8 / 3 + 63) / 64 * 64;
  if (inter % 16 != 0) throw CliError("generate --llama: --intermediate must be a multiple of 16");
  if (o.vocab < 2) throw CliError("generate --llama: --vocab must be >= 2");
  int32_t file_dtype = Q4_DTYPE_BF16;
  DLDataType dt{kDLBfloat, 16, 1};
  if (o.dtype == "f32") {
    file_dtype = Q4_DTYPE_F32;
    dt = kF32;
  } else if (o.dtype == "f16") {
    file_dtype = Q4_DTYPE_F16;
    dt = DLDataType{kDLFloat, 16, 1};
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw CliError("generate: cannot create directory " + dir + ": " + std::strerror(errno));
  NormalGen rng(seed);
  Q4_checkpoint_writer* w = nullptr;
  check(Q4_checkpoint_writer_create(&w), "writer");
  std::unique_ptr<Q4_checkpoint_writer, int32_t (*)(Q4_checkpoint_writer*)> guard(
      w, Q4_checkpoint_writer_destroy);
  int64_t params = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean, float stddev) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    params += n;
    std::vector<uint8_t> data(static_cast<size_t>(n) * (file_dtype == Q4_DTYPE_F32 ? 4 : 2));
    for (int64_t i = 0; i < n; ++i) {
      const float v = mean + stddev * rng.next();
      if (file_dtype == Q4_DTYPE_F32) {
        std::memcpy(&data[static_cast<size_t>(4 * i)], &v, 4);
      } else {
        const uint16_t h = file_dtype == Q4_DTYPE_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(&data[static_cast<size_t>(2 * i)], &h, 2);
      }
    }
    DLTensor t = host(data.data(), shape.data(), static_cast<int32_t>(shape.size()), dt);
    check(Q4_checkpoint_writer_add(w, name.c_str(), file_dtype, &t), dir, name);
  };
  auto proj = [&](const std::string& name, int64_t n, int64_t k) {
    add(name, {n, k}, 0.0f, static_cast<float>(1.0 / std::sqrt(static_cast<double>(k))));
  };
  add("model.embed_tokens.weight", {o.vocab, hidden}, 0.0f, 1.0f);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    add(p + ".input_layernorm.weight", {hidden}, 1.0f, 0.1f);
    proj(p + ".self_attn.q_proj.weight", hidden, hidden);
    proj(p + ".self_attn.k_proj.weight", o.kv_heads * head_dim, hidden);
    proj(p + ".self_attn.v_proj.weight", o.kv_heads * head_dim, hidden);
    proj(p + ".self_attn.o_proj.weight", hidden, hidden);
    add(p + ".post_attention_layernorm.weight", {hidden}, 1.0f, 0.1f);
    proj(p + ".mlp.gate_proj.weight", inter, hidden);
    proj(p + ".mlp.up_proj.weight", inter, hidden);
    proj(p + ".mlp.down_proj.weight", hidden, inter);
  }
  add("model.norm.weight", {hidden}, 1.0f, 0.1f);
  if (!o.tied) proj("lm_head.weight", o.vocab, hidden);
  check(Q4_checkpoint_writer_metadata(w, "format", "pt"), dir);
  const std::string st = dir + "/model.safetensors";
  check(Q4_checkpoint_writer_commit(w, st.c_str()), st);
  json cfg = {{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"hidden_size", hidden},
              {"intermediate_size", inter},
              {"num_hidden_layers", layers},
              {"num_attention_heads", o.heads},
              {"num_key_value_heads", o.kv_heads},
              {"head_dim", head_dim},
              {"vocab_size", o.vocab},
              {"max_position_embeddings", o.max_positions},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", o.rope_theta},
              {"hidden_act", "silu"},
              {"tie_word_embeddings", o.tied},
              {"torch_dtype", o.dtype == "f32" ? "float32" : (o.dtype == "f16" ? "float16" : "bfloat16")}};
  const std::string cp = dir + "/config.json";
  FILE* f = std::fopen(cp.c_str(), "w");
  if (!f) throw CliError("generate: cannot write " + cp + ": " + std::strerror(errno));
  const std::string text = cfg.dump(2) + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw CliError("generate: cannot write " + cp);
  std::printf(
      "wrote %s: llama, %d layers, hidden %lld, heads %lld/%lld kv, intermediate %lld, vocab %lld, %s, %.1f "
      "M parameters%s\n",
      dir.c_str(), layers, static_cast<long long>(hidden), static_cast<long long>(o.heads),
      static_cast<long long>(o.kv_heads), static_cast<long long>(inter), static_cast<long long>(o.vocab),
      o.dtype.c_str(), static_cast<double>(params) / 1e6, o.tied ? ", tied LM head" : "");
  return 0;
}

std::vector<Q4_linear_schema> linears_of(const std::vector<Q4_tensor_desc>& descs, Q4_schema_summary* summary,
                                         std::string* problem) {
  summary->struct_size = sizeof *summary;
  const int32_t st = Q4_detect_schema(descs.data(), descs.size(), summary);
  if (st != Q4_OK) *problem = Q4_last_error();
  size_t n = 0;
  Q4_detect_linears(descs.data(), descs.size(), nullptr, 0, &n);
  std::vector<Q4_linear_schema> out(n);
  for (auto& l : out) l.struct_size = sizeof l;
  Q4_detect_linears(descs.data(), descs.size(), out.data(), out.size(), &n);
  return out;
}

// An MXFP4 (gpt-oss) linear's shape from its scales [..., N, K/32]: the
// leading dimensions are experts.
struct MxShape {
  int64_t experts = 1, n = 0, k = 0;
};
MxShape mxfp4_shape(const std::vector<Q4_tensor_desc>& descs, const Q4_linear_schema& l) {
  const Q4_tensor_desc& sc = descs[static_cast<size_t>(l.roles[Q4_ROLE_SCALE])];
  MxShape m;
  for (int32_t i = 0; i + 2 < sc.ndim; ++i) m.experts *= sc.shape[i];
  m.n = sc.shape[sc.ndim - 2];
  m.k = sc.shape[sc.ndim - 1] * 32;
  return m;
}

int cmd_inspect(const std::string& path, bool as_json) {
  Checkpoint c(path);
  const auto descs = c.descs();
  json j;
  j["file"] = path;
  json tensors = json::array();
  int64_t total = 0;
  for (size_t i = 0; i < descs.size(); ++i) {
    int64_t nbytes = 0;
    c.desc(i, &nbytes);
    total += nbytes;
    std::vector<int64_t> shape(descs[i].shape, descs[i].shape + descs[i].ndim);
    tensors.push_back({{"name", descs[i].name},
                       {"dtype", Q4_dtype_name(descs[i].dtype)},
                       {"shape", shape},
                       {"bytes", nbytes}});
  }
  Q4_schema_summary s{};
  std::string problem;
  const auto linears = linears_of(descs, &s, &problem);
  json layers = json::array();
  for (const auto& l : linears) {
    json layer = {{"prefix", std::string(descs[l.prefix_tensor].name, static_cast<size_t>(l.prefix_len))},
                  {"format", Q4_format_name(l.format)},
                  {"schema", Q4_schema_name(l.family)}};
    if (l.format == Q4_FORMAT_MXFP4) {
      const MxShape ms = mxfp4_shape(descs, l);
      layer["experts"] = ms.experts;
      layer["shape"] = {ms.n, ms.k};
    }
    layers.push_back(layer);
  }
  j["tensors"] = tensors;
  j["linears"] = layers;
  j["totals"] = {{"tensors", descs.size()},
                 {"bytes", total},
                 {"linears", s.num_linears},
                 {"format", Q4_format_name(s.format)},
                 {"schema", Q4_schema_name(s.family)},
                 {"incomplete", s.num_incomplete}};
  if (!problem.empty()) j["problem"] = problem;
  if (as_json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %zu tensors, %.2f MiB\n", path.c_str(), descs.size(),
              static_cast<double>(total) / 1048576.0);
  for (const auto& t : tensors) {
    std::printf("  %-56s %-8s %-18s %10lld B\n", t["name"].get<std::string>().c_str(),
                t["dtype"].get<std::string>().c_str(), t["shape"].dump().c_str(),
                static_cast<long long>(t["bytes"].get<int64_t>()));
  }
  std::printf("4-bit linears: %d (%s, %s)\n", s.num_linears, Q4_format_name(s.format),
              Q4_schema_name(s.family));
  for (const auto& l : layers) {
    std::string extra;
    if (l.contains("experts")) {
      extra = "  " + std::to_string(l["experts"].get<int64_t>()) + " x " + l["shape"].dump() +
              (l["experts"].get<int64_t>() > 1 ? " (experts)" : "");
    }
    std::printf("  %-48s %-6s %s%s\n", l["prefix"].get<std::string>().c_str(),
                l["format"].get<std::string>().c_str(), l["schema"].get<std::string>().c_str(),
                extra.c_str());
  }
  if (!problem.empty()) std::printf("problem: %s\n", problem.c_str());
  return 0;
}

struct QuantizeOptions {
  std::string format = "nvfp4";
  std::string layout;
  int blocksize = 64;
  bool double_quant = false;
  std::vector<std::string> exclude = {"*embed*", "*lm_head*", "*norm*"};
};

// A float "*.weight" [N, K] (MXFP4 also an expert stack [E, N, K]) not
// excluded, with K a multiple of the format's block.
bool is_linear_weight(const Q4_tensor_desc& d, const QuantizeOptions& o) {
  const std::string name = d.name;
  const bool mxfp4 = o.format == "mxfp4";
  if ((d.ndim != 2 && !(mxfp4 && d.ndim == 3)) || name.size() < 7 ||
      name.compare(name.size() - 7, 7, ".weight") != 0) {
    return false;
  }
  if (d.dtype != Q4_DTYPE_F32 && d.dtype != Q4_DTYPE_F16 && d.dtype != Q4_DTYPE_BF16) return false;
  for (const std::string& p : o.exclude) {
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return false;
  }
  if (mxfp4) return d.shape[d.ndim - 1] % 32 == 0;
  return o.format != "nvfp4" || d.shape[1] % 16 == 0;
}

int cmd_quantize(const std::string& in, const std::string& out, QuantizeOptions o) {
  if (o.format != "nvfp4" && o.format != "nf4" && o.format != "mxfp4") {
    throw CliError("--format must be nvfp4, nf4 or mxfp4");
  }
  if (o.layout.empty()) o.layout = o.format == "nf4" ? "bnb" : (o.format == "mxfp4" ? "gpt-oss" : "modelopt");
  const bool nvfp4 = o.format == "nvfp4", mxfp4 = o.format == "mxfp4";
  if (mxfp4 && o.layout != "gpt-oss" && o.layout != "gpt-oss-hf") {
    throw CliError(
        "--layout for mxfp4 must be gpt-oss (P.blocks/P.scales) or gpt-oss-hf (P_blocks/P_scales)");
  }
  if (nvfp4 && o.layout != "modelopt" && o.layout != "compressed-tensors" && o.layout != "legacy") {
    throw CliError("--layout for nvfp4 must be modelopt, compressed-tensors or legacy");
  }
  if (o.format == "nf4" && o.layout != "bnb") throw CliError("--layout for nf4 must be bnb");
  Checkpoint c(in);
  const auto descs = c.descs();
  Q4_checkpoint_writer* w = nullptr;
  check(Q4_checkpoint_writer_create(&w), "writer");
  std::unique_ptr<Q4_checkpoint_writer, int32_t (*)(Q4_checkpoint_writer*)> guard(
      w, Q4_checkpoint_writer_destroy);
  auto put = [&](const std::string& name, int32_t dtype, const void* data, std::vector<int64_t> shape,
                 DLDataType dt) {
    DLTensor t = host(data, shape.data(), static_cast<int32_t>(shape.size()), dt);
    check(Q4_checkpoint_writer_add(w, name.c_str(), dtype, &t), out, name);
  };
  Progress progress(descs.size());
  json summary = json::array();
  int quantized = 0;
  for (size_t i = 0; i < descs.size(); ++i) {
    const Q4_tensor_desc& d = descs[i];
    const std::string name = d.name;
    const DLTensor v = c.view(i);
    progress.step(i + 1, name);
    if (!is_linear_weight(d, o)) {  // copied as it is
      check(Q4_checkpoint_writer_add(w, name.c_str(), d.dtype, &v), out, name);
      continue;
    }
    const std::string prefix = name.substr(0, name.size() - 7);
    if (mxfp4) {
      // gpt-oss layout: uint8 blocks [..., N, K/32, 16] + uint8 E8M0 scales
      // [..., N, K/32], an expert stack [E, N, K] keeping E leading.
      const bool stack = d.ndim == 3;
      const int64_t e = stack ? d.shape[0] : 1, n = d.shape[d.ndim - 2], k = d.shape[d.ndim - 1];
      const int64_t rows = e * n;
      const std::vector<float> orig = to_f32(v, rows * k);
      std::vector<float> back(static_cast<size_t>(rows * k));
      std::vector<uint8_t> q(static_cast<size_t>(rows * k / 2)), s(static_cast<size_t>(rows * (k / 32)));
      int64_t fshape[2] = {rows, k}, qs[2] = {rows, k / 2}, ss[2] = {rows, k / 32};
      DLTensor tback = host(back.data(), fshape, 2, kF32);
      DLTensor tq = host(q.data(), qs, 2, kU8), ts = host(s.data(), ss, 2, kU8);
      check(MXFP4_quantize(&v, &tq, &ts, Q4_SCALE_LINEAR, nullptr), in, name);
      check(MXFP4_dequantize(&tq, &ts, Q4_SCALE_LINEAR, &tback, nullptr), name);
      const std::string sep = o.layout == "gpt-oss" ? "." : "_";
      std::vector<int64_t> bshape = {n, k / 32, 16}, sshape = {n, k / 32};
      if (stack) {
        bshape.insert(bshape.begin(), e);
        sshape.insert(sshape.begin(), e);
      }
      put(prefix + sep + "blocks", Q4_DTYPE_U8, q.data(), bshape, kU8);
      put(prefix + sep + "scales", Q4_DTYPE_U8, s.data(), sshape, kU8);
      json shape = stack ? json{e, n, k} : json{n, k};
      summary.push_back({{"layer", prefix}, {"shape", shape}, {"rel_rms_error", rel_rms(orig, back)}});
      ++quantized;
      continue;
    }
    const int64_t n = d.shape[0], k = d.shape[1];
    const std::vector<float> orig = to_f32(v, n * k);
    std::vector<float> back(static_cast<size_t>(n * k));
    int64_t fshape[2] = {n, k};
    DLTensor tback = host(back.data(), fshape, 2, kF32);
    if (nvfp4) {
      std::vector<uint8_t> q(static_cast<size_t>(n * k / 2)), s(static_cast<size_t>(n * k / 16));
      int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 16};
      DLTensor tq = host(q.data(), qs, 2, kU8), ts = host(s.data(), ss, 2, kU8);
      float g = 0;
      check(NVFP4_quantize(&v, &tq, &ts, Q4_SCALE_LINEAR, o.layout == "legacy" ? 1.0f : 0.0f, &g, nullptr),
            in, name);
      check(NVFP4_dequantize(&tq, &ts, Q4_SCALE_LINEAR, g, &tback, nullptr), name);
      const DLDataType e4m3{kDLFloat8_e4m3fn, 8, 1};
      if (o.layout == "modelopt") {
        put(prefix + ".weight", Q4_DTYPE_U8, q.data(), {n, k / 2}, kU8);
        put(prefix + ".weight_scale", Q4_DTYPE_F8_E4M3, s.data(), {n, k / 16}, e4m3);
        put(prefix + ".weight_scale_2", Q4_DTYPE_F32, &g, {}, kF32);
      } else if (o.layout == "compressed-tensors") {
        const float inv = 1.0f / g;  // compressed-tensors stores the inverse
        put(prefix + ".weight_packed", Q4_DTYPE_U8, q.data(), {n, k / 2}, kU8);
        put(prefix + ".weight_scale", Q4_DTYPE_F8_E4M3, s.data(), {n, k / 16}, e4m3);
        put(prefix + ".weight_global_scale", Q4_DTYPE_F32, &inv, {1}, kF32);
      } else {
        put(prefix + ".weight.qdata", Q4_DTYPE_U8, q.data(), {n, k / 2}, kU8);
        put(prefix + ".weight.scale", Q4_DTYPE_F8_E4M3, s.data(), {n, k / 16}, e4m3);
      }
    } else {
      const int64_t numel = n * k, bs = o.blocksize, nblocks = (numel + bs - 1) / bs;
      std::vector<uint8_t> q(static_cast<size_t>((numel + 1) / 2));
      std::vector<float> absmax(static_cast<size_t>(nblocks));
      int64_t qs[2] = {(numel + 1) / 2, 1}, as[1] = {nblocks};
      DLTensor tq = host(q.data(), qs, 2, kU8), ta = host(absmax.data(), as, 1, kF32);
      check(NF4_quantize(&v, &tq, &ta, static_cast<int32_t>(bs), nullptr), in, name);
      NF4_state st{};
      st.struct_size = sizeof st;
      st.blocksize = static_cast<int32_t>(bs);
      st.absmax = &ta;
      json qstate = {{"quant_type", "nf4"},
                     {"blocksize", bs},
                     {"shape", {n, k}},
                     {"dtype", d.dtype == Q4_DTYPE_BF16 ? "bfloat16"
                                                        : (d.dtype == Q4_DTYPE_F16 ? "float16" : "float32")}};
      std::vector<uint8_t> qabs(static_cast<size_t>(nblocks));
      std::vector<float> nested((static_cast<size_t>(nblocks) + 255) / 256), map(256);
      int64_t ns[1] = {static_cast<int64_t>(nested.size())}, ms[1] = {256}, qas[1] = {nblocks};
      DLTensor tqa = host(qabs.data(), qas, 1, kU8), tna = host(nested.data(), ns, 1, kF32),
               tm = host(map.data(), ms, 1, kF32);
      float offset = 0;
      if (o.double_quant) {
        check(NF4_double_quantize(&ta, &tqa, &tna, &tm, &offset, nullptr), name);
        st.absmax = &tqa;
        st.nested_absmax = &tna;
        st.nested_quant_map = &tm;
        st.nested_offset = offset;
        qstate["nested_blocksize"] = 256;
        qstate["nested_offset"] = offset;
        qstate["nested_dtype"] = "float32";
      }
      check(NF4_dequantize(&tq, &st, &tback, nullptr), name);
      float codebook[16];
      for (int cidx = 0; cidx < 16; ++cidx) {
        // The NF4 values, read back through the library (one element per code).
        uint8_t byte = static_cast<uint8_t>(cidx << 4);
        float one = 1.0f, val = 0;
        int64_t s1[1] = {1}, b1[1] = {1};
        DLTensor tb = host(&byte, b1, 1, kU8), tabs = host(&one, s1, 1, kF32), tv = host(&val, s1, 1, kF32);
        NF4_state cs{};
        cs.struct_size = sizeof cs;
        cs.blocksize = 64;
        cs.absmax = &tabs;
        check(NF4_dequantize(&tb, &cs, &tv, nullptr), "codebook");
        codebook[cidx] = val;
      }
      put(prefix + ".weight", Q4_DTYPE_U8, q.data(), {(numel + 1) / 2, 1}, kU8);
      if (o.double_quant) {
        put(prefix + ".weight.absmax", Q4_DTYPE_U8, qabs.data(), {nblocks}, kU8);
        put(prefix + ".weight.nested_absmax", Q4_DTYPE_F32, nested.data(),
            {static_cast<int64_t>(nested.size())}, kF32);
        put(prefix + ".weight.nested_quant_map", Q4_DTYPE_F32, map.data(), {256}, kF32);
      } else {
        put(prefix + ".weight.absmax", Q4_DTYPE_F32, absmax.data(), {nblocks}, kF32);
      }
      put(prefix + ".weight.quant_map", Q4_DTYPE_F32, codebook, {16}, kF32);
      const std::string qs_text = qstate.dump();
      put(prefix + ".weight.quant_state.bitsandbytes__nf4", Q4_DTYPE_U8, qs_text.data(),
          {static_cast<int64_t>(qs_text.size())}, kU8);
    }
    const double err = rel_rms(orig, back);
    summary.push_back({{"layer", prefix}, {"shape", {n, k}}, {"rel_rms_error", err}});
    ++quantized;
  }
  json config = {{"quant_method",
                  mxfp4   ? "mxfp4"
                  : nvfp4 ? (o.layout == "modelopt"
                                 ? "modelopt"
                                 : (o.layout == "compressed-tensors" ? "compressed-tensors" : "nvfp4-legacy"))
                          : "bitsandbytes"},
                 {"format", o.format},
                 {"layout", o.layout},
                 {"producer", std::string("libNVFP4 ") + Q4_version_string()}};
  if (o.format == "nf4")
    config["bnb_4bit_blocksize"] = o.blocksize, config["bnb_4bit_use_double_quant"] = o.double_quant;
  check(Q4_checkpoint_writer_metadata(w, "quantization_config", config.dump().c_str()), out);
  check(Q4_checkpoint_writer_commit(w, out.c_str()), out);
  std::printf("quantized %d linear weights of %s to %s (%s layout) -> %s\n", quantized, in.c_str(),
              o.format.c_str(), o.layout.c_str(), out.c_str());
  std::printf("  %-48s %-16s %s\n", "layer", "shape", "rel RMS error");
  for (const auto& s : summary) {
    std::printf("  %-48s %-16s %.4f\n", s["layer"].get<std::string>().c_str(), s["shape"].dump().c_str(),
                s["rel_rms_error"].get<double>());
  }
  return 0;
}

// Dequantized weight of one linear from the checkpoint's own tensors (an
// independent path: stateless dequantize with the schema's conventions).
std::vector<float> dequantized_weight(const Checkpoint& c, const std::vector<Q4_tensor_desc>& descs,
                                      const Q4_linear_schema& l, int64_t n, int64_t k) {
  std::vector<float> w(static_cast<size_t>(n * k));
  int64_t ws[2] = {n, k};
  DLTensor tw = host(w.data(), ws, 2, kF32);
  const DLTensor q = c.view(static_cast<size_t>(l.roles[Q4_ROLE_WEIGHT]));
  if (l.format == Q4_FORMAT_MXFP4) {  // n = all rows of the stack (E * N)
    const DLTensor s = c.view(static_cast<size_t>(l.roles[Q4_ROLE_SCALE]));
    check(MXFP4_dequantize(&q, &s, Q4_SCALE_LINEAR, &tw, nullptr), "dequantize");
  } else if (l.format == Q4_FORMAT_NVFP4) {
    const DLTensor s = c.view(static_cast<size_t>(l.roles[Q4_ROLE_SCALE]));
    float g = 1.0f;
    if (l.roles[Q4_ROLE_GLOBAL_SCALE] >= 0) {
      std::memcpy(&g, c.view(static_cast<size_t>(l.roles[Q4_ROLE_GLOBAL_SCALE])).data, 4);
      if (l.global_scale_inverted) g = 1.0f / g;
    }
    check(NVFP4_dequantize(&q, &s, Q4_SCALE_LINEAR, g, &tw, nullptr), "dequantize");
  } else {
    const DLTensor qs = c.view(static_cast<size_t>(l.roles[Q4_ROLE_QUANT_STATE]));
    int64_t len = 0;
    c.desc(static_cast<size_t>(l.roles[Q4_ROLE_QUANT_STATE]), &len);
    const json j = json::parse(static_cast<const char*>(qs.data), static_cast<const char*>(qs.data) + len);
    DLTensor absmax = c.view(static_cast<size_t>(l.roles[Q4_ROLE_SCALE]));
    DLTensor qmap = c.view(static_cast<size_t>(l.roles[Q4_ROLE_QUANT_MAP]));
    NF4_state st{};
    st.struct_size = sizeof st;
    st.blocksize = j.value("blocksize", 64);
    st.absmax = &absmax;
    st.quant_map = &qmap;
    DLTensor na{}, nm{};
    if (l.roles[Q4_ROLE_NESTED_ABSMAX] >= 0) {
      na = c.view(static_cast<size_t>(l.roles[Q4_ROLE_NESTED_ABSMAX]));
      nm = c.view(static_cast<size_t>(l.roles[Q4_ROLE_NESTED_QUANT_MAP]));
      st.nested_absmax = &na;
      st.nested_quant_map = &nm;
      st.nested_offset = j.value("nested_offset", 0.0f);
      st.nested_blocksize = j.value("nested_blocksize", 256);
    }
    check(NF4_dequantize(&q, &st, &tw, nullptr), "dequantize");
  }
  (void)descs;
  return w;
}

int cmd_verify(const std::string& path, double tolerance) {
  Checkpoint c(path);
  const auto descs = c.descs();
  Q4_schema_summary s{};
  std::string problem;
  const auto linears = linears_of(descs, &s, &problem);
  if (!problem.empty()) throw CliError(path + ": " + problem);
  if (linears.empty()) throw CliError(path + ": no 4-bit linear found");
  Q4_session* session = nullptr;
  check(Q4_session_create(nullptr, &session), "session");
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  double worst = 0;
  std::printf("%s: %zu linears (%s, %s)\n", path.c_str(), linears.size(), Q4_format_name(s.format),
              Q4_schema_name(s.family));
  for (const auto& l : linears) {
    const std::string prefix(descs[l.prefix_tensor].name, static_cast<size_t>(l.prefix_len));
    // A linear through the session, or (an MXFP4 expert stack) every expert
    // through MXFP4_linear_experts on the checkpoint's views, 2 rows each.
    const MxShape ms = l.format == Q4_FORMAT_MXFP4 ? mxfp4_shape(descs, l) : MxShape{};
    const bool experts = ms.experts > 1;
    Q4_linear* lin = nullptr;
    int64_t n = ms.n, k = ms.k, m = 4;
    if (!experts) {
      check(Q4_checkpoint_linear_create(session, c.c, prefix.c_str(), &lin), path, prefix);
      Q4_linear_info info{};
      info.struct_size = sizeof info;
      Q4_linear_info_get(lin, &info);
      n = info.out_features;
      k = info.in_features;
    } else {
      m = 2 * ms.experts;
    }
    std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
    for (float& v : x) v = nd(rng);
    int64_t xs[2] = {m, k}, ys[2] = {m, n};
    DLTensor tx = host(x.data(), xs, 2, kF32), ty = host(y.data(), ys, 2, kF32);
    const int64_t e_count = ms.experts;
    std::vector<double> bias(static_cast<size_t>(e_count * n), 0.0);
    DLTensor tb{};
    if (l.roles[Q4_ROLE_BIAS] >= 0) {
      tb = c.view(static_cast<size_t>(l.roles[Q4_ROLE_BIAS]));
      const std::vector<float> bf = to_f32(tb, e_count * n);
      for (size_t j = 0; j < bias.size(); ++j) bias[j] = bf[j];
    }
    if (!experts) {
      check(Q4_linear_forward(lin, &tx, &ty), path, prefix);
    } else {
      std::vector<int32_t> group_expert(static_cast<size_t>(e_count));
      std::vector<int64_t> group_rows(static_cast<size_t>(e_count), 2);
      for (int32_t e = 0; e < static_cast<int32_t>(e_count); ++e) group_expert[static_cast<size_t>(e)] = e;
      const DLTensor q = c.view(static_cast<size_t>(l.roles[Q4_ROLE_WEIGHT]));
      const DLTensor s = c.view(static_cast<size_t>(l.roles[Q4_ROLE_SCALE]));
      check(MXFP4_linear_experts(&tx, &q, &s, Q4_SCALE_LINEAR, group_expert.data(), group_rows.data(),
                                 e_count, l.roles[Q4_ROLE_BIAS] >= 0 ? &tb : nullptr, &ty, nullptr),
            path, prefix);
    }
    const std::vector<float> w = dequantized_weight(c, descs, l, e_count * n, k);
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t e = experts ? i / 2 : 0;  // row i's expert
      for (int64_t j = 0; j < n; ++j) {
        double ref = bias[static_cast<size_t>(e * n + j)];
        for (int64_t kk = 0; kk < k; ++kk)
          ref += static_cast<double>(x[i * k + kk]) * w[(e * n + j) * k + kk];
        max_err = std::max(max_err, std::fabs(ref - y[i * n + j]));
        max_ref = std::max(max_ref, std::fabs(ref));
      }
    }
    const double rel = max_err / std::max(max_ref, 1e-30);
    worst = std::max(worst, rel);
    const std::string shape = (experts ? std::to_string(e_count) + " x " : std::string()) + "[" +
                              std::to_string(n) + ", " + std::to_string(k) + "]";
    std::printf("  %-48s %s max |y - y_ref| / max |y_ref| = %.2e\n", prefix.c_str(), shape.c_str(), rel);
    if (lin != nullptr) Q4_linear_destroy(lin);
  }
  Q4_session_destroy(session);
  std::printf("worst relative error %.2e (tolerance %.0e): %s\n", worst, tolerance,
              worst <= tolerance ? "ok" : "FAILED");
  return worst <= tolerance ? 0 : 1;
}

int cmd_selftest() {
  // Quantize -> dequantize -> linear on generated data against fp64.
  const int64_t n = 64, k = 256, m = 3;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> w(n * k), x(m * k), wd(n * k), y(m * n);
  for (float& v : w) v = nd(rng);
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> q(n * k / 2), s(n * k / 16);
  int64_t ws[2] = {n, k}, qs[2] = {n, k / 2}, ss[2] = {n, k / 16}, xs[2] = {m, k}, ys[2] = {m, n};
  DLTensor tw = host(w.data(), ws, 2, kF32), tq = host(q.data(), qs, 2, kU8), ts = host(s.data(), ss, 2, kU8);
  DLTensor twd = host(wd.data(), ws, 2, kF32), tx = host(x.data(), xs, 2, kF32),
           ty = host(y.data(), ys, 2, kF32);
  float g = 0;
  check(NVFP4_quantize(&tw, &tq, &ts, Q4_SCALE_LINEAR, 0.0f, &g, nullptr), "quantize");
  check(NVFP4_dequantize(&tq, &ts, Q4_SCALE_LINEAR, g, &twd, nullptr), "dequantize");
  check(NVFP4_linear(&tx, &tq, &ts, Q4_SCALE_LINEAR, g, nullptr, &ty, nullptr), "linear");
  const double err = rel_rms(w, wd);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t kk = 0; kk < k; ++kk) ref += static_cast<double>(x[i * k + kk]) * wd[j * k + kk];
      worst = std::max(worst, std::fabs(ref - y[i * n + j]) / (1 + std::fabs(ref)));
    }
  }
  const bool ok = err < 0.12 && worst < 1e-4;
  std::printf("selftest: weight rel-RMS %.4f, linear max rel error %.1e, ISA %s: %s\n", err, worst,
              Q4_isa_name(Q4_last_isa_used()), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

int cmd_bench(const std::string& self, const std::vector<std::string>& args) {
  const std::string dir = self.find('/') == std::string::npos ? "." : self.substr(0, self.rfind('/'));
  const std::string bench = dir + "/nvfp4-bench";
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(bench.c_str()));
  std::vector<std::string> a = args.empty() ? std::vector<std::string>{"--quick"} : args;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  execv(bench.c_str(), argv.data());
  throw CliError("cannot run " + bench + ": " + std::strerror(errno));
}

int cli_main(int argc, char** argv) {
  CLI::App app{"nvfp4: inspect, quantize and verify 4-bit (NVFP4 / NF4) safetensors checkpoints"};
  app.require_subcommand(1);
  std::string in, out, file;
  bool as_json = false;
  QuantizeOptions qo;
  int layers = 2;
  int64_t dim = 256;
  uint32_t seed = 1;
  double tolerance = 1e-4;
  std::vector<std::string> bench_args;

  auto* info = app.add_subcommand("info", "capabilities: CPU ISA, CUDA plugin state");
  auto* selftest = app.add_subcommand("selftest", "quick end-to-end check of this machine");
  auto* generate = app.add_subcommand(
      "generate",
      "write a small random bf16 checkpoint, or with --llama a random Llama model directory (test data)");
  generate->add_option("OUT", out, "output .safetensors (--llama: output directory)")->required();
  generate->add_option("--layers", layers, "decoder layers");
  generate->add_option("--dim", dim, "hidden size (multiple of 64)");
  generate->add_option("--seed", seed, "random seed");
  LlamaGenOptions lo;
  generate->add_flag(
      "--llama", lo.llama,
      "write a random Hugging Face Llama model directory (config.json + model.safetensors) to OUT");
  generate->add_option("--heads", lo.heads, "--llama: attention heads");
  generate->add_option("--kv-heads", lo.kv_heads, "--llama: key/value heads (divides --heads)");
  generate->add_option("--intermediate", lo.intermediate,
                       "--llama: MLP size (default ~8/3 * dim, multiple of 64)");
  generate->add_option("--vocab", lo.vocab, "--llama: vocabulary size");
  generate->add_option("--max-positions", lo.max_positions, "--llama: max_position_embeddings");
  generate->add_option("--rope-theta", lo.rope_theta, "--llama: rope_theta");
  generate->add_option("--dtype", lo.dtype, "--llama: f32|bf16|f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  generate->add_flag("--tied", lo.tied, "--llama: tie the LM head to the embedding (no lm_head.weight)");
  auto* inspect = app.add_subcommand("inspect", "list tensors, detect the 4-bit schema per layer");
  inspect->add_option("FILE", file, "a .safetensors file")->required();
  inspect->add_flag("--json", as_json, "machine-readable output");
  auto* quantize = app.add_subcommand("quantize", "quantize every linear weight of a float checkpoint");
  quantize->add_option("IN", in, "float .safetensors (fp32/fp16/bf16)")->required();
  quantize->add_option("OUT", out, "output .safetensors")->required();
  quantize->add_option("--format", qo.format, "nvfp4, nf4 or mxfp4")
      ->check(CLI::IsMember({"nvfp4", "nf4", "mxfp4"}));
  quantize
      ->add_option("--layout", qo.layout,
                   "modelopt|compressed-tensors|legacy (nvfp4), bnb (nf4), gpt-oss|gpt-oss-hf (mxfp4)")
      ->check(CLI::IsMember({"modelopt", "compressed-tensors", "legacy", "bnb", "gpt-oss", "gpt-oss-hf"}));
  quantize->add_option("--blocksize", qo.blocksize, "NF4 block size")
      ->check(CLI::IsMember({32, 64, 128, 256, 512, 1024, 2048, 4096}));
  quantize->add_flag("--double-quant", qo.double_quant, "NF4: double-quantize the absmax statistics");
  quantize->add_option("--exclude", qo.exclude,
                       "glob patterns of weights to keep in float (default: *embed* *lm_head* *norm*)");
  auto* verify = app.add_subcommand(
      "verify", "load every 4-bit linear, forward random input, compare with the dequantized reference");
  verify->add_option("FILE", file, "a 4-bit .safetensors file")->required();
  verify->add_option("--tolerance", tolerance, "maximum relative error");
  auto* bench = app.add_subcommand("bench", "run the benchmark program's main cases (nvfp4-bench --quick)");
  bench->add_option("ARGS", bench_args, "arguments for nvfp4-bench");
  bench->allow_extras();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (info->parsed()) return cmd_info();
    if (selftest->parsed()) return cmd_selftest();
    if (generate->parsed())
      return lo.llama ? cmd_generate_llama(out, layers, dim, seed, lo) : cmd_generate(out, layers, dim, seed);
    if (inspect->parsed()) return cmd_inspect(file, as_json);
    if (quantize->parsed()) return cmd_quantize(in, out, qo);
    if (verify->parsed()) return cmd_verify(file, tolerance);
    if (bench->parsed()) {
      for (const auto& e : bench->remaining()) bench_args.push_back(e);
      return cmd_bench(argv[0], bench_args);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvfp4: %s\n", e.what());
    return 1;
  }
  return 2;
}

}  // namespace

// No exception leaves main: anything the program did not handle itself is
// reported and ends it with a failure status.
int main(int argc, char** argv) {
  try {
    return cli_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvfp4: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "nvfp4: unknown exception\n");
  }
  return 1;
}
