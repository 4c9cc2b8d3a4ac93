// Sessions, linears, policies, diagnostics, mutable tensors, training
// helpers (docs/abi.md §5, §9), mirroring the original design's test cases.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

using t::Tensor;

namespace {

struct Session {
  Q4_session* s = nullptr;
  explicit Session(const Q4_session_config* c = t::cpu_session()) {
    REQUIRE(Q4_session_create(c, &s) == Q4_OK);
  }
  ~Session() { Q4_session_destroy(s); }
  Q4_session_stats stats() const {
    Q4_session_stats st{};
    st.struct_size = sizeof st;
    REQUIRE(Q4_session_get_stats(s, &st) == Q4_OK);
    return st;
  }
};

Q4_session_config config(int32_t path = Q4_PATH_AUTO, int32_t backend = Q4_BACKEND_AUTO) {
  Q4_session_config c = t::cpu_session_config();
  c.compute_path = path;
  c.backend = backend;
  return c;
}

std::string diagnostics(const Q4_linear* l) {
  size_t needed = 0;
  CHECK(Q4_linear_diagnostics(l, nullptr, 0, &needed) == Q4_ERR_BUFFER_TOO_SMALL);
  std::string buf(needed, '\0');
  REQUIRE(Q4_linear_diagnostics(l, buf.data(), buf.size(), &needed) == Q4_OK);
  buf.resize(needed - 1);
  return buf;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.bytes == b.bytes && std::equal(a.data(), a.data() + a.bytes, b.data());
}

long rss_kb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * 4;
}

}  // namespace

TEST_CASE("linear from every bundle kind matches the stateless operations", "[session]") {
  Session s;
  const int64_t n = 24, k = 64;
  Tensor w = t::random_float({n, k}, t::f32(), 1);
  Tensor x = t::random_float({2, 3, k}, t::bf16(), 2);
  Tensor bias = t::random_float({n}, t::f32(), 3);

  // NVFP4 from float, then the same weight as packed bytes (swizzled scales).
  Tensor q({n, k / 2}, t::u8()), sc({n, k / 16}, t::u8());
  float g = 0;
  REQUIRE(NVFP4_quantize(w.t(), q.t(), sc.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
  Tensor ref({2, 3, n}, t::f32());
  REQUIRE(NVFP4_linear(x.t(), q.t(), sc.t(), 0, g, bias.t(), ref.t(), nullptr) == Q4_OK);

  Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NVFP4);
  b.bias = bias.t();
  Q4_linear* l1 = nullptr;
  REQUIRE(Q4_linear_create(s.s, &b, &l1) == Q4_OK);
  Tensor y1({2, 3, n}, t::f32());
  REQUIRE(Q4_linear_forward(l1, x.t(), y1.t()) == Q4_OK);
  CHECK(same_bytes(y1, ref));

  Tensor sw({t::swizzled_bytes(n, k)}, t::u8());
  REQUIRE(NVFP4_swizzle_scales(sc.t(), sw.t()) == Q4_OK);
  Q4_weight_bundle pb = t::packed_bundle(Q4_FORMAT_NVFP4, q, sw, Q4_SCALE_SWIZZLED, g, n, k);
  pb.bias = bias.t();
  Q4_linear* l2 = nullptr;
  REQUIRE(Q4_linear_create(s.s, &pb, &l2) == Q4_OK);
  Tensor y2({2, 3, n}, t::f32());
  REQUIRE(Q4_linear_forward(l2, x.t(), y2.t()) == Q4_OK);
  CHECK(same_bytes(y2, ref));

  // NF4 from float and packed with double-quantized statistics.
  Tensor nq({n * k / 2}, t::u8()), am({n * k / 64}, t::f32());
  REQUIRE(NF4_quantize(w.t(), nq.t(), am.t(), 64, nullptr) == Q4_OK);
  NF4_state st = t::nf4_state_of(am, 64);
  Tensor nref({2, 3, n}, t::f32());
  REQUIRE(NF4_scaled_mm(x.t(), nq.t(), &st, nullptr, nref.t(), nullptr) == Q4_OK);
  Q4_weight_bundle nb = float_bundle(w, Q4_FORMAT_NF4);
  Q4_linear* l3 = nullptr;
  REQUIRE(Q4_linear_create(s.s, &nb, &l3) == Q4_OK);
  Tensor y3({2, 3, n}, t::f32());
  REQUIRE(Q4_linear_forward(l3, x.t(), y3.t()) == Q4_OK);
  CHECK(same_bytes(y3, nref));

  Tensor qam({n * k / 64}, t::u8()), nam({1}, t::f32()), map({256}, t::f32());
  float off = 0;
  REQUIRE(NF4_double_quantize(am.t(), qam.t(), nam.t(), map.t(), &off, nullptr) == Q4_OK);
  NF4_state nst{};
  nst.struct_size = sizeof nst;
  nst.blocksize = 64;
  nst.absmax = qam.t();
  nst.nested_absmax = nam.t();
  nst.nested_quant_map = map.t();
  nst.nested_offset = off;
  Tensor dref({2, 3, n}, t::f32());
  REQUIRE(NF4_scaled_mm(x.t(), nq.t(), &nst, nullptr, dref.t(), nullptr) == Q4_OK);
  Q4_weight_bundle db{};
  Q4_weight_bundle_init(&db);
  db.format = Q4_FORMAT_NF4;
  db.source = Q4_WEIGHT_PACKED;
  db.weight = nq.t();
  db.nf4 = &nst;
  db.out_features = n;
  db.in_features = k;
  Q4_linear* l4 = nullptr;
  REQUIRE(Q4_linear_create(s.s, &db, &l4) == Q4_OK);
  Tensor y4({2, 3, n}, t::f16());
  REQUIRE(Q4_linear_forward(l4, x.t(), y4.t()) == Q4_OK);
  for (int64_t i = 0; i < y4.numel(); ++i)
    CHECK(std::fabs(y4.get(i) - dref.get(i)) <= 1e-3f * (1 + std::fabs(dref.get(i))));

  // The caller's tensors are only borrowed: scribbling over them changes nothing.
  w.fill(0);
  q.fill(0);
  Tensor y5({2, 3, n}, t::f32());
  REQUIRE(Q4_linear_forward(l2, x.t(), y5.t()) == Q4_OK);
  CHECK(same_bytes(y5, ref));

  CHECK(s.stats().live_linears == 4);
  for (Q4_linear* l : {l1, l2, l3, l4}) CHECK(Q4_linear_destroy(l) == Q4_OK);
  CHECK(Q4_linear_destroy(nullptr) == Q4_OK);
  const Q4_session_stats end = s.stats();
  CHECK(end.live_linears == 0);
  CHECK(end.live_buffers == 0);
  CHECK(end.live_bytes == 0);
  CHECK(end.forwards == 5);
}

TEST_CASE(
    "a linear from large packed bytes (copied over the session's threads) matches the stateless products",
    "[session]") {
  // 4104 x 2304: 4.6 MiB of codes, copied in pieces over threads, the last
  // piece short, and 0.56 MiB of scales (one piece). In fast mode the
  // NVFP4 and NF4 codes (and NVFP4's scales) are copied group by group of
  // 16 rows as they are tiled, the 8 rows past the last group copied
  // alone; M = 2 reads the tiles, M = 40 the copy. An update into a
  // retired weight's memory writes the codes (and the 4.5 MiB of tiles) by
  // non-temporal stores. Every step gives the stateless products' bits.
  // 24 x 2368 (K % 128 == 64, fewer than 64 rows): no tiles, the copies
  // made after all.
  for (const auto& shape : {std::pair<int64_t, int64_t>{4104, 2304}, {24, 2368}}) {
    const int64_t n = shape.first, k = shape.second;
    // Weights A and B in the three formats.
    struct Packed {
      Tensor q, sc, nq, am, mq, ms;
      float g = 0;
      NF4_state st{};
    };
    std::vector<Packed> wts;
    for (uint64_t seed : {61, 63}) {
      Tensor w = t::random_float({n, k}, t::f32(), seed);
      Packed p{Tensor({n, k / 2}, t::u8()),    Tensor({n, k / 16}, t::u8()), Tensor({n * k / 2}, t::u8()),
               Tensor({n * k / 64}, t::f32()), Tensor({n, k / 2}, t::u8()),  Tensor({n, k / 32}, t::u8())};
      REQUIRE(NVFP4_quantize(w.t(), p.q.t(), p.sc.t(), 0, 0.0f, &p.g, nullptr) == Q4_OK);
      REQUIRE(NF4_quantize(w.t(), p.nq.t(), p.am.t(), 64, nullptr) == Q4_OK);
      REQUIRE(MXFP4_quantize(w.t(), p.mq.t(), p.ms.t(), Q4_SCALE_LINEAR, nullptr) == Q4_OK);
      wts.push_back(std::move(p));
    }
    for (Packed& p : wts) p.st = t::nf4_state_of(p.am, 64);
    for (int32_t mode : {Q4_MATH_EXACT, Q4_MATH_FAST}) {
      for (int32_t threads : {1, 2, 3}) {
        for (int64_t m : {2, 40}) {
          INFO(n << " x " << k << " mode " << mode << " threads " << threads << " M " << m);
          Tensor x = t::random_float({m, k}, t::f32(), 62 + m);
          Q4_session_config c = config();
          c.num_threads = threads;
          c.math_mode = mode;
          Session s(&c);
          Q4_op_options o{};
          o.struct_size = sizeof o;
          o.num_threads = threads;
          o.math_mode = mode;
          for (int32_t format : {Q4_FORMAT_NVFP4, Q4_FORMAT_NF4, Q4_FORMAT_MXFP4}) {
            INFO("format " << format);
            std::vector<Q4_weight_bundle> b;
            std::vector<Tensor> ref;
            for (Packed& p : wts) {
              ref.emplace_back(std::vector<int64_t>{m, n}, t::f32());
              if (format == Q4_FORMAT_NVFP4) {
                REQUIRE(NVFP4_linear(x.t(), p.q.t(), p.sc.t(), Q4_SCALE_LINEAR, p.g, nullptr, ref.back().t(),
                                     &o) == Q4_OK);
                b.push_back(t::packed_bundle(Q4_FORMAT_NVFP4, p.q, p.sc, Q4_SCALE_LINEAR, p.g, n, k));
              } else if (format == Q4_FORMAT_NF4) {
                REQUIRE(NF4_scaled_mm(x.t(), p.nq.t(), &p.st, nullptr, ref.back().t(), &o) == Q4_OK);
                b.push_back(t::packed_nf4_bundle(p.nq, &p.st, n, k));
              } else {
                REQUIRE(MXFP4_linear(x.t(), p.mq.t(), p.ms.t(), Q4_SCALE_LINEAR, nullptr, ref.back().t(),
                                     &o) == Q4_OK);
                b.push_back(t::packed_bundle(Q4_FORMAT_MXFP4, p.mq, p.ms, Q4_SCALE_LINEAR, 0.0f, n, k));
              }
            }
            // Created from A, updated to B, to A, to A again: the third
            // update writes into B's memory (from the second update on, a
            // retired weight's memory is kept for the next one).
            Q4_linear* l = nullptr;
            REQUIRE(Q4_linear_create(s.s, &b[0], &l) == Q4_OK);
            const size_t order[4] = {0, 1, 0, 0};
            for (int32_t step = 0; step < 4; ++step) {
              INFO("step " << step);
              if (step > 0) REQUIRE(Q4_linear_update_weight(l, &b[order[step]]) == Q4_OK);
              Tensor y({m, n}, t::f32());
              REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
              CHECK(same_bytes(y, ref[order[step]]));
            }
            REQUIRE(Q4_linear_destroy(l) == Q4_OK);
          }
        }
      }
    }
  }
}

TEST_CASE("forward fails fast on K, dtype, device and shape mismatches", "[session]") {
  Session s;
  Tensor w = t::random_float({8, 32}, t::f32(), 1);
  Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NVFP4);
  Q4_linear* l = nullptr;
  REQUIRE(Q4_linear_create(s.s, &b, &l) == Q4_OK);
  Tensor x_bad_k({2, 48}, t::f32()), y({2, 8}, t::f32());
  CHECK(Q4_linear_forward(l, x_bad_k.t(), y.t()) == Q4_ERR_SHAPE);
  CHECK(std::string(Q4_last_error()).find("in_features K = 32") != std::string::npos);
  Tensor x({2, 32}, t::f32()), y_bad_n({2, 9}, t::f32()), y_bad_m({3, 8}, t::f32());
  CHECK(Q4_linear_forward(l, x.t(), y_bad_n.t()) == Q4_ERR_SHAPE);
  CHECK(Q4_linear_forward(l, x.t(), y_bad_m.t()) == Q4_ERR_SHAPE);
  Tensor x_int({2, 32}, DLDataType{kDLInt, 8, 1});
  CHECK(Q4_linear_forward(l, x_int.t(), y.t()) == Q4_ERR_DTYPE);
  x.dl.device.device_type = kDLCUDA;
  CHECK(Q4_linear_forward(l, x.t(), y.t()) == Q4_ERR_DEVICE);
  x.dl.device.device_type = kDLCPU;
  CHECK(Q4_linear_forward(nullptr, x.t(), y.t()) == Q4_ERR_NULL_POINTER);
  CHECK(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
  // Misaligned / odd weights get their shape error at create.
  Tensor w_odd({8, 40}, t::f32());
  Q4_weight_bundle bo = float_bundle(w_odd, Q4_FORMAT_NVFP4);
  Q4_linear* lo = nullptr;
  CHECK(Q4_linear_create(s.s, &bo, &lo) == Q4_ERR_SHAPE);
  CHECK(std::string(Q4_last_error()).find("multiple of 16") != std::string::npos);
  CHECK(lo == nullptr);
  // Session destroy refuses while the linear lives.
  CHECK(Q4_session_destroy(s.s) == Q4_ERR_STATE);
  CHECK(std::string(Q4_last_error()).find("1 linear") != std::string::npos);
  Q4_linear_destroy(l);
}

TEST_CASE("policies: compute paths, overrides, targets and unified memory", "[session]") {
  Tensor w = t::random_float({16, 64}, t::f32(), 4);
  Tensor x = t::random_float({5, 64}, t::f32(), 5);
  Tensor y_kernel({5, 16}, t::f32());
  struct Case {
    int32_t path, backend, format;
    int32_t expect_status;
    int32_t expect_backend;
    bool fallback;
  };
  const Case cases[] = {
      {Q4_PATH_AUTO, Q4_BACKEND_AUTO, Q4_FORMAT_NVFP4, Q4_OK, Q4_BACKEND_NVFP4_KERNEL, false},
      {Q4_PATH_KERNEL_ONLY, Q4_BACKEND_AUTO, Q4_FORMAT_NVFP4, Q4_OK, Q4_BACKEND_NVFP4_KERNEL, false},
      {Q4_PATH_KERNEL_OR_FALLBACK, Q4_BACKEND_AUTO, Q4_FORMAT_NF4, Q4_OK, Q4_BACKEND_NF4_KERNEL, false},
      // Requesting dequant-matmul is a choice, not a fallback.
      {Q4_PATH_DEQUANT_MATMUL_ONLY, Q4_BACKEND_AUTO, Q4_FORMAT_NVFP4, Q4_OK, Q4_BACKEND_DEQUANT_MATMUL,
       false},
      {Q4_PATH_AUTO, Q4_BACKEND_DEQUANT_MATMUL, Q4_FORMAT_NF4, Q4_OK, Q4_BACKEND_DEQUANT_MATMUL, false},
      {Q4_PATH_KERNEL_ONLY, Q4_BACKEND_NF4_KERNEL, Q4_FORMAT_NVFP4, Q4_ERR_UNSUPPORTED, 0, false},
      {Q4_PATH_AUTO, Q4_BACKEND_NVFP4_KERNEL, Q4_FORMAT_NF4, Q4_ERR_UNSUPPORTED, 0, false},
      {Q4_PATH_KERNEL_ONLY, Q4_BACKEND_DEQUANT_MATMUL, Q4_FORMAT_NVFP4, Q4_ERR_INVALID_ARGUMENT, 0, false},
  };
  for (const Case& c : cases) {
    INFO("path " << c.path << " backend " << c.backend << " format " << c.format);
    Q4_session_config cfg = config(c.path, c.backend);
    Session s(&cfg);
    Q4_weight_bundle b = float_bundle(w, c.format);
    Q4_linear* l = nullptr;
    const int32_t st = Q4_linear_create(s.s, &b, &l);
    CHECK(st == c.expect_status);
    if (st != Q4_OK) {
      CHECK(l == nullptr);
      CHECK(std::string(Q4_last_error()).find("backend") != std::string::npos);
      continue;
    }
    Q4_linear_info info{};
    info.struct_size = sizeof info;
    REQUIRE(Q4_linear_info_get(l, &info) == Q4_OK);
    CHECK(info.backend == c.expect_backend);
    CHECK(info.fell_back == (c.fallback ? 1 : 0));
    const nlohmann::json j = nlohmann::json::parse(diagnostics(l));
    for (const char* field : {"format", "backend", "computePath", "fallbackReason", "nativeLoadState", "isa",
                              "device", "unifiedMemory", "scaleLayout", "weightBytes"}) {
      CHECK(j.contains(field));
    }
    CHECK(j["fallbackReason"].get<std::string>().empty() == !c.fallback);
    Tensor y({5, 16}, t::f32());
    REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
    Q4_linear_destroy(l);
  }
  // A bogus override, a CUDA target without CUDA, RequireUnified.
  Q4_session* bad = nullptr;
  Q4_session_config cfg = config(Q4_PATH_AUTO, 9);
  CHECK(Q4_session_create(&cfg, &bad) == Q4_ERR_INVALID_ARGUMENT);
  CHECK(std::string(Q4_last_error()).find("backend") != std::string::npos);
  CHECK(bad == nullptr);
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  REQUIRE(Q4_get_capabilities(&caps) == Q4_OK);
  if (caps.cuda_state != Q4_CUDA_READY) {
    cfg = config();
    cfg.target = Q4_TARGET_CUDA;
    CHECK(Q4_session_create(&cfg, &bad) == Q4_ERR_NOT_AVAILABLE);
    cfg = config();
    cfg.target = Q4_TARGET_AUTO;
    cfg.unified_memory = Q4_UM_REQUIRE;
    CHECK(Q4_session_create(&cfg, &bad) == Q4_ERR_NOT_AVAILABLE);
    CHECK(std::string(Q4_last_error()).find("RequireUnified") != std::string::npos);
    // PreferUnified records why it did not promote.
    cfg = config();
    cfg.target = Q4_TARGET_AUTO;
    cfg.unified_memory = Q4_UM_PREFER;
    Session prefer(&cfg);
    size_t needed = 0;
    Q4_session_diagnostics(prefer.s, nullptr, 0, &needed);
    std::string buf(needed, '\0');
    REQUIRE(Q4_session_diagnostics(prefer.s, buf.data(), buf.size(), &needed) == Q4_OK);
    const nlohmann::json sj = nlohmann::json::parse(buf.c_str());
    CHECK(sj["unifiedMemory"]["active"] == false);
    CHECK(sj["unifiedMemory"]["reason"].get<std::string>().find("unavailable") != std::string::npos);
  } else {
    WARN(
        "a CUDA device is present: the no-device session statuses are checked where there is none "
        "(CI, and the emulated-device tests)");
  }
  // Fast math with the dequant-matmul backend is refused at create.
  cfg = config(Q4_PATH_DEQUANT_MATMUL_ONLY);
  cfg.math_mode = Q4_MATH_FAST;
  Session fast(&cfg);
  Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NVFP4);
  Q4_linear* l = nullptr;
  CHECK(Q4_linear_create(fast.s, &b, &l) == Q4_ERR_UNSUPPORTED);
}

TEST_CASE("activations are read in place, never copied implicitly", "[session]") {
  Session s;
  Tensor w = t::random_float({8, 32}, t::f32(), 7);
  Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NVFP4);
  Q4_linear* l = nullptr;
  REQUIRE(Q4_linear_create(s.s, &b, &l) == Q4_OK);
  Tensor x = t::random_float({4, 32}, t::f32(), 8);
  x.dl.device.device_type = kDLCUDAManaged;  // managed memory is CPU-readable in place
  Tensor y({4, 8}, t::f32());
  const void* x_ptr = x.dl.data;
  REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
  CHECK(x.dl.data == x_ptr);
  CHECK(s.stats().implicit_copies == 0);
  Tensor xh = t::random_float({4, 32}, t::f16(), 8);
  REQUIRE(Q4_linear_forward(l, xh.t(), y.t()) == Q4_OK);
  CHECK(s.stats().implicit_copies == 0);  // GEMV (M <= 8): fp16 converted in registers, no copy
  Tensor xh16 = t::random_float({16, 32}, t::f16(), 9);
  Tensor y16({16, 8}, t::f32());
  REQUIRE(Q4_linear_forward(l, xh16.t(), y16.t()) == Q4_OK);
  CHECK(s.stats().implicit_copies == 0);  // small batch (M 9..64): converted in registers, no copy
  Tensor xb300 = t::random_float({300, 32}, t::bf16(), 10);
  Tensor y300({300, 8}, t::f32());
  REQUIRE(Q4_linear_forward(l, xb300.t(), y300.t()) == Q4_OK);
  CHECK(s.stats().implicit_copies == 0);  // panel GEMM (M > 64): converted block by block, no copy
  Q4_linear_destroy(l);
}

TEST_CASE("mutable tensors: versions, BUSY writers, snapshots that never change", "[session][mutable]") {
  Session s;
  const int64_t shape[2] = {4, 8};
  Q4_mutable* m = nullptr;
  REQUIRE(Q4_mutable_create(s.s, 2, shape, t::f32(), &m) == Q4_OK);
  uint64_t v = 99;
  REQUIRE(Q4_mutable_version(m, &v) == Q4_OK);
  CHECK(v == 0);
  DLManagedTensorVersioned* snap0 = nullptr;
  REQUIRE(Q4_mutable_acquire(m, &snap0, &v) == Q4_OK);
  CHECK(v == 0);
  CHECK((snap0->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);
  CHECK(snap0->version.major == 1);
  DLTensor view{};
  REQUIRE(Q4_mutable_begin_write(m, Q4_WRITE_KEEP, &view) == Q4_OK);
  DLTensor other{};
  CHECK(Q4_mutable_begin_write(m, Q4_WRITE_KEEP, &other) == Q4_ERR_BUSY);
  for (int i = 0; i < 32; ++i) static_cast<float*>(view.data)[i] = 1.0f;
  REQUIRE(Q4_mutable_commit(m, &v) == Q4_OK);
  CHECK(v == 1);
  // The old snapshot still sees zeros.
  for (int i = 0; i < 32; ++i) CHECK(static_cast<const float*>(snap0->dl_tensor.data)[i] == 0.0f);
  DLManagedTensorVersioned* snap1 = nullptr;
  REQUIRE(Q4_mutable_acquire(m, &snap1, &v) == Q4_OK);
  CHECK(v == 1);
  CHECK(static_cast<const float*>(snap1->dl_tensor.data)[31] == 1.0f);
  // Abort leaves the committed data alone; KEEP starts from the current data.
  REQUIRE(Q4_mutable_begin_write(m, Q4_WRITE_KEEP, &view) == Q4_OK);
  CHECK(static_cast<float*>(view.data)[5] == 1.0f);
  static_cast<float*>(view.data)[5] = 7.0f;
  REQUIRE(Q4_mutable_abort(m) == Q4_OK);
  CHECK(Q4_mutable_abort(m) == Q4_ERR_STATE);
  CHECK(Q4_mutable_commit(m, &v) == Q4_ERR_STATE);
  REQUIRE(Q4_mutable_version(m, &v) == Q4_OK);
  CHECK(v == 1);
  CHECK(s.stats().live_snapshots == 2);
  snap0->deleter(snap0);
  snap1->deleter(snap1);
  CHECK(s.stats().live_snapshots == 0);
  // Bounded memory: many commits without readers reuse two buffers.
  for (int r = 0; r < 100; ++r) {
    REQUIRE(Q4_mutable_begin_write(m, Q4_WRITE_DISCARD, &view) == Q4_OK);
    REQUIRE(Q4_mutable_commit(m, &v) == Q4_OK);
  }
  CHECK(v == 101);
  CHECK(s.stats().live_buffers <= 3);
  // Bad arguments.
  Q4_mutable* bad = nullptr;
  const int64_t neg[1] = {-1};
  CHECK(Q4_mutable_create(s.s, 1, neg, t::f32(), &bad) == Q4_ERR_SHAPE);
  CHECK(Q4_mutable_create(s.s, 1, shape, DLDataType{kDLFloat, 4, 1}, &bad) == Q4_ERR_DTYPE);
  CHECK(Q4_mutable_begin_write(m, 7, &view) == Q4_ERR_INVALID_ARGUMENT);
  // A snapshot may outlive its tensor.
  DLManagedTensorVersioned* late = nullptr;
  REQUIRE(Q4_mutable_acquire(m, &late, &v) == Q4_OK);
  REQUIRE(Q4_mutable_begin_write(m, Q4_WRITE_KEEP, &view) == Q4_OK);
  CHECK(Q4_mutable_destroy(m) == Q4_ERR_STATE);
  REQUIRE(Q4_mutable_abort(m) == Q4_OK);
  REQUIRE(Q4_mutable_destroy(m) == Q4_OK);
  CHECK(static_cast<const float*>(late->dl_tensor.data)[0] == 1.0f);
  CHECK(Q4_session_destroy(s.s) == Q4_ERR_STATE);  // the snapshot is still alive
  late->deleter(late);
  const Q4_session_stats end = s.stats();
  CHECK(end.live_mutables == 0);
  CHECK(end.live_snapshots == 0);
  CHECK(end.live_buffers == 0);
}

TEST_CASE("a large mutable tensor's Q4_WRITE_KEEP starts from the committed bytes", "[session][mutable]") {
  // 5 MiB (copied over the session's threads) and 17 MiB + 13 bytes (into
  // a spare version by non-temporal stores, an unaligned tail): each write
  // starts from the bytes of the one committed before it, also when its
  // buffer is a spare that holds older bytes.
  for (int64_t bytes : {int64_t{5} << 20, (int64_t{17} << 20) + 13}) {
    for (int32_t threads : {1, 3}) {
      INFO(bytes << " bytes, threads " << threads);
      Q4_session_config c = config();
      c.num_threads = threads;
      Session s(&c);
      const int64_t shape[1] = {bytes};
      Q4_mutable* m = nullptr;
      REQUIRE(Q4_mutable_create(s.s, 1, shape, t::u8(), &m) == Q4_OK);
      std::vector<uint8_t> want(static_cast<size_t>(bytes), 0);
      for (uint32_t r = 1; r <= 4; ++r) {
        INFO("write " << r);
        DLTensor view{};
        REQUIRE(Q4_mutable_begin_write(m, Q4_WRITE_KEEP, &view) == Q4_OK);
        auto* d = static_cast<uint8_t*>(view.data);
        CHECK(std::memcmp(d, want.data(), want.size()) == 0);
        for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<uint8_t>(i * 31 + r * 7 + (i >> 20));
        std::memcpy(d, want.data(), want.size());
        uint64_t v = 0;
        REQUIRE(Q4_mutable_commit(m, &v) == Q4_OK);
        CHECK(v == r);
      }
      REQUIRE(Q4_mutable_destroy(m) == Q4_OK);
    }
  }
}

TEST_CASE("1 writer, 8 readers: every snapshot is internally consistent", "[session][mutable][concurrency]") {
  Session s;
  const int64_t shape[1] = {4096};
  Q4_mutable* m = nullptr;
  REQUIRE(Q4_mutable_create(s.s, 1, shape, DLDataType{kDLUInt, 64, 1}, &m) == Q4_OK);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> snapshots{0}, torn{0}, busy{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 8; ++r) {
    readers.emplace_back([&] {
      uint64_t last = 0;
      while (!stop.load()) {
        DLManagedTensorVersioned* snap = nullptr;
        uint64_t v = 0;
        if (Q4_mutable_acquire(m, &snap, &v) != Q4_OK) {
          torn++;
          continue;
        }
        const auto* d = static_cast<const uint64_t*>(snap->dl_tensor.data);
        for (int i = 0; i < 4096; ++i) {
          if (d[i] != v) {
            torn++;
            break;
          }
        }
        if (v < last) torn++;  // versions never go back
        last = v;
        snap->deleter(snap);
        snapshots++;
        // A reader trying to write while the writer holds the lock gets BUSY.
        DLTensor view{};
        const int32_t st = Q4_mutable_begin_write(m, Q4_WRITE_DISCARD, &view);
        if (st == Q4_ERR_BUSY) {
          busy++;
        } else if (st == Q4_OK) {
          const auto* cur = &view;
          (void)cur;
          Q4_mutable_abort(m);
        }
      }
    });
  }
  // Keep committing until the readers have seen many versions (threads may
  // start late on a loaded machine); bounded by a deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (uint64_t round = 1;
       round <= 300 || (snapshots.load() < 200 && std::chrono::steady_clock::now() < deadline); ++round) {
    DLTensor view{};
    int32_t st;
    while ((st = Q4_mutable_begin_write(m, Q4_WRITE_DISCARD, &view)) == Q4_ERR_BUSY)
      std::this_thread::yield();
    REQUIRE(st == Q4_OK);
    uint64_t version = 0;
    REQUIRE(Q4_mutable_version(m, &version) == Q4_OK);
    auto* d = static_cast<uint64_t*>(view.data);
    for (int i = 0; i < 4096; ++i) d[i] = version + 1;
    uint64_t committed = 0;
    REQUIRE(Q4_mutable_commit(m, &committed) == Q4_OK);
    REQUIRE(committed == version + 1);
  }
  stop = true;
  for (auto& th : readers) th.join();
  INFO("snapshots " << snapshots.load() << ", busy " << busy.load());
  CHECK(torn.load() == 0);
  CHECK(snapshots.load() > 0);
  REQUIRE(Q4_mutable_destroy(m) == Q4_OK);
  CHECK(s.stats().live_buffers == 0);
}

TEST_CASE("8 threads forward while the weight is updated: each output is one weight's",
          "[session][concurrency]") {
  Session s;
  // Three weights in turn (with two, an update that wrote into memory a
  // forward still reads would write the bytes it held already), large
  // enough that forwards are still reading a weight when the next updates
  // run: such writes would show as mixed outputs.
  const int64_t n = 256, k = 1024;
  Tensor w1 = t::random_float({n, k}, t::f32(), 11), w2 = t::random_float({n, k}, t::f32(), 12),
         w3 = t::random_float({n, k}, t::f32(), 14);
  Tensor x = t::random_float({3, k}, t::f32(), 13);
  Q4_weight_bundle b[3] = {float_bundle(w1, Q4_FORMAT_NVFP4), float_bundle(w2, Q4_FORMAT_NVFP4),
                           float_bundle(w3, Q4_FORMAT_NVFP4)};
  Q4_linear* l = nullptr;
  REQUIRE(Q4_linear_create(s.s, &b[2], &l) == Q4_OK);
  std::vector<Tensor> want;
  for (int i : {2, 0, 1}) {
    if (i != 2) REQUIRE(Q4_linear_update_weight(l, &b[i]) == Q4_OK);
    want.emplace_back(std::vector<int64_t>{3, n}, t::f32());
    REQUIRE(Q4_linear_forward(l, x.t(), want.back().t()) == Q4_OK);
  }
  REQUIRE(!same_bytes(want[0], want[1]));
  REQUIRE(!same_bytes(want[1], want[2]));
  REQUIRE(!same_bytes(want[0], want[2]));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> mixed{0}, calls{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&] {
      Tensor y({3, n}, t::f32());
      while (!stop.load()) {
        if (Q4_linear_forward(l, x.t(), y.t()) != Q4_OK ||
            !(same_bytes(y, want[0]) || same_bytes(y, want[1]) || same_bytes(y, want[2])))
          mixed++;
        calls++;
      }
    });
  }
  for (int r = 0; r < 200; ++r) REQUIRE(Q4_linear_update_weight(l, &b[r % 3]) == Q4_OK);
  stop = true;
  for (auto& th : ts) th.join();
  INFO("forwards during updates: " << calls.load());
  CHECK(mixed.load() == 0);
  Q4_linear_info info{};
  info.struct_size = sizeof info;
  REQUIRE(Q4_linear_info_get(l, &info) == Q4_OK);
  CHECK(info.weight_version == 203);
  // Update rules: same format and shape.
  Tensor w_other({n, k + 16}, t::f32());
  Q4_weight_bundle bo = float_bundle(w_other, Q4_FORMAT_NVFP4);
  CHECK(Q4_linear_update_weight(l, &bo) == Q4_ERR_SHAPE);
  Q4_weight_bundle bn = float_bundle(w1, Q4_FORMAT_NF4);
  CHECK(Q4_linear_update_weight(l, &bn) == Q4_ERR_INVALID_ARGUMENT);
  Q4_linear_destroy(l);
  CHECK(s.stats().live_bytes == 0);
}

TEST_CASE("repeated updates write into the retired weight's memory: same results, one spare weight",
          "[session]") {
  // From a linear's second update on, the storage of the weight an update
  // retires (no forward holds it here) is kept and the next update writes
  // into it: every forward must give the bits of a linear created from
  // that weight, and the session holds at most one spare weight.
  const int64_t n = 64, k = 256;
  std::vector<Tensor> ws;
  for (uint32_t i = 0; i < 3; ++i) ws.push_back(t::random_float({n, k}, t::f32(), 41 + i));
  Tensor x = t::random_float({3, k}, t::f32(), 44), bias = t::random_float({n}, t::f32(), 45);
  for (int32_t math : {Q4_MATH_EXACT, Q4_MATH_FAST}) {
    for (int32_t format : {Q4_FORMAT_NVFP4, Q4_FORMAT_NF4, Q4_FORMAT_MXFP4}) {
      INFO("math mode " << math << " format " << format);
      Q4_session_config c = config();
      c.math_mode = math;
      Session s(&c);
      // The expected outputs: a linear created from each weight.
      std::vector<Tensor> want;
      int64_t weight_bytes = 0;
      for (auto& w : ws) {
        Q4_weight_bundle b = float_bundle(w, format, &bias);
        Q4_linear* fresh = nullptr;
        REQUIRE(Q4_linear_create(s.s, &b, &fresh) == Q4_OK);
        want.emplace_back(std::vector<int64_t>{3, n}, t::f32());
        REQUIRE(Q4_linear_forward(fresh, x.t(), want.back().t()) == Q4_OK);
        weight_bytes = s.stats().live_bytes;
        REQUIRE(Q4_linear_destroy(fresh) == Q4_OK);
      }
      REQUIRE(s.stats().live_bytes == 0);
      Q4_weight_bundle b0 = float_bundle(ws[0], format, &bias);
      Q4_linear* l = nullptr;
      REQUIRE(Q4_linear_create(s.s, &b0, &l) == Q4_OK);
      CHECK(s.stats().live_bytes == weight_bytes);
      Tensor y({3, n}, t::f32());
      for (int u = 1; u <= 7; ++u) {
        const size_t i = static_cast<size_t>(u % 3);
        Q4_weight_bundle b = float_bundle(ws[i], format, &bias);
        REQUIRE(Q4_linear_update_weight(l, &b) == Q4_OK);
        INFO("update " << u);
        // The first update keeps no spare; from the second on, one.
        CHECK(s.stats().live_bytes == (u == 1 ? 1 : 2) * weight_bytes);
        Q4_linear_info info{};
        info.struct_size = sizeof info;
        REQUIRE(Q4_linear_info_get(l, &info) == Q4_OK);
        CHECK(info.weight_bytes == weight_bytes);  // (each buffer taken for a part of its own size)
        std::memset(y.data(), 0xff, static_cast<size_t>(y.bytes));
        REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
        CHECK(same_bytes(y, want[i]));
      }
      // A failed update leaves the weight (and its results) as they were.
      Tensor w_other({n, k + 16}, t::f32());
      Q4_weight_bundle bo = float_bundle(w_other, format);
      CHECK(Q4_linear_update_weight(l, &bo) == Q4_ERR_SHAPE);
      REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
      CHECK(same_bytes(y, want[1]));  // (update 7: weight 7 % 3)
      Q4_weight_bundle b2 = float_bundle(ws[2], format, &bias);
      REQUIRE(Q4_linear_update_weight(l, &b2) == Q4_OK);
      REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
      CHECK(same_bytes(y, want[2]));
      REQUIRE(Q4_linear_destroy(l) == Q4_OK);
      CHECK(s.stats().live_bytes == 0);
      CHECK(s.stats().live_buffers == 0);
    }
  }
}

TEST_CASE("fake-quantize and the STE backward products", "[session][training]") {
  const int64_t m = 6, n = 10, k = 32;
  Tensor x = t::random_float({m, k}, t::f32(), 21);
  Tensor fq({m, k}, t::bf16());
  float g = 0;
  REQUIRE(NVFP4_fake_quantize(x.t(), fq.t(), 0.0f, &g, nullptr) == Q4_OK);
  Tensor q({m, k / 2}, t::u8()), sc({m, k / 16}, t::u8()), d({m, k}, t::bf16());
  REQUIRE(NVFP4_quantize(x.t(), q.t(), sc.t(), 0, 0.0f, nullptr, nullptr) == Q4_OK);
  REQUIRE(NVFP4_dequantize(q.t(), sc.t(), 0, g, d.t(), nullptr) == Q4_OK);
  CHECK(same_bytes(fq, d));
  CHECK(NVFP4_fake_quantize(x.t(), x.t(), 0.0f, nullptr, nullptr) == Q4_ERR_ALIASING);

  Tensor w = t::random_float({n, k}, t::f32(), 22);
  Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8()), wd({n, k}, t::f32());
  float wg = 0;
  REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.0f, &wg, nullptr) == Q4_OK);
  REQUIRE(NVFP4_dequantize(wq.t(), ws.t(), 0, wg, wd.t(), nullptr) == Q4_OK);
  Tensor gy = t::random_float({m, n}, t::f32(), 23);
  Tensor gx({m, k}, t::f32()), gw({n, k}, t::f32());
  REQUIRE(NVFP4_linear_backward(gy.t(), x.t(), wq.t(), ws.t(), 0, wg, gx.t(), gw.t(), nullptr) == Q4_OK);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t kk = 0; kk < k; ++kk) {
      double ref = 0, mag = 0;
      for (int64_t j = 0; j < n; ++j) {
        ref += static_cast<double>(gy.get(i * n + j)) * wd.get(j * k + kk);
        mag += std::fabs(static_cast<double>(gy.get(i * n + j)) * wd.get(j * k + kk));
      }
      CHECK(std::fabs(gx.get(i * k + kk) - ref) <= 1e-5 * (mag + 1e-30));
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < m; ++i) {
        ref += static_cast<double>(gy.get(i * n + j)) * x.get(i * k + kk);
        mag += std::fabs(static_cast<double>(gy.get(i * n + j)) * x.get(i * k + kk));
      }
      CHECK(std::fabs(gw.get(j * k + kk) - ref) <= 1e-5 * (mag + 1e-30));
    }
  }
  // bf16 grad_y and x: the products of their values in fp32, bit for bit.
  Tensor gy16({m, n}, t::bf16()), x16({m, k}, t::bf16()), gy32({m, n}, t::f32()), x32({m, k}, t::f32());
  for (int64_t i = 0; i < m * n; ++i) {
    gy16.set(i, gy.get(i));
    gy32.set(i, gy16.get(i));
  }
  for (int64_t i = 0; i < m * k; ++i) {
    x16.set(i, x.get(i));
    x32.set(i, x16.get(i));
  }
  Tensor gx16({m, k}, t::f32()), gw16({n, k}, t::f32());
  REQUIRE(NVFP4_linear_backward(gy16.t(), x16.t(), wq.t(), ws.t(), 0, wg, gx16.t(), gw16.t(), nullptr) ==
          Q4_OK);
  REQUIRE(NVFP4_linear_backward(gy32.t(), x32.t(), wq.t(), ws.t(), 0, wg, gx.t(), gw.t(), nullptr) == Q4_OK);
  CHECK(std::memcmp(gx16.data(), gx.data(), gx.bytes) == 0);
  CHECK(std::memcmp(gw16.data(), gw.data(), gw.bytes) == 0);
  CHECK(NVFP4_linear_backward(gy.t(), x.t(), wq.t(), ws.t(), 0, wg, nullptr, nullptr, nullptr) ==
        Q4_ERR_NULL_POINTER);
  Tensor gw_bad({n, k - 16}, t::f32());
  CHECK(NVFP4_linear_backward(gy.t(), x.t(), wq.t(), ws.t(), 0, wg, nullptr, gw_bad.t(), nullptr) ==
        Q4_ERR_SHAPE);
}

TEST_CASE("100000 create/forward/destroy and fake-quantize/backward iterations leak nothing",
          "[session][leak]") {
  Session s;
  const int64_t n = 8, k = 32;
  Tensor w = t::random_float({n, k}, t::f32(), 31);
  Tensor x = t::random_float({2, k}, t::f32(), 32);
  Tensor y({2, n}, t::f32()), fq({2, k}, t::f32());
  Tensor wq({n, k / 2}, t::u8()), ws({n, k / 16}, t::u8());
  float g = 0;
  REQUIRE(NVFP4_quantize(w.t(), wq.t(), ws.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
  Tensor gy = t::random_float({2, n}, t::f32(), 33), gx({2, k}, t::f32()), gw({n, k}, t::f32());
  Q4_weight_bundle b = float_bundle(w, Q4_FORMAT_NVFP4);
  Q4_op_options one{};
  Q4_op_options_init(&one);
  one.num_threads = 1;
  long rss_warm = 0;
  const int iterations = 100000;
  int failures = 0;
  for (int i = 0; i < iterations; ++i) {
    Q4_linear* l = nullptr;
    failures += Q4_linear_create(s.s, &b, &l) != Q4_OK;
    failures += Q4_linear_forward(l, x.t(), y.t()) != Q4_OK;
    failures += Q4_linear_destroy(l) != Q4_OK;
    if (i % 10 == 0) {
      failures += NVFP4_fake_quantize(x.t(), fq.t(), 0.0f, nullptr, &one) != Q4_OK;
      failures += NVFP4_linear_backward(gy.t(), x.t(), wq.t(), ws.t(), 0, g, gx.t(), gw.t(), &one) != Q4_OK;
    }
    if (i == 2000) rss_warm = rss_kb();
  }
  const long rss_end = rss_kb();
  INFO("RSS after warm-up " << rss_warm << " kB, at the end " << rss_end << " kB");
  CHECK(failures == 0);
#if defined(Q4_TEST_ASAN) || defined(Q4_TEST_TSAN)
  // Sanitizer quarantines and shadow memory grow RSS by design; there the
  // leak checker (LSan) and the session counters below are the evidence.
  (void)rss_end;
  (void)rss_warm;
#else
  CHECK(rss_end - rss_warm < 2048);
#endif
  const Q4_session_stats st = s.stats();
  CHECK(st.live_linears == 0);
  CHECK(st.live_buffers == 0);
  CHECK(st.live_bytes == 0);
  CHECK(st.forwards == iterations);
}
