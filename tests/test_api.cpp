// Version, capabilities, ISA cap, logging: the format-neutral Q4_ surface.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

TEST_CASE("a tuning file that is not a regular file is skipped at once, not waited on", "[api]") {
  // A FIFO at the tuning file's path: the library read it with an ifstream,
  // whose open waits for a writer (the first product of a process, or the
  // tuner here, hung). Now it is opened without blocking and skipped as
  // not a regular file; the tuner's result replaces it.
  const std::string path = "/tmp/nvfp4_tuning_fifo_" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  REQUIRE(::setenv("NVFP4_TUNING_FILE", path.c_str(), 1) == 0);
  std::promise<int32_t> done;
  std::future<int32_t> rc = done.get_future();
  std::thread t([&] {
    Q4_tune_result r{};
    r.struct_size = sizeof r;
    done.set_value(Q4_tune_matmul(64, 1, 1, &r));
  });
  const bool finished = rc.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!finished) {
    // Unblock the old behaviour's open (a writer arrives, writes nothing).
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  t.join();
  ::unsetenv("NVFP4_TUNING_FILE");
  CHECK(finished);
  CHECK(rc.get() == Q4_OK);
  struct stat st {};
  CHECK(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));  // the tuner's file replaced the FIFO
  std::remove(path.c_str());
}

TEST_CASE("the tuner weighs the 4-bit panel product and persists what it timed", "[api]") {
  const std::string path = "/tmp/nvfp4_tuning_test_" + std::to_string(::getpid()) + ".json";
  REQUIRE(::setenv("NVFP4_TUNING_FILE", path.c_str(), 1) == 0);
  Q4_tune_result r{};
  r.struct_size = sizeof r;
  const int32_t rc = Q4_tune_matmul(64, 1, 1, &r);
  ::unsetenv("NVFP4_TUNING_FILE");
  INFO(Q4_last_error());
  REQUIRE(rc == Q4_OK);
  CHECK(r.dim == 64);
  CHECK(r.candidates == 40);
  CHECK(r.default_ms > 0);
  CHECK(r.best_ms <= r.default_ms);  // the defaults are the starting best
  if (r.adopted != 0) CHECK(r.best_ms <= r.default_ms * 0.97);
  REQUIRE(r.persisted == 1);
  CHECK(std::string(r.cache_path) == path);
  std::ifstream in(path);
  REQUIRE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  in.close();
  std::remove(path.c_str());
  REQUIRE(j.is_object());
  const nlohmann::json& e = j["entries"][r.cpu_signature];
  REQUIRE(e.is_object());
  // The objective names both products; the 4-bit one has rows above every
  // small-batch range (256 at dim 64), so the panel GEMM is what it timed.
  CHECK(e.value("objective", "") == "fp32 GEMM dim^3 + NVFP4 panel product 256x64x64");
  CHECK(e.value("kc", 0) == (r.adopted != 0 ? r.kc_best : r.kc_default));
  CHECK(e.value("mc", 0) == (r.adopted != 0 ? r.mc_best : r.mc_default));
  // The GEMV's range is not tuned from weights in the caches (see tuner.cpp).
  CHECK(e["small_batch"].value("min_m", 0) == 9);
}
