// Test helpers: owning DLTensors and small random generators.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "formats/codec.h"
#include "nvfp4/nvfp4.h"

// Q4_TEST_ASAN / Q4_TEST_TSAN: built with AddressSanitizer /
// ThreadSanitizer (GCC's __SANITIZE_* macros, clang's __has_feature).
#if defined(__SANITIZE_THREAD__)
#define Q4_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define Q4_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define Q4_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define Q4_TEST_ASAN 1
#endif
#endif

namespace t {

// The NF4 codebook exactly as docs/formats.md lists it (decimals), for oracles
// that must not depend on the library's own table.
constexpr double kNf4Spec[16] = {-1.0,
                                 -0.6961928009986877,
                                 -0.5250730514526367,
                                 -0.39491748809814453,
                                 -0.28444138169288635,
                                 -0.18477343022823334,
                                 -0.09105003625154495,
                                 0.0,
                                 0.07958029955625534,
                                 0.16093020141124725,
                                 0.24611230194568634,
                                 0.33791524171829224,
                                 0.44070982933044434,
                                 0.5626170039176941,
                                 0.7229568362236023,
                                 1.0};

// bitsandbytes' NF4 decision thresholds as it writes them (fp32 literals of
// the double-precision midpoints of the codebook). A value equal to one goes
// to the lower code. They differ from the exact midpoints of the fp32
// codebook by one ulp in 5 of 15 places; compatibility means these.
constexpr float kBnbNf4Thresholds[15] = {-0.8480964004993439f,   -0.6106329262256622f,  -0.4599952697753906f,
                                         -0.33967943489551544f,  -0.23460740596055984f, -0.13791173323988914f,
                                         -0.045525018125772476f, 0.03979014977812767f,  0.1202552504837513f,
                                         0.2035212516784668f,    0.2920137718319893f,   0.3893125355243683f,
                                         0.5016634166240692f,    0.6427869200706482f,   0.8614784181118011f};

inline DLDataType f32() {
  return DLDataType{kDLFloat, 32, 1};
}
inline DLDataType f16() {
  return DLDataType{kDLFloat, 16, 1};
}
inline DLDataType bf16() {
  return DLDataType{kDLBfloat, 16, 1};
}
inline DLDataType u8() {
  return DLDataType{kDLUInt, 8, 1};
}
inline DLDataType e4m3() {
  return DLDataType{kDLFloat8_e4m3fn, 8, 1};
}

inline size_t elem_size(DLDataType dt) {
  return dt.bits == 4 ? 1 : (dt.bits * dt.lanes + 7) / 8;
}

// An owning tensor: storage (64-byte aligned, with a guard zone after it),
// shape, and the DLTensor describing it.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::shared_ptr<uint8_t> buf;
  size_t bytes = 0;
  DLTensor dl{};

  Tensor() = default;
  Tensor(std::initializer_list<int64_t> s, DLDataType dt) : Tensor(std::vector<int64_t>(s), dt) {}
  Tensor(std::vector<int64_t> s, DLDataType dt) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes = dt.bits == 4 ? static_cast<size_t>(dt.lanes == 1 ? n / 2 : n)
                         : static_cast<size_t>(n) * elem_size(dt);
    const size_t alloc = bytes + 128;
    buf = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(::operator new(alloc, std::align_val_t(64))),
                                   [](uint8_t* p) { ::operator delete(p, std::align_val_t(64)); });
    std::memset(buf.get(), 0xA5, alloc);  // guard pattern
    dl.data = buf.get();
    dl.device = DLDevice{kDLCPU, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.dtype = dt;
    dl.shape = shape.data();
    dl.strides = nullptr;
    dl.byte_offset = 0;
  }
  Tensor(const Tensor& o) : shape(o.shape), strides(o.strides), buf(o.buf), bytes(o.bytes), dl(o.dl) {
    dl.shape = shape.data();
    if (!strides.empty()) dl.strides = strides.data();
  }
  Tensor& operator=(const Tensor& o) {
    if (this != &o) {
      shape = o.shape;
      strides = o.strides;
      buf = o.buf;
      bytes = o.bytes;
      dl = o.dl;
      dl.shape = shape.data();
      if (!strides.empty()) dl.strides = strides.data();
    }
    return *this;
  }

  DLTensor* t() { return &dl; }
  uint8_t* data() { return buf.get(); }
  const uint8_t* data() const { return buf.get(); }
  float* f() { return reinterpret_cast<float*>(buf.get()); }
  const float* f() const { return reinterpret_cast<const float*>(buf.get()); }
  uint16_t* h() { return reinterpret_cast<uint16_t*>(buf.get()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::vector<uint8_t> snapshot() const { return std::vector<uint8_t>(buf.get(), buf.get() + bytes + 128); }
  bool guard_intact() const {
    for (size_t i = bytes; i < bytes + 128; ++i) {
      if (buf.get()[i] != 0xA5) return false;
    }
    return true;
  }
  void fill(uint8_t v) { std::memset(buf.get(), v, bytes); }
  void set_strides(std::vector<int64_t> s) {
    strides = std::move(s);
    dl.strides = strides.data();
  }

  // Value i of a float tensor as fp32.
  float get(int64_t i) const {
    if (dl.dtype.code == kDLFloat && dl.dtype.bits == 32) {
      float v;
      std::memcpy(&v, buf.get() + 4 * i, 4);
      return v;
    }
    uint16_t u;
    std::memcpy(&u, buf.get() + 2 * i, 2);
    return dl.dtype.code == kDLBfloat ? q4::fmt::bf16_to_f32(u) : q4::fmt::f16_to_f32(u);
  }
  void set(int64_t i, float v) {
    if (dl.dtype.code == kDLFloat && dl.dtype.bits == 32) {
      std::memcpy(buf.get() + 4 * i, &v, 4);
      return;
    }
    const uint16_t u = dl.dtype.code == kDLBfloat ? q4::fmt::f32_to_bf16(v) : q4::fmt::f32_to_f16(v);
    std::memcpy(buf.get() + 2 * i, &u, 2);
  }
};

inline Tensor random_float(std::vector<int64_t> shape, DLDataType dt, uint32_t seed, float scale = 1.0f) {
  Tensor x(std::move(shape), dt);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, nd(rng));
  return x;
}

inline int64_t swizzled_bytes(int64_t rows, int64_t k) {
  int64_t b = 0;
  NVFP4_swizzled_scale_size(rows, k, &b);
  return b;
}

// The session configuration of the CPU tests: target CPU, so that each test
// means the same on a machine with a GPU, where Q4_TARGET_AUTO would put the
// session on CUDA (tests/test_gpu.cpp and tests/python/test_cuda_torch.py
// check CUDA sessions).
inline Q4_session_config cpu_session_config() {
  Q4_session_config c{};
  Q4_session_config_init(&c);
  c.target = Q4_TARGET_CPU;
  return c;
}
inline const Q4_session_config* cpu_session() {
  static const Q4_session_config c = cpu_session_config();
  return &c;
}

// A linear's bundle from a float weight [N, K] (quantized at create), with
// an optional bias [N].
// A packed NVFP4 or MXFP4 bundle of q [N, K/2] and scales s in `layout`
// (g: NVFP4's global scale).
inline Q4_weight_bundle packed_bundle(int32_t format, Tensor& q, Tensor& s, int32_t layout, float g,
                                      int64_t n, int64_t k) {
  Q4_weight_bundle b{};
  Q4_weight_bundle_init(&b);
  b.format = format;
  b.source = Q4_WEIGHT_PACKED;
  b.weight = q.t();
  b.scale = s.t();
  b.scale_layout = layout;
  b.global_scale = g;
  b.out_features = n;
  b.in_features = k;
  return b;
}

// NF4 statistics of plain fp32 absmax (borrowed).
inline NF4_state nf4_state_of(Tensor& absmax, int32_t blocksize) {
  NF4_state st{};
  st.struct_size = sizeof st;
  st.blocksize = blocksize;
  st.absmax = absmax.t();
  return st;
}

// A packed NF4 bundle of codes q and statistics st (borrowed).
inline Q4_weight_bundle packed_nf4_bundle(Tensor& q, const NF4_state* st, int64_t n, int64_t k) {
  Q4_weight_bundle b{};
  Q4_weight_bundle_init(&b);
  b.format = Q4_FORMAT_NF4;
  b.source = Q4_WEIGHT_PACKED;
  b.weight = q.t();
  b.nf4 = st;
  b.out_features = n;
  b.in_features = k;
  return b;
}

inline Q4_weight_bundle float_bundle(Tensor& w, int32_t format, Tensor* bias = nullptr) {
  Q4_weight_bundle b{};
  Q4_weight_bundle_init(&b);
  b.format = format;
  b.source = Q4_WEIGHT_FLOAT;
  b.weight = w.t();
  b.bias = bias != nullptr ? bias->t() : nullptr;
  return b;
}

// The CPU kernel levels this build and this CPU run, each once (capping at
// a level that is not compiled in resolves to a lower one).
inline std::vector<int32_t> runnable_isas() {
  std::vector<int32_t> out;
  for (int32_t isa : {Q4_ISA_SCALAR, Q4_ISA_AVX2, Q4_ISA_AVX_VNNI, Q4_ISA_AVX512, Q4_ISA_AVX512_VNNI,
                      Q4_ISA_NEON, Q4_ISA_NEON_DOTPROD, Q4_ISA_NEON_I8MM}) {
    if (Q4_set_max_isa(isa) != Q4_OK) continue;
    Q4_capabilities c{};
    c.struct_size = sizeof c;
    Q4_get_capabilities(&c);
    if (c.isa_active == isa) out.push_back(isa);
  }
  Q4_set_max_isa(Q4_ISA_BEST);
  return out;
}

// Caps the ISA for a scope (Q4_ISA_BEST again after it).
struct IsaCap {
  explicit IsaCap(int32_t isa) { REQUIRE(Q4_set_max_isa(isa) == Q4_OK); }
  ~IsaCap() { Q4_set_max_isa(Q4_ISA_BEST); }
  IsaCap(const IsaCap&) = delete;
  IsaCap& operator=(const IsaCap&) = delete;
};

}  // namespace t
