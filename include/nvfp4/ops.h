/* libNVFP4 — stateless NVFP4, NF4 and MXFP4 operations (docs/api.md).
 *
 * Tensors are DLPack: inputs are borrowed `const DLTensor*` that the library
 * never modifies; outputs are caller-allocated `DLTensor*` written in place.
 * Accepted devices: kDLCPU, kDLCUDAHost, kDLCUDAManaged (read and written by
 * the CPU in place). Strides must be NULL or describe a compact row-major
 * tensor; anything else is Q4_ERR_STRIDES, never misread.
 *
 * Packed 4-bit data and block scales are read as flat row-major bytes: any
 * contiguous shape with the right number of bytes is accepted, the logical
 * shape comes from the float tensor (x or out). Packed data may be
 * kDLUInt/8, kDLFloat4_e2m1fn/4 lanes 1 (logical shape) or lanes 2 (byte
 * shape); NVFP4 block scales kDLUInt/8 or kDLFloat8_e4m3fn/8.
 * Activations and outputs: kDLFloat/32, kDLFloat/16, kDLBfloat/16.
 *
 * Every function validates all arguments before it writes anything; on a
 * failure it returns a specific status and Q4_last_error() names the
 * argument. An output that overlaps any input or other output is
 * Q4_ERR_ALIASING. `opts` may be NULL (defaults), `bias` may be NULL.
 *
 * Thread-safety: all functions here are stateless and may be called
 * concurrently from any number of threads (on distinct outputs).
 */
#ifndef NVFP4_OPS_H_
#define NVFP4_OPS_H_

#include "nvfp4/q4_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NF4 quantization state of one tensor (bitsandbytes QuantState). */
typedef struct NF4_state {
  uint32_t struct_size;             /* sizeof(NF4_state)                      */
  int32_t blocksize;                /* 32,64,...,4096                         */
  const DLTensor* absmax;           /* fp32 [nblocks], or uint8 codes when
                                       nested_absmax != NULL                  */
  const DLTensor* quant_map;        /* optional fp32[16] codebook (NULL: NF4) */
  const DLTensor* nested_absmax;    /* fp32 [ceil(nblocks/nested_blocksize)]
                                       (double quantization), or NULL         */
  const DLTensor* nested_quant_map; /* fp32[256], required with nested_absmax */
  float nested_offset;              /* added after nested dequantization      */
  int32_t nested_blocksize;         /* 0 means 256                            */
  uint64_t reserved[4];             /* must be 0                              */
} NF4_state;

/* x [..., K] float, K % 16 == 0 -> qdata (rows*K/2 bytes, element 2j in the
 * low nibble) and scale (E4M3 bytes, layout scale_layout: rows*K/16 linear,
 * or roundup(rows,128)*roundup(K/16,4) swizzled with zero padding).
 * global_scale > 0 is used as given; 0 computes amax/(6*448) (1 if amax==0).
 * The value used is written to *global_scale_out when non-NULL. NaN/Inf in x
 * is Q4_ERR_NON_FINITE naming the first offending flat index. */
Q4_API int32_t NVFP4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* scale, int32_t scale_layout,
                              float global_scale, float* global_scale_out, const Q4_op_options* opts);

/* qdata + scale (+ global_scale > 0) -> out [..., K] float. */
Q4_API int32_t NVFP4_dequantize(const DLTensor* qdata, const DLTensor* scale, int32_t scale_layout,
                                float global_scale, DLTensor* out, const Q4_op_options* opts);

/* out[M,N] = alpha * dequant(A)[M,K] . dequant(B)[N,K]^T (+ bias[N]); the
 * dequantization uses block scales only (fold global scales into alpha).
 * M comes from out's leading dims, N from its last dim, K from A's bytes. */
Q4_API int32_t NVFP4_scaled_mm(const DLTensor* a_qdata, const DLTensor* a_scale, const DLTensor* b_qdata,
                               const DLTensor* b_scale, int32_t scale_layout, float alpha,
                               const DLTensor* bias, DLTensor* out, const Q4_op_options* opts);

/* out[..., N] = x[..., K] . dequant(W)[N, K]^T (+ bias), float activations. */
Q4_API int32_t NVFP4_linear(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale,
                            int32_t scale_layout, float global_scale, const DLTensor* bias, DLTensor* out,
                            const Q4_op_options* opts);

/* x (any shape, n elements) -> qdata (ceil(n/2) bytes, element 2j in the HIGH
 * nibble) and absmax fp32 [ceil(n/blocksize)]. blocksize 0 means 64. */
Q4_API int32_t NF4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* absmax, int32_t blocksize,
                            const Q4_op_options* opts);

/* Double quantization of NF4 statistics (bitsandbytes compress_statistics):
 * absmax fp32 [nblocks] -> qabsmax uint8 [nblocks], nested_absmax fp32
 * [ceil(nblocks/256)], nested_quant_map fp32 [256] (the signed dynamic map
 * written by the library) and *offset (mean of absmax). The result is read
 * back by NF4_dequantize through NF4_state. */
Q4_API int32_t NF4_double_quantize(const DLTensor* absmax, DLTensor* qabsmax, DLTensor* nested_absmax,
                                   DLTensor* nested_quant_map, float* offset, const Q4_op_options* opts);

/* qdata + state -> out (any shape, n elements). */
Q4_API int32_t NF4_dequantize(const DLTensor* qdata, const NF4_state* state, DLTensor* out,
                              const Q4_op_options* opts);

/* out[..., N] = x[..., K] . dequant(W)[N, K]^T (+ bias); W is the NF4 tensor
 * of N*K elements (blocks run over the flattened weight). */
Q4_API int32_t NF4_scaled_mm(const DLTensor* x, const DLTensor* w_qdata, const NF4_state* w_state,
                             const DLTensor* bias, DLTensor* out, const Q4_op_options* opts);

/* Linear [rows, C] scale bytes <-> swizzled bytes (roundup(rows,128) x
 * roundup(C,4), padding written as 0). The linear tensor gives the shape. */
Q4_API int32_t NVFP4_swizzle_scales(const DLTensor* linear, DLTensor* swizzled);
Q4_API int32_t NVFP4_unswizzle_scales(const DLTensor* swizzled, DLTensor* linear);

/* Byte size of the swizzled scale buffer for a [rows, K] weight; writes
 * roundup(rows,128) * roundup(K/16,4) to *bytes. */
Q4_API int32_t NVFP4_swizzled_scale_size(int64_t rows, int64_t k, int64_t* bytes);

/* ------------------------------------------------------------------------ */
/* MXFP4 (OCP Microscaling v1.0, docs/formats.md): E2M1 elements (element 2j
 * in the low nibble, as NVFP4) in blocks of 32 sharing one E8M0 scale byte
 * (2^(byte-127), 0xFF = NaN); no global scale. K must be a multiple of 32.
 * Scales are kDLUInt/8 or kDLFloat8_e8m0fnu/8, in layout scale_layout:
 * rows*K/32 bytes linear, or roundup(rows,128)*roundup(K/32,4) swizzled
 * (cuBLASLt VEC32_UE8M0, zero padding). Packed data and float tensors as for
 * NVFP4. kDLCUDA tensors run on the CUDA plugin (docs/cuda.md); on the CPU
 * the products run on the E2M1 (NVFP4) kernels through the weight's exact
 * NVFP4 form, else dequantize-then-fp32-GEMM (docs/api.md). */
/* ------------------------------------------------------------------------ */

/* x [..., K] float -> qdata (rows*K/2 bytes) + E8M0 scales, the OCP rule:
 * e = floor(log2(block amax)) - 2 clamped to [-127,127] (all-zero block:
 * byte 0x00), elements x/2^e rounded to E2M1 (RNE, saturating at +-6). NaN/Inf
 * in x is Q4_ERR_NON_FINITE naming the first offending flat index. */
Q4_API int32_t MXFP4_quantize(const DLTensor* x, DLTensor* qdata, DLTensor* scale, int32_t scale_layout,
                              const Q4_op_options* opts);

/* qdata + scale -> out [..., K] float: e2m1(code) * 2^(byte-127), exact in
 * fp32 (byte 0xFF: NaN). */
Q4_API int32_t MXFP4_dequantize(const DLTensor* qdata, const DLTensor* scale, int32_t scale_layout,
                                DLTensor* out, const Q4_op_options* opts);

/* out[..., N] = x[..., K] . dequant(W)[N, K]^T (+ bias). W's bytes may have
 * any contiguous shape, e.g. one expert [1, N, K/2] of an [E, N, K/2]
 * stack addressed by byte_offset (no copy). */
Q4_API int32_t MXFP4_linear(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale,
                            int32_t scale_layout, const DLTensor* bias, DLTensor* out,
                            const Q4_op_options* opts);

/* out[M,N] = alpha * dequant(A)[M,K] . dequant(B)[N,K]^T (+ bias[N]). M from
 * out's leading dims, N from its last dim, K from A's bytes (B's when M=0). */
Q4_API int32_t MXFP4_scaled_mm(const DLTensor* a_qdata, const DLTensor* a_scale, const DLTensor* b_qdata,
                               const DLTensor* b_scale, int32_t scale_layout, float alpha,
                               const DLTensor* bias, DLTensor* out, const Q4_op_options* opts);

/* Batched experts (a mixture-of-experts layer): the expert weights stacked
 * as the checkpoint stores them, taken in place (no copy):
 *   w_qdata: E * N * K/2 bytes with E its FIRST dimension, e.g. [E, N, K/2]
 *            or gpt-oss's [E, N, K/32, 16];
 *   w_scale: E * N * K/32 bytes linear ([E, N, K/32]), or, swizzled, E
 *            consecutive per-expert swizzled blocks of
 *            roundup(N,128) * roundup(K/32,4) bytes;
 *   bias:    NULL or float [E, N] (any shape of E*N elements).
 * x [..., K] is T rows split into n_groups consecutive groups: group g is
 * the group_rows[g] rows after those of groups 0..g-1 and runs expert
 * expert_of_group[g]:
 *   out[rows of g, :] = x[rows of g, :] . dequant(W[e])^T (+ bias[e, :]).
 * out [..., N] has x's leading dims. Groups may be empty and may repeat an
 * expert; together they must cover all T rows (sum(group_rows) == T). One
 * expert's product: n_groups = 1, group_rows = {T}. Each group's result
 * equals MXFP4_linear on that expert's slice of the stack. Refused:
 * expert_of_group[g] outside [0, E) (Q4_ERR_INVALID_ARGUMENT naming
 * "expert_of_group[g]"), group_rows[g] < 0 (Q4_ERR_INVALID_ARGUMENT) or
 * groups not covering x exactly (Q4_ERR_SHAPE naming "group_rows[g]" or
 * "group_rows"), NULL arrays with n_groups > 0 (Q4_ERR_NULL_POINTER),
 * n_groups < 0; the rest as MXFP4_linear. */
Q4_API int32_t MXFP4_linear_experts(const DLTensor* x, const DLTensor* w_qdata, const DLTensor* w_scale,
                                    int32_t scale_layout, const int32_t* expert_of_group,
                                    const int64_t* group_rows, int64_t n_groups, const DLTensor* bias,
                                    DLTensor* out, const Q4_op_options* opts);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_OPS_H_ */
