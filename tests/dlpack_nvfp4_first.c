/* <nvfp4/nvfp4.h> first, then an official-style dlpack.h: ours stays in force
 * (the official guard is defined) and carries the newer names too. */
#include <nvfp4/nvfp4.h>

/* After ours (separate include block, so formatting keeps the order). */
#include <dlpack/dlpack.h>

int main(void) {
  DLDevice d = {kDLTrn, 0};
  DLManagedTensorVersioned* typed = NULL; /* our header also has the typedef */
  struct DLManagedTensorVersioned* tagged = typed;
  return (d.device_type == 18 && tagged == NULL) ? 0 : 1;
}
