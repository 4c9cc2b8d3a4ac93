//! Layout and constant check of the raw declarations against the C headers.
//!
//! Method: this test writes a C program that `#include`s the headers the crate
//! mirrors (the repository's `include/`, or `NVFP4_INCLUDE_DIR`), printing
//! `sizeof`/`offsetof` of every mirrored struct field and the value of every
//! constant named below; it compiles it with `$CC` (default `cc`), runs it and
//! compares each line with the same quantity computed by Rust
//! (`size_of`/`offset_of!`/the constant). A field renamed or missing on either
//! side fails the C compile or the comparison; a field added in C changes the
//! size. To catch a constant or function added to the headers but not to the
//! crate, the test also scans the headers' `#define`s and DLPack enumerators
//! and the symbol list `abi/libNVFP4.symbols`.
//!
//! No C compiler → the test fails with a message (set `CC`); it is not skipped
//! silently, because drift is exactly what it exists to catch.
use nvfp4_sys::*;
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

macro_rules! layouts {
    ($( $t:ident { $($f:ident),* $(,)? } )*) => {{
        let mut v: Vec<(String, u64)> = Vec::new();
        $(
            v.push((format!("size {}", stringify!($t)), size_of::<$t>() as u64));
            $( v.push((format!("offset {}.{}", stringify!($t), stringify!($f)), offset_of!($t, $f) as u64)); )*
        )*
        v
    }};
}

macro_rules! consts {
    ($($c:ident),* $(,)?) => {
        vec![$( (stringify!($c), ($c) as u64) ),*]
    };
}

fn rust_layouts() -> Vec<(String, u64)> {
    layouts! {
        DLPackVersion { major, minor }
        DLDevice { device_type, device_id }
        DLDataType { code, bits, lanes }
        DLTensor { data, device, ndim, dtype, shape, strides, byte_offset }
        DLManagedTensor { dl_tensor, manager_ctx, deleter }
        DLManagedTensorVersioned { version, manager_ctx, deleter, flags, dl_tensor }
        Q4_op_options { struct_size, compute_path, backend, target, device_id, math_mode, num_threads, reserved0, stream, reserved }
        Q4_capabilities { struct_size, abi_version, cpu_features, isa_best, isa_active, num_cpus, cuda_state,
            cuda_runtime_version, cuda_driver_version, cuda_device_count, managed_memory, fp4_tensor_cores, reserved0,
            cpu_vendor, cpu_brand, cuda_archs, native_load_state, reserved }
        Q4_tune_result { struct_size, dim, runs, candidates, kc_default, mc_default, kc_best, mc_best, default_ms,
            best_ms, adopted, persisted, cache_path, cpu_signature, reserved }
        NF4_state { struct_size, blocksize, absmax, quant_map, nested_absmax, nested_quant_map, nested_offset,
            nested_blocksize, reserved }
        Q4_tensor_desc { name, dtype, ndim, shape }
        Q4_linear_schema { struct_size, format, family, prefix_len, prefix_tensor, roles, global_scale_inverted,
            reserved0, reserved }
        Q4_schema_summary { struct_size, format, family, num_linears, family_counts, num_incomplete, reserved0, reserved }
        Q4_session_config { struct_size, compute_path, backend, target, device_id, unified_memory, num_threads,
            diagnostics, math_mode, reserved0, reserved }
        Q4_session_stats { struct_size, live_linears, live_mutables, live_snapshots, live_buffers, live_bytes,
            managed_bytes, forwards, implicit_copies, reserved }
        Q4_weight_bundle { struct_size, format, source, scale_layout, weight, out_features, in_features, scale,
            global_scale, blocksize, nf4, bias, reserved }
        Q4_linear_info { struct_size, format, backend, compute_path, fell_back, isa, target, unified_memory,
            scale_layout, math_mode, out_features, in_features, weight_bytes, weight_version, reserved }
    }
}

fn rust_consts() -> Vec<(&'static str, u64)> {
    consts![
        Q4_MANAGED_READ_MOSTLY,
        Q4_MANAGED_PREFETCH,
        Q4_MANAGED_REPORT_MANAGED,
        DLPACK_MAJOR_VERSION,
        DLPACK_MINOR_VERSION,
        DLPACK_FLAG_BITMASK_READ_ONLY,
        DLPACK_FLAG_BITMASK_IS_COPIED,
        DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
        Q4_OK,
        Q4_ERR_INVALID_ARGUMENT,
        Q4_ERR_NULL_POINTER,
        Q4_ERR_DTYPE,
        Q4_ERR_SHAPE,
        Q4_ERR_DEVICE,
        Q4_ERR_STRIDES,
        Q4_ERR_ALIGNMENT,
        Q4_ERR_OVERFLOW,
        Q4_ERR_ALIASING,
        Q4_ERR_NON_FINITE,
        Q4_ERR_UNSUPPORTED,
        Q4_ERR_OUT_OF_MEMORY,
        Q4_ERR_BUFFER_TOO_SMALL,
        Q4_ERR_BUSY,
        Q4_ERR_SCHEMA,
        Q4_ERR_NOT_FOUND,
        Q4_ERR_CUDA,
        Q4_ERR_NOT_AVAILABLE,
        Q4_ERR_IO,
        Q4_ERR_FORMAT,
        Q4_ERR_STATE,
        Q4_ERR_INTERNAL,
        Q4_SCALE_LINEAR,
        Q4_SCALE_SWIZZLED,
        Q4_PATH_AUTO,
        Q4_PATH_KERNEL_ONLY,
        Q4_PATH_KERNEL_OR_FALLBACK,
        Q4_PATH_DEQUANT_MATMUL_ONLY,
        Q4_BACKEND_AUTO,
        Q4_BACKEND_NVFP4_KERNEL,
        Q4_BACKEND_NF4_KERNEL,
        Q4_BACKEND_DEQUANT_MATMUL,
        Q4_TARGET_AUTO,
        Q4_TARGET_CPU,
        Q4_TARGET_CUDA,
        Q4_MATH_EXACT,
        Q4_MATH_FAST,
        Q4_FORMAT_NONE,
        Q4_FORMAT_NVFP4,
        Q4_FORMAT_NF4,
        Q4_FORMAT_MIXED,
        Q4_FORMAT_MXFP4,
        Q4_ISA_SCALAR,
        Q4_ISA_AVX2,
        Q4_ISA_AVX512,
        Q4_ISA_AVX512_VNNI,
        Q4_ISA_AVX_VNNI,
        Q4_ISA_NEON,
        Q4_ISA_NEON_DOTPROD,
        Q4_ISA_NEON_I8MM,
        Q4_ISA_BEST,
        Q4_CPU_SSE42,
        Q4_CPU_AVX,
        Q4_CPU_AVX2,
        Q4_CPU_FMA,
        Q4_CPU_F16C,
        Q4_CPU_AVX512F,
        Q4_CPU_AVX512BW,
        Q4_CPU_AVX512VL,
        Q4_CPU_AVX512DQ,
        Q4_CPU_AVX512VNNI,
        Q4_CPU_AVX512VBMI,
        Q4_CPU_AVX512BF16,
        Q4_CPU_AVXVNNI,
        Q4_CPU_OS_AVX,
        Q4_CPU_OS_AVX512,
        Q4_CPU_NEON,
        Q4_CPU_DOTPROD,
        Q4_CPU_SVE,
        Q4_CPU_I8MM,
        Q4_CPU_BF16,
        Q4_CUDA_NOT_BUILT,
        Q4_CUDA_NOT_LOADED,
        Q4_CUDA_NO_DEVICE,
        Q4_CUDA_READY,
        Q4_LOG_OFF,
        Q4_LOG_ERROR,
        Q4_LOG_WARN,
        Q4_LOG_INFO,
        Q4_LOG_DEBUG,
        Q4_DTYPE_UNKNOWN,
        Q4_DTYPE_F32,
        Q4_DTYPE_F16,
        Q4_DTYPE_BF16,
        Q4_DTYPE_U8,
        Q4_DTYPE_I8,
        Q4_DTYPE_F8_E4M3,
        Q4_DTYPE_F4,
        Q4_DTYPE_I16,
        Q4_DTYPE_I32,
        Q4_DTYPE_I64,
        Q4_DTYPE_F64,
        Q4_DTYPE_BOOL,
        Q4_DTYPE_F8_E5M2,
        Q4_DTYPE_U16,
        Q4_DTYPE_U32,
        Q4_DTYPE_U64,
        Q4_SCHEMA_NONE,
        Q4_SCHEMA_BNB_NF4,
        Q4_SCHEMA_NVFP4_LEGACY,
        Q4_SCHEMA_NVFP4_MODELOPT,
        Q4_SCHEMA_NVFP4_COMPRESSED,
        Q4_SCHEMA_MXFP4_GPT_OSS,
        Q4_ROLE_WEIGHT,
        Q4_ROLE_SCALE,
        Q4_ROLE_GLOBAL_SCALE,
        Q4_ROLE_INPUT_SCALE,
        Q4_ROLE_QUANT_MAP,
        Q4_ROLE_NESTED_ABSMAX,
        Q4_ROLE_NESTED_QUANT_MAP,
        Q4_ROLE_QUANT_STATE,
        Q4_ROLE_BIAS,
        Q4_ROLE_COUNT,
        Q4_MAX_ROLES,
        Q4_MAX_NDIM,
        Q4_UM_DISABLED,
        Q4_UM_PREFER,
        Q4_UM_REQUIRE,
        Q4_WEIGHT_PACKED,
        Q4_WEIGHT_FLOAT,
        Q4_WRITE_KEEP,
        Q4_WRITE_DISCARD,
        NVFP4_VERSION_MAJOR,
        NVFP4_VERSION_MINOR,
        NVFP4_VERSION_PATCH,
        NVFP4_ABI_VERSION,
        NVFP4_VERSION_NUMBER,
        kDLCPU,
        kDLCUDA,
        kDLCUDAHost,
        kDLOpenCL,
        kDLVulkan,
        kDLMetal,
        kDLVPI,
        kDLROCM,
        kDLROCMHost,
        kDLExtDev,
        kDLCUDAManaged,
        kDLOneAPI,
        kDLWebGPU,
        kDLHexagon,
        kDLMAIA,
        kDLTrn,
        kDLInt,
        kDLUInt,
        kDLFloat,
        kDLOpaqueHandle,
        kDLBfloat,
        kDLComplex,
        kDLBool,
        kDLFloat8_e3m4,
        kDLFloat8_e4m3,
        kDLFloat8_e4m3b11fnuz,
        kDLFloat8_e4m3fn,
        kDLFloat8_e4m3fnuz,
        kDLFloat8_e5m2,
        kDLFloat8_e5m2fnuz,
        kDLFloat8_e8m0fnu,
        kDLFloat6_e2m3fn,
        kDLFloat6_e3m2fn,
        kDLFloat4_e2m1fn,
    ]
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn include_dir() -> PathBuf {
    PathBuf::from(env!("NVFP4_SYS_INCLUDE_DIR"))
}

fn c_program() -> String {
    let mut s = String::from("#include <stddef.h>\n#include <stdio.h>\n#include <nvfp4/nvfp4.h>\nint main(void) {\n");
    for (key, _) in rust_layouts() {
        let (kind, what) = key.split_once(' ').unwrap();
        if kind == "size" {
            s += &format!("  printf(\"size {what} %llu\\n\", (unsigned long long)sizeof({what}));\n");
        } else {
            let (t, f) = what.split_once('.').unwrap();
            s += &format!("  printf(\"offset {what} %llu\\n\", (unsigned long long)offsetof({t}, {f}));\n");
        }
    }
    for (name, _) in rust_consts() {
        s += &format!("  printf(\"const {name} %llu\\n\", (unsigned long long)({name}));\n");
    }
    s += "  printf(\"string NVFP4_VERSION_STRING %s\\n\", NVFP4_VERSION_STRING);\n  return 0;\n}\n";
    s
}

fn run_c_program() -> BTreeMap<String, String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nvfp4_sys_layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c_program()).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .arg("-std=c99")
        .arg("-I")
        .arg(include_dir())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?} ({e}); set CC to a C99 compiler"));
    assert!(out.status.success(), "C compile failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let mut m = BTreeMap::new();
    for line in String::from_utf8(run.stdout).unwrap().lines() {
        let (k, v) = line.rsplit_once(' ').unwrap();
        m.insert(k.to_string(), v.to_string());
    }
    m
}

#[test]
fn struct_layouts_and_constants_match_the_c_compiler() {
    let c = run_c_program();
    let mut mismatches = Vec::new();
    let mut n = 0;
    for (key, v) in rust_layouts() {
        n += 1;
        let cv = c.get(&key).expect("line missing from the C program");
        if cv != &v.to_string() {
            mismatches.push(format!("{key}: Rust {v}, C {cv}"));
        }
    }
    for (name, v) in rust_consts() {
        n += 1;
        let key = format!("const {name}");
        let cv = c.get(&key).expect("line missing from the C program");
        if cv != &v.to_string() {
            mismatches.push(format!("{key}: Rust {v}, C {cv}"));
        }
    }
    assert_eq!(c["string NVFP4_VERSION_STRING"], NVFP4_VERSION_STRING);
    assert!(mismatches.is_empty(), "layout/constant drift:\n{}", mismatches.join("\n"));
    eprintln!("{n} sizes, offsets and constants agree with the C compiler");
}

#[test]
fn every_header_constant_is_mirrored() {
    let known: Vec<&str> = rust_consts().iter().map(|(n, _)| *n).collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(include_dir().join("nvfp4")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("h") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let name = if let Some(rest) = line.strip_prefix("#define ") {
                let mut parts = rest.split_whitespace();
                let name = parts.next().unwrap_or("");
                if parts.next().is_none() || name.contains('(') {
                    continue; // a flag macro without a value, or function-like
                }
                name.to_string()
            } else if let Some(rest) = line.trim_start().strip_prefix("kDL") {
                match rest.split_once(" =") {
                    Some((n, _)) => format!("kDL{n}"),
                    None => continue,
                }
            } else {
                continue;
            };
            let skip = name.ends_with("_H_")
                || ["Q4_API", "DLPACK_EXTERN_C", "DLPACK_DLL", "NVFP4_VERSION_STRING"].contains(&name.as_str());
            if !skip && !known.contains(&name.as_str()) {
                missing.push(format!("{name} ({})", path.display()));
            }
        }
    }
    assert!(missing.is_empty(), "constants not mirrored in nvfp4-sys:\n{}", missing.join("\n"));
}

#[test]
fn every_exported_function_is_declared() {
    let symbols = std::fs::read_to_string(repo_root().join("abi/libNVFP4.symbols")).unwrap();
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub fn "))
        .map(|l| l.split('(').next().unwrap())
        .collect();
    let exported: Vec<&str> = symbols.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let missing: Vec<_> = exported.iter().filter(|s| !declared.contains(s)).collect();
    let extra: Vec<_> = declared.iter().filter(|s| !exported.contains(s)).collect();
    assert!(missing.is_empty(), "exported but not declared: {missing:?}");
    assert!(extra.is_empty(), "declared but not exported: {extra:?}");
    assert_eq!(ADDRESSES.len(), exported.len());
}

/// Taking every function's address makes the linker resolve all of them
/// against the real library.
static ADDRESSES: &[unsafe extern "C" fn()] = &[
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(MXFP4_dequantize as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(MXFP4_linear as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(MXFP4_linear_experts as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(MXFP4_quantize as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(MXFP4_scaled_mm as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NF4_dequantize as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NF4_double_quantize as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NF4_quantize as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NF4_scaled_mm as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_can_use_managed as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_dequantize as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_empty_cache as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_fake_quantize as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_is_managed_tensor as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_linear as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_linear_backward as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_managed_prefetch as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_memory_info as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_quantize as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_scaled_mm as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_swizzle_scales as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_swizzled_scale_size as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_to_managed as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(NVFP4_unswizzle_scales as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_abi_version as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_close as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_count as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_detect as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_find as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_linear_create as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_metadata as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_open as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_tensor as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_tensor_info as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_writer_add as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_writer_commit as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_writer_create as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_writer_destroy as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_checkpoint_writer_metadata as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_clear_error as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_cuda_synchronize as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_detect_linears as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_detect_schema as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_dtype_name as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_format_name as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_get_capabilities as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_get_log_level as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_isa_name as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_last_error as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_last_isa_used as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_linear_create as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_linear_destroy as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_linear_diagnostics as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_linear_forward as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_linear_info_get as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_linear_update_weight as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_mutable_abort as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_mutable_acquire as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_mutable_begin_write as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_mutable_commit as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_mutable_create as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_mutable_destroy as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_mutable_version as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_dlpack_to_unversioned as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_op_options_init as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_schema_name as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_session_config_init as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_session_create as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_session_destroy as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_session_diagnostics as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_session_get_stats as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_session_set_stream as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_set_log_callback as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_set_log_level as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_set_max_isa as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_status_string as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_tune_matmul as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_version as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_version_string as *const ()) },
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(Q4_weight_bundle_init as *const ()) },
];

#[test]
fn every_function_links() {
    assert!(ADDRESSES.iter().all(|f| (*f as usize) != 0));
}
