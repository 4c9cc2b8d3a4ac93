// Version, capabilities, ISA cap, logging: the format-neutral Q4_ surface.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "nvfp4/nvfp4.h"

TEST_CASE("version and ABI version agree with the header", "[api]") {
  CHECK(Q4_version() == NVFP4_VERSION_NUMBER);
  CHECK(std::string(Q4_version_string()) == NVFP4_VERSION_STRING);
  CHECK(Q4_abi_version() == NVFP4_ABI_VERSION);
}

TEST_CASE("capabilities describe the CPU and the missing CUDA backend", "[api]") {
  Q4_capabilities c{};
  c.struct_size = sizeof c;
  REQUIRE(Q4_get_capabilities(&c) == Q4_OK);
  CHECK(c.struct_size == sizeof c);
  CHECK(c.abi_version == NVFP4_ABI_VERSION);
  CHECK(c.num_cpus >= 1);
  CHECK(std::strlen(c.cpu_vendor) > 0);
  CHECK(std::string(Q4_isa_name(c.isa_active)) != "unknown");
  // Here (no GPU): not built, not loadable, or loaded without a device;
  // in every case native_load_state says which and why.
  CHECK(std::strlen(c.native_load_state) > 0);
  if (c.cuda_state == Q4_CUDA_READY) {
    CHECK(c.cuda_device_count > 0);
  } else {
    CHECK(c.cuda_device_count == 0);
    CHECK(c.managed_memory == 0);
    CHECK(c.fp4_tensor_cores == 0);
  }
#if defined(__x86_64__)
  CHECK((c.cpu_features & Q4_CPU_SSE42) != 0);  // every x86-64 CPU we run on
  if (c.cpu_features & Q4_CPU_AVX512F) CHECK((c.cpu_features & Q4_CPU_AVX2) != 0);
#endif
}

TEST_CASE("the ISA cap accepts what the CPU has and refuses the rest", "[api]") {
  CHECK(Q4_set_max_isa(Q4_ISA_SCALAR) == Q4_OK);
  Q4_capabilities c{};
  c.struct_size = sizeof c;
  REQUIRE(Q4_get_capabilities(&c) == Q4_OK);
  CHECK(c.isa_active == Q4_ISA_SCALAR);
#if defined(__x86_64__)
  CHECK(Q4_set_max_isa(Q4_ISA_NEON) == Q4_ERR_UNSUPPORTED);
  CHECK(std::string(Q4_last_error()).find("neon") != std::string::npos);
#endif
  CHECK(Q4_set_max_isa(Q4_ISA_BEST) == Q4_OK);
  REQUIRE(Q4_get_capabilities(&c) == Q4_OK);
  CHECK(c.isa_active == c.isa_best);
}

namespace {
struct LogSink {
  int calls = 0;
  std::string last;
};
void on_log(int32_t level, const char* message, void* user) {
  auto* sink = static_cast<LogSink*>(user);
  (void)level;
  sink->calls++;
  sink->last = message;
}
}  // namespace

TEST_CASE("failures reach the log callback at debug level, never stdout", "[api]") {
  LogSink sink;
  REQUIRE(Q4_set_log_callback(on_log, &sink) == Q4_OK);
  const int32_t old = Q4_get_log_level();
  REQUIRE(Q4_set_log_level(Q4_LOG_DEBUG) == Q4_OK);
  CHECK(NVFP4_quantize(nullptr, nullptr, nullptr, 0, 0, nullptr, nullptr) == Q4_ERR_NULL_POINTER);
  CHECK(sink.calls == 1);
  CHECK(sink.last.find("NVFP4_quantize") == 0);
  REQUIRE(Q4_set_log_level(Q4_LOG_OFF) == Q4_OK);
  CHECK(NVFP4_quantize(nullptr, nullptr, nullptr, 0, 0, nullptr, nullptr) == Q4_ERR_NULL_POINTER);
  CHECK(sink.calls == 1);
  REQUIRE(Q4_set_log_callback(nullptr, nullptr) == Q4_OK);
  REQUIRE(Q4_set_log_level(old) == Q4_OK);
}

TEST_CASE("options init gives the documented defaults", "[api]") {
  Q4_op_options o{};
  std::memset(&o, 0xff, sizeof o);
  REQUIRE(Q4_op_options_init(&o) == Q4_OK);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.compute_path == Q4_PATH_AUTO);
  CHECK(o.backend == Q4_BACKEND_AUTO);
  CHECK(o.math_mode == Q4_MATH_EXACT);
  CHECK(o.num_threads == 0);
  CHECK(o.stream == nullptr);
}
