// The dequantize entries of an ISA's table (KernelTable::nvfp4_dequantize,
// mxfp4_dequantize, nf4_dequantize and their 16-bit forms) from its
// dequantize loops, which take an output policy: Loops::nvfp4(q, s, g,
// rows, k, out), Loops::mxfp4(q, s, rows, k, out), Loops::nf4(q, lut,
// absmax, blocksize, n, out), with out an F32 made from the float* output
// or a Bf16 or an F16 made from the uint16_t* one (which store the loop's
// fp32 values with f32_to_act's bits). Included by the ISA translation
// units, each instantiating it with its own types (internal linkage).
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"

namespace q4::kern {
namespace {

// (The policies write through `out`; clang-tidy does not see into their
// dependent types.)
// NOLINTBEGIN(readability-non-const-parameter)
template <class Loops, class F32, class Bf16, class F16>
void set_dequantize_entries(KernelTable& f) {
  f.nvfp4_dequantize = [](const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k, float* out) {
    Loops::nvfp4(q, s, g, rows, k, F32{out});
  };
  f.mxfp4_dequantize = [](const uint8_t* q, const uint8_t* s, int64_t rows, int64_t k, float* out) {
    Loops::mxfp4(q, s, rows, k, F32{out});
  };
  f.nf4_dequantize = [](const uint8_t* q, const float* lut, const float* absmax, int64_t bs, int64_t n,
                        float* out) { Loops::nf4(q, lut, absmax, bs, n, F32{out}); };
  f.nvfp4_dequantize16 = [](const uint8_t* q, const uint8_t* s, float g, int64_t rows, int64_t k,
                            uint16_t* out, bool bf16) {
    bf16 ? Loops::nvfp4(q, s, g, rows, k, Bf16{out}) : Loops::nvfp4(q, s, g, rows, k, F16{out});
  };
  f.mxfp4_dequantize16 = [](const uint8_t* q, const uint8_t* s, int64_t rows, int64_t k, uint16_t* out,
                            bool bf16) {
    bf16 ? Loops::mxfp4(q, s, rows, k, Bf16{out}) : Loops::mxfp4(q, s, rows, k, F16{out});
  };
  f.nf4_dequantize16 = [](const uint8_t* q, const float* lut, const float* absmax, int64_t bs, int64_t n,
                          uint16_t* out, bool bf16) {
    bf16 ? Loops::nf4(q, lut, absmax, bs, n, Bf16{out}) : Loops::nf4(q, lut, absmax, bs, n, F16{out});
  };
}
// NOLINTEND(readability-non-const-parameter)

}  // namespace
}  // namespace q4::kern
