// E2M1 / E4M3 encoders against the host conversion functions of the CUDA
// toolkit headers (cuda_fp4.h, cuda_fp8.h). Built only where the toolkit's
// headers exist; elsewhere CTest reports this test as skipped.
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "formats/codec.h"

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

unsigned cuda_e2m1(float x) {
  return static_cast<unsigned>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) & 0xfu;
}

unsigned cuda_e4m3(float x) {
  return static_cast<unsigned>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace

int main() {
  uint64_t n = 0, bad4 = 0, bad8 = 0;
  auto check = [&](float x) {
    ++n;
    if (q4::fmt::e2m1_encode(x) != cuda_e2m1(x)) {
      if (bad4++ < 5)
        std::printf("E2M1 mismatch x=%a ours=%x cuda=%x\n", x, q4::fmt::e2m1_encode(x), cuda_e2m1(x));
    }
    if (q4::fmt::e4m3_encode(x) != cuda_e4m3(x)) {
      if (bad8++ < 5)
        std::printf("E4M3 mismatch x=%a ours=%x cuda=%x\n", x, q4::fmt::e4m3_encode(x), cuda_e4m3(x));
    }
  };
  // Strided sweep over every fp32 bit pattern (about 16.7 M patterns).
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 257) check(from_bits(static_cast<uint32_t>(u)));
  // Every E2M1/E4M3 value and midpoint with its fp32 neighbours.
  for (uint32_t c = 0; c < 0x7e; ++c) {
    const float lo = q4::fmt::e4m3_decode(c), hi = q4::fmt::e4m3_decode(c + 1);
    for (float v : {lo, (lo + hi) / 2}) {
      for (float s : {1.0f, -1.0f}) {
        const float f = s * v;
        check(f);
        check(std::nextafter(f, 1e9f));
        check(std::nextafter(f, -1e9f));
      }
    }
  }
  const float e2m1_points[] = {0, 0.25f, 0.5f, 0.75f, 1, 1.25f, 1.5f, 1.75f, 2, 2.5f, 3, 3.5f, 4, 5, 6, 7};
  for (float v : e2m1_points) {
    for (float s : {1.0f, -1.0f}) {
      check(s * v);
      check(std::nextafter(s * v, 1e9f));
      check(std::nextafter(s * v, -1e9f));
    }
  }
  check(INFINITY);
  check(-INFINITY);
  check(NAN);
  check(-NAN);
  std::printf("checked %llu patterns against cuda_fp4.h/cuda_fp8.h: %llu E2M1 and %llu E4M3 mismatches\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(bad4),
              static_cast<unsigned long long>(bad8));
  return (bad4 == 0 && bad8 == 0) ? 0 : 1;
}
