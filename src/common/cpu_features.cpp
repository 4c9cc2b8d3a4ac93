#include "common/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "nvfp4/q4_base.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define Q4_X86 1
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define Q4_AARCH64 1
#endif

#if defined(__linux__)
#include <unistd.h>
#endif

namespace q4 {
namespace {

#if defined(Q4_X86)
uint64_t xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// The L1 data and L2 sizes from a deterministic-cache-parameters leaf
// (Intel 4, AMD 0x8000001D: one subleaf per cache until type 0; EAX bits
// 4:0 the type, 1 data or 3 unified, 7:5 the level; size = ways x
// partitions x line size x sets).
void detect_x86_caches(uint32_t leaf, CpuInfo& info) {
  for (uint32_t sub = 0; sub < 16; ++sub) {
    uint32_t a = 0, b = 0, c = 0, d = 0;
    __cpuid_count(leaf, sub, a, b, c, d);
    const uint32_t type = a & 0x1fu;
    if (type == 0) break;
    const uint32_t level = (a >> 5) & 0x7u;
    const int64_t bytes = int64_t{((b >> 22) & 0x3ffu) + 1} * (((b >> 12) & 0x3ffu) + 1) *
                          ((b & 0xfffu) + 1) * (int64_t{c} + 1);
    if (level == 1 && type == 1) info.l1d_bytes = bytes;
    if (level == 2 && (type == 3 || type == 1)) info.l2_bytes = bytes;
  }
}

void detect_x86(CpuInfo& info) {
  uint32_t a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  const uint32_t max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  info.vendor = vendor;

  uint64_t f = 0;
  __get_cpuid(1, &a, &b, &c, &d);
  const uint32_t base_family = (a >> 8) & 0xfu;
  info.family = static_cast<int32_t>(base_family == 0xfu ? base_family + ((a >> 20) & 0xffu) : base_family);
  const uint32_t base_model = (a >> 4) & 0xfu;
  info.model = static_cast<int32_t>(
      base_family == 0x6u || base_family == 0xfu ? (((a >> 16) & 0xfu) << 4) + base_model : base_model);
  const bool osxsave = (c >> 27) & 1u;
  if ((c >> 20) & 1u) f |= Q4_CPU_SSE42;
  if ((c >> 28) & 1u) f |= Q4_CPU_AVX;
  if ((c >> 12) & 1u) f |= Q4_CPU_FMA;
  if ((c >> 29) & 1u) f |= Q4_CPU_F16C;
  // The OS must save YMM (XCR0 bits 1,2) and ZMM/opmask (bits 5,6,7) state.
  if (osxsave) {
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6u) == 0x6u) f |= Q4_CPU_OS_AVX;
    if ((xcr0 & 0xe6u) == 0xe6u) f |= Q4_CPU_OS_AVX512;
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    if ((b >> 5) & 1u) f |= Q4_CPU_AVX2;
    if ((b >> 16) & 1u) f |= Q4_CPU_AVX512F;
    if ((b >> 17) & 1u) f |= Q4_CPU_AVX512DQ;
    if ((b >> 30) & 1u) f |= Q4_CPU_AVX512BW;
    if ((b >> 31) & 1u) f |= Q4_CPU_AVX512VL;
    if ((c >> 1) & 1u) f |= Q4_CPU_AVX512VBMI;
    if ((c >> 11) & 1u) f |= Q4_CPU_AVX512VNNI;
    uint32_t a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    if ((a1 >> 5) & 1u) f |= Q4_CPU_AVX512BF16;
    if ((a1 >> 4) & 1u) f |= Q4_CPU_AVXVNNI;
  }
  info.features = f;

  __get_cpuid(0x80000000u, &a, &b, &c, &d);
  if (a >= 0x80000004u) {
    char brand[49] = {};
    for (uint32_t leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002u + leaf, &a, &b, &c, &d);
      char* const dst = brand + size_t{16} * leaf;
      std::memcpy(dst + 0, &a, 4);
      std::memcpy(dst + 4, &b, 4);
      std::memcpy(dst + 8, &c, 4);
      std::memcpy(dst + 12, &d, 4);
    }
    const char* p = brand;
    while (*p == ' ') ++p;
    info.brand = p;
  }
  if (info.vendor == "GenuineIntel" && max_leaf >= 4) {
    detect_x86_caches(4, info);
  } else if (info.vendor == "AuthenticAMD") {
    __get_cpuid(0x80000000u, &a, &b, &c, &d);
    const uint32_t max_ext = a;
    __get_cpuid(0x80000001u, &a, &b, &c, &d);
    if (max_ext >= 0x8000001du && ((c >> 22) & 1u))
      detect_x86_caches(0x8000001du, info);  // TopologyExtensions
  }
}
#endif

#if defined(Q4_AARCH64)
void detect_aarch64(CpuInfo& info) {
  info.vendor = "arm";
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  uint64_t f = Q4_CPU_NEON;                   // Advanced SIMD is mandatory on aarch64
  if (hw & (1UL << 20)) f |= Q4_CPU_DOTPROD;  // HWCAP_ASIMDDP
  if (hw & (1UL << 22)) f |= Q4_CPU_SVE;      // HWCAP_SVE
  if (hw2 & (1UL << 13)) f |= Q4_CPU_I8MM;    // HWCAP2_I8MM
  if (hw2 & (1UL << 14)) f |= Q4_CPU_BF16;    // HWCAP2_BF16
  info.features = f;
}
#endif

CpuInfo detect() {
  CpuInfo info;
#if defined(Q4_X86)
  detect_x86(info);
#elif defined(Q4_AARCH64)
  detect_aarch64(info);
#else
  info.vendor = "unknown";
#endif
  const unsigned hc = std::thread::hardware_concurrency();
  info.num_cpus = hc > 0 ? static_cast<int32_t>(hc) : 1;
  return info;
}

constexpr uint64_t kAvx2Bits = Q4_CPU_AVX | Q4_CPU_AVX2 | Q4_CPU_FMA | Q4_CPU_F16C | Q4_CPU_OS_AVX;
constexpr uint64_t kAvx512Bits =
    kAvx2Bits | Q4_CPU_AVX512F | Q4_CPU_AVX512BW | Q4_CPU_AVX512VL | Q4_CPU_AVX512DQ | Q4_CPU_OS_AVX512;
constexpr uint64_t kAvx512VnniBits = kAvx512Bits | Q4_CPU_AVX512VNNI;

int32_t initial_cap() {
  const char* env = std::getenv("Q4_FORCE_ISA");
  if (env == nullptr || *env == '\0') return Q4_ISA_BEST;
  const int32_t isa = parse_isa_name(env);
  return isa < 0 ? Q4_ISA_BEST : isa;  // an unknown value is ignored (logged)
}

std::atomic<int32_t>& cap_ref() {
  static std::atomic<int32_t> cap{initial_cap()};
  return cap;
}

}  // namespace

const int32_t kIsaPreference[8] = {Q4_ISA_AVX512_VNNI, Q4_ISA_AVX512,       Q4_ISA_AVX_VNNI, Q4_ISA_AVX2,
                                   Q4_ISA_NEON_I8MM,   Q4_ISA_NEON_DOTPROD, Q4_ISA_NEON,     Q4_ISA_SCALAR};

int32_t isa_rank(int32_t isa) {
  switch (isa) {
    case Q4_ISA_SCALAR:
      return 0;
    case Q4_ISA_AVX2:
    case Q4_ISA_NEON:
      return 1;
    case Q4_ISA_AVX_VNNI:
    case Q4_ISA_NEON_DOTPROD:
      return 2;
    case Q4_ISA_AVX512:
    case Q4_ISA_NEON_I8MM:
      return 3;
    case Q4_ISA_AVX512_VNNI:
      return 4;
    default:
      return 1000;  // Q4_ISA_BEST
  }
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

namespace {
#if defined(Q4_X86)
constexpr uint32_t kMxcsrStatus = 0x3fu;     // exception flags (sticky status, kept as they are)
constexpr uint32_t kMxcsrDefault = 0x1f80u;  // all exceptions masked, nearest, no FTZ/DAZ
uint64_t read_fp_controls() {
  uint32_t csr = 0;
  __asm__ volatile("stmxcsr %0" : "=m"(csr));
  return csr;
}
void write_fp_controls(uint64_t v) {
  const auto csr = static_cast<uint32_t>(v);
  __asm__ volatile("ldmxcsr %0" : : "m"(csr));
}
bool fp_controls_default(uint64_t v) {
  return (static_cast<uint32_t>(v) & ~kMxcsrStatus) == kMxcsrDefault;
}
uint64_t fp_controls_defaulted(uint64_t v) {
  return (static_cast<uint32_t>(v) & kMxcsrStatus) | kMxcsrDefault;
}
#elif defined(Q4_AARCH64)
uint64_t read_fp_controls() {
  uint64_t fpcr = 0;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
void write_fp_controls(uint64_t v) {
  __asm__ volatile("msr fpcr, %0" : : "r"(v));
}
bool fp_controls_default(uint64_t v) {
  return v == 0;  // round to nearest, no flush to zero, no default NaN, no traps
}
uint64_t fp_controls_defaulted(uint64_t) {
  return 0;
}
#endif
#if defined(Q4_X86) || defined(Q4_AARCH64)
// Sets the defaults when the controls v differ from them; true when it did.
bool apply_fp_defaults(uint64_t v) {
  if (fp_controls_default(v)) return false;
  write_fp_controls(fp_controls_defaulted(v));
  return true;
}
#endif
}  // namespace

FpDefaults::FpDefaults() noexcept {
#if defined(Q4_X86) || defined(Q4_AARCH64)
  saved_ = read_fp_controls();
  changed_ = apply_fp_defaults(saved_);
#endif
}

FpDefaults::~FpDefaults() noexcept {
#if defined(Q4_X86) || defined(Q4_AARCH64)
  if (changed_) write_fp_controls(saved_);
#endif
}

void set_default_fp_controls() noexcept {
#if defined(Q4_X86) || defined(Q4_AARCH64)
  apply_fp_defaults(read_fp_controls());
#endif
}

void clean_vector_state() noexcept {
#if defined(Q4_X86)
  static const bool avx =
      (cpu_info().features & (Q4_CPU_AVX | Q4_CPU_OS_AVX)) == (Q4_CPU_AVX | Q4_CPU_OS_AVX);
  if (avx) __asm__ volatile("vzeroupper");
#endif
}

bool cpu_has_isa(const CpuInfo& info, int32_t isa) {
  switch (isa) {
    case Q4_ISA_SCALAR:
      return true;
    case Q4_ISA_AVX2:
      return (info.features & kAvx2Bits) == kAvx2Bits;
    case Q4_ISA_AVX_VNNI:
      return (info.features & (kAvx2Bits | Q4_CPU_AVXVNNI)) == (kAvx2Bits | Q4_CPU_AVXVNNI);
    case Q4_ISA_AVX512:
      return (info.features & kAvx512Bits) == kAvx512Bits;
    case Q4_ISA_AVX512_VNNI:
      return (info.features & kAvx512VnniBits) == kAvx512VnniBits;
    case Q4_ISA_NEON:
      return (info.features & Q4_CPU_NEON) != 0;
    case Q4_ISA_NEON_DOTPROD:
      return (info.features & (Q4_CPU_NEON | Q4_CPU_DOTPROD)) == (Q4_CPU_NEON | Q4_CPU_DOTPROD);
    case Q4_ISA_NEON_I8MM:
      return (info.features & (Q4_CPU_NEON | Q4_CPU_DOTPROD | Q4_CPU_I8MM)) ==
             (Q4_CPU_NEON | Q4_CPU_DOTPROD | Q4_CPU_I8MM);
    default:
      return false;
  }
}

int32_t isa_supported_by_cpu(const CpuInfo& info) {
  for (int32_t isa : kIsaPreference) {
    if (cpu_has_isa(info, isa)) return isa;
  }
  return Q4_ISA_SCALAR;
}

int32_t isa_cap() {
  return cap_ref().load(std::memory_order_acquire);
}

void set_max_isa(int32_t isa) {
  if (isa != Q4_ISA_BEST && isa_name(isa) == nullptr) {
    fail(Q4_ERR_INVALID_ARGUMENT, "isa", "unknown ISA value " + std::to_string(isa));
  }
  if (isa != Q4_ISA_BEST && !cpu_has_isa(cpu_info(), isa)) {
    fail(Q4_ERR_UNSUPPORTED, "isa", std::string("this CPU cannot run ") + isa_name(isa));
  }
  cap_ref().store(isa, std::memory_order_release);
}

const char* isa_name(int32_t isa) {
  switch (isa) {
    case Q4_ISA_SCALAR:
      return "scalar";
    case Q4_ISA_AVX2:
      return "avx2";
    case Q4_ISA_AVX_VNNI:
      return "avx_vnni";
    case Q4_ISA_AVX512:
      return "avx512";
    case Q4_ISA_AVX512_VNNI:
      return "avx512_vnni";
    case Q4_ISA_NEON:
      return "neon";
    case Q4_ISA_NEON_DOTPROD:
      return "neon_dotprod";
    case Q4_ISA_NEON_I8MM:
      return "neon_i8mm";
    case Q4_ISA_BEST:
      return "best";
    default:
      return nullptr;
  }
}

int32_t parse_isa_name(const char* text) {
  if (text == nullptr) return -1;
  for (int32_t isa : {Q4_ISA_SCALAR, Q4_ISA_AVX2, Q4_ISA_AVX_VNNI, Q4_ISA_AVX512, Q4_ISA_AVX512_VNNI,
                      Q4_ISA_NEON, Q4_ISA_NEON_DOTPROD, Q4_ISA_NEON_I8MM, Q4_ISA_BEST}) {
    if (std::strcmp(text, isa_name(isa)) == 0) return isa;
  }
  return -1;
}

}  // namespace q4
