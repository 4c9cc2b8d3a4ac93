#include "core/cuda_backend.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "common/tensor.h"
#include "core/op_helpers.h"
#include "core/options.h"
#include "cuda/seams.h"

#ifndef NVFP4_CUDA_PLUGIN_BUILT
#define NVFP4_CUDA_PLUGIN_BUILT 0
#endif

namespace q4::cuda {
namespace {

// Directory of this library (dladdr on one of its own symbols).
std::string core_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&core_dir), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

PluginState load() {
  PluginState st;
  st.built = NVFP4_CUDA_PLUGIN_BUILT != 0;
  const char* env = std::getenv("NVFP4_CUDA_PLUGIN");
  if (env != nullptr && std::strcmp(env, "off") == 0) {
    st.load_state = "CUDA plugin disabled by NVFP4_CUDA_PLUGIN=off";
    return st;
  }
  if (!st.built && (env == nullptr || *env == '\0')) {
    st.load_state =
        "CUDA plugin not built into this library (configured with NVFP4_CUDA=OFF or without nvcc)";
    return st;
  }
  std::string tried;
  for (const std::string& path : plugin_search_order(core_dir(), env)) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* err = dlerror();
      tried += "[" + path + ": " + (err ? err : "not found") + "] ";
      continue;
    }
    auto entry = reinterpret_cast<nvfp4_cuda_plugin_entry_fn>(dlsym(h, "nvfp4_cuda_plugin_entry"));
    if (entry == nullptr) {
      tried += "[" + path + ": no nvfp4_cuda_plugin_entry] ";
      dlclose(h);
      continue;
    }
    nvfp4_cuda_plugin_v1 api{};
    const int32_t rc = entry(NVFP4_CUDA_PLUGIN_ABI, &api);
    if (rc != Q4_OK || api.abi != NVFP4_CUDA_PLUGIN_ABI || api.struct_size < sizeof api) {
      tried += "[" + path + ": ABI handshake failed (core " + std::to_string(NVFP4_CUDA_PLUGIN_ABI) + ")] ";
      dlclose(h);
      continue;
    }
    st.loaded = true;
    st.path = path;
    st.api = api;
    api.probe(&st.probe);
    std::string devices;
    for (int32_t d = 0; d < st.probe.device_count; ++d) {
      const auto& a = st.probe.devices[d];
      devices += std::string(d ? ", " : "") + a.name + " (sm_" + std::to_string(a.cc_major) +
                 std::to_string(a.cc_minor) + ")";
    }
    st.load_state =
        "loaded " + path + "; CUDA runtime " + std::to_string(st.probe.runtime_version) + ", driver " +
        std::to_string(st.probe.driver_version) + "; compiled for " + st.probe.compiled_archs + "; " +
        (st.probe.device_count > 0 ? std::to_string(st.probe.device_count) + " device(s): " + devices
                                   : std::string("no usable device: ") + st.probe.error);
    return st;  // the handle stays open for the life of the process
  }
  st.load_state = "CUDA plugin not found or not loadable: " + tried;
  return st;
}

const PluginState& loaded_api() {
  const PluginState& p = plugin();
  if (!p.loaded) fail(Q4_ERR_NOT_AVAILABLE, "", "CUDA backend not available: " + p.load_state);
  if (p.probe.device_count == 0) fail(Q4_ERR_NOT_AVAILABLE, "", "no CUDA device: " + p.load_state);
  return p;
}

void check_status(int32_t rc, const PluginState& p) {
  if (rc != Q4_OK) fail(rc, "", p.api.last_error());
}

int32_t elem_code(const TensorRef& t) {
  return t.type == ElemType::F16 ? NVFP4_CUDA_F16
                                 : (t.type == ElemType::BF16 ? NVFP4_CUDA_BF16 : NVFP4_CUDA_F32);
}

// All CUDA-side tensors of one call must be reachable from one device.
int32_t common_device(std::initializer_list<const TensorRef*> ts) {
  int32_t device = -1;
  for (const TensorRef* t : ts) {
    if (t == nullptr || t->device.device_type != kDLCUDA) continue;
    if (device >= 0 && t->device.device_id != device) {
      fail(Q4_ERR_DEVICE, t->name,
           "all CUDA tensors of a call must be on one device (" + std::to_string(device) + " vs " +
               std::to_string(t->device.device_id) + ")");
    }
    device = t->device.device_id;
  }
  for (const TensorRef* t : ts) {
    if (t == nullptr) continue;
    const int32_t dev = t->device.device_type;
    if (dev == kDLCPU) {
      fail(Q4_ERR_DEVICE, t->name,
           "is ordinary host memory while other arguments are on a CUDA device; use managed (kDLCUDAManaged) "
           "or "
           "pinned (kDLCUDAHost) memory, or copy it");
    }
  }
  return device < 0 ? 0 : device;
}

int32_t parse_threads_stream(const Q4_op_options* opts, void** stream) {
  const ResolvedOptions o = resolve_options_allow_cuda(opts);
  *stream = o.stream;
  return o.compute_path;
}

}  // namespace

const PluginState& plugin() {
  static const PluginState* state = new PluginState(load());  // loaded once, never unloaded
  return *state;
}

int32_t cuda_state() {
  const PluginState& p = plugin();
  if (!p.built && !p.loaded) return Q4_CUDA_NOT_BUILT;
  if (!p.loaded) return Q4_CUDA_NOT_LOADED;
  return p.probe.device_count > 0 ? Q4_CUDA_READY : Q4_CUDA_NO_DEVICE;
}

bool any_on_device(std::initializer_list<const DLTensor*> tensors) {
  for (const DLTensor* t : tensors) {
    if (t != nullptr && t->device.device_type == kDLCUDA) return true;
  }
  return false;
}

void nvfp4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* s_t, int32_t layout, float g, float* g_out,
                    const Q4_op_options* opts) {
  void* stream = nullptr;
  parse_threads_stream(opts, &stream);
  const TensorRef x = check_tensor_gpu(x_t, "x");
  require_float(x);
  require_min_ndim(x, 1);
  const int64_t k = x.last_dim(), rows = x.leading();
  core::require_k_multiple_of_16(k, "x");
  core::require_layout(layout);
  core::require_scale_value(g, "global_scale", true);
  const TensorRef q = check_tensor_gpu(q_t, "qdata");
  require_packed_bytes(q);
  require_nbytes(q, checked_mul(rows, k / 2, "qdata"), "rows*K/2 packed bytes");
  const TensorRef s = check_tensor_gpu(s_t, "scale");
  require_scale_bytes(s);
  require_nbytes(s, core::scale_bytes(rows, k, layout, "scale"), core::scale_why(rows, k, layout));
  require_no_overlap(q, {&x, &s});
  require_no_overlap(s, {&x});
  const int32_t device = common_device({&x, &q, &s});
  const PluginState& p = loaded_api();
  float used = 0.0f;
  int64_t bad = -1;
  const int32_t rc = p.api.nvfp4_quantize(device, x.data, elem_code(x), rows, k, g, q.data, s.data, layout,
                                          &used, &bad, stream);
  if (rc == Q4_ERR_NON_FINITE)
    fail(rc, "x", "non-finite value (NaN or Inf) at flat index " + std::to_string(bad));
  check_status(rc, p);
  if (g_out != nullptr) *g_out = used;
}

void nvfp4_dequantize(const DLTensor* q_t, const DLTensor* s_t, int32_t layout, float g, DLTensor* out_t,
                      const Q4_op_options* opts) {
  void* stream = nullptr;
  parse_threads_stream(opts, &stream);
  const TensorRef out = check_tensor_gpu(out_t, "out");
  require_float(out);
  require_min_ndim(out, 1);
  const int64_t k = out.last_dim(), rows = out.leading();
  core::require_k_multiple_of_16(k, "out");
  core::require_layout(layout);
  core::require_scale_value(g, "global_scale", false);
  const TensorRef q = check_tensor_gpu(q_t, "qdata");
  require_packed_bytes(q);
  require_nbytes(q, checked_mul(rows, k / 2, "qdata"), "rows*K/2 packed bytes");
  const TensorRef s = check_tensor_gpu(s_t, "scale");
  require_scale_bytes(s);
  require_nbytes(s, core::scale_bytes(rows, k, layout, "scale"), core::scale_why(rows, k, layout));
  require_no_overlap(out, {&q, &s});
  const int32_t device = common_device({&out, &q, &s});
  const PluginState& p = loaded_api();
  check_status(
      p.api.nvfp4_dequantize(device, q.data, s.data, layout, g, rows, k, out.data, elem_code(out), stream),
      p);
}

void nvfp4_linear(const DLTensor* x_t, const DLTensor* wq_t, const DLTensor* ws_t, int32_t layout, float g,
                  const DLTensor* bias_t, DLTensor* out_t, const Q4_op_options* opts) {
  void* stream = nullptr;
  parse_threads_stream(opts, &stream);
  const TensorRef x = check_tensor_gpu(x_t, "x");
  require_float(x);
  require_min_ndim(x, 1);
  const int64_t k = x.last_dim(), m = x.leading();
  core::require_k_multiple_of_16(k, "x");
  const TensorRef out = check_tensor_gpu(out_t, "out");
  require_float(out);
  core::require_same_leading(out, x);
  const int64_t n = out.last_dim();
  core::require_layout(layout);
  core::require_scale_value(g, "global_scale", false);
  const TensorRef wq = check_tensor_gpu(wq_t, "w_qdata");
  require_packed_bytes(wq);
  require_nbytes(wq, checked_mul(n, k / 2, "w_qdata"), "N*K/2 packed bytes");
  const TensorRef ws = check_tensor_gpu(ws_t, "w_scale");
  require_scale_bytes(ws);
  require_nbytes(ws, core::scale_bytes(n, k, layout, "w_scale"), core::scale_why(n, k, layout));
  TensorRef bias;
  bool has_bias = false;
  if (bias_t != nullptr) {
    bias = check_tensor_gpu(bias_t, "bias");
    require_float(bias);
    require_numel(bias, n, "one per output feature N");
    has_bias = true;
  }
  require_no_overlap(out, {&x, &wq, &ws, has_bias ? &bias : nullptr});
  const int32_t device = common_device({&x, &out, &wq, &ws, has_bias ? &bias : nullptr});
  const PluginState& p = loaded_api();
  check_status(p.api.nvfp4_linear(device, x.data, elem_code(x), m, k, wq.data, ws.data, layout, g, n,
                                  has_bias ? bias.data : nullptr, has_bias ? elem_code(bias) : 0, out.data,
                                  elem_code(out), stream),
               p);
}

void nvfp4_scaled_mm(const DLTensor* aq_t, const DLTensor* as_t, const DLTensor* bq_t, const DLTensor* bs_t,
                     int32_t layout, float alpha, const DLTensor* bias_t, DLTensor* out_t,
                     const Q4_op_options* opts) {
  const ResolvedOptions o = resolve_options_allow_cuda(opts);
  const TensorRef out = check_tensor_gpu(out_t, "out");
  require_float(out);
  require_min_ndim(out, 1);
  const int64_t n = out.last_dim(), m = out.leading();
  core::require_layout(layout);
  core::require_scale_value(alpha, "alpha", true);
  const TensorRef aq = check_tensor_gpu(aq_t, "a_qdata");
  require_packed_bytes(aq);
  const TensorRef bq = check_tensor_gpu(bq_t, "b_qdata");
  require_packed_bytes(bq);
  if (m == 0 || aq.nbytes % m != 0)
    fail(Q4_ERR_SHAPE, "a_qdata", "bytes are not a whole number of rows of out");
  const int64_t k = 2 * (aq.nbytes / m);
  core::require_k_multiple_of_16(k, "a_qdata");
  require_nbytes(bq, checked_mul(n, k / 2, "b_qdata"), "N*K/2 packed bytes, K taken from a_qdata");
  const TensorRef as = check_tensor_gpu(as_t, "a_scale");
  require_scale_bytes(as);
  require_nbytes(as, core::scale_bytes(m, k, layout, "a_scale"), core::scale_why(m, k, layout));
  const TensorRef bs = check_tensor_gpu(bs_t, "b_scale");
  require_scale_bytes(bs);
  require_nbytes(bs, core::scale_bytes(n, k, layout, "b_scale"), core::scale_why(n, k, layout));
  TensorRef bias;
  bool has_bias = false;
  if (bias_t != nullptr) {
    bias = check_tensor_gpu(bias_t, "bias");
    require_float(bias);
    require_numel(bias, n, "one per output feature N");
    has_bias = true;
  }
  require_no_overlap(out, {&aq, &as, &bq, &bs, has_bias ? &bias : nullptr});
  const int32_t device = common_device({&out, &aq, &as, &bq, &bs, has_bias ? &bias : nullptr});
  const PluginState& p = loaded_api();
  const int32_t allow_fallback = o.compute_path == Q4_PATH_KERNEL_ONLY ? 0 : 1;
  int32_t used_fallback = 0;
  check_status(p.api.nvfp4_scaled_mm(device, aq.data, as.data, bq.data, bs.data, layout, m, n, k, alpha,
                                     has_bias ? bias.data : nullptr, has_bias ? elem_code(bias) : 0, out.data,
                                     elem_code(out), allow_fallback, &used_fallback, o.stream),
               p);
  if (used_fallback)
    log_message(Q4_LOG_INFO,
                std::string("NVFP4_scaled_mm fell back to dequant-matmul: ") + p.api.last_error());
}

bool state_on_device(const NF4_state* st) {
  if (st == nullptr) return false;
  return any_on_device({st->absmax, st->quant_map, st->nested_absmax, st->nested_quant_map});
}

namespace {

// NF4 statistics on the device: fp32 absmax (double-quantized statistics
// must be resolved on the host first) and an optional 16-entry codebook.
struct DeviceNf4 {
  TensorRef absmax, quant_map;
  bool has_map = false;
  int64_t blocksize = 64;
};

DeviceNf4 parse_device_state(const NF4_state* st, int64_t n) {
  if (st == nullptr) fail(Q4_ERR_NULL_POINTER, "state", "NF4_state pointer is NULL");
  if (st->struct_size < offsetof(NF4_state, reserved))
    fail(Q4_ERR_INVALID_ARGUMENT, "state->struct_size", "too small");
  DeviceNf4 d;
  d.blocksize = core::require_blocksize(st->blocksize, "state->blocksize");
  if (st->nested_absmax != nullptr) {
    fail(Q4_ERR_UNSUPPORTED, "state->nested_absmax",
         "double-quantized NF4 statistics on CUDA tensors: resolve them first (Q4_linear_create does)");
  }
  d.absmax = check_tensor_gpu(st->absmax, "state->absmax");
  require_type(d.absmax, ElemType::F32);
  require_numel(d.absmax, (n + d.blocksize - 1) / d.blocksize, "one absmax per block");
  if (st->quant_map != nullptr) {
    d.quant_map = check_tensor_gpu(st->quant_map, "state->quant_map");
    require_type(d.quant_map, ElemType::F32);
    require_numel(d.quant_map, 16, "16-entry codebook");
    d.has_map = true;
  }
  return d;
}

}  // namespace

void nf4_quantize(const DLTensor* x_t, DLTensor* q_t, DLTensor* a_t, int32_t blocksize,
                  const Q4_op_options* opts) {
  void* stream = nullptr;
  parse_threads_stream(opts, &stream);
  const int64_t bs = core::require_blocksize(blocksize == 0 ? 64 : blocksize, "blocksize");
  const TensorRef x = check_tensor_gpu(x_t, "x");
  require_float(x);
  const int64_t n = x.numel;
  const TensorRef q = check_tensor_gpu(q_t, "qdata");
  require_packed_bytes(q);
  require_nbytes(q, (n + 1) / 2, "ceil(n/2) packed bytes");
  const TensorRef a = check_tensor_gpu(a_t, "absmax");
  require_type(a, ElemType::F32);
  require_numel(a, (n + bs - 1) / bs, "ceil(n/blocksize) blocks");
  require_no_overlap(q, {&x, &a});
  require_no_overlap(a, {&x});
  const int32_t device = common_device({&x, &q, &a});
  const PluginState& p = loaded_api();
  int64_t bad = -1;
  const int32_t rc = p.api.nf4_quantize(device, x.data, elem_code(x), n, bs, q.data,
                                        reinterpret_cast<float*>(a.data), &bad, stream);
  if (rc == Q4_ERR_NON_FINITE)
    fail(rc, "x", "non-finite value (NaN or Inf) at flat index " + std::to_string(bad));
  check_status(rc, p);
}

void nf4_dequantize(const DLTensor* q_t, const NF4_state* state, DLTensor* out_t, const Q4_op_options* opts) {
  void* stream = nullptr;
  parse_threads_stream(opts, &stream);
  const TensorRef out = check_tensor_gpu(out_t, "out");
  require_float(out);
  const int64_t n = out.numel;
  const TensorRef q = check_tensor_gpu(q_t, "qdata");
  require_packed_bytes(q);
  require_nbytes(q, (n + 1) / 2, "ceil(n/2) packed bytes");
  const DeviceNf4 st = parse_device_state(state, n);
  require_no_overlap(out, {&q, &st.absmax, st.has_map ? &st.quant_map : nullptr});
  const int32_t device = common_device({&out, &q, &st.absmax, st.has_map ? &st.quant_map : nullptr});
  const PluginState& p = loaded_api();
  check_status(p.api.nf4_dequantize(device, q.data, reinterpret_cast<const float*>(st.absmax.data),
                                    st.has_map ? reinterpret_cast<const float*>(st.quant_map.data) : nullptr,
                                    st.blocksize, n, out.data, elem_code(out), stream),
               p);
}

void nf4_scaled_mm(const DLTensor* x_t, const DLTensor* wq_t, const NF4_state* state, const DLTensor* bias_t,
                   DLTensor* out_t, const Q4_op_options* opts) {
  void* stream = nullptr;
  parse_threads_stream(opts, &stream);
  const TensorRef x = check_tensor_gpu(x_t, "x");
  require_float(x);
  require_min_ndim(x, 1);
  const int64_t k = x.last_dim(), m = x.leading();
  const TensorRef out = check_tensor_gpu(out_t, "out");
  require_float(out);
  core::require_same_leading(out, x);
  const int64_t n = out.last_dim();
  const int64_t wn = checked_mul(n, k, "w_qdata");
  const TensorRef wq = check_tensor_gpu(wq_t, "w_qdata");
  require_packed_bytes(wq);
  require_nbytes(wq, (wn + 1) / 2, "ceil(N*K/2) packed bytes");
  const DeviceNf4 st = parse_device_state(state, wn);
  TensorRef bias;
  bool has_bias = false;
  if (bias_t != nullptr) {
    bias = check_tensor_gpu(bias_t, "bias");
    require_float(bias);
    require_numel(bias, n, "one per output feature N");
    has_bias = true;
  }
  require_no_overlap(out,
                     {&x, &wq, &st.absmax, st.has_map ? &st.quant_map : nullptr, has_bias ? &bias : nullptr});
  const int32_t device = common_device(
      {&x, &out, &wq, &st.absmax, st.has_map ? &st.quant_map : nullptr, has_bias ? &bias : nullptr});
  const PluginState& p = loaded_api();
  check_status(p.api.nf4_linear(device, x.data, elem_code(x), m, k, wq.data,
                                reinterpret_cast<const float*>(st.absmax.data),
                                st.has_map ? reinterpret_cast<const float*>(st.quant_map.data) : nullptr,
                                st.blocksize, n, has_bias ? bias.data : nullptr,
                                has_bias ? elem_code(bias) : 0, out.data, elem_code(out), stream),
               p);
}

int32_t can_use_managed(int32_t device) {
  const PluginState& p = plugin();
  if (!p.loaded || device < 0 || device >= p.probe.device_count) return 0;
  const auto& a = p.probe.devices[device];
  return interpret_caps(a.cc_major, a.cc_minor, a.managed_memory, a.concurrent_managed_access,
                        a.pageable_memory_access, p.probe.compiled_archs)
                 .zero_copy
             ? 1
             : 0;
}

int32_t is_managed(const DLTensor* t_in) {
  const TensorRef t = check_tensor_gpu(t_in, "t");
  const PluginState& p = plugin();
  if (!p.loaded || t.data == nullptr) return 0;
  int32_t kind = 0, device = -1;
  check_status(p.api.pointer_info(t.data, &kind, &device), p);
  return kind == NVFP4_CUDA_MEM_MANAGED ? 1 : 0;
}

namespace {

struct ManagedCtx {
  DLManagedTensorVersioned managed{};
  std::vector<int64_t> shape;
  void* allocation = nullptr;  // owned managed memory, or NULL for a view
};

void delete_managed(DLManagedTensorVersioned* self) {
  if (self == nullptr) return;
  auto* ctx = static_cast<ManagedCtx*>(self->manager_ctx);
  if (ctx->allocation != nullptr) {
    const PluginState& p = plugin();
    if (p.loaded) p.api.free_managed(ctx->allocation);
  }
  delete ctx;
}

}  // namespace

DLManagedTensorVersioned* to_managed(const DLTensor* src_t, int32_t device, uint32_t flags) {
  const TensorRef src = check_tensor_gpu(src_t, "src");
  if (flags & ~7u) fail(Q4_ERR_INVALID_ARGUMENT, "flags", "unknown flag bits " + std::to_string(flags));
  const PluginState& p = loaded_api();
  if (device < 0 || device >= p.probe.device_count) {
    fail(Q4_ERR_INVALID_ARGUMENT, "device", "no CUDA device " + std::to_string(device));
  }
  if (!can_use_managed(device))
    fail(Q4_ERR_UNSUPPORTED, "device", "managed memory is not usable on this device");
  auto ctx = std::make_unique<ManagedCtx>();
  ctx->shape.assign(src.shape, src.shape + src.ndim);
  int32_t kind = 0, dev = -1;
  check_status(p.api.pointer_info(src.data, &kind, &dev), p);
  void* data = src.data;
  bool copied = false;
  if (kind != NVFP4_CUDA_MEM_MANAGED) {
    check_status(p.api.alloc_managed(static_cast<size_t>(src.nbytes), &ctx->allocation), p);
    const int32_t rc = p.api.copy(ctx->allocation, src.data, static_cast<size_t>(src.nbytes));
    if (rc != Q4_OK) {
      p.api.free_managed(ctx->allocation);
      ctx->allocation = nullptr;
      check_status(rc, p);
    }
    data = ctx->allocation;
    copied = true;
  }
  if (flags & Q4_MANAGED_READ_MOSTLY)
    check_status(p.api.advise_read_mostly(data, static_cast<size_t>(src.nbytes), device), p);
  if (flags & Q4_MANAGED_PREFETCH)
    check_status(p.api.prefetch(data, static_cast<size_t>(src.nbytes), device, nullptr), p);
  DLManagedTensorVersioned& m = ctx->managed;
  m.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m.manager_ctx = ctx.get();
  m.deleter = delete_managed;
  m.flags = copied ? DLPACK_FLAG_BITMASK_IS_COPIED : 0;
  m.dl_tensor = *src_t;
  m.dl_tensor.data = data;
  m.dl_tensor.byte_offset = 0;
  m.dl_tensor.shape = ctx->shape.data();
  m.dl_tensor.strides = nullptr;
  m.dl_tensor.device = DLDevice{(flags & Q4_MANAGED_REPORT_MANAGED) ? kDLCUDAManaged : kDLCUDA, device};
  return &ctx.release()->managed;
}

void managed_prefetch(const DLTensor* t_in, int32_t device, void* stream) {
  const TensorRef t = check_tensor_gpu(t_in, "t");
  const PluginState& p = loaded_api();
  if (device < -1 || device >= p.probe.device_count) {
    fail(Q4_ERR_INVALID_ARGUMENT, "device",
         "expected -1 (CPU) or a CUDA device ordinal, got " + std::to_string(device));
  }
  int32_t kind = 0, dev = -1;
  check_status(p.api.pointer_info(t.data, &kind, &dev), p);
  if (kind != NVFP4_CUDA_MEM_MANAGED) fail(Q4_ERR_INVALID_ARGUMENT, "t", "is not in CUDA managed memory");
  check_status(p.api.prefetch(t.data, static_cast<size_t>(t.nbytes), device, stream), p);
}

void memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  if (free_bytes == nullptr) fail(Q4_ERR_NULL_POINTER, "free_bytes", "output pointer is NULL");
  if (total_bytes == nullptr) fail(Q4_ERR_NULL_POINTER, "total_bytes", "output pointer is NULL");
  const PluginState& p = loaded_api();
  if (device < 0 || device >= p.probe.device_count) {
    fail(Q4_ERR_INVALID_ARGUMENT, "device", "no CUDA device " + std::to_string(device));
  }
  check_status(p.api.mem_info(device, free_bytes, total_bytes), p);
}

void synchronize(int32_t device, void* stream) {
  const PluginState& p = loaded_api();
  if (device < 0 || device >= p.probe.device_count) {
    fail(Q4_ERR_INVALID_ARGUMENT, "device", "no CUDA device " + std::to_string(device));
  }
  check_status(p.api.synchronize(device, stream), p);
}

}  // namespace q4::cuda
