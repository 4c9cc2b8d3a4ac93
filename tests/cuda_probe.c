/* Prints what the library found of CUDA and checks that every
 * CUDA-dependent entry point answers with a clear status when no device is
 * usable. Exit 0 when the contract holds. */
#include <nvfp4/nvfp4.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  Q4_capabilities c;
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  if (Q4_get_capabilities(&c) != Q4_OK) return 1;
  printf("cuda_state=%d devices=%d native_load_state: %s\n", c.cuda_state, c.cuda_device_count,
         c.native_load_state);
  if (c.cuda_state == Q4_CUDA_READY) return 0;
  if (strlen(c.native_load_state) == 0) return 1;
  uint64_t f = 0, t = 0;
  if (NVFP4_empty_cache() != Q4_OK) return 1; /* no-op without a device */
  if (NVFP4_memory_info(0, &f, &t) != Q4_ERR_NOT_AVAILABLE) return 1;
  printf("NVFP4_memory_info: %s\n", Q4_last_error());
  float x[32] = {0};
  unsigned char q[16], s[2];
  int64_t xs[2] = {1, 32}, qs[2] = {1, 16}, ss[2] = {1, 2};
  DLTensor tx, tq, ts;
  memset(&tx, 0, sizeof tx);
  tx.data = x;
  tx.device.device_type = kDLCUDA;
  tx.ndim = 2;
  tx.dtype.code = kDLFloat;
  tx.dtype.bits = 32;
  tx.dtype.lanes = 1;
  tx.shape = xs;
  tq = tx;
  tq.data = q;
  tq.dtype.code = kDLUInt;
  tq.dtype.bits = 8;
  tq.shape = qs;
  ts = tq;
  ts.data = s;
  ts.shape = ss;
  if (NVFP4_quantize(&tx, &tq, &ts, Q4_SCALE_LINEAR, 0.0f, NULL, NULL) != Q4_ERR_NOT_AVAILABLE) return 1;
  printf("NVFP4_quantize on kDLCUDA: %s\n", Q4_last_error());
  int32_t can = 1;
  if (NVFP4_can_use_managed(0, &can) != Q4_OK || can != 0) return 1;
  return 0;
}
