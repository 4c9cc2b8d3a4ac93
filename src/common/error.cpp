#include "common/error.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>

#include <pthread.h>

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

// fork() without exec: the forking thread holds the log's lock across the
// fork (so no other thread holds it, or a half-set callback, in the child)
// unless it forks from inside the callback, where it already holds it.
thread_local bool t_in_log_callback = false;
bool g_log_locked_for_fork = false;  // written by the forking thread only

void log_before_fork() {
  if (t_in_log_callback) return;
  log_state().mutex.lock();
  g_log_locked_for_fork = true;
}
void log_after_fork() {
  if (!g_log_locked_for_fork) return;
  g_log_locked_for_fork = false;
  log_state().mutex.unlock();
}
[[maybe_unused]] const int g_log_fork_handlers =
    pthread_atfork(log_before_fork, log_after_fork, log_after_fork);

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
  // A message raised while the callback runs on this thread (it called the
  // library, and that call failed or fell back) is dropped: entering the
  // callback again would take the lock this thread holds.
  if (t_in_log_callback) return;
  LogState& state = log_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.callback == nullptr) return;
  clean_vector_state();  // the host's callback may be SSE code (a kernel may have run before)
  t_in_log_callback = true;
  state.callback(level, message.c_str(), state.user);
  t_in_log_callback = false;
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
