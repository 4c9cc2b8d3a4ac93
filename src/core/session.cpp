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
#include "plugin/seams.h"

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
  Q4_session_config cfg;
  std::memset(&cfg, 0, sizeof cfg);  // NULL: the defaults of Q4_session_config_init
  cfg.struct_size = sizeof cfg;
  if (config != nullptr) cfg = read_struct(config, "config");
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
  s.ops = resolve_options_allow_cuda(&o);  // ranges; the target is decided here
  s.unified_memory = c->unified_memory;
  s.diagnostics = c->diagnostics != 0;
  s.device = c->device_id;
  s.device_name = "cpu";
  const cuda::PluginState& p = cuda::plugin();
  if (c->target == Q4_TARGET_CUDA) {
    if (!p.loaded)
      fail(Q4_ERR_NOT_AVAILABLE, "config->target", "CUDA backend not available: " + p.load_state);
    if (p.probe.device_count == 0) {
      fail(Q4_ERR_NOT_AVAILABLE, "config->target", "no usable CUDA device: " + p.load_state);
    }
    cuda::require_device(c->device_id, "config->device_id");
    s.target = Q4_TARGET_CUDA;
  } else if (c->target == Q4_TARGET_AUTO && cuda::cuda_state() == Q4_CUDA_READY && c->device_id >= 0 &&
             c->device_id < p.probe.device_count) {
    const auto& a = p.probe.devices[c->device_id];
    // AUTO takes the device only where this plugin has code for it.
    if (cuda::interpret_caps(a.cc_major, a.cc_minor, a.managed_memory, a.concurrent_managed_access,
                             a.pageable_memory_access, p.probe.compiled_archs)
            .arch_compiled) {
      s.target = Q4_TARGET_CUDA;
    }
  }
  if (s.on_cuda()) {
    s.device_name = p.probe.devices[s.device].name;
    s.reads_host = cuda::reads_host_memory(s.device);
    s.ops.target = Q4_TARGET_CUDA;
  } else {
    s.ops.target = Q4_TARGET_CPU;
  }
  if (c->unified_memory != Q4_UM_DISABLED) {
    const std::string why = cuda::managed_unusable_reason(c->device_id);
    if (c->unified_memory == Q4_UM_REQUIRE && !why.empty()) {
      fail(Q4_ERR_NOT_AVAILABLE, "config->unified_memory",
           "RequireUnified: managed memory is not usable: " + why);
    }
    s.managed = why.empty();
    if (!s.managed) {
      s.unified_memory_reason = "PreferUnified: managed memory unavailable (" + why + "); using ordinary " +
                                (s.on_cuda() ? "device" : "host") + " memory";
      log_message(Q4_LOG_INFO, s.unified_memory_reason);  // once, at session creation
    }
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
  j["target"] = s.settings.on_cuda() ? "cuda" : "cpu";
  j["device"] = s.settings.on_cuda()
                    ? "cuda:" + std::to_string(s.settings.device) + " (" + s.settings.device_name + ")"
                    : std::string("cpu");
  const int32_t nv = s.nvfp4_linears.load(), nf = s.nf4_linears.load(), mx = s.mxfp4_linears.load();
  const int formats = (nv > 0 ? 1 : 0) + (nf > 0 ? 1 : 0) + (mx > 0 ? 1 : 0);
  j["format"] = formats > 1 ? "mixed" : (nv > 0 ? "nvfp4" : (nf > 0 ? "nf4" : (mx > 0 ? "mxfp4" : "none")));
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    j["fallbackReason"] = s.last_fallback_reason;
  }
  j["isa"] = isa_name(active_isa());
  j["threads"] = s.settings.ops.num_threads > 0 ? s.settings.ops.num_threads : default_num_threads();
  j["mathMode"] = names::math_name(s.settings.ops.math_mode);
  j["nativeLoadState"] = cuda::plugin().load_state;
  j["unifiedMemory"] = {{"policy", names::um_name(s.settings.unified_memory)},
                        {"active", s.settings.managed},
                        {"reason", s.settings.unified_memory_reason},
                        {"managedBytes", st.managed_bytes}};
  j["stats"] = {{"liveLinears", st.live_linears},      {"liveMutables", st.live_mutables},
                {"liveSnapshots", st.live_snapshots},  {"liveBuffers", st.live_buffers},
                {"liveBytes", st.live_bytes},          {"forwards", st.forwards},
                {"implicitCopies", st.implicit_copies}};
  return j.dump();
}

}  // namespace q4::core
