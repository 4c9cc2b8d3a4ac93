/* <nvfp4/nvfp4.h> first, then an official-style dlpack.h: ours stays in force
 * (the official guard is defined) and carries the newer names too. */
/* clang-format off: the order is what this test checks */
#include <nvfp4/nvfp4.h>
#include <dlpack/dlpack.h>
/* clang-format on */

int main(void) {
  DLDevice d = {kDLTrn, 0};
  DLManagedTensorVersioned* typed = NULL; /* our header also has the typedef */
  struct DLManagedTensorVersioned* tagged = typed;
  return (d.device_type == 18 && tagged == NULL) ? 0 : 1;
}
