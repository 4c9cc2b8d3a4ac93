#include "common/error.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>

namespace q4 {
namespace {

thread_local std::string t_last_error;

struct LogState {
  std::mutex mutex;
  Q4_log_callback callback = nullptr;
  void* user = nullptr;
  std::atomic<bool> installed{false};  // lock-free "is anyone listening"
};

LogState& log_state() {
  static LogState* state = new LogState();  // never destroyed: usable at exit
  return *state;
}

int32_t parse_log_level(const char* text) {
  if (text == nullptr || *text == '\0') return Q4_LOG_WARN;
  if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0') return text[0] - '0';
  if (std::strcmp(text, "off") == 0) return Q4_LOG_OFF;
  if (std::strcmp(text, "error") == 0) return Q4_LOG_ERROR;
  if (std::strcmp(text, "warn") == 0) return Q4_LOG_WARN;
  if (std::strcmp(text, "info") == 0) return Q4_LOG_INFO;
  if (std::strcmp(text, "debug") == 0) return Q4_LOG_DEBUG;
  return Q4_LOG_WARN;
}

std::atomic<int32_t>& log_level_ref() {
  static std::atomic<int32_t> level{parse_log_level(std::getenv("Q4_LOG_LEVEL"))};
  return level;
}

}  // namespace

void fail(int32_t status, const std::string& argument, const std::string& message) {
  if (argument.empty()) throw Error(status, message);
  throw Error(status, "argument '" + argument + "': " + message);
}

int32_t record_error(int32_t status, const char* function, const char* message) noexcept {
  try {
    t_last_error.assign(function);
    t_last_error.append(": ");
    t_last_error.append(message);
  } catch (...) {
    // Keeping the status matters more than the text when memory is exhausted.
  }
  if (log_enabled(Q4_LOG_DEBUG)) {
    log_message(Q4_LOG_DEBUG, t_last_error);
  }
  return status;
}

void clear_last_error() noexcept {
  t_last_error.clear();
}

const char* last_error() noexcept {
  return t_last_error.c_str();
}

bool log_enabled(int32_t level) noexcept {
  return level <= log_level_ref().load(std::memory_order_relaxed) &&
         log_state().installed.load(std::memory_order_acquire);
}

void log_message(int32_t level, const std::string& message) noexcept {
  if (level > log_level_ref().load(std::memory_order_relaxed)) return;
  LogState& state = log_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.callback == nullptr) return;
  clean_vector_state();  // the host's callback may be SSE code (a kernel may have run before)
  state.callback(level, message.c_str(), state.user);
}

void set_log_callback(Q4_log_callback callback, void* user) {
  LogState& state = log_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.callback = callback;
  state.user = user;
  state.installed.store(callback != nullptr, std::memory_order_release);
}

void set_log_level(int32_t level) {
  log_level_ref().store(level, std::memory_order_relaxed);
}

int32_t get_log_level() {
  return log_level_ref().load(std::memory_order_relaxed);
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) {
    fail(Q4_ERR_OVERFLOW, what, "size computation overflows 64-bit integers");
  }
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) {
    fail(Q4_ERR_OVERFLOW, what, "size computation overflows 64-bit integers");
  }
  return r;
}

}  // namespace q4
