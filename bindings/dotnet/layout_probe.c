/* Prints sizeof and offsetof of every C struct mirrored by the .NET binding
 * (src/Structs.cs), one per line:
 *     S <struct> <sizeof>
 *     F <struct> <field> <offsetof>
 * The test runner (tests/Tests.cs, group "layouts") compares them with
 * Marshal.SizeOf / Marshal.OffsetOf of the C# structs, in both directions
 * (a field missing on either side fails). */
#include <stddef.h>
#include <stdio.h>

#include <nvfp4/nvfp4.h>

#define S(T) printf("S %s %zu\n", #T, sizeof(T))
#define F(T, f) printf("F %s %s %zu\n", #T, #f, offsetof(T, f))

int main(void) {
  S(DLPackVersion);
  F(DLPackVersion, major);
  F(DLPackVersion, minor);
  S(DLDevice);
  F(DLDevice, device_type);
  F(DLDevice, device_id);
  S(DLDataType);
  F(DLDataType, code);
  F(DLDataType, bits);
  F(DLDataType, lanes);
  S(DLTensor);
  F(DLTensor, data);
  F(DLTensor, device);
  F(DLTensor, ndim);
  F(DLTensor, dtype);
  F(DLTensor, shape);
  F(DLTensor, strides);
  F(DLTensor, byte_offset);
  S(DLManagedTensor);
  F(DLManagedTensor, dl_tensor);
  F(DLManagedTensor, manager_ctx);
  F(DLManagedTensor, deleter);
  S(DLManagedTensorVersioned);
  F(DLManagedTensorVersioned, version);
  F(DLManagedTensorVersioned, manager_ctx);
  F(DLManagedTensorVersioned, deleter);
  F(DLManagedTensorVersioned, flags);
  F(DLManagedTensorVersioned, dl_tensor);

  S(Q4_op_options);
  F(Q4_op_options, struct_size);
  F(Q4_op_options, compute_path);
  F(Q4_op_options, backend);
  F(Q4_op_options, target);
  F(Q4_op_options, device_id);
  F(Q4_op_options, math_mode);
  F(Q4_op_options, num_threads);
  F(Q4_op_options, reserved0);
  F(Q4_op_options, stream);
  F(Q4_op_options, reserved);

  S(Q4_capabilities);
  F(Q4_capabilities, struct_size);
  F(Q4_capabilities, abi_version);
  F(Q4_capabilities, cpu_features);
  F(Q4_capabilities, isa_best);
  F(Q4_capabilities, isa_active);
  F(Q4_capabilities, num_cpus);
  F(Q4_capabilities, cuda_state);
  F(Q4_capabilities, cuda_runtime_version);
  F(Q4_capabilities, cuda_driver_version);
  F(Q4_capabilities, cuda_device_count);
  F(Q4_capabilities, managed_memory);
  F(Q4_capabilities, fp4_tensor_cores);
  F(Q4_capabilities, reserved0);
  F(Q4_capabilities, cpu_vendor);
  F(Q4_capabilities, cpu_brand);
  F(Q4_capabilities, cuda_archs);
  F(Q4_capabilities, native_load_state);
  F(Q4_capabilities, reserved);

  S(Q4_tune_result);
  F(Q4_tune_result, struct_size);
  F(Q4_tune_result, dim);
  F(Q4_tune_result, runs);
  F(Q4_tune_result, candidates);
  F(Q4_tune_result, kc_default);
  F(Q4_tune_result, mc_default);
  F(Q4_tune_result, kc_best);
  F(Q4_tune_result, mc_best);
  F(Q4_tune_result, default_ms);
  F(Q4_tune_result, best_ms);
  F(Q4_tune_result, adopted);
  F(Q4_tune_result, persisted);
  F(Q4_tune_result, cache_path);
  F(Q4_tune_result, cpu_signature);
  F(Q4_tune_result, reserved);

  S(NF4_state);
  F(NF4_state, struct_size);
  F(NF4_state, blocksize);
  F(NF4_state, absmax);
  F(NF4_state, quant_map);
  F(NF4_state, nested_absmax);
  F(NF4_state, nested_quant_map);
  F(NF4_state, nested_offset);
  F(NF4_state, nested_blocksize);
  F(NF4_state, reserved);

  S(Q4_tensor_desc);
  F(Q4_tensor_desc, name);
  F(Q4_tensor_desc, dtype);
  F(Q4_tensor_desc, ndim);
  F(Q4_tensor_desc, shape);

  S(Q4_linear_schema);
  F(Q4_linear_schema, struct_size);
  F(Q4_linear_schema, format);
  F(Q4_linear_schema, family);
  F(Q4_linear_schema, prefix_len);
  F(Q4_linear_schema, prefix_tensor);
  F(Q4_linear_schema, roles);
  F(Q4_linear_schema, global_scale_inverted);
  F(Q4_linear_schema, reserved0);
  F(Q4_linear_schema, reserved);

  S(Q4_schema_summary);
  F(Q4_schema_summary, struct_size);
  F(Q4_schema_summary, format);
  F(Q4_schema_summary, family);
  F(Q4_schema_summary, num_linears);
  F(Q4_schema_summary, family_counts);
  F(Q4_schema_summary, num_incomplete);
  F(Q4_schema_summary, reserved0);
  F(Q4_schema_summary, reserved);

  S(Q4_session_config);
  F(Q4_session_config, struct_size);
  F(Q4_session_config, compute_path);
  F(Q4_session_config, backend);
  F(Q4_session_config, target);
  F(Q4_session_config, device_id);
  F(Q4_session_config, unified_memory);
  F(Q4_session_config, num_threads);
  F(Q4_session_config, diagnostics);
  F(Q4_session_config, math_mode);
  F(Q4_session_config, reserved0);
  F(Q4_session_config, reserved);

  S(Q4_session_stats);
  F(Q4_session_stats, struct_size);
  F(Q4_session_stats, live_linears);
  F(Q4_session_stats, live_mutables);
  F(Q4_session_stats, live_snapshots);
  F(Q4_session_stats, live_buffers);
  F(Q4_session_stats, live_bytes);
  F(Q4_session_stats, managed_bytes);
  F(Q4_session_stats, forwards);
  F(Q4_session_stats, implicit_copies);
  F(Q4_session_stats, reserved);

  S(Q4_weight_bundle);
  F(Q4_weight_bundle, struct_size);
  F(Q4_weight_bundle, format);
  F(Q4_weight_bundle, source);
  F(Q4_weight_bundle, scale_layout);
  F(Q4_weight_bundle, weight);
  F(Q4_weight_bundle, out_features);
  F(Q4_weight_bundle, in_features);
  F(Q4_weight_bundle, scale);
  F(Q4_weight_bundle, global_scale);
  F(Q4_weight_bundle, blocksize);
  F(Q4_weight_bundle, nf4);
  F(Q4_weight_bundle, bias);
  F(Q4_weight_bundle, reserved);

  S(Q4_linear_info);
  F(Q4_linear_info, struct_size);
  F(Q4_linear_info, format);
  F(Q4_linear_info, backend);
  F(Q4_linear_info, compute_path);
  F(Q4_linear_info, fell_back);
  F(Q4_linear_info, isa);
  F(Q4_linear_info, target);
  F(Q4_linear_info, unified_memory);
  F(Q4_linear_info, scale_layout);
  F(Q4_linear_info, math_mode);
  F(Q4_linear_info, out_features);
  F(Q4_linear_info, in_features);
  F(Q4_linear_info, weight_bytes);
  F(Q4_linear_info, weight_version);
  F(Q4_linear_info, reserved);
  return 0;
}
