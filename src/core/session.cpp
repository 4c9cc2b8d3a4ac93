#include "core/session.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "common/cpu_features.h"
#include "common/enum_tables.h"
#include "common/error.h"
#include "common/struct_size.h"
#include "common/thread_pool.h"
#include "core/cuda_backend.h"
#include "core/options.h"
#include "kernels/dispatch.h"

namespace q4::core {

int32_t copy_out(const std::string& text, char* buf, size_t cap, size_t* needed) {
  if (needed == nullptr) fail(Q4_ERR_NULL_POINTER, "needed", "output pointer is NULL");
  *needed = text.size() + 1;
  if (buf == nullptr) return Q4_ERR_BUFFER_TOO_SMALL;  // the size query
  if (cap < text.size() + 1) {
    fail(Q4_ERR_BUFFER_TOO_SMALL, "cap",
         "need " + std::to_string(text.size() + 1) + " bytes, got " + std::to_string(cap));
  }
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  return Q4_OK;
}

// ---------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------
SessionSettings resolve_session_config(const Q4_session_config* config) {
  SessionSettings s;
  if (config == nullptr) return s;
  const Q4_session_config cfg = read_struct(config, "config");
  const Q4_session_config* c = &cfg;
  // Reuse the per-call option checks for the shared fields.
  Q4_op_options o{};
  o.struct_size = sizeof o;
  o.compute_path = c->compute_path;
  o.backend = c->backend;
  o.target = c->target;
  o.device_id = c->device_id;
  o.math_mode = c->math_mode;
  o.num_threads = c->num_threads;
  if (c->unified_memory < Q4_UM_DISABLED || c->unified_memory > Q4_UM_REQUIRE) {
    fail(Q4_ERR_INVALID_ARGUMENT, "config->unified_memory",
         "expected Q4_UM_DISABLED, Q4_UM_PREFER or Q4_UM_REQUIRE, got " + std::to_string(c->unified_memory));
  }
  if (c->diagnostics != 0 && c->diagnostics != 1) {
    fail(Q4_ERR_INVALID_ARGUMENT, "config->diagnostics",
         "expected 0 or 1, got " + std::to_string(c->diagnostics));
  }
  if (c->unified_memory == Q4_UM_REQUIRE) {
    fail(Q4_ERR_NOT_AVAILABLE, "config->unified_memory",
         "RequireUnified: managed memory needs the CUDA backend, which this build does not have");
  }
  s.ops = resolve_options(&o);  // CUDA target -> Q4_ERR_NOT_AVAILABLE
  s.unified_memory = c->unified_memory;
  s.diagnostics = c->diagnostics != 0;
  if (c->unified_memory == Q4_UM_PREFER) {
    s.unified_memory_reason =
        "PreferUnified: managed memory unavailable (CUDA backend not built); using ordinary memory";
    log_message(Q4_LOG_INFO, s.unified_memory_reason);
  }
  return s;
}

void fill_stats(const Q4_session& s, Q4_session_stats* out) {
  require_out_struct(out, "stats");
  Q4_session_stats r;
  std::memset(&r, 0, sizeof r);
  r.live_linears = s.counters->linears.load();
  r.live_mutables = s.counters->mutables.load();
  r.live_snapshots = s.counters->snapshots.load();
  r.live_buffers = s.counters->buffers.load();
  r.live_bytes = s.counters->bytes.load();
  r.managed_bytes = s.counters->managed_bytes.load();
  r.forwards = s.counters->forwards.load();
  r.implicit_copies = s.counters->implicit_copies.load();
  write_struct(out, r, "stats");
}

void destroy_session(Q4_session* s) {
  const SessionCounters& c = *s->counters;
  const int32_t l = c.linears.load(), m = c.mutables.load(), sn = c.snapshots.load();
  if (l != 0 || m != 0 || sn != 0) {
    fail(Q4_ERR_STATE, "session",
         "still owns " + std::to_string(l) + " linear(s), " + std::to_string(m) + " mutable tensor(s) and " +
             std::to_string(sn) + " snapshot(s); destroy or release them first");
  }
  delete s;
}

std::string session_diagnostics(const Q4_session& s) {
  Q4_session_stats st{};
  st.struct_size = sizeof st;
  fill_stats(s, &st);
  nlohmann::json j;
  j["computePath"] = names::path_name(s.settings.ops.compute_path);
  j["backend"] = names::backend_name(s.settings.ops.backend);
  j["target"] = "cpu";
  j["device"] = "cpu";
  j["isa"] = isa_name(active_isa());
  j["threads"] = s.settings.ops.num_threads > 0 ? s.settings.ops.num_threads : default_num_threads();
  j["mathMode"] = names::math_name(s.settings.ops.math_mode);
  j["nativeLoadState"] = cuda::plugin().load_state;
  j["unifiedMemory"] = {{"policy", names::um_name(s.settings.unified_memory)},
                        {"active", false},
                        {"reason", s.settings.unified_memory_reason}};
  j["stats"] = {{"liveLinears", st.live_linears},      {"liveMutables", st.live_mutables},
                {"liveSnapshots", st.live_snapshots},  {"liveBuffers", st.live_buffers},
                {"liveBytes", st.live_bytes},          {"forwards", st.forwards},
                {"implicitCopies", st.implicit_copies}};
  return j.dump();
}

}  // namespace q4::core
