// AVX-512 VNNI level: the AVX-512 table with the integer block
// dot products on vpdpbusd. Compiled with its own flags; only called after
// CPUID + XGETBV confirmed AVX-512 F/BW/VL/DQ + VNNI (no VBMI needed:
// Cascade Lake has VNNI without it).
#include <immintrin.h>

#include "kernels/avx512/int8_avx512.h"
#include "kernels/kernel_table.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {

namespace {

// The integer GEMVs: row prefetch into L2 or L1 (to_l2: rows_to_l2) and
// the nibble decode by vpermb or vpshufb (vbmi: i8_nibble_values).
void set_i8_gemvs(KernelTable& f, bool to_l2, bool vbmi) {
  f.i8_gemv_nvfp4 = to_l2 ? (vbmi ? i8_gemv_avx512<true, true, true> : i8_gemv_avx512<true, true, false>)
                          : (vbmi ? i8_gemv_avx512<true, false, true> : i8_gemv_avx512<true, false, false>);
  f.i8_gemv_nf4 =
      to_l2 ? (vbmi ? i8_gemv_nf4_avx512<true, true, true> : i8_gemv_nf4_avx512<true, true, false>)
            : (vbmi ? i8_gemv_nf4_avx512<true, false, true> : i8_gemv_nf4_avx512<true, false, false>);
}

}  // namespace

const KernelTable& avx512_vnni_table() {
  static const KernelTable t = complete_table([] {
    // Every fp32 kernel is the AVX-512 table's (a VNNI CPU runs them); this
    // level adds only the integer kernels.
    KernelTable f = avx512_table();
    f.isa = Q4_ISA_AVX512_VNNI;
    f.i8_pack_nvfp4 = i8_pack_nvfp4_avx512;
    f.i8_micro = i8_micro_avx512<true>;
    f.i8_micro_mr = kI8MR<true>;
    f.i8_micro2 = i8_micro2_avx512<true>;
    f.i8_micro_small = nullptr;  // (vpdpbusd widens as it adds)
    f.i8_micro2_small = nullptr;
    f.i8_probe = i8_probe_avx512<true>;
    set_i8_gemvs(f, rows_to_l2(), cpu_has_vbmi());  // chosen once for this CPU
    f.i8_pack_nf4 = i8_pack_nf4_avx512;
    f.i8_gemv_max_m = kI8DirectMaxRows;
    f.i8_reads_tiles = true;        // i8_gemv_direct, every m
    f.i8_reads_tile_scales = true;  // (I8zNvfp4)
    f.i8_reads_tile_absmax = true;  // (I8zNf4)
    f.i8_tile_group = i8_tile_group_avx512;
    f.i8_tile_scale_group = i8_tile_scale_group_avx512;
    return f;
  }());
  return t;
}

KernelTable avx512_vnni_table_decode(bool vbmi) {
  KernelTable t = avx512_vnni_table();
  set_i8_gemvs(t, rows_to_l2(), vbmi);
  return t;
}

}  // namespace q4::kern
