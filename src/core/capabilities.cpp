#include "core/capabilities.h"

#include <cstring>
#include <string>

#include "common/cpu_features.h"
#include "core/cuda_backend.h"
#include "kernels/dispatch.h"
#include "plugin/seams.h"

namespace q4::core {
namespace {

void copy_text(char* dst, size_t cap, const std::string& src) {
  const size_t n = src.size() < cap - 1 ? src.size() : cap - 1;
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

}  // namespace

Q4_capabilities capabilities() {
  const CpuInfo& cpu = cpu_info();
  Q4_capabilities c;
  std::memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.abi_version = NVFP4_ABI_VERSION;
  c.cpu_features = cpu.features;
  c.isa_best = best_isa();
  c.isa_active = active_isa();
  c.num_cpus = cpu.num_cpus;
  const cuda::PluginState& cu = cuda::plugin();
  c.cuda_state = cuda::cuda_state();
  c.cuda_runtime_version = cu.probe.runtime_version;
  c.cuda_driver_version = cu.probe.driver_version;
  c.cuda_device_count = cu.loaded ? cu.probe.device_count : 0;
  for (int32_t d = 0; d < c.cuda_device_count; ++d) {
    const auto& a = cu.probe.devices[d];
    const cuda::DeviceCaps dc =
        cuda::interpret_caps(a.cc_major, a.cc_minor, a.managed_memory, a.concurrent_managed_access,
                             a.pageable_memory_access, cu.probe.compiled_archs);
    if (dc.zero_copy) c.managed_memory = 1;
    if (dc.fp4_tensor_cores) c.fp4_tensor_cores = 1;
  }
  copy_text(c.cpu_vendor, sizeof c.cpu_vendor, cpu.vendor);
  copy_text(c.cpu_brand, sizeof c.cpu_brand, cpu.brand);
  copy_text(c.cuda_archs, sizeof c.cuda_archs, cu.probe.compiled_archs);
  copy_text(c.native_load_state, sizeof c.native_load_state, cu.load_state);
  return c;
}

int32_t last_isa_used() {
  return kern::last_isa_used();
}

}  // namespace q4::core
