//! Sessions, reusable linears, mutable tensors and snapshots (`session.h`).
//!
//! Lifetimes encode the C ownership rule "a session cannot be destroyed
//! while linears, mutable tensors or snapshots created from it are alive":
//! [`Linear`], [`MutableTensor`] and [`Snapshot`] borrow their [`Session`],
//! so the compiler rejects dropping the session first.
use crate::error::{check, Error, Result, Status};
use crate::ops::Nf4State;
use crate::tensor::{opt_ptr, opt_raw, DType, Element, TensorView, TensorViewMut};
use crate::types::{Backend, ComputePath, Format, Isa, MathMode, ScaleLayout, Target, UnifiedMemory, WriteMode};
use nvfp4_sys as sys;
use std::ffi::c_char;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

/// `Q4_session_config`. `Default` is `Q4_session_config_init`'s defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    pub compute_path: ComputePath,
    pub backend: Backend,
    pub target: Target,
    pub device_id: i32,
    pub unified_memory: UnifiedMemory,
    pub num_threads: i32,
    /// Keep per-call counters for the diagnostics.
    pub diagnostics: bool,
    pub math_mode: MathMode,
}

fn raw_default_config() -> sys::Q4_session_config {
    // SAFETY: all-zero is a valid Q4_session_config.
    let mut c: sys::Q4_session_config = unsafe { std::mem::zeroed() };
    c.struct_size = std::mem::size_of::<sys::Q4_session_config>() as u32;
    check(unsafe { sys::Q4_session_config_init(&mut c) }).expect("Q4_session_config_init cannot fail");
    c
}

impl Default for SessionConfig {
    fn default() -> Self {
        let c = raw_default_config();
        SessionConfig {
            compute_path: ComputePath::from_raw(c.compute_path).unwrap_or(ComputePath::Auto),
            backend: Backend::from_raw(c.backend).unwrap_or(Backend::Auto),
            target: Target::from_raw(c.target).unwrap_or(Target::Auto),
            device_id: c.device_id,
            unified_memory: UnifiedMemory::from_raw(c.unified_memory).unwrap_or(UnifiedMemory::Disabled),
            num_threads: c.num_threads,
            diagnostics: c.diagnostics != 0,
            math_mode: MathMode::from_raw(c.math_mode).unwrap_or(MathMode::Exact),
        }
    }
}

impl SessionConfig {
    pub fn raw(&self) -> sys::Q4_session_config {
        let mut c = raw_default_config();
        c.compute_path = self.compute_path.raw();
        c.backend = self.backend.raw();
        c.target = self.target.raw();
        c.device_id = self.device_id;
        c.unified_memory = self.unified_memory.raw();
        c.num_threads = self.num_threads;
        c.diagnostics = self.diagnostics as i32;
        c.math_mode = self.math_mode.raw();
        c
    }
}

/// `Q4_session_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionStats {
    pub live_linears: i32,
    pub live_mutables: i32,
    pub live_snapshots: i32,
    pub live_buffers: i64,
    pub live_bytes: i64,
    pub managed_bytes: i64,
    pub forwards: i64,
    pub implicit_copies: i64,
}

/// Reads a size-queried string (`*needed` protocol of the diagnostics).
pub(crate) fn query_string(mut f: impl FnMut(*mut c_char, usize, *mut usize) -> i32) -> Result<String> {
    let mut needed = 0usize;
    let rc = f(ptr::null_mut(), 0, &mut needed);
    if rc != sys::Q4_OK && rc != sys::Q4_ERR_BUFFER_TOO_SMALL {
        return Err(Error::from_code(rc));
    }
    loop {
        let mut buf = vec![0u8; needed.max(1)];
        let cap = buf.len();
        let rc = f(buf.as_mut_ptr() as *mut c_char, cap, &mut needed);
        if rc == sys::Q4_ERR_BUFFER_TOO_SMALL && needed > cap {
            continue; // grew in between
        }
        check(rc)?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        return Ok(String::from_utf8_lossy(&buf).into_owned());
    }
}

/// A session (`Q4_session`): owns and counts what is created from it.
///
/// `Send + Sync`: every session call except create/destroy is thread-safe
/// (session.h), and destroy happens in `Drop`, which Rust runs only when no
/// borrow (no linear, tensor or snapshot) remains.
#[derive(Debug)]
pub struct Session {
    ptr: NonNull<sys::Q4_session>,
}

unsafe impl Send for Session {}
unsafe impl Sync for Session {}

impl Session {
    pub fn new(config: &SessionConfig) -> Result<Session> {
        let c = config.raw();
        let mut p = ptr::null_mut();
        check(unsafe { sys::Q4_session_create(&c, &mut p) })?;
        Ok(Session { ptr: NonNull::new(p).expect("Q4_session_create returned OK and NULL") })
    }

    /// A session with the library defaults (NULL config).
    pub fn with_defaults() -> Result<Session> {
        let mut p = ptr::null_mut();
        check(unsafe { sys::Q4_session_create(ptr::null(), &mut p) })?;
        Ok(Session { ptr: NonNull::new(p).expect("Q4_session_create returned OK and NULL") })
    }

    pub fn as_ptr(&self) -> *mut sys::Q4_session {
        self.ptr.as_ptr()
    }

    /// Runs this session's forwards on `stream` (a `cudaStream_t`; null: the
    /// default stream). CPU sessions have no stream: an error.
    pub fn set_stream(&self, stream: *mut std::ffi::c_void) -> Result<()> {
        check(unsafe { sys::Q4_session_set_stream(self.ptr.as_ptr(), stream) })
    }

    pub fn stats(&self) -> Result<SessionStats> {
        // SAFETY: all-zero is valid.
        let mut s: sys::Q4_session_stats = unsafe { std::mem::zeroed() };
        s.struct_size = std::mem::size_of::<sys::Q4_session_stats>() as u32;
        check(unsafe { sys::Q4_session_get_stats(self.ptr.as_ptr(), &mut s) })?;
        Ok(SessionStats {
            live_linears: s.live_linears,
            live_mutables: s.live_mutables,
            live_snapshots: s.live_snapshots,
            live_buffers: s.live_buffers,
            live_bytes: s.live_bytes,
            managed_bytes: s.managed_bytes,
            forwards: s.forwards,
            implicit_copies: s.implicit_copies,
        })
    }

    /// JSON diagnostics of the session.
    pub fn diagnostics(&self) -> Result<String> {
        query_string(|b, c, n| unsafe { sys::Q4_session_diagnostics(self.ptr.as_ptr(), b, c, n) })
    }

    /// `Q4_linear_create`: validates, converts and copies the weight.
    pub fn create_linear(&self, weight: &WeightBundle<'_>) -> Result<Linear<'_>> {
        let mut p = ptr::null_mut();
        weight.with_raw(|w| check(unsafe { sys::Q4_linear_create(self.ptr.as_ptr(), w, &mut p) }))?;
        Ok(Linear { ptr: NonNull::new(p).expect("OK and NULL"), _session: PhantomData })
    }

    /// `Q4_mutable_create`: a zero-filled tensor at version 0.
    pub fn create_mutable(&self, shape: &[i64], dtype: DType) -> Result<MutableTensor<'_>> {
        let mut p = ptr::null_mut();
        check(unsafe {
            sys::Q4_mutable_create(self.ptr.as_ptr(), shape.len() as i32, shape.as_ptr(), dtype.to_dl(), &mut p)
        })?;
        Ok(MutableTensor { ptr: NonNull::new(p).expect("OK and NULL"), dtype, _session: PhantomData })
    }

    /// Destroys the session, reporting the library's status (Drop ignores it).
    pub fn close(self) -> Result<()> {
        let p = self.ptr.as_ptr();
        std::mem::forget(self);
        check(unsafe { sys::Q4_session_destroy(p) })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Cannot fail with STATE: every child borrows the session.
        unsafe { sys::Q4_session_destroy(self.ptr.as_ptr()) };
    }
}

#[derive(Debug, Clone)]
enum Source<'a> {
    Nvfp4Packed { qdata: TensorView<'a>, scale: TensorView<'a>, layout: ScaleLayout, global_scale: f32 },
    Nf4Packed { qdata: TensorView<'a>, state: Nf4State<'a> },
    Float { format: Format, weight: TensorView<'a>, global_scale: f32, blocksize: i32 },
}

/// What a linear is made from (`Q4_weight_bundle`); the tensors are
/// borrowed only for the create / update call (the linear copies them).
#[derive(Debug, Clone)]
pub struct WeightBundle<'a> {
    source: Source<'a>,
    out_features: i64,
    in_features: i64,
    bias: Option<TensorView<'a>>,
}

impl<'a> WeightBundle<'a> {
    /// Packed NVFP4: qdata (N·K/2 bytes), E4M3 scales in `layout`, g > 0.
    pub fn nvfp4_packed(
        qdata: TensorView<'a>,
        scale: TensorView<'a>,
        layout: ScaleLayout,
        global_scale: f32,
        out_features: i64,
        in_features: i64,
    ) -> Self {
        WeightBundle {
            source: Source::Nvfp4Packed { qdata, scale, layout, global_scale },
            out_features,
            in_features,
            bias: None,
        }
    }

    /// Packed NF4 data with its statistics.
    pub fn nf4_packed(qdata: TensorView<'a>, state: Nf4State<'a>, out_features: i64, in_features: i64) -> Self {
        WeightBundle { source: Source::Nf4Packed { qdata, state }, out_features, in_features, bias: None }
    }

    /// A float [N, K] weight the library quantizes to NVFP4 (g 0: from amax).
    pub fn nvfp4_from_float(weight: TensorView<'a>, global_scale: f32) -> Self {
        let (n, k) = Self::nk(&weight);
        WeightBundle {
            source: Source::Float { format: Format::Nvfp4, weight, global_scale, blocksize: 0 },
            out_features: n,
            in_features: k,
            bias: None,
        }
    }

    /// A float [N, K] weight the library quantizes to NF4 (blocksize 0 = 64).
    pub fn nf4_from_float(weight: TensorView<'a>, blocksize: i32) -> Self {
        let (n, k) = Self::nk(&weight);
        WeightBundle {
            source: Source::Float { format: Format::Nf4, weight, global_scale: 0.0, blocksize },
            out_features: n,
            in_features: k,
            bias: None,
        }
    }

    fn nk(w: &TensorView<'_>) -> (i64, i64) {
        match w.shape() {
            [n, k] => (*n, *k),
            _ => (0, 0), // the library reports the shape error
        }
    }

    /// Adds a bias [N].
    pub fn with_bias(mut self, bias: TensorView<'a>) -> Self {
        self.bias = Some(bias);
        self
    }

    pub(crate) fn with_raw<R>(&self, f: impl FnOnce(&sys::Q4_weight_bundle) -> R) -> R {
        // SAFETY: all-zero is valid; then the library's defaults.
        let mut b: sys::Q4_weight_bundle = unsafe { std::mem::zeroed() };
        b.struct_size = std::mem::size_of::<sys::Q4_weight_bundle>() as u32;
        check(unsafe { sys::Q4_weight_bundle_init(&mut b) }).expect("Q4_weight_bundle_init cannot fail");
        b.out_features = self.out_features;
        b.in_features = self.in_features;
        let bias = opt_raw(self.bias.as_ref());
        b.bias = opt_ptr(&bias);
        match &self.source {
            Source::Nvfp4Packed { qdata, scale, layout, global_scale } => {
                let (q, s) = (qdata.raw(), scale.raw());
                b.format = sys::Q4_FORMAT_NVFP4;
                b.source = sys::Q4_WEIGHT_PACKED;
                b.scale_layout = layout.raw();
                b.weight = &q;
                b.scale = &s;
                b.global_scale = *global_scale;
                f(&b)
            }
            Source::Nf4Packed { qdata, state } => {
                let q = qdata.raw();
                b.format = sys::Q4_FORMAT_NF4;
                b.source = sys::Q4_WEIGHT_PACKED;
                b.weight = &q;
                state.with_raw(|st| {
                    b.nf4 = st;
                    f(&b)
                })
            }
            Source::Float { format, weight, global_scale, blocksize } => {
                let w = weight.raw();
                b.format = format.raw();
                b.source = sys::Q4_WEIGHT_FLOAT;
                b.weight = &w;
                b.global_scale = *global_scale;
                b.blocksize = *blocksize;
                f(&b)
            }
        }
    }
}

/// `Q4_linear_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearInfo {
    pub format: Option<Format>,
    pub backend: Option<Backend>,
    pub compute_path: Option<ComputePath>,
    pub fell_back: bool,
    pub isa: Option<Isa>,
    pub target: Option<Target>,
    pub unified_memory: bool,
    pub scale_layout: Option<ScaleLayout>,
    pub math_mode: Option<MathMode>,
    pub out_features: i64,
    pub in_features: i64,
    pub weight_bytes: i64,
    pub weight_version: u64,
}

/// A prepared 4-bit linear layer (`Q4_linear`).
///
/// `Send + Sync`: `Q4_linear_forward` may run concurrently with other
/// forwards and with `Q4_linear_update_weight` on the same linear (both take
/// `&self`); only destroy must not race, and it runs in `Drop`.
#[derive(Debug)]
pub struct Linear<'s> {
    ptr: NonNull<sys::Q4_linear>,
    _session: PhantomData<&'s Session>,
}

unsafe impl Send for Linear<'_> {}
unsafe impl Sync for Linear<'_> {}

impl<'s> Linear<'s> {
    pub(crate) fn from_ptr(p: *mut sys::Q4_linear) -> Linear<'s> {
        Linear { ptr: NonNull::new(p).expect("OK and NULL"), _session: PhantomData }
    }

    pub fn as_ptr(&self) -> *mut sys::Q4_linear {
        self.ptr.as_ptr()
    }

    /// out[..., N] = x[..., K] · Wᵀ (+ bias); float dtypes, any leading dims.
    pub fn forward(&self, x: &TensorView<'_>, out: &mut TensorViewMut<'_>) -> Result<()> {
        let (x, mut y) = (x.raw(), out.raw());
        check(unsafe { sys::Q4_linear_forward(self.ptr.as_ptr(), &x, &mut y) })
    }

    /// Convenience: f32 x [m, K] → new Vec y [m, N].
    pub fn forward_f32(&self, x: &[f32], m: usize) -> Result<Vec<f32>> {
        let info = self.info()?;
        let xv = TensorView::new(x, &[m as i64, info.in_features])?;
        let mut y = vec![0f32; m * info.out_features as usize];
        self.forward(&xv, &mut TensorViewMut::new(&mut y, &[m as i64, info.out_features])?)?;
        Ok(y)
    }

    /// Replaces the weight atomically (same format, N and K).
    pub fn update_weight(&self, weight: &WeightBundle<'_>) -> Result<()> {
        weight.with_raw(|w| check(unsafe { sys::Q4_linear_update_weight(self.ptr.as_ptr(), w) }))
    }

    pub fn info(&self) -> Result<LinearInfo> {
        // SAFETY: all-zero is valid.
        let mut i: sys::Q4_linear_info = unsafe { std::mem::zeroed() };
        i.struct_size = std::mem::size_of::<sys::Q4_linear_info>() as u32;
        check(unsafe { sys::Q4_linear_info_get(self.ptr.as_ptr(), &mut i) })?;
        Ok(LinearInfo {
            format: Format::from_raw(i.format),
            backend: Backend::from_raw(i.backend),
            compute_path: ComputePath::from_raw(i.compute_path),
            fell_back: i.fell_back != 0,
            isa: Isa::from_raw(i.isa),
            target: Target::from_raw(i.target),
            unified_memory: i.unified_memory != 0,
            scale_layout: ScaleLayout::from_raw(i.scale_layout),
            math_mode: MathMode::from_raw(i.math_mode),
            out_features: i.out_features,
            in_features: i.in_features,
            weight_bytes: i.weight_bytes,
            weight_version: i.weight_version,
        })
    }

    /// JSON diagnostics of the linear.
    pub fn diagnostics(&self) -> Result<String> {
        query_string(|b, c, n| unsafe { sys::Q4_linear_diagnostics(self.ptr.as_ptr(), b, c, n) })
    }
}

impl Drop for Linear<'_> {
    fn drop(&mut self) {
        unsafe { sys::Q4_linear_destroy(self.ptr.as_ptr()) };
    }
}

/// A versioned tensor with one writer at a time and any number of readers
/// (`Q4_mutable`).
///
/// `Send + Sync`: all mutable-tensor functions but destroy are thread-safe;
/// the library itself refuses a second writer (`Status::Busy`). The write
/// capability is the [`WriteGuard`], which borrows the tensor, so the tensor
/// cannot be dropped (destroyed) while a write is in progress.
#[derive(Debug)]
pub struct MutableTensor<'s> {
    ptr: NonNull<sys::Q4_mutable>,
    dtype: DType,
    _session: PhantomData<&'s Session>,
}

unsafe impl Send for MutableTensor<'_> {}
unsafe impl Sync for MutableTensor<'_> {}

impl<'s> MutableTensor<'s> {
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The current committed version (0 at creation).
    pub fn version(&self) -> Result<u64> {
        let mut v = 0u64;
        check(unsafe { sys::Q4_mutable_version(self.ptr.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// Starts a write (`Status::Busy` if another writer is active).
    pub fn begin_write(&self, mode: WriteMode) -> Result<WriteGuard<'_, 's>> {
        // SAFETY: all-zero DLTensor is valid (NULL pointers).
        let mut view: sys::DLTensor = unsafe { std::mem::zeroed() };
        check(unsafe { sys::Q4_mutable_begin_write(self.ptr.as_ptr(), mode.raw(), &mut view) })?;
        Ok(WriteGuard { tensor: self, view, done: false })
    }

    /// A read-only snapshot of the current version. It stays unchanged
    /// whatever is committed later, and may outlive this tensor (not the
    /// session).
    pub fn acquire(&self) -> Result<Snapshot<'s>> {
        let mut p = ptr::null_mut();
        let mut v = 0u64;
        check(unsafe { sys::Q4_mutable_acquire(self.ptr.as_ptr(), &mut p, &mut v) })?;
        Ok(Snapshot { ptr: NonNull::new(p).expect("OK and NULL"), version: v, _session: PhantomData })
    }
}

impl Drop for MutableTensor<'_> {
    fn drop(&mut self) {
        // No writer can be active: a WriteGuard borrows the tensor.
        unsafe { sys::Q4_mutable_destroy(self.ptr.as_ptr()) };
    }
}

/// An active write on a [`MutableTensor`]: exclusive access to the private
/// buffer. [`commit`](WriteGuard::commit) publishes it; dropping the guard
/// without committing aborts the write.
///
/// `Send` (the library does not tie a write to a thread) but its buffer is
/// reachable only through `&mut self`, so there is a single writer.
#[derive(Debug)]
pub struct WriteGuard<'t, 's> {
    tensor: &'t MutableTensor<'s>,
    view: sys::DLTensor,
    done: bool,
}

unsafe impl Send for WriteGuard<'_, '_> {}
unsafe impl Sync for WriteGuard<'_, '_> {}

impl WriteGuard<'_, '_> {
    fn nbytes(&self) -> usize {
        let n: u64 = (0..self.view.ndim as usize).map(|i| unsafe { *self.view.shape.add(i) } as u64).product();
        (n * DType::from_dl(self.view.dtype).bits()).div_ceil(8) as usize
    }

    /// The private buffer's bytes.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        let n = self.nbytes();
        if n == 0 {
            return &mut [];
        }
        // SAFETY: the library hands the writer exclusive use of this buffer
        // until commit/abort, both of which consume or follow `self`.
        unsafe { std::slice::from_raw_parts_mut(self.view.data as *mut u8, n) }
    }

    /// The private buffer as `T` (the tensor's dtype must be one `T` accepts).
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        let dt = DType::from_dl(self.view.dtype);
        if !T::accepts(dt) {
            return Err(Error::binding(
                Status::Dtype,
                format!("WriteGuard::as_mut_slice: expected a dtype of {}, got {dt:?}", std::any::type_name::<T>()),
            ));
        }
        let n = self.nbytes() / std::mem::size_of::<T>();
        if n == 0 {
            return Ok(&mut []);
        }
        if (self.view.data as usize) % std::mem::align_of::<T>() != 0 {
            return Err(Error::binding(Status::Alignment, "WriteGuard::as_mut_slice: buffer misaligned"));
        }
        Ok(unsafe { std::slice::from_raw_parts_mut(self.view.data as *mut T, n) })
    }

    /// The private buffer as a DLPack output, e.g. for a library operation
    /// writing straight into it.
    pub fn view_mut(&mut self) -> TensorViewMut<'_> {
        // SAFETY: exclusive, writable, compact CPU memory for this borrow.
        unsafe { TensorViewMut::from_raw(&self.view) }
    }

    /// Publishes the buffer atomically; returns the new version.
    pub fn commit(mut self) -> Result<u64> {
        self.done = true;
        let mut v = 0u64;
        check(unsafe { sys::Q4_mutable_commit(self.tensor.ptr.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// Discards the write.
    pub fn abort(mut self) -> Result<()> {
        self.done = true;
        check(unsafe { sys::Q4_mutable_abort(self.tensor.ptr.as_ptr()) })
    }
}

impl Drop for WriteGuard<'_, '_> {
    fn drop(&mut self) {
        if !self.done {
            unsafe { sys::Q4_mutable_abort(self.tensor.ptr.as_ptr()) };
        }
    }
}

/// A read-only version of a mutable tensor (a `DLManagedTensorVersioned`
/// with READ_ONLY set); `Drop` calls its deleter.
///
/// `Send + Sync`: the data is immutable and the deleter may be called from
/// any thread (session.h).
#[derive(Debug)]
pub struct Snapshot<'s> {
    ptr: NonNull<sys::DLManagedTensorVersioned>,
    version: u64,
    _session: PhantomData<&'s Session>,
}

unsafe impl Send for Snapshot<'_> {}
unsafe impl Sync for Snapshot<'_> {}

impl Snapshot<'_> {
    pub fn version(&self) -> u64 {
        self.version
    }

    /// DLPack flags (`DLPACK_FLAG_BITMASK_*`).
    pub fn flags(&self) -> u64 {
        unsafe { self.ptr.as_ref().flags }
    }

    pub fn as_view(&self) -> TensorView<'_> {
        // SAFETY: valid and unchanged until the deleter runs (in Drop).
        unsafe { TensorView::from_raw(&self.ptr.as_ref().dl_tensor) }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.as_view().as_bytes().expect("snapshots are CPU-accessible")
    }

    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.as_view().as_slice::<T>()
    }

    /// The raw managed tensor (still owned by this snapshot).
    pub fn as_ptr(&self) -> *mut sys::DLManagedTensorVersioned {
        self.ptr.as_ptr()
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        unsafe {
            if let Some(d) = self.ptr.as_ref().deleter {
                d(self.ptr.as_ptr());
            }
        }
    }
}
