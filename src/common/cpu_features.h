// CPU feature detection (CPUID + XGETBV on x86-64, HWCAP on aarch64) and the
// ISA level the kernel table may use (docs/abi.md §8).
#pragma once

#include <cstdint>
#include <string>

namespace q4 {

struct CpuInfo {
  uint64_t features = 0;  // Q4_CPU_* bits
  std::string vendor;
  std::string brand;
  int32_t family = 0;  // x86: CPUID's display family (base + extended; 0x19 Zen 3/4, 0x1a Zen 5); else 0
  int32_t model = 0;   // x86: CPUID's display model (families 6 and 15: extended << 4 + base); else 0
  int32_t num_cpus = 1;
  // Per-core data caches in bytes, from CPUID's deterministic cache
  // parameters (leaf 4 on Intel, 0x8000001D on AMD); 0 where the CPU (or a
  // VM's CPUID) does not give them, and on other architectures.
  int64_t l1d_bytes = 0;
  int64_t l2_bytes = 0;
};

// Detected once per process (thread-safe).
const CpuInfo& cpu_info();

// Highest Q4_ISA_* level the CPU supports (independent of the build).
int32_t isa_supported_by_cpu(const CpuInfo& info);
// Whether the CPU can run a given level.
bool cpu_has_isa(const CpuInfo& info, int32_t isa);

// The ISA cap (Q4_ISA_BEST for none). The initial cap comes from
// Q4_FORCE_ISA. set_max_isa throws Q4_ERR_UNSUPPORTED /
// Q4_ERR_INVALID_ARGUMENT.
int32_t isa_cap();
void set_max_isa(int32_t isa);

// Levels from best to worst, and a rank to compare a level with the cap.
extern const int32_t kIsaPreference[8];
int32_t isa_rank(int32_t isa);

// Leaves the upper halves of the x86 vector registers clean (vzeroupper)
// where the CPU and the OS run AVX; nothing elsewhere. Code compiled for
// SSE (most of a host process: an interpreter, libm's callers, a JIT's
// scalar paths) ran 30-50x slower on an Emerald Rapids-class Xeon after a
// kernel that returned with them dirty (docs/performance.md, fortieth
// session): the public calls (api_call) and the worker pool's jobs end with
// this. Out of line, in a translation unit compiled without AVX, so the
// compiler keeps no vector value across the instruction.
void clean_vector_state() noexcept;

// The calling thread's floating-point controls for the library's work:
// the IEEE defaults (round to nearest even, subnormal inputs and results
// kept, no traps; x86 MXCSR 0x1F80 less its status flags, aarch64 FPCR 0).
// A host may run with others (flush-to-zero and denormals-are-zero are set
// process-wide by any library linked with -ffast-math, or by a framework's
// option), which would change the library's bit-exact results: each
// public call sets the defaults when they differ and restores the caller's
// controls when it returns (api_call), and the pool's workers start with
// them.
class FpDefaults {
 public:
  FpDefaults() noexcept;
  ~FpDefaults() noexcept;
  FpDefaults(const FpDefaults&) = delete;
  FpDefaults& operator=(const FpDefaults&) = delete;

 private:
  uint64_t saved_ = 0;
  bool changed_ = false;
};
void set_default_fp_controls() noexcept;

// "scalar", "avx2", ... ; nullptr for unknown values.
const char* isa_name(int32_t isa);
// Parses a Q4_FORCE_ISA value; -1 when unknown.
int32_t parse_isa_name(const char* text);

}  // namespace q4
