// One validator per operation: the same inputs give the same status and the
// same argument name whether the tensors live on the host or on a CUDA
// device. Device tensors here are host buffers labelled kDLCUDA: validation
// never dereferences them, and a valid call then reaches the router, which
// reports that no CUDA backend is loaded (or runs it when one is).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "nvfp4/nvfp4.h"
#include "test_util.h"

namespace {

using t::Tensor;

struct Outcome {
  int32_t status;
  std::string message;
};

// Runs `call` once with every tensor on the host and once with every tensor
// labelled as CUDA device memory.
std::pair<Outcome, Outcome> both(std::vector<Tensor*> tensors, const std::function<int32_t()>& call) {
  Outcome host{call(), Q4_last_error()};
  for (Tensor* x : tensors) x->dl.device = DLDevice{kDLCUDA, 0};
  Outcome dev{call(), Q4_last_error()};
  for (Tensor* x : tensors) x->dl.device = DLDevice{kDLCPU, 0};
  return {host, dev};
}

std::string argument_of(const std::string& message) {
  const size_t a = message.find("argument '");
  if (a == std::string::npos) return "";
  const size_t b = message.find('\'', a + 10);
  return message.substr(a + 10, b - a - 10);
}

void same_rule(std::vector<Tensor*> tensors, const std::function<int32_t()>& call, int32_t expect,
               const char* argument) {
  const auto [host, dev] = both(std::move(tensors), call);
  INFO("host: " << host.message << "\ndevice: " << dev.message);
  CHECK(host.status == expect);
  CHECK(dev.status == expect);
  CHECK(argument_of(host.message) == argument);
  CHECK(argument_of(dev.message) == argument);
}

bool cuda_ready() {
  Q4_capabilities caps{};
  caps.struct_size = sizeof caps;
  Q4_get_capabilities(&caps);
  return caps.cuda_state == Q4_CUDA_READY;
}

}  // namespace

TEST_CASE("invalid inputs fail the same way on host and device tensors", "[dispatch]") {
  Tensor x({4, 24}, t::f32()), q({4, 12}, t::u8()), s({4, 1}, t::u8());
  same_rule(
      {&x, &q, &s}, [&] { return NVFP4_quantize(x.t(), q.t(), s.t(), 0, 0.0f, nullptr, nullptr); },
      Q4_ERR_SHAPE, "x");

  Tensor q2({4, 16}, t::u8()), s_bad({4, 3}, t::u8()), out({4, 32}, t::f32());
  same_rule(
      {&q2, &s_bad, &out}, [&] { return NVFP4_dequantize(q2.t(), s_bad.t(), 0, 1.0f, out.t(), nullptr); },
      Q4_ERR_SHAPE, "scale");

  Tensor xa({3, 32}, t::f32()), wq({8, 16}, t::u8()), ws({8, 2}, t::u8()), y_bad({3, 9}, t::f32());
  same_rule(
      {&xa, &wq, &ws, &y_bad},
      [&] { return NVFP4_linear(xa.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, y_bad.t(), nullptr); },
      Q4_ERR_SHAPE, "out");

  Tensor aq({2, 16}, t::u8()), as({2, 2}, t::u8()), mm({2, 8}, t::f32());
  same_rule(
      {&aq, &as, &wq, &ws, &mm},
      [&] { return NVFP4_scaled_mm(aq.t(), as.t(), wq.t(), ws.t(), 0, NAN, nullptr, mm.t(), nullptr); },
      Q4_ERR_INVALID_ARGUMENT, "alpha");

  // The options are honoured the same way everywhere.
  Tensor y({3, 8}, t::f32());
  Q4_op_options o{};
  Q4_op_options_init(&o);
  o.backend = Q4_BACKEND_NF4_KERNEL;
  same_rule(
      {&xa, &wq, &ws, &y}, [&] { return NVFP4_linear(xa.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, y.t(), &o); },
      Q4_ERR_UNSUPPORTED, "opts->backend");
  Q4_op_options_init(&o);
  o.math_mode = Q4_MATH_FAST;
  o.compute_path = Q4_PATH_DEQUANT_MATMUL_ONLY;
  same_rule(
      {&xa, &wq, &ws, &y}, [&] { return NVFP4_linear(xa.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, y.t(), &o); },
      Q4_ERR_UNSUPPORTED, "opts->math_mode");

  // NF4: the state is validated completely on both sides.
  Tensor nq({40}, t::u8()), am({2}, t::f32()), nout({80}, t::f32());
  NF4_state st{};
  st.struct_size = sizeof st;
  st.blocksize = 48;
  st.absmax = am.t();
  same_rule(
      {&nq, &am, &nout}, [&] { return NF4_dequantize(nq.t(), &st, nout.t(), nullptr); },
      Q4_ERR_INVALID_ARGUMENT, "state->blocksize");
  st.blocksize = 64;
  Tensor nx({2, 10}, t::f32()), ny({2, 8}, t::f32()), nbias({7}, t::f32()), nw({40}, t::u8());
  same_rule(
      {&nx, &nw, &am, &ny, &nbias},
      [&] { return NF4_scaled_mm(nx.t(), nw.t(), &st, nbias.t(), ny.t(), nullptr); }, Q4_ERR_SHAPE, "bias");
}

TEST_CASE("an empty product is valid on every device", "[dispatch]") {
  // M = 0: K comes from B's bytes; nothing is computed, so no device is needed.
  Tensor aq({0, 16}, t::u8()), as({0, 2}, t::u8()), bq({8, 16}, t::u8()), bs({8, 2}, t::u8()),
      out({0, 8}, t::f32());
  const auto [host, dev] = both({&aq, &as, &bq, &bs, &out}, [&] {
    return NVFP4_scaled_mm(aq.t(), as.t(), bq.t(), bs.t(), 0, 1.0f, nullptr, out.t(), nullptr);
  });
  INFO(host.message << " / " << dev.message);
  CHECK(host.status == Q4_OK);
  CHECK(dev.status == Q4_OK);
}

TEST_CASE("placement: one device per call, no ordinary host memory beside device tensors", "[dispatch]") {
  Tensor xa({3, 32}, t::f32()), wq({8, 16}, t::u8()), ws({8, 2}, t::u8()), y({3, 8}, t::f32());
  xa.dl.device = DLDevice{kDLCUDA, 0};
  wq.dl.device = DLDevice{kDLCUDA, 0};
  ws.dl.device = DLDevice{kDLCUDA, 1};
  y.dl.device = DLDevice{kDLCUDA, 0};
  CHECK(NVFP4_linear(xa.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, y.t(), nullptr) == Q4_ERR_DEVICE);
  CHECK(argument_of(Q4_last_error()) == "w_scale");
  ws.dl.device = DLDevice{kDLCPU, 0};
  CHECK(NVFP4_linear(xa.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, y.t(), nullptr) == Q4_ERR_DEVICE);
  CHECK(std::string(Q4_last_error()).find("ordinary host memory") != std::string::npos);
  // Managed or pinned memory may sit beside device tensors.
  ws.dl.device = DLDevice{kDLCUDAManaged, 0};
  const int32_t st = NVFP4_linear(xa.t(), wq.t(), ws.t(), 0, 1.0f, nullptr, y.t(), nullptr);
  if (!cuda_ready()) {
    CHECK(st == Q4_ERR_NOT_AVAILABLE);
    CHECK(std::string(Q4_last_error()).find("CUDA") != std::string::npos);
  }
  // Host tensors with a CUDA target: not available, whatever the build.
  Tensor h({3, 32}, t::f32()), hq({8, 16}, t::u8()), hs({8, 2}, t::u8()), hy({3, 8}, t::f32());
  Q4_op_options o{};
  Q4_op_options_init(&o);
  o.target = Q4_TARGET_CUDA;
  CHECK(NVFP4_linear(h.t(), hq.t(), hs.t(), 0, 1.0f, nullptr, hy.t(), &o) == Q4_ERR_NOT_AVAILABLE);
  CHECK(argument_of(Q4_last_error()) == "opts->target");
}
