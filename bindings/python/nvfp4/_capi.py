"""ctypes mirror of the libNVFP4 C ABI: constants, structs, prototypes, loading.

Every function of abi/libNVFP4.symbols has a prototype in PROTOTYPES; the
loader applies them all, so a missing symbol or a mistyped call fails early.
"""
import ctypes
import ctypes.util
import glob
import os
import threading

#: ABI major version this binding was written for (NVFP4_ABI_VERSION).
ABI_VERSION = 1

c_i32, c_u32, c_i64, c_u64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64
c_f32, c_f64, c_size = ctypes.c_float, ctypes.c_double, ctypes.c_size_t
c_void_p, c_char_p = ctypes.c_void_p, ctypes.c_char_p
P = ctypes.POINTER

# ---------------------------------------------------------------- DLPack 1.1
kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 1, 2, 3, 13
kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool = 0, 1, 2, 4, 6
kDLFloat8_e4m3fn, kDLFloat4_e2m1fn = 10, 17
DLPACK_FLAG_BITMASK_READ_ONLY = 1
DLPACK_FLAG_BITMASK_IS_COPIED = 2
DLPACK_VERSION = (1, 1)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_i32), ("device_id", c_i32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_i32),
        ("dtype", DLDataType),
        ("shape", P(c_i64)),
        ("strides", P(c_i64)),
        ("byte_offset", c_u64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", c_u32), ("minor", c_u32)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensorDeleter = ctypes.CFUNCTYPE(None, P(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DLManagedTensorDeleter)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersionedDeleter = ctypes.CFUNCTYPE(None, P(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", c_void_p),
    ("deleter", DLManagedTensorVersionedDeleter),
    ("flags", c_u64),
    ("dl_tensor", DLTensor),
]

# ---------------------------------------------------------------- q4_base.h
Q4_OK = 0
STATUS_NAMES = {
    1: "INVALID_ARGUMENT", 2: "NULL_POINTER", 3: "DTYPE", 4: "SHAPE", 5: "DEVICE", 6: "STRIDES",
    7: "ALIGNMENT", 8: "OVERFLOW", 9: "ALIASING", 10: "NON_FINITE", 11: "UNSUPPORTED",
    12: "OUT_OF_MEMORY", 13: "BUFFER_TOO_SMALL", 14: "BUSY", 15: "SCHEMA", 16: "NOT_FOUND",
    17: "CUDA", 18: "NOT_AVAILABLE", 19: "IO", 20: "FORMAT", 21: "STATE", 99: "INTERNAL",
}

SCALE_LINEAR, SCALE_SWIZZLED = 0, 1
PATH_AUTO, PATH_KERNEL_ONLY, PATH_KERNEL_OR_FALLBACK, PATH_DEQUANT_MATMUL_ONLY = 0, 1, 2, 3
BACKEND_AUTO, BACKEND_NVFP4_KERNEL, BACKEND_NF4_KERNEL, BACKEND_DEQUANT_MATMUL = 0, 1, 2, 3
TARGET_AUTO, TARGET_CPU, TARGET_CUDA = 0, 1, 2
MATH_EXACT, MATH_FAST = 0, 1
FORMAT_NONE, FORMAT_NVFP4, FORMAT_NF4, FORMAT_MIXED, FORMAT_MXFP4 = 0, 1, 2, 3, 4
ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_AVX512_VNNI, ISA_NEON, ISA_NEON_DOTPROD, ISA_BEST = 0, 1, 2, 3, 16, 17, 255
ISA_AVX_VNNI, ISA_NEON_I8MM = 4, 18
CUDA_NOT_BUILT, CUDA_NOT_LOADED, CUDA_NO_DEVICE, CUDA_READY = 0, 1, 2, 3
LOG_OFF, LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3, 4

CPU_FEATURES = {
    "sse42": 0, "avx": 1, "avx2": 2, "fma": 3, "f16c": 4, "avx512f": 5, "avx512bw": 6, "avx512vl": 7,
    "avx512dq": 8, "avx512vnni": 9, "avx512vbmi": 10, "avx512bf16": 11, "avxvnni": 12, "os_avx": 13,
    "os_avx512": 14, "neon": 32, "dotprod": 33, "sve": 34, "i8mm": 35, "bf16": 36,
}


class Q4_op_options(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("compute_path", c_i32), ("backend", c_i32), ("target", c_i32),
        ("device_id", c_i32), ("math_mode", c_i32), ("num_threads", c_i32), ("reserved0", c_i32),
        ("stream", c_void_p), ("reserved", c_u64 * 6),
    ]


class Q4_capabilities(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("abi_version", c_i32), ("cpu_features", c_u64), ("isa_best", c_i32),
        ("isa_active", c_i32), ("num_cpus", c_i32), ("cuda_state", c_i32), ("cuda_runtime_version", c_i32),
        ("cuda_driver_version", c_i32), ("cuda_device_count", c_i32), ("managed_memory", c_i32),
        ("fp4_tensor_cores", c_i32), ("reserved0", c_i32), ("cpu_vendor", ctypes.c_char * 16),
        ("cpu_brand", ctypes.c_char * 64), ("cuda_archs", ctypes.c_char * 64),
        ("native_load_state", ctypes.c_char * 256), ("reserved", c_u64 * 8),
    ]


class Q4_tune_result(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("dim", c_i32), ("runs", c_i32), ("candidates", c_i32),
        ("kc_default", c_i32), ("mc_default", c_i32), ("kc_best", c_i32), ("mc_best", c_i32),
        ("default_ms", c_f64), ("best_ms", c_f64), ("adopted", c_i32), ("persisted", c_i32),
        ("cache_path", ctypes.c_char * 256), ("cpu_signature", ctypes.c_char * 192), ("reserved", c_u64 * 4),
    ]


Q4_log_callback = ctypes.CFUNCTYPE(None, c_i32, c_char_p, c_void_p)

# ---------------------------------------------------------------- ops.h


class NF4_state(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("blocksize", c_i32), ("absmax", P(DLTensor)), ("quant_map", P(DLTensor)),
        ("nested_absmax", P(DLTensor)), ("nested_quant_map", P(DLTensor)), ("nested_offset", c_f32),
        ("nested_blocksize", c_i32), ("reserved", c_u64 * 4),
    ]


# ---------------------------------------------------------------- schema.h
Q4_MAX_NDIM, Q4_MAX_ROLES, Q4_ROLE_COUNT = 8, 16, 9
ROLE_NAMES = ("weight", "scale", "global_scale", "input_scale", "quant_map", "nested_absmax",
              "nested_quant_map", "quant_state", "bias")
SCHEMA_NONE, SCHEMA_BNB_NF4, SCHEMA_NVFP4_LEGACY, SCHEMA_NVFP4_MODELOPT, SCHEMA_NVFP4_COMPRESSED = 0, 1, 2, 3, 4
SCHEMA_MXFP4_GPT_OSS = 5
DTYPE_CODES = {
    "UNKNOWN": 0, "F32": 1, "F16": 2, "BF16": 3, "U8": 4, "I8": 5, "F8_E4M3": 6, "F4": 7, "I16": 8, "I32": 9,
    "I64": 10, "F64": 11, "BOOL": 12, "F8_E5M2": 13, "U16": 14, "U32": 15, "U64": 16,
}


class Q4_tensor_desc(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_i32), ("ndim", c_i32), ("shape", c_i64 * Q4_MAX_NDIM)]


class Q4_linear_schema(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("format", c_i32), ("family", c_i32), ("prefix_len", c_i32),
        ("prefix_tensor", c_i32), ("roles", c_i32 * Q4_MAX_ROLES), ("global_scale_inverted", c_i32),
        ("reserved0", c_i32), ("reserved", c_u64 * 4),
    ]


class Q4_schema_summary(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("format", c_i32), ("family", c_i32), ("num_linears", c_i32),
        ("family_counts", c_i32 * 8), ("num_incomplete", c_i32), ("reserved0", c_i32), ("reserved", c_u64 * 4),
    ]


# ---------------------------------------------------------------- session.h
UM_DISABLED, UM_PREFER, UM_REQUIRE = 0, 1, 2
WEIGHT_PACKED, WEIGHT_FLOAT = 0, 1
WRITE_KEEP, WRITE_DISCARD = 0, 1


class Q4_session_config(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("compute_path", c_i32), ("backend", c_i32), ("target", c_i32),
        ("device_id", c_i32), ("unified_memory", c_i32), ("num_threads", c_i32), ("diagnostics", c_i32),
        ("math_mode", c_i32), ("reserved0", c_i32), ("reserved", c_u64 * 6),
    ]


class Q4_session_stats(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("live_linears", c_i32), ("live_mutables", c_i32), ("live_snapshots", c_i32),
        ("live_buffers", c_i64), ("live_bytes", c_i64), ("managed_bytes", c_i64), ("forwards", c_i64),
        ("implicit_copies", c_i64), ("reserved", c_u64 * 4),
    ]


class Q4_weight_bundle(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("format", c_i32), ("source", c_i32), ("scale_layout", c_i32),
        ("weight", P(DLTensor)), ("out_features", c_i64), ("in_features", c_i64), ("scale", P(DLTensor)),
        ("global_scale", c_f32), ("blocksize", c_i32), ("nf4", P(NF4_state)), ("bias", P(DLTensor)),
        ("reserved", c_u64 * 6),
    ]


class Q4_linear_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32), ("format", c_i32), ("backend", c_i32), ("compute_path", c_i32),
        ("fell_back", c_i32), ("isa", c_i32), ("target", c_i32), ("unified_memory", c_i32),
        ("scale_layout", c_i32), ("math_mode", c_i32), ("out_features", c_i64), ("in_features", c_i64),
        ("weight_bytes", c_i64), ("weight_version", c_u64), ("reserved", c_u64 * 4),
    ]


# ---------------------------------------------------------------- cuda.h
MANAGED_READ_MOSTLY, MANAGED_PREFETCH, MANAGED_REPORT_MANAGED = 1, 2, 4

# ---------------------------------------------------------------- prototypes
T, MT = P(DLTensor), P(DLManagedTensorVersioned)
H = c_void_p  # opaque handles (Q4_session*, Q4_linear*, Q4_mutable*, Q4_checkpoint*, writer)
OPTS = P(Q4_op_options)

#: name -> (restype, argtypes) for every exported function (abi/libNVFP4.symbols).
PROTOTYPES = {
    # errors, version
    "Q4_status_string": (c_char_p, [c_i32]),
    "Q4_last_error": (c_char_p, []),
    "Q4_clear_error": (None, []),
    "Q4_version": (c_i32, []),
    "Q4_version_string": (c_char_p, []),
    "Q4_abi_version": (c_i32, []),
    # options, capabilities, ISA, tuner, logging
    "Q4_op_options_init": (c_i32, [OPTS]),
    "Q4_get_capabilities": (c_i32, [P(Q4_capabilities)]),
    "Q4_isa_name": (c_char_p, [c_i32]),
    "Q4_set_max_isa": (c_i32, [c_i32]),
    "Q4_last_isa_used": (c_i32, []),
    "Q4_tune_matmul": (c_i32, [c_i32, c_i32, c_i32, P(Q4_tune_result)]),
    "Q4_set_log_callback": (c_i32, [Q4_log_callback, c_void_p]),
    "Q4_set_log_level": (c_i32, [c_i32]),
    "Q4_get_log_level": (c_i32, []),
    # NVFP4
    "NVFP4_quantize": (c_i32, [T, T, T, c_i32, c_f32, P(c_f32), OPTS]),
    "NVFP4_dequantize": (c_i32, [T, T, c_i32, c_f32, T, OPTS]),
    "NVFP4_scaled_mm": (c_i32, [T, T, T, T, c_i32, c_f32, T, T, OPTS]),
    "NVFP4_linear": (c_i32, [T, T, T, c_i32, c_f32, T, T, OPTS]),
    "NVFP4_swizzle_scales": (c_i32, [T, T]),
    "NVFP4_unswizzle_scales": (c_i32, [T, T]),
    "NVFP4_swizzled_scale_size": (c_i32, [c_i64, c_i64, P(c_i64)]),
    # MXFP4
    "MXFP4_quantize": (c_i32, [T, T, T, c_i32, OPTS]),
    "MXFP4_dequantize": (c_i32, [T, T, c_i32, T, OPTS]),
    "MXFP4_linear": (c_i32, [T, T, T, c_i32, T, T, OPTS]),
    "MXFP4_scaled_mm": (c_i32, [T, T, T, T, c_i32, c_f32, T, T, OPTS]),
    "MXFP4_linear_experts": (c_i32, [T, T, T, c_i32, P(c_i32), P(c_i64), c_i64, T, T, OPTS]),
    # NF4
    "NF4_quantize": (c_i32, [T, T, T, c_i32, OPTS]),
    "NF4_double_quantize": (c_i32, [T, T, T, T, P(c_f32), OPTS]),
    "NF4_dequantize": (c_i32, [T, P(NF4_state), T, OPTS]),
    "NF4_scaled_mm": (c_i32, [T, T, P(NF4_state), T, T, OPTS]),
    # schema
    "Q4_detect_schema": (c_i32, [P(Q4_tensor_desc), c_size, P(Q4_schema_summary)]),
    "Q4_detect_linears": (c_i32, [P(Q4_tensor_desc), c_size, P(Q4_linear_schema), c_size, P(c_size)]),
    "Q4_schema_name": (c_char_p, [c_i32]),
    "Q4_format_name": (c_char_p, [c_i32]),
    "Q4_dtype_name": (c_char_p, [c_i32]),
    # checkpoints
    "Q4_checkpoint_open": (c_i32, [c_char_p, P(H)]),
    "Q4_checkpoint_close": (c_i32, [H]),
    "Q4_checkpoint_count": (c_i32, [H, P(c_size)]),
    "Q4_checkpoint_tensor_info": (c_i32, [H, c_size, P(Q4_tensor_desc), P(c_i64)]),
    "Q4_checkpoint_find": (c_i32, [H, c_char_p, P(c_size)]),
    "Q4_checkpoint_tensor": (c_i32, [H, c_size, T]),
    "Q4_checkpoint_metadata": (c_i32, [H, c_char_p, c_char_p, c_size, P(c_size)]),
    "Q4_checkpoint_detect": (c_i32, [H, P(Q4_schema_summary)]),
    "Q4_checkpoint_linear_create": (c_i32, [H, H, c_char_p, P(H)]),
    "Q4_checkpoint_writer_create": (c_i32, [P(H)]),
    "Q4_checkpoint_writer_destroy": (c_i32, [H]),
    "Q4_checkpoint_writer_add": (c_i32, [H, c_char_p, c_i32, T]),
    "Q4_checkpoint_writer_metadata": (c_i32, [H, c_char_p, c_char_p]),
    "Q4_checkpoint_writer_commit": (c_i32, [H, c_char_p]),
    # sessions, linears
    "Q4_session_config_init": (c_i32, [P(Q4_session_config)]),
    "Q4_session_create": (c_i32, [P(Q4_session_config), P(H)]),
    "Q4_session_destroy": (c_i32, [H]),
    "Q4_session_get_stats": (c_i32, [H, P(Q4_session_stats)]),
    "Q4_session_set_stream": (c_i32, [H, ctypes.c_void_p]),
    "Q4_session_diagnostics": (c_i32, [H, c_char_p, c_size, P(c_size)]),
    "Q4_weight_bundle_init": (c_i32, [P(Q4_weight_bundle)]),
    "Q4_linear_create": (c_i32, [H, P(Q4_weight_bundle), P(H)]),
    "Q4_linear_forward": (c_i32, [H, T, T]),
    "Q4_linear_update_weight": (c_i32, [H, P(Q4_weight_bundle)]),
    "Q4_linear_destroy": (c_i32, [H]),
    "Q4_linear_info_get": (c_i32, [H, P(Q4_linear_info)]),
    "Q4_linear_diagnostics": (c_i32, [H, c_char_p, c_size, P(c_size)]),
    # mutable tensors
    "Q4_mutable_create": (c_i32, [H, c_i32, P(c_i64), DLDataType, P(H)]),
    "Q4_mutable_destroy": (c_i32, [H]),
    "Q4_mutable_begin_write": (c_i32, [H, c_i32, T]),
    "Q4_mutable_commit": (c_i32, [H, P(c_u64)]),
    "Q4_mutable_abort": (c_i32, [H]),
    "Q4_mutable_acquire": (c_i32, [H, P(MT), P(c_u64)]),
    "Q4_mutable_version": (c_i32, [H, P(c_u64)]),
    # training
    "NVFP4_fake_quantize": (c_i32, [T, T, c_f32, P(c_f32), OPTS]),
    "NVFP4_linear_backward": (c_i32, [T, T, T, T, c_i32, c_f32, T, T, OPTS]),
    # managed memory, CUDA
    "NVFP4_can_use_managed": (c_i32, [c_i32, P(c_i32)]),
    "NVFP4_is_managed_tensor": (c_i32, [T, P(c_i32)]),
    "NVFP4_to_managed": (c_i32, [T, c_i32, c_u32, P(MT)]),
    "NVFP4_managed_prefetch": (c_i32, [T, c_i32, c_void_p]),
    "NVFP4_memory_info": (c_i32, [c_i32, P(c_u64), P(c_u64)]),
    "Q4_cuda_synchronize": (c_i32, [c_i32, c_void_p]),
    "NVFP4_empty_cache": (c_i32, []),
}

#: Functions used when the loaded library has them (newer than ABI 1.0's list).
OPTIONAL_PROTOTYPES = {
    "Q4_dlpack_to_unversioned": (c_i32, [MT, P(P(DLManagedTensor))]),
}


class LibraryError(ImportError):
    """libNVFP4 could not be found or loaded, or its ABI version differs."""


def candidate_paths():
    """Where the library is looked for, in order (see load())."""
    env = os.environ.get("NVFP4_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    local = sorted(glob.glob(os.path.join(here, "libNVFP4.so*")), key=len)
    system = [p for p in (ctypes.util.find_library("NVFP4"), "libNVFP4.so.1") if p]
    return local + installed_prefix_paths(here) + system


def installed_prefix_paths(package_dir):
    """The library of the prefix this package was installed into.

    `cmake --install` puts the package in <prefix>/lib/python3/dist-packages/nvfp4
    (NVFP4_PYTHON_INSTALL_DIR) and the library in <prefix>/<libdir>; pip puts it
    in <prefix>/lib/python3.X/{site,dist}-packages/nvfp4. Looks for the versioned
    SONAME in <prefix>/lib, then lib64 and lib/<multiarch>. Only existing files
    are returned, so nothing is tried when the package lives elsewhere."""
    site = os.path.dirname(package_dir)
    if os.path.basename(site) not in ("dist-packages", "site-packages"):
        return []
    libdir = os.path.dirname(os.path.dirname(site))  # <prefix>/lib
    prefix = os.path.dirname(libdir)
    dirs = [libdir, os.path.join(prefix, "lib64")] + sorted(glob.glob(os.path.join(libdir, "*-linux-*")))
    found = []
    for d in dirs:
        p = os.path.join(d, "libNVFP4.so.1")
        if os.path.isfile(p) and p not in found:
            found.append(p)
    return found


def _declare(lib, table, optional):
    for name, (restype, argtypes) in table.items():
        if optional and not hasattr(lib, name):
            continue
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def load(path=None):
    """Loads libNVFP4: `path`, else $NVFP4_LIBRARY (exclusively), else a
    libNVFP4.so* next to this package, else <prefix>/lib/libNVFP4.so.1 of the
    prefix the package is installed in (see installed_prefix_paths), else the
    system loader (find_library("NVFP4"), then "libNVFP4.so.1"). Checks
    Q4_abi_version()."""
    paths = [path] if path else candidate_paths()
    errors = []
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
            break
        except OSError as e:
            errors.append(f"{p}: {e}")
    else:
        raise LibraryError("libNVFP4 not found (set NVFP4_LIBRARY to the path of libNVFP4.so); tried: "
                           + "; ".join(errors or ["nothing"]))
    lib.Q4_abi_version.restype = c_i32
    lib.Q4_abi_version.argtypes = []
    abi = lib.Q4_abi_version()
    if abi != ABI_VERSION:
        raise LibraryError(f"{p}: libNVFP4 ABI version {abi}, but this binding was written for ABI "
                           f"version {ABI_VERSION}; install a matching library or binding")
    try:
        _declare(lib, PROTOTYPES, optional=False)
    except AttributeError as e:
        raise LibraryError(f"{p}: symbol missing: {e}") from None
    _declare(lib, OPTIONAL_PROTOTYPES, optional=True)
    lib._nvfp4_path = p
    return lib


_lock = threading.Lock()
_lib = None


def get():
    """The process-wide library handle (loaded on first use)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = load()
    return _lib
