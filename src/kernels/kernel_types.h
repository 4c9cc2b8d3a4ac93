// Plain-pointer descriptions of already-validated operands, shared by the
// scalar reference and every ISA variant. Nothing here knows DLPack.
#pragma once

#include <cstdint>
#include <memory>

#include "formats/codec.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {

enum class FType : uint8_t { F32, F16, BF16 };

// A 64-byte aligned float buffer (at least 16 floats; not initialized) for
// staged activations and packed panels: full-vector loads never straddle
// two cache lines. (A std::vector's 16-byte alignment made a GEMV's time
// bimodal, 4.7 or 6.2 ms from call to call, depending on where malloc
// placed it.) Defined in cpu_ops.cpp, which is compiled with the generic
// flags, so no ISA unit's copy can be merged into the others. Freed blocks
// of 16 KiB and more are kept by the freeing thread and handed out again
// to its next requests (per-call scratch then stops reaching malloc;
// limits and reasons beside the definition).
struct AlignedDelete {
  void operator()(float* p) const;
};
using AlignedFloats = std::unique_ptr<float[], AlignedDelete>;
AlignedFloats aligned_floats(int64_t floats);

// A typed part of one aligned_floats block (data(), as a std::vector's):
// the int8 activations, their scales and corrections in one block.
template <class T>
struct BlockPart {
  T* p = nullptr;
  T* data() const { return p; }
};

// A float vector/matrix of type `type` at `data` (compact row-major).
struct FloatPtr {
  const void* data = nullptr;
  FType type = FType::F32;
};

struct FloatOut {
  void* data = nullptr;
  FType type = FType::F32;
};

// NVFP4 block scales of a [rows, cols*16] matrix, linear or swizzled.
struct ScaleView {
  const uint8_t* data = nullptr;
  int32_t layout = Q4_SCALE_LINEAR;
  int64_t cols = 0;  // K / 16

  uint32_t at(int64_t r, int64_t c) const {
    return layout == Q4_SCALE_SWIZZLED ? data[fmt::swizzle_offset(r, c, cols)] : data[r * cols + c];
  }
};

// NF4 statistics, already resolved to pointers (absmax fp32, or nested).
struct Nf4Stats {
  int64_t blocksize = 64;
  const float* absmax = nullptr;     // fp32 absmax, when not nested
  const uint8_t* qabsmax = nullptr;  // uint8 codes, when nested
  const float* nested_absmax = nullptr;
  const float* nested_map = nullptr;  // 256 entries
  float nested_offset = 0.0f;
  int64_t nested_blocksize = 256;
  const float* quant_map = nullptr;  // 16 entries, NULL = NF4 codebook

  float absmax_of_block(int64_t b) const {
    if (qabsmax == nullptr) return absmax[b];
    return nested_map[qabsmax[b]] * nested_absmax[b / nested_blocksize] + nested_offset;
  }
  float code_value(uint32_t code) const {
    return quant_map != nullptr ? quant_map[code & 15u] : fmt::nf4_decode(code);
  }
};

float load_one(const void* base, FType t, int64_t i);
void load_row(const void* base, FType t, int64_t first, int64_t n, float* dst);
void store_row(void* base, FType t, int64_t first, int64_t n, const float* src);

}  // namespace q4::kern
