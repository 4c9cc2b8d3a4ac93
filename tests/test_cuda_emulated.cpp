// Sessions, linears and mutable tensors on a CUDA device, end to end,
// through the emulated device plugin (tests/emulated_plugin): CTest runs
// this binary once per emulated device (NVFP4_CUDA_PLUGIN and NVFP4_EMU_*
// in its environment, see tests/CMakeLists.txt); the expectations follow
// from the same variables.
#include <dlfcn.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "emulated_plugin/emulated_plugin.h"
#include "nvfp4/cuda.h"
#include "plugin/plugin_abi.h"
#include "test_util.h"

using t::Tensor;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::atoi(v);
}

// What the emulated device is (mirrors emulated_plugin.cpp's defaults).
struct Emu {
  bool loaded = false;
  int devices = 1, cc = 121;
  bool integrated = true, managed = true, concurrent = true, pageable = true;
  nvfp4_cuda_plugin api{};
  nvfp4_emu_counters_fn counters_fn = nullptr;
  nvfp4_emu_set_fail_fn set_fail_fn = nullptr;

  // Managed memory shared by CPU and GPU (NVFP4_can_use_managed).
  bool zero_copy() const { return managed && (concurrent || pageable); }
  // The device reads ordinary host memory in place.
  bool reads_host() const { return integrated && pageable; }
};

const Emu& emu() {
  static const Emu e = [] {
    Emu r;
    r.devices = env_int("NVFP4_EMU_DEVICES", 1) != 0 ? 1 : 0;
    r.cc = env_int("NVFP4_EMU_CC", 121);
    r.integrated = env_int("NVFP4_EMU_INTEGRATED", 1) != 0;
    r.managed = env_int("NVFP4_EMU_MANAGED", 1) != 0;
    r.concurrent = r.managed && env_int("NVFP4_EMU_CONCURRENT", 1) != 0;
    r.pageable = env_int("NVFP4_EMU_PAGEABLE", r.integrated && r.concurrent) != 0;
    Q4_capabilities caps{};
    caps.struct_size = sizeof caps;
    Q4_get_capabilities(&caps);  // the core loads the plugin
    const char* path = std::getenv("NVFP4_CUDA_PLUGIN");
    void* h = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
    if (h == nullptr) return r;
    auto entry = reinterpret_cast<nvfp4_cuda_plugin_entry_fn>(dlsym(h, "nvfp4_cuda_plugin_entry"));
    r.counters_fn = reinterpret_cast<nvfp4_emu_counters_fn>(dlsym(h, "nvfp4_emu_counters_get"));
    r.set_fail_fn = reinterpret_cast<nvfp4_emu_set_fail_fn>(dlsym(h, "nvfp4_emu_set_fail"));
    r.loaded =
        entry != nullptr && entry(NVFP4_CUDA_PLUGIN_ABI, &r.api) == Q4_OK && r.counters_fn && r.set_fail_fn;
    return r;
  }();
  return e;
}

nvfp4_emu_counters counters() {
  nvfp4_emu_counters c{};
  emu().counters_fn(&c);
  return c;
}

// Clears a forced failure at the end of a scope.
struct ForceFail {
  explicit ForceFail(const char* call) { emu().set_fail_fn(call); }
  ~ForceFail() { emu().set_fail_fn(nullptr); }
};

std::string last_error() {
  return Q4_last_error();
}

struct Session {
  Q4_session* s = nullptr;
  explicit Session(const Q4_session_config* c) { REQUIRE(Q4_session_create(c, &s) == Q4_OK); }
  ~Session() { CHECK(Q4_session_destroy(s) == Q4_OK); }
  Q4_session_stats stats() const {
    Q4_session_stats st{};
    st.struct_size = sizeof st;
    REQUIRE(Q4_session_get_stats(s, &st) == Q4_OK);
    return st;
  }
  nlohmann::json diagnostics() const {
    size_t needed = 0;
    Q4_session_diagnostics(s, nullptr, 0, &needed);
    std::string buf(needed, '\0');
    REQUIRE(Q4_session_diagnostics(s, buf.data(), buf.size(), &needed) == Q4_OK);
    return nlohmann::json::parse(buf.c_str());
  }
};

Q4_session_config config(int32_t target, int32_t um, int32_t path = Q4_PATH_AUTO) {
  Q4_session_config c{};
  Q4_session_config_init(&c);
  c.target = target;
  c.unified_memory = um;
  c.compute_path = path;
  return c;
}

Q4_linear_info info_of(const Q4_linear* l) {
  Q4_linear_info info{};
  info.struct_size = sizeof info;
  REQUIRE(Q4_linear_info_get(l, &info) == Q4_OK);
  return info;
}

nlohmann::json diagnostics_of(const Q4_linear* l) {
  size_t needed = 0;
  Q4_linear_diagnostics(l, nullptr, 0, &needed);
  std::string buf(needed, '\0');
  REQUIRE(Q4_linear_diagnostics(l, buf.data(), buf.size(), &needed) == Q4_OK);
  return nlohmann::json::parse(buf.c_str());
}

// Emulated device or managed memory holding a float tensor.
struct DevTensor {
  std::vector<int64_t> shape;
  void* p = nullptr;
  bool managed = false;
  size_t bytes = 0;
  DLTensor dl{};
  DevTensor(std::vector<int64_t> s, bool managed_memory, DLDeviceType type)
      : shape(std::move(s)), managed(managed_memory) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes = static_cast<size_t>(n) * 4;
    const int32_t rc = managed ? emu().api.alloc_managed(bytes, &p) : emu().api.alloc_device(0, bytes, &p);
    REQUIRE(rc == Q4_OK);
    dl.data = p;
    dl.device = DLDevice{type, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.dtype = t::f32();
    dl.shape = shape.data();
  }
  ~DevTensor() {
    if (managed) {
      emu().api.free_managed(p);
    } else {
      emu().api.free_device(0, p);
    }
  }
  DevTensor(const DevTensor&) = delete;
  DevTensor& operator=(const DevTensor&) = delete;
  // Emulated memory is host memory: the test reads and writes it directly.
  void upload(const Tensor& h) { std::memcpy(p, h.data(), bytes); }
  Tensor download() const {
    Tensor h(shape, t::f32());
    std::memcpy(h.data(), p, bytes);
    return h;
  }
};

// The exact-mode bound: the emulated device computes with the same CPU
// kernels, so results agree to fp32 rounding of the same sums.
void check_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.numel() == want.numel());
  int64_t bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float a = got.f()[i], b = want.f()[i];
    if (!(std::fabs(a - b) <= 1e-5f * (1.0f + std::fabs(b)))) ++bad;
  }
  CHECK(bad == 0);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.bytes == b.bytes && std::memcmp(a.data(), b.data(), a.bytes) == 0;
}

// The diagnostics' name of a weight format.
const char* format_name(int32_t format) {
  return format == Q4_FORMAT_NF4 ? "nf4" : (format == Q4_FORMAT_MXFP4 ? "mxfp4" : "nvfp4");
}

// The result of the CPU backend for the same weight and activations (any
// format and source: a CPU session's linear).
Tensor cpu_reference(Q4_weight_bundle& b, Tensor& x, int64_t n) {
  Q4_session_config c = config(Q4_TARGET_CPU, Q4_UM_DISABLED);
  Session cpu(&c);
  Q4_linear* l = nullptr;
  REQUIRE(Q4_linear_create(cpu.s, &b, &l) == Q4_OK);
  Tensor y({x.shape[0], n}, t::f32());
  REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
  Q4_linear_destroy(l);
  return y;
}

bool has_device() {
  return emu().loaded && emu().devices > 0;
}

}  // namespace

TEST_CASE("the emulated plugin is loaded and reports the configured device", "[emulated]") {
  REQUIRE(emu().loaded);
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  REQUIRE(Q4_get_capabilities(&caps) == Q4_OK);
  INFO(caps.native_load_state);
  CHECK(caps.cuda_device_count == emu().devices);
  CHECK(std::string(caps.native_load_state).find("libNVFP4_cuda_emulated") != std::string::npos);
  if (!has_device()) {
    CHECK(caps.cuda_state == Q4_CUDA_NO_DEVICE);
    return;
  }
  CHECK(caps.cuda_state == Q4_CUDA_READY);
  int32_t can = -1;
  REQUIRE(NVFP4_can_use_managed(0, &can) == Q4_OK);
  CHECK(can == (emu().zero_copy() ? 1 : 0));
  CHECK(NVFP4_empty_cache() == Q4_OK);
  // A device that does not exist is named.
  Q4_session_config c{};
  Q4_session_config_init(&c);
  c.target = Q4_TARGET_CUDA;
  c.device_id = 3;
  Q4_session* s = nullptr;
  CHECK(Q4_session_create(&c, &s) == Q4_ERR_INVALID_ARGUMENT);
  CHECK(std::string(Q4_last_error()).find("config->device_id") != std::string::npos);
  CHECK(s == nullptr);
}

TEST_CASE("without a usable device CUDA targets and RequireUnified fail, naming why", "[emulated]") {
  if (has_device()) return;
  Q4_session* s = nullptr;
  Q4_session_config c = config(Q4_TARGET_CUDA, Q4_UM_DISABLED);
  CHECK(Q4_session_create(&c, &s) == Q4_ERR_NOT_AVAILABLE);
  CHECK(last_error().find("no usable CUDA device") != std::string::npos);
  CHECK(last_error().find("NVFP4_EMU_DEVICES=0") != std::string::npos);  // the plugin's own words
  c = config(Q4_TARGET_AUTO, Q4_UM_REQUIRE);
  CHECK(Q4_session_create(&c, &s) == Q4_ERR_NOT_AVAILABLE);
  CHECK(last_error().find("RequireUnified") != std::string::npos);
  CHECK(s == nullptr);
  // AUTO runs on the CPU.
  c = config(Q4_TARGET_AUTO, Q4_UM_PREFER);
  Session auto_s(&c);
  Tensor w = t::random_float({16, 32}, t::f32(), 1);
  Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NVFP4);
  Q4_linear* l = nullptr;
  REQUIRE(Q4_linear_create(auto_s.s, &b, &l) == Q4_OK);
  CHECK(info_of(l).target == Q4_TARGET_CPU);
  CHECK(auto_s.diagnostics()["unifiedMemory"]["reason"].get<std::string>().find("unavailable") !=
        std::string::npos);
  Q4_linear_destroy(l);
}

TEST_CASE("each target x UM policy x format: placement, info, forwards on host/device/managed tensors",
          "[emulated][session]") {
  if (!has_device()) return;
  const int64_t n = 48, k = 64, m = 5;
  Tensor x = t::random_float({m, k}, t::f32(), 3);
  Tensor bias = t::random_float({n}, t::f32(), 4);
  const nvfp4_emu_counters before = counters();
  for (int32_t format : {Q4_FORMAT_NVFP4, Q4_FORMAT_NF4, Q4_FORMAT_MXFP4}) {
    Tensor w = t::random_float({n, k}, t::f32(), 5 + static_cast<uint32_t>(format));
    Q4_weight_bundle b = float_bundle(w, format, &bias);
    const Tensor ref = cpu_reference(b, x, n);
    for (int32_t target : {Q4_TARGET_CUDA, Q4_TARGET_AUTO, Q4_TARGET_CPU}) {
      for (int32_t um : {Q4_UM_DISABLED, Q4_UM_PREFER, Q4_UM_REQUIRE}) {
        INFO("format " << format << ", target " << target << ", UM policy " << um);
        Q4_session_config c = config(target, um);
        if (um == Q4_UM_REQUIRE && !emu().zero_copy()) {
          Q4_session* s = nullptr;
          CHECK(Q4_session_create(&c, &s) == Q4_ERR_NOT_AVAILABLE);
          CHECK(s == nullptr);
          const std::string e = last_error();
          INFO(e);
          CHECK(e.find("RequireUnified") != std::string::npos);
          CHECK(e.find(emu().managed ? "concurrent managed access" : "no managed memory") !=
                std::string::npos);
          continue;
        }
        Session s(&c);
        const bool on_cuda = target != Q4_TARGET_CPU;
        const bool managed = um != Q4_UM_DISABLED && emu().zero_copy();
        Q4_linear* l = nullptr;
        REQUIRE(Q4_linear_create(s.s, &b, &l) == Q4_OK);
        const Q4_linear_info info = info_of(l);
        CHECK(info.format == format);
        CHECK(info.backend == (format == Q4_FORMAT_NF4 ? Q4_BACKEND_NF4_KERNEL : Q4_BACKEND_NVFP4_KERNEL));
        CHECK(info.target == (on_cuda ? Q4_TARGET_CUDA : Q4_TARGET_CPU));
        CHECK(info.unified_memory == (on_cuda && managed ? 1 : 0));
        CHECK(info.fell_back == 0);
        if (format == Q4_FORMAT_MXFP4 && on_cuda) {
          // The raw form on the device: codes, E8M0 scales [N, K/32], bias.
          CHECK(info.weight_bytes == n * k / 2 + n * (k / 32) + n * 4);
        }
        const Q4_session_stats st0 = s.stats();
        CHECK(st0.managed_bytes == (on_cuda && managed ? st0.live_bytes : 0));
        // Host activations and outputs.
        Tensor y({m, n}, t::f32());
        const int64_t syncs = counters().synchronizations;
        REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
        check_close(y, ref);
        // A host-visible output is complete when the forward returns.
        CHECK(counters().synchronizations == syncs + (on_cuda ? 1 : 0));
        const int64_t staged = on_cuda && !emu().reads_host() ? 2 : 0;  // x in, y out
        CHECK(s.stats().implicit_copies == staged);
        if (on_cuda) {
          // Device memory.
          DevTensor dx({m, k}, false, kDLCUDA), dy({m, n}, false, kDLCUDA);
          dx.upload(x);
          const int64_t syncs_before = counters().synchronizations;
          REQUIRE(Q4_linear_forward(l, &dx.dl, &dy.dl) == Q4_OK);
          CHECK(counters().synchronizations == syncs_before);  // asynchronous on the stream
          check_close(dy.download(), ref);
          // Managed memory.
          if (emu().managed) {
            DevTensor mx({m, k}, true, kDLCUDAManaged), my({m, n}, true, kDLCUDAManaged);
            mx.upload(x);
            REQUIRE(Q4_linear_forward(l, &mx.dl, &my.dl) == Q4_OK);
            check_close(my.download(), ref);
          }
          CHECK(s.stats().implicit_copies == staged);  // nothing copied on device/managed tensors
        }
        // Diagnostics say where it runs and why.
        const nlohmann::json sj = s.diagnostics(), lj = diagnostics_of(l);
        CHECK(sj["target"] == (on_cuda ? "cuda" : "cpu"));
        CHECK(sj["format"] == format_name(format));
        CHECK(lj["format"] == format_name(format));
        CHECK(lj["backend"] == (format == Q4_FORMAT_NF4 ? "nf4-kernel" : "nvfp4-kernel"));
        CHECK(sj["fallbackReason"] == "");
        CHECK(sj["unifiedMemory"]["active"] == managed);
        CHECK(lj["unifiedMemory"]["active"] == (on_cuda && managed));
        CHECK(lj["target"] == (on_cuda ? "cuda" : "cpu"));
        const std::string reason = sj["unifiedMemory"]["reason"];
        CHECK(reason.empty() == !(um == Q4_UM_PREFER && !emu().zero_copy()));
        CHECK(lj["unifiedMemory"]["reason"] == reason);
        if (!reason.empty()) CHECK(reason.find("PreferUnified") != std::string::npos);
        CHECK(s.stats().forwards == (on_cuda ? (emu().managed ? 3 : 2) : 1));
        REQUIRE(Q4_linear_destroy(l) == Q4_OK);
        const Q4_session_stats st = s.stats();
        CHECK(st.live_bytes == 0);
        CHECK(st.managed_bytes == 0);
        CHECK(st.live_buffers == 0);
      }
    }
  }
  // Every emulated allocation made above was freed.
  const nvfp4_emu_counters after = counters();
  CHECK(after.live_device_allocs == before.live_device_allocs);
  CHECK(after.live_managed_allocs == before.live_managed_allocs);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(after.device_allocs > before.device_allocs);
  if (emu().zero_copy()) {
    // Managed weights were advised read-mostly and, where the device
    // allows it, prefetched.
    CHECK(after.advices > before.advices);
    CHECK((after.prefetches > before.prefetches) == emu().concurrent);
  }
}

TEST_CASE("a host pointer labelled kDLCUDA is caught", "[emulated]") {
  if (!has_device() || emu().pageable) return;
  const int64_t n = 16, k = 32, m = 2;
  Tensor w = t::random_float({n, k}, t::f32(), 7);
  Q4_session_config c = config(Q4_TARGET_CUDA, Q4_UM_DISABLED);
  Session s(&c);
  Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NVFP4);
  Q4_linear* l = nullptr;
  REQUIRE(Q4_linear_create(s.s, &b, &l) == Q4_OK);
  Tensor x = t::random_float({m, k}, t::f32(), 8);
  Tensor y({m, n}, t::f32());
  x.dl.device = DLDevice{kDLCUDA, 0};
  y.dl.device = DLDevice{kDLCUDA, 0};
  CHECK(Q4_linear_forward(l, x.t(), y.t()) == Q4_ERR_DEVICE);
  CHECK(last_error().find("x") != std::string::npos);
  // The stateless product asks where each pointer is (a kernel reading
  // host memory would poison the whole process's CUDA context): refused
  // before the device is reached.
  Tensor q({n, k / 2}, t::u8()), sc({n, k / 16}, t::u8());
  sc.fill(0x38);  // valid scales (1.0)
  q.dl.device = sc.dl.device = DLDevice{kDLCUDA, 0};
  const int64_t refused = counters().refused_pointers, runs = counters().runs;
  CHECK(NVFP4_linear(x.t(), q.t(), sc.t(), Q4_SCALE_LINEAR, 1.0f, nullptr, y.t(), nullptr) == Q4_ERR_DEVICE);
  CHECK(last_error().find("ordinary host memory, which CUDA device 0 cannot read") != std::string::npos);
  CHECK(counters().refused_pointers == refused);
  CHECK(counters().runs == runs);
  Q4_linear_destroy(l);
}

TEST_CASE(
    "fallback means fallback: KernelOrFallback reports it, KernelOnly fails, DequantMatmulOnly is a choice",
    "[emulated][session]") {
  if (!has_device()) return;
  const int64_t n = 32, k = 64, m = 3;
  Tensor x = t::random_float({m, k}, t::f32(), 9);
  for (int32_t format : {Q4_FORMAT_NVFP4, Q4_FORMAT_NF4, Q4_FORMAT_MXFP4}) {
    Tensor w = t::random_float({n, k}, t::f32(), 10);
    Q4_weight_bundle b = float_bundle(w, format);
    const Tensor ref = cpu_reference(b, x, n);
    ForceFail kernel("kernel");
    for (int32_t path :
         {Q4_PATH_AUTO, Q4_PATH_KERNEL_OR_FALLBACK, Q4_PATH_KERNEL_ONLY, Q4_PATH_DEQUANT_MATMUL_ONLY}) {
      INFO("format " << format << ", path " << path);
      Q4_session_config c = config(Q4_TARGET_CUDA, Q4_UM_PREFER, path);
      Session s(&c);
      Q4_linear* l = nullptr;
      REQUIRE(Q4_linear_create(s.s, &b, &l) == Q4_OK);
      Tensor y({m, n}, t::f32());
      const int32_t rc = Q4_linear_forward(l, x.t(), y.t());
      const Q4_linear_info info = info_of(l);
      const nlohmann::json lj = diagnostics_of(l), sj = s.diagnostics();
      if (path == Q4_PATH_KERNEL_ONLY) {
        CHECK(rc == Q4_ERR_UNSUPPORTED);
        CHECK(last_error().find("NVFP4_EMU_FAIL=kernel") != std::string::npos);
        CHECK(info.fell_back == 0);
      } else if (path == Q4_PATH_DEQUANT_MATMUL_ONLY) {
        REQUIRE(rc == Q4_OK);
        check_close(y, ref);
        CHECK(info.fell_back == 0);
        CHECK(info.backend == Q4_BACKEND_DEQUANT_MATMUL);
        CHECK(lj["fallbackReason"] == "");
        CHECK(sj["fallbackReason"] == "");
      } else {
        REQUIRE(rc == Q4_OK);
        check_close(y, ref);
        CHECK(info.fell_back == 1);
        CHECK(info.backend == Q4_BACKEND_DEQUANT_MATMUL);
        CHECK(lj["fallbackReason"].get<std::string>().find("NVFP4_EMU_FAIL=kernel") != std::string::npos);
        CHECK(sj["fallbackReason"] == lj["fallbackReason"]);
      }
      Q4_linear_destroy(l);
    }
  }
}

TEST_CASE("8 threads forward on the device during 200 weight updates: each output is one weight's",
          "[emulated][concurrency]") {
  if (!has_device()) return;
  const int64_t n = 32, k = 128;
  Q4_session_config c = config(Q4_TARGET_CUDA, Q4_UM_PREFER);
  Session s(&c);
  Tensor w1 = t::random_float({n, k}, t::f32(), 11), w2 = t::random_float({n, k}, t::f32(), 12);
  Tensor x = t::random_float({3, k}, t::f32(), 13);
  Q4_weight_bundle b1 = float_bundle(w1, Q4_FORMAT_NVFP4), b2 = float_bundle(w2, Q4_FORMAT_NVFP4);
  Q4_linear* l = nullptr;
  REQUIRE(Q4_linear_create(s.s, &b2, &l) == Q4_OK);
  Tensor y2({3, n}, t::f32()), y1({3, n}, t::f32());
  REQUIRE(Q4_linear_forward(l, x.t(), y2.t()) == Q4_OK);
  REQUIRE(Q4_linear_update_weight(l, &b1) == Q4_OK);
  const int32_t rc1 = Q4_linear_forward(l, x.t(), y1.t());
  INFO(last_error());
  REQUIRE(rc1 == Q4_OK);
  REQUIRE(!same_bytes(y1, y2));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> mixed{0}, calls{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) {
    // Even threads forward host tensors, odd ones device memory (allocated
    // here: Catch2 assertions are not thread-safe).
    auto dx = std::make_shared<DevTensor>(std::vector<int64_t>{3, k}, false, kDLCUDA);
    auto dy = std::make_shared<DevTensor>(std::vector<int64_t>{3, n}, false, kDLCUDA);
    dx->upload(x);
    ts.emplace_back([&, i, dx, dy] {
      Tensor y({3, n}, t::f32());
      while (!stop.load()) {
        int32_t rc = Q4_OK;
        if (i % 2 == 0) {
          rc = Q4_linear_forward(l, x.t(), y.t());
        } else {
          rc = Q4_linear_forward(l, &dx->dl, &dy->dl);
          std::memcpy(y.data(), dy->p, dy->bytes);
        }
        if (rc != Q4_OK || !(same_bytes(y, y1) || same_bytes(y, y2))) mixed++;
        calls++;
      }
    });
  }
  for (int r = 0; r < 200; ++r) REQUIRE(Q4_linear_update_weight(l, r % 2 ? &b1 : &b2) == Q4_OK);
  stop = true;
  for (auto& th : ts) th.join();
  INFO("forwards during updates: " << calls.load());
  CHECK(mixed.load() == 0);
  CHECK(info_of(l).weight_version == 202);
  CHECK(info_of(l).target == Q4_TARGET_CUDA);
  Q4_linear_destroy(l);
  CHECK(s.stats().live_bytes == 0);
}

TEST_CASE("a mutable tensor shared by a CPU writer and a device forward", "[emulated][session]") {
  if (!has_device()) return;
  const int64_t n = 16, k = 32, m = 4;
  for (int32_t um : {Q4_UM_DISABLED, Q4_UM_PREFER}) {
    INFO("UM policy " << um);
    Q4_session_config c = config(Q4_TARGET_CUDA, um);
    Session s(&c);
    const bool managed = um == Q4_UM_PREFER && emu().zero_copy();
    Tensor w = t::random_float({n, k}, t::f32(), 14), x = t::random_float({m, k}, t::f32(), 15);
    Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NF4);
    const Tensor ref = cpu_reference(b, x, n);
    Q4_linear* l = nullptr;
    REQUIRE(Q4_linear_create(s.s, &b, &l) == Q4_OK);
    Q4_mutable* mt = nullptr;
    const int64_t shape[2] = {m, k};
    REQUIRE(Q4_mutable_create(s.s, 2, shape, t::f32(), &mt) == Q4_OK);
    DLTensor view{};
    REQUIRE(Q4_mutable_begin_write(mt, Q4_WRITE_DISCARD, &view) == Q4_OK);
    CHECK(view.device.device_type == (managed ? kDLCUDAManaged : kDLCPU));
    std::memcpy(view.data, x.data(), x.bytes);  // the actor writes in place on the CPU
    uint64_t version = 0;
    REQUIRE(Q4_mutable_commit(mt, &version) == Q4_OK);
    DLManagedTensorVersioned* snap = nullptr;
    REQUIRE(Q4_mutable_acquire(mt, &snap, &version) == Q4_OK);
    CHECK(version == 1);
    CHECK(snap->dl_tensor.device.device_type == (managed ? kDLCUDAManaged : kDLCPU));
    CHECK(snap->dl_tensor.device.device_id == 0);
    const int64_t copies = s.stats().implicit_copies;
    if (managed) CHECK(s.stats().managed_bytes > 0);
    // The "GPU" reads the committed version; the output is device memory.
    DevTensor dy({m, n}, false, kDLCUDA);
    REQUIRE(Q4_linear_forward(l, &snap->dl_tensor, &dy.dl) == Q4_OK);
    check_close(dy.download(), ref);
    // No copy when the device reads the tensor's memory in place.
    CHECK(s.stats().implicit_copies == copies + ((managed || emu().reads_host()) ? 0 : 1));
    // Destroy with live objects is refused, then everything returns to zero.
    CHECK(Q4_session_destroy(s.s) == Q4_ERR_STATE);
    snap->deleter(snap);
    REQUIRE(Q4_mutable_destroy(mt) == Q4_OK);
    CHECK(Q4_session_destroy(s.s) == Q4_ERR_STATE);  // the linear
    Q4_linear_destroy(l);
    const Q4_session_stats st = s.stats();
    CHECK(st.live_bytes == 0);
    CHECK(st.managed_bytes == 0);
    CHECK(st.live_snapshots == 0);
  }
}

TEST_CASE("failures of the device leave nothing behind", "[emulated][session]") {
  if (!has_device()) return;
  const nvfp4_emu_counters before = counters();
  Tensor w = t::random_float({16, 32}, t::f32(), 16), x = t::random_float({2, 32}, t::f32(), 17);
  Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NVFP4);
  for (const char* call : {"alloc_device", "alloc_managed", "copy", "advise", "run"}) {
    INFO(call);
    const bool managed_call = std::strcmp(call, "alloc_managed") == 0 || std::strcmp(call, "advise") == 0;
    if (managed_call && !emu().zero_copy()) continue;
    Q4_session_config c = config(Q4_TARGET_CUDA, managed_call ? Q4_UM_REQUIRE : Q4_UM_DISABLED);
    Session s(&c);
    Q4_linear* l = nullptr;
    if (std::strcmp(call, "run") == 0) {
      REQUIRE(Q4_linear_create(s.s, &b, &l) == Q4_OK);
      ForceFail f(call);
      Tensor y({2, 16}, t::f32());
      CHECK(Q4_linear_forward(l, x.t(), y.t()) == Q4_ERR_CUDA);
      CHECK(last_error().find("forced") != std::string::npos);
      CHECK(s.stats().forwards == 0);
      Q4_linear_destroy(l);
    } else {
      ForceFail f(call);
      CHECK(Q4_linear_create(s.s, &b, &l) != Q4_OK);
      CHECK(l == nullptr);
      CHECK(!last_error().empty());
    }
    CHECK(s.stats().live_bytes == 0);
    CHECK(s.stats().live_linears == 0);
  }
  const nvfp4_emu_counters after = counters();
  CHECK(after.live_device_allocs == before.live_device_allocs);
  CHECK(after.live_managed_allocs == before.live_managed_allocs);
}

TEST_CASE("double-quantized NF4 statistics on CUDA tensors are refused by the validator", "[emulated]") {
  if (!has_device()) return;
  const int64_t n = 4, k = 64;
  DevTensor x({1, k}, false, kDLCUDA), y({1, n}, false, kDLCUDA), q({n * k / 8}, false, kDLCUDA);
  DevTensor am({n * k / 64 / 4}, false, kDLCUDA), nested({1}, false, kDLCUDA), nmap({256}, false, kDLCUDA);
  q.dl.dtype = t::u8();
  q.shape[0] = n * k / 2;
  am.dl.dtype = t::u8();
  am.shape[0] = n * k / 64;
  NF4_state st{};
  st.struct_size = sizeof st;
  st.blocksize = 64;
  st.absmax = &am.dl;
  st.nested_absmax = &nested.dl;
  st.nested_quant_map = &nmap.dl;
  const int64_t runs = counters().runs;
  CHECK(NF4_scaled_mm(&x.dl, &q.dl, &st, nullptr, &y.dl, nullptr) == Q4_ERR_UNSUPPORTED);
  CHECK(last_error().find("nested_absmax") != std::string::npos);
  CHECK(counters().runs == runs);  // never reached the plugin
}

TEST_CASE("NVFP4 scales with the sign bit set on a CUDA device are refused like host ones", "[emulated]") {
  // docs/formats.md, E4M3: one rule on every path. Device scales are
  // scanned on the device (no copy); a hit is read on the host for the exact
  // message, and the operation itself never runs.
  if (!has_device()) return;
  DevTensor q({8, 16}, false, kDLCUDA), s({8, 2}, false, kDLCUDA), out({8, 32}, false, kDLCUDA);
  q.dl.dtype = t::u8();
  s.dl.dtype = t::u8();
  std::memset(q.p, 0x21, 8 * 16);
  std::memset(s.p, 0x38, 8 * 2);
  const int64_t runs = counters().runs, scans = counters().scans, copies0 = counters().copies;
  REQUIRE(NVFP4_dequantize(&q.dl, &s.dl, 0, 1.0f, &out.dl, nullptr) == Q4_OK);
  CHECK(counters().runs == runs + 1);
  CHECK(counters().scans == scans + 1);  // the scale check ran on the device
  CHECK(counters().copies == copies0);   // and copied nothing
  static_cast<uint8_t*>(s.p)[13] = 0xC0;
  const int64_t copies = counters().copies;
  CHECK(NVFP4_dequantize(&q.dl, &s.dl, 0, 1.0f, &out.dl, nullptr) == Q4_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("'scale'") != std::string::npos);
  CHECK(last_error().find("scale [6, 1] (flat index 13) is 0xC0") != std::string::npos);
  CHECK(counters().copies == copies + 1);  // the scan read the device bytes through the plugin
  DevTensor x({3, 32}, false, kDLCUDA), y({3, 8}, false, kDLCUDA), mm({8, 8}, false, kDLCUDA);
  CHECK(NVFP4_linear(&x.dl, &q.dl, &s.dl, 0, 1.0f, nullptr, &y.dl, nullptr) == Q4_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("'w_scale'") != std::string::npos);
  CHECK(NVFP4_scaled_mm(&q.dl, &s.dl, &q.dl, &s.dl, 0, 1.0f, nullptr, &mm.dl, nullptr) ==
        Q4_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("'a_scale'") != std::string::npos);
  CHECK(counters().runs == runs + 1);  // none of the refused calls reached the plugin
}

namespace {

// Emulated device (or managed) memory holding a copy of a host tensor, with
// the host tensor's dtype and shape, labelled kDLCUDA (managed memory as
// NVFP4_to_managed hands it out by default: the call runs on the device).
struct DevCopy {
  std::vector<int64_t> shape;
  DevTensor mem;
  DevCopy(const Tensor& h, bool managed)
      : shape(h.shape), mem({static_cast<int64_t>((h.bytes + 3) / 4)}, managed, kDLCUDA) {
    std::memcpy(mem.p, h.data(), h.bytes);
    mem.dl.dtype = h.dl.dtype;
    mem.dl.ndim = static_cast<int32_t>(shape.size());
    mem.dl.shape = shape.data();
  }
  DLTensor* t() { return &mem.dl; }
  // The device bytes as a host tensor shaped like `like`.
  Tensor get(const Tensor& like) const {
    Tensor h(like.shape, like.dl.dtype);
    std::memcpy(h.data(), mem.p, h.bytes);
    return h;
  }
};

int64_t mx_scale_bytes(int64_t rows, int64_t k, int32_t layout) {
  if (layout == Q4_SCALE_LINEAR) return rows * (k / 32);
  return (rows + 127) / 128 * 128 * ((k / 32 + 3) / 4 * 4);
}

Q4_op_options path_opts(int32_t path) {
  Q4_op_options o{};
  Q4_op_options_init(&o);
  o.compute_path = path;
  return o;
}

}  // namespace

TEST_CASE("MXFP4 on the device: quantize/dequantize bytes equal the CPU's, products within the bound",
          "[emulated][mxfp4]") {
  if (!has_device()) return;
  const int64_t rows = 130, k = 96, m = 5;
  for (bool managed : {false, true}) {
    if (managed && !emu().managed) continue;
    for (int32_t layout : {Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED}) {
      INFO("managed " << managed << ", layout " << layout);
      Tensor x = t::random_float({rows, k}, t::f32(), 21);
      Tensor q({rows, k / 2}, t::u8()), s({mx_scale_bytes(rows, k, layout)}, t::u8());
      REQUIRE(MXFP4_quantize(x.t(), q.t(), s.t(), layout, nullptr) == Q4_OK);
      DevCopy dx(x, managed), dq(q, managed), ds(s, managed);
      std::memset(dq.mem.p, 0xAB, q.bytes);
      std::memset(ds.mem.p, 0xCD, s.bytes);
      const int64_t runs = counters().runs;
      REQUIRE(MXFP4_quantize(dx.t(), dq.t(), ds.t(), layout, nullptr) == Q4_OK);
      CHECK(counters().runs == runs + 1);
      CHECK(same_bytes(dq.get(q), q));
      CHECK(same_bytes(ds.get(s), s));
      Tensor out({rows, k}, t::f32()), dout_like({rows, k}, t::f32());
      REQUIRE(MXFP4_dequantize(q.t(), s.t(), layout, out.t(), nullptr) == Q4_OK);
      DevCopy dout(dout_like, managed);
      REQUIRE(MXFP4_dequantize(dq.t(), ds.t(), layout, dout.t(), nullptr) == Q4_OK);
      CHECK(same_bytes(dout.get(out), out));
      // linear: x[m, k] . W[rows, k]^T + bias
      Tensor a = t::random_float({m, k}, t::f32(), 22), bias = t::random_float({rows}, t::f32(), 23);
      Tensor y({m, rows}, t::f32());
      REQUIRE(MXFP4_linear(a.t(), q.t(), s.t(), layout, bias.t(), y.t(), nullptr) == Q4_OK);
      DevCopy da(a, managed), db(bias, managed), dy(y, managed);
      REQUIRE(MXFP4_linear(da.t(), dq.t(), ds.t(), layout, db.t(), dy.t(), nullptr) == Q4_OK);
      check_close(dy.get(y), y);
      // scaled_mm: A (MXFP4 [m, k]) . B^T
      Tensor aq({m, k / 2}, t::u8()), as({mx_scale_bytes(m, k, layout)}, t::u8());
      REQUIRE(MXFP4_quantize(a.t(), aq.t(), as.t(), layout, nullptr) == Q4_OK);
      REQUIRE(MXFP4_scaled_mm(aq.t(), as.t(), q.t(), s.t(), layout, 0.5f, bias.t(), y.t(), nullptr) == Q4_OK);
      DevCopy daq(aq, managed), das(as, managed);
      REQUIRE(MXFP4_scaled_mm(daq.t(), das.t(), dq.t(), ds.t(), layout, 0.5f, db.t(), dy.t(), nullptr) ==
              Q4_OK);
      check_close(dy.get(y), y);
    }
  }
}

TEST_CASE("MXFP4_linear_experts on the device equals the CPU, weight taken in place", "[emulated][mxfp4]") {
  if (!has_device()) return;
  const int64_t experts = 3, n = 16, k = 64, t_rows = 7;
  Tensor w = t::random_float({experts * n, k}, t::f32(), 31);
  Tensor q({experts * n, k / 2}, t::u8()), s({experts * n, k / 32}, t::u8());
  REQUIRE(MXFP4_quantize(w.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  Tensor q3 = q, s3 = s;
  q3.shape = {experts, n, k / 2};
  s3.shape = {experts, n, k / 32};
  q3.dl.shape = q3.shape.data();
  q3.dl.ndim = 3;
  s3.dl.shape = s3.shape.data();
  s3.dl.ndim = 3;
  Tensor x = t::random_float({t_rows, k}, t::f32(), 32), bias = t::random_float({experts, n}, t::f32(), 33);
  const int32_t eg[] = {2, 0, 2};
  const int64_t gr[] = {3, 0, 4};
  Tensor y({t_rows, n}, t::f32());
  REQUIRE(MXFP4_linear_experts(x.t(), q3.t(), s3.t(), Q4_SCALE_LINEAR, eg, gr, 3, bias.t(), y.t(), nullptr) ==
          Q4_OK);
  DevCopy dx(x, false), dq(q3, false), ds(s3, false), db(bias, false), dy(y, false);
  const int64_t runs = counters().runs;
  REQUIRE(MXFP4_linear_experts(dx.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, eg, gr, 3, db.t(), dy.t(), nullptr) ==
          Q4_OK);
  CHECK(counters().runs == runs + 2);  // one plugin linear per non-empty group
  check_close(dy.get(y), y);
}

TEST_CASE("MXFP4 bad inputs on the device get the host's statuses", "[emulated][mxfp4]") {
  if (!has_device()) return;
  const int64_t rows = 4, k = 64;
  // K not a multiple of 32: the shared validator, before the plugin.
  Tensor xk = t::random_float({rows, 48}, t::f32(), 41);
  Tensor qk({rows, 24}, t::u8()), sk({rows, 1}, t::u8());
  const int32_t host_rc = MXFP4_quantize(xk.t(), qk.t(), sk.t(), Q4_SCALE_LINEAR, nullptr);
  CHECK(host_rc == Q4_ERR_SHAPE);
  DevCopy dxk(xk, false), dqk(qk, false), dsk(sk, false);
  const int64_t runs = counters().runs;
  CHECK(MXFP4_quantize(dxk.t(), dqk.t(), dsk.t(), Q4_SCALE_LINEAR, nullptr) == host_rc);
  CHECK(last_error().find("multiple of 32") != std::string::npos);
  CHECK(counters().runs == runs);
  // Non-finite input: found on the device.
  Tensor x = t::random_float({rows, k}, t::f32(), 42);
  x.f()[77] = NAN;
  Tensor q({rows, k / 2}, t::u8()), s({rows, k / 32}, t::u8());
  const int32_t nan_rc = MXFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr);
  CHECK(nan_rc == Q4_ERR_NON_FINITE);
  DevCopy dx(x, false), dq(q, false), ds(s, false);
  CHECK(MXFP4_quantize(dx.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, nullptr) == nan_rc);
  // Ordinary host memory mixed with device tensors.
  CHECK(MXFP4_quantize(x.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, nullptr) == Q4_ERR_DEVICE);
}

TEST_CASE("MXFP4 products on the device: forced kernel failure falls back or fails under KernelOnly",
          "[emulated][mxfp4]") {
  if (!has_device()) return;
  const int64_t n = 32, k = 64, m = 3;
  Tensor w = t::random_float({n, k}, t::f32(), 51);
  Tensor q({n, k / 2}, t::u8()), s({n, k / 32}, t::u8());
  REQUIRE(MXFP4_quantize(w.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  Tensor x = t::random_float({m, k}, t::f32(), 52);
  Tensor y({m, n}, t::f32());
  REQUIRE(MXFP4_linear(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, nullptr, y.t(), nullptr) == Q4_OK);
  DevCopy dx(x, false), dq(q, false), ds(s, false), dy(y, false);
  ForceFail kernel("kernel");
  {
    const Q4_op_options o = path_opts(Q4_PATH_KERNEL_OR_FALLBACK);
    const int64_t fallbacks = counters().fallbacks;
    REQUIRE(MXFP4_linear(dx.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, nullptr, dy.t(), &o) == Q4_OK);
    CHECK(counters().fallbacks == fallbacks + 1);
    check_close(dy.get(y), y);
  }
  {
    const Q4_op_options o = path_opts(Q4_PATH_KERNEL_ONLY);
    CHECK(MXFP4_linear(dx.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, nullptr, dy.t(), &o) == Q4_ERR_UNSUPPORTED);
    CHECK(last_error().find("NVFP4_EMU_FAIL=kernel") != std::string::npos);
    Tensor yy({n, n}, t::f32());
    DevCopy dyy(yy, false);
    CHECK(MXFP4_scaled_mm(dq.t(), ds.t(), dq.t(), ds.t(), Q4_SCALE_LINEAR, 1.0f, nullptr, dyy.t(), &o) ==
          Q4_ERR_UNSUPPORTED);
  }
}

namespace {

// A packed MXFP4 bundle: codes [n, k/2] and E8M0 scales in `layout`.
Q4_weight_bundle mx_packed(Tensor& q, Tensor& s, int32_t layout, int64_t n, int64_t k, Tensor* bias) {
  Q4_weight_bundle b = t::packed_bundle(Q4_FORMAT_MXFP4, q, s, layout, 0.0f, n, k);
  b.bias = bias != nullptr ? bias->t() : nullptr;
  return b;
}

}  // namespace

TEST_CASE("MXFP4 linears on a CUDA session: swizzled and linear scales agree, update_weight follows",
          "[emulated][session][mxfp4]") {
  if (!has_device()) return;
  // N not a multiple of 128 and K/32 not of 4: the swizzled scales have
  // padding rows and columns that the unswizzle on the host must skip.
  const int64_t n = 130, k = 96, m = 5;
  Tensor x = t::random_float({m, k}, t::f32(), 61), bias = t::random_float({n}, t::f32(), 62);
  // Two weights, each quantized in both scale layouts.
  Tensor w1 = t::random_float({n, k}, t::f32(), 63), w2 = t::random_float({n, k}, t::f32(), 64);
  Tensor q1({n, k / 2}, t::u8()), s1({n, k / 32}, t::u8()),
      sw1({mx_scale_bytes(n, k, Q4_SCALE_SWIZZLED)}, t::u8());
  Tensor q2({n, k / 2}, t::u8()), sw2({mx_scale_bytes(n, k, Q4_SCALE_SWIZZLED)}, t::u8());
  REQUIRE(MXFP4_quantize(w1.t(), q1.t(), s1.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
  REQUIRE(MXFP4_quantize(w1.t(), q1.t(), sw1.t(), Q4_SCALE_SWIZZLED, nullptr) == Q4_OK);
  REQUIRE(MXFP4_quantize(w2.t(), q2.t(), sw2.t(), Q4_SCALE_SWIZZLED, nullptr) == Q4_OK);
  Q4_weight_bundle lin1 = mx_packed(q1, s1, Q4_SCALE_LINEAR, n, k, &bias);
  Q4_weight_bundle swz1 = mx_packed(q1, sw1, Q4_SCALE_SWIZZLED, n, k, &bias);
  Q4_weight_bundle swz2 = mx_packed(q2, sw2, Q4_SCALE_SWIZZLED, n, k, &bias);
  // The stateless CPU product on the same bytes.
  Tensor ref1({m, n}, t::f32()), ref2({m, n}, t::f32());
  REQUIRE(MXFP4_linear(x.t(), q1.t(), s1.t(), Q4_SCALE_LINEAR, bias.t(), ref1.t(), nullptr) == Q4_OK);
  REQUIRE(MXFP4_linear(x.t(), q2.t(), sw2.t(), Q4_SCALE_SWIZZLED, bias.t(), ref2.t(), nullptr) == Q4_OK);
  REQUIRE(!same_bytes(ref1, ref2));
  for (int32_t um : {Q4_UM_DISABLED, Q4_UM_PREFER}) {
    INFO("UM policy " << um);
    Q4_session_config c = config(Q4_TARGET_CUDA, um);
    Session s(&c);
    Q4_linear *a = nullptr, *b = nullptr;
    REQUIRE(Q4_linear_create(s.s, &lin1, &a) == Q4_OK);
    REQUIRE(Q4_linear_create(s.s, &swz1, &b) == Q4_OK);
    for (Q4_linear* l : {a, b}) {
      const Q4_linear_info info = info_of(l);
      CHECK(info.format == Q4_FORMAT_MXFP4);
      CHECK(info.target == Q4_TARGET_CUDA);
      CHECK(info.backend == Q4_BACKEND_NVFP4_KERNEL);
      CHECK(info.fell_back == 0);
      CHECK(info.scale_layout == Q4_SCALE_LINEAR);  // swizzled scales are unswizzled at prepare
      CHECK(info.weight_bytes == n * k / 2 + n * (k / 32) + n * 4);
      CHECK(info.weight_version == 1);
    }
    const int64_t runs = counters().runs;
    Tensor ya({m, n}, t::f32()), yb({m, n}, t::f32());
    REQUIRE(Q4_linear_forward(a, x.t(), ya.t()) == Q4_OK);
    REQUIRE(Q4_linear_forward(b, x.t(), yb.t()) == Q4_OK);
    CHECK(counters().runs == runs + 2);  // one plugin MXFP4 linear per forward
    CHECK(same_bytes(ya, yb));
    check_close(ya, ref1);
    // Device tensors read in place.
    DevTensor dx({m, k}, false, kDLCUDA), dy({m, n}, false, kDLCUDA);
    dx.upload(x);
    REQUIRE(Q4_linear_forward(b, &dx.dl, &dy.dl) == Q4_OK);
    CHECK(same_bytes(dy.download(), ya));
    // update_weight: another weight (swizzled scales), then a float source,
    // each followed by the next forward; the session diagnostics say mxfp4.
    REQUIRE(Q4_linear_update_weight(a, &swz2) == Q4_OK);
    REQUIRE(Q4_linear_forward(a, x.t(), ya.t()) == Q4_OK);
    check_close(ya, ref2);
    CHECK(info_of(a).weight_version == 2);
    Q4_weight_bundle f2 = float_bundle(w2, Q4_FORMAT_MXFP4, &bias);
    REQUIRE(Q4_linear_update_weight(b, &f2) == Q4_OK);  // OCP quantization: the bytes of q2 / sw2
    REQUIRE(Q4_linear_forward(b, &dx.dl, &dy.dl) == Q4_OK);
    check_close(dy.download(), ref2);
    CHECK(info_of(b).weight_version == 2);
    CHECK(info_of(b).weight_bytes == n * k / 2 + n * (k / 32) + n * 4);
    // Validation is kept: a NaN scale byte (row 2, block 1) or another
    // format is refused, and the linear keeps its weight.
    Tensor bad({n, k / 32}, t::u8());
    std::memcpy(bad.data(), s1.data(), s1.bytes);
    bad.data()[2 * (k / 32) + 1] = 0xFF;
    Q4_weight_bundle nan_b = mx_packed(q1, bad, Q4_SCALE_LINEAR, n, k, &bias);
    CHECK(Q4_linear_update_weight(a, &nan_b) == Q4_ERR_INVALID_ARGUMENT);
    CHECK(last_error().find("row 2, block 1") != std::string::npos);
    Q4_weight_bundle nv = float_bundle(w1, Q4_FORMAT_NVFP4, &bias);
    CHECK(Q4_linear_update_weight(a, &nv) == Q4_ERR_INVALID_ARGUMENT);
    CHECK(info_of(a).weight_version == 2);
    REQUIRE(Q4_linear_forward(a, x.t(), ya.t()) == Q4_OK);
    check_close(ya, ref2);
    const nlohmann::json sj = s.diagnostics(), lj = diagnostics_of(a);
    CHECK(sj["format"] == "mxfp4");
    CHECK(lj["format"] == "mxfp4");
    CHECK(lj["target"] == "cuda");
    CHECK(lj["scaleLayout"] == "linear");
    CHECK(lj["fallbackReason"] == "");
    CHECK(sj["fallbackReason"] == "");
    REQUIRE(Q4_linear_destroy(a) == Q4_OK);
    REQUIRE(Q4_linear_destroy(b) == Q4_OK);
    CHECK(s.stats().live_bytes == 0);
    CHECK(s.stats().managed_bytes == 0);
  }
}

TEST_CASE("forwards run on the session's stream (Q4_session_set_stream)", "[emulated][session]") {
  {
    Q4_session_config c = config(Q4_TARGET_CPU, Q4_UM_DISABLED);
    Session cpu(&c);
    CHECK(Q4_session_set_stream(cpu.s, nullptr) == Q4_ERR_UNSUPPORTED);  // a CPU session has no stream
    CHECK(last_error().find("CPU") != std::string::npos);
  }
  CHECK(Q4_session_set_stream(nullptr, nullptr) == Q4_ERR_NULL_POINTER);
  if (!has_device()) return;
  const int64_t n = 8, k = 32;
  Tensor w = t::random_float({n, k}, t::f32(), 21), x = t::random_float({2, k}, t::f32(), 22);
  Q4_session_config c = config(Q4_TARGET_CUDA, Q4_UM_DISABLED);
  Session s(&c);
  Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NVFP4);
  Q4_linear* l = nullptr;
  REQUIRE(Q4_linear_create(s.s, &b, &l) == Q4_OK);  // created before the stream is set
  DevTensor dx({2, k}, false, kDLCUDA), dy({2, n}, false, kDLCUDA);
  dx.upload(x);
  void* const stream = reinterpret_cast<void*>(uintptr_t{0x5eed0});
  REQUIRE(Q4_session_set_stream(s.s, stream) == Q4_OK);
  const int64_t syncs = counters().synchronizations;
  REQUIRE(Q4_linear_forward(l, &dx.dl, &dy.dl) == Q4_OK);
  CHECK(counters().last_run_stream == 0x5eed0);
  CHECK(counters().synchronizations == syncs);  // device output: queued on the stream, not waited for
  // A host output is complete on return: the wait is on the session's stream.
  Tensor y({2, n}, t::f32());
  if (emu().reads_host()) {
    REQUIRE(Q4_linear_forward(l, &dx.dl, y.t()) == Q4_OK);
    CHECK(counters().last_run_stream == 0x5eed0);
    CHECK(counters().synchronizations == syncs + 1);
    CHECK(counters().last_sync_stream == 0x5eed0);
  }
  // NULL: back to the default stream.
  REQUIRE(Q4_session_set_stream(s.s, nullptr) == Q4_OK);
  REQUIRE(Q4_linear_forward(l, &dx.dl, &dy.dl) == Q4_OK);
  CHECK(counters().last_run_stream == 0);
  CHECK(Q4_linear_destroy(l) == Q4_OK);
}
