#include "core/tuner.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cpu_features.h"
#include "common/error.h"
#include "common/struct_size.h"
#include "io/replace_file.h"
#include "kernels/dispatch.h"

namespace q4::tuner {
namespace {

constexpr double kMargin = 0.03;  // tuned blocking must be >= 3 % faster
constexpr int64_t kKc[] = {64, 128, 192, 256, 384, 512, 768, 1024};
constexpr int64_t kMc[] = {32, 48, 64, 96, 128};

std::once_flag g_load_once;

void copy_text(char* dst, size_t cap, const std::string& src) {
  const size_t n = std::min(src.size(), cap - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

// The median time in ms of `runs` calls of call() after one warm-up call.
template <class Call>
double median_of(int32_t runs, Call&& call) {
  std::vector<double> t;
  for (int32_t r = -1; r < runs; ++r) {  // r = -1: warm-up
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const auto t1 = std::chrono::steady_clock::now();
    if (r >= 0) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double median_ms(const kern::KernelTable& kt, const std::vector<float>& a, const std::vector<float>& b,
                 std::vector<float>& c, int64_t dim, int32_t runs, const kern::GemmBlocking& blk) {
  return median_of(runs, [&] { kern::gemm_f32(kt, a.data(), dim, dim, b.data(), dim, c.data(), 0, blk); });
}

// A random NVFP4 weight of n x k (codes uniform, E4M3 scales 0x30-0x3f,
// global scale 1) and up to max_m rows of x in [-1, 1), drawn in that
// order from one generator seeded with `seed`; timed products of m rows.
struct Nvfp4Problem {
  int64_t n, k;
  std::vector<uint8_t> q, s;
  std::vector<float> x, y;
  kern::NvWeights w;
  Nvfp4Problem(int64_t max_m, int64_t rows, int64_t cols, uint32_t seed)
      : n(rows),
        k(cols),
        q(static_cast<size_t>(n * k / 2)),
        s(static_cast<size_t>(n * k / 16)),
        x(static_cast<size_t>(max_m * k)),
        y(static_cast<size_t>(max_m * n)),
        w{q.data(), s.data(), 1.0f, k} {
    std::mt19937 rng(seed);
    for (uint8_t& b : q) b = static_cast<uint8_t>(rng());
    for (uint8_t& b : s) b = static_cast<uint8_t>(0x30 + rng() % 16);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x) v = u(rng);
  }
  Nvfp4Problem(const Nvfp4Problem&) = delete;  // (w points into q and s)
  Nvfp4Problem& operator=(const Nvfp4Problem&) = delete;
  // Median time of linear_nvfp4 (exact) at m rows.
  double median_ms(const kern::KernelTable& kt, int32_t runs, int64_t m) {
    return median_of(runs, [&] { kern::linear_nvfp4(kt, x.data(), m, w, n, y.data(), 0); });
  }
};

// Median time of p at m rows under the small-batch config c.
double product_ms(const kern::KernelTable& kt, Nvfp4Problem& p, int64_t m, int32_t runs,
                  const kern::SmallBatchConfig& c) {
  kern::set_small_batch_config(c);
  return p.median_ms(kt, runs, m);
}

// The small-batch settings for this CPU: the K chunk (at M = 16) and the
// largest M (the table's default, or one of 24, 32, 40, 48, 64, 96, 128
// above it) up to which the small-batch kernels beat the panel GEMM, on a
// random NVFP4 weight of dim x dim (at least 256 x 256; N above the
// table's short weights: small_batch_tuning_rows), or dim x (dim + 16)
// where the table's GEMV takes M <= 16 for K % 128 == 0 (so that the
// small-batch kernels, which serve only the other K there, are what is
// timed). A K chunk of K or more cuts nothing, so only chunks below K are
// tried. The smallest M of the small-batch kernels (min_m) keeps its
// default: timed on weights that sit in the caches, the small-batch kernels
// beat the fused GEMV at M = 4-8, while from memory, where those products
// read their weights, they were 1.5x slower (Emerald Rapids, 4096^2).
kern::SmallBatchConfig tune_small_batch(const kern::KernelTable& kt, int32_t dim, int32_t runs) {
  const int64_t d = std::max<int64_t>(256, int64_t{dim} / 16 * 16);
  const int64_t k = kt.gemv_max_m_k128 > kern::kGemvMaxRows ? d + 16 : d;
  Nvfp4Problem p(128, kern::small_batch_tuning_rows(kt, d), k, 2);
  kern::SmallBatchConfig best{};
  double best_ms = product_ms(kt, p, 16, runs, best);
  for (int64_t kc : {256, 1024, 2048}) {
    if (std::min(kc, k) == std::min(best.kc, k)) continue;  // the same chunks as best
    kern::SmallBatchConfig c = best;
    c.kc = kc;
    const double ms = product_ms(kt, p, 16, runs, c);
    if (ms < best_ms * (1.0 - kMargin)) {
      best_ms = ms;
      best.kc = kc;
    }
  }
  best.max_m = kt.small_batch_max_m;
  for (int32_t m : {24, 32, 40, 48, 64, 96, 128}) {
    if (m <= best.max_m) continue;
    kern::SmallBatchConfig small = best, gemm = best;
    small.max_m = m;
    gemm.max_m = m - 1;
    if (product_ms(kt, p, m, runs, small) > product_ms(kt, p, m, runs, gemm)) break;
    best.max_m = m;
  }
  return best;
}

// The tuning file's text, or an empty object when it is missing, not a
// regular file (opened O_NONBLOCK: a FIFO at the path otherwise blocked the
// first product of the process until some writer opened it), larger than
// any tuning file (1 MiB) or malformed.
constexpr int64_t kMaxCacheBytes = int64_t{1} << 20;
nlohmann::json read_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return nlohmann::json::object();
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= kMaxCacheBytes) {
    text.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t r = ::read(fd, &text[got], text.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    text.resize(got);
  }
  ::close(fd);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return nlohmann::json::object();
  return j;
}

void make_dirs(const std::string& path) {
  for (size_t pos = 1; (pos = path.find('/', pos)) != std::string::npos; ++pos) {
    const std::string dir = path.substr(0, pos);
    ::mkdir(dir.c_str(), 0755);  // existing directories are fine
  }
}

// Atomic replace (a temporary file beside it, then rename): processes that
// load the file while another tunes read the old or the new one, whole.
bool write_cache(const std::string& path, const nlohmann::json& j) {
  make_dirs(path);
  const std::string text = j.dump(2) + "\n";
  return io::replace_file(path, {{text.data(), text.size()}}).err == 0;
}

// The tuner's 4-bit objective: linear_nvfp4 (exact) at m rows of x on a
// random NVFP4 weight of kd x kd, m above every small-batch range, so that
// the panel GEMM (the blocking's user) is what runs.
struct PanelProblem {
  int64_t m, kd;
  Nvfp4Problem p;
  explicit PanelProblem(int32_t dim)
      : m(std::max<int64_t>(256, dim)), kd(std::max<int64_t>(64, int64_t{dim} / 16 * 16)), p(m, kd, kd, 3) {}
  double median_ms(const kern::KernelTable& kt, int32_t runs, const kern::GemmBlocking& blk) {
    kern::set_gemm_blocking(blk);
    return p.median_ms(kt, runs, m);
  }
};

}  // namespace

std::string cpu_signature() {
  const CpuInfo& c = cpu_info();
  std::ostringstream s;
  s << c.vendor << '|' << c.brand << '|' << std::hex << c.features << std::dec << '|' << c.num_cpus;
  return s.str();
}

std::string cache_path() {
  if (const char* f = std::getenv("NVFP4_TUNING_FILE"); f != nullptr && *f != '\0') return f;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/nvfp4/matmul_tuning.json";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return std::string(h) + "/.cache/nvfp4/matmul_tuning.json";
  }
  return "";
}

void ensure_loaded() {
  std::call_once(g_load_once, [] {
    try {
      const char* off = std::getenv("Q4_TUNING");
      if (off != nullptr && std::strcmp(off, "off") == 0) return;
      const std::string path = cache_path();
      if (path.empty()) return;
      const nlohmann::json j = read_cache(path);
      const auto entries = j.find("entries");
      if (entries == j.end() || !entries->is_object()) return;
      const auto e = entries->find(cpu_signature());
      if (e == entries->end() || !e->is_object()) return;
      const int64_t kc = e->value("kc", int64_t{0});
      const int64_t mc = e->value("mc", int64_t{0});
      if (kc >= 16 && kc <= 4096 && mc >= 1 && mc <= 4096) {
        kern::set_gemm_blocking(kern::GemmBlocking{kc, mc});
        log_message(Q4_LOG_INFO, "matmul tuning loaded from " + path);
      }
      const auto sb = e->find("small_batch");
      if (sb != e->end() && sb->is_object()) {
        kern::SmallBatchConfig c;
        c.min_m = sb->value("min_m", c.min_m);
        c.max_m = sb->value("max_m", c.max_m);
        c.kc = sb->value("kc", c.kc);
        c.split_k = sb->value("split_k", c.split_k);
        kern::set_small_batch_config(c);  // clamps to the valid ranges
      }
    } catch (...) {
      log_message(Q4_LOG_WARN, "matmul tuning file ignored (unreadable or malformed)");
    }
  });
}

void tune(int32_t dim, int32_t runs, bool persist, Q4_tune_result* out) {
  if (dim < 16 || dim > 8192)
    fail(Q4_ERR_INVALID_ARGUMENT, "dim", "expected 16..8192, got " + std::to_string(dim));
  if (runs < 1 || runs > 1000)
    fail(Q4_ERR_INVALID_ARGUMENT, "runs", "expected 1..1000, got " + std::to_string(runs));
  ensure_loaded();
  const kern::KernelTable& kt = kern::active_table();
  const int64_t d = dim;
  std::vector<float> a(static_cast<size_t>(d * d)), b(static_cast<size_t>(d * d)),
      c(static_cast<size_t>(d * d));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  PanelProblem panel(dim);
  // The small-batch range in force while timing the panel: the defaults, so
  // that panel.m (>= 256) is above it whatever a loaded tuning said.
  const kern::SmallBatchConfig loaded_sb = kern::small_batch_config();
  kern::set_small_batch_config(kern::SmallBatchConfig{});

  // A candidate's cost: one fp32 GEMM of dim^3 plus one 4-bit panel
  // product (both medians). It must also not be slower than the defaults
  // at either by more than the margin (a blocking that speeds up the fp32
  // GEMM but slows down the 4-bit products is not adopted).
  const kern::GemmBlocking defaults{};
  double default_f32 = median_ms(kt, a, b, c, d, runs, defaults);
  double default_q4 = panel.median_ms(kt, runs, defaults);
  kern::GemmBlocking best = defaults;
  double best_ms = default_f32 + default_q4;
  int32_t candidates = 0;
  for (int64_t kc : kKc) {
    for (int64_t mc : kMc) {
      ++candidates;
      if (kc == defaults.kc && mc == defaults.mc) continue;  // (timed above: the baseline)
      const kern::GemmBlocking cand{kc, mc};
      const double f32 = median_ms(kt, a, b, c, d, runs, cand);
      const double q4 = panel.median_ms(kt, runs, cand);
      if (f32 > default_f32 * (1.0 + kMargin) || q4 > default_q4 * (1.0 + kMargin)) continue;
      if (f32 + q4 < best_ms) {
        best_ms = f32 + q4;
        best = cand;
      }
    }
  }
  // The defaults timed once more after the grid, the faster of the two
  // kept: the baseline, timed first, also took the warm-up of a quiet host.
  default_f32 = std::min(default_f32, median_ms(kt, a, b, c, d, runs, defaults));
  default_q4 = std::min(default_q4, panel.median_ms(kt, runs, defaults));
  const double default_ms = default_f32 + default_q4;
  if (best_ms > default_ms) {  // no candidate below the defaults' better time
    best = defaults;
    best_ms = default_ms;
  }
  kern::set_small_batch_config(loaded_sb);
  const bool adopted = best_ms <= default_ms * (1.0 - kMargin);
  kern::set_gemm_blocking(adopted ? best : defaults);
  const kern::SmallBatchConfig sb = tune_small_batch(kt, dim, runs);
  kern::set_small_batch_config(sb);

  bool persisted = false;
  const std::string path = cache_path();
  if (persist && !path.empty()) {
    nlohmann::json j = read_cache(path);
    j["version"] = 1;
    if (!j.contains("entries") || !j["entries"].is_object()) j["entries"] = nlohmann::json::object();
    const kern::GemmBlocking keep = adopted ? best : defaults;
    j["entries"][cpu_signature()] = {
        {"kc", keep.kc},
        {"mc", keep.mc},
        {"dim", dim},
        {"objective", "fp32 GEMM dim^3 + NVFP4 panel product " + std::to_string(panel.m) + "x" +
                          std::to_string(panel.kd) + "x" + std::to_string(panel.kd)},
        {"default_ms", default_ms},
        {"best_ms", best_ms},
        {"adopted", adopted},
        {"isa", isa_name(kt.isa)},
        {"small_batch", {{"min_m", sb.min_m}, {"max_m", sb.max_m}, {"kc", sb.kc}, {"split_k", sb.split_k}}}};
    persisted = write_cache(path, j);
  }

  Q4_tune_result r;
  std::memset(&r, 0, sizeof r);
  r.dim = dim;
  r.runs = runs;
  r.candidates = candidates;
  r.kc_default = static_cast<int32_t>(defaults.kc);
  r.mc_default = static_cast<int32_t>(defaults.mc);
  r.kc_best = static_cast<int32_t>(best.kc);
  r.mc_best = static_cast<int32_t>(best.mc);
  r.default_ms = default_ms;
  r.best_ms = best_ms;
  r.adopted = adopted ? 1 : 0;
  r.persisted = persisted ? 1 : 0;
  copy_text(r.cache_path, sizeof r.cache_path, path);
  copy_text(r.cpu_signature, sizeof r.cpu_signature, cpu_signature());
  write_struct(out, r, "result");
}

}  // namespace q4::tuner
