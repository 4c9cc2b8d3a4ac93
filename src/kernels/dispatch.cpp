// Picks the kernel table of the active ISA (CPU features + cap).
#include "kernels/dispatch.h"

#include <atomic>
#include <cstdint>

#include "common/cpu_features.h"
#include "kernels/kernel_table.h"
#include "nvfp4/q4_base.h"

namespace q4 {

namespace {

// The levels whose kernel file is compiled in (CMake defines
// NVFP4_KERNELS_<LEVEL> for each), best first; scalar is always there.
struct CompiledIsa {
  int32_t isa;
  const kern::KernelTable& (*table)();
};
constexpr CompiledIsa kCompiled[] = {
#if defined(NVFP4_KERNELS_AVX512_VNNI)
    {Q4_ISA_AVX512_VNNI, kern::avx512_vnni_table},
#endif
#if defined(NVFP4_KERNELS_AVX512)
    {Q4_ISA_AVX512, kern::avx512_table},
#endif
#if defined(NVFP4_KERNELS_AVX_VNNI)
    {Q4_ISA_AVX_VNNI, kern::avx_vnni_table},
#endif
#if defined(NVFP4_KERNELS_AVX2)
    {Q4_ISA_AVX2, kern::avx2_table},
#endif
#if defined(NVFP4_KERNELS_NEON_I8MM)
    {Q4_ISA_NEON_I8MM, kern::neon_i8mm_table},
#endif
#if defined(NVFP4_KERNELS_NEON_DOTPROD)
    {Q4_ISA_NEON_DOTPROD, kern::neon_dotprod_table},
#endif
#if defined(NVFP4_KERNELS_NEON)
    {Q4_ISA_NEON, kern::neon_table},
#endif
    {Q4_ISA_SCALAR, kern::scalar_table},
};

}  // namespace

namespace kern {
bool avx512_vnni_decode_variant(bool vbmi, KernelTable* out) {
#if defined(NVFP4_KERNELS_AVX512_VNNI)
  *out = avx512_vnni_table_decode(vbmi);
  return true;
#else
  (void)vbmi;
  (void)out;
  return false;
#endif
}
bool avx512_chunk_k64_variant(int32_t max_m, KernelTable* out) {
#if defined(NVFP4_KERNELS_AVX512)
  *out = avx512_table_chunk_k64(max_m);
  return true;
#else
  (void)max_m;
  (void)out;
  return false;
#endif
}
bool avx512_quantize_far_variant(KernelTable* out) {
#if defined(NVFP4_KERNELS_AVX512)
  *out = avx512_table_quantize_far();
  return true;
#else
  (void)out;
  return false;
#endif
}
bool avx512_dequant16_variant(bool cvtne, KernelTable* out) {
#if defined(NVFP4_KERNELS_AVX512)
  *out = avx512_table_dequant16(cvtne);
  return true;
#else
  (void)cvtne;
  (void)out;
  return false;
#endif
}
}  // namespace kern

bool isa_compiled(int32_t isa) {
  for (const CompiledIsa& c : kCompiled) {
    if (c.isa == isa) return true;
  }
  return false;
}

namespace kern {

const KernelTable& table_for(int32_t isa) {
  for (const CompiledIsa& c : kCompiled) {
    if (c.isa == isa) return c.table();
  }
  return scalar_table();
}

namespace {
thread_local int32_t t_last_isa = -1;
}  // namespace

const KernelTable& active_table() {
  // (the table of the ISA last asked for, kept: table_for walks the
  // compiled list and calls the table's function each time)
  static std::atomic<const KernelTable*> kept{nullptr};
  const int32_t isa = active_isa();
  const KernelTable* t = kept.load(std::memory_order_acquire);
  if (t == nullptr || t->isa != isa) {
    t = &table_for(isa);
    kept.store(t, std::memory_order_release);
  }
  t_last_isa = t->isa;
  return *t;
}

int32_t last_isa_used() {
  return t_last_isa;
}

void note_isa_used(int32_t isa) {
  t_last_isa = isa;
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
  // The answer is a function of the cap alone (the CPU's features do not
  // change), and a product asks several times a call: the last cap and its
  // answer are kept, cap << 32 | isa (the search and its feature checks
  // had been about a fifth of a 16 x 16 linear's forward, 0.53 us).
  static std::atomic<uint64_t> kept{~uint64_t{0}};
  const int32_t cap = isa_cap();
  const uint64_t k = kept.load(std::memory_order_relaxed);
  if (k != ~uint64_t{0} && static_cast<int32_t>(k >> 32) == cap) return static_cast<int32_t>(k & 0xffffffffu);
  int32_t found = Q4_ISA_SCALAR;
  const CpuInfo& info = cpu_info();
  for (int32_t isa : kIsaPreference) {
    if (isa_rank(isa) <= isa_rank(cap) && isa_compiled(isa) && cpu_has_isa(info, isa)) {
      found = isa;
      break;
    }
  }
  kept.store(uint64_t{static_cast<uint32_t>(cap)} << 32 | static_cast<uint32_t>(found),
             std::memory_order_relaxed);
  return found;
}

}  // namespace q4
