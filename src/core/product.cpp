#include "core/product.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/thread_pool.h"
#include "core/tuner.h"
#include "formats/codec.h"
#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"
#include "kernels/portable.h"

namespace q4::core {

int64_t PreparedWeight::bytes() const {
  int64_t b = 0;
  for (const auto& buf : storage) b += buf->size();
  return b;
}

std::unique_ptr<Buffer> take_buffer(PreparedWeight& w, const std::shared_ptr<SessionCounters>& counters,
                                    int64_t bytes, bool* reused) {
  for (auto it = w.reuse.begin(); it != w.reuse.end(); ++it) {
    if ((*it)->size() == bytes && (*it)->memory() == Memory::Host) {
      std::unique_ptr<Buffer> b = std::move(*it);
      w.reuse.erase(it);
      if (reused != nullptr) *reused = true;
      return b;
    }
  }
  if (reused != nullptr) *reused = false;
  return std::make_unique<Buffer>(counters, bytes);
}

uint8_t* allocate(PreparedWeight& w, const std::shared_ptr<SessionCounters>& counters, int64_t bytes,
                  bool* reused) {
  w.storage.push_back(take_buffer(w, counters, bytes, reused));
  return w.storage.back()->data();
}

void copy_bytes(uint8_t* dst, const uint8_t* src, int64_t bytes, int32_t threads, bool stream) {
  constexpr int64_t kPiece = int64_t{1} << 20;
  if (bytes < 4 * kPiece) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return;
  }
  // (stream: see docs/performance.md's sixty-third session)
  parallel_for((bytes + kPiece - 1) / kPiece, threads, [&](int64_t i) {
    const int64_t at = i * kPiece, len = std::min(kPiece, bytes - at);
    if (stream) {
      kern::stream_copy(dst + at, src + at, len);
    } else {
      std::memcpy(dst + at, src + at, static_cast<size_t>(len));
    }
  });
}

void finish_copies(PreparedWeight& w, int32_t threads) {
  for (PreparedWeight::PendingCopy* p : {&w.q_copy, &w.s_copy}) {
    if (p->dst != nullptr) copy_bytes(p->dst, p->src, p->bytes, threads, p->reused);
    *p = PreparedWeight::PendingCopy{};
  }
}

namespace {

// The caller's bytes themselves, or a copy owned by w (made now, or left
// in `pending` with w.defer_copies).
const uint8_t* own_or_borrow(PreparedWeight& w, const uint8_t* src, int64_t bytes, bool copy,
                             const std::shared_ptr<SessionCounters>& counters, int32_t threads,
                             PreparedWeight::PendingCopy& pending) {
  if (!copy) return src;
  bool reused = false;
  uint8_t* dst = allocate(w, counters, bytes, &reused);
  if (w.defer_copies) {
    pending = PreparedWeight::PendingCopy{dst, src, bytes, reused};
  } else {
    copy_bytes(dst, src, bytes, threads, reused);
  }
  return dst;
}

}  // namespace

void prepare_nvfp4(PreparedWeight& w, const Nvfp4Operand& op, bool copy,
                   const std::shared_ptr<SessionCounters>& counters, int32_t threads, bool keep_swizzled) {
  w.format = Q4_FORMAT_NVFP4;
  w.n = op.rows;
  w.k = op.k;
  w.g = op.g;
  const int64_t sbytes = op.rows * (op.k / 16);
  w.q = own_or_borrow(w, op.q.data, op.rows * (op.k / 2), copy, counters, threads, w.q_copy);
  if (op.layout == Q4_SCALE_LINEAR && !copy) {
    w.s = op.s.data;
    return;
  }
  if (keep_swizzled && !copy) {
    w.s = nullptr;
    w.swizzled = op.s.data;
    return;
  }
  bool reused = false;
  uint8_t* s = allocate(w, counters, sbytes, &reused);
  if (op.layout == Q4_SCALE_LINEAR && w.defer_copies) {
    w.s_copy = PreparedWeight::PendingCopy{s, op.s.data, sbytes, reused};
  } else if (op.layout == Q4_SCALE_LINEAR) {
    copy_bytes(s, op.s.data, sbytes, threads, reused);
  } else {
    kern::unswizzle_scales_parallel(op.s.data, op.rows, op.k / 16, s, threads);
  }
  w.s = s;
}

void prepare_nf4(PreparedWeight& w, const Nf4Operand& op, int64_t n, int64_t k, bool copy,
                 const std::shared_ptr<SessionCounters>& counters, int32_t threads) {
  w.format = Q4_FORMAT_NF4;
  w.n = n;
  w.k = k;
  const kern::Nf4Stats& st = op.state.stats;
  w.blocksize = st.blocksize;
  w.block_shift = 0;
  while ((int64_t{1} << w.block_shift) < w.blocksize) ++w.block_shift;
  w.q = own_or_borrow(w, op.q.data, (op.numel + 1) / 2, copy, counters, threads, w.q_copy);
  // Resolve the (possibly double-quantized) absmax and the codebook once.
  const int64_t nblocks = (op.numel + w.blocksize - 1) / w.blocksize;
  if (!copy && st.qabsmax == nullptr) {
    w.absmax = st.absmax;
  } else {
    auto* a = reinterpret_cast<float*>(allocate(w, counters, nblocks * 4));
    kern::nf4_absmax_all(st, nblocks, a, threads);
    w.absmax = a;
  }
  for (uint32_t c = 0; c < 16; ++c) w.lut[c] = st.code_value(c);
}

void prepare_dequant(PreparedWeight& w, int32_t threads, const std::shared_ptr<SessionCounters>& counters) {
  std::unique_ptr<Buffer> buf = take_buffer(w, counters, w.n * w.k * 4);
  auto* d = reinterpret_cast<float*>(buf->data());
  if (w.format == Q4_FORMAT_NVFP4) {
    kern::dequantize_nvfp4(kern::active_table(), w.q, w.s, w.g, w.n, w.k, d, threads);
  } else {
    for (int64_t f = 0; f < w.n * w.k; ++f) {
      const uint8_t byte = w.q[f >> 1];
      d[f] = w.lut[(f & 1) ? (byte & 0xfu) : (byte >> 4)] * w.absmax[f >> w.block_shift];
    }
  }
  w.path = CpuPath::DequantMatmul;
  w.dequant = d;
  w.q = nullptr;
  w.s = nullptr;
  w.absmax = nullptr;
  w.storage.clear();
  w.storage.push_back(std::move(buf));
}

void borrow_weight(PreparedWeight& w, const ProductDesc& d) {
  if (d.format == Q4_FORMAT_NVFP4) {
    // (The kernels' drivers read swizzled scales piece by piece; the
    // dequant-matmul path decodes the weight from linear ones.)
    prepare_nvfp4(w, d.nv, false, nullptr, d.ctx.opts.num_threads, d.path == CpuPath::Kernel);
  } else {
    prepare_nf4(w, d.nf, d.n, d.k, false, nullptr, d.ctx.opts.num_threads);
  }
  if (d.path == CpuPath::DequantMatmul && d.k > 0 && d.m > 0) {
    prepare_dequant(w, d.ctx.opts.num_threads, nullptr);
  }
  w.path = d.path;
}

void compute_product(const PreparedWeight& w, kern::ActRows act, int64_t m, int32_t math_mode,
                     int32_t threads, float* y, kern::ScaleSigns* signs) {
  tuner::ensure_loaded();
  const kern::KernelTable& kt = kern::active_table();
  if (w.k == 0) {
    std::fill(y, y + m * w.n, 0.0f);
  } else if (w.path == CpuPath::DequantMatmul) {
    kern::gemm_f32(kt, act, m, w.k, w.dequant, w.n, y, threads, kern::gemm_blocking());
  } else if (w.format == Q4_FORMAT_NVFP4 || w.format == Q4_FORMAT_MXFP4) {  // (MXFP4: its NVFP4 form)
    if (math_mode == Q4_MATH_FAST) {
      kern::linear_nvfp4_fast(kt, act, m, w.nv(), w.n, y, threads, signs);
    } else {
      kern::linear_nvfp4(kt, act, m, w.nv(), w.n, y, threads, signs);
    }
  } else if (math_mode == Q4_MATH_FAST) {
    kern::linear_nf4_fast(kt, act, m, w.nf4(), w.n, y, threads);
  } else {
    kern::linear_nf4(kt, act, m, w.nf4(), w.n, y, threads);
  }
}

bool run_host_product(const PreparedWeight& w, const ProductDesc& d) {
  if (d.out.numel == 0) return false;  // validated; nothing to compute
  const int32_t threads = d.ctx.opts.num_threads;
  std::vector<float> decoded;
  // (before active_table(), which notes its own level: what a refused call
  // leaves reported, as if it had not run)
  const int32_t isa_before = kern::last_isa_used();
  const kern::KernelTable& kt = kern::active_table();
  const bool e2m1 = w.format == Q4_FORMAT_NVFP4 || w.format == Q4_FORMAT_MXFP4;
  // alpha, the bias (the call's, else w.bias) and the conversion into out.
  const kern::FloatPtr own_bias{w.bias, kern::FType::F32};
  const kern::FloatPtr* bias = d.bias.present ? d.bias.get() : (w.bias != nullptr ? &own_bias : nullptr);
  auto finish_out = [&](F32Result& r) { finish(r, w.n, d.alpha, bias, threads); };
  // A 16-bit out of many rows: y in bands of rows of at most about
  // kOutStageBytes (each band at least 256 rows and above the small-batch
  // range, so every band runs the path the whole M would, with the same
  // bits), not a fp32 copy of all of it (prefill logits of a large
  // vocabulary: M x N x 4 bytes more than the output itself).
  // rows_fn(i0, rows, y) computes y of rows [i0, i0 + rows). False when
  // the product is not banded (fp32 out or too few rows: decided before
  // anything else, so that other calls pay no more than two compares).
  auto banded = [&](const auto& rows_fn) {
    constexpr int64_t kMinBandRows = 256;
    if (d.out.type == ElemType::F32 || d.m < 2 * kMinBandRows) return false;
    const int64_t band_rows =
        std::max<int64_t>({kMinBandRows, kern::small_batch_max_m(kt, kern::small_batch_config()) + 1,
                           kOutStageBytes / std::max<int64_t>(1, w.n * 4)});
    if (d.m < 2 * band_rows) return false;
    kern::AlignedFloats y = kern::aligned_floats((2 * band_rows - 1) * w.n);
    for (int64_t i0 = 0; i0 < d.m;) {
      const int64_t rows = d.m - i0 < 2 * band_rows ? d.m - i0 : band_rows;  // (the last band: the rest)
      rows_fn(i0, rows, y.get());
      finish_rows(y.get(), rows, w.n, i0, d.out, d.alpha, bias, threads);
      i0 += rows;
    }
    return true;
  };
  if (d.w4a4 && w.path == CpuPath::Kernel && e2m1 && w.k > 0 && kt.i8_native) {
    // W4A4 on integer dot products: exact int32 block sums times the two
    // E4M3 scales (exact in fp32), one fixed fp32 order on every ISA.
    tuner::ensure_loaded();
    PreparedWeight a;
    prepare_nvfp4(a, d.a, false, nullptr, threads);
    auto rows_fn = [&](int64_t i0, int64_t rows, float* y) {
      kern::scaled_mm_w4a4_int8(kt, a.q + i0 * (w.k / 2), a.s + i0 * (w.k / 16), rows, w.nv(), w.n, y,
                                threads);
    };
    if (banded(rows_fn)) return false;
    F32Result r = f32_result(d.out);
    rows_fn(0, d.m, r.p);
    finish_out(r);
    return false;
  }
  // Every path reads fp16/bf16 activations itself (the GEMV and
  // small-batch kernels in registers, the panel GEMM, fast mode's int8
  // quantizer and the dequant-matmul GEMM a cache-sized piece at a time):
  // no copy of x.
  kern::ActRows act(d.x.data, ftype_of(d.x));
  if (d.w4a4) {
    // A's values e2m1 * s are exact in fp32, so decoding A loses nothing.
    PreparedWeight a;
    prepare_nvfp4(a, d.a, false, nullptr, threads);
    decoded.resize(static_cast<size_t>(d.m * d.k));
    kern::dequantize_nvfp4(kt, a.q, a.s, 1.0f, d.m, d.k, decoded.data(), threads);
    act = kern::ActRows(decoded.data());
  }
  // NVFP4 at small M (ProductDesc::signs_on_the_way): the sign rule while
  // the product reads the scales, y in a buffer of our own until it holds,
  // so that a refused call writes nothing.
  const bool signs_here = d.signs_on_the_way && w.path == CpuPath::Kernel && w.format == Q4_FORMAT_NVFP4;
  if (!signs_here) {
    const int64_t esize = act.type == kern::FType::F32 ? 4 : 2;
    if (banded([&](int64_t i0, int64_t rows, float* y) {
          const kern::ActRows band(static_cast<const uint8_t*>(act.data) + i0 * w.k * esize, act.type);
          compute_product(w, band, rows, d.ctx.opts.math_mode, threads, y, nullptr);
        })) {
      return false;
    }
  }
  F32Result r = f32_result(d.out, signs_here);
  kern::ScaleSigns signs;
  compute_product(w, act, d.m, d.ctx.opts.math_mode, threads, r.p, signs_here ? &signs : nullptr);
  if (signs.negative.load()) {
    kern::note_isa_used(isa_before);  // a refused call ran nothing, as far as callers can tell
    require_nonnegative_scales(d.nv, threads, d.ctx.opts.stream);  // fails, naming the first one
  }
  finish_out(r);
  return false;  // no implicit copy of x on the host paths
}

}  // namespace q4::core
