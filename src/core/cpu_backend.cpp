#include "core/cpu_backend.h"

#include <string>
#include <vector>

#include "common/error.h"
#include "core/product.h"
#include "formats/codec.h"
#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"
#include "kernels/portable.h"

namespace q4::core::cpu {

void run(const Nvfp4QuantizeDesc& d) {
  const float g = d.dst.g;
  if (d.x.numel == 0) {  // nothing to quantize (the swizzled buffer is then empty too)
    if (d.g_out != nullptr) *d.g_out = g > 0.0f ? g : 1.0f;
    return;
  }
  const int32_t threads = d.ctx.opts.num_threads;
  const kern::KernelTable& kt = kern::active_table();
  const int64_t rows = d.dst.rows, k = d.dst.k;
  // Finite check fused into the quantization's passes (validate before
  // write: on a NaN/Inf nothing is written; see quantize_nvfp4_checked);
  // fp16/bf16 rows converted inside those passes, a task's rows at a time.
  const kern::ActRows x(d.x.data, ftype_of(d.x));
  std::vector<uint8_t> lin;
  uint8_t* s = d.dst.s.data;
  if (d.dst.layout != Q4_SCALE_LINEAR) {
    lin.resize(static_cast<size_t>(rows * (k / 16)));
    s = lin.data();
  }
  float used_g = 0.0f;
  const int64_t bad = kern::quantize_nvfp4_checked(kt, x, rows, k, g, &used_g, d.dst.q.data, s, threads);
  if (bad >= 0) {
    fail(Q4_ERR_NON_FINITE, d.x.name, "non-finite value (NaN or Inf) at flat index " + std::to_string(bad));
  }
  if (d.dst.layout != Q4_SCALE_LINEAR)
    kern::swizzle_scales_parallel(lin.data(), rows, k / 16, d.dst.s.data, threads);
  if (d.g_out != nullptr) *d.g_out = used_g;
}

void run(const Nvfp4DequantizeDesc& d) {
  if (d.out.numel == 0) return;
  const int32_t threads = d.ctx.opts.num_threads;
  PreparedWeight w;
  prepare_nvfp4(w, d.src, false, nullptr, threads);
  kern::dequantize_nvfp4(kern::active_table(), w.q, w.s, w.g, w.n, w.k, as_output(d.out), threads);
}

void run(const Nf4QuantizeDesc& d) {
  // The finite check is fused into the pass (validate_nf4_quantize leaves it
  // to here); nothing is written when it fails.
  const int64_t bad = kern::nf4_quantize(kern::active_table(), as_input(d.x), d.numel, d.blocksize, d.q.data,
                                         reinterpret_cast<float*>(d.absmax.data), d.ctx.opts.num_threads);
  if (bad >= 0) {
    fail(Q4_ERR_NON_FINITE, d.x.name, "non-finite value (NaN or Inf) at flat index " + std::to_string(bad));
  }
}

void run(const Nf4DequantizeDesc& d) {
  kern::nf4_dequantize(kern::active_table(), d.src.q.data, d.src.state.stats, d.src.numel, as_output(d.out),
                       d.ctx.opts.num_threads);
}

void run(const ProductDesc& d) {
  if (d.out.numel == 0) return;
  PreparedWeight w;
  borrow_weight(w, d);
  run_host_product(w, d);
}

}  // namespace q4::core::cpu
