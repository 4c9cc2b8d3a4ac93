// CPU unit tests of the CUDA backend's GPU-free logic (cuda/seams.h) and of
// the CUDA entry points' behaviour when no device is usable.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "cuda/seams.h"
#include "test_util.h"

using namespace q4::cuda;

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

TEST_CASE("plugin search order: next to the core, then the environment, then the loader path",
          "[cuda][seams]") {
  const auto order = plugin_search_order("/opt/lib", "/custom/libNVFP4_cuda.so");
  REQUIRE(order.size() == 3);
  CHECK(order[0] == "/opt/lib/libNVFP4_cuda.so");
  CHECK(order[1] == "/custom/libNVFP4_cuda.so");
  CHECK(order[2] == "libNVFP4_cuda.so");
  CHECK(plugin_search_order("", nullptr).size() == 1);
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
