//! Raw declarations of the libNVFP4 C ABI (ABI version 1).
//!
//! Every exported function of `abi/libNVFP4.symbols`, every struct of
//! `include/nvfp4/*.h` as `#[repr(C)]`, and every `#define` / enumerator as a
//! constant with the header's name. Nothing here is safe to call without
//! reading the corresponding header comment; the `nvfp4` crate wraps it.
//!
//! The layouts are checked against the C compiler by `tests/layout.rs`
//! (it compiles a C program that prints `sizeof`/`offsetof` of every struct
//! and the value of every constant, and compares them with this crate).
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]
#![no_std]

use core::ffi::{c_char, c_void};

// ---------------------------------------------------------------------------
// version.h
// ---------------------------------------------------------------------------
pub const NVFP4_VERSION_MAJOR: i32 = 0;
pub const NVFP4_VERSION_MINOR: i32 = 1;
pub const NVFP4_VERSION_PATCH: i32 = 0;
pub const NVFP4_VERSION_STRING: &str = "0.1.0";
pub const NVFP4_ABI_VERSION: i32 = 1;
pub const NVFP4_VERSION_NUMBER: i32 = NVFP4_VERSION_MAJOR * 10000 + NVFP4_VERSION_MINOR * 100 + NVFP4_VERSION_PATCH;

// ---------------------------------------------------------------------------
// dlpack.h (DLPack 1.1)
// ---------------------------------------------------------------------------
pub const DLPACK_MAJOR_VERSION: u32 = 1;
pub const DLPACK_MINOR_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

/// C enum `DLDeviceType` (an `int`-sized enum); kept as an integer so that
/// any value coming from C is representable.
pub type DLDeviceType = i32;
pub const kDLCPU: DLDeviceType = 1;
pub const kDLCUDA: DLDeviceType = 2;
pub const kDLCUDAHost: DLDeviceType = 3;
pub const kDLOpenCL: DLDeviceType = 4;
pub const kDLVulkan: DLDeviceType = 7;
pub const kDLMetal: DLDeviceType = 8;
pub const kDLVPI: DLDeviceType = 9;
pub const kDLROCM: DLDeviceType = 10;
pub const kDLROCMHost: DLDeviceType = 11;
pub const kDLExtDev: DLDeviceType = 12;
pub const kDLCUDAManaged: DLDeviceType = 13;
pub const kDLOneAPI: DLDeviceType = 14;
pub const kDLWebGPU: DLDeviceType = 15;
pub const kDLHexagon: DLDeviceType = 16;
pub const kDLMAIA: DLDeviceType = 17;
pub const kDLTrn: DLDeviceType = 18;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: DLDeviceType,
    pub device_id: i32,
}

/// C enum `DLDataTypeCode`; stored as `u8` in [`DLDataType::code`].
pub type DLDataTypeCode = u32;
pub const kDLInt: DLDataTypeCode = 0;
pub const kDLUInt: DLDataTypeCode = 1;
pub const kDLFloat: DLDataTypeCode = 2;
pub const kDLOpaqueHandle: DLDataTypeCode = 3;
pub const kDLBfloat: DLDataTypeCode = 4;
pub const kDLComplex: DLDataTypeCode = 5;
pub const kDLBool: DLDataTypeCode = 6;
pub const kDLFloat8_e3m4: DLDataTypeCode = 7;
pub const kDLFloat8_e4m3: DLDataTypeCode = 8;
pub const kDLFloat8_e4m3b11fnuz: DLDataTypeCode = 9;
pub const kDLFloat8_e4m3fn: DLDataTypeCode = 10;
pub const kDLFloat8_e4m3fnuz: DLDataTypeCode = 11;
pub const kDLFloat8_e5m2: DLDataTypeCode = 12;
pub const kDLFloat8_e5m2fnuz: DLDataTypeCode = 13;
pub const kDLFloat8_e8m0fnu: DLDataTypeCode = 14;
pub const kDLFloat6_e2m3fn: DLDataTypeCode = 15;
pub const kDLFloat6_e3m2fn: DLDataTypeCode = 16;
pub const kDLFloat4_e2m1fn: DLDataTypeCode = 17;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(self_: *mut DLManagedTensor)>,
}

pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(self_: *mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

// ---------------------------------------------------------------------------
// q4_base.h
// ---------------------------------------------------------------------------
pub const Q4_OK: i32 = 0;
pub const Q4_ERR_INVALID_ARGUMENT: i32 = 1;
pub const Q4_ERR_NULL_POINTER: i32 = 2;
pub const Q4_ERR_DTYPE: i32 = 3;
pub const Q4_ERR_SHAPE: i32 = 4;
pub const Q4_ERR_DEVICE: i32 = 5;
pub const Q4_ERR_STRIDES: i32 = 6;
pub const Q4_ERR_ALIGNMENT: i32 = 7;
pub const Q4_ERR_OVERFLOW: i32 = 8;
pub const Q4_ERR_ALIASING: i32 = 9;
pub const Q4_ERR_NON_FINITE: i32 = 10;
pub const Q4_ERR_UNSUPPORTED: i32 = 11;
pub const Q4_ERR_OUT_OF_MEMORY: i32 = 12;
pub const Q4_ERR_BUFFER_TOO_SMALL: i32 = 13;
pub const Q4_ERR_BUSY: i32 = 14;
pub const Q4_ERR_SCHEMA: i32 = 15;
pub const Q4_ERR_NOT_FOUND: i32 = 16;
pub const Q4_ERR_CUDA: i32 = 17;
pub const Q4_ERR_NOT_AVAILABLE: i32 = 18;
pub const Q4_ERR_IO: i32 = 19;
pub const Q4_ERR_FORMAT: i32 = 20;
pub const Q4_ERR_STATE: i32 = 21;
pub const Q4_ERR_INTERNAL: i32 = 99;

pub const Q4_SCALE_LINEAR: i32 = 0;
pub const Q4_SCALE_SWIZZLED: i32 = 1;

pub const Q4_PATH_AUTO: i32 = 0;
pub const Q4_PATH_KERNEL_ONLY: i32 = 1;
pub const Q4_PATH_KERNEL_OR_FALLBACK: i32 = 2;
pub const Q4_PATH_DEQUANT_MATMUL_ONLY: i32 = 3;

pub const Q4_BACKEND_AUTO: i32 = 0;
pub const Q4_BACKEND_NVFP4_KERNEL: i32 = 1;
pub const Q4_BACKEND_NF4_KERNEL: i32 = 2;
pub const Q4_BACKEND_DEQUANT_MATMUL: i32 = 3;

pub const Q4_TARGET_AUTO: i32 = 0;
pub const Q4_TARGET_CPU: i32 = 1;
pub const Q4_TARGET_CUDA: i32 = 2;

pub const Q4_MATH_EXACT: i32 = 0;
pub const Q4_MATH_FAST: i32 = 1;

pub const Q4_FORMAT_NONE: i32 = 0;
pub const Q4_FORMAT_NVFP4: i32 = 1;
pub const Q4_FORMAT_NF4: i32 = 2;
pub const Q4_FORMAT_MIXED: i32 = 3;
pub const Q4_FORMAT_MXFP4: i32 = 4;

pub const Q4_ISA_SCALAR: i32 = 0;
pub const Q4_ISA_AVX2: i32 = 1;
pub const Q4_ISA_AVX512: i32 = 2;
pub const Q4_ISA_AVX512_VNNI: i32 = 3;
pub const Q4_ISA_AVX_VNNI: i32 = 4;
pub const Q4_ISA_NEON: i32 = 16;
pub const Q4_ISA_NEON_DOTPROD: i32 = 17;
pub const Q4_ISA_NEON_I8MM: i32 = 18;
pub const Q4_ISA_BEST: i32 = 255;

pub const Q4_CPU_SSE42: u64 = 1 << 0;
pub const Q4_CPU_AVX: u64 = 1 << 1;
pub const Q4_CPU_AVX2: u64 = 1 << 2;
pub const Q4_CPU_FMA: u64 = 1 << 3;
pub const Q4_CPU_F16C: u64 = 1 << 4;
pub const Q4_CPU_AVX512F: u64 = 1 << 5;
pub const Q4_CPU_AVX512BW: u64 = 1 << 6;
pub const Q4_CPU_AVX512VL: u64 = 1 << 7;
pub const Q4_CPU_AVX512DQ: u64 = 1 << 8;
pub const Q4_CPU_AVX512VNNI: u64 = 1 << 9;
pub const Q4_CPU_AVX512VBMI: u64 = 1 << 10;
pub const Q4_CPU_AVX512BF16: u64 = 1 << 11;
pub const Q4_CPU_AVXVNNI: u64 = 1 << 12;
pub const Q4_CPU_OS_AVX: u64 = 1 << 13;
pub const Q4_CPU_OS_AVX512: u64 = 1 << 14;
pub const Q4_CPU_NEON: u64 = 1 << 32;
pub const Q4_CPU_DOTPROD: u64 = 1 << 33;
pub const Q4_CPU_SVE: u64 = 1 << 34;
pub const Q4_CPU_I8MM: u64 = 1 << 35;
pub const Q4_CPU_BF16: u64 = 1 << 36;

pub const Q4_CUDA_NOT_BUILT: i32 = 0;
pub const Q4_CUDA_NOT_LOADED: i32 = 1;
pub const Q4_CUDA_NO_DEVICE: i32 = 2;
pub const Q4_CUDA_READY: i32 = 3;

pub const Q4_LOG_OFF: i32 = 0;
pub const Q4_LOG_ERROR: i32 = 1;
pub const Q4_LOG_WARN: i32 = 2;
pub const Q4_LOG_INFO: i32 = 3;
pub const Q4_LOG_DEBUG: i32 = 4;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_op_options {
    pub struct_size: u32,
    pub compute_path: i32,
    pub backend: i32,
    pub target: i32,
    pub device_id: i32,
    pub math_mode: i32,
    pub num_threads: i32,
    pub reserved0: i32,
    pub stream: *mut c_void,
    pub reserved: [u64; 6],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_capabilities {
    pub struct_size: u32,
    pub abi_version: i32,
    pub cpu_features: u64,
    pub isa_best: i32,
    pub isa_active: i32,
    pub num_cpus: i32,
    pub cuda_state: i32,
    pub cuda_runtime_version: i32,
    pub cuda_driver_version: i32,
    pub cuda_device_count: i32,
    pub managed_memory: i32,
    pub fp4_tensor_cores: i32,
    pub reserved0: i32,
    pub cpu_vendor: [c_char; 16],
    pub cpu_brand: [c_char; 64],
    pub cuda_archs: [c_char; 64],
    pub native_load_state: [c_char; 256],
    pub reserved: [u64; 8],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_tune_result {
    pub struct_size: u32,
    pub dim: i32,
    pub runs: i32,
    pub candidates: i32,
    pub kc_default: i32,
    pub mc_default: i32,
    pub kc_best: i32,
    pub mc_best: i32,
    pub default_ms: f64,
    pub best_ms: f64,
    pub adopted: i32,
    pub persisted: i32,
    pub cache_path: [c_char; 256],
    pub cpu_signature: [c_char; 192],
    pub reserved: [u64; 4],
}

pub type Q4_log_callback = Option<unsafe extern "C" fn(level: i32, message: *const c_char, user: *mut c_void)>;

// ---------------------------------------------------------------------------
// ops.h
// ---------------------------------------------------------------------------
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NF4_state {
    pub struct_size: u32,
    pub blocksize: i32,
    pub absmax: *const DLTensor,
    pub quant_map: *const DLTensor,
    pub nested_absmax: *const DLTensor,
    pub nested_quant_map: *const DLTensor,
    pub nested_offset: f32,
    pub nested_blocksize: i32,
    pub reserved: [u64; 4],
}

// ---------------------------------------------------------------------------
// schema.h
// ---------------------------------------------------------------------------
pub const Q4_DTYPE_UNKNOWN: i32 = 0;
pub const Q4_DTYPE_F32: i32 = 1;
pub const Q4_DTYPE_F16: i32 = 2;
pub const Q4_DTYPE_BF16: i32 = 3;
pub const Q4_DTYPE_U8: i32 = 4;
pub const Q4_DTYPE_I8: i32 = 5;
pub const Q4_DTYPE_F8_E4M3: i32 = 6;
pub const Q4_DTYPE_F4: i32 = 7;
pub const Q4_DTYPE_I16: i32 = 8;
pub const Q4_DTYPE_I32: i32 = 9;
pub const Q4_DTYPE_I64: i32 = 10;
pub const Q4_DTYPE_F64: i32 = 11;
pub const Q4_DTYPE_BOOL: i32 = 12;
pub const Q4_DTYPE_F8_E5M2: i32 = 13;
pub const Q4_DTYPE_U16: i32 = 14;
pub const Q4_DTYPE_U32: i32 = 15;
pub const Q4_DTYPE_U64: i32 = 16;

pub const Q4_SCHEMA_NONE: i32 = 0;
pub const Q4_SCHEMA_BNB_NF4: i32 = 1;
pub const Q4_SCHEMA_NVFP4_LEGACY: i32 = 2;
pub const Q4_SCHEMA_NVFP4_MODELOPT: i32 = 3;
pub const Q4_SCHEMA_NVFP4_COMPRESSED: i32 = 4;
pub const Q4_SCHEMA_MXFP4_GPT_OSS: i32 = 5;

pub const Q4_ROLE_WEIGHT: i32 = 0;
pub const Q4_ROLE_SCALE: i32 = 1;
pub const Q4_ROLE_GLOBAL_SCALE: i32 = 2;
pub const Q4_ROLE_INPUT_SCALE: i32 = 3;
pub const Q4_ROLE_QUANT_MAP: i32 = 4;
pub const Q4_ROLE_NESTED_ABSMAX: i32 = 5;
pub const Q4_ROLE_NESTED_QUANT_MAP: i32 = 6;
pub const Q4_ROLE_QUANT_STATE: i32 = 7;
pub const Q4_ROLE_BIAS: i32 = 8;
pub const Q4_ROLE_COUNT: i32 = 9;
pub const Q4_MAX_ROLES: usize = 16;
pub const Q4_MAX_NDIM: usize = 8;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_tensor_desc {
    pub name: *const c_char,
    pub dtype: i32,
    pub ndim: i32,
    pub shape: [i64; Q4_MAX_NDIM],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_linear_schema {
    pub struct_size: u32,
    pub format: i32,
    pub family: i32,
    pub prefix_len: i32,
    pub prefix_tensor: i32,
    pub roles: [i32; Q4_MAX_ROLES],
    pub global_scale_inverted: i32,
    pub reserved0: i32,
    pub reserved: [u64; 4],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_schema_summary {
    pub struct_size: u32,
    pub format: i32,
    pub family: i32,
    pub num_linears: i32,
    pub family_counts: [i32; 8],
    pub num_incomplete: i32,
    pub reserved0: i32,
    pub reserved: [u64; 4],
}

// ---------------------------------------------------------------------------
// session.h
// ---------------------------------------------------------------------------
/// Opaque `Q4_session`.
#[repr(C)]
pub struct Q4_session {
    _opaque: [u8; 0],
    _pin: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}
/// Opaque `Q4_linear`.
#[repr(C)]
pub struct Q4_linear {
    _opaque: [u8; 0],
    _pin: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}
/// Opaque `Q4_mutable`.
#[repr(C)]
pub struct Q4_mutable {
    _opaque: [u8; 0],
    _pin: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

pub const Q4_UM_DISABLED: i32 = 0;
pub const Q4_UM_PREFER: i32 = 1;
pub const Q4_UM_REQUIRE: i32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_session_config {
    pub struct_size: u32,
    pub compute_path: i32,
    pub backend: i32,
    pub target: i32,
    pub device_id: i32,
    pub unified_memory: i32,
    pub num_threads: i32,
    pub diagnostics: i32,
    pub math_mode: i32,
    pub reserved0: i32,
    pub reserved: [u64; 6],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_session_stats {
    pub struct_size: u32,
    pub live_linears: i32,
    pub live_mutables: i32,
    pub live_snapshots: i32,
    pub live_buffers: i64,
    pub live_bytes: i64,
    pub managed_bytes: i64,
    pub forwards: i64,
    pub implicit_copies: i64,
    pub reserved: [u64; 4],
}

pub const Q4_WEIGHT_PACKED: i32 = 0;
pub const Q4_WEIGHT_FLOAT: i32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_weight_bundle {
    pub struct_size: u32,
    pub format: i32,
    pub source: i32,
    pub scale_layout: i32,
    pub weight: *const DLTensor,
    pub out_features: i64,
    pub in_features: i64,
    pub scale: *const DLTensor,
    pub global_scale: f32,
    pub blocksize: i32,
    pub nf4: *const NF4_state,
    pub bias: *const DLTensor,
    pub reserved: [u64; 6],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q4_linear_info {
    pub struct_size: u32,
    pub format: i32,
    pub backend: i32,
    pub compute_path: i32,
    pub fell_back: i32,
    pub isa: i32,
    pub target: i32,
    pub unified_memory: i32,
    pub scale_layout: i32,
    pub math_mode: i32,
    pub out_features: i64,
    pub in_features: i64,
    pub weight_bytes: i64,
    pub weight_version: u64,
    pub reserved: [u64; 4],
}

pub const Q4_WRITE_KEEP: i32 = 0;
pub const Q4_WRITE_DISCARD: i32 = 1;

// ---------------------------------------------------------------------------
// checkpoint.h
// ---------------------------------------------------------------------------
/// Opaque `Q4_checkpoint`.
#[repr(C)]
pub struct Q4_checkpoint {
    _opaque: [u8; 0],
    _pin: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}
/// Opaque `Q4_checkpoint_writer`.
#[repr(C)]
pub struct Q4_checkpoint_writer {
    _opaque: [u8; 0],
    _pin: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

// ---------------------------------------------------------------------------
// cuda.h
// ---------------------------------------------------------------------------
pub const Q4_MANAGED_READ_MOSTLY: u32 = 1;
pub const Q4_MANAGED_PREFETCH: u32 = 2;
pub const Q4_MANAGED_REPORT_MANAGED: u32 = 4;

// ---------------------------------------------------------------------------
// Functions: exactly the 76 symbols of abi/libNVFP4.symbols.
// ---------------------------------------------------------------------------
extern "C" {
    // q4_base.h: errors, version
    pub fn Q4_status_string(status: i32) -> *const c_char;
    pub fn Q4_last_error() -> *const c_char;
    pub fn Q4_clear_error();
    pub fn Q4_version() -> i32;
    pub fn Q4_version_string() -> *const c_char;
    pub fn Q4_abi_version() -> i32;
    // options, capabilities, ISA, tuner, logging
    pub fn Q4_op_options_init(opts: *mut Q4_op_options) -> i32;
    pub fn Q4_get_capabilities(caps: *mut Q4_capabilities) -> i32;
    pub fn Q4_isa_name(isa: i32) -> *const c_char;
    pub fn Q4_set_max_isa(isa: i32) -> i32;
    pub fn Q4_last_isa_used() -> i32;
    pub fn Q4_tune_matmul(dim: i32, runs: i32, persist: i32, result: *mut Q4_tune_result) -> i32;
    pub fn Q4_set_log_callback(callback: Q4_log_callback, user: *mut c_void) -> i32;
    pub fn Q4_set_log_level(level: i32) -> i32;
    pub fn Q4_get_log_level() -> i32;

    // ops.h
    pub fn NVFP4_quantize(
        x: *const DLTensor,
        qdata: *mut DLTensor,
        scale: *mut DLTensor,
        scale_layout: i32,
        global_scale: f32,
        global_scale_out: *mut f32,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn NVFP4_dequantize(
        qdata: *const DLTensor,
        scale: *const DLTensor,
        scale_layout: i32,
        global_scale: f32,
        out: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn NVFP4_scaled_mm(
        a_qdata: *const DLTensor,
        a_scale: *const DLTensor,
        b_qdata: *const DLTensor,
        b_scale: *const DLTensor,
        scale_layout: i32,
        alpha: f32,
        bias: *const DLTensor,
        out: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn NVFP4_linear(
        x: *const DLTensor,
        w_qdata: *const DLTensor,
        w_scale: *const DLTensor,
        scale_layout: i32,
        global_scale: f32,
        bias: *const DLTensor,
        out: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn MXFP4_quantize(
        x: *const DLTensor,
        qdata: *mut DLTensor,
        scale: *mut DLTensor,
        scale_layout: i32,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn MXFP4_dequantize(
        qdata: *const DLTensor,
        scale: *const DLTensor,
        scale_layout: i32,
        out: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn MXFP4_linear(
        x: *const DLTensor,
        w_qdata: *const DLTensor,
        w_scale: *const DLTensor,
        scale_layout: i32,
        bias: *const DLTensor,
        out: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn MXFP4_scaled_mm(
        a_qdata: *const DLTensor,
        a_scale: *const DLTensor,
        b_qdata: *const DLTensor,
        b_scale: *const DLTensor,
        scale_layout: i32,
        alpha: f32,
        bias: *const DLTensor,
        out: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn MXFP4_linear_experts(
        x: *const DLTensor,
        w_qdata: *const DLTensor,
        w_scale: *const DLTensor,
        scale_layout: i32,
        expert_of_group: *const i32,
        group_rows: *const i64,
        n_groups: i64,
        bias: *const DLTensor,
        out: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn NF4_quantize(
        x: *const DLTensor,
        qdata: *mut DLTensor,
        absmax: *mut DLTensor,
        blocksize: i32,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn NF4_double_quantize(
        absmax: *const DLTensor,
        qabsmax: *mut DLTensor,
        nested_absmax: *mut DLTensor,
        nested_quant_map: *mut DLTensor,
        offset: *mut f32,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn NF4_dequantize(
        qdata: *const DLTensor,
        state: *const NF4_state,
        out: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn NF4_scaled_mm(
        x: *const DLTensor,
        w_qdata: *const DLTensor,
        w_state: *const NF4_state,
        bias: *const DLTensor,
        out: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn NVFP4_swizzle_scales(linear: *const DLTensor, swizzled: *mut DLTensor) -> i32;
    pub fn NVFP4_unswizzle_scales(swizzled: *const DLTensor, linear: *mut DLTensor) -> i32;
    pub fn NVFP4_swizzled_scale_size(rows: i64, k: i64, bytes: *mut i64) -> i32;

    // schema.h
    pub fn Q4_detect_schema(tensors: *const Q4_tensor_desc, count: usize, summary: *mut Q4_schema_summary) -> i32;
    pub fn Q4_detect_linears(
        tensors: *const Q4_tensor_desc,
        count: usize,
        out: *mut Q4_linear_schema,
        capacity: usize,
        num_found: *mut usize,
    ) -> i32;
    pub fn Q4_schema_name(family: i32) -> *const c_char;
    pub fn Q4_format_name(format: i32) -> *const c_char;
    pub fn Q4_dtype_name(dtype: i32) -> *const c_char;

    // session.h
    pub fn Q4_session_config_init(config: *mut Q4_session_config) -> i32;
    pub fn Q4_session_create(config: *const Q4_session_config, session: *mut *mut Q4_session) -> i32;
    pub fn Q4_session_destroy(session: *mut Q4_session) -> i32;
    pub fn Q4_session_get_stats(session: *const Q4_session, stats: *mut Q4_session_stats) -> i32;
    pub fn Q4_session_set_stream(session: *mut Q4_session, stream: *mut c_void) -> i32;
    pub fn Q4_weight_bundle_init(bundle: *mut Q4_weight_bundle) -> i32;
    pub fn Q4_linear_create(
        session: *mut Q4_session,
        weight: *const Q4_weight_bundle,
        linear: *mut *mut Q4_linear,
    ) -> i32;
    pub fn Q4_linear_forward(linear: *mut Q4_linear, x: *const DLTensor, out: *mut DLTensor) -> i32;
    pub fn Q4_linear_update_weight(linear: *mut Q4_linear, weight: *const Q4_weight_bundle) -> i32;
    pub fn Q4_linear_destroy(linear: *mut Q4_linear) -> i32;
    pub fn Q4_linear_info_get(linear: *const Q4_linear, info: *mut Q4_linear_info) -> i32;
    pub fn Q4_linear_diagnostics(linear: *const Q4_linear, buf: *mut c_char, cap: usize, needed: *mut usize) -> i32;
    pub fn Q4_session_diagnostics(session: *const Q4_session, buf: *mut c_char, cap: usize, needed: *mut usize) -> i32;
    pub fn Q4_mutable_create(
        session: *mut Q4_session,
        ndim: i32,
        shape: *const i64,
        dtype: DLDataType,
        tensor: *mut *mut Q4_mutable,
    ) -> i32;
    pub fn Q4_mutable_destroy(tensor: *mut Q4_mutable) -> i32;
    pub fn Q4_mutable_begin_write(tensor: *mut Q4_mutable, mode: i32, view: *mut DLTensor) -> i32;
    pub fn Q4_mutable_commit(tensor: *mut Q4_mutable, version: *mut u64) -> i32;
    pub fn Q4_mutable_abort(tensor: *mut Q4_mutable) -> i32;
    pub fn Q4_mutable_acquire(
        tensor: *mut Q4_mutable,
        snapshot: *mut *mut DLManagedTensorVersioned,
        version: *mut u64,
    ) -> i32;
    pub fn Q4_mutable_version(tensor: *const Q4_mutable, version: *mut u64) -> i32;
    /// Wraps a library-owned versioned tensor into a legacy DLManagedTensor
    /// (ownership of `tensor` passes to the result on success).
    pub fn Q4_dlpack_to_unversioned(tensor: *mut DLManagedTensorVersioned, out: *mut *mut DLManagedTensor) -> i32;
    pub fn NVFP4_fake_quantize(
        x: *const DLTensor,
        out: *mut DLTensor,
        global_scale: f32,
        global_scale_out: *mut f32,
        opts: *const Q4_op_options,
    ) -> i32;
    pub fn NVFP4_linear_backward(
        grad_y: *const DLTensor,
        x: *const DLTensor,
        w_qdata: *const DLTensor,
        w_scale: *const DLTensor,
        scale_layout: i32,
        global_scale: f32,
        grad_x: *mut DLTensor,
        grad_w: *mut DLTensor,
        opts: *const Q4_op_options,
    ) -> i32;

    // checkpoint.h
    pub fn Q4_checkpoint_open(path: *const c_char, checkpoint: *mut *mut Q4_checkpoint) -> i32;
    pub fn Q4_checkpoint_close(checkpoint: *mut Q4_checkpoint) -> i32;
    pub fn Q4_checkpoint_count(checkpoint: *const Q4_checkpoint, count: *mut usize) -> i32;
    pub fn Q4_checkpoint_tensor_info(
        checkpoint: *const Q4_checkpoint,
        index: usize,
        desc: *mut Q4_tensor_desc,
        nbytes: *mut i64,
    ) -> i32;
    pub fn Q4_checkpoint_find(checkpoint: *const Q4_checkpoint, name: *const c_char, index: *mut usize) -> i32;
    pub fn Q4_checkpoint_tensor(checkpoint: *const Q4_checkpoint, index: usize, view: *mut DLTensor) -> i32;
    pub fn Q4_checkpoint_metadata(
        checkpoint: *const Q4_checkpoint,
        key: *const c_char,
        buf: *mut c_char,
        cap: usize,
        needed: *mut usize,
    ) -> i32;
    pub fn Q4_checkpoint_detect(checkpoint: *const Q4_checkpoint, summary: *mut Q4_schema_summary) -> i32;
    pub fn Q4_checkpoint_linear_create(
        session: *mut Q4_session,
        checkpoint: *const Q4_checkpoint,
        prefix: *const c_char,
        linear: *mut *mut Q4_linear,
    ) -> i32;
    pub fn Q4_checkpoint_writer_create(writer: *mut *mut Q4_checkpoint_writer) -> i32;
    pub fn Q4_checkpoint_writer_destroy(writer: *mut Q4_checkpoint_writer) -> i32;
    pub fn Q4_checkpoint_writer_add(
        writer: *mut Q4_checkpoint_writer,
        name: *const c_char,
        dtype: i32,
        data: *const DLTensor,
    ) -> i32;
    pub fn Q4_checkpoint_writer_metadata(
        writer: *mut Q4_checkpoint_writer,
        key: *const c_char,
        value: *const c_char,
    ) -> i32;
    pub fn Q4_checkpoint_writer_commit(writer: *mut Q4_checkpoint_writer, path: *const c_char) -> i32;

    // cuda.h
    pub fn NVFP4_can_use_managed(device: i32, can_use: *mut i32) -> i32;
    pub fn NVFP4_is_managed_tensor(t: *const DLTensor, is_managed: *mut i32) -> i32;
    pub fn NVFP4_to_managed(
        src: *const DLTensor,
        device: i32,
        flags: u32,
        out: *mut *mut DLManagedTensorVersioned,
    ) -> i32;
    pub fn NVFP4_managed_prefetch(t: *const DLTensor, device: i32, stream: *mut c_void) -> i32;
    pub fn NVFP4_memory_info(device: i32, free_bytes: *mut u64, total_bytes: *mut u64) -> i32;
    pub fn Q4_cuda_synchronize(device: i32, stream: *mut c_void) -> i32;
    pub fn NVFP4_empty_cache() -> i32;
}
