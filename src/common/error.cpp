#include "common/error.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>

#include <pthread.h>

namespace q4 {
namespace {

thread_local std::string t_last_error;

// The callback and its argument, replaced as a whole (one pointer store),
// so that no moment shows a callback with another callback's argument.
struct LogTarget {
  Q4_log_callback callback;
  void* user;
};

// The lock is held while the callback runs, so that once
// Q4_set_log_callback(NULL) returns no callback is running and the caller
// may free its argument.
struct LogState {
  std::mutex mutex;
  std::atomic<const LogTarget*> target{nullptr};  // written under mutex
  std::atomic<bool> installed{false};             // lock-free "is anyone listening"
};

LogState& log_state() {
  static LogState* state = new LogState();  // never destroyed: usable at exit
  return *state;
}

// fork() without exec: another thread may hold the log's lock at the fork,
// running the host's callback, and the child would wait for it forever.
// The forking thread cannot wait for it either: the callback may wait for
// the forking thread (a Python callback for the GIL, which os.fork()
// holds). So it takes the lock only when it is free; otherwise the child
// makes the lock anew (its holder does not exist there) and keeps the
// target (a whole pointer: old or new, never torn). A fork from inside the
// callback keeps the lock as it is: that thread releases it on return.
thread_local bool t_in_log_callback = false;
bool g_log_locked_for_fork = false;  // written by the forking thread only

void log_before_fork() {
  g_log_locked_for_fork = !t_in_log_callback && log_state().mutex.try_lock();
}
void log_after_fork_in_parent() {
  if (g_log_locked_for_fork) log_state().mutex.unlock();
  g_log_locked_for_fork = false;
}
void log_after_fork_in_child() {
  LogState& state = log_state();
  if (g_log_locked_for_fork) {
    state.mutex.unlock();
  } else if (!t_in_log_callback) {
    new (&state.mutex) std::mutex();  // (held by a thread the child does not have)
  }
  g_log_locked_for_fork = false;
}
[[maybe_unused]] const int g_log_fork_handlers =
    pthread_atfork(log_before_fork, log_after_fork_in_parent, log_after_fork_in_child);

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
  const LogTarget* target = state.target.load(std::memory_order_relaxed);
  if (target == nullptr) return;
  clean_vector_state();  // the host's callback may be SSE code (a kernel may have run before)
  t_in_log_callback = true;
  target->callback(level, message.c_str(), target->user);
  t_in_log_callback = false;
}

void set_log_callback(Q4_log_callback callback, void* user) {
  LogState& state = log_state();
  const LogTarget* fresh = callback != nullptr ? new LogTarget{callback, user} : nullptr;
  const LogTarget* old = nullptr;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    old = state.target.exchange(fresh, std::memory_order_relaxed);
    state.installed.store(callback != nullptr, std::memory_order_release);
  }
  delete old;  // (readers use a target only under the lock)
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
