// Pieces every ISA kernel file needs, written once. Included by each ISA
// translation unit, so each template is compiled with that unit's flags.
// Everything here has internal linkage (unnamed namespace): an instantiation
// compiled with AVX-512 flags must never be merged by the linker with the
// same instantiation of another unit and then run on a CPU without AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/cpu_features.h"
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

// f(std::bool_constant<b>{}): a run-time flag as a template argument.
template <class F>
inline decltype(auto) with_flag(bool b, F&& f) {
  return b ? f(std::true_type{}) : f(std::false_type{});
}

// The scales of weight rows [r0, r0 + n), one contiguous span (*bytes).
inline const char* nvfp4_scale_span(const NvWeights& w, int64_t r0, int64_t n, int64_t* bytes) {
  if (w.s == nullptr && w.e8m0 != nullptr) {  // (MXFP4's E8M0 scales in place)
    *bytes = n * (w.k / 32);
    return reinterpret_cast<const char*>(w.e8m0 + r0 * (w.k / 32));
  }
  *bytes = n * (w.k / 16);
  return reinterpret_cast<const char*>(w.s + r0 * (w.k / 16));
}
inline const char* nf4_scale_span(const Nf4Weights& w, int64_t r0, int64_t n, int64_t* bytes) {
  const int64_t b0 = (r0 * w.k) >> w.block_shift;
  const int64_t b1 = n > 0 ? (((r0 + n) * w.k - 1) >> w.block_shift) + 1 : b0;
  *bytes = (b1 - b0) * static_cast<int64_t>(sizeof(float));
  return reinterpret_cast<const char*>(w.absmax + b0);
}

// Whether the AVX-512 GEMVs prefetch each weight row into L2
// (prefetcht2) at the place the next group of rows will read, a group's
// time ahead: on the CPUs where that was measured faster, AMD family 0x19
// (the Zen 4 among them has AVX-512; the integer GEMVs do it instead of
// their prefetch into L1 at kRowPrefetchBytes, the chunk GEMV besides
// its own: i8_prefetch_row, gemv128_rows; the chunk GEMV also on Sapphire
// and Emerald Rapids, chunk_rows_to_l2). Elsewhere they keep the
// prefetches into L1 measured there (a Cascade Lake: 1.2x from L3 for
// the integer GEMV); the Zen 5 is unmeasured. Read once (per translation
// unit: the header is in an anonymous namespace).
inline bool rows_to_l2() {
  static const bool to_l2 = cpu_info().vendor == "AuthenticAMD" && cpu_info().family == 0x19;
  return to_l2;
}

// The Intel CPUs whose cores have at least 48 KiB of L1d and 2 MiB of L2
// (the server cores from Golden Cove on: Sapphire, Emerald and Granite
// Rapids), where the AVX-512 chunk GEMV takes the tunings measured on an
// Emerald Rapids-class Xeon (chunk_rows_to_l2, gemv128_min_kblock_chunks).
// Told by the caches CPUID gives, not by the model: a VM may show another
// model number (a Xeon with AMX and AVX512-FP16 showed model 0xa7, Rocket
// Lake's, and took the tunings' 1.2-1.4x from DRAM at M = 1-2 only once
// this test read its caches: docs/performance.md, fifty-fourth session).
// Family 6 models 0x8f and 0xcf count where CPUID gives no caches.
inline bool intel_golden_cove_server() {
  static const bool is = [] {
    const CpuInfo& c = cpu_info();
    if (c.vendor != "GenuineIntel" || c.family != 6) return false;
    if (c.l1d_bytes > 0 && c.l2_bytes > 0)
      return c.l1d_bytes >= int64_t{48} << 10 && c.l2_bytes >= int64_t{2} << 20;
    return c.model == 0x8f || c.model == 0xcf;
  }();
  return is;
}

// Whether the AVX-512 NVFP4 quantizer's table has the far entries
// (KernelTable::nvfp4_quantize_checked_far: an input read from memory
// prefetched into L2, each line three times, a batch apart, instead of
// once into L1): on intel_golden_cove_server(), whose cores keep more
// misses in flight through L2 than through L1's fill buffers. Measured on
// a Xeon with those caches (model 0xa7 in a VM), 11008x4096 fp32 from
// DRAM, 2 threads, in-process A/B: 1.14-1.22x (the next 8 KiB alone into
// L2 1.06x; the two batches after it into L2 with the next into L1
// 1.02x); in cache (1-32 MiB) 0.93-0.98x, hence only for large inputs.
// Elsewhere the L1 prefetch measured on a Cascade Lake.
inline bool quantize_prefetch_l2() {
  return intel_golden_cove_server();
}

// Whether the AVX-512 chunk GEMV (the exact GEMV for K % 128 == 0 or 64)
// prefetches each weight row into L2 where the next group of rows will
// read: on the rows_to_l2() CPUs, and on intel_golden_cove_server() when
// its x is not K-blocked. Measured on an Emerald Rapids-class Xeon (2
// vCPUs, 260 MiB L3), 2 threads, weights rotated through 520 MiB,
// one-process A/B: M = 1 from DRAM 1.20-1.45x (4096x4096 1.43x,
// 11008x4096 1.34x, 2880x2880 1.20x, MXFP4 4096x11008 1.23x), M = 2
// 1.15x, hot 1.01x; blocked at M <= 3 too (M = 3, 4096x11008 and
// 11008x4096 from DRAM 1.07-1.12x, hot 1.00x), but not blocked at M >= 4
// (M = 4 at K = 4096 and 11008 0.96-1.04x, M = 8 0.99-1.00x). The
// integer GEMVs there kept their L1 prefetch (rows_to_l2: M = 1 from DRAM
// 1.09-1.12x but hot 0.98x, M >= 4 0.99-1.02x).
inline bool chunk_rows_to_l2(bool blocked, int32_t m) {
  return rows_to_l2() || (intel_golden_cove_server() && (!blocked || m <= 3));
}

// How far ahead the GEMV kernels prefetch in each weight row (each row is
// its own stream; measured on a Cascade Lake, AVX-512 integer GEMV: 256
// bytes ahead 1.2x from L3, 1 KiB or more slower than none).
constexpr int64_t kRowPrefetchBytes = 256;

// The cache lines the GEMV's next group of weight rows starts on,
// prefetched a few per step while the current group runs: its scales (a new
// page that the hardware prefetcher has not seen; without this, the group's
// first scale loads wait on DRAM, 64 lines for 16 rows at K = 4096) and the
// first kRowPrefetchBytes of each of its rows (a kernel's own prefetch
// starts that far ahead). Measured on a Cascade Lake, weights rotated
// through 80 MiB, alternating call by call (min and median of 150-300
// calls), one and two threads: AVX-512 integer GEMV, NVFP4 and NF4, M = 1
// 1.0-1.1x, M = 2 1.03-1.07x, M = 4 1.05-1.09x; exact M = 1 1.07-1.14x.
class NextGroupPrefetch {
 public:
  // Rows [next, next + rows) of q (rb bytes each; nothing when rows <= 0)
  // and their scales, span(next, rows, &bytes) (nvfp4_scale_span,
  // nf4_scale_span; not called when rows <= 0), spread over `steps` calls
  // of step(). Addresses are kept as integers: the line holding a span's
  // first byte may start before the array. rows_too = false: the scales
  // only (the caller prefetches the codes itself).
  template <class Span>
  NextGroupPrefetch(Span&& span, const uint8_t* q, int64_t rb, int64_t next, int64_t rows, int64_t steps,
                    bool rows_too = true)
      : rb_(static_cast<uintptr_t>(rb)) {
    if (rows <= 0) return;
    int64_t scale_bytes = 0;
    const uintptr_t s0 = reinterpret_cast<uintptr_t>(span(next, rows, &scale_bytes));
    const int64_t scale_lines =
        static_cast<int64_t>((s0 + static_cast<uintptr_t>(scale_bytes) + 63) / 64 - s0 / 64);
    // The scales' lines as the first run, then a run of kRowLines per row;
    // rows shorter than kRowPrefetchBytes (K < 512) are read whole, one
    // after the other: one run over the lines of all of them (at K = 128
    // the runs of 4 lines per row had fetched each line 4 times; measured
    // on an Emerald Rapids-class Xeon, 2 threads, 1024 x 128 in cache,
    // one-process A/B: AVX-512 exact GEMV M = 1 1.2x, integer GEMV 1.3x;
    // K = 256 1.06-1.10x; the AVX2 table within 2 %).
    addr_ = s0 / 64 * 64;
    in_run_ = scale_lines;
    row_ = reinterpret_cast<uintptr_t>(q) + static_cast<uintptr_t>(next * rb);
    int64_t runs = rows;
    if (rb < kRowPrefetchBytes) {
      const uintptr_t end = row_ + static_cast<uintptr_t>(rows * rb);
      row_lines_ = static_cast<int64_t>((end + 63) / 64 - row_ / 64);
      row_ = row_ / 64 * 64;
      runs = 1;
    }
    left_ = scale_lines + (rows_too ? runs * row_lines_ : 0);
    per_step_ = (left_ + steps - 1) / (steps > 0 ? steps : 1);
  }
  // The next per_step_ lines, by a cursor (this runs once per step of the
  // GEMVs' inner loops; a division, a modulo and two branches per line had
  // cost the AVX2 integer GEMV at M = 1 8-11 % from DRAM on a Zen 3).
  void step() {
    for (int64_t e = 0; e < per_step_ && left_ > 0; ++e, --left_) {
      if (in_run_ == 0) {  // the next row's run
        addr_ = row_;
        row_ += rb_;
        in_run_ = row_lines_;
      }
      __builtin_prefetch(reinterpret_cast<const void*>(addr_), 0, 3);
      addr_ += 64;
      --in_run_;
    }
  }

 private:
  static constexpr int64_t kRowLines = kRowPrefetchBytes / 64;
  uintptr_t rb_, addr_ = 0, row_ = 0;
  int64_t in_run_ = 0, left_ = 0, per_step_ = 0, row_lines_ = kRowLines;
};

// fp32 value of element i of fp16/bf16/fp32 data (scalar; tails only).
inline float act_elem(const void* base, FType t, int64_t i) {
  if (t == FType::F32) return static_cast<const float*>(base)[i];
  const uint16_t h = static_cast<const uint16_t*>(base)[i];
  return t == FType::F16 ? fmt::f16_to_f32(h) : fmt::bf16_to_f32(h);
}

// Element i of base, in type t, = v (fp16/bf16: the codec's rounding);
// byte copies, so any address will do. (portable.cpp's store_row is a loop
// of it.)
inline void store_elem(void* base, FType t, int64_t i, float v) {
  auto* p = static_cast<uint8_t*>(base);
  if (t == FType::F32) {
    std::memcpy(p + 4 * i, &v, 4);
    return;
  }
  const uint16_t h = t == FType::F16 ? fmt::f32_to_f16(v) : fmt::f32_to_bf16(v);
  std::memcpy(p + 2 * i, &h, 2);
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
  AlignedFloats buf = aligned_floats(int64_t{2} * m * ld);
  float* xe = buf.get();
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

// Integer activations of rows [g0, g0 + gm) of x, staged for the integer
// GEMV kernels that decode W once for several rows of x. Block-major: block
// b of row i at q[(b * gm + i) * 16], s[b * gm + i], c[b * gm + i].
// One block (aligned_floats, kept by the thread from call to call), not
// initialized: stage() writes all of it.
struct I8Staged {
  AlignedFloats buf;
  BlockPart<int8_t> q;
  BlockPart<float> s;
  BlockPart<int32_t> c;
  int32_t gm = 0;
  void stage(const int8_t* xq, int64_t ldxq, const float* xs, const int32_t* xc, int64_t ldxs, int32_t g0,
             int32_t rows, int64_t nb) {
    gm = rows;
    const int64_t qbytes = nb * rows * 16;  // (a multiple of 16)
    buf = aligned_floats(qbytes / 4 + 2 * nb * rows);
    q.p = reinterpret_cast<int8_t*>(buf.get());
    s.p = buf.get() + qbytes / 4;
    c.p = reinterpret_cast<int32_t*>(s.p + nb * rows);
    // Written in order (block by block, the rows of a block in turn)
    // through local pointers: the former row-by-row loop reloaded the
    // vectors' data pointers after every store (an int8 store may alias
    // them) and took 6.6 % of a fast-mode M = 8 product (2048 x 4096,
    // 2 threads, Emerald Rapids-class Xeon; 4.4 % now, mostly the loads of
    // x rows another thread quantized): 1.01-1.03x at M = 8-32.
    int8_t* qd = q.data();
    float* sd = s.data();
    int32_t* cd = c.data();
    const int8_t* x0 = xq + g0 * ldxq;
    const float* s0 = xs + g0 * ldxs;
    const int32_t* c0 = xc + g0 * ldxs;
    for (int64_t b = 0; b < nb; ++b) {
      for (int32_t i = 0; i < rows; ++i) {
        std::memcpy(qd, x0 + i * ldxq + b * 16, 16);
        *sd++ = s0[i * ldxs + b];
        *cd++ = c0[i * ldxs + b];
        qd += 16;
      }
    }
  }
};

}  // namespace
}  // namespace q4::kern
