// AVX-512 (F/BW/VL/DQ) kernels. Compiled with its own flags; only called
// after CPUID + XGETBV confirmed the CPU and the OS support AVX-512.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/avx512/int8_avx512.h"
#include "kernels/avx512/small_batch_avx512.h"
#include "kernels/dequantize_entries.h"
#include "kernels/isa_common.h"
#include "kernels/nf4_quantize_impl.h"
#include "kernels/portable.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {
namespace {

constexpr int32_t kNR = 32;  // two zmm of W rows per panel
constexpr int32_t kMR = 12;  // 24 accumulators

inline __m512 e2m1_lut() {
  return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f,
                        -3.0f, -4.0f, -6.0f);
}

// Index vectors that spread block scales 2p, 2p+1 over lanes 0-7 / 8-15.
inline __m512i pair_index(int p) {
  return _mm512_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1, 2 * p + 1,
                           2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1);
}

// Splits rows of x (fp32, fp16 or bf16) into even and odd fp32 elements:
// xe[i][j] = x[i][2j]; fp16/bf16 are converted in registers on the way.
void deinterleave(ActRows x, int64_t ldx, int32_t m, int64_t k, float* xe, float* xo) {
  const int64_t h = k / 2, ld = split_stride(k);
  const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_idx = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const auto* f32 = static_cast<const float*>(x.data);
  const auto* u16 = static_cast<const uint16_t*>(x.data);
  for (int32_t i = 0; i < m; ++i) {
    int64_t j = 0;
    for (; j + 16 <= h; j += 16) {
      const int64_t e = i * ldx + 2 * j;
      __m512 a, b;
      if (x.type == FType::F32) {
        a = _mm512_loadu_ps(f32 + e);
        b = _mm512_loadu_ps(f32 + e + 16);
      } else {
        const __m512i r = _mm512_loadu_si512(u16 + e);
        const __m256i lo = _mm512_castsi512_si256(r), hi = _mm512_extracti64x4_epi64(r, 1);
        if (x.type == FType::F16) {
          a = _mm512_cvtph_ps(lo);
          b = _mm512_cvtph_ps(hi);
        } else {  // bf16: the upper half of an fp32
          a = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(lo), 16));
          b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
        }
      }
      _mm512_storeu_ps(xe + i * ld + j, _mm512_permutex2var_ps(a, even_idx, b));
      _mm512_storeu_ps(xo + i * ld + j, _mm512_permutex2var_ps(a, odd_idx, b));
    }
    for (; j < h; ++j) {
      xe[i * ld + j] = act_elem(x.data, x.type, i * ldx + 2 * j);
      xo[i * ld + j] = act_elem(x.data, x.type, i * ldx + 2 * j + 1);
    }
  }
}

// Rows of W handled together by the GEMV kernels: each x vector loaded is
// used for R rows (x is read from L2 once K is long). Every (x row, W row)
// pair has one accumulator chain and the same operation order for any R,
// so a row's result does not depend on which group (or thread) it is in.
template <int M>
constexpr int gemv_row_group() {
  return M <= 2 ? 4 : 2;
}

// K blocks of the GEMV at M >= 2. Once x of M rows (even and odd halves)
// exceeds kGemvBlockAbove, K is split into blocks whose x fills
// kGemvL1Bytes, which stays in L1 while a block of kGemvBlockRows weight
// rows runs over it; those rows' lane accumulators wait in a buffer between
// K blocks. Measured on a Cascade Lake, one thread, alternating call by
// call: 1.16-1.33x at M = 3-8 with K = 11008 (x 130-350 KiB streamed from
// L2 for every group of weight rows), 0.94-1.0x with x <= 128 KiB (K =
// 4096 at M <= 8, K = 11008 at M = 2), so smaller x is not blocked. K
// blocks start at multiples of 256 elements, where the kernels' scale
// groups start anyway, so the fp32 sequence of every output (and its bits)
// does not depend on the blocking.
constexpr int64_t kGemvBlockAbove = 131072;
constexpr int64_t kGemvL1Bytes = 16384;
constexpr int64_t kGemvBlockRows = 16;

template <int M>
constexpr int64_t gemv_kblock() {
  return std::max<int64_t>(256, kGemvL1Bytes / (int64_t{4} * M) / 256 * 256);
}

// The sums of the 16 lanes of a, b, c and d (lanes 0-3 of the result),
// each paired as _mm512_reduce_add_ps pairs them (lanes l + 8 and l, then
// l + 4 and l, then l and l ^ 2, then 0 and 1; the same operand order),
// so each is bit for bit that function's value: two accumulators' halves
// per vector while they are halved, all four in one vector from 4 lanes on.
inline __m128 reduce_add4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)),
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)),
                                  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)));
  // 128-bit lanes: a's, b's, c's, d's 4-lane sums
  const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)),
                                 _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)));
  const __m512 h = _mm512_add_ps(q, _mm512_permute_ps(q, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 s = _mm512_add_ps(h, _mm512_permute_ps(h, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

// The lane accumulators of one row group over one K block: `mem` (R x M x
// 16 floats, row-major by (r, i)) holds them between blocks (read only when
// not first, written only when not last: null when one block covers K);
// first: start from zero; last: reduce into y[i*ldy + r] * post instead of
// storing.
template <int M, int R>
struct GemvAcc {
  __m512 a[M][R];
  void begin(const float* mem, bool first) {
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        a[i][r] = first ? _mm512_setzero_ps() : _mm512_load_ps(mem + (int64_t{r} * M + i) * 16);
      }
    }
  }
  void end(float* mem, bool last, float post, float* y, int64_t ldy) const {
    if (!last) {
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) _mm512_store_ps(mem + (int64_t{r} * M + i) * 16, a[i][r]);
      }
      return;
    }
    // Four accumulators (t = i R + r) reduced together, each by
    // _mm512_reduce_add_ps's pairing (reduce_add4): its bits, in 13 vector
    // operations instead of 4 x 9. Measured on an Emerald Rapids-class
    // Xeon, 2 threads, 1024 x 128 in cache, one-process A/B against the
    // sums one by one: M = 1 1.05x, M = 2 1.11x, M = 8 1.20x (at K = 4096
    // within the noise).
    constexpr int T = M * R;
    if constexpr (T == 1) {
      y[0] = _mm512_reduce_add_ps(a[0][0]) * post;
      return;
    }
    const __m128 pv = _mm_set1_ps(post);
#pragma GCC unroll 8
    for (int g = 0; g < T; g += 4) {
      auto at = [&](int t) { return t < T ? a[t / R][t % R] : _mm512_setzero_ps(); };
      const __m128 s = _mm_mul_ps(reduce_add4(at(g), at(g + 1), at(g + 2), at(g + 3)), pv);
      if constexpr (R == 4) {
        _mm_storeu_ps(y + (g / 4) * ldy, s);
      } else {
        alignas(16) float f[4];
        _mm_store_ps(f, s);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          if (g + u < T) y[(g + u) / R * ldy + (g + u) % R] = f[u];
        }
      }
    }
  }
};

// The even/odd GEMVs' loads of the next group of rows, one group's time
// before they are read: each row of a group prefetches, at the position it
// reads, the same position of the row R rows on (`q`: two lines of
// codes there; `s`: a line of its scales, when `scales`). The rows of a
// group are short at the K these kernels take (K = 2880: 1440
// bytes), so the hardware prefetcher did not keep up (Zen 5, 2880x2880 from
// DRAM: M = 3-8 1.4-1.7x, NF4 1.04-2.0x; hot within the noise).
// Addresses are integers: past the last group they lie past the arrays
// (a prefetch does not fault; a pointer there would be undefined).
inline void prefetch_group_ahead(uintptr_t q, uintptr_t s, bool scales) {
  __builtin_prefetch(reinterpret_cast<const void*>(q), 0, 3);
  __builtin_prefetch(reinterpret_cast<const void*>(q + 64), 0, 3);
  if (scales) __builtin_prefetch(reinterpret_cast<const void*>(s), 0, 3);
}

// Rows j0 .. j0+R-1 of an NVFP4 GEMV over elements [k0, k1) (k0 a multiple
// of 256; k1 = k or a multiple of 256); y[i*ldy + r] for row j0 + r.
template <int M, int R>
void nvfp4_gemv_rows(const float* xe, const float* xo, int64_t h, const NvWeights& w, int64_t j0, int64_t k0,
                     int64_t k1, float* mem, float* y, int64_t ldy) {
  const int64_t k = w.k;
  const int64_t nblocks = k / 16;
  const __m512 lut = e2m1_lut();
  const uint8_t* q[R];
  const uint8_t* s[R];
  for (int r = 0; r < R; ++r) {
    q[r] = w.q + (j0 + r) * (k / 2);
    s[r] = w.s + (j0 + r) * nblocks;
  }
  GemvAcc<M, R> ga;
  ga.begin(mem, k0 == 0);
  __m512(&acc)[M][R] = ga.a;
  // Groups of 16 blocks (256 elements) share one scale decode; pairs of
  // blocks (32 elements, 16 bytes) are one step: lanes 0-7 hold block 2p,
  // lanes 8-15 block 2p+1, even and odd elements in separate vectors.
  const int64_t b1 = k1 / 16;
  int64_t b0 = k0 / 16;
  // The rows R ahead (the next group of rows, over the same K block) are
  // prefetched at the position this group reads: one group's time ahead.
  const int64_t ahead_q = R * (k / 2), ahead_s = R * nblocks;
  for (; b0 + 16 <= b1; b0 += 16) {
    __m512 sv[R];
    for (int r = 0; r < R; ++r) {
      sv[r] = i8_e4m3_decode16(
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s[r] + b0))));
      prefetch_group_ahead(reinterpret_cast<uintptr_t>(q[r]) + static_cast<uintptr_t>(ahead_q + b0 * 8),
                           reinterpret_cast<uintptr_t>(s[r]) + static_cast<uintptr_t>(ahead_s + b0),
                           b0 % 64 == 0);
    }
    // Scale lanes of pair p: pair_index(p), stepped by 2 per pair (one add,
    // not a vector built from scalars on every step). The 8 pairs unrolled
    // by 2 at M = 3-4, fully at the other M (Zen 5, 2880x2880 hot, against
    // GCC's own choice: M = 7-8 1.07-1.22x unrolled fully, M = 3-4
    // 1.05-1.10x by 2, where fully measured 0.97-1.08x; M = 1 at K = 2912
    // 1.12x fully, by 2 slower at M = 2 and 6-7, 0.80-0.95x).
    const auto pair = [&](int p, __m512i pidx) __attribute__((always_inline)) {
      const int64_t e = (b0 + int64_t{2} * p) * 8;
      for (int r = 0; r < R; ++r) {
        const __m512i bytes =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q[r] + e)));
        const __m512 ve = _mm512_permutexvar_ps(bytes, lut);
        const __m512 vo = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), lut);
        const __m512 sc = _mm512_permutexvar_ps(pidx, sv[r]);
        for (int i = 0; i < M; ++i) {
          const __m512 t = _mm512_fmadd_ps(vo, _mm512_loadu_ps(xo + i * h + e),
                                           _mm512_mul_ps(ve, _mm512_loadu_ps(xe + i * h + e)));
          acc[i][r] = _mm512_fmadd_ps(t, sc, acc[i][r]);
        }
      }
    };
    __m512i pidx = pair_index(0);
    if constexpr (M >= 3 && M <= 4) {
#pragma GCC unroll 2
      for (int p = 0; p < 8; ++p, pidx = _mm512_add_epi32(pidx, _mm512_set1_epi32(2))) pair(p, pidx);
    } else {
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p, pidx = _mm512_add_epi32(pidx, _mm512_set1_epi32(2))) pair(p, pidx);
    }
  }
  if (b0 < b1) {  // tail (last K block only): fewer than 16 blocks, masked
    // r innermost and unrolled: acc is indexed by constants only, so it
    // stays in registers (a runtime index here kept the whole array in
    // memory, the main loop included: 1.4x slower at M = 4).
    const int64_t nb = b1 - b0;
    const __mmask16 smask = static_cast<__mmask16>((1u << nb) - 1u);
    __m512 sv[R];
    for (int r = 0; r < R; ++r) {
      sv[r] = i8_e4m3_decode16(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(smask, s[r] + b0)));
    }
    for (int64_t p = 0; p < (nb + 1) / 2; ++p) {
      const int64_t e = (b0 + 2 * p) * 8;
      const __mmask16 lanes =
          2 * p + 1 < nb ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>(0x00ff);
      const __m512i pidx = pair_index(static_cast<int>(p));
      for (int r = 0; r < R; ++r) {
        const __m512i bytes = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes, q[r] + e));
        const __m512 ve = _mm512_permutexvar_ps(bytes, lut);
        const __m512 vo = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), lut);
        const __m512 sc = _mm512_permutexvar_ps(pidx, sv[r]);
        for (int i = 0; i < M; ++i) {
          const __m512 a = _mm512_maskz_loadu_ps(lanes, xe + i * h + e);
          const __m512 b = _mm512_maskz_loadu_ps(lanes, xo + i * h + e);
          acc[i][r] = _mm512_fmadd_ps(_mm512_fmadd_ps(vo, b, _mm512_mul_ps(ve, a)), sc, acc[i][r]);
        }
      }
    }
  }
  ga.end(mem, k1 == k, w.g, y, ldy);
}

// Rows [n0, n1) of K elements in groups of R, the remainder one row at a
// time: rows(rr, j, k0, k1, mem, yj). When one K block covers K, each
// group runs over all of K in one call (mem null: the accumulators never
// leave registers); otherwise K blocks (gemv_kblock) for blocks of
// kGemvBlockRows rows, mem the group's part of the accumulator buffer.
template <int M, class Rows>
void gemv_row_groups(int64_t n0, int64_t n1, int64_t k, float* y, Rows&& rows) {
  constexpr int R = gemv_row_group<M>();
  const bool blocked = int64_t{4} * M * k > kGemvBlockAbove;
  const int64_t kb = blocked ? gemv_kblock<M>() : k;
  const int64_t block_rows = blocked ? kGemvBlockRows : n1 - n0;
  alignas(64) float mem[kGemvBlockRows * M * 16];
  auto group_mem = [&](int64_t j, int64_t jb) { return blocked ? mem + (j - jb) * M * 16 : nullptr; };
  for (int64_t jb = n0; jb < n1; jb += block_rows) {
    const int64_t je = std::min(n1, jb + block_rows);
    int64_t k0 = 0;
    do {  // (K = 0: one call, which writes zeros)
      const int64_t k1 = std::min(k, k0 + kb);
      int64_t j = jb;
      for (; j + R <= je; j += R)
        rows(std::integral_constant<int, R>{}, j, k0, k1, group_mem(j, jb), y + (j - n0));
      for (; j < je; ++j) rows(std::integral_constant<int, 1>{}, j, k0, k1, group_mem(j, jb), y + (j - n0));
      k0 = k1;
    } while (k0 < k);
  }
}

// 8 x 8 dword transposes in both 256-bit halves at once: afterwards lane i
// of p[j] in half h holds dword j of the input p[i] in half h.
inline void transpose8x8_halves(__m512i (&p)[8]) {
  __m512i t[8], u[8];
  for (int64_t i = 0; i < 4; ++i) {  // per 128-bit lane: p0[0] p1[0] p0[1] p1[1] / p0[2] p1[2] p0[3] p1[3]
    t[2 * i] = _mm512_unpacklo_epi32(p[2 * i], p[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(p[2 * i], p[2 * i + 1]);
  }
  for (int64_t i = 0; i < 2; ++i) {  // u[4i + e], lane 2h (2h+1): dword e (e+4) of inputs 4i .. 4i+3
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int64_t e = 0; e < 4; ++e) {
    p[e] = _mm512_permutex2var_epi64(u[e], lo, u[4 + e]);
    p[e + 4] = _mm512_permutex2var_epi64(u[e], hi, u[4 + e]);
  }
}

// x128_order's vectors of one chunk: out_n lane l = src[8l + (n ^ flip)],
// the 16 x 8 floats transposed. Rows 2j and 2j + 1 are the two halves of
// vector j, so after the 8 x 8 transposes of both halves, p[c] holds
// src[8 (2i) + c] in lane i of its low half and src[8 (2i + 1) + c] in
// lane i of its high half: one permute interleaves them. (It was eight
// 16-lane gathers per chunk, 6.5 % of an exact M = 8 GEMV with the weights
// in L2 on an Emerald Rapids-class Xeon, where gathers are slow.)
inline void x128_transpose(const float* src, int flip, float* dst) {
  __m512i p[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) p[j] = _mm512_castps_si512(_mm512_loadu_ps(src + int64_t{16} * j));
  transpose8x8_halves(p);
  const __m512i mix = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
#pragma GCC unroll 8
  for (int n = 0; n < 8; ++n) {
    _mm512_storeu_ps(dst + int64_t{16} * n, _mm512_castsi512_ps(_mm512_permutexvar_epi32(mix, p[n ^ flip])));
  }
}

// ---- GEMV for K % 128 == 0, any M <= kGemvMaxRows.
// A 128-element chunk of a weight row is one 64-byte load: 16 dword lanes
// of 8 codes. Shifting the dwords right by 4n puts code n of every lane in
// its low 4 bits, which is all vpermps reads: one permute decodes 16
// weights (element 8l + n of the chunk in lane l, NVFP4; 8l + (n ^ 1) for
// NF4's high-nibble-first order), with no byte widening and no
// deinterleaving, and the decoded vector serves every row of x. x is
// reordered to match once per call (x128_order). Per (x row, weight row),
// lane and chunk, t = sum over n ascending of w * x (one product, then
// FMAs) and acc = fma(t, block scale, acc); the lanes are reduced once at
// the end. Lanes 2b and 2b+1 hold block b of the chunk (16 elements), so
// the scale vector is the chunk's 8 block scales, each in two lanes. The
// sequence depends on K only: not on M, the row grouping, the K blocking
// or the thread, so a row's bits are the same at every M <= 8.
// Per 128 weights and x row: 1 multiply and 8 FMAs, and the decode (8
// permutes, 4 shifts, 3 more loads of the chunk, one scale vector) shared
// by the M rows (the even/odd GEMV that K % 128 != 0 keeps: 3 FP ops per
// 32 weights and row, 5 decode ops per 32 weights).
// out[(c*m + i)*128 + 16n + l] = x[i][c*128 + 8l + (n ^ flip)] (fp16/bf16
// converted on the way): chunk c of all m rows is contiguous, so a K block
// of x is one contiguous L1-sized range. K % 128 == 64: the last chunk's
// elements 64-127 are zeros (out holds m * ceil(k/128) * 128 floats).
void x128_order(ActRows x, int64_t ldx, int32_t m, int64_t k, int flip, float* out) {
  alignas(64) float tmp[128];
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < (k + 127) / 128; ++c) {
      const int64_t len = std::min<int64_t>(128, k - c * 128);
      const float* src = tmp;
      if (x.type == FType::F32 && len == 128) {
        src = static_cast<const float*>(x.data) + i * ldx + c * 128;
      } else if (x.type == FType::F32) {
        std::memcpy(tmp, static_cast<const float*>(x.data) + i * ldx + c * 128, static_cast<size_t>(len) * 4);
        std::fill(tmp + len, tmp + 128, 0.0f);
      } else {
        std::fill(tmp + len, tmp + 128, 0.0f);
        for (int j = 0; j < len; j += 16) {
          const __m256i h = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(x.data) + i * ldx + c * 128 + j));
          _mm512_store_ps(tmp + j, x.type == FType::F16 ? _mm512_cvtph_ps(h)
                                                        : _mm512_castsi512_ps(_mm512_slli_epi32(
                                                              _mm512_cvtepu16_epi32(h), 16)));
        }
      }
      x128_transpose(src, flip, out + (c * m + i) * 128);
    }
  }
}

// Weight rows handled together by the chunk GEMV (each decoded vector is
// used M times, each x vector R times): chosen so that the M x R partial
// sums and accumulators stay in the 32 registers.
template <int M>
constexpr int gemv128_row_group() {
  return M <= 2 ? 4 : M <= 4 ? 2 : 1;
}

// Chunks per K block of the chunk GEMV at M >= 2: x of M rows in K blocks
// of kGemv128L1Bytes (it stays in L1 while a block of kGemvBlockRows
// weight rows runs over it; their accumulators wait in a buffer between
// blocks), once x of M rows exceeds kGemv128BlockAbove. M = 1 is never
// blocked (its x is read once per 4 weight rows).
constexpr int64_t kGemv128L1Bytes = 16384;

// The fewest chunks in such a K block: 8 (x of M = 5-8 rows 20-32 KiB) on
// the Intel CPUs of intel_golden_cove_server (48 KiB L1d): measured on an
// Emerald Rapids-class Xeon, 2 threads, one-process A/B, against 4-6
// chunks: M = 8 4096x4096 1.04x hot, 1.08x from DRAM, 11008x4096 and
// 4096x11008 1.10-1.12x from DRAM, M = 5-6 1.09-1.13x, M = 16 (two groups
// of 8) 1.09x hot, NF4 and MXFP4 M = 8 1.07-1.09x; at least 16 (32 KiB
// for all M) was 0.94x at M = 4. Elsewhere 1 (16 KiB of x, as measured
// on a Cascade Lake with 32 KiB L1d).
inline int64_t gemv128_min_kblock_chunks() {
  return intel_golden_cove_server() ? 8 : 1;
}

// KernelTable::gemv_chunk_max_m_k64 (see nvfp4_gemv): up to how many rows
// of x the chunk GEMV takes K % 128 == 64 (a last half chunk), the
// even/odd GEMV the rest. 2 as measured on a Zen 5 (M = 3-7 0.82-0.99x
// the even/odd GEMV there); every M of the GEMV on the CPUs of
// intel_golden_cove_server, where its K blocks and prefetch into L2 make
// it the faster one: Emerald Rapids-class Xeon, 2 threads, one-process
// A/B against the even/odd GEMV, NVFP4 2880x2880: M = 3 1.24x hot, 1.09x
// from DRAM; M = 4 1.14x hot, 0.99x from DRAM; M = 5-7 1.20-1.36x hot,
// 1.10-1.33x from DRAM; M = 8 1.25x hot and from DRAM; 4096x4160 from
// DRAM M = 4 0.98x, M = 8 1.45x; NF4 (blocksize 64) M = 4 1.04x, M = 8
// 1.23x hot. (M = 4 keeps the one kernel too, so that a row has the same
// bits at every M there, as at K % 128 == 0.)
inline int32_t gemv_chunk_max_m_k64() {
  return intel_golden_cove_server() ? kGemvMaxRows : 2;
}
constexpr int64_t kGemv128BlockAbove = 32768;

// Whether the chunk GEMV K-blocks x of m rows (4 m k bytes above
// kGemv128BlockAbove, m >= 2). Not at M = 2 on intel_golden_cove_server
// (2 MiB L2): x of two rows is read from L2 by each group of 4 weight
// rows instead, which then prefetch the next group's rows into L2 (the
// unblocked chunk_rows_to_l2): measured on an Emerald Rapids-class Xeon,
// 2 threads, one-process A/B, 4096x11008 (x 88 KiB) from DRAM 1.15-1.19x,
// hot 1.04x; at M = 3 unblocked was 0.98x from DRAM and 0.91x hot.
inline bool gemv128_blocked(int32_t m, int64_t k) {
  const int32_t min_m = intel_golden_cove_server() ? 3 : 2;
  return m >= min_m && int64_t{4} * m * k > kGemv128BlockAbove;
}

// Rows j0 .. j0+R-1 over chunks [c0, c1) of M rows of x (chunk c at
// xo + c*ldc); y[i*ldy + r] for x row i and row j0 + r when `last`. `mem`
// (R x M x 16 floats) holds the lane accumulators between K blocks, as
// GemvAcc (not read when c0 == 0, not written when `last`); each row's
// weights are prefetched `ahead` bytes ahead and (far, R >= 2) into L2 at
// the same place in the next group's rows (a group's time ahead; on a Zen
// 4, rows_to_l2, from DRAM, 2 threads, A/B both orders: M = 1 4096x4096
// 1.23x, NF4 1.2x, 11008x4096 1.27x, 4096x11008 1.06-1.10x, hot within
// the noise; M = 2 1.08-1.11x, M = 4 1.10-1.15x; the prefetch into L1
// kept beside it, 1.0-1.05x without it); `next` prefetches the start of
// the rows that follow. Not inlined: inside
// gemv128's loops over row blocks, K blocks and x groups the loop counters
// and row pointers of the chunk loop were spilled to the stack.
template <int M, int R, bool kHalfLast, class Scale>
__attribute__((noinline)) void gemv128_rows(const float* xo, int64_t ldc, int64_t c0, int64_t c1,
                                            const uint8_t* q, int64_t rb, int64_t j0, __m512 lut,
                                            const Scale& scale, float* mem, bool last, float post, float* y,
                                            int64_t ldy, int64_t ahead, bool far, NextGroupPrefetch& next) {
  GemvAcc<M, R> ga;
  ga.begin(mem, c0 == 0);
  __m512(&acc)[M][R] = ga.a;
  // kHalfLast (K % 128 == 64): the weight's last chunk is half a chunk (32
  // bytes per row, 4 blocks): its codes and scales loaded masked, x's
  // missing half zeros (x128_order), so lanes 8-15 add 0 x 0. (A template
  // parameter: K % 128 == 0 keeps its own code.)
  const int64_t c_half = kHalfLast ? rb / 64 : -1;
  auto chunk = [&](int64_t c, const typename Scale::Pair(&sp)[R], int half, auto half_chunk) {
    next.step();
    const float* xc = xo + c * ldc;  // chunk c of the M rows, 128 floats each
    // M = 1: x of the chunk in 8 registers for the R rows (as many
    // registers as M > 1 needs for its partial sums).
    __m512 xv[M == 1 ? 8 : 1];
    if constexpr (M == 1) {
#pragma GCC unroll 8
      for (int n = 0; n < 8; ++n) xv[n] = _mm512_loadu_ps(xc + int64_t{16} * n);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      // M = 2-3: x is an FMA memory operand, loaded again for every row
      // (the pointer made opaque per row): GCC otherwise kept the 8 M
      // vectors of the chunk in registers across the R rows and spilled
      // the weights (R = 4 at M = 2: 35 live vectors). Not at M = 4 (R = 2):
      // measured 0.87x hot on a Zen 5.
      const float* xr = xc;
      if constexpr (M > 1 && M <= 3) __asm__("" : "+r"(xr));
      auto x_at = [&](int i, int n) {
        return M == 1 ? xv[M == 1 ? n : 0] : _mm512_loadu_ps(xr + int64_t{128} * i + int64_t{16} * n);
      };
      // Codes 2b and 2b + 1 of every lane are the low nibble of the chunk
      // loaded from byte b on (masked to the chunk's bytes) and of that
      // shifted right by 4: 3 loads instead of 3 of 7 shifts, which share
      // the shuffle pipes with the permutes on a Zen 4 (there, against 7
      // shifts: M = 1 1.06-1.11x hot and from DRAM, M = 2-8 1.02-1.12x).
      const uint8_t* p = q + (j0 + r) * rb + c * 64;
      const uint64_t bytes = decltype(half_chunk)::value ? 0xffffffffULL : ~uint64_t{0};
      __m512i vb[4];
      vb[0] = decltype(half_chunk)::value ? _mm512_maskz_loadu_epi8(bytes, p) : _mm512_loadu_si512(p);
#pragma GCC unroll 3
      for (int b = 1; b < 4; ++b) vb[b] = _mm512_maskz_loadu_epi8(bytes >> b, p + b);
      _mm_prefetch(reinterpret_cast<const char*>(p + ahead), _MM_HINT_T0);
      if constexpr (R >= 2) {
        // (an integer address: past the last group it is past the weight)
        const uintptr_t pn = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(R * rb);
        if (far) _mm_prefetch(reinterpret_cast<const char*>(pn), _MM_HINT_T2);
      }
      __m512 t[M];
#pragma GCC unroll 8
      for (int n = 0; n < 8; ++n) {
        const __m512i src = n % 2 == 0 ? vb[n / 2] : _mm512_srli_epi32(vb[n / 2], 4);
        const __m512 w = _mm512_permutexvar_ps(src, lut);
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i)
          t[i] = n == 0 ? _mm512_mul_ps(w, x_at(i, n)) : _mm512_fmadd_ps(w, x_at(i, n), t[i]);
      }
      const __m512 sc = scale.get(sp[r], half);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) acc[i][r] = _mm512_fmadd_ps(t[i], sc, acc[i][r]);
    }
  };
  // Chunks two at a time: the scales of both are fetched (decoded, for
  // NVFP4) in one step per row, and each chunk takes its half.
  const int64_t cf = c_half >= c0 && c_half < c1 ? c_half : c1;  // the full chunks: [c0, cf)
  int64_t c = c0;
  for (; c + 2 <= cf; c += 2) {
    typename Scale::Pair sp[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sp[r] = scale.pair(j0 + r, c, 16);
    chunk(c, sp, 0, std::false_type{});
    chunk(c + 1, sp, 1, std::false_type{});
  }
  if (c < cf) {
    typename Scale::Pair sp[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sp[r] = scale.pair(j0 + r, c, 8);
    chunk(c, sp, 0, std::false_type{});
  }
  if (cf < c1) {
    typename Scale::Pair sp[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sp[r] = scale.pair(j0 + r, cf, 4);
    chunk(cf, sp, 0, std::true_type{});
  }
  ga.end(mem, last, post, y, ldy);
}

// Block scales of the chunk GEMV, fetched per row for two chunks at a time
// (pair(j, c, blocks): the first `blocks` blocks from block 8c of row j:
// 16 = chunks c and c + 1, 8 = chunk c alone, 4 = a last half chunk;
// lanes past them 0) and
// taken per chunk (get(pair, half)) as the vector whose lanes 2b and 2b+1
// hold the scale of the chunk's block b.
// NVFP4: the 16 E4M3 codes of two chunks decoded in one vector (the plain
// bit mapping when all are normal and positive), each chunk's half then
// spread to lane pairs by one permute: per chunk and row 2.5 instructions
// instead of 8 (one decode per chunk; measured at M = 1 from DRAM on a
// Cascade Lake, alternating call by call: see docs/performance.md). The
// values are those of e4m3_decode, so the bits do not change.
struct Gemv128NvScale {
  using Pair = __m512;
  const uint8_t* s;  // row j's codes at s + j * kb
  int64_t kb;
  mutable int sign_bits = 0;  // the top bits of every code read
  __m512i lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  __m512i hi = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  __attribute__((always_inline)) __m512 pair(int64_t j, int64_t c, int blocks) const {
    // (one chunk: the row's last 8 codes may end its allocation)
    const __m128i b = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << blocks) - 1u), s + j * kb + c * 8);
    const __m512i cw = _mm512_cvtepu8_epi32(b);
    // codes 0x08 .. 0x7e: (code - 8) < 0x77 unsigned
    if (_mm_cmpge_epu8_mask(_mm_sub_epi8(b, _mm_set1_epi8(8)), _mm_set1_epi8(0x77)) == 0) {
      return i8_e4m3_normal16(cw);
    }
    sign_bits |= _mm_movemask_epi8(b);  // (the sign rule, NvWeights::signs)
    return i8_e4m3_decode16(cw);
  }
  __m512 get(__m512 p, int half) const { return _mm512_permutexvar_ps(half ? hi : lo, p); }
};

// MXFP4's E8M0 scales in place (NvWeights::e8m0): the 8 bytes of two
// chunks (4 blocks of 32 each), each byte twice (NVFP4's 16 blocks of 16),
// made fp32 2^(e - 127 - t) by putting e - t in the exponent field (a
// normal fp32: the weight's scales lie in the window), the value
// e4m3_decode gives for the E4M3 code standing for it: the same bits as on
// those codes.
struct Gemv128MxScale {
  using Pair = __m512;
  const uint8_t* e;  // row j's bytes at e + j * cols
  int64_t cols;      // K / 32
  __m512i t;
  __m512i lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  __m512i hi = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  __m512 pair(int64_t j, int64_t c, int blocks) const {
    const __m128i b =
        _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << (blocks / 2)) - 1u), e + j * cols + c * 4);
    const __m512i cw = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
    return _mm512_castsi512_ps(
        _mm512_maskz_slli_epi32(static_cast<__mmask16>((1u << blocks) - 1u), _mm512_sub_epi32(cw, t), 23));
  }
  __m512 get(__m512 p, int half) const { return _mm512_permutexvar_ps(half ? hi : lo, p); }
};

// NF4: lane l of chunk c takes absmax (c * 128 + 16 (l / 2)) >> block_shift
// of its row (one value for the chunk when blocksize >= 128): a masked
// load of the chunk's values and one permute, per chunk.
// K % 128 == 64 (blocksize <= 64, so a chunk's blocks start at its
// element 0 or 64 and lanes 0-7 / 8-15 never share a value wrongly): a last
// half chunk loads only its own max(1, 64 >> block_shift) values, the lanes
// of its missing half 0.
struct Gemv128Nf4Scale {
  struct Pair {
    int64_t e;     // element index j * k + c * 128 of the pair's first chunk
    __mmask16 lm;  // the absmax values to load
  };
  const Nf4Weights& w;
  __mmask16 lm;       // the chunk's absmax values: max(1, 128 >> block_shift)
  __mmask16 lm_half;  // a half chunk's: max(1, 64 >> block_shift)
  __m512i idx;
  Pair pair(int64_t j, int64_t c, int blocks) const {
    return {j * w.k + c * 128, blocks == 4 ? lm_half : lm};
  }
  __m512 get(Pair p, int half) const {
    return _mm512_permutexvar_ps(
        idx, _mm512_maskz_loadu_ps(p.lm, w.absmax + ((p.e + int64_t{128} * half) >> w.block_shift)));
  }
};

// Rows [n0, n1) of m (<= 2 kGemvMaxRows) rows of x, x staged once: groups
// of gemv128_row_group<M>() weight rows, then one by one, each group
// prefetching the scales and first lines of the next (span(r0, n, &bytes):
// the scales of rows [r0, r0 + n); NextGroupPrefetch: measured on a
// Cascade Lake from DRAM, weights rotated through 80 MiB, alternating call
// by call, M = 1, 4096x4096 NVFP4 and NF4, one and two threads:
// 1.07-1.14x). Once x is blocked, blocks of kGemvBlockRows weight rows run
// K block by K block, each K block for the x rows in groups of at most
// kGemvMaxRows (M = 9-16: two groups; a row's sequence is the same in any
// group, so its bits are those of M = 1).
template <class Span, class Scale>
void gemv128(ActRows x, int64_t ldx, int32_t m, int64_t k, int flip, const uint8_t* q, int64_t n0, int64_t n1,
             float post, float* y, int64_t ldy, __m512 lut, Span&& span, const Scale& scale) {
  const int64_t rb = k / 2, chunks = (k + 127) / 128,
                ldc = int64_t{m} * 128;  // (K % 128 == 64: a half chunk)
  AlignedFloats xo = aligned_floats(int64_t{m} * chunks * 128);
  x128_order(x, ldx, m, k, flip, xo.get());
  const bool blocked = gemv128_blocked(m, k);
  const int64_t cb = blocked ? std::max(gemv128_min_kblock_chunks(),
                                        kGemv128L1Bytes / (int64_t{512} * std::min(m, kGemvMaxRows)))
                             : chunks;
  const int64_t block_rows = blocked ? kGemvBlockRows : n1 - n0;
  // How far ahead each row's weights are prefetched: unblocked 256 bytes
  // (measured from DRAM on a Cascade Lake at M = 1: 1.2x; 1 KiB is slower
  // than none); blocked, at least one K block, so that all of a row's next
  // K block is on its way (it is read kGemvBlockRows rows later; at 256
  // bytes, M = 3-4 fetched half of every K block from DRAM on demand).
  const int64_t ahead_bytes = blocked ? std::max<int64_t>(256, cb * 64) : 256;
  const bool far = chunk_rows_to_l2(blocked, m);
  alignas(64) float mem[kGemvBlockRows * 2 * kGemvMaxRows * 16];
  for (int64_t jb = n0; jb < n1; jb += block_rows) {
    const int64_t je = std::min(n1, jb + block_rows);
    int64_t c0 = 0;
    do {  // (K = 0: one pass, which writes zeros)
      const int64_t c1 = std::min(chunks, c0 + cb);
      const bool last = c1 == chunks;
      for (int32_t i0 = 0; i0 < m; i0 += kGemvMaxRows) {
        float* gmem = mem + int64_t{i0} * kGemvBlockRows * 16;
        with_rows<kGemvMaxRows>(std::min(m - i0, kGemvMaxRows), [&](auto mm) {
          constexpr int M = decltype(mm)::value;
          constexpr int R = gemv128_row_group<M>();
          auto group = [&](auto rr, int64_t j) {
            constexpr int G = decltype(rr)::value;
            // Unblocked: the next group's scales and first lines. Blocked
            // (each row's own prefetch reaches its next K block): in the
            // last K block (its last x group), the same rows of the next
            // row block, all of their scales (kept in cache for their K
            // sweep; without this every row's scale load of every K block
            // waited on the L3: at M = 8, 4096², hot, 17 % of the kernel's
            // samples on a Zen 5).
            const int64_t ahead = blocked ? j + block_rows : j + G;
            const int64_t ahead_rows =
                blocked && !(last && i0 + kGemvMaxRows >= m) ? 0 : std::min<int64_t>(G, n1 - ahead);
            NextGroupPrefetch next(span, q, rb, ahead, ahead_rows, c1 - c0);
            const auto rows =
                k % 128 == 0 ? gemv128_rows<M, G, false, Scale> : gemv128_rows<M, G, true, Scale>;
            rows(xo.get() + int64_t{i0} * 128, ldc, c0, c1, q, rb, j, lut, scale,
                 blocked ? gmem + (j - jb) * M * 16 : gmem, last, post, y + int64_t{i0} * ldy + (j - n0), ldy,
                 ahead_bytes, far, next);
          };
          int64_t j = jb;
          for (; j + R <= je; j += R) group(std::integral_constant<int, R>{}, j);
          for (; j < je; ++j) group(std::integral_constant<int, 1>{}, j);
        });
      }
      c0 = c1;
    } while (c0 < chunks);
  }
}

// The chunk GEMV takes at most 2 kGemvMaxRows rows of x and the even/odd
// one (K % 128 != 0) kGemvMaxRows: more run in passes of `rows` (the
// table's gemv_max_m_k128 gives M = 9-16 to these entries only when K %
// 128 == 0, but a caller may pass any M).
template <class Gemv>
void gemv_passes(ActRows x, int64_t ldx, int32_t m, int32_t rows, float* y, int64_t ldy, Gemv&& gemv) {
  const int64_t esize = x.type == FType::F32 ? 4 : 2;
  for (int32_t i0 = 0; i0 < m; i0 += rows) {
    const ActRows xi(static_cast<const char*>(x.data) + int64_t{i0} * ldx * esize, x.type);
    gemv(xi, std::min(m - i0, rows), y + int64_t{i0} * ldy);
  }
}

// kK64: the chunk GEMV's rows of x at K % 128 == 64 (0: this CPU's
// gemv_chunk_max_m_k64(); another value for tests, avx512_table_chunk_k64).
template <int32_t kK64>
void nvfp4_gemv(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, float* y,
                int64_t ldy) {
  const int32_t most = w.k % 128 == 0 ? 2 * kGemvMaxRows : kGemvMaxRows;
  if (m > most) {
    return gemv_passes(x, ldx, m, most, y, ldy, [&](ActRows xi, int32_t mi, float* yi) {
      nvfp4_gemv<kK64>(xi, ldx, mi, w, n0, n1, yi, ldy);
    });
  }
  const int32_t k64 = kK64 > 0 ? kK64 : gemv_chunk_max_m_k64();
  // The chunk GEMV; K % 128 == 64 with a last half chunk at M <=
  // gemv_chunk_max_m_k64() only (gpt-oss's K = 2880 and 4096x4160, Zen 5,
  // against the even/odd GEMV: M = 1 1.25-1.35x hot, 1.5x from DRAM, M = 2
  // 1.09-1.12x, M = 3-7 0.82-0.99x), so where that is 2 the rows of M <= 2
  // and of M = 3-8 differ in their last bits at that K.
  if (w.k % 128 == 0 || (w.k % 64 == 0 && m <= k64)) {
    const int64_t kb = w.k / 16;
    const auto span = [&](int64_t r0, int64_t n, int64_t* bytes) {
      return nvfp4_scale_span(w, r0, n, bytes);
    };
    // The sign rule fused: every code of rows [n0, n1) goes through the
    // scale decode, whose slow path (any code outside 0x08 .. 0x7e) notes
    // the sign bits; no pass of its own over the scales.
    if (w.s == nullptr && w.e8m0 != nullptr) {
      const Gemv128MxScale scale{w.e8m0, w.k / 32, _mm512_set1_epi32(w.e8m0_t)};
      gemv128(x, ldx, m, w.k, 0, w.q, n0, n1, w.g, y, ldy, e2m1_lut(), span, scale);
      return;
    }
    const Gemv128NvScale scale{w.s, kb};
    gemv128(x, ldx, m, w.k, 0, w.q, n0, n1, w.g, y, ldy, e2m1_lut(), span, scale);
    if (w.signs != nullptr && scale.sign_bits != 0) w.signs->negative.store(true, std::memory_order_relaxed);
    return;
  }
  gemv_even_odd(x, ldx, m, w.k, deinterleave, [&](auto mm, const float* xe, const float* xo, int64_t h) {
    constexpr int M = decltype(mm)::value;
    gemv_row_groups<M>(n0, n1, w.k, y,
                       [&](auto rr, int64_t j, int64_t k0, int64_t k1, float* mem, float* yj) {
                         nvfp4_gemv_rows<M, decltype(rr)::value>(xe, xo, h, w, j, k0, k1, mem, yj, ldy);
                       });
  });
  report_scale_signs(w, n0, n1);
}

// prefetch_group_ahead for NF4 element f (of the whole weight, row-major):
// its codes and its absmax value.
inline void prefetch_nf4_ahead(const Nf4Weights& w, int64_t f) {
  prefetch_group_ahead(reinterpret_cast<uintptr_t>(w.q) + static_cast<uintptr_t>(f / 2),
                       reinterpret_cast<uintptr_t>(w.absmax) +
                           static_cast<uintptr_t>((f >> w.block_shift) * int64_t{sizeof(float)}),
                       true);
}

// NF4: byte j holds element 2j (high nibble) and 2j+1 (low). K % 32 == 0 and
// blocksize >= 32, so each 32-element step lies in one absmax block, whose
// value is broadcast straight from memory; the codebook is a permute.
template <int M, int R>
void nf4_gemv_rows(const float* xe, const float* xo, int64_t h, const Nf4Weights& w, int64_t j0, int64_t k0,
                   int64_t k1, float* mem, float* y, int64_t ldy) {
  const int64_t k = w.k;
  const __m512 lut = _mm512_loadu_ps(w.lut);
  GemvAcc<M, R> ga;
  ga.begin(mem, k0 == 0);
  __m512(&acc)[M][R] = ga.a;
  const int64_t f0 = j0 * k;
  const auto step = [&](int64_t c) __attribute__((always_inline)) {
    for (int r = 0; r < R; ++r) {
      const int64_t f = f0 + r * k + c;
      const __m512i bytes =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.q + f / 2)));
      const __m512 ve = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), lut);
      const __m512 vo = _mm512_permutexvar_ps(bytes, lut);
      const __m512 sc = _mm512_set1_ps(w.absmax[f >> w.block_shift]);
      for (int i = 0; i < M; ++i) {
        const __m512 t = _mm512_fmadd_ps(vo, _mm512_loadu_ps(xo + i * h + c / 2),
                                         _mm512_mul_ps(ve, _mm512_loadu_ps(xe + i * h + c / 2)));
        acc[i][r] = _mm512_fmadd_ps(t, sc, acc[i][r]);
      }
    }
  };
  // Each row prefetches the next group's row at its position once per 256
  // elements (prefetch_group_ahead). Against GCC's own choice for a plain
  // loop of steps of 32 without the prefetch (Zen 5, 2880x2880, blocksize 64
  // and 128): from DRAM M = 1-8 1.1-1.9x (blocksize 64 at M = 2 1.0x); hot
  // M = 6-8 1.12-1.28x, M = 1 at blocksize 128 1.33-1.41x, M = 2-4 0.96-1.0x.
  // M >= 5: one loop of steps of 32 unrolled by 8 (the other form measured
  // 0.96x at M = 6); M <= 4: steps of 256 elements, their 8 steps of 32
  // not unrolled (unrolled by 2-8: M = 1 at blocksize 128 0.76x, M = 4
  // 0.95x).
  int64_t c = k0;
  if constexpr (M >= 5) {
#pragma GCC unroll 8
    for (; c < k1; c += 32) {
      if (c % 256 == 0) {
        for (int r = 0; r < R; ++r) {
          prefetch_nf4_ahead(w, f0 + (r + R) * k + c);
        }
      }
      step(c);
    }
  } else {
    for (; c + 256 <= k1; c += 256) {
      for (int r = 0; r < R; ++r) {
        prefetch_nf4_ahead(w, f0 + (r + R) * k + c);
      }
#pragma GCC unroll 1
      for (int u = 0; u < 8; ++u) step(c + int64_t{32} * u);
    }
    for (; c < k1; c += 32) step(c);
  }
  ga.end(mem, k1 == k, 1.0f, y, ldy);
}

template <int32_t kK64>  // (as nvfp4_gemv's)
void nf4_gemv(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, float* y,
              int64_t ldy) {
  const int32_t most = w.k % 128 == 0 && w.blocksize % 32 == 0 ? 2 * kGemvMaxRows : kGemvMaxRows;
  if (m > most) {
    return gemv_passes(x, ldx, m, most, y, ldy, [&](ActRows xi, int32_t mi, float* yi) {
      nf4_gemv<kK64>(xi, ldx, mi, w, n0, n1, yi, ldy);
    });
  }
  if (w.k % 32 != 0 || w.blocksize % 32 != 0) return portable::nf4_gemv(x, ldx, m, w, n0, n1, y, ldy);
  const int32_t k64 = kK64 > 0 ? kK64 : gemv_chunk_max_m_k64();
  // The chunk GEMV, as nvfp4_gemv (K % 128 == 64: M <= k64 and blocksize
  // <= 64).
  if (w.k % 128 == 0 || (w.k % 64 == 0 && m <= k64 && w.blocksize <= 64)) {
    // The chunk's absmax values are contiguous: 128 >> shift of them (at
    // least 1; blocksize >= 32 here), lane l takes (16 (l / 2)) >> shift.
    const int32_t sh = w.block_shift;
    const int64_t nv = std::max<int64_t>(1, 128 >> sh), nv_half = std::max<int64_t>(1, 64 >> sh);
    const __mmask16 lm = static_cast<__mmask16>((1u << nv) - 1u);
    const __mmask16 lm_half = static_cast<__mmask16>((1u << nv_half) - 1u);
    const __m512i idx =
        _mm512_srl_epi32(_mm512_setr_epi32(0, 0, 16, 16, 32, 32, 48, 48, 64, 64, 80, 80, 96, 96, 112, 112),
                         _mm_cvtsi32_si128(sh));
    const auto span = [&](int64_t r0, int64_t n, int64_t* bytes) { return nf4_scale_span(w, r0, n, bytes); };
    return gemv128(x, ldx, m, w.k, 1, w.q, n0, n1, 1.0f, y, ldy, _mm512_loadu_ps(w.lut), span,
                   Gemv128Nf4Scale{w, lm, lm_half, idx});
  }
  gemv_even_odd(x, ldx, m, w.k, deinterleave, [&](auto mm, const float* xe, const float* xo, int64_t h) {
    constexpr int M = decltype(mm)::value;
    gemv_row_groups<M>(n0, n1, w.k, y,
                       [&](auto rr, int64_t j, int64_t k0, int64_t k1, float* mem, float* yj) {
                         nf4_gemv_rows<M, decltype(rr)::value>(xe, xo, h, w, j, k0, k1, mem, yj, ldy);
                       });
  });
}

// 16 packed NVFP4 codes (8 bytes, element 2j low nibble) -> 16 e2m1 values in order.
inline __m512 nvfp4_decode16_ordered(const uint8_t* q8, __m512 lut) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q8));
  const __m512i d = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
  const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  return _mm512_permutexvar_ps(_mm512_srlv_epi32(d, shifts), lut);
}

// a[r][j] -> out[j][r] for a 16x16 block of floats: pairs of rows
// interleaved, then pairs of pairs, then the 128-bit lanes in two steps.
inline void transpose16x16(__m512 (&a)[16]) {
  __m512 t[16];
  for (int64_t i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]);
  }
  __m512 u[16];  // u[4i + e], 128-bit lane L: rows 4i..4i+3 of element 4L + e
  for (int64_t i = 0; i < 4; ++i) {
    const __m512d t0 = _mm512_castps_pd(t[4 * i]), t1 = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d t2 = _mm512_castps_pd(t[4 * i + 2]), t3 = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int64_t e = 0; e < 4; ++e) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xdd);
    a[e] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    a[8 + e] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    a[4 + e] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    a[12 + e] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

// The 4-bit panel packers (panel[kk * kNR + r], rows >= `rows` zero),
// decoding in the panel's order instead of decoding rows and transposing
// the floats: the codes of 16 rows x 64 columns are loaded as dwords (one
// row's 8 codes each) and transposed as dwords, so that each column of 16
// rows is one shift and one codebook permute; the rows' block scales, up to
// 16 blocks at a time, are loaded along the row and transposed once. Per 16
// weights about 4 vector operations instead of 12 (the decoded floats' 16 x 16
// transposes, one scalar scale decode per row and block): on a Cascade Lake
// the exact M = 64 product spent a third of its time in the former packer.
// The values are the element-wise decode's (same products, same order).
//
// q: codes of row n0 from column k0 (k0 % 16 == 0, kc % 16 == 0, rows of
// row_bytes); kHighFirst: element 2j is the high nibble of byte j (NF4);
// row_scales(r, kb, nb): lanes 0 .. nb-1 hold the scales of blocks kb/16 ..
// kb/16 + nb - 1 (relative to k0) of row r; finish(v, s, live): the value
// of code value v in a block of scale s, zero outside `live`.
template <bool kHighFirst, class RowScales, class Finish>
inline void panel_direct(const uint8_t* q, int64_t row_bytes, int32_t rows, int64_t kc, __m512 lut,
                         float* panel, RowScales&& row_scales, Finish&& finish) {
  alignas(64) float sv[16][16];
  for (int32_t r0 = 0; r0 < kNR; r0 += 16) {
    const int32_t live_rows = std::clamp(rows - r0, 0, 16);
    if (live_rows == 0) {
      for (int64_t kk = 0; kk < kc; ++kk) _mm512_storeu_ps(panel + kk * kNR + r0, _mm512_setzero_ps());
      continue;
    }
    const __mmask16 live = static_cast<__mmask16>((1u << live_rows) - 1u);
    // The codes of these rows' next kc columns (the caller's next slice):
    // with them in flight while this slice is coded, the packer waited
    // 1.02-1.06x less for L3 (exact M = 32-512, 4096^2, Cascade Lake).
    for (int64_t r = 0; r < live_rows; ++r) {
      for (int64_t b = 0; b < kc / 2; b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(q + (r0 + r) * row_bytes + kc / 2 + b), _MM_HINT_T0);
      }
    }
    for (int64_t kb = 0; kb < kc; kb += 256) {
      const int64_t nb = std::min<int64_t>(16, (kc - kb) / 16);
      __m512 a[16];
      for (int r = 0; r < 16; ++r) a[r] = r < live_rows ? row_scales(r0 + r, kb, nb) : _mm512_setzero_ps();
      transpose16x16(a);  // a[b]: lane r = scale of block b of row r0 + r
      for (int b = 0; b < 16; ++b) _mm512_store_ps(sv[b], a[b]);
      for (int64_t kk = kb; kk < kb + nb * 16; kk += 64) {
        const int nd = static_cast<int>(std::min<int64_t>(8, (kb + nb * 16 - kk) / 8));  // even
        const __mmask8 dmask = static_cast<__mmask8>((1u << nd) - 1u);
        auto row = [&](int r) {
          return r < live_rows ? _mm256_maskz_loadu_epi32(dmask, q + (r0 + r) * row_bytes + kk / 2)
                               : _mm256_setzero_si256();
        };
        __m512i p[8];
        for (int i = 0; i < 8; ++i) p[i] = _mm512_inserti64x4(_mm512_castsi256_si512(row(i)), row(i + 8), 1);
        transpose8x8_halves(p);  // p[j]: lane r = codes kk + 8j .. kk + 8j + 7 of row r0 + r
        for (int64_t j = 0; j < nd; ++j) {
          const __m512 s = _mm512_load_ps(sv[(kk - kb + 8 * j) / 16]);
          float* dst = panel + (kk + 8 * j) * kNR + r0;
          for (int64_t e = 0; e < 8; ++e) {
            const auto shift = static_cast<unsigned>(kHighFirst ? 8 * (e / 2) + 4 * (1 - e % 2) : 4 * e);
            const __m512 v = _mm512_permutexvar_ps(_mm512_srli_epi32(p[j], shift), lut);
            _mm512_storeu_ps(dst + e * kNR, finish(v, s, live));
          }
        }
      }
    }
  }
}

void nvfp4_panel(const NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  if (k0 % 16 != 0 || kc % 16 != 0) return portable::nvfp4_panel_nr(w, n0, rows, k0, kc, panel, kNR);
  const int64_t row_bytes = w.k / 2, row_scales = w.k / 16;
  const __m512 g = _mm512_set1_ps(w.g);
  const uint8_t* s = w.s + n0 * row_scales + k0 / 16;
  panel_direct<false>(
      w.q + n0 * row_bytes + k0 / 2, row_bytes, rows, kc, e2m1_lut(), panel,
      [&](int r, int64_t kb, int64_t nb) {
        const __mmask16 m = static_cast<__mmask16>((1u << nb) - 1u);
        _mm_prefetch(reinterpret_cast<const char*>(s + r * row_scales + (kb + kc) / 16), _MM_HINT_T0);
        return i8_e4m3_decode16(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, s + r * row_scales + kb / 16)));
      },
      // (e2m1 * scale) * g, the reference's order (the first product exact).
      [&](__m512 v, __m512 sc, __mmask16 live) {
        return _mm512_maskz_mul_ps(live, _mm512_mul_ps(v, sc), g);
      });
}

// NF4 panel: code value * absmax (one rounding, as the reference); the
// absmax of 16 consecutive 16-element blocks of a row come from one load of
// the consecutive absmax values they span and a permute.
void nf4_panel(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  if (w.k % 16 != 0 || k0 % 16 != 0 || kc % 16 != 0 || w.blocksize % 16 != 0) {
    return portable::nf4_panel_nr(w, n0, rows, k0, kc, panel, kNR);
  }
  const int64_t row_bytes = w.k / 2;
  const __m512i block16 = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(16));
  const __m128i shift = _mm_cvtsi32_si128(w.block_shift);
  panel_direct<true>(
      w.q + n0 * row_bytes + k0 / 2, row_bytes, rows, kc, _mm512_loadu_ps(w.lut), panel,
      [&](int r, int64_t kb, int64_t nb) {
        const int64_t f0 = (n0 + r) * w.k + k0 + kb;  // flat index of the first element
        const int64_t a0 = f0 >> w.block_shift, a1 = (f0 + nb * 16 - 1) >> w.block_shift;
        const __m512 span =
            _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (a1 - a0 + 1)) - 1u), w.absmax + a0);
        // Block b's absmax index relative to a0: ((f0 mod blocksize) + 16 b) >> shift.
        const __m512i rel = _mm512_add_epi32(
            block16, _mm512_set1_epi32(static_cast<int32_t>(f0 & ((int64_t{1} << w.block_shift) - 1))));
        return _mm512_permutexvar_ps(_mm512_srl_epi32(rel, shift), span);
      },
      [](__m512 v, __m512 sc, __mmask16 live) { return _mm512_maskz_mul_ps(live, v, sc); });
}

template <int MR>
void micro_m(const float* x, int64_t ldx, const float* panel, int64_t kc, float* y, int64_t ldy, int32_t nr,
             bool accumulate) {
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) {
    c0[i] = _mm512_setzero_ps();
    c1[i] = _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m512 b0 = _mm512_load_ps(panel + kk * kNR);
    const __m512 b1 = _mm512_load_ps(panel + kk * kNR + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(x[i * ldx + kk]);
      c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
    }
  }
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1u);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xffff : (nr <= 16 ? 0u : (1u << (nr - 16)) - 1u));
  for (int i = 0; i < MR; ++i) {
    float* yi = y + i * ldy;
    if (accumulate) {
      c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(m0, yi));
      c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(m1, yi + 16));
    }
    _mm512_mask_storeu_ps(yi, m0, c0[i]);
    _mm512_mask_storeu_ps(yi + 16, m1, c1[i]);
  }
}

void gemm_micro(const float* x, int64_t ldx, int32_t mr, const float* panel, int64_t kc, float* y,
                int64_t ldy, int32_t nr, bool accumulate) {
  with_rows<kMR>(mr, [&](auto m) { micro_m<decltype(m)::value>(x, ldx, panel, kc, y, ldy, nr, accumulate); });
}

// E4M3 encoding of 16 non-negative values whose biased fp32 exponents are
// all >= 121 (the normal E4M3 range and above, +Inf included): keep 3
// mantissa bits, the same integer round-to-nearest-even as
// fmt::e4m3_encode, saturating at 0x7e (448).
inline __m512i e4m3_encode16_normal(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i one = _mm512_set1_epi32(1);
  // (exp - 120) << 3 | top 3 mantissa bits, in one subtraction.
  const __m512i full = _mm512_sub_epi32(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(120 << 3));
  const __m512i rem_n = _mm512_and_si512(u, _mm512_set1_epi32(0xfffff));
  const __mmask16 up_n =
      _mm512_cmpgt_epu32_mask(rem_n, _mm512_set1_epi32(0x80000)) |
      (_mm512_cmpeq_epi32_mask(rem_n, _mm512_set1_epi32(0x80000)) & _mm512_test_epi32_mask(full, one));
  return _mm512_min_epu32(_mm512_mask_add_epi32(full, up_n, full, one), _mm512_set1_epi32(0x7e));
}

// E4M3 encoding of 16 non-negative values (finite or +Inf; no NaN), the
// same integer round-to-nearest-even as fmt::e4m3_encode.
inline __m512i e4m3_encode16_nonneg(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i exp = _mm512_srli_epi32(u, 23);
  const __m512i man = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffff));
  // Normal E4M3 (biased fp32 exponent >= 121).
  const __m512i code_n = e4m3_encode16_normal(v);
  // Subnormal E4M3: sig * 2^(e - 150) in units of 2^-9, shift = 141 - e.
  const __mmask16 has_exp = _mm512_test_epi32_mask(exp, exp);
  const __m512i sig = _mm512_mask_or_epi32(man, has_exp, man, _mm512_set1_epi32(0x800000));
  const __m512i e = _mm512_max_epu32(exp, one);
  const __m512i shift = _mm512_sub_epi32(_mm512_set1_epi32(141), e);
  const __m512i kept = _mm512_srlv_epi32(sig, shift);  // 0 for shift >= 32
  const __m512i rem_s = _mm512_and_si512(sig, _mm512_sub_epi32(_mm512_sllv_epi32(one, shift), one));
  const __m512i half = _mm512_sllv_epi32(one, _mm512_sub_epi32(shift, one));
  const __mmask16 in_range = _mm512_cmple_epu32_mask(shift, _mm512_set1_epi32(32));
  const __mmask16 up_s =
      in_range & (_mm512_cmpgt_epu32_mask(rem_s, half) |
                  (_mm512_cmpeq_epi32_mask(rem_s, half) & _mm512_test_epi32_mask(kept, one)));
  const __m512i code_s = _mm512_mask_add_epi32(kept, up_s, kept, one);
  const __mmask16 normal = _mm512_cmpge_epu32_mask(exp, _mm512_set1_epi32(121));
  __m512i code = _mm512_mask_blend_epi32(normal, code_s, code_n);
  const __mmask16 is_inf = _mm512_cmpeq_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(is_inf, code, _mm512_set1_epi32(0x7e));
}

// Four vectors of 16 codes (0..15, one per dword) packed two per byte, 32
// bytes in element order (vector v's 8 bytes at 8v): kLowFirst, element
// 2j in the low nibble (NVFP4), else in the high one (NF4). Per 128-bit
// lane L the in-lane packs give codes 4L..4L+3 of vectors 0, 1, 2, 3
// (bytes); a multiply-add joins each byte pair into a word (word 8L + 2v
// + k = packed byte 2L + k of vector v), which one word permute moves to
// word 8v + 2L + k: per vector a quarter of the cross-lane narrowing and
// of the stores of packing each on its own.
template <bool kLowFirst>
inline __m256i pack_nibbles4(const __m512i (&c)[4]) {
  const __m512i bytes = _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
  const __m512i words = _mm512_maddubs_epi16(bytes, _mm512_set1_epi16(kLowFirst ? 0x1001 : 0x0110));
  const __m512i order = _mm512_setr_epi32(
      0x00010000, 0x00090008, 0x00110010, 0x00190018, 0x00030002, 0x000b000a, 0x00130012, 0x001b001a,
      0x00050004, 0x000d000c, 0x00150014, 0x001d001c, 0x00070006, 0x000f000e, 0x00170016, 0x001f001e);
  return _mm512_cvtepi16_epi8(_mm512_permutexvar_epi16(order, words));
}

// One vector of 16 codes (one per dword) packed two per byte (as
// pack_nibbles4): qword j holds codes 2j and 2j+1, joined into its low
// byte, which the narrowing keeps (8 bytes, in the low half).
template <bool kLowFirst>
inline __m128i pack_nibbles1(__m512i c) {
  const __m512i pairs = kLowFirst ? _mm512_or_si512(c, _mm512_srli_epi64(c, 28))
                                  : _mm512_or_si512(_mm512_slli_epi64(c, 4), _mm512_srli_epi64(c, 32));
  return _mm512_cvtepi64_epi8(pairs);
}

// Quantize input formats: the fp32 bits of 16 consecutive elements. fp16
// and bf16 widen exactly (bf16: the 16 bits are the top of the fp32 ones;
// fp16: vcvtph2ps), so a block's codes are those of its fp32 values, and
// the kernels read 16-bit input in place (a conversion pass into a buffer
// stalled on DRAM with the coding stopped).
struct QuantInF32 {
  using T = float;
  static __m512i bits(const float* p) { return _mm512_loadu_si512(p); }
};
struct QuantInBf16 {
  using T = uint16_t;
  static __m512i bits(const uint16_t* p) {
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
                             16);
  }
};
struct QuantInF16 {
  using T = uint16_t;
  static __m512i bits(const uint16_t* p) {
    return _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
};

// The element encoder (the constants live in registers for a whole loop).
// block(), division-free: q0 = |x| y with y = RN(1/d), the exact remainder
// |x| - q0 d, and one correction q0 + r y, which is the correctly rounded
// |x| / d (Markstein's theorem: y within half an ulp of 1/d, q0 within one
// ulp of |x|/d, no underflow of the remainder where the code depends on
// it: the caller runs it only for d in [2^-90, 2^90] and block amax <= d
// 2^100). Verified exhaustively for every x with x/d in [1/8, 16) (outside
// it the code is 0 or 7 whatever the last bit) and every E4M3 scale under
// several global scales. The E2M1 rounding of q (fmt::e2m1_encode: nearest,
// ties to even, saturating at 6) is done by the fp32 adder: q clamped to
// [0, 6] plus a constant C(q) whose ulp is the E2M1 spacing of q's binade
// (2^22: ulp 1/2 for q < 2; 2^23 + 2: ulp 1 for [2, 4); 2^24 + 8: ulp 2
// for [4, 6]) rounds q once to its E2M1 value, and the sum's low mantissa
// bits are then the code (the offsets 2 and 8, even in ulps, add the codes
// of the binade's start, 4 and 6, and keep ties going to the even code).
// C is picked by one permute on the low 4 exponent bits of max(q, 1); the
// lookup of two 32-entry tables it replaces (exponent and rounding bits,
// one table per sticky bit) took two two-source permutes, a test and a
// blend (Zen 4, one-process A/B both orders, 512x4096 in cache, one
// thread: NVFP4 quantize 1.14-1.15x, bf16 input 1.11x, MXFP4 1.12x;
// 11008x4096 from DRAM, 2 threads, 1.05-1.09x). Checked against a scalar
// nearest-even search for every non-negative fp32 q up to +Inf. The sign
// is the input's (d > 0), -0 included.
struct E2m1Encoder {
  __m512i magic;                                // C by the low 4 exponent bits of max(q, 1)
  __m512 six = _mm512_set1_ps(6.0f);            // the saturation bound
  __m512i one = _mm512_set1_epi32(0x3f800000);  // 1.0f
  __m512i low3 = _mm512_set1_epi32(7);
  __m512i sign_bit = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u));

  E2m1Encoder() {
    alignas(64) int32_t t[16] = {};
    t[127 & 15] = 0x4a800000;      // 2^22: q in [0, 2), codes 0..4
    t[128 & 15] = 0x4b000000 + 2;  // 2^23 + 2: [2, 4), codes 4..6
    t[129 & 15] = 0x4b800000 + 4;  // 2^24 + 8: [4, 6], codes 6..7
    magic = _mm512_load_si512(t);
  }

  // |v| / d correctly rounded, division-free (the window above).
  __m512 quotient(__m512i v, __m512 d, __m512 y) const {
    const __m512 ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, v));
    const __m512 q0 = _mm512_mul_ps(ax, y);
    return _mm512_fmadd_ps(_mm512_fnmadd_ps(q0, d, ax), y, q0);
  }

  // One block, division-free.
  template <class In = QuantInF32>
  void block(const typename In::T* x, __m512 d, __m512 y, uint8_t* dst) const {
    const __m512i v = In::bits(x);
    store(v, quotient(v, d, y), dst);
  }

  // One block with the IEEE division (d > 0, any magnitude).
  template <class In = QuantInF32>
  void block_div(const typename In::T* x, float d, uint8_t* dst) const {
    const __m512i v = In::bits(x);
    const __m512 ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, v));
    store(v, _mm512_div_ps(ax, _mm512_set1_ps(d)), dst);
  }

  // Four consecutive blocks, division-free (block() for each), their 32
  // code bytes packed together: one in-lane pack of the 64 codes to bytes,
  // the nibble pairs joined by a multiply-add, then one word permute puts
  // the bytes in order (per block: a quarter of the cross-lane narrowing
  // and of the 8-byte stores of store()).
  template <class In = QuantInF32, bool kClamp = true>
  void block4(const typename In::T* x, const float* dv, const float* yv, uint8_t* dst) const {
    __m512i c[4];
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) {
      const __m512i v = In::bits(x + int64_t{16} * b);
      const __m512 q = quotient(v, _mm512_set1_ps(dv[b]), _mm512_set1_ps(yv[b]));
      c[b] = kClamp ? code(v, q) : code_clamped(v, q);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), pack_nibbles4<true>(c));
  }

  // The 16 codes (one per dword) of the block v given q = |v| / d correctly rounded.
  __m512i code(__m512i v, __m512 q) const {
    return code_clamped(v, _mm512_min_ps(q, six));  // (q >= 0)
  }
  // The same given qc = q clamped to [0, 6], or any q in [0, 7) (a
  // scale group whose divisors keep every quotient below 6.5).
  __m512i code_clamped(__m512i v, __m512 qc) const {
    const __m512i e = _mm512_srli_epi32(_mm512_max_epu32(_mm512_castps_si512(qc), one), 23);
    const __m512 c = _mm512_castsi512_ps(_mm512_permutexvar_epi32(e, magic));
    const __m512i sum = _mm512_castps_si512(_mm512_add_ps(qc, c));
    // code = low 3 bits of the sum | bit 3 from the sign (v >> 28: 0xE4 = low3 ? sum : v >> 28).
    return _mm512_ternarylogic_epi32(sum, _mm512_srli_epi32(v, 28), low3, 0xe4);
  }

  // The 8 code bytes of the block v given q = |v| / d correctly rounded.
  void store(__m512i v, __m512 q, uint8_t* dst) const {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), pack_nibbles1<true>(code(v, q)));
  }
};

// max of |x| bit patterns as unsigned integers: the float order for
// non-negative values, and a NaN or Inf (>= 0x7f800000) is never lost.
inline __m512 max_bits(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_max_epu32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

// The max-reduction network of block_amax16: 16 vectors -> one vector whose
// lanes hold the 16 maxima in a fixed (network) order.
inline __m512 max_network16(__m512 (&v)[16]) {
  __m512 c[8], e[4], g[2];
  for (int64_t j = 0; j < 8; ++j) {  // 128-bit halves of pairs
    c[j] = max_bits(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                    _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xee));
  }
  for (int64_t j = 0; j < 4; ++j) {
    e[j] = max_bits(_mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], 0x88),
                    _mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], 0xdd));
  }
  for (int64_t j = 0; j < 2; ++j) {  // within 128-bit lanes
    g[j] = max_bits(_mm512_shuffle_ps(e[2 * j], e[2 * j + 1], 0x44),
                    _mm512_shuffle_ps(e[2 * j], e[2 * j + 1], 0xee));
  }
  return max_bits(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xdd));
}

// The permutation that puts the network's output in block order, found by
// running the network on vectors filled with their own index.
inline __m512i max_network_order() {
  __m512 v[16];
  for (int i = 0; i < 16; ++i) v[i] = _mm512_set1_ps(static_cast<float>(i));
  alignas(64) float lane_block[16];
  _mm512_store_ps(lane_block, max_network16(v));
  alignas(64) int32_t perm[16] = {};
  for (int lane = 0; lane < 16; ++lane) perm[static_cast<int>(lane_block[lane])] = lane;
  return _mm512_load_si512(perm);
}

// max |x| of each of 16 consecutive 16-element blocks, in block order (a
// 15-max shuffle network instead of 16 horizontal reductions); a lane whose
// bits are >= 0x7f800000 has a NaN or Inf in its block.
template <class In = QuantInF32>
inline __m512 block_amax16(const typename In::T* x, __m512 abs_mask) {
  static const __m512i order = max_network_order();
  __m512 v[16];
  for (int64_t i = 0; i < 16; ++i) v[i] = _mm512_and_ps(_mm512_castsi512_ps(In::bits(x + i * 16)), abs_mask);
  return _mm512_permutexvar_ps(order, max_network16(v));
}

// Scale codes of 16 consecutive blocks at x into s; their divisors d into
// dv and, when the division-free element path may run for all of them
// (returns true), y = RN(1/d) into yv; *unclamped: every scale normal and
// at most 448, so that no element's quotient reaches 7.
template <class In = QuantInF32>
inline bool scale_group16(const typename In::T* x, __m512 abs_mask, __m512 six_g, __m512 gv, uint8_t* s,
                          float* dv, float* yv, __mmask16* non_finite, bool* unclamped) {
  const __m512 av = block_amax16<In>(x, abs_mask);
  *non_finite = _mm512_cmpge_epu32_mask(_mm512_castps_si512(av), _mm512_set1_epi32(0x7f800000));
  const __m512 sv = _mm512_div_ps(av, six_g);
  const __mmask16 nonzero = _mm512_cmp_ps_mask(av, _mm512_setzero_ps(), _CMP_GT_OQ);
  __m512i code;
  __m512 dec;
  *unclamped = false;
  if (_mm512_cmplt_epu32_mask(_mm512_castps_si512(sv), _mm512_set1_epi32(121 << 23)) == 0) {
    // None above 448 either: each scale is then within 2^-4 of amax / 6g,
    // so every |x| / d <= 6 (1 + 3 2^-24) / ((1 - 2^-4) (1 - 2^-24)) < 6.5,
    // and the E2M1 coding needs no clamp to 6 (E2m1Encoder::code_clamped:
    // below 7 the adder's grid rounds to at most 6). Zen 4, one-process
    // A/B both orders, 512x4096 in cache, one thread: 1.04-1.07x (fp32
    // and bf16 input).
    *unclamped = _mm512_cmp_ps_mask(sv, _mm512_set1_ps(448.0f), _CMP_LE_OQ) == 0xffff;
    // Every scale normal or saturating (the usual case): codes 0x08..0x7e,
    // decoded by their plain bit mapping, without the subnormal rounding
    // and the general decode (the scale pass 6.8 -> 4.1 cycles per block
    // on a Zen 4; quantize, 2 threads, A/B both orders: in cache 1.13x,
    // 11008x4096 from DRAM 1.07-1.10x given, 1.06-1.07x computed).
    code = e4m3_encode16_normal(sv);
    dec = i8_e4m3_normal16(code);
  } else {
    code = e4m3_encode16_nonneg(sv);
    // amax > 0 but the scale rounded to 0: the smallest subnormal, 2^-9.
    code = _mm512_mask_mov_epi32(code, nonzero & _mm512_testn_epi32_mask(code, code), _mm512_set1_epi32(1));
    dec = i8_e4m3_decode16(code);
  }
  const __m512 dvec = _mm512_mul_ps(dec, gv);
  _mm512_store_ps(dv, dvec);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(s), _mm512_cvtepi32_epi8(code));
  const __mmask16 in_range =
      _mm512_cmp_ps_mask(dvec, _mm512_set1_ps(0x1p-90f), _CMP_GE_OQ) &
      _mm512_cmp_ps_mask(dvec, _mm512_set1_ps(0x1p90f), _CMP_LE_OQ) &
      _mm512_cmp_ps_mask(av, _mm512_mul_ps(dvec, _mm512_set1_ps(0x1p100f)), _CMP_LE_OQ);
  _mm512_store_ps(yv, _mm512_div_ps(_mm512_set1_ps(1.0f), dvec));
  return (nonzero & ~in_range) == 0;  // zero blocks (d = 0) are written as zeros either way
}

// Bit-exact NVFP4 quantization. Block scales are computed 16 blocks at a
// time in vectors with the same integer E4M3 rounding as the codec; the
// element quotients x / d are the correctly rounded ones of the reference
// (division-free where E2m1Encoder::block's conditions hold, else IEEE
// division); the E2M1 rounding is fmt::e2m1_encode's. Two passes over up
// to kGroups x 16 blocks (in L1/L2): all scales, then all elements, so that
// the long latency chain of a scale group (max network, division, E4M3
// encode) never stalls the element work behind it.
// NF4 coding of a block (nf4_quantize_blocks_impl's `code`), 16 elements
// per vector: y = x * inv as the reference, then its code = the number of
// thresholds below y found by a 4-step binary search (the threshold of
// each step picked by vpermps from tables shifted by the step's offset;
// a NaN y compares false everywhere: code 0), the codes packed two per
// byte (element 2j in the high nibble). The comparisons are the
// reference's `y > t`, so the bytes are the same. Four vectors at a time
// (the search is a chain of dependent permutes and compares). len % 16 !=
// 0: false.
struct Nf4CodeAvx512 {
  __m512 T0, T1, T3, t7;
  Nf4CodeAvx512() {
    alignas(64) float t0[16], t1[16], t3[16];
    for (int32_t i = 0; i < 16; ++i) {
      t0[i] = fmt::nf4_threshold(std::min(i, 14));
      t1[i] = fmt::nf4_threshold(std::min(i + 1, 14));
      t3[i] = fmt::nf4_threshold(std::min(i + 3, 14));
    }
    T0 = _mm512_load_ps(t0);
    T1 = _mm512_load_ps(t1);
    T3 = _mm512_load_ps(t3);
    t7 = _mm512_set1_ps(fmt::nf4_threshold(7));
  }
  template <int V>
  void code(const float* xb, __m512 vinv, uint8_t* qb) const {
    __m512 y[V];
    __m512i c[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      y[v] = _mm512_mul_ps(_mm512_loadu_ps(xb + int64_t{16} * v), vinv);
      c[v] = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(y[v], t7, _CMP_GT_OQ), _mm512_set1_epi32(8));
    }
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      c[v] =
          _mm512_mask_add_epi32(c[v], _mm512_cmp_ps_mask(y[v], _mm512_permutexvar_ps(c[v], T3), _CMP_GT_OQ),
                                c[v], _mm512_set1_epi32(4));
    }
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      c[v] =
          _mm512_mask_add_epi32(c[v], _mm512_cmp_ps_mask(y[v], _mm512_permutexvar_ps(c[v], T1), _CMP_GT_OQ),
                                c[v], _mm512_set1_epi32(2));
    }
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      c[v] =
          _mm512_mask_add_epi32(c[v], _mm512_cmp_ps_mask(y[v], _mm512_permutexvar_ps(c[v], T0), _CMP_GT_OQ),
                                c[v], _mm512_set1_epi32(1));
    }
    if constexpr (V == 4) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), pack_nibbles4<false>(c));
    } else {
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        _mm_storel_epi64(reinterpret_cast<__m128i*>(qb + int64_t{8} * v), pack_nibbles1<false>(c[v]));
    }
  }
  // The absmax of 16 whole blocks: each block's vectors folded by an
  // integer max of their |x| bits (the float order for non-negative values;
  // a NaN or Inf stays >= 0x7f800000), then the 16 reduced together by the
  // max network; any lane >= 0x7f800000: false (the loop in
  // nf4_quantize_blocks_impl takes the NaN rule).
  bool maxima16(const float* x, int64_t blocksize, float* absmax) const {
    if (blocksize % 16 != 0) return false;
    static const __m512i order = max_network_order();
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 v[16];
#pragma GCC unroll 16
    for (int64_t j = 0; j < 16; ++j) {
      const float* xb = x + j * blocksize;
      v[j] = _mm512_and_ps(_mm512_loadu_ps(xb), abs_mask);
      for (int64_t i = 16; i < blocksize; i += 16)
        v[j] = max_bits(v[j], _mm512_and_ps(_mm512_loadu_ps(xb + i), abs_mask));
    }
    const __m512 m = _mm512_permutexvar_ps(order, max_network16(v));
    if (_mm512_cmpge_epu32_mask(_mm512_castps_si512(m), _mm512_set1_epi32(0x7f800000)) != 0) return false;
    _mm512_storeu_ps(absmax, m);
    return true;
  }
  bool operator()(const float* xb, int64_t len, float inv, uint8_t* qb) const {
    if (len % 16 != 0) return false;
    const __m512 vinv = _mm512_set1_ps(inv);
    int64_t i = 0;
    for (; i + 64 <= len; i += 64) code<4>(xb + i, vinv, qb + i / 2);
    for (; i < len; i += 16) code<1>(xb + i, vinv, qb + i / 2);
    return true;
  }
};

// KernelTable::nvfp4_quantize_checked (and, In 16-bit, the 16-bit entry):
// the finite check rides on the block maxima (integer max of the |x|
// bits); false as soon as a group of 16 blocks holds a NaN or Inf (q and s
// then partly written).
template <class In, bool kFar = false>
bool nvfp4_quantize_checked_t(const typename In::T* x, int64_t rows, int64_t k, float g, uint8_t* q,
                              uint8_t* s) {
  // 8 groups of 16 blocks: 8 KiB coded from L1 while the next 8 KiB are
  // prefetched (32 groups, the two 32 KiB halves evicted each other from
  // L1: 11008 x 4096 from DRAM, 2 threads, 1.22x with 8 instead of 32).
  constexpr int64_t kGroups = 8;
  const int64_t nblocks = rows * (k / 16);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 six_g = _mm512_set1_ps(fmt::kE2M1Max * g);
  const __m512 gv = _mm512_set1_ps(g);
  alignas(64) float dv[kGroups * 16];
  alignas(64) float yv[kGroups * 16];
  bool rcp[kGroups], unclamped[kGroups];
  static const E2m1Encoder table;
  const E2m1Encoder enc = table;
  int64_t b0 = 0;
  while (b0 + 16 <= nblocks) {
    const int64_t groups = std::min(kGroups, (nblocks - b0) / 16);
    for (int64_t j = 0; j < groups; ++j) {
      const int64_t b = b0 + 16 * j;
      __mmask16 bad = 0;
      rcp[j] = scale_group16<In>(x + b * 16, abs_mask, six_g, gv, s + b, dv + 16 * j, yv + 16 * j, &bad,
                                 &unclamped[j]);
      if (bad != 0) return false;
    }
    // While the elements are coded from L1/L2, the next groups' blocks are
    // prefetched, one line per block: without it, DRAM idles through this
    // pass (the hardware prefetcher runs only a little ahead of the loads).
    // Measured on a Cascade Lake, 11008x4096 fp32 in the library's 64 KiB
    // tasks, alternating call by call: two threads 1.11-1.18x, one 1.11x.
    // kFar (an input read from memory, on quantize_prefetch_l2() CPUs):
    // into L2, and the same lines of the two batches after the next too
    // (more misses in flight than L1's fill buffers keep; addresses as
    // integers: past the input they point nowhere, and a prefetch does not
    // fault).
    const int64_t next0 = b0 + groups * 16;
    const int64_t ahead = std::min(groups * 16, nblocks - next0);
    const uintptr_t batch_bytes = static_cast<uintptr_t>(groups * 16 * 16 * sizeof(typename In::T));
    for (int64_t j = 0; j < groups; ++j) {
      const int64_t g0 = 16 * j;
      // (one line per block: 16-bit blocks are half a line, every other one)
      constexpr int64_t kLineBlocks = sizeof(typename In::T) == 2 ? 2 : 1;
      if (kFar) {
        // (each line is asked for three times, a batch apart: asked for
        // once, the far lines spread over the batch, it measured 0.96x)
        for (int64_t i = g0; i < std::min(g0 + 16, ahead); i += kLineBlocks) {
          const uintptr_t line = reinterpret_cast<uintptr_t>(x + (next0 + i) * 16);
#pragma GCC unroll 3
          for (uintptr_t d = 0; d < 3; ++d)
            _mm_prefetch(reinterpret_cast<const char*>(line + d * batch_bytes), _MM_HINT_T2);
        }
      } else {
        for (int64_t i = g0; i < std::min(g0 + 16, ahead); i += kLineBlocks)
          _mm_prefetch(reinterpret_cast<const char*>(x + (next0 + i) * 16), _MM_HINT_T0);
      }
      if (rcp[j] && _mm512_cmpeq_ps_mask(_mm512_load_ps(dv + g0), _mm512_setzero_ps()) == 0) {
        // No zero block: no test per block, four blocks packed together.
        if (unclamped[j]) {
          for (int64_t i = g0; i < g0 + 16; i += 4)
            enc.block4<In, false>(x + (b0 + i) * 16, dv + i, yv + i, q + (b0 + i) * 8);
        } else {
          for (int64_t i = g0; i < g0 + 16; i += 4)
            enc.block4<In, true>(x + (b0 + i) * 16, dv + i, yv + i, q + (b0 + i) * 8);
        }
        continue;
      }
      if (rcp[j]) {
        for (int64_t i = g0; i < g0 + 16; ++i) {
          uint8_t* dst = q + (b0 + i) * 8;
          if (dv[i] == 0.0f) {
            std::memset(dst, 0, 8);
          } else {
            enc.block<In>(x + (b0 + i) * 16, _mm512_set1_ps(dv[i]), _mm512_set1_ps(yv[i]), dst);
          }
        }
        continue;
      }
      for (int64_t i = g0; i < g0 + 16; ++i) {
        uint8_t* dst = q + (b0 + i) * 8;
        if (dv[i] == 0.0f) {
          std::memset(dst, 0, 8);
        } else {
          enc.block_div<In>(x + (b0 + i) * 16, dv[i], dst);
        }
      }
    }
    b0 += groups * 16;
  }
  for (int64_t b = b0; b < nblocks; ++b) {  // tail blocks: the scalar codec
    const __m512i bits = _mm512_and_si512(In::bits(x + b * 16), _mm512_set1_epi32(0x7fffffff));
    if (_mm512_reduce_max_epu32(bits) >= 0x7f800000u) return false;
    const float bmax = _mm512_reduce_max_ps(_mm512_castsi512_ps(bits));
    const uint32_t code = fmt::nvfp4_block_scale_code(bmax, g);
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
  return nvfp4_quantize_checked_t<QuantInF32>(x, rows, k, g, q, s);
}

// KernelTable::nvfp4_quantize_checked_far and ..._checked16_far.
bool nvfp4_quantize_checked_far(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) {
  return nvfp4_quantize_checked_t<QuantInF32, true>(x, rows, k, g, q, s);
}
bool nvfp4_quantize_checked16_far(const uint16_t* x, bool bf16, int64_t rows, int64_t k, float g, uint8_t* q,
                                  uint8_t* s) {
  return bf16 ? nvfp4_quantize_checked_t<QuantInBf16, true>(x, rows, k, g, q, s)
              : nvfp4_quantize_checked_t<QuantInF16, true>(x, rows, k, g, q, s);
}

// KernelTable::nvfp4_quantize_checked16.
bool nvfp4_quantize_checked16(const uint16_t* x, bool bf16, int64_t rows, int64_t k, float g, uint8_t* q,
                              uint8_t* s) {
  return bf16 ? nvfp4_quantize_checked_t<QuantInBf16>(x, rows, k, g, q, s)
              : nvfp4_quantize_checked_t<QuantInF16>(x, rows, k, g, q, s);
}

// KernelTable::nvfp4_quantize (finite input).
void nvfp4_quantize(const float* x, int64_t rows, int64_t k, float g, uint8_t* q, uint8_t* s) {
  nvfp4_quantize_checked(x, rows, k, g, q, s);
}

// 32 fp32 values (lo: elements off .. off + 15, hi: the next 16) stored
// at out as T (fp16 or bf16) with f32_to_act's bits (store_act). kCvtne
// (CPUs with AVX512_BF16): bf16 by one vcvtne2ps2bf16 for the 32, which
// rounds to nearest even and quiets a NaN as (bits >> 16) | 0x40, as the
// codec does, but flushes a denormal input to zero where the codec rounds
// it: 32 values holding a denormal take store_act instead. Inline
// assembly: the table's translation unit is not compiled for AVX512_BF16
// (as vpermb, i8_nibble_values).
template <FType T, bool kCvtne>
__attribute__((always_inline)) inline void store16x32(uint16_t* out, int64_t off, __m512 lo, __m512 hi) {
  if constexpr (T == FType::BF16 && kCvtne) {
    constexpr int kDenormal = 0x20;  // (vfpclassps category)
    if ((_mm512_fpclass_ps_mask(lo, kDenormal) | _mm512_fpclass_ps_mask(hi, kDenormal)) == 0) {
      __m512i r;
      __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(hi), "v"(lo));
      _mm512_storeu_si512(out + off, r);
      return;
    }
  }
  SbAvx512::store_act<T>(out, off, lo);
  SbAvx512::store_act<T>(out, off + 16, hi);
}

// Where the dequantizers put their values, 32 (lo: elements off .. off +
// 15, hi: the next 16) or 16 at a time: fp32 as they are (the fp32
// entries), fp16/bf16 by store16x32 / store_act (the 16-bit entries,
// stores spread over the decode: see set_dequantize_t).
struct DqOutF32 {
  float* out;
  void pair(int64_t off, __m512 lo, __m512 hi) const {
    _mm512_storeu_ps(out + off, lo);
    _mm512_storeu_ps(out + off + 16, hi);
  }
  void one(int64_t off, __m512 v) const { _mm512_storeu_ps(out + off, v); }
};
template <FType T, bool kCvtne>
struct DqOut16 {
  uint16_t* out;
  void pair(int64_t off, __m512 lo, __m512 hi) const { store16x32<T, kCvtne>(out, off, lo, hi); }
  void one(int64_t off, __m512 v) const { SbAvx512::store_act<T>(out, off, v); }
};

// The dequantize loops, each taking an output policy (DqOutF32 for the
// fp32 entries, DqOut16 for the 16-bit ones: set_dequantize_entries).
struct DqLoops {
  // NVFP4: (e2m1 * scale) * g per element, two blocks at a time.
  template <class Out>
  static void nvfp4(const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k, const Out& out) {
    const int64_t nblocks = rows * (k / 16);
    const __m512 lut = e2m1_lut();
    const __m512 gv = _mm512_set1_ps(g);
    const auto block = [&](int64_t b) {
      const __m512 sc = _mm512_set1_ps(fmt::e4m3_decode(s[b]));
      return _mm512_mul_ps(_mm512_mul_ps(nvfp4_decode16_ordered(q + b * 8, lut), sc), gv);
    };
    int64_t b = 0;
    for (; b + 2 <= nblocks; b += 2) out.pair(b * 16, block(b), block(b + 1));
    if (b < nblocks) out.one(b * 16, block(b));
  }

  // NF4: 16 codes (8 bytes, element 2j in the high nibble) per vpermps of
  // the code values, times the block's absmax (n % 16 == 0).
  template <class Out>
  static void nf4(const uint8_t* q, const float* lut, const float* absmax, int64_t blocksize, int64_t n,
                  const Out& out) {
    const __m512 lv = _mm512_loadu_ps(lut);
    const __m512i shifts = _mm512_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    const auto sixteen = [&](int64_t i) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i / 2));
      const __m512i idx =
          _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)), shifts);  // bits 0-3
      return _mm512_mul_ps(_mm512_permutexvar_ps(idx, lv), _mm512_set1_ps(absmax[i / blocksize]));
    };
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) out.pair(i, sixteen(i), sixteen(i + 16));
    if (i < n) out.one(i, sixteen(i));
  }

  // MXFP4: the e2m1 values of each half block times the block's 2^(byte -
  // 127), one product per element as the codec.
  template <class Out>
  static void mxfp4(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t k, const Out& out) {
    const int64_t nblocks = rows * (k / fmt::kMxBlock);
    const __m512 lut = e2m1_lut();
    for (int64_t b = 0; b < nblocks; ++b) {
      const __m512 sc = _mm512_set1_ps(fmt::e8m0_decode(s[b]));
      const uint8_t* qb = q + b * (fmt::kMxBlock / 2);
      out.pair(b * fmt::kMxBlock, _mm512_mul_ps(nvfp4_decode16_ordered(qb, lut), sc),
               _mm512_mul_ps(nvfp4_decode16_ordered(qb + 8, lut), sc));
    }
  }
};

// The table's dequantize entries: the loops above with DqOutF32 and, for
// nvfp4_dequantize16, mxfp4_dequantize16 and nf4_dequantize16, DqOut16,
// bf16 converted by vcvtne2ps2bf16 (kCvtne) or not. Measured on a Zen 4 (2 threads, 11008 x
// 4096, one-process A/B, two runs) against decoding into an L1 buffer and
// converting it (blocks_to_output): to bf16 1.15-1.57x, to fp16
// 1.06-1.39x (MXFP4 the least); fp32 outputs unchanged.
template <bool kCvtne>
void set_dequantize_t(KernelTable& f) {
  set_dequantize_entries<DqLoops, DqOutF32, DqOut16<FType::BF16, kCvtne>, DqOut16<FType::F16, false>>(f);
}

void set_dequantize(KernelTable& f, bool cvtne) {
  cvtne ? set_dequantize_t<true>(f) : set_dequantize_t<false>(f);
}

// KernelTable::mxfp4_quantize, 16 blocks of 32 at a time: their maxima
// (block_amax16 over the 32 halves, then the larger of each pair), the
// E8M0 bytes max(exponent field - 2, 0) (fmt::mxfp4_scale_byte), the
// reciprocals 2^(127 - byte) by their bit mapping (always normal), each
// element's |x| * 2^-e (the codec's product, exact or correctly rounded
// as the scalar one) coded by E2m1Encoder, two blocks packed together.
// The last blocks (fewer than 16): the scalar table's function. In: as
// nvfp4_quantize_checked_t (fp32, or 16-bit input read in place).
template <class In>
bool mxfp4_quantize_t(const typename In::T* x, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  static const E2m1Encoder table;
  const E2m1Encoder enc = table;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const int64_t nblocks = rows * (k / fmt::kMxBlock);
  __m512i worst = _mm512_setzero_si512();  // the largest |x| bits seen (>= 0x7f800000: NaN / Inf)
  int64_t b0 = 0;
  for (; b0 + 16 <= nblocks; b0 += 16) {
    const typename In::T* xg = x + b0 * fmt::kMxBlock;
    const __m512i lo = _mm512_castps_si512(block_amax16<In>(xg, abs_mask));
    const __m512i hi = _mm512_castps_si512(block_amax16<In>(xg + 256, abs_mask));
    const __m512i am =
        _mm512_max_epu32(_mm512_permutex2var_epi32(lo, even, hi), _mm512_permutex2var_epi32(lo, odd, hi));
    worst = _mm512_max_epu32(worst, am);
    const __m512i byte = _mm512_max_epi32(_mm512_sub_epi32(_mm512_srli_epi32(am, 23), _mm512_set1_epi32(2)),
                                          _mm512_setzero_si512());
    _mm_storeu_si128(reinterpret_cast<__m128i*>(s + b0), _mm512_cvtepi32_epi8(byte));
    alignas(64) float inv[16];
    _mm512_store_si512(inv, _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(254), byte), 23));
    for (int64_t i = 0; i < 16; i += 2) {
      __m512i c[4];
#pragma GCC unroll 4
      for (int h = 0; h < 4; ++h) {
        const __m512i v = In::bits(xg + i * fmt::kMxBlock + int64_t{16} * h);
        const __m512 mag = _mm512_castsi512_ps(_mm512_andnot_si512(enc.sign_bit, v));
        c[h] = enc.code(v, _mm512_mul_ps(mag, _mm512_set1_ps(inv[i + h / 2])));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + (b0 + i) * (fmt::kMxBlock / 2)),
                          pack_nibbles4<true>(c));
    }
  }
  bool finite = _mm512_cmpge_epu32_mask(worst, _mm512_set1_epi32(0x7f800000)) == 0;
  if (b0 < nblocks) {
    const int64_t len = (nblocks - b0) * fmt::kMxBlock;  // (fewer than 512, a multiple of 16)
    alignas(64) float tail[16 * fmt::kMxBlock];
    const float* xt = nullptr;
    if constexpr (std::is_same_v<In, QuantInF32>) {
      xt = x + b0 * fmt::kMxBlock;
    } else {
      for (int64_t i = 0; i < len; i += 16)
        _mm512_store_si512(tail + i, In::bits(x + b0 * fmt::kMxBlock + i));
      xt = tail;
    }
    finite = portable::mxfp4_quantize(xt, 1, len, q + b0 * (fmt::kMxBlock / 2), s + b0) && finite;
  }
  return finite;
}

bool mxfp4_quantize(const float* x, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  return mxfp4_quantize_t<QuantInF32>(x, rows, k, q, s);
}

// KernelTable::mxfp4_quantize16.
bool mxfp4_quantize16(const uint16_t* x, bool bf16, int64_t rows, int64_t k, uint8_t* q, uint8_t* s) {
  return bf16 ? mxfp4_quantize_t<QuantInBf16>(x, rows, k, q, s)
              : mxfp4_quantize_t<QuantInF16>(x, rows, k, q, s);
}

float amax(const float* x, int64_t n) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 m0 = _mm512_setzero_ps(), m1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_and_ps(_mm512_loadu_ps(x + i), abs_mask));
    m1 = _mm512_max_ps(m1, _mm512_and_ps(_mm512_loadu_ps(x + i + 16), abs_mask));
  }
  float m = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  for (; i < n; ++i) {
    const float a = x[i] < 0 ? -x[i] : x[i];
    m = a > m ? a : m;
  }
  return m;
}

uint32_t absmax_bits(const float* x, int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
  __m512i m2 = _mm512_setzero_si512(), m3 = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), abs_mask));
    m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), abs_mask));
    m2 = _mm512_max_epu32(m2, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), abs_mask));
    m3 = _mm512_max_epu32(m3, _mm512_and_si512(_mm512_loadu_si512(x + i + 48), abs_mask));
  }
  for (; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_maskz_loadu_epi32(lanes, x + i), abs_mask));
  }
  return _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3)));
}

struct Vec {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  static __m512 set1(float v) { return _mm512_set1_ps(v); }
  static __m512 fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
  static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static float sum(__m512 a) { return _mm512_reduce_add_ps(a); }
};

}  // namespace

const KernelTable& avx512_table() {
  static const KernelTable t = complete_table([] {
    KernelTable f;
    f.isa = Q4_ISA_AVX512;
    f.panel_nr = kNR;
    f.micro_mr = kMR;
    f.nvfp4_gemv = nvfp4_gemv<0>;
    f.nf4_gemv = nf4_gemv<0>;
    f.nvfp4_small = sb_nvfp4_small<SbAvx512>;
    f.nf4_small = sb_nf4_small<SbAvx512>;
    f.act_to_f32 = sb_act_to_f32<SbAvx512>;
    f.f32_to_act = sb_f32_to_act<SbAvx512>;
    f.nf4_quantize_blocks = [](FloatPtr x, int64_t n, int64_t bs, int64_t b0, int64_t b1, uint8_t* q,
                               float* am) {
      return nf4_quantize_blocks_impl(x, n, bs, b0, b1, q, am, sb_act_to_f32<SbAvx512>, Nf4CodeAvx512{});
    };
    f.nvfp4_panel = nvfp4_panel;
    f.nf4_panel = nf4_panel;
    f.gemm_micro = gemm_micro;
    f.nvfp4_quantize = nvfp4_quantize;
    f.nvfp4_quantize_checked = nvfp4_quantize_checked;
    f.nvfp4_quantize_checked16 = nvfp4_quantize_checked16;
    if (quantize_prefetch_l2()) {
      f.nvfp4_quantize_checked_far = nvfp4_quantize_checked_far;
      f.nvfp4_quantize_checked16_far = nvfp4_quantize_checked16_far;
    }
    f.mxfp4_quantize = mxfp4_quantize;
    f.mxfp4_quantize16 = mxfp4_quantize16;
    set_dequantize(f, (cpu_info().features & Q4_CPU_AVX512BF16) != 0);  // chosen once for this CPU
    f.amax = amax;
    f.absmax_bits = absmax_bits;
    f.fma_probe = fma_probe<Vec>;
    f.i8_pack_nvfp4 = i8_pack_nvfp4_avx512;
    f.i8_micro = i8_micro_avx512<false>;
    f.i8_micro_mr = kI8MR<false>;
    f.i8_micro2 = i8_micro2_avx512<false>;
    f.i8_micro_small = i8_micro_avx512<false, kI8MaxBiasedNvfp4>;
    f.i8_micro2_small = i8_micro2_avx512<false, kI8MaxBiasedNvfp4>;
    f.i8_quantize_act = i8_quantize_act_avx512;
    f.i8_probe = i8_probe_avx512<false>;
    const bool to_l2 = rows_to_l2();
    f.i8_gemv_nvfp4 = to_l2 ? i8_gemv_avx512<false, true, false> : i8_gemv_avx512<false, false, false>;
    f.i8_pack_nf4 = i8_pack_nf4_avx512;
    f.i8_gemv_nf4 = to_l2 ? i8_gemv_nf4_avx512<false, true, false> : i8_gemv_nf4_avx512<false, false, false>;
    f.i8_gemv_max_m = kI8DirectMaxRows;
    f.i8_reads_tiles = true;        // i8_gemv_direct, every m
    f.i8_reads_tile_scales = true;  // (I8zNvfp4)
    f.i8_reads_tile_absmax = true;  // (I8zNf4)
    f.i8_tile_group = i8_tile_group_avx512;
    f.i8_tile_scale_group = i8_tile_scale_group_avx512;
    f.reads_e8m0 = true;   // nvfp4_gemv (Gemv128MxScale), i8_gemv_nvfp4 (I8zNvfp4)
    f.i8_gemv_k64 = true;  // i8_gemv_direct
    f.gemv_chunk_max_m_k64 = gemv_chunk_max_m_k64();
    f.gemv_max_m_k128 = 2 * kGemvMaxRows;
    f.small_batch_max_m = 16;
    return f;
  }());
  return t;
}

KernelTable avx512_table_quantize_far() {
  KernelTable f = avx512_table();
  f.nvfp4_quantize_checked_far = nvfp4_quantize_checked_far;
  f.nvfp4_quantize_checked16_far = nvfp4_quantize_checked16_far;
  return f;
}

KernelTable avx512_table_chunk_k64(int32_t max_m) {
  KernelTable f = avx512_table();
  f.nvfp4_gemv = max_m <= 2 ? nvfp4_gemv<2> : nvfp4_gemv<kGemvMaxRows>;
  f.nf4_gemv = max_m <= 2 ? nf4_gemv<2> : nf4_gemv<kGemvMaxRows>;
  f.gemv_chunk_max_m_k64 = max_m <= 2 ? 2 : kGemvMaxRows;
  return f;
}

KernelTable avx512_table_dequant16(bool cvtne) {
  KernelTable f = avx512_table();
  set_dequantize(f, cvtne);
  return f;
}

}  // namespace q4::kern
