#include "kernels/cpu_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include <pthread.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#endif

#include "common/thread_pool.h"
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_types.h"
#include "kernels/portable.h"
#include "nvfp4/q4_base.h"

// Under AddressSanitizer a kept scratch block (aligned_floats) is
// poisoned until it is handed out again, so a use after its AlignedFloats
// is gone still shows.
#if defined(__SANITIZE_ADDRESS__)
#define Q4_SCRATCH_POISON 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define Q4_SCRATCH_POISON 1
#endif
#endif
#ifdef Q4_SCRATCH_POISON
#include <sanitizer/asan_interface.h>
#define Q4_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define Q4_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define Q4_POISON(p, n) ((void)(p), (void)(n))
#define Q4_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace q4::kern {
namespace {

std::atomic<int64_t> g_kc{GemmBlocking{}.kc};
std::atomic<int64_t> g_mc{GemmBlocking{}.mc};
std::mutex g_sb_mutex;
SmallBatchConfig g_sb;  // guarded by g_sb_mutex

int32_t threads_or_default(int32_t threads) {
  return threads > 0 ? threads : default_num_threads();
}

// The least input (bytes) that a quantization takes as read from memory,
// coded by the table's far entries (nvfp4_quantize_checked_far): beyond
// any L2 and most of an L3's share per core. Below it, in cache, those
// entries' extra prefetches cost 2-7 % (measured with 1-32 MiB inputs on
// the Xeon where they are 1.14-1.22x from DRAM).
constexpr int64_t kQuantizeFarMinBytes = int64_t{64} << 20;

// Elements of input per task of a quantization pass over n elements: up
// to 256 Ki (1 MiB of fp32), at least four tasks per thread. Each task
// starts its own stream from DRAM, and the kernels prefetch only within a
// task, so a task's first groups wait on memory: on a Zen 4, 2 threads,
// 11008 x 4096 fp32 alternating call by call, 1 MiB against 64 KiB tasks
// ran NVFP4 with the scale given 1.09-1.18x, MXFP4 1.17x, NF4 (its tasks
// were 256 KiB) 1.06-1.07x, the global amax pass of a computed scale
// 1.03x. (16-bit input converted into a buffer goes in pieces within a
// task: for_f32_pieces.)
int64_t quantize_task_elems(int64_t n, int32_t threads) {
  constexpr int64_t kSmall = 16384, kLarge = 262144;
  return std::clamp<int64_t>(n / (4 * int64_t{threads_or_default(threads)}), kSmall, kLarge);
}

// Packed weight panels per task of the panel GEMMs (panel_gemm,
// i8_product): as many as fit kPanelGroupBytes of `panel_bytes` each, but
// no fewer than two tasks per thread while there are panels for them.
constexpr int64_t kPanelGroupBytes = int64_t{256} << 10;
int64_t panel_group(int64_t panels, int64_t panel_bytes, int32_t threads) {
  const int64_t by_size = std::max<int64_t>(1, kPanelGroupBytes / panel_bytes);
  const int64_t by_tasks = std::max<int64_t>(1, panels / (int64_t{2} * threads_or_default(threads)));
  return std::min(by_size, by_tasks);
}

// Whether the integer panel product's `tasks` (groups of panels, each
// over all rows of X) run instead as row ranges, each over all the
// panels: where every packed panel fits one group (panels x panel_bytes
// within kPanelGroupBytes) and X has a micro-kernel's rows for each range.
// Each range packs the whole weight again (N K bytes, next to the range's
// M N K / tasks multiply-adds), reads only its own rows of X, and writes
// whole rows of the output: tasks over the columns of one output row
// write the cache line their borders share whenever the output is not
// aligned to 64 bytes (malloc's 16 mod 64), which the threads then take
// from each other at every micro-kernel call. Measured on a Zen 4, 2
// threads, one-process A/B, M = 80-512: N, K = 64-256 1.07-1.72x with the
// output aligned, 1.2-1.77x at 16 mod 64; N K up to 512 x 512 and N =
// 2048, K = 128 1.0x. (The exact panel GEMM keeps its groups: its fp32
// panels, 4 bytes a weight, then no longer fit L1, and row ranges measured
// 0.87-0.90x at N = 128-256, K = 128-256.)
bool panel_rows_instead(int64_t panels, int64_t panel_bytes, int64_t tasks, int64_t m, int32_t mr) {
  return tasks > 1 && panels * panel_bytes <= kPanelGroupBytes && m / std::max(1, mr) >= tasks;
}

std::atomic<int32_t> g_gemv_tasks_per_thread{4};

// A task's least work, in multiply-adds (or bytes for the scale passes):
// below it the pool's hand-off (1.5-2.5 us on a 2-vCPU VM, even with the
// workers awake; a small weight also changes core from call to call) and
// a task's own set-up (staging x, the kernel's prologue and reductions)
// cost more than a second thread saves. 64 Ki multiply-adds of the fp32
// kernels (about 4 us of one thread at K = 256), 512 Ki of the integer
// ones (2-4x faster per multiply-add at these sizes). Measured on an
// Emerald Rapids-class Xeon, 2 threads against 1 alternating batch by
// batch (nvfp4-bench --only calls): with 32 Ki / 256 Ki, 2 threads were
// 1.1-1.5x slower than one at 64x128 M = 8 exact and 256x256 M = 1 / 8
// fast; now never slower, and 1024x1024 keeps 1.4-1.8x.
constexpr int64_t kMinTaskWork = int64_t{64} << 10;
constexpr int64_t kMinTaskWorkInt8 = int64_t{512} << 10;
constexpr int64_t kI8XSplitMinTaskWork = kMinTaskWorkInt8 / 2;         // (i8_product's split of x)
std::atomic<int64_t> g_i8_xsplit_min_task_work{kI8XSplitMinTaskWork};  // (set_i8_xsplit_min_task_work)

// Tasks of `chunk` rows of N: tasks_per_thread per thread, fewer where the
// whole product (row_work: the work of one row) holds less than min_work
// per task, and then a multiple of the thread count (equal tasks finish
// together: 3 tasks on 2 threads take two tasks' time, 2 take one and a
// half); at least 16 rows each.
int64_t gemv_chunk(int64_t n, int32_t threads, int64_t row_work, int64_t min_work = kMinTaskWork) {
  const int64_t t = threads_or_default(threads);
  int64_t tasks = std::max<int64_t>(1, int64_t{g_gemv_tasks_per_thread.load(std::memory_order_relaxed)} * t);
  const int64_t w = std::max<int64_t>(1, row_work);
  const int64_t by_work =
      n > std::numeric_limits<int64_t>::max() / w ? tasks : std::max<int64_t>(1, n * w / min_work);
  if (by_work < tasks) tasks = by_work > t ? by_work / t * t : by_work;
  return std::max<int64_t>(16, (n + tasks - 1) / tasks);
}

std::atomic<int64_t> g_e8m0_piece_bytes{int64_t{256} << 10};

// A GEMV task's rows [n0, n1) of w: run(wl, j0, j1, r0) runs rows
// [j0, j1) of wl with outputs from row r0 of w. Once, on w itself (j0 = r0
// = n0), unless w has MXFP4's E8M0 scales (NvWeights::e8m0) that the
// GEMV does not read (reads_e8m0 false): then in pieces of whole groups of
// 16 rows holding about e8m0_piece_bytes() of E4M3 codes, each piece's
// codes made into the task's own buffer right before its rows run. (Each
// piece is a GEMV call, which stages x again: pieces of 256 KiB keep that
// to about 2 % of a piece's codes at K = 11008.) Swizzled scales
// (NvWeights::swizzled) likewise, in pieces of whole 128-row bands (a
// task whose rows start or end inside a band makes that band's rows up to
// its own): the scales are read once, from the caller's buffer into one
// that stays in cache, where unswizzling all of them first wrote them to
// fresh memory and the GEMV read them back (see docs/performance.md).
// The buffers are per-thread scratch blocks (aligned_floats), not zeroed.
template <class Run>
void gemv_rows(bool reads_e8m0, const NvWeights& w, int64_t n0, int64_t n1, const Run& run) {
  const int64_t kb = w.k / 16;
  if (w.s == nullptr && w.swizzled != nullptr) {
    const int64_t band_bytes = 128 * fmt::swizzled_cols(kb);
    const int64_t piece = std::max<int64_t>(128, e8m0_piece_bytes() / std::max<int64_t>(1, kb) / 128 * 128);
    const AlignedFloats buf = aligned_floats((std::min(piece, n1 - n0 / 128 * 128) * kb + 3) / 4);
    uint8_t* lin = reinterpret_cast<uint8_t*>(buf.get());
    for (int64_t a = n0; a < n1;) {
      const int64_t b0 = a / 128 * 128, b = std::min(n1, b0 + piece);
      unswizzle_scales_cached(w.swizzled + (b0 / 128) * band_bytes, b - b0, kb, lin);
      NvWeights wl = w;
      wl.q = w.q + b0 * (w.k / 2);
      wl.s = lin;
      wl.swizzled = nullptr;
      run(wl, a - b0, b - b0, a);
      a = b;
    }
    return;
  }
  if (w.s != nullptr || w.e8m0 == nullptr || reads_e8m0) {
    run(w, n0, n1, n0);
    return;
  }
  const int64_t piece = std::max<int64_t>(16, e8m0_piece_bytes() / std::max<int64_t>(1, kb) / 16 * 16);
  const AlignedFloats buf = aligned_floats((std::min(piece, n1 - n0) * kb + 3) / 4);
  uint8_t* codes = reinterpret_cast<uint8_t*>(buf.get());
  for (int64_t r0 = n0; r0 < n1; r0 += piece) {
    const int64_t r1 = std::min(n1, r0 + piece);
    e8m0_to_e4m3(w.e8m0 + r0 * (w.k / 32), (r1 - r0) * (w.k / 32), w.e8m0_t, codes);
    NvWeights wl = w;
    wl.q = w.q + r0 * (w.k / 2);
    wl.s = codes;
    wl.e8m0 = nullptr;
    run(wl, 0, r1 - r0, r0);
  }
}

// w with linear E4M3 scales: w itself, or (NvWeights::e8m0,
// NvWeights::swizzled) all of its codes made into buf first, for the paths
// that read whole columns of rows.
NvWeights with_e4m3_scales(const NvWeights& w, int64_t n, int32_t threads, std::vector<uint8_t>& buf) {
  if (w.s != nullptr || (w.e8m0 == nullptr && w.swizzled == nullptr)) return w;
  const int64_t kb = w.k / 16, chunk = gemv_chunk(n, threads, w.k / 32);
  buf.resize(static_cast<size_t>(n * kb));
  if (w.swizzled != nullptr) {
    unswizzle_scales_parallel(w.swizzled, n, kb, buf.data(), threads);
    NvWeights lin = w;
    lin.s = buf.data();
    lin.swizzled = nullptr;
    return lin;
  }
  parallel_for((n + chunk - 1) / chunk, threads, [&](int64_t t) {
    const int64_t r0 = t * chunk;
    e8m0_to_e4m3(w.e8m0 + r0 * (w.k / 32), (std::min(n, r0 + chunk) - r0) * (w.k / 32), w.e8m0_t,
                 buf.data() + r0 * kb);
  });
  NvWeights all = w;
  all.s = buf.data();
  all.e8m0 = nullptr;
  return all;
}
const Nf4Weights& with_e4m3_scales(const Nf4Weights& w, int64_t, int32_t, std::vector<uint8_t>&) {
  return w;
}

// The panel GEMM on fp16/bf16 rows of X: each task converts the block of X
// [i0, i1) x [k0, k0 + kc) it is about to multiply into an L2 buffer
// (KernelTable::act_to_f32, rows a cache line apart) and runs a group of
// W panels on it, so X is never copied as a whole and each block is
// converted once per task, not once per panel. Every output gets the
// micro-kernel calls of the fp32 path (same kc, mc and row steps) on the
// same (exactly converted) values: the same bits.
template <class Pack>
void panel_gemm_16bit(const KernelTable& kt, ActRows x, int64_t m, int64_t k, int64_t n, float* y,
                      int32_t threads, int64_t kc, int64_t mc, const Pack& pack) {
  const int32_t nr = kt.panel_nr;
  const int64_t nblocks = (n + nr - 1) / nr;
  const int64_t group = std::max<int64_t>(1, nblocks / (int64_t{4} * threads_or_default(threads)));
  const int64_t ldb = kc + 16;
  parallel_for((nblocks + group - 1) / group, threads, [&](int64_t t) {
    const int64_t p0 = t * group, p1 = std::min(nblocks, p0 + group);
    AlignedFloats panel = aligned_floats(kc * nr);
    AlignedFloats xb = aligned_floats(std::min(mc, m) * ldb);
    for (int64_t i0 = 0; i0 < m; i0 += mc) {
      const int64_t i1 = std::min(m, i0 + mc);
      for (int64_t k0 = 0; k0 < k; k0 += kc) {
        const int64_t kcur = std::min(kc, k - k0);
        for (int64_t i = i0; i < i1; ++i)
          kt.act_to_f32(x.data, x.type, i * k + k0, kcur, xb.get() + (i - i0) * ldb);
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t n0 = p * nr;
          const int32_t rows = static_cast<int32_t>(std::min<int64_t>(nr, n - n0));
          pack(n0, rows, k0, kcur, panel.get());
          for (int64_t i = i0; i < i1; i += kt.micro_mr) {
            const int32_t mr = static_cast<int32_t>(std::min<int64_t>(kt.micro_mr, i1 - i));
            kt.gemm_micro(xb.get() + (i - i0) * ldb, ldb, mr, panel.get(), kcur, y + i * n + n0, n, rows,
                          k0 > 0);
          }
        }
      }
    }
  });
}

template <class Pack>
void panel_gemm(const KernelTable& kt, ActRows xa, int64_t m, int64_t k, int64_t n, float* y, int32_t threads,
                const GemmBlocking& b, const Pack& pack) {
  const int32_t nr = kt.panel_nr;
  const int64_t kc = std::max<int64_t>(16, b.kc / 16 * 16);
  const int64_t mc = std::max<int64_t>(kt.micro_mr, b.mc);
  const int64_t nblocks = (n + nr - 1) / nr;
  if (xa.type != FType::F32) {
    if (m > 0 && n > 0 && k > 0) panel_gemm_16bit(kt, xa, m, k, n, y, threads, kc, mc, pack);
    return;
  }
  const float* x = static_cast<const float*>(xa.data);
  // Rows of X a power-of-two size apart map to the same L1 sets (4K
  // aliasing) and evict each other inside the micro-kernel; copy X once with
  // its rows padded by a cache line.
  AlignedFloats padded;
  int64_t ldx = k;
  if (m == 0 || n == 0 || k == 0) return;
  if (m > kt.micro_mr && (k * 4) % 4096 == 0) {
    ldx = k + 16;
    padded = aligned_floats(m * ldx);
    parallel_for(m, threads, [&](int64_t i) { std::copy(x + i * k, x + i * k + k, padded.get() + i * ldx); });
    x = padded.get();
  }
  // Tasks of `group` panels: each kc slice of the group's panels is decoded
  // once (up to kPanelGroupBytes, in L2) and runs every row of X (in passes of mc
  // rows), and each micro-kernel's rows of X, loaded into L1 by the first
  // panel of the group, serve the others: X is streamed from L3 once per
  // group, not once per panel (measured on a Cascade Lake, M = 512, alternating
  // call by call: see docs/performance.md). The decode is paid once per
  // weight, and every output still adds its kc slices in ascending k0, with
  // the same micro-kernel calls: the bits do not depend on the grouping.
  const int64_t group = panel_group(nblocks, kc * nr * 4, threads);
  const int64_t tasks = (nblocks + group - 1) / group;
  parallel_for(tasks, threads, [&](int64_t t) {
    const int64_t b0 = t * group, b1 = std::min(nblocks, b0 + group);
    AlignedFloats panels = aligned_floats((b1 - b0) * kc * nr);
    for (int64_t k0 = 0; k0 < k; k0 += kc) {
      const int64_t kcur = std::min(kc, k - k0);
      for (int64_t p = b0; p < b1; ++p) {
        pack(p * nr, static_cast<int32_t>(std::min<int64_t>(nr, n - p * nr)), k0, kcur,
             panels.get() + (p - b0) * kc * nr);
      }
      for (int64_t i0 = 0; i0 < m; i0 += mc) {
        const int64_t i1 = std::min(m, i0 + mc);
        for (int64_t i = i0; i < i1; i += kt.micro_mr) {
          const int32_t mr = static_cast<int32_t>(std::min<int64_t>(kt.micro_mr, i1 - i));
          for (int64_t p = b0; p < b1; ++p) {
            const int32_t rows = static_cast<int32_t>(std::min<int64_t>(nr, n - p * nr));
            kt.gemm_micro(x + i * ldx + k0, ldx, mr, panels.get() + (p - b0) * kc * nr, kcur,
                          y + i * n + p * nr, n, rows, k0 > 0);
          }
        }
      }
    }
  });
}

// Activation operands of the integer kernels (KernelTable::i8_micro): M
// rows of K bytes and K / 16 scales and corrections each, rows adjacent,
// in one block (aligned_floats: kept by the thread from call to call).
// Not initialized (the quantizer writes every element; zeroing them was
// 5 % of a fast-mode call at N = K = 64, M = 256).
struct I8Activations {
  AlignedFloats buf;
  BlockPart<int8_t> q;
  BlockPart<float> s;
  BlockPart<int32_t> c;
  int64_t ldq = 0, lds = 0;
  void resize(int64_t m, int64_t k) {
    ldq = k;
    lds = k / 16;
    const int64_t qbytes = (m * ldq + 63) / 64 * 64, sbytes = (m * lds * 4 + 63) / 64 * 64;
    buf = aligned_floats((qbytes + sbytes) / 4 + m * lds);
    auto* base = reinterpret_cast<unsigned char*>(buf.get());
    q.p = reinterpret_cast<int8_t*>(base);
    s.p = reinterpret_cast<float*>(base + qbytes);
    c.p = reinterpret_cast<int32_t*>(base + qbytes + sbytes);
  }
};

// Activations an integer product quantizes itself (I8Activations sized,
// not filled): rows [i0, i1) of x into a by quantize_rows, inside the
// product's own tasks where they take rows of x (the GEMV's split of x),
// else in a pass of their own before it.
struct ActSource {
  ActRows x;
  int32_t bias = 0;
};

constexpr int64_t kI8GemvRowGroup = 8;  // rows of x the integer GEMVs take per register group
constexpr int64_t kI8GemvSplitRowsMaxN = 512;
constexpr int64_t kI8ChunkBlocks = 64;  // K blocks per packed panel (16 KiB of int8)
constexpr int64_t kI8RowBlock = 128;    // rows of X per pass over a packed panel

// Rows [i0, i1) of x quantized into a (sized). A task's rows are adjacent
// in x and in `a`, and a 16-element block never spans two rows (K % 16 ==
// 0): the quantizer takes them as one row of (i1 - i0) K elements, so at
// small K its groups of 16 blocks span rows (at K = 64 one row is 4
// blocks; row by row, the AVX-512 quantizer's reductions over 16 blocks
// served 4). fp16/bf16 rows are converted the task's rows at a time into
// a buffer in cache (KernelTable::act_to_f32) right before.
void quantize_rows(const KernelTable& kt, const ActSource& src, int64_t k, I8Activations& a, int64_t i0,
                   int64_t i1) {
  const int64_t len = (i1 - i0) * k;
  if (len == 0) return;
  AlignedFloats rows;
  const float* xi = nullptr;
  if (src.x.type == FType::F32) {
    xi = static_cast<const float*>(src.x.data) + i0 * k;
  } else {
    rows = aligned_floats(len);
    kt.act_to_f32(src.x.data, src.x.type, i0 * k, len, rows.get());
    xi = rows.get();
  }
  kt.i8_quantize_act(xi, len, 1, len, a.q.data() + i0 * a.ldq, len, a.s.data() + i0 * a.lds,
                     a.c.data() + i0 * a.lds, len / 16, src.bias);
}

// All m rows, in tasks of whole rows of at least kMinQuantizeTask elements
// each (one row per task at K >= 4096; M = 16 rows of K = 256 were 16
// hand-offs).
void quantize_pass(const KernelTable& kt, const ActSource& src, int64_t m, int64_t k, I8Activations& a,
                   int32_t threads) {
  constexpr int64_t kMinQuantizeTask = 4096;
  const int64_t per = std::max<int64_t>(1, kMinQuantizeTask / std::max<int64_t>(1, k));
  parallel_for((m + per - 1) / per, threads,
               [&](int64_t t) { quantize_rows(kt, src, k, a, t * per, std::min(m, (t + 1) * per)); });
}

// y = (fixed-order integer block product) * post, split over panels of 16
// rows of W; every output is one thread's sequence, so the result does not
// depend on the thread count. gemv(i0, m, n0, n1, y) is the table's
// integer GEMV for rows i0 .. i0+m-1 of x (nullptr-able: `use_gemv`),
// pack(n0, rows, b0, nb, wq, ws) its panel packer for the weight format.
// Whether i8_product runs the table's integer GEMV (use_gemv: it has one)
// for m rows of x: up to KernelTable::i8_gemv_max_m rows with k % 128 == 0
// (k % 64 == 0 on tables with i8_gemv_k64).
bool i8_runs_gemv(const KernelTable& kt, int64_t m, int64_t k, bool use_gemv) {
  return m <= std::max(kI8GemvMaxRows, kt.i8_gemv_max_m) && use_gemv &&
         (k % 128 == 0 || (kt.i8_gemv_k64 && k % 64 == 0));
}

// The rows i8_runs_gemv gives it run the GEMV, more the packed panels.
// GEMV and panels compute the same fixed sequence, so the bits do not
// depend on the path. seen(n0, n1): called by each panel task for its
// weight rows (the GEMV entries check their own: NvWeights::signs).
// small: the packer's biased weights are at most kI8MaxBiasedNvfp4 (the
// table's i8_micro_small / i8_micro2_small then run, where it has them).
// src (null: `a` is filled already): the activations to quantize into
// `a` first (sized by the caller), or, where the GEMV's tasks take rows
// of x, inside each task for its rows: one hand-off to the pool fewer
// per call, and the rows quantized on the core that reads them.
template <class Gemv, class Pack, class Seen>
void i8_product(const KernelTable& kt, I8Activations& a, const ActSource* src, int64_t m, int64_t k,
                int64_t n, float post, float* y, int32_t threads, bool use_gemv, bool small, const Gemv& gemv,
                const Pack& pack, const Seen& seen) {
  const int64_t kb = k / 16;
  const auto micro = small && kt.i8_micro_small != nullptr ? kt.i8_micro_small : kt.i8_micro;
  const auto micro2 = small && kt.i8_micro2_small != nullptr ? kt.i8_micro2_small : kt.i8_micro2;
  if (i8_runs_gemv(kt, m, k, use_gemv)) {
    const int64_t chunk = (gemv_chunk(n, threads, m * k, kMinTaskWorkInt8) + 15) / 16 * 16;
    const int64_t tasks = (n + chunk - 1) / chunk, xgroups = (m + kI8GemvRowGroup - 1) / kI8GemvRowGroup;
    // A small weight (N <= kI8GemvSplitRowsMaxN, its codes within
    // kPanelGroupBytes) and several groups of rows of x: tasks split the
    // rows of x instead, each over all of N. A GEMV task stages its rows of
    // x (I8Staged) and sets up each group of 16 weight rows once for them:
    // split over N, every task staged all of x; split over x, every task
    // sets up all of the (few) weight groups, and writes whole output
    // rows. The bits are those of any M (the integer kernels' fixed
    // sequence). Measured on a Zen 4, 2 threads, one-process A/B, fast
    // mode M = 16-64: N = 64-512, K = 128-4096 1.03-1.49x (NF4
    // 1.31-1.77x), N = 512, K = 128, M = 64 0.93-1.0x; at N = 1024-2048
    // (K = 64-256, M = 64) 0.64-0.97x, hence the bounds (with one task per
    // thread, below, N = 1024-2048 measured 0.81-1.12x: kept).
    // At most one task per thread: each sets up every weight group, so
    // more tasks than threads only repeat that (Zen 4, 2 threads, M =
    // 32-64, N = 256-512, K = 128-1024, 4 tasks before: 1.15-1.54x). Where
    // each task gets at least two groups of rows of x, the split's own least
    // work per task (g_i8_xsplit_min_task_work, 256 Ki multiply-adds: its
    // tasks quantize their own rows and need no N-split set-up) decides
    // the count; otherwise the N split's. Zen 4, tools/ab prod8-nvfp4 both
    // orders: N = 64-128, K = 128-256, M = 32-64, single tasks before:
    // 1.42-1.57x; M <= 24 unchanged (the lower least work for every
    // integer GEMV task lost 0.70-0.82x at M = 8-16, N = 128-256).
    int64_t xtasks = 0;
    if (n <= kI8GemvSplitRowsMaxN && n * k / 2 <= kPanelGroupBytes && xgroups > 1) {
      const int64_t nthreads = threads_or_default(threads);
      const int64_t by_work = m * n * k / g_i8_xsplit_min_task_work.load(std::memory_order_relaxed);
      xtasks = std::min({by_work, xgroups / 2, nthreads});
      if (xtasks < 2) xtasks = std::min({tasks, xgroups, nthreads});
    }
    if (xtasks > 1) {
      const int64_t rows_per = (xgroups + xtasks - 1) / xtasks * kI8GemvRowGroup;
      parallel_for((m + rows_per - 1) / rows_per, threads, [&](int64_t t) {
        const int64_t i0 = t * rows_per, i1 = std::min(m, i0 + rows_per);
        if (src != nullptr) quantize_rows(kt, *src, k, a, i0, i1);
        gemv(i0, static_cast<int32_t>(i1 - i0), 0, n, y + i0 * n);
      });
      return;
    }
    if (src != nullptr) quantize_pass(kt, *src, m, k, a, threads);
    parallel_for(tasks, threads, [&](int64_t t) {
      const int64_t n0 = t * chunk, n1 = std::min(n, n0 + chunk);
      gemv(0, static_cast<int32_t>(m), n0, n1, y + n0);
    });
    return;
  }
  // Tasks of `group` panels, as panel_gemm: each chunk of the group's
  // panels is packed once and runs every row of X (in passes of
  // kI8RowBlock rows), each micro-kernel's rows of X serving the whole
  // group from L1; every output adds its chunks in ascending b0 whatever
  // the order of the passes and panels.
  const int64_t panels = (n + kI8PanelNr - 1) / kI8PanelNr;
  const int64_t chunk = std::min(kb, kI8ChunkBlocks);
  const int64_t wq_bytes = chunk * 256, ws_floats = chunk * kI8PanelNr;
  // Groups of at least two panels where there are two (micro2 runs a pair
  // of panels per pass over the rows of X; a group of one ran the single-
  // panel micro-kernel), and where the groups alone give fewer than two
  // tasks per thread, the rows of X split too (each row range packs its
  // groups' panels again: N K bytes, small next to the M N K of such a
  // product), into ranges of whole micro-kernel row blocks holding at
  // least kMinTaskWorkInt8 each. Measured on an Emerald Rapids-class Xeon,
  // 2 threads: N = 64, K = 256, M = 128 had been 1.5x slower than on one
  // thread (four tasks of one panel each).
  int64_t group =
      std::max(std::min<int64_t>(2, panels), panel_group(panels, wq_bytes + 4 * ws_floats, threads));
  int64_t groups = (panels + group - 1) / group;
  const int64_t want = int64_t{2} * threads_or_default(threads);
  int64_t ranges = 1;
  if (groups < want) {
    const int64_t by_work = m * n * k / std::max<int64_t>(1, groups * kMinTaskWorkInt8);
    ranges = std::max<int64_t>(1, std::min({(want + groups - 1) / groups, by_work, m / kt.i8_micro_mr}));
  }
  // Small weights: the same number of tasks as row ranges of all the
  // panels (panel_rows_instead).
  if (groups > 1 &&
      panel_rows_instead(panels, wq_bytes + 4 * ws_floats, groups * ranges, m, kt.i8_micro_mr)) {
    ranges *= groups;
    group = panels;
    groups = 1;
  }
  // (whole micro-kernel row blocks per range)
  const int64_t range_rows = (m + ranges - 1) / ranges;
  const int64_t rows_per = (range_rows + kt.i8_micro_mr - 1) / kt.i8_micro_mr * kt.i8_micro_mr;
  // One group (the tasks are row ranges over all the panels): each task
  // quantizes its own rows of x first, as the GEMV's split of x does; else
  // a pass of its own before (several tasks read each row).
  const bool rows_in_task = src != nullptr && groups == 1;
  if (src != nullptr && !rows_in_task) quantize_pass(kt, *src, m, k, a, threads);
  parallel_for(groups * ranges, threads, [&](int64_t t) {
    const int64_t gi = t / ranges, ri = t % ranges;
    const int64_t p0 = gi * group, p1 = std::min(panels, p0 + group);
    const int64_t r0 = std::min(m, ri * rows_per), r1 = std::min(m, r0 + rows_per);
    if (r0 >= r1) return;
    if (rows_in_task) quantize_rows(kt, *src, k, a, r0, r1);
    auto rows_of = [&](int64_t p) {
      return static_cast<int32_t>(std::min<int64_t>(kI8PanelNr, n - p * kI8PanelNr));
    };
    if (ri == 0) {
      for (int64_t p = p0; p < p1; ++p) seen(p * kI8PanelNr, p * kI8PanelNr + rows_of(p));
    }
    // (one block: the group's codes, then its scales)
    AlignedFloats wbuf = aligned_floats((p1 - p0) * (wq_bytes / 4 + ws_floats));
    uint8_t* const wq = reinterpret_cast<uint8_t*>(wbuf.get());
    float* const ws = wbuf.get() + (p1 - p0) * wq_bytes / 4;
    for (int64_t b0 = 0; b0 < kb; b0 += chunk) {
      const int64_t nb = std::min(chunk, kb - b0);
      for (int64_t p = p0; p < p1; ++p) {
        pack(p * kI8PanelNr, rows_of(p), b0, nb, wq + (p - p0) * wq_bytes, ws + (p - p0) * ws_floats);
      }
      for (int64_t i0 = r0; i0 < r1; i0 += kI8RowBlock) {
        const int64_t i1 = std::min(r1, i0 + kI8RowBlock);
        for (int64_t i = i0; i < i1; i += kt.i8_micro_mr) {
          const int32_t mr = static_cast<int32_t>(std::min<int64_t>(kt.i8_micro_mr, i1 - i));
          const int8_t* xq = a.q.data() + i * a.ldq + b0 * 16;
          const float* xs = a.s.data() + i * a.lds + b0;
          const int32_t* xc = a.c.data() + i * a.lds + b0;
          for (int64_t p = p0; p < p1;) {
            const uint8_t* pq = wq + (p - p0) * wq_bytes;
            const float* ps = ws + (p - p0) * ws_floats;
            float* yp = y + i * n + p * kI8PanelNr;
            if (micro2 != nullptr && p + 1 < p1 && rows_of(p) == kI8PanelNr) {
              micro2(xq, a.ldq, xs, xc, a.lds, mr, pq, wq_bytes, ps, ws_floats, nb, yp, n, rows_of(p + 1),
                     b0 > 0);
              p += 2;
            } else {
              micro(xq, a.ldq, xs, xc, a.lds, mr, pq, ps, nb, yp, n, rows_of(p), b0 > 0);
              ++p;
            }
          }
        }
        // After the last K chunk, the row block's outputs times `post`
        // while they are in cache (a pass over all of the task's rows at
        // the end had read them back from L2: K = 64, N = 256, M = 512, 2
        // threads, 1.18x on an Emerald Rapids-class Xeon).
        if (b0 + nb == kb) {
          const int64_t n0 = p0 * kI8PanelNr, n1 = std::min(n, p1 * kI8PanelNr);
          for (int64_t i = i0; i < i1; ++i) {
            for (int64_t j = n0; j < n1; ++j) y[i * n + j] *= post;
          }
        }
      }
    }
  });
}

// (MXFP4's E8M0 scales: as linear_packed.)
void i8_product_nvfp4(const KernelTable& kt, I8Activations& a, const ActSource* src, int64_t m,
                      const NvWeights& w_in, int64_t n, float post, float* y, int32_t threads,
                      ScaleSigns* signs) {
  const bool use_gemv = kt.i8_gemv_nvfp4 != nullptr;
  std::vector<uint8_t> made;
  const NvWeights w = i8_runs_gemv(kt, m, w_in.k, use_gemv) ? w_in : with_e4m3_scales(w_in, n, threads, made);
  NvWeights wg = w;
  wg.signs = signs;
  i8_product(
      kt, a, src, m, w.k, n, post, y, threads, use_gemv, true,
      [&](int64_t i0, int32_t mm, int64_t n0, int64_t n1, float* yy) {
        // (the integer GEMV reads E8M0 at any K it takes)
        gemv_rows(kt.reads_e8m0, wg, n0, n1, [&](const NvWeights& wl, int64_t j0, int64_t j1, int64_t r0) {
          kt.i8_gemv_nvfp4(a.q.data() + i0 * a.ldq, a.ldq, a.s.data() + i0 * a.lds, a.c.data() + i0 * a.lds,
                           a.lds, mm, wl, j0, j1, post, yy + (r0 - n0), n);
        });
      },
      [&](int64_t n0, int32_t rows, int64_t b0, int64_t nb, uint8_t* wq, float* ws) {
        kt.i8_pack_nvfp4(w, n0, rows, b0, nb, wq, ws);
      },
      [&](int64_t n0, int64_t n1) {
        if (signs != nullptr) signs->scan(w, n0, n1);
      });
}

}  // namespace

const char* fast_math_fallback_nvfp4(const KernelTable& kt) {
  return kt.i8_native ? nullptr
                      : "this ISA has no integer dot-product kernels: fast mode runs the exact kernels";
}

const char* fast_math_fallback_nf4(const KernelTable& kt) {
  return fast_math_fallback_nvfp4(kt);
}

const char* fast_math_fallback_rows(const KernelTable& kt, int64_t m, int64_t n) {
  // Only where the exact path is the small-batch family (for this weight:
  // short ones take the panel GEMM sooner): above it the exact panel GEMM
  // is slower than the integer kernels on every ISA measured.
  if (kt.i8_fast_max_m > 0 && m > kt.i8_fast_max_m && m <= small_batch_max_m(kt, small_batch_config(), n)) {
    return "the integer kernels of this ISA are not faster than the exact small-batch kernels at this M: "
           "fast mode runs the exact kernels there";
  }
  return nullptr;
}

const char* fast_math_fallback_shape(const KernelTable& kt, int64_t n, int64_t k) {
  if (!kt.i8_native) return nullptr;  // (fast_math_fallback_nvfp4 says why)
  // Quantizing x costs about 0.3 ns a value with AVX-512, an exact GEMV
  // about 0.025 ns a multiply-add, the integer one about half that: below
  // N ~ 24 weight rows the quantization alone costs more than the whole
  // exact product, and the exact kernels gain on the integer ones as M
  // grows (a decoded weight serves M rows). Measured on an Emerald
  // Rapids-class Xeon (AVX-512 VNNI, 2 threads, session linears, N =
  // 8-1024, K = 64-4096, M = 1-512: docs/performance.md, forty-fourth
  // session), fast mode lost to exact at N < 64 for some M at every K, and
  // at K < 64 everywhere. The rule takes N and K only, not M: a linear's
  // fast-mode results then do not depend on the batch (a sequence decoded
  // row by row matches its prefill, as everywhere the integer kernels run).
  if (k < 64 || n < 64) {
    return "fast mode's activation quantization is not paid back on fewer than 64 weight rows (or K < 64): "
           "fast mode runs the exact kernels for this shape";
  }
  return nullptr;
}

const char* fast_math_fallback_nf4_rows(const KernelTable& kt, int64_t m) {
  if (kt.isa == Q4_ISA_SCALAR) return nullptr;
  if (kt.i8_gemv_nf4 == nullptr) {
    return "NF4 has no integer GEMV on this ISA (its exact NF4 kernels are faster): fast mode runs the exact "
           "kernels";
  }
  if (m > std::max(kI8GemvMaxRows, kt.i8_gemv_max_m) && !kt.i8_nf4_panel_native) {
    return "NF4 fast mode runs the integer GEMV only up to the M it takes in one call (this ISA has no NF4 "
           "panel packer of its own): the exact kernels above";
  }
  return nullptr;
}

const char* fast_math_fallback_nf4_weights(const Nf4Weights& w) {
  if (w.k % 16 != 0 || w.blocksize < 16) {
    return "NF4 fast mode needs K % 16 == 0 and blocksize >= 16: it runs the exact kernels";
  }
  if (!i8_nf4_codebook(w.lut).ok) return "the NF4 code values are not finite or all zero: exact kernels";
  return nullptr;
}

void linear_nvfp4_int8(const KernelTable& kt, ActRows x, int64_t m, const NvWeights& w, int64_t n, float* y,
                       int32_t threads, ScaleSigns* signs) {
  if (m == 0 || n == 0) return;
  I8Activations a;
  a.resize(m, w.k);
  const ActSource src{x, kI8WeightBias};
  i8_product_nvfp4(kt, a, &src, m, w, n, 0.5f * w.g, y, threads, signs);  // e2m1 x2 -> e2m1
}

void linear_nf4_int8(const KernelTable& kt, ActRows x, int64_t m, const Nf4Weights& w, int64_t n, float* y,
                     int32_t threads) {
  if (m == 0 || n == 0) return;
  const I8Nf4Code code = i8_nf4_codebook(w.lut);
  I8Activations a;
  a.resize(m, w.k);
  const ActSource src{x, kI8Nf4Bias};
  i8_product(
      kt, a, &src, m, w.k, n, code.post, y, threads, kt.i8_gemv_nf4 != nullptr, false,
      [&](int64_t i0, int32_t mm, int64_t n0, int64_t n1, float* yy) {
        kt.i8_gemv_nf4(a.q.data() + i0 * a.ldq, a.ldq, a.s.data() + i0 * a.lds, a.c.data() + i0 * a.lds,
                       a.lds, mm, w, code.biased, n0, n1, code.post, yy, n);
      },
      [&](int64_t n0, int32_t rows, int64_t b0, int64_t nb, uint8_t* wq, float* ws) {
        kt.i8_pack_nf4(w, code.biased, n0, rows, b0, nb, wq, ws);
      },
      [](int64_t, int64_t) {});
}

MathUsed linear_nvfp4_fast(const KernelTable& kt, ActRows x, int64_t m, const NvWeights& w, int64_t n,
                           float* y, int32_t threads, ScaleSigns* signs) {
  if (fast_math_fallback_nvfp4(kt) != nullptr || fast_math_fallback_rows(kt, m, n) != nullptr ||
      fast_math_fallback_shape(kt, n, w.k) != nullptr) {
    linear_nvfp4(kt, x, m, w, n, y, threads, signs);
    note_isa_used(kt.exact_isa);
    return MathUsed::Exact;
  }
  linear_nvfp4_int8(kt, x, m, w, n, y, threads, signs);
  note_isa_used(kt.isa);
  return MathUsed::Int8;
}

MathUsed linear_nf4_fast(const KernelTable& kt, ActRows x, int64_t m, const Nf4Weights& w, int64_t n,
                         float* y, int32_t threads) {
  if (fast_math_fallback_nf4(kt) != nullptr || fast_math_fallback_rows(kt, m, n) != nullptr ||
      fast_math_fallback_shape(kt, n, w.k) != nullptr || fast_math_fallback_nf4_rows(kt, m) != nullptr ||
      fast_math_fallback_nf4_weights(w) != nullptr) {
    linear_nf4(kt, x, m, w, n, y, threads);
    note_isa_used(kt.exact_isa);
    return MathUsed::Exact;
  }
  linear_nf4_int8(kt, x, m, w, n, y, threads);
  note_isa_used(kt.isa);
  return MathUsed::Int8;
}

void scaled_mm_w4a4_int8(const KernelTable& kt, const uint8_t* aq, const uint8_t* as, int64_t m,
                         const NvWeights& w, int64_t n, float* y, int32_t threads) {
  if (m == 0 || n == 0) return;
  const int64_t k = w.k;
  I8Activations a;
  a.resize(m, k);
  parallel_for(m, threads, [&](int64_t i) {
    i8_activations_nvfp4(aq + i * (k / 2), as + i * (k / 16), 1, k, a.q.data() + i * a.ldq, a.ldq,
                         a.s.data() + i * a.lds, a.c.data() + i * a.lds, a.lds);
  });
  i8_product_nvfp4(kt, a, nullptr, m, w, n, 0.25f * w.g, y, threads, nullptr);  // (e2m1 x2)^2 -> e2m1^2
  note_isa_used(kt.isa);
}

SmallBatchConfig small_batch_config() {
  std::lock_guard<std::mutex> lock(g_sb_mutex);
  return g_sb;
}

void set_small_batch_config(const SmallBatchConfig& c) {
  SmallBatchConfig v = c;
  v.min_m = std::clamp<int32_t>(v.min_m, 1, kGemvMaxRows + 1);
  if (v.max_m != 0) v.max_m = std::clamp<int32_t>(v.max_m, v.min_m - 1, 4096);
  v.kc = std::clamp<int64_t>(v.kc / 16 * 16, 16, 1 << 16);
  v.split_k = std::clamp<int64_t>(v.split_k / 16 * 16, 256, int64_t{1} << 40);
  std::lock_guard<std::mutex> lock(g_sb_mutex);
  g_sb = v;
}

GemmBlocking gemm_blocking() {
  GemmBlocking b;
  b.kc = g_kc.load(std::memory_order_relaxed);
  b.mc = g_mc.load(std::memory_order_relaxed);
  return b;
}

void set_gemm_blocking(const GemmBlocking& b) {
  g_kc.store(b.kc, std::memory_order_relaxed);
  g_mc.store(b.mc, std::memory_order_relaxed);
}

namespace {

// The small-batch product over N chunks x K parts (SmallBatchConfig):
// every task is one (chunk, part) call of the kernel; with more than one
// part, the parts are summed afterwards in part order, so the result
// depends on the shape only.
template <class Weights, class Small>
void small_batch_product(ActRows x, int64_t m, const Weights& w, int64_t n, float* y, int32_t threads,
                         const SmallBatchConfig& sb, Small small) {
  const int64_t k = w.k;
  const int64_t parts = k > sb.split_k ? (k + sb.split_k - 1) / sb.split_k : 1;
  const int64_t kpart = ((k + parts - 1) / parts + 15) / 16 * 16;
  const int64_t chunk = gemv_chunk(n, threads, m * kpart);
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<float> partial(parts > 1 ? static_cast<size_t>(parts * m * n) : 0);
  parallel_for(chunks * parts, threads, [&](int64_t t) {
    const int64_t c = t % chunks, p = t / chunks;
    const int64_t n0 = c * chunk, n1 = std::min(n, n0 + chunk);
    const int64_t k0 = std::min(k, p * kpart), k1 = std::min(k, k0 + kpart);
    float* dst = parts > 1 ? partial.data() + p * m * n : y;
    small(x, k, static_cast<int32_t>(m), w, n0, n1, k0, k1, dst + n0, n, sb.kc);
  });
  if (parts == 1) return;
  const int64_t total = m * n;
  constexpr int64_t kSumChunk = 4096;
  parallel_for((total + kSumChunk - 1) / kSumChunk, threads, [&](int64_t t) {
    const int64_t e0 = t * kSumChunk, e1 = std::min(total, e0 + kSumChunk);
    for (int64_t e = e0; e < e1; ++e) {
      float acc = partial[static_cast<size_t>(e)];
      for (int64_t p = 1; p < parts; ++p) acc += partial[static_cast<size_t>(p * total + e)];
      y[e] = acc;
    }
  });
}

// Shared driver of the 4-bit products: the fused GEMV for the smallest M,
// the small-batch kernels (long K: over K parts)
// up to SmallBatchConfig::max_m, the packed-panel GEMM beyond. `Weights` is
// NvWeights or Nf4Weights; gemv/small/panel are the matching table entries;
// small_ok says whether the small-batch kernels take these weights.
// signs: NVFP4's sign rule on the way (ScaleSigns): by the GEMV kernels for
// their own rows, otherwise in one parallel pass before the product.
// MXFP4's E8M0 scales (NvWeights::e8m0): read by the GEMV (or made into
// E4M3 codes piece by piece, gemv_rows), all made at once for the others.
template <class Weights, class Gemv, class Small, class Panel>
void linear_packed(const KernelTable& kt, ActRows x, int64_t m, const Weights& w_in, int64_t n, float* y,
                   int32_t threads, Gemv gemv, Small small, Panel panel, bool small_ok, ScaleSigns* signs) {
  if (m == 0 || n == 0) return;
  const SmallBatchConfig sb = small_batch_config();
  const int32_t sb_max = small_batch_max_m(kt, sb, n);
  const int64_t gemv_max =
      w_in.k % 128 == 0 ? std::max<int64_t>(kGemvMaxRows, kt.gemv_max_m_k128) : kGemvMaxRows;
  const bool use_small =
      small_ok && small != nullptr && m >= sb.min_m && m <= sb_max && !(m > kGemvMaxRows && m <= gemv_max);
  std::vector<uint8_t> made;
  const Weights w = use_small || m > gemv_max ? with_e4m3_scales(w_in, n, threads, made) : w_in;
  Weights wg = w;  // the GEMV's weights: NVFP4 with the sign rule on the way
  auto seen_all = [&] {
    if constexpr (std::is_same_v<Weights, NvWeights>) {
      if (signs == nullptr) return;
      const int64_t chunk = gemv_chunk(n, threads, w.k / 16);
      parallel_for((n + chunk - 1) / chunk, threads,
                   [&](int64_t t) { signs->scan(w, t * chunk, std::min(n, t * chunk + chunk)); });
    }
  };
  if constexpr (std::is_same_v<Weights, NvWeights>) wg.signs = signs;
  if (use_small) {
    seen_all();
    small_batch_product(x, m, w, n, y, threads, sb, small);
    return;
  }
  if (m <= gemv_max) {
    // fp16/bf16 rows go to the kernels as they are (converted in registers).
    const int64_t chunk = gemv_chunk(n, threads, w.k * m);
    parallel_for((n + chunk - 1) / chunk, threads, [&](int64_t t) {
      const int64_t n0 = t * chunk, n1 = std::min(n, n0 + chunk);
      if constexpr (std::is_same_v<Weights, NvWeights>) {
        // (the exact GEMV reads E8M0 where its chunk kernel runs)
        const bool chunk_kernel = w.k % 128 == 0 || (w.k % 64 == 0 && m <= kt.gemv_chunk_max_m_k64);
        gemv_rows(kt.reads_e8m0 && chunk_kernel, wg, n0, n1,
                  [&](const NvWeights& wl, int64_t j0, int64_t j1, int64_t r0) {
                    gemv(x, w.k, static_cast<int32_t>(m), wl, j0, j1, y + r0, n);
                  });
      } else {
        gemv(x, w.k, static_cast<int32_t>(m), wg, n0, n1, y + n0, n);
      }
    });
    return;
  }
  seen_all();
  panel_gemm(
      kt, x, m, w.k, n, y, threads, gemm_blocking(),
      [&](int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* buf) { panel(w, n0, rows, k0, kc, buf); });
}

}  // namespace

int64_t e8m0_piece_bytes() {
  return g_e8m0_piece_bytes.load(std::memory_order_relaxed);
}

void set_gemv_tasks_per_thread(int32_t tasks) {
  g_gemv_tasks_per_thread.store(std::max<int32_t>(1, tasks), std::memory_order_relaxed);
}

void set_i8_xsplit_min_task_work(int64_t work) {
  g_i8_xsplit_min_task_work.store(work > 0 ? work : kI8XSplitMinTaskWork, std::memory_order_relaxed);
}

void set_e8m0_piece_bytes(int64_t bytes) {
  g_e8m0_piece_bytes.store(std::max<int64_t>(1, bytes), std::memory_order_relaxed);
}

void byte_range(const uint8_t* p, int64_t n, uint8_t* lo, uint8_t* hi) {
  uint8_t l = 255, h = 0;
  for (int64_t i = 0; i < n; ++i) {
    l = std::min(l, p[i]);
    h = std::max(h, p[i]);
  }
  *lo = l;
  *hi = h;
}

void e8m0_to_e4m3(const uint8_t* e8m0, int64_t n, int32_t t, uint8_t* out) {
  uint8_t lo = 255, hi = 0;
  byte_range(e8m0, n, &lo, &hi);
  if (static_cast<int32_t>(lo) - 120 - t >= 1 &&
      static_cast<int32_t>(hi) - fmt::kE8M0Bias - t <= fmt::kNvPow2High) {
    // Every code a normal E4M3 (the common case): exponent field e - 127 -
    // t + 7, mantissa 0, a byte loop the compiler vectorizes well (the
    // selects below, with the generic flags, were 0.06 ms of an MXFP4
    // 2880x2880 product at M = 3).
    const auto c = static_cast<uint8_t>(120 + t);
    for (int64_t i = 0; i < n; ++i) {
      const auto v = static_cast<uint8_t>(static_cast<uint8_t>(e8m0[i] - c) << 3);
      out[2 * i] = v;
      out[2 * i + 1] = v;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {  // (plain selects; 0xFF outside the window)
    const uint8_t v = fmt::mx_nv_scale_byte_u8(e8m0[i], t);
    out[2 * i] = v;
    out[2 * i + 1] = v;
  }
}

namespace {
// Outputs of a weight's preparation of at least this many bytes are
// written with non-temporal stores (i8_tile_codes).
constexpr int64_t kStreamOutMin = int64_t{4} << 20;
}  // namespace

int64_t i8_tile_bytes(int64_t n, int64_t k) {
  return n / 16 * 16 * (k / 2);
}

namespace {
void i8_tile_group_scalar(const uint8_t* src, int64_t rb, int64_t chunks, uint8_t* dst) {
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t h = 0; h < 4; ++h) {
      uint8_t* tile = dst + (c * 4 + h) * 256;
      for (int64_t r = 0; r < 16; ++r) {
        const uint8_t* row = src + r * rb + c * 64 + h * 16;
        for (int64_t d = 0; d < 4; ++d) std::memcpy(tile + 64 * d + 4 * r, row + 4 * d, 4);
      }
    }
  }
}
}  // namespace

void i8_tile_codes(const uint8_t* q, int64_t n, int64_t k, uint8_t* out) {
  if (k < 128) return;  // no chunk (and N may be anything when K = 0)
  const int64_t rb = k / 2;
  for (int64_t t = 0; t + 16 <= n; t += 16) i8_tile_group_scalar(q + t * rb, rb, k / 128, out + t * rb);
}

namespace {
// fn(t) for the n / 16 groups of 16 rows, over `threads` in tasks of about
// task_bytes (group_bytes per group).
template <class Fn>
void for_row_groups(int64_t n, int64_t group_bytes, int64_t task_bytes, int32_t threads, const Fn& fn) {
  const int64_t groups = n / 16, per = std::max<int64_t>(1, task_bytes / std::max<int64_t>(1, group_bytes));
  parallel_for((groups + per - 1) / per, threads, [&](int64_t task) {
    for (int64_t t = task * per; t < std::min(groups, (task + 1) * per); ++t) fn(t);
  });
}
}  // namespace

void i8_tile_codes(const KernelTable& kt, const uint8_t* q, int64_t n, int64_t k, uint8_t* out,
                   int32_t threads, uint8_t* copy, bool stream_large) {
  const int64_t rb = k / 2, groups = n / 16, gbytes = 16 * rb;
  if (copy != nullptr)
    std::memcpy(copy + groups * gbytes, q + groups * gbytes, static_cast<size_t>(n % 16 * rb));
  if (k < 128) {
    if (copy != nullptr) std::memcpy(copy, q, static_cast<size_t>(groups * gbytes));
    return;
  }
  // With a copy, each group's rows are read from q once (by the copy, then
  // by the tiler from the cache); large outputs with stream_large are
  // written by non-temporal stores (stream_copy: the copy straight from q,
  // the tiles through a buffer in L1 or L2), so that no output line is
  // read before it is written. See docs/performance.md's sixty-third
  // session.
  const bool stream = stream_large && groups * gbytes >= kStreamOutMin;
  const bool aligned = reinterpret_cast<uintptr_t>(out) % 64 == 0;
  const int64_t per = std::max<int64_t>(1, (int64_t{1} << 18) / gbytes);  // tasks of about 256 KiB
  parallel_for((groups + per - 1) / per, threads, [&](int64_t task) {
    AlignedFloats buf = stream ? aligned_floats(gbytes / 4) : nullptr;
    for (int64_t t = task * per; t < std::min(groups, (task + 1) * per); ++t) {
      const uint8_t* src = q + t * gbytes;
      if (copy != nullptr && stream) {
        stream_copy(copy + t * gbytes, src, gbytes);
      } else if (copy != nullptr) {
        std::memcpy(copy + t * gbytes, src, static_cast<size_t>(gbytes));
        src = copy + t * gbytes;
      }
      uint8_t* dst = stream ? reinterpret_cast<uint8_t*>(buf.get()) : out + t * gbytes;
      if (kt.i8_tile_group != nullptr && (aligned || stream)) {
        kt.i8_tile_group(src, rb, k / 128, dst);
      } else {
        i8_tile_group_scalar(src, rb, k / 128, dst);
      }
      if (stream) stream_copy(out + t * gbytes, dst, gbytes);
    }
  });
}

int64_t i8_tile_scale_group_bytes(int64_t k) {
  return (k / 16 + 63) / 64 * 1024;
}

namespace {
uint8_t i8_tile_scale_group_scalar(const uint8_t* s, int64_t kb, uint8_t* o) {
  std::memset(o, 0, static_cast<size_t>(i8_tile_scale_group_bytes(kb * 16)));
  bool normal = true;
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t b = 0; b < kb; ++b) {
      const uint8_t v = s[r * kb + b];
      normal = normal && v >= 0x08 && v <= 0x7e;
      o[b / 64 * 1024 + 64 * (b % 16) + 16 * (b % 64 / 16) + r] = v;
    }
  }
  return normal ? 1 : 0;
}
}  // namespace

void i8_tile_scales(const uint8_t* s, int64_t n, int64_t k, uint8_t* out, uint8_t* flags) {
  const int64_t kb = k / 16, gb = i8_tile_scale_group_bytes(k);
  for (int64_t t = 0; t < n / 16; ++t)
    flags[t] = i8_tile_scale_group_scalar(s + 16 * t * kb, kb, out + t * gb);
}

void i8_tile_scales(const KernelTable& kt, const uint8_t* s, int64_t n, int64_t k, uint8_t* out,
                    uint8_t* flags, int32_t threads, uint8_t* copy) {
  const int64_t kb = k / 16, gb = i8_tile_scale_group_bytes(k);
  if (copy != nullptr)
    std::memcpy(copy + n / 16 * 16 * kb, s + n / 16 * 16 * kb, static_cast<size_t>(n % 16 * kb));
  for_row_groups(n, 16 * kb, int64_t{1} << 16, threads, [&](int64_t t) {  // tasks of about 64 KiB
    const uint8_t* src = s + 16 * t * kb;
    if (copy != nullptr) {  // (as i8_tile_codes)
      std::memcpy(copy + 16 * t * kb, src, static_cast<size_t>(16 * kb));
      src = copy + 16 * t * kb;
    }
    flags[t] = kt.i8_tile_scale_group != nullptr ? kt.i8_tile_scale_group(src, kb, out + t * gb)
                                                 : i8_tile_scale_group_scalar(src, kb, out + t * gb);
  });
}

int64_t i8_tile_absmax_floats(int64_t n, int64_t k, int64_t blocksize) {
  return n / 16 * 16 * (k / blocksize);
}

void i8_tile_absmax(const float* absmax, int64_t n, int64_t k, int64_t blocksize, float* out) {
  const int64_t per_row = k / blocksize;
  for (int64_t t = 0; t + 16 <= n && per_row > 0; t += 16) {
    for (int64_t j = 0; j < per_row; ++j) {
      for (int64_t r = 0; r < 16; ++r) out[(t * per_row + j * 16) + r] = absmax[(t + r) * per_row + j];
    }
  }
}

bool any_sign_bit(const uint8_t* bytes, int64_t n) {
  // 8-byte ORs (vectorized by the compiler), the sign bits tested once.
  uint64_t any = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, bytes + i, sizeof v);
    any |= v;
  }
  for (; i < n; ++i) any |= bytes[i];
  return (any & 0x8080808080808080ULL) != 0;
}

void linear_nvfp4(const KernelTable& kt, ActRows x, int64_t m, const NvWeights& w, int64_t n, float* y,
                  int32_t threads, ScaleSigns* signs) {
  linear_packed(kt, x, m, w, n, y, threads, kt.nvfp4_gemv, kt.nvfp4_small, kt.nvfp4_panel, true, signs);
}

void linear_nf4(const KernelTable& kt, ActRows x, int64_t m, const Nf4Weights& w, int64_t n, float* y,
                int32_t threads) {
  linear_packed(kt, x, m, w, n, y, threads, kt.nf4_gemv, kt.nf4_small, kt.nf4_panel,
                w.k % 16 == 0 && w.blocksize >= 16, nullptr);
}

void gemm_f32(const KernelTable& kt, ActRows x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
              int32_t threads, const GemmBlocking& blocking) {
  panel_gemm(kt, x, m, k, n, y, threads, blocking,
             [&](int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
               kt.f32_panel(w, k, n0, rows, k0, kc, panel);
             });
}

namespace {

// Elements [e0, e1) of a 16-bit `out`: decode(e, len, buf) writes them as
// fp32 in pieces of `piece` elements (the last one shorter) into a buffer
// that stays in L1, kt.f32_to_act converts each piece from there (a
// task's whole fp32 rows went through L2 before: NVFP4 11008 x 4096 ->
// bf16, 2 threads, Zen 4: 7.6 -> 5.0-5.8 ms).
template <class Decode>
void pieces_to_16bit(const KernelTable& kt, int64_t e0, int64_t e1, int64_t piece, FloatOut out,
                     const Decode& decode) {
  alignas(64) float stack[kDecodePieceElems];
  AlignedFloats heap;
  float* buf = stack;
  if (piece > kDecodePieceElems) {
    heap = aligned_floats(piece);
    buf = heap.get();
  }
  for (int64_t e = e0; e < e1; e += piece) {
    const int64_t len = std::min(piece, e1 - e);
    decode(e, len, buf);
    kt.f32_to_act(out.data, out.type, e, len, buf);
  }
}

}  // namespace

void blocks_to_output(const KernelTable& kt, int64_t n, int64_t unit, FloatOut out, int32_t threads,
                      const std::function<void(int64_t, int64_t, float*)>& fill, const Fill16& fill16) {
  if (n <= 0) return;
  if (out.type != FType::F32 && fill16) {
    const int64_t task = (kDecode16TaskElems + unit - 1) / unit * unit;
    parallel_for((n + task - 1) / task, threads, [&](int64_t t) {
      const int64_t e0 = t * task;
      fill16(e0, std::min(task, n - e0), static_cast<uint16_t*>(out.data) + e0);
    });
    return;
  }
  if (out.type == FType::F32) {
    const int64_t task = (kDecodeTaskElems + unit - 1) / unit * unit;
    parallel_for((n + task - 1) / task, threads, [&](int64_t t) {
      const int64_t e0 = t * task;
      fill(e0, std::min(task, n - e0), static_cast<float*>(out.data) + e0);
    });
    return;
  }
  const int64_t piece = std::max<int64_t>(1, kDecodePieceElems / unit) * unit;
  const int64_t task = std::max<int64_t>(1, kDecode16TaskElems / piece) * piece;
  parallel_for((n + task - 1) / task, threads, [&](int64_t t) {
    const int64_t e0 = t * task;
    pieces_to_16bit(kt, e0, std::min(n, e0 + task), piece, out, fill);
  });
}

namespace {

// fn(r0, r1, band) over tasks of whole 128-row bands of a [rows, cols]
// scale matrix, at least 64 KiB of swizzled bytes each; band = the byte
// offset of row r0's band in the swizzled buffer (each band's tiles are
// contiguous, so a task is a smaller matrix of its own).
template <class Fn>
void for_scale_bands(int64_t rows, int64_t cols, int32_t threads, const Fn& fn) {
  const int64_t band_bytes = 128 * fmt::swizzled_cols(cols), bands = (rows + 127) / 128;
  const int64_t per = std::max<int64_t>(1, (int64_t{64} << 10) / band_bytes);
  parallel_for((bands + per - 1) / per, threads, [&](int64_t t) {
    const int64_t r0 = t * per * 128;
    fn(r0, std::min(rows, r0 + per * 128), (r0 / 128) * band_bytes);
  });
}

}  // namespace

void unswizzle_scales_parallel(const uint8_t* sw, int64_t rows, int64_t cols, uint8_t* lin, int32_t threads) {
  if (rows == 0 || cols == 0) return;
  for_scale_bands(rows, cols, threads, [&](int64_t r0, int64_t r1, int64_t band) {
    unswizzle_scales(sw + band, r1 - r0, cols, lin + r0 * cols);
  });
}

void swizzle_scales_parallel(const uint8_t* lin, int64_t rows, int64_t cols, uint8_t* sw, int32_t threads) {
  if (rows == 0 || cols == 0) {
    swizzle_scales(lin, rows, cols, sw);  // (the padding of an empty matrix, if any)
    return;
  }
  // (Each task's call zeroes the padding of its own bands.)
  for_scale_bands(rows, cols, threads, [&](int64_t r0, int64_t r1, int64_t band) {
    swizzle_scales(lin + r0 * cols, r1 - r0, cols, sw + band);
  });
}

void dequantize_nvfp4(const KernelTable& kt, const uint8_t* q, const uint8_t* s, float g, int64_t rows,
                      int64_t k, FloatOut out, int32_t threads) {
  const bool bf16 = out.type == FType::BF16;
  blocks_to_output(
      kt, rows * k, 16, out, threads,
      [&](int64_t e0, int64_t len, float* dst) {
        kt.nvfp4_dequantize(q + e0 / 2, s + e0 / 16, g, 1, len, dst);
      },
      kt.nvfp4_dequantize16 == nullptr ? Fill16{} : Fill16([&](int64_t e0, int64_t len, uint16_t* dst) {
        kt.nvfp4_dequantize16(q + e0 / 2, s + e0 / 16, g, 1, len, dst, bf16);
      }));
}

void dequantize_nvfp4(const KernelTable& kt, const uint8_t* q, const uint8_t* s, float g, int64_t rows,
                      int64_t k, float* out, int32_t threads) {
  dequantize_nvfp4(kt, q, s, g, rows, k, FloatOut{out, FType::F32}, threads);
}

float amax(const KernelTable& kt, const float* x, int64_t n, int32_t threads) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t tasks = (n + kChunk - 1) / kChunk;
  std::vector<float> part(static_cast<size_t>(std::max<int64_t>(tasks, 1)), 0.0f);
  parallel_for(tasks, threads, [&](int64_t t) {
    const int64_t i0 = t * kChunk;
    part[static_cast<size_t>(t)] = kt.amax(x + i0, std::min(kChunk, n - i0));
  });
  float m = 0.0f;
  for (float v : part) m = std::max(m, v);
  return m;
}

namespace {

constexpr uint32_t kNonFiniteBits = 0x7f800000u;

// a = min(a, v), atomically (the smallest failing task of a parallel pass).
void lower_to(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

// Flat index of the first NaN/Inf of x at or after i0 (one must exist).
int64_t first_non_finite(ActRows x, int64_t i0, int64_t n) {
  for (int64_t i = i0; i < n; ++i) {
    const float v = load_one(x.data, x.type, i);
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if ((u & kNonFiniteBits) == kNonFiniteBits) return i;
  }
  return n;  // not reached when the caller saw a non-finite value
}

// KernelTable::absmax_bits of elements [i0, i0 + n) of x: fp16/bf16 read
// in place by absmax_bits16 where the table has it, else converted
// (exactly, NaN/Inf preserved) a piece in L1 at a time.
uint32_t absmax_bits_of(const KernelTable& kt, ActRows x, int64_t i0, int64_t n) {
  if (x.type == FType::F32) return kt.absmax_bits(static_cast<const float*>(x.data) + i0, n);
  if (kt.absmax_bits16 != nullptr)
    return kt.absmax_bits16(static_cast<const uint16_t*>(x.data) + i0, n, x.type == FType::BF16);
  constexpr int64_t kPiece = 2048;
  const AlignedFloats buf = aligned_floats(std::min(kPiece, n));  // (L1-sized, not zero-filled)
  uint32_t mx = 0;
  for (int64_t o = 0; o < n; o += kPiece) {
    const int64_t len = std::min(kPiece, n - o);
    kt.act_to_f32(x.data, x.type, i0 + o, len, buf.get());
    mx = std::max(mx, kt.absmax_bits(buf.get(), len));
  }
  return mx;
}

// Rows [r0, r1) of x (k columns) as fp32, to fn(rows, first row, count)
// (false: stop, and return false): x itself in one call, or fp16/bf16
// converted in pieces of whole rows, about 64 KiB of fp32 each, through
// one buffer that stays in L2 (not zero-filled first: a std::vector's fill
// wrote every task's buffer twice, 1.2x the time of a given-scale NVFP4
// quantize of fp16 rows against fp32 ones). While a piece is coded, the
// next one's 16-bit input is prefetched into L2, so that the conversion
// reads it from cache rather than from DRAM with the coding stopped.
// Against tasks of one piece each (bf16 input, 11008 x 4096, Zen 4, 2
// threads, two builds alternating, tools/ab/ab_ops.c): NVFP4 with the
// scale given 1.05-1.06x, computed 1.03-1.12x, MXFP4 1.05-1.16x.
template <class Fn>
bool for_f32_pieces(const KernelTable& kt, ActRows x, int64_t r0, int64_t r1, int64_t k, const Fn& fn) {
  if (x.type == FType::F32) return fn(static_cast<const float*>(x.data) + r0 * k, r0, r1 - r0);
  const int64_t piece = std::max<int64_t>(1, (16384 + k - 1) / k);
  const AlignedFloats buf = aligned_floats(std::min(piece, r1 - r0) * k);
  const auto* bytes = static_cast<const char*>(x.data);
  for (int64_t p = r0; p < r1; p += piece) {
    const int64_t pe = std::min(r1, p + piece);
    kt.act_to_f32(x.data, x.type, p * k, (pe - p) * k, buf.get());
    const int64_t next_end = std::min(r1, pe + piece) * k * 2;
    for (int64_t o = pe * k * 2; o < next_end; o += 64) __builtin_prefetch(bytes + o, 0, 1);
    if (!fn(static_cast<const float*>(buf.get()), p, pe - p)) return false;
  }
  return true;
}

constexpr size_t kHuge = size_t{2} << 20;

// One staging buffer kept between calls, up to kKeep bytes: a fresh one
// costs its page faults and the kernel's zeroing of every page on every
// call (a quarter of a given-scale quantize of 11008 x 4096 on a Cascade
// Lake), and weights are quantized one after another at load time. A call
// takes it when it is large enough (a concurrent call allocates its own);
// returning a buffer keeps the larger of the two.
class StagingCache {
 public:
  static constexpr size_t kKeep = size_t{64} << 20;
  ~StagingCache() { release(p_); }
  // The kept buffer when it holds at least *size bytes (*size: its size).
  uint8_t* take(size_t* size) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (p_ == nullptr || size_ < *size) return nullptr;
    uint8_t* p = p_;
    *size = size_;
    p_ = nullptr;
    return p;
  }
  // p holds `size` bytes (as allocated by Staging).
  void give(uint8_t* p, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (size <= kKeep && (p_ == nullptr || size > size_)) {
        std::swap(p, p_);
        size_ = size;
      }
    }
    release(p);
  }
  static void release(uint8_t* p) {
    if (p != nullptr) ::operator delete[](p, std::align_val_t(kHuge));
  }
  StagingCache() = default;
  StagingCache(const StagingCache&) = delete;
  StagingCache& operator=(const StagingCache&) = delete;
  // Held across fork() (kernels_before_fork below).
  void lock() { mutex_.lock(); }
  void unlock() { mutex_.unlock(); }

 private:
  std::mutex mutex_;
  uint8_t* p_ = nullptr;  // guarded by mutex_
  size_t size_ = 0;       // guarded by mutex_
};

StagingCache& staging_cache() {
  static StagingCache cache;
  return cache;
}

// fork() without exec: a lock another thread holds at the fork stays held
// in the child, and what it guards may be half written. The kernels' two
// process-wide locks (the small-batch configuration, the staging cache)
// are only ever held for a few stores and never call out, so the forking
// thread takes both before the fork and releases them in parent and child.
void kernels_before_fork() {
  g_sb_mutex.lock();
  staging_cache().lock();
}
void kernels_after_fork() {
  staging_cache().unlock();
  g_sb_mutex.unlock();
}
[[maybe_unused]] const int g_kernels_fork_handlers =
    pthread_atfork(kernels_before_fork, kernels_after_fork, kernels_after_fork);

// Uninitialized bytes for the staging of a quantization: the kept buffer
// when it is large enough, else a new one on transparent huge pages where
// the OS offers them (a fresh multi-megabyte buffer otherwise costs a page
// fault per 4 KiB).
struct Staging {
  uint8_t* p = nullptr;
  size_t size = 0;
  explicit Staging(int64_t bytes) : size((static_cast<size_t>(bytes) + kHuge - 1) / kHuge * kHuge) {
    p = staging_cache().take(&size);
    if (p != nullptr) return;
    p = static_cast<uint8_t*>(::operator new[](size, std::align_val_t(kHuge)));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, size, MADV_HUGEPAGE);
#endif
  }
  ~Staging() {
    staging_cache().give(p, size);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
};

}  // namespace

// (x86-64: SSE2, 16 bytes a store. The fence orders the weakly ordered
// non-temporal stores before the caller's release of the task.)
void stream_copy(uint8_t* dst, const uint8_t* src, int64_t bytes) {
  if (bytes <= 0) return;
#if defined(__x86_64__) && defined(__SSE2__)
  const int64_t head =
      std::min<int64_t>(bytes, (16 - static_cast<int64_t>(reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, static_cast<size_t>(head));
  int64_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    __m128i v[4];
    for (int64_t j = 0; j < 4; ++j)
      v[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16 * j));
    for (int64_t j = 0; j < 4; ++j) _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16 * j), v[j]);
  }
  std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
  _mm_sfence();
#else
  std::memcpy(dst, src, static_cast<size_t>(bytes));
#endif
}

namespace {

// The staged outputs into the caller's tensors, 1 MiB a task. A large
// copy (the staging has left the cache by then; the outputs are read back
// later from DRAM either way) streams: each output line is otherwise read
// before it is written. 11008 x 4096 fp32, Zen 4, 2 threads, alternating
// call by call: quantize NVFP4 with the scale given 1.03-1.04x, NF4 1.03-
// 1.04x, MXFP4 1.04-1.05x.
void parallel_copy(uint8_t* dst, const uint8_t* src, int64_t bytes, bool stream, int32_t threads) {
  constexpr int64_t kChunk = 1 << 20;
  parallel_for((bytes + kChunk - 1) / kChunk, threads, [&](int64_t c) {
    const int64_t o = c * kChunk, len = std::min(kChunk, bytes - o);
    if (stream) {
      stream_copy(dst + o, src + o, len);
    } else {
      std::memcpy(dst + o, src + o, static_cast<size_t>(len));
    }
  });
}

// Staged outputs of at least this many bytes are copied out with
// non-temporal stores (parallel_copy).
constexpr int64_t kStreamCopyMin = int64_t{4} << 20;

struct StagedResult {
  bool ok = true;
  int64_t first_bad_row = 0;  // the first row of the first task that saw a NaN/Inf
};

// NVFP4 codes and scales of rows [r0, r1) of x at q and s (those rows'
// own); false when they hold a NaN/Inf (q and s then partly written).
// 16-bit rows go to the table's in-place entry where it has one
// (nvfp4_quantize_checked16, AVX-512: bf16 input, Zen 4, 2 threads, two
// builds alternating, against converting it in pieces: 11008 x 4096 with
// the scale given 1.43-1.46x, computed 1.36-1.39x, 4096 x 4096 1.47x, 256
// x 4096 1.08x; as fast as fp32 input now), else through fp32 pieces.
// finite: x is known finite (the computed-scale path checked it), so the
// table's plain nvfp4_quantize codes the pieces.
// far: x is large enough to be read from memory (kQuantizeFarMinBytes),
// so the table's far entries code it where it has them (the checked entry
// codes finite input as the plain one does: the same bytes).
bool nvfp4_code_rows(const KernelTable& kt, ActRows x, int64_t r0, int64_t r1, int64_t k, float g, uint8_t* q,
                     uint8_t* s, bool finite, bool far) {
  if (x.type != FType::F32 && kt.nvfp4_quantize_checked16 != nullptr) {
    auto* const code16 = far && kt.nvfp4_quantize_checked16_far != nullptr ? kt.nvfp4_quantize_checked16_far
                                                                           : kt.nvfp4_quantize_checked16;
    return code16(static_cast<const uint16_t*>(x.data) + r0 * k, x.type == FType::BF16, r1 - r0, k, g, q, s);
  }
  return for_f32_pieces(kt, x, r0, r1, k, [&](const float* xt, int64_t p, int64_t count) {
    uint8_t* pq = q + (p - r0) * (k / 2);
    uint8_t* ps = s + (p - r0) * (k / 16);
    if (far && x.type == FType::F32 && kt.nvfp4_quantize_checked_far != nullptr)
      return kt.nvfp4_quantize_checked_far(xt, count, k, g, pq, ps);
    if (!finite && kt.nvfp4_quantize_checked != nullptr)
      return kt.nvfp4_quantize_checked(xt, count, k, g, pq, ps);
    if (!finite && kt.absmax_bits(xt, count * k) >= kNonFiniteBits) return false;
    kt.nvfp4_quantize(xt, count, k, g, pq, ps);
    return true;
  });
}

// Validate-before-write quantization in ONE pass over x [rows, k]: tasks of
// rows (quantize_task_elems) code them into a staging buffer, code(r0, r1,
// tq, ts) for rows [r0, r1) at tq and ts (their staging) returning false
// when it met a NaN/Inf (the kernels' block maxima show it); only when
// every task was finite is the staging (qrow code and srow scale bytes per
// row) copied into q and s (the copy moves a fraction of a byte per
// element against the 4 that a separate check pass re-reads).
template <class Code>
StagedResult quantize_staged(int64_t rows, int64_t k, int64_t qrow, int64_t srow, uint8_t* q, uint8_t* s,
                             int32_t threads, const Code& code) {
  const int64_t qbytes = rows * qrow, sbytes = rows * srow;
  Staging st(qbytes + sbytes);
  uint8_t* sq = st.p;
  uint8_t* ss = st.p + qbytes;
  const int64_t rows_per = std::max<int64_t>(1, (quantize_task_elems(rows * k, threads) + k - 1) / k);
  const int64_t tasks = (rows + rows_per - 1) / rows_per;
  std::atomic<int64_t> bad_task{std::numeric_limits<int64_t>::max()};
  parallel_for(tasks, threads, [&](int64_t t) {
    // Tasks past a failed one need not run; every task before it does, so
    // the smallest failing task (and the first bad index) is always found.
    if (t > bad_task.load(std::memory_order_relaxed)) return;
    const int64_t r0 = t * rows_per, r1 = std::min(rows, r0 + rows_per);
    if (!code(r0, r1, sq + r0 * qrow, ss + r0 * srow)) lower_to(bad_task, t);
  });
  const int64_t bad = bad_task.load();
  if (bad != std::numeric_limits<int64_t>::max()) return {false, bad * rows_per};
  const bool stream = qbytes + sbytes >= kStreamCopyMin;
  parallel_copy(q, sq, qbytes, stream, threads);
  parallel_copy(s, ss, sbytes, stream, threads);
  return {};
}

}  // namespace

int64_t quantize_nvfp4_checked(const KernelTable& kt, ActRows x, int64_t rows, int64_t k, float g,
                               float* g_used, uint8_t* q, uint8_t* s, int32_t threads) {
  const int64_t n = rows * k;
  const bool far = n * (x.type == FType::F32 ? 4 : 2) >= kQuantizeFarMinBytes;
  if (n == 0) {
    *g_used = g > 0.0f ? g : 1.0f;
    return -1;
  }
  if (!(g > 0.0f)) {
    // Pass 1: finite check and amax in one read; pass 2: quantize.
    const int64_t kChunk = std::max<int64_t>(int64_t{1} << 16, quantize_task_elems(n, threads));
    const int64_t tasks = (n + kChunk - 1) / kChunk;
    std::vector<uint32_t> part(static_cast<size_t>(tasks), 0);
    parallel_for(tasks, threads, [&](int64_t t) {
      const int64_t i0 = t * kChunk;
      part[static_cast<size_t>(t)] = absmax_bits_of(kt, x, i0, std::min(kChunk, n - i0));
    });
    uint32_t mx = 0;
    for (int64_t t = 0; t < tasks; ++t) {
      const uint32_t b = part[static_cast<size_t>(t)];
      if (b >= kNonFiniteBits) return first_non_finite(x, t * kChunk, n);
      mx = std::max(mx, b);
    }
    float amax_v;
    std::memcpy(&amax_v, &mx, 4);
    *g_used = fmt::nvfp4_global_scale_from_amax(amax_v);
    const int64_t rows_per = std::max<int64_t>(1, (quantize_task_elems(rows * k, threads) + k - 1) / k);
    const float gu = *g_used;
    parallel_for((rows + rows_per - 1) / rows_per, threads, [&](int64_t t) {
      const int64_t r0 = t * rows_per, r1 = std::min(rows, r0 + rows_per);
      nvfp4_code_rows(kt, x, r0, r1, k, gu, q + r0 * (k / 2), s + r0 * (k / 16), true, far);
    });
    return -1;
  }
  const StagedResult finite = quantize_staged(
      rows, k, k / 2, k / 16, q, s, threads, [&](int64_t r0, int64_t r1, uint8_t* tq, uint8_t* ts) {
        return nvfp4_code_rows(kt, x, r0, r1, k, g, tq, ts, false, far);
      });
  if (!finite.ok) return first_non_finite(x, finite.first_bad_row * k, n);
  *g_used = g;
  return -1;
}

int64_t quantize_mxfp4_checked(const KernelTable& kt, ActRows x, int64_t rows, int64_t k, uint8_t* q,
                               uint8_t* s, int32_t threads) {
  if (rows * k == 0) return -1;
  const int64_t srow = k / fmt::kMxBlock;
  const StagedResult r = quantize_staged(
      rows, k, k / 2, srow, q, s, threads, [&](int64_t r0, int64_t r1, uint8_t* tq, uint8_t* ts) {
        if (x.type != FType::F32 && kt.mxfp4_quantize16 != nullptr) {  // (as nvfp4_code_rows)
          return kt.mxfp4_quantize16(static_cast<const uint16_t*>(x.data) + r0 * k, x.type == FType::BF16,
                                     r1 - r0, k, tq, ts);
        }
        return for_f32_pieces(kt, x, r0, r1, k, [&](const float* xt, int64_t p, int64_t count) {
          return kt.mxfp4_quantize(xt, count, k, tq + (p - r0) * (k / 2), ts + (p - r0) * srow);
        });
      });
  return r.ok ? -1 : first_non_finite(x, r.first_bad_row * k, rows * k);
}

void nf4_absmax_range(const Nf4Stats& st, int64_t b0, int64_t b1, float* out) {
  if (b1 <= b0) return;
  if (st.qabsmax == nullptr) {
    std::memcpy(out, st.absmax + b0, static_cast<size_t>(b1 - b0) * sizeof(float));
    return;
  }
  // (absmax_of_block divided b by the nested block size for every block: a
  // stateless NF4 GEMV of 4096x4096 with double-quantized statistics spent
  // two thirds of its time here, 1.39 against 0.45 ms, on one thread.)
  const int64_t nbs = std::max<int64_t>(1, st.nested_blocksize);
  const float offset = st.nested_offset;
  for (int64_t b = b0; b < b1;) {
    const int64_t j = b / nbs, e = std::min(b1, (j + 1) * nbs);
    const float scale = st.nested_absmax[j];
    for (; b < e; ++b) out[b - b0] = st.nested_map[st.qabsmax[b]] * scale + offset;
  }
}

void nf4_absmax_all(const Nf4Stats& st, int64_t nblocks, float* out, int32_t threads) {
  constexpr int64_t kPer = int64_t{64} << 10;
  parallel_for((nblocks + kPer - 1) / kPer, threads, [&](int64_t t) {
    const int64_t b0 = t * kPer;
    nf4_absmax_range(st, b0, std::min(nblocks, b0 + kPer), out + b0);
  });
}

void nf4_dequantize(const KernelTable& kt, const uint8_t* q, const Nf4Stats& st, int64_t n, FloatOut out,
                    int32_t threads) {
  if (n <= 0) return;
  float lut[16];
  for (uint32_t c = 0; c < 16; ++c) lut[c] = st.code_value(c);
  const int64_t bs = st.blocksize, nblocks = (n + bs - 1) / bs;
  const int64_t per_task = std::max<int64_t>(1, 65536 / bs);  // 64 Ki elements
  parallel_for((nblocks + per_task - 1) / per_task, threads, [&](int64_t t) {
    const int64_t b0 = t * per_task, b1 = std::min(nblocks, b0 + per_task);
    std::vector<float> am(static_cast<size_t>(b1 - b0));
    nf4_absmax_range(st, b0, b1, am.data());
    const int64_t e0 = b0 * bs, e1 = std::min(n, b1 * bs);
    // Elements [e, e + len) (e at a block's start) into dst.
    const auto decode = [&](int64_t e, int64_t len, float* dst) {
      const int64_t whole = len / 16 * 16;
      const float* a = am.data() + (e - e0) / bs;
      kt.nf4_dequantize(q + e / 2, lut, a, bs, whole, dst);
      // The last elements of x (a partial block's tail of fewer than 16).
      portable::nf4_dequantize(q + (e + whole) / 2, lut, a + whole / bs, bs, len - whole, dst + whole);
    };
    if (out.type == FType::F32) {
      decode(e0, e1 - e0, static_cast<float*>(out.data) + e0);
      return;
    }
    if (kt.nf4_dequantize16 != nullptr) {  // in place, but a partial block's tail of fewer than 16
      const int64_t whole = (e1 - e0) / 16 * 16;
      kt.nf4_dequantize16(q + e0 / 2, lut, am.data(), bs, whole, static_cast<uint16_t*>(out.data) + e0,
                          out.type == FType::BF16);
      if (whole < e1 - e0) {
        float tail[16];
        portable::nf4_dequantize(q + (e0 + whole) / 2, lut, am.data() + whole / bs, bs, e1 - e0 - whole,
                                 tail);
        kt.f32_to_act(out.data, out.type, e0 + whole, e1 - e0 - whole, tail);
      }
      return;
    }
    pieces_to_16bit(kt, e0, e1, std::max<int64_t>(1, kDecodePieceElems / bs) * bs, out, decode);
  });
}

int64_t nf4_quantize(const KernelTable& kt, FloatPtr x, int64_t n, int64_t blocksize, uint8_t* q,
                     float* absmax, int32_t threads) {
  if (n <= 0) return -1;
  const int64_t nblocks = (n + blocksize - 1) / blocksize;
  // (nf4_quantize_blocks converts 16-bit input in registers.)
  const int64_t per_task = std::max<int64_t>(1, quantize_task_elems(n, threads) / blocksize);
  const int64_t tasks = (nblocks + per_task - 1) / per_task;
  // One pass over x: each task codes its blocks into staging with the
  // finite check riding on the block maxima; the outputs are written only
  // when every element was finite (a separate check pass read x twice).
  const int64_t qbytes = (n + 1) / 2, qspan = (qbytes + 63) / 64 * 64;
  Staging st(qspan + nblocks * static_cast<int64_t>(sizeof(float)));
  uint8_t* sq = st.p;
  auto* sa = reinterpret_cast<float*>(st.p + qspan);
  std::atomic<int64_t> bad_task{std::numeric_limits<int64_t>::max()};
  parallel_for(tasks, threads, [&](int64_t t) {
    // Tasks past a failed one need not run (as quantize_nvfp4_checked).
    if (t > bad_task.load(std::memory_order_relaxed)) return;
    const int64_t b0 = t * per_task;
    if (!kt.nf4_quantize_blocks(x, n, blocksize, b0, std::min(nblocks, b0 + per_task), sq, sa)) {
      lower_to(bad_task, t);
    }
  });
  const int64_t bad = bad_task.load();
  if (bad != std::numeric_limits<int64_t>::max()) {
    return first_non_finite(ActRows(x.data, x.type), bad * per_task * blocksize, n);
  }
  const int64_t abytes = nblocks * static_cast<int64_t>(sizeof(float));
  const bool stream = qbytes + abytes >= kStreamCopyMin;
  parallel_copy(q, sq, qbytes, stream, threads);
  parallel_copy(reinterpret_cast<uint8_t*>(absmax), reinterpret_cast<const uint8_t*>(sa), abytes, stream,
                threads);
  return -1;
}

// The 64-byte aligned pointer p sits 16 to 64 bytes above malloc's
// (malloc aligns to 16): malloc's pointer is kept at p - 8, the block's
// usable bytes at p - 16. glibc's aligned allocation (memalign) splits a
// larger chunk and frees its ends on every call: 150-200 ns for a free of
// a few hundred bytes, as much as a whole 16-row GEMV task of K = 128
// (Emerald Rapids).
//
// Blocks of kCacheMinBytes and more are kept, once freed, in a cache of
// the freeing thread (at most kCacheSlots blocks and kCacheMaxBytes), and
// handed out again by aligned_floats on that thread: a product's scratch
// (activations quantized to int8, x staged for the GEMV, X padded, packed
// panels) is the same from call to call, and malloc returns such blocks
// to the system and takes them back at its whim (blocks above its mmap
// threshold, and the top of a heap past its trim threshold, both moved by
// the process's history): every call then faulted its pages in again and
// unmapped them with a TLB shootdown. Measured on a Zen 4, 2 threads, fast
// mode N = 64, K = 512, M = 512 (768 KiB of scratch a call): 0.11 ms in
// a process with one session, 0.26-0.35 ms with two (the same calls),
// where a quarter of the time was page faults. A thread's cache is freed
// when the thread ends.
namespace {

constexpr size_t kCacheMinBytes = size_t{16} << 10;
constexpr size_t kCacheMaxBytes = size_t{64} << 20;
constexpr int kCacheSlots = 8;

size_t block_bytes(const float* p) {
  size_t bytes = 0;
  std::memcpy(&bytes, reinterpret_cast<const unsigned char*>(p) - 2 * sizeof(void*), sizeof bytes);
  return bytes;
}

void free_block(float* p) {
  void* base = nullptr;
  std::memcpy(&base, reinterpret_cast<unsigned char*>(p) - sizeof(void*), sizeof(void*));
  Q4_UNPOISON(base, block_bytes(p) + 64);  // the block and the slack around it
  std::free(base);
}

// Set when this thread's cache is gone (its thread_local destructor has
// run: a block freed later, by another thread_local's or a static's
// destructor, goes back to malloc).
thread_local bool t_cache_gone = false;

struct BlockCache {
  float* block[kCacheSlots] = {};
  int count = 0;
  size_t bytes = 0;
  BlockCache() = default;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache() {
    t_cache_gone = true;
    for (int i = 0; i < count; ++i) free_block(block[i]);
  }
  // The smallest kept block of at least `want` bytes (removed), or null.
  float* take(size_t want) {
    int best = -1;
    for (int i = 0; i < count; ++i) {
      if (block_bytes(block[i]) >= want && (best < 0 || block_bytes(block[i]) < block_bytes(block[best])))
        best = i;
    }
    if (best < 0) return nullptr;
    float* p = block[best];
    bytes -= block_bytes(p);
    block[best] = block[--count];
    // (under ASan only the bytes asked for: the rest of a larger block
    // stays poisoned, so a kernel that writes past its request is caught)
    Q4_UNPOISON(p, want);
    return p;
  }
  // Keeps p, making room by freeing smaller kept blocks; false (p not
  // kept) when it does not fit.
  bool keep(float* p) {
    const size_t b = block_bytes(p);
    if (b < kCacheMinBytes || b > kCacheMaxBytes) return false;
    while (count == kCacheSlots || bytes + b > kCacheMaxBytes) {
      int smallest = 0;
      for (int i = 1; i < count; ++i) {
        if (block_bytes(block[i]) < block_bytes(block[smallest])) smallest = i;
      }
      if (block_bytes(block[smallest]) > b) return false;
      bytes -= block_bytes(block[smallest]);
      free_block(block[smallest]);
      block[smallest] = block[--count];
    }
    block[count++] = p;
    bytes += b;
    Q4_POISON(p, b);
    return true;
  }
};

// This thread's cache, or null once it is gone.
BlockCache* block_cache() {
  if (t_cache_gone) return nullptr;
  thread_local BlockCache cache;
  return &cache;
}

}  // namespace

void AlignedDelete::operator()(float* p) const {
  if (p == nullptr) return;
  BlockCache* cache = block_cache();
  if (cache == nullptr || !cache->keep(p)) free_block(p);
}

AlignedFloats aligned_floats(int64_t floats) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(floats, 16)) * sizeof(float);
  if (BlockCache* cache = bytes >= kCacheMinBytes ? block_cache() : nullptr) {
    if (float* kept = cache->take(bytes)) return AlignedFloats(kept);
  }
  void* base = std::malloc(bytes + 64);
  if (base == nullptr) throw std::bad_alloc();
  const uintptr_t at = (reinterpret_cast<uintptr_t>(base) + 64) & ~uintptr_t{63};
  auto* p = reinterpret_cast<unsigned char*>(at);
  std::memcpy(p - sizeof(void*), &base, sizeof(void*));
  std::memcpy(p - 2 * sizeof(void*), &bytes, sizeof bytes);
  // Under ASan the alignment slack before the header and after the block
  // is poisoned: malloc's own redzones lie beyond it, so a kernel writing
  // a few bytes past its buffer would otherwise go unseen there and
  // corrupt the heap in a build without ASan whenever malloc returned a
  // 64-byte aligned base (no slack after the block then).
  auto* b = static_cast<unsigned char*>(base);
  Q4_POISON(b, static_cast<size_t>(p - 2 * sizeof(void*) - b));
  Q4_POISON(p + bytes, static_cast<size_t>(b + bytes + 64 - (p + bytes)));
  return AlignedFloats(reinterpret_cast<float*>(p));
}

}  // namespace q4::kern
