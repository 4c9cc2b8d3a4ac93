/* Pinned layouts of every public struct on LP64 targets (x86-64, aarch64).
 * A failing assertion means a shipped layout changed: that needs an ABI
 * version bump or, better, a new _v2 struct. Compiled as strict C11. */
#include <stddef.h>

#include <nvfp4/nvfp4.h>

_Static_assert(sizeof(Q4_op_options) == 88,
               "layout of Q4_op_options changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(NF4_state) == 80, "layout of NF4_state changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(Q4_capabilities) == 520,
               "layout of Q4_capabilities changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(Q4_tune_result) == 536,
               "layout of Q4_tune_result changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(Q4_tensor_desc) == 80,
               "layout of Q4_tensor_desc changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(Q4_linear_schema) == 128,
               "layout of Q4_linear_schema changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(Q4_schema_summary) == 88,
               "layout of Q4_schema_summary changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(Q4_session_config) == 88,
               "layout of Q4_session_config changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(Q4_session_stats) == 88,
               "layout of Q4_session_stats changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(Q4_weight_bundle) == 120,
               "layout of Q4_weight_bundle changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(Q4_linear_info) == 104,
               "layout of Q4_linear_info changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(DLTensor) == 48, "layout of DLTensor changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(DLManagedTensorVersioned) == 80,
               "layout of DLManagedTensorVersioned changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(DLDataType) == 4, "layout of DLDataType changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(sizeof(DLDevice) == 8, "layout of DLDevice changed: bump NVFP4_ABI_VERSION or add a _v2");
_Static_assert(offsetof(Q4_op_options, stream) == 32, "layout changed");
_Static_assert(offsetof(NF4_state, nested_offset) == 40, "layout changed");
_Static_assert(offsetof(Q4_weight_bundle, bias) == 64, "layout changed");
_Static_assert(offsetof(Q4_capabilities, native_load_state) == 200, "layout changed");
_Static_assert(offsetof(Q4_linear_info, weight_version) == 64, "layout changed");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32, "layout changed");

int main(void) {
  return 0;
}
