// [DllImport] declarations for every function of abi/libNVFP4.symbols, in
// header order. Pointers are typed (unsafe) so the declarations read like the
// C prototypes; the safe API in NVFP4.* wraps them.
//
// Marshalling rules (see README.md):
//  * functions returning `const char*` return IntPtr: the text is static (or
//    thread-local) library memory that the runtime must never free. Read it
//    with Text.FromStatic / Marshal.PtrToStringAnsi.
//  * `const char*` inputs are passed as byte* to NUL-terminated UTF-8 bytes
//    (Text.Utf8Z), so names are UTF-8 on every runtime.
//  * size_t is UIntPtr.
//  * LibName is the SONAME. Loader.EnsureLoaded() dlopen()s the chosen file
//    with RTLD_GLOBAL first, after which the dynamic loader resolves the
//    SONAME to that already-loaded library; the static constructor below
//    runs it before the first call.
using System;
using System.Runtime.InteropServices;

namespace NVFP4.Native
{
    /// <summary>Pinned constants of the C headers.</summary>
    public static class Q4
    {
        public const int ABI_VERSION = 1;

        public const int SCALE_LINEAR = 0, SCALE_SWIZZLED = 1;
        public const int PATH_AUTO = 0, PATH_KERNEL_ONLY = 1, PATH_KERNEL_OR_FALLBACK = 2, PATH_DEQUANT_MATMUL_ONLY = 3;
        public const int BACKEND_AUTO = 0, BACKEND_NVFP4_KERNEL = 1, BACKEND_NF4_KERNEL = 2, BACKEND_DEQUANT_MATMUL = 3;
        public const int TARGET_AUTO = 0, TARGET_CPU = 1, TARGET_CUDA = 2;
        public const int MATH_EXACT = 0, MATH_FAST = 1;
        public const int FORMAT_NONE = 0, FORMAT_NVFP4 = 1, FORMAT_NF4 = 2, FORMAT_MIXED = 3, FORMAT_MXFP4 = 4;
        public const int ISA_SCALAR = 0, ISA_AVX2 = 1, ISA_AVX512 = 2, ISA_AVX512_VNNI = 3, ISA_NEON = 16,
                         ISA_NEON_DOTPROD = 17, ISA_AVX_VNNI = 4, ISA_NEON_I8MM = 18, ISA_BEST = 255;
        public const ulong CPU_SSE42 = 1UL << 0, CPU_AVX = 1UL << 1, CPU_AVX2 = 1UL << 2, CPU_FMA = 1UL << 3,
                           CPU_F16C = 1UL << 4, CPU_AVX512F = 1UL << 5, CPU_AVX512BW = 1UL << 6,
                           CPU_AVX512VL = 1UL << 7, CPU_AVX512DQ = 1UL << 8, CPU_AVX512VNNI = 1UL << 9,
                           CPU_AVX512VBMI = 1UL << 10, CPU_AVX512BF16 = 1UL << 11, CPU_AVXVNNI = 1UL << 12,
                           CPU_OS_AVX = 1UL << 13, CPU_OS_AVX512 = 1UL << 14, CPU_NEON = 1UL << 32,
                           CPU_DOTPROD = 1UL << 33, CPU_SVE = 1UL << 34, CPU_I8MM = 1UL << 35, CPU_BF16 = 1UL << 36;
        public const int CUDA_NOT_BUILT = 0, CUDA_NOT_LOADED = 1, CUDA_NO_DEVICE = 2, CUDA_READY = 3;
        public const int LOG_OFF = 0, LOG_ERROR = 1, LOG_WARN = 2, LOG_INFO = 3, LOG_DEBUG = 4;
        public const int DTYPE_UNKNOWN = 0, DTYPE_F32 = 1, DTYPE_F16 = 2, DTYPE_BF16 = 3, DTYPE_U8 = 4, DTYPE_I8 = 5,
                         DTYPE_F8_E4M3 = 6, DTYPE_F4 = 7, DTYPE_I16 = 8, DTYPE_I32 = 9, DTYPE_I64 = 10,
                         DTYPE_F64 = 11, DTYPE_BOOL = 12, DTYPE_F8_E5M2 = 13, DTYPE_U16 = 14, DTYPE_U32 = 15,
                         DTYPE_U64 = 16;
        public const int SCHEMA_NONE = 0, SCHEMA_BNB_NF4 = 1, SCHEMA_NVFP4_LEGACY = 2, SCHEMA_NVFP4_MODELOPT = 3,
                         SCHEMA_NVFP4_COMPRESSED = 4, SCHEMA_MXFP4_GPT_OSS = 5;
        public const int ROLE_WEIGHT = 0, ROLE_SCALE = 1, ROLE_GLOBAL_SCALE = 2, ROLE_INPUT_SCALE = 3,
                         ROLE_QUANT_MAP = 4, ROLE_NESTED_ABSMAX = 5, ROLE_NESTED_QUANT_MAP = 6,
                         ROLE_QUANT_STATE = 7, ROLE_BIAS = 8, ROLE_COUNT = 9, MAX_ROLES = 16, MAX_NDIM = 8;
        public const int UM_DISABLED = 0, UM_PREFER = 1, UM_REQUIRE = 2;
        public const int WEIGHT_PACKED = 0, WEIGHT_FLOAT = 1;
        public const int WRITE_KEEP = 0, WRITE_DISCARD = 1;
        public const uint MANAGED_READ_MOSTLY = 1, MANAGED_PREFETCH = 2, MANAGED_REPORT_MANAGED = 4;
        public const ulong DLPACK_FLAG_BITMASK_READ_ONLY = 1, DLPACK_FLAG_BITMASK_IS_COPIED = 2,
                           DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED = 4;
    }

    public static unsafe class NativeMethods
    {
        /// <summary>The DllImport name: the SONAME of ABI 1.</summary>
        public const string LibName = "libNVFP4.so.1";
        const CallingConvention CC = CallingConvention.Cdecl;

        static NativeMethods() { Loader.EnsureLoaded(); }

        // ---- q4_base.h: errors, version -------------------------------------
        [DllImport(LibName, CallingConvention = CC)] public static extern IntPtr Q4_status_string(int status);
        [DllImport(LibName, CallingConvention = CC)] public static extern IntPtr Q4_last_error();
        [DllImport(LibName, CallingConvention = CC)] public static extern void Q4_clear_error();
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_version();
        [DllImport(LibName, CallingConvention = CC)] public static extern IntPtr Q4_version_string();
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_abi_version();
        // ---- options, capabilities, ISA, tuner, logging ----------------------
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_op_options_init(Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_get_capabilities(Q4_capabilities* caps);
        [DllImport(LibName, CallingConvention = CC)] public static extern IntPtr Q4_isa_name(int isa);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_set_max_isa(int isa);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_last_isa_used();
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_tune_matmul(int dim, int runs, int persist, Q4_tune_result* result);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_set_log_callback(Q4_log_callback callback, IntPtr user);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_set_log_level(int level);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_get_log_level();

        // ---- ops.h ------------------------------------------------------------
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_quantize(DLTensor* x, DLTensor* qdata, DLTensor* scale, int scale_layout,
                                                float global_scale, float* global_scale_out, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_dequantize(DLTensor* qdata, DLTensor* scale, int scale_layout,
                                                  float global_scale, DLTensor* out_, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_scaled_mm(DLTensor* a_qdata, DLTensor* a_scale, DLTensor* b_qdata,
                                                 DLTensor* b_scale, int scale_layout, float alpha, DLTensor* bias,
                                                 DLTensor* out_, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_linear(DLTensor* x, DLTensor* w_qdata, DLTensor* w_scale, int scale_layout,
                                              float global_scale, DLTensor* bias, DLTensor* out_, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int MXFP4_quantize(DLTensor* x, DLTensor* qdata, DLTensor* scale, int scale_layout,
                                                Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int MXFP4_dequantize(DLTensor* qdata, DLTensor* scale, int scale_layout, DLTensor* out_,
                                                  Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int MXFP4_linear(DLTensor* x, DLTensor* w_qdata, DLTensor* w_scale, int scale_layout,
                                              DLTensor* bias, DLTensor* out_, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int MXFP4_scaled_mm(DLTensor* a_qdata, DLTensor* a_scale, DLTensor* b_qdata,
                                                 DLTensor* b_scale, int scale_layout, float alpha, DLTensor* bias,
                                                 DLTensor* out_, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int MXFP4_linear_experts(DLTensor* x, DLTensor* w_qdata, DLTensor* w_scale, int scale_layout,
                                                      int* expert_of_group, long* group_rows, long n_groups,
                                                      DLTensor* bias, DLTensor* out_, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NF4_quantize(DLTensor* x, DLTensor* qdata, DLTensor* absmax, int blocksize,
                                              Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NF4_double_quantize(DLTensor* absmax, DLTensor* qabsmax, DLTensor* nested_absmax,
                                                     DLTensor* nested_quant_map, float* offset, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NF4_dequantize(DLTensor* qdata, NF4_state* state, DLTensor* out_, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NF4_scaled_mm(DLTensor* x, DLTensor* w_qdata, NF4_state* w_state, DLTensor* bias,
                                               DLTensor* out_, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_swizzle_scales(DLTensor* linear, DLTensor* swizzled);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_unswizzle_scales(DLTensor* swizzled, DLTensor* linear);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_swizzled_scale_size(long rows, long k, long* bytes);

        // ---- schema.h -----------------------------------------------------------
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_detect_schema(Q4_tensor_desc* tensors, UIntPtr count, Q4_schema_summary* summary);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_detect_linears(Q4_tensor_desc* tensors, UIntPtr count, Q4_linear_schema* out_,
                                                   UIntPtr capacity, UIntPtr* num_found);
        [DllImport(LibName, CallingConvention = CC)] public static extern IntPtr Q4_schema_name(int family);
        [DllImport(LibName, CallingConvention = CC)] public static extern IntPtr Q4_format_name(int format);
        [DllImport(LibName, CallingConvention = CC)] public static extern IntPtr Q4_dtype_name(int dtype);

        // ---- session.h ----------------------------------------------------------
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_session_config_init(Q4_session_config* config);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_session_create(Q4_session_config* config, IntPtr* session);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_session_destroy(IntPtr session);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_session_get_stats(IntPtr session, Q4_session_stats* stats);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_session_set_stream(IntPtr session, IntPtr stream);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_weight_bundle_init(Q4_weight_bundle* bundle);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_linear_create(IntPtr session, Q4_weight_bundle* weight, IntPtr* linear);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_linear_forward(IntPtr linear, DLTensor* x, DLTensor* out_);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_linear_update_weight(IntPtr linear, Q4_weight_bundle* weight);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_linear_destroy(IntPtr linear);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_linear_info_get(IntPtr linear, Q4_linear_info* info);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_linear_diagnostics(IntPtr linear, byte* buf, UIntPtr cap, UIntPtr* needed);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_session_diagnostics(IntPtr session, byte* buf, UIntPtr cap, UIntPtr* needed);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_mutable_create(IntPtr session, int ndim, long* shape, DLDataType dtype, IntPtr* tensor);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_mutable_destroy(IntPtr tensor);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_mutable_begin_write(IntPtr tensor, int mode, DLTensor* view);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_mutable_commit(IntPtr tensor, ulong* version);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_mutable_abort(IntPtr tensor);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_mutable_acquire(IntPtr tensor, DLManagedTensorVersioned** snapshot, ulong* version);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_mutable_version(IntPtr tensor, ulong* version);
        /// <summary>Wraps a library-owned versioned tensor into a legacy DLManagedTensor (takes ownership on success).</summary>
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_dlpack_to_unversioned(DLManagedTensorVersioned* tensor, DLManagedTensor** out_);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_fake_quantize(DLTensor* x, DLTensor* out_, float global_scale,
                                                     float* global_scale_out, Q4_op_options* opts);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_linear_backward(DLTensor* grad_y, DLTensor* x, DLTensor* w_qdata,
                                                       DLTensor* w_scale, int scale_layout, float global_scale,
                                                       DLTensor* grad_x, DLTensor* grad_w, Q4_op_options* opts);

        // ---- checkpoint.h -------------------------------------------------------
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_checkpoint_open(byte* path, IntPtr* checkpoint);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_checkpoint_close(IntPtr checkpoint);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_checkpoint_count(IntPtr checkpoint, UIntPtr* count);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_checkpoint_tensor_info(IntPtr checkpoint, UIntPtr index, Q4_tensor_desc* desc, long* nbytes);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_checkpoint_find(IntPtr checkpoint, byte* name, UIntPtr* index);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_checkpoint_tensor(IntPtr checkpoint, UIntPtr index, DLTensor* view);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_checkpoint_metadata(IntPtr checkpoint, byte* key, byte* buf, UIntPtr cap, UIntPtr* needed);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_checkpoint_detect(IntPtr checkpoint, Q4_schema_summary* summary);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_checkpoint_linear_create(IntPtr session, IntPtr checkpoint, byte* prefix, IntPtr* linear);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_checkpoint_writer_create(IntPtr* writer);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_checkpoint_writer_destroy(IntPtr writer);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_checkpoint_writer_add(IntPtr writer, byte* name, int dtype, DLTensor* data);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_checkpoint_writer_metadata(IntPtr writer, byte* key, byte* value);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int Q4_checkpoint_writer_commit(IntPtr writer, byte* path);

        // ---- cuda.h -------------------------------------------------------------
        [DllImport(LibName, CallingConvention = CC)] public static extern int NVFP4_can_use_managed(int device, int* can_use);
        [DllImport(LibName, CallingConvention = CC)] public static extern int NVFP4_is_managed_tensor(DLTensor* t, int* is_managed);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_to_managed(DLTensor* src, int device, uint flags, DLManagedTensorVersioned** out_);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_managed_prefetch(DLTensor* t, int device, IntPtr stream);
        [DllImport(LibName, CallingConvention = CC)]
        public static extern int NVFP4_memory_info(int device, ulong* free_bytes, ulong* total_bytes);
        [DllImport(LibName, CallingConvention = CC)] public static extern int Q4_cuda_synchronize(int device, IntPtr stream);
        [DllImport(LibName, CallingConvention = CC)] public static extern int NVFP4_empty_cache();
    }
}
