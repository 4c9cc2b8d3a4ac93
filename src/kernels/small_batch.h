// The small-batch product kernels (KernelTable::nvfp4_small / nf4_small),
// written once over a vector-traits struct and instantiated by each ISA
// translation unit with its own flags (internal linkage, as isa_common.h).
//
// One call computes rows [n0, n1) of W over columns [k0, k1) for any m:
//   for each group of V::kR weight rows:
//     for each chunk of kc columns:
//       decode the kR x kc weight tile once to fp32 (e2m1 * scale, or NF4
//       code * absmax) into an L1 buffer;
//       for each group of V::kMI rows of X: kMI x kR vector accumulators
//       (kept in registers over the chunk, in a small buffer between
//       chunks), X read in its own type and converted in registers;
//     reduce each accumulator once: y = sum * post.
// The fp32 sequence of one output (i, j) is fixed: lane l of its
// accumulator adds x[k] * w[k] for k = l mod kLanes in ascending k, then
// V::sum reduces the lanes. It depends neither on m, on the row grouping,
// on n0/n1 nor on kc, so any partition over N gives the same bits.
//
// What V provides: Reg, kLanes (1, 4, 8 or 16), kMI, kR, zero(), load(p),
// store(p, r), fma(a, b, c) = a*b + c, sum(r), load_act<FType>(base, off)
// (kLanes activations from element offset `off`, converted to fp32),
// store_act<FType>(base, off, r) (its inverse: kLanes values rounded to
// nearest even, NaN written as fmt::f32_to_f16 / f32_to_bf16 write it),
// decode_nvfp4(q, s, nblocks, dst) (16*nblocks values e2m1*scale from
// packed codes q and E4M3 scales s, natural order) and
// decode_nf4(w, flat, len, dst) (len, a multiple of 16, NF4 values from flat
// element `flat`).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>

#include "formats/codec.h"
#include "kernels/isa_common.h"
#include "kernels/kernel_table.h"

namespace q4::kern {
namespace {

// E4M3 code -> fp32 (fmt::e4m3_decode), one table per process and ISA unit.
inline const float* sb_e4m3_table() {
  static const struct Table {
    float v[256];
    Table() : v() {
      for (uint32_t c = 0; c < 256; ++c) v[c] = fmt::e4m3_decode(c);
    }
  } t;
  return t.v;
}

// kMI x kR accumulators over kc columns (kc % kLanes == 0): x rows at
// element offsets xoff + i*ldx, weight rows at wbuf + r*ldw.
template <class V, FType T, int MI, int R>
void sb_micro(const void* x, int64_t ldx, int64_t xoff, const float* wbuf, int64_t ldw, int64_t kc,
              float* acc, bool first) {
  using Reg = typename V::Reg;
  constexpr int L = V::kLanes;
  Reg a[MI][R];
#pragma GCC unroll 16
  for (int i = 0; i < MI; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) a[i][r] = first ? V::zero() : V::load(acc + (int64_t{i} * R + r) * L);
  }
  for (int64_t kk = 0; kk < kc; kk += L) {
    Reg wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = V::load(wbuf + r * ldw + kk);
#pragma GCC unroll 16
    for (int i = 0; i < MI; ++i) {
      const Reg xv = V::template load_act<T>(x, xoff + i * ldx + kk);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) a[i][r] = V::fma(xv, wv[r], a[i][r]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MI; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) V::store(acc + (int64_t{i} * R + r) * L, a[i][r]);
  }
}

// The driver of one call; decode(j, kb, len, dst) writes len (a multiple of
// 16) fp32 weights of row j from column kb.
template <class V, FType T, class Decode>
void sb_product(const void* x, int64_t ldx, int32_t m, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                float post, float* y, int64_t ldy, int64_t kc_pref, Decode&& decode) {
  constexpr int L = V::kLanes, R = V::kR, MI = V::kMI;
  if (m <= 0 || n1 <= n0) return;
  const int64_t span = k1 - k0;
  const int64_t kc = std::min(std::max<int64_t>(16, kc_pref / 16 * 16), std::max<int64_t>(16, span));
  AlignedFloats wbuf = aligned_floats(R * kc);
  AlignedFloats acc = aligned_floats(int64_t{m} * R * L);
  for (int64_t j0 = n0; j0 < n1; j0 += R) {
    const int rows = static_cast<int>(std::min<int64_t>(R, n1 - j0));
    if (span <= 0) {
      std::fill(acc.get(), acc.get() + int64_t{m} * R * L, 0.0f);
    }
    for (int64_t kb = k0; kb < k1; kb += kc) {
      const int64_t len = std::min(kc, k1 - kb);
      for (int r = 0; r < R; ++r) {
        float* dst = wbuf.get() + r * kc;
        if (r < rows) {
          decode(j0 + r, kb, len, dst);
        } else {
          std::fill(dst, dst + len, 0.0f);
        }
      }
      for (int32_t i0 = 0; i0 < m; i0 += MI) {
        with_rows<MI>(std::min(MI, m - i0), [&](auto mi) {
          sb_micro<V, T, decltype(mi)::value, R>(x, ldx, i0 * ldx + kb, wbuf.get(), kc, len,
                                                 acc.get() + int64_t{i0} * R * L, kb == k0);
        });
      }
    }
    for (int32_t i = 0; i < m; ++i) {
      for (int r = 0; r < rows; ++r) {
        y[i * ldy + (j0 + r - n0)] = V::sum(V::load(acc.get() + (int64_t{i} * R + r) * L)) * post;
      }
    }
  }
}

template <class V, class Decode>
void sb_dispatch(ActRows x, int64_t ldx, int32_t m, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                 float post, float* y, int64_t ldy, int64_t kc, Decode&& decode) {
  switch (x.type) {
    case FType::F16:
      return sb_product<V, FType::F16>(x.data, ldx, m, n0, n1, k0, k1, post, y, ldy, kc, decode);
    case FType::BF16:
      return sb_product<V, FType::BF16>(x.data, ldx, m, n0, n1, k0, k1, post, y, ldy, kc, decode);
    case FType::F32:
      break;
  }
  sb_product<V, FType::F32>(x.data, ldx, m, n0, n1, k0, k1, post, y, ldy, kc, decode);
}

// The table entries (contracts: KernelTable::nvfp4_small / nf4_small).
template <class V>
void sb_nvfp4_small(ActRows x, int64_t ldx, int32_t m, const NvWeights& w, int64_t n0, int64_t n1, int64_t k0,
                    int64_t k1, float* y, int64_t ldy, int64_t kc) {
  const int64_t row_bytes = w.k / 2, row_scales = w.k / 16;
  sb_dispatch<V>(
      x, ldx, m, n0, n1, k0, k1, w.g, y, ldy, kc, [&](int64_t j, int64_t kb, int64_t len, float* dst) {
        V::decode_nvfp4(w.q + j * row_bytes + kb / 2, w.s + j * row_scales + kb / 16, len / 16, dst);
      });
}

template <class V>
void sb_nf4_small(ActRows x, int64_t ldx, int32_t m, const Nf4Weights& w, int64_t n0, int64_t n1, int64_t k0,
                  int64_t k1, float* y, int64_t ldy, int64_t kc) {
  sb_dispatch<V>(
      x, ldx, m, n0, n1, k0, k1, 1.0f, y, ldy, kc,
      [&](int64_t j, int64_t kb, int64_t len, float* dst) { V::decode_nf4(w, j * w.k + kb, len, dst); });
}

// KernelTable::act_to_f32 on V's load_act (the scalar tail: act_elem).
template <class V>
void sb_act_to_f32(const void* src, FType t, int64_t first, int64_t n, float* dst) {
  constexpr int64_t L = V::kLanes;
  int64_t i = 0;
  switch (t) {
    case FType::F16:
      for (; i + L <= n; i += L) V::store(dst + i, V::template load_act<FType::F16>(src, first + i));
      break;
    case FType::BF16:
      for (; i + L <= n; i += L) V::store(dst + i, V::template load_act<FType::BF16>(src, first + i));
      break;
    case FType::F32:
      for (; i + L <= n; i += L) V::store(dst + i, V::template load_act<FType::F32>(src, first + i));
      break;
  }
  for (; i < n; ++i) dst[i] = act_elem(src, t, first + i);
}

// KernelTable::f32_to_act on V's store_act (the scalar tail: store_elem):
// element first + i of base, in type t, = src[i] rounded to nearest even.
template <class V>
void sb_f32_to_act(void* base, FType t, int64_t first, int64_t n, const float* src) {
  constexpr int64_t L = V::kLanes;
  int64_t i = 0;
  switch (t) {
    case FType::F16:
      for (; i + L <= n; i += L) V::template store_act<FType::F16>(base, first + i, V::load(src + i));
      break;
    case FType::BF16:
      for (; i + L <= n; i += L) V::template store_act<FType::BF16>(base, first + i, V::load(src + i));
      break;
    case FType::F32:
      for (; i + L <= n; i += L) V::template store_act<FType::F32>(base, first + i, V::load(src + i));
      break;
  }
  for (; i < n; ++i) store_elem(base, t, first + i, src[i]);
}

// Scalar pieces of the traits (tails, the portable table).
inline void sb_decode_nvfp4_scalar(const uint8_t* q, const uint8_t* s, int64_t nblocks, float* dst) {
  const float* e4m3 = sb_e4m3_table();
  for (int64_t b = 0; b < nblocks; ++b) {
    const float sc = e4m3[s[b]];
    for (int64_t e = 0; e < 16; ++e) {
      const uint32_t byte = q[b * 8 + e / 2];
      dst[b * 16 + e] = fmt::e2m1_decode((e & 1) != 0 ? byte >> 4 : byte & 0xfu) * sc;
    }
  }
}

inline void sb_decode_nf4_scalar(const Nf4Weights& w, int64_t flat, int64_t len, float* dst) {
  for (int64_t e = 0; e < len; ++e) {
    const int64_t f = flat + e;
    const uint32_t byte = w.q[f / 2];
    dst[e] = w.lut[(f & 1) != 0 ? byte & 0xfu : byte >> 4] * w.absmax[f >> w.block_shift];
  }
}

}  // namespace
}  // namespace q4::kern
