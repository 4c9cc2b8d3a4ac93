#include "core/session.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>

#include "common/cpu_features.h"
#include "common/error.h"
#include "common/struct_size.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "core/cuda_backend.h"
#include "core/op_helpers.h"
#include "core/ops.h"
#include "core/tuner.h"
#include "formats/codec.h"
#include "kernels/cpu_ops.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref_ops.h"

namespace q4::core {

// ---------------------------------------------------------------------------
// Buffer
// ---------------------------------------------------------------------------
Buffer::Buffer(std::shared_ptr<SessionCounters> counters, int64_t bytes)
    : counters_(std::move(counters)), size_(bytes) {
  const size_t alloc = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  data_ = static_cast<uint8_t*>(::operator new[](alloc, std::align_val_t(64)));
  counters_->buffers.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes.fetch_add(bytes, std::memory_order_relaxed);
}

Buffer::~Buffer() {
  ::operator delete[](data_, std::align_val_t(64));
  counters_->buffers.fetch_sub(1, std::memory_order_relaxed);
  counters_->bytes.fetch_sub(size_, std::memory_order_relaxed);
}

namespace {

const char* path_name(int32_t p) {
  switch (p) {
    case Q4_PATH_KERNEL_ONLY:
      return "KernelOnly";
    case Q4_PATH_KERNEL_OR_FALLBACK:
      return "KernelOrFallback";
    case Q4_PATH_DEQUANT_MATMUL_ONLY:
      return "DequantMatmulOnly";
    default:
      return "Auto";
  }
}

const char* backend_name(int32_t b) {
  switch (b) {
    case Q4_BACKEND_NVFP4_KERNEL:
      return "nvfp4-kernel";
    case Q4_BACKEND_NF4_KERNEL:
      return "nf4-kernel";
    case Q4_BACKEND_DEQUANT_MATMUL:
      return "dequant-matmul";
    default:
      return "auto";
  }
}

const char* um_name(int32_t um) {
  switch (um) {
    case Q4_UM_PREFER:
      return "PreferUnified";
    case Q4_UM_REQUIRE:
      return "RequireUnified";
    default:
      return "Disabled";
  }
}

}  // namespace

int32_t copy_out(const std::string& text, char* buf, size_t cap, size_t* needed) {
  if (needed == nullptr) fail(Q4_ERR_NULL_POINTER, "needed", "output pointer is NULL");
  *needed = text.size() + 1;
  if (buf == nullptr) return Q4_ERR_BUFFER_TOO_SMALL;  // the size query
  if (cap < text.size() + 1) {
    fail(Q4_ERR_BUFFER_TOO_SMALL, "cap",
         "need " + std::to_string(text.size() + 1) + " bytes, got " + std::to_string(cap));
  }
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  return Q4_OK;
}

// ---------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------
SessionSettings resolve_session_config(const Q4_session_config* config) {
  SessionSettings s;
  if (config == nullptr) return s;
  const Q4_session_config cfg = read_struct(config, "config");
  const Q4_session_config* c = &cfg;
  // Reuse the per-call option checks for the shared fields.
  Q4_op_options o{};
  o.struct_size = sizeof o;
  o.compute_path = c->compute_path;
  o.backend = c->backend;
  o.target = c->target;
  o.device_id = c->device_id;
  o.math_mode = c->math_mode;
  o.num_threads = c->num_threads;
  if (c->unified_memory < Q4_UM_DISABLED || c->unified_memory > Q4_UM_REQUIRE) {
    fail(Q4_ERR_INVALID_ARGUMENT, "config->unified_memory",
         "expected Q4_UM_DISABLED, Q4_UM_PREFER or Q4_UM_REQUIRE, got " + std::to_string(c->unified_memory));
  }
  if (c->diagnostics != 0 && c->diagnostics != 1) {
    fail(Q4_ERR_INVALID_ARGUMENT, "config->diagnostics",
         "expected 0 or 1, got " + std::to_string(c->diagnostics));
  }
  if (c->unified_memory == Q4_UM_REQUIRE) {
    fail(Q4_ERR_NOT_AVAILABLE, "config->unified_memory",
         "RequireUnified: managed memory needs the CUDA backend, which this build does not have");
  }
  s.ops = resolve_options(&o);  // CUDA target -> Q4_ERR_NOT_AVAILABLE
  s.unified_memory = c->unified_memory;
  s.diagnostics = c->diagnostics != 0;
  if (c->unified_memory == Q4_UM_PREFER) {
    s.unified_memory_reason =
        "PreferUnified: managed memory unavailable (CUDA backend not built); using ordinary memory";
    log_message(Q4_LOG_INFO, s.unified_memory_reason);
  }
  return s;
}

void fill_stats(const Q4_session& s, Q4_session_stats* out) {
  require_out_struct(out, "stats");
  Q4_session_stats r;
  std::memset(&r, 0, sizeof r);
  r.live_linears = s.counters->linears.load();
  r.live_mutables = s.counters->mutables.load();
  r.live_snapshots = s.counters->snapshots.load();
  r.live_buffers = s.counters->buffers.load();
  r.live_bytes = s.counters->bytes.load();
  r.managed_bytes = s.counters->managed_bytes.load();
  r.forwards = s.counters->forwards.load();
  r.implicit_copies = s.counters->implicit_copies.load();
  write_struct(out, r, "stats");
}

void destroy_session(Q4_session* s) {
  const SessionCounters& c = *s->counters;
  const int32_t l = c.linears.load(), m = c.mutables.load(), sn = c.snapshots.load();
  if (l != 0 || m != 0 || sn != 0) {
    fail(Q4_ERR_STATE, "session",
         "still owns " + std::to_string(l) + " linear(s), " + std::to_string(m) + " mutable tensor(s) and " +
             std::to_string(sn) + " snapshot(s); destroy or release them first");
  }
  delete s;
}

std::string session_diagnostics(const Q4_session& s) {
  Q4_session_stats st{};
  st.struct_size = sizeof st;
  fill_stats(s, &st);
  nlohmann::json j;
  j["computePath"] = path_name(s.settings.ops.compute_path);
  j["backend"] = backend_name(s.settings.ops.backend);
  j["target"] = "cpu";
  j["device"] = "cpu";
  j["isa"] = isa_name(active_isa());
  j["threads"] = s.settings.ops.num_threads > 0 ? s.settings.ops.num_threads : default_num_threads();
  j["mathMode"] = s.settings.ops.math_mode == Q4_MATH_FAST ? "fast" : "exact";
  j["nativeLoadState"] = cuda::plugin().load_state;
  j["unifiedMemory"] = {{"policy", um_name(s.settings.unified_memory)},
                        {"active", false},
                        {"reason", s.settings.unified_memory_reason}};
  j["stats"] = {{"liveLinears", st.live_linears},      {"liveMutables", st.live_mutables},
                {"liveSnapshots", st.live_snapshots},  {"liveBuffers", st.live_buffers},
                {"liveBytes", st.live_bytes},          {"forwards", st.forwards},
                {"implicitCopies", st.implicit_copies}};
  return j.dump();
}

// ---------------------------------------------------------------------------
// Linears
// ---------------------------------------------------------------------------
namespace {

// The backend's ready form of one weight; immutable once built.
struct PreparedWeight {
  int32_t format = Q4_FORMAT_NVFP4;
  int64_t n = 0, k = 0;
  CpuPath path = CpuPath::Kernel;
  std::unique_ptr<Buffer> q;        // packed data
  std::unique_ptr<Buffer> s;        // NVFP4 linear E4M3 scales
  std::unique_ptr<Buffer> absmax;   // NF4 fp32 absmax per block
  std::unique_ptr<Buffer> dequant;  // fp32 [N, K] for dequant-matmul
  std::unique_ptr<Buffer> bias;     // fp32 [N]
  float g = 1.0f;
  float lut[16] = {};
  int64_t blocksize = 64;
  int32_t block_shift = 6;

  int64_t bytes() const {
    int64_t b = 0;
    for (const auto* p : {&q, &s, &absmax, &dequant, &bias}) b += *p ? (*p)->size() : 0;
    return b;
  }
  kern::NvWeights nv() const { return kern::NvWeights{q->data(), s->data(), g, k}; }
  kern::Nf4Weights nf4() const {
    return kern::Nf4Weights{q->data(),  reinterpret_cast<const float*>(absmax->data()), lut, k, blocksize,
                            block_shift};
  }
};

std::unique_ptr<Buffer> new_buffer(const std::shared_ptr<SessionCounters>& c, int64_t bytes) {
  return std::make_unique<Buffer>(c, bytes);
}

DLTensor bytes_view(Buffer& b, int64_t* shape, int32_t ndim, DLDataType dt) {
  DLTensor t{};
  t.data = b.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

// Quantize a float [N, K] weight into the prepared form.
void prepare_from_float(const Q4_weight_bundle& w, const SessionSettings& st,
                        const std::shared_ptr<SessionCounters>& c, PreparedWeight& p) {
  const TensorRef wt = check_tensor(w.weight, "weight->weight");
  require_float(wt);
  if (wt.ndim != 2)
    fail(Q4_ERR_SHAPE, "weight->weight", "a float weight must be 2-D [N, K], got " + wt.shape_text());
  p.n = wt.dim(0);
  p.k = wt.dim(1);
  Q4_op_options o{};
  o.struct_size = sizeof o;
  o.num_threads = st.ops.num_threads;
  if (p.format == Q4_FORMAT_NVFP4) {
    require_k_multiple_of_16(p.k, "weight->weight");
    if (!std::isfinite(w.global_scale) || w.global_scale < 0.0f) {
      fail(Q4_ERR_INVALID_ARGUMENT, "weight->global_scale", "expected a finite value >= 0 (0 = from amax)");
    }
    p.q = new_buffer(c, p.n * p.k / 2);
    p.s = new_buffer(c, p.n * p.k / 16);
    int64_t qs[2] = {p.n, p.k / 2}, ss[2] = {p.n, p.k / 16};
    DLTensor tq = bytes_view(*p.q, qs, 2, DLDataType{kDLUInt, 8, 1});
    DLTensor ts = bytes_view(*p.s, ss, 2, DLDataType{kDLUInt, 8, 1});
    nvfp4_quantize(w.weight, &tq, &ts, Q4_SCALE_LINEAR, w.global_scale, &p.g, &o);
  } else {
    p.blocksize = require_blocksize(w.blocksize == 0 ? 64 : w.blocksize, "weight->blocksize");
    const int64_t numel = p.n * p.k;
    const int64_t nblocks = (numel + p.blocksize - 1) / p.blocksize;
    p.q = new_buffer(c, (numel + 1) / 2);
    p.absmax = new_buffer(c, nblocks * 4);
    int64_t qs[1] = {(numel + 1) / 2}, as[1] = {nblocks};
    DLTensor tq = bytes_view(*p.q, qs, 1, DLDataType{kDLUInt, 8, 1});
    DLTensor ta = bytes_view(*p.absmax, as, 1, DLDataType{kDLFloat, 32, 1});
    nf4_quantize(w.weight, &tq, &ta, static_cast<int32_t>(p.blocksize), &o);
    for (uint32_t code = 0; code < 16; ++code) p.lut[code] = fmt::nf4_decode(code);
  }
}

void prepare_from_packed(const Q4_weight_bundle& w, const std::shared_ptr<SessionCounters>& c,
                         PreparedWeight& p) {
  if (w.out_features <= 0 || w.in_features <= 0) {
    fail(Q4_ERR_SHAPE, "weight->out_features",
         "packed weights need out_features and in_features > 0, got " + std::to_string(w.out_features) +
             " x " + std::to_string(w.in_features));
  }
  p.n = w.out_features;
  p.k = w.in_features;
  const int64_t numel = checked_mul(p.n, p.k, "weight->in_features");
  const TensorRef q = check_tensor(w.weight, "weight->weight");
  require_packed_bytes(q);
  if (p.format == Q4_FORMAT_NVFP4) {
    require_k_multiple_of_16(p.k, "weight->in_features");
    require_layout(w.scale_layout);
    require_scale_value(w.global_scale, "weight->global_scale", false);
    require_nbytes(q, numel / 2, "N*K/2 packed bytes");
    const TensorRef s = check_tensor(w.scale, "weight->scale");
    require_scale_bytes(s);
    require_nbytes(s, scale_bytes(p.n, p.k, w.scale_layout, "weight->scale"),
                   scale_why(p.n, p.k, w.scale_layout));
    p.q = new_buffer(c, numel / 2);
    std::memcpy(p.q->data(), q.data, static_cast<size_t>(numel / 2));
    p.s = new_buffer(c, numel / 16);
    const LinearScales ls = linear_scales(s, w.scale_layout, p.n, p.k);
    std::memcpy(p.s->data(), ls.p, static_cast<size_t>(numel / 16));
    p.g = w.global_scale;
  } else {
    require_nbytes(q, (numel + 1) / 2, "ceil(N*K/2) packed bytes");
    const Nf4State st = parse_nf4_state(w.nf4, numel);
    p.blocksize = st.stats.blocksize;
    p.q = new_buffer(c, (numel + 1) / 2);
    std::memcpy(p.q->data(), q.data, static_cast<size_t>((numel + 1) / 2));
    const int64_t nblocks = (numel + p.blocksize - 1) / p.blocksize;
    p.absmax = new_buffer(c, nblocks * 4);
    auto* am = reinterpret_cast<float*>(p.absmax->data());
    for (int64_t b = 0; b < nblocks; ++b) am[b] = st.stats.absmax_of_block(b);
    for (uint32_t code = 0; code < 16; ++code) p.lut[code] = st.stats.code_value(code);
  }
}

std::shared_ptr<const PreparedWeight> prepare(const Q4_weight_bundle* bundle, const SessionSettings& st,
                                              const std::shared_ptr<SessionCounters>& c, CpuPath path,
                                              int32_t expect_format, int64_t expect_n, int64_t expect_k) {
  const Q4_weight_bundle wb = read_struct(bundle, "weight");
  const Q4_weight_bundle* w = &wb;
  if (w->format != Q4_FORMAT_NVFP4 && w->format != Q4_FORMAT_NF4) {
    fail(Q4_ERR_INVALID_ARGUMENT, "weight->format",
         "expected Q4_FORMAT_NVFP4 (1) or Q4_FORMAT_NF4 (2), got " + std::to_string(w->format));
  }
  if (w->source != Q4_WEIGHT_PACKED && w->source != Q4_WEIGHT_FLOAT) {
    fail(Q4_ERR_INVALID_ARGUMENT, "weight->source",
         "expected Q4_WEIGHT_PACKED (0) or Q4_WEIGHT_FLOAT (1), got " + std::to_string(w->source));
  }
  if (expect_format != 0 && w->format != expect_format) {
    fail(Q4_ERR_INVALID_ARGUMENT, "weight->format", "an update must keep the linear's format");
  }
  auto p = std::make_shared<PreparedWeight>();
  p->format = w->format;
  p->path = path;
  if (w->source == Q4_WEIGHT_FLOAT) {
    prepare_from_float(*w, st, c, *p);
  } else {
    prepare_from_packed(*w, c, *p);
  }
  if (expect_n > 0 && (p->n != expect_n || p->k != expect_k)) {
    fail(Q4_ERR_SHAPE, "weight",
         "an update must keep the shape [" + std::to_string(expect_n) + ", " + std::to_string(expect_k) +
             "], got [" + std::to_string(p->n) + ", " + std::to_string(p->k) + "]");
  }
  if (p->format == Q4_FORMAT_NF4) {
    while ((int64_t{1} << p->block_shift) < p->blocksize) ++p->block_shift;
    while ((int64_t{1} << p->block_shift) > p->blocksize) --p->block_shift;
  }
  if (w->bias != nullptr) {
    const Bias b = parse_bias(w->bias, p->n);
    p->bias = new_buffer(c, p->n * 4);
    kern::load_row(b.ptr.data, b.ptr.type, 0, p->n, reinterpret_cast<float*>(p->bias->data()));
  }
  if (path == CpuPath::DequantMatmul) {
    // The dequant-matmul backend's ready form is the fp32 weight itself.
    p->dequant = new_buffer(c, p->n * p->k * 4);
    auto* d = reinterpret_cast<float*>(p->dequant->data());
    if (p->format == Q4_FORMAT_NVFP4) {
      kern::dequantize_nvfp4(kern::active_table(), p->q->data(), p->s->data(), p->g, p->n, p->k, d,
                             st.ops.num_threads);
    } else {
      const kern::Nf4Weights nw = p->nf4();
      for (int64_t f = 0; f < p->n * p->k; ++f) {
        const uint8_t byte = nw.q[f >> 1];
        d[f] = nw.lut[(f & 1) ? (byte & 0xfu) : (byte >> 4)] * nw.absmax[f >> nw.block_shift];
      }
    }
    p->q.reset();
    p->s.reset();
    p->absmax.reset();
  }
  return p;
}

}  // namespace
}  // namespace q4::core

struct Q4_linear {
  Q4_session* session = nullptr;
  std::shared_ptr<q4::core::SessionCounters> counters;
  q4::core::SessionSettings settings;
  int32_t format = 0;
  int64_t n = 0, k = 0;
  int32_t scale_layout = Q4_SCALE_LINEAR;
  q4::CpuPath path = q4::CpuPath::Kernel;
  int32_t backend_used = Q4_BACKEND_AUTO;
  std::string fallback_reason;
  mutable std::mutex mutex;  // guards `weight` (copied out by forwards)
  std::shared_ptr<const q4::core::PreparedWeight> weight;
  std::atomic<uint64_t> version{1};

  std::shared_ptr<const q4::core::PreparedWeight> current() const {
    std::lock_guard<std::mutex> lock(mutex);
    return weight;
  }
};

namespace q4::core {

Q4_linear* create_linear(Q4_session* s, const Q4_weight_bundle* w) {
  if (s == nullptr) fail(Q4_ERR_NULL_POINTER, "session", "pointer is NULL");
  const int32_t format = read_struct(w, "weight").format == Q4_FORMAT_NF4 ? Q4_FORMAT_NF4 : Q4_FORMAT_NVFP4;
  const CpuPath path = choose_cpu_path(s->settings.ops, format);  // forced wrong kernel -> error
  check_math_mode(s->settings.ops, path);
  auto l = std::make_unique<Q4_linear>();
  l->session = s;
  l->counters = s->counters;
  l->settings = s->settings;
  l->path = path;
  l->weight = prepare(w, s->settings, s->counters, path, 0, 0, 0);
  l->format = l->weight->format;
  l->n = l->weight->n;
  l->k = l->weight->k;
  l->backend_used = path == CpuPath::DequantMatmul
                        ? Q4_BACKEND_DEQUANT_MATMUL
                        : (format == Q4_FORMAT_NF4 ? Q4_BACKEND_NF4_KERNEL : Q4_BACKEND_NVFP4_KERNEL);
  if (path == CpuPath::DequantMatmul) {
    l->fallback_reason = s->settings.ops.compute_path == Q4_PATH_DEQUANT_MATMUL_ONLY
                             ? "compute path DequantMatmulOnly requested"
                             : "backend override dequant-matmul requested";
  }
  s->counters->linears.fetch_add(1);
  return l.release();
}

void forward(Q4_linear* l, const DLTensor* x_t, DLTensor* out_t) {
  if (l == nullptr) fail(Q4_ERR_NULL_POINTER, "linear", "pointer is NULL");
  const TensorRef x = check_tensor(x_t, "x");
  require_float(x);
  require_min_ndim(x, 1);
  if (x.last_dim() != l->k) {
    fail(Q4_ERR_SHAPE, "x",
         "last dimension must be in_features K = " + std::to_string(l->k) + ", got " + x.shape_text());
  }
  const TensorRef out = check_tensor(out_t, "out");
  require_float(out);
  require_same_leading(out, x);
  if (out.last_dim() != l->n) {
    fail(Q4_ERR_SHAPE, "out",
         "last dimension must be out_features N = " + std::to_string(l->n) + ", got " + out.shape_text());
  }
  require_no_overlap(out, {&x});
  const int64_t m = x.leading();
  const int32_t threads = l->settings.ops.num_threads;
  const std::shared_ptr<const PreparedWeight> w = l->current();  // old or new, never a mix
  tuner::ensure_loaded();
  const kern::KernelTable& kt = kern::active_table();
  const F32View xv = f32_view(x, threads);
  if (xv.copied()) l->counters->implicit_copies.fetch_add(1, std::memory_order_relaxed);
  F32Result r = f32_result(out);
  if (w->k == 0) {
    std::fill(r.p, r.p + m * w->n, 0.0f);
  } else if (w->path == CpuPath::DequantMatmul) {
    kern::gemm_f32(kt, xv.p, m, w->k, reinterpret_cast<const float*>(w->dequant->data()), w->n, r.p, threads,
                   kern::gemm_blocking());
  } else if (w->format == Q4_FORMAT_NVFP4) {
    if (l->settings.ops.math_mode == Q4_MATH_FAST) {
      kern::linear_nvfp4_fast(xv.p, m, w->nv(), w->n, r.p, threads);
    } else {
      kern::linear_nvfp4(kt, xv.p, m, w->nv(), w->n, r.p, threads);
    }
  } else {
    if (l->settings.ops.math_mode == Q4_MATH_FAST) {
      kern::linear_nf4_fast(xv.p, m, w->nf4(), w->n, r.p, threads);
    } else {
      kern::linear_nf4(kt, xv.p, m, w->nf4(), w->n, r.p, threads);
    }
  }
  const kern::FloatPtr bias{w->bias ? w->bias->data() : nullptr, kern::FType::F32};
  finish(r, w->n, 1.0f, w->bias ? &bias : nullptr, threads);
  l->counters->forwards.fetch_add(1, std::memory_order_relaxed);
}

void update_weight(Q4_linear* l, const Q4_weight_bundle* w) {
  if (l == nullptr) fail(Q4_ERR_NULL_POINTER, "linear", "pointer is NULL");
  std::shared_ptr<const PreparedWeight> fresh =
      prepare(w, l->settings, l->counters, l->path, l->format, l->n, l->k);
  {
    std::lock_guard<std::mutex> lock(l->mutex);
    l->weight.swap(fresh);
  }
  l->version.fetch_add(1);
  // `fresh` now holds the old weight; it is freed here or when the last
  // forward that copied it returns.
}

void destroy_linear(Q4_linear* l) {
  std::shared_ptr<SessionCounters> c = l->counters;
  delete l;
  c->linears.fetch_sub(1);
}

void linear_info(const Q4_linear* l, Q4_linear_info* out) {
  if (l == nullptr) fail(Q4_ERR_NULL_POINTER, "linear", "pointer is NULL");
  require_out_struct(out, "info");
  const auto w = l->current();
  Q4_linear_info r;
  std::memset(&r, 0, sizeof r);
  r.format = l->format;
  r.backend = l->backend_used;
  r.compute_path = l->settings.ops.compute_path;
  r.fell_back = l->fallback_reason.empty() ? 0 : 1;
  r.isa = active_isa();
  r.target = Q4_TARGET_CPU;
  r.unified_memory = 0;
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
  j["format"] = l.format == Q4_FORMAT_NF4 ? "nf4" : "nvfp4";
  j["backend"] = backend_name(l.backend_used);
  j["computePath"] = path_name(l.settings.ops.compute_path);
  j["fallbackReason"] = l.fallback_reason;
  j["nativeLoadState"] = cuda::plugin().load_state;
  j["isa"] = isa_name(active_isa());
  j["device"] = "cpu";
  j["unifiedMemory"] = {{"policy", um_name(l.settings.unified_memory)},
                        {"active", false},
                        {"reason", l.settings.unified_memory_reason}};
  j["scaleLayout"] = l.format == Q4_FORMAT_NF4 ? "absmax" : "linear";
  j["mathMode"] = l.settings.ops.math_mode == Q4_MATH_FAST ? "fast" : "exact";
  j["outFeatures"] = l.n;
  j["inFeatures"] = l.k;
  j["weightBytes"] = w->bytes();
  j["weightVersion"] = l.version.load();
  j["hasBias"] = static_cast<bool>(w->bias);
  return j.dump();
}

}  // namespace q4::core

// ---------------------------------------------------------------------------
// Mutable tensors
// ---------------------------------------------------------------------------
namespace q4::core {
namespace {

struct Version {
  std::unique_ptr<Buffer> mem;
  uint64_t version = 0;
};

struct SnapshotCtx {
  DLManagedTensorVersioned managed{};
  std::shared_ptr<const Version> version;
  std::vector<int64_t> shape;
  std::shared_ptr<SessionCounters> counters;
};

void release_snapshot(DLManagedTensorVersioned* self) {
  if (self == nullptr) return;
  auto* ctx = static_cast<SnapshotCtx*>(self->manager_ctx);
  std::shared_ptr<SessionCounters> c = ctx->counters;
  delete ctx;
  c->snapshots.fetch_sub(1);
}

}  // namespace
}  // namespace q4::core

struct Q4_mutable {
  std::shared_ptr<q4::core::SessionCounters> counters;
  std::vector<int64_t> shape;
  DLDataType dtype{};
  int64_t nbytes = 0;
  mutable std::mutex mutex;
  std::shared_ptr<q4::core::Version> current;
  std::shared_ptr<q4::core::Version> writing;               // active writer's buffer
  std::vector<std::shared_ptr<q4::core::Version>> retired;  // may still be read
  std::shared_ptr<q4::core::Version> spare;                 // free for the next writer

  // Moves retired versions no reader holds to `spare` (one kept, rest freed).
  void sweep() {
    for (auto it = retired.begin(); it != retired.end();) {
      if (it->use_count() == 1) {
        if (!spare) spare = std::move(*it);
        it = retired.erase(it);
      } else {
        ++it;
      }
    }
  }
};

namespace q4::core {

Q4_mutable* create_mutable(Q4_session* s, int32_t ndim, const int64_t* shape, DLDataType dtype) {
  if (s == nullptr) fail(Q4_ERR_NULL_POINTER, "session", "pointer is NULL");
  if (ndim < 0 || ndim > 16) fail(Q4_ERR_SHAPE, "ndim", "expected 0..16, got " + std::to_string(ndim));
  if (ndim > 0 && shape == nullptr) fail(Q4_ERR_NULL_POINTER, "shape", "pointer is NULL");
  int64_t numel = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0) fail(Q4_ERR_SHAPE, "shape", "dimension " + std::to_string(i) + " is negative");
    numel = checked_mul(numel, shape[i], "shape");
  }
  if (dtype.lanes != 1 || dtype.bits == 0 || dtype.bits % 8 != 0 || dtype.bits > 64) {
    fail(Q4_ERR_DTYPE, "dtype", "expected a whole-byte scalar dtype, got " + dtype_text(dtype));
  }
  const int64_t nbytes = checked_mul(numel, dtype.bits / 8, "shape");
  if (nbytes > (int64_t{1} << 40)) fail(Q4_ERR_OVERFLOW, "shape", "tensor too large");
  auto m = std::make_unique<Q4_mutable>();
  m->counters = s->counters;
  m->shape.assign(shape, shape + ndim);
  m->dtype = dtype;
  m->nbytes = nbytes;
  m->current = std::make_shared<Version>();
  m->current->mem = std::make_unique<Buffer>(s->counters, nbytes);
  std::memset(m->current->mem->data(), 0, static_cast<size_t>(nbytes));
  s->counters->mutables.fetch_add(1);
  return m.release();
}

void destroy_mutable(Q4_mutable* m) {
  {
    std::lock_guard<std::mutex> lock(m->mutex);
    if (m->writing) fail(Q4_ERR_STATE, "tensor", "a writer is active; commit or abort it first");
  }
  std::shared_ptr<SessionCounters> c = m->counters;
  delete m;  // versions still held by snapshots stay alive until released
  c->mutables.fetch_sub(1);
}

void begin_write(Q4_mutable* m, int32_t mode, DLTensor* view) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  if (view == nullptr) fail(Q4_ERR_NULL_POINTER, "view", "pointer is NULL");
  if (mode != Q4_WRITE_KEEP && mode != Q4_WRITE_DISCARD) {
    fail(Q4_ERR_INVALID_ARGUMENT, "mode",
         "expected Q4_WRITE_KEEP or Q4_WRITE_DISCARD, got " + std::to_string(mode));
  }
  std::shared_ptr<Version> buf, base;
  {
    std::lock_guard<std::mutex> lock(m->mutex);
    if (m->writing) fail(Q4_ERR_BUSY, "tensor", "another writer is active");
    m->sweep();
    if (m->spare) {
      buf = std::move(m->spare);
    } else {
      buf = std::make_shared<Version>();
      buf->mem = std::make_unique<Buffer>(m->counters, m->nbytes);
    }
    m->writing = buf;
    base = m->current;
  }
  // The committed version is immutable, so the copy needs no lock.
  if (mode == Q4_WRITE_KEEP) std::memcpy(buf->mem->data(), base->mem->data(), static_cast<size_t>(m->nbytes));
  DLTensor t{};
  t.data = buf->mem->data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(m->shape.size());
  t.dtype = m->dtype;
  t.shape = m->shape.data();
  *view = t;
}

uint64_t commit(Q4_mutable* m) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  std::lock_guard<std::mutex> lock(m->mutex);
  if (!m->writing) fail(Q4_ERR_STATE, "tensor", "no write in progress");
  m->writing->version = m->current->version + 1;
  m->retired.push_back(std::move(m->current));
  m->current = std::move(m->writing);
  m->sweep();
  return m->current->version;
}

void abort_write(Q4_mutable* m) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  std::lock_guard<std::mutex> lock(m->mutex);
  if (!m->writing) fail(Q4_ERR_STATE, "tensor", "no write in progress");
  if (!m->spare) m->spare = std::move(m->writing);
  m->writing.reset();
}

DLManagedTensorVersioned* acquire(Q4_mutable* m, uint64_t* version) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  auto ctx = std::make_unique<SnapshotCtx>();
  {
    std::lock_guard<std::mutex> lock(m->mutex);
    ctx->version = m->current;
  }
  ctx->shape = m->shape;
  ctx->counters = m->counters;
  DLManagedTensorVersioned& mt = ctx->managed;
  mt.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  mt.manager_ctx = ctx.get();
  mt.deleter = release_snapshot;
  mt.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  mt.dl_tensor.data = const_cast<uint8_t*>(ctx->version->mem->data());
  mt.dl_tensor.device = DLDevice{kDLCPU, 0};
  mt.dl_tensor.ndim = static_cast<int32_t>(ctx->shape.size());
  mt.dl_tensor.dtype = m->dtype;
  mt.dl_tensor.shape = ctx->shape.data();
  mt.dl_tensor.strides = nullptr;
  mt.dl_tensor.byte_offset = 0;
  if (version != nullptr) *version = ctx->version->version;
  m->counters->snapshots.fetch_add(1);
  return &ctx.release()->managed;
}

uint64_t version_of(const Q4_mutable* m) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  std::lock_guard<std::mutex> lock(m->mutex);
  return m->current->version;
}

// ---------------------------------------------------------------------------
// Training helpers
// ---------------------------------------------------------------------------
void fake_quantize(const DLTensor* x_t, DLTensor* out_t, float g, float* g_out, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
  const TensorRef x = check_tensor(x_t, "x");
  require_float(x);
  require_min_ndim(x, 1);
  require_k_multiple_of_16(x.last_dim(), "x");
  const TensorRef out = check_tensor(out_t, "out");
  require_float(out);
  if (out.ndim != x.ndim || !std::equal(x.shape, x.shape + x.ndim, out.shape)) {
    fail(Q4_ERR_SHAPE, "out", "must have the shape of x " + x.shape_text() + ", got " + out.shape_text());
  }
  require_no_overlap(out, {&x});
  const int64_t rows = x.leading(), k = x.last_dim();
  std::vector<uint8_t> q(static_cast<size_t>(rows * k / 2)), s(static_cast<size_t>(rows * k / 16));
  int64_t qs[2] = {rows, k / 2}, ss[2] = {rows, k / 16};
  DLTensor tq{q.data(), DLDevice{kDLCPU, 0}, 2, DLDataType{kDLUInt, 8, 1}, qs, nullptr, 0};
  DLTensor ts{s.data(), DLDevice{kDLCPU, 0}, 2, DLDataType{kDLUInt, 8, 1}, ss, nullptr, 0};
  float used = 0.0f;
  nvfp4_quantize(x_t, &tq, &ts, Q4_SCALE_LINEAR, g, &used, opts);
  F32Result r = f32_result(out);
  kern::dequantize_nvfp4(kern::active_table(), q.data(), s.data(), used, rows, k, r.p, o.num_threads);
  finish(r, k, 1.0f, nullptr, o.num_threads);
  if (g_out != nullptr) *g_out = used;
}

namespace {

std::vector<float> transpose(const float* a, int64_t rows, int64_t cols) {
  std::vector<float> t(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t[static_cast<size_t>(j * rows + i)] = a[i * cols + j];
  }
  return t;
}

}  // namespace

void linear_backward(const DLTensor* gy_t, const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t,
                     int32_t layout, float g, DLTensor* gx_t, DLTensor* gw_t, const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options(opts);
  const int32_t threads = o.num_threads;
  const TensorRef gy = check_tensor(gy_t, "grad_y");
  require_float(gy);
  require_min_ndim(gy, 1);
  const int64_t m = gy.leading(), n = gy.last_dim();
  if (gx_t == nullptr && gw_t == nullptr)
    fail(Q4_ERR_NULL_POINTER, "grad_x", "grad_x and grad_w are both NULL");
  require_layout(layout);
  require_scale_value(g, "global_scale", false);
  const TensorRef wq = check_tensor(wq_t, "w_qdata");
  require_packed_bytes(wq);
  if (n == 0 || wq.nbytes % n != 0) {
    fail(Q4_ERR_SHAPE, "w_qdata",
         std::to_string(wq.nbytes) + " bytes are not N = " + std::to_string(n) + " rows");
  }
  const int64_t k = 2 * (wq.nbytes / n);
  require_k_multiple_of_16(k, "w_qdata");
  const TensorRef ws = check_tensor(ws_t, "w_scale");
  require_scale_bytes(ws);
  require_nbytes(ws, scale_bytes(n, k, layout, "w_scale"), scale_why(n, k, layout));
  TensorRef gx, gw, x;
  if (gx_t != nullptr) {
    gx = check_tensor(gx_t, "grad_x");
    require_float(gx);
    require_same_leading(gx, gy);
    if (gx.last_dim() != k) fail(Q4_ERR_SHAPE, "grad_x", "last dimension must be K = " + std::to_string(k));
    require_no_overlap(gx, {&gy, &wq, &ws});
  }
  if (gw_t != nullptr) {
    x = check_tensor(x_t, "x");
    require_float(x);
    require_same_leading(x, gy);
    if (x.last_dim() != k) fail(Q4_ERR_SHAPE, "x", "last dimension must be K = " + std::to_string(k));
    gw = check_tensor(gw_t, "grad_w");
    require_float(gw);
    require_numel(gw, n * k, "grad_w is [N, K]");
    require_no_overlap(gw, {&gy, &x, &wq, &ws});
    if (gx_t != nullptr) require_no_overlap(gw, {&gx});
  }
  const kern::KernelTable& kt = kern::active_table();
  const F32View gyv = f32_view(gy, threads);
  if (gx_t != nullptr) {
    // grad_x[M,K] = grad_y[M,N] . W[N,K]  ->  gemm_nt with B = W^T [K, N].
    const LinearScales ls = linear_scales(ws, layout, n, k);
    std::vector<float> w(static_cast<size_t>(n * k));
    kern::dequantize_nvfp4(kt, wq.data, ls.p, g, n, k, w.data(), threads);
    const std::vector<float> wt = transpose(w.data(), n, k);
    F32Result r = f32_result(gx);
    kern::gemm_f32(kt, gyv.p, m, n, wt.data(), k, r.p, threads, kern::gemm_blocking());
    finish(r, k, 1.0f, nullptr, threads);
  }
  if (gw_t != nullptr) {
    // grad_w[N,K] = grad_y^T[N,M] . x[M,K]  ->  gemm_nt(gy^T, x^T).
    const F32View xv = f32_view(x, threads);
    const std::vector<float> gyt = transpose(gyv.p, m, n);
    const std::vector<float> xt = transpose(xv.p, m, k);
    F32Result r = f32_result(gw);
    if (m == 0) {
      std::fill(r.p, r.p + n * k, 0.0f);
    } else {
      kern::gemm_f32(kt, gyt.data(), n, m, xt.data(), k, r.p, threads, kern::gemm_blocking());
    }
    finish(r, k, 1.0f, nullptr, threads);
  }
}

}  // namespace q4::core
