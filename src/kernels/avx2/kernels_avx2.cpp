// AVX2 + FMA + F16C kernels (8 fp32 lanes). Compiled with its own flags;
// only called after CPUID + XGETBV confirmed AVX2/FMA and OS YMM support.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/avx2/int8_avx2.h"
#include "kernels/avx2/int8_gemv_avx2.h"
#include "kernels/avx2/small_batch_avx2.h"
#include "kernels/avx2/small_batch_lanes_avx2.h"
#include "kernels/dequantize_entries.h"
#include "kernels/isa_common.h"
#include "kernels/nf4_quantize_impl.h"
#include "kernels/portable.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {
namespace {

constexpr int32_t kNR = 16;  // two ymm of W rows per panel
constexpr int32_t kMR = 6;   // 12 accumulators

inline __m256 e2m1_mag_lut() {
  return _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
}

// 8 E2M1 codes (low 4 bits of each dword; higher bits ignored) -> values.
inline __m256 e2m1_decode8(__m256i codes, __m256 lut) {
  const __m256 mag = _mm256_permutevar8x32_ps(lut, codes);  // uses bits 0-2
  const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(codes, 28), _mm256_set1_epi32(INT32_MIN));
  return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows of x (fp32, fp16 or bf16; k % 16 == 0) block-major for the permute
// GEMVs: the 16 elements of block b of row i at xb + (b * m + i) * 16, its 8
// even elements first, then the 8 odd ones, fp16 (F16C) and bf16 converted
// in registers.
void deinterleave_blocks(ActRows x, int64_t ldx, int32_t m, int64_t k, float* xb) {
  const auto* f32 = static_cast<const float*>(x.data);
  const auto* u16 = static_cast<const uint16_t*>(x.data);
  auto load8 = [&](int64_t e) {
    if (x.type == FType::F32) return _mm256_loadu_ps(f32 + e);
    const __m128i r = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u16 + e));
    if (x.type == FType::F16) return _mm256_cvtph_ps(r);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(r), 16));
  };
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < k / 16; ++b) {
      const int64_t e = i * ldx + 16 * b;
      const __m256 lo = load8(e), hi = load8(e + 8);
      // [a0 a2 b0 b2 | a4 a6 b4 b6] -> a0 a2 a4 a6 b0 b2 b4 b6
      const __m256 ev = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
      const __m256 od = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
      float* dst = xb + (b * m + i) * 16;
      _mm256_store_ps(dst, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xd8)));
      _mm256_store_ps(dst + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xd8)));
    }
  }
}

// E4M3 codes (low 8 bits of each dword) -> fp32, fmt::e4m3_decode's values.
inline __m256 e4m3_decode8(__m256i c) {
  const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
  const __m256i normal_bits = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, _mm256_set1_epi32(7))),
                                   _mm256_set1_ps(1.0f / 512.0f));
  const __m256i is_sub =
      _mm256_cmpeq_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x78)), _mm256_setzero_si256());
  const __m256i is_nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
  __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(normal_bits), sub, _mm256_castsi256_ps(is_sub));
  v = _mm256_blendv_ps(v, _mm256_set1_ps(fmt::bits_f32(0x7fc00000u)), _mm256_castsi256_ps(is_nan));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign));
}

// The GEMVs' prefetches of a weight row at p (once per 64 bytes read):
// into L1 kRowPrefetchBytes ahead in the row and, far (rows_to_l2), into L2
// the same place `ahead` bytes on, in the row the next group of rows reads
// (a group's time ahead). The AVX2 GEMVs had none; on a Zen 4 forced to
// this table, 2 threads, weights rotated through 235 MB (4096x4096), against
// none: the byte-table GEMV M = 1 1.57x, M = 2 1.44x (with its new decode;
// in cache 1.18x and 1.12x).
inline void prefetch_row_ahead(const uint8_t* p, int64_t ahead, bool far) {
  _mm_prefetch(reinterpret_cast<const char*>(p + kRowPrefetchBytes), _MM_HINT_T0);
  // (an integer address: past the last group it is past the weight)
  const uintptr_t pn = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(ahead);
  if (far) _mm_prefetch(reinterpret_cast<const char*>(pn), _MM_HINT_T2);
}

// Every cache line of the bytes [begin, end) into L1 (integer addresses:
// they may lie past the end of an array, which a prefetch never faults on).
inline void prefetch_lines_l1(uintptr_t begin, uintptr_t end) {
  for (uintptr_t a = begin & ~uintptr_t{63}; a < end; a += 64)
    _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
}

// Rows of W handled together by the GEMV kernels: each x vector loaded is
// used for R rows, and M x R accumulator chains hide the FMA latency. Every
// (x row, W row) pair has one accumulator chain and the same operation
// order for any R, so a row's result does not depend on its group (or
// thread). M x R <= 8 keeps the accumulators and the decode temporaries in
// the 16 ymm registers.
template <int M>
constexpr int gemv_row_group() {
  return M <= 2 ? 4 : (M <= 4 ? 2 : 1);
}

// x rows for the permute GEMVs, block-major (deinterleave_blocks), so that
// a kernel reaches every row's vectors of a block at constant offsets from
// one pointer. (With the rows apart, x + i * stride for 8 rows and 2 halves
// took more general registers than x86 has: GCC reloaded each address from
// the stack, three scalar instructions per FMA, and those bound the
// kernel.) Then body(std::integral_constant<int, M>, xb) with M = m.
template <class Body>
void gemv_blocked(ActRows x, int64_t ldx, int32_t m, int64_t k, Body&& body) {
  AlignedFloats blocked = aligned_floats(k / 16 * m * 16);
  deinterleave_blocks(x, ldx, m, k, blocked.get());
  with_rows<kGemvMaxRows>(m, [&](auto mm) { body(mm, static_cast<const float*>(blocked.get())); });
}

// Rows j0 .. j0+R-1 of an NVFP4 GEMV; y[i*ldy + r] for row j0 + r. Block
// b: 8 bytes, element 2j in the low nibble of byte j; xb holds x block-major
// (gemv_blocked), so a block is one even and one odd vector of 8 per row of
// x. Both weight vectors are multiplied by the block's scale first (exact:
// E2M1 and E4M3 have 2 and 4 significant bits), then FMA'd into the (x
// row, W row) accumulator, even then odd: two FMAs per 16 products where a
// product of the sums by the scale took three instructions.
template <int M, int R>
void nvfp4_gemv_rows(const float* xb, const NvWeights& w, int64_t j0, float* y, int64_t ldy, bool far) {
  const int64_t k = w.k;
  const int64_t nblocks = k / 16;
  const __m256 lut = e2m1_mag_lut();
  const uint8_t* q[R];
  const uint8_t* s[R];
  for (int r = 0; r < R; ++r) {
    q[r] = w.q + (j0 + r) * (k / 2);
    s[r] = w.s + (j0 + r) * nblocks;
  }
  __m256 acc[M][R];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  // Groups of 8 blocks share one vector scale decode, kept in L1 and
  // broadcast per block (a load, not a shuffle).
  alignas(32) float sc[R][8];
  for (int64_t b0 = 0; b0 < nblocks; b0 += 8) {
    const int64_t nb = std::min<int64_t>(8, nblocks - b0);
    for (int r = 0; r < R; ++r) {
      if (nb == 8) {
        _mm256_store_ps(
            sc[r],
            e4m3_decode8(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s[r] + b0)))));
      } else {
        for (int64_t b = 0; b < nb; ++b) sc[r][b] = fmt::e4m3_decode(s[r][b0 + b]);
      }
    }
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t e = (b0 + b) * 8;
      if (e % 64 == 0) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) prefetch_row_ahead(q[r] + e, R * (k / 2), far);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256i d = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q[r] + e)));
        const __m256 scale = _mm256_broadcast_ss(&sc[r][b]);
        const __m256 ve = _mm256_mul_ps(e2m1_decode8(d, lut), scale);
        const __m256 vo = _mm256_mul_ps(e2m1_decode8(_mm256_srli_epi32(d, 4), lut), scale);
        const float* xv = xb + (b0 + b) * (int64_t{16} * M);
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i) {
          acc[i][r] = _mm256_fmadd_ps(ve, _mm256_load_ps(xv + int64_t{16} * i), acc[i][r]);
          acc[i][r] = _mm256_fmadd_ps(vo, _mm256_load_ps(xv + int64_t{16} * i + 8), acc[i][r]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) y[i * ldy + r] = hsum8(acc[i][r]) * w.g;
  }
}

// Rows [n0, n1) in groups of R, the remainder one row at a time.
template <int M, class Rows>
void gemv_row_groups(int64_t n0, int64_t n1, float* y, Rows&& rows) {
  constexpr int R = gemv_row_group<M>();
  int64_t j = n0;
  for (; j + R <= n1; j += R) rows(std::integral_constant<int, R>{}, j, y + (j - n0));
  for (; j < n1; ++j) rows(std::integral_constant<int, 1>{}, j, y + (j - n0));
}

// The byte-table GEMV (K % 32 == 0). Every E2M1 value is a bf16 (an fp32
// whose low 16 bits are zero), so a code becomes its value by two in-lane
// byte lookups (vpshufb: the bf16's high and low bytes, the sign included)
// and one unpack, instead of a cross-lane permute and a sign shift per 8
// values. Per 32 bytes of a row (64 elements, 4 blocks): one load, one
// shift for the high nibbles, 4 vpshufb, 4 unpacks (words: bf16 values), 4
// shifts and 4 ANDs (the even and odd words as fp32): 13 shuffle-class
// operations for 64 weights where the permute decode takes 48. The values
// land in lanes in a fixed order, and x is arranged to match once per call
// (x64_order): vector v = 4c + 2u + p of group g, lane (L, d) (L the
// 128-bit half, d its dword) holds element 32L + 16u + 4d + 2p + c of the
// group, c the nibble (0 low: element 2j of byte j), u the unpack (low or
// high bytes of each 128-bit half), p the word of the dword (0: the low
// word, shifted up; 1: the high word, masked). A lane's element lies in
// block 2L + u of the group, so the 4 products of one u share a scale
// vector (blocks u and 2 + u in the halves).
constexpr int64_t kX64Group = 64;
// The byte-table GEMV serves K % 32 == 0 at every M of the GEMV (the
// permute GEMV below, K % 32 == 16). At M <= kGemv64Rows, where decoding W
// is most of the work, the sums of a block are multiplied by its scale
// (nvfp4_gemv64_rows; on a Zen 4 forced to this table, one thread, 256x4096
// in cache, against the permute GEMV: M = 1 1.22x, M = 2 1.13x), rows of W
// in groups of kGemv64RowGroup at M = 1 (one at M = 2). At M = 3-8 the
// decoded weights are multiplied by the scale first, as the permute GEMV
// does, so both run the same FMAs (its kScaleFirst order, one row of W at a
// time: two at M = 3-4 read 0.65-0.78x). Against the permute GEMV on an
// AVX2 Zen 1 EPYC, 2 threads, 4096x4096 rotated through 75 MB: M = 3-4
// 1.33-1.53x, M = 5-7 1.24-1.34x, M = 8 1.17-1.22x (long shapes too); the
// post-scaled form had read 0.84-0.97x at M = 4-8 on the Zen 4. The classes
// differ in the last bits; rows agree at every M of a class.
constexpr int32_t kGemv64Rows = 2;
constexpr int kGemv64RowGroup = 2;

// x rows arranged as above, fp16/bf16 converted: out[((i * groups + g) * 8 +
// v) * 8 + lane]; K % 64 == 32: the last group's missing half zeros.
// elem(v, lane): the element of the group vector v's lane holds (the NVFP4
// order above, or nf4_elem's).
// group_major: group g of row i at out + (g * m + i) * 64 instead, so that
// a kernel reaches every row's vectors of a group at constant offsets from
// one pointer (gemv_blocked says why that matters from M = 3 on).
template <class Elem>
void x64_order(ActRows x, int64_t ldx, int32_t m, int64_t k, float* out, Elem&& elem,
               bool group_major = false) {
  const int64_t groups = (k + kX64Group - 1) / kX64Group;
  alignas(32) float tmp[kX64Group];
  __m256i idx[8];
  for (int v = 0; v < 8; ++v) {
    alignas(32) int32_t e[8];
    for (int lane = 0; lane < 8; ++lane) e[lane] = elem(v, lane);
    idx[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(e));
  }
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t e0 = i * ldx + g * kX64Group, len = std::min<int64_t>(kX64Group, k - g * kX64Group);
      const float* src = tmp;
      if (x.type == FType::F32 && len == kX64Group) {
        src = static_cast<const float*>(x.data) + e0;
      } else if (len == kX64Group) {  // fp16/bf16, converted in registers
        const auto* u16 = static_cast<const uint16_t*>(x.data) + e0;
        for (int64_t j = 0; j < kX64Group; j += 8) {
          const __m128i r = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u16 + j));
          _mm256_store_ps(tmp + j, x.type == FType::F16 ? _mm256_cvtph_ps(r)
                                                        : _mm256_castsi256_ps(_mm256_slli_epi32(
                                                              _mm256_cvtepu16_epi32(r), 16)));
        }
      } else {
        for (int64_t j = 0; j < kX64Group; ++j) tmp[j] = j < len ? act_elem(x.data, x.type, e0 + j) : 0.0f;
      }
      float* dst = out + (group_major ? g * m + i : i * groups + g) * kX64Group;
      for (int v = 0; v < 8; ++v) _mm256_storeu_ps(dst + int64_t{8} * v, _mm256_i32gather_ps(src, idx[v], 4));
    }
  }
}

// The byte-table GEMV's lane order (above): vector v = 4c + 2u + p.
inline int nvfp4_elem(int v, int lane) {
  const int c = v / 4, u = (v / 2) % 2, p = v % 2;
  return 32 * (lane / 4) + 16 * u + 4 * (lane % 4) + 2 * p + c;
}

// The driver of the byte-table and byte-plane GEMVs (m <= MaxM):
// x reordered once by elem (group-major above kGemv64Rows), then
// rows(M, R, xa, groups, j, runs, y + (j - n0), far, chunk) for `runs`
// groups of R rows of [n0, n1) from j (one group a call, or all of them at
// small K: kGemv64RunGroups), the remainder one row at a time. R:
// kGemv64RowGroup at M = 1,
// 2 at M = 3-4 (twice the accumulator chains: there each chain's 8 FMAs
// per group bound the kernel by latency; on an AVX2 Zen 3 M = 3 1.14x, M =
// 4 1.08x; the order per accumulator, so the bits, are those of R = 1),
// else 1. Above kGemv64Rows, x of the whole K (M x K x 4 bytes) no longer
// fits in L1 and each row of W read all of it again from L2, which bound
// the GEMV at M = 8 near half its FMA rate on the Zen 3: K is then cut into
// chunks of groups [ga, gb) whose x takes at most kGemv64ChunkBytes
// (gemv64_chunk), and each block of kGemv64RowBlock rows of W runs chunk
// after chunk, each row's accumulators kept in `part` between chunks (the
// same FMA sequence per accumulator: the same bits as one pass). On the
// Zen 3, one thread, 2048x4096 in cache: M = 3 1.19x, M = 5 1.14x, M = 8
// 1.23x (chunks of 16 KiB: M = 3 0.89x; 32 KiB about as 24); M = 2, where
// x is 32 KiB, read 0.96x chunked and stays one pass.
constexpr int64_t kGemv64RowBlock = 64;
// With rows of at most this many groups (K <= 1024) in one pass (no K
// chunks), the kernel takes all the task's groups of R rows in one call: a
// call's own work (its prologue, the decode constants, the scale scan's
// set-up) had been about a third of the kernel's time at K = 256, M = 1.
// Same bits (each group of rows runs the same code). Kernel A/B on a Zen 4
// whose VM hides AVX-512, one thread in cache: M = 1-2 1.01-1.32x
// (1024x1024 to 64x128), M = 3-8 1.02-1.08x (NF4 1.08-1.13x); larger K
// 0.99-1.01x.
constexpr int64_t kGemv64RunGroups = 16;
constexpr int64_t kGemv64ChunkBytes = 24576;
// The kernels take it by reference: passed by value, its 24 bytes were
// written as 8-byte stores and read back by a 16-byte load at every call
// (a store-forwarding stall), which on a Zen 4 whose VM hides AVX-512 cost
// the exact M = 1 GEMV through the library (2 threads, one process) 1.25x
// at 256x256, 1.14x at 64x128 and 1024x1024 (calls of 2-50 us).
struct Gemv64Chunk {
  int64_t ga = 0, gb = 0;  // groups [ga, gb): ga even
  float* part = nullptr;   // the R rows' M x 8 accumulators; nullptr: one pass
  bool first() const { return ga == 0; }
};
inline int64_t gemv64_chunk(int32_t m) {
  return m <= kGemv64Rows ? 0 : std::max<int64_t>(2, kGemv64ChunkBytes / (m * kX64Group * 4) / 2 * 2);
}

// A kernel's rows callback of gemv64: call(std::true_type) for a run of
// groups of rows (runs > 1), else call(std::false_type), one group.
template <class Call>
void gemv64_run_or_rows(int64_t runs, Call&& call) {
  if (runs > 1) return call(std::true_type{});
  call(std::false_type{});
}

template <int MaxM, class Elem, class Rows>
void gemv64(ActRows x, int64_t ldx, int32_t m, int64_t k, int64_t n0, int64_t n1, float* y, Elem&& elem,
            Rows&& rows) {
  const int64_t groups = (k + kX64Group - 1) / kX64Group;
  AlignedFloats xa = aligned_floats(int64_t{m} * groups * kX64Group);
  x64_order(x, ldx, m, k, xa.get(), elem, m > kGemv64Rows);
  const bool far = rows_to_l2();
  const int64_t kc = gemv64_chunk(m);
  with_rows<MaxM>(m, [&](auto mm) {
    constexpr int M = decltype(mm)::value;
    auto run = [&](auto rr) {
      constexpr int R = decltype(rr)::value;
      auto pass = [&](int64_t j0, int64_t j1, Gemv64Chunk c) {
        Gemv64Chunk cr = c;
        int64_t j = j0;
        for (; j + R <= j1; j += R) {
          if (c.part != nullptr) cr.part = c.part + (j - j0) * M * 8;
          rows(mm, rr, xa.get(), groups, j, 1, y + (j - n0), far, cr);
        }
        for (; j < j1; ++j) {
          if (c.part != nullptr) cr.part = c.part + (j - j0) * M * 8;
          rows(mm, std::integral_constant<int, 1>{}, xa.get(), groups, j, 1, y + (j - n0), far, cr);
        }
      };
      if (kc == 0 || kc >= groups) {
        if (groups <= kGemv64RunGroups && n1 - n0 >= int64_t{2} * R) {
          // Short rows: every group of R rows in one call (kGemv64RunGroups).
          const int64_t runs = (n1 - n0) / R;
          rows(mm, rr, xa.get(), groups, n0, runs, y, far, Gemv64Chunk{0, groups, nullptr});
          pass(n0 + runs * R, n1, Gemv64Chunk{0, groups, nullptr});
          return;
        }
        pass(n0, n1, Gemv64Chunk{0, groups, nullptr});
        return;
      }
      AlignedFloats part = aligned_floats(kGemv64RowBlock * M * 8);  // each row's M accumulators
      for (int64_t jb = n0; jb < n1; jb += kGemv64RowBlock) {
        const int64_t je = std::min(n1, jb + kGemv64RowBlock);
        for (int64_t ga = 0; ga < groups; ga += kc)
          pass(jb, je, Gemv64Chunk{ga, std::min(groups, ga + kc), part.get()});
      }
    };
    if (M == 1) {
      run(std::integral_constant<int, kGemv64RowGroup>{});
    } else if (M > kGemv64Rows && M <= 4) {
      run(std::integral_constant<int, 2>{});
    } else {
      run(std::integral_constant<int, 1>{});
    }
  });
}

// scales8: the E4M3 scale codes of blocks [b, b + n) of a row (n <= 8) ->
// fp32, zeros for the blocks past n (the plain bit mapping when all 8 are
// normal and positive, e4m3_decode8 otherwise), in the lane-pair order
// kScales8Order: block kScales8Order[l] in lane l, so that the byte-table
// GEMV's scale vectors (block q in lanes 0-3, q + 2 in lanes 4-7) are each
// one in-lane vpermilps (group_scale) where a cross-lane vpermps is 3 uops
// on a Zen 1 (there the GEMV at M = 1-2 ran 1.04-1.12x faster).
constexpr int kScales8Order[8] = {0, 1, 4, 5, 2, 3, 6, 7};
// The 8 codes at s in kScales8Order (the low 8 bytes).
inline __m128i scale_codes8(const uint8_t* s) {
  return _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)),
                          _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1));
}
inline __m256 scales8(const uint8_t* s, int64_t n) {
  if (n == 8) {
    const __m128i b = scale_codes8(s);
    if ((i8y_excess_normal_mask(i8y_code_excess(b)) & 0xff) == 0xff) return i8y_e4m3_normal8(b);
    return e4m3_decode8(_mm256_cvtepu8_epi32(b));
  }
  alignas(32) float sc[8];
  for (int64_t l = 0; l < 8; ++l) {
    const int64_t b = kScales8Order[l];
    sc[l] = b < n ? fmt::e4m3_decode(s[b]) : 0.0f;
  }
  return _mm256_load_ps(sc);
}

// scales8 from MXFP4's E8M0 scales in place (NvWeights::e8m0, every byte
// inside E4M3's window under 2^t, so 2^(e - 127 - t) is a normal fp32):
// blocks [b, b + n) of a row, e at byte b / 2 (a byte per two blocks).
inline __m256 scales8_e8m0(const uint8_t* e, int64_t n, int32_t t) {
  if (n == 8) {
    int32_t v;
    std::memcpy(&v, e, 4);
    // lane l: block kScales8Order[l], byte kScales8Order[l] / 2
    const __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128(v),
                                       _mm_setr_epi8(0, 0, 2, 2, 1, 1, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1));
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_cvtepu8_epi32(b), _mm256_set1_epi32(t)), 23));
  }
  alignas(32) float sc[8];
  for (int64_t l = 0; l < 8; ++l) {
    const int64_t b = kScales8Order[l];
    sc[l] = b < n ? fmt::pow2_f32(static_cast<int32_t>(e[b / 2]) - fmt::kE8M0Bias - t) : 0.0f;
  }
  return _mm256_load_ps(sc);
}

// A group's 32 bytes of a row at p (a half group: its 16 bytes only; the
// row may end there).
inline __m256i load_group32(const uint8_t* p, bool half) {
  return half ? _mm256_maskload_epi32(reinterpret_cast<const int*>(p),
                                      _mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0))
              : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The base of x for each row of W of a group of R rows (the byte-table
// and byte-plane kernels below): one address, made opaque for rows r > 0
// by an empty asm, so that every row loads x again, as a memory operand of
// its FMAs (the load ports: two 32-byte loads a cycle on a Zen 4), where
// GCC kept a group's x vectors in registers across the rows and spilled
// the accumulators, partial sums and decode constants for them (NVFP4 M = 1:
// 10 stack accesses in the 166 instructions of two groups of two rows; 157
// and none now). As the AVX-512 GEMV does at M = 2-3. On a Zen 4 whose VM
// hides AVX-512, kernel A/B in one process, same bits: one thread, 256
// rows in L2, M = 1 NVFP4 1.035x, NF4 1.035-1.045x, MXFP4 1.034x, M = 3-4
// (R = 2) NVFP4 1.09-1.10x, NF4 1.05-1.08x, MXFP4 1.03x; 2 threads, 4096^2
// from DRAM M = 1 NVFP4 1.04x, NF4 1.11x, 11008x4096 M = 4 1.13x, in L3
// (4096x11008, 2880^2) 1.06-1.08x. M = 2 and 5-8 (R = 1): 1.00x.
template <int R>
inline void x_per_row(const float* x, const float* (&xr)[R]) {
  for (int r = 0; r < R; ++r) {
    xr[r] = x;
    if (r > 0) __asm__("" : "+r"(xr[r]));
  }
}

// The byte-table decode: words(v, c, wd) gives the bf16 values of nibble c
// (0: low) of a group's bytes v as the words of unpack u in wd[u]; even()
// and odd() make fp32 of a vector's even and odd words.
struct E2m1Words {
  // bf16 high and low bytes of the 16 E2M1 values, in both 128-bit halves.
  __m256i th = e2m1_bf16_high_bytes(), tl = e2m1_bf16_low_bytes();
  __m256i nib = _mm256_set1_epi8(0x0f);
  __m256i high_words = _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u));
  void words(__m256i v, int c, __m256i (&wd)[2]) const {
    const __m256i idx = c == 0 ? _mm256_and_si256(v, nib) : _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
    const __m256i hb = _mm256_shuffle_epi8(th, idx), lb = _mm256_shuffle_epi8(tl, idx);
    wd[0] = _mm256_unpacklo_epi8(lb, hb);
    wd[1] = _mm256_unpackhi_epi8(lb, hb);
  }
  static __m256 even(__m256i wd) { return _mm256_castsi256_ps(_mm256_slli_epi32(wd, 16)); }
  __m256 odd(__m256i wd) const { return _mm256_castsi256_ps(_mm256_and_si256(wd, high_words)); }
};

// The scale vector of unpack u of the group whose first block is h (0 or
// 4) in sv (scales8's kScales8Order): block h + u in lanes 0-3, h + 2 + u
// in lanes 4-7, i.e. dword h / 2 + u of each 128-bit half.
inline __m256 group_scale(__m256 sv, int32_t h, int u) {
  return h == 0 ? (u == 0 ? _mm256_permute_ps(sv, 0x00) : _mm256_permute_ps(sv, 0x55))
                : (u == 0 ? _mm256_permute_ps(sv, 0xaa) : _mm256_permute_ps(sv, 0xff));
}

// Rows j0 .. j0+R-1 of the byte-table GEMV over x arranged by x64_order
// (`groups` groups per x row); y[i*ldy + r] for row j0 + r. Two orders,
// each the same sequence for any M of its class and any R:
// * M <= kGemv64Rows, where decoding W is most of the work: per (x row, W
//   row) and group, t_u = ((lo even + lo odd) + hi even) + hi odd for u =
//   0, 1, then acc += t_0 * scale_0, acc += t_1 * scale_1. Nibble by
//   nibble, the 2 M partial sums t live across them (the accumulators then
//   stay in the 16 registers).
// * M = 3-8 (kScaleFirst; x group-major: group g of row i at xa + (g * M +
//   i) * 64): each decoded vector is multiplied by its blocks' scales first
//   (exact: 2 and 4 significant bits) and then FMA'd into the (x row, W
//   row) accumulator, per nibble c = 0, 1 and unpack u = 0, 1 the even then
//   the odd vector, one chain from +0. The FMAs are then those of the
//   permute GEMV (below), and the decode is 29 vector instructions per 64
//   weights where the permute decode takes 48, 8 cross-lane vpermps among
//   them.
// A chunk's accumulators: from part (zeros for the first chunk); back to
// part, or for the last chunk the row sums times `post` into y.
template <int M, int R>
inline void gemv64_acc_load(const Gemv64Chunk& ch, __m256 (&acc)[M][R]) {
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r)
      acc[i][r] = ch.first() ? _mm256_setzero_ps() : _mm256_load_ps(ch.part + int64_t{8} * (r * M + i));
  }
}
template <int M, int R>
inline void gemv64_acc_store(const Gemv64Chunk& ch, int64_t groups, const __m256 (&acc)[M][R], float post,
                             float* y, int64_t ldy) {
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      if (ch.gb == groups) {
        y[i * ldy + r] = hsum8(acc[i][r]) * post;
      } else {
        _mm256_store_ps(ch.part + int64_t{8} * (r * M + i), acc[i][r]);
      }
    }
  }
}

// kRun: `runs` groups of R rows from j_first in one call (gemv64's small
// K); otherwise one.
template <int M, int R, bool kRun = false>
__attribute__((noinline)) void nvfp4_gemv64_rows(const float* xa, int64_t groups, const NvWeights& w,
                                                 int64_t j_first, float* y_first, int64_t ldy, bool far,
                                                 const Gemv64Chunk& ch, int64_t runs = 1) {
  constexpr bool kScaleFirst = M > kGemv64Rows;
  const int64_t k = w.k, kb = k / 16, rb = k / 2;
  const E2m1Words dec;
  for (int64_t run = 0; run < (kRun ? runs : 1); ++run) {
    const int64_t j0 = j_first + run * R;
    float* const y = y_first + run * R;
    __m256 acc[M][R];
    gemv64_acc_load(ch, acc);
    __m256 sv[R];
    const float* xrow[R];
    x_per_row(xa, xrow);
    // Group g (its first block h in sv: 0 or 4) of the R rows.
    auto group = [&](int64_t g, auto hh, bool half) {
      constexpr int32_t h = decltype(hh)::value;
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w.q + (j0 + r) * rb + g * 32;
        if (h == 0) prefetch_row_ahead(p, R * rb, far);  // once per 64 bytes
        const __m256i v = load_group32(p, half);
        [[maybe_unused]] __m256 t[M][2];
#pragma GCC unroll 2
        for (int c = 0; c < 2; ++c) {
          __m256i wd[2];
          dec.words(v, c, wd);
#pragma GCC unroll 2
          for (int u = 0; u < 2; ++u) {
            if constexpr (kScaleFirst) {
              const __m256 su = group_scale(sv[r], h, u);
              const __m256 we = _mm256_mul_ps(E2m1Words::even(wd[u]), su);
              const __m256 wo = _mm256_mul_ps(dec.odd(wd[u]), su);
              const float* xv = xrow[r] + g * M * kX64Group + int64_t{32} * c + int64_t{16} * u;
#pragma GCC unroll 8
              for (int i = 0; i < M; ++i) {
                acc[i][r] = _mm256_fmadd_ps(we, _mm256_load_ps(xv + i * kX64Group), acc[i][r]);
                acc[i][r] = _mm256_fmadd_ps(wo, _mm256_load_ps(xv + i * kX64Group + 8), acc[i][r]);
              }
            } else {
#pragma GCC unroll 2
              for (int i = 0; i < M; ++i) {
                const float* xg = xrow[r] + (i * groups + g) * kX64Group + int64_t{32} * c + int64_t{16} * u;
                const __m256 x0 = _mm256_load_ps(xg), x1 = _mm256_load_ps(xg + 8);
                t[i][u] = c == 0 ? _mm256_mul_ps(E2m1Words::even(wd[u]), x0)
                                 : _mm256_fmadd_ps(E2m1Words::even(wd[u]), x0, t[i][u]);
                t[i][u] = _mm256_fmadd_ps(dec.odd(wd[u]), x1, t[i][u]);
              }
            }
          }
        }
        if constexpr (!kScaleFirst) {
#pragma GCC unroll 2
          for (int u = 0; u < 2; ++u) {
            const __m256 su = group_scale(sv[r], h, u);
#pragma GCC unroll 2
            for (int i = 0; i < M; ++i) acc[i][r] = _mm256_fmadd_ps(t[i][u], su, acc[i][r]);
          }
        }
      }
    };
    using H0 = std::integral_constant<int32_t, 0>;
    using H4 = std::integral_constant<int32_t, 4>;
    // 8 blocks (two groups) per step: one scale decode per row, kept in
    // registers (sv). The pairs of full groups first, without the checks the
    // last pair needs, and when every scale of the rows is normal and
    // positive (one scan of the rows' codes) without a check per 8 codes. On
    // an AVX2 Zen 3 EPYC, 2 threads, against the loop that had both checks
    // and staged sv through memory: M = 1 1.15-1.36x (4096x4096 in L3 and
    // 11008x4096 rotated through 150 MB), M = 2 1.03-1.13x, M = 4-8
    // 1.05-1.09x; the check per 8 codes alone had cost M = 1 7 %.
    const int64_t full_end = std::min(ch.gb, k / (2 * kX64Group) * 2);  // the chunk's full pairs end
    // MXFP4's E8M0 scales in place (NvWeights::e8m0; the drivers pass them
    // where reads_e8m0 says, K % 128 == 0), a byte per two blocks.
    const bool mx = w.s == nullptr;
    const int64_t kx = k / 32;
    int64_t g0 = ch.ga;
    // kMode 0: E4M3 codes checked per 8; 1: all normal (one scan); 2: E8M0.
    auto pairs = [&](auto mode) {
      constexpr int kMode = decltype(mode)::value;
      for (; g0 < full_end; g0 += 2) {
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          if constexpr (kMode == 2) {
            sv[r] = scales8_e8m0(w.e8m0 + (j0 + r) * kx + g0 * 2, 8, w.e8m0_t);
          } else {
            const uint8_t* s = w.s + (j0 + r) * kb + g0 * 4;
            sv[r] = kMode == 0 ? scales8(s, 8) : i8y_e4m3_normal8(scale_codes8(s));
          }
        }
        group(g0, H0{}, false);
        group(g0 + 1, H4{}, false);
      }
    };
    // (the scan of 8-31 codes by two overlapping 8- or 16-byte loads
    // instead of a byte loop, i8y_codes_normal: on a Zen 4 whose VM hides
    // AVX-512, kernel A/B, one thread, 256 rows in cache, M = 1 K = 128
    // 1.17x, K = 256 1.28x, K = 384 1.29x, M = 2-4 K = 256 1.15x)
    bool normal = !mx;
    const int64_t scanned = std::max<int64_t>(0, full_end - ch.ga) * 4;  // codes the scan reads per row
    // M = 3-8 (K chunks): the codes the next R rows' scan of this chunk reads,
    // into L1 (past the last row, past the weight). Each row's scan otherwise
    // waits for them at its start; on an AVX2 Zen 3, 2 threads, A/B in one
    // process, weights rotated through 150 MB: M = 4-8 1.03-1.20x (4096x11008
    // 1.12-1.20x), M = 3 0.99x, in cache 1.00-1.01x; MXFP4 M = 4-8 1.02-1.05x.
    if (kScaleFirst) {
      // (MXFP4: its E8M0 bytes, two a group)
      const uintptr_t s0 = reinterpret_cast<uintptr_t>(mx ? w.e8m0 : w.s);
      const int64_t per_row = mx ? kx : kb, per_group = mx ? 2 : 4;
      for (int r = 0; r < R; ++r) {
        const uintptr_t row = s0 + static_cast<uintptr_t>((j0 + R + r) * per_row);
        prefetch_lines_l1(row + static_cast<uintptr_t>(ch.ga * per_group),
                          row + static_cast<uintptr_t>(std::min(per_row, ch.gb * per_group)));
      }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) normal = normal && i8y_codes_normal(w.s + (j0 + r) * kb + ch.ga * 4, scanned);
    // The sign rule on the way (NvWeights::signs): the codes the scan read,
    // when it found one not normal (normal codes are positive), and the last
    // pair's, where a pass over the rows' scales after the GEMV
    // (report_scale_signs) read them all again. On an AVX2 Zen 3, 2 threads,
    // A/B in one process, with the rule asked for: M = 1 4096x4096 in cache
    // 1.07x, 11008x4096 from DRAM 1.08x, M = 2-8 in cache 1.00-1.02x.
    if (!mx && w.signs != nullptr) {
      bool negative = false;
      for (int r = 0; r < R; ++r) {
        const uint8_t* s = w.s + (j0 + r) * kb;
        negative = negative || (!normal && any_sign_bit(s + ch.ga * 4, scanned)) ||
                   (ch.gb > full_end && any_sign_bit(s + full_end * 4, kb - full_end * 4));
      }
      if (negative) w.signs->negative.store(true, std::memory_order_relaxed);
    }
    if (mx) {
      pairs(std::integral_constant<int, 2>{});
    } else if (normal) {
      pairs(std::integral_constant<int, 1>{});
    } else {
      pairs(std::integral_constant<int, 0>{});
    }
    if (g0 < ch.gb) {  // the last chunk's last pair
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        sv[r] = mx ? scales8_e8m0(w.e8m0 + (j0 + r) * kx + g0 * 2, kb - g0 * 4, w.e8m0_t)
                   : scales8(w.s + (j0 + r) * kb + g0 * 4, kb - g0 * 4);
      }
      group(g0, H0{}, (g0 + 1) * kX64Group > k);
      if (g0 + 1 < groups) group(g0 + 1, H4{}, (g0 + 2) * kX64Group > k);
    }
    gemv64_acc_store(ch, groups, acc, w.g, y, ldy);
  }
}

void nvfp4_gemv(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float* y,
                int64_t ldy) {
  if (w.k % 32 == 0) {
    gemv64<kGemvMaxRows>(
        x, ldx, m, w.k, n0, n1, y, nvfp4_elem,
        [&](auto mm, auto rr, const float* xa, int64_t groups, int64_t j, int64_t runs, float* yj, bool far,
            const Gemv64Chunk& ch) {
          gemv64_run_or_rows(runs, [&](auto run) {
            nvfp4_gemv64_rows<decltype(mm)::value, decltype(rr)::value, decltype(run)::value>(
                xa, groups, w, j, yj, ldy, far, ch, runs);
          });
        });
    return;  // (the sign rule checked on the way)
  }
  const bool far = rows_to_l2();
  gemv_blocked(x, ldx, m, w.k, [&](auto mm, const float* xb) {
    constexpr int M = decltype(mm)::value;
    gemv_row_groups<M>(n0, n1, y, [&](auto rr, int64_t j, float* yj) {
      nvfp4_gemv_rows<M, decltype(rr)::value>(xb, w, j, yj, ldy, far);
    });
  });
  report_scale_signs(w, n0, n1);
}

// The NF4 byte-plane GEMV (K % 32 == 0, blocksize % 32 == 0): an NF4 code
// value is any fp32, so 32 codes become their values by
// four vpshufb, one per byte of the fp32 (the planes of the codebook), and
// two rounds of unpacks (bytes to words, words to dwords): 12 shuffle-class
// operations per 32 weights where the two-permute decode takes 20. Vector
// q (0-3) of nibble c (0: the low nibbles, element 2j + 1 of byte j; 1: the
// high ones, element 2j) holds in lane (L, d) the code of byte 16L + 4q +
// d, element 32L + 8q + 2d + 1 - c of the group (nf4_elem; x arranged to
// match by x64_order, v = 4c + q). Each 32-element half of a group lies in
// one absmax block. Two orders, each one sequence for any M of its class
// and any R:
// * M <= kGemv64Rows: per (x row, W row) and group, t_c = v(c,0) x + ... +
//   v(c,3) x for c = 1, 0, then acc += (t_1 + t_0) * absmax.
// * M = 3-8 (kScaleFirst; x group-major, as nvfp4_gemv64_rows): each
//   vector of code values is multiplied by its half group's absmax first
//   (the dequantized weights, one rounding as the reference's), then FMA'd
//   into the (x row, W row) accumulator, vectors q = 0-3 of nibble c = 1
//   then of c = 0, one chain from +0. The decode replaces the permute
//   GEMV's two vpermps and a blend per 8 weights (against it on an AVX2
//   Zen 1: M = 3 1.71x, M = 4 1.55x, M = 6-8 1.40x).
inline int nf4_elem(int v, int lane) {
  const int c = v / 4, q = v % 4;
  return 32 * (lane / 4) + 8 * q + 2 * (lane % 4) + 1 - c;
}

// The absmax of a group's halves, the group's first element at flat index
// f: the first half's in lanes 0-3, the second's in 4-7 (a half group: 0
// for the missing half, whose codes are 0 and x zeros).
inline __m256 nf4_group_scale(const Nf4Weights& w, int64_t f, bool half) {
  return _mm256_set_m128(_mm_set1_ps(half ? 0.0f : w.absmax[(f + 32) >> w.block_shift]),
                         _mm_set1_ps(w.absmax[f >> w.block_shift]));
}

// kRun: as nvfp4_gemv64_rows. (A run builds the code values' byte planes
// once: by byte stores and vector loads, built per group of rows they
// made a run at M = 1 0.57x the calls it replaced, at 256 x 256.)
template <int M, int R, bool kRun = false>
__attribute__((noinline)) void nf4_gemv64_rows(const float* xa, int64_t groups, const Nf4Weights& w,
                                               int64_t j_first, float* y_first, int64_t ldy, bool far,
                                               const Gemv64Chunk& ch, int64_t runs = 1) {
  constexpr bool kScaleFirst = M > kGemv64Rows;
  const int64_t k = w.k, rb = k / 2;
  const Nf4Planes planes(w.lut);  // (small_batch_lanes_avx2.h)
  const __m256i nib = _mm256_set1_epi8(0x0f);
  for (int64_t run = 0; run < (kRun ? runs : 1); ++run) {
    const int64_t j0 = j_first + run * R;
    float* const y = y_first + run * R;
    __m256 acc[M][R];
    gemv64_acc_load(ch, acc);
    const float* xrow[R];
    x_per_row(xa, xrow);
    // Group g of the R rows; pf: prefetch (every other group: once per 64
    // bytes).
    auto group = [&](int64_t g, bool pf, bool half) {
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w.q + (j0 + r) * rb + g * 32;
        if (pf) prefetch_row_ahead(p, R * rb, far);
        const __m256i v = load_group32(p, half);
        const __m256 scale = nf4_group_scale(w, (j0 + r) * k + g * kX64Group, half);
        [[maybe_unused]] __m256 t[M][2];
#pragma GCC unroll 2
        for (int c = 1; c >= 0; --c) {
          const __m256i idx =
              c == 0 ? _mm256_and_si256(v, nib) : _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
          __m256 val[4];  // vector q of nibble c
          nf4_lookup32(planes, idx, val);
#pragma GCC unroll 4
          for (int qv = 0; qv < 4; ++qv) {
            if constexpr (kScaleFirst) {
              const __m256 wv = _mm256_mul_ps(val[qv], scale);
              const float* xv = xrow[r] + g * M * kX64Group + int64_t{8} * (4 * c + qv);
#pragma GCC unroll 8
              for (int i = 0; i < M; ++i)
                acc[i][r] = _mm256_fmadd_ps(wv, _mm256_load_ps(xv + i * kX64Group), acc[i][r]);
            } else {
#pragma GCC unroll 2
              for (int i = 0; i < M; ++i) {
                const __m256 xv =
                    _mm256_load_ps(xrow[r] + (i * groups + g) * kX64Group + int64_t{8} * (4 * c + qv));
                t[i][c] = qv == 0 ? _mm256_mul_ps(val[qv], xv) : _mm256_fmadd_ps(val[qv], xv, t[i][c]);
              }
            }
          }
        }
        if constexpr (!kScaleFirst) {
#pragma GCC unroll 2
          for (int i = 0; i < M; ++i)
            acc[i][r] = _mm256_fmadd_ps(_mm256_add_ps(t[i][1], t[i][0]), scale, acc[i][r]);
        }
      }
    };
    // Pairs of full groups first, without the checks of the last ones (on an
    // AVX2 Zen 3 EPYC, 2 threads, 4096x4096 in L3 and 11008x4096 rotated
    // through 150 MB: M = 1 1.05x, M = 2 1.00-1.02x, M = 4-8 1.04-1.09x).
    const int64_t full_end = std::min(ch.gb, k / (2 * kX64Group) * 2);
    // M = 3-8 (K chunks): the absmax the next R rows read in this chunk, into
    // L1, as nvfp4_gemv64_rows does with its codes (A/B as there: M = 8
    // 1.07x from DRAM, 1.02x in cache, M = 4 1.02x).
    if (kScaleFirst) {
      const uintptr_t a0 = reinterpret_cast<uintptr_t>(w.absmax);
      const auto at = [&](int64_t e) { return a0 + static_cast<uintptr_t>((e >> w.block_shift) * 4); };
      for (int r = 0; r < R; ++r) {
        const int64_t f = (j0 + R + r) * k;  // the row's first element
        prefetch_lines_l1(at(f + ch.ga * kX64Group), at(f + std::min(k, ch.gb * kX64Group) - 1) + 4);
      }
    }
    int64_t g = ch.ga;
    for (; g < full_end; g += 2) {
      group(g, true, false);
      group(g + 1, false, false);
    }
    for (; g < ch.gb; ++g) group(g, g % 2 == 0, (g + 1) * kX64Group > k);
    gemv64_acc_store(ch, groups, acc, 1.0f, y, ldy);
  }
}

void nf4_gemv(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, float* y,
              int64_t ldy) {
  if (w.k % 32 != 0 || w.blocksize % 32 != 0) return portable::nf4_gemv(x, ldx, m, w, n0, n1, y, ldy);
  gemv64<kGemvMaxRows>(x, ldx, m, w.k, n0, n1, y, nf4_elem,
                       [&](auto mm, auto rr, const float* xa, int64_t groups, int64_t j, int64_t runs,
                           float* yj, bool far, const Gemv64Chunk& ch) {
                         gemv64_run_or_rows(runs, [&](auto run) {
                           nf4_gemv64_rows<decltype(mm)::value, decltype(rr)::value, decltype(run)::value>(
                               xa, groups, w, j, yj, ldy, far, ch, runs);
                         });
                       });
}

inline __m256i tail_mask(int32_t n) {
  alignas(32) static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  const int32_t c = std::max(0, std::min(8, n));
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ones + 8 - c));
}

template <int MR>
void micro_m(const float* x, int64_t ldx, const float* panel, int64_t kc, float* y, int64_t ldy, int32_t nr,
             bool accumulate) {
  __m256 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) {
    c0[i] = _mm256_setzero_ps();
    c1[i] = _mm256_setzero_ps();
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m256 b0 = _mm256_load_ps(panel + kk * kNR);
    const __m256 b1 = _mm256_load_ps(panel + kk * kNR + 8);
    for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_broadcast_ss(x + i * ldx + kk);
      c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
    }
  }
  const __m256i m0 = tail_mask(nr), m1 = tail_mask(nr - 8);
  // Unrolled so that c0/c1 stay registers: a rolled loop here indexes them
  // by a run-time i, and GCC then keeps the 12 accumulators on the stack
  // and stores them on every step of the main loop (measured: 3x slower).
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* yi = y + i * ldy;
    if (accumulate) {
      c0[i] = _mm256_add_ps(c0[i], _mm256_maskload_ps(yi, m0));
      c1[i] = _mm256_add_ps(c1[i], _mm256_maskload_ps(yi + 8, m1));
    }
    _mm256_maskstore_ps(yi, m0, c0[i]);
    _mm256_maskstore_ps(yi + 8, m1, c1[i]);
  }
}

void gemm_micro(const float* x, int64_t ldx, int32_t mr, const float* panel, int64_t kc, float* y,
                int64_t ldy, int32_t nr, bool accumulate) {
  with_rows<kMR>(mr, [&](auto m) { micro_m<decltype(m)::value>(x, ldx, panel, kc, y, ldy, nr, accumulate); });
}

// a[r][j] -> a[j][r] for an 8x8 block of floats.
inline void transpose8x8(__m256 (&a)[8]) {
  __m256 t[8], u[8];
  for (int64_t i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]);
  }
  for (int64_t h = 0; h < 2; ++h) {  // rows 4h .. 4h+3: u[4h + e], lane l = element 4l + e
    u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
  for (int64_t e = 0; e < 4; ++e) {
    a[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
    a[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
  }
}

// Row-decoded panel fill: decode(r, c0, len, row) writes len values of row
// r from column k0 + c0 into row (len a multiple of 16, at most
// kFillCols); the kNR rows are then transposed 8x8 in registers into the
// panel's [kk][kNR] order (was one scalar store per element). Rows are
// decoded kFillCols at a time: with 64 the 16 rows' short strides missed
// the cache (0.92x).
constexpr int64_t kFillCols = 256;
template <class Decode>
void fill_panel(int32_t rows, int64_t kc, float* panel, const Decode& decode) {
  alignas(32) float buf[kNR][kFillCols];
  for (int64_t c0 = 0; c0 < kc; c0 += kFillCols) {
    const int64_t len = std::min<int64_t>(kFillCols, kc - c0);
    for (int32_t r = 0; r < kNR; ++r) {
      if (r < rows) {
        decode(r, c0, len, buf[r]);
      } else {
        std::fill(buf[r], buf[r] + len, 0.0f);
      }
    }
    for (int32_t r0 = 0; r0 < kNR; r0 += 8) {
      for (int64_t kk = 0; kk < len; kk += 8) {
        __m256 a[8];
        for (int64_t i = 0; i < 8; ++i) a[i] = _mm256_load_ps(buf[r0 + i] + kk);
        transpose8x8(a);
        for (int64_t j = 0; j < 8; ++j) _mm256_storeu_ps(panel + (c0 + kk + j) * kNR + r0, a[j]);
      }
    }
  }
}

// 16 packed E2M1 codes (8 bytes, element 2j in the low nibble) -> their
// values in element order, v[0] and v[1].
inline void e2m1_decode16_ordered(const uint8_t* q8, __m256 lut, __m256 (&v)[2]) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
  v[0] = e2m1_decode8(SbAvx2::nibbles8(q8, shifts), lut);
  v[1] = e2m1_decode8(SbAvx2::nibbles8(q8 + 4, shifts), lut);
}

// Where the dequantizers put 16 values (v[0]: elements off .. off + 7,
// v[1]: the next 8): fp32 as they are (the fp32 entries), or fp16/bf16
// with f32_to_act's bits in one 32-byte store (the 16-bit entries: decoded,
// converted and stored in registers, so that the stores to the output are
// spread over the work; see set_dequantize).
struct DqOutF32 {
  static constexpr bool kChecksNaN = false;
  float* out;
  void sixteen(int64_t off, const __m256 (&v)[2]) const {
    _mm256_storeu_ps(out + off, v[0]);
    _mm256_storeu_ps(out + off + 8, v[1]);
  }
  DqOutF32 unchecked() const { return *this; }
};
// kCheck: one NaN check per 16 values (NaN written as the codec writes it,
// by store_act). The loops run stretches whose factors cannot make a NaN
// (dq_stretches) with unchecked(): fp16 by vcvtps2ph and bf16 by the
// codec's integer rounding alone, which give the codec's bits for every
// other value (Inf included).
template <FType T, bool kCheck = true>
struct DqOut16 {
  static constexpr bool kChecksNaN = kCheck;
  uint16_t* out;
  void sixteen(int64_t off, const __m256 (&v)[2]) const {
    if (kCheck && _mm256_movemask_ps(_mm256_cmp_ps(v[0], v[1], _CMP_UNORD_Q)) != 0) {  // (a NaN in either)
      SbAvx2::store_act<T>(out, off, v[0]);
      SbAvx2::store_act<T>(out, off + 8, v[1]);
      return;
    }
    __m256i h;
    if constexpr (T == FType::F16) {
      constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
      h = _mm256_set_m128i(_mm256_cvtps_ph(v[1], kRound), _mm256_cvtps_ph(v[0], kRound));
    } else {
      // (every dword below 2^16: the saturating pack keeps it; the pack
      // interleaves the 128-bit halves, the permute puts them in order)
      h = _mm256_permute4x64_epi64(
          _mm256_packus_epi32(SbAvx2::bf16_dwords_no_nan(v[0]), SbAvx2::bf16_dwords_no_nan(v[1])), 0xd8);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + off), h);
  }
  DqOut16<T, false> unchecked() const { return {out}; }
};

// The 16-bit dequantizers' NaN checks, hoisted: [0, n) in stretches of at
// most kDqStretch units (blocks, or elements for NF4; a multiple of 2 and
// of 32), each run by body(u0, u1, out) with out.unchecked() where
// nan_free(u0, u1) says no factor of the stretch can make a NaN (its scales
// or absmax finite: the other factors are finite, and a product of finite
// values is finite or an infinity), else with the checked policy. One scan
// of the stretch's scales (its bytes, a 32nd of the output's for NVFP4) in
// place of a compare and a mask move per 16 values. On a Zen 4 whose VM
// hides AVX-512, 2 threads, A/B through the library (tools/ab/ab_ops.c),
// same bits, 256 x 2048 and 1024 x 2048-4096: fp16 out NVFP4 1.10-1.11x,
// NF4 1.04-1.07x; bf16 out NVFP4 1.03-1.06x, NF4 1.00-1.06x, MXFP4
// 1.03-1.05x; fp32 out (unchecked before) 0.99-1.00x.
constexpr int64_t kDqStretch = 1024;
template <class Out, class NanFree, class Body>
void dq_stretches(const Out& out, int64_t n, NanFree&& nan_free, Body&& body) {
  for (int64_t u0 = 0; u0 < n; u0 += kDqStretch) {
    const int64_t u1 = std::min(n, u0 + kDqStretch);
    if constexpr (Out::kChecksNaN) {
      if (nan_free(u0, u1)) {
        body(u0, u1, out.unchecked());
        continue;
      }
    }
    body(u0, u1, out);
  }
}

// Whether none of n bytes at p has all of the bits of `nan` (E4M3 NaN:
// 0x7f of the code; E8M0 NaN: 0xff).
inline bool dq_no_nan_bytes(const uint8_t* p, int64_t n, uint8_t nan) {
  const __m256i m = _mm256_set1_epi8(static_cast<char>(nan));
  int64_t i = 0;
  __m256i hit = _mm256_setzero_si256();
  for (; i + 32 <= n; i += 32)
    hit = _mm256_or_si256(
        hit, _mm256_cmpeq_epi8(
                 _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), m), m));
  bool ok = _mm256_testz_si256(hit, hit) != 0;
  for (; i < n; ++i) ok = ok && (p[i] & nan) != nan;
  return ok;
}

// Whether the n floats at p are finite.
inline bool dq_finite(const float* p, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok = ok && std::isfinite(p[i]);
  return ok;
}

// The dequantize loops, each taking an output policy (DqOutF32 for the
// fp32 entries, DqOut16 for the 16-bit ones: set_dequantize_entries).
// Every loop decodes 32 elements at a time by a byte table
// (e2m1_decode32_ordered, nf4_lookup32), the scales from a table or a
// broadcast; the bits are the codec's (one product per factor, in its
// order). On a Zen 4 whose VM hides AVX-512, 2 threads, through the
// library (tools/ab/ab_ops.c), against the permute decode and a NaN check
// per 8 values: 256 x 2048 and 1024 x 2048 in cache, fp32 out NVFP4
// 1.6x, NF4 1.5-1.7x, MXFP4 1.4x, bf16 out 1.2-1.4x; 11008 x 4096 (the
// output's writes bound it) fp32 1.0-1.08x, bf16 1.3-1.37x.
struct DqLoops {
  // NVFP4: (e2m1 * scale) * g per element, two blocks per step.
  template <class Out>
  static void nvfp4(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k, const Out& out) {
    const int64_t nblocks = rows * (k / 16);
    const __m256i th = e2m1_bf16_high_bytes(), tl = e2m1_bf16_low_bytes();
    const float* e4m3 = sb_e4m3_table();
    const __m256 gv = _mm256_set1_ps(g);
    const bool g_finite = std::isfinite(g);
    dq_stretches(
        out, nblocks,
        [&](int64_t b0, int64_t b1) { return g_finite && dq_no_nan_bytes(s + b0, b1 - b0, 0x7f); },
        [&](int64_t b0, int64_t b1, const auto& o) {
          int64_t b = b0;
          for (; b + 2 <= b1; b += 2) {
            __m256 v[4];
            e2m1_decode32_ordered(q + b * 8, th, tl, v);
            const __m256 s0 = _mm256_broadcast_ss(e4m3 + s[b]), s1 = _mm256_broadcast_ss(e4m3 + s[b + 1]);
            const __m256 lo[2] = {_mm256_mul_ps(_mm256_mul_ps(v[0], s0), gv),
                                  _mm256_mul_ps(_mm256_mul_ps(v[1], s0), gv)};
            const __m256 hi[2] = {_mm256_mul_ps(_mm256_mul_ps(v[2], s1), gv),
                                  _mm256_mul_ps(_mm256_mul_ps(v[3], s1), gv)};
            o.sixteen(b * 16, lo);
            o.sixteen(b * 16 + 16, hi);
          }
          if (b < b1) {  // an odd block count: the last block alone
            __m256 v[2];
            e2m1_decode16_ordered(q + b * 8, e2m1_mag_lut(), v);
            const __m256 sc = _mm256_broadcast_ss(e4m3 + s[b]);
            for (__m256& h : v) h = _mm256_mul_ps(_mm256_mul_ps(h, sc), gv);
            o.sixteen(b * 16, v);
          }
        });
  }

  // NF4: the code values times the block's absmax (n % 16 == 0; blocks of
  // 32 or more elements, so 32 elements share one absmax).
  template <class Out>
  static void nf4(const uint8_t* q, const float* lut, const float* absmax, int64_t blocksize, int64_t n,
                  const Out& out) {
    int64_t i = 0;
    if (blocksize % 32 == 0) {
      const Nf4Planes planes(lut);
      const bool lut_finite = !Out::kChecksNaN || dq_finite(lut, 16);
      i = n / 32 * 32;
      dq_stretches(
          out, i,
          [&](int64_t i0, int64_t i1) {
            return lut_finite &&
                   dq_finite(absmax + i0 / blocksize, (i1 - 1) / blocksize - i0 / blocksize + 1);
          },
          [&](int64_t i0, int64_t i1, const auto& o) {
            for (int64_t e = i0; e < i1; e += 32) {
              __m256 d[4];
              nf4_lookup32(planes, sbl_codes32<true>(q + e / 2), d);
              const __m256 am = _mm256_broadcast_ss(absmax + e / blocksize);
              const __m256 lo[2] = {_mm256_mul_ps(d[0], am), _mm256_mul_ps(d[1], am)};
              const __m256 hi[2] = {_mm256_mul_ps(d[2], am), _mm256_mul_ps(d[3], am)};
              o.sixteen(e, lo);
              o.sixteen(e + 16, hi);
            }
          });
    }
    nf4_permute(q, lut, absmax, blocksize, i, n, out);
  }

  // MXFP4: e2m1 * 2^(byte - 127) per element, one product as the codec.
  template <class Out>
  static void mxfp4(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t k, const Out& out) {
    const int64_t nblocks = rows * (k / fmt::kMxBlock);
    const __m256i th = e2m1_bf16_high_bytes(), tl = e2m1_bf16_low_bytes();
    dq_stretches(
        out, nblocks, [&](int64_t b0, int64_t b1) { return dq_no_nan_bytes(s + b0, b1 - b0, 0xff); },
        [&](int64_t b0, int64_t b1, const auto& o) {
          for (int64_t b = b0; b < b1; ++b) {
            const __m256 sc = _mm256_set1_ps(fmt::e8m0_decode(s[b]));
            __m256 v[4];
            e2m1_decode32_ordered(q + b * 16, th, tl, v);
            const __m256 lo[2] = {_mm256_mul_ps(v[0], sc), _mm256_mul_ps(v[1], sc)};
            const __m256 hi[2] = {_mm256_mul_ps(v[2], sc), _mm256_mul_ps(v[3], sc)};
            o.sixteen(b * 32, lo);
            o.sixteen(b * 32 + 16, hi);
          }
        });
  }

 private:
  // NF4 elements [i0, n) by 8-entry permutes (element 2j in the high
  // nibble): a pair of permutes and a blend on bit 3 per 8 codes.
  template <class Out>
  static void nf4_permute(const uint8_t* q, const float* lut, const float* absmax, int64_t blocksize,
                          int64_t i0, int64_t n, const Out& out) {
    const __m256 lo = _mm256_loadu_ps(lut), hi = _mm256_loadu_ps(lut + 8);
    const __m256i shifts = _mm256_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0);
    for (int64_t i = i0; i < n; i += 16) {
      const __m256 am = _mm256_set1_ps(absmax[i / blocksize]);
      __m256 v[2];
      for (int64_t h = 0; h < 2; ++h) {
        const __m256i c = SbAvx2::nibbles8(q + i / 2 + 4 * h, shifts);  // bits 0-3
        v[h] =
            _mm256_mul_ps(_mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, c), _mm256_permutevar8x32_ps(hi, c),
                                           _mm256_castsi256_ps(_mm256_slli_epi32(c, 28))),
                          am);
      }
      out.sixteen(i, v);
    }
  }
};

// NVFP4 panel: (e2m1 * scale) * g per element, the reference's two
// roundings: each row's columns by the dequantize loop (DqLoops::nvfp4:
// the byte-table decode, the scales from the E4M3 table; nf4_panel says
// what it gains).
void nvfp4_panel(const NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  if (k0 % 16 != 0 || kc % 16 != 0) return portable::nvfp4_panel_nr(w, n0, rows, k0, kc, panel, kNR);
  fill_panel(rows, kc, panel, [&](int32_t r, int64_t c0, int64_t len, float* row) {
    const int64_t c = k0 + c0;
    DqLoops::nvfp4(w.q + (n0 + r) * (w.k / 2) + c / 2, w.s + (n0 + r) * (w.k / 16) + c / 16, w.g, 1, len,
                   DqOutF32{row});
  });
}

// NF4 panel: code value * absmax (one rounding, as the reference), by the
// small-batch kernels' byte-plane decode (sbl_decode_nf4: 32 codes by four
// vpshufb and eight unpacks) where two 8-entry permutes and a blend on
// bit 3 took 8 codes. Same bits; kernel A/B (tools/ab prod-nf4, 2
// threads, in cache) on a Zen 4 whose VM hides AVX-512: the panel GEMM at
// M = 24-32 on 128-256 rows 1.04-1.06x, M = 64-512 0.995-1.02x. NVFP4's
// panel (nvfp4_panel, with its byte-table decode and table scales) gains
// more there: 1.09-1.12x at M = 24-64 on 128-256 rows, 1.02x at M = 128,
// 1.01x at M = 512.
void nf4_panel(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  if (w.k % 16 != 0 || k0 % 16 != 0 || kc % 16 != 0 || w.blocksize % 16 != 0) {
    return portable::nf4_panel_nr(w, n0, rows, k0, kc, panel, kNR);
  }
  const Nf4Planes planes(w.lut);
  fill_panel(rows, kc, panel, [&](int32_t r, int64_t c0, int64_t len, float* row) {
    sbl_decode_nf4(planes, w, (n0 + r) * w.k + k0 + c0, len, row);
  });
}

// ---- NVFP4 quantization (bit-exact; the scheme of the AVX-512 variant) ----

// a >u b for 32-bit lanes.
inline __m256i cmpgt_epu32(__m256i a, __m256i b) {
  const __m256i bias = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  return _mm256_cmpgt_epi32(_mm256_xor_si256(a, bias), _mm256_xor_si256(b, bias));
}

// E4M3 encoding of 8 non-negative values whose biased fp32 exponents are
// all >= 121 (the normal E4M3 range and above, +Inf included): keep 3
// mantissa bits, the same integer round-to-nearest-even as
// fmt::e4m3_encode, saturating at 0x7e (448).
inline __m256i e4m3_encode8_normal(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i one = _mm256_set1_epi32(1);
  // (exp - 120) << 3 | top 3 mantissa bits, in one subtraction.
  const __m256i full = _mm256_sub_epi32(_mm256_srli_epi32(u, 20), _mm256_set1_epi32(120 << 3));
  const __m256i rem_n = _mm256_and_si256(u, _mm256_set1_epi32(0xfffff));
  const __m256i half_n = _mm256_set1_epi32(0x80000);
  const __m256i odd_n = _mm256_cmpeq_epi32(_mm256_and_si256(full, one), one);
  const __m256i up_n = _mm256_or_si256(_mm256_cmpgt_epi32(rem_n, half_n),
                                       _mm256_and_si256(_mm256_cmpeq_epi32(rem_n, half_n), odd_n));
  return _mm256_min_epu32(_mm256_sub_epi32(full, up_n), _mm256_set1_epi32(0x7e));
}

// E4M3 encoding of 8 non-negative values (finite or +Inf; no NaN), the
// same integer round-to-nearest-even as fmt::e4m3_encode, saturating at 448.
inline __m256i e4m3_encode8_nonneg(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i exp = _mm256_srli_epi32(u, 23);
  const __m256i man = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffff));
  // Normal E4M3 (biased fp32 exponent >= 121).
  const __m256i code_n = e4m3_encode8_normal(v);
  // Subnormal E4M3: sig * 2^(e - 150) in units of 2^-9, shift = 141 - e.
  const __m256i has_exp = _mm256_cmpgt_epi32(exp, _mm256_setzero_si256());
  const __m256i sig = _mm256_or_si256(man, _mm256_and_si256(has_exp, _mm256_set1_epi32(0x800000)));
  const __m256i e = _mm256_max_epu32(exp, one);
  const __m256i shift = _mm256_sub_epi32(_mm256_set1_epi32(141), e);
  const __m256i kept = _mm256_srlv_epi32(sig, shift);  // 0 for shift >= 32
  const __m256i rem_s = _mm256_and_si256(sig, _mm256_sub_epi32(_mm256_sllv_epi32(one, shift), one));
  const __m256i half = _mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one));
  const __m256i in_range = _mm256_cmpgt_epi32(_mm256_set1_epi32(33), shift);
  const __m256i odd_s = _mm256_cmpeq_epi32(_mm256_and_si256(kept, one), one);
  const __m256i up_s = _mm256_and_si256(
      in_range,
      _mm256_or_si256(cmpgt_epu32(rem_s, half), _mm256_and_si256(_mm256_cmpeq_epi32(rem_s, half), odd_s)));
  const __m256i code_s = _mm256_sub_epi32(kept, up_s);
  const __m256i normal = _mm256_cmpgt_epi32(exp, _mm256_set1_epi32(120));
  return _mm256_blendv_epi8(code_s, code_n, normal);
}

// The fp32 and fp16 inputs' abs16 and signs2 (below) from their fp32
// bits: |x| by a mask, the signs by three signed saturating packs.
inline void quant_abs16_bits(__m256i v0, __m256i v1, __m256i (&a)[2], __m256i (&sg)[2]) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  sg[0] = v0;
  sg[1] = v1;
  a[0] = _mm256_and_si256(v0, abs_mask);
  a[1] = _mm256_and_si256(v1, abs_mask);
}
inline __m256i quant_signs2_bits(const __m256i (&a)[2], const __m256i (&b)[2]) {
  return _mm256_packs_epi16(_mm256_packs_epi32(a[0], a[1]), _mm256_packs_epi32(b[0], b[1]));
}

// Quantize input formats: bits(p), the fp32 bits of 8 consecutive
// elements (fp16 by vcvtph2ps and bf16 by a shift widen exactly, so the
// codes are those of the fp32 values; the quantizer reads 16-bit input in
// place); abs16(p, a, sg), the |x| bits of 16 elements as two vectors a,
// in element order unless kSplit16: then a[0] holds elements 0-3 and 8-11,
// a[1] 4-7 and 12-15 (bf16: one load, one mask and two in-lane unpacks,
// where two bits() take two loads, two zero extensions and two shifts),
// and in sg what signs2 packs their signs from; signs2(sgA, sgB), two
// such blocks' 32 elements as bytes whose top bit is the element's sign,
// in the order E2m1Encoder8::store2 packs the codes (fp32 and fp16: the
// input bits by three signed saturating packs; bf16: the words themselves
// by one); abs_max16(p) (bf16), 16 elements folded to 8 lanes whose high
// words are the larger |x| word of a pair (block_amax8 masks the low
// words off). On a Zen 4 whose VM hides AVX-512, through
// the library, one process, bf16 input against bits() only: NVFP4
// 1.06-1.07x and MXFP4 1.17x in cache (one thread), NVFP4 1.02-1.06x and
// MXFP4 1.14x from DRAM (11008 x 4096, 2 threads); the same bytes.
struct QuantIn8F32 {
  using T = float;
  static constexpr bool kSplit16 = false;
  static __m256i bits(const float* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void abs16(const float* p, __m256i (&a)[2], __m256i (&sg)[2]) {
    quant_abs16_bits(bits(p), bits(p + 8), a, sg);
  }
  static __m256i signs2(const __m256i (&a)[2], const __m256i (&b)[2]) { return quant_signs2_bits(a, b); }
};
struct QuantIn8Bf16 {
  using T = uint16_t;
  static constexpr bool kSplit16 = true;
  static __m256i bits(const uint16_t* p) {
    return _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
  }
  // (sg[0]: the words, whose signed saturating pack with the other
  // block's is in store2's order, each lane's 8 elements in order after
  // the unpacks and store2's two packs; sg[1] unused. On a Zen 4 whose VM
  // hides AVX-512, kernel A/B against masking after the unpacks and
  // packing their signs (two masks and three packs per two blocks where
  // this takes one and one), same bytes: NVFP4 quantize 1.08x in cache
  // (one thread), 1.05x from DRAM (11008 x 4096, two threads); MXFP4
  // 1.05-1.06x.)
  static void abs16(const uint16_t* p, __m256i (&a)[2], __m256i (&sg)[2]) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i wa = _mm256_and_si256(w, _mm256_set1_epi16(0x7fff));
    a[0] = _mm256_unpacklo_epi16(_mm256_setzero_si256(), wa);
    a[1] = _mm256_unpackhi_epi16(_mm256_setzero_si256(), wa);
    sg[0] = w;
    sg[1] = w;
  }
  static __m256i signs2(const __m256i (&a)[2], const __m256i (&b)[2]) {
    return _mm256_packs_epi16(a[0], b[0]);
  }
  // (the |x| words of a dword's two elements, the larger by a word max
  // against the low one shifted up, in the dword's high word; its low word
  // keeps the low element's |x| word, so the dwords order by their high
  // words and block_amax8 masks the low words off once per 8 blocks. One
  // instruction a block fewer than masking each dword's low word first: on
  // a Zen 4 whose VM hides AVX-512, kernel A/B, NVFP4 quantize of bf16
  // input 1.02x in cache and from DRAM, MXFP4 1.02-1.03x.)
  static __m256i abs_max16(const uint16_t* p) {
    const __m256i a =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_set1_epi16(0x7fff));
    return _mm256_max_epi16(a, _mm256_slli_epi32(a, 16));
  }
};
struct QuantIn8F16 {
  using T = uint16_t;
  static constexpr bool kSplit16 = false;
  static __m256i bits(const uint16_t* p) {
    return _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void abs16(const uint16_t* p, __m256i (&a)[2], __m256i (&sg)[2]) {
    quant_abs16_bits(bits(p), bits(p + 8), a, sg);
  }
  static __m256i signs2(const __m256i (&a)[2], const __m256i (&b)[2]) { return quant_signs2_bits(a, b); }
};

// |x| bits of the 8 floats at x (compare as signed integers).
template <class In = QuantIn8F32>
inline __m256i abs_bits8(const typename In::T* x) {
  return _mm256_and_si256(In::bits(x), _mm256_set1_epi32(0x7fffffff));
}

// The maxima of 8 vectors of |x| bits, lane j of the result the maximum of
// v[j] (a max network instead of 8 horizontal reductions).
inline __m256i max_network8(const __m256i (&v)[8]) {
  auto shuf = [](__m256i a, __m256i b, int imm) {
    return imm == 0x88
               ? _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), 0x88))
               : _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), 0xdd));
  };
  __m256i m[4];
  for (int64_t j = 0; j < 4; ++j)
    m[j] = _mm256_max_epi32(shuf(v[2 * j], v[2 * j + 1], 0x88), shuf(v[2 * j], v[2 * j + 1], 0xdd));
  // m[j], per 128-bit lane: pair maxima of blocks 2j (lanes 0-1), 2j+1 (2-3).
  const __m256i a = _mm256_max_epi32(shuf(m[0], m[1], 0x88), shuf(m[0], m[1], 0xdd));  // blocks 0-3, per lane
  const __m256i b = _mm256_max_epi32(shuf(m[2], m[3], 0x88), shuf(m[2], m[3], 0xdd));  // blocks 4-7, per lane
  return _mm256_max_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// max |x| bits of each of 8 consecutive 16-element blocks, in block order;
// a lane >= 0x7f800000 has a NaN or Inf in its block.
template <class In = QuantIn8F32>
inline __m256i block_amax8(const typename In::T* x) {
  __m256i v[8];
  for (int64_t i = 0; i < 8; ++i) {
    if constexpr (std::is_same_v<In, QuantIn8Bf16>) {
      v[i] = In::abs_max16(x + i * 16);
    } else {
      v[i] = _mm256_max_epi32(abs_bits8<In>(x + i * 16), abs_bits8<In>(x + i * 16 + 8));
    }
  }
  if constexpr (std::is_same_v<In, QuantIn8Bf16>) {
    return _mm256_and_si256(max_network8(v), _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u)));
  }
  return max_network8(v);
}

// scale_group8's answer: kWindow, the division-free element path may run
// for every nonzero block (d in [2^-90, 2^90], amax <= d 2^100); kTight,
// also every quotient |x| / d below 7 (amax <= 6.5 d: no block's scale
// saturated or rounded far down), where E2m1Encoder8::magnitudes_tight
// codes without clamps.
constexpr int kWindow = 1, kTight = 2;

// Scale codes of 8 consecutive blocks with finite maxima `bits`
// (block_amax8) into s, their divisors d into dv and y = RN(1/d) into yv;
// returns kWindow | kTight, kWindow or 0 (above).
inline int scale_group8(__m256i bits, __m256 six_g, __m256 gv, uint8_t* s, float* dv, float* yv) {
  const __m256 av = _mm256_castsi256_ps(bits);
  const __m256 sv = _mm256_div_ps(av, six_g);
  const __m256i nonzero = _mm256_castps_si256(_mm256_cmp_ps(av, _mm256_setzero_ps(), _CMP_GT_OQ));
  __m256i code;
  __m256 dec;
  if (_mm256_movemask_ps(_mm256_castsi256_ps(
          _mm256_cmpgt_epi32(_mm256_set1_epi32(121 << 23), _mm256_castps_si256(sv)))) == 0) {
    // Every scale normal or saturating (the usual case): codes 0x08..0x7e,
    // decoded by their plain bit mapping (as the AVX-512 scale group; this
    // table forced on a Zen 4, 2 threads, A/B both orders: in cache
    // 1.12-1.15x, 11008x4096 from DRAM 1.09-1.11x).
    code = e4m3_encode8_normal(sv);
    dec = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(code, 20), _mm256_set1_epi32(120 << 23)));
  } else {
    code = e4m3_encode8_nonneg(sv);
    // amax > 0 but the scale rounded to 0: the smallest subnormal, 2^-9.
    const __m256i fix = _mm256_and_si256(nonzero, _mm256_cmpeq_epi32(code, _mm256_setzero_si256()));
    code = _mm256_sub_epi32(code, fix);  // 0 -> 1 where fix
    dec = e4m3_decode8(code);
  }
  const __m256 dvec = _mm256_mul_ps(dec, gv);
  _mm256_store_ps(dv, dvec);
  const __m128i c16 = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(s), _mm_packus_epi16(c16, c16));
  const __m256 ok =
      _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(dvec, _mm256_set1_ps(0x1p-90f), _CMP_GE_OQ),
                                  _mm256_cmp_ps(dvec, _mm256_set1_ps(0x1p90f), _CMP_LE_OQ)),
                    _mm256_cmp_ps(av, _mm256_mul_ps(dvec, _mm256_set1_ps(0x1p100f)), _CMP_LE_OQ));
  _mm256_store_ps(yv, _mm256_div_ps(_mm256_set1_ps(1.0f), dvec));
  // Zero blocks (d = 0) are written as zeros either way.
  const int nz = _mm256_movemask_ps(_mm256_castsi256_ps(nonzero));
  if ((nz & ~_mm256_movemask_ps(ok)) != 0) return 0;
  const __m256 tight = _mm256_cmp_ps(av, _mm256_mul_ps(dvec, _mm256_set1_ps(6.5f)), _CMP_LE_OQ);
  return (nz & ~_mm256_movemask_ps(tight)) == 0 ? kWindow | kTight : kWindow;
}

// The E2M1 codes of one block given its 16 correctly rounded quotients
// |x| / d (two vectors) and the input bits (for the signs), packed into 8
// bytes (element 2j in the low nibble of byte j).
struct E2m1Encoder8 {
  __m256 six = _mm256_set1_ps(6.0f);
  __m256i one = _mm256_set1_epi32(0x3f800000);  // 1.0f
  // C by the low 3 exponent bits of max(q, 1): 2^22, 2^23 + 2, 2^24 + 8.
  __m256i magic = _mm256_setr_epi32(0x4b000002, 0x4b800004, 0, 0, 0, 0, 0, 0x4a800000);
  // C by the binades above [1, 2) (magnitudes_tight): 2^22, 2^23 + 2, 2^24 + 8.
  __m256i magic_tight = _mm256_setr_epi32(0x4a800000, 0x4b000002, 0x4b800004, 0, 0, 0, 0, 0);
  __m256i seven = _mm256_set1_epi32(7), eight = _mm256_set1_epi32(8);
  __m256i pack = _mm256_setr_epi8(0, 8, -1, -1, 1, 9, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                  -1, -1, 0, 8, -1, -1, 1, 9, -1, -1, -1, -1, -1, -1, -1, -1);

  // fmt::e2m1_encode's magnitude code 0-7 (nearest, ties to even,
  // saturating at 6) of finite q >= 0 by the fp32 adder: the E2M1 grid's
  // step is 0.5 below 2, 1 in [2, 4) and 2 from 4, i.e. the ulp of 2^22,
  // 2^23, 2^24, so t = min(q, 6) + C with C = 2^22, 2^23 + 2 or 2^24 + 8
  // (by the binade of max(q, 1), picked by one permute) is q rounded to the
  // grid with ties to the even multiple of the step, which is the even
  // code, and t's low 3 bits are the code (the offsets, even in ulps, add
  // the codes 4 and 6 where the binades start). 7 instructions, 3 of them
  // on the chain after q (C beside it). C may also come from qc, an
  // approximation of q within a few ulps (group8: q0 before the correcting
  // FMAs, in parallel with them): they differ in binade only next to 2 or
  // 4, which both grids hold and round to alike. History: 7 threshold
  // compares and adds took 14 instructions; the adder's first form (t - C,
  // then 2r + 2^23 and a vpshufb, on an AVX2 Zen 1: see
  // docs/performance.md) fewer; its second (C = 2^22 shifted to q's
  // exponent by integer adds, the code (t & 7) + 2 (binade of C)) 10, which
  // with group8 made NVFP4 quantize 1.19-1.20x faster on an AVX2 Zen 3
  // (11008x4096 from DRAM, 2 threads; 1024x4096 one thread), MXFP4
  // 1.03-1.05x. This third form, the AVX2 table forced on a Zen 4, one-process
  // A/B both orders: one thread in cache NVFP4 1.17x (bf16 input 1.17-1.18x),
  // MXFP4 1.12-1.13x; 11008x4096 from DRAM, 2 threads, 1.06-1.12x (not
  // timed on a Zen 1, where a 256-bit vpermd is several micro-ops).
  __m256i magnitudes(__m256 qc, __m256 q) const {
    const __m256i e =
        _mm256_srli_epi32(_mm256_max_epu32(_mm256_castps_si256(_mm256_min_ps(qc, six)), one), 23);
    const __m256 c = _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(magic, e));
    const __m256 t = _mm256_add_ps(_mm256_min_ps(q, six), c);
    return _mm256_and_si256(_mm256_castps_si256(t), seven);
  }
  // magnitudes() where 0 <= q < 7 and qc < 8 (scale_group8's kTight):
  // no clamps. Both 0.5-step binades, [0, 1) and [1, 2), take C = 2^22,
  // and q < 8 has at most the binade [4, 8), so the table index is the
  // count of binades above [1, 2): qc's bits less 1.0's by a saturating
  // subtraction of the high words (the low words less 0), shifted down 23
  // bits (0, 1 or 2); t = q + C then holds the code in its low 3 bits as
  // above, q in [5, 7) rounding to 6's code 7. 5 instructions where
  // magnitudes() takes 7. (Normal scales round amax / 6 by at most 1/16,
  // so only saturated and subnormal ones leave the bound. On a Zen 4
  // whose VM hides AVX-512, kernel A/B, same bytes: NVFP4 quantize 1.06x
  // fp32 and 1.10-1.14x bf16 input, in cache one thread and from DRAM
  // two threads.)
  __m256i magnitudes_tight(__m256 qc, __m256 q) const {
    const __m256i e = _mm256_srli_epi32(_mm256_subs_epu16(_mm256_castps_si256(qc), one), 23);
    const __m256 c = _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(magic_tight, e));
    return _mm256_and_si256(_mm256_castps_si256(_mm256_add_ps(q, c)), seven);
  }
  // The whole code: the sign's 8 from the input bits v (bit 31 to bit 3).
  __m256i codes(__m256 q, __m256i v) const {
    return _mm256_or_si256(magnitudes(q, q), _mm256_and_si256(_mm256_srli_epi32(v, 28), eight));
  }

  void store(__m256i c0, __m256i c1, uint8_t* dst) const {
    // dword j: code j | code 8+j << 8; qword j then holds bytes j and 4+j
    // of the output in its low 16 bits.
    const __m256i both = _mm256_or_si256(c0, _mm256_slli_epi32(c1, 8));
    const __m256i pairs = _mm256_or_si256(both, _mm256_srli_epi64(both, 28));
    const __m256i sel = _mm256_shuffle_epi8(pairs, pack);
    const __m128i out = _mm_or_si128(_mm256_castsi256_si128(sel), _mm256_extracti128_si256(sel, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), out);
  }

  // One block: quotient(|x|) per vector of 8, coded and packed to dst.
  template <class In, class Quotient>
  void coded(const typename In::T* x, uint8_t* dst, Quotient&& quotient) const {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    __m256i c[2];
    for (int64_t h = 0; h < 2; ++h) {
      const __m256i v = In::bits(x + 8 * h);
      c[h] = codes(quotient(_mm256_castsi256_ps(_mm256_and_si256(v, abs_mask))), v);
    }
    store(c[0], c[1], dst);
  }

  // One block, division-free (the window of scale_group8).
  template <class In = QuantIn8F32>
  void block(const typename In::T* x, __m256 d, __m256 y, uint8_t* dst) const {
    coded<In>(x, dst, [&](__m256 ax) {
      const __m256 q0 = _mm256_mul_ps(ax, y);
      return _mm256_fmadd_ps(_mm256_fnmadd_ps(q0, d, ax), y, q0);
    });
  }

  // Two blocks' magnitude codes (block A: a0 elements 0-7, a1 8-15; block
  // B: b0, b1) and their signs sgn (In::signs2: the inputs packed alike
  // with signed saturation, which keeps each sign in its byte's top bit),
  // packed into 16 bytes at dst: codes to bytes by saturating packs
  // (in-lane order A 0-3 8-11 B 0-3 8-11 | A 4-7 12-15 B 4-7 12-15), each
  // sign moved to bit 3 and or'ed in; byte pairs c + 16 c' by vpmaddubsw,
  // words to bytes, then the two halves' words interleaved: 13
  // instructions for two blocks where store() takes 8 for one and codes()
  // 3 a vector for the sign. (On an AVX2 Zen 3, the signs added per byte
  // instead of per element: NVFP4 quantize 1.04x, in cache and from DRAM.)
  // Split: each block's vectors in bits16's split order (elements 0-3 and
  // 8-11, then 4-7 and 12-15); the halves then hold bytes 0-3 and 4-7 of
  // each block, interleaved by dwords instead.
  template <bool Split = false>
  void store2(__m256i a0, __m256i a1, __m256i b0, __m256i b1, __m256i sgn, uint8_t* dst) const {
    const __m256i mags = _mm256_packus_epi16(_mm256_packus_epi32(a0, a1), _mm256_packus_epi32(b0, b1));
    const __m256i bytes =
        _mm256_or_si256(mags, _mm256_and_si256(_mm256_srli_epi16(sgn, 4), _mm256_set1_epi8(8)));
    const __m256i pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(16 << 8 | 1));
    // A01 A45 B01 B45 | A23 A67 B23 B67 (words); split: A0-3 B0-3 | A4-7 B4-7 (dwords)
    const __m256i out = _mm256_packus_epi16(pairs, pairs);
    const __m128i lo = _mm256_castsi256_si128(out), hi = _mm256_extracti128_si256(out, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                     Split ? _mm_unpacklo_epi32(lo, hi) : _mm_unpacklo_epi16(lo, hi));
  }

  // 8 blocks of the division-free window (scale_group8 said so), none
  // with d = 0, two at a time (store2); codes' C from q0 = |x| y, before
  // the two FMAs that correct it to q, to shorten the dependency chain.
  // kTightQ: scale_group8 also said kTight (magnitudes_tight).
  template <class In = QuantIn8F32, bool kTightQ = false>
  void group8(const typename In::T* x, const float* dv, const float* yv, uint8_t* dst) const {
    for (int64_t i = 0; i < 8; i += 2) {
      __m256i c[2][2], a[2][2], sg[2][2];
#pragma GCC unroll 2
      for (int64_t b = 0; b < 2; ++b) {
        const __m256 d = _mm256_broadcast_ss(dv + i + b), y = _mm256_broadcast_ss(yv + i + b);
        In::abs16(x + (i + b) * 16, a[b], sg[b]);
#pragma GCC unroll 2
        for (int64_t h = 0; h < 2; ++h) {
          const __m256 ax = _mm256_castsi256_ps(a[b][h]);
          const __m256 q0 = _mm256_mul_ps(ax, y);
          const __m256 qv = _mm256_fmadd_ps(_mm256_fnmadd_ps(q0, d, ax), y, q0);
          c[b][h] = kTightQ ? magnitudes_tight(q0, qv) : magnitudes(q0, qv);
        }
      }
      store2<In::kSplit16>(c[0][0], c[0][1], c[1][0], c[1][1], In::signs2(sg[0], sg[1]), dst + i * 8);
    }
  }

  // An MXFP4 block (32 elements, 16 bytes at dst): the codec's products
  // |x| * 2^-e, packed by store2 (on an AVX2 Zen 3, one thread in cache,
  // 1.19x against two 16-element halves coded with their signs).
  template <class In = QuantIn8F32>
  void block_mul(const typename In::T* x, float inv, uint8_t* dst) const {
    const __m256 iv = _mm256_set1_ps(inv);
    __m256i a[2][2], sg[2][2], c[4];
    In::abs16(x, a[0], sg[0]);
    In::abs16(x + 16, a[1], sg[1]);
    for (int64_t h = 0; h < 4; ++h) {
      const __m256 q = _mm256_mul_ps(_mm256_castsi256_ps(a[h / 2][h % 2]), iv);
      c[h] = magnitudes(q, q);
    }
    store2<In::kSplit16>(c[0], c[1], c[2], c[3], In::signs2(sg[0], sg[1]), dst);
  }

  // One block with the IEEE division (d > 0, any magnitude).
  template <class In = QuantIn8F32>
  void block_div(const typename In::T* x, float d, uint8_t* dst) const {
    coded<In>(x, dst, [&](__m256 ax) { return _mm256_div_ps(ax, _mm256_set1_ps(d)); });
  }
};

// NF4 coding of a block (nf4_quantize_blocks_impl's `code`), 8 elements
// per vector: y = x * inv as the reference, then the number of thresholds
// below y by a 4-step binary search, the reference's `y > t` in every step
// (a NaN y compares false everywhere: code 0), so the same bytes. The
// search keeps the code so far negated, -v, grown by -v' = 2(-v) + mask
// (a true compare's mask is -1). Step 2 picks threshold 3 or 11 by the
// first mask (vblendvps); steps 3 and 4 index a table by -v directly, as
// vpermilps reads the low 2 bits of its index and vpermps the low 3: entry
// (4 - v) & 3, resp. (8 - v) & 7, holds the threshold that follows prefix v
// (step 3: 1, 5, 9, 13; step 4: the even ones); vpermilps, in-lane and
// cheaper than vpermps here, has its 4 entries in both lanes. Four vectors
// are packed together: -code to bytes by signed packs, negated, pairs
// joined as 16 c(2j) + c(2j+1) by vpmaddubsw, the 16-bit pieces put in
// order by one shuffle. len % 32 != 0: false.
struct Nf4CodeAvx2 {
  __m256 t3, t11, Tb, Tc, t7;
  Nf4CodeAvx2() {
    alignas(32) float b[8], c[8];
    for (int32_t i = 0; i < 8; ++i) {
      b[i] = fmt::nf4_threshold(4 * ((4 - i) & 3) + 1);
      c[i] = fmt::nf4_threshold(2 * ((8 - i) & 7));
    }
    t3 = _mm256_set1_ps(fmt::nf4_threshold(3));
    t11 = _mm256_set1_ps(fmt::nf4_threshold(11));
    Tb = _mm256_load_ps(b);
    Tc = _mm256_load_ps(c);
    t7 = _mm256_set1_ps(fmt::nf4_threshold(7));
  }
  // -v' = 2(-v) + (y > t ? -1 : 0).
  static __m256i step(__m256i nv, __m256 y, __m256 t) {
    const __m256i gt = _mm256_castps_si256(_mm256_cmp_ps(y, t, _CMP_GT_OQ));
    return _mm256_add_epi32(_mm256_add_epi32(nv, nv), gt);
  }
  // The codes of 32 elements from their y (4 vectors) -> 16 bytes at qb;
  // kBf16Order: the vectors in code32_bf16's order.
  template <bool kBf16Order>
  void code_y32(const __m256 (&y)[4], uint8_t* qb) const {
    __m256i c[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) c[v] = _mm256_castps_si256(_mm256_cmp_ps(y[v], t7, _CMP_GT_OQ));
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) c[v] = step(c[v], y[v], _mm256_blendv_ps(t3, t11, _mm256_castsi256_ps(c[v])));
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) c[v] = step(c[v], y[v], _mm256_permutevar_ps(Tb, c[v]));
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) c[v] = step(c[v], y[v], _mm256_permutevar8x32_ps(Tc, c[v]));
    // Bytes, per 128-bit lane: elements 0-3 of c[0..3] (lane 0), 4-7 (lane 1).
    const __m256i b =
        _mm256_sub_epi8(_mm256_setzero_si256(),
                        _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3])));
    // 16-bit pieces c(2j) << 4 | c(2j + 1): lane 0 pieces 0-1 of c[0..3] in
    // turn, lane 1 pieces 2-3; then bytes, and the pieces of each c[v] together.
    const __m256i pairs = _mm256_maddubs_epi16(b, _mm256_set1_epi16(0x0110));
    const __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
    if constexpr (kBf16Order) {
      // (per lane pieces of elements 0-7 and 16-23, then 8-15 and 24-31:
      // the bytes' dwords 1 and 2 trade places)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm_shuffle_epi32(bytes, 0xd8));
    } else {
      const __m128i order = _mm_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm_shuffle_epi8(bytes, order));
    }
  }
  // 32 elements -> 16 bytes at qb.
  void code32(const float* xb, __m256 vinv, uint8_t* qb) const {
    __m256 y[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) y[v] = _mm256_mul_ps(_mm256_loadu_ps(xb + int64_t{8} * v), vinv);
    code_y32<false>(y, qb);
  }
  // |x| bits of 8 blocks at xh folded to a vector each, then reduced by
  // the max network; BS: the blocksize as a constant (offsets in the
  // instructions), 0: bs at run time.
  template <int64_t BS>
  static __m256i maxima8(const float* xh, int64_t bs) {
    if (BS != 0) bs = BS;
    __m256i v[8];
#pragma GCC unroll 8
    for (int64_t j = 0; j < 8; ++j)
      v[j] = _mm256_max_epi32(abs_bits8(xh + j * bs), abs_bits8(xh + j * bs + 8));
#pragma GCC unroll 8
    for (int64_t i = 16; i < bs; i += 16) {
#pragma GCC unroll 8
      for (int64_t j = 0; j < 8; ++j) {
        const float* xb = xh + j * bs + i;
        v[j] = _mm256_max_epi32(v[j], _mm256_max_epi32(abs_bits8(xb), abs_bits8(xb + 8)));
      }
    }
    return max_network8(v);
  }
  // The 16 maxima m (|x| bits) into absmax when all are finite; false
  // (nothing written) when one is NaN or Inf.
  static bool store_finite16(const __m256i (&m)[2], float* absmax) {
    const __m256i inf = _mm256_set1_epi32(0x7f7fffff);
    if (_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpgt_epi32(m[0], inf), _mm256_cmpgt_epi32(m[1], inf))) !=
        0)
      return false;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(absmax), m[0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(absmax + 8), m[1]);
    return true;
  }
  // The absmax of 16 whole blocks (nf4_quantize_blocks_impl's `maxima16`):
  // each block's vectors folded by a max of their |x| bits, then 8 blocks at
  // a time reduced by the max network; a NaN or Inf (a lane >= 0x7f800000):
  // false, the loop there takes the NaN rule.
  bool maxima16(const float* x, int64_t blocksize, float* absmax) const {
    if (blocksize % 16 != 0) return false;
    __m256i m[2];
    for (int64_t h = 0; h < 2; ++h) {
      const float* xh = x + 8 * h * blocksize;
      m[h] = blocksize == 64   ? maxima8<64>(xh, blocksize)
             : blocksize == 32 ? maxima8<32>(xh, blocksize)
                               : maxima8<0>(xh, blocksize);
    }
    return store_finite16(m, absmax);
  }
  bool operator()(const float* xb, int64_t len, float inv, uint8_t* qb) const {
    if (len % 32 != 0) return false;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int64_t i = 0; i < len; i += 32) code32(xb + i, vinv, qb + i / 2);
    return true;
  }

  // code32 of 32 bf16 elements read in place: each 16 widened by two
  // in-lane unpacks (vectors A, B of elements 0-3 | 8-11 and 4-7 | 12-15,
  // C, D of 16-19 | 24-27 and 20-23 | 28-31), the same y and compares
  // (code_y32 in that order).
  void code32_bf16(const uint16_t* xb, __m256 vinv, uint8_t* qb) const {
    __m256 y[4];
#pragma GCC unroll 2
    for (int64_t h = 0; h < 2; ++h) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 16 * h));
      y[2 * h] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), w)), vinv);
      y[2 * h + 1] =
          _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), w)), vinv);
    }
    code_y32<true>(y, qb);
  }
  // maxima16 of bf16 input read in place (blocksize % 16 == 0): each
  // block's 16-word vectors masked to |x| and folded by word maxima, its
  // pairs by QuantIn8Bf16::abs_max16's fold, 8 blocks by the max network,
  // the low words masked off; the absmax are the fp32 bits word << 16.
  bool maxima16_bf16(const uint16_t* x, int64_t blocksize, float* absmax) const {
    if (blocksize % 16 != 0) return false;
    const __m256i mag = _mm256_set1_epi16(0x7fff);
    __m256i m[2];
    for (int64_t h = 0; h < 2; ++h) {
      __m256i v[8];
      for (int64_t j = 0; j < 8; ++j) {
        const uint16_t* xb = x + (8 * h + j) * blocksize;
        __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb)), mag);
        for (int64_t i = 16; i < blocksize; i += 16) {
          a = _mm256_max_epi16(
              a, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + i)), mag));
        }
        v[j] = _mm256_max_epi16(a, _mm256_slli_epi32(a, 16));
      }
      m[h] = _mm256_and_si256(max_network8(v), _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u)));
    }
    return store_finite16(m, absmax);
  }
};

// KernelTable::nf4_quantize_blocks. bf16 input in blocks of a multiple of
// 32 elements is read in place, 16 whole blocks at a time (their maxima,
// then each block coded from the words, code32_bf16: the same y and
// compares, so the same bytes and absmax), the input 4 KiB on prefetched
// a line per 32 elements coded; 16 blocks holding a NaN or Inf, and the
// last blocks, go to nf4_quantize_blocks_impl (the NaN rule, partial
// blocks), as does every other input (fp16 and fp32: it reads fp32 in
// place and converts fp16 in pieces). On a Zen 4 whose VM hides AVX-512,
// kernel A/B against converting bf16 in pieces, same bytes: 1.31-1.33x
// in cache (one thread), 1.24-1.28x from DRAM (11008 x 4096, two
// threads); fp32 input 0.98-0.99x (the same code at another address).
bool nf4_quantize_blocks_avx2(FloatPtr x, int64_t n, int64_t bs, int64_t b0, int64_t b1, uint8_t* q,
                              float* am) {
  if (x.type != FType::BF16 || bs % 32 != 0)
    return nf4_quantize_blocks_impl(x, n, bs, b0, b1, q, am, sb_act_to_f32<SbAvx2>, Nf4CodeAvx2{});
  // (The bf16 groups' rest through an instantiation of its own, a lambda
  // converter: one shared with the entry above was compiled out of line,
  // and the fp32 input then ran 0.96-0.97x in cache.)
  const auto rest = [&](int64_t c0, int64_t c1) {
    const auto convert = [](const void* p, FType t, int64_t first, int64_t count, float* dst) {
      sb_act_to_f32<SbAvx2>(p, t, first, count, dst);
    };
    return nf4_quantize_blocks_impl(x, n, bs, c0, c1, q, am, convert, Nf4CodeAvx2{});
  };
  const Nf4CodeAvx2 code;
  const auto* xw = static_cast<const uint16_t*>(x.data);
  constexpr int64_t kAheadElems = 2048;
  bool finite = true;
  int64_t b = b0;
  for (; b + 16 <= b1 && (b + 16) * bs <= n; b += 16) {
    const uint16_t* xg = xw + b * bs;
    if (!code.maxima16_bf16(xg, bs, am + b)) {
      finite = rest(b, b + 16) && finite;
      continue;
    }
    for (int64_t j = 0; j < 16; ++j) {
      const uint16_t* xb = xg + j * bs;
      uint8_t* qb = q + (b + j) * bs / 2;
      const float m = am[b + j];
      if (m == 0.0f) {  // an all-zero block: code 7 everywhere
        std::memset(qb, 0x77, static_cast<size_t>(bs / 2));
        continue;
      }
      const __m256 vinv = _mm256_set1_ps(1.0f / m);
      for (int64_t i = 0; i < bs; i += 32) {
        // (an integer address: it may lie past the input's end)
        __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(xb) +
                                                         static_cast<uintptr_t>(i + kAheadElems) * 2),
                           0, 3);
        code.code32_bf16(xb + i, vinv, qb + i / 2);
      }
    }
  }
  if (b < b1) finite = rest(b, b1) && finite;
  return finite;
}

// Bit-exact NVFP4 quantization with the finite check fused into the block
// maxima (KernelTable::nvfp4_quantize_checked; false at the first pass of
// up to 128 blocks holding a NaN or Inf, q and s then partly written).
// Two passes over up to kGroups x 8 blocks (in L1/L2): all scales, then
// all elements. In: fp32, or 16-bit input read in place.
template <class In>
bool nvfp4_quantize_checked_t(const typename In::T* x, int64_t rows, int64_t k, float g, uint8_t* q,
                              uint8_t* s) {
  constexpr int64_t kGroups = 16;  // 8 KiB of input per pass (the next 8 KiB prefetched behind it)
  const int64_t nblocks = rows * (k / 16);
  const __m256 six_g = _mm256_set1_ps(fmt::kE2M1Max * g);
  const __m256 gv = _mm256_set1_ps(g);
  // (dv and rcp zeroed once per call: each pass writes every entry it
  // reads, dv through scale_group8's vector stores, which the static
  // analyzer's shallow mode, used on the ISA kernels by
  // scripts/run-clang-tidy.sh, does not follow.)
  alignas(32) float dv[kGroups * 8] = {};
  alignas(32) float yv[kGroups * 8];
  int win[kGroups] = {};
  const E2m1Encoder8 enc;
  int64_t b0 = 0;
  while (b0 + 8 <= nblocks) {
    const int64_t groups = std::min(kGroups, (nblocks - b0) / 8);
    // The pass's block maxima first, one finite check for them all, then
    // the scales: the scale chains (two divisions) of several groups
    // overlap when no loads sit between them (on an AVX2 Zen 3: 1.04x, in
    // cache and from DRAM, against a group's maxima and scales together).
    __m256i am[kGroups], worst = _mm256_setzero_si256();
    for (int64_t j = 0; j < groups; ++j) {
      am[j] = block_amax8<In>(x + (b0 + 8 * j) * 16);
      worst = _mm256_max_epi32(worst, am[j]);
    }
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(worst, _mm256_set1_epi32(0x7f7fffff))) != 0) return false;
    for (int64_t j = 0; j < groups; ++j) {
      const int64_t b = b0 + 8 * j;
      win[j] = scale_group8(am[j], six_g, gv, s + b, dv + 8 * j, yv + 8 * j);
    }
    const int64_t next0 = b0 + groups * 8;
    const int64_t ahead = std::min(groups * 8, nblocks - next0);
    for (int64_t j = 0; j < groups; ++j) {
      // The next pass's blocks, one line each, while these are coded from L1.
      // (16-bit blocks are half a line: every other one)
      for (int64_t i = 8 * j; i < std::min(ahead, 8 * j + 8); i += sizeof(typename In::T) == 2 ? 2 : 1)
        _mm_prefetch(reinterpret_cast<const char*>(x + (next0 + i) * 16), _MM_HINT_T0);
      if (win[j] != 0 && _mm256_movemask_ps(_mm256_cmp_ps(_mm256_load_ps(dv + 8 * j), _mm256_setzero_ps(),
                                                          _CMP_EQ_OQ)) == 0) {
        if ((win[j] & kTight) != 0) {
          enc.group8<In, true>(x + (b0 + 8 * j) * 16, dv + 8 * j, yv + 8 * j, q + (b0 + 8 * j) * 8);
        } else {
          enc.group8<In>(x + (b0 + 8 * j) * 16, dv + 8 * j, yv + 8 * j, q + (b0 + 8 * j) * 8);
        }
        continue;
      }
      for (int64_t i = 8 * j; i < 8 * j + 8; ++i) {
        uint8_t* dst = q + (b0 + i) * 8;
        if (dv[i] == 0.0f) {
          std::memset(dst, 0, 8);
        } else if (win[j] != 0) {
          enc.block<In>(x + (b0 + i) * 16, _mm256_set1_ps(dv[i]), _mm256_set1_ps(yv[i]), dst);
        } else {
          enc.block_div<In>(x + (b0 + i) * 16, dv[i], dst);
        }
      }
    }
    b0 += groups * 8;
  }
  for (int64_t b = b0; b < nblocks; ++b) {  // tail blocks: the scalar codec for the scale
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_max_epu32(abs_bits8<In>(x + b * 16), abs_bits8<In>(x + b * 16 + 8)));
    const uint32_t bits = *std::max_element(lanes, lanes + 8);
    if (bits >= 0x7f800000u) return false;
    const uint32_t code = fmt::nvfp4_block_scale_code(fmt::bits_f32(bits), g);
    const float d = fmt::nvfp4_block_divisor(code, g);
    s[b] = static_cast<uint8_t>(code);
    if (d == 0.0f) {
      std::memset(q + b * 8, 0, 8);
    } else {
      enc.block_div<In>(x + b * 16, d, q + b * 8);
    }
  }
  return true;
}

bool nvfp4_quantize_checked(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) {
  return nvfp4_quantize_checked_t<QuantIn8F32>(x, rows, k, g, q, s);
}

// KernelTable::nvfp4_quantize_checked16.
bool nvfp4_quantize_checked16(const uint16_t* x, bool bf16, int64_t rows, int64_t k, float g, uint8_t* q,
                              uint8_t* s) {
  return bf16 ? nvfp4_quantize_checked_t<QuantIn8Bf16>(x, rows, k, g, q, s)
              : nvfp4_quantize_checked_t<QuantIn8F16>(x, rows, k, g, q, s);
}

// KernelTable::nvfp4_quantize (finite input).
void nvfp4_quantize(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) {
  nvfp4_quantize_checked(x, rows, k, g, q, s);
}

// The table's dequantize entries, fp32 and 16-bit: the loops above with
// DqOutF32 and DqOut16.
void set_dequantize(KernelTable& f) {
  set_dequantize_entries<DqLoops, DqOutF32, DqOut16<FType::BF16>, DqOut16<FType::F16>>(f);
}

float amax(const float* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m0 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(m0, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m0);
  float m = 0.0f;
  for (float v : lanes) m = v > m ? v : m;
  for (; i < n; ++i) {
    const float a = x[i] < 0 ? -x[i] : x[i];
    m = a > m ? a : m;
  }
  return m;
}

// KernelTable::mxfp4_quantize, four blocks of 32 at a time: their maxima
// (block_amax8 over the 16-element halves, then the larger of each pair),
// the E8M0 bytes max(exponent field - 2, 0) (fmt::mxfp4_scale_byte), the
// reciprocals 2^(127 - byte) by bit mapping, the elements coded by
// E2m1Encoder8 from |x| * 2^-e. The last blocks: the scalar table's. In:
// fp32, or 16-bit input read in place.
template <class In>
bool mxfp4_quantize_t(const typename In::T* x, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  constexpr int64_t kMxAhead = 1024;
  const E2m1Encoder8 enc;
  const int64_t nblocks = rows * (k / fmt::kMxBlock);
  __m256i worst = _mm256_setzero_si256();  // the largest |x| bits seen (>= 0x7f800000: NaN / Inf)
  int64_t b0 = 0;
  for (; b0 + 4 <= nblocks; b0 += 4) {
    const typename In::T* xg = x + b0 * fmt::kMxBlock;
    // The input 1024 elements on (4 KiB; 512 and 8192 read alike): from
    // DRAM, 2 threads, on an AVX2 Zen 3: 1.17x. (16-bit: every other line.)
    if (b0 + 4 + kMxAhead / fmt::kMxBlock <= nblocks) {
      for (int64_t l = 0; l < 8; l += sizeof(typename In::T) == 2 ? 2 : 1)
        _mm_prefetch(reinterpret_cast<const char*>(xg + kMxAhead + 16 * l), _MM_HINT_T0);
    }
    const __m256i m = block_amax8<In>(xg);
    const __m256i pair = _mm256_max_epi32(m, _mm256_srli_epi64(m, 32));  // dword 2b: block b
    worst = _mm256_max_epi32(worst, pair);
    const __m256i byte = _mm256_max_epi32(_mm256_sub_epi32(_mm256_srli_epi32(pair, 23), _mm256_set1_epi32(2)),
                                          _mm256_setzero_si256());
    alignas(32) int32_t bytes[8];
    alignas(32) float inv[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(bytes), byte);
    _mm256_store_si256(reinterpret_cast<__m256i*>(inv),
                       _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), byte), 23));
    for (int64_t b = 0; b < 4; ++b) {
      s[b0 + b] = static_cast<uint8_t>(bytes[2 * b]);
      uint8_t* qb = q + (b0 + b) * (fmt::kMxBlock / 2);
      enc.block_mul<In>(xg + b * fmt::kMxBlock, inv[2 * b], qb);
    }
  }
  bool finite = _mm256_movemask_epi8(_mm256_cmpgt_epi32(worst, _mm256_set1_epi32(0x7f7fffff))) == 0;
  if (b0 < nblocks) {
    const int64_t len = (nblocks - b0) * fmt::kMxBlock;  // (fewer than 128, a multiple of 8)
    alignas(32) float tail[4 * fmt::kMxBlock];
    const float* xt = nullptr;
    if constexpr (std::is_same_v<In, QuantIn8F32>) {
      xt = x + b0 * fmt::kMxBlock;
    } else {
      for (int64_t i = 0; i < len; i += 8) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(tail + i), In::bits(x + b0 * fmt::kMxBlock + i));
      }
      xt = tail;
    }
    finite = portable::mxfp4_quantize(xt, 1, len, q + b0 * (fmt::kMxBlock / 2), s + b0) && finite;
  }
  return finite;
}

bool mxfp4_quantize(const float* x, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  return mxfp4_quantize_t<QuantIn8F32>(x, rows, k, q, s);
}

// KernelTable::mxfp4_quantize16.
bool mxfp4_quantize16(const uint16_t* x, bool bf16, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  return bf16 ? mxfp4_quantize_t<QuantIn8Bf16>(x, rows, k, q, s)
              : mxfp4_quantize_t<QuantIn8F16>(x, rows, k, q, s);
}

// KernelTable::absmax_bits16: the largest |x| word, 16 a vector, widened
// as the codec widens it. NVFP4_quantize of bf16 input with the global
// scale computed, against the conversion to fp32 first, on a Zen 4 whose
// VM hides AVX-512, 2 threads, one process: 64 x 2048 1.25x, 11008 x 4096
// from DRAM 1.09x.
uint32_t absmax_bits16(const uint16_t* x, int64_t n, bool bf16) {
  const __m256i mask = _mm256_set1_epi16(0x7fff);
  __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_epu16(
        m0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), mask));
    m1 = _mm256_max_epu16(
        m1, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16)), mask));
  }
  m0 = _mm256_max_epu16(m0, m1);
  __m128i h = _mm_max_epu16(_mm256_castsi256_si128(m0), _mm256_extracti128_si256(m0, 1));
  h = _mm_max_epu16(h, _mm_srli_si128(h, 8));
  h = _mm_max_epu16(h, _mm_srli_si128(h, 4));
  h = _mm_max_epu16(h, _mm_srli_si128(h, 2));
  uint32_t w = static_cast<uint32_t>(_mm_extract_epi16(h, 0));
  for (; i < n; ++i) w = std::max<uint32_t>(w, x[i] & 0x7fffu);
  return bf16 ? w << 16 : fmt::f32_bits(fmt::f16_to_f32(static_cast<uint16_t>(w)));
}

uint32_t absmax_bits(const float* x, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_epu32(
        m0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask));
    m1 = _mm256_max_epu32(
        m1, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)), abs_mask));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_max_epu32(m0, m1));
  uint32_t m = portable::absmax_bits(x + i, n - i);
  for (uint32_t v : lanes) m = v > m ? v : m;
  return m;
}

struct Vec {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  static __m256 set1(float v) { return _mm256_set1_ps(v); }
  static __m256 fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
  static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static float sum(__m256 a) { return hsum8(a); }
};

}  // namespace

const KernelTable& avx2_table() {
  static const KernelTable t = complete_table([] {
    KernelTable f;
    f.isa = Q4_ISA_AVX2;
    f.panel_nr = kNR;
    f.micro_mr = kMR;
    f.nvfp4_gemv = nvfp4_gemv;
    f.nf4_gemv = nf4_gemv;
    f.nvfp4_small = sbl_nvfp4_small;  // (small_batch_lanes_avx2.h)
    f.nf4_small = sbl_nf4_small;
    f.act_to_f32 = sb_act_to_f32<SbAvx2>;
    f.f32_to_act = sb_f32_to_act<SbAvx2>;
    f.nf4_quantize_blocks = nf4_quantize_blocks_avx2;
    f.gemm_micro = gemm_micro;
    f.nvfp4_panel = nvfp4_panel;
    f.nf4_panel = nf4_panel;
    f.nvfp4_quantize = nvfp4_quantize;
    f.nvfp4_quantize_checked = nvfp4_quantize_checked;
    f.nvfp4_quantize_checked16 = nvfp4_quantize_checked16;
    f.mxfp4_quantize = mxfp4_quantize;
    f.mxfp4_quantize16 = mxfp4_quantize16;
    set_dequantize(f);
    f.amax = amax;
    f.absmax_bits = absmax_bits;
    f.absmax_bits16 = absmax_bits16;
    f.fma_probe = fma_probe<Vec>;
    f.small_batch_short_n = 256;  // (kernel_table.h)
    f.i8_pack_nvfp4 = i8_pack_nvfp4_avx2;
    f.i8_micro = i8_micro_avx2<>;
    f.i8_micro_small = i8_micro_avx2<kI8MaxBiasedNvfp4>;
    f.i8_micro_mr = kI8MR2;
    f.i8_quantize_act = i8_quantize_act_avx2;
    f.i8_probe = i8_probe_avx2;
    f.i8_gemv_nvfp4 = i8_gemv_nvfp4_or_mx<false>;
    f.i8_gemv_nf4 = i8_gemv_nf4_avx2<false>;
    f.i8_pack_nf4 = i8_pack_nf4_avx2;
    // The GEMV steps 64 elements at a time, so K % 128 == 64 runs it too
    // (the packed panels it ran there were slower than exact at M = 1-4:
    // 2880x2880 on an AVX2-only Zen 3, fast M = 1 3.1 GB/s against exact
    // 5.4).
    f.i8_gemv_k64 = true;
    // nvfp4_gemv (scales8_e8m0) and i8_gemv_nvfp4 (I8yMx::stage) read
    // MXFP4's E8M0 scales in place.
    f.reads_e8m0 = true;
    f.i8_gemv_max_m = 16;           // (int8_gemv_avx2.h: the direct GEMV against the panels)
    f.i8_reads_tiles = true;        // i8y_gemv_direct, every m
    f.i8_reads_tile_scales = true;  // (I8yNvfp4::tile_staged; NF4's absmax staged)
    f.i8_tile_group = i8_tile_group_avx2;
    f.i8_tile_scale_group = i8_tile_scale_group_avx2;
    // Measured on an AVX2-only EPYC (Zen 3 class): the integer kernels beat
    // exact at every M (1.4-1.7x at M = 16..512), so fast mode is integer
    // everywhere and its bits do not depend on M.
    f.i8_fast_max_m = 0;
    return f;
  }());
  return t;
}

}  // namespace q4::kern
