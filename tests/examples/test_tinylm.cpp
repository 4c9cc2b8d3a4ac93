// TinyLM tests (a tiny generated Llama: 2 layers, hidden 64, vocab 256).
//
//   test_tinylm CASE MODEL_DIR [TINYLM_EXE WORK_DIR]
//
// Cases: kv_exact, batched, accuracy, errors, sampling.
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  }
}

tinylm::LoadOptions opts(tinylm::Format f, bool fast = false) {
  tinylm::LoadOptions o;
  o.format = f;
  o.fast_math = fast;
  o.threads = 2;
  return o;
}

std::vector<int32_t> seq(int n, uint32_t seed, int vocab) {
  std::vector<int32_t> v;
  uint32_t s = seed * 2654435761u + 1u;
  for (int i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v.push_back(static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(vocab)));
  }
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// Logits of every position by cached decoding: prefill of `prefill` tokens,
// then one token per step (each step M = 1).
std::vector<float> cached_logits(tinylm::Model& m, const std::vector<int32_t>& ids, size_t prefill) {
  const int64_t V = m.config().vocab;
  tinylm::KVCache cache(m.config(), 1, static_cast<int64_t>(ids.size()));
  std::vector<tinylm::Row> rows;
  for (size_t i = 0; i < prefill; ++i) rows.push_back({0, static_cast<int64_t>(i), ids[i]});
  std::vector<float> out(prefill * static_cast<size_t>(V));
  m.forward(rows, cache, out.data());
  std::vector<float> step(static_cast<size_t>(V));
  for (size_t i = prefill; i < ids.size(); ++i) {
    m.forward({{0, static_cast<int64_t>(i), ids[i]}}, cache, step.data());
    out.insert(out.end(), step.begin(), step.end());
  }
  return out;
}

const char* fmt_name(tinylm::Format f) {
  return tinylm::format_name(f);
}

// Cached decoding vs full recomputation.
void case_kv_exact(const std::string& dir) {
  const auto ids = seq(20, 7, 256);
  for (auto f : {tinylm::Format::kFp32, tinylm::Format::kNvfp4, tinylm::Format::kNf4}) {
    for (bool fast : {false, true}) {
      if (fast && f == tinylm::Format::kFp32) continue;
      tinylm::Model m(dir, opts(f, fast));
      // 1. Row by row: the reference calls every linear with M = 1, as
      //    decoding does; the prefill of 6 tokens is also row by row.
      m.set_max_rows(1);
      const auto full_rows = tinylm::full_logits(m, ids);
      const auto cached = cached_logits(m, ids, 6);
      const double d1 = max_abs_diff(full_rows, cached);
      // 2. One call with all T = 20 rows (the library's GEMM path for M > 8)
      //    against the same cached decoding.
      m.set_max_rows(0);
      const auto full_all = tinylm::full_logits(m, ids);
      const double d2 = max_abs_diff(full_all, cached);
      // 3. M <= 8: rows in chunks of 8 (the library's GEMV path).
      m.set_max_rows(8);
      const double d3 = max_abs_diff(tinylm::full_logits(m, ids), cached);
      const double scale = max_abs(full_rows);
      std::printf(
          "kv_exact %-5s %-5s: row-by-row recompute vs cached max|diff| = %.3g; all-rows (M=20) %.3g (rel "
          "%.2g); M=8 chunks %.3g\n",
          fmt_name(f), fast ? "fast" : "exact", d1, d2, d2 / scale, d3);
      expect(d1 == 0.0, std::string("cached decoding must equal row-by-row recomputation exactly (") +
                            fmt_name(f) + ")");
      if (f == tinylm::Format::kFp32)
        expect(d2 == 0.0, "fp32: cached decoding must equal one-call recomputation exactly");
      // Bound for M-dependent 4-bit products: a few float ulps of the
      // logits' scale propagated through 2 layers.
      expect(d2 <= 1e-4 * scale,
             std::string("all-rows recomputation within 1e-4 relative (") + fmt_name(f) + ")");
    }
  }
}

// Batched decoding of prompts of different lengths vs each decoded alone.
void case_batched(const std::string& dir) {
  const std::vector<std::vector<int32_t>> prompts = {seq(3, 1, 256), seq(11, 2, 256), seq(6, 3, 256),
                                                     seq(1, 4, 256)};
  const int64_t T = 7;
  for (auto f : {tinylm::Format::kFp32, tinylm::Format::kNvfp4, tinylm::Format::kNf4}) {
    tinylm::Model m(dir, opts(f));
    tinylm::KVCache cache(m.config(), 4, 32);
    const auto batched = tinylm::generate(m, cache, prompts, T, {}, 0, true);
    double worst = 0, worst_rel = 0;
    bool same_tokens = true;
    for (size_t b = 0; b < prompts.size(); ++b) {
      tinylm::KVCache one(m.config(), 1, 32);
      const auto alone = tinylm::generate(m, one, {prompts[b]}, T, {}, 0, true);
      same_tokens = same_tokens && alone.tokens[0] == batched.tokens[b];
      const double d = max_abs_diff(alone.logits[0], batched.logits[b]);
      worst = std::max(worst, d);
      worst_rel = std::max(worst_rel, d / max_abs(alone.logits[0]));
      expect(batched.logits[b].size() == static_cast<size_t>(prompts[b].size() + T - 1) * 256, "logit count");
    }
    std::printf(
        "batched %-5s: 4 sequences (prompts 3/11/6/1) vs alone: max|diff| = %.3g (rel %.2g), tokens %s\n",
        fmt_name(f), worst, worst_rel, same_tokens ? "identical" : "differ");
    expect(worst_rel <= 1e-4, std::string("batched vs single within 1e-4 relative (") + fmt_name(f) + ")");
    expect(same_tokens, std::string("greedy tokens identical batched vs single (") + fmt_name(f) + ")");
  }
}

// 4-bit vs fp32 logits over a fixed prompt set.
void case_accuracy(const std::string& dir) {
  tinylm::Model ref(dir, opts(tinylm::Format::kFp32));
  std::vector<std::vector<float>> base;
  std::vector<std::vector<int32_t>> set;
  for (uint32_t p = 0; p < 8; ++p) {
    set.push_back(seq(16, 100 + p, 256));
    base.push_back(tinylm::full_logits(ref, set.back()));
  }
  for (auto f : {tinylm::Format::kNvfp4, tinylm::Format::kNf4}) {
    for (bool fast : {false, true}) {
      tinylm::Model m(dir, opts(f, fast));
      double num = 0, den = 0;
      int agree = 0, total = 0;
      for (size_t p = 0; p < set.size(); ++p) {
        const auto l = tinylm::full_logits(m, set[p]);
        for (size_t t = 0; t < set[p].size(); ++t) {
          const float* a = l.data() + t * 256;
          const float* b = base[p].data() + t * 256;
          for (int v = 0; v < 256; ++v) {
            num += (static_cast<double>(a[v]) - b[v]) * (static_cast<double>(a[v]) - b[v]);
            den += static_cast<double>(b[v]) * b[v];
          }
          agree += std::max_element(a, a + 256) - a == std::max_element(b, b + 256) - b ? 1 : 0;
          ++total;
        }
      }
      const double rel = std::sqrt(num / den), top1 = static_cast<double>(agree) / total;
      std::printf(
          "accuracy %-5s %-5s vs fp32: relative logit error %.4f, top-1 agreement %.1f %% (%d positions)\n",
          fmt_name(f), fast ? "fast" : "exact", rel, 100.0 * top1, total);
      expect(rel < 0.5 && top1 > 0.5, std::string("4-bit logits close to fp32 (") + fmt_name(f) + ")");
    }
  }
}

void case_sampling() {
  std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.5f, -1.0f};
  std::mt19937_64 rng(1);
  expect(tinylm::sample(logits.data(), 5, {}, rng) == 1, "greedy picks the argmax");
  tinylm::SamplingOptions k1{1.0f, 1, 1.0f};
  for (int i = 0; i < 20; ++i) expect(tinylm::sample(logits.data(), 5, k1, rng) == 1, "top-k 1 is greedy");
  tinylm::SamplingOptions k2{1.0f, 2, 1.0f};
  int hits[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < 2000; ++i) hits[tinylm::sample(logits.data(), 5, k2, rng)]++;
  expect(hits[0] == 0 && hits[2] == 0 && hits[4] == 0 && hits[1] > hits[3] && hits[3] > 0,
         "top-k 2 keeps the 2 best");
  tinylm::SamplingOptions p{1.0f, 0, 0.5f};
  for (int i = 0; i < 50; ++i)
    expect(tinylm::sample(logits.data(), 5, p, rng) == 1, "top-p 0.5 keeps only the argmax here");
  std::mt19937_64 a(9), b(9);
  tinylm::SamplingOptions t{0.8f, 0, 0.95f};
  for (int i = 0; i < 50; ++i)
    expect(tinylm::sample(logits.data(), 5, t, a) == tinylm::sample(logits.data(), 5, t, b),
           "same seed, same draws");
  std::printf("sampling: top-k 2 draws %d/%d of tokens 1/3\n", hits[1], hits[3]);
}

// --- bad inputs: run the tinylm program and check one error line, exit 1.
std::string read_file(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void expect_cli_error(const std::string& exe, const std::string& args, const std::string& work,
                      const std::string& needle) {
  const std::string err = work + "/stderr.txt";
  const std::string cmd = "'" + exe + "' " + args + " > /dev/null 2> '" + err + "'";
  const int st = std::system(cmd.c_str());
  const std::string text = read_file(err);
  const bool exited = st != -1 && WIFEXITED(st);
  const int code = exited ? WEXITSTATUS(st) : -1;
  const auto lines = std::count(text.begin(), text.end(), '\n');
  std::printf("errors: tinylm %s\n   -> exit %d: %s", args.c_str(), code, text.c_str());
  expect(exited && code == 1, "exit status 1 for: " + args);
  expect(lines == 1, "exactly one error line for: " + args);
  expect(text.find(needle) != std::string::npos, "message mentions '" + needle + "' for: " + args);
}

// Copies DIR's model into OUT, dropping `drop` and giving `reshape` the
// shape [1, numel] (same bytes, wrong shape).
void copy_model(const std::string& dir, const std::string& out, const std::string& drop,
                const std::string& reshape) {
  mkdir(out.c_str(), 0755);
  std::ofstream(out + "/config.json") << read_file(dir + "/config.json");
  Q4_checkpoint* c = nullptr;
  Q4_checkpoint_writer* w = nullptr;
  if (Q4_checkpoint_open((dir + "/model.safetensors").c_str(), &c) != Q4_OK ||
      Q4_checkpoint_writer_create(&w) != Q4_OK)
    throw tinylm::Error("copy_model: " + std::string(Q4_last_error()));
  size_t n = 0;
  Q4_checkpoint_count(c, &n);
  for (size_t i = 0; i < n; ++i) {
    Q4_tensor_desc d{};
    Q4_checkpoint_tensor_info(c, i, &d, nullptr);
    const std::string name = d.name;
    if (name == drop) continue;
    DLTensor v{};
    Q4_checkpoint_tensor(c, i, &v);
    int64_t shape[2] = {1, 1};
    if (name == reshape) {
      for (int32_t k = 0; k < v.ndim; ++k) shape[1] *= v.shape[k];
      v.shape = shape;
      v.ndim = 2;
    }
    if (Q4_checkpoint_writer_add(w, name.c_str(), d.dtype, &v) != Q4_OK)
      throw tinylm::Error("copy_model: " + std::string(Q4_last_error()));
  }
  if (Q4_checkpoint_writer_commit(w, (out + "/model.safetensors").c_str()) != Q4_OK)
    throw tinylm::Error("copy_model: " + std::string(Q4_last_error()));
  Q4_checkpoint_writer_destroy(w);
  Q4_checkpoint_close(c);
}

void case_errors(const std::string& dir, const std::string& exe, const std::string& work) {
  mkdir(work.c_str(), 0755);
  const std::string missing = work + "/missing", shaped = work + "/shaped";
  copy_model(dir, missing, "model.layers.1.mlp.up_proj.weight", "");
  copy_model(dir, shaped, "", "model.layers.0.self_attn.k_proj.weight");
  expect_cli_error(exe, "--model '" + missing + "' --prompt-ids 1,2", work, "model.layers.1.mlp.up_proj");
  expect_cli_error(exe, "--model '" + shaped + "' --prompt-ids 1,2", work, "shape");
  expect_cli_error(exe, "--model '" + dir + "' --prompt-ids 1,256,3", work, "token id 256");
  expect_cli_error(exe, "--model '" + dir + "' --prompt-ids 1,2,3,4,5,6 --max-len 4", work,
                   "longer than the KV cache");
  expect_cli_error(exe, "--model '" + dir + "' --prompt-ids 1,2 --tokens 10 --max-len 8", work,
                   "cache positions");
  expect_cli_error(exe, "--model '" + work + "/nonexistent' --prompt-ids 1", work, "config.json");
  expect_cli_error(exe,
                   "--model '" + dir + "' --format fp32 --prompt-ids 1,999 --dump-logits " + work + "/x.npy",
                   work, "token id 999");
  // The cache itself refuses a position past its capacity.
  tinylm::Model m(dir, opts(tinylm::Format::kFp32));
  tinylm::KVCache cache(m.config(), 1, 2);
  std::vector<float> l(3 * 256);
  bool threw = false;
  try {
    m.forward({{0, 0, 1}, {0, 1, 2}, {0, 2, 3}}, cache, l.data());
  } catch (const tinylm::Error& e) {
    threw = std::string(e.what()).find("KV cache full") != std::string::npos;
  }
  expect(threw, "forward past the cache capacity throws 'KV cache full'");
}

// The benchmark's JSON and CSV: op times add up to the measured total.
// `coverage` off (sanitizer builds): instrumentation inflates the untimed
// glue between ops on this tiny model, so only the structure is checked.
void case_bench(const std::string& json_path, const std::string& csv_path, bool coverage) {
  const auto j = nlohmann::json::parse(read_file(json_path));
  const double measured = j.at("measured_total_ms").get<double>(), ops = j.at("op_total_ms").get<double>();
  double sum = 0;
  for (const auto& op : j.at("ops")) sum += op.at("ms").get<double>();
  std::printf("bench: measured %.2f ms, ops %.2f ms (sum %.2f), prefill %.1f tok/s, decode %.1f tok/s\n",
              measured, ops, sum, j.at("prefill_tokens_per_s").get<double>(),
              j.at("decode_tokens_per_s").get<double>());
  expect(measured > 0 && sum <= measured * 1.001, "op times are part of the measured total");
  if (coverage)
    expect(std::fabs(sum - measured) <= 0.1 * measured, "op times within 10 % of the measured total");
  expect(std::fabs(sum - ops) <= 1e-6 * std::max(1.0, ops), "op_total_ms is the sum of the ops");
  for (const char* k :
       {"decode_step_ms_median", "decode_step_ms_p90", "kv_cache_speedup", "weight_bytes", "kv_cache_bytes"})
    expect(j.contains(k) && j.at(k).get<double>() > 0, std::string("JSON has a positive ") + k);
  const std::string csv = read_file(csv_path);
  expect(csv.rfind("kind,name,value,calls,unit\n", 0) == 0 &&
             csv.find("op,attention,") != std::string::npos && csv.find("op,lm_head,") != std::string::npos,
         "CSV has the header and the op rows");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: test_tinylm CASE MODEL_DIR [TINYLM_EXE WORK_DIR]\n");
    return 2;
  }
  const std::string c = argv[1], dir = argv[2];
  try {
    if (c == "kv_exact")
      case_kv_exact(dir);
    else if (c == "batched")
      case_batched(dir);
    else if (c == "accuracy")
      case_accuracy(dir);
    else if (c == "sampling")
      case_sampling();
    else if (c == "bench" && argc >= 4)
      case_bench(dir, argv[3], !(argc >= 5 && std::string(argv[4]) == "structure-only"));
    else if (c == "errors" && argc >= 5)
      case_errors(dir, argv[3], argv[4]);
    else {
      std::fprintf(stderr, "unknown case %s\n", c.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: exception: %s\n", e.what());
    return 1;
  }
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
