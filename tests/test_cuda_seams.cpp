// CPU unit tests of the CUDA backend's GPU-free logic (plugin/seams.h, the
// cuBLASLt object ownership of src/plugin/lt_objects.h, the NF4 block coding of
// formats/nf4_block.h) and of the CUDA entry points' behaviour when no device
// is usable.
#include <dlfcn.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "formats/nf4_block.h"
#include "plugin/device_setup.h"
#include "plugin/lt_mxfp4.h"
#include "plugin/lt_objects.h"
#include "plugin/managed_copy.h"
#include "plugin/plugin_abi.h"
#include "plugin/seams.h"
#include "plugin/workspace_pool.h"
#include "test_util.h"

using namespace q4::cuda;
using q4::fmt::nf4_quantize_block;

TEST_CASE("cuBLASLt FP4 GEMM parameters for row-major Y = X W^T (TN)", "[cuda][seams]") {
  const LtGemmParams p = lt_fp4_gemm_params(/*M=*/8, /*N=*/4096, /*K=*/11008);
  CHECK(p.valid);
  CHECK(p.trans_a);
  CHECK_FALSE(p.trans_b);
  CHECK(p.m == 4096);  // cuBLAS m = out features (A = W)
  CHECK(p.n == 8);     // cuBLAS n = rows of X (B = X)
  CHECK(p.k == 11008);
  CHECK(p.lda == 11008);
  CHECK(p.ldb == 11008);
  CHECK(p.ldc == 4096);
  CHECK(p.a_rows == 11008);
  CHECK(p.a_cols == 4096);
  CHECK(p.b_cols == 8);
  CHECK(p.a_scale_bytes == 4096 * (11008 / 16));       // 4096 rows pad to 128, 688 cols pad to 4
  CHECK(p.b_scale_bytes == 128 * (11008 / 16));        // 8 rows pad to 128
  CHECK_FALSE(lt_fp4_gemm_params(8, 4096, 48).valid);  // K % 32
  CHECK(lt_fp4_gemm_params(8, 4096, 48).why_invalid.find("multiple of 32") != std::string::npos);
  CHECK_FALSE(lt_fp4_gemm_params(8, 100, 64).valid);  // N % 16
  CHECK_FALSE(lt_fp4_gemm_params(0, 16, 64).valid);
  CHECK(folded_alpha(2.0f, 0.5f, 0.25f) == 0.25f);
}

TEST_CASE("launch geometry", "[cuda][seams]") {
  CHECK(blocks_launch(1).blocks == 1);
  CHECK(blocks_launch(256).blocks == 1);
  CHECK(blocks_launch(257).blocks == 2);
  CHECK(blocks_launch(0).blocks == 1);
  const Launch g = gemv_launch(4096);
  CHECK(g.threads == 256);
  CHECK(g.blocks == 512);
  CHECK(gemv_launch(9, 8).blocks == 2);
  CHECK(elementwise_launch(1 << 30, 132).blocks == 32 * 132);
  CHECK(elementwise_launch(100, 132).blocks == 1);
}

TEST_CASE("capability interpretation from device attributes", "[cuda][seams]") {
  const std::string archs = "80;90;100a;103a;110a;120a;121a";
  // GB10 (sm_121, integrated, pageable access): zero-copy and FP4.
  DeviceCaps gb10 = interpret_caps(12, 1, 1, 1, 1, archs);
  CHECK(gb10.managed);
  CHECK(gb10.zero_copy);
  CHECK(gb10.fp4_tensor_cores);
  CHECK(gb10.fp4_arch == "121a");
  CHECK(gb10.arch_compiled);
  // B200 (sm_100): FP4 through 100a.
  CHECK(interpret_caps(10, 0, 1, 1, 0, archs).fp4_tensor_cores);
  // H100 (sm_90): no FP4 tensor cores, sm_90 SASS runs.
  DeviceCaps h100 = interpret_caps(9, 0, 1, 1, 0, archs);
  CHECK_FALSE(h100.fp4_tensor_cores);
  CHECK(h100.arch_compiled);
  // RTX 3090 (sm_86) runs sm_80 SASS; a build without 100a has no FP4 on B200.
  CHECK(interpret_caps(8, 6, 1, 0, 0, archs).arch_compiled);
  CHECK_FALSE(interpret_caps(8, 6, 1, 0, 0, archs).zero_copy);
  CHECK_FALSE(interpret_caps(10, 0, 1, 1, 0, "80;90").fp4_tensor_cores);
  // Family-specific targets run only on their exact compute capability.
  CHECK(arch_runs_on("100a", 10, 0));
  CHECK_FALSE(arch_runs_on("100a", 10, 3));
  CHECK(arch_runs_on("80", 8, 9));
  CHECK_FALSE(arch_runs_on("90", 8, 9));
  CHECK_FALSE(interpret_caps(7, 5, 1, 1, 0, archs).arch_compiled);
  CHECK(split_archs("80; 90,100a").size() == 3);
}

TEST_CASE(
    "plugin search order: the environment overrides; else next to the core (as loaded and resolved), "
    "then the loader path",
    "[cuda][seams]") {
  const auto forced = plugin_search_order({"/opt/lib"}, "/custom/libNVFP4_cuda.so");
  REQUIRE(forced.size() == 1);
  CHECK(forced[0] == "/custom/libNVFP4_cuda.so");
  const auto order = plugin_search_order({"/app/bin", "/opt/lib"}, nullptr);
  REQUIRE(order.size() == 3);
  CHECK(order[0] == "/app/bin/libNVFP4_cuda.so");
  CHECK(order[1] == "/opt/lib/libNVFP4_cuda.so");
  CHECK(order[2] == "libNVFP4_cuda.so");
  CHECK(plugin_search_order({"/opt/lib", "/opt/lib"}, "").size() == 2);
  CHECK(plugin_search_order({}, nullptr).size() == 1);
}

TEST_CASE("CUDA entry points without a usable device return clear statuses", "[cuda]") {
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  REQUIRE(Q4_get_capabilities(&caps) == Q4_OK);
  if (caps.cuda_state == Q4_CUDA_READY) {
    WARN("a CUDA device is present; the no-device contract is exercised by tests/cuda_absent.sh instead");
    return;
  }
  int32_t can = 7;
  REQUIRE(NVFP4_can_use_managed(0, &can) == Q4_OK);
  CHECK(can == 0);
  t::Tensor x({2, 32}, t::f32());
  int32_t managed = 7;
  REQUIRE(NVFP4_is_managed_tensor(x.t(), &managed) == Q4_OK);
  CHECK(managed == 0);
  DLManagedTensorVersioned* m = nullptr;
  CHECK(NVFP4_to_managed(x.t(), 0, Q4_MANAGED_READ_MOSTLY, &m) == Q4_ERR_NOT_AVAILABLE);
  CHECK(m == nullptr);
  const std::string why = Q4_last_error();
  CHECK(why.find("NVFP4_to_managed") == 0);
  CHECK(why.find(caps.native_load_state) != std::string::npos);
  uint64_t f = 0, tot = 0;
  CHECK(NVFP4_memory_info(0, &f, &tot) == Q4_ERR_NOT_AVAILABLE);
  CHECK(NVFP4_managed_prefetch(x.t(), 0, nullptr) == Q4_ERR_NOT_AVAILABLE);
  CHECK(Q4_cuda_synchronize(0, nullptr) == Q4_ERR_NOT_AVAILABLE);
  CHECK(NVFP4_empty_cache() == Q4_OK);  // nothing cached without a device
  // Operations on kDLCUDA tensors: validated, then NOT_AVAILABLE.
  t::Tensor q({2, 16}, t::u8()), s({2, 2}, t::u8());
  x.dl.device = DLDevice{kDLCUDA, 0};
  q.dl.device = DLDevice{kDLCUDA, 0};
  s.dl.device = DLDevice{kDLCUDA, 0};
  CHECK(NVFP4_quantize(x.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, nullptr) == Q4_ERR_NOT_AVAILABLE);
  CHECK(std::string(Q4_last_error()).find("CUDA") != std::string::npos);
  t::Tensor am({1}, t::f32());
  am.dl.device = DLDevice{kDLCUDA, 0};
  t::Tensor q64({32}, t::u8());
  q64.dl.device = DLDevice{kDLCUDA, 0};
  CHECK(NF4_quantize(x.t(), q64.t(), am.t(), 64, nullptr) == Q4_ERR_NOT_AVAILABLE);
  NF4_state st{};
  st.struct_size = sizeof st;
  st.blocksize = 64;
  st.absmax = am.t();
  CHECK(NF4_dequantize(q64.t(), &st, x.t(), nullptr) == Q4_ERR_NOT_AVAILABLE);
  // Bad arguments are still reported first, and as what they are.
  t::Tensor bad({2, 24}, t::f32());
  bad.dl.device = DLDevice{kDLCUDA, 0};
  CHECK(NVFP4_quantize(bad.t(), q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, nullptr) == Q4_ERR_SHAPE);
  // Host memory mixed with device memory is refused.
  t::Tensor host_q({2, 16}, t::u8());
  CHECK(NVFP4_quantize(x.t(), host_q.t(), s.t(), Q4_SCALE_LINEAR, 0.0f, nullptr, nullptr) == Q4_ERR_DEVICE);
}

// ---------------------------------------------------------------------------
// cuBLASLt object ownership (src/plugin/lt_objects.h) against a fake cuBLASLt that
// counts live objects and fails one chosen call.
// ---------------------------------------------------------------------------
namespace {

struct FakeDescObj {};
struct FakeLayoutObj {
  LtElem type;
  int64_t rows, cols, ld;
};
struct FakePrefObj {};

struct FakeLt {
  using Status = int;
  using Desc = FakeDescObj*;
  using Layout = FakeLayoutObj*;
  using Pref = FakePrefObj*;
  struct Algo {
    int id = 0;
  };
  static constexpr Status kOk = 0;
  static constexpr Status kFailed = 13;

  int fail_at = -1;  // index of the call that fails (-1: none)
  int calls = 0, set_calls = 0;
  int live = 0, created = 0, destroyed = 0, bad_destroys = 0;
  int heuristic_found = 1;
  std::set<const void*> objects;
  std::vector<std::pair<LtDescAttr, LtDescValue>> attrs;
  std::vector<std::string> log;

  bool fails(const char* what) {
    log.emplace_back(what);
    return calls++ == fail_at;
  }
  template <class T>
  T* make(T value) {
    T* p = new T(value);
    objects.insert(p);
    ++live;
    ++created;
    return p;
  }
  template <class T>
  void drop(T* p) {
    if (objects.erase(p) != 1) {
      ++bad_destroys;  // double destroy or foreign handle
      return;
    }
    delete p;
    --live;
    ++destroyed;
  }

  Status desc_create(Desc* d) {
    if (fails("desc_create")) return kFailed;
    *d = make(FakeDescObj{});
    return kOk;
  }
  Status desc_set(Desc d, LtDescAttr a, const LtDescValue& v) {
    ++set_calls;
    if (objects.count(d) == 0) ++bad_destroys;  // use of a dead descriptor
    if (fails("desc_set")) return kFailed;
    attrs.emplace_back(a, v);
    return kOk;
  }
  Status layout_create(Layout* l, LtElem e, int64_t rows, int64_t cols, int64_t ld) {
    if (fails("layout_create")) return kFailed;
    *l = make(FakeLayoutObj{e, rows, cols, ld});
    return kOk;
  }
  Status pref_create(Pref* p) {
    if (fails("pref_create")) return kFailed;
    *p = make(FakePrefObj{});
    return kOk;
  }
  Status pref_set_workspace(Pref, size_t) { return fails("pref_set_workspace") ? kFailed : kOk; }
  std::vector<std::pair<LtOperand, uint32_t>> alignments;
  Status pref_set_alignment(Pref, LtOperand o, uint32_t bytes) {
    if (fails("pref_set_alignment")) return kFailed;
    alignments.emplace_back(o, bytes);
    return kOk;
  }
  int heuristic_calls = 0;
  Status heuristic(Desc, Layout, Layout, Layout, Pref, Algo* algo, int* found) {
    ++heuristic_calls;
    if (fails("heuristic")) return kFailed;
    *found = heuristic_found;
    if (heuristic_found > 0) algo->id = 42;
    return kOk;
  }
  void destroy(Desc d) { drop(d); }
  void destroy(Layout l) { drop(l); }
  void destroy(Pref p) { drop(p); }
};

// Setup plus heuristic query of one GEMM, failing call `fail_at`. Returns
// the number of fake calls made.
int run_setup(FakeLt& api, LtElem type, bool* failed) {
  const LtGemmParams p = lt_fp4_gemm_params(32, 64, 128);
  static const char w_scale = 0, x_scale = 0;
  *failed = false;
  {
    LtGemm<FakeLt> g;
    const LtResult<FakeLt> r = lt_build_gemm(api, p, type, &w_scale, &x_scale, g);
    if (!r.ok()) {
      *failed = true;
      CHECK(r.status == FakeLt::kFailed);
      CHECK(std::string(r.step).find("cublasLt") == 0);
      CHECK(api.live == 0);  // nothing survives a failed setup
      CHECK_FALSE(g.desc);
      CHECK_FALSE(g.a);
      CHECK_FALSE(g.c);
    } else {
      CHECK(api.live == 4);  // descriptor and three layouts
      FakeLt::Algo algo;
      int found = -1;
      const LtResult<FakeLt> h = lt_find_algo(api, g, size_t{32} << 20, LtAlignment{}, &algo, &found);
      if (api.fail_at >= 0 && api.log[static_cast<size_t>(api.fail_at)] == "heuristic") {
        CHECK(h.ok());  // a failing heuristic query means "no algorithm": fallback or UNSUPPORTED
        CHECK(found == 0);
        *failed = true;
      } else if (!h.ok()) {
        *failed = true;
        CHECK(h.status == FakeLt::kFailed);
        CHECK(std::string(h.step).find("cublasLtMatmulPreference") == 0);
      } else {
        CHECK(found == 1);
        CHECK(algo.id == 42);
      }
      CHECK(api.live == 4);  // the preference never outlives the query
    }
  }
  CHECK(api.live == 0);
  CHECK(api.created == api.destroyed);
  CHECK(api.bad_destroys == 0);
  return api.calls;
}

}  // namespace

TEST_CASE("cuBLASLt setup: every failing call returns an error and leaks nothing", "[cuda][seams][lt]") {
  for (const LtElem type : {LtElem::kFp4E2M1, LtElem::kFp4E2M1Mx, LtElem::kF32}) {
    FakeLt clean;
    bool failed = true;
    const int total = run_setup(clean, type, &failed);
    CHECK_FALSE(failed);
    const int sets = lt_is_fp4(type) ? 6 : 2;
    CHECK(clean.set_calls == sets);
    CHECK(total ==
          1 + sets + 3 + 3 + 4);  // desc, attributes, layouts; pref, workspace, heuristic, 4 alignments
    int set_failures = 0;
    for (int i = 0; i < total; ++i) {
      CAPTURE(static_cast<int>(type), i);
      FakeLt api;
      api.fail_at = i;
      run_setup(api, type, &failed);
      CHECK(failed);
      if (api.log[static_cast<size_t>(i)] == "desc_set") ++set_failures;
    }
    CHECK(set_failures == sets);  // every SetAttribute position was made to fail
  }
}

TEST_CASE("cuBLASLt setup for MXFP4: VEC32_UE8M0 scale modes, E2M1 layouts, its own cache key",
          "[cuda][seams][lt][mxfp4]") {
  FakeLt api;
  const LtGemmParams p = lt_mxfp4_gemm_params(/*M=*/32, /*N=*/64, /*K=*/128);
  const char w_scale = 0, x_scale = 0;
  LtGemm<FakeLt> g;
  REQUIRE(lt_build_gemm(api, p, LtElem::kFp4E2M1Mx, &w_scale, &x_scale, g).ok());
  REQUIRE(api.attrs.size() == 6);
  CHECK(api.attrs[2].first == LtDescAttr::kAScaleModeVec32Ue8m0);
  CHECK(api.attrs[3].first == LtDescAttr::kBScaleModeVec32Ue8m0);
  CHECK(api.attrs[4].second.pointer == &w_scale);
  CHECK(api.attrs[5].second.pointer == &x_scale);
  CHECK(g.a.get()->type == LtElem::kFp4E2M1Mx);
  CHECK(g.b.get()->type == LtElem::kFp4E2M1Mx);
  CHECK(lt_is_fp4(LtElem::kFp4E2M1Mx));
  CHECK_FALSE(lt_is_fp4(LtElem::kF32));
  // One byte per 32 elements, 128x4 tiles: W 64 rows -> 128 x 4, X 32 rows -> 128 x 4.
  CHECK(p.a_scale_bytes == 128 * 4);
  CHECK(p.b_scale_bytes == 128 * 4);
  LtAlgoKey nv, mx;
  nv.elem = static_cast<int32_t>(LtElem::kFp4E2M1);
  mx.elem = static_cast<int32_t>(LtElem::kFp4E2M1Mx);
  CHECK((nv < mx || mx < nv));  // NVFP4 and MXFP4 answers are cached apart
}

TEST_CASE("cuBLASLt setup: TN descriptor, block scales of A = W and B = X, layouts", "[cuda][seams][lt]") {
  FakeLt api;
  const LtGemmParams p = lt_fp4_gemm_params(/*M=*/32, /*N=*/64, /*K=*/128);
  const char w_scale = 0, x_scale = 0;
  LtGemm<FakeLt> g;
  REQUIRE(lt_build_gemm(api, p, LtElem::kFp4E2M1, &w_scale, &x_scale, g).ok());
  REQUIRE(api.attrs.size() == 6);
  CHECK(api.attrs[0].first == LtDescAttr::kTransA);
  CHECK(api.attrs[0].second.transpose);
  CHECK(api.attrs[1].first == LtDescAttr::kTransB);
  CHECK_FALSE(api.attrs[1].second.transpose);
  CHECK(api.attrs[2].first == LtDescAttr::kAScaleModeVec16Ue4m3);
  CHECK(api.attrs[3].first == LtDescAttr::kBScaleModeVec16Ue4m3);
  CHECK(api.attrs[4].first == LtDescAttr::kAScalePointer);
  CHECK(api.attrs[4].second.pointer == &w_scale);
  CHECK(api.attrs[5].first == LtDescAttr::kBScalePointer);
  CHECK(api.attrs[5].second.pointer == &x_scale);
  CHECK(g.a.get()->type == LtElem::kFp4E2M1);
  CHECK(g.a.get()->rows == 128);
  CHECK(g.a.get()->cols == 64);
  CHECK(g.b.get()->cols == 32);
  CHECK(g.c.get()->type == LtElem::kF32);
  CHECK(g.c.get()->ld == 64);
  // Rebuilding into the same holder releases the previous objects first.
  REQUIRE(lt_build_gemm(api, p, LtElem::kF32, nullptr, nullptr, g).ok());
  CHECK(api.live == 4);
  // Moves transfer ownership exactly once.
  LtGemm<FakeLt> moved;
  moved.desc = std::move(g.desc);
  CHECK_FALSE(g.desc);
  CHECK(moved.desc);
  g.reset();
  CHECK(api.live == 1);
  moved.reset();
  CHECK(api.live == 0);
  CHECK(api.bad_destroys == 0);
}

TEST_CASE("cuBLASLt setup: no heuristic result is not an error", "[cuda][seams][lt]") {
  FakeLt api;
  api.heuristic_found = 0;
  LtGemm<FakeLt> g;
  REQUIRE(lt_build_gemm(api, lt_fp4_gemm_params(8, 16, 32), LtElem::kFp4E2M1, nullptr, nullptr, g).ok());
  FakeLt::Algo algo;
  int found = -1;
  CHECK(lt_find_algo(api, g, 1024, LtAlignment{}, &algo, &found).ok());
  CHECK(found == 0);
  CHECK(api.live == 4);
}

// ---------------------------------------------------------------------------
// The CUDA NF4 quantize kernel's per-block coding (formats/nf4_block.h).
// ---------------------------------------------------------------------------
TEST_CASE("CUDA NF4 block coding: odd count pads with the code of 0.0 (bitsandbytes)", "[cuda][seams][nf4]") {
  const float x[3] = {0.75f, -0.3f, 0.2f};
  uint8_t q[2] = {0, 0};
  float absmax = -1.0f;
  nf4_quantize_block([&](int64_t i) { return x[i]; }, 0, 3, q, &absmax);
  CHECK(absmax == 0.75f);
  CHECK(q[0] == 0xf3);
  CHECK(q[1] == 0xa7);
  // All-zero block: every element (and the pad) codes as 7.
  const float z[3] = {0.0f, 0.0f, 0.0f};
  nf4_quantize_block([&](int64_t i) { return z[i]; }, 0, 3, q, &absmax);
  CHECK(absmax == 0.0f);
  CHECK(q[0] == 0x77);
  CHECK(q[1] == 0x77);
  // The last block of an odd count starts after the full ones.
  float y[67];
  for (int i = 0; i < 67; ++i) y[i] = 0.01f * static_cast<float>(i - 33);
  y[66] = -0.5f;
  uint8_t q2[34] = {};
  float am[2] = {};
  nf4_quantize_block([&](int64_t i) { return y[i]; }, 0, 64, q2, &am[0]);
  nf4_quantize_block([&](int64_t i) { return y[i]; }, 64, 67, q2, &am[1]);
  CHECK(am[1] == 0.5f);
  CHECK((q2[33] & 0xfu) == 7u);  // pad
  CHECK((q2[33] >> 4) == 0u);    // -0.5 / 0.5 = -1.0: code 0
  for (int i = 0; i < 64; ++i) {
    const uint32_t code = (i & 1) ? (q2[i / 2] & 0xfu) : (q2[i / 2] >> 4);
    CHECK(code == q4::fmt::nf4_encode(fminf(1.0f, fmaxf(-1.0f, y[i] * (1.0f / am[0])))));
  }
}

// ---------------------------------------------------------------------------
// The built plugin's table without a device: handshake, empty_cache() with
// nothing cached, the descriptor checks of run(). Skipped when the plugin
// was not built next to the core library.
// ---------------------------------------------------------------------------
TEST_CASE("CUDA plugin table: handshake, run() descriptor checks, empty_cache() with nothing cached",
          "[cuda][plugin]") {
  Dl_info info{};
  REQUIRE(dladdr(reinterpret_cast<void*>(&Q4_get_capabilities), &info) != 0);
  std::string dir = info.dli_fname != nullptr ? info.dli_fname : "";
  dir = dir.substr(0, dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
  void* h = dlopen((dir + "/libNVFP4_cuda.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    WARN("libNVFP4_cuda.so not built next to the core; plugin table not exercised");
    return;
  }
  auto entry = reinterpret_cast<nvfp4_cuda_plugin_entry_fn>(dlsym(h, "nvfp4_cuda_plugin_entry"));
  REQUIRE(entry != nullptr);
  nvfp4_cuda_plugin t{};
  CHECK(entry(NVFP4_CUDA_PLUGIN_ABI - 1, &t) == Q4_ERR_UNSUPPORTED);  // another ABI is refused
  CHECK(t.abi == 0);
  CHECK(entry(NVFP4_CUDA_PLUGIN_ABI, nullptr) == Q4_ERR_NULL_POINTER);
  REQUIRE(entry(NVFP4_CUDA_PLUGIN_ABI, &t) == Q4_OK);
  CHECK(t.struct_size == sizeof t);
  CHECK(t.abi == NVFP4_CUDA_PLUGIN_ABI);
  REQUIRE(t.run != nullptr);
  REQUIRE(t.empty_cache != nullptr);
  CHECK(t.empty_cache() == Q4_OK);  // nothing cached yet: no-op
  CHECK(t.run(nullptr) == Q4_ERR_NULL_POINTER);
  nvfp4_cuda_op op{};
  op.struct_size = 8;
  op.op = NVFP4_CUDA_OP_NVFP4_QUANTIZE;
  CHECK(t.run(&op) == Q4_ERR_INVALID_ARGUMENT);  // a descriptor older than the plugin's
  op.struct_size = sizeof op;
  op.op = 99;
  op.bad_index = 5;
  op.used_fallback = 1;
  CHECK(t.run(&op) == Q4_ERR_UNSUPPORTED);
  CHECK(std::string(t.last_error()).find("99") != std::string::npos);
  CHECK(op.bad_index == -1);  // results are reset before dispatch
  CHECK(op.used_fallback == 0);
  nvfp4_cuda_probe probe{};
  REQUIRE(t.probe(&probe) == Q4_OK);
  if (probe.device_count == 0) {
    // A real operation: the device cannot be made current, reported as a CUDA error.
    op.op = NVFP4_CUDA_OP_NF4_QUANTIZE;
    op.device = 0;
    CHECK(t.run(&op) == Q4_ERR_CUDA);
    CHECK(std::string(t.last_error()).find("cudaSetDevice") != std::string::npos);
    CHECK(t.empty_cache() == Q4_OK);  // still nothing cached
  }
  // The handle stays open: the core may hold the same plugin.
}

// ---------------------------------------------------------------------------
// NVFP4_to_managed's steps (src/plugin/managed_copy.h) against a fake
// plugin table: whichever step fails, the managed allocation is freed.
// ---------------------------------------------------------------------------
namespace {

struct FakeManaged {
  int allocs = 0, frees = 0, copies = 0, advises = 0, prefetches = 0;
  int fail_step = -1;  // 0 alloc, 1 copy, 2 advise, 3 prefetch
  char block[64] = {};
};
FakeManaged g_fm;

int32_t fm_alloc(size_t, void** p) {
  if (g_fm.fail_step == 0) return Q4_ERR_OUT_OF_MEMORY;
  ++g_fm.allocs;
  *p = g_fm.block;
  return Q4_OK;
}
int32_t fm_free(void*) {
  ++g_fm.frees;
  return Q4_OK;
}
int32_t fm_copy(void*, const void*, size_t) {
  ++g_fm.copies;
  return g_fm.fail_step == 1 ? Q4_ERR_CUDA : Q4_OK;
}
int32_t fm_advise(void*, size_t, int32_t) {
  ++g_fm.advises;
  return g_fm.fail_step == 2 ? Q4_ERR_CUDA : Q4_OK;
}
int32_t fm_prefetch(const void*, size_t, int32_t, void*) {
  ++g_fm.prefetches;
  return g_fm.fail_step == 3 ? Q4_ERR_CUDA : Q4_OK;
}

nvfp4_cuda_plugin fake_managed_table() {
  nvfp4_cuda_plugin t{};
  t.alloc_managed = fm_alloc;
  t.free_managed = fm_free;
  t.copy = fm_copy;
  t.advise_read_mostly = fm_advise;
  t.prefetch = fm_prefetch;
  return t;
}

}  // namespace

TEST_CASE("to_managed frees its allocation when advise or prefetch fails", "[cuda][seams][managed]") {
  const nvfp4_cuda_plugin api = fake_managed_table();
  float src[4] = {};
  for (int step = -1; step <= 3; ++step) {
    g_fm = FakeManaged{};
    g_fm.fail_step = step;
    const ManagedCopy r = managed_copy(api, src, sizeof src, false, 0, true, true);
    INFO("failing step " << step);
    if (step < 0) {
      CHECK(r.status == Q4_OK);
      CHECK(r.allocation == g_fm.block);
      CHECK(r.data == g_fm.block);
      CHECK(g_fm.frees == 0);  // the caller owns it now
    } else {
      CHECK(r.status != Q4_OK);
      CHECK(r.allocation == nullptr);
      CHECK(g_fm.frees == g_fm.allocs);  // nothing leaked (no free when the alloc itself failed)
    }
  }
  // An already-managed source is a view: nothing allocated, nothing freed,
  // even when the advice fails.
  g_fm = FakeManaged{};
  g_fm.fail_step = 2;
  const ManagedCopy v = managed_copy(api, src, sizeof src, true, 0, true, false);
  CHECK(v.status != Q4_OK);
  CHECK(g_fm.allocs == 0);
  CHECK(g_fm.frees == 0);
  CHECK(g_fm.copies == 0);
}

TEST_CASE("prefetch to a device needs concurrent managed access", "[cuda][seams][managed]") {
  const std::string archs = "80;90;100a;120a;121a";
  // Pageable access without concurrent managed access (e.g. WSL): zero-copy
  // reading is possible, cudaMemPrefetchAsync to the device is not.
  const DeviceCaps pageable_only = interpret_caps(9, 0, 1, 0, 1, archs);
  CHECK(pageable_only.zero_copy);
  CHECK_FALSE(pageable_only.prefetch);
  CHECK(interpret_caps(12, 1, 1, 1, 1, archs).prefetch);  // GB10
  CHECK(interpret_caps(9, 0, 1, 1, 0, archs).prefetch);   // H100 on Linux
  CHECK_FALSE(interpret_caps(8, 6, 1, 0, 0, archs).prefetch);
  CHECK_FALSE(interpret_caps(9, 0, 0, 1, 1, archs).prefetch);  // no managed memory at all
}

// ---------------------------------------------------------------------------
// The heuristic cache of the plugin's GEMMs (lt_plan_gemm, LtAlgoCache).
// ---------------------------------------------------------------------------
TEST_CASE("cuBLASLt heuristic: asked with the operands' real alignment, cached per alignment",
          "[cuda][seams][lt]") {
  alignas(256) static unsigned char buf[1024];
  CHECK(pointer_alignment(buf) == 256);
  CHECK(pointer_alignment(buf + 16) == 16);
  CHECK(pointer_alignment(buf + 3) == 1);
  CHECK(pointer_alignment(buf + 512) == 256);  // capped at 256
  const LtGemmParams p = lt_fp4_gemm_params(32, 64, 128);
  FakeLt api;
  LtAlgoCache<FakeLt::Algo> cache;
  LtAlgoKey key;
  key.m = p.m;
  key.n = p.n;
  key.k = p.k;
  key.ldc = p.ldc;
  key.elem = static_cast<int32_t>(LtElem::kFp4E2M1);
  key.align = lt_alignment(buf, buf + 8, buf);
  CHECK(key.align.b == 8);
  FakeLt::Algo algo;
  bool available = false;
  {
    LtGemm<FakeLt> g;
    REQUIRE(lt_plan_gemm(api, cache, key, p, LtElem::kFp4E2M1, nullptr, nullptr, 1024, g, &algo, &available)
                .ok());
  }
  CHECK(available);
  // The preference told cuBLASLt that B sits at an 8-byte offset.
  REQUIRE(api.alignments.size() == 4);
  CHECK(api.alignments[0] == std::make_pair(LtOperand::kA, 256u));
  CHECK(api.alignments[1] == std::make_pair(LtOperand::kB, 8u));
  // Same key: no second query. Another alignment: its own query.
  {
    LtGemm<FakeLt> g;
    REQUIRE(lt_plan_gemm(api, cache, key, p, LtElem::kFp4E2M1, nullptr, nullptr, 1024, g, &algo, &available)
                .ok());
  }
  CHECK(api.heuristic_calls == 1);
  LtAlgoKey aligned = key;
  aligned.align = lt_alignment(buf, buf, buf);
  {
    LtGemm<FakeLt> g;
    REQUIRE(
        lt_plan_gemm(api, cache, aligned, p, LtElem::kFp4E2M1, nullptr, nullptr, 1024, g, &algo, &available)
            .ok());
  }
  CHECK(api.heuristic_calls == 2);
  CHECK(cache.size() == 2);
  CHECK(api.live == 0);
}

TEST_CASE("cuBLASLt heuristic: 'no FP4 algorithm' is cached and skips the whole setup", "[cuda][seams][lt]") {
  const LtGemmParams p = lt_fp4_gemm_params(32, 64, 128);
  FakeLt api;
  api.heuristic_found = 0;  // sm_80 / sm_90: no block-scaled FP4 GEMM
  LtAlgoCache<FakeLt::Algo> cache;
  LtAlgoKey key;
  key.m = p.m;
  key.n = p.n;
  key.k = p.k;
  FakeLt::Algo algo;
  bool available = true;
  {
    LtGemm<FakeLt> g;
    REQUIRE(lt_plan_gemm(api, cache, key, p, LtElem::kFp4E2M1, nullptr, nullptr, 1024, g, &algo, &available)
                .ok());
  }
  CHECK_FALSE(available);
  const int calls_first = api.calls;
  CHECK(calls_first > 0);
  for (int i = 0; i < 3; ++i) {
    LtGemm<FakeLt> g;
    available = true;
    REQUIRE(lt_plan_gemm(api, cache, key, p, LtElem::kFp4E2M1, nullptr, nullptr, 1024, g, &algo, &available)
                .ok());
    CHECK_FALSE(available);
    CHECK_FALSE(g.desc);  // nothing built
  }
  CHECK(api.calls == calls_first);  // not one cuBLASLt call after the first answer
  CHECK(api.created == api.destroyed);
  // A failing setup call is not an answer: nothing cached, asked again next time.
  FakeLt flaky;
  flaky.fail_at = 0;
  LtAlgoCache<FakeLt::Algo> c2;
  {
    LtGemm<FakeLt> g;
    CHECK_FALSE(
        lt_plan_gemm(flaky, c2, key, p, LtElem::kFp4E2M1, nullptr, nullptr, 1024, g, &algo, &available).ok());
  }
  CHECK(c2.size() == 0);
}

// ---------------------------------------------------------------------------
// cuBLASLt workspaces per stream (src/plugin/workspace_pool.h).
// ---------------------------------------------------------------------------
namespace {

struct FakeWs {
  using Stream = int;  // stream number
  using Event = int;   // 0: none
  int allocs = 0, frees = 0, events = 0, events_destroyed = 0;
  bool fail_alloc = false;
  std::vector<std::pair<int, int>> records;  // (event, stream)
  std::vector<std::pair<int, int>> waits;    // (stream, event)
  std::vector<std::unique_ptr<char[]>> blocks;
  int32_t alloc(size_t, void** p) {
    if (fail_alloc) return Q4_ERR_CUDA;
    blocks.emplace_back(new char[1]);
    *p = blocks.back().get();
    ++allocs;
    return Q4_OK;
  }
  void free(void*) { ++frees; }
  int32_t event_create(Event* e) {
    *e = ++events;
    return Q4_OK;
  }
  void event_destroy(Event) { ++events_destroyed; }
  int32_t record(Event e, Stream s) {
    records.emplace_back(e, s);
    return Q4_OK;
  }
  int32_t wait(Stream s, Event e) {
    waits.emplace_back(s, e);
    return Q4_OK;
  }
};

}  // namespace

TEST_CASE("cuBLASLt workspaces: one per stream, never shared by concurrent streams",
          "[cuda][seams][workspace]") {
  FakeWs b;
  WorkspacePool<FakeWs> pool(32 << 20, 2);
  size_t s1 = 0, s2 = 0, s1b = 0;
  void *p1 = nullptr, *p2 = nullptr, *p1b = nullptr;
  // Two streams in flight at once (two host threads): distinct workspaces.
  REQUIRE(pool.acquire(b, 101, 1, &s1, &p1) == Q4_OK);
  REQUIRE(pool.acquire(b, 202, 2, &s2, &p2) == Q4_OK);
  CHECK(p1 != p2);
  // The same stream again (ordered by the stream): its own workspace back.
  REQUIRE(pool.acquire(b, 101, 1, &s1b, &p1b) == Q4_OK);
  CHECK(p1b == p1);
  pool.release(b, s1b, 1);
  pool.release(b, s1, 1);
  pool.release(b, s2, 2);
  CHECK(b.allocs == 2);
  CHECK(b.records.size() == 3);
  // A third stream over the cap takes the least recently used free one, but
  // only after waiting (on the GPU) for that workspace's last use.
  size_t s3 = 0;
  void* p3 = nullptr;
  REQUIRE(pool.acquire(b, 303, 3, &s3, &p3) == Q4_OK);
  CHECK(p3 == p2);  // stream 202 was acquired least recently (101 twice, later)
  REQUIRE(b.waits.size() == 1);
  CHECK(b.waits[0].first == 3);
  CHECK(b.waits[0].second == 2);  // the event of workspace 2, recorded on stream 2
  // While it is held, a fourth stream cannot take it nor stream 202's held
  // one: a new workspace beyond the cap.
  size_t s4 = 0, s5 = 0;
  void *p4 = nullptr, *p5 = nullptr;
  REQUIRE(pool.acquire(b, 202, 2, &s4, &p4) == Q4_OK);
  REQUIRE(pool.acquire(b, 404, 4, &s5, &p5) == Q4_OK);
  CHECK(p5 != p3);
  CHECK(p5 != p4);
  CHECK(b.allocs == 3);
  pool.release(b, s3, 3);
  pool.release(b, s4, 2);
  pool.release(b, s5, 4);
  pool.clear(b);
  CHECK(b.frees == 3);
  CHECK(b.events_destroyed == 3);
  CHECK(pool.size() == 0);
}

TEST_CASE("dequantize-then-GEMM works in bounded column tiles", "[cuda][seams]") {
  // 28672 x 8192 (a Llama-70B MLP layer): 940 MB of fp32 if done at once.
  const int64_t n = 28672, k = 8192;
  const int64_t rows = dequant_tile_rows(n, k, kDequantScratchBytes);
  CHECK(rows * k * 4 <= kDequantScratchBytes);
  CHECK(rows == 2048);
  CHECK((n + rows - 1) / rows == 14);
  CHECK(dequant_tile_rows(100, 64, kDequantScratchBytes) == 100);  // small layers: one tile
  CHECK(dequant_tile_rows(10, int64_t{1} << 30, 1024) == 1);       // at least one row
  CHECK(dequant_tile_rows(1000, 1024, 40 * 1024 * 4) % 16 == 0);   // 40 rows fit, 32 used
  CHECK(dequant_tile_rows(1000, 1024, 40 * 1024 * 4) == 32);
}

TEST_CASE("FP4 GEMM is not attempted below compute capability 10", "[cuda][seams]") {
  CHECK_FALSE(lt_fp4_device_possible(8));  // A100, RTX 30xx
  CHECK_FALSE(lt_fp4_device_possible(9));  // H100
  CHECK(lt_fp4_device_possible(10));       // B200
  CHECK(lt_fp4_device_possible(12));       // RTX 50xx, GB10
}

TEST_CASE("CUDA fp16/bf16 outputs write the CPU codec's NaN patterns, not 0x7fff", "[cuda][seams]") {
  for (const uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fffffffu}) {
    float v;
    std::memcpy(&v, &bits, 4);
    CAPTURE(bits);
    CHECK(out_f16_bits(v) == q4::fmt::f32_to_f16(v));
    CHECK(out_bf16_bits(v) == q4::fmt::f32_to_bf16(v));
    CHECK(out_f16_bits(v) != 0x7fff);  // what __float2half_rn writes for every NaN
    CHECK((out_bf16_bits(v) != 0x7fff || q4::fmt::f32_to_bf16(v) == 0x7fff));
  }
  CHECK(out_f16_bits(1.0f) == 0x3c00);
  CHECK(out_bf16_bits(-2.0f) == 0xc000);
}

TEST_CASE("cuBLASLt workspaces: a failed allocation keeps nothing, the next call allocates",
          "[cuda][seams][workspace]") {
  FakeWs b;
  WorkspacePool<FakeWs> pool(32 << 20, 2);
  size_t slot = 0;
  void* p = nullptr;
  b.fail_alloc = true;
  CHECK(pool.acquire(b, 101, 1, &slot, &p) == Q4_ERR_CUDA);
  CHECK(pool.size() == 0);  // no slot without memory for a later call to find
  CHECK(p == nullptr);
  b.fail_alloc = false;
  REQUIRE(pool.acquire(b, 101, 1, &slot, &p) == Q4_OK);
  CHECK(p != nullptr);
  CHECK(b.allocs == 1);
  pool.release(b, slot, 1);
  pool.clear(b);
}

namespace {

// A fake device API for src/plugin/device_setup.h: the thread's current
// device, and the steps of a device's first use, each able to fail.
struct FakeDeviceWorld {
  int32_t current = 3;
  bool get_fails = false;
  std::string fail;  // "set", "handle", "attributes" or "codebook"
  int handles = 0, attribute_reads = 0, uploads = 0;
  std::vector<int32_t> codebook_on;  // devices the codebook reached
};

struct FakeDeviceApi {
  using Handle = int;  // 0: none
  FakeDeviceWorld* w = nullptr;
  int32_t get_device(int32_t* d) const {
    if (w->get_fails) return Q4_ERR_CUDA;
    *d = w->current;
    return Q4_OK;
  }
  int32_t set_device(int32_t d) const {
    if (w->fail == "set" || d < 0 || d >= 8) return Q4_ERR_CUDA;
    w->current = d;
    return Q4_OK;
  }
  int32_t create_handle(Handle* h) const {
    if (w->fail == "handle") return Q4_ERR_CUDA;
    *h = ++w->handles;
    return Q4_OK;
  }
  int32_t attributes(int32_t device, int32_t* sm, int32_t* cc) const {
    ++w->attribute_reads;
    if (w->fail == "attributes") return Q4_ERR_CUDA;
    *sm = 48 + device;
    *cc = 12;
    return Q4_OK;
  }
  int32_t upload_codebook() const {
    if (w->fail == "codebook") return Q4_ERR_CUDA;
    ++w->uploads;
    w->codebook_on.push_back(w->current);
    return Q4_OK;
  }
};

struct FakeDeviceState {
  bool initialized = false;
  int lt = 0;
  int32_t sm_count = 0, cc_major = 0;
};

// What the plugin's DeviceLease::acquire does (cuda/common.cu): make the
// device current, then set it up if it is not ready.
int32_t lease(CurrentDeviceGuard<FakeDeviceApi>& guard, FakeDeviceApi api, FakeDeviceState& s,
              int32_t device) {
  const int32_t rc = guard.set(device);
  if (rc != Q4_OK) return rc;
  return setup_device(api, s, device);
}

}  // namespace

TEST_CASE("device setup commits only when complete; a failed step leaves the device not ready",
          "[cuda][seams][device]") {
  for (const char* step : {"handle", "attributes", "codebook"}) {
    INFO("failing step: " << step);
    FakeDeviceWorld w;
    FakeDeviceApi api{&w};
    FakeDeviceState s;
    w.fail = step;
    {
      CurrentDeviceGuard<FakeDeviceApi> guard(api);
      CHECK(lease(guard, api, s, 1) == Q4_ERR_CUDA);
      CHECK(w.current == 1);
    }
    CHECK(w.current == 3);  // restored after the failure
    CHECK_FALSE(s.initialized);
    CHECK(s.sm_count == 0);  // nothing half-committed
    CHECK(s.cc_major == 0);
    CHECK(w.uploads == 0);
    // The next call retries every missing step and sees a complete device.
    w.fail.clear();
    {
      CurrentDeviceGuard<FakeDeviceApi> guard(api);
      REQUIRE(lease(guard, api, s, 1) == Q4_OK);
    }
    CHECK(w.current == 3);
    CHECK(s.initialized);
    CHECK(s.lt != 0);
    CHECK(w.handles == 1);  // a handle made before a later step failed is kept, not leaked
    CHECK(s.sm_count == 49);
    CHECK(s.cc_major == 12);
    CHECK(w.codebook_on == std::vector<int32_t>{1});  // on the device being set up
    // Ready: later calls repeat nothing.
    const int reads = w.attribute_reads;
    {
      CurrentDeviceGuard<FakeDeviceApi> guard(api);
      REQUIRE(lease(guard, api, s, 1) == Q4_OK);
    }
    CHECK(w.attribute_reads == reads);
    CHECK(w.uploads == 1);
  }
}

TEST_CASE("the caller's current device is restored on every path", "[cuda][seams][device]") {
  FakeDeviceWorld w;
  FakeDeviceApi api{&w};
  {
    CurrentDeviceGuard<FakeDeviceApi> guard(api);  // never set: nothing changes
  }
  CHECK(w.current == 3);
  {
    CurrentDeviceGuard<FakeDeviceApi> guard(api);
    REQUIRE(guard.set(5) == Q4_OK);
    REQUIRE(guard.set(6) == Q4_OK);  // several devices in one scope (empty_cache)
    CHECK(w.current == 6);
  }
  CHECK(w.current == 3);  // the first caller's device, not an intermediate one
  {
    CurrentDeviceGuard<FakeDeviceApi> guard(api);
    REQUIRE(guard.set(5) == Q4_OK);
    CHECK(guard.set(9) == Q4_ERR_CUDA);  // a later set fails
  }
  CHECK(w.current == 3);
  {
    CurrentDeviceGuard<FakeDeviceApi> guard(api);
    w.fail = "set";
    CHECK(guard.set(2) == Q4_ERR_CUDA);
    w.fail.clear();
  }
  CHECK(w.current == 3);
  {
    FakeDeviceState s;
    CurrentDeviceGuard<FakeDeviceApi> guard(api);
    w.fail = "codebook";
    CHECK(lease(guard, api, s, 4) == Q4_ERR_CUDA);
    w.fail.clear();
  }
  CHECK(w.current == 3);
  // When the current device cannot be read there is nothing to restore to.
  w.get_fails = true;
  {
    CurrentDeviceGuard<FakeDeviceApi> guard(api);
    REQUIRE(guard.set(2) == Q4_OK);
  }
  CHECK(w.current == 2);
}

TEST_CASE("MXFP4 block-scaled cuBLASLt GEMM: VEC32_UE8M0 scales, 128x4 tiles, where it exists",
          "[cuda][seams][mxfp4]") {
  const LtGemmParams p = lt_mxfp4_gemm_params(/*M=*/8, /*N=*/4096, /*K=*/2880);
  CHECK(p.valid);
  CHECK(p.trans_a);
  CHECK_FALSE(p.trans_b);
  CHECK(p.m == 4096);
  CHECK(p.n == 8);
  CHECK(p.lda == 2880);
  // One byte per 32 elements: 90 columns pad to 92, rows to 128.
  CHECK(p.a_scale_bytes == 4096 * 92);
  CHECK(p.b_scale_bytes == 128 * 92);
  CHECK(mxfp4_swizzled_scale_bytes(130, 64) == 256 * 4);
  // The swizzled index is NVFP4's with k/32 columns: every byte lands once.
  const int64_t rows = 130, cols = 3;
  std::set<int64_t> seen;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) seen.insert(q4::fmt::swizzle_offset(r, c, cols));
  }
  CHECK(static_cast<int64_t>(seen.size()) == rows * cols);
  CHECK(*seen.rbegin() < mxfp4_swizzled_scale_bytes(rows, cols * 32));
  for (int32_t cc : {8, 9}) {
    const Mxfp4GemmRoute r = mxfp4_scaled_mm_route(cc, 8, 4096, 2880, false);
    CHECK_FALSE(r.use_lt);
    CHECK(r.why.find("compute capability") != std::string::npos);
  }
  for (int32_t cc : {10, 11, 12}) {
    const Mxfp4GemmRoute r = mxfp4_scaled_mm_route(cc, 8, 4096, 2880, false);
    CHECK(r.use_lt);
    CHECK(r.scale_mode == LtScaleMode::kVec32Ue8m0);
    CHECK(r.why.empty());
  }
  CHECK_FALSE(mxfp4_scaled_mm_route(12, 8, 4096, 2880, true).use_lt);
  const Mxfp4GemmRoute odd = mxfp4_scaled_mm_route(12, 8, 100, 64, false);  // N % 16
  CHECK_FALSE(odd.use_lt);
  CHECK(odd.why.find("multiple of 16") != std::string::npos);
}
