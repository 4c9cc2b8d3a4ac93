#include <nvfp4/nvfp4.h>
#include <stdio.h>

int main(void) {
  printf("libNVFP4 %s ABI %d\n", Q4_version_string(), Q4_abi_version());
  return Q4_abi_version() == NVFP4_ABI_VERSION ? 0 : 1;
}
