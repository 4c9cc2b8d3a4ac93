// MXFP4 operations on the CPU (mxfp4.h): the codec multi-threaded over rows
// with the library's pool, the products on the E2M1 (NVFP4) kernels. The format math is formats/mxfp4.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "core/cuda_backend.h"
#include "core/mxfp4.h"
#include "core/op_helpers.h"
#include "core/ops.h"
#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/cpu_ops.h"
#include "kernels/kernel_table.h"
#include "kernels/portable.h"

namespace q4::core {
namespace {

constexpr int64_t kRowsPerTask = 16;  // the least rows of a scale-mapping task

}  // namespace

void mxfp4_decode(const Mxfp4Operand& op, int32_t threads, float* dst) {
  mxfp4_decode(op, threads, kern::FloatOut{dst, kern::FType::F32});
}

void mxfp4_decode(const Mxfp4Operand& op, int32_t threads, kern::FloatOut dst) {
  const int64_t rows = op.rows, k = op.k, cols = k / fmt::kMxBlock;
  if (rows == 0 || k == 0) return;
  std::vector<uint8_t> lin;
  const uint8_t* s = op.s.data;
  if (op.layout == Q4_SCALE_SWIZZLED) {
    lin.resize(static_cast<size_t>(rows * cols));
    kern::unswizzle_scales_parallel(op.s.data, rows, cols, lin.data(), threads);
    s = lin.data();
  }
  const uint8_t* q = op.q.data;
  const kern::KernelTable& kt = kern::active_table();
  const bool bf16 = dst.type == kern::FType::BF16;
  kern::blocks_to_output(
      kt, rows * k, fmt::kMxBlock, dst, threads,
      [&](int64_t e0, int64_t len, float* d) {
        kt.mxfp4_dequantize(q + e0 / 2, s + e0 / fmt::kMxBlock, 1, len, d);
      },
      kt.mxfp4_dequantize16 == nullptr
          ? kern::Fill16{}
          : kern::Fill16([&](int64_t e0, int64_t len, uint16_t* d) {
              kt.mxfp4_dequantize16(q + e0 / 2, s + e0 / fmt::kMxBlock, 1, len, d, bf16);
            }));
}

namespace {

// Whether the 16 bytes of a block of 32 codes hold only +-0.
bool zero_codes(const uint8_t* qb) {
  for (int32_t j = 0; j < fmt::kMxBlock / 2; ++j) {
    if ((qb[j] & 0x77u) != 0) return false;
  }
  return true;
}

std::string block_at(int64_t at, int64_t cols) {
  return "row " + std::to_string(at / cols) + ", block " + std::to_string(at % cols);
}

// out[2i] = out[2i+1] = the E4M3 byte of in[i] under t (n bytes,
// kern::e8m0_to_e4m3); true when some byte is outside the window (written
// as 0xFF). `normal`: the caller knows every byte maps to a normal E4M3, so
// none is.
bool e8m0_to_e4m3_pairs(const uint8_t* in, int64_t n, int32_t t, bool normal, uint8_t* out) {
  kern::e8m0_to_e4m3(in, n, t, out);
  return !normal && std::find(out, out + 2 * n, uint8_t{0xff}) != out + 2 * n;
}

// Rows per task of the passes over the scales below: whole groups of 16
// rows holding about kScaleTaskBytes scale bytes. (Tasks of 16 rows were
// 180 tasks for gpt-oss's 2880 x 2880, whose 90-byte rows take a few
// dozen nanoseconds each: the threads then spent the pass claiming tasks
// from one shared counter.)
constexpr int64_t kScaleTaskBytes = int64_t{64} << 10;
int64_t scale_task_rows(int64_t cols) {
  return std::max<int64_t>(kRowsPerTask, kScaleTaskBytes / std::max<int64_t>(cols, 1) / 16 * 16);
}

// Pass 1 of the mapping: the smallest and largest scale byte per task of
// `per` rows (branch-free, vectorized; a largest byte of 0xFF means a NaN
// scale there).
void byte_ranges(const uint8_t* s, int64_t rows, int64_t cols, int64_t per, int32_t threads,
                 std::vector<int32_t>& lo, std::vector<int32_t>& hi) {
  const int64_t tasks = (rows + per - 1) / per;
  lo.assign(static_cast<size_t>(tasks), 255);
  hi.assign(static_cast<size_t>(tasks), -1);
  parallel_for(tasks, threads, [&](int64_t task) {
    const int64_t b0 = task * per * cols, b1 = std::min(rows, (task + 1) * per) * cols;
    uint8_t l = 255, h = 0;
    kern::byte_range(s + b0, b1 - b0, &l, &h);
    lo[static_cast<size_t>(task)] = l;
    hi[static_cast<size_t>(task)] = h;
  });
}

}  // namespace

void e8m0_byte_range(const uint8_t* s, int64_t rows, int64_t cols, int32_t threads, int32_t* lo,
                     int32_t* hi) {
  std::vector<int32_t> l, h;
  byte_ranges(s, rows, cols, scale_task_rows(cols), threads, l, h);
  *lo = *std::min_element(l.begin(), l.end());
  *hi = *std::max_element(h.begin(), h.end());
}

namespace {

// Whether every byte of linear E8M0 scales [rows, cols] maps into one
// window (no NaN, the smallest byte inside the window of the largest), and
// then its global exponent *t. False: the full mapping
// (mxfp4_to_nvfp4_scales) says why, or takes the zero-code blocks out.
// known_lo / known_hi >= 0: the bytes' range, measured by validation
// (Mxfp4Operand::byte_lo), so no pass here.
bool scales_in_window(const uint8_t* s, int64_t rows, int64_t cols, int32_t threads, int32_t known_lo,
                      int32_t known_hi, int32_t* t) {
  int32_t e_lo = known_lo, e_hi = known_hi;
  if (e_lo < 0 || e_hi < 0) e8m0_byte_range(s, rows, cols, threads, &e_lo, &e_hi);
  if (e_hi == static_cast<int32_t>(fmt::kE8M0NaN)) return false;
  *t = fmt::mx_nv_global_exponent(static_cast<uint32_t>(e_hi));
  return fmt::mx_nv_scale_byte(static_cast<uint32_t>(e_lo), *t) >= 0;
}

}  // namespace

std::string mxfp4_to_nvfp4_scales(const Mxfp4Operand& op, int32_t threads, uint8_t* s16, int32_t* t) {
  const int64_t rows = op.rows, k = op.k, cols = k / fmt::kMxBlock;
  *t = 0;
  if (rows == 0 || cols == 0) return "";
  std::vector<uint8_t> lin;
  const uint8_t* s = op.s.data;
  if (op.layout == Q4_SCALE_SWIZZLED) {
    lin.resize(static_cast<size_t>(rows * cols));
    kern::unswizzle_scales_parallel(op.s.data, rows, cols, lin.data(), threads);
    s = lin.data();
  }
  const uint8_t* q = op.q.data;
  const int64_t per = scale_task_rows(cols), tasks = (rows + per - 1) / per;
  std::vector<int32_t> lo, hi;
  byte_ranges(s, rows, cols, per, threads, lo, hi);
  auto task_blocks = [&](int64_t task, int64_t* b0, int64_t* b1) {
    *b0 = task * per * cols;
    *b1 = std::min(rows, (task + 1) * per) * cols;
  };
  for (int64_t task = 0; task < tasks; ++task) {
    if (hi[task] == static_cast<int32_t>(fmt::kE8M0NaN)) {
      int64_t b0 = 0, b1 = 0;
      task_blocks(task, &b0, &b1);
      const int64_t at = std::find(s + b0, s + b1, static_cast<uint8_t>(fmt::kE8M0NaN)) - s;
      return "E8M0 scale byte 0xFF (NaN) at " + block_at(at, cols) +
             ": the E2M1 kernels run finite scales only";
    }
  }
  const int32_t e_lo = *std::min_element(lo.begin(), lo.end());
  int32_t e_hi = *std::max_element(hi.begin(), hi.end());
  *t = fmt::mx_nv_global_exponent(static_cast<uint32_t>(e_hi));
  const bool fits = fmt::mx_nv_scale_byte(static_cast<uint32_t>(e_lo), *t) >= 0;
  if (!fits) {
    // Blocks whose codes are all +-0 are 0 at any scale: they take the E4M3
    // scale 0 and leave the window to the others. (Rare: the scalar scan.)
    parallel_for(tasks, threads, [&](int64_t task) {
      int64_t b0 = 0, b1 = 0;
      task_blocks(task, &b0, &b1);
      int32_t h = -1;
      for (int64_t b = b0; b < b1; ++b) {
        if (!zero_codes(q + b * (fmt::kMxBlock / 2))) h = std::max<int32_t>(h, s[b]);
      }
      hi[task] = h;
    });
    e_hi = *std::max_element(hi.begin(), hi.end());
    *t = e_hi < 0 ? 0 : fmt::mx_nv_global_exponent(static_cast<uint32_t>(e_hi));
  }
  // Pass 2: each E8M0 byte's E4M3 byte under t, written twice (a loop of
  // selects the compiler vectorizes; it was a table lookup per byte through
  // captured references, 0.3 ms of a 4096^2 GEMV), then the blocks outside
  // the window: zero blocks take scale 0, the first other one is the error.
  const int32_t tt = *t;
  // Every byte of the plain range maps to a normal E4M3 (the common case:
  // the window's 15 normal binades cover the weight's scales).
  const bool all_normal = fits && e_lo - fmt::kE8M0Bias - tt >= -6;
  std::vector<int64_t> bad_at(static_cast<size_t>(tasks), -1);
  parallel_for(tasks, threads, [&](int64_t task) {
    int64_t b0 = 0, b1 = 0;
    task_blocks(task, &b0, &b1);
    if (!e8m0_to_e4m3_pairs(s + b0, b1 - b0, tt, all_normal, s16 + 2 * b0)) return;
    for (int64_t b = b0; b < b1; ++b) {
      if (fmt::mx_nv_scale_byte_u8(s[b], tt) != 0xff) continue;
      if (!zero_codes(q + b * (fmt::kMxBlock / 2))) {
        if (bad_at[task] < 0) bad_at[task] = b;
        continue;
      }
      s16[2 * b] = 0;
      s16[2 * b + 1] = 0;
    }
  });
  for (int64_t task = 0; task < tasks; ++task) {
    if (bad_at[task] >= 0) {
      const int32_t e = s[bad_at[task]] - fmt::kE8M0Bias;
      return "the block scales span more than the " + std::to_string(fmt::kNvWindowBinades) +
             " binades E4M3 holds under one global scale (" + block_at(bad_at[task], cols) + " has 2^" +
             std::to_string(e) + ", the largest nonzero block 2^" + std::to_string(e_hi - fmt::kE8M0Bias) +
             ")";
    }
  }
  return "";
}

CpuPath mxfp4_cpu_path(const ResolvedOptions& o) {
  if (o.backend == Q4_BACKEND_NF4_KERNEL) {
    fail(Q4_ERR_UNSUPPORTED, "opts->backend",
         "backend nf4-kernel cannot run MXFP4 data (MXFP4 runs on the E2M1 kernels: backend auto or "
         "nvfp4-kernel)");
  }
  const CpuPath path = choose_cpu_path(o, Q4_FORMAT_NVFP4);  // the E2M1 kernels' rules
  check_math_mode(o, path);
  return path;
}

std::string prepare_mxfp4(PreparedWeight& w, const Mxfp4Operand& op, int32_t threads,
                          const std::shared_ptr<SessionCounters>& counters, CpuPath path, bool copy,
                          int32_t compute_path, const char* name) {
  w.format = Q4_FORMAT_MXFP4;
  w.n = op.rows;
  w.k = op.k;
  w.storage.clear();
  w.dequant = nullptr;
  w.e8m0 = nullptr;
  std::string why;
  if (path == CpuPath::Kernel && !copy && op.rows > 0 && op.k > 0) {
    // A borrowed weight (a stateless product) whose scales all map: no E4M3
    // copy; the kernels read the E8M0 bytes in place (swizzled ones
    // unswizzled first), or the drivers make E4M3 codes piece by piece.
    const int64_t cols = op.k / fmt::kMxBlock;
    const uint8_t* s = op.s.data;
    if (op.layout == Q4_SCALE_SWIZZLED) {
      uint8_t* lin = allocate(w, counters, op.rows * cols);
      kern::unswizzle_scales_parallel(op.s.data, op.rows, cols, lin, threads);
      s = lin;
    }
    int32_t t = 0;
    const bool known = op.layout == Q4_SCALE_LINEAR;  // (validation's range is of the bytes as given)
    if (scales_in_window(s, op.rows, cols, threads, known ? op.byte_lo : -1, known ? op.byte_hi : -1, &t)) {
      w.path = CpuPath::Kernel;
      w.q = op.q.data;
      w.s = nullptr;
      w.g = fmt::pow2_f32(t);
      w.e8m0 = s;
      w.e8m0_t = t;
      return "";
    }
    w.storage.clear();
  }
  if (path == CpuPath::Kernel) {
    auto* s16 = allocate(w, counters, checked_mul(op.rows, op.k / 16, name));
    int32_t t = 0;
    why = mxfp4_to_nvfp4_scales(op, threads, s16, &t);
    if (why.empty()) {
      w.path = CpuPath::Kernel;
      w.s = s16;
      w.g = fmt::pow2_f32(t);
      if (copy) {
        bool reused = false;
        uint8_t* q = allocate(w, counters, op.rows * (op.k / 2), &reused);
        copy_bytes(q, op.q.data, op.rows * (op.k / 2), threads, reused);
        w.q = q;
      } else {
        w.q = op.q.data;
      }
      return "";
    }
    if (compute_path == Q4_PATH_KERNEL_ONLY) {
      fail(Q4_ERR_UNSUPPORTED, name, "KernelOnly: this MXFP4 weight cannot run on the E2M1 kernels: " + why);
    }
    w.storage.clear();
    log_message(Q4_LOG_INFO, std::string("MXFP4 product falls back to dequant-matmul: ") + why);
  }
  auto* d = reinterpret_cast<float*>(allocate(w, counters, checked_mul(op.rows * op.k, 4, name)));
  mxfp4_decode(op, threads, d);
  w.path = CpuPath::DequantMatmul;
  w.dequant = d;
  w.q = nullptr;
  w.s = nullptr;
  w.g = 1.0f;
  return why;
}

void run_mxfp4(const Mxfp4QuantizeDesc& d) {
  if (d.ctx.place == Place::Device) {  // the CUDA plugin's MXFP4 ops
    cuda::run(d);
    return;
  }
  if (d.x.numel == 0) return;
  // One pass over x with the finite check fused into the block maxima
  // (validate_mxfp4_quantize leaves it to here; nothing is written when it
  // fails), fp16/bf16 rows converted a task's rows at a time in cache.
  const int64_t rows = d.dst.rows, k = d.dst.k, cols = k / fmt::kMxBlock;
  std::vector<uint8_t> lin;
  uint8_t* s = d.dst.s.data;
  if (d.dst.layout == Q4_SCALE_SWIZZLED) {
    lin.resize(static_cast<size_t>(rows * cols));
    s = lin.data();
  }
  const int64_t bad =
      kern::quantize_mxfp4_checked(kern::active_table(), kern::ActRows(d.x.data, ftype_of(d.x)), rows, k,
                                   d.dst.q.data, s, d.ctx.opts.num_threads);
  if (bad >= 0) {
    fail(Q4_ERR_NON_FINITE, d.x.name, "non-finite value (NaN or Inf) at flat index " + std::to_string(bad));
  }
  if (d.dst.layout == Q4_SCALE_SWIZZLED)
    kern::swizzle_scales_parallel(lin.data(), rows, cols, d.dst.s.data, d.ctx.opts.num_threads);
}

void run_mxfp4(const Mxfp4DequantizeDesc& d) {
  if (d.ctx.place == Place::Device) {  // the CUDA plugin's MXFP4 ops
    cuda::run(d);
    return;
  }
  if (d.out.numel == 0) return;
  const int32_t threads = d.ctx.opts.num_threads;
  mxfp4_decode(d.src, threads, as_output(d.out));
}

void run_mxfp4(const Mxfp4ProductDesc& d) {
  if (d.ctx.place == Place::Device) {  // the CUDA plugin's MXFP4 ops
    cuda::run(d);
    return;
  }
  if (d.out.numel == 0) return;
  const int32_t threads = d.ctx.opts.num_threads;
  const CpuPath path = mxfp4_cpu_path(d.ctx.opts);
  // The product path's descriptor: the weight in its ready form (the NVFP4
  // form on the kernels, else its fp32 decode), float activations or
  // (scaled_mm) A in the NVFP4 form too, else decoded exactly into fp32.
  ProductDesc p;
  p.ctx = d.ctx;
  p.format = Q4_FORMAT_MXFP4;
  p.m = d.m;
  p.n = d.n;
  p.k = d.k;
  p.bias = d.bias;
  p.out = d.out;
  p.alpha = d.alpha;
  PreparedWeight w;
  if (d.k > 0) {
    prepare_mxfp4(w, d.w, threads, nullptr, path, false, d.ctx.opts.compute_path,
                  d.w4a4 ? "b_scale" : "w_scale");
  } else {
    w.format = Q4_FORMAT_MXFP4;
    w.n = d.n;
    w.path = CpuPath::DequantMatmul;
  }
  p.path = w.path;
  std::vector<float> act;
  std::vector<uint8_t> a16;
  int64_t act_shape[2] = {d.m, d.k};
  if (!d.w4a4) {
    p.x = d.x;
  } else {
    bool a_done = false;
    if (w.path == CpuPath::Kernel && d.k > 0) {
      // Both operands in the NVFP4 form; their global scales fold into
      // alpha (powers of two: exact while alpha * 2^(ta + tb) is an fp32).
      a16.resize(static_cast<size_t>(d.m * (d.k / 16)));
      int32_t ta = 0;
      std::string why = mxfp4_to_nvfp4_scales(d.a, threads, a16.data(), &ta);
      if (why.empty()) {
        const double folded = static_cast<double>(d.alpha) * std::ldexp(1.0, ta) * static_cast<double>(w.g);
        const auto f = static_cast<float>(folded);
        if (std::isfinite(f) && static_cast<double>(f) == folded && (f != 0.0f || d.alpha == 0.0f)) {
          p.w4a4 = true;
          p.alpha = f;
          w.g = 1.0f;
          p.a.q = d.a.q;
          p.a.s = d.a.s;
          p.a.s.data = a16.data();
          p.a.s.nbytes = static_cast<int64_t>(a16.size());
          p.a.layout = Q4_SCALE_LINEAR;
          p.a.rows = d.m;
          p.a.k = d.k;
          p.a.g = 1.0f;
          a_done = true;
        } else {
          why = "alpha * 2^" + std::to_string(ta) + " * the weight's global scale is not an fp32";
        }
      }
      if (!a_done && d.ctx.opts.compute_path == Q4_PATH_KERNEL_ONLY) {
        fail(Q4_ERR_UNSUPPORTED, "a_scale", "KernelOnly: A cannot run on the E2M1 kernels: " + why);
      }
    }
    if (!a_done) {
      // A decoded exactly into fp32, times the weight's ready form.
      act.resize(static_cast<size_t>(d.m * d.k));
      mxfp4_decode(d.a, threads, act.data());
      p.x.name = "a_qdata";
      p.x.data = reinterpret_cast<uint8_t*>(act.data());
      p.x.type = ElemType::F32;
      p.x.ndim = 2;
      p.x.shape = act_shape;
      p.x.numel = d.m * d.k;
      p.x.nbytes = d.m * d.k * 4;
      p.x.device = DLDevice{kDLCPU, 0};
    }
  }
  run_host_product(w, p);
}

namespace {

// Rows [r0, r0 + rows) of a validated compact float tensor [T, C], as a
// [rows, C] view (shape kept in `shape`).
TensorRef row_slice(const TensorRef& t, int64_t cols, int64_t r0, int64_t rows, int64_t* shape) {
  const int64_t elem = t.type == ElemType::F32 ? 4 : 2;
  TensorRef v = t;
  shape[0] = rows;
  shape[1] = cols;
  v.data = t.data + r0 * cols * elem;
  v.ndim = 2;
  v.shape = shape;
  v.numel = rows * cols;
  v.nbytes = rows * cols * elem;
  return v;
}

}  // namespace

void run_mxfp4(const Mxfp4ExpertsDesc& d) {
  if (d.ctx.place == Place::Device) {  // the CUDA plugin's MXFP4 ops
    cuda::run(d);
    return;
  }
  if (d.out.numel == 0) return;
  const int32_t threads = d.ctx.opts.num_threads;
  const int64_t q_bytes = d.n * (d.k / 2);
  const CpuPath path = mxfp4_cpu_path(d.ctx.opts);
  PreparedWeight w;  // the ready form of the last expert prepared (its codes borrowed)
  int32_t decoded = -1;
  int64_t r0 = 0;
  for (int64_t g = 0; g < d.n_groups; ++g) {
    const int64_t rows = d.group_rows[g];
    const int32_t e = d.expert_of_group[g];
    if (rows == 0) continue;
    if (e != decoded) {
      // Expert e's bytes in place: a view into the stack, no copy of the
      // packed codes (scratch: its E4M3 scales, or its fp32 decode when it
      // falls back).
      Mxfp4Operand op;
      op.layout = d.w.layout;
      op.rows = d.n;
      op.k = d.k;
      op.q = d.w.q;
      op.q.data = d.w.q.data + e * q_bytes;
      op.q.nbytes = q_bytes;
      op.s = d.w.s;
      op.s.data = d.w.s.data + e * d.expert_scale_bytes;
      op.s.nbytes = d.expert_scale_bytes;
      w = PreparedWeight{};
      if (d.k > 0) {
        prepare_mxfp4(w, op, threads, nullptr, path, false, d.ctx.opts.compute_path, "w_scale");
      } else {
        w.format = Q4_FORMAT_MXFP4;
        w.n = d.n;
        w.path = CpuPath::DequantMatmul;
      }
      decoded = e;
    }
    ProductDesc p;
    p.ctx = d.ctx;
    p.format = Q4_FORMAT_MXFP4;
    p.m = rows;
    p.n = d.n;
    p.k = d.k;
    p.path = w.path;
    int64_t x_shape[2], out_shape[2];
    p.x = row_slice(d.x, d.k, r0, rows, x_shape);
    p.out = row_slice(d.out, d.n, r0, rows, out_shape);
    if (d.bias.present) {
      p.bias = d.bias;
      const int64_t elem = d.bias.ref.type == ElemType::F32 ? 4 : 2;
      p.bias.ptr.data = d.bias.ref.data + static_cast<int64_t>(e) * d.n * elem;
    }
    run_host_product(w, p);
    r0 += rows;
  }
}

// The stateless entry points (core/ops.h): validate once, then run.
void mxfp4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* scale, int32_t layout,
                    const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_quantize(x, qdata, scale, layout, opts));
}

void mxfp4_dequantize(const DLTensor* qdata, const DLTensor* scale, int32_t layout, DLTensor* out,
                      const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_dequantize(qdata, scale, layout, out, opts));
}

void mxfp4_linear(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale, int32_t layout,
                  const DLTensor* bias, DLTensor* out, const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_linear(x, w_qdata, w_scale, layout, bias, out, opts));
}

void mxfp4_scaled_mm(const DLTensor* a_qdata, const DLTensor* a_scale, const DLTensor* b_qdata,
                     const DLTensor* b_scale, int32_t layout, float alpha, const DLTensor* bias,
                     DLTensor* out, const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_scaled_mm(a_qdata, a_scale, b_qdata, b_scale, layout, alpha, bias, out, opts));
}

void mxfp4_linear_experts(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale, int32_t layout,
                          const int32_t* expert_of_group, const int64_t* group_rows, int64_t n_groups,
                          const DLTensor* bias, DLTensor* out, const Q4_op_options* opts) {
  run_mxfp4(validate_mxfp4_linear_experts(x, w_qdata, w_scale, layout, expert_of_group, group_rows, n_groups,
                                          bias, out, opts));
}

}  // namespace q4::core
