// One NF4 block as every NF4 quantizer codes it (the CUDA kernel runs one
// per thread; the CPU runs it per block). Host and device code.
#pragma once

#include <cmath>
#include <cstdint>

#include "formats/codec.h"

namespace q4::fmt {

// Quantizes elements [lo, hi) of a flat tensor read through load(i): absmax
// of the block, then x * (1/absmax) coded with the bitsandbytes thresholds.
// Element 2j is the high nibble of byte j. lo is even (blocks are even
// sized), so every byte belongs to one block. For an odd total count the
// missing partner of the last element is quantized as 0.0 (NF4 code 7), as
// bitsandbytes does. An all-zero block codes every element as 7.
template <class Load>
Q4_HD void nf4_quantize_block(Load load, int64_t lo, int64_t hi, uint8_t* q, float* absmax) {
  float m = 0.0f;
  for (int64_t i = lo; i < hi; ++i) m = fmaxf(m, fabsf(load(i)));
  *absmax = m;
  const float inv = m > 0.0f ? 1.0f / m : 0.0f;
  const uint32_t zero_code = 7u;  // the NF4 code of 0.0
  for (int64_t i = lo; i < hi; i += 2) {
    uint32_t c0 = zero_code, c1 = zero_code;
    if (m > 0.0f) {
      c0 = q4::fmt::nf4_encode(fminf(1.0f, fmaxf(-1.0f, load(i) * inv)));
      if (i + 1 < hi) c1 = q4::fmt::nf4_encode(fminf(1.0f, fmaxf(-1.0f, load(i + 1) * inv)));
    }
    q[i >> 1] = static_cast<uint8_t>((c0 << 4) | c1);
  }
}

}  // namespace q4::fmt
