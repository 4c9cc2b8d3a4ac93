// What this library can do on this machine: CPU features and ISA levels,
// the CUDA plugin's state and its devices (probed once, then cached).
#pragma once

#include <cstdint>

#include "nvfp4/q4_base.h"

namespace q4::core {

Q4_capabilities capabilities();
// The Q4_ISA_* of this thread's last CPU kernel call (-1 before any).
int32_t last_isa_used();

}  // namespace q4::core
