/* A host that unloads the library after using it (dlclose: Rust's
 * libloading when the Library drops, .NET's NativeLibrary.Free, plugin
 * hosts). The library's pool workers keep running its code after a call
 * returns (they watch for the next job, then sleep in it), so unmapping it
 * crashed the process; it is linked with -z nodelete, and dlclose leaves
 * it loaded. This opens it, runs products (which start the workers),
 * closes it, waits past the workers' watch, and does it again: the process
 * survives and every round computes the same bits.
 * Usage: dlclose_after_use /path/to/libNVFP4.so */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nvfp4/nvfp4.h"

enum { M = 4, N = 1024, K = 1024 };

static float w[N * K], x[M * K], y[M * N], y0[M * N];
static uint8_t q[N * K / 2], s[N * K / 16];

static DLTensor tensor(void* data, int64_t* shape, DLDataType dt) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 2;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBRARY\n", argv[0]);
    return 2;
  }
  unsigned r = 1;
  for (int i = 0; i < N * K; ++i)
    w[i] = (float)((r = r * 1103515245u + 12345u) >> 16 & 0x7fff) / 16384.0f - 1.0f;
  for (int i = 0; i < M * K; ++i)
    x[i] = (float)((r = r * 1103515245u + 12345u) >> 16 & 0x7fff) / 16384.0f - 1.0f;
  const DLDataType f32 = {kDLFloat, 32, 1}, u8 = {kDLUInt, 8, 1};
  int64_t ws[2] = {N, K}, qs[2] = {N, K / 2}, ss[2] = {N, K / 16}, xs[2] = {M, K}, ys[2] = {M, N};
  DLTensor W = tensor(w, ws, f32), Q = tensor(q, qs, u8), S = tensor(s, ss, u8), X = tensor(x, xs, f32),
           Y = tensor(y, ys, f32);
  for (int round = 0; round < 4; ++round) {
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      printf("dlopen: %s\n", dlerror());
      return 1;
    }
    int32_t (*quantize)(const DLTensor*, DLTensor*, DLTensor*, int32_t, float, float*, const Q4_op_options*);
    int32_t (*linear)(const DLTensor*, const DLTensor*, const DLTensor*, int32_t, float, const DLTensor*,
                      DLTensor*, const Q4_op_options*);
    *(void**)&quantize = dlsym(h, "NVFP4_quantize");
    *(void**)&linear = dlsym(h, "NVFP4_linear");
    if (quantize == NULL || linear == NULL) {
      printf("dlsym failed\n");
      return 1;
    }
    float g = 0;
    int32_t st = quantize(&W, &Q, &S, Q4_SCALE_LINEAR, 0.0f, &g, NULL);
    for (int i = 0; i < 20 && st == Q4_OK; ++i) st = linear(&X, &Q, &S, Q4_SCALE_LINEAR, g, NULL, &Y, NULL);
    if (st != Q4_OK) {
      printf("round %d: status %d\n", round, (int)st);
      return 1;
    }
    if (round == 0) memcpy(y0, y, sizeof y);
    if (memcmp(y0, y, sizeof y) != 0) {
      printf("round %d: other bits\n", round);
      return 1;
    }
    if (dlclose(h) != 0) {
      printf("dlclose: %s\n", dlerror());
      return 1;
    }
    void* still = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    if (still == NULL) {
      printf("round %d: the library was unloaded (not linked with -z nodelete)\n", round);
      return 1;
    }
    dlclose(still);
    sleep_ms(round == 0 ? 0 : 30); /* the workers mid-watch, then asleep */
  }
  printf("dlclose after use: the process survived 4 rounds, same bits\n");
  return 0;
}
