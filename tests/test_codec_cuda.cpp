// E2M1 / E4M3 encoders against the host conversion functions of the CUDA
// toolkit headers (cuda_fp4.h, cuda_fp8.h). Built only where the toolkit's
// headers exist; elsewhere CTest reports this test as skipped.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "formats/codec.h"
#include "formats/mxfp4.h"

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

unsigned cuda_e2m1(float x) {
  return static_cast<unsigned>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) & 0xfu;
}

unsigned cuda_f16(float x) {
  const __half_raw r = __float2half_rn(x);
  return r.x;
}

unsigned cuda_bf16(float x) {
  const __nv_bfloat16_raw r = __float2bfloat16_rn(x);
  return r.x;
}

unsigned cuda_e4m3(float x) {
  return static_cast<unsigned>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// floor(log2(a)) + 127 as the E8M0 byte of a positive normal a, rounded
// toward zero by cuda_fp8.h.
unsigned cuda_e8m0_floor(float a) {
  return static_cast<unsigned>(__nv_cvt_float_to_e8m0(a, __NV_SATFINITE, cudaRoundZero));
}

// MXFP4 (formats/mxfp4.h): the scale byte is the toolkit's floor-log2 E8M0
// minus 2 (the OCP rule), and each element's code is the toolkit's E2M1
// conversion of x / 2^e (computed in double, exact). Returns the mismatches.
uint64_t check_mxfp4(uint64_t& n) {
  uint64_t bad = 0;
  for (uint64_t u = 0x00800000u; u < 0x7f800000u; u += 4099) {  // normal block amax values
    const float amax = from_bits(static_cast<uint32_t>(u));
    ++n;
    const unsigned floor_byte = cuda_e8m0_floor(amax);
    const unsigned want = floor_byte < 2 ? 0u : floor_byte - 2;  // clamped at 2^-127
    const uint32_t byte = q4::fmt::mxfp4_scale_byte(amax);
    if (byte != want && bad++ < 5) std::printf("E8M0 mismatch amax=%a ours=%x cuda-2=%x\n", amax, byte, want);
    // Elements of that block: amax itself and values below it.
    const float inv = q4::fmt::mxfp4_inverse_scale(byte);
    for (float f : {1.0f, -0.8125f, 0.6f, -0.3125f, 0.1f, 0.0625f, -1e-3f}) {
      const float x = amax * f;
      ++n;
      const float scaled =
          static_cast<float>(std::ldexp(static_cast<double>(x), 127 - static_cast<int>(byte)));
      const unsigned cuda = cuda_e2m1(scaled);
      const uint32_t ours = q4::fmt::mxfp4_encode_element(x, inv);
      if (ours != cuda && bad++ < 5)
        std::printf("MXFP4 element mismatch x=%a byte=%x ours=%x cuda=%x\n", x, byte, ours, cuda);
    }
  }
  return bad;
}

}  // namespace

int main() {
  uint64_t n = 0, bad4 = 0, bad8 = 0, bad16 = 0;
  auto check = [&](float x) {
    ++n;
    // fp16/bf16 outputs of the CUDA kernels use the codec (seams.h
    // out_f16_bits): identical to the intrinsics except for NaN, where the
    // intrinsics write 0x7fff and the codec keeps its own pattern.
    if (!std::isnan(x) &&
        (q4::fmt::f32_to_f16(x) != cuda_f16(x) || q4::fmt::f32_to_bf16(x) != cuda_bf16(x))) {
      if (bad16++ < 5)
        std::printf("f16/bf16 mismatch x=%a ours=%x/%x cuda=%x/%x\n", x, q4::fmt::f32_to_f16(x),
                    q4::fmt::f32_to_bf16(x), cuda_f16(x), cuda_bf16(x));
    }
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
  uint64_t nmx = 0;
  const uint64_t badmx = check_mxfp4(nmx);
  std::printf("checked %llu MXFP4 scale/element cases against cuda_fp8.h/cuda_fp4.h: %llu mismatches\n",
              static_cast<unsigned long long>(nmx), static_cast<unsigned long long>(badmx));
  return (bad4 == 0 && bad8 == 0 && bad16 == 0 && badmx == 0) ? 0 : 1;
}
