/* libNVFP4 — checkpoint schema detection by tensor keys (docs/formats.md).
 *
 * The caller lists a checkpoint's tensors (name, plus dtype/shape when
 * known); the library finds every 4-bit linear, its schema family and the
 * index of the tensor playing each role. Nothing is read or allocated.
 *
 * Thread-safety: stateless; callable concurrently.
 */
#ifndef NVFP4_SCHEMA_H_
#define NVFP4_SCHEMA_H_

#include "nvfp4/q4_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of checkpoint tensors (safetensors dtype strings). */
#define Q4_DTYPE_UNKNOWN 0
#define Q4_DTYPE_F32 1
#define Q4_DTYPE_F16 2
#define Q4_DTYPE_BF16 3
#define Q4_DTYPE_U8 4
#define Q4_DTYPE_I8 5
#define Q4_DTYPE_F8_E4M3 6
#define Q4_DTYPE_F4 7 /* packed E2M1 */
#define Q4_DTYPE_I16 8
#define Q4_DTYPE_I32 9
#define Q4_DTYPE_I64 10
#define Q4_DTYPE_F64 11
#define Q4_DTYPE_BOOL 12
#define Q4_DTYPE_F8_E5M2 13
#define Q4_DTYPE_U16 14
#define Q4_DTYPE_U32 15
#define Q4_DTYPE_U64 16

/* Schema families. */
#define Q4_SCHEMA_NONE 0
#define Q4_SCHEMA_BNB_NF4 1          /* bitsandbytes / HF NF4            */
#define Q4_SCHEMA_NVFP4_LEGACY 2     /* libNVFP4 .qdata/.scale, g = 1    */
#define Q4_SCHEMA_NVFP4_MODELOPT 3   /* ModelOpt, g = weight_scale_2     */
#define Q4_SCHEMA_NVFP4_COMPRESSED 4 /* compressed-tensors, g = 1/global */
#define Q4_SCHEMA_MXFP4_GPT_OSS         \
  5 /* gpt-oss MXFP4 .blocks/.scales or \
       _blocks/_scales, experts leading */

/* Roles of a linear's tensors: index into Q4_linear_schema.roles. */
#define Q4_ROLE_WEIGHT 0       /* packed 4-bit data                   */
#define Q4_ROLE_SCALE 1        /* NVFP4/MXFP4 block scales, NF4 absmax */
#define Q4_ROLE_GLOBAL_SCALE 2 /* weight_scale_2 / weight_global_scale */
#define Q4_ROLE_INPUT_SCALE 3  /* input_scale / input_global_scale    */
#define Q4_ROLE_QUANT_MAP 4    /* NF4 codebook                        */
#define Q4_ROLE_NESTED_ABSMAX 5
#define Q4_ROLE_NESTED_QUANT_MAP 6
#define Q4_ROLE_QUANT_STATE 7 /* bitsandbytes quant_state JSON bytes */
#define Q4_ROLE_BIAS 8
#define Q4_ROLE_COUNT 9
#define Q4_MAX_ROLES 16

#define Q4_MAX_NDIM 8

/* One tensor of a checkpoint. dtype Q4_DTYPE_UNKNOWN and ndim < 0 mean
 * "not known"; when known they are checked against the schema. */
typedef struct Q4_tensor_desc {
  const char* name;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[Q4_MAX_NDIM];
} Q4_tensor_desc;

/* One 4-bit linear found in the list. */
typedef struct Q4_linear_schema {
  uint32_t struct_size;
  int32_t format;                /* Q4_FORMAT_NVFP4 / NF4 / MXFP4               */
  int32_t family;                /* Q4_SCHEMA_*                                  */
  int32_t prefix_len;            /* the prefix is the first prefix_len bytes of  */
  int32_t prefix_tensor;         /* tensors[prefix_tensor].name                  */
  int32_t roles[Q4_MAX_ROLES];   /* tensor index per Q4_ROLE_*, -1 if absent   */
  int32_t global_scale_inverted; /* 1: stored value is 1/g (compressed-tensors) */
  int32_t reserved0;
  uint64_t reserved[4];
} Q4_linear_schema;

/* Whole-checkpoint summary. */
typedef struct Q4_schema_summary {
  uint32_t struct_size;
  int32_t format;           /* Q4_FORMAT_NONE/NVFP4/NF4/MXFP4/MIXED         */
  int32_t family;           /* the family when all linears share one, else
                               Q4_SCHEMA_NONE                               */
  int32_t num_linears;      /* complete 4-bit linears found                 */
  int32_t family_counts[8]; /* linears per Q4_SCHEMA_* value                */
  int32_t num_incomplete;   /* prefixes with a missing companion key        */
  int32_t reserved0;
  uint64_t reserved[4];
} Q4_schema_summary;

/* Detects the schema of a tensor list. Returns Q4_OK with a summary (format
 * Q4_FORMAT_NONE when no 4-bit linear is present), or Q4_ERR_SCHEMA when a
 * linear is incomplete, ambiguous or has a wrong dtype/shape: the summary is
 * still filled and Q4_last_error() names the prefix and the missing key. */
Q4_API int32_t Q4_detect_schema(const Q4_tensor_desc* tensors, size_t count, Q4_schema_summary* summary);

/* Lists the complete linears in order of first appearance. Writes at most
 * capacity entries (each entry's struct_size must be set by the caller) and
 * the total number to *num_found; returns Q4_ERR_BUFFER_TOO_SMALL when
 * capacity < total (entries up to capacity are filled), Q4_ERR_SCHEMA as
 * Q4_detect_schema does. `out` may be NULL when capacity is 0. */
Q4_API int32_t Q4_detect_linears(const Q4_tensor_desc* tensors, size_t count, Q4_linear_schema* out,
                                 size_t capacity, size_t* num_found);

/* Static name of a Q4_SCHEMA_* / Q4_FORMAT_* / Q4_DTYPE_* value. */
Q4_API const char* Q4_schema_name(int32_t family);
Q4_API const char* Q4_format_name(int32_t format);
Q4_API const char* Q4_dtype_name(int32_t dtype);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_SCHEMA_H_ */
