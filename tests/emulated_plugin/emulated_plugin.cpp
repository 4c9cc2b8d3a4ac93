// An emulated CUDA device behind the private plugin interface
// (src/plugin/plugin_abi.h), for tests on machines without a GPU. It
// reports one device (by default GB10-like: CC 12.1, integrated, managed
// memory with concurrent managed access), hands out "device" and "managed"
// memory from host memory it tracks (so pointer_info answers truthfully
// and a host pointer where device memory is required is caught), records
// prefetches, advice and synchronizations, fails a chosen call on request,
// and computes with the library's own CPU operations on kDLCPU views of
// that memory. Configuration and controls: emulated_plugin.h.
#include "emulated_plugin.h"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "nvfp4/nvfp4.h"
#include "plugin/plugin_abi.h"

namespace {

struct Config {
  int devices = 1;
  int cc = 121;
  int integrated = 1;
  int managed = 1;
  int concurrent = 1;
  int pageable = 1;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::atoi(v);
}

const Config& config() {
  static const Config c = [] {
    Config r;
    r.devices = env_int("NVFP4_EMU_DEVICES", 1) != 0 ? 1 : 0;
    r.cc = env_int("NVFP4_EMU_CC", 121);
    r.integrated = env_int("NVFP4_EMU_INTEGRATED", 1) != 0;
    r.managed = env_int("NVFP4_EMU_MANAGED", 1) != 0;
    r.concurrent = r.managed && env_int("NVFP4_EMU_CONCURRENT", 1) != 0;
    r.pageable = env_int("NVFP4_EMU_PAGEABLE", r.integrated && r.concurrent) != 0;
    return r;
  }();
  return c;
}

struct Alloc {
  size_t bytes = 0;
  int32_t kind = NVFP4_CUDA_MEM_DEVICE;
};

struct State {
  std::mutex mutex;
  std::map<uintptr_t, Alloc> allocs;
  nvfp4_emu_counters counters{};
  std::string fail;
  State() {
    const char* f = std::getenv("NVFP4_EMU_FAIL");
    if (f != nullptr) fail = f;
  }
};

State& state() {
  static State* s = new State();  // never destroyed: the core may call late
  return *s;
}

// Last error per thread. Not thread_local: LeakSanitizer's scan of a
// dlopen'ed module's dynamic TLS crashes on some glibc versions.
std::string& my_error() {
  static std::mutex* mutex = new std::mutex();
  static auto* errors = new std::map<std::thread::id, std::string>();
  std::lock_guard<std::mutex> lock(*mutex);
  return (*errors)[std::this_thread::get_id()];  // node addresses are stable
}

int32_t fail(int32_t status, const std::string& msg) {
  my_error() = "emulated CUDA device: " + msg;
  return status;
}

bool should_fail(const char* call) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.fail == call;
}

// Kind of the allocation holding [p, p + bytes), or UNREGISTERED.
int32_t kind_of(const void* p, size_t bytes = 1) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocs.upper_bound(a);
  if (it == s.allocs.begin()) return NVFP4_CUDA_MEM_UNREGISTERED;
  --it;
  if (a + bytes > it->first + it->second.bytes) return NVFP4_CUDA_MEM_UNREGISTERED;
  return it->second.kind;
}

const char* plugin_last_error() {
  return my_error().c_str();
}

int32_t plugin_probe(nvfp4_cuda_probe* out) {
  if (out == nullptr) return fail(Q4_ERR_NULL_POINTER, "probe output is NULL");
  const Config& c = config();
  std::memset(out, 0, sizeof *out);
  out->runtime_version = 13000;
  out->driver_version = 13000;
  out->device_count = c.devices;
  std::strcpy(out->compiled_archs, "80;90;100a;120a;121a");
  if (c.devices == 0) {
    std::strcpy(out->error, "emulated: no device (NVFP4_EMU_DEVICES=0)");
    return Q4_OK;
  }
  nvfp4_cuda_device_attrs& d = out->devices[0];
  d.ordinal = 0;
  d.cc_major = c.cc / 10;
  d.cc_minor = c.cc % 10;
  d.managed_memory = c.managed;
  d.concurrent_managed_access = c.concurrent;
  d.pageable_memory_access = c.pageable;
  d.multiprocessors = 48;
  d.integrated = c.integrated;
  d.total_memory = int64_t{c.integrated ? 128 : 80} << 30;
  std::snprintf(d.name, sizeof d.name, "Emulated %s (sm_%d)", c.integrated ? "GB10" : "discrete GPU", c.cc);
  return Q4_OK;
}

int32_t allocate(size_t bytes, void** p, int32_t kind) {
  if (p == nullptr) return fail(Q4_ERR_NULL_POINTER, "allocation output is NULL");
  const bool managed = kind == NVFP4_CUDA_MEM_MANAGED;
  if (should_fail(managed ? "alloc_managed" : "alloc_device")) {
    return fail(Q4_ERR_CUDA, std::string(managed ? "cudaMallocManaged" : "cudaMalloc") +
                                 ": cudaErrorMemoryAllocation (forced by NVFP4_EMU_FAIL)");
  }
  if (managed && !config().managed) {
    return fail(Q4_ERR_CUDA, "cudaMallocManaged: cudaErrorNotSupported (no managed memory)");
  }
  const size_t size = ((bytes > 0 ? bytes : 1) + 255) / 256 * 256;
  void* mem = std::aligned_alloc(256, size);
  if (mem == nullptr) return fail(Q4_ERR_OUT_OF_MEMORY, "host allocation failed");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.allocs[reinterpret_cast<uintptr_t>(mem)] = Alloc{size, kind};
  (managed ? s.counters.live_managed_allocs : s.counters.live_device_allocs) += 1;
  (managed ? s.counters.managed_allocs : s.counters.device_allocs) += 1;
  s.counters.live_bytes += static_cast<int64_t>(size);
  *p = mem;
  return Q4_OK;
}

int32_t release(void* p, int32_t kind) {
  if (p == nullptr) return Q4_OK;  // cudaFree(NULL) is fine
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.allocs.find(reinterpret_cast<uintptr_t>(p));
    if (it == s.allocs.end() || it->second.kind != kind) {
      return fail(Q4_ERR_CUDA, "cudaFree: cudaErrorInvalidValue (not an emulated allocation of this kind)");
    }
    const bool managed = kind == NVFP4_CUDA_MEM_MANAGED;
    (managed ? s.counters.live_managed_allocs : s.counters.live_device_allocs) -= 1;
    s.counters.live_bytes -= static_cast<int64_t>(it->second.bytes);
    s.allocs.erase(it);
  }
  std::free(p);
  return Q4_OK;
}

int32_t plugin_pointer_info(const void* p, int32_t* kind, int32_t* device) {
  if (kind == nullptr || device == nullptr) return fail(Q4_ERR_NULL_POINTER, "pointer_info output is NULL");
  *kind = kind_of(p);
  *device = *kind == NVFP4_CUDA_MEM_UNREGISTERED ? -1 : 0;
  return Q4_OK;
}

int32_t plugin_alloc_managed(size_t bytes, void** p) {
  return allocate(bytes, p, NVFP4_CUDA_MEM_MANAGED);
}
int32_t plugin_free_managed(void* p) {
  return release(p, NVFP4_CUDA_MEM_MANAGED);
}

int32_t check_device(int32_t device) {
  if (device < 0 || device >= config().devices) {
    return fail(Q4_ERR_CUDA, "cudaSetDevice(" + std::to_string(device) + "): cudaErrorInvalidDevice");
  }
  return Q4_OK;
}

int32_t plugin_alloc_device(int32_t device, size_t bytes, void** p) {
  const int32_t rc = check_device(device);
  return rc != Q4_OK ? rc : allocate(bytes, p, NVFP4_CUDA_MEM_DEVICE);
}
int32_t plugin_free_device(int32_t device, void* p) {
  const int32_t rc = check_device(device);
  return rc != Q4_OK ? rc : release(p, NVFP4_CUDA_MEM_DEVICE);
}

int32_t plugin_copy(void* dst, const void* src, size_t bytes) {
  if (should_fail("copy"))
    return fail(Q4_ERR_CUDA, "cudaMemcpy: cudaErrorUnknown (forced by NVFP4_EMU_FAIL)");
  std::memmove(dst, src, bytes);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.counters.copies += 1;
  return Q4_OK;
}

int32_t plugin_advise_read_mostly(void* p, size_t bytes, int32_t device) {
  if (should_fail("advise")) return fail(Q4_ERR_CUDA, "cudaMemAdvise: cudaErrorUnknown (forced)");
  if (kind_of(p, bytes) != NVFP4_CUDA_MEM_MANAGED) {
    return fail(Q4_ERR_CUDA, "cudaMemAdvise: cudaErrorInvalidValue (not managed memory)");
  }
  if (device >= config().devices) return fail(Q4_ERR_CUDA, "cudaMemAdvise: cudaErrorInvalidDevice");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.counters.advices += 1;
  return Q4_OK;
}

int32_t plugin_prefetch(const void* p, size_t bytes, int32_t device, void* /*stream*/) {
  if (should_fail("prefetch")) return fail(Q4_ERR_CUDA, "cudaMemPrefetchAsync: cudaErrorUnknown (forced)");
  if (kind_of(p, bytes) != NVFP4_CUDA_MEM_MANAGED) {
    return fail(Q4_ERR_CUDA, "cudaMemPrefetchAsync: cudaErrorInvalidValue (not managed memory)");
  }
  if (device >= 0 && !config().concurrent) {
    return fail(Q4_ERR_CUDA, "cudaMemPrefetchAsync: cudaErrorInvalidDevice (no concurrent managed access)");
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.counters.prefetches += 1;
  return Q4_OK;
}

int32_t plugin_mem_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  const int32_t rc = check_device(device);
  if (rc != Q4_OK) return rc;
  const uint64_t total = uint64_t{config().integrated ? 128u : 80u} << 30;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *total_bytes = total;
  *free_bytes = total - static_cast<uint64_t>(s.counters.live_bytes);
  return Q4_OK;
}

int32_t plugin_synchronize(int32_t device, void* stream) {
  const int32_t rc = check_device(device);
  if (rc != Q4_OK) return rc;
  if (should_fail("synchronize"))
    return fail(Q4_ERR_CUDA, "cudaStreamSynchronize: cudaErrorUnknown (forced)");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.counters.synchronizations += 1;
  s.counters.last_sync_stream = reinterpret_cast<uintptr_t>(stream);
  return Q4_OK;
}

int32_t plugin_empty_cache() {
  return Q4_OK;
}

// ---------------------------------------------------------------------------
// Operations: kDLCPU views of the emulated memory, computed by the library.
// ---------------------------------------------------------------------------
struct View {
  int64_t shape[2] = {0, 0};
  DLTensor t{};
  View(const void* data, DLDataType dt, int64_t d0, int64_t d1 = -1) {
    shape[0] = d0;
    shape[1] = d1;
    t.data = const_cast<void*>(data);
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = d1 < 0 ? 1 : 2;
    t.dtype = dt;
    t.shape = shape;
  }
  View(const View&) = delete;
  View& operator=(const View&) = delete;
};

DLDataType float_type(int32_t code) {
  if (code == NVFP4_CUDA_F16) return DLDataType{kDLFloat, 16, 1};
  if (code == NVFP4_CUDA_BF16) return DLDataType{kDLBfloat, 16, 1};
  return DLDataType{kDLFloat, 32, 1};
}

const DLDataType kU8{kDLUInt, 8, 1};
const DLDataType kF32{kDLFloat, 32, 1};

int64_t scale_bytes(int64_t rows, int64_t k, int32_t layout, int64_t block = 16) {
  const int64_t cols = k / block;
  if (layout == Q4_SCALE_LINEAR) return rows * cols;
  return (rows + 127) / 128 * 128 * ((cols + 3) / 4 * 4);
}

// A GPU reads device memory of its own, managed memory, pinned host memory
// and, with pageable memory access, any host memory; anything else is a
// host pointer where device memory was required.
int32_t accessible(const void* p, const char* name) {
  if (p == nullptr || config().pageable) return Q4_OK;
  const int32_t k = kind_of(p);
  if (k != NVFP4_CUDA_MEM_UNREGISTERED) return Q4_OK;
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.counters.refused_pointers += 1;
  }
  return fail(Q4_ERR_CUDA,
              std::string("cudaErrorIllegalAddress: ") + name +
                  " is host memory the device cannot read (not device, managed or pinned memory)");
}

int32_t from_library(int32_t rc) {
  if (rc == Q4_OK) return rc;
  my_error() = std::string("emulated CUDA device (CPU computation): ") + Q4_last_error();
  return rc;
}

int32_t run_op(nvfp4_cuda_op& op) {
  op.global_scale_used = 0.0f;
  op.used_fallback = 0;
  op.bad_index = -1;
  op.fallback_reason[0] = '\0';
  if (check_device(op.device) != Q4_OK) return Q4_ERR_CUDA;
  if (should_fail("run")) return fail(Q4_ERR_CUDA, "kernel launch: cudaErrorLaunchFailure (forced)");
  const struct {
    const void* p;
    const char* name;
  } ptrs[] = {{op.x, "x"},     {op.out, "out"},       {op.bias, "bias"},
              {op.q, "q"},     {op.s, "s"},           {op.a_q, "a_q"},
              {op.a_s, "a_s"}, {op.absmax, "absmax"}, {op.quant_map, "quant_map"}};
  for (const auto& e : ptrs) {
    const int32_t rc = accessible(e.p, e.name);
    if (rc != Q4_OK) return rc;
  }
  if (op.op == NVFP4_CUDA_OP_SCAN_BYTES) {  // the device-side scale check
    if (op.blocksize != NVFP4_CUDA_SCAN_SIGN_BIT && op.blocksize != NVFP4_CUDA_SCAN_FF) {
      return fail(Q4_ERR_INVALID_ARGUMENT, "scan_bytes: unknown predicate");
    }
    {
      State& s = state();
      std::lock_guard<std::mutex> lock(s.mutex);
      s.counters.scans += 1;
    }
    const auto* p = static_cast<const uint8_t*>(op.q);
    for (int64_t i = 0; i < op.n; ++i) {
      if (op.blocksize == NVFP4_CUDA_SCAN_SIGN_BIT ? (p[i] & 0x80u) != 0 : p[i] == 0xFFu) {
        op.bad_index = i;
        break;
      }
    }
    return Q4_OK;
  }
  const bool product = op.op == NVFP4_CUDA_OP_NVFP4_LINEAR || op.op == NVFP4_CUDA_OP_NVFP4_SCALED_MM ||
                       op.op == NVFP4_CUDA_OP_NF4_LINEAR || op.op == NVFP4_CUDA_OP_MXFP4_LINEAR ||
                       op.op == NVFP4_CUDA_OP_MXFP4_SCALED_MM;
  Q4_op_options o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  Q4_op_options_init(&o);
  o.compute_path =
      op.compute_path == Q4_PATH_DEQUANT_MATMUL_ONLY ? Q4_PATH_DEQUANT_MATMUL_ONLY : Q4_PATH_AUTO;
  if (product && op.compute_path != Q4_PATH_DEQUANT_MATMUL_ONLY && should_fail("kernel")) {
    const char* why = "emulated: the kernel path is unavailable on this device (NVFP4_EMU_FAIL=kernel)";
    if (op.compute_path == Q4_PATH_KERNEL_ONLY) return fail(Q4_ERR_UNSUPPORTED, why);
    op.used_fallback = 1;
    std::snprintf(op.fallback_reason, sizeof op.fallback_reason, "%s; ran dequantize + GEMM", why);
    o.compute_path = Q4_PATH_DEQUANT_MATMUL_ONLY;
  }
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.counters.runs += 1;
    s.counters.last_run_stream = reinterpret_cast<uintptr_t>(op.stream);
    if (op.used_fallback) s.counters.fallbacks += 1;
  }
  const int64_t m = op.m, n = op.n, k = op.k;
  switch (op.op) {
    case NVFP4_CUDA_OP_NVFP4_QUANTIZE: {
      View x(op.x, float_type(op.x_type), m, k), q(op.q, kU8, m, k / 2);
      View s(op.s, kU8, scale_bytes(m, k, op.scale_layout));
      return from_library(
          NVFP4_quantize(&x.t, &q.t, &s.t, op.scale_layout, op.global_scale, &op.global_scale_used, &o));
    }
    case NVFP4_CUDA_OP_NVFP4_DEQUANTIZE: {
      View q(op.q, kU8, m, k / 2), s(op.s, kU8, scale_bytes(m, k, op.scale_layout));
      View out(op.out, float_type(op.out_type), m, k);
      return from_library(NVFP4_dequantize(&q.t, &s.t, op.scale_layout, op.global_scale, &out.t, &o));
    }
    case NVFP4_CUDA_OP_NVFP4_LINEAR: {
      View x(op.x, float_type(op.x_type), m, k), q(op.q, kU8, n, k / 2);
      View s(op.s, kU8, scale_bytes(n, k, op.scale_layout)), out(op.out, float_type(op.out_type), m, n);
      View b(op.bias, float_type(op.bias_type), n);
      return from_library(NVFP4_linear(&x.t, &q.t, &s.t, op.scale_layout, op.global_scale,
                                       op.bias != nullptr ? &b.t : nullptr, &out.t, &o));
    }
    case NVFP4_CUDA_OP_NVFP4_SCALED_MM: {
      View aq(op.a_q, kU8, m, k / 2), as(op.a_s, kU8, scale_bytes(m, k, op.scale_layout));
      View q(op.q, kU8, n, k / 2), s(op.s, kU8, scale_bytes(n, k, op.scale_layout));
      View out(op.out, float_type(op.out_type), m, n), b(op.bias, float_type(op.bias_type), n);
      return from_library(NVFP4_scaled_mm(&aq.t, &as.t, &q.t, &s.t, op.scale_layout, op.alpha,
                                          op.bias != nullptr ? &b.t : nullptr, &out.t, &o));
    }
    case NVFP4_CUDA_OP_NF4_QUANTIZE: {
      View x(op.x, float_type(op.x_type), n), q(op.q, kU8, (n + 1) / 2);
      View a(op.absmax, kF32, (n + op.blocksize - 1) / op.blocksize);
      return from_library(NF4_quantize(&x.t, &q.t, &a.t, static_cast<int32_t>(op.blocksize), &o));
    }
    case NVFP4_CUDA_OP_NF4_DEQUANTIZE:
    case NVFP4_CUDA_OP_NF4_LINEAR: {
      const int64_t numel = op.op == NVFP4_CUDA_OP_NF4_LINEAR ? n * k : n;
      View q(op.q, kU8, (numel + 1) / 2), a(op.absmax, kF32, (numel + op.blocksize - 1) / op.blocksize);
      View qm(op.quant_map, kF32, 16);
      NF4_state st;
      std::memset(&st, 0, sizeof st);
      st.struct_size = sizeof st;
      st.blocksize = static_cast<int32_t>(op.blocksize);
      st.absmax = &a.t;
      st.quant_map = op.quant_map != nullptr ? &qm.t : nullptr;
      if (op.op == NVFP4_CUDA_OP_NF4_DEQUANTIZE) {
        View out(op.out, float_type(op.out_type), n);
        return from_library(NF4_dequantize(&q.t, &st, &out.t, &o));
      }
      View x(op.x, float_type(op.x_type), m, k), out(op.out, float_type(op.out_type), m, n);
      View b(op.bias, float_type(op.bias_type), n);
      return from_library(NF4_scaled_mm(&x.t, &q.t, &st, op.bias != nullptr ? &b.t : nullptr, &out.t, &o));
    }
    case NVFP4_CUDA_OP_MXFP4_QUANTIZE: {
      View x(op.x, float_type(op.x_type), m, k), q(op.q, kU8, m, k / 2);
      View s(op.s, kU8, scale_bytes(m, k, op.scale_layout, 32));
      return from_library(MXFP4_quantize(&x.t, &q.t, &s.t, op.scale_layout, &o));
    }
    case NVFP4_CUDA_OP_MXFP4_DEQUANTIZE: {
      View q(op.q, kU8, m, k / 2), s(op.s, kU8, scale_bytes(m, k, op.scale_layout, 32));
      View out(op.out, float_type(op.out_type), m, k);
      return from_library(MXFP4_dequantize(&q.t, &s.t, op.scale_layout, &out.t, &o));
    }
    case NVFP4_CUDA_OP_MXFP4_LINEAR: {
      View x(op.x, float_type(op.x_type), m, k), q(op.q, kU8, n, k / 2);
      View s(op.s, kU8, scale_bytes(n, k, op.scale_layout, 32)), out(op.out, float_type(op.out_type), m, n);
      View b(op.bias, float_type(op.bias_type), n);
      return from_library(
          MXFP4_linear(&x.t, &q.t, &s.t, op.scale_layout, op.bias != nullptr ? &b.t : nullptr, &out.t, &o));
    }
    case NVFP4_CUDA_OP_MXFP4_SCALED_MM: {
      View aq(op.a_q, kU8, m, k / 2), as(op.a_s, kU8, scale_bytes(m, k, op.scale_layout, 32));
      View q(op.q, kU8, n, k / 2), s(op.s, kU8, scale_bytes(n, k, op.scale_layout, 32));
      View out(op.out, float_type(op.out_type), m, n), b(op.bias, float_type(op.bias_type), n);
      return from_library(MXFP4_scaled_mm(&aq.t, &as.t, &q.t, &s.t, op.scale_layout, op.alpha,
                                          op.bias != nullptr ? &b.t : nullptr, &out.t, &o));
    }
    default:
      return fail(Q4_ERR_UNSUPPORTED, "unknown plugin operation " + std::to_string(op.op));
  }
}

int32_t plugin_run(nvfp4_cuda_op* op) {
  if (op == nullptr) return fail(Q4_ERR_NULL_POINTER, "operation descriptor is NULL");
  if (op->struct_size < offsetof(nvfp4_cuda_op, reserved)) {
    return fail(Q4_ERR_INVALID_ARGUMENT, "operation descriptor too small");
  }
  try {
    return run_op(*op);
  } catch (const std::bad_alloc&) {
    return fail(Q4_ERR_OUT_OF_MEMORY, "host allocation failed");
  } catch (...) {
    return fail(Q4_ERR_INTERNAL, "unexpected exception");
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void nvfp4_emu_counters_get(nvfp4_emu_counters* out) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *out = s.counters;
}

__attribute__((visibility("default"))) void nvfp4_emu_set_fail(const char* call) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.fail = call != nullptr ? call : "";
}

__attribute__((visibility("default"))) int32_t nvfp4_cuda_plugin_entry(uint32_t core_abi,
                                                                       nvfp4_cuda_plugin* table) {
  if (table == nullptr) return Q4_ERR_NULL_POINTER;
  if (core_abi != NVFP4_CUDA_PLUGIN_ABI) {
    return fail(Q4_ERR_UNSUPPORTED, "plugin ABI " + std::to_string(NVFP4_CUDA_PLUGIN_ABI) +
                                        " does not match core ABI " + std::to_string(core_abi));
  }
  nvfp4_cuda_plugin t{};
  t.struct_size = sizeof t;
  // NVFP4_EMU_ABI=<n>: answer as a plugin built for another private ABI
  // (the core must refuse it and say so in its load state).
  t.abi = static_cast<uint32_t>(env_int("NVFP4_EMU_ABI", NVFP4_CUDA_PLUGIN_ABI));
  t.last_error = plugin_last_error;
  t.probe = plugin_probe;
  t.run = plugin_run;
  t.empty_cache = plugin_empty_cache;
  t.pointer_info = plugin_pointer_info;
  t.alloc_managed = plugin_alloc_managed;
  t.free_managed = plugin_free_managed;
  t.copy = plugin_copy;
  t.advise_read_mostly = plugin_advise_read_mostly;
  t.prefetch = plugin_prefetch;
  t.mem_info = plugin_mem_info;
  t.synchronize = plugin_synchronize;
  t.alloc_device = plugin_alloc_device;
  t.free_device = plugin_free_device;
  *table = t;
  return Q4_OK;
}

}  // extern "C"
