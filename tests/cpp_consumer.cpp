// A C++ consumer built with -fno-exceptions -fno-rtti (as game engines and
// embedded hosts do): the public headers must not need either.
#include <nvfp4/nvfp4.h>

#include <cstdio>

int main() {
  Q4_op_options o{};
  if (Q4_op_options_init(&o) != Q4_OK) return 1;
  float x[32] = {1.0f, -2.0f, 3.0f};
  unsigned char q[16], s[2];
  int64_t xs[2] = {1, 32}, qs[2] = {1, 16}, ss[2] = {1, 2};
  DLTensor tx{x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, xs, nullptr, 0};
  DLTensor tq{q, {kDLCPU, 0}, 2, {kDLUInt, 8, 1}, qs, nullptr, 0};
  DLTensor ts{s, {kDLCPU, 0}, 2, {kDLUInt, 8, 1}, ss, nullptr, 0};
  float g = 0;
  const int32_t st = NVFP4_quantize(&tx, &tq, &ts, Q4_SCALE_LINEAR, 0.0f, &g, &o);
  std::printf("cpp_consumer: %s\n", Q4_status_string(st));
  return st == Q4_OK ? 0 : 1;
}
