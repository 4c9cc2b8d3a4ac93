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
#include "core/op_desc.h"
#include "core/options.h"
#include "plugin/managed_copy.h"
#include "plugin/seams.h"

#ifndef NVFP4_CUDA_PLUGIN_BUILT
#define NVFP4_CUDA_PLUGIN_BUILT 0
#endif

namespace q4::cuda {
namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// Directories of this library: as loaded (dladdr on one of its own
// symbols; may be a symlink elsewhere) and as the real file.
std::vector<std::string> core_dirs() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&core_dirs), &info) == 0 || info.dli_fname == nullptr) return {};
  std::vector<std::string> dirs{dir_of(info.dli_fname)};
  if (char* real = realpath(info.dli_fname, nullptr)) {
    dirs.push_back(dir_of(real));
    std::free(real);
  }
  return dirs;
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
  for (const std::string& path : plugin_search_order(core_dirs(), env)) {
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
    nvfp4_cuda_plugin api{};
    const int32_t rc = entry(NVFP4_CUDA_PLUGIN_ABI, &api);
    if (rc != Q4_OK || api.abi != NVFP4_CUDA_PLUGIN_ABI || api.struct_size < sizeof api ||
        api.alloc_device == nullptr || api.free_device == nullptr) {
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

namespace {

// A plugin call for a validated descriptor's context.
nvfp4_cuda_op new_call(int32_t op, const core::OpContext& ctx) {
  nvfp4_cuda_op c{};
  c.struct_size = sizeof c;
  c.op = op;
  c.device = ctx.device;
  c.compute_path = ctx.opts.compute_path;
  c.stream = ctx.opts.stream;
  c.bad_index = -1;
  return c;
}

void run_call(nvfp4_cuda_op& c, const char* input_name) {
  const PluginState& p = loaded_api();
  const int32_t rc = p.api.run(&c);
  if (rc == Q4_ERR_NON_FINITE && c.bad_index >= 0) {
    fail(rc, input_name, "non-finite value (NaN or Inf) at flat index " + std::to_string(c.bad_index));
  }
  check_status(rc, p);
  if (c.used_fallback != 0) {
    c.fallback_reason[sizeof c.fallback_reason - 1] = '\0';
    log_message(Q4_LOG_INFO, std::string("CUDA plugin fell back: ") + c.fallback_reason);
  }
}

// A product's route other than the requested one (KernelOrFallback), for
// the caller's record (`why` may be null).
void report_fallback(const nvfp4_cuda_op& c, std::string* why) {
  if (c.used_fallback != 0 && why != nullptr) {
    *why = c.fallback_reason[0] != '\0' ? c.fallback_reason : "the CUDA plugin took another route";
  }
}

}  // namespace

void run(const core::Nvfp4QuantizeDesc& d) {
  nvfp4_cuda_op c = new_call(NVFP4_CUDA_OP_NVFP4_QUANTIZE, d.ctx);
  c.m = d.dst.rows;
  c.k = d.dst.k;
  c.x = d.x.data;
  c.x_type = elem_code(d.x);
  c.q = d.dst.q.data;
  c.s = d.dst.s.data;
  c.scale_layout = d.dst.layout;
  c.global_scale = d.dst.g;
  run_call(c, "x");
  if (d.g_out != nullptr) *d.g_out = c.global_scale_used;
}

void run(const core::Nvfp4DequantizeDesc& d) {
  nvfp4_cuda_op c = new_call(NVFP4_CUDA_OP_NVFP4_DEQUANTIZE, d.ctx);
  c.m = d.src.rows;
  c.k = d.src.k;
  c.q = d.src.q.data;
  c.s = d.src.s.data;
  c.scale_layout = d.src.layout;
  c.global_scale = d.src.g;
  c.out = d.out.data;
  c.out_type = elem_code(d.out);
  run_call(c, "qdata");
}

void run(const core::Nf4QuantizeDesc& d) {
  nvfp4_cuda_op c = new_call(NVFP4_CUDA_OP_NF4_QUANTIZE, d.ctx);
  c.n = d.numel;
  c.x = d.x.data;
  c.x_type = elem_code(d.x);
  c.q = d.q.data;
  c.absmax = reinterpret_cast<float*>(d.absmax.data);
  c.blocksize = d.blocksize;
  run_call(c, "x");
}

namespace {

// NF4 statistics as the plugin takes them: fp32 absmax and an optional
// 16-entry codebook, both on the device.
// (Double-quantized statistics were refused by the validator.)
void set_nf4_stats(nvfp4_cuda_op& c, const core::Nf4State& st) {
  c.absmax = reinterpret_cast<float*>(st.absmax.data);
  c.quant_map = st.has_quant_map ? reinterpret_cast<const float*>(st.quant_map.data) : nullptr;
  c.blocksize = st.stats.blocksize;
}

}  // namespace

void run(const core::Nf4DequantizeDesc& d) {
  nvfp4_cuda_op c = new_call(NVFP4_CUDA_OP_NF4_DEQUANTIZE, d.ctx);
  c.n = d.src.numel;
  c.q = d.src.q.data;
  set_nf4_stats(c, d.src.state);
  c.out = d.out.data;
  c.out_type = elem_code(d.out);
  run_call(c, "qdata");
}

void run(const core::ProductDesc& d, std::string* fallback_reason) {
  if (d.out.numel == 0) return;  // validated; nothing to compute on any device
  const int32_t op =
      d.w4a4 ? NVFP4_CUDA_OP_NVFP4_SCALED_MM
             : (d.format == Q4_FORMAT_NF4 ? NVFP4_CUDA_OP_NF4_LINEAR : NVFP4_CUDA_OP_NVFP4_LINEAR);
  nvfp4_cuda_op c = new_call(op, d.ctx);
  // A forced dequant-matmul backend is the plugin's dequantize + GEMM path;
  // fast math is a permission the CUDA kernels do not use (they are exact).
  if (d.path == CpuPath::DequantMatmul) c.compute_path = Q4_PATH_DEQUANT_MATMUL_ONLY;
  c.m = d.m;
  c.n = d.n;
  c.k = d.k;
  c.out = d.out.data;
  c.out_type = elem_code(d.out);
  if (d.bias.present) {
    c.bias = d.bias.ref.data;
    c.bias_type = elem_code(d.bias.ref);
  }
  c.alpha = d.alpha;
  if (d.w4a4) {
    c.a_q = d.a.q.data;
    c.a_s = d.a.s.data;
  } else {
    c.x = d.x.data;
    c.x_type = elem_code(d.x);
  }
  if (d.format == Q4_FORMAT_NVFP4) {
    c.q = d.nv.q.data;
    c.s = d.nv.s.data;
    c.scale_layout = d.nv.layout;
    c.global_scale = d.nv.g;
  } else {
    c.q = d.nf.q.data;
    set_nf4_stats(c, d.nf.state);
  }
  run_call(c, "x");
  report_fallback(c, fallback_reason);
}

void run(const core::Mxfp4QuantizeDesc& d) {
  if (d.x.numel == 0) return;
  nvfp4_cuda_op c = new_call(NVFP4_CUDA_OP_MXFP4_QUANTIZE, d.ctx);
  c.m = d.dst.rows;
  c.k = d.dst.k;
  c.x = d.x.data;
  c.x_type = elem_code(d.x);
  c.q = d.dst.q.data;
  c.s = d.dst.s.data;
  c.scale_layout = d.dst.layout;
  run_call(c, "x");
}

void run(const core::Mxfp4DequantizeDesc& d) {
  if (d.out.numel == 0) return;
  nvfp4_cuda_op c = new_call(NVFP4_CUDA_OP_MXFP4_DEQUANTIZE, d.ctx);
  c.m = d.src.rows;
  c.k = d.src.k;
  c.q = d.src.q.data;
  c.s = d.src.s.data;
  c.scale_layout = d.src.layout;
  c.out = d.out.data;
  c.out_type = elem_code(d.out);
  run_call(c, "qdata");
}

namespace {

int64_t elem_bytes(const TensorRef& t) {
  return t.type == ElemType::F32 ? 4 : 2;
}

}  // namespace

void run(const core::Mxfp4ProductDesc& d, std::string* fallback_reason) {
  if (d.out.numel == 0) return;
  nvfp4_cuda_op c = new_call(d.w4a4 ? NVFP4_CUDA_OP_MXFP4_SCALED_MM : NVFP4_CUDA_OP_MXFP4_LINEAR, d.ctx);
  c.m = d.m;
  c.n = d.n;
  c.k = d.k;
  c.out = d.out.data;
  c.out_type = elem_code(d.out);
  if (d.bias.present) {
    c.bias = d.bias.ref.data;
    c.bias_type = elem_code(d.bias.ref);
  }
  c.alpha = d.alpha;
  if (d.w4a4) {
    c.a_q = d.a.q.data;
    c.a_s = d.a.s.data;
  } else {
    c.x = d.x.data;
    c.x_type = elem_code(d.x);
  }
  c.q = d.w.q.data;
  c.s = d.w.s.data;
  c.scale_layout = d.w.layout;
  run_call(c, "x");
  report_fallback(c, fallback_reason);
}

void run(const core::Mxfp4ExpertsDesc& d) {
  if (d.out.numel == 0) return;
  const int64_t q_bytes = d.n * (d.k / 2);
  const int64_t x_elem = elem_bytes(d.x), out_elem = elem_bytes(d.out);
  int64_t r0 = 0;
  for (int64_t g = 0; g < d.n_groups; ++g) {
    const int64_t rows = d.group_rows[g];
    const int64_t e = d.expert_of_group[g];
    if (rows == 0) continue;
    nvfp4_cuda_op c = new_call(NVFP4_CUDA_OP_MXFP4_LINEAR, d.ctx);
    c.m = rows;
    c.n = d.n;
    c.k = d.k;
    c.x = d.x.data + r0 * d.k * x_elem;
    c.x_type = elem_code(d.x);
    c.out = d.out.data + r0 * d.n * out_elem;
    c.out_type = elem_code(d.out);
    if (d.bias.present) {
      c.bias = d.bias.ref.data + e * d.n * elem_bytes(d.bias.ref);
      c.bias_type = elem_code(d.bias.ref);
    }
    c.alpha = 1.0f;
    c.q = d.w.q.data + e * q_bytes;
    c.s = d.w.s.data + e * d.expert_scale_bytes;
    c.scale_layout = d.w.layout;
    run_call(c, "x");
    r0 += rows;
  }
}

int32_t empty_cache() {
  const PluginState& p = plugin();
  if (!p.loaded) return Q4_OK;
  check_status(p.api.empty_cache(), p);
  return Q4_OK;
}

namespace {

DeviceCaps device_caps(const PluginState& p, int32_t device) {
  const auto& a = p.probe.devices[device];
  return interpret_caps(a.cc_major, a.cc_minor, a.managed_memory, a.concurrent_managed_access,
                        a.pageable_memory_access, p.probe.compiled_archs);
}

}  // namespace

int32_t can_use_managed(int32_t device) {
  const PluginState& p = plugin();
  if (!p.loaded || device < 0 || device >= p.probe.device_count) return 0;
  return device_caps(p, device).zero_copy ? 1 : 0;
}

int32_t is_managed(const DLTensor* t_in) {
  const TensorRef t = check_tensor_any(t_in, "t");
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
  const TensorRef src = check_tensor_any(src_t, "src");
  if (flags & ~7u) fail(Q4_ERR_INVALID_ARGUMENT, "flags", "unknown flag bits " + std::to_string(flags));
  const PluginState& p = loaded_api();
  if (device < 0 || device >= p.probe.device_count) {
    fail(Q4_ERR_INVALID_ARGUMENT, "device", "no CUDA device " + std::to_string(device));
  }
  if (!can_use_managed(device))
    fail(Q4_ERR_UNSUPPORTED, "device", "managed memory is not usable on this device");
  auto ctx = std::make_unique<ManagedCtx>();
  ctx->shape.assign(src.shape, src.shape + src.ndim);
  const bool prefetch = (flags & Q4_MANAGED_PREFETCH) != 0;
  if (prefetch && !device_caps(p, device).prefetch) {
    fail(Q4_ERR_UNSUPPORTED, "flags",
         "Q4_MANAGED_PREFETCH needs concurrent managed access on device " + std::to_string(device) +
             " (cudaDevAttrConcurrentManagedAccess is 0)");
  }
  int32_t kind = 0, dev = -1;
  check_status(p.api.pointer_info(src.data, &kind, &dev), p);
  const bool copied = kind != NVFP4_CUDA_MEM_MANAGED;
  // Every failure after the allocation frees it (managed_copy), then throws.
  const ManagedCopy mc = managed_copy(p.api, src.data, static_cast<size_t>(src.nbytes), !copied, device,
                                      (flags & Q4_MANAGED_READ_MOSTLY) != 0, prefetch);
  check_status(mc.status, p);
  ctx->allocation = mc.allocation;
  void* data = mc.data;
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
  const TensorRef t = check_tensor_any(t_in, "t");
  const PluginState& p = loaded_api();
  if (device < -1 || device >= p.probe.device_count) {
    fail(Q4_ERR_INVALID_ARGUMENT, "device",
         "expected -1 (CPU) or a CUDA device ordinal, got " + std::to_string(device));
  }
  int32_t kind = 0, dev = -1;
  check_status(p.api.pointer_info(t.data, &kind, &dev), p);
  if (kind != NVFP4_CUDA_MEM_MANAGED) fail(Q4_ERR_INVALID_ARGUMENT, "t", "is not in CUDA managed memory");
  if (device >= 0 && !device_caps(p, device).prefetch) {
    fail(Q4_ERR_UNSUPPORTED, "device",
         "prefetching to device " + std::to_string(device) +
             " needs concurrent managed access (cudaDevAttrConcurrentManagedAccess is 0)");
  }
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

const nvfp4_cuda_device_attrs& require_device(int32_t device, const char* arg) {
  const PluginState& p = plugin();
  if (!p.loaded) fail(Q4_ERR_NOT_AVAILABLE, arg, "CUDA backend not available: " + p.load_state);
  if (p.probe.device_count == 0) fail(Q4_ERR_NOT_AVAILABLE, arg, "no usable CUDA device: " + p.load_state);
  if (device < 0 || device >= p.probe.device_count) {
    fail(Q4_ERR_INVALID_ARGUMENT, arg,
         "no CUDA device " + std::to_string(device) + " (" + std::to_string(p.probe.device_count) +
             " device(s))");
  }
  return p.probe.devices[device];
}

std::string managed_unusable_reason(int32_t device) {
  const PluginState& p = plugin();
  if (!p.loaded) return "CUDA backend not available: " + p.load_state;
  if (p.probe.device_count == 0) return "no usable CUDA device: " + p.load_state;
  if (device < 0 || device >= p.probe.device_count) return "no CUDA device " + std::to_string(device);
  const auto& a = p.probe.devices[device];
  const std::string who = "device " + std::to_string(device) + " (" + a.name + ")";
  const DeviceCaps c = device_caps(p, device);
  if (!c.managed) return who + " has no managed memory (cudaDevAttrManagedMemory is 0)";
  if (!c.zero_copy) {
    return who +
           " has neither concurrent managed access nor pageable memory access (both attributes are 0): the "
           "CPU "
           "and the GPU cannot use managed memory at the same time";
  }
  return "";
}

bool reads_host_memory(int32_t device) {
  const PluginState& p = plugin();
  if (!p.loaded || device < 0 || device >= p.probe.device_count) return false;
  const auto& a = p.probe.devices[device];
  // A kernel can dereference pageable host memory only with pageable memory
  // access (ATS/HMM, as on GB10); concurrent managed access alone covers
  // managed memory, not malloc'ed memory. Integrated: no PCIe in between.
  return a.integrated != 0 && a.pageable_memory_access != 0;
}

void* allocate(size_t bytes, bool managed, int32_t device) {
  const PluginState& p = loaded_api();
  void* ptr = nullptr;
  const int32_t rc = managed ? p.api.alloc_managed(bytes, &ptr) : p.api.alloc_device(device, bytes, &ptr);
  if (rc != Q4_OK) {
    fail(rc == Q4_ERR_CUDA ? Q4_ERR_OUT_OF_MEMORY : rc, "",
         std::string(managed ? "managed" : "device") + " allocation of " + std::to_string(bytes) +
             " bytes failed: " + p.api.last_error());
  }
  return ptr;
}

void deallocate(void* ptr, bool managed, int32_t device) noexcept {
  const PluginState& p = plugin();
  if (!p.loaded || ptr == nullptr) return;
  const int32_t rc = managed ? p.api.free_managed(ptr) : p.api.free_device(device, ptr);
  if (rc != Q4_OK) {
    try {
      log_message(Q4_LOG_WARN, std::string("CUDA free failed: ") + p.api.last_error());
    } catch (...) {
    }
  }
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const PluginState& p = loaded_api();
  check_status(p.api.copy(dst, src, bytes), p);
}

void advise_weight(void* ptr, size_t bytes, int32_t device, void* stream) {
  const PluginState& p = loaded_api();
  check_status(p.api.advise_read_mostly(ptr, bytes, device), p);
  if (device_caps(p, device).prefetch) check_status(p.api.prefetch(ptr, bytes, device, stream), p);
}

int64_t scan_device_bytes(const void* ptr, int64_t bytes, int32_t device, void* stream, int32_t mode) {
  const PluginState& p = loaded_api();
  nvfp4_cuda_op c{};
  c.struct_size = sizeof c;
  c.op = NVFP4_CUDA_OP_SCAN_BYTES;
  c.device = device;
  c.stream = stream;
  c.q = const_cast<void*>(ptr);
  c.n = bytes;
  c.blocksize = mode;
  c.bad_index = -1;
  const int32_t rc = p.api.run(&c);
  if (rc == Q4_ERR_UNSUPPORTED) return kScanUnsupported;
  check_status(rc, p);
  return c.bad_index;
}

int32_t pointer_kind(const void* ptr) {
  const PluginState& p = plugin();
  if (!p.loaded || ptr == nullptr) return NVFP4_CUDA_MEM_UNREGISTERED;
  int32_t kind = NVFP4_CUDA_MEM_UNREGISTERED, dev = -1;
  if (p.api.pointer_info(ptr, &kind, &dev) != Q4_OK) return NVFP4_CUDA_MEM_UNREGISTERED;
  return kind;
}

}  // namespace q4::cuda
