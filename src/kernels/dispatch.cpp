// Picks the kernel table of the active ISA (CPU features + cap).
#include "kernels/dispatch.h"

#include "common/cpu_features.h"
#include "kernels/kernel_table.h"
#include "nvfp4/q4_base.h"

namespace q4 {

bool isa_compiled(int32_t isa) {
  switch (isa) {
    case Q4_ISA_SCALAR:
      return true;
#if defined(__x86_64__)
    case Q4_ISA_AVX2:
    case Q4_ISA_AVX512:
      return true;
#endif
#if defined(__aarch64__)
    case Q4_ISA_NEON:
      return true;
#endif
    default:
      return false;
  }
}

namespace kern {

const KernelTable& table_for(int32_t isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Q4_ISA_AVX512:
      return avx512_table();
    case Q4_ISA_AVX2:
      return avx2_table();
#endif
#if defined(__aarch64__)
    case Q4_ISA_NEON:
      return neon_table();
#endif
    default:
      return scalar_table();
  }
}

namespace {
thread_local int32_t t_last_isa = -1;
}  // namespace

const KernelTable& active_table() {
  const KernelTable& t = table_for(active_isa());
  t_last_isa = t.isa;
  return t;
}

int32_t last_isa_used() {
  return t_last_isa;
}

}  // namespace kern

int32_t best_isa() {
  const CpuInfo& info = cpu_info();
  for (int32_t isa : kIsaPreference) {
    if (isa_compiled(isa) && cpu_has_isa(info, isa)) return isa;
  }
  return Q4_ISA_SCALAR;
}

int32_t active_isa() {
  const int32_t cap = isa_cap();
  const CpuInfo& info = cpu_info();
  for (int32_t isa : kIsaPreference) {
    if (isa_rank(isa) <= isa_rank(cap) && isa_compiled(isa) && cpu_has_isa(info, isa)) return isa;
  }
  return Q4_ISA_SCALAR;
}

}  // namespace q4
