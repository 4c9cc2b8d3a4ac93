// tinylm — run a Hugging Face Llama model directory through libNVFP4.
//
//   tinylm --model DIR [--format auto|fp32|nvfp4|nf4] [--math exact|fast]
//          (--prompt-ids 1,2,3[;4,5,...] | --prompt TEXT ...) [--tokens N]
//          [--temperature T] [--top-k K] [--top-p P] [--seed S] [--max-len L]
//   tinylm --model DIR --prompt-ids 1,2,3 --dump-logits FILE.npy
//   tinylm --model DIR --bench-infer [--runs R] [--warmup W] [--tokens T]
//          [--batch B] [--prompt-len P] [--threads N] [--json FILE] [--csv FILE]
//
// Errors: one line on stderr ("tinylm: error: ..."), exit status 1; usage
// errors exit 2.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model.h"

namespace {

using tinylm::Error;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* kUsage =
    "usage: tinylm --model DIR [options]\n"
    "  --format auto|fp32|nvfp4|nf4   weights: as stored (auto), fp32, or quantized at load time\n"
    "  --math exact|fast              math mode of the 4-bit linears (default exact)\n"
    "  --float-lm-head                keep the LM head in fp32 with --format nvfp4|nf4\n"
    "  --threads N                    threads (0: library default)\n"
    "  --prompt-ids 1,2,3[;4,5]       token ids; ';' separates the sequences of a batch\n"
    "  --prompt TEXT                  byte-level text prompt (repeat for a batch)\n"
    "  --tokens N                     new tokens per sequence (default 16)\n"
    "  --temperature T --top-k K --top-p P --seed S   sampling (temperature 0: greedy)\n"
    "  --max-len L                    KV cache positions per sequence (default 256)\n"
    "  --dump-logits FILE.npy         write the fp32 [T, vocab] logits of the first prompt and exit\n"
    "  --bench-infer                  benchmark: --runs R --warmup W --tokens T --batch B --prompt-len P\n"
    "                                 --recompute-steps S --json FILE --csv FILE\n"
    "  --eval-fp32 N                  logits of N fixed prompts (--prompt-len tokens) vs the fp32 model:\n"
    "                                 relative error and top-1 agreement of this --format/--math\n";

struct Args {
  std::string model, format = "auto", math = "exact", dump, json_path, csv_path;
  std::vector<std::string> text_prompts;
  std::string prompt_ids;
  int64_t tokens = 16, max_len = 256, batch = 1, prompt_len = 32, runs = 3, warmup = 1, recompute_steps = -1;
  int32_t threads = 0, top_k = 0;
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  int64_t eval_prompts = 0;
  bool bench = false, float_head = false;
};

int64_t to_int(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    const long long r = std::stoll(v, &pos);
    if (pos != v.size()) throw std::invalid_argument(v);
    return r;
  } catch (const std::exception&) {
    throw UsageError(flag + ": expected an integer, got '" + v + "'");
  }
}

float to_float(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    const float r = std::stof(v, &pos);
    if (pos != v.size() || !std::isfinite(r)) throw std::invalid_argument(v);
    return r;
  } catch (const std::exception&) {
    throw UsageError(flag + ": expected a number, got '" + v + "'");
  }
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(f + " needs a value");
      return argv[++i];
    };
    if (f == "--help" || f == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (f == "--model")
      a.model = val();
    else if (f == "--format")
      a.format = val();
    else if (f == "--math")
      a.math = val();
    else if (f == "--float-lm-head")
      a.float_head = true;
    else if (f == "--threads")
      a.threads = static_cast<int32_t>(to_int(f, val()));
    else if (f == "--prompt-ids")
      a.prompt_ids = val();
    else if (f == "--prompt")
      a.text_prompts.push_back(val());
    else if (f == "--tokens")
      a.tokens = to_int(f, val());
    else if (f == "--temperature")
      a.temperature = to_float(f, val());
    else if (f == "--top-k")
      a.top_k = static_cast<int32_t>(to_int(f, val()));
    else if (f == "--top-p")
      a.top_p = to_float(f, val());
    else if (f == "--seed")
      a.seed = static_cast<uint64_t>(to_int(f, val()));
    else if (f == "--max-len")
      a.max_len = to_int(f, val());
    else if (f == "--dump-logits")
      a.dump = val();
    else if (f == "--bench-infer")
      a.bench = true;
    else if (f == "--runs")
      a.runs = to_int(f, val());
    else if (f == "--warmup")
      a.warmup = to_int(f, val());
    else if (f == "--batch")
      a.batch = to_int(f, val());
    else if (f == "--prompt-len")
      a.prompt_len = to_int(f, val());
    else if (f == "--recompute-steps")
      a.recompute_steps = to_int(f, val());
    else if (f == "--json")
      a.json_path = val();
    else if (f == "--eval-fp32")
      a.eval_prompts = to_int(f, val());
    else if (f == "--csv")
      a.csv_path = val();
    else
      throw UsageError("unknown option " + f);
  }
  if (a.model.empty()) throw UsageError("--model DIR is required");
  if (a.math != "exact" && a.math != "fast") throw UsageError("--math must be exact or fast");
  if (a.threads < 0) throw UsageError("--threads must be >= 0");
  if (a.runs < 1 || a.warmup < 0 || a.batch < 1 || a.prompt_len < 1 || a.tokens < 1 || a.max_len < 1)
    throw UsageError("--runs, --batch, --prompt-len, --tokens and --max-len must be >= 1, --warmup >= 0");
  if (a.top_p <= 0.0f || a.top_p > 1.0f) throw UsageError("--top-p must be in (0, 1]");
  if (a.temperature < 0.0f) throw UsageError("--temperature must be >= 0");
  return a;
}

std::vector<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<std::vector<int32_t>> out(1);
  std::string cur;
  auto flush = [&]() {
    if (cur.empty()) return;
    size_t pos = 0;
    long long v = 0;
    try {
      v = std::stoll(cur, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != cur.size() || cur.empty()) throw UsageError("--prompt-ids: '" + cur + "' is not an integer");
    if (v < 0 || v > INT32_MAX) throw Error("token id " + cur + " out of range");
    out.back().push_back(static_cast<int32_t>(v));
    cur.clear();
  };
  for (char ch : s) {
    if (ch == ',' || ch == ' ')
      flush();
    else if (ch == ';') {
      flush();
      out.emplace_back();
    } else
      cur += ch;
  }
  flush();
  for (const auto& p : out)
    if (p.empty()) throw UsageError("--prompt-ids: empty sequence");
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double idx = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

tinylm::LoadOptions load_options(const Args& a) {
  tinylm::LoadOptions o;
  o.format = tinylm::parse_format(a.format);
  o.fast_math = a.math == "fast";
  o.threads = a.threads;
  o.quantize_lm_head = !a.float_head;
  return o;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f.flush()) throw Error("cannot write " + path);
}

std::vector<std::vector<int32_t>> fixed_prompts(int64_t n, int64_t len, int64_t vocab, uint64_t seed) {
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(n));
  uint64_t s = seed * 2654435761ull + 12345;
  for (auto& p : prompts)
    for (int64_t i = 0; i < len; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      p.push_back(static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab)));
    }
  return prompts;
}

int run_bench(const Args& a) {
  using clock = std::chrono::steady_clock;
  const auto t_load = clock::now();
  tinylm::Model m(a.model, load_options(a));
  const double load_s = std::chrono::duration<double>(clock::now() - t_load).count();
  const tinylm::Config& c = m.config();
  const int64_t B = a.batch, P = a.prompt_len, T = a.tokens;
  const auto prompts = fixed_prompts(B, P, c.vocab, a.seed);
  tinylm::KVCache cache(c, B, P + T);
  tinylm::SamplingOptions so;  // greedy: sampling cost stays comparable across formats
  tinylm::Profile prof;
  std::vector<double> prefill_tps, decode_tps, steps, run_total;
  std::fprintf(stderr,
               "tinylm bench: %s, %.1f M parameters, %s, batch %lld, prompt %lld, decode %lld tokens\n",
               a.model.c_str(), static_cast<double>(m.parameters()) / 1e6, m.describe().c_str(),
               static_cast<long long>(B), static_cast<long long>(P), static_cast<long long>(T));
  for (int64_t r = 0; r < a.warmup + a.runs; ++r) {
    const bool timed = r >= a.warmup;
    m.set_profile(timed ? &prof : nullptr);
    const auto res = tinylm::generate(m, cache, prompts, T + 1, so, a.seed, false);
    if (!timed) continue;
    double dec = 0;
    for (double v : res.step_s) dec += v;
    prefill_tps.push_back(static_cast<double>(B * P) / res.prefill_s);
    decode_tps.push_back(static_cast<double>(B * T) / dec);
    steps.insert(steps.end(), res.step_s.begin(), res.step_s.end());
    run_total.push_back(res.prefill_s + dec);
  }
  m.set_profile(nullptr);
  double measured = 0;
  for (double v : run_total) measured += v;
  // Recompute baseline: every decode step runs the whole sequence again
  // (fresh cache, all rows), as a model without a KV cache would.
  const int64_t rsteps = a.recompute_steps >= 0 ? std::min(a.recompute_steps, T) : std::min<int64_t>(T, 8);
  std::vector<double> rec;
  {
    std::vector<std::vector<int32_t>> seqs = prompts;
    std::vector<float> logits;
    std::mt19937_64 greedy_rng(0);
    for (int64_t st = 0; st < rsteps; ++st) {
      tinylm::KVCache fresh(c, B, P + T);
      std::vector<tinylm::Row> rows;
      std::vector<char> want;
      for (int64_t b = 0; b < B; ++b) {
        const auto& q = seqs[static_cast<size_t>(b)];
        for (size_t i = 0; i < q.size(); ++i) {
          rows.push_back({b, static_cast<int64_t>(i), q[i]});
          want.push_back(i + 1 == q.size() ? 1 : 0);
        }
      }
      logits.resize(static_cast<size_t>(B * c.vocab));
      const auto t0 = clock::now();
      m.forward(rows, fresh, logits.data(), &want);
      rec.push_back(std::chrono::duration<double>(clock::now() - t0).count());
      for (int64_t b = 0; b < B; ++b)
        seqs[static_cast<size_t>(b)].push_back(
            tinylm::sample(logits.data() + b * c.vocab, c.vocab, so, greedy_rng));
    }
  }
  const double step_med = percentile(steps, 0.5), step_p90 = percentile(steps, 0.9);
  const double rec_med = percentile(rec, 0.5);
  const double op_total = prof.total_ns() * 1e-9;
  nlohmann::json j;
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  Q4_get_capabilities(&caps);
  j["model"] = a.model;
  j["config"] = {{"vocab", c.vocab},
                 {"hidden", c.hidden},
                 {"layers", c.layers},
                 {"heads", c.heads},
                 {"kv_heads", c.kv_heads},
                 {"intermediate", c.intermediate},
                 {"parameters", m.parameters()}};
  j["format"] = a.format;
  j["math"] = a.math;
  j["linears"] = m.describe();
  j["threads"] = a.threads;
  j["cpu"] = {{"brand", caps.cpu_brand}, {"cpus", caps.num_cpus}, {"isa", Q4_isa_name(caps.isa_active)}};
  j["batch"] = B;
  j["prompt_len"] = P;
  j["decode_tokens"] = T;
  j["runs"] = a.runs;
  j["warmup"] = a.warmup;
  j["load_s"] = load_s;
  j["prefill_tokens_per_s"] = percentile(prefill_tps, 0.5);
  j["decode_step_ms_median"] = step_med * 1e3;
  j["decode_step_ms_p90"] = step_p90 * 1e3;
  j["decode_tokens_per_s"] = percentile(decode_tps, 0.5);
  j["recompute_steps"] = rsteps;
  j["recompute_step_ms_median"] = rec_med * 1e3;
  j["kv_cache_speedup"] = step_med > 0 ? rec_med / step_med : 0.0;
  j["weight_bytes"] = m.weight_bytes();
  j["kv_cache_bytes"] = cache.bytes();
  j["measured_total_ms"] = measured * 1e3;
  j["op_total_ms"] = op_total * 1e3;
  j["op_coverage"] = measured > 0 ? op_total / measured : 0.0;
  nlohmann::json ops = nlohmann::json::array();
  for (int op = 0; op < tinylm::kOpCount; ++op)
    ops.push_back({{"op", tinylm::op_name(op)},
                   {"ms", prof.ns[static_cast<size_t>(op)] * 1e-6},
                   {"calls", prof.calls[static_cast<size_t>(op)]},
                   {"share", op_total > 0 ? prof.ns[static_cast<size_t>(op)] * 1e-9 / op_total : 0.0}});
  j["ops"] = ops;
  std::printf("prefill      %10.1f tokens/s  (batch %lld x %lld tokens)\n",
              j["prefill_tokens_per_s"].get<double>(), static_cast<long long>(B), static_cast<long long>(P));
  std::printf("decode       %10.1f tokens/s  step median %.2f ms, p90 %.2f ms\n",
              j["decode_tokens_per_s"].get<double>(), step_med * 1e3, step_p90 * 1e3);
  std::printf("recompute    %10.2f ms/step (%lld steps)  -> KV cache speedup %.1fx\n", rec_med * 1e3,
              static_cast<long long>(rsteps), j["kv_cache_speedup"].get<double>());
  std::printf("memory       weights %.1f MiB, KV cache %.2f MiB\n",
              static_cast<double>(m.weight_bytes()) / 1048576.0,
              static_cast<double>(cache.bytes()) / 1048576.0);
  std::printf("ops          %.1f ms of %.1f ms measured (%.1f %%)\n", op_total * 1e3, measured * 1e3,
              measured > 0 ? 100.0 * op_total / measured : 0.0);
  for (int op = 0; op < tinylm::kOpCount; ++op)
    std::printf("  %-14s %10.2f ms %8lld calls %5.1f %%\n", tinylm::op_name(op),
                prof.ns[static_cast<size_t>(op)] * 1e-6,
                static_cast<long long>(prof.calls[static_cast<size_t>(op)]),
                op_total > 0 ? 100.0 * prof.ns[static_cast<size_t>(op)] * 1e-9 / op_total : 0.0);
  if (!a.json_path.empty()) write_text(a.json_path, j.dump(2) + "\n");
  if (!a.csv_path.empty()) {
    std::ostringstream os;
    os << "kind,name,value,calls,unit\n";
    auto metric = [&](const char* name, double v, const char* unit) {
      os << "metric," << name << "," << v << ",," << unit << "\n";
    };
    metric("prefill_tokens_per_s", j["prefill_tokens_per_s"].get<double>(), "tokens/s");
    metric("decode_tokens_per_s", j["decode_tokens_per_s"].get<double>(), "tokens/s");
    metric("decode_step_ms_median", step_med * 1e3, "ms");
    metric("decode_step_ms_p90", step_p90 * 1e3, "ms");
    metric("recompute_step_ms_median", rec_med * 1e3, "ms");
    metric("kv_cache_speedup", j["kv_cache_speedup"].get<double>(), "x");
    metric("weight_bytes", static_cast<double>(m.weight_bytes()), "B");
    metric("kv_cache_bytes", static_cast<double>(cache.bytes()), "B");
    metric("measured_total_ms", measured * 1e3, "ms");
    metric("op_total_ms", op_total * 1e3, "ms");
    for (int op = 0; op < tinylm::kOpCount; ++op)
      os << "op," << tinylm::op_name(op) << "," << prof.ns[static_cast<size_t>(op)] * 1e-6 << ","
         << prof.calls[static_cast<size_t>(op)] << ",ms\n";
    write_text(a.csv_path, os.str());
  }
  return 0;
}

// 4-bit (or any --format) logits against the fp32 model on fixed prompts.
int run_eval(const Args& a) {
  tinylm::LoadOptions ro = load_options(a);
  ro.format = tinylm::Format::kFp32;
  ro.fast_math = false;
  tinylm::Model ref(a.model, ro);
  tinylm::Model m(a.model, load_options(a));
  const int64_t V = m.config().vocab;
  const auto prompts = fixed_prompts(a.eval_prompts, a.prompt_len, V, a.seed);
  double num = 0, den = 0;
  int64_t agree = 0, total = 0;
  for (const auto& p : prompts) {
    const auto lr = tinylm::full_logits(ref, p), lq = tinylm::full_logits(m, p);
    for (size_t t = 0; t < p.size(); ++t) {
      const float* x = lq.data() + static_cast<int64_t>(t) * V;
      const float* y = lr.data() + static_cast<int64_t>(t) * V;
      for (int64_t v = 0; v < V; ++v) {
        num += (static_cast<double>(x[v]) - y[v]) * (static_cast<double>(x[v]) - y[v]);
        den += static_cast<double>(y[v]) * y[v];
      }
      agree += (std::max_element(x, x + V) - x) == (std::max_element(y, y + V) - y) ? 1 : 0;
      ++total;
    }
  }
  std::printf(
      "%s %s vs fp32: relative logit error %.4f, top-1 agreement %.1f %% (%lld prompts x %lld positions; "
      "%s)\n",
      a.format.c_str(), a.math.c_str(), std::sqrt(num / den),
      100.0 * static_cast<double>(agree) / static_cast<double>(total), static_cast<long long>(a.eval_prompts),
      static_cast<long long>(a.prompt_len), m.describe().c_str());
  return 0;
}

int run(const Args& a) {
  if (a.bench) return run_bench(a);
  if (a.eval_prompts > 0) return run_eval(a);
  std::vector<std::vector<int32_t>> prompts;
  const bool text = !a.text_prompts.empty();
  if (text && !a.prompt_ids.empty()) throw UsageError("give --prompt or --prompt-ids, not both");
  if (text) {
    for (const auto& t : a.text_prompts) {
      std::vector<int32_t> ids;
      for (unsigned char ch : t) ids.push_back(ch);
      if (ids.empty()) throw UsageError("--prompt: empty text");
      prompts.push_back(ids);
    }
  } else if (!a.prompt_ids.empty()) {
    prompts = parse_ids(a.prompt_ids);
  } else {
    throw UsageError("give --prompt-ids, --prompt or --bench-infer");
  }
  tinylm::Model m(a.model, load_options(a));
  const tinylm::Config& c = m.config();
  if (text && c.vocab < 256) throw Error("byte-level prompts need a vocabulary of at least 256 tokens");
  for (const auto& p : prompts) tinylm::check_tokens(c, p);
  if (!a.dump.empty()) {
    const auto& ids = prompts[0];
    if (static_cast<int64_t>(ids.size()) > a.max_len)
      throw Error("prompt has " + std::to_string(ids.size()) + " tokens, longer than the KV cache (" +
                  std::to_string(a.max_len) + " positions, --max-len)");
    const auto logits = tinylm::full_logits(m, ids);
    tinylm::write_npy(a.dump, logits.data(), static_cast<int64_t>(ids.size()), c.vocab);
    std::fprintf(stderr, "wrote %s: float32 [%zu, %lld] (%s)\n", a.dump.c_str(), ids.size(),
                 static_cast<long long>(c.vocab), m.describe().c_str());
    return 0;
  }
  tinylm::KVCache cache(c, static_cast<int64_t>(prompts.size()), a.max_len);
  tinylm::SamplingOptions so;
  so.temperature = a.temperature;
  so.top_k = a.top_k;
  so.top_p = a.top_p;
  const auto res = tinylm::generate(m, cache, prompts, a.tokens, so, a.seed, false);
  for (size_t b = 0; b < prompts.size(); ++b) {
    if (text) {
      std::string outs;
      for (int32_t t : res.tokens[b]) {
        if (t < 256)
          outs += static_cast<char>(t);
        else
          outs += "<" + std::to_string(t) + ">";
      }
      std::printf("%s", a.text_prompts[b].c_str());
      std::fwrite(outs.data(), 1, outs.size(), stdout);
      std::printf("\n");
    } else {
      std::printf("seq %zu:", b);
      for (size_t i = 0; i < res.tokens[b].size(); ++i) std::printf("%s%d", i ? "," : " ", res.tokens[b][i]);
      std::printf("\n");
    }
  }
  double dec = 0;
  for (double v : res.step_s) dec += v;
  std::fprintf(stderr, "%s; prefill %.1f ms, decode %.2f ms/step\n", m.describe().c_str(),
               res.prefill_s * 1e3,
               res.step_s.empty() ? 0.0 : dec * 1e3 / static_cast<double>(res.step_s.size()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tinylm: usage error: %s (see --help)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tinylm: error: %s\n", e.what());
    return 1;
  }
}
