// NF4 quantization of whole blocks (KernelTable::nf4_quantize_blocks), in
// loops the compiler vectorizes: included by portable.cpp and by the x86
// ISA translation units, each compiling it with its own flags (internal
// linkage).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/codec.h"
#include "kernels/kernel_types.h"

namespace q4::kern {
namespace {

// The per-block coding of fmt::nf4_quantize_block (the CUDA kernel's, the
// reference), in loops the compiler vectorizes: a block is converted to
// fp32 once (fp16/bf16), its absmax taken, then every element coded by
// counting the thresholds below it (the comparison of
// fmt::nf4_encode, branch-free), then the codes packed in pairs. The same
// operations on the same values, so the same bytes and absmax: y = x *
// (1/absmax) coded by the thresholds below it (a NaN y, code 0), an
// all-zero (or all-NaN) block coded 7 everywhere, the spare nibble of an
// odd count 7. convert(src, type, first, count, dst): fp16/bf16 elements
// to fp32 (the table's act_to_f32). Returns whether every element is finite
// (the check rides on the absmax loop: the callers that must not write on
// NaN/Inf quantize into staging). code(xb, len, inv, qb), when
// given: an ISA's coding of a block with a non-zero absmax into its packed
// bytes (the same y = x * inv and comparisons), or false to leave the
// block to the loops here.
// code.maxima16(xb, blocksize, absmax), when it returns true: the absmax
// of 16 consecutive whole blocks at xb (blocksize % 16 == 0), all finite,
// as the loop here finds them; false (nothing written) leaves the 16 to
// the loop here (a NaN or Inf among them, or a blocksize it does not take).
struct Nf4NoCoder {
  bool operator()(const float*, int64_t, float, uint8_t*) const { return false; }
  bool maxima16(const float*, int64_t, float*) const { return false; }
};

// Blocks are taken in groups of about 2 Ki elements: the maxima of a
// group first, then its codes, so that coding a block does not wait on the
// maximum (and the division) of the next one (Zen 5, AVX-512 coder: the
// block-at-a-time loop ran at the latency of that chain). While a group is
// coded, the input kAheadGroups groups on is prefetched, a block's lines
// per block: the hardware prefetcher alone did not keep up (AVX2 Zen 3,
// two threads from DRAM: fp32 2.2x with the AVX2 coder, bf16 1.27x).
constexpr int64_t kAheadGroups = 2;
template <class Convert, class Code = Nf4NoCoder>
bool nf4_quantize_blocks_impl(FloatPtr x, int64_t n, int64_t blocksize, int64_t b0, int64_t b1, uint8_t* q,
                              float* absmax, Convert&& convert, Code&& code = Code{}) {
  float thresholds[15];
  for (int32_t k = 0; k < 15; ++k) thresholds[k] = fmt::nf4_threshold(k);
  const int64_t per = std::max<int64_t>(1, 2048 / blocksize);
  const size_t esize = x.type == FType::F32 ? sizeof(float) : sizeof(uint16_t);
  std::vector<float> buf(static_cast<size_t>(x.type == FType::F32 ? 0 : per * blocksize));
  std::vector<int32_t> codes(static_cast<size_t>(blocksize + 1));
  int32_t non_finite = 0;
  for (int64_t g0 = b0; g0 < b1; g0 += per) {
    const int64_t g1 = std::min(b1, g0 + per);
    const float* xg = buf.data();
    if (x.type == FType::F32) {
      xg = static_cast<const float*>(x.data) + g0 * blocksize;
    } else {
      convert(x.data, x.type, g0 * blocksize, std::min(n, g1 * blocksize) - g0 * blocksize, buf.data());
    }
    for (int64_t b = g0; b < g1;) {
      const int64_t b16 = b + 16 <= g1 && (b + 16) * blocksize <= n ? b + 16 : b + 1;
      if (b16 == b + 16 && code.maxima16(xg + (b - g0) * blocksize, blocksize, absmax + b)) {
        b = b16;
        continue;
      }
      for (; b < b16; ++b) {
        const int64_t lo = b * blocksize, len = std::min(n, lo + blocksize) - lo;
        const float* xb = xg + (b - g0) * blocksize;
        // The reference's fmaxf(m, |x|) from m = 0 (NaN skipped), on the
        // bits: non-negative floats order as their bit patterns; a NaN's
        // are above Inf's and count as 0.
        int32_t mb = 0, bad = 0;
        for (int64_t i = 0; i < len; ++i) {
          int32_t a;
          std::memcpy(&a, xb + i, 4);
          a &= 0x7fffffff;
          bad |= a >= 0x7f800000 ? 1 : 0;
          a = a > 0x7f800000 ? 0 : a;
          mb = a > mb ? a : mb;
        }
        non_finite |= bad;
        std::memcpy(absmax + b, &mb, 4);
      }
    }
    for (int64_t b = g0; b < g1; ++b) {
      const int64_t lo = b * blocksize, len = std::min(n, lo + blocksize) - lo;
      {
        // The input kAheadGroups groups on, a block's lines per block coded
        // (an integer address: it may lie past the input's end).
        const uintptr_t ahead = reinterpret_cast<uintptr_t>(x.data) +
                                static_cast<uintptr_t>((b + kAheadGroups * per) * blocksize) * esize;
        for (int64_t l = 0; l < blocksize * static_cast<int64_t>(esize); l += 64)
          __builtin_prefetch(reinterpret_cast<const void*>(ahead + static_cast<uintptr_t>(l)), 0, 3);
      }
      const float* xb = xg + (b - g0) * blocksize;
      const float m = absmax[b];
      uint8_t* qb = q + lo / 2;
      if (m > 0.0f && code(xb, len, 1.0f / m, qb)) continue;
      if (m > 0.0f) {
        const float inv = 1.0f / m;
        for (int64_t i = 0; i < len; ++i) {
          // (The reference's clamp to [-1, 1] changes no code: every
          // threshold lies inside, and a NaN y, -1 there, is below all.)
          const float y = xb[i] * inv;
          int32_t c = 0;
#pragma GCC unroll 15
          for (const float t : thresholds) c += static_cast<int32_t>(y > t);
          codes[static_cast<size_t>(i)] = c;
        }
      } else {
        std::fill(codes.begin(), codes.begin() + len, 7);
      }
      codes[static_cast<size_t>(len)] = 7;  // the spare nibble of an odd count
      for (int64_t j = 0; j < (len + 1) / 2; ++j) {
        qb[j] = static_cast<uint8_t>((codes[static_cast<size_t>(2 * j)] << 4) |
                                     codes[static_cast<size_t>(2 * j + 1)]);
      }
    }
  }
  return non_finite == 0;
}

}  // namespace
}  // namespace q4::kern
