// The extensible-struct convention in both directions, the unversioned
// export of library-owned tensors and the size query of the diagnostics:
// contracts that host-language bindings rely on.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "nvfp4/nvfp4.h"
#include "test_util.h"

namespace {

// A caller struct of `size` bytes inside a buffer whose remaining bytes are
// a canary.
template <class T>
struct Canary {
  std::vector<unsigned char> bytes;
  explicit Canary(uint32_t size) : bytes(sizeof(T) + 64, 0xCD) {
    std::memset(bytes.data(), 0, size);
    std::memcpy(bytes.data(), &size, sizeof size);
  }
  T* p() { return reinterpret_cast<T*>(bytes.data()); }
  bool intact_from(size_t from) const {
    for (size_t i = from; i < bytes.size(); ++i)
      if (bytes[i] != 0xCD) return false;
    return true;
  }
};

Q4_session* cpu_session() {
  Q4_session_config c{};
  c.struct_size = sizeof c;
  c.target = Q4_TARGET_CPU;
  Q4_session* s = nullptr;
  REQUIRE(Q4_session_create(&c, &s) == Q4_OK);
  return s;
}

}  // namespace

TEST_CASE("init functions write only the caller's struct_size bytes", "[abi][struct_size]") {
  {
    Canary<Q4_op_options> c(40);
    REQUIRE(Q4_op_options_init(c.p()) == Q4_OK);
    CHECK(c.p()->struct_size == 40);
    CHECK(c.intact_from(40));
  }
  {
    Canary<Q4_session_config> c(24);
    REQUIRE(Q4_session_config_init(c.p()) == Q4_OK);
    CHECK(c.p()->struct_size == 24);
    CHECK(c.intact_from(24));
  }
  {
    Canary<Q4_weight_bundle> c(32);
    REQUIRE(Q4_weight_bundle_init(c.p()) == Q4_OK);
    CHECK(c.p()->struct_size == 32);
    CHECK(c.p()->format == Q4_FORMAT_NVFP4);
    CHECK(c.intact_from(32));
  }
  // A caller struct larger than the library's: only the known bytes are
  // written, the caller's newer fields are left alone.
  {
    Canary<Q4_op_options> c(sizeof(Q4_op_options) + 16);
    REQUIRE(Q4_op_options_init(c.p()) == Q4_OK);
    CHECK(c.p()->struct_size == sizeof(Q4_op_options) + 16);
    CHECK(c.intact_from(sizeof(Q4_op_options) + 16));
  }
  // struct_size 0 (a zero-initialized struct): the ABI 1 size.
  {
    Q4_op_options o;
    std::memset(&o, 0xEE, sizeof o);
    o.struct_size = 0;
    REQUIRE(Q4_op_options_init(&o) == Q4_OK);
    CHECK(o.struct_size == sizeof(Q4_op_options));
    CHECK(o.compute_path == Q4_PATH_AUTO);
    CHECK(o.reserved[5] == 0);
  }
  // A value that is not a size (an uninitialized field): the ABI 1 size.
  for (uint32_t junk : {4u, 0xDEADBEEFu}) {
    Canary<Q4_op_options> c(sizeof(Q4_op_options));
    c.p()->struct_size = junk;
    REQUIRE(Q4_op_options_init(c.p()) == Q4_OK);
    CHECK(c.p()->struct_size == sizeof(Q4_op_options));
    CHECK(c.intact_from(sizeof(Q4_op_options)));
  }
}

TEST_CASE("input structs: smaller means defaults, larger must be zero beyond", "[abi][struct_size]") {
  t::Tensor x = t::random_float({4, 32}, t::f32(), 1);
  t::Tensor q({4, 16}, t::u8()), s({4, 2}, t::u8());
  {
    // Only struct_size + compute_path: everything else defaults.
    Canary<Q4_op_options> c(8);
    c.p()->compute_path = Q4_PATH_AUTO;
    CHECK(NVFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, c.p()) == Q4_OK);
  }
  {
    std::vector<unsigned char> big(sizeof(Q4_op_options) + 16, 0);
    auto* o = reinterpret_cast<Q4_op_options*>(big.data());
    o->struct_size = static_cast<uint32_t>(big.size());
    CHECK(NVFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, o) == Q4_OK);
    big[sizeof(Q4_op_options) + 3] = 1;  // a field this library does not know
    CHECK(NVFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, o) == Q4_ERR_UNSUPPORTED);
    CHECK(std::string(Q4_last_error()).find("opts->struct_size") != std::string::npos);
  }
  {
    // A session config that stops after `target`.
    Canary<Q4_session_config> c(static_cast<uint32_t>(offsetof(Q4_session_config, target) + 4));
    c.p()->target = Q4_TARGET_CPU;
    Q4_session* sess = nullptr;
    REQUIRE(Q4_session_create(c.p(), &sess) == Q4_OK);
    CHECK(Q4_session_destroy(sess) == Q4_OK);
  }
}

TEST_CASE("input structs: a smaller struct_size must end where a field ends", "[abi][struct_size]") {
  // (fuzz_api: an NF4_state of 12 bytes kept half of its absmax pointer,
  // and the library read through the rest as zeros.)
  auto refused = [](const char* name) {
    const std::string e = Q4_last_error();
    return e.find(std::string(name) + "->struct_size") != std::string::npos &&
           e.find("ends inside a field") != std::string::npos;
  };
  t::Tensor w = t::random_float({4, 64}, t::f32(), 5);
  t::Tensor q({4, 32}, t::u8());
  t::Tensor am({4}, t::f32());
  REQUIRE(NF4_quantize(w.t(), q.t(), am.t(), 64, nullptr) == Q4_OK);
  t::Tensor out({4, 64}, t::f32());
  {
    NF4_state st{};
    st.struct_size = sizeof st;
    st.blocksize = 64;
    st.absmax = am.t();
    REQUIRE(NF4_dequantize(q.t(), &st, out.t(), nullptr) == Q4_OK);
    // Up to and including absmax: the rest defaults.
    st.struct_size = static_cast<uint32_t>(offsetof(NF4_state, absmax) + sizeof(void*));
    CHECK(NF4_dequantize(q.t(), &st, out.t(), nullptr) == Q4_OK);
    for (uint32_t cut : {9u, 12u, 15u, 20u, 44u + 2u}) {
      st.struct_size = cut;
      CHECK(NF4_dequantize(q.t(), &st, out.t(), nullptr) == Q4_ERR_INVALID_ARGUMENT);
      CHECK(refused("state"));
    }
  }
  t::Tensor x = t::random_float({4, 32}, t::f32(), 1);
  t::Tensor nq({4, 16}, t::u8()), ns({4, 2}, t::u8());
  {
    // Options cut inside `stream`, inside `num_threads`; then at `stream`'s end.
    for (uint32_t cut : {36u, 26u}) {
      Canary<Q4_op_options> c(cut);
      CHECK(NVFP4_quantize(x.t(), nq.t(), ns.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, c.p()) ==
            Q4_ERR_INVALID_ARGUMENT);
      CHECK(refused("opts"));
    }
    Canary<Q4_op_options> c(static_cast<uint32_t>(offsetof(Q4_op_options, stream) + sizeof(void*)));
    CHECK(NVFP4_quantize(x.t(), nq.t(), ns.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, c.p()) == Q4_OK);
  }
  {
    Canary<Q4_session_config> c(14);  // inside `target`
    Q4_session* sess = nullptr;
    CHECK(Q4_session_create(c.p(), &sess) == Q4_ERR_INVALID_ARGUMENT);
    CHECK(sess == nullptr);
    CHECK(refused("config"));
  }
  Q4_session* s = cpu_session();
  t::Tensor wf = t::random_float({16, 32}, t::f32(), 3);
  for (uint32_t cut : {20u, 60u}) {  // inside `weight`, inside `nf4`
    Canary<Q4_weight_bundle> c(cut);
    c.p()->format = Q4_FORMAT_NVFP4;
    c.p()->source = Q4_WEIGHT_FLOAT;
    if (cut > offsetof(Q4_weight_bundle, weight) + sizeof(void*)) c.p()->weight = wf.t();
    Q4_linear* l = nullptr;
    CHECK(Q4_linear_create(s, c.p(), &l) == Q4_ERR_INVALID_ARGUMENT);
    CHECK(l == nullptr);
    CHECK(refused("weight"));
  }
  {
    // Up to and including `weight`: a float NVFP4 weight.
    Canary<Q4_weight_bundle> c(static_cast<uint32_t>(offsetof(Q4_weight_bundle, weight) + sizeof(void*)));
    c.p()->format = Q4_FORMAT_NVFP4;
    c.p()->source = Q4_WEIGHT_FLOAT;
    c.p()->weight = wf.t();
    Q4_linear* l = nullptr;
    CHECK(Q4_linear_create(s, c.p(), &l) == Q4_OK);
    CHECK(Q4_linear_destroy(l) == Q4_OK);
  }
  CHECK(Q4_session_destroy(s) == Q4_OK);
}

TEST_CASE("output structs of any size are filled up to that size", "[abi][struct_size]") {
  {
    Canary<Q4_capabilities> c(64);
    REQUIRE(Q4_get_capabilities(c.p()) == Q4_OK);
    CHECK(c.p()->struct_size == 64);
    CHECK(c.p()->abi_version == Q4_abi_version());
    CHECK(c.intact_from(64));
  }
  {
    Canary<Q4_capabilities> c(sizeof(Q4_capabilities));
    REQUIRE(Q4_get_capabilities(c.p()) == Q4_OK);
    CHECK(c.intact_from(sizeof(Q4_capabilities)));
  }
  Q4_session* s = cpu_session();
  {
    Canary<Q4_session_stats> c(16);
    REQUIRE(Q4_session_get_stats(s, c.p()) == Q4_OK);
    CHECK(c.p()->struct_size == 16);
    CHECK(c.intact_from(16));
  }
  t::Tensor w = t::random_float({16, 32}, t::f32(), 3);
  Q4_weight_bundle b{};
  b.struct_size = sizeof b;
  b.format = Q4_FORMAT_NVFP4;
  b.source = Q4_WEIGHT_FLOAT;
  b.weight = w.t();
  Q4_linear* l = nullptr;
  REQUIRE(Q4_linear_create(s, &b, &l) == Q4_OK);
  {
    Canary<Q4_linear_info> c(12);
    REQUIRE(Q4_linear_info_get(l, c.p()) == Q4_OK);
    CHECK(c.p()->format == Q4_FORMAT_NVFP4);
    CHECK(c.intact_from(12));
  }
  CHECK(Q4_linear_destroy(l) == Q4_OK);
  CHECK(Q4_session_destroy(s) == Q4_OK);
}

TEST_CASE("Q4_detect_linears steps through the caller's array by its struct_size", "[abi][struct_size]") {
  const char* names[] = {"a.weight", "a.weight_scale", "a.weight_scale_2",
                         "b.weight", "b.weight_scale", "b.weight_scale_2"};
  std::vector<Q4_tensor_desc> d(6);
  for (size_t i = 0; i < 6; ++i) {
    d[i].name = names[i];
    d[i].dtype = Q4_DTYPE_UNKNOWN;
  }
  // An older caller whose entries are 24 bytes: struct_size, format, family,
  // prefix_len, prefix_tensor and the first role.
  constexpr uint32_t kOld = 24;
  std::vector<unsigned char> buf(2 * kOld + 32, 0xCD);
  for (int i = 0; i < 2; ++i) {
    std::memset(buf.data() + i * kOld, 0, kOld);
    std::memcpy(buf.data() + i * kOld, &kOld, 4);
  }
  size_t found = 0;
  REQUIRE(Q4_detect_linears(d.data(), d.size(), reinterpret_cast<Q4_linear_schema*>(buf.data()), 2, &found) ==
          Q4_OK);
  CHECK(found == 2);
  int32_t fmt0 = 0, fmt1 = 0;
  std::memcpy(&fmt0, buf.data() + 4, 4);
  std::memcpy(&fmt1, buf.data() + kOld + 4, 4);
  CHECK(fmt0 == Q4_FORMAT_NVFP4);
  CHECK(fmt1 == Q4_FORMAT_NVFP4);
  for (size_t i = 2 * kOld; i < buf.size(); ++i) REQUIRE(buf[i] == 0xCD);
}

TEST_CASE("snapshots can be handed out as unversioned DLManagedTensor", "[abi][dlpack]") {
  Q4_session* s = cpu_session();
  const int64_t shape[2] = {3, 5};
  Q4_mutable* m = nullptr;
  REQUIRE(Q4_mutable_create(s, 2, shape, DLDataType{kDLFloat, 32, 1}, &m) == Q4_OK);
  DLTensor view{};
  REQUIRE(Q4_mutable_begin_write(m, Q4_WRITE_DISCARD, &view) == Q4_OK);
  for (int i = 0; i < 15; ++i) static_cast<float*>(view.data)[i] = static_cast<float>(i);
  uint64_t v = 0;
  REQUIRE(Q4_mutable_commit(m, &v) == Q4_OK);
  DLManagedTensorVersioned* snap = nullptr;
  REQUIRE(Q4_mutable_acquire(m, &snap, &v) == Q4_OK);
  CHECK((snap->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);
  DLManagedTensor* legacy = nullptr;
  REQUIRE(Q4_dlpack_to_unversioned(snap, &legacy) == Q4_OK);
  CHECK(legacy->dl_tensor.data == snap->dl_tensor.data);
  CHECK(legacy->dl_tensor.ndim == 2);
  CHECK(legacy->dl_tensor.shape[1] == 5);
  CHECK(static_cast<const float*>(legacy->dl_tensor.data)[7] == 7.0f);
  Q4_session_stats st{};
  st.struct_size = sizeof st;
  REQUIRE(Q4_session_get_stats(s, &st) == Q4_OK);
  CHECK(st.live_snapshots == 1);
  legacy->deleter(legacy);  // releases the snapshot too
  REQUIRE(Q4_session_get_stats(s, &st) == Q4_OK);
  CHECK(st.live_snapshots == 0);

  CHECK(Q4_dlpack_to_unversioned(nullptr, &legacy) == Q4_ERR_NULL_POINTER);
  DLManagedTensorVersioned fake{};
  fake.version.major = 2;
  CHECK(Q4_dlpack_to_unversioned(&fake, &legacy) == Q4_ERR_UNSUPPORTED);
  CHECK(Q4_mutable_destroy(m) == Q4_OK);
  CHECK(Q4_session_destroy(s) == Q4_OK);
}

TEST_CASE("a diagnostics size query leaves the last error alone", "[abi][diagnostics]") {
  Q4_session* s = cpu_session();
  CHECK(NVFP4_quantize(nullptr, nullptr, nullptr, 0, 0.0f, nullptr, nullptr) == Q4_ERR_NULL_POINTER);
  const std::string before = Q4_last_error();
  size_t needed = 0;
  CHECK(Q4_session_diagnostics(s, nullptr, 0, &needed) == Q4_ERR_BUFFER_TOO_SMALL);
  CHECK(needed > 2);
  CHECK(std::string(Q4_last_error()) == before);
  std::vector<char> buf(needed);
  CHECK(Q4_session_diagnostics(s, buf.data(), buf.size(), &needed) == Q4_OK);
  char tiny[2];
  CHECK(Q4_session_diagnostics(s, tiny, sizeof tiny, &needed) == Q4_ERR_BUFFER_TOO_SMALL);
  CHECK(std::string(Q4_last_error()).find("Q4_session_diagnostics") != std::string::npos);
  CHECK(Q4_session_destroy(s) == Q4_OK);
}

#if defined(__x86_64__)
#include <cpuid.h>

namespace {

// XINUSE (XGETBV with ECX = 1): bit 2, the upper halves of YMM0-15; bit 6,
// the upper halves of ZMM0-15. Set when a function returns with them dirty,
// which makes the caller's SSE code pay (30-50x on an Emerald Rapids-class
// Xeon). -1: the CPU cannot tell (no XGETBV with ECX = 1).
int64_t dirty_upper_state() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || ((c >> 27) & 1u) == 0) return -1;  // no OSXSAVE
  if (__get_cpuid_count(0xd, 1, &a, &b, &c, &d) == 0 || ((a >> 2) & 1u) == 0) return -1;
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return lo & 0x44u;
}

}  // namespace

TEST_CASE("every product returns with the x86 vector registers' upper halves clean", "[abi][isa]") {
  if (dirty_upper_state() < 0) {
    WARN("SKIPPED: this CPU does not report XINUSE (XGETBV with ECX = 1)");
    return;
  }
  const int64_t n = 64, k = 256;
  t::Tensor w = t::random_float({n, k}, t::f32(), 71, 0.1f);
  t::Tensor flat = t::random_float({n * k}, t::f32(), 72, 0.1f);
  for (int32_t isa : t::runnable_isas()) {
    t::IsaCap cap(isa);
    INFO("ISA " << Q4_isa_name(isa));
    t::Tensor q({n, k / 2}, t::u8()), s({n, k / 16}, t::u8()), ms({n, k / 32}, t::u8());
    t::Tensor nq({n * k / 2}, t::u8()), na({n * k / 64}, t::f32()), back({n, k}, t::f32());
    float g = 0;
    auto clean_after = [](const char* what, int32_t status) {
      INFO(what);
      REQUIRE(status == Q4_OK);
      CHECK(dirty_upper_state() == 0);
    };
    clean_after("NVFP4_quantize", NVFP4_quantize(w.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr));
    clean_after("NVFP4_dequantize", NVFP4_dequantize(q.t(), s.t(), Q4_SCALE_LINEAR, g, back.t(), nullptr));
    clean_after("NF4_quantize", NF4_quantize(flat.t(), nq.t(), na.t(), 64, nullptr));
    clean_after("MXFP4_quantize", MXFP4_quantize(w.t(), q.t(), ms.t(), Q4_SCALE_LINEAR, nullptr));
    REQUIRE(NVFP4_quantize(w.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, &g, nullptr) == Q4_OK);
    NF4_state st{};
    st.struct_size = sizeof st;
    st.blocksize = 64;
    st.absmax = na.t();
    for (int32_t math : {Q4_MATH_EXACT, Q4_MATH_FAST}) {
      Q4_op_options o{};
      Q4_op_options_init(&o);
      o.math_mode = math;
      for (int64_t m : {1, 8, 64}) {
        INFO("M = " << m << (math == Q4_MATH_FAST ? ", fast" : ", exact"));
        t::Tensor x = t::random_float({m, k}, t::f32(), 73), y({m, n}, t::f32()), yy({n, n}, t::f32());
        clean_after("NVFP4_linear",
                    NVFP4_linear(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, g, nullptr, y.t(), &o));
        clean_after("NF4_scaled_mm", NF4_scaled_mm(x.t(), nq.t(), &st, nullptr, y.t(), &o));
        clean_after("MXFP4_linear", MXFP4_linear(x.t(), q.t(), ms.t(), Q4_SCALE_LINEAR, nullptr, y.t(), &o));
        clean_after("NVFP4_scaled_mm",
                    NVFP4_scaled_mm(q.t(), s.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 1.0f, nullptr, yy.t(), &o));
      }
    }
    Q4_session* ses = nullptr;
    REQUIRE(Q4_session_create(t::cpu_session(), &ses) == Q4_OK);
    Q4_weight_bundle b = t::float_bundle(w, Q4_FORMAT_NVFP4);
    Q4_linear* lin = nullptr;
    clean_after("Q4_linear_create", Q4_linear_create(ses, &b, &lin));
    t::Tensor x = t::random_float({8, k}, t::f32(), 74), y({8, n}, t::f32());
    clean_after("Q4_linear_forward", Q4_linear_forward(lin, x.t(), y.t()));
    Q4_linear_destroy(lin);
    Q4_session_destroy(ses);
  }
}
#endif
