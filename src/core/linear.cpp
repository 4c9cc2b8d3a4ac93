#include "core/linear.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/cpu_features.h"
#include "common/enum_tables.h"
#include "common/error.h"
#include "common/struct_size.h"
#include "common/tensor.h"
#include "core/cuda_backend.h"
#include "core/mxfp4.h"
#include "core/op_helpers.h"
#include "core/ops.h"
#include "formats/codec.h"
#include "formats/mxfp4.h"
#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"
#include "kernels/portable.h"

namespace q4::core {
namespace {

using Counters = std::shared_ptr<SessionCounters>;

DLTensor bytes_view(uint8_t* data, int64_t* shape, int32_t ndim, DLDataType dt) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

// The session's CPU objects read everything on the host: a kDLCUDA tensor
// in a bundle is refused before anything is dereferenced.
void require_host(const TensorRef& t) {
  if (t.device.device_type == kDLCUDA) {
    fail(Q4_ERR_DEVICE, t.name,
         "is CUDA device memory; weight bundles are read on the host (pass host, pinned or managed memory; a "
         "CUDA session copies the prepared weight to its device)");
  }
}

// The raw MXFP4 form of a CUDA session's linear (PreparedWeight::
// e8m0_scales): the plugin's MXFP4 linear dequantizes on the device, so the
// host keeps the codes and the E8M0 scales, the scales unswizzled into the
// linear layout (the only one a prepared weight has). `op` is validated.
void prepare_mxfp4_raw(PreparedWeight& p, const Mxfp4Operand& op, const Counters& c, CpuPath path) {
  const int64_t n = op.rows, k = op.k, cols = k / fmt::kMxBlock;
  p.format = Q4_FORMAT_MXFP4;
  p.n = n;
  p.k = k;
  p.path = path;  // what each forward asks the plugin for
  p.e8m0_scales = true;
  uint8_t* q = allocate(p, c, n * (k / 2));
  std::memcpy(q, op.q.data, static_cast<size_t>(n * (k / 2)));
  uint8_t* s = allocate(p, c, n * cols);
  if (op.layout == Q4_SCALE_SWIZZLED) {
    kern::unswizzle_scales(op.s.data, n, cols, s);
  } else {
    std::memcpy(s, op.s.data, static_cast<size_t>(n * cols));
  }
  p.q = q;
  p.s = s;
}

// Quantize a float [N, K] weight into the prepared form.
void prepare_from_float(const Q4_weight_bundle& b, const SessionSettings& st, const Counters& c,
                        PreparedWeight& p, CpuPath path, std::string* why) {
  const TensorRef wt = check_tensor(b.weight, "weight->weight");
  require_float(wt);
  if (wt.ndim != 2) {
    fail(Q4_ERR_SHAPE, "weight->weight", "a float weight must be 2-D [N, K], got " + wt.shape_text());
  }
  const int64_t n = wt.dim(0), k = wt.dim(1);
  Q4_op_options o{};
  o.struct_size = sizeof o;
  o.num_threads = st.ops.num_threads;
  p.format = b.format;
  p.n = n;
  p.k = k;
  if (b.format == Q4_FORMAT_NVFP4) {
    require_k_multiple_of_16(k, "weight->weight");
    if (!std::isfinite(b.global_scale) || b.global_scale < 0.0f) {
      fail(Q4_ERR_INVALID_ARGUMENT, "weight->global_scale", "expected a finite value >= 0 (0 = from amax)");
    }
    uint8_t* q = allocate(p, c, n * k / 2);
    uint8_t* s = allocate(p, c, n * k / 16);
    int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / 16};
    DLTensor tq = bytes_view(q, qs, 2, DLDataType{kDLUInt, 8, 1});
    DLTensor ts = bytes_view(s, ss, 2, DLDataType{kDLUInt, 8, 1});
    nvfp4_quantize(b.weight, &tq, &ts, Q4_SCALE_LINEAR, b.global_scale, &p.g, &o);
    p.q = q;
    p.s = s;
  } else if (b.format == Q4_FORMAT_MXFP4) {
    // On the CPU: quantized into scratch, kept in the ready form only (the
    // NVFP4 form of the E2M1 kernels, or the fp32 decode). On CUDA: the raw
    // form, quantized in place (linear scales, never a NaN byte).
    if (k % fmt::kMxBlock != 0) {
      fail(Q4_ERR_SHAPE, "weight->weight",
           "K = " + std::to_string(k) + " must be a multiple of 32 (MXFP4 block size)");
    }
    if (st.on_cuda()) {
      uint8_t* q = allocate(p, c, n * (k / 2));
      uint8_t* s = allocate(p, c, n * (k / fmt::kMxBlock));
      int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / fmt::kMxBlock};
      DLTensor tq = bytes_view(q, qs, 2, DLDataType{kDLUInt, 8, 1});
      DLTensor ts = bytes_view(s, ss, 2, DLDataType{kDLUInt, 8, 1});
      mxfp4_quantize(b.weight, &tq, &ts, Q4_SCALE_LINEAR, &o);
      p.q = q;
      p.s = s;
      p.path = path;
      p.e8m0_scales = true;
      return;
    }
    std::vector<uint8_t> q(static_cast<size_t>(n * k / 2)), s(static_cast<size_t>(n * (k / fmt::kMxBlock)));
    int64_t qs[2] = {n, k / 2}, ss[2] = {n, k / fmt::kMxBlock};
    DLTensor tq = bytes_view(q.data(), qs, 2, DLDataType{kDLUInt, 8, 1});
    DLTensor ts = bytes_view(s.data(), ss, 2, DLDataType{kDLUInt, 8, 1});
    mxfp4_quantize(b.weight, &tq, &ts, Q4_SCALE_LINEAR, &o);
    Mxfp4Operand op;
    op.q = check_tensor(&tq, "weight->weight");
    op.s = check_tensor(&ts, "weight->weight");
    op.rows = n;
    op.k = k;
    *why = prepare_mxfp4(p, op, st.ops.num_threads, c, path, true, st.ops.compute_path, "weight->weight");
  } else {
    p.blocksize = require_blocksize(b.blocksize == 0 ? 64 : b.blocksize, "weight->blocksize");
    p.block_shift = 0;
    while ((int64_t{1} << p.block_shift) < p.blocksize) ++p.block_shift;
    const int64_t numel = n * k;
    const int64_t nblocks = (numel + p.blocksize - 1) / p.blocksize;
    uint8_t* q = allocate(p, c, (numel + 1) / 2);
    auto* absmax = reinterpret_cast<float*>(allocate(p, c, nblocks * 4));
    int64_t qs[1] = {(numel + 1) / 2}, as[1] = {nblocks};
    DLTensor tq = bytes_view(q, qs, 1, DLDataType{kDLUInt, 8, 1});
    DLTensor ta = bytes_view(reinterpret_cast<uint8_t*>(absmax), as, 1, DLDataType{kDLFloat, 32, 1});
    nf4_quantize(b.weight, &tq, &ta, static_cast<int32_t>(p.blocksize), &o);
    p.q = q;
    p.absmax = absmax;
    for (uint32_t code = 0; code < 16; ++code) p.lut[code] = fmt::nf4_decode(code);
  }
}

// Whether prepare_tiles may tile the weight (a fast-mode linear on the CPU
// kernels): its copies of the caller's packed bytes are then left to that
// pass (PreparedWeight::defer_copies).
bool tiles_may_follow(const SessionSettings& st, CpuPath path) {
  return !st.on_cuda() && st.ops.math_mode == Q4_MATH_FAST && path == CpuPath::Kernel;
}

// Validate packed tensors as the stateless products do, then copy them.
void prepare_from_packed(const Q4_weight_bundle& b, const SessionSettings& st, const Counters& c,
                         PreparedWeight& p, CpuPath path, std::string* why) {
  if (b.out_features <= 0 || b.in_features <= 0) {
    fail(Q4_ERR_SHAPE, "weight->out_features",
         "packed weights need out_features and in_features > 0, got " + std::to_string(b.out_features) +
             " x " + std::to_string(b.in_features));
  }
  const int64_t n = b.out_features, k = b.in_features;
  const int64_t numel = checked_mul(n, k, "weight->in_features");
  const TensorRef q = check_tensor(b.weight, "weight->weight");
  require_packed_bytes(q);
  if (b.format == Q4_FORMAT_NVFP4) {
    require_k_multiple_of_16(k, "weight->in_features");
    require_layout(b.scale_layout);
    require_scale_value(b.global_scale, "weight->global_scale", false);
    require_nbytes(q, numel / 2, "N*K/2 packed bytes");
    Nvfp4Operand op;
    op.q = q;
    op.s = check_tensor(b.scale, "weight->scale");
    require_scale_bytes(op.s);
    require_nbytes(op.s, scale_bytes(n, k, b.scale_layout, "weight->scale"),
                   [&] { return scale_why(n, k, b.scale_layout); });
    op.layout = b.scale_layout;
    op.rows = n;
    op.k = k;
    op.g = b.global_scale;
    require_nonnegative_scales(op);
    p.defer_copies = tiles_may_follow(st, path);
    prepare_nvfp4(p, op, true, c, st.ops.num_threads);
  } else if (b.format == Q4_FORMAT_MXFP4) {
    // As MXFP4_linear validates it; the ready form is the NVFP4 form (codes
    // copied, E4M3 scales) or the fp32 decode (the packed bytes not kept),
    // on CUDA the raw form.
    if (k % fmt::kMxBlock != 0) {
      fail(Q4_ERR_SHAPE, "weight->in_features",
           "K = " + std::to_string(k) + " must be a multiple of 32 (MXFP4 block size)");
    }
    require_layout(b.scale_layout);
    require_nbytes(q, numel / 2, "N*K/2 packed bytes");
    Mxfp4Operand op;
    op.q = q;
    op.s = check_tensor(b.scale, "weight->scale");
    require_e8m0_bytes(op.s);
    const int64_t cols = k / fmt::kMxBlock;
    const bool swz = b.scale_layout == Q4_SCALE_SWIZZLED;
    require_nbytes(
        op.s,
        swz ? checked_mul(fmt::swizzled_rows(n), fmt::swizzled_cols(cols), "weight->scale")
            : checked_mul(n, cols, "weight->scale"),
        swz ? "swizzled E8M0 scales, roundup(N,128) x roundup(K/32,4)" : "linear E8M0 scales [N, K/32]");
    op.layout = b.scale_layout;
    op.rows = n;
    op.k = k;
    require_finite_e8m0(op);
    if (st.on_cuda()) {
      prepare_mxfp4_raw(p, op, c, path);
      return;
    }
    *why = prepare_mxfp4(p, op, st.ops.num_threads, c, path, true, st.ops.compute_path, "weight->scale");
  } else {
    require_nbytes(q, (numel + 1) / 2, "ceil(N*K/2) packed bytes");
    Nf4Operand op;
    op.q = q;
    op.numel = numel;
    op.state = parse_nf4_state(b.nf4, numel);
    const Nf4State& s = op.state;
    for (const TensorRef* t : {&s.absmax, s.has_quant_map ? &s.quant_map : nullptr,
                               s.nested ? &s.nested_absmax : nullptr, s.nested ? &s.nested_map : nullptr}) {
      if (t != nullptr) require_host(*t);
    }
    p.defer_copies = tiles_may_follow(st, path);
    prepare_nf4(p, op, n, k, true, c, st.ops.num_threads);
  }
}

// A fast-mode CPU linear's codes in the tile order its table's integer
// GEMV reads (kern::i8_tile_codes; 1.1-1.4x at M = 1-64 on a Zen 5, M = 1
// 1.2-1.3x on an AVX2 Zen 3 when the tiles came, 0.9-1.1x against the
// faster row GEMV there since), kept beside the row form that every other
// kernel reads: N*K/2 more bytes (where the table reads them too,
// i8_reads_tile_absmax: NF4's absmax regrouped; i8_reads_tile_scales:
// NVFP4's and MXFP4's E4M3 scales in the GEMV's transposed order,
// kern::i8_tile_scales), counted in the linear's bytes.
void prepare_tiles(PreparedWeight& p, const SessionSettings& st, const Counters& c) {
  const kern::KernelTable& kt = kern::table_for(active_isa());
  if (st.on_cuda() || st.ops.math_mode != Q4_MATH_FAST || p.path != CpuPath::Kernel || p.e8m0_scales ||
      p.q == nullptr || p.dequant != nullptr || p.k < 128 || p.k % 128 != 0 || p.n < 16 ||
      !kt.i8_reads_tiles || kern::fast_math_fallback_shape(kt, p.n, p.k) != nullptr) {
    return;  // (the last: fast mode runs the exact kernels on this weight)
  }
  // (a copy of the caller's codes or scales still to make, PreparedWeight::
  // q_copy / s_copy, is made in the same pass: the caller's bytes read
  // once)
  bool reused = false;
  uint8_t* t = allocate(p, c, kern::i8_tile_bytes(p.n, p.k), &reused);
  if (p.q_copy.dst == p.q) {
    kern::i8_tile_codes(kt, p.q_copy.src, p.n, p.k, t, st.ops.num_threads, p.q_copy.dst,
                        reused && p.q_copy.reused);
    p.q_copy = PreparedWeight::PendingCopy{};
  } else {
    kern::i8_tile_codes(kt, p.q, p.n, p.k, t, st.ops.num_threads, nullptr, reused);
  }
  p.tiles = t;
  if (kt.i8_reads_tile_scales && p.format != Q4_FORMAT_NF4 && p.s != nullptr) {
    // (N*K/16 + N/16 bytes more: the E4M3 scales as the GEMV transposes
    // them, and a flag per group of 16 rows)
    const int64_t groups = p.n / 16;
    uint8_t* ts = allocate(p, c, groups * kern::i8_tile_scale_group_bytes(p.k));
    uint8_t* tf = allocate(p, c, groups);
    if (p.s_copy.dst == p.s) {
      kern::i8_tile_scales(kt, p.s_copy.src, p.n, p.k, ts, tf, st.ops.num_threads, p.s_copy.dst);
      p.s_copy = PreparedWeight::PendingCopy{};
    } else {
      kern::i8_tile_scales(kt, p.s, p.n, p.k, ts, tf, st.ops.num_threads);
    }
    p.tile_scales = ts;
    p.tile_flags = tf;
  }
  if (kt.i8_reads_tile_absmax && p.format == Q4_FORMAT_NF4 && p.absmax != nullptr && p.k % p.blocksize == 0) {
    // (N*K/blocksize floats more: the absmax in the same groups of rows)
    auto* a = reinterpret_cast<float*>(allocate(
        p, c, kern::i8_tile_absmax_floats(p.n, p.k, p.blocksize) * static_cast<int64_t>(sizeof(float))));
    kern::i8_tile_absmax(p.absmax, p.n, p.k, p.blocksize, a);
    p.tile_absmax = a;
  }
}

// The device form of a host-prepared weight: the same parts in ordinary
// device memory or (UM policy) managed memory advised read-mostly and
// prefetched to the device. The host form is freed by the caller.
std::shared_ptr<PreparedWeight> upload(const PreparedWeight& h, const SessionSettings& st,
                                       const Counters& c) {
  auto d = std::make_shared<PreparedWeight>();
  d->format = h.format;
  d->n = h.n;
  d->k = h.k;
  d->path = h.path;
  d->g = h.g;
  d->blocksize = h.blocksize;
  d->block_shift = h.block_shift;
  d->e8m0_scales = h.e8m0_scales;
  std::memcpy(d->lut, h.lut, sizeof d->lut);
  d->on_device = true;
  d->managed = st.managed;
  d->device = st.device;
  const Memory mem = st.managed ? Memory::Managed : Memory::Device;
  auto put = [&](const void* src, int64_t bytes) -> uint8_t* {
    d->storage.push_back(std::make_unique<Buffer>(c, bytes, mem, st.device));
    uint8_t* dst = d->storage.back()->data();
    cuda::copy(dst, src, static_cast<size_t>(bytes));
    if (st.managed && bytes > 0)
      cuda::advise_weight(dst, static_cast<size_t>(bytes), st.device, st.ops.stream);
    return dst;
  };
  if (h.format == Q4_FORMAT_NVFP4) {
    d->q = put(h.q, h.n * h.k / 2);
    d->s = put(h.s, h.n * (h.k / 16));
  } else if (h.format == Q4_FORMAT_MXFP4) {  // the raw form (e8m0_scales): a CUDA session's only one
    d->q = put(h.q, h.n * h.k / 2);
    d->s = put(h.s, h.n * (h.k / fmt::kMxBlock));
  } else {
    const int64_t numel = h.n * h.k;
    d->q = put(h.q, (numel + 1) / 2);
    d->absmax = reinterpret_cast<const float*>(put(h.absmax, (numel + h.blocksize - 1) / h.blocksize * 4));
    d->quant_map = reinterpret_cast<const float*>(put(h.lut, sizeof h.lut));
  }
  if (h.bias != nullptr) d->bias = reinterpret_cast<const float*>(put(h.bias, h.n * 4));
  return d;
}

// reuse (may be null): host buffers the preparation may write into
// (PreparedWeight::reuse); taken whatever happens, the unused ones freed.
std::shared_ptr<const PreparedWeight> prepare(const Q4_weight_bundle* bundle, const SessionSettings& st,
                                              const Counters& c, CpuPath path, int32_t expect_format,
                                              int64_t expect_n, int64_t expect_k, std::string* why,
                                              std::vector<std::unique_ptr<Buffer>>* reuse = nullptr) {
  std::vector<std::unique_ptr<Buffer>> taken;
  if (reuse != nullptr) taken.swap(*reuse);
  const Q4_weight_bundle b = read_struct(bundle, "weight");
  if (b.format != Q4_FORMAT_NVFP4 && b.format != Q4_FORMAT_NF4 && b.format != Q4_FORMAT_MXFP4) {
    fail(Q4_ERR_INVALID_ARGUMENT, "weight->format",
         "expected Q4_FORMAT_NVFP4 (1), Q4_FORMAT_NF4 (2) or Q4_FORMAT_MXFP4 (4), got " +
             std::to_string(b.format));
  }
  if (b.source != Q4_WEIGHT_PACKED && b.source != Q4_WEIGHT_FLOAT) {
    fail(Q4_ERR_INVALID_ARGUMENT, "weight->source",
         "expected Q4_WEIGHT_PACKED (0) or Q4_WEIGHT_FLOAT (1), got " + std::to_string(b.source));
  }
  if (expect_format != 0 && b.format != expect_format) {
    fail(Q4_ERR_INVALID_ARGUMENT, "weight->format", "an update must keep the linear's format");
  }
  auto p = std::make_shared<PreparedWeight>();
  if (!st.on_cuda()) p->reuse = std::move(taken);  // (a CUDA session's host form is scratch)
  if (b.source == Q4_WEIGHT_FLOAT) {
    prepare_from_float(b, st, c, *p, path, why);
  } else {
    prepare_from_packed(b, st, c, *p, path, why);
  }
  if (expect_n > 0 && (p->n != expect_n || p->k != expect_k)) {
    fail(Q4_ERR_SHAPE, "weight",
         "an update must keep the shape [" + std::to_string(expect_n) + ", " + std::to_string(expect_k) +
             "], got [" + std::to_string(p->n) + ", " + std::to_string(p->k) + "]");
  }
  // On CUDA the plugin dequantizes itself (the compute path goes with each
  // call); the fp32 weight is a CPU form.
  if (p->format != Q4_FORMAT_MXFP4) {  // (MXFP4 is prepared for its path, its fallback, or raw)
    if (path == CpuPath::DequantMatmul && !st.on_cuda()) {
      finish_copies(*p, st.ops.num_threads);
      prepare_dequant(*p, st.ops.num_threads, c);
    }
    p->path = path;
  }
  prepare_tiles(*p, st, c);
  finish_copies(*p, st.ops.num_threads);
  if (b.bias != nullptr) {
    const Bias bias = parse_bias(b.bias, p->n);
    require_host(bias.ref);
    auto* dst = reinterpret_cast<float*>(allocate(*p, c, p->n * 4));
    kern::load_row(bias.ptr.data, bias.ptr.type, 0, p->n, dst);
    p->bias = dst;
  }
  p->reuse.clear();
  if (st.on_cuda()) return upload(*p, st, c);  // the host form is freed on return
  return p;
}

}  // namespace

void SpareStorage::retire(std::shared_ptr<const PreparedWeight> p) noexcept {
  std::vector<std::unique_ptr<Buffer>> freed;
  try {
    std::lock_guard<std::mutex> lock(mutex);
    if (keep) {
      // (the object itself was made non-const: prepare's make_shared)
      auto& w = const_cast<PreparedWeight&>(*p);
      freed.swap(buffers);
      for (auto& b : w.storage) {
        if (b->memory() == Memory::Host) buffers.push_back(std::move(b));
      }
    }
  } catch (...) {  // (no memory for the list: the buffers are freed with p)
  }
  // freed, then p, are released here, outside the lock.
}

std::vector<std::unique_ptr<Buffer>> SpareStorage::take() {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<std::unique_ptr<Buffer>> out;
  out.swap(buffers);
  return out;
}

namespace {

// p as the linear's weight: when its last holder (the linear, or a forward
// that copied it) lets go, its storage goes to `spare` (SpareStorage).
std::shared_ptr<const PreparedWeight> with_spare(std::shared_ptr<const PreparedWeight> p,
                                                 const std::shared_ptr<SpareStorage>& spare) {
  const PreparedWeight* raw = p.get();
  return std::shared_ptr<const PreparedWeight>(
      raw, [p = std::move(p), spare](const PreparedWeight*) mutable { spare->retire(std::move(p)); });
}

}  // namespace

namespace {

// A linear's record of the fallback of its current weight (MXFP4 outside
// the E2M1 kernels' window): empty `why` = the requested path runs. A CUDA
// linear's weight has no such fallback (the plugin dequantizes the raw
// form); its record is the forwards' (forward_cuda).
void note_prepared(Q4_linear* l, const std::string& why) {
  if (l->format != Q4_FORMAT_MXFP4 || l->path != CpuPath::Kernel || l->settings.on_cuda()) return;
  {
    std::lock_guard<std::mutex> lock(l->info_mutex);
    l->fallback_reason = why;
    l->backend_used = why.empty() ? Q4_BACKEND_NVFP4_KERNEL : Q4_BACKEND_DEQUANT_MATMUL;
  }
  if (!why.empty()) l->session->record_fallback(why);
}

std::atomic<int32_t>& format_count(Q4_session* s, int32_t format) {
  if (format == Q4_FORMAT_NF4) return s->nf4_linears;
  return format == Q4_FORMAT_MXFP4 ? s->mxfp4_linears : s->nvfp4_linears;
}

}  // namespace

Q4_linear* create_linear(Q4_session* s, const Q4_weight_bundle* w) {
  if (s == nullptr) fail(Q4_ERR_NULL_POINTER, "session", "pointer is NULL");
  const int32_t asked = read_struct(w, "weight").format;
  const int32_t format = asked == Q4_FORMAT_NF4 || asked == Q4_FORMAT_MXFP4 ? asked : Q4_FORMAT_NVFP4;
  CpuPath path = CpuPath::DequantMatmul;
  if (format == Q4_FORMAT_MXFP4) {
    // The E2M1 kernels' option rules on every target (MXFP4_linear's): on
    // the CPU the NVFP4 form or the fp32 decode, on CUDA the raw form
    // through the plugin's MXFP4 linear.
    path = mxfp4_cpu_path(s->settings.ops);
  } else {
    path = choose_cpu_path(s->settings.ops, format);  // forced wrong kernel -> error
    check_math_mode(s->settings.ops, path);
  }
  auto l = std::make_unique<Q4_linear>();
  l->session = s;
  l->counters = s->counters;
  l->settings = s->settings;
  l->path = path;
  std::string why;
  l->weight = with_spare(prepare(w, s->settings, s->counters, path, 0, 0, 0, &why), l->spare);
  l->format = l->weight->format;
  l->n = l->weight->n;
  l->k = l->weight->k;
  // DequantMatmulOnly or a forced dequant-matmul backend is a choice, not a
  // fallback: fallback_reason stays empty.
  l->backend_used = path == CpuPath::DequantMatmul
                        ? Q4_BACKEND_DEQUANT_MATMUL
                        : (format == Q4_FORMAT_NF4 ? Q4_BACKEND_NF4_KERNEL : Q4_BACKEND_NVFP4_KERNEL);
  note_prepared(l.get(), why);
  s->counters->linears.fetch_add(1);
  format_count(s, l->format).fetch_add(1);
  return l.release();
}

namespace {

// Where a forward's activation or output is for a CUDA linear: read in
// place, or staged through device memory (an implicit copy).
bool needs_staging(const Q4_linear& l, const TensorRef& t) {
  const SessionSettings& st = l.settings;
  switch (t.device.device_type) {
    case kDLCUDA:
      if (t.device.device_id != st.device) {
        fail(Q4_ERR_DEVICE, t.name,
             "is on CUDA device " + std::to_string(t.device.device_id) +
                 "; this linear is prepared on device " + std::to_string(st.device));
      }
      if (t.data != nullptr && !st.reads_host && cuda::pointer_kind(t.data) == NVFP4_CUDA_MEM_UNREGISTERED) {
        fail(Q4_ERR_DEVICE, t.name,
             "is labelled kDLCUDA but its data is ordinary host memory, which this device cannot read");
      }
      return false;
    case kDLCUDAManaged:
    case kDLCUDAHost:
      return false;
    default:  // kDLCPU (check_tensor_any accepts nothing else)
      return !st.reads_host;
  }
}

// The plugin's MXFP4 linear on a raw MXFP4 weight (codes and linear E8M0
// scales on the device) for a forward's descriptor (x, out and bias
// already placed). A forced dequant-matmul path goes as DequantMatmulOnly,
// as cuda::run does for NVFP4 and NF4.
Mxfp4ProductDesc mxfp4_product(const ProductDesc& d, const PreparedWeight& w) {
  Mxfp4ProductDesc md;
  md.ctx = d.ctx;
  if (d.path == CpuPath::DequantMatmul) md.ctx.opts.compute_path = Q4_PATH_DEQUANT_MATMUL_ONLY;
  md.m = d.m;
  md.n = d.n;
  md.k = d.k;
  md.x = d.x;
  md.out = d.out;
  md.bias = d.bias;
  md.alpha = 1.0f;
  md.w.q.data = const_cast<uint8_t*>(w.q);
  md.w.s.data = const_cast<uint8_t*>(w.s);
  md.w.layout = Q4_SCALE_LINEAR;
  md.w.rows = w.n;
  md.w.k = w.k;
  return md;
}

// A forward on the session's CUDA device: the weight's device pointers,
// the activations and outputs in place where the device reads them, else
// through device memory (counted in implicit_copies).
void forward_cuda(Q4_linear* l, ProductDesc& d, const PreparedWeight& w) {
  const SessionSettings& st = l->settings;
  d.ctx.place = Place::Device;
  d.ctx.device = st.device;
  const bool stage_x = needs_staging(*l, d.x), stage_out = needs_staging(*l, d.out);
  std::unique_ptr<Buffer> xs, os;
  uint8_t* const host_out = d.out.data;
  int64_t copies = 0;
  if (stage_x && d.x.nbytes > 0) {
    xs = std::make_unique<Buffer>(nullptr, d.x.nbytes, Memory::Device, st.device);
    cuda::copy(xs->data(), d.x.data, static_cast<size_t>(d.x.nbytes));
    d.x.data = xs->data();
    ++copies;
  }
  if (stage_out && d.out.nbytes > 0) {
    os = std::make_unique<Buffer>(nullptr, d.out.nbytes, Memory::Device, st.device);
    d.out.data = os->data();
  }
  if (w.bias != nullptr) {
    d.bias.present = true;
    d.bias.ref.data = reinterpret_cast<uint8_t*>(const_cast<float*>(w.bias));
    d.bias.ref.type = ElemType::F32;
  }
  std::string why;
  if (w.format == Q4_FORMAT_MXFP4) {
    cuda::run(mxfp4_product(d, w), &why);
  } else {
    if (w.format == Q4_FORMAT_NVFP4) {
      d.nv.q.data = const_cast<uint8_t*>(w.q);
      d.nv.s.data = const_cast<uint8_t*>(w.s);
      d.nv.layout = Q4_SCALE_LINEAR;
      d.nv.rows = w.n;
      d.nv.k = w.k;
      d.nv.g = w.g;
    } else {
      d.nf.q.data = const_cast<uint8_t*>(w.q);
      d.nf.numel = w.n * w.k;
      d.nf.state.absmax.data = reinterpret_cast<uint8_t*>(const_cast<float*>(w.absmax));
      d.nf.state.has_quant_map = true;
      d.nf.state.quant_map.data = reinterpret_cast<uint8_t*>(const_cast<float*>(w.quant_map));
      d.nf.state.stats.blocksize = w.blocksize;
    }
    cuda::run(d, &why);
  }
  // Results in memory the host reads: complete before returning.
  if (os || d.out.device.device_type != kDLCUDA) cuda::synchronize(st.device, d.ctx.opts.stream);
  if (os) {
    cuda::copy(host_out, os->data(), static_cast<size_t>(d.out.nbytes));
    ++copies;
  }
  if (copies > 0) l->counters->implicit_copies.fetch_add(copies, std::memory_order_relaxed);
  if (!why.empty()) {
    {
      std::lock_guard<std::mutex> lock(l->info_mutex);
      l->fallback_reason = why;
      l->backend_used = Q4_BACKEND_DEQUANT_MATMUL;
    }
    l->session->record_fallback(why);
  }
}

}  // namespace

void forward(Q4_linear* l, const DLTensor* x_t, DLTensor* out_t) {
  if (l == nullptr) fail(Q4_ERR_NULL_POINTER, "linear", "pointer is NULL");
  const bool on_cuda = l->settings.on_cuda();
  ProductDesc d;
  d.ctx.opts = l->settings.ops;
  if (on_cuda)
    d.ctx.opts.stream = l->session->stream.load(std::memory_order_acquire);  // the session's stream
  d.format = l->format;
  d.path = l->path;
  d.x = on_cuda ? check_tensor_any(x_t, "x") : check_tensor(x_t, "x");
  require_float(d.x);
  require_min_ndim(d.x, 1);
  if (d.x.last_dim() != l->k) {
    fail(Q4_ERR_SHAPE, "x",
         "last dimension must be in_features K = " + std::to_string(l->k) + ", got " + d.x.shape_text());
  }
  d.out = on_cuda ? check_tensor_any(out_t, "out") : check_tensor(out_t, "out");
  require_float(d.out);
  require_same_leading(d.out, d.x);
  if (d.out.last_dim() != l->n) {
    fail(Q4_ERR_SHAPE, "out",
         "last dimension must be out_features N = " + std::to_string(l->n) + ", got " + d.out.shape_text());
  }
  require_no_overlap(d.out, {&d.x});
  d.m = d.x.leading();
  d.n = l->n;
  d.k = l->k;
  const std::shared_ptr<const PreparedWeight> w = l->current();  // old or new, never a mix
  if (w->on_device) {
    forward_cuda(l, d, *w);
  } else if (run_host_product(*w, d)) {
    l->counters->implicit_copies.fetch_add(1, std::memory_order_relaxed);
  }
  l->counters->forwards.fetch_add(1, std::memory_order_relaxed);
}

// An update writes the new weight into fresh memory (forwards in flight
// keep reading the old one), and fresh memory costs a page fault and the
// kernel's zeroing per 4 KiB page as it is first written: most of the
// update's time. So from a linear's second update on, the storage of the
// weight an update retires is kept when its last holder lets go (the
// update itself, or the last forward that was reading it), and the next
// update writes into it (a buffer per part of the weight, each taken for a
// part of its size). A linear updated at most once holds no spare; one
// updated repeatedly holds one weight's host memory more, as a mutable
// tensor holds a spare version. (4096 x 4096 NVFP4, 2 threads, on a Zen 4
// VM: an update took 0.5-0.9 ms when the allocator handed back memory
// already mapped and 5-7 ms when it mapped new pages, which it did in most
// calls; docs/performance.md, sixty-second session.)
void update_weight(Q4_linear* l, const Q4_weight_bundle* w) {
  if (l == nullptr) fail(Q4_ERR_NULL_POINTER, "linear", "pointer is NULL");
  std::string why;
  std::vector<std::unique_ptr<Buffer>> reuse = l->spare->take();
  std::shared_ptr<const PreparedWeight> fresh = with_spare(
      prepare(w, l->settings, l->counters, l->path, l->format, l->n, l->k, &why, &reuse), l->spare);
  if (l->version.load() >= 2 && !l->settings.on_cuda()) {  // (this is the second update or a later one)
    std::lock_guard<std::mutex> lock(l->spare->mutex);
    l->spare->keep = true;
  }
  {
    std::lock_guard<std::mutex> lock(l->mutex);
    l->weight.swap(fresh);
  }
  l->version.fetch_add(1);
  note_prepared(l, why);
  // `fresh` now holds the old weight: released here or by the last forward
  // that copied it.
}

void destroy_linear(Q4_linear* l) {
  std::shared_ptr<SessionCounters> c = l->counters;
  format_count(l->session, l->format).fetch_sub(1);
  delete l;
  c->linears.fetch_sub(1);
}

namespace {

// The math a forward of `l` runs now (the active ISA's table): fast mode
// falls back to exact where the integer kernels are missing; the reason is
// empty when the requested math runs.
int32_t math_mode_used(const Q4_linear& l, std::string* reason) {
  if (l.settings.ops.math_mode != Q4_MATH_FAST || l.current()->path != CpuPath::Kernel) {
    return l.settings.ops.math_mode;
  }
  if (l.settings.on_cuda()) {
    if (reason != nullptr) *reason = "the CUDA kernels compute in exact mode only";
    return Q4_MATH_EXACT;
  }
  const kern::KernelTable& kt = kern::table_for(active_isa());
  const char* why =
      l.format == Q4_FORMAT_NF4 ? kern::fast_math_fallback_nf4(kt) : kern::fast_math_fallback_nvfp4(kt);
  if (why == nullptr) why = kern::fast_math_fallback_shape(kt, l.n, l.k);  // (exact at every M)
  if (why == nullptr) {
    // Fast mode runs, but the exact kernels take the M where this ISA's
    // integer kernels lose to them (the reason says which).
    const char* rows =
        kt.i8_fast_max_m > 0 ? kern::fast_math_fallback_rows(kt, kt.i8_fast_max_m + 1, l.n) : nullptr;
    if (rows == nullptr && l.format == Q4_FORMAT_NF4) {
      rows = kern::fast_math_fallback_nf4_rows(kt, 1);  // small M, else large M
      if (rows == nullptr) rows = kern::fast_math_fallback_nf4_rows(kt, int64_t{1} << 20);
    }
    if (reason != nullptr && rows != nullptr) *reason = rows;
    return Q4_MATH_FAST;
  }
  if (reason != nullptr) *reason = why;
  return Q4_MATH_EXACT;
}

}  // namespace

void linear_info(const Q4_linear* l, Q4_linear_info* out) {
  if (l == nullptr) fail(Q4_ERR_NULL_POINTER, "linear", "pointer is NULL");
  require_out_struct(out, "info");
  const auto w = l->current();
  Q4_linear_info r;
  std::memset(&r, 0, sizeof r);
  r.format = l->format;
  {
    std::lock_guard<std::mutex> lock(l->info_mutex);
    r.backend = l->backend_used;
    r.fell_back = l->fallback_reason.empty() ? 0 : 1;
  }
  r.compute_path = l->settings.ops.compute_path;
  r.isa = active_isa();
  r.target = w->on_device ? Q4_TARGET_CUDA : Q4_TARGET_CPU;
  r.unified_memory = w->managed ? 1 : 0;
  r.scale_layout = Q4_SCALE_LINEAR;
  r.math_mode = l->settings.ops.math_mode;
  r.out_features = l->n;
  r.in_features = l->k;
  r.weight_bytes = w->bytes();
  r.weight_version = l->version.load();
  write_struct(out, r, "info");
}

std::string linear_diagnostics(const Q4_linear& l) {
  const auto w = l.current();
  nlohmann::json j;
  j["format"] = names::format_name(l.format);
  {
    std::lock_guard<std::mutex> lock(l.info_mutex);
    j["backend"] = names::backend_name(l.backend_used);
    j["fallbackReason"] = l.fallback_reason;
  }
  j["computePath"] = names::path_name(l.settings.ops.compute_path);
  j["nativeLoadState"] = cuda::plugin().load_state;
  j["isa"] = isa_name(active_isa());
  j["target"] = w->on_device ? "cuda" : "cpu";
  j["device"] = w->on_device ? "cuda:" + std::to_string(w->device) + " (" + l.settings.device_name + ")"
                             : std::string("cpu");
  j["unifiedMemory"] = {{"policy", names::um_name(l.settings.unified_memory)},
                        {"active", w->managed},
                        {"reason", l.settings.unified_memory_reason}};
  j["scaleLayout"] = l.format == Q4_FORMAT_NF4 ? "absmax" : "linear";
  j["mathMode"] = names::math_name(l.settings.ops.math_mode);
  std::string math_reason;
  j["mathModeUsed"] = names::math_name(math_mode_used(l, &math_reason));
  j["mathFallbackReason"] = math_reason;
  j["outFeatures"] = l.n;
  j["inFeatures"] = l.k;
  j["weightBytes"] = w->bytes();
  j["weightVersion"] = l.version.load();
  j["hasBias"] = w->bias != nullptr;
  return j.dump();
}

}  // namespace q4::core
