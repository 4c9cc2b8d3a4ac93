/* Pure C11 consumer: quantizes, multiplies and checks a result through the
 * public header only. Exit code 0 on success. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvfp4/nvfp4.h>

#define M 3
#define N 4
#define K 32

static DLTensor make(void* data, int32_t ndim, int64_t* shape, uint8_t code, uint8_t bits) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

static int fail(const char* what, int32_t status) {
  fprintf(stderr, "c_smoke: %s failed: %s (%s)\n", what, Q4_status_string(status), Q4_last_error());
  return 1;
}

int main(void) {
  if (Q4_abi_version() != NVFP4_ABI_VERSION) {
    fprintf(stderr, "ABI mismatch: header %d, library %d\n", NVFP4_ABI_VERSION, Q4_abi_version());
    return 1;
  }
  float w[N * K], x[M * K], y[M * N];
  uint8_t wq[N * K / 2], ws[N * K / 16];
  for (int i = 0; i < N * K; ++i) w[i] = (float)((i * 7) % 13) - 6.0f; /* exact E2M1 multiples */
  for (int i = 0; i < M * K; ++i) x[i] = (float)(i % 5) * 0.5f - 1.0f;

  int64_t w_shape[2] = {N, K}, wq_shape[2] = {N, K / 2}, ws_shape[2] = {N, K / 16};
  int64_t x_shape[2] = {M, K}, y_shape[2] = {M, N};
  DLTensor tw = make(w, 2, w_shape, kDLFloat, 32);
  DLTensor twq = make(wq, 2, wq_shape, kDLUInt, 8);
  DLTensor tws = make(ws, 2, ws_shape, kDLFloat8_e4m3fn, 8);
  DLTensor tx = make(x, 2, x_shape, kDLFloat, 32);
  DLTensor ty = make(y, 2, y_shape, kDLFloat, 32);

  float g = 0.0f;
  int32_t st = NVFP4_quantize(&tw, &twq, &tws, Q4_SCALE_LINEAR, 0.0f, &g, NULL);
  if (st != Q4_OK) return fail("NVFP4_quantize", st);
  st = NVFP4_linear(&tx, &twq, &tws, Q4_SCALE_LINEAR, g, NULL, &ty, NULL);
  if (st != Q4_OK) return fail("NVFP4_linear", st);

  /* Integers in [-6, 6] with amax 6 quantize exactly except where E2M1
   * has no such value (5 -> 4 or 6); compare with the dequantized weight. */
  float wd[N * K];
  DLTensor twd = make(wd, 2, w_shape, kDLFloat, 32);
  st = NVFP4_dequantize(&twq, &tws, Q4_SCALE_LINEAR, g, &twd, NULL);
  if (st != Q4_OK) return fail("NVFP4_dequantize", st);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double ref = 0.0;
      for (int k = 0; k < K; ++k) ref += (double)x[i * K + k] * wd[j * K + k];
      if (fabs(ref - y[i * N + j]) > 1e-4 * (1.0 + fabs(ref))) {
        fprintf(stderr, "c_smoke: y[%d,%d] = %g, expected %g\n", i, j, y[i * N + j], ref);
        return 1;
      }
    }
  }
  /* A bad call returns a status and a message; the process goes on. */
  st = NVFP4_linear(NULL, &twq, &tws, Q4_SCALE_LINEAR, g, NULL, &ty, NULL);
  if (st != Q4_ERR_NULL_POINTER || strstr(Q4_last_error(), "'x'") == NULL) {
    fprintf(stderr, "c_smoke: expected a NULL-pointer error, got %d (%s)\n", st, Q4_last_error());
    return 1;
  }
  printf("c_smoke: ok (g = %g, y[0,0] = %g)\n", (double)g, (double)y[0]);
  return 0;
}
