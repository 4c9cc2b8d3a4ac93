// Every bad-input class of docs/abi.md §10 on every entry point: a specific status,
// a message naming the function and argument, nothing written, inputs intact.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>

#include "test_util.h"

using t::Tensor;

namespace {

// Runs `call`, which must fail with `status` and a message that contains
// `function` and `needle`.
void expect_failure(const std::function<int32_t()>& call, int32_t status, const std::string& function,
                    const std::string& needle) {
  Q4_clear_error();
  const int32_t got = call();
  const std::string msg = Q4_last_error();
  INFO("message: " << msg);
  CHECK(got == status);
  CHECK(msg.find(function) == 0);
  CHECK(msg.find(needle) != std::string::npos);
  CHECK(std::string(Q4_status_string(got)) != "unknown status");
}

// A valid NVFP4 quantize setup that individual cases then break.
struct QuantSetup {
  Tensor x{{4, 32}, t::f32()};
  Tensor q{{4, 16}, t::u8()};
  Tensor s{{4, 2}, t::u8()};
  QuantSetup() {
    for (int i = 0; i < 128; ++i) x.set(i, static_cast<float>(i % 7) - 3.0f);
  }
  int32_t run(float g = 0.0f, int32_t layout = Q4_SCALE_LINEAR, const Q4_op_options* o = nullptr) {
    return NVFP4_quantize(x.t(), q.t(), s.t(), layout, g, nullptr, o);
  }
};

}  // namespace

TEST_CASE("NVFP4_quantize rejects bad inputs without writing", "[validation]") {
  QuantSetup u;
  const auto x0 = u.x.snapshot(), q0 = u.q.snapshot(), s0 = u.s.snapshot();
  const std::string fn = "NVFP4_quantize";

  expect_failure([&] { return NVFP4_quantize(nullptr, u.q.t(), u.s.t(), 0, 0, nullptr, nullptr); },
                 Q4_ERR_NULL_POINTER, fn, "'x'");
  expect_failure([&] { return NVFP4_quantize(u.x.t(), nullptr, u.s.t(), 0, 0, nullptr, nullptr); },
                 Q4_ERR_NULL_POINTER, fn, "'qdata'");
  expect_failure([&] { return NVFP4_quantize(u.x.t(), u.q.t(), nullptr, 0, 0, nullptr, nullptr); },
                 Q4_ERR_NULL_POINTER, fn, "'scale'");
  expect_failure([&] { return u.run(-1.0f); }, Q4_ERR_INVALID_ARGUMENT, fn, "'global_scale'");
  expect_failure([&] { return u.run(std::numeric_limits<float>::quiet_NaN()); }, Q4_ERR_INVALID_ARGUMENT, fn,
                 "'global_scale'");
  expect_failure([&] { return u.run(INFINITY); }, Q4_ERR_INVALID_ARGUMENT, fn, "'global_scale'");
  expect_failure([&] { return u.run(0.0f, 7); }, Q4_ERR_INVALID_ARGUMENT, fn, "'scale_layout'");
  {
    QuantSetup v;
    v.x.dl.dtype = DLDataType{kDLInt, 32, 1};
    expect_failure([&] { return v.run(); }, Q4_ERR_DTYPE, fn, "'x'");
    v.x.dl.dtype = t::u8();
    expect_failure([&] { return v.run(); }, Q4_ERR_DTYPE, fn, "float32");
    v.x.dl.dtype = DLDataType{kDLFloat, 32, 4};  // lanes
    expect_failure([&] { return v.run(); }, Q4_ERR_DTYPE, fn, "lanes 4");
  }
  {
    QuantSetup v;
    v.x.dl.device.device_type = kDLCUDA;
    expect_failure([&] { return v.run(); }, Q4_ERR_DEVICE, fn, "kDLCUDA");
    v.x.dl.device.device_type = static_cast<DLDeviceType>(4);
    expect_failure([&] { return v.run(); }, Q4_ERR_DEVICE, fn, "'x'");
  }
  {
    QuantSetup v;
    v.x.dl.ndim = 0;
    expect_failure([&] { return v.run(); }, Q4_ERR_SHAPE, fn, "ndim");
    v.x.dl.ndim = -1;
    expect_failure([&] { return v.run(); }, Q4_ERR_SHAPE, fn, "ndim");
    v.x.dl.ndim = 2;
    v.x.dl.shape = nullptr;
    expect_failure([&] { return v.run(); }, Q4_ERR_NULL_POINTER, fn, "shape");
  }
  {
    QuantSetup v;
    v.x.shape = {4, 24};  // K not a multiple of 16 (fewer elements: still in bounds)
    v.x.dl.shape = v.x.shape.data();
    expect_failure([&] { return v.run(); }, Q4_ERR_SHAPE, fn, "multiple of 16");
    v.x.shape = {4, -32};
    expect_failure([&] { return v.run(); }, Q4_ERR_SHAPE, fn, "negative");
  }
  {
    QuantSetup v;
    v.q.shape = {4, 15};
    v.q.dl.shape = v.q.shape.data();
    expect_failure([&] { return v.run(); }, Q4_ERR_SHAPE, fn, "'qdata'");
    QuantSetup w;
    w.s.shape = {4, 3};
    w.s.dl.shape = w.s.shape.data();
    expect_failure([&] { return w.run(); }, Q4_ERR_SHAPE, fn, "'scale'");
    expect_failure([&] { return w.run(0.0f, Q4_SCALE_SWIZZLED); }, Q4_ERR_SHAPE, fn, "swizzled");
  }
  {
    QuantSetup v;
    v.s.dl.dtype = t::f16();
    expect_failure([&] { return v.run(); }, Q4_ERR_DTYPE, fn, "'scale'");
    QuantSetup w;
    w.q.dl.dtype = t::f32();
    expect_failure([&] { return w.run(); }, Q4_ERR_DTYPE, fn, "'qdata'");
  }
  {
    QuantSetup v;
    v.x.set_strides({1, 4});  // column-major
    expect_failure([&] { return v.run(); }, Q4_ERR_STRIDES, fn, "stride");
  }
  {
    QuantSetup v;
    v.x.dl.byte_offset = 2;  // fp32 misaligned
    v.x.shape = {2, 32};
    expect_failure([&] { return v.run(); }, Q4_ERR_ALIGNMENT, fn, "aligned");
    v.x.dl.byte_offset = ~uint64_t{0};
    expect_failure([&] { return v.run(); }, Q4_ERR_OVERFLOW, fn, "byte_offset");
  }
  {
    QuantSetup v;
    v.x.shape = {int64_t{1} << 40, int64_t{1} << 40};
    expect_failure([&] { return v.run(); }, Q4_ERR_OVERFLOW, fn, "'x'");
  }
  {
    QuantSetup v;
    v.x.dl.data = nullptr;
    expect_failure([&] { return v.run(); }, Q4_ERR_NULL_POINTER, fn, "data is NULL");
  }
  {
    // qdata overlapping x; scale overlapping qdata.
    QuantSetup v;
    v.q.dl.data = v.x.data();
    expect_failure([&] { return v.run(); }, Q4_ERR_ALIASING, fn, "overlaps argument 'x'");
    QuantSetup w;
    w.s.dl.data = w.q.data() + 4;
    expect_failure([&] { return w.run(); }, Q4_ERR_ALIASING, fn, "'scale'");
  }
  {
    QuantSetup v;
    v.x.set(77, std::numeric_limits<float>::quiet_NaN());
    const auto q_before = v.q.snapshot();
    expect_failure([&] { return v.run(); }, Q4_ERR_NON_FINITE, fn, "flat index 77");
    CHECK(v.q.snapshot() == q_before);
    v.x.set(77, 1.0f);
    v.x.set(3, -INFINITY);
    expect_failure([&] { return v.run(); }, Q4_ERR_NON_FINITE, fn, "flat index 3");
  }
  {
    QuantSetup v;
    Q4_op_options o{};
    Q4_op_options_init(&o);
    o.struct_size = 4;
    expect_failure([&] { return v.run(0, 0, &o); }, Q4_ERR_INVALID_ARGUMENT, fn, "struct_size");
    Q4_op_options_init(&o);
    o.compute_path = 9;
    expect_failure([&] { return v.run(0, 0, &o); }, Q4_ERR_INVALID_ARGUMENT, fn, "compute_path");
    Q4_op_options_init(&o);
    o.reserved[2] = 1;
    expect_failure([&] { return v.run(0, 0, &o); }, Q4_ERR_INVALID_ARGUMENT, fn, "reserved");
    Q4_op_options_init(&o);
    o.num_threads = -2;
    expect_failure([&] { return v.run(0, 0, &o); }, Q4_ERR_INVALID_ARGUMENT, fn, "num_threads");
    Q4_op_options_init(&o);
    o.target = Q4_TARGET_CUDA;
    expect_failure([&] { return v.run(0, 0, &o); }, Q4_ERR_NOT_AVAILABLE, fn, "CUDA");
  }
  // The untouched setup still has its original bytes everywhere.
  CHECK(u.x.snapshot() == x0);
  CHECK(u.q.snapshot() == q0);
  CHECK(u.s.snapshot() == s0);
}

TEST_CASE("NVFP4_dequantize / linear / scaled_mm reject bad inputs", "[validation]") {
  Tensor q({8, 16}, t::u8()), s({8, 2}, t::u8()), out({8, 32}, t::f32());
  q.fill(0x21);
  s.fill(0x38);
  const auto out0 = out.snapshot();
  expect_failure([&] { return NVFP4_dequantize(q.t(), s.t(), 0, 0.0f, out.t(), nullptr); },
                 Q4_ERR_INVALID_ARGUMENT, "NVFP4_dequantize", "'global_scale'");
  expect_failure([&] { return NVFP4_dequantize(q.t(), s.t(), 0, 1.0f, nullptr, nullptr); },
                 Q4_ERR_NULL_POINTER, "NVFP4_dequantize", "'out'");
  Tensor out_u8({8, 32}, t::u8());
  expect_failure([&] { return NVFP4_dequantize(q.t(), s.t(), 0, 1.0f, out_u8.t(), nullptr); }, Q4_ERR_DTYPE,
                 "NVFP4_dequantize", "'out'");
  {
    Tensor alias = q;  // out over the packed input
    alias.dl.dtype = t::f32();
    alias.shape = {1, 16};
    alias.dl.shape = alias.shape.data();
    Tensor q1({1, 8}, t::u8()), s1({1, 1}, t::u8());
    q1.dl.data = q.data();
    alias.dl.data = q.data();
    expect_failure([&] { return NVFP4_dequantize(q1.t(), s1.t(), 0, 1.0f, alias.t(), nullptr); },
                   Q4_ERR_ALIASING, "NVFP4_dequantize", "'qdata'");
  }
  CHECK(out.snapshot() == out0);

  // linear: K mismatch between x and the weight bytes, leading dims, bias.
  Tensor x({3, 32}, t::f32()), y({3, 8}, t::f32());
  Tensor x_bad({3, 48}, t::f32());
  expect_failure([&] { return NVFP4_linear(x_bad.t(), q.t(), s.t(), 0, 1.0f, nullptr, y.t(), nullptr); },
                 Q4_ERR_SHAPE, "NVFP4_linear", "'w_qdata'");
  Tensor y_bad({4, 8}, t::f32());
  expect_failure([&] { return NVFP4_linear(x.t(), q.t(), s.t(), 0, 1.0f, nullptr, y_bad.t(), nullptr); },
                 Q4_ERR_SHAPE, "NVFP4_linear", "leading dimensions");
  Tensor bias({7}, t::f32());
  expect_failure([&] { return NVFP4_linear(x.t(), q.t(), s.t(), 0, 1.0f, bias.t(), y.t(), nullptr); },
                 Q4_ERR_SHAPE, "NVFP4_linear", "'bias'");
  Q4_op_options o{};
  Q4_op_options_init(&o);
  o.backend = Q4_BACKEND_NF4_KERNEL;
  expect_failure([&] { return NVFP4_linear(x.t(), q.t(), s.t(), 0, 1.0f, nullptr, y.t(), &o); },
                 Q4_ERR_UNSUPPORTED, "NVFP4_linear", "nf4-kernel");
  Q4_op_options_init(&o);
  o.backend = Q4_BACKEND_DEQUANT_MATMUL;
  o.compute_path = Q4_PATH_KERNEL_ONLY;
  expect_failure([&] { return NVFP4_linear(x.t(), q.t(), s.t(), 0, 1.0f, nullptr, y.t(), &o); },
                 Q4_ERR_INVALID_ARGUMENT, "NVFP4_linear", "KernelOnly");
  expect_failure([&] { return NVFP4_linear(x.t(), q.t(), s.t(), 0, 1.0f, nullptr, x.t(), nullptr); },
                 Q4_ERR_SHAPE, "NVFP4_linear", "'out'");  // out = x: N = 32 is not the 8 rows of w_qdata

  // scaled_mm: alpha, B's bytes, scale sizes, aliasing.
  Tensor mm({8, 8}, t::f32());
  expect_failure(
      [&] { return NVFP4_scaled_mm(q.t(), s.t(), q.t(), s.t(), 0, NAN, nullptr, mm.t(), nullptr); },
      Q4_ERR_INVALID_ARGUMENT, "NVFP4_scaled_mm", "'alpha'");
  expect_failure(
      [&] { return NVFP4_scaled_mm(q.t(), s.t(), q.t(), s.t(), 0, -1.0f, nullptr, mm.t(), nullptr); },
      Q4_ERR_INVALID_ARGUMENT, "NVFP4_scaled_mm", "'alpha'");
  Tensor bq({7, 16}, t::u8());
  expect_failure(
      [&] { return NVFP4_scaled_mm(q.t(), s.t(), bq.t(), s.t(), 0, 1.0f, nullptr, mm.t(), nullptr); },
      Q4_ERR_SHAPE, "NVFP4_scaled_mm", "'b_qdata'");
  Tensor q_odd({8, 15}, t::u8());
  expect_failure(
      [&] { return NVFP4_scaled_mm(q_odd.t(), s.t(), q.t(), s.t(), 0, 1.0f, nullptr, mm.t(), nullptr); },
      Q4_ERR_SHAPE, "NVFP4_scaled_mm", "multiple of 16");
  expect_failure(
      [&] { return NVFP4_scaled_mm(q.t(), s.t(), q.t(), s.t(), 1, 1.0f, nullptr, mm.t(), nullptr); },
      Q4_ERR_SHAPE, "NVFP4_scaled_mm", "'a_scale'");
  {
    Tensor mm_alias = mm;
    mm_alias.dl.data = s.data();
    mm_alias.shape = {1, 4};
    mm_alias.dl.shape = mm_alias.shape.data();
    Tensor a1({1, 16}, t::u8()), as1({1, 2}, t::u8()), b4({4, 16}, t::u8()), bs4({4, 2}, t::u8());
    mm_alias.dl.data = bs4.data();
    expect_failure(
        [&] {
          return NVFP4_scaled_mm(a1.t(), as1.t(), b4.t(), bs4.t(), 0, 1.0f, nullptr, mm_alias.t(), nullptr);
        },
        Q4_ERR_ALIASING, "NVFP4_scaled_mm", "'b_scale'");
  }
}

TEST_CASE("NF4 entry points reject bad inputs", "[validation]") {
  Tensor x({100}, t::f32()), q({50}, t::u8()), am({2}, t::f32());
  expect_failure([&] { return NF4_quantize(x.t(), q.t(), am.t(), 48, nullptr); }, Q4_ERR_INVALID_ARGUMENT,
                 "NF4_quantize", "'blocksize'");
  expect_failure([&] { return NF4_quantize(x.t(), q.t(), am.t(), 32, nullptr); }, Q4_ERR_SHAPE,
                 "NF4_quantize", "'absmax'");
  Tensor am_f16({2}, t::f16());
  expect_failure([&] { return NF4_quantize(x.t(), q.t(), am_f16.t(), 64, nullptr); }, Q4_ERR_DTYPE,
                 "NF4_quantize", "'absmax'");
  Tensor q_small({49}, t::u8());
  expect_failure([&] { return NF4_quantize(x.t(), q_small.t(), am.t(), 64, nullptr); }, Q4_ERR_SHAPE,
                 "NF4_quantize", "'qdata'");
  x.set(42, NAN);
  expect_failure([&] { return NF4_quantize(x.t(), q.t(), am.t(), 64, nullptr); }, Q4_ERR_NON_FINITE,
                 "NF4_quantize", "flat index 42");
  x.set(42, 0.0f);

  Tensor out({100}, t::f32());
  expect_failure([&] { return NF4_dequantize(q.t(), nullptr, out.t(), nullptr); }, Q4_ERR_NULL_POINTER,
                 "NF4_dequantize", "'state'");
  NF4_state st{};
  st.struct_size = sizeof st;
  st.blocksize = 64;
  st.absmax = am.t();
  REQUIRE(NF4_dequantize(q.t(), &st, out.t(), nullptr) == Q4_OK);
  st.struct_size = 3;
  expect_failure([&] { return NF4_dequantize(q.t(), &st, out.t(), nullptr); }, Q4_ERR_INVALID_ARGUMENT,
                 "NF4_dequantize", "struct_size");
  st.struct_size = sizeof st;
  st.blocksize = 100;
  expect_failure([&] { return NF4_dequantize(q.t(), &st, out.t(), nullptr); }, Q4_ERR_INVALID_ARGUMENT,
                 "NF4_dequantize", "blocksize");
  st.blocksize = 64;
  st.absmax = nullptr;
  expect_failure([&] { return NF4_dequantize(q.t(), &st, out.t(), nullptr); }, Q4_ERR_NULL_POINTER,
                 "NF4_dequantize", "state->absmax");
  // Nested statistics need the uint8 codes and the 256-entry map.
  Tensor qam({2}, t::u8()), nam({1}, t::f32()), map({256}, t::f32());
  st.absmax = am.t();
  st.nested_absmax = nam.t();
  expect_failure([&] { return NF4_dequantize(q.t(), &st, out.t(), nullptr); }, Q4_ERR_DTYPE, "NF4_dequantize",
                 "state->absmax");
  st.absmax = qam.t();
  expect_failure([&] { return NF4_dequantize(q.t(), &st, out.t(), nullptr); }, Q4_ERR_NULL_POINTER,
                 "NF4_dequantize", "nested_quant_map");
  Tensor map_small({255}, t::f32());
  st.nested_quant_map = map_small.t();
  expect_failure([&] { return NF4_dequantize(q.t(), &st, out.t(), nullptr); }, Q4_ERR_SHAPE, "NF4_dequantize",
                 "nested_quant_map");
  st.nested_quant_map = map.t();
  st.nested_offset = INFINITY;
  expect_failure([&] { return NF4_dequantize(q.t(), &st, out.t(), nullptr); }, Q4_ERR_INVALID_ARGUMENT,
                 "NF4_dequantize", "nested_offset");
  st.nested_offset = 0;
  REQUIRE(NF4_dequantize(q.t(), &st, out.t(), nullptr) == Q4_OK);
  Tensor qmap({15}, t::f32());
  st.quant_map = qmap.t();
  expect_failure([&] { return NF4_dequantize(q.t(), &st, out.t(), nullptr); }, Q4_ERR_SHAPE, "NF4_dequantize",
                 "quant_map");

  // scaled_mm: weight bytes for N*K, math mode, aliasing of absmax.
  NF4_state ws{};
  ws.struct_size = sizeof ws;
  ws.blocksize = 64;
  ws.absmax = am.t();
  Tensor xx({2, 10}, t::f32()), yy({2, 10}, t::f32());
  REQUIRE(NF4_scaled_mm(xx.t(), q.t(), &ws, nullptr, yy.t(), nullptr) == Q4_OK);
  Tensor yy_bad({2, 9}, t::f32());
  expect_failure([&] { return NF4_scaled_mm(xx.t(), q.t(), &ws, nullptr, yy_bad.t(), nullptr); },
                 Q4_ERR_SHAPE, "NF4_scaled_mm", "'out'");  // a wrong out is reported against out
  Q4_op_options o{};
  Q4_op_options_init(&o);
  o.backend = Q4_BACKEND_NVFP4_KERNEL;
  expect_failure([&] { return NF4_scaled_mm(xx.t(), q.t(), &ws, nullptr, yy.t(), &o); }, Q4_ERR_UNSUPPORTED,
                 "NF4_scaled_mm", "nvfp4-kernel");
  Tensor yy_alias({2, 1}, t::f32());
  yy_alias.dl.data = am.data();
  Tensor xx1({2, 10}, t::f32());
  NF4_state ws1 = ws;
  Tensor q1({5}, t::u8()), am1({1}, t::f32());
  ws1.absmax = am1.t();
  yy_alias.dl.data = am1.data();
  expect_failure([&] { return NF4_scaled_mm(xx1.t(), q1.t(), &ws1, nullptr, yy_alias.t(), nullptr); },
                 Q4_ERR_ALIASING, "NF4_scaled_mm", "state->absmax");
}

TEST_CASE("swizzle helpers and misc entry points reject bad inputs", "[validation]") {
  Tensor lin({3, 5}, t::u8()), sw({128 * 4}, t::u8());  // needs 128 x 8
  expect_failure([&] { return NVFP4_swizzle_scales(lin.t(), sw.t()); }, Q4_ERR_SHAPE, "NVFP4_swizzle_scales",
                 "'swizzled'");
  expect_failure([&] { return NVFP4_swizzle_scales(nullptr, sw.t()); }, Q4_ERR_NULL_POINTER,
                 "NVFP4_swizzle_scales", "'linear'");
  Tensor lin_f32({3, 5}, t::f32());
  expect_failure([&] { return NVFP4_unswizzle_scales(sw.t(), lin_f32.t()); }, Q4_ERR_DTYPE,
                 "NVFP4_unswizzle_scales", "'linear'");
  int64_t bytes = 0;
  expect_failure([&] { return NVFP4_swizzled_scale_size(-1, 16, &bytes); }, Q4_ERR_INVALID_ARGUMENT,
                 "NVFP4_swizzled_scale_size", "'rows'");
  expect_failure([&] { return NVFP4_swizzled_scale_size(1, 17, &bytes); }, Q4_ERR_SHAPE,
                 "NVFP4_swizzled_scale_size", "'k'");
  expect_failure([&] { return NVFP4_swizzled_scale_size(1, 16, nullptr); }, Q4_ERR_NULL_POINTER,
                 "NVFP4_swizzled_scale_size", "'bytes'");
  REQUIRE(NVFP4_swizzled_scale_size(130, 80, &bytes) == Q4_OK);
  CHECK(bytes == 256 * 8);
  expect_failure([&] { return Q4_op_options_init(nullptr); }, Q4_ERR_NULL_POINTER, "Q4_op_options_init",
                 "'opts'");
  expect_failure([&] { return Q4_set_max_isa(1234); }, Q4_ERR_INVALID_ARGUMENT, "Q4_set_max_isa", "'isa'");
  expect_failure([&] { return Q4_set_log_level(9); }, Q4_ERR_INVALID_ARGUMENT, "Q4_set_log_level", "'level'");
  Q4_capabilities caps{};
  caps.struct_size = 4;
  expect_failure([&] { return Q4_get_capabilities(&caps); }, Q4_ERR_INVALID_ARGUMENT, "Q4_get_capabilities",
                 "struct_size");
  expect_failure([&] { return Q4_get_capabilities(nullptr); }, Q4_ERR_NULL_POINTER, "Q4_get_capabilities",
                 "'caps'");
}

TEST_CASE("status strings are static and distinct", "[validation]") {
  CHECK(std::string(Q4_status_string(Q4_OK)) == "ok");
  CHECK(std::string(Q4_status_string(12345)) == "unknown status");
  for (int32_t s = 1; s <= 21; ++s) {
    CHECK(std::string(Q4_status_string(s)) != "unknown status");
    CHECK(std::string(Q4_status_string(s)) != std::string(Q4_status_string(s == 1 ? 2 : s - 1)));
  }
}

TEST_CASE("last error is per thread", "[validation]") {
  Q4_clear_error();
  CHECK(std::string(Q4_last_error()).empty());
  CHECK(NVFP4_quantize(nullptr, nullptr, nullptr, 0, 0, nullptr, nullptr) == Q4_ERR_NULL_POINTER);
  std::string other;
  std::thread th([&] { other = Q4_last_error(); });
  th.join();
  CHECK(other.empty());
  CHECK(!std::string(Q4_last_error()).empty());
}

TEST_CASE("empty tensors with huge leading dimensions return at once", "[validation]") {
  // Found by fuzz_api (timeout): [2^40, 0] is a valid, empty tensor; no
  // driver may loop over its 2^40 empty rows.
  int64_t xs[2] = {int64_t{1} << 40, 0}, qs[1] = {0}, ss[1] = {0};
  float dummy = 0;
  uint8_t byte = 0;
  DLTensor x{&dummy, {kDLCPU, 0}, 2, t::f32(), xs, nullptr, 0};
  DLTensor q{&byte, {kDLCPU, 0}, 1, t::u8(), qs, nullptr, 0};
  DLTensor s{&byte + 0, {kDLCPU, 0}, 1, t::u8(), ss, nullptr, 0};
  float g = 0;
  CHECK(NVFP4_quantize(&x, &q, &s, Q4_SCALE_LINEAR, 0.0f, &g, nullptr) == Q4_OK);
  CHECK(g == 1.0f);
  CHECK(NVFP4_quantize(&x, &q, &s, Q4_SCALE_SWIZZLED, 0.0f, &g, nullptr) == Q4_OK);  // fuzz: swizzle timeout
  CHECK(NVFP4_dequantize(&q, &s, Q4_SCALE_LINEAR, 1.0f, &x, nullptr) == Q4_OK);
  Q4_session* session = nullptr;
  REQUIRE(Q4_session_create(t::cpu_session(), &session) == Q4_OK);
  Q4_weight_bundle b{};
  Q4_weight_bundle_init(&b);
  b.source = Q4_WEIGHT_FLOAT;
  b.weight = &x;
  Q4_linear* l = nullptr;
  CHECK(Q4_linear_create(session, &b, &l) == Q4_OK);
  Q4_linear_destroy(l);
  Q4_session_destroy(session);
}

TEST_CASE("NVFP4 block scales with the sign bit set are rejected on every product path", "[validation]") {
  // docs/formats.md, E4M3: scale bytes >= 0x80 are invalid input; the error
  // names the argument and the first offending (row, block), nothing is written.
  Tensor q({8, 16}, t::u8()), s({8, 2}, t::u8()), bad({8, 2}, t::u8()), out({8, 32}, t::f32());
  q.fill(0x21);
  s.fill(0x38);
  bad.fill(0x38);
  bad.data()[5] = 0x80;  // -0: the sign bit alone is enough
  bad.data()[11] = 0xB8;
  const auto out0 = out.snapshot();
  expect_failure([&] { return NVFP4_dequantize(q.t(), bad.t(), 0, 1.0f, out.t(), nullptr); },
                 Q4_ERR_INVALID_ARGUMENT, "NVFP4_dequantize", "'scale'");
  expect_failure([&] { return NVFP4_dequantize(q.t(), bad.t(), 0, 1.0f, out.t(), nullptr); },
                 Q4_ERR_INVALID_ARGUMENT, "NVFP4_dequantize", "scale [2, 1] (flat index 5) is 0x80");
  CHECK(out.snapshot() == out0);
  Tensor x({3, 32}, t::f32()), y({3, 8}, t::f32());
  expect_failure([&] { return NVFP4_linear(x.t(), q.t(), bad.t(), 0, 1.0f, nullptr, y.t(), nullptr); },
                 Q4_ERR_INVALID_ARGUMENT, "NVFP4_linear", "'w_scale'");
  Tensor mm({8, 8}, t::f32());
  expect_failure(
      [&] { return NVFP4_scaled_mm(q.t(), bad.t(), q.t(), s.t(), 0, 1.0f, nullptr, mm.t(), nullptr); },
      Q4_ERR_INVALID_ARGUMENT, "NVFP4_scaled_mm", "'a_scale'");
  expect_failure(
      [&] { return NVFP4_scaled_mm(q.t(), s.t(), q.t(), bad.t(), 0, 1.0f, nullptr, mm.t(), nullptr); },
      Q4_ERR_INVALID_ARGUMENT, "NVFP4_scaled_mm", "'b_scale'");
  // Swizzled: only the logical scales are read (padding is ignored), and the
  // index reported is the logical one.
  Tensor sw({t::swizzled_bytes(8, 32)}, t::u8()), swbad({t::swizzled_bytes(8, 32)}, t::u8());
  REQUIRE(NVFP4_swizzle_scales(s.t(), sw.t()) == Q4_OK);
  sw.data()[sw.dl.shape[0] - 1] = 0xFF;  // padding byte (row 127): not a scale
  REQUIRE(NVFP4_dequantize(q.t(), sw.t(), 1, 1.0f, out.t(), nullptr) == Q4_OK);
  REQUIRE(NVFP4_swizzle_scales(bad.t(), swbad.t()) == Q4_OK);
  expect_failure([&] { return NVFP4_dequantize(q.t(), swbad.t(), 1, 1.0f, out.t(), nullptr); },
                 Q4_ERR_INVALID_ARGUMENT, "NVFP4_dequantize", "scale [2, 1] (flat index 5)");
  // The GEMV's M on the host checks the scales while the product reads
  // them (docs/abi.md, section 10): the same refusal, nothing written.
  for (int32_t mode : {Q4_MATH_EXACT, Q4_MATH_FAST}) {
    for (int64_t m : {1, 4, 16, 17}) {
      for (int64_t k : {128, 4096, 272}) {
        INFO("mode " << mode << " M " << m << " K " << k);
        const int64_t n = 40, kb = k / 16;
        Tensor wq({n, k / 2}, t::u8()), ws({n, kb}, t::u8()), xa({m, k}, t::f32());
        wq.fill(0x5a);
        ws.fill(0x30);
        xa.fill(0);
        // Zeroed: Q4_op_options_init keeps a struct_size it finds (docs/abi.md, section 4).
        Q4_op_options o{};
        Q4_op_options_init(&o);
        o.math_mode = mode;
        for (DLDataType odt : {t::f32(), t::bf16()}) {
          Tensor ya({m, n}, odt);
          ya.fill(0x3c);
          const int32_t rc = NVFP4_linear(xa.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, ya.t(), &o);
          INFO(Q4_last_error());
          REQUIRE(rc == Q4_OK);
          for (int64_t at : {int64_t{0}, 17 * kb + 3, n * kb - 1}) {
            Tensor wbad({n, kb}, t::u8());
            std::memcpy(wbad.data(), ws.data(), static_cast<size_t>(n * kb));
            wbad.data()[at] = 0xB0;
            if (at == 0) wbad.data()[n * kb - 1] = 0x80;  // the first one is reported
            ya.fill(0x3c);
            const auto y0 = ya.snapshot();
            const int32_t isa = Q4_last_isa_used();
            const std::string where = "scale [" + std::to_string(at / kb) + ", " + std::to_string(at % kb) +
                                      "] (flat index " + std::to_string(at) + ") is 0xB0";
            expect_failure(
                [&] { return NVFP4_linear(xa.t(), wq.t(), wbad.t(), 0, 1.0f, nullptr, ya.t(), &o); },
                Q4_ERR_INVALID_ARGUMENT, "NVFP4_linear", where);
            CHECK(ya.snapshot() == y0);
            CHECK(Q4_last_isa_used() == isa);
            // The same scales swizzled (read piece by piece by the GEMV's
            // tasks): the same refusal, the logical index.
            Tensor wsw({t::swizzled_bytes(n, k)}, t::u8());
            REQUIRE(NVFP4_swizzle_scales(wbad.t(), wsw.t()) == Q4_OK);
            expect_failure(
                [&] { return NVFP4_linear(xa.t(), wq.t(), wsw.t(), 1, 1.0f, nullptr, ya.t(), &o); },
                Q4_ERR_INVALID_ARGUMENT, "NVFP4_linear", where);
            CHECK(ya.snapshot() == y0);
          }
        }
      }
    }
  }
  // Linears check packed weights once, at prepare time.
  Q4_session* sess = nullptr;
  REQUIRE(Q4_session_create(t::cpu_session(), &sess) == Q4_OK);
  Q4_weight_bundle pb = t::packed_bundle(Q4_FORMAT_NVFP4, q, bad, Q4_SCALE_LINEAR, 1.0f, 8, 32);
  Q4_linear* lin = nullptr;
  expect_failure([&] { return Q4_linear_create(sess, &pb, &lin); }, Q4_ERR_INVALID_ARGUMENT,
                 "Q4_linear_create", "'weight->scale'");
  CHECK(lin == nullptr);
  pb.scale = s.t();
  REQUIRE(Q4_linear_create(sess, &pb, &lin) == Q4_OK);
  CHECK(Q4_linear_destroy(lin) == Q4_OK);
  CHECK(Q4_session_destroy(sess) == Q4_OK);
}
