// Errors inside the core: the core throws q4::Error (status + message); the
// extern "C" layer turns every exception into a status with api_call(), the
// one exception firewall. The message is kept per thread for
// Q4_last_error().
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "common/cpu_features.h"
#include "nvfp4/q4_base.h"

namespace q4 {

class Error : public std::exception {
 public:
  Error(int32_t status, std::string message) : status_(status), message_(std::move(message)) {}
  int32_t status() const noexcept { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  int32_t status_;
  std::string message_;
};

// Throws Error(status, "<argument>: <message>").
[[noreturn]] void fail(int32_t status, const std::string& argument, const std::string& message);

// Records `message` as this thread's last error and returns `status`.
int32_t record_error(int32_t status, const char* function, const char* message) noexcept;
void clear_last_error() noexcept;
const char* last_error() noexcept;

// Logging to the host's callback (never to stdout/stderr).
void log_message(int32_t level, const std::string& message) noexcept;
bool log_enabled(int32_t level) noexcept;
void set_log_callback(Q4_log_callback callback, void* user);
void set_log_level(int32_t level);
int32_t get_log_level();

// Runs `body` (returning int32_t) and converts any exception into a status,
// recording "<function>: <message>" for Q4_last_error(). The body runs
// with the IEEE default floating-point controls (FpDefaults: the caller's
// are restored afterwards), and the call returns with the vector
// registers' upper halves clean (clean_vector_state): a kernel may leave
// them dirty, and the caller's SSE code would pay for it.
template <class Body>
int32_t api_call(const char* function, Body&& body) noexcept {
  struct Clean {
    Clean() = default;
    Clean(const Clean&) = delete;
    Clean& operator=(const Clean&) = delete;
    ~Clean() { clean_vector_state(); }
  } clean;
  const FpDefaults fp;
  try {
    return std::forward<Body>(body)();
  } catch (const Error& e) {
    return record_error(e.status(), function, e.what());
  } catch (const std::bad_alloc&) {
    return record_error(Q4_ERR_OUT_OF_MEMORY, function, "out of memory");
  } catch (const std::exception& e) {
    return record_error(Q4_ERR_INTERNAL, function, e.what());
  } catch (...) {
    return record_error(Q4_ERR_INTERNAL, function, "unknown exception");
  }
}

// Checked size arithmetic (throws Q4_ERR_OVERFLOW naming `what`).
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);

}  // namespace q4
