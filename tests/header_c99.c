/* The public headers compile as strict C99 (-std=c99 -pedantic -Werror),
 * before and after an include of themselves. */
#include <nvfp4/nvfp4.h>

int main(void) {
  Q4_op_options o = {0};
  NF4_state s;
  DLManagedTensorVersioned m;
  Q4_capabilities c;
  (void)o;
  (void)s;
  (void)m;
  (void)c;
  return Q4_OK;
}
