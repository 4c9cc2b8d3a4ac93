// The CPU kernel table: one table per ISA, its fast kernels built in their
// own translation unit with its own compile flags, picked from CPUID /
// HWCAP and the ISA cap (dispatch.cpp). Every entry has the same contract in
// every table; tests/test_kernels.cpp forces each table this CPU can run and
// compares every entry with the scalar reference (src/kernels/ref/).
//
// Conventions: activations are fp32 except for the GEMV and small-batch
// entries, which take fp32, fp16 or bf16 rows (ActRows) and convert them in
// registers while splitting them; the drivers (cpu_ops.h) bring fp16/bf16
// rows to the other entries through act_to_f32, a cache-sized piece at a
// time, never as a separate pass over the activations; NVFP4
// block scales are linear [rows, K/16] (callers unswizzle first), NF4 absmax
// are resolved to fp32 per block.
#pragma once

#include <atomic>
#include <cstdint>

#include "kernels/kernel_types.h"

namespace q4::kern {

struct ScaleSigns;

// NVFP4 weight [N, K]: row r is q + r*K/2 (element 2j low nibble) and
// s + r*K/16 (E4M3 codes); g is the global scale (a multiplier). signs:
// when set, nvfp4_gemv and i8_gemv_nvfp4 also check the sign rule on the
// scales they read (ScaleSigns); the other entries ignore it.
struct NvWeights {
  const uint8_t* q = nullptr;
  const uint8_t* s = nullptr;
  float g = 1.0f;
  int64_t k = 0;
  ScaleSigns* signs = nullptr;
  // Optional (null: none): the codes of q again in the tile order of
  // i8_tile_codes (a session linear's copy for the tables with
  // i8_reads_tiles); only the integer GEMV entries read it.
  const uint8_t* tiles = nullptr;
  // Optional with tiles: the E4M3 scale codes of every full group of 16
  // rows in the order the AVX-512 integer GEMV transposes them to
  // (i8_tile_scales), and one byte per group (bit 0: every code of the
  // group is a normal positive E4M3), so that a group needs no transpose or
  // check of its scales. Read only where signs is null.
  const uint8_t* tile_scales = nullptr;
  const uint8_t* tile_flags = nullptr;
  // Optional, with s null: MXFP4's E8M0 scales [N, K/32] in place of s
  // (a stateless MXFP4 product, every byte checked to lie in E4M3's window
  // under g = 2^e8m0_t): NVFP4 block b of row r is scaled by
  // 2^(e8m0[r * K/32 + b/2] - 127 - e8m0_t), exactly the E4M3 code
  // e8m0_to_e4m3 gives. Read by nvfp4_gemv (K % 128 == 0, or K % 64 == 0 up
  // to gemv_chunk_max_m_k64 rows) and i8_gemv_nvfp4 (any K it takes) of the
  // tables with reads_e8m0; the drivers (cpu_ops.h) make E4M3 codes for
  // every other entry.
  const uint8_t* e8m0 = nullptr;
  int32_t e8m0_t = 0;
  // Optional, with s and e8m0 null: the E4M3 scale codes [N, K/16] in the
  // swizzled layout (fmt::swizzle_offset: 128-row bands of 512-byte
  // tiles; a stateless NVFP4 product's scales as its caller gave them). No
  // kernel reads them: the drivers (cpu_ops.h) make them linear a piece of
  // whole bands at a time into a task's own buffer right before its rows
  // run, or all at once for the paths that read whole columns of rows.
  const uint8_t* swizzled = nullptr;
};

// out[2i] = out[2i+1] = the E4M3 code of E8M0 byte e8m0[i] under 2^t (n
// bytes: NvWeights::e8m0's rows, each byte standing for two blocks of 16),
// 0xFF for a byte outside the window (formats/mxfp4.h,
// mx_nv_scale_byte_u8).
void e8m0_to_e4m3(const uint8_t* e8m0, int64_t n, int32_t t, uint8_t* out);

// The smallest and largest of n bytes (255 and 0 when n <= 0): one
// vectorized pass (the MXFP4 scale checks).
void byte_range(const uint8_t* p, int64_t n, uint8_t* lo, uint8_t* hi);

// The tile order of 4-bit codes [N, K] (K % 128 == 0, K/2 bytes per row):
// the rows of every full group of 16 (rows 16t .. 16t+15, t < N/16) at
// the group's own offset 16t * K/2, chunk by chunk of 128 elements: for
// chunk c and quarter h (16 bytes of each row), 256 bytes at
// 16t * K/2 + (c*4 + h) * 256 where byte 64d + 4r + e is byte
// c*64 + h*16 + 4d + e of row 16t + r (d, e < 4, r < 16): the order in
// which the AVX-512 integer GEMV puts them in registers (dword d of the
// 16 rows in one vector), so it loads whole vectors from one stream
// instead of 16 rows' quarters with a transpose. A last group of fewer
// than 16 rows is not tiled (floor(N/16) * 16 * K/2 bytes in all).
int64_t i8_tile_bytes(int64_t n, int64_t k);
void i8_tile_codes(const uint8_t* q, int64_t n, int64_t k, uint8_t* out);
struct KernelTable;
// The same bytes, the groups spread over `threads` (0 = default), each
// tiled by kt.i8_tile_group where the table has one (the scalar loop of
// i8_tile_codes otherwise). With `copy` (not null, N*K/2 bytes apart
// from q and out): q's N*K/2 bytes are also copied there in the same pass,
// each group's rows right before they are tiled (q read once: a fast-mode
// linear copies and tiles its caller's bytes). With `stream` and 4 MiB of
// tiles or more, the tiles (through a buffer in L1 or L2) and the copy are
// written by non-temporal stores (a linear's update into a retired
// weight's memory, as core::copy_bytes).
void i8_tile_codes(const KernelTable& kt, const uint8_t* q, int64_t n, int64_t k, uint8_t* out,
                   int32_t threads, uint8_t* copy = nullptr, bool stream = false);
// NVFP4 E4M3 scale codes [N, K/16] (K % 128 == 0) of every full group of
// 16 rows: per group (at t/16 * i8_tile_scale_group_bytes(k)), spans of 64
// blocks of 1024 bytes, byte 64j + 16L + r of span p = the code of block
// 64p + 16L + j of row t + r (zero past the row's last block); flags[t/16]
// bit 0 = every code of the group's rows is in [0x08, 0x7e].
int64_t i8_tile_scale_group_bytes(int64_t k);
void i8_tile_scales(const uint8_t* s, int64_t n, int64_t k, uint8_t* out, uint8_t* flags);
// The same bytes over `threads`, by kt.i8_tile_scale_group where the table
// has one; with `copy` (not null), s's N*K/16 bytes also copied there in
// the same pass, as i8_tile_codes does.
void i8_tile_scales(const KernelTable& kt, const uint8_t* s, int64_t n, int64_t k, uint8_t* out,
                    uint8_t* flags, int32_t threads, uint8_t* copy = nullptr);
// NF4 absmax [N, K/blocksize] (K % blocksize == 0) of every full group of
// 16 rows, block-major: float t*K/blocksize + 16j + r = absmax of block j
// of row t + r (t a multiple of 16); floor(N/16)*16*K/blocksize floats.
int64_t i8_tile_absmax_floats(int64_t n, int64_t k, int64_t blocksize);
void i8_tile_absmax(const float* absmax, int64_t n, int64_t k, int64_t blocksize, float* out);

// Whether any of the n bytes has its top bit (the E4M3 sign) set.
bool any_sign_bit(const uint8_t* bytes, int64_t n);

// The NVFP4 sign rule (a scale byte >= 0x80 is invalid input) checked on
// the way by a product rather than by a pass of its own before it: the
// kernels that read the scales set `negative` when one has its sign bit
// set, and compute y anyway, so that the caller computes into a buffer of
// its own and reports the scale instead of publishing y. A GEMV from
// memory saves the separate pass over the scales (docs/performance.md).
struct ScaleSigns {
  std::atomic<bool> negative{false};
  // Scans rows [n0, n1) of w itself (kernels without a fused check).
  void scan(const NvWeights& w, int64_t n0, int64_t n1) {
    const int64_t kb = w.k / 16;
    if (n1 > n0 && any_sign_bit(w.s + n0 * kb, (n1 - n0) * kb))
      negative.store(true, std::memory_order_relaxed);
  }
};

// What every nvfp4_gemv without a fused check does last.
inline void report_scale_signs(const NvWeights& w, int64_t n0, int64_t n1) {
  if (w.signs != nullptr) w.signs->scan(w, n0, n1);
}

// NF4 weight of N*K elements (flat blocks of `blocksize`, element 2j in the
// high nibble), absmax resolved to fp32, lut = 16 code values.
struct Nf4Weights {
  const uint8_t* q = nullptr;
  const float* absmax = nullptr;
  const float* lut = nullptr;
  int64_t k = 0;
  int64_t blocksize = 64;
  int32_t block_shift = 6;         // log2(blocksize): blocksize is a power of two
  const uint8_t* tiles = nullptr;  // as NvWeights::tiles (K % 128 == 0: row r at q + r*K/2)
  // Optional with tiles (K % blocksize == 0): the absmax of every full
  // group of 16 rows, block-major (i8_tile_absmax), so that the 16 rows'
  // absmax of a block are one load instead of a gather.
  const float* tile_absmax = nullptr;
};

// Activation rows of a GEMV entry: fp32, fp16 or bf16 elements at `data`
// (row i at element offset i*ldx). Implicit from a float pointer.
struct ActRows {
  const void* data = nullptr;
  FType type = FType::F32;
  ActRows(const float* p) : data(p) {}  // NOLINT(google-explicit-constructor): fp32 rows
  ActRows(const void* p, FType t) : data(p), type(t) {}
};

// Largest M the fused GEMV kernels take in one call.
constexpr int kGemvMaxRows = 8;

// Integer panels: rows per panel, the bias added to the E2M1x2 weight
// values (makes them unsigned for u8 x s8 instructions), the element order
// inside a block (step t, byte e -> element kI8Perm[4t + e]: the low
// nibbles of bytes 0-3, their high nibbles, then the same of bytes 4-7).
constexpr int32_t kI8PanelNr = 16;
constexpr int32_t kI8WeightBias = 12;
constexpr int32_t kI8MaxMicroRows = 16;
constexpr int32_t kI8GemvMaxRows = 4;
constexpr int32_t kI8Nf4Bias = 63;  // NF4 int8 codes in [-63, 63]: vpmaddubsw pairs stay below 2^15
// Without VNNI a dot product of u8 weights (biased, at most max_biased) and
// s8 activations (|x| <= 127) is vpmaddubsw (int16 pair sums), vpmaddwd
// and vpaddd; `terms` vpmaddubsw results may be added in int16 first (one
// vpmaddwd for all: the same integer, fewer instructions) when their sum
// cannot leave int16. NVFP4's biased E2M1 (<= 24): up to 5; NF4 (<= 126):
// 1.
constexpr int32_t kI8MaxBiasedNvfp4 = 2 * 6 + kI8WeightBias;
constexpr int32_t kI8MaxBiasedNf4 = 2 * kI8Nf4Bias;
constexpr bool i8_int16_sums(int32_t max_biased, int32_t terms) {
  return terms * 2 * 127 * max_biased <= 32767;
}
constexpr int32_t kI8Perm[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};

struct KernelTable {
  int32_t isa = 0;
  int32_t panel_nr = 8;  // rows of W per packed panel (lanes of the micro-kernel)
  int32_t micro_mr = 4;  // rows of X per micro-kernel call (max)

  // y[i*ldy + (j - n0)] = sum_k x[i*ldx + k] * w(j, k) for i < m <= 8
  // (m <= gemv_max_m_k128 when K % 128 == 0), j in [n0, n1). Weight values
  // are (e2m1 * s) * g; fp32 accumulation. With w.signs set, also the sign
  // rule on the scales of rows [n0, n1) (report_scale_signs, or fused).
  void (*nvfp4_gemv)(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float* y,
                     int64_t ldy) = nullptr;
  // Same for NF4 (requires K % 32 == 0; the driver falls back otherwise).
  void (*nf4_gemv)(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, float* y,
                   int64_t ldy) = nullptr;

  // Small-batch products (src/kernels/small_batch.h; the AVX2 table's:
  // src/kernels/avx2/small_batch_lanes_avx2.h), any m >= 1: for
  // i < m and j in [n0, n1), y[i*ldy + (j - n0)] = post * sum over columns
  // kk in [k0, k1) of x[i*ldx + kk] * w(j, kk), where w is e2m1 * scale and
  // post = g (NVFP4), or the NF4 value and post = 1; k0 and k1 multiples of
  // 16; x fp32, fp16 or bf16 (converted in registers). The weights of a
  // tile of rows are decoded once per `kc` columns and reused for all m
  // rows of X. Each output's fp32 sequence is fixed (small_batch.h:
  // lane-wise ascending k, then one reduction; the AVX2 kernel: one FMA
  // chain in ascending k) whatever m, n0, n1 and kc are: kc is a speed knob
  // only. NF4 requires K % 16 == 0 and blocksize >= 16.
  void (*nvfp4_small)(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1,
                      int64_t k0, int64_t k1, float* y, int64_t ldy, int64_t kc) = nullptr;
  void (*nf4_small)(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1,
                    int64_t k0, int64_t k1, float* y, int64_t ldy, int64_t kc) = nullptr;

  // Packs W rows [n0, n0+rows) x columns [k0, k0+kc) as fp32 into
  // panel[kk * panel_nr + r]; rows >= `rows` are zero.
  void (*nvfp4_panel)(const NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc,
                      float* panel) = nullptr;
  void (*nf4_panel)(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc,
                    float* panel) = nullptr;
  void (*f32_panel)(const float* w, int64_t ldw, int64_t n0, int32_t rows, int64_t k0, int64_t kc,
                    float* panel) = nullptr;

  // y[i*ldy + r] (+)= sum_{kk<kc} x[i*ldx + kk] * panel[kk*panel_nr + r],
  // i < mr <= micro_mr, r < nr <= panel_nr; accumulate=false overwrites.
  void (*gemm_micro)(const float* x, int64_t ldx, int32_t mr, const float* panel, int64_t kc, float* y,
                     int64_t ldy, int32_t nr, bool accumulate) = nullptr;

  // dst[i] = element first + i of the fp32/fp16/bf16 data at src, as fp32
  // (exact), i < n: the in-register conversion of the small-batch kernels
  // for the drivers that feed fp32 entries from 16-bit rows.
  void (*act_to_f32)(const void* src, FType t, int64_t first, int64_t n, float* dst) = nullptr;
  // Its inverse, for outputs: element first + i of base, in type t, =
  // src[i] (fp16/bf16: round to nearest even, NaN and Inf as
  // fmt::f32_to_f16 / f32_to_bf16 give them), i < n. Nothing else written.
  void (*f32_to_act)(void* base, FType t, int64_t first, int64_t n, const float* src) = nullptr;

  // Bit-exact NVFP4 quantization of rows x [rows, K] (the codec's rounding) with linear
  // scales; and dequantization to fp32 rows. Rows are contiguous runs of
  // blocks, so the drivers dequantize any run of whole blocks as one row
  // (rows = 1, k = its length; likewise mxfp4_dequantize).
  void (*nvfp4_quantize)(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) = nullptr;
  void (*nvfp4_dequantize)(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k,
                           float* out) = nullptr;
  // NF4 dequantization of n elements (n % 16 == 0) from the first element
  // of a block (q at its byte; blocksize a multiple of 16): out[i] =
  // lut[code] * absmax[i / blocksize], code = the high nibble of q[i/2] for
  // even i, the low one for odd i (as fmt::nf4_decode's users read it).
  void (*nf4_dequantize)(const uint8_t* q, const float* lut, const float* absmax, int64_t blocksize,
                         int64_t n, float* out) = nullptr;
  // MXFP4 dequantization of rows [rows, K] (K % 32 == 0, linear E8M0
  // scales) to fp32: e2m1 * 2^(byte - 127) per element, as
  // fmt::mxfp4_decode_element (byte 0xFF gives NaN).
  void (*mxfp4_dequantize)(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t k, float* out) = nullptr;
  // Optional (null: the drivers decode fp32 pieces into an L1 buffer and
  // convert them, blocks_to_output): nvfp4_dequantize, mxfp4_dequantize and
  // nf4_dequantize straight to fp16 (bf16 false) or bf16, each element the
  // fp32 entry's value rounded once as f32_to_act rounds it (the codec's
  // f32_to_f16 / f32_to_bf16), decoded, converted and stored in registers
  // so that the stores to the output are spread over the work.
  void (*nvfp4_dequantize16)(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k,
                             uint16_t* out, bool bf16) = nullptr;
  void (*mxfp4_dequantize16)(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t k, uint16_t* out,
                             bool bf16) = nullptr;
  void (*nf4_dequantize16)(const uint8_t* q, const float* lut, const float* absmax, int64_t blocksize,
                           int64_t n, uint16_t* out, bool bf16) = nullptr;
  // Bit-exact MXFP4 quantization of rows x [rows, K] (K % 32 == 0): E8M0
  // bytes of the block maxima (fmt::mxfp4_scale_byte), linear, and the codes
  // fmt::mxfp4_encode_element gives; false when some x is NaN or Inf (seen
  // in the block maxima; q and s are then partly written: the drivers
  // quantize into staging, quantize_mxfp4_checked).
  bool (*mxfp4_quantize)(const float* x, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) = nullptr;
  // Optional (null: the drivers convert fp16/bf16 input to fp32 first):
  // mxfp4_quantize of fp16 (bf16 false) or bf16 input read in place,
  // widened to fp32 in registers (exact), as nvfp4_quantize_checked16.
  bool (*mxfp4_quantize16)(const uint16_t* x, bool bf16, int64_t rows, int64_t k, uint8_t* q,
                           uint8_t* s) = nullptr;
  // Optional (null: absmax_bits, then nvfp4_quantize): the same
  // quantization of possibly non-finite input with the finite check fused
  // into the block maxima; false when some x is NaN or Inf (q and s are
  // then partly written: the drivers quantize into staging).
  bool (*nvfp4_quantize_checked)(const float* x, int64_t rows, int64_t k, float g, uint8_t* q,
                                 uint8_t* s) = nullptr;
  // Optional (null: the drivers convert fp16/bf16 input to fp32 first):
  // nvfp4_quantize_checked of fp16 (bf16 false) or bf16 input read in
  // place, each element widened to fp32 in registers (exact), so the
  // bytes are those of quantizing the fp32 values.
  bool (*nvfp4_quantize_checked16)(const uint16_t* x, bool bf16, int64_t rows, int64_t k, float g, uint8_t* q,
                                   uint8_t* s) = nullptr;
  // Optional (null: the two entries above): the same bytes, for an input
  // large enough to be read from memory (kQuantizeFarMinBytes): each line
  // prefetched further ahead, into L2 (AVX-512 on quantize_prefetch_l2()
  // CPUs; in cache it is 2-7 % slower than the entries above).
  bool (*nvfp4_quantize_checked_far)(const float* x, int64_t rows, int64_t k, float g, uint8_t* q,
                                     uint8_t* s) = nullptr;
  bool (*nvfp4_quantize_checked16_far)(const uint16_t* x, bool bf16, int64_t rows, int64_t k, float g,
                                       uint8_t* q, uint8_t* s) = nullptr;
  // NF4 quantization of blocks [b0, b1) of x (n elements, fp32/fp16/bf16):
  // the bytes and absmax of fmt::nf4_quantize_block (nf4_quantize_impl.h);
  // false when some element is NaN or Inf (every block is still coded).
  bool (*nf4_quantize_blocks)(FloatPtr x, int64_t n, int64_t blocksize, int64_t b0, int64_t b1, uint8_t* q,
                              float* absmax) = nullptr;
  // max |x_i| (finite input).
  float (*amax)(const float* x, int64_t n) = nullptr;
  // The largest |x_i| bit pattern (sign cleared, compared as an unsigned
  // integer; 0 for n = 0): >= 0x7f800000 exactly when some x_i is NaN or
  // Inf, else the bits of max |x_i|. One read gives the finite check and the
  // amax together.
  uint32_t (*absmax_bits)(const float* x, int64_t n) = nullptr;
  // Optional (null: the drivers convert fp16/bf16 input to fp32 first):
  // absmax_bits of n fp16 (bf16 false) or bf16 elements read in place. The
  // same bits as on the fp32 values: widening keeps the order of |x| bit
  // patterns (NaN and Inf above every finite one), so it is the largest
  // 16-bit |x| pattern widened.
  uint32_t (*absmax_bits16)(const uint16_t* x, int64_t n, bool bf16) = nullptr;

  // ---- Integer block dot products (W4A4 NVFP4_scaled_mm, fast math mode).
  // Operands, the same for every ISA (kI8PanelNr = 16 weight rows a panel):
  //  - weight panel of rows [n0, n0+16) and blocks [b0, b0+nb): for block
  //    b, row r and step t < 4, the 4 bytes wq[b*256 + t*64 + r*4 + e] are
  //    the E2M1x2 values + kI8WeightBias (so in [0, 24], unsigned) of block
  //    elements kI8Perm[4t + e]; ws[b*16 + r] = E4M3 scale as fp32; rows
  //    >= `rows` hold value 0 (stored as kI8WeightBias) and scale 0;
  //  - activation row i: int8 values xq[i*ldxq + 16b + 4t + e] in the same
  //    element order, fp32 block scale xs[i*ldxs + b] and the bias
  //    correction xc[i*ldxs + b] = -kI8WeightBias * sum of the block's xq.
  // i8_micro computes, for i < mr <= i8_micro_mr and r < nr <= 16, the ONE
  // fixed fp32 sequence (what makes every ISA bit-identical):
  //   acc = accumulate ? y[i*ldy + r] : 0
  //   for b = 0 .. nb-1 (ascending):
  //     dot = xc + sum_{e<16} xq * wq          (int32, exact)
  //     acc = fma(float(dot), xs[b] * ws[b*16 + r], acc)   (one product, one fma)
  //   y[i*ldy + r] = acc
  void (*i8_pack_nvfp4)(const NvWeights& w, int64_t n0, int32_t rows, int64_t b0, int64_t nb, uint8_t* wq,
                        float* ws) = nullptr;
  void (*i8_micro)(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                   int32_t mr, const uint8_t* wq, const float* ws, int64_t nb, float* y, int64_t ldy,
                   int32_t nr, bool accumulate) = nullptr;
  int32_t i8_micro_mr = 4;
  // Optional (null: i8_micro per panel): i8_micro over two adjacent panels
  // at once, the first full (16 rows), the second at wq + wq_stride bytes
  // and ws + ws_stride floats with nr2 <= 16 rows, its outputs at y + 16.
  // Each output's fp32 sequence is i8_micro's, so the bits are the same; a
  // broadcast of x then feeds two dot products (AVX-512 VNNI: the loads of
  // x, not the dot products, bound the one-panel kernel on a Zen 5).
  void (*i8_micro2)(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                    int32_t mr, const uint8_t* wq, int64_t wq_stride, const float* ws, int64_t ws_stride,
                    int64_t nb, float* y, int64_t ldy, int32_t nr2, bool accumulate) = nullptr;
  // Optional (null: i8_micro and i8_micro2): the same for panels whose
  // biased weights are at most kI8MaxBiasedNvfp4 (i8_pack_nvfp4's: NVFP4,
  // MXFP4 and W4A4), which may add the int16 pair sums of a block before
  // widening them (i8_int16_sums); only beside the table's own i8_micro (a
  // table derived from another resets them with its micro-kernel).
  void (*i8_micro_small)(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                         int32_t mr, const uint8_t* wq, const float* ws, int64_t nb, float* y, int64_t ldy,
                         int32_t nr, bool accumulate) = nullptr;
  void (*i8_micro2_small)(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                          int32_t mr, const uint8_t* wq, int64_t wq_stride, const float* ws,
                          int64_t ws_stride, int64_t nb, float* y, int64_t ldy, int32_t nr2,
                          bool accumulate) = nullptr;
  // Optional (null: the drivers use pack + micro): the same fixed sequence
  // for m <= i8_gemv_max_m rows straight from the NVFP4 weight, rows j in
  // [n0, n1), y[i*ldy + (j - n0)] = acc * post; requires k % 128 == 0
  // (k % 64 == 0 on the tables with i8_gemv_k64). With w.signs set, also
  // the sign rule on those rows (as nvfp4_gemv).
  void (*i8_gemv_nvfp4)(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                        int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float post, float* y,
                        int64_t ldy) = nullptr;
  // NF4 weights on the same integer operands (fast mode): the 16 NF4 code
  // values mapped once to int8 by i8_nf4_codebook (portable.h): `code` holds
  // the biased values (code + kI8Nf4Bias, in [0, 126]); the panel / the GEMV
  // use them as the NVFP4 entries use the biased E2M1x2 values, with ws =
  // the fp32 absmax of the block holding the 16 elements, and the activation
  // correction xc = -kI8Nf4Bias * sum xq. Requires k % 16 == 0 and
  // blocksize >= 16 (the GEMV: k % 128 == 0, or k % 64 == 0 with
  // i8_gemv_k64). The same fixed fp32 sequence.
  void (*i8_pack_nf4)(const Nf4Weights& w, const uint8_t* code, int64_t n0, int32_t rows, int64_t b0,
                      int64_t nb, uint8_t* wq, float* ws) = nullptr;
  void (*i8_gemv_nf4)(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs,
                      int32_t m, const Nf4Weights& w, const uint8_t* code, int64_t n0, int64_t n1, float post,
                      float* y, int64_t ldy) = nullptr;
  // Fast-mode activations: i8_activations_quantize (portable.h) with the
  // same IEEE operations per element, so bit-identical on every table
  // (null: the portable function).
  void (*i8_quantize_act)(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* xq, int64_t ldxq,
                          float* xs, int32_t* xc, int64_t ldxs, int32_t bias) = nullptr;
  // The Q4_ISA_* of this table's fp32 kernels (what Q4_last_isa_used reports
  // when fast mode falls back to exact); -1: isa.
  int32_t exact_isa = -1;
  // Fast mode runs the exact small-batch kernels for m in
  // (i8_fast_max_m, small-batch max_m] (measured: the integer kernels are
  // not faster there on this ISA), the integer kernels elsewhere; 0: no
  // limit. NF4 runs them only where the table has its own i8_gemv_nf4,
  // and above kI8GemvMaxRows rows only with its own i8_pack_nf4
  // (i8_nf4_panel_native; the scalar table: every m).
  int32_t i8_fast_max_m = 0;
  // Most rows of x the integer GEMV entries take in one call (>=
  // kI8GemvMaxRows); the drivers run them up to this M when k % 128 == 0,
  // the packed panels above. AVX-512: 64 (for m >= 2 its GEMV decodes each
  // 32 weights of 16 rows once into registers for groups of 8 rows of x,
  // see int8_avx512.h: at M = 5-8 1.5x its former passes of 4 rows, at M =
  // 24-64 1.04-1.19x the panels). AVX2: 16 (its GEMV takes 8 rows of x per
  // decode; on an AVX2-only Zen 3 1.29-1.55x the panels at M = 5-8,
  // 1.03-1.22x at M = 9-16, 0.86-0.94x at M = 24-32; int8_gemv_avx2.h).
  int32_t i8_gemv_max_m = kI8GemvMaxRows;
  // Whether this table's integer GEMV entries read NvWeights::tiles /
  // Nf4Weights::tiles when given (the AVX-512, AVX2 and AVX-VNNI tables,
  // every m): session linears in fast mode keep that copy of their codes
  // for such a table.
  bool i8_reads_tiles = false;
  // With i8_reads_tiles: whether they also read NvWeights::tile_scales /
  // tile_flags (the AVX-512 and AVX2 tables), and Nf4Weights::tile_absmax
  // (the AVX-512 tables; the AVX2 GEMV stages each group's absmax from the
  // row form), which the linears then keep too.
  bool i8_reads_tile_scales = false;
  bool i8_reads_tile_absmax = false;
  // Whether nvfp4_gemv (as NvWeights::e8m0 says) and i8_gemv_nvfp4 read
  // NvWeights::e8m0 (the AVX-512 tables: decoded in registers as they reach
  // each group of rows, so MXFP4's scales cross memory once, as E8M0).
  bool reads_e8m0 = false;
  // Up to this many rows of x nvfp4_gemv runs its chunk kernel (a last
  // half chunk) when K % 128 == 64 (AVX-512: 2, or kGemvMaxRows on the
  // Intel server cores of intel_golden_cove_server; 0: never).
  int32_t gemv_chunk_max_m_k64 = 0;
  // Whether the integer GEMV entries also take k % 128 == 64 (a last half
  // chunk: the AVX-512 tables, whose direct GEMV steps 32 elements at a
  // time, the AVX2 and AVX-VNNI tables and the NEON dotprod / i8mm
  // tables, 64 at a time). Without it
  // such a K runs the packed panels, at M = 1-2 slower than the exact GEMV
  // (gpt-oss's K = 2880, Zen 5: 2.1x the time of K = 2816).
  bool i8_gemv_k64 = false;
  // One group of 16 rows of 4-bit codes (row r at rows + r*rb, rb = K/2,
  // `chunks` = K/128) into the tile order of i8_tile_codes at `out` (64-byte
  // aligned: every 256-byte tile is stored whole); null: the scalar loop.
  void (*i8_tile_group)(const uint8_t* rows, int64_t rb, int64_t chunks, uint8_t* out) = nullptr;
  // One group of 16 rows of E4M3 scale codes (kb per row, rows kb apart)
  // into the order of i8_tile_scales at `out`; returns the group's flag
  // byte. Null: the scalar loop.
  uint8_t (*i8_tile_scale_group)(const uint8_t* s, int64_t kb, uint8_t* out) = nullptr;
  // The exact GEMV entries take up to this many rows of x when K % 128 ==
  // 0 (kGemvMaxRows otherwise), and the drivers give them those M instead
  // of the small-batch family. AVX-512: 16 (its chunk GEMV decodes each
  // weight vector once for all rows of x, and a row keeps M = 1's bits; at
  // M = 9-16 it measured 1.07-1.27x the small-batch kernels on a Cascade
  // Lake-class Xeon and 0.92-1.15x on a Sapphire Rapids-class one, see
  // docs/performance.md).
  int32_t gemv_max_m_k128 = kGemvMaxRows;
  // The small-batch kernels take M up to this (untuned; a tuning result's
  // small_batch.max_m replaces it), the packed-panel GEMM above. AVX-512:
  // 16, i.e. only where K % 128 != 0 (its panel GEMM, with panels packed
  // from dword-transposed codes, measured 1.05-1.40x the small-batch kernels
  // at M = 17-40 on a Cascade Lake-class Xeon; the AVX2 table measured the
  // opposite at M = 48).
  int32_t small_batch_max_m = 64;
  // Weights of at most small_batch_short_n rows (0: none) take the
  // small-batch kernels only up to M = small_batch_short_max_m, the panel
  // GEMM above it (the tuner's max_m still caps both). AVX2: 256 rows, M =
  // 16. Measured on a Zen 4 forced to the AVX2 table, 2 threads, one
  // process (tools/ab prod-nvfp4 / prod-nf4 with AB_SB_MAX_M=64,16): at N
  // = 64-256, K = 256-11008, M = 17-64 the panels 1.1-2.4x, except N = 64
  // with K = 4096, bimodal there (0.82-0.98x in some runs, 1.45-1.70x in
  // others); N = 512 0.88-1.35x, N = 1024-2048 0.78-1.04x from M = 24.
  int64_t small_batch_short_n = 0;
  int32_t small_batch_short_max_m = 16;
  // True when the integer entries are this ISA's own (or the table is the
  // scalar one): the drivers use the integer path only then; otherwise fast
  // mode falls back to the exact kernels (never slower than exact).
  bool i8_native = false;
  // True when i8_pack_nf4 is this ISA's own (or the table is the scalar
  // one): NF4 fast mode runs the packed-panel path above kI8GemvMaxRows
  // rows only then (the portable packer would make it slower than exact).
  bool i8_nf4_panel_native = false;

  // Benchmark probe of the integer roof: `iters` rounds of independent
  // int8 dot-product instructions of this table's integer kernels (vpdpbusd,
  // vpmaddubsw + vpmaddwd + vpaddd, sdot, scalar); returns the int8 ops
  // executed (2 per multiply-add; the caller times it).
  double (*i8_probe)(int64_t iters) = nullptr;

  // Benchmark probe: `iters` rounds of independent fp32 FMAs at this ISA's
  // vector width; returns the flops executed (the caller times it).
  double (*fma_probe)(int64_t iters) = nullptr;
};

// Widest panel and most micro-kernel rows the portable fill-ins support.
constexpr int32_t kMaxPanelNr = 64;
constexpr int32_t kMaxMicroRows = 16;

// The table builder: returns `fast` with every entry it leaves null filled
// from the portable kernels (portable.h), those that depend on the panel
// width bound to fast.panel_nr. fast.isa is a Q4_ISA_* constant; panel_nr
// must be 4, 8, 16, 32 or 64 and micro_mr in [1, kMaxMicroRows].
//
// What an ISA file contains (adding a level, e.g. Q4_ISA_AVX512_VNNI, is
// one new file src/kernels/avx512_vnni/kernels_avx512_vnni.cpp plus its
// nvfp4_isa_kernels(...) line with the compile flags in CMakeLists.txt;
// dispatch.cpp already maps every Q4_ISA_* of the ABI to its table):
//   1. includes: the intrinsics header, "kernels/isa_common.h" (with_rows,
//      gemv_even_odd, fma_probe<V>, ...) and, for fallbacks inside its own
//      kernels, "kernels/portable.h";
//   2. in an unnamed namespace: only the kernels it makes faster, with the
//      signatures of the KernelTable entries, and a small vector-traits
//      struct for fma_probe<V>;
//   3. the accessor, which lists what the file provides and nothing else:
//        const KernelTable& avx512_vnni_table() {
//          static const KernelTable t = complete_table([] {
//            KernelTable f;
//            f.isa = Q4_ISA_AVX512_VNNI;
//            f.panel_nr = kNR;  f.micro_mr = kMR;
//            f.nvfp4_gemv = nvfp4_gemv;  // ... only the entries it has
//            f.fma_probe = fma_probe<Vec>;
//            return f;
//          }());
//          return t;
//        }
// No table builder, panel wrapper, row switch or probe is written there.
KernelTable complete_table(KernelTable fast);

// The table of each level (the scalar one is complete_table of nothing).
// Only the levels compiled in (NVFP4_KERNELS_<LEVEL>, set by CMake) are
// defined; table_for() in dispatch.h picks among them.
const KernelTable& scalar_table();
const KernelTable& avx2_table();
const KernelTable& avx_vnni_table();
const KernelTable& avx512_table();
const KernelTable& avx512_vnni_table();
// avx512_vnni_table() with its integer GEMVs' nibble decode by vpermb
// (vbmi) or vpshufb instead of the one this CPU's features pick (the same
// bits; for tests of the variant the CPU does not run by default).
KernelTable avx512_vnni_table_decode(bool vbmi);
// avx512_table() with its 16-bit dequantize entries converting bf16 by
// vcvtne2ps2bf16 (cvtne, AVX512_BF16 CPUs) or by integer rounding instead
// of the one this CPU's features pick (the same bits; for tests).
KernelTable avx512_table_dequant16(bool cvtne);
// avx512_table() with the far quantize entries set whatever the CPU (tests).
KernelTable avx512_table_quantize_far();
// avx512_table() whose exact GEMVs run the chunk kernel at K % 128 == 64
// for M <= 2 (max_m <= 2) or every M up to kGemvMaxRows (otherwise), the
// even/odd one for the rest, whichever this CPU picks (tests).
KernelTable avx512_table_chunk_k64(int32_t max_m);
const KernelTable& neon_table();
const KernelTable& neon_dotprod_table();
const KernelTable& neon_i8mm_table();

// The table for the active ISA (cap + CPU), looked up per call (cheap).
const KernelTable& active_table();

}  // namespace q4::kern
