// TinyLM model: loading, forward pass with a KV cache, sampling, generation.
#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

namespace tinylm {

namespace {

std::string q4_error(int32_t st) {
  return std::string(Q4_status_string(st)) + ": " + Q4_last_error();
}

void q4_check(int32_t st, const std::string& what) {
  if (st != Q4_OK) throw Error(what + ": " + q4_error(st));
}

DLTensor host_tensor(const void* data, const int64_t* shape, int32_t ndim, DLDataType dt) {
  DLTensor t{};
  t.data = const_cast<void*>(data);
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = const_cast<int64_t*>(shape);
  return t;
}

const DLDataType kF32{kDLFloat, 32, 1};

float bf16_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_to_f32(uint16_t h) {
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                         : (e == 31 ? (m ? NAN : INFINITY)
                                    : std::ldexp(static_cast<float>(m + 1024), static_cast<int>(e) - 25));
  return (h & 0x8000u) ? -v : v;
}

std::string shape_str(const int64_t* s, int64_t n) {
  std::string r = "[";
  for (int64_t i = 0; i < n; ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

// Sum of a*b in a fixed order (8 interleaved partial sums), independent of
// anything but k: the fp32 GEMM gives each output the same value whatever M.
inline float dot(const float* a, const float* b, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < k; ++i) s += a[i] * b[i];
  return s;
}

int64_t get_int(const nlohmann::json& j, const char* key, int64_t def, bool required,
                const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) throw Error(path + ": missing key \"" + key + "\"");
    return def;
  }
  if (!j[key].is_number_integer()) throw Error(path + ": \"" + key + "\" must be an integer");
  return j[key].get<int64_t>();
}

}  // namespace

const char* op_name(int op) {
  static const char* names[kOpCount] = {"embed",       "rmsnorm_attn", "q_proj",    "k_proj", "v_proj",
                                        "rope",        "kv_append",    "attention", "o_proj", "residual",
                                        "rmsnorm_mlp", "gate_proj",    "up_proj",   "swiglu", "down_proj",
                                        "final_norm",  "lm_head",      "sampling"};
  return op >= 0 && op < kOpCount ? names[op] : "?";
}

Format parse_format(const std::string& s) {
  if (s == "auto") return Format::kAuto;
  if (s == "fp32") return Format::kFp32;
  if (s == "nvfp4") return Format::kNvfp4;
  if (s == "nf4") return Format::kNf4;
  throw Error("unknown --format '" + s + "' (auto, fp32, nvfp4, nf4)");
}

const char* format_name(Format f) {
  switch (f) {
    case Format::kAuto:
      return "auto";
    case Format::kFp32:
      return "fp32";
    case Format::kNvfp4:
      return "nvfp4";
    case Format::kNf4:
      return "nf4";
  }
  return "?";
}

Config read_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream f(path);
  if (!f) throw Error("cannot open " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw Error(path + ": invalid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(path + ": not a JSON object");
  Config c;
  c.vocab = get_int(j, "vocab_size", 0, true, path);
  c.hidden = get_int(j, "hidden_size", 0, true, path);
  c.layers = get_int(j, "num_hidden_layers", 0, true, path);
  c.heads = get_int(j, "num_attention_heads", 0, true, path);
  c.intermediate = get_int(j, "intermediate_size", 0, true, path);
  c.kv_heads = get_int(j, "num_key_value_heads", c.heads, false, path);
  c.head_dim = get_int(j, "head_dim", c.heads > 0 ? c.hidden / c.heads : 0, false, path);
  c.max_positions = get_int(j, "max_position_embeddings", 2048, false, path);
  if (j.contains("rms_norm_eps") && j["rms_norm_eps"].is_number()) c.rms_eps = j["rms_norm_eps"].get<float>();
  if (j.contains("rope_theta") && j["rope_theta"].is_number()) c.rope_theta = j["rope_theta"].get<double>();
  if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean())
    c.tied = j["tie_word_embeddings"].get<bool>();
  if (c.vocab < 1 || c.hidden < 1 || c.layers < 1 || c.heads < 1 || c.intermediate < 1 || c.kv_heads < 1 ||
      c.head_dim < 2 || c.head_dim % 2 != 0)
    throw Error(path + ": sizes must be positive (and head_dim even)");
  if (c.kv_heads > c.heads || c.heads % c.kv_heads != 0)
    throw Error(path + ": num_key_value_heads (" + std::to_string(c.kv_heads) +
                ") must divide num_attention_heads (" + std::to_string(c.heads) + ")");
  if (!(c.rms_eps > 0.0f) || !(c.rope_theta > 0.0))
    throw Error(path + ": rms_norm_eps and rope_theta must be > 0");
  return c;
}

// ---------------------------------------------------------------------------
Linear::Linear(Linear&& o) noexcept {
  *this = std::move(o);
}
Linear& Linear::operator=(Linear&& o) noexcept {
  if (this != &o) {
    Q4_linear_destroy(q4);
    n = o.n;
    k = o.k;
    format = o.format;
    q4 = o.q4;
    w = std::move(o.w);
    o.q4 = nullptr;
  }
  return *this;
}
Linear::~Linear() {
  Q4_linear_destroy(q4);
}

int64_t Linear::bytes() const {
  if (!q4) return static_cast<int64_t>(w.size() * sizeof(float));
  Q4_linear_info info{};
  info.struct_size = sizeof info;
  return Q4_linear_info_get(q4, &info) == Q4_OK ? info.weight_bytes : 0;
}

void Linear::forward(const float* x, int64_t m, float* y, ThreadPool& pool) const {
  if (m <= 0) return;
  if (q4) {
    const int64_t xs[2] = {m, k}, ys[2] = {m, n};
    DLTensor xt = host_tensor(x, xs, 2, kF32), yt = host_tensor(y, ys, 2, kF32);
    q4_check(Q4_linear_forward(q4, &xt, &yt), "linear forward");
    return;
  }
  const int64_t chunk = 32, tasks = (n + chunk - 1) / chunk;
  pool.parallel_for(tasks, [&](int64_t t) {
    const int64_t n0 = t * chunk, n1 = std::min(n, n0 + chunk);
    for (int64_t j = n0; j < n1; ++j) {
      const float* wr = w.data() + j * k;
      for (int64_t i = 0; i < m; ++i) y[i * n + j] = dot(x + i * k, wr, k);
    }
  });
}

// ---------------------------------------------------------------------------
KVCache::KVCache(const Config& c, int64_t slots, int64_t max_len)
    : length(static_cast<size_t>(std::max<int64_t>(slots, 0)), 0),
      layers_(c.layers),
      slots_(slots),
      max_len_(max_len),
      width_(c.kv_heads * c.head_dim) {
  if (slots < 1 || max_len < 1) throw Error("KV cache: need at least one slot and one position");
  const double bytes = 2.0 * static_cast<double>(layers_) * static_cast<double>(slots) *
                       static_cast<double>(max_len) * static_cast<double>(width_) * 4.0;
  if (bytes > 64.0 * (1ull << 30))
    throw Error("KV cache of " + std::to_string(bytes / 1e9) + " GB is too large");
  data_.assign(static_cast<size_t>(2 * layers_ * slots * max_len * width_), 0.0f);
}
float* KVCache::k(int64_t layer, int64_t slot, int64_t pos) {
  return data_.data() + (((layer * 2 + 0) * slots_ + slot) * max_len_ + pos) * width_;
}
float* KVCache::v(int64_t layer, int64_t slot, int64_t pos) {
  return data_.data() + (((layer * 2 + 1) * slots_ + slot) * max_len_ + pos) * width_;
}

// ---------------------------------------------------------------------------
std::vector<float> Model::load_float(const std::string& name, const std::vector<int64_t>& shape) {
  size_t idx = 0;
  if (Q4_checkpoint_find(ckpt_, name.c_str(), &idx) != Q4_OK) throw Error(path_ + ": missing tensor " + name);
  Q4_tensor_desc d{};
  int64_t nbytes = 0;
  q4_check(Q4_checkpoint_tensor_info(ckpt_, idx, &d, &nbytes), path_ + ": " + name);
  if (d.dtype != Q4_DTYPE_F32 && d.dtype != Q4_DTYPE_F16 && d.dtype != Q4_DTYPE_BF16)
    throw Error(path_ + ": " + name + ": dtype " + Q4_dtype_name(d.dtype) + ", expected F32, F16 or BF16");
  if (d.ndim != static_cast<int32_t>(shape.size()) || !std::equal(shape.begin(), shape.end(), d.shape))
    throw Error(path_ + ": " + name + ": shape " + shape_str(d.shape, d.ndim) + ", expected " +
                shape_str(shape.data(), static_cast<int64_t>(shape.size())));
  DLTensor v{};
  q4_check(Q4_checkpoint_tensor(ckpt_, idx, &v), path_ + ": " + name);
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  std::vector<float> out(static_cast<size_t>(numel));
  const auto* p = static_cast<const uint8_t*>(v.data) + v.byte_offset;
  for (int64_t i = 0; i < numel; ++i) {
    if (d.dtype == Q4_DTYPE_F32) {
      std::memcpy(&out[static_cast<size_t>(i)], p + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[static_cast<size_t>(i)] = d.dtype == Q4_DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  for (int64_t i = 0; i < numel; ++i)
    if (!std::isfinite(out[static_cast<size_t>(i)]))
      throw Error(path_ + ": " + name + ": non-finite value at flat index " + std::to_string(i));
  return out;
}

Linear Model::load_linear(const std::string& prefix, int64_t n, int64_t k, bool is_head) {
  Linear l;
  l.n = n;
  l.k = k;
  const std::string wname = prefix + ".weight";
  size_t idx = 0;
  bool is_float = false;
  if (Q4_checkpoint_find(ckpt_, wname.c_str(), &idx) == Q4_OK) {
    Q4_tensor_desc d{};
    q4_check(Q4_checkpoint_tensor_info(ckpt_, idx, &d, nullptr), path_ + ": " + wname);
    is_float = d.dtype == Q4_DTYPE_F32 || d.dtype == Q4_DTYPE_F16 || d.dtype == Q4_DTYPE_BF16;
  }
  if (is_float) {
    std::vector<float> w = load_float(wname, {n, k});
    Format f = opts_.format;
    if (is_head && !opts_.quantize_lm_head) f = Format::kFp32;
    if (f == Format::kAuto || f == Format::kFp32) {
      l.w = std::move(w);
      return l;
    }
    if (f == Format::kNvfp4 && k % 16 != 0)
      throw Error(prefix + ": in_features " + std::to_string(k) + " is not a multiple of 16 (NVFP4)");
    Q4_weight_bundle b{};
    q4_check(Q4_weight_bundle_init(&b), "bundle");
    b.format = f == Format::kNvfp4 ? Q4_FORMAT_NVFP4 : Q4_FORMAT_NF4;
    b.source = Q4_WEIGHT_FLOAT;
    const int64_t shape[2] = {n, k};
    DLTensor wt = host_tensor(w.data(), shape, 2, kF32);
    b.weight = &wt;
    b.out_features = n;
    b.in_features = k;
    q4_check(Q4_linear_create(session_, &b, &l.q4), "quantizing " + wname);
    l.format = b.format;
    return l;
  }
  if (opts_.format == Format::kFp32)
    throw Error(path_ + ": " + prefix + " is stored in 4 bits; --format fp32 needs a float checkpoint");
  const int32_t st = Q4_checkpoint_linear_create(session_, ckpt_, prefix.c_str(), &l.q4);
  if (st != Q4_OK)
    throw Error(path_ + ": missing or unusable weight for " + prefix + " (no float " + wname +
                ", and no 4-bit linear: " + q4_error(st) + ")");
  Q4_linear_info info{};
  info.struct_size = sizeof info;
  q4_check(Q4_linear_info_get(l.q4, &info), prefix);
  if (info.out_features != n || info.in_features != k)
    throw Error(path_ + ": " + prefix + ": 4-bit weight of shape [" + std::to_string(info.out_features) +
                "," + std::to_string(info.in_features) + "], expected [" + std::to_string(n) + "," +
                std::to_string(k) + "]");
  l.format = info.format;
  return l;
}

Model::Model(const std::string& dir, const LoadOptions& opts) : cfg_(read_config(dir)), opts_(opts) {
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  Q4_get_capabilities(&caps);
  pool_.resize(opts.threads > 0 ? opts.threads : std::max(1, caps.num_cpus));
  Q4_session_config sc{};
  q4_check(Q4_session_config_init(&sc), "session config");
  sc.num_threads = opts.threads;
  sc.math_mode = opts.fast_math ? Q4_MATH_FAST : Q4_MATH_EXACT;
  sc.target = Q4_TARGET_CPU;
  q4_check(Q4_session_create(&sc, &session_), "session");
  path_ = dir + "/model.safetensors";
  try {
    q4_check(Q4_checkpoint_open(path_.c_str(), &ckpt_), path_);
    const Config& c = cfg_;
    const int64_t H = c.hidden, qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim, I = c.intermediate;
    embed_ = load_float("model.embed_tokens.weight", {c.vocab, H});
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i);
      Layer L;
      L.attn_norm = load_float(p + ".input_layernorm.weight", {H});
      L.q = load_linear(p + ".self_attn.q_proj", qd, H, false);
      L.k = load_linear(p + ".self_attn.k_proj", kvd, H, false);
      L.v = load_linear(p + ".self_attn.v_proj", kvd, H, false);
      L.o = load_linear(p + ".self_attn.o_proj", H, qd, false);
      L.mlp_norm = load_float(p + ".post_attention_layernorm.weight", {H});
      L.gate = load_linear(p + ".mlp.gate_proj", I, H, false);
      L.up = load_linear(p + ".mlp.up_proj", I, H, false);
      L.down = load_linear(p + ".mlp.down_proj", H, I, false);
      layers_.push_back(std::move(L));
    }
    final_norm_ = load_float("model.norm.weight", {H});
    size_t idx = 0;
    const bool has_head = Q4_checkpoint_find(ckpt_, "lm_head.weight", &idx) == Q4_OK ||
                          Q4_checkpoint_find(ckpt_, "lm_head.weight_packed", &idx) == Q4_OK ||
                          Q4_checkpoint_find(ckpt_, "lm_head.weight.qdata", &idx) == Q4_OK;
    if (has_head) {
      lm_head_ = load_linear("lm_head", c.vocab, H, true);
    } else if (c.tied) {
      // Tied: the embedding is the head's weight.
      Format f = opts_.quantize_lm_head ? opts_.format : Format::kFp32;
      if (f == Format::kAuto || f == Format::kFp32) {
        lm_head_.n = c.vocab;
        lm_head_.k = H;
        lm_head_.w = embed_;
      } else {
        Q4_weight_bundle b{};
        q4_check(Q4_weight_bundle_init(&b), "bundle");
        b.format = f == Format::kNvfp4 ? Q4_FORMAT_NVFP4 : Q4_FORMAT_NF4;
        b.source = Q4_WEIGHT_FLOAT;
        const int64_t shape[2] = {c.vocab, H};
        DLTensor wt = host_tensor(embed_.data(), shape, 2, kF32);
        b.weight = &wt;
        b.out_features = c.vocab;
        b.in_features = H;
        q4_check(Q4_linear_create(session_, &b, &lm_head_.q4), "quantizing the tied LM head");
        lm_head_.n = c.vocab;
        lm_head_.k = H;
        lm_head_.format = b.format;
      }
    } else {
      throw Error(path_ + ": missing tensor lm_head.weight (and tie_word_embeddings is false)");
    }
  } catch (...) {
    layers_.clear();
    lm_head_ = Linear();
    Q4_checkpoint_close(ckpt_);
    Q4_session_destroy(session_);
    throw;
  }
  // Every weight is copied; the file can be closed.
  Q4_checkpoint_close(ckpt_);
  ckpt_ = nullptr;
  // Hugging Face Llama rotary frequencies: theta^(-2i/d), i < d/2.
  const int64_t half = cfg_.head_dim / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq_[static_cast<size_t>(i)] = static_cast<float>(
        1.0 / std::pow(cfg_.rope_theta, static_cast<double>(2 * i) / static_cast<double>(cfg_.head_dim)));
}

Model::~Model() {
  layers_.clear();
  lm_head_ = Linear();
  Q4_session_destroy(session_);
}

int64_t Model::weight_bytes() const {
  int64_t b = static_cast<int64_t>((embed_.size() + final_norm_.size()) * sizeof(float));
  for (const auto& L : layers_) {
    b += static_cast<int64_t>((L.attn_norm.size() + L.mlp_norm.size()) * sizeof(float));
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) b += l->bytes();
  }
  // A tied fp32 head shares nothing in memory here (it holds a copy).
  return b + lm_head_.bytes();
}

int64_t Model::parameters() const {
  const Config& c = cfg_;
  const int64_t per_layer = 2 * c.hidden + c.hidden * c.heads * c.head_dim * 2 +
                            2 * c.hidden * c.kv_heads * c.head_dim + 3 * c.hidden * c.intermediate;
  return c.vocab * c.hidden * (c.tied ? 1 : 2) + c.hidden + c.layers * per_layer;
}

std::string Model::describe() const {
  int counts[4] = {0, 0, 0, 0};
  auto add = [&](const Linear& l) { counts[l.q4 ? l.format : 0]++; };
  for (const auto& L : layers_)
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) add(*l);
  add(lm_head_);
  std::ostringstream os;
  os << "linears: " << counts[0] << " fp32, " << counts[Q4_FORMAT_NVFP4] << " nvfp4, "
     << counts[Q4_FORMAT_NF4] << " nf4 (LM head " << (lm_head_.q4 ? Q4_format_name(lm_head_.format) : "fp32")
     << ")";
  return os.str();
}

void Model::run_linear(const Linear& l, const float* x, int64_t m, float* y, int op) {
  ScopedOp t(prof_, op);
  const int64_t step = max_rows_ > 0 ? max_rows_ : m;
  for (int64_t i0 = 0; i0 < m; i0 += step)
    l.forward(x + i0 * l.k, std::min(step, m - i0), y + i0 * l.n, pool_);
}

void Model::forward(const std::vector<Row>& rows, KVCache& cache, float* logits,
                    const std::vector<char>* want) {
  const Config& c = cfg_;
  const int64_t M = static_cast<int64_t>(rows.size());
  if (M == 0) return;
  const int64_t H = c.hidden, hd = c.head_dim, qd = c.heads * hd, kvd = c.kv_heads * hd, I = c.intermediate;
  // Validate every row before touching the cache.
  {
    std::vector<int64_t> next(cache.length.begin(), cache.length.end());
    for (const Row& r : rows) {
      if (r.slot < 0 || r.slot >= cache.slots())
        throw Error("row slot " + std::to_string(r.slot) + " out of range");
      if (r.token < 0 || r.token >= c.vocab)
        throw Error("token id " + std::to_string(r.token) + " out of range [0, " + std::to_string(c.vocab) +
                    ")");
      if (r.pos >= cache.max_len())
        throw Error("KV cache full: position " + std::to_string(r.pos) + " needs more than the " +
                    std::to_string(cache.max_len()) + " positions preallocated (raise --max-len)");
      if (r.pos != next[static_cast<size_t>(r.slot)])
        throw Error("row position " + std::to_string(r.pos) + " of slot " + std::to_string(r.slot) +
                    " does not follow the cached " + std::to_string(next[static_cast<size_t>(r.slot)]));
      ++next[static_cast<size_t>(r.slot)];
    }
  }
  std::vector<float> x(static_cast<size_t>(M * H)), xn(static_cast<size_t>(M * H));
  std::vector<float> q(static_cast<size_t>(M * qd)), kk(static_cast<size_t>(M * kvd)),
      vv(static_cast<size_t>(M * kvd));
  std::vector<float> att(static_cast<size_t>(M * qd)), tmp(static_cast<size_t>(M * H));
  std::vector<float> g(static_cast<size_t>(M * I)), u(static_cast<size_t>(M * I));
  {
    ScopedOp t(prof_, kOpEmbed);
    for (int64_t i = 0; i < M; ++i)
      std::copy_n(embed_.data() + rows[static_cast<size_t>(i)].token * H, H, x.data() + i * H);
  }
  auto rmsnorm = [&](const std::vector<float>& w, const float* in, float* out, int op) {
    ScopedOp t(prof_, op);
    for (int64_t i = 0; i < M; ++i) {
      const float* r = in + i * H;
      double ss = 0;
      for (int64_t j = 0; j < H; ++j) ss += static_cast<double>(r[j]) * r[j];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(H) + c.rms_eps));
      for (int64_t j = 0; j < H; ++j) out[i * H + j] = w[static_cast<size_t>(j)] * (r[j] * inv);
    }
  };
  const int64_t half = hd / 2;
  auto rope = [&](float* v, int64_t nheads, int64_t pos) {
    for (int64_t h = 0; h < nheads; ++h) {
      float* p = v + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float ang = static_cast<float>(pos) * inv_freq_[static_cast<size_t>(i)];
        const float cs = std::cos(ang), sn = std::sin(ang);
        const float a = p[i], b = p[i + half];
        p[i] = a * cs - b * sn;
        p[i + half] = b * cs + a * sn;
      }
    }
  };
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t group = c.heads / c.kv_heads;
  for (int64_t l = 0; l < c.layers; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    rmsnorm(L.attn_norm, x.data(), xn.data(), kOpNormAttn);
    run_linear(L.q, xn.data(), M, q.data(), kOpQProj);
    run_linear(L.k, xn.data(), M, kk.data(), kOpKProj);
    run_linear(L.v, xn.data(), M, vv.data(), kOpVProj);
    {
      ScopedOp t(prof_, kOpRope);
      for (int64_t i = 0; i < M; ++i) {
        rope(q.data() + i * qd, c.heads, rows[static_cast<size_t>(i)].pos);
        rope(kk.data() + i * kvd, c.kv_heads, rows[static_cast<size_t>(i)].pos);
      }
    }
    {
      ScopedOp t(prof_, kOpKvAppend);
      for (int64_t i = 0; i < M; ++i) {
        const Row& r = rows[static_cast<size_t>(i)];
        std::copy_n(kk.data() + i * kvd, kvd, cache.k(l, r.slot, r.pos));
        std::copy_n(vv.data() + i * kvd, kvd, cache.v(l, r.slot, r.pos));
      }
    }
    {
      // Causal attention of each (row, head) over positions 0..pos of its
      // slot, in position order: the same arithmetic whether the rows come
      // from a prefill or one decoding step.
      ScopedOp t(prof_, kOpAttention);
      // Threads only when the work outweighs waking them (each (row, head)
      // is computed the same way either way).
      int64_t work = 0;
      for (const Row& r : rows) work += (r.pos + 1) * c.heads * hd;
      const std::function<void(int64_t)> head_task = [&](int64_t task) {
        const int64_t i = task / c.heads, h = task % c.heads, kvh = h / group;
        const Row& r = rows[static_cast<size_t>(i)];
        std::vector<float> sc(static_cast<size_t>(r.pos + 1));
        const float* qh = q.data() + i * qd + h * hd;
        float mx = -INFINITY;
        for (int64_t j = 0; j <= r.pos; ++j) {
          const float s = dot(qh, cache.k(l, r.slot, j) + kvh * hd, hd) * scale;
          sc[static_cast<size_t>(j)] = s;
          mx = std::max(mx, s);
        }
        float sum = 0;
        for (auto& s : sc) {
          s = std::exp(s - mx);
          sum += s;
        }
        float* o = att.data() + i * qd + h * hd;
        std::fill_n(o, hd, 0.0f);
        for (int64_t j = 0; j <= r.pos; ++j) {
          const float p = sc[static_cast<size_t>(j)] / sum;
          const float* vr = cache.v(l, r.slot, j) + kvh * hd;
          for (int64_t d = 0; d < hd; ++d) o[d] += p * vr[d];
        }
      };
      if (work >= (int64_t{1} << 18)) {
        pool_.parallel_for(M * c.heads, head_task);
      } else {
        for (int64_t task = 0; task < M * c.heads; ++task) head_task(task);
      }
    }
    run_linear(L.o, att.data(), M, tmp.data(), kOpOProj);
    {
      ScopedOp t(prof_, kOpResidual);
      for (int64_t i = 0; i < M * H; ++i) x[static_cast<size_t>(i)] += tmp[static_cast<size_t>(i)];
    }
    rmsnorm(L.mlp_norm, x.data(), xn.data(), kOpNormMlp);
    run_linear(L.gate, xn.data(), M, g.data(), kOpGateProj);
    run_linear(L.up, xn.data(), M, u.data(), kOpUpProj);
    {
      ScopedOp t(prof_, kOpSwiGLU);
      for (int64_t i = 0; i < M * I; ++i) {
        const float a = g[static_cast<size_t>(i)];
        g[static_cast<size_t>(i)] = a / (1.0f + std::exp(-a)) * u[static_cast<size_t>(i)];
      }
    }
    run_linear(L.down, g.data(), M, tmp.data(), kOpDownProj);
    {
      ScopedOp t(prof_, kOpResidual);
      for (int64_t i = 0; i < M * H; ++i) x[static_cast<size_t>(i)] += tmp[static_cast<size_t>(i)];
    }
  }
  for (const Row& r : rows)
    cache.length[static_cast<size_t>(r.slot)] =
        std::max(cache.length[static_cast<size_t>(r.slot)], r.pos + 1);
  // Final norm and LM head only for the rows whose logits are wanted.
  std::vector<float> sel;
  int64_t ms = 0;
  for (int64_t i = 0; i < M; ++i)
    if (!want || (*want)[static_cast<size_t>(i)]) {
      sel.insert(sel.end(), x.begin() + i * H, x.begin() + (i + 1) * H);
      ++ms;
    }
  if (ms == 0) return;
  std::vector<float> seln(sel.size());
  {
    ScopedOp t(prof_, kOpFinalNorm);
    for (int64_t i = 0; i < ms; ++i) {
      const float* r = sel.data() + i * H;
      double ss = 0;
      for (int64_t j = 0; j < H; ++j) ss += static_cast<double>(r[j]) * r[j];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(H) + c.rms_eps));
      for (int64_t j = 0; j < H; ++j)
        seln[static_cast<size_t>(i * H + j)] = final_norm_[static_cast<size_t>(j)] * (r[j] * inv);
    }
  }
  run_linear(lm_head_, seln.data(), ms, logits, kOpLmHead);
}

// ---------------------------------------------------------------------------
int32_t sample(const float* logits, int64_t vocab, const SamplingOptions& o, std::mt19937_64& rng) {
  if (!(o.temperature > 0.0f)) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = idx.size();
  if (o.top_k > 0) keep = std::min(keep, static_cast<size_t>(o.top_k));
  std::vector<double> p(keep);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    p[i] = std::exp((static_cast<double>(logits[idx[i]]) - mx) / o.temperature);
    sum += p[i];
  }
  if (o.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < keep) {
      cum += p[n] / sum;
      ++n;
      if (cum >= static_cast<double>(o.top_p)) break;
    }
    keep = std::max<size_t>(n, 1);
    sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += p[i];
  }
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * sum;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return idx[i];
  }
  return idx[keep - 1];
}

void check_tokens(const Config& c, const std::vector<int32_t>& ids) {
  for (int32_t t : ids)
    if (t < 0 || t >= c.vocab)
      throw Error("token id " + std::to_string(t) + " out of range [0, " + std::to_string(c.vocab) + ")");
}

GenerateResult generate(Model& m, KVCache& cache, const std::vector<std::vector<int32_t>>& prompts,
                        int64_t new_tokens, const SamplingOptions& so, uint64_t seed, bool keep_logits) {
  const Config& c = m.config();
  const int64_t B = static_cast<int64_t>(prompts.size());
  if (B < 1) throw Error("no prompt");
  if (B > cache.slots())
    throw Error(std::to_string(B) + " sequences but the KV cache has " + std::to_string(cache.slots()) +
                " slots");
  if (new_tokens < 1) throw Error("--tokens must be >= 1");
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[static_cast<size_t>(b)];
    if (p.empty()) throw Error("prompt " + std::to_string(b) + " is empty");
    check_tokens(c, p);
    const int64_t len = static_cast<int64_t>(p.size());
    if (len > cache.max_len())
      throw Error("prompt " + std::to_string(b) + " has " + std::to_string(len) +
                  " tokens, longer than the KV cache (" + std::to_string(cache.max_len()) +
                  " positions, --max-len)");
    if (len + new_tokens - 1 > cache.max_len())
      throw Error("prompt " + std::to_string(b) + " (" + std::to_string(len) + " tokens) + " +
                  std::to_string(new_tokens) + " new tokens need " + std::to_string(len + new_tokens - 1) +
                  " cache positions, more than the " + std::to_string(cache.max_len()) +
                  " preallocated (--max-len)");
    cache.length[static_cast<size_t>(b)] = 0;
  }
  GenerateResult res;
  res.tokens.assign(static_cast<size_t>(B), {});
  res.logits.assign(static_cast<size_t>(B), {});
  std::vector<std::mt19937_64> rngs;
  for (int64_t b = 0; b < B; ++b) rngs.emplace_back(seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(b));
  // Prefill: every prompt row in one forward.
  std::vector<Row> rows;
  std::vector<char> want;
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[static_cast<size_t>(b)];
    for (size_t i = 0; i < p.size(); ++i) {
      rows.push_back({b, static_cast<int64_t>(i), p[i]});
      want.push_back(keep_logits || i + 1 == p.size() ? 1 : 0);
    }
  }
  const int64_t V = c.vocab;
  int64_t nwant = 0;
  for (char w : want) nwant += w;
  std::vector<float> logits(static_cast<size_t>(nwant * V));
  auto t0 = std::chrono::steady_clock::now();
  m.forward(rows, cache, logits.data(), &want);
  std::vector<int32_t> last(static_cast<size_t>(B));
  {
    int64_t r = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = keep_logits ? static_cast<int64_t>(prompts[static_cast<size_t>(b)].size()) : 1;
      if (keep_logits)
        res.logits[static_cast<size_t>(b)].assign(logits.begin() + r * V, logits.begin() + (r + n) * V);
      r += n;
      ScopedOp t(m.profile(), kOpSampling);
      last[static_cast<size_t>(b)] = sample(logits.data() + (r - 1) * V, V, so, rngs[static_cast<size_t>(b)]);
      res.tokens[static_cast<size_t>(b)].push_back(last[static_cast<size_t>(b)]);
    }
  }
  res.prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Decoding: one row per sequence per step.
  logits.resize(static_cast<size_t>(B * V));
  for (int64_t step = 1; step < new_tokens; ++step) {
    t0 = std::chrono::steady_clock::now();
    rows.clear();
    for (int64_t b = 0; b < B; ++b)
      rows.push_back({b, cache.length[static_cast<size_t>(b)], last[static_cast<size_t>(b)]});
    m.forward(rows, cache, logits.data());
    for (int64_t b = 0; b < B; ++b) {
      const float* lg = logits.data() + b * V;
      if (keep_logits)
        res.logits[static_cast<size_t>(b)].insert(res.logits[static_cast<size_t>(b)].end(), lg, lg + V);
      ScopedOp t(m.profile(), kOpSampling);
      last[static_cast<size_t>(b)] = sample(lg, V, so, rngs[static_cast<size_t>(b)]);
      res.tokens[static_cast<size_t>(b)].push_back(last[static_cast<size_t>(b)]);
    }
    res.step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return res;
}

std::vector<float> full_logits(Model& m, const std::vector<int32_t>& ids) {
  check_tokens(m.config(), ids);
  if (ids.empty()) throw Error("empty token sequence");
  KVCache cache(m.config(), 1, static_cast<int64_t>(ids.size()));
  std::vector<Row> rows;
  for (size_t i = 0; i < ids.size(); ++i) rows.push_back({0, static_cast<int64_t>(i), ids[i]});
  std::vector<float> logits(ids.size() * static_cast<size_t>(m.config().vocab));
  m.forward(rows, cache, logits.data());
  return logits;
}

void write_npy(const std::string& path, const float* data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot write " + path);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const uint16_t hl = static_cast<uint16_t>(header.size());
  const unsigned char hlb[2] = {static_cast<unsigned char>(hl & 0xff), static_cast<unsigned char>(hl >> 8)};
  bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(hlb, 1, 2, f) == 2 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size();
  const size_t n = static_cast<size_t>(rows * cols);
  ok = ok && (n == 0 || std::fwrite(data, sizeof(float), n, f) == n);
  if (std::fclose(f) != 0 || !ok) throw Error("cannot write " + path);
}

}  // namespace tinylm
