// Multi-threaded drivers around the kernel table: split the work, block it
// for the caches, call the table's kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

#include "kernels/kernel_table.h"

namespace q4::kern {

// Cache blocking of the panel GEMM (the tuner's parameters).
struct GemmBlocking {
  // K per packed panel. 512: with the 4-bit panels packed by dword
  // transposes, 512 ran 1.05-1.13x faster than 256 at exact M = 32-512
  // (4096^2, Cascade Lake-class Xeon; 1024 another 1.02-1.05x, left to the
  // tuner: its 128 KiB panels need a large L2).
  int64_t kc = 512;
  int64_t mc = 96;  // rows of X per pass over a panel column
};

// The blocking in force: tuned for this CPU when a tuning result is loaded,
// else the defaults.
GemmBlocking gemm_blocking();
void set_gemm_blocking(const GemmBlocking& b);

// The small-batch kernels' settings (the tuner's parameters): the M range
// they take (below it the fused GEMV, above it the panel GEMM), the K chunk
// of a decoded weight tile, and the split of long K: a product whose K
// exceeds split_k (and whose M is below the panel GEMM) is cut into
// ceil(K / split_k) column parts of equal size (multiples of 16), summed in
// part order (the GEMV below min_m is not split). The split depends on the shape only, never on the thread
// count, so results do not depend on the thread count either.
struct SmallBatchConfig {
  int32_t min_m = 9;
  int32_t max_m = 0;  // 0: the kernel table's small_batch_max_m (what the tuner sets overrides it)
  int64_t kc = 512;
  int64_t split_k = 4096;
};
SmallBatchConfig small_batch_config();
// The largest M of the small-batch kernels: c.max_m, or the table's
// default when c.max_m is 0.
inline int32_t small_batch_max_m(const KernelTable& kt, const SmallBatchConfig& c) {
  return c.max_m != 0 ? c.max_m : kt.small_batch_max_m;
}
// The same for a weight of n rows: at most kt.small_batch_short_max_m when
// n is at most kt.small_batch_short_n.
inline int32_t small_batch_max_m(const KernelTable& kt, const SmallBatchConfig& c, int64_t n) {
  const int32_t m = small_batch_max_m(kt, c);
  return n <= kt.small_batch_short_n ? std::min(m, kt.small_batch_short_max_m) : m;
}
void set_small_batch_config(const SmallBatchConfig& c);
// The rows (N) of the weight the tuner times the small-batch settings on,
// given its size d (a multiple of 16): d, or the next multiple of 16
// above kt.small_batch_short_n (such weights keep the table's fixed range,
// so timing one would compare the panel GEMM with itself).
inline int64_t small_batch_tuning_rows(const KernelTable& kt, int64_t d) {
  return std::max<int64_t>(d, (kt.small_batch_short_n / 16 + 1) * 16);
}

// MXFP4's E8M0 scales in place (NvWeights::e8m0) under a GEMV that does not
// read them: E4M3 codes are made per piece of rows of about this many
// bytes (default 256 KiB, read back from L2; a piece is at least 16 rows).
// Tests set it small to cross piece boundaries.
int64_t e8m0_piece_bytes();
void set_e8m0_piece_bytes(int64_t bytes);

// Sets the tasks per thread the drivers split a GEMV's rows into (default
// 4; at least 1), for measurements (tools/ab, AB_GEMV_TASKS).
void set_gemv_tasks_per_thread(int32_t tasks);

// Sets the least work (multiply-adds) of an integer GEMV task that splits
// the rows of x (default 256 Ki, which work <= 0 restores), for
// measurements (tools/ab, AB_I8_MIN_WORK).
void set_i8_xsplit_min_task_work(int64_t work);

// y[m, n] = x[m, k] . W^T (fp32 accumulation). m < min_m uses the fused
// GEMV kernels, m in [min_m,
// max_m] the small-batch kernels, both reading fp16/bf16 rows directly
// (converted in registers); larger m the packed-panel GEMM, which converts
// the block of fp16/bf16 X it is about to use into an L2 buffer
// (act_to_f32), never X as a whole; the same bits as fp32 rows.
//
// signs (NVFP4; nullptr when the caller checked the scales beforehand): the
// sign rule on the way (ScaleSigns): the GEMV's kernels check the rows
// they read; the other paths scan the scales in one parallel pass first.
void linear_nvfp4(const KernelTable& kt, ActRows x, int64_t m, const NvWeights& w, int64_t n, float* y,
                  int32_t threads, ScaleSigns* signs = nullptr);
void linear_nf4(const KernelTable& kt, ActRows x, int64_t m, const Nf4Weights& w, int64_t n, float* y,
                int32_t threads);
// y[m, n] = x[m, k] . w[n, k]^T for fp32 w (the dequant-matmul backend);
// x fp32, fp16 or bf16 (the panel GEMM's blockwise conversion).
void gemm_f32(const KernelTable& kt, ActRows x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
              int32_t threads, const GemmBlocking& blocking);

// ---- Integer paths (W4A4 and fast math mode) ------------------------------
// Which math a product actually ran.
enum class MathUsed : int32_t { Exact = 0, Int8 = 1 };

// Why fast math mode runs the exact kernels on table kt, or nullptr when it
// runs the integer kernels. NVFP4: the ISA has no integer kernels of its own
// (fast mode is then never slower than exact). NF4: the same (its integer
// path and error bound: linear_nf4_int8).
const char* fast_math_fallback_nvfp4(const KernelTable& kt);
const char* fast_math_fallback_nf4(const KernelTable& kt);
// Why fast mode runs the exact kernels for this M on table kt and a weight
// of n rows (M above the table's i8_fast_max_m, where the exact path for
// that weight is the small-batch family), or nullptr.
const char* fast_math_fallback_rows(const KernelTable& kt, int64_t m, int64_t n);
// Why fast mode runs the exact kernels for an N x K weight on table kt:
// the activations' quantization (M x K values on every call) is not paid
// back by the integer product over so few weight rows (or so short a K),
// or nullptr. Independent of M, so a linear's results do not depend on
// the batch.
const char* fast_math_fallback_shape(const KernelTable& kt, int64_t n, int64_t k);
// Why NF4 fast mode runs the exact kernels for this M on table kt (no NF4
// integer GEMV on the table, or M above it), or nullptr.
const char* fast_math_fallback_nf4_rows(const KernelTable& kt, int64_t m);
// Why NF4 weights w cannot take the integer path (K % 16, blocksize < 16,
// non-finite or zero code values), or nullptr.
const char* fast_math_fallback_nf4_weights(const Nf4Weights& w);

// Fast math mode: activations (fp32, or fp16/bf16 converted a row at a
// time in cache) quantized to int8 per block of 16 (scale
// amax/127, round half away from zero), then integer dot products with the
// E2M1x2 weights, block partials accumulated in the fixed fp32 order of
// KernelTable::i8_micro (bit-identical on every ISA), times g/2.
// Error: |y - y_exact| <= sum_b (xs_b / 2) * sum_{k in b} |w_k| (+ fp32
// rounding, (K/16 + 1) 2^-24 sum|terms|), xs_b = amax_b(x) / 127.
// Falls back to linear_nvfp4 / linear_nf4 (exact) as fast_math_fallback_*
// says; returns the math that ran.
MathUsed linear_nvfp4_fast(const KernelTable& kt, ActRows x, int64_t m, const NvWeights& w, int64_t n,
                           float* y, int32_t threads, ScaleSigns* signs = nullptr);
MathUsed linear_nf4_fast(const KernelTable& kt, ActRows x, int64_t m, const Nf4Weights& w, int64_t n,
                         float* y, int32_t threads);
// The integer fast path itself, on any table (its i8 entries), no fallback.
void linear_nvfp4_int8(const KernelTable& kt, ActRows x, int64_t m, const NvWeights& w, int64_t n, float* y,
                       int32_t threads, ScaleSigns* signs = nullptr);
// NF4 fast mode on the integer kernels (no fallback; the caller checked
// fast_math_fallback_nf4_weights): activations as above (bias kI8Nf4Bias),
// the NF4 codes mapped by i8_nf4_codebook, block partials xs * absmax in the
// fixed order, times post = max|lut| / 63. Error against the exact product:
// |y - y_exact| <= sum_k (xs_b(k) / 2) |w_k| + sum_k (|x_k| + xs_b(k) / 2)
// absmax_k max|lut| / 126 (+ fp32 rounding as above).
void linear_nf4_int8(const KernelTable& kt, ActRows x, int64_t m, const Nf4Weights& w, int64_t n, float* y,
                     int32_t threads);

// W4A4 NVFP4_scaled_mm on the integer kernels: A [m, k] NVFP4 codes with
// linear E4M3 scales (A's global scale not applied), exact block sums,
// y = (fixed-order fp32 sum of int32 dot * sA * sW) * (g / 4). Runs on any
// table's i8 entries (callers check kt.i8_native to prefer the fp32 path
// on ISAs without integer kernels).
void scaled_mm_w4a4_int8(const KernelTable& kt, const uint8_t* aq, const uint8_t* as, int64_t m,
                         const NvWeights& w, int64_t n, float* y, int32_t threads);

// out (n elements in its type: fp32, fp16 or bf16) from fp32 that
// fill(e0, len, dst) writes (elements [e0, e0 + len) at dst; e0 and len
// multiples of `unit`, the format's block, but the last len). fp32 out is
// filled in place, in tasks of kDecodeTaskElems. fp16/bf16 out: by
// fill16(e0, len, dst) in place when given (the table's fused 16-bit
// entry), in tasks of kDecode16TaskElems; otherwise through a buffer of
// kDecodePieceElems (rounded up to whole units) that stays in L1,
// converted by kt.f32_to_act, so a 16-bit output never costs a fp32 copy
// of the tensor.
constexpr int64_t kDecodeTaskElems = int64_t{16} << 10;
constexpr int64_t kDecode16TaskElems = int64_t{64} << 10;
constexpr int64_t kDecodePieceElems = 2048;
using Fill16 = std::function<void(int64_t, int64_t, uint16_t*)>;
void blocks_to_output(const KernelTable& kt, int64_t n, int64_t unit, FloatOut out, int32_t threads,
                      const std::function<void(int64_t, int64_t, float*)>& fill, const Fill16& fill16 = {});
// Block scales [rows, cols] from the swizzled layout to the linear one
// (unswizzle_scales of portable.h) over `threads`, in tasks of whole
// 128-row bands (each band's tiles are contiguous).
void unswizzle_scales_parallel(const uint8_t* sw, int64_t rows, int64_t cols, uint8_t* lin, int32_t threads);
// And the other way (swizzle_scales: the padding zeroed), likewise.
void swizzle_scales_parallel(const uint8_t* lin, int64_t rows, int64_t cols, uint8_t* sw, int32_t threads);
void dequantize_nvfp4(const KernelTable& kt, const uint8_t* q, const uint8_t* s, float g, int64_t rows,
                      int64_t k, FloatOut out, int32_t threads);
void dequantize_nvfp4(const KernelTable& kt, const uint8_t* q, const uint8_t* s, float g, int64_t rows,
                      int64_t k, float* out, int32_t threads);
float amax(const KernelTable& kt, const float* x, int64_t n, int32_t threads);

// NF4 quantization (the table's nf4_quantize_blocks) over `threads`, tasks of whole
// blocks (every block's bytes and absmax depend on it alone: the result does
// not depend on the thread count). Validate-before-write in one pass over
// x: returns -1 after writing q and absmax, or the flat index of the first
// NaN/Inf with nothing written.
int64_t nf4_quantize(const KernelTable& kt, FloatPtr x, int64_t n, int64_t blocksize, uint8_t* q,
                     float* absmax, int32_t threads);

// The fp32 absmax of NF4 blocks [b0, b1) into out[0, b1 - b0): a copy, or
// for double-quantized statistics nested_map[code] * nested_absmax[j] +
// offset (Nf4Stats::absmax_of_block's bits) with no division per block.
void nf4_absmax_range(const Nf4Stats& st, int64_t b0, int64_t b1, float* out);
// All nblocks of them over `threads` (tasks of 64 Ki blocks).
void nf4_absmax_all(const Nf4Stats& st, int64_t nblocks, float* out, int32_t threads);

// NF4 dequantization of n elements into fp32, fp16 or bf16 `out` over
// `threads`: tasks of whole blocks resolve their absmax (nested or not)
// once per block and run the table's nf4_dequantize (16-bit outputs through
// a buffer in cache); the element value is the code value times the block's
// absmax, one fp32 product, whatever the table.
void nf4_dequantize(const KernelTable& kt, const uint8_t* q, const Nf4Stats& st, int64_t n, FloatOut out,
                    int32_t threads);

// memcpy(dst, src, bytes) with non-temporal stores where the ISA has them
// (x86-64; elsewhere memcpy itself), ending with a store fence: dst's lines
// are written without being read first or displacing the cache. Used for
// the large copies of staged quantization results.
void stream_copy(uint8_t* dst, const uint8_t* src, int64_t bytes);

// NVFP4 quantization of fp32, fp16 or bf16 rows x [rows, k] with the finite
// check fused into the passes over x (16-bit rows converted exactly, a task's
// rows at a time in cache, inside the same passes); validate-before-write: returns -1 after writing q,
// s (linear scales) and *g_used, or the flat index of the FIRST NaN/Inf of x
// having written nothing. g > 0 is the global scale to use; g == 0 derives
// it from amax(x) (the codec's rule).
//
// g given: ONE pass over x. Tasks of rows (up to 256 Ki elements; 16-bit
// input read in place by the table's nvfp4_quantize_checked16, else
// converted in 64 KiB pieces) check their rows (the block maxima) and
// quantize them into a staging buffer; only when every task found its rows
// finite is the staging copied into q and s (the copy moves 0.56 bytes per
// element against the 4 that a separate check pass would re-read; a large
// one with non-temporal stores, stream_copy). g derived: the global scale needs the
// amax of all of x before any element can be coded, so two passes: the
// finite check and the amax in one read, then the quantization straight
// into q and s (x is known finite by then).
int64_t quantize_nvfp4_checked(const KernelTable& kt, ActRows x, int64_t rows, int64_t k, float g,
                               float* g_used, uint8_t* q, uint8_t* s, int32_t threads);

// MXFP4 quantization of fp32, fp16 or bf16 rows x [rows, k] (k % 32 == 0)
// into q and linear E8M0 scales s, in ONE pass over x with the finite check
// fused into the block maxima (as the given-scale NVFP4 case above):
// returns -1 after writing q and s, or the flat index of the FIRST NaN/Inf
// having written nothing.
int64_t quantize_mxfp4_checked(const KernelTable& kt, ActRows x, int64_t rows, int64_t k, uint8_t* q,
                               uint8_t* s, int32_t threads);

}  // namespace q4::kern
