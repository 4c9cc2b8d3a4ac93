//! Safe Rust binding of libNVFP4: 4-bit weight formats (NVFP4, NF4), their
//! matrix products, checkpoint schema detection, safetensors checkpoints,
//! sessions with reusable linears, and versioned mutable tensors.
//!
//! Every fallible call returns [`Result`]; an [`Error`] carries the
//! [`Status`] (one per `Q4_ERR_*`) and the thread-local `Q4_last_error()`
//! message, read on the failing thread right after the call.
//!
//! See `README.md` for the marshalling rules and the Send/Sync reasoning.
//!
//! ```
//! use nvfp4::{Nvfp4Matrix, ScaleLayout};
//! nvfp4::check_abi().unwrap();
//! let w: Vec<f32> = (0..4 * 32).map(|i| (i as f32 - 64.0) / 16.0).collect();
//! let q = Nvfp4Matrix::quantize(&w, 4, 32, ScaleLayout::Linear, 0.0).unwrap();
//! assert_eq!(q.qdata.len(), 4 * 32 / 2);
//! let y = q.linear(&vec![1.0; 2 * 32], 2, None).unwrap(); // [2, 4]
//! assert_eq!(y.len(), 8);
//! ```
pub use nvfp4_sys as sys;

/// The README's snippets, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The Rust snippets of the repository's docs/bindings.md, run the same way.
#[cfg(doctest)]
#[doc = include_str!("../../../../docs/bindings.md")]
pub struct BindingsDocDoctests;

mod checkpoint;
mod error;
mod ops;
mod session;
mod tensor;
mod types;

pub use checkpoint::{
    detect_linears, detect_schema, dtype_name, format_name, schema_name, Checkpoint, CheckpointWriter, LinearSchema,
    SchemaSummary, TensorDesc, TensorInfo,
};
pub use error::{clear_error, last_error, status_string, Error, Result, Status};
pub use ops::*;
pub use session::{
    Linear, LinearInfo, MutableTensor, Session, SessionConfig, SessionStats, Snapshot, WeightBundle, WriteGuard,
};
pub use tensor::{DType, Element, TensorView, TensorViewMut};
pub use types::{
    Backend, ComputePath, CudaState, Family, FileDtype, Format, Isa, LogLevel, MathMode, OpOptions, Role, ScaleLayout,
    Target, UnifiedMemory, WriteMode,
};

use error::{array_str, check, static_str};
use std::ffi::{c_char, c_void, CStr};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

// ---------------------------------------------------------------------------
// Version.
// ---------------------------------------------------------------------------

/// Runtime version as MAJOR·10000 + MINOR·100 + PATCH.
pub fn version() -> i32 {
    unsafe { sys::Q4_version() }
}

/// Runtime version text, e.g. "0.1.0".
pub fn version_string() -> &'static str {
    unsafe { static_str(sys::Q4_version_string()) }
}

/// Runtime ABI major version.
pub fn abi_version() -> i32 {
    unsafe { sys::Q4_abi_version() }
}

/// Checks that the loaded library has the ABI these declarations mirror
/// (`NVFP4_ABI_VERSION`).
pub fn check_abi() -> Result<()> {
    let rt = abi_version();
    if rt != sys::NVFP4_ABI_VERSION {
        return Err(Error::binding(
            Status::Unsupported,
            format!("check_abi: expected libNVFP4 ABI {}, got {rt}", sys::NVFP4_ABI_VERSION),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Capabilities, ISA, tuner.
// ---------------------------------------------------------------------------

/// `Q4_capabilities`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    pub abi_version: i32,
    /// `Q4_CPU_*` bits (see `nvfp4::sys`).
    pub cpu_features: u64,
    pub isa_best: Option<Isa>,
    pub isa_active: Option<Isa>,
    pub num_cpus: i32,
    pub cuda_state: Option<CudaState>,
    pub cuda_runtime_version: i32,
    pub cuda_driver_version: i32,
    pub cuda_device_count: i32,
    pub managed_memory: bool,
    pub fp4_tensor_cores: bool,
    pub cpu_vendor: String,
    pub cpu_brand: String,
    pub cuda_archs: String,
    pub native_load_state: String,
}

/// `Q4_get_capabilities`.
pub fn capabilities() -> Result<Capabilities> {
    // SAFETY: all-zero is valid.
    let mut c: sys::Q4_capabilities = unsafe { std::mem::zeroed() };
    c.struct_size = std::mem::size_of::<sys::Q4_capabilities>() as u32;
    check(unsafe { sys::Q4_get_capabilities(&mut c) })?;
    Ok(Capabilities {
        abi_version: c.abi_version,
        cpu_features: c.cpu_features,
        isa_best: Isa::from_raw(c.isa_best),
        isa_active: Isa::from_raw(c.isa_active),
        num_cpus: c.num_cpus,
        cuda_state: CudaState::from_raw(c.cuda_state),
        cuda_runtime_version: c.cuda_runtime_version,
        cuda_driver_version: c.cuda_driver_version,
        cuda_device_count: c.cuda_device_count,
        managed_memory: c.managed_memory != 0,
        fp4_tensor_cores: c.fp4_tensor_cores != 0,
        cpu_vendor: array_str(&c.cpu_vendor),
        cpu_brand: array_str(&c.cpu_brand),
        cuda_archs: array_str(&c.cuda_archs),
        native_load_state: array_str(&c.native_load_state),
    })
}

/// `Q4_isa_name`.
pub fn isa_name(isa: Isa) -> &'static str {
    unsafe { static_str(sys::Q4_isa_name(isa.raw())) }
}

/// `Q4_set_max_isa`: caps the CPU kernels' ISA (process-wide; `Isa::Best`
/// removes the cap). An ISA this CPU lacks is `Status::Unsupported`.
pub fn set_max_isa(isa: Isa) -> Result<()> {
    check(unsafe { sys::Q4_set_max_isa(isa.raw()) })
}

/// `Q4_last_isa_used`: ISA of this thread's last operation (None before any).
pub fn last_isa_used() -> Option<Isa> {
    Isa::from_raw(unsafe { sys::Q4_last_isa_used() })
}

/// `Q4_tune_result`.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneResult {
    pub dim: i32,
    pub runs: i32,
    pub candidates: i32,
    pub kc_default: i32,
    pub mc_default: i32,
    pub kc_best: i32,
    pub mc_best: i32,
    pub default_ms: f64,
    pub best_ms: f64,
    pub adopted: bool,
    pub persisted: bool,
    pub cache_path: String,
    pub cpu_signature: String,
}

/// `Q4_tune_matmul` (times GEMMs; not meant to run alongside other work).
pub fn tune_matmul(dim: i32, runs: i32, persist: bool) -> Result<TuneResult> {
    // SAFETY: all-zero is valid.
    let mut r: sys::Q4_tune_result = unsafe { std::mem::zeroed() };
    r.struct_size = std::mem::size_of::<sys::Q4_tune_result>() as u32;
    check(unsafe { sys::Q4_tune_matmul(dim, runs, persist as i32, &mut r) })?;
    Ok(TuneResult {
        dim: r.dim,
        runs: r.runs,
        candidates: r.candidates,
        kc_default: r.kc_default,
        mc_default: r.mc_default,
        kc_best: r.kc_best,
        mc_best: r.mc_best,
        default_ms: r.default_ms,
        best_ms: r.best_ms,
        adopted: r.adopted != 0,
        persisted: r.persisted != 0,
        cache_path: array_str(&r.cache_path),
        cpu_signature: array_str(&r.cpu_signature),
    })
}

// ---------------------------------------------------------------------------
// Logging.
// ---------------------------------------------------------------------------

type LogFn = dyn Fn(LogLevel, &str) + Send + Sync + 'static;

/// The installed Rust callback. The trampoline clones the Arc under the
/// lock and calls it after releasing the lock, so a callback that runs a
/// library operation (which may log again) cannot deadlock.
static LOGGER: Mutex<Option<Arc<LogFn>>> = Mutex::new(None);

unsafe extern "C" fn log_trampoline(level: i32, message: *const c_char, _user: *mut c_void) {
    let f = match LOGGER.lock() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    };
    if let Some(f) = f {
        let msg = if message.is_null() { "".into() } else { CStr::from_ptr(message).to_string_lossy() };
        let lvl = LogLevel::from_raw(level).unwrap_or(LogLevel::Debug);
        // A panic must not unwind into C.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(lvl, &msg)));
    }
}

/// Installs a process-wide log callback (called from any thread). It must
/// not call [`set_log_callback`], [`clear_log_callback`] or
/// [`set_log_level`] (the C contract forbids the logging setters inside the
/// callback).
pub fn set_log_callback(f: impl Fn(LogLevel, &str) + Send + Sync + 'static) -> Result<()> {
    *LOGGER.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(f));
    check(unsafe { sys::Q4_set_log_callback(Some(log_trampoline), ptr::null_mut()) })
}

/// Removes the log callback.
pub fn clear_log_callback() -> Result<()> {
    check(unsafe { sys::Q4_set_log_callback(None, ptr::null_mut()) })?;
    *LOGGER.lock().unwrap_or_else(|p| p.into_inner()) = None;
    Ok(())
}

/// `Q4_set_log_level`.
pub fn set_log_level(level: LogLevel) -> Result<()> {
    check(unsafe { sys::Q4_set_log_level(level.raw()) })
}

/// `Q4_get_log_level`.
pub fn log_level() -> Option<LogLevel> {
    LogLevel::from_raw(unsafe { sys::Q4_get_log_level() })
}

// ---------------------------------------------------------------------------
// CUDA / managed memory (cuda.h). Without the plugin or a device these
// return `Status::NotAvailable` (or "no" for the queries).
// ---------------------------------------------------------------------------

/// `NVFP4_can_use_managed`.
pub fn can_use_managed(device: i32) -> Result<bool> {
    let mut v = 0i32;
    check(unsafe { sys::NVFP4_can_use_managed(device, &mut v) })?;
    Ok(v != 0)
}

/// `NVFP4_is_managed_tensor`.
pub fn is_managed_tensor(t: &TensorView<'_>) -> Result<bool> {
    let r = t.raw();
    let mut v = 0i32;
    check(unsafe { sys::NVFP4_is_managed_tensor(&r, &mut v) })?;
    Ok(v != 0)
}

/// A tensor in CUDA managed memory from [`to_managed`]; `Drop` calls its
/// deleter (which frees the copy, if it is one).
#[derive(Debug)]
pub struct ManagedTensor {
    ptr: NonNull<sys::DLManagedTensorVersioned>,
}

// The deleter is callable from any thread; the handle is not shared.
unsafe impl Send for ManagedTensor {}

impl ManagedTensor {
    pub fn flags(&self) -> u64 {
        unsafe { self.ptr.as_ref().flags }
    }
    /// The raw DLTensor (device memory: not readable from Rust in general).
    pub fn dl_tensor(&self) -> sys::DLTensor {
        unsafe { self.ptr.as_ref().dl_tensor }
    }
    pub fn as_ptr(&self) -> *mut sys::DLManagedTensorVersioned {
        self.ptr.as_ptr()
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        unsafe {
            if let Some(d) = self.ptr.as_ref().deleter {
                d(self.ptr.as_ptr());
            }
        }
    }
}

/// `NVFP4_to_managed` (`flags`: `sys::Q4_MANAGED_*`).
pub fn to_managed(src: &TensorView<'_>, device: i32, flags: u32) -> Result<ManagedTensor> {
    let r = src.raw();
    let mut out = ptr::null_mut();
    check(unsafe { sys::NVFP4_to_managed(&r, device, flags, &mut out) })?;
    Ok(ManagedTensor { ptr: NonNull::new(out).expect("OK and NULL") })
}

/// `NVFP4_managed_prefetch` (device -1: to the CPU; stream 0: default).
pub fn managed_prefetch(t: &ManagedTensor, device: i32, stream: usize) -> Result<()> {
    let r = t.dl_tensor();
    check(unsafe { sys::NVFP4_managed_prefetch(&r, device, stream as *mut c_void) })
}

/// `NVFP4_memory_info`: (free, total) bytes of `device`.
pub fn memory_info(device: i32) -> Result<(u64, u64)> {
    let (mut f, mut t) = (0u64, 0u64);
    check(unsafe { sys::NVFP4_memory_info(device, &mut f, &mut t) })?;
    Ok((f, t))
}

/// `NVFP4_empty_cache`: releases the CUDA backend's cached workspaces and
/// cuBLASLt heuristic results (all devices); Ok and nothing done without CUDA.
pub fn empty_cache() -> Result<()> {
    check(unsafe { sys::NVFP4_empty_cache() })
}

/// `Q4_cuda_synchronize` (stream 0: default stream).
pub fn cuda_synchronize(device: i32, stream: usize) -> Result<()> {
    check(unsafe { sys::Q4_cuda_synchronize(device, stream as *mut c_void) })
}
