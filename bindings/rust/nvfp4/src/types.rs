//! The ABI's pinned enumerations as Rust enums, and per-call options.
use crate::error::{check, Result};
use nvfp4_sys as sys;

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $c:path),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum $name { $($(#[$vm])* $v = $c),* }
        impl $name {
            /// The pinned C value.
            pub fn raw(self) -> i32 { self as i32 }
            /// The variant of a C value, `None` for a value this binding does not know.
            pub fn from_raw(v: i32) -> Option<Self> {
                $(if v == $c { return Some(Self::$v); })*
                None
            }
        }
    };
}

c_enum!(
    /// `Q4_SCALE_*`: layout of a block-scale argument.
    ScaleLayout { Linear = sys::Q4_SCALE_LINEAR, Swizzled = sys::Q4_SCALE_SWIZZLED }
);
c_enum!(
    /// `Q4_PATH_*`.
    ComputePath {
        Auto = sys::Q4_PATH_AUTO,
        KernelOnly = sys::Q4_PATH_KERNEL_ONLY,
        KernelOrFallback = sys::Q4_PATH_KERNEL_OR_FALLBACK,
        DequantMatmulOnly = sys::Q4_PATH_DEQUANT_MATMUL_ONLY,
    }
);
c_enum!(
    /// `Q4_BACKEND_*`.
    Backend {
        Auto = sys::Q4_BACKEND_AUTO,
        Nvfp4Kernel = sys::Q4_BACKEND_NVFP4_KERNEL,
        Nf4Kernel = sys::Q4_BACKEND_NF4_KERNEL,
        DequantMatmul = sys::Q4_BACKEND_DEQUANT_MATMUL,
    }
);
c_enum!(
    /// `Q4_TARGET_*`.
    Target { Auto = sys::Q4_TARGET_AUTO, Cpu = sys::Q4_TARGET_CPU, Cuda = sys::Q4_TARGET_CUDA }
);
c_enum!(
    /// `Q4_MATH_*`.
    MathMode { Exact = sys::Q4_MATH_EXACT, Fast = sys::Q4_MATH_FAST }
);
c_enum!(
    /// `Q4_FORMAT_*`.
    Format {
        None = sys::Q4_FORMAT_NONE,
        Nvfp4 = sys::Q4_FORMAT_NVFP4,
        Nf4 = sys::Q4_FORMAT_NF4,
        Mixed = sys::Q4_FORMAT_MIXED,
    }
);
c_enum!(
    /// `Q4_ISA_*`.
    Isa {
        Scalar = sys::Q4_ISA_SCALAR,
        Avx2 = sys::Q4_ISA_AVX2,
        Avx512 = sys::Q4_ISA_AVX512,
        Avx512Vnni = sys::Q4_ISA_AVX512_VNNI,
        Neon = sys::Q4_ISA_NEON,
        NeonDotprod = sys::Q4_ISA_NEON_DOTPROD,
        AvxVnni = sys::Q4_ISA_AVX_VNNI,
        NeonI8mm = sys::Q4_ISA_NEON_I8MM,
        Best = sys::Q4_ISA_BEST,
    }
);
c_enum!(
    /// `Q4_CUDA_*`: state of the CUDA plugin.
    CudaState {
        NotBuilt = sys::Q4_CUDA_NOT_BUILT,
        NotLoaded = sys::Q4_CUDA_NOT_LOADED,
        NoDevice = sys::Q4_CUDA_NO_DEVICE,
        Ready = sys::Q4_CUDA_READY,
    }
);
c_enum!(
    /// `Q4_LOG_*`.
    LogLevel {
        Off = sys::Q4_LOG_OFF,
        Error = sys::Q4_LOG_ERROR,
        Warn = sys::Q4_LOG_WARN,
        Info = sys::Q4_LOG_INFO,
        Debug = sys::Q4_LOG_DEBUG,
    }
);
c_enum!(
    /// `Q4_DTYPE_*`: element types of checkpoint tensors.
    FileDtype {
        Unknown = sys::Q4_DTYPE_UNKNOWN,
        F32 = sys::Q4_DTYPE_F32,
        F16 = sys::Q4_DTYPE_F16,
        BF16 = sys::Q4_DTYPE_BF16,
        U8 = sys::Q4_DTYPE_U8,
        I8 = sys::Q4_DTYPE_I8,
        F8E4M3 = sys::Q4_DTYPE_F8_E4M3,
        F4 = sys::Q4_DTYPE_F4,
        I16 = sys::Q4_DTYPE_I16,
        I32 = sys::Q4_DTYPE_I32,
        I64 = sys::Q4_DTYPE_I64,
        F64 = sys::Q4_DTYPE_F64,
        Bool = sys::Q4_DTYPE_BOOL,
        F8E5M2 = sys::Q4_DTYPE_F8_E5M2,
        U16 = sys::Q4_DTYPE_U16,
        U32 = sys::Q4_DTYPE_U32,
        U64 = sys::Q4_DTYPE_U64,
    }
);
c_enum!(
    /// `Q4_SCHEMA_*`: checkpoint schema families.
    Family {
        None = sys::Q4_SCHEMA_NONE,
        BnbNf4 = sys::Q4_SCHEMA_BNB_NF4,
        Nvfp4Legacy = sys::Q4_SCHEMA_NVFP4_LEGACY,
        Nvfp4Modelopt = sys::Q4_SCHEMA_NVFP4_MODELOPT,
        Nvfp4Compressed = sys::Q4_SCHEMA_NVFP4_COMPRESSED,
    }
);
c_enum!(
    /// `Q4_ROLE_*`: roles of a linear's tensors.
    Role {
        Weight = sys::Q4_ROLE_WEIGHT,
        Scale = sys::Q4_ROLE_SCALE,
        GlobalScale = sys::Q4_ROLE_GLOBAL_SCALE,
        InputScale = sys::Q4_ROLE_INPUT_SCALE,
        QuantMap = sys::Q4_ROLE_QUANT_MAP,
        NestedAbsmax = sys::Q4_ROLE_NESTED_ABSMAX,
        NestedQuantMap = sys::Q4_ROLE_NESTED_QUANT_MAP,
        QuantState = sys::Q4_ROLE_QUANT_STATE,
        Bias = sys::Q4_ROLE_BIAS,
    }
);
c_enum!(
    /// `Q4_UM_*`: unified-memory policy of a session.
    UnifiedMemory { Disabled = sys::Q4_UM_DISABLED, Prefer = sys::Q4_UM_PREFER, Require = sys::Q4_UM_REQUIRE }
);
c_enum!(
    /// `Q4_WRITE_*`: how a mutable tensor's private buffer starts.
    WriteMode { Keep = sys::Q4_WRITE_KEEP, Discard = sys::Q4_WRITE_DISCARD }
);

/// Per-call options (`Q4_op_options`). `Default` is what the library's
/// `Q4_op_options_init` produces, i.e. what a NULL `opts` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpOptions {
    pub compute_path: ComputePath,
    pub backend: Backend,
    pub target: Target,
    pub device_id: i32,
    pub math_mode: MathMode,
    /// 0: library default.
    pub num_threads: i32,
    /// The caller's `cudaStream_t` as an address; 0 = default stream.
    pub stream: usize,
}

impl Default for OpOptions {
    fn default() -> Self {
        let raw = raw_default_options().expect("Q4_op_options_init cannot fail on a valid struct");
        OpOptions {
            compute_path: ComputePath::from_raw(raw.compute_path).unwrap_or(ComputePath::Auto),
            backend: Backend::from_raw(raw.backend).unwrap_or(Backend::Auto),
            target: Target::from_raw(raw.target).unwrap_or(Target::Auto),
            device_id: raw.device_id,
            math_mode: MathMode::from_raw(raw.math_mode).unwrap_or(MathMode::Exact),
            num_threads: raw.num_threads,
            stream: raw.stream as usize,
        }
    }
}

fn raw_default_options() -> Result<sys::Q4_op_options> {
    // SAFETY: an all-zero Q4_op_options is a valid value (integers, NULL pointer).
    let mut raw: sys::Q4_op_options = unsafe { std::mem::zeroed() };
    raw.struct_size = std::mem::size_of::<sys::Q4_op_options>() as u32;
    check(unsafe { sys::Q4_op_options_init(&mut raw) })?;
    Ok(raw)
}

impl OpOptions {
    pub fn raw(&self) -> sys::Q4_op_options {
        let mut raw = raw_default_options().expect("Q4_op_options_init cannot fail on a valid struct");
        raw.compute_path = self.compute_path.raw();
        raw.backend = self.backend.raw();
        raw.target = self.target.raw();
        raw.device_id = self.device_id;
        raw.math_mode = self.math_mode.raw();
        raw.num_threads = self.num_threads;
        raw.stream = self.stream as *mut std::ffi::c_void;
        raw
    }
}

pub(crate) fn opts_raw(o: Option<&OpOptions>) -> Option<sys::Q4_op_options> {
    o.map(|o| o.raw())
}

pub(crate) fn opts_ptr(o: &Option<sys::Q4_op_options>) -> *const sys::Q4_op_options {
    o.as_ref().map_or(std::ptr::null(), |o| o as *const _)
}
