// Pieces every ISA kernel file needs, written once. Included by each ISA
// translation unit, so each template is compiled with that unit's flags.
// Everything here has internal linkage (unnamed namespace): an instantiation
// compiled with AVX-512 flags must never be merged by the linker with the
// same instantiation of another unit and then run on a CPU without AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "formats/codec.h"
#include "kernels/kernel_table.h"

namespace q4::kern {
namespace {

// Calls f(std::integral_constant<int, m>) for m in [1, Max - 1], and with Max
// for any other m: the row-count switch of the kernels unrolled over rows.
template <int Max, int M = 1, class F>
inline void with_rows(int32_t m, F&& f) {
  if constexpr (M >= Max) {
    f(std::integral_constant<int, Max>{});
  } else {
    if (m == M) return f(std::integral_constant<int, M>{});
    with_rows<Max, M + 1>(m, f);
  }
}

// fp32 value of element i of fp16/bf16/fp32 data (scalar; tails only).
inline float act_elem(const void* base, FType t, int64_t i) {
  if (t == FType::F32) return static_cast<const float*>(base)[i];
  const uint16_t h = static_cast<const uint16_t*>(base)[i];
  return t == FType::F16 ? fmt::f16_to_f32(h) : fmt::bf16_to_f32(h);
}

// Row stride (floats) of the even/odd halves of split activations: k/2
// rounded up to a cache line plus one line, so that the up to 16 rows a
// GEMV step reads never share L1 sets (with k/2 a multiple of 1024 floats
// every row would map to the same sets: 4K aliasing, conflict misses).
inline int64_t split_stride(int64_t k) {
  return (k / 2 + 15) / 16 * 16 + 16;
}

// Splits rows of x into even and odd elements: xe[i*ld + j] = x[i*ldx + 2j],
// xo[i*ld + j] = x[i*ldx + 2j + 1], j < k/2, ld = split_stride(k)
// (fp16/bf16 converted on the way).
inline void deinterleave_rows(ActRows x, int64_t ldx, int32_t m, int64_t k, float* xe, float* xo) {
  const int64_t h = k / 2, ld = split_stride(k);
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < h; ++j) {
      xe[i * ld + j] = act_elem(x.data, x.type, i * ldx + 2 * j);
      xo[i * ld + j] = act_elem(x.data, x.type, i * ldx + 2 * j + 1);
    }
  }
}

// fp32 rows of x: the rows themselves when fp32, else a converted copy of
// the m x k activations in `buf` (ldx becomes k). For kernels that read x
// in natural order and have no in-register conversion.
inline const float* f32_rows(ActRows x, int64_t* ldx, int32_t m, int64_t k, std::vector<float>& buf) {
  if (x.type == FType::F32) return static_cast<const float*>(x.data);
  buf.resize(static_cast<size_t>(m * k));
  for (int32_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; ++j)
      buf[static_cast<size_t>(i * k + j)] = act_elem(x.data, x.type, i * *ldx + j);
  }
  *ldx = k;
  return buf.data();
}

// The driver of a fused GEMV kernel that reads x split into even and odd
// elements: splits the m (<= kGemvMaxRows) rows with `split` (a function
// like deinterleave_rows, converting fp16/bf16 as it goes), then calls
// body(std::integral_constant<int, M>, xe, xo, ld) with M = m and ld the
// row stride of xe/xo.
template <class Split, class Body>
inline void gemv_even_odd(ActRows x, int64_t ldx, int32_t m, int64_t k, Split&& split, Body&& body) {
  const int64_t ld = split_stride(k);
  std::vector<float> buf(static_cast<size_t>(int64_t{2} * m * ld));
  float* xe = buf.data();
  float* xo = xe + m * ld;
  split(x, ldx, m, k, xe, xo);
  with_rows<kGemvMaxRows>(m, [&](auto mm) { body(mm, xe, xo, ld); });
}

// The fp32 scales of an integer NF4 panel (KernelTable::i8_pack_nf4): the
// absmax of the block holding each 16 elements of rows [n0, n0+rows) x
// blocks [b0, b0+nb); rows >= `rows`: 0.
inline void i8_nf4_panel_scales(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t b0, int64_t nb,
                                float* ws) {
  for (int64_t b = 0; b < nb; ++b) {
    for (int32_t r = 0; r < kI8PanelNr; ++r) {
      ws[b * 16 + r] = r < rows ? w.absmax[((n0 + r) * w.k + (b0 + b) * 16) >> w.block_shift] : 0.0f;
    }
  }
}

// The bytes an integer NF4 panel reads for rows past N: code 7 (0.0 in the
// NF4 table; with scale 0 the value does not matter, they are not stored).
alignas(16) inline constexpr uint8_t kI8Nf4PadRow[16] = {0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77,
                                                         0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77};

// The benchmark probe of KernelTable::fma_probe for a vector type described
// by V: V::Reg, V::kLanes, V::set1(float), V::fma(a, b, c) = a*b + c,
// V::add(a, b), V::sum(Reg) -> float. 12 independent chains.
template <class V>
double fma_probe(int64_t iters) {
  typename V::Reg a[12];
  for (int i = 0; i < 12; ++i) a[i] = V::set1(0.1f * static_cast<float>(i));
  const typename V::Reg b = V::set1(0.999f), c = V::set1(0.001f);
  for (int64_t r = 0; r < iters; ++r) {
    for (typename V::Reg& ai : a) ai = V::fma(ai, b, c);
  }
  typename V::Reg sum = a[0];
  for (int i = 1; i < 12; ++i) sum = V::add(sum, a[i]);
  volatile float sink = V::sum(sum);
  (void)sink;
  return static_cast<double>(iters) * 12 * 2 * V::kLanes;
}

}  // namespace
}  // namespace q4::kern
