/* <nvfp4/nvfp4.h> after an official-style DLPack 1.1 header (which names the
 * versioned tensor only as a struct tag): the public headers must compile
 * and be usable. */
#include <dlpack/dlpack.h>
#include <nvfp4/nvfp4.h>
#include <stdio.h>

int main(void) {
  struct DLManagedTensorVersioned* snap = NULL;
  DLManagedTensor* legacy = NULL;
  int32_t (*acquire)(Q4_mutable*, struct DLManagedTensorVersioned**, uint64_t*) = Q4_mutable_acquire;
  int32_t st = Q4_dlpack_to_unversioned(snap, &legacy);
  if (st != Q4_ERR_NULL_POINTER || acquire == NULL || kDLTrn != 18) {
    printf("unexpected status %d\n", (int)st);
    return 1;
  }
  return 0;
}
