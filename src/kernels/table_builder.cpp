// The one table builder: every entry an ISA file leaves null comes from the
// portable kernels, bound to that ISA's panel width. The scalar table is
// the builder applied to nothing. Compiled with the baseline flags.
#include "kernels/isa_common.h"
#include "kernels/kernel_table.h"
#include "kernels/portable.h"
#include "nvfp4/q4_base.h"

namespace q4::kern {
namespace {

template <int NR>
void nvfp4_panel(const NvWeights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  portable::nvfp4_panel_nr(w, n0, rows, k0, kc, panel, NR);
}
template <int NR>
void nf4_panel(const Nf4Weights& w, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  portable::nf4_panel_nr(w, n0, rows, k0, kc, panel, NR);
}
template <int NR>
void f32_panel(const float* w, int64_t ldw, int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
  portable::f32_panel_nr(w, ldw, n0, rows, k0, kc, panel, NR);
}

template <int NR>
void gemm_micro(const float* x, int64_t ldx, int32_t mr, const float* panel, int64_t kc, float* y,
                int64_t ldy, int32_t nr, bool accumulate) {
  float acc[kMaxMicroRows][NR] = {};
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float* p = panel + kk * NR;
    for (int32_t i = 0; i < mr; ++i) {
      const float xv = x[i * ldx + kk];
      for (int32_t r = 0; r < NR; ++r) acc[i][r] += xv * p[r];
    }
  }
  for (int32_t i = 0; i < mr; ++i) {
    for (int32_t r = 0; r < nr; ++r) y[i * ldy + r] = accumulate ? y[i * ldy + r] + acc[i][r] : acc[i][r];
  }
}

struct Scalar {
  using Reg = float;
  static constexpr int kLanes = 1;
  static float set1(float v) { return v; }
  static float fma(float a, float b, float c) { return a * b + c; }
  static float add(float a, float b) { return a + b; }
  static float sum(float a) { return a; }
};

template <int NR>
void fill_panel_entries(KernelTable& t) {
  if (t.nvfp4_panel == nullptr) t.nvfp4_panel = nvfp4_panel<NR>;
  if (t.nf4_panel == nullptr) t.nf4_panel = nf4_panel<NR>;
  if (t.f32_panel == nullptr) t.f32_panel = f32_panel<NR>;
  if (t.gemm_micro == nullptr) t.gemm_micro = gemm_micro<NR>;
}

}  // namespace

KernelTable complete_table(KernelTable t) {
  // A panel width or micro-kernel height the builder has no portable code
  // for is a programming error in an ISA file: the library never aborts, so
  // that ISA degrades to the scalar table (the kernel tests then fail, as
  // its table no longer reports its own ISA).
  const bool supported_nr =
      t.panel_nr == 4 || t.panel_nr == 8 || t.panel_nr == 16 || t.panel_nr == 32 || t.panel_nr == kMaxPanelNr;
  if (!supported_nr || t.micro_mr < 1 || t.micro_mr > kMaxMicroRows) return scalar_table();
  switch (t.panel_nr) {
    case 4:
      fill_panel_entries<4>(t);
      break;
    case 8:
      fill_panel_entries<8>(t);
      break;
    case 16:
      fill_panel_entries<16>(t);
      break;
    case 32:
      fill_panel_entries<32>(t);
      break;
    case 64:
      fill_panel_entries<kMaxPanelNr>(t);
      break;
    default:
      break;
  }
  if (t.nvfp4_gemv == nullptr) t.nvfp4_gemv = portable::nvfp4_gemv;
  if (t.nf4_gemv == nullptr) t.nf4_gemv = portable::nf4_gemv;
  if (t.nvfp4_small == nullptr) t.nvfp4_small = portable::nvfp4_small;
  if (t.nf4_small == nullptr) t.nf4_small = portable::nf4_small;
  if (t.nvfp4_quantize == nullptr) t.nvfp4_quantize = portable::nvfp4_quantize;
  if (t.nvfp4_dequantize == nullptr) t.nvfp4_dequantize = portable::nvfp4_dequantize;
  if (t.mxfp4_dequantize == nullptr) t.mxfp4_dequantize = portable::mxfp4_dequantize;
  if (t.nf4_dequantize == nullptr) t.nf4_dequantize = portable::nf4_dequantize;
  if (t.mxfp4_quantize == nullptr) t.mxfp4_quantize = portable::mxfp4_quantize;
  if (t.amax == nullptr) t.amax = portable::amax;
  if (t.nf4_quantize_blocks == nullptr) t.nf4_quantize_blocks = nf4_quantize_blocks;
  if (t.act_to_f32 == nullptr) t.act_to_f32 = load_row;
  if (t.f32_to_act == nullptr) t.f32_to_act = store_row;
  if (t.absmax_bits == nullptr) t.absmax_bits = portable::absmax_bits;
  if (t.fma_probe == nullptr) t.fma_probe = fma_probe<Scalar>;
  // Integer entries: an ISA's own pair, or the portable pair (then the
  // drivers use them only on the scalar table, see KernelTable::i8_native).
  // (A half-provided pair or a bad micro height is a programming error in
  // the ISA file: its integer entries are dropped for the portable pair.)
  if ((t.i8_pack_nvfp4 == nullptr) != (t.i8_micro == nullptr) ||
      (t.i8_micro != nullptr && (t.i8_micro_mr < 1 || t.i8_micro_mr > kI8MaxMicroRows))) {
    t.i8_pack_nvfp4 = nullptr;
    t.i8_micro = nullptr;
  }
  if (t.i8_micro == nullptr) {  // (only beside the ISA's own micro-kernel)
    t.i8_micro2 = nullptr;
    t.i8_micro_small = nullptr;
    t.i8_micro2_small = nullptr;
  }
  if (t.i8_micro2 == nullptr) t.i8_micro2_small = nullptr;
  if (t.i8_micro != nullptr || t.isa == Q4_ISA_SCALAR) t.i8_native = true;
  // (A table copied from a completed one carries its packer: compare with
  // the portable one rather than with null.)
  t.i8_nf4_panel_native =
      t.i8_native &&
      ((t.i8_pack_nf4 != nullptr && t.i8_pack_nf4 != portable::i8_pack_nf4) || t.isa == Q4_ISA_SCALAR);
  if (t.i8_pack_nf4 == nullptr) t.i8_pack_nf4 = portable::i8_pack_nf4;
  if (t.exact_isa < 0) t.exact_isa = t.isa;
  if (t.i8_probe == nullptr) t.i8_probe = portable::i8_probe;
  if (t.i8_quantize_act == nullptr) t.i8_quantize_act = i8_activations_quantize;
  if (t.i8_micro == nullptr) {
    t.i8_pack_nvfp4 = portable::i8_pack_nvfp4;
    t.i8_micro = portable::i8_micro;
    t.i8_micro_mr = kI8MaxMicroRows;
  }
  return t;
}

const KernelTable& scalar_table() {
  static const KernelTable t = complete_table([] {
    KernelTable f;
    f.isa = Q4_ISA_SCALAR;
    f.panel_nr = 8;
    f.micro_mr = 4;
    return f;
  }());
  return t;
}

}  // namespace q4::kern
