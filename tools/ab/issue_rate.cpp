// How many independent ymm operations a cycle this core issues right now
// (x86-64 with AVX2): a check of the host's state before an A/B or a
// benchmark run on a shared VM. On the AVX2 Zen 3 VM of the thirty-sixth
// session (docs/performance.md) a mix of vpshufb, vpmaddubsw, vpand and
// vpaddw read 4.0 a cycle in quiet minutes and 2.2 in busy ones (another
// guest on the same cores, with no steal time to show for it), and every
// kernel's speed moved with it.
//
//   tools/ab/ab.sh rate
//
// prints one JSON line: the core cycle in TSC ticks (a dependent vpaddd
// chain, one cycle per link), and for each instruction class the
// operations a core cycle of 8 independent ones per loop (best of 5
// rounds of 10^6 loops; the loop's own two instructions are not counted).
#include <immintrin.h>
#include <x86intrin.h>

#include <cstdint>
#include <cstdio>

namespace {

// TSC ticks per operation of body (8 operations a loop), best of 5.
template <class Body>
double ticks_per_op(Body&& body) {
  constexpr long kLoops = 1000000;
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    const uint64_t t0 = __rdtsc();
    for (long i = 0; i < kLoops; ++i) body();
    const double t = static_cast<double>(__rdtsc() - t0) / (8.0 * kLoops);
    if (t < best) best = t;
  }
  return best;
}

// 8 independent operations A, B, A, B, ... on the operands a and b
// (registers holding small integers; as floats, denormals, which main
// makes read as zeros).
#define ISSUE_RATE_8(A, B, a, b)                                                                     \
  asm volatile(A " %[x], %[y], %%ymm0\n\t" B " %[x], %[y], %%ymm1\n\t" A " %[x], %[y], %%ymm2\n\t" B \
                 " %[x], %[y], %%ymm3\n\t" A " %[x], %[y], %%ymm4\n\t" B " %[x], %[y], %%ymm5\n\t" A \
                 " %[x], %[y], %%ymm6\n\t" B " %[x], %[y], %%ymm7\n\t"                               \
               :                                                                                     \
               : [x] "x"(a), [y] "x"(b)                                                              \
               : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7")

}  // namespace

int main() {
  // Flush-to-zero and denormals-are-zero: the operands' bit patterns (and
  // whatever the registers hold) read as floats are denormals, which cost
  // the FMA class a microcode assist each on Intel cores (0.01 a cycle on
  // an Emerald Rapids-class Xeon) though not on the Zen 3.
  _mm_setcsr(_mm_getcsr() | 0x8040u);
  const double cycle = ticks_per_op([] {
    asm volatile(
        "vpaddd %%ymm0, %%ymm0, %%ymm0\n\tvpaddd %%ymm0, %%ymm0, %%ymm0\n\t"
        "vpaddd %%ymm0, %%ymm0, %%ymm0\n\tvpaddd %%ymm0, %%ymm0, %%ymm0\n\t"
        "vpaddd %%ymm0, %%ymm0, %%ymm0\n\tvpaddd %%ymm0, %%ymm0, %%ymm0\n\t"
        "vpaddd %%ymm0, %%ymm0, %%ymm0\n\tvpaddd %%ymm0, %%ymm0, %%ymm0\n\t" ::
            : "xmm0");
  });
  const __m256i a = _mm256_set1_epi32(0x00010001), b = _mm256_set1_epi32(0x00020002);
  const double logic = ticks_per_op([&] { ISSUE_RATE_8("vpand", "vpand", a, b); });
  const double shuffle = ticks_per_op([&] { ISSUE_RATE_8("vpshufb", "vpshufb", a, b); });
  const double multiply = ticks_per_op([&] { ISSUE_RATE_8("vpmaddubsw", "vpmaddubsw", a, b); });
  const double fma = ticks_per_op([&] { ISSUE_RATE_8("vfmadd231ps", "vfmadd231ps", a, b); });
  // (two of each: the mix of the integer GEMVs' inner loops)
  const double mix = ticks_per_op([&] {
    ISSUE_RATE_8("vpshufb", "vpmaddubsw", a, b);
    ISSUE_RATE_8("vpand", "vpaddw", a, b);
  });
  std::printf(
      "{\"tsc_ticks_per_cycle\": %.3f, \"ops_per_cycle\": {\"vpand\": %.2f, \"vpshufb\": %.2f, "
      "\"vpmaddubsw\": %.2f, \"vfmadd231ps\": %.2f, \"mix\": %.2f}}\n",
      cycle, cycle / logic, cycle / shuffle, cycle / multiply, cycle / fma, cycle / (mix / 2.0));
  return 0;
}
