// AVX-VNNI level (VEX-encoded vpdpbusd on ymm, e.g. Alder Lake and later
// client cores without AVX-512): the AVX2 table with the integer block dot
// products on vpdpbusd. Compiled with its own flags; only called after
// CPUID + XGETBV confirmed AVX2/FMA/F16C + AVX-VNNI.
#include <immintrin.h>

#include "kernels/avx2/int8_gemv_avx2.h"
#include "kernels/kernel_table.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {

const KernelTable& avx_vnni_table() {
  static const KernelTable t = complete_table([] {
    // Every fp32 kernel (and the panel packers) is the AVX2 table's; this
    // level adds the VNNI integer kernels.
    KernelTable f = avx2_table();
    f.isa = Q4_ISA_AVX_VNNI;
    f.i8_fast_max_m = 0;  // the VNNI micro-kernel beats exact at every M measured
    f.exact_isa = Q4_ISA_AVX2;
    f.i8_micro = i8_micro_avxvnni;
    f.i8_micro_small = nullptr;  // (vpdpbusd widens as it adds)
    f.i8_micro_mr = kI8MRVnni256;
    f.i8_probe = i8_probe_avxvnni;
    f.i8_gemv_nvfp4 = i8_gemv_nvfp4_or_mx<true>;
    f.i8_gemv_nf4 = i8_gemv_nf4_avx2<true>;
    // The AVX2 table's GEMV window (16 rows of x) was measured without
    // VNNI; this table keeps the panels above kI8GemvMaxRows until it is
    // measured on such a CPU.
    f.i8_gemv_max_m = kI8GemvMaxRows;
    return f;
  }());
  return t;
}

}  // namespace q4::kern
