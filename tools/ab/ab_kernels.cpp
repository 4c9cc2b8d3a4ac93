// In-process A/B harness for one kernel table (tools/ab/ab.sh builds it):
// the table as a base revision had it (AB_TABLE_old(), compiled from a
// snapshot) against the working tree's (AB_TABLE()), called alternately
// on the same data, the outputs compared byte for byte. Run-to-run noise
// of a shared host moves both sides alike, so the ratio of the medians is
// what a change is judged by (full benchmark runs minutes apart are not
// comparable on such hosts).
//
//   ab_kernels OP M N K hot|dram [reps] [threads]
//
// OP: gemv-nvfp4, gemv-nf4, gemv-mxfp4 (exact GEMV entries); i8-nvfp4,
// i8-nf4, i8-mxfp4 (integer GEMV entries, activations quantized once);
// quant-nvfp4, quant-nf4, quant-mxfp4 (N x K input) and their bf16-input
// forms quant-nvfp4-bf16, quant-nf4-bf16, quant-mxfp4-bf16;
// prod-nvfp4, prod-nf4 (the exact products through the library's driver,
// linear_nvfp4 / linear_nf4: the GEMV, small-batch or panel GEMM its
// thresholds pick for M, with the table's kernels; threads as the driver
// splits them); prod8-nvfp4 (fast mode's integer product,
// linear_nvfp4_int8: activations quantized in the call, the integer GEMV
// or the packed panels as M picks); actq (fast mode's activation
// quantizer, i8_quantize_act, on the M x K activations, rows split over the
// threads; N is ignored).
// MXFP4 reads its E8M0 scales in place on both sides. hot: one copy of the
// operands; dram: copies rotated through the larger of 150 MB and twice the
// L3 the OS reports (a 260 MiB L3 is not DRAM). Environment:
// AB_SIGNS=b (bit 0: the old side, bit 1: the new side checks the NVFP4
// sign rule, NvWeights::signs), AB_ANY_SCALE=1 (a few E4M3 scale codes of
// any value, zero and subnormal ones among them), AB_TILES=b (bit 0: the
// old side, bit 1: the new side also gets the codes in the tile order of
// i8_tile_codes, NvWeights::tiles / Nf4Weights::tiles, as a fast-mode
// session linear does, with the scales and absmax in the tile order for a
// table that reads those too; a table that does not read tiles ignores
// them),
// AB_Q_ALIGN=a[,b] (the weight codes start at a byte a mod 64 on the old
// side and b, default a, on the new side: with the same table on both
// sides, the cost of a misaligned weight measured in one process; unset,
// both read the std::vector's own, 16 mod 64 for large ones under glibc),
// AB_GEMV_TASKS=a[,b] (the prod-* drivers split a GEMV's rows into a tasks
// per thread on the old side, b on the new; default the library's 4),
// AB_SB_MAX_M=a,b (the largest M of the exact small-batch kernels per
// side, SmallBatchConfig::max_m; 0: the table's),
// AB_SB_MIN_M=a,b (the least M of the small-batch kernels per side,
// SmallBatchConfig::min_m; default 9: below it the GEMV),
// AB_I8_MIN_WORK=a,b (the least work of an integer GEMV task that splits
// the rows of x, in Ki multiply-adds per side; 0: the library's 256).
// Prints one JSON object per run.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/thread_pool.h"
#include "formats/codec.h"
#include "kernels/cpu_ops.h"
#include "kernels/kernel_table.h"
#include "kernels/portable.h"

#ifndef AB_TABLE
#error "AB_TABLE: the table's name (avx2, avx512, avx512_vnni, avx_vnni, ...)"
#endif
#define AB_CAT2(a, b) a##b
#define AB_CAT(a, b) AB_CAT2(a, b)

namespace q4::kern {
const KernelTable& AB_CAT(AB_TABLE, _table)();
const KernelTable& AB_CAT(AB_TABLE, _table_old)();
}  // namespace q4::kern

namespace {

using namespace q4::kern;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Rows [0, n) over `threads` in ranges starting on multiples of 16 (as the
// library's drivers split them; tiles need it).
template <class F>
void split_rows(int32_t threads, int64_t n, F&& f) {
  auto at = [&](int64_t t) { return t == threads ? n : n * t / threads / 16 * 16; };
  q4::parallel_for(threads, threads, [&](int64_t t) {
    if (at(t) < at(t + 1)) f(at(t), at(t + 1));
  });
}

// Environment variable `name` as "a" (both sides) or "a,b" (old side,
// new side); unset: `unset` for both.
std::array<int32_t, 2> side_pair(const char* name, int32_t unset) {
  const char* e = std::getenv(name);
  if (e == nullptr) return {unset, unset};
  const int32_t a = std::atoi(e);
  const char* comma = std::strchr(e, ',');
  return {a, comma != nullptr ? std::atoi(comma + 1) : a};
}

struct Copy {  // one copy of the operands
  std::vector<uint8_t> q, s, e8m0, tiles, tile_scales, tile_flags;
  std::vector<float> tile_absmax;
  std::vector<uint8_t> qa[2];                 // AB_Q_ALIGN copies of q per side
  const uint8_t* qp[2] = {nullptr, nullptr};  // the codes each side reads
  std::vector<float> absmax, x;
  std::vector<uint16_t> xb;  // bf16 input of the quant-*-bf16 ops
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s OP M N K hot|dram [reps] [threads]\n", argv[0]);
    return 2;
  }
  const std::string op = argv[1];
  const int32_t m = std::atoi(argv[2]);
  const int64_t n = std::atoll(argv[3]), k = std::atoll(argv[4]);
  const bool hot = std::string(argv[5]) == "hot";
  const int reps = argc > 6 ? std::atoi(argv[6]) : 40;
  const int32_t threads = argc > 7 ? std::atoi(argv[7]) : 2;
  const bool quant = op.rfind("quant-", 0) == 0;
  const bool bf16_in = quant && op.size() > 5 && op.compare(op.size() - 5, 5, "-bf16") == 0;
  const bool actq = op == "actq";
  const bool mx = op.find("mxfp4") != std::string::npos;
  const int signs = std::getenv("AB_SIGNS") != nullptr ? std::atoi(std::getenv("AB_SIGNS")) : 0;
  const bool any_scale = std::getenv("AB_ANY_SCALE") != nullptr;
  const int tiles_bits = std::getenv("AB_TILES") != nullptr ? std::atoi(std::getenv("AB_TILES")) : 0;
  // AB_Q_ALIGN=a,b: the codes at a (old side), b (new side) mod 64 (-1: as
  // allocated); AB_GEMV_TASKS=a,b: the drivers' GEMV tasks per thread per
  // side (0: the library's default).
  const std::array<int32_t, 2> q_align = side_pair("AB_Q_ALIGN", -1),
                               gemv_tasks = side_pair("AB_GEMV_TASKS", 0),
                               i8_min_work = side_pair("AB_I8_MIN_WORK", 0),
                               sb_max_m = side_pair("AB_SB_MAX_M", 0), sb_min_m = side_pair("AB_SB_MIN_M", 9);
  // (set on both sides when given: a 0 there is the default, not the other
  // side's value left in place)
  const bool sb_given = std::getenv("AB_SB_MAX_M") != nullptr || std::getenv("AB_SB_MIN_M") != nullptr,
             min_work_given = std::getenv("AB_I8_MIN_WORK") != nullptr;
  const bool with_tiles = tiles_bits != 0 && !quant && k % 128 == 0 && n >= 16;
  // (the drivers, prod*, and the quantizer take K = 64 as well)
  const int64_t min_k = op.rfind("prod", 0) == 0 || actq ? 64 : 128;
  if (m < 1 || n < 16 || k < min_k || k % 64 != 0 || reps < 1 || threads < 1) {
    std::fprintf(
        stderr,
        "need M >= 1, N >= 16, K >= 128 (prod*, actq: 64) with K %% 64 == 0, reps and threads >= 1\n");
    return 2;
  }

  // Operands.
  const int64_t wbytes = n * k / 2 + n * k / 16;
  const int64_t in_bytes = actq ? int64_t{m} * k * 4 : quant ? n * k * (bf16_in ? 2 : 4) : wbytes;
  int64_t rotate_bytes = int64_t{150} << 20;
#ifdef _SC_LEVEL3_CACHE_SIZE
  rotate_bytes = std::max<int64_t>(rotate_bytes, 2 * int64_t{sysconf(_SC_LEVEL3_CACHE_SIZE)});
#endif
  const int copies = hot ? 1 : static_cast<int>(std::max<int64_t>(2, rotate_bytes / in_bytes + 1));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  float lut[16];
  for (uint32_t c = 0; c < 16; ++c) lut[c] = q4::fmt::nf4_decode(c);
  std::vector<Copy> cp(static_cast<size_t>(copies));
  std::vector<float> x(static_cast<size_t>(std::max<int64_t>(m, 1) * k));
  for (float& v : x) v = nd(rng);
  for (Copy& c : cp) {
    if (quant) {
      c.x.resize(static_cast<size_t>(n * k));
      for (float& v : c.x) v = nd(rng);
      if (bf16_in) {
        c.xb.resize(c.x.size());
        for (size_t e = 0; e < c.x.size(); ++e) {
          uint32_t u;
          std::memcpy(&u, &c.x[e], 4);
          c.xb[e] = static_cast<uint16_t>(u >> 16);
        }
      }
      continue;
    }
    c.q.resize(static_cast<size_t>(n * k / 2));
    for (uint8_t& b : c.q) b = static_cast<uint8_t>(rng());
    for (int t = 0; t < 2; ++t) {
      c.qp[t] = c.q.data();
      if (q_align[t] < 0) continue;
      c.qa[t].resize(c.q.size() + 64);
      uint8_t* a = c.qa[t].data();
      a += (q_align[t] - static_cast<int64_t>(reinterpret_cast<uintptr_t>(a) % 64) + 64) % 64;
      std::memcpy(a, c.q.data(), c.q.size());
      c.qp[t] = a;
    }
    c.s.resize(static_cast<size_t>(n * k / 16));
    for (uint8_t& b : c.s) {
      b = static_cast<uint8_t>(0x28 + rng() % 0x20);
      if (any_scale && rng() % 64 == 0) b = static_cast<uint8_t>(rng() & 0x7f);
    }
    c.absmax.resize(static_cast<size_t>(n * k / 64));
    for (float& a : c.absmax) a = 0.5f + static_cast<float>(rng() % 1000) / 1000.0f;
    c.e8m0.resize(static_cast<size_t>(n * k / 32));
    for (uint8_t& b : c.e8m0) b = static_cast<uint8_t>(121 + rng() % 10);
    if (with_tiles) {
      c.tiles.resize(static_cast<size_t>(i8_tile_bytes(n, k)));
      i8_tile_codes(c.qp[0], n, k, c.tiles.data());
      // The scales and absmax in the tile order too (a side's table reads
      // them where i8_reads_tile_scales / _absmax say, as a linear keeps
      // them).
      c.tile_scales.resize(static_cast<size_t>(n / 16 * i8_tile_scale_group_bytes(k)));
      c.tile_flags.resize(static_cast<size_t>(n / 16));
      i8_tile_scales(c.s.data(), n, k, c.tile_scales.data(), c.tile_flags.data());
      c.tile_absmax.resize(static_cast<size_t>(i8_tile_absmax_floats(n, k, 64)));
      i8_tile_absmax(c.absmax.data(), n, k, 64, c.tile_absmax.data());
    }
  }

  const KernelTable* tb[2] = {&AB_CAT(AB_TABLE, _table_old)(), &AB_CAT(AB_TABLE, _table)()};
  const KernelTable& kq = *tb[1];
  // int8 activations (quantized once, by the new table: both sides read them)
  std::vector<int8_t> xq(static_cast<size_t>(m * k));
  std::vector<float> xs(static_cast<size_t>(m * k / 16));
  std::vector<int32_t> xc(xs.size());
  const I8Nf4Code code = i8_nf4_codebook(lut);
  const bool nf4 = op.find("nf4") != std::string::npos;
  if (op.rfind("i8-", 0) == 0) {
    kq.i8_quantize_act(x.data(), k, m, k, xq.data(), k, xs.data(), xc.data(), k / 16,
                       nf4 ? kI8Nf4Bias : kI8WeightBias);
  }

  // Outputs per side.
  std::vector<float> y[2];
  std::vector<uint8_t> qo[2], so[2];
  std::vector<float> ao[2];
  std::vector<int8_t> aq[2];
  std::vector<float> as[2];
  std::vector<int32_t> ac[2];
  for (int t = 0; t < 2; ++t) {
    if (actq) {
      aq[t].assign(static_cast<size_t>(m * k), 0);
      as[t].assign(static_cast<size_t>(m * k / 16), 0.0f);
      ac[t].assign(as[t].size(), 0);
    }
    y[t].assign(static_cast<size_t>(m * n), 0.0f);
    qo[t].assign(static_cast<size_t>(n * k / 2), 0);
    so[t].assign(static_cast<size_t>(n * k / 16), 0);
    ao[t].assign(static_cast<size_t>(n * k / 64), 0.0f);
  }

  auto call = [&](int t, const Copy& c) {
    const KernelTable& kt = *tb[t];
    if (gemv_tasks[t] > 0) set_gemv_tasks_per_thread(gemv_tasks[t]);
    if (sb_given) {
      SmallBatchConfig sbc = small_batch_config();
      sbc.max_m = sb_max_m[t];
      sbc.min_m = sb_min_m[t];
      set_small_batch_config(sbc);
    }
    if (min_work_given) set_i8_xsplit_min_task_work(int64_t{i8_min_work[t]} << 10);
    ScaleSigns sg;
    NvWeights w;
    w.q = c.qp[t];
    w.s = c.s.data();
    w.g = 0.01f;
    w.k = k;
    if ((signs & (1 << t)) != 0) w.signs = &sg;
    const bool tiled = with_tiles && (tiles_bits & (1 << t)) != 0;
    if (tiled) w.tiles = c.tiles.data();
    if (tiled && kt.i8_reads_tile_scales && !mx) {
      w.tile_scales = c.tile_scales.data();
      w.tile_flags = c.tile_flags.data();
    }
    if (mx) {
      w.s = nullptr;
      w.e8m0 = c.e8m0.data();
      w.g = 1.0f;
    }
    Nf4Weights f;
    f.q = c.qp[t];
    f.absmax = c.absmax.data();
    f.lut = lut;
    f.k = k;
    f.blocksize = 64;
    f.block_shift = 6;
    if (tiled) f.tiles = c.tiles.data();
    if (tiled && kt.i8_reads_tile_absmax) f.tile_absmax = c.tile_absmax.data();
    const ActRows xr(x.data());
    float* yt = y[t].data();
    if (op == "gemv-nvfp4" || op == "gemv-mxfp4") {
      split_rows(threads, n, [&](int64_t a, int64_t b) { kt.nvfp4_gemv(xr, k, m, w, a, b, yt + a, n); });
    } else if (op == "prod-nvfp4") {
      linear_nvfp4(kt, xr, m, w, n, yt, threads);
    } else if (op == "prod8-nvfp4") {
      linear_nvfp4_int8(kt, xr, m, w, n, yt, threads);
    } else if (op == "prod-nf4") {
      linear_nf4(kt, xr, m, f, n, yt, threads);
    } else if (op == "gemv-nf4") {
      split_rows(threads, n, [&](int64_t a, int64_t b) { kt.nf4_gemv(xr, k, m, f, a, b, yt + a, n); });
    } else if (op == "i8-nvfp4" || op == "i8-mxfp4") {
      split_rows(threads, n, [&](int64_t a, int64_t b) {
        kt.i8_gemv_nvfp4(xq.data(), k, xs.data(), xc.data(), k / 16, m, w, a, b, 0.5f, yt + a, n);
      });
    } else if (op == "i8-nf4") {
      split_rows(threads, n, [&](int64_t a, int64_t b) {
        kt.i8_gemv_nf4(xq.data(), k, xs.data(), xc.data(), k / 16, m, f, code.biased, a, b, code.post, yt + a,
                       n);
      });
    } else if (actq) {
      split_rows(threads, m, [&](int64_t a, int64_t b) {
        kt.i8_quantize_act(x.data() + a * k, k, b - a, k, aq[t].data() + a * k, k,
                           as[t].data() + a * (k / 16), ac[t].data() + a * (k / 16), k / 16, kI8WeightBias);
      });
    } else if (op == "quant-nvfp4" || op == "quant-nvfp4-bf16") {
      split_rows(threads, n, [&](int64_t a, int64_t b) {
        if (bf16_in) {
          kt.nvfp4_quantize_checked16(c.xb.data() + a * k, true, b - a, k, 0.5f, qo[t].data() + a * k / 2,
                                      so[t].data() + a * k / 16);
        } else {
          kt.nvfp4_quantize_checked(c.x.data() + a * k, b - a, k, 0.5f, qo[t].data() + a * k / 2,
                                    so[t].data() + a * k / 16);
        }
      });
    } else if (op == "quant-mxfp4" || op == "quant-mxfp4-bf16") {
      split_rows(threads, n, [&](int64_t a, int64_t b) {
        if (bf16_in) {
          kt.mxfp4_quantize16(c.xb.data() + a * k, true, b - a, k, qo[t].data() + a * k / 2,
                              so[t].data() + a * k / 32);
        } else {
          kt.mxfp4_quantize(c.x.data() + a * k, b - a, k, qo[t].data() + a * k / 2,
                            so[t].data() + a * k / 32);
        }
      });
    } else if (op == "quant-nf4" || op == "quant-nf4-bf16") {
      const FloatPtr in =
          op == "quant-nf4" ? FloatPtr{c.x.data(), FType::F32} : FloatPtr{c.xb.data(), FType::BF16};
      split_rows(threads, n, [&](int64_t a, int64_t b) {
        kt.nf4_quantize_blocks(in, n * k, 64, a * k / 64, b * k / 64, qo[t].data(), ao[t].data());
      });
    } else {
      return false;
    }
    return true;
  };

  std::vector<double> ts[2];
  int next_copy = 0;
  // Warm-up: at least two rounds and 0.3 s of calls. On a 2-vCPU VM the
  // thread pool's worker shared the main thread's CPU for about the first
  // 100 ms of calls (the scheduler moved it later), so a short run's
  // median was one thread's time whatever the thread count.
  int warm = 0;
  for (const double w0 = now(); warm < 2 || now() - w0 < 0.3; ++warm) {
    for (int t = 0; t < 2; ++t) {
      if (!call(t, cp[static_cast<size_t>(next_copy++ % copies)])) {
        std::fprintf(stderr, "unknown OP %s\n", op.c_str());
        return 2;
      }
    }
  }
  for (int r = 0; r < reps; ++r) {
    for (int t0 = 0; t0 < 2; ++t0) {
      const int t = (r % 2 != 0) ? 1 - t0 : t0;  // alternate which side goes first
      const Copy& c = cp[static_cast<size_t>(next_copy++ % copies)];
      const double t1 = now();
      call(t, c);
      ts[t].push_back(now() - t1);
    }
  }
  // One more call per side on copy 0, whose outputs are compared.
  for (int t = 0; t < 2; ++t) call(t, cp[0]);
  for (auto& v : ts) std::sort(v.begin(), v.end());
  const double old_ms = ts[0][ts[0].size() / 2] * 1e3, new_ms = ts[1][ts[1].size() / 2] * 1e3;
  const bool same = actq ? aq[0] == aq[1] && ac[0] == ac[1] &&
                               std::memcmp(as[0].data(), as[1].data(), as[0].size() * 4) == 0
                    : quant ? qo[0] == qo[1] && so[0] == so[1] &&
                                  std::memcmp(ao[0].data(), ao[1].data(), ao[0].size() * 4) == 0
                            : std::memcmp(y[0].data(), y[1].data(), y[0].size() * 4) == 0;
  std::printf(
      "{\"op\": \"%s\", \"m\": %d, \"n\": %lld, \"k\": %lld, \"data\": \"%s\", \"threads\": %d, \"reps\": "
      "%d, "
      "\"old_ms\": %.4f, \"new_ms\": %.4f, \"old_gb_per_s\": %.2f, \"new_gb_per_s\": %.2f, \"speed\": %.4f, "
      "\"same_bits\": %s}\n",
      op.c_str(), m, static_cast<long long>(n), static_cast<long long>(k), hot ? "hot" : "dram", threads,
      reps, old_ms, new_ms, static_cast<double>(in_bytes) / old_ms / 1e6,
      static_cast<double>(in_bytes) / new_ms / 1e6, old_ms / new_ms, same ? "true" : "false");
  return same ? 0 : 1;
}
