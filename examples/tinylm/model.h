// TinyLM — a Llama-architecture decoder over libNVFP4's public C API.
//
// Every 4-bit product goes through a Q4_session and Q4_linear objects; fp32
// linears (--format fp32, or float weights kept as they are) use the small
// fp32 GEMM of this example. Per-row results of every linear kind do not
// depend on the other rows of the call except through the row count M (see
// docs/examples.md): the model can cap the rows per linear call
// (Model::set_max_rows) so that a full recomputation calls the linears with
// exactly the rows cached decoding uses.
#ifndef TINYLM_MODEL_H_
#define TINYLM_MODEL_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "nvfp4/nvfp4.h"
#include "thread_pool.h"

namespace tinylm {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Config {
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  int64_t max_positions = 0;
  float rms_eps = 1e-5f;
  double rope_theta = 10000.0;
  bool tied = false;
};

// Reads and checks DIR/config.json.
Config read_config(const std::string& dir);

// Operations the profiling hook reports.
enum Op : int {
  kOpEmbed,
  kOpNormAttn,  // input RMSNorm
  kOpQProj,
  kOpKProj,
  kOpVProj,
  kOpRope,
  kOpKvAppend,
  kOpAttention,
  kOpOProj,
  kOpResidual,
  kOpNormMlp,  // post-attention RMSNorm
  kOpGateProj,
  kOpUpProj,
  kOpSwiGLU,
  kOpDownProj,
  kOpFinalNorm,
  kOpLmHead,
  kOpSampling,
  kOpCount
};
const char* op_name(int op);

// Profiling hook: time and calls per op (nanoseconds, steady clock).
struct Profile {
  std::array<double, kOpCount> ns{};
  std::array<int64_t, kOpCount> calls{};
  void reset() {
    ns.fill(0.0);
    calls.fill(0);
  }
  double total_ns() const {
    double t = 0;
    for (double v : ns) t += v;
    return t;
  }
};

class ScopedOp {
 public:
  ScopedOp(Profile* p, int op) : p_(p), op_(op) {
    if (p_) t0_ = std::chrono::steady_clock::now();
  }
  ~ScopedOp() {
    if (!p_) return;
    p_->ns[static_cast<size_t>(op_)] += static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
    p_->calls[static_cast<size_t>(op_)] += 1;
  }
  ScopedOp(const ScopedOp&) = delete;
  ScopedOp& operator=(const ScopedOp&) = delete;

 private:
  Profile* p_;
  int op_;
  std::chrono::steady_clock::time_point t0_{};
};

// Weight formats: as stored (float weights -> fp32, 4-bit -> as packed), or
// every float linear weight quantized at load time.
enum class Format { kAuto, kFp32, kNvfp4, kNf4 };
Format parse_format(const std::string& s);
const char* format_name(Format f);

struct LoadOptions {
  Format format = Format::kAuto;
  bool fast_math = false;        // Q4_MATH_FAST for the 4-bit linears
  int32_t threads = 0;           // 0: library default
  bool quantize_lm_head = true;  // load-time 4-bit formats: also quantize the LM head
};

// One linear layer: a Q4_linear or an fp32 matrix.
class Linear {
 public:
  Linear() = default;
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;
  Linear(Linear&& o) noexcept;
  Linear& operator=(Linear&& o) noexcept;
  ~Linear();
  // y[m, n] = x[m, k] . W^T
  void forward(const float* x, int64_t m, float* y, ThreadPool& pool) const;
  int64_t n = 0, k = 0;
  int32_t format = Q4_FORMAT_NONE;  // NONE: fp32
  Q4_linear* q4 = nullptr;
  std::vector<float> w;  // fp32 weight [n, k]
  int64_t bytes() const;
};

// Per-layer KV cache: [slot][position][kv_heads * head_dim] for K and V,
// allocated once for `slots` sequences of at most `max_len` positions.
class KVCache {
 public:
  KVCache(const Config& c, int64_t slots, int64_t max_len);
  float* k(int64_t layer, int64_t slot, int64_t pos);
  float* v(int64_t layer, int64_t slot, int64_t pos);
  int64_t slots() const { return slots_; }
  int64_t max_len() const { return max_len_; }
  int64_t bytes() const { return static_cast<int64_t>(data_.size() * sizeof(float)); }
  std::vector<int64_t> length;  // positions filled per slot

 private:
  int64_t layers_, slots_, max_len_, width_;
  std::vector<float> data_;
};

// One row of a forward call: token `token` of slot `slot` at position `pos`
// (the slot's cache must hold positions 0..pos-1).
struct Row {
  int64_t slot;
  int64_t pos;
  int32_t token;
};

class Model {
 public:
  Model(const std::string& dir, const LoadOptions& opts);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const Config& config() const { return cfg_; }
  // Runs the rows (any mix of slots), appending their K/V to the cache, and
  // writes the logits of the rows with want[i] != 0 (in order) to logits
  // [count, vocab]. want == nullptr: every row.
  void forward(const std::vector<Row>& rows, KVCache& cache, float* logits,
               const std::vector<char>* want = nullptr);
  // Caps the rows per linear call (0: all rows in one call).
  void set_max_rows(int64_t m) { max_rows_ = m; }
  void set_profile(Profile* p) { prof_ = p; }
  Profile* profile() const { return prof_; }
  int64_t weight_bytes() const;
  int64_t parameters() const;
  std::string describe() const;  // formats of the linears
  ThreadPool& pool() { return pool_; }

 private:
  struct Layer {
    std::vector<float> attn_norm, mlp_norm;
    Linear q, k, v, o, gate, up, down;
  };
  void run_linear(const Linear& l, const float* x, int64_t m, float* y, int op);
  Linear load_linear(const std::string& prefix, int64_t n, int64_t k, bool is_head);
  std::vector<float> load_float(const std::string& name, const std::vector<int64_t>& shape);

  Config cfg_;
  LoadOptions opts_;
  Q4_session* session_ = nullptr;
  Q4_checkpoint* ckpt_ = nullptr;
  std::string path_;
  std::vector<float> embed_, final_norm_;
  std::vector<Layer> layers_;
  Linear lm_head_;
  std::vector<float> inv_freq_;
  int64_t max_rows_ = 0;
  Profile* prof_ = nullptr;
  ThreadPool pool_;
};

// Sampling: temperature <= 0 is greedy; top_k <= 0 and top_p >= 1 disable
// those filters.
struct SamplingOptions {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
};
int32_t sample(const float* logits, int64_t vocab, const SamplingOptions& o, std::mt19937_64& rng);

// Batched generation: prompts of any lengths, decoded together (one row per
// live sequence per step). Returns the generated ids per sequence; fills
// `step_logits` (when non-null) with each sequence's logits at every
// position of prompt + generated tokens except the last generated one.
struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;  // per sequence, [positions, vocab]
  double prefill_s = 0;
  std::vector<double> step_s;  // per decode step
};
GenerateResult generate(Model& m, KVCache& cache, const std::vector<std::vector<int32_t>>& prompts,
                        int64_t new_tokens, const SamplingOptions& so, uint64_t seed, bool keep_logits);

// Logits of every position of `ids` computed without reusing a cache
// (a fresh single-slot cache, one forward over all rows).
std::vector<float> full_logits(Model& m, const std::vector<int32_t>& ids);

void check_tokens(const Config& c, const std::vector<int32_t>& ids);

// Writes a float32 [rows, cols] array as a NumPy .npy file.
void write_npy(const std::string& path, const float* data, int64_t rows, int64_t cols);

}  // namespace tinylm

#endif  // TINYLM_MODEL_H_
