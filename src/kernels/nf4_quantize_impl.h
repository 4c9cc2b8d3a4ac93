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
// NaN/Inf quantize into staging).
template <class Convert>
bool nf4_quantize_blocks_impl(FloatPtr x, int64_t n, int64_t blocksize, int64_t b0, int64_t b1, uint8_t* q,
                              float* absmax, Convert&& convert) {
  float thresholds[15];
  for (int32_t k = 0; k < 15; ++k) thresholds[k] = fmt::nf4_threshold(k);
  std::vector<float> buf(static_cast<size_t>(x.type == FType::F32 ? 0 : blocksize));
  std::vector<int32_t> codes(static_cast<size_t>(blocksize + 1));
  int32_t non_finite = 0;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t lo = b * blocksize, len = std::min(n, lo + blocksize) - lo;
    const float* xb = buf.data();
    if (x.type == FType::F32) {
      xb = static_cast<const float*>(x.data) + lo;
    } else {
      convert(x.data, x.type, lo, len, buf.data());
    }
    // The reference's fmaxf(m, |x|) from m = 0 (NaN skipped), on the bits:
    // non-negative floats order as their bit patterns; a NaN's are above
    // Inf's and count as 0.
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
    float m;
    std::memcpy(&m, &mb, 4);
    absmax[b] = m;
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
    uint8_t* qb = q + lo / 2;
    for (int64_t j = 0; j < (len + 1) / 2; ++j) {
      qb[j] = static_cast<uint8_t>((codes[static_cast<size_t>(2 * j)] << 4) |
                                   codes[static_cast<size_t>(2 * j + 1)]);
    }
  }
  return non_finite == 0;
}

}  // namespace
}  // namespace q4::kern
